/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_bench.c — the clocks, order statistics, options and latency printing
 * of sl_bench.h. Each program used to carry its own copy of these; the
 * conventions they had (nearest rank for the load generators' latencies,
 * numpy's "lower" for the poll and event-stream percentiles, the median of
 * the rounds) are kept as three named functions instead of six anonymous
 * ones. Everything here writes only to stdout/stderr and to the caller's
 * memory, except the error-kind table (process-wide, single thread).
 */
#define _POSIX_C_SOURCE 200809L
#include "sl_bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ts_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double sl_bench_now_s(void) { return ts_s(CLOCK_MONOTONIC); }

double sl_bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double sl_bench_cpu_s(void) { return ts_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void sl_bench_sort(double *v, size_t n) {
  if (v && n > 1) qsort(v, n, sizeof *v, cmp_double);
}

double sl_bench_pct(const double *v, size_t n, double p, double empty) {
  if (!v || n == 0) return empty;
  double k = ceil(p / 100.0 * (double)n);
  size_t i = k < 1 ? 1 : k > (double)n ? n : (size_t)k;
  return v[i - 1];
}

double sl_bench_pct_lower(const double *v, size_t n, double p, double empty) {
  if (!v || n == 0) return empty;
  double k = floor(p / 100.0 * (double)(n - 1));
  size_t i = k < 0 ? 0 : k > (double)(n - 1) ? n - 1 : (size_t)k;
  return v[i];
}

double sl_bench_median(const double *v, size_t n, double empty) {
  if (!v || n == 0) return empty;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* value into o's destination; 0, or -1 when it does not parse whole */
static int opt_set(const sl_bench_opt *o, const char *v) {
  char *end = NULL;
  errno = 0;
  switch (o->type) {
  case SL_BENCH_STR:
    *(const char **)o->dst = v;
    return 0;
  case SL_BENCH_INT: {
    long x = strtol(v, &end, 10);
    if (x < -2147483647L || x > 2147483647L) return -1;
    *(int *)o->dst = (int)x;
    break;
  }
  case SL_BENCH_LL:
    *(long long *)o->dst = strtoll(v, &end, 10);
    break;
  case SL_BENCH_DBL:
    *(double *)o->dst = strtod(v, &end);
    break;
  case SL_BENCH_FN:
    return o->fn(v);
  case SL_BENCH_FLAG:
    return -1;
  }
  return errno == 0 && end != v && *end == '\0' ? 0 : -1;
}

int sl_bench_opts(const char *who, int argc, char **argv, int *i, const sl_bench_opt *opts,
                  size_t n_opts) {
  while (*i < argc && strncmp(argv[*i], "--", 2) == 0) {
    const char *k = argv[*i];
    const sl_bench_opt *o = NULL;
    for (size_t j = 0; j < n_opts && !o; j++)
      if (strcmp(opts[j].name, k) == 0) o = &opts[j];
    if (!o) {
      fprintf(stderr, "%s: unknown option %s\n", who, k);
      return -1;
    }
    if (o->type == SL_BENCH_FLAG) {
      *(int *)o->dst = 1;
      *i += 1;
      continue;
    }
    if (*i + 1 >= argc || opt_set(o, argv[*i + 1]) != 0) {
      fprintf(stderr, "%s: %s wants %s\n", who, k,
              *i + 1 >= argc                                      ? "a value"
              : o->type == SL_BENCH_DBL                           ? "a number"
              : o->type == SL_BENCH_STR || o->type == SL_BENCH_FN ? "another value"
                                                                  : "a whole number");
      return -1;
    }
    *i += 2;
  }
  return 0;
}

int sl_bench_schedule(const char *who, int argc, char **argv, int i, double warm_def, double *rate,
                      double *dur, double *warm) {
  *rate = strtod(argv[i], NULL);
  *dur = strtod(argv[i + 1], NULL);
  *warm = argc > i + 2 ? strtod(argv[i + 2], NULL) : warm_def;
  if (*rate > 0 && *rate <= 100000 && *dur > 0 && *dur <= 3600 && *warm >= 0 && *warm <= 60)
    return 0;
  fprintf(stderr, "%s: RATE must be in (0,100000], DURATION_S in (0,3600], WARMUP_S in [0,60]\n",
          who);
  return -1;
}

#define MAX_ERR_KINDS 64

static struct {
  char kind[48];
  long n;
} errs[MAX_ERR_KINDS];
static int n_errs;

void sl_bench_count_err(const char *kind) {
  for (int i = 0; i < n_errs; i++)
    if (strcmp(errs[i].kind, kind) == 0) {
      errs[i].n++;
      return;
    }
  if (n_errs < MAX_ERR_KINDS) {
    snprintf(errs[n_errs].kind, sizeof errs[n_errs].kind, "%s", kind);
    errs[n_errs++].n = 1;
  }
}

void sl_bench_print_num(const char *key, double v) {
  if (isnan(v))
    printf(",\"%s\":null", key);
  else
    printf(",\"%s\":%.3f", key, v);
}

void sl_bench_print_latencies(double *lat, size_t n_lat, double *late, size_t n_late) {
  printf(",\"errors\":{");
  for (int i = 0; i < n_errs; i++) printf("%s\"%s\":%ld", i ? "," : "", errs[i].kind, errs[i].n);
  printf("}");
  sl_bench_sort(lat, n_lat);
  sl_bench_sort(late, n_late);
  sl_bench_print_num("p50_ms", sl_bench_pct(lat, n_lat, 50, NAN));
  sl_bench_print_num("p95_ms", sl_bench_pct(lat, n_lat, 95, NAN));
  sl_bench_print_num("p99_ms", sl_bench_pct(lat, n_lat, 99, NAN));
  sl_bench_print_num("max_ms", n_lat ? lat[n_lat - 1] : NAN);
  sl_bench_print_num("late_p50_ms", sl_bench_pct(late, n_late, 50, NAN));
  sl_bench_print_num("late_p99_ms", sl_bench_pct(late, n_late, 99, NAN));
}

int sl_bench_write_raw(const char *path, const double *v, size_t n) {
  if (!path) return 0;
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  for (size_t i = 0; i < n; i++) fprintf(f, "%.4f\n", v[i]);
  return fclose(f) == 0 ? 0 : -1;
}
