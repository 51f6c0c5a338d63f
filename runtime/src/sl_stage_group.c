/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_group.c — a stage's consumer groups (sl_stage_group.h): the
 * commit of each partition's offsets (sl_offsets.h), pausing, and assigns
 * and revokes as sl_rebalance.h decides them.
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
 *
 * Cooperative (KIP-429, the default): an assign or revoke names only the
 * partitions that change owner; the others keep running. Eager (range,
 * roundrobin): every rebalance revokes everything first. Either way a
 * revoke is two steps (sl_rebalance.h): at once, the partitions are paused
 * and what has not reached its provider call is let go uncalled (their
 * offsets stay uncommitted: the new owner reads them); once the calls
 * already running on them have finished, stored their outputs and had them
 * acknowledged, or stage.revoke_wait_ms has passed: commit, then unassign,
 * which lets the rebalance complete. So the new owner repeats a paid call
 * only when one ran longer than the wait. A lost assignment (session timed
 * out) skips the wait and commits nothing: someone else owns those
 * partitions already. Loop thread only.
 */
#include "sl_stage_group.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl__groups_init(sl_groups *S, sl_jobs *R, sl_parts *P) {
  memset(S, 0, sizeof *S);
  S->R = R;
  S->P = P;
  S->n = 2; /* the inputs, and the retry tiers */
  for (int i = 0; i < S->n; i++) {
    grp *g = &S->g[i];
    g->S = S;
    sl_pipeline_group(g->name, sizeof g->name, R->o->stage, i);
    uv_timer_init(R->uv, &g->revoke_timer);
    g->revoke_timer.data = g;
  }
  S->m_assigned = sl__metric("sluice_assigned_partitions", R->o->stage, NULL,
                             "Partitions assigned to this process (0: not consuming)", 1);
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque);

/* The consumers' settings: kafka.* and kafka.consumer_properties; the
 * retry tiers' group holds fetches longer (kafka.retry_fetch_wait_ms). */
static int groups_create(sl_groups *S, sl_rebalance_fn *rebalance, char *err, size_t errlen) {
  const sl_common_conf *cc = S->R->cc;
  char cprops[1024], client[128];
  const char *ckv[2 * 16 + 1];
  int rc = sl_kafka_props_split(SL_KAFKA_CONSUMER_PROPS, cc->kafka_consumer_properties, cprops,
                                sizeof cprops, ckv, 16, err, errlen);
  sl_kafka_group_opts gopts = {cc->kafka_assignment,    cc->kafka_session_timeout_ms,
                               cc->kafka_heartbeat_ms,  cc->kafka_fetch_min_bytes,
                               cc->kafka_fetch_wait_ms, ckv};
  sl_kafka_group_opts ropts = gopts;
  ropts.fetch_wait_ms = cc->kafka_retry_fetch_wait_ms;
  ropts.assignment = cc->kafka_retry_assignment;
  snprintf(client, sizeof client, "sluice-%s", S->R->o->stage);
  for (int i = 0; rc == 0 && i < S->n; i++)
    rc = sl_kafka_consumer_new(&S->g[i].rk, cc->kafka_brokers, S->g[i].name, client,
                               i == 0 ? &gopts : &ropts, err, errlen, rebalance, on_commit, NULL,
                               &S->g[i]);
  return rc;
}

static rd_kafka_resp_err_t subscribe(rd_kafka_t *rk, const char *const *topics, size_t n,
                                     size_t stride) {
  rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new((int)n);
  for (size_t i = 0; i < n; i++)
    rd_kafka_topic_partition_list_add(
        subs, *(const char *const *)((const char *)topics + i * stride), RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, subs);
  rd_kafka_topic_partition_list_destroy(subs);
  return e;
}

int sl__groups_open(sl_groups *S, const char *const *topics, size_t ntopics,
                    sl_rebalance_fn *rebalance, void (*drain)(void *), char *err, size_t errlen) {
  int rc = groups_create(S, rebalance, err, errlen);
  for (int i = 0; rc == 0 && i < S->n; i++)
    rc = sl_kafka_uv_attach_consumer(&S->g[i].cku, S->g[i].rk, S->R->uv, drain, &S->g[i]);
  if (rc) return rc;
  const char *tiers[SL_RETRY_TIERS_MAX];
  for (int i = 0; i < S->R->rp->ntiers; i++) tiers[i] = S->R->tier_topic[i];
  rd_kafka_resp_err_t e = subscribe(S->g[0].rk, topics, ntopics, sizeof *topics);
  if (!e) e = subscribe(S->g[1].rk, tiers, (size_t)S->R->rp->ntiers, sizeof *tiers);
  if (e) {
    snprintf(err, errlen, "subscribe failed: %s", rd_kafka_err2str(e));
    return SL_EKAFKA;
  }
  return 0;
}

/* ---- commits ---- */

/* Commits the partitions of group g whose commit point moved. */
static void commit(grp *g, int sync) {
  if (!g->rk) return;
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
  part *p, *tmp;
  HASH_ITER(hh, g->S->P->table, p, tmp) {
    if (&g->S->g[p->group] != g || p->revoked) continue;
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

void sl__groups_commit(sl_groups *S, int sync) {
  for (int i = 0; i < S->n; i++) commit(&S->g[i], sync);
}

void sl__groups_tick(sl_groups *S) {
  int64_t now = sl_now_ms();
  for (int i = 0; i < S->n; i++) /* rejoining after a revoke: once the new generation is ours */
    if (sl_rebal_may_commit(&S->g[i].rb, now)) commit(&S->g[i], 0);
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque) {
  (void)rk;
  grp *g = opaque;
  int failed = 0;
  for (int i = 0; offsets && i < offsets->cnt; i++) {
    const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
    rd_kafka_resp_err_t e = tp->err ? tp->err : err;
    if (!e || e == RD_KAFKA_RESP_ERR__NO_OFFSET || tp->offset < 0) continue;
    /* commit it again next tick (a partition since revoked commits nothing) */
    part *p = g ? sl__part_get(g->S->P, tp->topic, tp->partition, 0) : NULL;
    if (p && !p->revoked) sl_offsets_commit_failed(&p->ring, tp->offset);
    if (!failed++)
      sl_log(SL_LOG_WARN, NULL, "offset commit of %s [%d] at %lld failed: %s (committing again)",
             tp->topic, (int)tp->partition, (long long)tp->offset, rd_kafka_err2str(e));
  }
  if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET && !failed)
    sl_log(SL_LOG_WARN, NULL, "offset commit failed: %s", rd_kafka_err2str(err));
}

/* ---- pausing ---- */

void sl__groups_pause(sl_groups *S, int pause) {
  if (S->paused_all == pause) return;
  S->paused_all = pause;
  for (int gi = 0; gi < S->n; gi++) {
    grp *g = &S->g[gi];
    if (!g->assignment || !g->rk) continue;
    if (pause) {
      rd_kafka_pause_partitions(g->rk, g->assignment);
      continue;
    }
    /* resume all but the ones parked for a retry tier */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(g->assignment->cnt);
    for (int i = 0; i < g->assignment->cnt; i++) {
      const rd_kafka_topic_partition_t *e = &g->assignment->elems[i];
      part *p = sl__part_get(S->P, e->topic, e->partition, 0);
      if (p && p->paused_for_park) continue;
      rd_kafka_topic_partition_list_add(l, e->topic, e->partition);
    }
    rd_kafka_resume_partitions(g->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
  }
}

void sl__group_pause_one(sl_groups *S, part *p, int pause) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, p->id.topic, p->id.partition);
  rd_kafka_t *rk = S->g[p->group].rk;
  if (pause)
    rd_kafka_pause_partitions(rk, l);
  else if (!S->paused_all && !S->R->stopping)
    rd_kafka_resume_partitions(rk, l);
  rd_kafka_topic_partition_list_destroy(l);
  p->paused_for_park = pause;
}

int sl__groups_assigned(const sl_groups *S) {
  int n = 0;
  for (int i = 0; i < S->n; i++) n += S->g[i].assignment ? S->g[i].assignment->cnt : 0;
  return n;
}

int sl__groups_revoking(const sl_groups *S) {
  int revoking = 0;
  for (int i = 0; i < S->n; i++) revoking |= S->g[i].revoking != NULL;
  return revoking;
}

/* ---- rebalancing ---- */

static int list_has(const rd_kafka_topic_partition_list_t *l, const char *topic, int32_t pn) {
  return l && rd_kafka_topic_partition_list_find(l, topic, pn) != NULL;
}

/* The protocol in force (NULL while none is, leaving the group on close:
 * the last one known still tells how to unassign). */
static void protocol(grp *g, rd_kafka_t *rk) {
  const char *proto = rd_kafka_rebalance_protocol(rk);
  if (proto) g->rb.cooperative = strcmp(proto, "COOPERATIVE") == 0;
}

/* Jobs of g's partitions being revoked that have not finished. */
static int64_t revoke_pending(const grp *g) {
  int64_t n = 0;
  for (const job *j = g->S->R->all; j; j = j->all_next)
    if (j->p && &g->S->g[j->p->group] == g && j->p->revoking && j->epoch == j->p->ring.epoch) n++;
  return n;
}

void sl__group_assign(grp *g, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts) {
  sl_groups *S = g->S;
  protocol(g, rk);
  if (g->in_close) /* the loop serves what is pending before closing */
    sl_log(SL_LOG_WARN, NULL,
           "%s: an assignment of %d partition(s) was served while the consumer closed "
           "(librdkafka before 2.5 can hang there: #4527)",
           g->name, parts->cnt);
  if (sl_rebal_assign(&g->rb)) sl__group_revoke_finish(g);
  for (int i = 0; i < parts->cnt; i++) { /* ours from here on: fresh rings */
    part *p = sl__part_get(S->P, parts->elems[i].topic, parts->elems[i].partition, 1);
    if (!p) continue;
    sl__part_reset(p);
    sl__tier_own(S->R, p->retry_tier, p->id.partition, 1); /* deferrals may come here */
  }
  if (g->rb.cooperative) {
    rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
    if (e) {
      sl_log(SL_LOG_WARN, NULL, "incremental assign: %s", rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
    }
  } else {
    rd_kafka_assign(rk, parts);
  }
  if (!g->assignment || !g->rb.cooperative) {
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
  if (S->paused_all || S->R->stopping) rd_kafka_pause_partitions(rk, parts);
  sl_log(SL_LOG_INFO, NULL, "%s: assigned %d partition(s) (%s); %d in this group, %d in all",
         g->name, parts->cnt, g->rb.cooperative ? "incremental" : "eager", g->assignment->cnt,
         sl__groups_assigned(S));
  sl_metric_set(S->m_assigned, sl__groups_assigned(S));
}

void sl__group_revoke_finish(grp *g) {
  sl_groups *S = g->S;
  rd_kafka_topic_partition_list_t *l = g->revoking;
  if (!l) return;
  uv_timer_stop(&g->revoke_timer);
  int64_t left = revoke_pending(g);
  int lost = g->rb.lost;
  /* what finished on them, and the rest of this group (the other group
   * may be rejoining: its commits wait for its own assign) */
  if (sl_rebal_timeout(&g->rb) == SL_REBAL_HANDOVER) commit(g, 1);
  sl_rebal_finished(&g->rb);
  g->revoking = NULL;
  for (int i = 0; i < l->cnt; i++) {
    part *p = sl__part_get(S->P, l->elems[i].topic, l->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 0;
    p->revoked = 1;
    sl__part_release_parked(p);
    p->paused_for_park = 0;
  }
  if (g->rb.cooperative) {
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
           g->name, l->cnt, lost ? " (lost)" : " after stage.revoke_wait_ms", (long long)left);
  else
    sl_log(SL_LOG_INFO, NULL, "%s: revoked %d partition(s)%s; %d assigned", g->name, l->cnt,
           lost ? " (lost)" : "", keep->cnt);
  sl_metric_set(S->m_assigned, sl__groups_assigned(S));
  rd_kafka_topic_partition_list_destroy(l);
}

void sl__group_revoke_begin(grp *g, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts) {
  protocol(g, rk);
  if (g->revoking) sl__group_revoke_finish(g); /* not expected: librdkafka waits for the first */
  g->revoking = rd_kafka_topic_partition_list_copy(parts);
  g->rb.lost = rd_kafka_assignment_lost(rk);
  rd_kafka_pause_partitions(rk, parts); /* nothing new from them */
  for (int i = 0; i < parts->cnt; i++) {
    part *p = sl__part_get(g->S->P, parts->elems[i].topic, parts->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 1;
    sl__tier_own(g->S->R, p->retry_tier, p->id.partition, 0);
    sl__part_release_parked(p); /* not due yet, uncalled: redelivered */
    p->paused_for_park = 0;
  }
}

int sl__group_revoke_decide(grp *g) {
  const sl_jobs *R = g->S->R;
  sl_rebal_revoke_in in = {g->rb.lost,
                           R->closing,
                           revoke_pending(g),
                           sl_now_ms(),
                           R->cc->revoke_wait_ms,
                           R->cc->kafka_session_timeout_ms};
  sl_rebal_step s = sl_rebal_revoke(&g->rb, &in);
  sl_log(SL_LOG_INFO, NULL, "%s: revoking %d partition(s)%s; %lld message(s) of them still running",
         g->name, g->revoking ? g->revoking->cnt : 0, in.lost ? " (assignment lost)" : "",
         (long long)in.pending);
  if (s == SL_REBAL_WAIT) return 0;
  sl__group_revoke_finish(g);
  return 1;
}

int sl__groups_revoke_check(sl_groups *S) {
  int n = 0;
  for (int i = 0; i < S->n; i++) {
    grp *g = &S->g[i];
    if (g->revoking && sl_rebal_progress(&g->rb, revoke_pending(g)) != SL_REBAL_WAIT) {
      sl__group_revoke_finish(g);
      n++;
    }
  }
  return n;
}

/* ---- shutdown ---- */

/* Serves the rebalance events that reached g since the loop stopped (the
 * other group's close can take seconds, waiting for a join): here, not
 * inside rd_kafka_consumer_close. An incremental assign served there, once
 * the close has begun, leaves librdkafka before 2.5 (Debian 12 has 2.0.2)
 * waiting for an assign call forever (confluentinc/librdkafka#4527). What
 * comes with them is not taken: its offsets stay uncommitted. */
static void serve_pending(grp *g) {
  for (int i = 0; i < 10000; i++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(g->rk, 0);
    if (!m) break;
    rd_kafka_message_destroy(m);
  }
}

void sl__groups_close(sl_groups *S) {
  for (int i = 0; i < S->n; i++) {
    grp *g = &S->g[i];
    sl_kafka_uv_detach(g->cku);
    g->cku = NULL;
    serve_pending(g);
    g->in_close = 1;
    rd_kafka_consumer_close(g->rk);
    g->in_close = 0;
  }
}

void sl__groups_detach(sl_groups *S) {
  for (int i = 0; i < S->n; i++) {
    sl_kafka_uv_detach(S->g[i].cku);
    S->g[i].cku = NULL;
  }
}

void sl__groups_free(sl_groups *S) {
  sl__groups_detach(S);
  for (int i = 0; i < S->n; i++) {
    grp *g = &S->g[i];
    if (g->rk) rd_kafka_destroy(g->rk);
    g->rk = NULL;
    if (g->assignment) rd_kafka_topic_partition_list_destroy(g->assignment);
    if (g->revoking) rd_kafka_topic_partition_list_destroy(g->revoking);
    g->assignment = g->revoking = NULL;
  }
}
