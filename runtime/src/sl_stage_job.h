/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_job.h — a stage's jobs: one per input message taken, from the
 * consumer to its finish. The leaf of the stage runtime: every other
 * runtime file includes it, it includes none of them.
 *
 * The runtime is a star (docs/architecture.md, The stage runtime):
 *
 *   sl_stage.c        the loop: the only orchestrator. Takes messages,
 *                     parks, admits, orders by key, serves rebalances, the
 *                     tick, start-up and shutdown; calls every module below
 *                     and hands each job to the owner of its state;
 *   sl_stage_group.c  the consumer groups: commits, pausing, assign/revoke;
 *   sl_stage_lag.c    consumer lag, off the loop on a thread of its own;
 *   sl_stage_gate.c   the provider gate: breaker, limiter, 429 pause,
 *                     claims, start counts and solo runs;
 *   sl_stage_work.c   running the plugin's work: process() on the loop or
 *                     the pool, start() and sl_job_done();
 *   sl_stage_out.c    outcomes: the idempotency store, retry copies, dead
 *                     letters, producing and delivery;
 *   sl_stage_part.c   the partitions taken from: offsets, parked retries;
 *   sl_stage_job.c    this: jobs, their states, the registry;
 *   sl_stage_conf.c   the process's settings;
 * with pure cores tested on their own: sl_jobstate (the transitions),
 * sl_admit (the gate's decisions), sl_rebalance (revoke and assign),
 * sl_offsets, sl_retry, sl_flow, sl_idem, sl_outbox. Calls run one way, down
 * that list (tests/unit/test_layers.sh reads the includes): a module reports
 * back only by asking for a job's transition (sl__job_to), and the loop
 * hands the job to its new state's owner (sl_jobstate.h names them).
 *
 * Each module owns its struct (embedded in the loop's) and its section of
 * struct sl_job below; only that module writes them. Everything runs on the
 * loop thread, except the work on the pool (sl_stage_work.c) and the lag
 * thread (its own struct, under its mutex).
 */
#ifndef SLUICE_SL_STAGE_JOB_H
#define SLUICE_SL_STAGE_JOB_H

#define _POSIX_C_SOURCE 200809L
#include "sl_queue.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_defer.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_jobstate.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_retry.h"
#include "sluice/sl_stage.h"
#include "sluice/sl_trace.h"

#include <signal.h>
#include <stdatomic.h>
#include <uv.h>

/* the phases a job's span records (a run again adds more; past this
 * many, the last phase runs on to the end) */
#define SL_JOB_SEGMENTS 12

typedef struct sl_job job;
typedef struct sl_part part; /* sl_stage_part.h */
struct sl_gate;
struct sl_output;
struct sl_work;

/* What the runtime's modules share: the settings and clients (set up by
 * the loop before the first job, read-only after), the registry of live
 * jobs (this file's), and the loop's hand-over. */
#define SL_TIER_PARTS_MAX 256 /* retry tier partitions a replica keeps track of owning */

typedef struct sl_jobs {
  const sl_stage_opts *o;
  const sl_common_conf *cc;
  uv_loop_t *uv;
  sl_aredis *redis;
  sl_httpc *http; /* for async processors */
  rd_kafka_t *producer;
  volatile sig_atomic_t *stop;
  const sl_retry_policy *rp;     /* tiers, budget, Retry-After cap */
  const char (*tier_topic)[160]; /* the retry tiers' topics, rp->ntiers of them */
  const char (*tier_label)[16];  /* and their delays as written ("5s") */
  int stopping;                  /* the loop's: SIGTERM, draining */
  int closing;                   /* the loop's: the loop has stopped, drop instead of continuing */
  /* the modules, for what a job's callbacks reach */
  struct sl_gate *gate;
  struct sl_output *out;
  struct sl_work *work;
  /* the loop's: acts on j's new state (j->state; from: the one before) */
  void (*handover)(job *j, sl_job_state from);
  /* the loop's: the producer failed for good (sl_kafka_fatal); renews it
   * from a timer of its own (never inside a delivery report), or stops */
  void (*renew_producer)(struct sl_jobs *R);
  /* the group's (sl_stage_group.c, through sl__tier_own): the retry tiers'
   * partitions this replica's retry group owns, bit p of word p / 64 for
   * tier t (partitions from SL_TIER_PARTS_MAX on are not counted); a
   * deferral goes to one of them, so that it comes back to this replica's
   * lines whose schedule it follows (sl_stage_fair.h) */
  uint64_t tier_owned[SL_RETRY_TIERS_MAX][SL_TIER_PARTS_MAX / 64];
  /* the registry (this file's) */
  job *all;         /* every live job, for shutdown and renewals */
  int64_t inflight; /* jobs taken and not freed (parked included) */
  int64_t bytes;    /* what they hold (job.bytes summed): stage.max_bytes_in_flight */
  sl_metric *m_inflight, *m_bytes;
  /* the loop's (sl_stage_job.c): each topic's process span name, consumer
   * group and retry tier (-1: an input), made once when first traced */
  struct sl__span_names {
    const char *topic; /* rd_kafka_topic_name's: compared as a pointer */
    int tier;
    char span[176], group[96];
  } names[SL_RETRY_TIERS_MAX + 4];
  int nnames;
} sl_jobs;

struct sl_job {
  /* ---- the registry's (sl_stage_job.c) ---- */
  sl_jobs *R;
  sl_job_state state;
  rd_kafka_message_t *m;
  part *p;
  uint64_t epoch; /* p->ring.epoch when taken */
  int64_t offset;
  char key[128];
  int bucket;               /* its submission's Redis bucket (sl_rkey: the key up to '/') */
  char digest[65];          /* SHA-256 of the payload (idempotent stages) */
  int64_t bytes;            /* counted in R->bytes: its message, plus what the stage holds for it */
  sl_qlink link;            /* the one queue it waits in, if any */
  uv_timer_t *timer;        /* its one timer (sl__job_after) */
  job *all_prev, *all_next; /* R->all */
  /* ---- the loop's (sl_stage.c): from its headers ---- */
  unsigned attempts;              /* failed attempts before this one */
  double cost_before;             /* provider cost of those attempts (SL_HDR_COST) */
  char tenant[SL_TENANT_MAX + 1]; /* SL_HDR_TENANT, or one its processor found; "" */
  int64_t first_failure_ms;
  int64_t not_before_ms;
  int64_t started_ms;
  int keyed;            /* holds its key's slot (stage.per_key_order) */
  int deferred;         /* the gate sends it through a retry tier until not_before_ms, no attempt */
  int was_deferred;     /* it is such a copy (SL_HDR_ERROR_CLASS "deferred") */
  int64_t defer_due_ms; /* a deferral's slot (SL_HDR_DEFER_DUE, unix ms): sl_stage_fair.h */
  int32_t defer_part;   /* the tier partition its deferral goes to; -1: its key's */
  char defer_origin[SL_DEFER_ORIGIN_MAX]; /* SL_HDR_DEFER_HOP's input ("<partition>.<offset>"); "":
                                             none */
  int64_t defer_hop;                      /* and its hop (0: not a deferred copy) */
  int twin; /* a deferred copy of an older hop than the newest: dropped */
  /* ---- the gate's (sl_stage_gate.c) ---- */
  char owner[112];       /* its claim's owner id (sl_claim.h) */
  int claimed;           /* it holds the claim on its input */
  uint64_t owner_seq;    /* the sequence in its owner id: a renewal's answer finds it by it */
  int64_t claim_ms;      /* monotonic ms when its claim was last known held */
  int claim_end;         /* failed for good holding the claim: an end mark once its dead
                          * letter is acknowledged */
  atomic_int claim_lost; /* a renewal found its claim lost (read by the worker too) */
  unsigned claim_waits;  /* times it found another replica's claim */
  int64_t starts;        /* its start count (stage.max_starts): 0 not counted yet, -1 could not
                          * be, else the starts so far, this one included */
  int ran;               /* process()/start() was called for it */
  int suspect_noted;     /* its earlier unfinished starts were logged */
  int in_call;           /* counted in the gate's calls: called, the outcome not in */
  sl_metric *m_calling;  /* and in its tenant's running calls (sl_stage_fair.h) */
  int looked_up;         /* its idempotency lookup was made */
  /* its data key as its claim read it (sl_stage_opts.data_key), handed to
   * the outbox before each call (sl_stage_work.c); wiped when freed */
  int dk_state;                /* SL_KEY_*: SL_KEY_UNREAD when not read */
  size_t dk_sid_len;           /* its key's submission id (a prefix) when its claim read it */
  uint8_t dk[SL_SEAL_KEY_LEN]; /* SL_KEY_FOUND: the key */
  long long claim_count;       /* its claim's start count while the store's marker is asked */
  /* ---- the work's (sl_stage_work.c) ---- */
  uv_work_t work;
  uint64_t call_ns; /* uv_hrtime() when process()/start() began */
  uint64_t ran_ns;  /* what its run on a worker cost (sl_inline_end) */
  int claim_skip;   /* the worker did not call for it (claim_lost) */
  /* ---- the outbox's (sl_stage_out.c) ---- */
  sl_outbox out;
  sl_result res;
  int64_t retry_delay_ms; /* of the retry copy it produces */
  unsigned agains;        /* times it ran again in place (sl_result.again_in_ms) */
  int outstanding;        /* deliveries pending */
  sl_kafka_ticket ticket; /* every output's delivery report */
  rd_kafka_resp_err_t produce_err;
  int rejected;    /* Kafka refused an output for good: now a dead letter */
  int uncommitted; /* ends without its offset counting as done */
  int stored;      /* outputs came from the idempotency store */
  int store_reply; /* its store script's answer: 1 stored (claim and count went with it),
                    * 2 stored and its claim released there, 0 not stored */
  /* ---- the trace's (sl_stage_job.c): its span, and where its time went ---- */
  sl_trace_ctx tc;        /* its span: a child of its message's context, or of a new trace */
  uint8_t parent_span[8]; /* the span it is a child of (its message's context) */
  int has_parent;         /* its message carried a context (or one was adopted) */
  char trace_hex[33];     /* tc's trace id, for its log lines */
  int64_t taken_ns;       /* unix ns when it was taken */
  unsigned nseg;          /* its phases so far: queued, parked, gated, running, producing */
  struct {
    unsigned char phase;
    int64_t at_ns;
  } seg[SL_JOB_SEGMENTS];
};

/* Takes m into a new job (NEW, counted in the registry with m's bytes);
 * NULL without memory (m untouched). */
job *sl__job_new(sl_jobs *R, rd_kafka_message_t *m);

/* The one transition function: j moves to `to` (sl_job_may must allow it,
 * else the move is logged as a defect and made all the same), and the
 * loop's hand-over acts on it. j may be freed on return. */
void sl__job_to(job *j, sl_job_state to);

/* j's message carried no trace context and its processor named the trace
 * it belongs to (sl_result.traceparent): j's span joins it. Before its
 * outputs are produced (they carry j's context). */
void sl__job_trace_adopt(job *j, const char *traceparent);
/* The headers an output of j carries its context in, added to hs. */
void sl__job_trace_headers(const job *j, rd_kafka_headers_t *hs);

/* Frees a job in a terminal state: out of the registry, its timer, its
 * outputs and its message. */
void sl__job_free(job *j);

/* j holds delta bytes more (or fewer). */
void sl__job_bytes(job *j, int64_t delta);

/* Runs cb (a timer whose data is j) after ms; now(j) at once if no timer
 * can be allocated. */
void sl__job_after(job *j, int64_t ms, uv_timer_cb cb, void (*now)(job *));
void sl__job_timer_release(job *j);

/* A header's value as a string in buf (NULL: absent), or as a number (0). */
const char *sl__hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len);
int64_t sl__hdr_i64(const rd_kafka_message_t *m, const char *name);
double sl__hdr_cost(const rd_kafka_message_t *m);

/* Sets j's tenant to t (a header's value or a processor's finding; NULL:
 * none): kept when valid (sl_tenant_valid), else "" with a warning (at
 * most one a minute: a header is anyone's to write). Loop thread. */
void sl__job_tenant(job *j, const char *t);

/* j's idempotency store key (sl_idem_key), or "" */
void sl__idem_key(const job *j, char *buf, size_t len);

/* Partition `partition` of retry tier t is this replica's (on) or no
 * longer (off): R->tier_owned. Out of range: nothing. */
void sl__tier_own(sl_jobs *R, int t, int32_t partition, int on);

/* a series labelled with the stage (and extra labels) */
sl_metric *sl__metric(const char *name, const char *stage, const char *extra, const char *help,
                      int gauge);

/* Monotonic milliseconds (CLOCK_MONOTONIC): for durations, never for
 * times written into messages. */
int64_t sl__mono_ms(void);

/* The jobs of one batch script to Redis (claims, counts or stores),
 * answered together. */
typedef struct {
  int n;
  job *jobs[SL_STORE_BATCH]; /* SL_CLAIM_BATCH is not larger */
} job_batch;

/* The batch's reply elements, per per job in order; NULL when r is not an
 * array of exactly b->n * per (an error, Redis unavailable). */
redisReply **sl__batch_reply(const job_batch *b, const redisReply *r, size_t per);

/* the job of a queue's link */
static inline job *sl__job_of(sl_qlink *l) { return l ? SL_QUEUE_ITEM(l, job, link) : NULL; }
static inline job *sl__job_pop(sl_queue *q) { return sl__job_of(sl_queue_pop(q)); }
/* The first job of q in Redis bucket `bucket` (sl_rkey), taken out, the
 * others left in their order; bucket < 0: the first job. A batch of Redis
 * keys holds one bucket's (one Redis Cluster slot): with redis.buckets = 0
 * every job is in bucket 0. */
job *sl__job_pop_bucket(sl_queue *q, int bucket);

#endif
