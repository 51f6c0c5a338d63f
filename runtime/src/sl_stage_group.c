/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_group.c — partitions of a stage's consumer groups: the commit of
 * each partition's offsets (sl_offsets.h), pausing, rebalances and
 * revocation. What is assigned is handed to the lag thread
 * (sl_stage_lag.c) whenever it changes.
 *
 * A stage consumes as two groups (grp): "sluice-<stage>" reads its inputs,
 * "sluice-<stage>-retry" its retry tiers. With one group the sticky
 * assignor balances the *count* of partitions over all subscribed topics,
 * so a replica that joins may be handed only retry tiers and do nothing
 * while the input piles up on the others; with two, each group balances
 * its own topics, and every replica gets a share of the input. Each group
 * has its own consumer, assignment, revocation and rejoin state; a
 * partition belongs to the group its topic is in.
 *
 * Offsets are committed asynchronously every tick (coalesced) and
 * synchronously on revoke and shutdown; a failed asynchronous commit makes
 * the partition's commit point pending again, so the next tick repeats it.
 * Loop thread only (the rebalance and commit callbacks run inside
 * rd_kafka_consumer_poll on the loop).
 */
#include "sl_stage_int.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_log.h"
#include "sluice/sl_redis.h"
#include "sluice.pb-c.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* partitions                                                          */

part *sl__part_get(loop_t *L, const char *topic, int32_t partition, int create) {
  part_id id;
  memset(&id, 0, sizeof id);
  snprintf(id.topic, sizeof id.topic, "%s", topic);
  id.partition = partition;
  part *p = NULL;
  HASH_FIND(hh, L->parts, &id, sizeof id, p);
  if (p || !create) return p;
  p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->id = id;
  p->L = L;
  sl_offsets_init(&p->ring);
  p->retry_tier = -1;
  for (int i = 0; i < L->rp.ntiers; i++)
    if (strcmp(topic, L->tier_topic[i]) == 0) p->retry_tier = i;
  p->g = &L->g[p->retry_tier >= 0 && L->ngroups > 1 ? 1 : 0];
  uv_timer_init(&L->loop, &p->park_timer);
  p->park_timer.data = p;
  p->timer_inited = 1;
  HASH_ADD(hh, L->parts, id, sizeof id, p);
  return p;
}

/* The partition is ours again: a fresh ring (jobs of the old epoch no
 * longer count). */
static void part_reset(part *p) {
  sl_offsets_reset(&p->ring);
  p->revoked = 0;
  p->revoking = 0;
  p->paused_for_park = 0;
}

static void part_close_cb(uv_handle_t *h) {
  part *p = h->data;
  sl_offsets_free(&p->ring);
  free(p);
}

void sl__part_drop(loop_t *L, part *p) {
  HASH_DEL(L->parts, p);
  uv_timer_stop(&p->park_timer);
  uv_close((uv_handle_t *)&p->park_timer, part_close_cb);
}

/* Commits the partitions of group g whose commit point moved; sync on
 * revoke and shutdown. */
void sl__commit(grp *g, int sync) {
  loop_t *L = g->L;
  if (!g->rk) return;
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) {
    if (p->g != g || p->revoked) continue;
    int64_t next = sl_offsets_commit_take(&p->ring);
    if (next < 0) continue;
    rd_kafka_topic_partition_list_add(l, p->id.topic, p->id.partition)->offset = next;
  }
  if (l->cnt) {
    rd_kafka_resp_err_t e = rd_kafka_commit(g->rk, l, sync ? 0 : 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
      sl_log(SL_LOG_WARN, NULL, "offset commit (%s): %s", g->name, rd_kafka_err2str(e));
  }
  rd_kafka_topic_partition_list_destroy(l);
}

void sl__commit_all(loop_t *L, int sync) {
  for (int i = 0; i < L->ngroups; i++) sl__commit(&L->g[i], sync);
}

void sl__on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                   rd_kafka_topic_partition_list_t *offsets, void *opaque) {
  (void)rk;
  grp *g = opaque;
  loop_t *L = g ? g->L : NULL;
  int failed = 0;
  for (int i = 0; offsets && i < offsets->cnt; i++) {
    const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
    rd_kafka_resp_err_t e = tp->err ? tp->err : err;
    if (!e || e == RD_KAFKA_RESP_ERR__NO_OFFSET || tp->offset < 0) continue;
    /* commit it again next tick (a partition since revoked commits nothing) */
    part *p = L ? sl__part_get(L, tp->topic, tp->partition, 0) : NULL;
    if (p && !p->revoked) sl_offsets_commit_failed(&p->ring, tp->offset);
    if (!failed++)
      sl_log(SL_LOG_WARN, NULL, "offset commit of %s [%d] at %lld failed: %s (committing again)",
             tp->topic, (int)tp->partition, (long long)tp->offset, rd_kafka_err2str(e));
  }
  if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET && !failed)
    sl_log(SL_LOG_WARN, NULL, "offset commit failed: %s", rd_kafka_err2str(err));
}

void sl__set_pause(loop_t *L, int pause) {
  if (L->paused_all == pause) return;
  L->paused_all = pause;
  for (int gi = 0; gi < L->ngroups; gi++) {
    grp *g = &L->g[gi];
    if (!g->assignment || !g->rk) continue;
    if (pause) {
      rd_kafka_pause_partitions(g->rk, g->assignment);
      continue;
    }
    /* resume all but the ones parked for a retry tier */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(g->assignment->cnt);
    for (int i = 0; i < g->assignment->cnt; i++) {
      part *p =
          sl__part_get(L, g->assignment->elems[i].topic, g->assignment->elems[i].partition, 0);
      if (p && p->paused_for_park) continue;
      rd_kafka_topic_partition_list_add(l, g->assignment->elems[i].topic,
                                        g->assignment->elems[i].partition);
    }
    rd_kafka_resume_partitions(g->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
  }
}

void sl__pause_one(loop_t *L, part *p, int pause) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, p->id.topic, p->id.partition);
  if (pause)
    rd_kafka_pause_partitions(p->g->rk, l);
  else if (!L->paused_all && !L->stopping)
    rd_kafka_resume_partitions(p->g->rk, l);
  rd_kafka_topic_partition_list_destroy(l);
  p->paused_for_park = pause;
}

/* Partitions assigned over both groups. */
static int assigned(const loop_t *L) {
  int n = 0;
  for (int i = 0; i < L->ngroups; i++) n += L->g[i].assignment ? L->g[i].assignment->cnt : 0;
  return n;
}

/* Ready while no group is handing partitions over. */
static void set_ready(loop_t *L) {
  int revoking = 0;
  for (int i = 0; i < L->ngroups; i++) revoking |= L->g[i].revoking != NULL;
  sl_admin_set_ready(L->o->admin, !revoking);
}

/* ---- rebalancing ----
 *
 * Cooperative (KIP-429, the default): an assign or revoke names only the
 * partitions that change owner; the others keep running. Eager (range,
 * roundrobin): every rebalance revokes everything first. Either way a
 * revoke is two steps:
 *   1. at once: the partitions are paused; their parked retries, the jobs
 *      held by the breaker or queued at the limiter, and every job that has
 *      not yet reached its provider call are released uncalled (their
 *      offsets stay uncommitted: the new owner reads them);
 *   2. once the calls already running on them have finished, stored their
 *      outputs and had them acknowledged, or stage.revoke_wait_ms has
 *      passed: commit, then unassign, which lets the rebalance complete.
 * So the new owner repeats a paid call only when one ran longer than the
 * wait. A lost assignment (session timed out) skips the wait and commits
 * nothing: someone else owns those partitions already.
 */

static int list_has(const rd_kafka_topic_partition_list_t *l, const char *topic, int32_t pn) {
  return l && rd_kafka_topic_partition_list_find(l, topic, pn) != NULL;
}

/* Jobs of g's partitions being revoked that have not finished. */
static int64_t revoke_pending(grp *g) {
  int64_t n = 0;
  for (job *j = g->L->jobs; j; j = j->all_next)
    if (j->p && j->p->g == g && j->p->revoking && j->epoch == j->p->ring.epoch) n++;
  return n;
}

/* Removes the stale jobs of a FIFO (breaker hold, limiter queue) and
 * releases them uncalled. */
static void release_stale(loop_t *L, job **head, job **tail, int64_t *len) {
  job *keep = NULL, *keep_tail = NULL, *stale = NULL;
  for (job *j = *head, *nx; j; j = nx) {
    nx = j->next;
    j->next = NULL;
    if (sl__job_stale(j)) {
      j->next = stale;
      stale = j;
      if (len) (*len)--;
    } else {
      if (keep_tail)
        keep_tail->next = j;
      else
        keep = j;
      keep_tail = j;
    }
  }
  *head = keep;
  *tail = keep_tail;
  while (stale) {
    job *j = stale;
    stale = j->next;
    j->next = NULL;
    sl__held_release(j);
  }
}

void sl__revoke_finish(grp *g) {
  loop_t *L = g->L;
  rd_kafka_topic_partition_list_t *l = g->revoking;
  if (!l) return;
  uv_timer_stop(&g->revoke_timer);
  int64_t left = revoke_pending(g);
  /* what finished on them, and the rest of this group (the other group
   * may be rejoining: its commits wait for its own assign) */
  if (!g->revoking_lost) sl__commit(g, 1);
  g->revoking = NULL;
  for (int i = 0; i < l->cnt; i++) {
    part *p = sl__part_get(L, l->elems[i].topic, l->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 0;
    p->revoked = 1;
    sl__release_parked(L, p);
    p->paused_for_park = 0;
  }
  if (g->cooperative) {
    rd_kafka_error_t *e = rd_kafka_incremental_unassign(g->rk, l);
    if (e) {
      sl_log(SL_LOG_WARN, NULL, "incremental unassign (%s): %s", g->name, rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
    }
  } else {
    rd_kafka_assign(g->rk, NULL);
  }
  /* what stays assigned */
  rd_kafka_topic_partition_list_t *keep =
      rd_kafka_topic_partition_list_new(g->assignment ? g->assignment->cnt : 0);
  for (int i = 0; g->assignment && i < g->assignment->cnt; i++)
    if (!list_has(l, g->assignment->elems[i].topic, g->assignment->elems[i].partition))
      rd_kafka_topic_partition_list_add(keep, g->assignment->elems[i].topic,
                                        g->assignment->elems[i].partition);
  if (g->assignment) rd_kafka_topic_partition_list_destroy(g->assignment);
  g->assignment = keep;
  if (left)
    sl_log(SL_LOG_WARN, NULL,
           "%s: revoked %d partition(s)%s with %lld message(s) still running: the new owner "
           "reads them again (and waits for their outputs where a claim holds them)",
           g->name, l->cnt, g->revoking_lost ? " (lost)" : " after stage.revoke_wait_ms",
           (long long)left);
  else
    sl_log(SL_LOG_INFO, NULL, "%s: revoked %d partition(s)%s; %d assigned", g->name, l->cnt,
           g->revoking_lost ? " (lost)" : "", keep->cnt);
  sl_metric_set(L->m_assigned, assigned(L));
  sl__lag_assigned(L);
  set_ready(L);
  rd_kafka_topic_partition_list_destroy(l);
}

void sl__revoke_check(loop_t *L) {
  for (int i = 0; i < L->ngroups; i++)
    if (L->g[i].revoking && revoke_pending(&L->g[i]) == 0) sl__revoke_finish(&L->g[i]);
}

static void on_revoke_timer(uv_timer_t *t) { sl__revoke_finish(t->data); }

static void revoke_begin(grp *g, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts) {
  loop_t *L = g->L;
  if (g->revoking) sl__revoke_finish(g); /* not expected: librdkafka waits for the first */
  if (g->cooperative) {                  /* this generation's assign, then the rejoin's */
    g->rejoin_assigns = rd_kafka_assignment_lost(rk) ? 1 : 2;
    g->rejoin_until_ms = sl_now_ms() + L->cc->revoke_wait_ms + L->cc->kafka_session_timeout_ms;
  }
  g->revoking = rd_kafka_topic_partition_list_copy(parts);
  g->revoking_lost = rd_kafka_assignment_lost(rk);
  rd_kafka_pause_partitions(rk, parts); /* nothing new from them */
  for (int i = 0; i < parts->cnt; i++) {
    part *p = sl__part_get(L, parts->elems[i].topic, parts->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 1;
    sl__release_parked(L, p);  /* not due yet, uncalled: redelivered */
    sl__release_waiting(L, p); /* not started: the same */
    p->paused_for_park = 0;
  }
  set_ready(L);
  release_stale(L, &L->bq_head, &L->bq_tail, &L->bq_len);
  sl_metric_set(L->m_held, L->bq_len);
  if (!L->lq_busy) { /* the head may be waiting on Redis: it checks itself */
    release_stale(L, &L->lq_head, &L->lq_tail, NULL);
  } else if (L->lq_head) {
    job *h = L->lq_head, *rest_tail = L->lq_tail;
    job *rest = h->next;
    h->next = NULL;
    job *rt = rest ? rest_tail : NULL;
    release_stale(L, &rest, &rt, NULL);
    h->next = rest;
    L->lq_tail = rest ? rt : h;
  }
  int64_t pending = revoke_pending(g);
  sl_log(SL_LOG_INFO, NULL, "%s: revoking %d partition(s)%s; %lld message(s) of them still running",
         g->name, parts->cnt, g->revoking_lost ? " (assignment lost)" : "", (long long)pending);
  if (pending == 0 || g->revoking_lost || L->closing || L->cc->revoke_wait_ms <= 0) {
    sl__revoke_finish(g);
    return;
  }
  uv_timer_start(&g->revoke_timer, on_revoke_timer, (uint64_t)L->cc->revoke_wait_ms, 0);
}

void sl__on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *parts, void *opaque) {
  grp *g = opaque;
  loop_t *L = g->L;
  /* NULL while no protocol is in force (leaving the group on close): the
   * last one known still tells how to unassign */
  const char *proto = rd_kafka_rebalance_protocol(rk);
  if (proto) g->cooperative = strcmp(proto, "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    if (g->in_close) /* sl_stage.c serves what is pending before closing */
      sl_log(SL_LOG_WARN, NULL,
             "%s: an assignment of %d partition(s) was served while the consumer closed "
             "(librdkafka before 2.5 can hang there: #4527)",
             g->name, parts->cnt);
    if (g->revoking) sl__revoke_finish(g);
    if (g->rejoin_assigns > 0) g->rejoin_assigns--;
    for (int i = 0; i < parts->cnt; i++) { /* ours from here on: fresh rings */
      part *p = sl__part_get(L, parts->elems[i].topic, parts->elems[i].partition, 1);
      if (p) part_reset(p);
    }
    if (g->cooperative) {
      rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
      if (e) {
        sl_log(SL_LOG_WARN, NULL, "incremental assign: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, parts);
    }
    if (!g->assignment || !g->cooperative) {
      if (g->assignment) rd_kafka_topic_partition_list_destroy(g->assignment);
      g->assignment = rd_kafka_topic_partition_list_new(parts->cnt);
    }
    for (int i = 0; i < parts->cnt; i++)
      if (!list_has(g->assignment, parts->elems[i].topic, parts->elems[i].partition))
        rd_kafka_topic_partition_list_add(g->assignment, parts->elems[i].topic,
                                          parts->elems[i].partition);
    /* librdkafka keeps a partition's pause flag across unassign and assign:
     * resume what was handed to us, then pause again where we must */
    rd_kafka_resume_partitions(rk, parts);
    if (L->paused_all || L->stopping) rd_kafka_pause_partitions(rk, parts);
    sl_log(SL_LOG_INFO, NULL, "%s: assigned %d partition(s) (%s); %d in this group, %d in all",
           g->name, parts->cnt, g->cooperative ? "incremental" : "eager", g->assignment->cnt,
           assigned(L));
    sl_metric_set(L->m_assigned, assigned(L));
    sl__lag_assigned(L);
    set_ready(L);
  } else {
    revoke_begin(g, rk, parts);
  }
}
