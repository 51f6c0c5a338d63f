/*
 * sl_metrics.c — a fixed-size registry (no allocation after start-up) of
 * atomic counters and gauges, rendered grouped by metric name with one HELP
 * and TYPE line per name as the exposition format requires.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_metrics.h"
#include "sluice/sl_err.h"

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
      if (reg[j].labels[0])
        fprintf(f, "%s{%s} %lld\n", reg[j].name, reg[j].labels, v);
      else
        fprintf(f, "%s %lld\n", reg[j].name, v);
    }
  }
  if (fclose(f) != 0) {
    free(buf);
    return SL_ENOMEM;
  }
  *out = buf;
  if (len) *len = sz;
  return 0;
}
