/* SPDX-License-Identifier: Apache-2.0 */
/* bench/api/latency.h — what bench/api/loadgen and bench/api/bare_produce
 * share: the schedule arguments (RATE DURATION_S [WARMUP_S]), error kinds
 * counted by name, and nearest-rank percentiles
 * of latencies and of the generator's own lateness, printed as the same
 * JSON fields, and the raw latencies for a caller that pools several runs.
 * Header-only (each program is one file); single thread. */
#ifndef SLUICE_BENCH_API_LATENCY_H
#define SLUICE_BENCH_API_LATENCY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAT_MAX_ERR_KINDS 64

static struct {
  char kind[48];
  long n;
} lat_errs[LAT_MAX_ERR_KINDS];
static int lat_n_errs;

/* one more error of this kind (the first LAT_MAX_ERR_KINDS kinds are kept) */
static void count_err(const char *kind) {
  for (int i = 0; i < lat_n_errs; i++)
    if (strcmp(lat_errs[i].kind, kind) == 0) {
      lat_errs[i].n++;
      return;
    }
  if (lat_n_errs < LAT_MAX_ERR_KINDS) {
    snprintf(lat_errs[lat_n_errs].kind, sizeof lat_errs[lat_n_errs].kind, "%s", kind);
    lat_errs[lat_n_errs++].n = 1;
  }
}

/* The schedule both take: RATE DURATION_S [WARMUP_S] from argv[i..i+2]
 * (argv[i+2] may be absent: warm_def). Returns 0, or 2 (usage) after
 * saying why on stderr as who. */
static int parse_schedule(const char *who, int argc, char **argv, int i, double warm_def,
                          double *rate, double *dur, double *warm) {
  *rate = strtod(argv[i], NULL);
  *dur = strtod(argv[i + 1], NULL);
  *warm = argc > i + 2 ? strtod(argv[i + 2], NULL) : warm_def;
  if (*rate > 0 && *rate <= 100000 && *dur > 0 && *dur <= 3600 && *warm >= 0 && *warm <= 60)
    return 0;
  fprintf(stderr, "%s: RATE must be in (0,100000], DURATION_S in (0,3600], WARMUP_S in [0,60]\n",
          who);
  return 2;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* nearest rank of sorted v[0..n) */
static double pct(const double *v, long n, double p) {
  if (n == 0) return NAN;
  long k = (long)ceil(p / 100.0 * (double)n);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return v[k - 1];
}

static void print_num(const char *key, double v) {
  if (isnan(v))
    printf(",\"%s\":null", key);
  else
    printf(",\"%s\":%.3f", key, v);
}

/* Writes v[0..n) to path, one number (ms) a line, for pooling several runs'
 * latencies; NULL path: nothing. Returns 0 or -1. */
static int write_raw(const char *path, const double *v, long n) {
  if (!path) return 0;
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  for (long i = 0; i < n; i++) fprintf(f, "%.4f\n", v[i]);
  return fclose(f) == 0 ? 0 : -1;
}

/* ,"errors":{..},"p50_ms":..,"p95_ms":..,"p99_ms":..,"max_ms":..,
 * "late_p50_ms":..,"late_p99_ms":.. — sorts lat and late in place */
static void print_latencies(double *lat, long n_lat, double *late, long n_late) {
  printf(",\"errors\":{");
  for (int i = 0; i < lat_n_errs; i++)
    printf("%s\"%s\":%ld", i ? "," : "", lat_errs[i].kind, lat_errs[i].n);
  printf("}");
  qsort(lat, (size_t)n_lat, sizeof *lat, cmp_d);
  qsort(late, (size_t)n_late, sizeof *late, cmp_d);
  print_num("p50_ms", pct(lat, n_lat, 50));
  print_num("p95_ms", pct(lat, n_lat, 95));
  print_num("p99_ms", pct(lat, n_lat, 99));
  print_num("max_ms", n_lat ? lat[n_lat - 1] : NAN);
  print_num("late_p50_ms", pct(late, n_late, 50));
  print_num("late_p99_ms", pct(late, n_late, 99));
}

#endif
