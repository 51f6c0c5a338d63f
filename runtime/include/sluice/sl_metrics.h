/*
 * sl_metrics.h — Prometheus text exposition for every Sluice process.
 *
 * A process-wide registry of counters and gauges. Registration happens at
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

void sl_metric_add(sl_metric *m, uint64_t n);    /* counters */
void sl_metric_set(sl_metric *m, int64_t v);     /* gauges */
void sl_metric_gauge_add(sl_metric *m, int64_t d);
uint64_t sl_metric_value(const sl_metric *m);

/* Renders all series in text format 0.0.4 into a malloc'd string (caller
 * frees). Returns 0 or SL_ENOMEM. */
int sl_metrics_render(char **out, size_t *len);

#endif
