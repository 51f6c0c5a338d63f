/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_int.h — the stage runtime's internals, shared by its files.
 *
 * The runtime (sl_stage.h is its contract) is split the way librdkafka
 * splits its consumer:
 *   sl_stage.c        the loop: configuration, taking messages, parking
 *                     retry copies until due, per-key order, the tick,
 *                     start-up and shutdown;
 *   sl_stage_group.c  partitions: commits, pausing, rebalances (eager and
 *                     cooperative), revocation;
 *   sl_stage_lag.c    consumer lag, queried off the loop by a thread of its
 *                     own, and how much of it more replicas could drain;
 *   sl_stage_gate.c   the provider gate: breaker hold, the shared limiter,
 *                     the 429 pause, claims (one paid call across replicas);
 *   sl_stage_out.c    outcomes: processing on the pool, the idempotency
 *                     store, retry copies and dead letters, producing;
 * and the pure parts, with unit tests of their own: sl_offsets.c (offsets
 * in flight, the commit point), sl_retry.c (tiers, budget, Retry-After),
 * sl_idem.c (stored outputs, store and claim keys), sl_outbox.c.
 *
 * Everything here runs on the loop thread, except sl__work_cb (the worker
 * pool) and the lag thread (sl_stage_lag.c: it shares only its own struct,
 * under its mutex). Not installed; nothing outside runtime/src includes it.
 */
#ifndef SLUICE_SL_STAGE_INT_H
#define SLUICE_SL_STAGE_INT_H

#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_aredis.h"
#include "sluice/sl_breaker.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_flow.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_inline.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_offsets.h"
#include "sluice/sl_retry.h"
#include "sluice/sl_stage.h"

#include <stdatomic.h>
#include <uthash.h>
#include <uv.h>

typedef struct loop_t loop_t;
typedef struct sl_job job;

/* One consumer group of the stage: [0] "sluice-<stage>" (its inputs),
 * [1] "sluice-<stage>-retry" (its retry tiers); see sl_stage_group.c. */
typedef struct grp {
  loop_t *L;
  char name[160]; /* the group id */
  rd_kafka_t *rk;
  sl_kafka_uv *cku;
  rd_kafka_topic_partition_list_t *assignment;
  /* partitions being revoked: unassigned once their running work is over
   * or stage.revoke_wait_ms has passed */
  rd_kafka_topic_partition_list_t *revoking;
  int revoking_lost; /* the assignment was lost: commit nothing */
  /* after a cooperative revoke the member rejoins at once; an asynchronous
   * commit in flight across that join gets ILLEGAL_GENERATION, which
   * librdkafka < 2.10 (#4059) turns into a lost assignment. Periodic
   * commits wait for the rejoin's assign (or rejoin_until_ms). */
  int rejoin_assigns;
  int64_t rejoin_until_ms;
  int cooperative; /* the group's protocol is incremental (KIP-429) */
  int in_close;    /* inside rd_kafka_consumer_close: no assignment may come */
  uv_timer_t revoke_timer;
} grp;

/* at most this many per-partition lag series per process */
#define SL_LAG_SERIES_MAX 128
typedef struct sl_lagq sl_lagq;

typedef struct {
  char topic[128];
  int32_t partition;
} part_id;

/* One assigned partition. */
typedef struct part {
  part_id id;
  UT_hash_handle hh;
  loop_t *L;
  grp *g;          /* the group its topic is consumed in */
  sl_offsets ring; /* offsets in flight and the commit point (sl_offsets.h) */
  int revoked;     /* no longer ours: nothing of it is committed */
  int revoking;    /* being taken away: running work may still finish */
  int retry_tier;  /* index of the tier this topic is, or -1 for a main input */
  job *parked_head, *parked_tail;
  int paused_for_park;
  uv_timer_t park_timer;
  int timer_inited;
} part;

/* Per-key ordering: the key's queue of waiting jobs. */
typedef struct keyq {
  char key[128];
  UT_hash_handle hh;
  job *head, *tail; /* waiting, in arrival order */
} keyq;

struct sl_job {
  loop_t *L;
  rd_kafka_message_t *m;
  part *p;
  uint64_t epoch; /* p->ring.epoch when taken */
  int64_t offset;
  char key[128];
  unsigned attempts;  /* failed attempts before this one */
  double cost_before; /* provider cost of those attempts (SL_HDR_COST) */
  int64_t first_failure_ms;
  int64_t not_before_ms;
  int64_t retry_delay_ms; /* of the retry copy it produces (its not-before - now) */
  int64_t started_ms;
  uint64_t call_ns; /* uv_hrtime() when process()/start() began */
  uint64_t ran_ns;  /* what its run on a worker cost (sl_inline_end) */
  char digest[65];
  char owner[112];       /* its claim's owner id (sl_claim.h) */
  int claimed;           /* it holds the claim on its input */
  uint64_t owner_seq;    /* the sequence in its owner id: a renewal's answer finds it by it */
  int64_t claim_ms;      /* monotonic ms when its claim was last known held (the request
                          * that took or renewed it was sent) */
  int claim_end;         /* it failed for good holding the claim: once its dead letter is
                          * acknowledged the claim becomes an end mark (sl__claim_finish) */
  atomic_int claim_lost; /* a renewal found its claim lost: it claims again before it calls
                          * (the worker reads it before process()) */
  int claim_skip;        /* the worker did not call for it (claim_lost): claim again */
  unsigned claim_waits;  /* times it found another replica's claim */
  unsigned agains;       /* times it ran again in place (sl_result.again_in_ms) */
  int64_t starts;        /* its start count (stage.max_starts): 0 not counted yet, -1 could not
                          * be (Redis unavailable), else the starts so far, this one included:
                          * when it ends its key is deleted, or decremented if it never ran
                          * (sl__starts_end) */
  int ran;               /* process()/start() was called for it */
  int suspect_noted;     /* its earlier unfinished starts were logged */
  int in_call;           /* counted in L->calls: process()/start() runs, the outcome not in */
  int looked_up;         /* its idempotency lookup was made (a claim that reads the
                          * stored outputs may stand in for it: sl__lookup_in_claim) */
  sl_outbox out;
  sl_result res;
  int outstanding;                 /* deliveries pending */
  sl_kafka_ticket ticket;          /* every output's delivery report: sl__on_delivery(err, job) */
  rd_kafka_resp_err_t produce_err; /* a delivery of the set failed: the first permanent
                                    * error, else the first one (0: none) */
  int rejected;                    /* Kafka refused an output for good: now a dead letter */
  int uncommitted;                 /* ends without its offset counting as done */
  int stored;                      /* outputs came from the idempotency store */
  uv_work_t work;
  uv_timer_t *timer;        /* limiter waits, produce backoff */
  job *next;                /* park FIFO / key queue */
  job *all_prev, *all_next; /* every live job, for shutdown */
  int keyed;                /* holds its key's slot */
  int in_pool;              /* process() is running on the worker pool */
  int in_async;             /* start() was called, sl_job_done() not yet */
  int64_t bytes;            /* counted in L->bytes: its message, once started plus what the
                             * stage holds for it (bytes_of, sl_job_hold) */
};

struct loop_t {
  const sl_stage_opts *o;
  const sl_common_conf *cc;
  uv_loop_t loop;
  rd_kafka_t *producer;
  sl_kafka_uv *pku;
  grp g[2]; /* inputs, retry tiers */
  int ngroups;
  sl_aredis *redis;
  sl_httpc *http; /* for async processors */
  sl_breaker *breaker;
  part *parts;
  keyq *keys;
  uv_timer_t tick;
  int64_t inflight; /* jobs taken and not finished (parked included) */
  int64_t active;   /* jobs past parking: what a drain waits for */
  /* jobs taken beyond stage.max_in_flight, waiting in order for a slot (at
   * most stage.prefetch): a slot that frees starts the next one at once,
   * not after a resume and a fetch */
  job *rq_head, *rq_tail;
  int64_t rq_len, prefetch;
  int admitting; /* admit_waiting() is running: no recursion */
  sl_metric *m_waiting;
  int64_t bytes;       /* what the jobs hold (job.bytes summed): stage.max_bytes_in_flight */
  sl_flow_limits flow; /* when fetching pauses (sl_flow.h) */
  job *jobs;           /* every live job */
  int paused_all;
  /* at a flow limit (sl_flow.h): no message is taken from the consumers
   * (what they prefetched waits there, bounded) until work finishes; still
   * at it after SL_THROTTLE_PAUSE_MS, every partition is paused instead */
  int throttled;
  int throttled_by_bytes; /* the byte limit alone was reached */
  int64_t throttled_ms;   /* since when (monotonic) */
  uv_timer_t drain_timer; /* takes what waits, once below the limits */
  int stopping;
  int closing; /* the loop has stopped: drop instead of continuing */
  int64_t stop_deadline;
  int fatal;
  volatile sig_atomic_t *stop;
  sl_retry_policy rp; /* tiers, budget, Retry-After cap (sl_retry.h) */
  char tier_label[SL_RETRY_TIERS_MAX][16];
  char tier_topic[SL_RETRY_TIERS_MAX][160];
  char limit_key[160], pause_key[160];
  /* the Lua scripts the runtime runs, by SHA-1 (sl_redis_script) */
  sl_redis_script s_limit, s_pause, s_claim_take, s_claim_release, s_claim_store, s_claim_end,
      s_starts, s_lookup;
  /* jobs waiting for the shared limiter, in order: only the head asks Redis,
   * so a backlog costs one limiter call per grant, not one per waiter */
  job *lq_head, *lq_tail;
  int lq_busy;
  uv_timer_t lq_timer;
  /* without a rate, the provider's pause (a 429's Retry-After, set by any
   * replica) as last read: one PTTL per SL_PAUSE_FRESH_MS, not per call;
   * jobs that arrive while it is asked wait for the answer, in order */
  int64_t pause_until_ms, pause_read_ms; /* monotonic; 0: never read */
  job *pq_head, *pq_tail;
  int pq_busy;
  /* input claims (sl_claim.h): this process's owner prefix, renewed while
   * their calls run */
  char owner[80];
  uint64_t owner_seq;
  uv_timer_t claim_timer;
  /* claims and stores to send at the end of this turn of the loop (batch_idle: libuv runs it
   * before it polls again, and does not block in the poll while it is armed), up to
   * SL_CLAIM_BATCH claims and SL_STORE_BATCH stores to a script */
  job *cq_head, *cq_tail;
  int cq_len;
  job *sq_head, *sq_tail;
  int sq_len;
  uv_idle_t batch_idle;
  /* start counts (stage.max_starts) to send at the end of this turn, up to
   * SL_CLAIM_BATCH to a script; the keys of the inputs that ended since, to
   * delete (one DEL, up to SL_STARTS_DEL_MAX keys) */
  job *tq_head, *tq_tail;
  int tq_len;
  char (*sdel)[256];
  int sdel_n;
  /* solo runs (sl_stage_gate.c): calls running (process()/start() until
   * their outcome); Redis commands of the start count not answered yet
   * (counts, deletions, un-counts); jobs holding a count (job.starts > 0:
   * counted, not ended); the suspect (an input that started before without
   * finishing) waiting until it is the only one counted and nothing is under
   * way, then running alone; the jobs that came meanwhile, waiting uncounted
   * in order */
  int64_t calls, counting, counted;
  job *pending, *solo;
  job *xq_head, *xq_tail;
  sl_metric *m_uncounted;
  int64_t uncounted_warned_ms;
  sl_metric *m_claim_waits, *m_claims_lost, *m_claim_ends;
  /* jobs held while the breaker is open (breaker.hold), in order */
  job *bq_head, *bq_tail;
  int64_t bq_len;
  uv_timer_t bq_timer;
  sl_metric *m_held;
  sl_metric *m_again; /* sluice_reruns_total */
  sl_metric *m_done, *m_retried, *m_dead, *m_inflight, *m_idem_hits, *m_limiter_waits,
      *m_breaker_state, *m_breaker_open, *m_oldest, *m_calls_ok, *m_calls_fail, *m_circuit_skips,
      *m_tier[SL_RETRY_TIERS_MAX], *m_calls_throttled, *m_calls_perm, *m_assigned,
      *m_oldest_waiting, *m_bytes, *m_pause_msgs, *m_pause_bytes, *m_cost;
  sl_histogram *h_call;
  sl_inline inl; /* process() on the loop or the pool (sl_inline.h) */
  /* consumer lag gauges, one per partition this process has been assigned,
   * set from what the lag thread queried (sl_stage_lag.c) */
  struct {
    char topic[128];
    int32_t partition;
    sl_metric *m;
  } lag[SL_LAG_SERIES_MAX];
  int nlag;
  sl_metric *m_lag_actionable;
  sl_lagq *lagq;
  /* the gate made a call wait on the shared limiter or a provider's 429
   * pause until then (sl__mono_ms): more replicas would wait as well */
  int64_t gate_wait_until_ms;
};

/* ---- sl_stage.c: jobs and the loop ---- */
void sl__job_free(job *j);
void sl__job_timer_release(job *j);
/* Drops a job during shutdown: its offset stays uncommitted (redelivered). */
void sl__job_drop(job *j);
/* Runs cb (a timer whose data is j) after ms; now(j) at once if no timer
 * can be allocated. */
void sl__job_after(job *j, int64_t ms, uv_timer_cb cb, void (*now)(job *));
/* A header's value as a string in buf (NULL: absent), or as a number (0). */
const char *sl__hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len);
int64_t sl__hdr_i64(const rd_kafka_message_t *m, const char *name);
double sl__hdr_cost(const rd_kafka_message_t *m);
void sl__key_release(job *j);
/* The job is over and its outputs acknowledged: its offset is done. */
void sl__job_finish(job *j);
/* Lets a job go unfinished: its offset stays uncommitted (redelivered). */
void sl__held_release(job *j);
/* Its partition was or is being taken away: it must not call the provider. */
int sl__job_stale(const job *j);
/* The job holds its key (or keys are not ordered): lookup, then the gate. */
void sl__holds_key(job *j);
/* The idempotency lookup of j (a GET; its answer goes to sl__on_lookup,
 * which continues at the gate). 0 when asked, <0 when Redis cannot be
 * (then nothing happens). */
int sl__lookup(job *j);
void sl__release_parked(loop_t *L, part *p);
/* Frees p's messages waiting for a processing slot, uncalled (p == NULL:
 * every partition's); their offsets stay uncommitted, so they come back. */
void sl__release_waiting(loop_t *L, part *p);
/* Pauses or resumes fetching as the limits on work in flight say
 * (sl_flow.h); nothing while stopping or closing. */
void sl__flow(loop_t *L);
sl_metric *sl__metric(const char *name, const char *stage, const char *extra, const char *help,
                      int gauge);
/* Monotonic milliseconds (CLOCK_MONOTONIC): for durations, never for
 * times written into messages. */
int64_t sl__mono_ms(void);

/* ---- sl_stage_group.c: partitions and rebalances ---- */
part *sl__part_get(loop_t *L, const char *topic, int32_t partition, int create);
void sl__part_drop(loop_t *L, part *p);
/* Commits every partition whose commit point moved; sync on revoke and
 * shutdown. */
void sl__commit(grp *g, int sync);
void sl__commit_all(loop_t *L, int sync);
void sl__on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                   rd_kafka_topic_partition_list_t *offsets, void *opaque);
void sl__set_pause(loop_t *L, int pause);
void sl__pause_one(loop_t *L, part *p, int pause);
void sl__revoke_finish(grp *g);
void sl__revoke_check(loop_t *L);
void sl__on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *parts, void *opaque);

/* ---- sl_stage_lag.c: consumer lag, off the loop ---- */
/* Starts the lag thread (nothing with stage.lag_interval_ms 0). Returns 0
 * or SL_E* with the reason in err. */
int sl__lag_start(loop_t *L, char *err, size_t errlen);
/* The assignment changed: the lag thread queries what is assigned now. */
void sl__lag_assigned(loop_t *L);
/* Tells the thread to stop, and the loop to take no more of its answers;
 * returns at once (a query under way goes on until its timeout). NULL-safe. */
void sl__lag_stop(loop_t *L);
/* Stops the thread and joins it (waits for a query under way: at most its
 * timeout), frees its clients and closes its handle (freed when the loop
 * runs again). Before the loop's last walk. NULL-safe. */
void sl__lag_free(loop_t *L);

/* ---- batches to Redis: claims (sl_stage_gate.c), stores (sl_stage_out.c) ---- */
/* Sends every queued claim / store now. */
void sl__claims_flush(loop_t *L);
void sl__stores_flush(loop_t *L);
/* Both flushes run before the loop polls again. */
void sl__batch_soon(loop_t *L);
/* The FIFOs of jobs linked through job.next: j goes last / the first
 * (NULL: empty). */
void sl__q_push(job **head, job **tail, job *j);
job *sl__q_pop(job **head, job **tail);
/* The jobs of one batch script (claims or stores), answered together. */
typedef struct {
  int n;
  job *jobs[SL_STORE_BATCH]; /* SL_CLAIM_BATCH is not larger */
} job_batch;
/* The batch's reply elements, per per job in order; NULL when r is not an
 * array of exactly b->n * per (an error, Redis unavailable). */
redisReply **sl__batch_reply(const job_batch *b, const redisReply *r, size_t per);

/* ---- sl_stage_gate.c: the provider gate, claims and start counts ---- */
/* keys deleted by one DEL when inputs end */
#define SL_STARTS_DEL_MAX 64
/* a start count lives this long (seconds) */
#define SL_STARTS_TTL_S 86400
void sl__gate(job *j);
/* Sends the queued start counts and the deletions of ended ones. */
void sl__starts_flush(loop_t *L);
/* j ends (finished or let go) without the process dying: its start count
 * goes (batched). */
void sl__starts_end(job *j);
/* j's call is over (its outcome is in): a solo run may start, or what
 * waited behind one go. */
void sl__call_end(job *j);
/* Starts the solo run, or the jobs waiting behind one, that may go now. */
void sl__calls_resume(loop_t *L);
/* Lets the suspect and the jobs waiting behind a solo run go, uncalled
 * (stopping). */
void sl__calls_release(loop_t *L);
/* 1 when j may skip its lookup because the claim it takes before calling
 * reads the stored outputs itself (sl_claim_take_lua): claims on, no rate
 * limiter to wait for, the breaker closed. A job the gate then holds (the
 * breaker opened, a pause) makes its lookup first, so stored outputs are
 * still answered at once. */
int sl__lookup_in_claim(const job *j);
/* A stage without a provider gate counts an input's start with its
 * idempotency lookup, in one round trip (sl_claim_lookup_lua): 0 sent
 * (the answer reuses stored outputs or runs the job, counted), else
 * nothing sent and the caller looks up alone. */
int sl__lookup_counted(job *j);
/* j's start count key (sl_idem_starts_key), or "" */
void sl__starts_key(const job *j, char *buf, size_t len);
/* j's start count was deleted with its stored outputs (sl_claim_store_lua):
 * it is over, as sl__starts_end would have made it */
void sl__starts_stored(job *j);
/* This process paused the provider for ms (a 429): its own calls see the
 * pause at once, before the pause key is read again. */
void sl__pause_noted(loop_t *L, int64_t ms);
job *sl__bq_pop(loop_t *L);
void sl__on_bq_timer(uv_timer_t *t);
void sl__claim_release(job *j);
/* j ends (sl__job_finish) still holding its claim: a dead letter
 * acknowledged (j->claim_end, not fatal) turns it into the end mark, else
 * it is released. */
void sl__claim_finish(job *j);
void sl__on_claim_renew(uv_timer_t *t);
/* j may not call on its claim: a renewal found it lost, or none confirmed
 * it for a lease; sl__claim_again claims again (then calls, waits or ends). */
int sl__claim_stale(const job *j);
void sl__claim_again(job *j);
void sl__run_process(job *j);

/* ---- sl_stage_out.c: outcomes, the store, producing ---- */
void sl__on_delivery(rd_kafka_resp_err_t err, void *opaque);
void sl__produce(job *j);
void sl__add_dead_letter(job *j);
int64_t sl__retry_after(const loop_t *L, const sl_result *res);
void sl__to_retry(job *j);
void sl__idem_key(job *j, char *buf, size_t len);
int sl__use_stored(job *j, const char *v, size_t n);
void sl__on_lookup(redisReply *r, void *ud);
void sl__work_cb(uv_work_t *w);
void sl__after_work_cb(uv_work_t *w, int status);
void sl__complete(job *j);

#endif
