/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_out.h — what becomes of a job: its idempotency lookup (LOOKUP),
 * its outcome (OUTCOME: done, run again in place, a retry copy, a dead
 * letter), the idempotency store (its answer hands the job on as STORED,
 * for the gate to settle the claim, then produced), stored outputs reused
 * (REUSE), producing and the delivery reports. A job ends FINISHED once
 * every output it produced is acknowledged by Kafka; a delivery that failed
 * is produced again (the whole set: duplicates are harmless), a permanent
 * refusal turns the input into a dead letter (output_rejected), and after a
 * fatal producer error nothing counts as done any more. Loop thread only.
 */
#ifndef SLUICE_SL_STAGE_OUT_H
#define SLUICE_SL_STAGE_OUT_H

#include "sl_stage_part.h"
#include "sluice/sl_redis.h"

/* The outbox's state (this file's; embedded in the loop's). */
typedef struct sl_output {
  sl_jobs *R;
  int fatal; /* the producer failed for good and cannot be renewed: no offset counts as done */
  sl_redis_script s_store; /* sl_claim_store_lua */
  sl_redis_script s_hop;   /* a deferral's hop (hop_record_lua) */
  /* stores to send at the end of this turn of the loop, SL_STORE_BATCH a script */
  sl_queue sq;
  uv_idle_t store_idle;
  sl_metric *m_done, *m_retried, *m_dead, *m_deferred, *m_again, *m_idem_hits, *m_twins;
  sl_metric *m_tier[SL_RETRY_TIERS_MAX];
} sl_output;

/* Sets X up (its metrics and its batch handle). */
void sl__out_init(sl_output *X, sl_jobs *R);

/* LOOKUP: asks for j's stored outputs; the answer hands it on (REUSE, or
 * GATE). */
void sl__out_lookup(job *j);
/* OUTCOME: acts on j's result (the gate has seen it). */
void sl__out_outcome(job *j);
/* STORED, REUSE: produces j's outputs (REUSE counts the reuse first). */
void sl__out_produce(job *j);
void sl__out_reuse(job *j);

/* The delivery report of one of j's outputs (sl_kafka_ticket). */
void sl__on_delivery(rd_kafka_resp_err_t err, void *opaque);

/* Closing: forgets the queued stores (the loop drops their jobs). NULL-safe. */
void sl__out_close(sl_output *X);

#endif
