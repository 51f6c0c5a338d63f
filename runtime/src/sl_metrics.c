/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_metrics.c — a fixed-size registry (no allocation after start-up) of
 * atomic counters, gauges and histograms, rendered grouped by metric name with
 * one HELP and TYPE line per name as the exposition format requires.
 *
 * A histogram keeps one atomic count per bucket (not cumulative, so an
 * observation is one increment) and its sum as the bits of a double updated
 * by compare-and-swap; rendering accumulates the buckets and derives _count
 * from them, so _count always equals the +Inf bucket even while observations
 * race with a scrape.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_metrics.h"
#include "sluice/sl_err.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_metric {
  char name[96];
  char labels[160];
  const char *help;
  int gauge;
  int milli; /* a fractional counter: v counts thousandths, rendered as units */
  _Atomic int64_t v;
};

static sl_metric reg[SL_METRICS_MAX];
static atomic_size_t nreg;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

static sl_metric *get(const char *name, const char *labels, const char *help, int gauge) {
  if (!name || strncmp(name, "sluice_", 7) != 0 || strlen(name) >= sizeof reg[0].name ||
      (labels && strlen(labels) >= sizeof reg[0].labels))
    return NULL;
  const char *l = labels ? labels : "";
  pthread_mutex_lock(&reg_mu);
  size_t n = atomic_load(&nreg);
  sl_metric *m = NULL;
  for (size_t i = 0; i < n && !m; i++)
    if (strcmp(reg[i].name, name) == 0 && strcmp(reg[i].labels, l) == 0) m = &reg[i];
  if (!m && n < SL_METRICS_MAX) {
    m = &reg[n];
    strcpy(m->name, name);
    strcpy(m->labels, l);
    m->help = help ? help : "";
    m->gauge = gauge;
    m->milli = 0;
    atomic_store(&m->v, 0);
    atomic_store(&nreg, n + 1);
  }
  pthread_mutex_unlock(&reg_mu);
  return m;
}

sl_metric *sl_metrics_counter(const char *name, const char *labels, const char *help) {
  return get(name, labels, help, 0);
}
sl_metric *sl_metrics_gauge(const char *name, const char *labels, const char *help) {
  return get(name, labels, help, 1);
}
sl_metric *sl_metrics_counter_real(const char *name, const char *labels, const char *help) {
  sl_metric *m = get(name, labels, help, 0);
  if (m) m->milli = 1; /* set once at registration, before any add or scrape */
  return m;
}
void sl_metric_add_real(sl_metric *m, double units) {
  if (m && units > 0 && isfinite(units)) atomic_fetch_add(&m->v, (int64_t)llround(units * 1000));
}
void sl_metric_add(sl_metric *m, uint64_t n) {
  if (m) atomic_fetch_add(&m->v, (int64_t)n);
}
void sl_metric_set(sl_metric *m, int64_t v) {
  if (m) atomic_store(&m->v, v);
}
void sl_metric_gauge_add(sl_metric *m, int64_t d) {
  if (m) atomic_fetch_add(&m->v, d);
}
uint64_t sl_metric_value(const sl_metric *m) {
  return m ? (uint64_t)atomic_load(&((sl_metric *)m)->v) : 0;
}

struct sl_histogram {
  char name[96];
  char labels[160];
  const char *help;
  size_t nb; /* finite bounds */
  double bounds[SL_HIST_BUCKETS_MAX];
  _Atomic uint64_t counts[SL_HIST_BUCKETS_MAX + 1]; /* last one: above every bound */
  _Atomic uint64_t sum_bits;
};

static sl_histogram hreg[SL_HISTOGRAMS_MAX];
static atomic_size_t nhreg;

const double sl_metrics_latency_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                            5,    10,    30,   60,  120,  300, 600, 1800};
const size_t sl_metrics_latency_nbounds =
    sizeof sl_metrics_latency_bounds / sizeof sl_metrics_latency_bounds[0];

sl_histogram *sl_metrics_histogram(const char *name, const char *labels, const char *help,
                                   const double *bounds, size_t nbounds) {
  if (!name || strncmp(name, "sluice_", 7) != 0 || strlen(name) + 7 >= sizeof hreg[0].name ||
      (labels && strlen(labels) >= sizeof hreg[0].labels) || !bounds || nbounds == 0 ||
      nbounds > SL_HIST_BUCKETS_MAX)
    return NULL;
  for (size_t i = 0; i < nbounds; i++)
    if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) return NULL;
  const char *l = labels ? labels : "";
  pthread_mutex_lock(&reg_mu);
  size_t n = atomic_load(&nhreg);
  sl_histogram *h = NULL;
  for (size_t i = 0; i < n && !h; i++)
    if (strcmp(hreg[i].name, name) == 0 && strcmp(hreg[i].labels, l) == 0) h = &hreg[i];
  if (!h && n < SL_HISTOGRAMS_MAX) {
    h = &hreg[n];
    strcpy(h->name, name);
    strcpy(h->labels, l);
    h->help = help ? help : "";
    h->nb = nbounds;
    memcpy(h->bounds, bounds, nbounds * sizeof *bounds);
    for (size_t i = 0; i <= SL_HIST_BUCKETS_MAX; i++) atomic_store(&h->counts[i], 0);
    double z = 0;
    uint64_t zb;
    memcpy(&zb, &z, sizeof zb);
    atomic_store(&h->sum_bits, zb);
    atomic_store(&nhreg, n + 1);
  }
  pthread_mutex_unlock(&reg_mu);
  return h;
}

void sl_histogram_observe(sl_histogram *h, double v) {
  if (!h || isnan(v)) return;
  size_t b = 0;
  while (b < h->nb && v > h->bounds[b]) b++; /* le: v <= bound */
  atomic_fetch_add(&h->counts[b], 1);
  uint64_t old = atomic_load(&h->sum_bits), nw;
  do {
    double d;
    memcpy(&d, &old, sizeof d);
    d += v;
    memcpy(&nw, &d, sizeof nw);
  } while (!atomic_compare_exchange_weak(&h->sum_bits, &old, nw));
}

uint64_t sl_histogram_count(const sl_histogram *h) {
  if (!h) return 0;
  uint64_t c = 0;
  for (size_t i = 0; i <= h->nb; i++) c += atomic_load(&((sl_histogram *)h)->counts[i]);
  return c;
}

double sl_histogram_sum(const sl_histogram *h) {
  if (!h) return 0;
  uint64_t b = atomic_load(&((sl_histogram *)h)->sum_bits);
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

/* one series: cumulative buckets, then _sum and _count */
static void render_histogram(FILE *f, sl_histogram *h) {
  const char *sep = h->labels[0] ? "," : "";
  uint64_t cum = 0;
  for (size_t b = 0; b <= h->nb; b++) {
    cum += atomic_load(&h->counts[b]);
    if (b < h->nb)
      fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", h->name, h->labels, sep, h->bounds[b],
              (unsigned long long)cum);
    else
      fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", h->name, h->labels, sep,
              (unsigned long long)cum);
  }
  const char *lb = h->labels[0] ? "{" : "", *rb = h->labels[0] ? "}" : "";
  fprintf(f, "%s_sum%s%s%s %.9g\n", h->name, lb, h->labels, rb, sl_histogram_sum(h));
  fprintf(f, "%s_count%s%s%s %llu\n", h->name, lb, h->labels, rb, (unsigned long long)cum);
}

int sl_metrics_render(char **out, size_t *len) {
  if (!out) return SL_EINVAL;
  char *buf = NULL;
  size_t sz = 0;
  FILE *f = open_memstream(&buf, &sz);
  if (!f) return SL_ENOMEM;
  size_t n = atomic_load(&nreg);
  for (size_t i = 0; i < n; i++) {
    int first = 1;
    for (size_t j = 0; j < i && first; j++)
      if (strcmp(reg[j].name, reg[i].name) == 0) first = 0;
    if (!first) continue;
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", reg[i].name, reg[i].help, reg[i].name,
            reg[i].gauge ? "gauge" : "counter");
    for (size_t j = i; j < n; j++) {
      if (strcmp(reg[j].name, reg[i].name) != 0) continue;
      long long v = (long long)atomic_load(&reg[j].v);
      char num[32];
      if (reg[j].milli)
        snprintf(num, sizeof num, "%lld.%03lld", v / 1000, v % 1000);
      else
        snprintf(num, sizeof num, "%lld", v);
      if (reg[j].labels[0])
        fprintf(f, "%s{%s} %s\n", reg[j].name, reg[j].labels, num);
      else
        fprintf(f, "%s %s\n", reg[j].name, num);
    }
  }
  size_t nh = atomic_load(&nhreg);
  for (size_t i = 0; i < nh; i++) {
    int first = 1;
    for (size_t j = 0; j < i && first; j++)
      if (strcmp(hreg[j].name, hreg[i].name) == 0) first = 0;
    if (!first) continue;
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", hreg[i].name, hreg[i].help, hreg[i].name);
    for (size_t j = i; j < nh; j++)
      if (strcmp(hreg[j].name, hreg[i].name) == 0) render_histogram(f, &hreg[j]);
  }
  if (fclose(f) != 0) {
    free(buf);
    return SL_ENOMEM;
  }
  *out = buf;
  if (len) *len = sz;
  return 0;
}
