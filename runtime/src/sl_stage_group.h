/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_group.h — a stage's consumer groups: their consumers, each
 * partition's commit, pausing, and carrying out assigns and revokes (when,
 * sl_rebalance.h decides). The loop receives the rebalance callbacks and
 * orchestrates: it lets go of what waits on revoked partitions (its own
 * queues, the parked, the gate's held) between sl__group_revoke_begin and
 * sl__group_revoke_decide, and tells the lag thread and readiness after
 * every change. Loop thread only (librdkafka's callbacks run inside
 * rd_kafka_consumer_poll on the loop).
 */
#ifndef SLUICE_SL_STAGE_GROUP_H
#define SLUICE_SL_STAGE_GROUP_H

#include "sl_stage_part.h"
#include "sluice/sl_rebalance.h"

/* One consumer group of the stage: [0] "sluice-<stage>" (its inputs),
 * [1] "sluice-<stage>-retry" (its retry tiers). */
typedef struct grp {
  struct sl_groups *S;
  char name[160]; /* the group id */
  rd_kafka_t *rk;
  sl_kafka_uv *cku;
  rd_kafka_topic_partition_list_t *assignment;
  /* partitions being revoked: unassigned once their running work is over
   * or stage.revoke_wait_ms has passed */
  rd_kafka_topic_partition_list_t *revoking;
  sl_rebal rb;
  int in_close;            /* inside rd_kafka_consumer_close: no assignment may come */
  uv_timer_t revoke_timer; /* data: the group; started by the loop */
} grp;

/* The groups (this file's; embedded in the loop's). */
typedef struct sl_groups {
  sl_jobs *R;
  sl_parts *P;
  grp g[2];
  int n;
  int paused_all; /* every partition paused (at a limit for long, or stopping) */
  sl_metric *m_assigned;
} sl_groups;

/* Names the groups of the stage and sets up their timers and metric. */
void sl__groups_init(sl_groups *S, sl_jobs *R, sl_parts *P);
/* librdkafka's rebalance callback (opaque: the grp) */
typedef void sl_rebalance_fn(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *,
                             void *);

/* Creates the consumers (rebalance: the loop's callback, opaque the grp),
 * attaches them to the loop (drain: called when messages wait) and
 * subscribes group 0 to topics, group 1 to the retry tiers. 0 or SL_E*
 * with the reason in err. */
int sl__groups_open(sl_groups *S, const char *const *topics, size_t ntopics,
                    sl_rebalance_fn *rebalance, void (*drain)(void *), char *err, size_t errlen);

/* Commits the partitions whose commit point moved: every group (sync on
 * revoke and shutdown), or, on the tick, those not waiting for a rejoin. */
void sl__groups_commit(sl_groups *S, int sync);
void sl__groups_tick(sl_groups *S);

/* Pauses or resumes every partition (resuming leaves the parked ones). */
void sl__groups_pause(sl_groups *S, int pause);
void sl__group_pause_one(sl_groups *S, part *p, int pause);

/* Partitions assigned over both groups; 1 while one is being handed over. */
int sl__groups_assigned(const sl_groups *S);
int sl__groups_revoking(const sl_groups *S);

/* An assign: a revoke still waiting is handed over first. */
void sl__group_assign(grp *g, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts);
/* A revoke, step 1: the partitions paused and marked, their parked let go. */
void sl__group_revoke_begin(grp *g, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts);
/* ... then: hands over now (1), or waits (0: the caller starts the timer). */
int sl__group_revoke_decide(grp *g);
/* Step 2: commit (unless lost), unassign. Nothing when no revoke waits. */
void sl__group_revoke_finish(grp *g);
/* Work on revoking partitions ended: hands over the groups with none left;
 * the number handed over. */
int sl__groups_revoke_check(sl_groups *S);

/* Serves what is pending and closes the consumers (the loop has stopped). */
void sl__groups_close(sl_groups *S);
/* Detaches the consumers from the loop (before its handles close). */
void sl__groups_detach(sl_groups *S);
/* Destroys the consumers (after the loop closed). */
void sl__groups_free(sl_groups *S);

#endif
