/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_preflight.c — preflight's decode path on arbitrary bytes, behind the
 * same allow-list and limits the stage uses (plugins/step/preflight/
 * preflight.c): sl_pf_decode, and sl_pf_measure when the codec has no
 * decoder (what pass_undecoded relies on to know an answer's length).
 *
 * Oracle (abort() on violation): every call returns one of the documented
 * codes, with a reason for every error; a decode that succeeds holds
 * samples, never more than max_seconds of them, and a duration that is
 * their count, and their speech no longer than they are; a measure that
 * succeeds is positive and within max_seconds. The corpus holds every
 * format the stage takes and the crafted files of tests/tools/
 * hostile_media.py in small (a FLAC at 655,350 Hz x 8, AAC in MP4, an Ogg
 * claiming 10 hours, a PNG, a cut WebM).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "step/preflight/preflight.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_preflight: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static int documented(int rc) {
  return rc == 0 || rc == SL_EDECODE || rc == SL_EUNSUPPORTED || rc == SL_ENOTFOUND ||
         rc == SL_ETOOBIG || rc == SL_ETIMEDOUT || rc == SL_ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const sl_pf_conf c = {.max_seconds = 20,
                               .silence_dbfs = -50,
                               .timeout_ms = 5000,
                               .max_rate = 96000,
                               .max_channels = 2};
  sl_pf_audio a;
  char err[512] = "";
  int rc = sl_pf_decode(data, size, &c, &a, err, sizeof err);
  CHECK(documented(rc) && rc != SL_ENOMEM);
  CHECK(rc == 0 || err[0]);
  if (rc == 0) {
    CHECK(a.n > 0 && a.pcm);
    CHECK(a.duration_s == (double)a.n / SL_PF_RATE);
    CHECK(a.duration_s <= c.max_seconds + 1.0 / SL_PF_RATE);
    CHECK(sl_pf_analyse(&a, c.silence_dbfs) == 0);
    CHECK(a.speech_s >= 0 && a.speech_s <= a.duration_s + 0.02);
  }
  if (rc == SL_ETOOBIG) CHECK(a.n <= (size_t)(c.max_seconds * SL_PF_RATE) + 1);
  sl_pf_audio_clear(&a);
  if (rc == SL_ENOTFOUND) {
    double s = -1;
    err[0] = '\0';
    int mrc = sl_pf_measure(data, size, &c, &s, err, sizeof err);
    /* SL_ENOTFOUND again: not even a parser here times it (an MP4 track of
     * an unknown fourcc; regressions/fuzz_preflight), failed as
     * unsupported_format, never passed on */
    CHECK(documented(mrc) && mrc != SL_ENOMEM);
    CHECK(mrc == 0 || err[0]);
    if (mrc == 0) CHECK(s > 0 && s <= c.max_seconds);
  }
  return 0;
}
