/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight_bench.c — what the preflight step costs and what it changes,
 * per recording format: the bytes a client uploads per minute of speech,
 * and the CPU preflight spends per minute of audio (decode, measure speech,
 * encode the 16 kHz FLAC: everything step/preflight does but the storage
 * round trips), beside the anchor measured in the same run on the same
 * audio: PocketSphinx transcribing the FLAC preflight produced, which is
 * what the stt stage then does with it.
 *
 *   preflight_bench [--reps N] [--flac-level L] [--sandbox PATH] FILE...
 *
 * Every FILE is decoded `reps` times (default 5) on one thread; the CPU time
 * is the thread's (CLOCK_PROCESS_CPUTIME_ID), the median over reps, scaled
 * to one minute of the decoded audio. The anchor is one PocketSphinx run
 * per file (it is ~100x slower). The FLAC is written at level L (0..8,
 * default 5, step.preflight.flac_level); its bytes per minute and the
 * encoder's own share of the CPU are columns too. With --sandbox (the
 * sluice-decode program), the same work also runs as the stage runs it, in
 * the decoding process (sandbox.h): its CPU is this process's and the
 * decoding process's (clock_getcpuclockid), median over reps after one
 * answer that started the process, with the ratio to the in-process CPU
 * of the same run. Prints a Markdown table; exits 1 when a file does not
 * decode.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_bench.h"
#include "sluice/sl_err.h"
#include "step/preflight/preflight.h"
#include "sluice/sl_file.h"
#include "step/preflight/sandbox.h"
#include "stt/pocketsphinx/pocketsphinx.h"

/* this process's CPU and the decoding process's, in seconds */
static double both_cpu_s(pid_t child) {
  clockid_t cid;
  struct timespec ts = {0, 0};
  if (child > 0 && clock_getcpuclockid(child, &cid) == 0) clock_gettime(cid, &ts);
  return sl_bench_cpu_s() + (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the median CPU of reps sandboxed checks of data (after one that starts
 * the process), -1 when one fails */
static double sandboxed(sl_pf_sandbox *sb, const void *data, size_t len, const sl_pf_conf *c,
                        int reps) {
  sl_pf_result r;
  int rc = sl_pf_sandbox_check(sb, data, len, c, &r);
  sl_pf_result_clear(&r);
  double *cpu = calloc((size_t)reps, sizeof *cpu);
  for (int i = 0; rc == 0 && cpu && i < reps; i++) {
    pid_t pid = sl_pf_sandbox_pid(sb);
    double t0 = both_cpu_s(pid);
    rc = sl_pf_sandbox_check(sb, data, len, c, &r);
    cpu[i] = both_cpu_s(pid) - t0;
    if (rc) fprintf(stderr, "preflight_bench: sandboxed: %s: %s\n", sl_err_name(rc), r.err);
    sl_pf_result_clear(&r);
    if (sl_pf_sandbox_pid(sb) != pid) rc = SL_ESTATE; /* it was restarted: not comparable */
  }
  double med = -1;
  if (rc == 0 && cpu) {
    sl_bench_sort(cpu, (size_t)reps);
    med = sl_bench_median(cpu, (size_t)reps, -1);
  }
  free(cpu);
  return med;
}

int main(int argc, char **argv) {
  int reps = 5, level = 5, first = 1;
  const char *sandbox_path = NULL;
  const sl_bench_opt opts[] = {
      {"--reps", SL_BENCH_INT, &reps, NULL},
      {"--flac-level", SL_BENCH_INT, &level, NULL},
      {"--sandbox", SL_BENCH_STR, &sandbox_path, NULL},
  };
  if (sl_bench_opts("preflight_bench", argc, argv, &first, opts, sizeof opts / sizeof opts[0]))
    first = argc; /* the usage */
  if (first >= argc || reps < 1 || reps > 100 || level < 0 || level > SL_PF_FLAC_LEVEL_MAX) {
    fprintf(stderr, "usage: preflight_bench [--reps N (1..100)] [--flac-level L (0..8)] "
                    "[--sandbox SLUICE_DECODE] FILE...\n");
    return 2;
  }
  char err[512];
  sl_ps *ps = NULL;
  if (sl_pf_init(err, sizeof err) || sl_ps_new(&ps, NULL, 0, err, sizeof err)) {
    fprintf(stderr, "preflight_bench: %s\n", err);
    return 1;
  }
  sl_pf_sandbox *sb = NULL;
  sl_pf_sandbox_conf sc = {.path = sandbox_path, .memory_mb = 0};
  if (sandbox_path && sl_pf_sandbox_new(&sc, &sb, err, sizeof err)) {
    fprintf(stderr, "preflight_bench: %s\n", err);
    return 1;
  }
  /* the stage's settings: allow-list limits, FLAC as the stage writes it */
  const sl_pf_conf conf = {.max_seconds = 600,
                           .silence_dbfs = -50,
                           .timeout_ms = 60000,
                           .max_rate = 96000,
                           .max_channels = 2,
                           .normalize = 1,
                           .flac_level = level};
  printf("| recording | bytes | audio s | bytes per minute | speech s | FLAC level | FLAC bytes "
         "per minute | preflight CPU ms per audio min | of it FLAC | PocketSphinx CPU ms per "
         "audio min (anchor) | preflight / anchor |%s\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
         sb ? " sandboxed CPU ms per audio min | sandboxed / in-process |" : "",
         sb ? "---:|---:|" : "");
  int bad = 0;
  for (int i = first; i < argc; i++) {
    size_t len = 0;
    uint8_t *data = NULL;
    if (sl_file_read(argv[i], (size_t)1 << 30, &data, &len) != 0) data = NULL;
    if (!data) {
      fprintf(stderr, "preflight_bench: cannot read %s\n", argv[i]);
      bad = 1;
      continue;
    }
    double *cpu = calloc((size_t)reps, sizeof *cpu), *enc = calloc((size_t)reps, sizeof *enc);
    double dur = 0, speech = 0;
    void *flac = NULL;
    size_t flen = 0;
    int rc = cpu && enc ? 0 : SL_ENOMEM;
    for (int r = 0; rc == 0 && r < reps; r++) {
      sl_pf_audio a;
      double t0 = sl_bench_cpu_s();
      rc = sl_pf_decode(data, len, &conf, &a, err, sizeof err);
      if (rc == 0) rc = sl_pf_analyse(&a, conf.silence_dbfs);
      void *f = NULL;
      size_t fl = 0;
      double t1 = sl_bench_cpu_s();
      if (rc == 0) rc = sl_pf_flac(a.pcm, a.n, level, &f, &fl);
      cpu[r] = sl_bench_cpu_s() - t0;
      enc[r] = sl_bench_cpu_s() - t1;
      dur = a.duration_s;
      speech = a.speech_s;
      sl_pf_audio_clear(&a);
      free(flac);
      flac = f;
      flen = fl;
    }
    if (rc) {
      fprintf(stderr, "preflight_bench: %s: %s: %s\n", argv[i], sl_err_name(rc), err);
      bad = 1;
    } else {
      sl_bench_sort(cpu, (size_t)reps);
      sl_bench_sort(enc, (size_t)reps);
      double cpu_med = sl_bench_median(cpu, (size_t)reps, 0),
             enc_med = sl_bench_median(enc, (size_t)reps, 0);
      sl_ps_result res = {0};
      double t0 = sl_bench_cpu_s();
      int prc = sl_ps_transcribe(ps, flac, flen, &res, err, sizeof err);
      double anchor = sl_bench_cpu_s() - t0;
      sl_ps_result_clear(&res);
      const char *name = strrchr(argv[i], '/');
      double per_min = 60.0 / dur;
      printf("| %s | %zu | %.1f | %.0f | %.1f | %d | %.0f | %.1f | %.1f | ",
             name ? name + 1 : argv[i], len, dur, len * per_min, speech, level, flen * per_min,
             cpu_med * 1000 * per_min, enc_med * 1000 * per_min);
      if (prc)
        printf("(failed: %s) | - |", err);
      else
        printf("%.0f | %.4f |", anchor * 1000 * per_min, cpu_med / anchor);
      if (sb) {
        double sbx = sandboxed(sb, data, len, &conf, reps);
        if (sbx < 0) {
          printf(" (failed) | - |");
          bad = 1;
        } else {
          printf(" %.1f | %.2f |", sbx * 1000 * per_min, sbx / cpu_med);
        }
      }
      printf("\n");
    }
    free(flac);
    free(cpu);
    free(enc);
    free(data);
  }
  sl_ps_free(ps);
  sl_pf_sandbox_free(sb);
  return bad;
}
