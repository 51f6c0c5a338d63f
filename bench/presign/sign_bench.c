/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sign_bench.c — presigned URLs per second on one thread: Sluice's
 * sl_sigv4_presign() (the anchors are anchor_boto3.py / anchor_awsjs.mjs).
 *
 * Design: one signer object, created once (as the presign stage does). First
 * the fixed-time check: sign the shared test vector's request at
 * 20261129T120000Z and compare with the URL in
 * tests/vectors/sigv4-presign-put.txt; on a mismatch nothing is timed
 * and the exit status is 1. Then a warm-up and `rounds` timed rounds of
 * `seconds` each; every iteration reads the wall clock with time() (the key
 * cache is per day, so this is the production path), patches the question
 * number q01..q15 into the object key and signs PUT with content-length and
 * content-type as signed headers. The clock is read every 256 iterations.
 * The rate reported is the median over rounds (wall time; run it pinned to
 * one core with taskset, see bench/presign/run). --json prints the same JSON
 * object shape as the anchors, for bench/presign/run. The vector file is
 * $SLUICE_TEST_VECTORS/sigv4-presign-put.txt when that is set (as for the
 * anchors), else the build-time path, else --vector FILE.
 */
#define _POSIX_C_SOURCE 200809L

#include "sl_bench.h"
#include "sluice/sl_sigv4.h"

#include <openssl/crypto.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef SLUICE_TEST_VECTORS
#error "define SLUICE_TEST_VECTORS as the test-vector directory path string"
#endif
#ifndef SLUICE_BENCH_BUILD_TYPE
#define SLUICE_BENCH_BUILD_TYPE "unknown"
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define BENCH_SANITIZED 1
#else
#define BENCH_SANITIZED 0
#endif

#define ACCESS_KEY "AKIAIOSFODNN7EXAMPLE"
#define SECRET_KEY "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define HOST "127.0.0.1:9000"
#define PATH_Q01 "/answers/submissions/0b7e0b4e-0000-4000-8000-000000000001/q01.webm"
#define VECTOR_TIME ((time_t)1795953600) /* 2026-11-29T12:00:00Z */
#define EXPIRES 900u
#define QUESTIONS 15
#define MAX_ROUNDS 99

static const sl_sigv4_header HDRS[2] = {{"content-length", "4000000"},
                                        {"content-type", "audio/webm"}};

/* The line after "--- url ---" in the vector file, into out. */
static int load_vector_url(const char *file, char *out, size_t size) {
  FILE *f = fopen(file, "r");
  if (f == NULL) return -1;
  char line[2048];
  int found = 0, rc = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (found) {
      line[strcspn(line, "\r\n")] = '\0';
      if (strlen(line) < size) {
        memcpy(out, line, strlen(line) + 1);
        rc = 0;
      }
      break;
    }
    found = strcmp(line, "--- url ---\n") == 0;
  }
  fclose(f);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Splits "prefix?p1&p2..." in place; sorts the parameters. */
static size_t split_url(char *u, char **params, size_t max) {
  char *q = strchr(u, '?');
  size_t n = 0;
  if (q == NULL) return 0;
  *q++ = '\0';
  for (char *p = q; p != NULL && n < max;) {
    params[n++] = p;
    p = strchr(p, '&');
    if (p != NULL) *p++ = '\0';
  }
  qsort(params, n, sizeof *params, cmp_str);
  return n;
}

/* 2: byte-identical; 1: same scheme/host/path and the same name=value
 * parameters (byte for byte, signature included) in another order; 0: no. */
static int same_url(const char *got, const char *want) {
  if (strcmp(got, want) == 0) return 2;
  char a[2048], b[2048];
  char *pa[64], *pb[64];
  if (strlen(got) >= sizeof a || strlen(want) >= sizeof b) return 0;
  strcpy(a, got);
  strcpy(b, want);
  size_t na = split_url(a, pa, 64), nb = split_url(b, pb, 64);
  if (na != nb || strcmp(a, b) != 0) return 0;
  for (size_t i = 0; i < na; i++)
    if (strcmp(pa[i], pb[i]) != 0) return 0;
  return 1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: sign_bench [--seconds N] [--rounds R] [--warmup S] "
             "[--vector FILE] [--json]\n");
}

int main(int argc, char **argv) {
  double seconds = 3, warmup = 1;
  int rounds = 5, json = 0;
  char vector_buf[1024];
  const char *vector = SLUICE_TEST_VECTORS "/sigv4-presign-put.txt";
  const char *vdir = getenv("SLUICE_TEST_VECTORS"); /* as the anchors */
  if (vdir != NULL && *vdir != '\0' &&
      snprintf(vector_buf, sizeof vector_buf, "%s/sigv4-presign-put.txt", vdir) <
          (int)sizeof vector_buf)
    vector = vector_buf;
  if (argc == 2 && strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  int arg = 1;
  const sl_bench_opt opts[] = {
      {"--json", SL_BENCH_FLAG, &json, NULL},    {"--seconds", SL_BENCH_DBL, &seconds, NULL},
      {"--rounds", SL_BENCH_INT, &rounds, NULL}, {"--warmup", SL_BENCH_DBL, &warmup, NULL},
      {"--vector", SL_BENCH_STR, &vector, NULL},
  };
  if (sl_bench_opts("sign_bench", argc, argv, &arg, opts, sizeof opts / sizeof opts[0]) != 0 ||
      arg != argc) {
    usage(stderr);
    return 2;
  }
  if (!(seconds > 0) || rounds < 1 || rounds > MAX_ROUNDS || warmup < 0) {
    usage(stderr);
    return 2;
  }

  char want[2048];
  if (load_vector_url(vector, want, sizeof want) != 0) {
    fprintf(stderr, "sign_bench: cannot read the url from %s\n", vector);
    return 1;
  }
  sl_sigv4 *s = NULL;
  int rc = sl_sigv4_new(&s, ACCESS_KEY, SECRET_KEY, "us-east-1", "s3");
  if (rc != 0) {
    fprintf(stderr, "sign_bench: sl_sigv4_new: %d\n", rc);
    return 1;
  }

  /* 1. The fixed-time check: no number without the right URL. */
  char url[2048];
  rc = sl_sigv4_presign(s, "PUT", "http", HOST, PATH_Q01, NULL, VECTOR_TIME, EXPIRES, HDRS, 2, url,
                        sizeof url);
  int match = rc == 0 ? same_url(url, want) : 0;
  if (match == 0) {
    fprintf(stderr,
            "sign_bench: URL does not match the test vector (rc %d)\n"
            "  got:  %s\n  want: %s\nrefusing to report a rate\n",
            rc, url, want);
    sl_sigv4_free(s);
    return 1;
  }

  /* 2. Timed rounds (round 0 is the warm-up). */
  size_t last = strlen(want) - 1; /* same length for every question */
  char path[] = PATH_Q01;
  char *qdig = strstr(path, "/q01.webm") + 2; /* the two digits */
  double rates[MAX_ROUNDS + 1];
  unsigned long long total = 0, q = 0;
  unsigned sink = 0;
  double cpu0 = sl_bench_cpu_s(), wall_timed = 0;
  for (int r = 0; r <= rounds; r++) {
    double len = r == 0 ? warmup : seconds;
    if (len <= 0) continue;
    if (r == 1) cpu0 = sl_bench_cpu_s();
    unsigned long long n = 0;
    double t0 = sl_bench_now_s(), t1 = t0, end = t0 + len;
    while (t1 < end) {
      for (int k = 0; k < 256; k++) {
        unsigned qn = (unsigned)(q++ % QUESTIONS) + 1;
        qdig[0] = (char)('0' + qn / 10);
        qdig[1] = (char)('0' + qn % 10);
        rc = sl_sigv4_presign(s, "PUT", "http", HOST, path, NULL, time(NULL), EXPIRES, HDRS, 2, url,
                              sizeof url);
        if (rc != 0) {
          fprintf(stderr, "sign_bench: sl_sigv4_presign: %d\n", rc);
          sl_sigv4_free(s);
          return 1;
        }
        sink += (unsigned char)url[last]; /* keep the output live */
      }
      n += 256;
      t1 = sl_bench_now_s();
    }
    if (r > 0) {
      rates[r - 1] = (double)n / (t1 - t0);
      total += n;
      wall_timed += t1 - t0;
    }
  }
  double cpu = sl_bench_cpu_s() - cpu0;
  sl_sigv4_free(s);

  double sorted[MAX_ROUNDS];
  memcpy(sorted, rates, (size_t)rounds * sizeof *rates);
  sl_bench_sort(sorted, (size_t)rounds);
  double median = sl_bench_median(sorted, (size_t)rounds, 0);

  if (json) {
    printf("{\"impl\":\"sluice\",\"api\":\"sl_sigv4_presign\","
           "\"version\":\"%s\",\"build_type\":\"%s\",\"sanitized\":%s,"
           "\"rate_per_s\":%.1f,\"rounds\":[",
           OpenSSL_version(OPENSSL_VERSION), SLUICE_BENCH_BUILD_TYPE,
           BENCH_SANITIZED ? "true" : "false", median);
    for (int r = 0; r < rounds; r++) printf("%s%.1f", r ? "," : "", rates[r]);
    printf("],\"seconds_per_round\":%g,\"warmup_s\":%g,\"iterations\":%llu,"
           "\"cpu_per_wall\":%.3f,\"vector_match\":\"%s\",\"sink\":%u}\n",
           seconds, warmup, total, cpu / wall_timed, match == 2 ? "exact" : "same-params-reordered",
           sink);
  } else {
    printf("sl_sigv4_presign (%s, %s build%s): test vector %s\n", OpenSSL_version(OPENSSL_VERSION),
           SLUICE_BENCH_BUILD_TYPE, BENCH_SANITIZED ? ", SANITIZED" : "",
           match == 2 ? "matches exactly" : "matches (parameters reordered)");
    for (int r = 0; r < rounds; r++) printf("  round %d: %12.0f URLs/s\n", r + 1, rates[r]);
    printf("median: %.0f URLs/s (%.0f ns/URL), %d rounds of %gs, "
           "cpu/wall %.2f\n",
           median, 1e9 / median, rounds, seconds, cpu / wall_timed);
  }
  return 0;
}
