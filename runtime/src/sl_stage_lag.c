/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_lag.c — consumer lag as Kafka has it, queried off the loop.
 *
 * sluice_consumer_lag_messages{topic,partition} is, for each partition
 * assigned to this process (inputs and retry tiers, both groups), the high
 * watermark minus the group's committed offset (sl_kafka_group_lag, the
 * same numbers `sluicectl status` shows). Summed over a stage's replicas it
 * is the group's lag: each partition is reported by the process it is
 * assigned to, and a partition that went elsewhere drops to 0 here. The
 * numbers come from Kafka, not from the consumer's statistics, so they keep
 * moving while the stage has paused fetching (at stage.max_in_flight, while
 * the breaker holds messages), which is when they matter most.
 *
 * sluice_consumer_lag_actionable_messages is the part of that lag more
 * replicas could drain, what an autoscaler should scale on:
 *   - 0 while the provider is the bottleneck: the breaker is not closed (it
 *     holds messages or probes), or the gate made a call wait on the shared
 *     limiter or a provider's 429 pause within the last interval (every
 *     replica shares those);
 *   - a retry-tier partition whose head message is parked waiting for its
 *     tier's delay counts 0: the messages behind it were written later into
 *     the same tier and are due later still, and no replica may run them
 *     sooner. A retry-tier partition that is not parked (its messages are
 *     due, or not fetched yet because the stage is at max_in_flight) counts
 *     in full.
 *
 * Threads: a thread of its own queries every stage.lag_interval_ms, and at
 * once when the assignment changed, through Kafka clients of its own, one
 * per group (sl_kafka_group_reader_new: a consumer with the group's id that
 * never subscribes, so it joins nothing and the stage's members see no
 * rebalance; no Admin API). The loop hands it the assigned partitions and
 * takes its answers back, both under the mutex of struct sl_lagq, through
 * a uv_async_t; the gauges and the gate's state are touched on the loop
 * only. A query that fails leaves the gauges as they were (logged once, and
 * when it works again).
 *
 * Stopping (Kafka may be down, a query blocked for up to its timeout):
 * sl__lag_stop only tells the thread to stop and the loop to take no more
 * answers, at once; sl__lag_free joins it and frees the clients after the
 * stage's own shutdown (commits, consumer close, flush) has had its time,
 * which a query under way overlaps instead of adding to.
 */
#include "sl_stage_lag.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One group's query never blocks the thread longer than this; once a
 * query failed (Kafka down or unreachable) the next ones are probes with
 * the shorter timeout, until one is answered. A stop waits for the query
 * under way (librdkafka's calls cannot be interrupted), so with Kafka down
 * a stopping stage waits at most the probe's timeout for it. */
#define LAG_QUERY_TIMEOUT_MS 5000
#define LAG_PROBE_TIMEOUT_MS 1000

typedef struct {
  char topic[128];
  int32_t partition;
  int g;  /* index of its group */
  int ok; /* answered (lag holds the number) */
  int64_t lag;
} lag_entry;

struct sl_lagq {
  /* the loop's: never touched by the thread */
  sl_jobs *R;
  sl_parts *P;
  const sl_gate *G;
  struct {
    char topic[128];
    int32_t partition;
    sl_metric *m;
  } lag[SL_LAG_SERIES_MAX]; /* a gauge per partition ever assigned here */
  int nlag;
  sl_metric *m_actionable;
  rd_kafka_t *rk[2]; /* the thread's readers, one per group */
  int ngroups;
  int64_t interval_ms;
  uv_thread_t thread;
  int started;
  uv_async_t async; /* the thread's answers are in */
  uv_mutex_t mu;
  uv_cond_t cv;
  /* under mu */
  int stop, kick;
  lag_entry want[SL_LAG_SERIES_MAX]; /* what is assigned, from the loop */
  int nwant;
  lag_entry got[SL_LAG_SERIES_MAX]; /* the last answers, for the loop */
  int ngot, fresh;
  /* the loop's own */
  lag_entry take[SL_LAG_SERIES_MAX];
  int warned;
  /* the thread's own */
  lag_entry work[SL_LAG_SERIES_MAX];
  sl_kafka_lag res[SL_LAG_SERIES_MAX];
  int failing;
};

/* ---- the thread ---- */

/* Asks Kafka about the entries of group g in q->work; marks them ok. */
static void query_group(sl_lagq *q, int n, int g) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
  int idx[SL_LAG_SERIES_MAX], k = 0;
  for (int i = 0; l && i < n; i++)
    if (q->work[i].g == g) {
      rd_kafka_topic_partition_list_add(l, q->work[i].topic, q->work[i].partition);
      idx[k++] = i;
    }
  if (!l || k == 0) {
    if (l) rd_kafka_topic_partition_list_destroy(l);
    return;
  }
  char err[512];
  int rc = sl_kafka_group_lag(q->rk[g], l, q->failing ? LAG_PROBE_TIMEOUT_MS : LAG_QUERY_TIMEOUT_MS,
                              q->res, err, sizeof err);
  rd_kafka_topic_partition_list_destroy(l);
  if (rc) {
    if (!q->failing++)
      sl_log(SL_LOG_WARN, NULL, "consumer lag: %s (the lag gauges keep their last values)", err);
    return;
  }
  for (int i = 0; i < k; i++) {
    q->work[idx[i]].lag = q->res[i].lag;
    q->work[idx[i]].ok = 1;
  }
}

static int stopping(sl_lagq *q) {
  uv_mutex_lock(&q->mu);
  int stop = q->stop;
  uv_mutex_unlock(&q->mu);
  return stop;
}

static void lag_thread(void *arg) {
  sl_lagq *q = arg;
  uv_mutex_lock(&q->mu);
  while (!q->stop) {
    int n = q->nwant;
    memcpy(q->work, q->want, (size_t)n * sizeof q->work[0]);
    uv_mutex_unlock(&q->mu);
    int before = q->failing;
    for (int i = 0; i < n; i++) q->work[i].ok = 0;
    for (int g = 0; g < q->ngroups && !stopping(q); g++) query_group(q, n, g);
    if (n && before && q->failing == before) {
      sl_log(SL_LOG_INFO, NULL, "consumer lag: Kafka answers again (after %d failed queries)",
             before);
      q->failing = 0;
    }
    for (int g = 0; g < q->ngroups; g++)
      rd_kafka_poll(q->rk[g], 0); /* the clients' own events (errors, logs) */
    uv_mutex_lock(&q->mu);
    memcpy(q->got, q->work, (size_t)n * sizeof q->got[0]);
    q->ngot = n;
    q->fresh = 1;
    uv_async_send(&q->async);
    if (!q->stop && !q->kick)
      uv_cond_timedwait(&q->cv, &q->mu, (uint64_t)q->interval_ms * 1000000u);
    q->kick = 0;
  }
  uv_mutex_unlock(&q->mu);
}

/* ---- the loop ---- */

static sl_metric *lag_series(sl_lagq *q, const char *topic, int32_t partition) {
  for (int i = 0; i < q->nlag; i++)
    if (q->lag[i].partition == partition && strcmp(q->lag[i].topic, topic) == 0) return q->lag[i].m;
  if (q->nlag >= SL_LAG_SERIES_MAX || strlen(topic) >= sizeof q->lag[0].topic) return NULL;
  char l[200];
  snprintf(l, sizeof l, "topic=\"%s\",partition=\"%d\"", topic, (int)partition);
  sl_metric *m = sl__metric("sluice_consumer_lag_messages", q->R->o->stage, l,
                            "Messages of the stage's group not yet committed (high watermark "
                            "minus committed offset), by partition assigned to this process, "
                            "inputs and retry tiers; summed over the replicas: the group's lag "
                            "(queried from Kafka every stage.lag_interval_ms)",
                            1);
  if (!m) return NULL;
  snprintf(q->lag[q->nlag].topic, sizeof q->lag[0].topic, "%s", topic);
  q->lag[q->nlag].partition = partition;
  q->lag[q->nlag].m = m;
  q->nlag++;
  return m;
}

/* The thread's answers: the gauges of what is still assigned here. */
static void on_answers(uv_async_t *a) {
  sl_lagq *q = a->data;
  lag_entry *got = q->take;
  uv_mutex_lock(&q->mu);
  int fresh = q->fresh && !q->stop, n = q->ngot; /* stopping: the stage is closing */
  memcpy(got, q->got, (size_t)n * sizeof got[0]);
  q->fresh = 0;
  uv_mutex_unlock(&q->mu);
  if (!fresh) return;
  /* more replicas could not go faster while the provider is the
   * bottleneck: they share its breaker state, its limiter and its pause */
  int bound = sl__gate_provider_bound(q->G, q->R->cc->lag_interval_ms);
  int64_t actionable = 0;
  int seen[SL_LAG_SERIES_MAX] = {0};
  for (int i = 0; i < n; i++) {
    part *p = sl__part_get(q->P, got[i].topic, got[i].partition, 0);
    if (!p || p->revoked || p->revoking) continue; /* its next owner reports it */
    sl_metric *m = lag_series(q, got[i].topic, got[i].partition);
    if (!m) continue;
    for (int k = 0; k < q->nlag; k++)
      if (q->lag[k].m == m) seen[k] = 1;
    if (got[i].ok) sl_metric_set(m, got[i].lag);
    int64_t lag = (int64_t)sl_metric_value(m); /* unanswered: the last value */
    if (!bound && !(p->retry_tier >= 0 && p->parked.head)) actionable += lag;
  }
  for (int k = 0; k < q->nlag; k++)
    if (!seen[k]) sl_metric_set(q->lag[k].m, 0);
  sl_metric_set(q->m_actionable, actionable);
}

static void lagq_free(uv_handle_t *h) { free(h->data); }

int sl__lag_start(sl_lagq **out, sl_jobs *R, sl_parts *P, const sl_gate *G,
                  const char *const gname[2], int ngroups, char *err, size_t errlen) {
  *out = NULL;
  if (R->cc->lag_interval_ms <= 0) return 0;
  sl_lagq *q = calloc(1, sizeof *q);
  if (!q) return SL_ENOMEM;
  q->R = R;
  q->P = P;
  q->G = G;
  q->m_actionable =
      sl__metric("sluice_consumer_lag_actionable_messages", R->o->stage, NULL,
                 "The part of this process's sluice_consumer_lag_messages more replicas could "
                 "drain: 0 while the provider is the bottleneck (breaker not closed, shared "
                 "limit or 429 pause in effect), without retry-tier partitions whose next "
                 "message waits for its delay; what to autoscale on",
                 1);
  q->interval_ms = R->cc->lag_interval_ms;
  q->ngroups = ngroups;
  char client[192];
  snprintf(client, sizeof client, "sluice-%s-lag", R->o->stage);
  for (int g = 0; g < q->ngroups; g++) {
    int rc =
        sl_kafka_group_reader_new(&q->rk[g], R->cc->kafka_brokers, gname[g], client, err, errlen);
    if (rc) {
      for (int k = 0; k < g; k++) sl_kafka_group_reader_free(q->rk[k]);
      free(q);
      return rc;
    }
  }
  uv_mutex_init(&q->mu);
  uv_cond_init(&q->cv);
  uv_async_init(R->uv, &q->async, on_answers);
  q->async.data = q;
  *out = q;
  if (uv_thread_create(&q->thread, lag_thread, q) != 0) {
    snprintf(err, errlen, "cannot start the consumer lag thread");
    return SL_ENOMEM; /* sl__lag_free frees the rest */
  }
  q->started = 1;
  return 0;
}

void sl__lag_assigned(sl_lagq *q, const rd_kafka_topic_partition_list_t *const as[2]) {
  if (!q) return;
  uv_mutex_lock(&q->mu);
  int n = 0, all = 0;
  for (int g = 0; g < q->ngroups; g++) {
    const rd_kafka_topic_partition_list_t *a = as[g];
    for (int i = 0; a && i < a->cnt; i++, all++) {
      if (n == SL_LAG_SERIES_MAX || strlen(a->elems[i].topic) >= sizeof q->want[0].topic) continue;
      lag_entry *e = &q->want[n++];
      snprintf(e->topic, sizeof e->topic, "%s", a->elems[i].topic);
      e->partition = a->elems[i].partition;
      e->g = g;
    }
  }
  q->nwant = n;
  q->kick = 1;
  uv_cond_signal(&q->cv);
  uv_mutex_unlock(&q->mu);
  if (all > n && !q->warned++)
    sl_log(SL_LOG_WARN, NULL, "consumer lag: %d partitions assigned, the gauges cover %d", all, n);
}

void sl__lag_stop(sl_lagq *q) {
  if (!q) return;
  uv_mutex_lock(&q->mu);
  q->stop = 1;
  uv_cond_signal(&q->cv);
  uv_mutex_unlock(&q->mu);
}

void sl__lag_free(sl_lagq *q) {
  if (!q) return;
  sl__lag_stop(q);
  if (q->started) uv_thread_join(&q->thread);
  for (int g = 0; g < q->ngroups; g++) sl_kafka_group_reader_free(q->rk[g]);
  uv_cond_destroy(&q->cv);
  uv_mutex_destroy(&q->mu);
  uv_close((uv_handle_t *)&q->async, lagq_free);
}
