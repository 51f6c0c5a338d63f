/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_gate.h — the provider gate: what a job passes between its
 * idempotency lookup and its provider call (sl_admit.h decides, this module
 * carries it out with queues, timers and Redis). The gate owns the jobs in
 * the states GATE and CLAIM; it hands them on by sl__job_to (LOOKUP before
 * waiting, CALL, OUTCOME for a dead letter or a retry copy without a call,
 * REUSE for stored outputs its claim read, FINISHED for an end another
 * replica wrote, RELEASED, DROPPED). Loop thread only, except the claim_lost
 * flag a worker reads.
 */
#ifndef SLUICE_SL_STAGE_GATE_H
#define SLUICE_SL_STAGE_GATE_H

#include "sl_stage_budget.h"
#include "sl_stage_fair.h"
#include "sl_stage_part.h"
#include "sluice/sl_breaker.h"
#include "sluice/sl_redis.h"

/* keys deleted by one DEL when inputs end */
#define SL_STARTS_DEL_MAX 64
/* a start count lives this long (seconds) */
#define SL_STARTS_TTL_S 86400

/* The gate's state (this file's; embedded in the loop's). */
typedef struct sl_gate {
  sl_jobs *R;
  sl_breaker *breaker; /* NULL without a provider */
  char limit_key[160], pause_key[160];
  /* this replica's share of the limit (provider.limit_buckets), and whether
   * the take script reads the pause itself (else limiter_try reads it) */
  char limit_rate[32], limit_burst[32];
  int pause_in_take;
  /* the Lua scripts the gate runs, by SHA-1 (sl_redis_script) */
  sl_redis_script s_fair, s_pause, s_claim_take, s_claim_release, s_claim_end, s_starts, s_lookup,
      s_tenant_cost;
  /* jobs held while the breaker is open (breaker.hold), in order */
  sl_queue bq;
  uv_timer_t bq_timer;
  /* jobs waiting for the shared limiter, one line per tenant: one take
   * at a time names the tenants waiting and the fair take script picks
   * whose head goes (sl_fair.h), so a backlog costs one limiter call per
   * grant; fair_u, fair_s are the script's keys beside limit_key */
  sl_fair_lines fl;
  sl_budgets budgets; /* each tenant's cost budget and spend, as last read */
  int64_t tick_ms;    /* monotonic, the last per-tenant gauges' update */
  char fair_u[SL_FAIR_KEY_MAX], fair_s[SL_FAIR_KEY_MAX];
  int lq_busy;
  uv_timer_t lq_timer;
  /* without a rate, the provider's pause (a 429's Retry-After, set by any
   * replica) as last read: one PTTL per SL_PAUSE_FRESH_MS, not per call;
   * jobs that arrive while it is asked wait for the answer, in order */
  int64_t pause_until_ms, pause_read_ms; /* monotonic; 0: never read */
  sl_queue pq;
  int pq_busy;
  /* a call waited on the limiter or the pause until then (monotonic): more
   * replicas would wait as well (the lag's actionable part) */
  int64_t wait_until_ms;
  /* claims: this process's owner prefix, renewed while their calls run */
  char owner[80];
  uint64_t owner_seq;
  uv_timer_t claim_timer;
  /* claims and start counts to send at the end of this turn of the loop,
   * up to SL_CLAIM_BATCH of one Redis bucket a script; the count keys of
   * inputs that ended, to delete (one DEL per bucket, up to
   * SL_STARTS_DEL_MAX keys in all) */
  sl_queue cq, tq;
  char (*sdel)[256];                  /* 2 * SL_STARTS_DEL_MAX: the second half is scratch */
  int sdel_bucket[SL_STARTS_DEL_MAX]; /* the Redis bucket of each (sl_rkey) */
  int sdel_n;
  uv_idle_t batch_idle;
  /* solo runs: calls running; Redis commands of the start count not
   * answered; jobs holding a count; the suspect waiting to run alone; the
   * one running alone; the jobs that came meanwhile, waiting uncounted */
  int64_t calls, counting, counted;
  job *pending, *solo;
  sl_queue xq;
  int64_t uncounted_warned_ms;
  sl_metric *m_uncounted, *m_claim_waits, *m_claims_lost, *m_claim_ends, *m_held, *m_limiter_waits,
      *m_breaker_state, *m_circuit_skips, *m_calls_ok, *m_calls_fail, *m_calls_throttled,
      *m_calls_perm, *m_cost;
  sl_histogram *h_call;
} sl_gate;

/* Sets G up (its metrics, timers, scripts and breaker; renewals start).
 * Returns 0 or SL_E* with the reason in err. */
int sl__gate_init(sl_gate *G, sl_jobs *R, char *err, size_t errlen);

/* GATE: j enters from the breaker on. */
void sl__gate_enter(job *j);
/* CLAIM: j enters at its claim (a run again, a claim lost before its call);
 * a call of its still counted ends first. */
void sl__gate_claim(job *j);

/* 1 when the gate looks for j's stored outputs itself (its claim reads
 * them, or its start is counted with the lookup): no LOOKUP first. */
int sl__gate_looks_up(const job *j);

/* j's call is over (its outcome is in, before the outbox acts on it): the
 * breaker, the provider metrics, a 429's pause, a solo run's end. */
void sl__gate_outcome(job *j);
/* j's store script answered (j->store_reply): its count and its claim. */
void sl__gate_stored(job *j);
/* j ends: finished (its dead letter acknowledged: its claim becomes an end
 * mark unless fatal), or let go (its start is taken back if it never ran). */
void sl__gate_finished(job *j, int fatal);
void sl__gate_released(job *j);

/* A revoke: the held and queued jobs of partitions taken away are let go. */
void sl__gate_release_partition(sl_gate *G);
/* Jobs held while the breaker is open. */
int64_t sl__gate_held(const sl_gate *G);
/* 1 while the provider is the bottleneck: the breaker not closed, or a call
 * waited on the limiter or the pause within the last within_ms. */
int sl__gate_provider_bound(const sl_gate *G, int64_t within_ms);
/* Stopping: what is held, and what waits behind a solo run, is let go. */
void sl__gate_stop(sl_gate *G);
/* Closing: forgets its queues (the loop drops their jobs) and frees what it
 * holds. NULL-safe. */
void sl__gate_close(sl_gate *G);

/* The loop's tick (every 100 ms): the lines' rates and the tenants'
 * budgets, once a second. */
void sl__gate_tick(sl_gate *G);

#endif
