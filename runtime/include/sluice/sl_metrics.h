/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_metrics.h — Prometheus text exposition for every Sluice process.
 *
 * A process-wide registry of counters, gauges and histograms. Registration happens at
 * start-up (mutex-protected, bounded to SL_METRICS_MAX series); updates are
 * lock-free atomics and may come from any thread. Series are identified by
 * name + label text; the same pair registered twice returns the same series.
 * All names must start with "sluice_".
 */
#ifndef SLUICE_SL_METRICS_H
#define SLUICE_SL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define SL_METRICS_MAX 512

typedef struct sl_metric sl_metric;

/* labels: Prometheus label text without braces, e.g. "outcome=\"done\"", or
 * NULL. Returns NULL only when the registry is full or the name is invalid.
 * The returned pointer lives for the whole process. */
sl_metric *sl_metrics_counter(const char *name, const char *labels, const char *help);
sl_metric *sl_metrics_gauge(const char *name, const char *labels, const char *help);

void sl_metric_add(sl_metric *m, uint64_t n); /* counters */

/* A counter of a fractional quantity (provider cost units): kept as an
 * integer count of thousandths, so adds stay lock-free and exact to 0.001
 * unit, and rendered in units with three decimals ("12.345"). Adds of
 * negative, NaN or infinite amounts are ignored; sl_metric_value returns
 * thousandths. Thread-safe. */
sl_metric *sl_metrics_counter_real(const char *name, const char *labels, const char *help);
void sl_metric_add_real(sl_metric *m, double units);
void sl_metric_set(sl_metric *m, int64_t v); /* gauges */
void sl_metric_gauge_add(sl_metric *m, int64_t d);
uint64_t sl_metric_value(const sl_metric *m);

/* ---- histograms ----
 * Cumulative-bucket histograms (rendered as <name>_bucket{...,le="..."},
 * <name>_sum and <name>_count). Bounds are upper bounds in ascending order,
 * at most SL_HIST_BUCKETS_MAX of them; "+Inf" is added. Registration is
 * bounded to SL_HISTOGRAMS_MAX series and, like counters, returns the same
 * series for the same name + labels (the bounds of the first registration
 * win). sl_histogram_observe is lock-free and may be called from any thread.
 */
#define SL_HISTOGRAMS_MAX 64
#define SL_HIST_BUCKETS_MAX 20

typedef struct sl_histogram sl_histogram;

/* Returns NULL when the registry is full, the name is invalid, the bounds are
 * not strictly ascending finite numbers, or there are none / too many. */
sl_histogram *sl_metrics_histogram(const char *name, const char *labels, const char *help,
                                   const double *bounds, size_t nbounds);
void sl_histogram_observe(sl_histogram *h, double v);
uint64_t sl_histogram_count(const sl_histogram *h);
double sl_histogram_sum(const sl_histogram *h);

/* Bucket bounds (seconds) shared by Sluice's latency histograms: provider
 * calls and accept-to-done, 10 ms .. 30 min. */
extern const double sl_metrics_latency_bounds[];
extern const size_t sl_metrics_latency_nbounds;

/* Renders all series in text format 0.0.4 into a malloc'd string (caller
 * frees). Returns 0 or SL_ENOMEM. */
int sl_metrics_render(char **out, size_t *len);

#endif
