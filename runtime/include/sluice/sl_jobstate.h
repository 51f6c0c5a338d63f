/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_jobstate.h — where a stage's job is in its life, and which moves are
 * allowed: the states of the runtime's jobs (runtime/src/sl_stage_job.h),
 * named instead of flags, and the one table of transitions.
 *
 * Each state has one owner, the module that acts on a job in it:
 *
 *   NEW       the loop: taken from Kafka, not yet placed
 *   PARKED    the partition (sl_stage_part.c): a retry copy not yet due
 *   WAITING   the loop: waits in order for a processing slot
 *   KEYQ      the loop: waits for its key (stage.per_key_order)
 *   LOOKUP    the outbox (sl_stage_out.c): its idempotency lookup is out
 *   GATE      the gate (sl_stage_gate.c), from the breaker on
 *   CLAIM     the gate, from the claim on (a run again, a lost claim)
 *   CALL      the work (sl_stage_work.c): process() on the loop, or start()
 *   POOL      the work: process() on a worker thread
 *   OUTCOME   the outbox: acts on the outcome (store, retry copy, dead
 *             letter) and produces
 *   STORED    the outbox: its outputs are stored; produces
 *   REUSE     the outbox: stored outputs answer it; produces
 *   FINISHED  over, its offset done (terminal)
 *   RELEASED  let go unfinished: redelivered (terminal)
 *   DROPPED   dropped while the stage closes: redelivered (terminal)
 *
 * A module hands a job on by asking for a transition (sl__job_to); the loop
 * calls the new state's owner. Pure: no I/O. @locality any thread.
 */
#ifndef SLUICE_SL_JOBSTATE_H
#define SLUICE_SL_JOBSTATE_H

typedef enum {
  SL_JOB_NEW,
  SL_JOB_PARKED,
  SL_JOB_WAITING,
  SL_JOB_KEYQ,
  SL_JOB_LOOKUP,
  SL_JOB_GATE,
  SL_JOB_CLAIM,
  SL_JOB_CALL,
  SL_JOB_POOL,
  SL_JOB_OUTCOME,
  SL_JOB_STORED,
  SL_JOB_REUSE,
  SL_JOB_FINISHED,
  SL_JOB_RELEASED,
  SL_JOB_DROPPED,
  SL_JOB_NSTATES
} sl_job_state;

/* 1 when a job may move from one state to the other, else 0 (an unknown
 * state included). */
int sl_job_may(sl_job_state from, sl_job_state to);

/* 1 for FINISHED, RELEASED and DROPPED: the job is freed. */
int sl_job_terminal(sl_job_state s);

/* "new", "parked", ... ("?" for an unknown state). */
const char *sl_job_state_name(sl_job_state s);

#endif
