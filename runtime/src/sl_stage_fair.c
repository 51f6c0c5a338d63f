/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_fair.c — the gate's lines per tenant (see sl_stage_fair.h): a
 * uthash table of lines, each an sl_queue of jobs with its weight, the
 * calls granted here per weight (who is named first), its deferrals not
 * back yet, the rate it is served at and the last slot of its deferrals'
 * schedule; the lines with jobs waiting are also on a circular list, so a
 * take looks at those only.
 */
#include "sl_stage_fair.h"
#include "sluice/sl_defer.h"
#include "sluice/sl_log.h"
#include "sluice/sl_tenant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct sl_fair_line {
  char id[SL_TENANT_MAX + 1];
  sl_queue q;
  double weight;        /* as last read; 1 when not set */
  double used;          /* calls granted here / weight */
  int64_t weight_ms;    /* monotonic, when last asked for; 0: never */
  int reading;          /* its weight's HGET is out */
  int64_t deferred_out; /* its deferrals sent here and not seen back (estimate, >= 0) */
  sl_defer_sched sched; /* its deferrals' slots (unix ms) and the rate it is served at */
  sl_fair_line *busy_prev, *busy_next; /* on F->busy while it has jobs */
  sl_metric *m_waiting, *m_calls, *m_deferred, *m_scheduled;
  sl_metric *m_slot; /* its own series only (NULL for "other": a sum means nothing) */
  sl_fair_counts counts;
  UT_hash_handle hh;
};

/* a label value with \, " and newline escaped (Prometheus text format) */
static void label_value(const char *v, char *out, size_t len) {
  size_t o = 0;
  for (; *v && o + 3 < len; v++) {
    if (*v == '\\' || *v == '"') out[o++] = '\\';
    out[o++] = *v;
  }
  out[o] = '\0';
}

/* l's series: its own for the first SL_FAIR_LABELS tenants, else (or
 * when other is set) "other" */
static void line_metrics(sl_fair_lines *F, sl_fair_line *l, int other) {
  char v[2 * SL_TENANT_MAX + 8], lab[2 * SL_TENANT_MAX + 96];
  const char *stage = F->R->o->stage;
  int own = !other && F->labels < SL_FAIR_LABELS;
  if (own) {
    F->labels++;
    label_value(l->id[0] ? l->id : "-", v, sizeof v);
  } else {
    snprintf(v, sizeof v, "other");
  }
  snprintf(lab, sizeof lab, "stage=\"%s\",tenant=\"%s\"", stage, v);
  l->m_waiting = sl_metrics_gauge("sluice_tenant_waiting", lab,
                                  "Jobs waiting at the provider's shared limiter, by tenant "
                                  "(the first 16 tenants a process sees; later ones: other)");
  l->m_calls = sl_metrics_counter("sluice_tenant_calls_total", lab,
                                  "Provider calls the shared limiter granted, by tenant");
  l->m_deferred =
      sl_metrics_counter("sluice_tenant_deferred_total", lab,
                         "Jobs deferred through a retry tier because their tenant's line was full");
  l->m_scheduled = sl_metrics_gauge("sluice_tenant_scheduled", lab,
                                    "Deferred jobs sent through a retry tier and not back yet "
                                    "(estimate; with sluice_tenant_waiting, the backlog)");
  l->m_slot = !own ? NULL
                   : sl_metrics_gauge("sluice_tenant_slot_interval_ms", lab,
                                      "With provider.tenant_schedule: the interval between the "
                                      "slots the tenant's line gives deferred jobs (from the rate "
                                      "it was served at), ms; 0 before a measure");
  l->counts.calling =
      sl_metrics_gauge("sluice_tenant_calling", lab, "Provider calls running, by tenant");
  l->counts.cost = sl_metrics_counter_real("sluice_tenant_cost_units_total", lab,
                                           "Provider cost units spent, by tenant");
  static const char *help = "Provider-bound jobs ended, by tenant: done, or failed for good "
                            "(tenant_budget_exhausted included)";
  char lab2[sizeof lab + 24];
  snprintf(lab2, sizeof lab2, "%s,outcome=\"done\"", lab);
  l->counts.done = sl_metrics_counter("sluice_tenant_outcomes_total", lab2, help);
  snprintf(lab2, sizeof lab2, "%s,outcome=\"failed\"", lab);
  l->counts.failed = sl_metrics_counter("sluice_tenant_outcomes_total", lab2, help);
}

/* l's deferrals not back yet, shown (added: "other" is many lines' sum) */
static void deferred_out_add(sl_fair_line *l, int64_t d) {
  l->deferred_out += d;
  sl_metric_gauge_add(l->m_scheduled, d);
}

void sl__fair_init(sl_fair_lines *F, sl_jobs *R, int64_t hold, double slot_ms) {
  memset(F, 0, sizeof *F);
  F->R = R;
  F->schedule = R->cc->provider_tenant_schedule;
  F->hold = hold >= 1 ? hold : 1;
  F->slot_ms = slot_ms > 0 ? slot_ms : 1;
  if (R->o->provider) { /* the series exist before a tenant is seen: "other", at 0 */
    sl_fair_line other = {.weight = 1};
    line_metrics(F, &other, 1);
  }
}

void sl__fair_close(sl_fair_lines *F) {
  if (!F || F->closed) return;
  F->closed = 1;
  sl_fair_line *l, *t;
  HASH_ITER(hh, F->map, l, t) {
    HASH_DEL(F->map, l);
    sl_queue_forget(&l->q);
    free(l);
  }
  F->busy = NULL;
  F->nlines = 0;
  F->waiting = 0;
}

/* l has jobs now: on the busy list */
static void busy_join(sl_fair_lines *F, sl_fair_line *l) {
  if (l->busy_next) return;
  if (!F->busy) {
    l->busy_prev = l->busy_next = l;
    F->busy = l;
  } else {
    l->busy_next = F->busy;
    l->busy_prev = F->busy->busy_prev;
    l->busy_prev->busy_next = l;
    F->busy->busy_prev = l;
  }
}

/* l has no job any more: off the busy list */
static void busy_leave(sl_fair_lines *F, sl_fair_line *l) {
  if (!l->busy_next || l->q.len) return;
  if (l->busy_next == l) {
    F->busy = NULL;
  } else {
    l->busy_prev->busy_next = l->busy_next;
    l->busy_next->busy_prev = l->busy_prev;
    if (F->busy == l) F->busy = l->busy_next;
  }
  l->busy_next = l->busy_prev = NULL;
  sl_defer_emptied(&l->sched);
}

/* drops lines without jobs or a read out, when there are too many (the
 * last candidates named go too: a take answered after this pops nothing;
 * its deferrals out are forgotten: an estimate, and copies may come back
 * to another replica) */
static void evict(sl_fair_lines *F) {
  sl_fair_line *l, *t;
  HASH_ITER(hh, F->map, l, t) {
    if (F->nlines < SL_FAIR_LINES_MAX) return;
    if (l->q.len || l->reading) continue;
    deferred_out_add(l, -l->deferred_out);
    HASH_DEL(F->map, l);
    free(l);
    F->nlines--;
    F->nnamed = 0;
  }
}

static sl_fair_line *line_of(sl_fair_lines *F, const char *id) {
  sl_fair_line *l;
  size_t n = strlen(id);
  HASH_FIND(hh, F->map, id, n, l);
  if (l) return l;
  if (F->nlines >= SL_FAIR_LINES_MAX) evict(F);
  if (F->nlines >= SL_FAIR_LINES_MAX || !(l = calloc(1, sizeof *l))) return NULL;
  memcpy(l->id, id, n + 1);
  l->weight = 1;
  line_metrics(F, l, 0);
  HASH_ADD(hh, F->map, id, n, l);
  F->nlines++;
  return l;
}

/* The interval between l's calls here (ms) before its rate is measured:
 * the rate times l's weight over the weights waiting here (l's counted
 * when it is not yet). */
static double estimate_ms(const sl_fair_lines *F, const sl_fair_line *l) {
  double sum = l->busy_next ? 0 : l->weight;
  const sl_fair_line *b = F->busy;
  for (int first = 1; b && (first || b != F->busy); b = b->busy_next, first = 0) sum += b->weight;
  return sum > l->weight ? F->slot_ms * sum / l->weight : F->slot_ms;
}

int sl__fair_push(sl_fair_lines *F, job *j, int64_t *due_ms) {
  sl_fair_line *l = line_of(F, j->tenant);
  if (!l) return -1;
  if (j->was_deferred && l->deferred_out > 0) deferred_out_add(l, -1); /* one came back */
  if (l->q.len >= F->hold) {
    int64_t now = sl_now_ms();
    deferred_out_add(l, 1);
    if (!F->schedule) {
      /* behind what the line holds and the deferrals still out, one token's
       * interval apart: due about when the limiter could take it */
      *due_ms = now + (int64_t)ceil((double)(l->q.len + l->deferred_out) * F->slot_ms);
      return 1;
    }
    if (j->was_deferred && j->defer_due_ms > now) { /* early: its slot stays */
      *due_ms = j->defer_due_ms;
      return 1;
    }
    /* the next slot after the schedule's last and after what the line holds */
    *due_ms =
        sl_defer_slot(&l->sched, now, l->q.len, sl_defer_interval_ms(&l->sched, estimate_ms(F, l)));
    return 1;
  }
  sl_queue_push(&l->q, &j->link);
  busy_join(F, l);
  F->waiting++;
  sl_metric_gauge_add(l->m_waiting, 1);
  return 0;
}

/* a weight as read: a number > 0, else 1 */
static double weight_of(const redisReply *r) {
  double w = sl_aredis_reply_num(r, 1);
  return w > 0 ? w : 1; /* not set, not a number or 0: equal */
}

typedef struct {
  sl_fair_lines *F;
  char id[SL_TENANT_MAX + 1];
} weight_read;

static void on_weight(redisReply *r, void *ud) {
  weight_read *w = ud;
  sl_fair_line *l = NULL;
  if (!w->F->closed) HASH_FIND(hh, w->F->map, w->id, strlen(w->id), l);
  if (l) {
    l->reading = 0;
    /* Redis unavailable: the weight stays as it was */
    if (r && r->type != REDIS_REPLY_ERROR) l->weight = weight_of(r);
  }
  free(w);
}

/* l's weight asked for again when it is older than SL_FAIR_WEIGHT_MS */
static void weight_refresh(sl_fair_lines *F, sl_fair_line *l) {
  int64_t now = sl__mono_ms();
  char key[SL_TENANT_KEY_MAX];
  if (l->reading || (l->weight_ms && now - l->weight_ms < SL_FAIR_WEIGHT_MS) || !l->id[0] ||
      sl_tenant_conf_key(l->id, key) != 0)
    return;
  weight_read *w = malloc(sizeof *w);
  if (!w) return;
  w->F = F;
  memcpy(w->id, l->id, sizeof w->id);
  l->weight_ms = now;
  const char *argv[] = {"HGET", key, "weight"};
  if (sl_aredis_argv(F->R->redis, on_weight, w, 3, argv, NULL) == 0)
    l->reading = 1;
  else
    free(w);
}

int sl__fair_candidates(sl_fair_lines *F, const char **argv) {
  F->nnamed = 0;
  sl_fair_line *l = F->busy;
  for (int first = 1; l && (first || l != F->busy); l = l->busy_next, first = 0) {
    weight_refresh(F, l);
    /* insertion into the named, least used first */
    int i = F->nnamed < SL_FAIR_CANDIDATES ? F->nnamed++ : SL_FAIR_CANDIDATES;
    while (i > 0 && F->named[i - 1]->used > l->used) {
      if (i < SL_FAIR_CANDIDATES) F->named[i] = F->named[i - 1];
      i--;
    }
    if (i < SL_FAIR_CANDIDATES) F->named[i] = l;
  }
  for (int i = 0; i < F->nnamed; i++) {
    snprintf(F->weight_s[i], sizeof F->weight_s[i], "%.17g", F->named[i]->weight);
    argv[2 * i] = F->named[i]->id;
    argv[2 * i + 1] = F->weight_s[i];
  }
  return F->nnamed;
}

static job *line_pop(sl_fair_lines *F, sl_fair_line *l) {
  job *j = sl__job_pop(&l->q);
  if (!j) return NULL;
  sl_defer_served(&l->sched);
  busy_leave(F, l);
  F->waiting--;
  sl_metric_gauge_add(l->m_waiting, -1);
  return j;
}

job *sl__fair_pop(sl_fair_lines *F, int i) {
  if (i < 0 || i >= F->nnamed) return NULL;
  sl_fair_line *l = F->named[i];
  job *j = line_pop(F, l);
  if (j) {
    l->used += 1 / l->weight;
    sl_metric_add(l->m_calls, 1);
  }
  return j;
}

job *sl__fair_pop_any(sl_fair_lines *F) { return F->busy ? line_pop(F, F->busy) : NULL; }

void sl__fair_split(sl_fair_lines *F, int (*take)(sl_qlink *, void *), sl_queue *out) {
  sl_fair_line *l, *t;
  HASH_ITER(hh, F->map, l, t) {
    int64_t before = l->q.len;
    sl_queue_split(&l->q, 0, take, NULL, out);
    F->waiting -= before - l->q.len;
    sl_metric_gauge_add(l->m_waiting, l->q.len - before);
    busy_leave(F, l);
  }
}

const sl_fair_counts *sl__fair_counts(sl_fair_lines *F, const char *tenant) {
  sl_fair_line *l = line_of(F, tenant);
  return l ? &l->counts : NULL;
}

void sl__fair_deferred(sl_fair_lines *F, const job *j) {
  sl_fair_line *l;
  HASH_FIND(hh, F->map, j->tenant, strlen(j->tenant), l);
  if (l) sl_metric_add(l->m_deferred, 1);
}

void sl__fair_tick(sl_fair_lines *F) {
  if (!F->schedule) return; /* the rates are the schedule's only */
  int64_t now = sl__mono_ms(), dt = F->tick_ms ? now - F->tick_ms : 0;
  F->tick_ms = now;
  sl_fair_line *l, *t;
  HASH_ITER(hh, F->map, l, t) {
    sl_defer_tick(&l->sched, l->q.len, dt);
    if (l->m_slot && l->sched.rate > 0)
      sl_metric_set(l->m_slot, (int64_t)sl_defer_interval_ms(&l->sched, 0));
  }
}
