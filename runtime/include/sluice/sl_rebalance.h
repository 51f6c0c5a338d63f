/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_rebalance.h — one consumer group's rebalance, as a pure state machine:
 * when partitions being taken away are handed over, whether their offsets
 * are committed first, and when the periodic commit may run
 * (runtime/src/sl_stage_group.c carries it out with librdkafka).
 *
 * A revoke is two steps:
 *   1. at once (sl_rebal_revoke): the partitions are paused, and what has
 *      not reached its provider call is let go uncalled;
 *   2. once the calls already running on them have ended (sl_rebal_progress
 *      with nothing pending), or stage.revoke_wait_ms passed: commit (not
 *      when the assignment was lost: someone else owns it already), then
 *      unassign (sl_rebal_finished).
 * An assign first finishes a revoke still waiting (sl_rebal_assign).
 * Cooperative (KIP-429): after a revoke the member rejoins at once, and an
 * asynchronous commit across that join can be taken for a lost assignment
 * (librdkafka < 2.10, #4059), so periodic commits wait for the rejoin's
 * assigns (two, one after a lost assignment) or a deadline
 * (sl_rebal_may_commit). Pure: no Kafka, no clock. @locality one thread.
 */
#ifndef SLUICE_SL_REBALANCE_H
#define SLUICE_SL_REBALANCE_H

#include <stdint.h>

typedef struct {
  int revoking;            /* a revoke waits for its running work */
  int lost;                /* ... and the assignment was lost: commit nothing */
  int cooperative;         /* the group's protocol is incremental */
  int rejoin_assigns;      /* assigns to see before periodic commits run again */
  int64_t rejoin_until_ms; /* or until then */
} sl_rebal;

typedef enum {
  SL_REBAL_WAIT,          /* running work may still finish: wait (stage.revoke_wait_ms) */
  SL_REBAL_HANDOVER,      /* commit what finished, then unassign */
  SL_REBAL_HANDOVER_LOST, /* unassign without committing: the assignment was lost */
} sl_rebal_step;

typedef struct {
  int lost;               /* rd_kafka_assignment_lost() */
  int closing;            /* the stage is closing: no waiting */
  int64_t pending;        /* jobs of the revoked partitions not finished */
  int64_t now_ms;         /* wall clock */
  int64_t revoke_wait_ms; /* stage.revoke_wait_ms */
  int64_t session_ms;     /* kafka.session_timeout_ms */
} sl_rebal_revoke_in;

/* A revoke begins: what to do now. r->revoking is set (until finished). */
sl_rebal_step sl_rebal_revoke(sl_rebal *r, const sl_rebal_revoke_in *in);

/* Work on revoking partitions ended (pending jobs left): WAIT, or hand over. */
sl_rebal_step sl_rebal_progress(const sl_rebal *r, int64_t pending);

/* The wait is over (stage.revoke_wait_ms, or the stage closes): hand over. */
sl_rebal_step sl_rebal_timeout(const sl_rebal *r);

/* The partitions were handed over. */
void sl_rebal_finished(sl_rebal *r);

/* An assign arrives: 1 when a waiting revoke must be handed over first. */
int sl_rebal_assign(sl_rebal *r);

/* 1 when the periodic commit may run at now_ms. */
int sl_rebal_may_commit(sl_rebal *r, int64_t now_ms);

#endif
