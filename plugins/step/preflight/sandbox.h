/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.h — preflight's decoding in another process (the parent's side).
 *
 * The bytes preflight decodes are a stranger's, and the decoders are large
 * C libraries: a crafted file that makes one crash, spin or allocate
 * without end must cost one answer, not the stage (which holds the storage
 * keys and every other answer in flight). So the work of sl_pf_check runs
 * in sluice-decode (decoder_main.c), a separate program that is
 *   - started once and kept (a process per answer would cost more than the
 *     decoding of a short one): one per plugin instance, so one per worker
 *     thread, each decoding one answer at a time;
 *   - exec'd with an empty environment and no descriptors but its two
 *     pipes, its two memory files and stderr, so it holds no storage
 *     credentials and no sockets, and it may open none and make no memory
 *     file of its own (seccomp: socket() and memfd_create() fail), gains
 *     no privileges (no_new_privs), runs as nobody when started by root,
 *     and is the first process the OOM killer takes (oom_score_adj 1000);
 *   - bounded: address space (memory_mb; not under AddressSanitizer, whose
 *     shadow memory needs terabytes of it), the size of any file it writes
 *     (memory_mb too: the pages of its memory files are not in its address
 *     space), CPU seconds per answer, and a
 *     wall-time deadline kept here: past it the process is killed (SIGKILL,
 *     whatever the decoder is doing) and a new one started for the next
 *     answer.
 * The request (the settings, the recording's length) goes to it on a pipe
 * and the response (sl_pf_result's measurements, the FLAC's length) comes
 * back on another; the bytes themselves do not go through them: the
 * recording is written into a memory file (memfd) it maps read-only, and
 * it writes the FLAC into another, which the parent size-checks and reads
 * (sandbox.c says why that is safe against a hostile process). Both files
 * are made with the process and kept with it.
 * A process that dies or is killed mid-answer gives SL_ETIMEDOUT with the
 * reason (the deadline, the signal that ended it): that answer's decode
 * exceeded its limits, and it is not retried.
 *
 * @locality One sandbox belongs to one thread at a time (a plugin
 * instance); different sandboxes are independent.
 */
#ifndef SLUICE_PLUGIN_PREFLIGHT_SANDBOX_H
#define SLUICE_PLUGIN_PREFLIGHT_SANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "preflight.h"

typedef struct sl_pf_sandbox sl_pf_sandbox;

/* The program, its limits. path NULL or "": sluice-decode in the
 * directory above the plugin's own (lib/sluice/ for lib/sluice/plugins/). */
typedef struct {
  const char *path;
  long memory_mb; /* address space of the decoding process (0: no limit) */
  long grace_ms;  /* past the decode's own deadline before the kill */
} sl_pf_sandbox_conf;

/* A sandbox whose process starts at the first run. 0, SL_ENOMEM, or
 * SL_ENOTFOUND when the program is not there (reason in err). */
int sl_pf_sandbox_new(const sl_pf_sandbox_conf *c, sl_pf_sandbox **out, char *err, size_t errlen);

/* sl_pf_check(data, len, c, r) in the sandbox's process (started or
 * restarted as needed). Returns r->rc; a process that could not be
 * started gives SL_EIO (retryable: nothing was learnt of the answer). */
int sl_pf_sandbox_check(sl_pf_sandbox *sb, const void *data, size_t len, const sl_pf_conf *c,
                        sl_pf_result *r);

/* The running process (0 when none): tests look at it in /proc. */
pid_t sl_pf_sandbox_pid(const sl_pf_sandbox *sb);

/* Kills the process and frees sb. NULL is fine. */
void sl_pf_sandbox_free(sl_pf_sandbox *sb);

/* ---- the wire between the two (decoder_main.c is the other end) ---- */

#define SL_PF_WIRE_MAGIC 0x534c5046u /* "SLPF" */
#define SL_PF_WIRE_MAX_INPUT (1ull << 31)
/* the decoding process's descriptors: the recording (a memfd, read-only
 * for it, req.len bytes from offset 0) and the FLAC (a memfd it writes
 * from offset 0, resp.flac_len bytes) */
#define SL_PF_WIRE_FD_RECORDING 3
#define SL_PF_WIRE_FD_FLAC 4
/* both files, and the decoding process's mappings of them, are kept from
 * answer to answer up to this size; larger, they are emptied after it */
#define SL_PF_WIRE_KEEP_BYTES (16u << 20)

/* The most FLAC bytes an answer may come back with (and the most its file
 * may hold): max_seconds of 16-bit samples, which the FLAC never exceeds
 * (a verbatim subframe is the PCM), and 1 MiB for its headers and frames. */
static inline uint64_t sl_pf_wire_flac_max(const sl_pf_conf *c) {
  double s = c->max_seconds > 0 ? c->max_seconds : 0;
  if (s > (double)SL_PF_WIRE_MAX_INPUT / (SL_PF_RATE * 2))
    s = (double)SL_PF_WIRE_MAX_INPUT / (SL_PF_RATE * 2);
  return (uint64_t)(s * SL_PF_RATE * 2) + (1u << 20);
}

/* Both ends are one build (installed together): the structs go as they
 * are, their size part of the check. */
typedef struct {
  uint32_t magic, size; /* SL_PF_WIRE_MAGIC, sizeof(sl_pf_wire_req) */
  uint64_t len;         /* the answer's bytes, in SL_PF_WIRE_FD_RECORDING */
  sl_pf_conf conf;
} sl_pf_wire_req;

typedef struct {
  uint32_t magic, size; /* SL_PF_WIRE_MAGIC, sizeof(sl_pf_wire_resp) */
  int32_t rc, undecoded;
  double duration_s, speech_s, peak_dbfs, floor_dbfs;
  sl_pf_timing timing;
  double flac_s;   /* the audio the FLAC holds */
  uint32_t nspans; /* its pauses (sl_pf_result.spans) */
  float spans[SL_PF_MAX_SPANS][2];
  uint64_t flac_len; /* the FLAC's bytes, in SL_PF_WIRE_FD_FLAC */
  char err[512];
} sl_pf_wire_resp;

#endif
