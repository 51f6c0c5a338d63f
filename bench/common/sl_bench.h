/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_bench.h — what every bench program shares, written once: the clocks
 * it times with, the order statistics it reports, the "--name value"
 * options and the RATE DURATION_S [WARMUP_S] schedule the load generators
 * take, and the error kinds and latency fields bench/api's two generators
 * print. A bench links the static library bench_common (bench/CMakeLists.txt).
 *
 * Order statistics, named after numpy's methods so that a reader can check
 * a figure with one line of Python:
 *   sl_bench_pct        nearest rank: the smallest value with at least p%
 *                       of the values at or below it (numpy "inverted_cdf");
 *   sl_bench_pct_lower  v[floor(p/100 * (n-1))] (numpy "lower");
 *   sl_bench_median     the middle value, the mean of the two middle ones
 *                       for an even count (numpy's default median).
 * Each takes values sorted ascending (sl_bench_sort) and returns `empty`
 * when there are none, so that the caller says what an empty run prints.
 *
 * Options: a table of sl_bench_opt; sl_bench_opts reads "--name value"
 * pairs (a flag takes no value) until the first argument that does not
 * start with "--". A number that does not parse whole, or an unknown name,
 * is refused (said on stderr as `who`), where the programs used to read 0.
 *
 * @locality Everything but the error-kind table is pure or reads only the
 * clocks; the error-kind table is process-wide (single-threaded callers).
 */
#ifndef SLUICE_SL_BENCH_H
#define SLUICE_SL_BENCH_H

#include <stddef.h>

/* CLOCK_MONOTONIC in seconds, and in milliseconds */
double sl_bench_now_s(void);
double sl_bench_now_ms(void);
/* this process's CPU time (user + system, all threads) in seconds */
double sl_bench_cpu_s(void);

/* sorts v[0..n) ascending (NaN-free values) */
void sl_bench_sort(double *v, size_t n);
/* order statistics of sorted v[0..n); p in [0,100] */
double sl_bench_pct(const double *v, size_t n, double p, double empty);
double sl_bench_pct_lower(const double *v, size_t n, double p, double empty);
double sl_bench_median(const double *v, size_t n, double empty);

typedef enum {
  SL_BENCH_STR,  /* const char ** */
  SL_BENCH_INT,  /* int * */
  SL_BENCH_LL,   /* long long * */
  SL_BENCH_DBL,  /* double * */
  SL_BENCH_FLAG, /* int *, set to 1; takes no value */
  SL_BENCH_FN,   /* fn(value): an option that may repeat; 0 or -1 */
} sl_bench_type;

typedef struct {
  const char *name; /* "--seconds" */
  sl_bench_type type;
  void *dst;                /* for all but SL_BENCH_FN */
  int (*fn)(const char *v); /* for SL_BENCH_FN */
} sl_bench_opt;

/* Reads options from argv[*i] on (see above); *i is left at the first
 * argument that is not one. Returns 0, or -1 after saying why on stderr. */
int sl_bench_opts(const char *who, int argc, char **argv, int *i, const sl_bench_opt *opts,
                  size_t n_opts);

/* The load generators' schedule RATE DURATION_S [WARMUP_S] from
 * argv[i..i+2] (argv[i+2] may be absent: warm_def). Returns 0, or -1 after
 * saying on stderr (as who) what the bounds are. */
int sl_bench_schedule(const char *who, int argc, char **argv, int i, double warm_def, double *rate,
                      double *dur, double *warm);

/* One more error of this kind (the first 64 kinds are counted). */
void sl_bench_count_err(const char *kind);
/* prints ,"key":v with three decimals, or ,"key":null for NaN */
void sl_bench_print_num(const char *key, double v);
/* ,"errors":{..},"p50_ms":..,"p95_ms":..,"p99_ms":..,"max_ms":..,
 * "late_p50_ms":..,"late_p99_ms":.. (nearest rank; null when empty);
 * sorts lat and late in place */
void sl_bench_print_latencies(double *lat, size_t n_lat, double *late, size_t n_late);
/* writes v[0..n) to path, one number (ms) a line, for pooling several
 * runs; NULL path: nothing. Returns 0 or -1. */
int sl_bench_write_raw(const char *path, const double *v, size_t n);

#endif
