/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pf_liar.c — a stand-in for sluice-decode that breaks the wire of
 * plugins/step/preflight/sandbox.h on purpose, as a decoding process taken
 * over by a crafted recording could: test_preflight's test_sandbox_liars
 * start it through a symlink whose name says how it lies, and check that
 * the parent believes none of it (sandbox.c). It answers every request
 * with the measurements of nothing and a FLAC of FLAC_BYTES bytes, except:
 *   ...-overclaim  says the FLAC is 1000 bytes longer than its file
 *   ...-overbound  says the FLAC is one byte past the answer's bound, and
 *                  makes its file (sparse) that large
 *   ...-sparse     makes the FLAC's file (sparse) 1 GiB long
 *   ...-grows      answers the first request honestly, then keeps growing
 *                  the FLAC's file (sparse, by 1 MiB every millisecond)
 *   ...-pauses     says its one second held a million silent pauses
 *   ...-nan        says the speaking time is not a number
 *   ...-spans      places its one pause past the end of its FLAC
 *   ...-honest     tells the truth (the control)
 * None of it is a real FLAC: the parent does not look inside.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "step/preflight/sandbox.h"
#include "step/preflight/wire_io.h"

#define FLAC_BYTES 100

static void *grow(void *arg) {
  (void)arg;
  for (off_t size = 1 << 20;; size += 1 << 20) {
    if (ftruncate(SL_PF_WIRE_FD_FLAC, size) != 0) return NULL;
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
  }
}

int main(int argc, char **argv) {
  (void)argc;
  const char *how = strrchr(argv[0], '-');
  how = how ? how + 1 : "honest";
  char flac[FLAC_BYTES];
  memset(flac, 'f', sizeof flac);
  for (int n = 0;; n++) {
    sl_pf_wire_req req;
    if (sl_pf_wire_read(STDIN_FILENO, &req, sizeof req) != 0) return 0;
    sl_pf_wire_resp resp = {
        .magic = SL_PF_WIRE_MAGIC, .size = sizeof resp, .duration_s = 1.0, .flac_len = FLAC_BYTES};
    if (pwrite(SL_PF_WIRE_FD_FLAC, flac, sizeof flac, 0) != (ssize_t)sizeof flac) return 2;
    if (strcmp(how, "overclaim") == 0) {
      resp.flac_len = FLAC_BYTES + 1000;
    } else if (strcmp(how, "overbound") == 0) {
      resp.flac_len = sl_pf_wire_flac_max(&req.conf) + 1;
      if (ftruncate(SL_PF_WIRE_FD_FLAC, (off_t)resp.flac_len) != 0) return 2;
    } else if (strcmp(how, "sparse") == 0) {
      if (ftruncate(SL_PF_WIRE_FD_FLAC, (off_t)1 << 30) != 0) return 2;
    } else if (strcmp(how, "pauses") == 0) {
      resp.timing = (sl_pf_timing){.speaking_s = 1, .pauses = 1000000, .runs = 1000001};
    } else if (strcmp(how, "nan") == 0) {
      resp.timing.speaking_s = nan("");
    } else if (strcmp(how, "spans") == 0) {
      resp.timing = (sl_pf_timing){.speaking_s = 1, .pauses = 1, .runs = 2};
      resp.flac_s = 1.0;
      resp.nspans = 1;
      resp.spans[0][0] = 0.5f, resp.spans[0][1] = 7.5f;
    }
    if (sl_pf_wire_write(STDOUT_FILENO, &resp, sizeof resp) != 0) return 2;
    pthread_t t;
    if (n == 0 && strcmp(how, "grows") == 0 && pthread_create(&t, NULL, grow, NULL) != 0) return 2;
  }
}
