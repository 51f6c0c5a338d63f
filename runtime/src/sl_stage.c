/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage.c — the stage runtime's loop (see sl_stage.h for the contract,
 * sl_stage_job.h for how the runtime is split): the only orchestrator.
 *
 * Everything but process() runs on one libuv loop:
 *   - the consumer's queue wakes the loop through a pipe (sl_kafka_uv); each
 *     message becomes a job; max_in_flight jobs run at once, up to
 *     stage.prefetch more wait in order for a slot, so a slot that frees
 *     never waits for a fetch; a waiting job starts only while the bytes in
 *     flight (each job's message plus what the stage holds for it: reserved
 *     when it starts, corrected by sl_job_hold) are under
 *     max_bytes_in_flight; at max_in_flight + prefetch messages or at
 *     max_bytes_in_flight bytes no more messages are taken from the
 *     consumers (what they prefetched, at most 8 MiB, waits in librdkafka),
 *     and taking starts again when half the waiting ones have started and
 *     the bytes are below 80% (sl_flow.h); a stage still at a limit after
 *     SL_THROTTLE_PAUSE_MS pauses all partitions instead, so the consumers
 *     keep being polled (rebalances) and memory follows in-flight work,
 *     never the backlog. Not pausing at once matters: a pause drops what
 *     was prefetched and a resume fetches it again, and a stage draining a
 *     backlog at full speed reaches its limit every few hundred messages
 *     (bench/cost: the consumer's and the broker's fetching cost more than
 *     the stage's own work);
 *   - per partition a sorted ring of in-flight offsets: a job marks its
 *     offset done, the head is popped while done, and the next offset to
 *     read is committed (asynchronously, coalesced every 200 ms;
 *     synchronously on revoke and shutdown);
 *   - retry-tier messages that are not yet due wait in a FIFO on their
 *     partition, which is paused; a timer fires when the head is due;
 *   - every job moves through the states of sl_jobstate.h; the modules
 *     hand it on with sl__job_to and handover() below calls the new
 *     state's owner;
 *   - rebalances arrive here and are carried out by the groups, the gate
 *     and the loop's own queues in turn (sl_stage_group.h).
 * A job is owned by the loop except while process() runs on the pool; it
 * holds its rd_kafka_message_t until it is finished.
 */
#include "sl_stage_gate.h"
#include "sl_stage_group.h"
#include "sl_stage_job.h"
#include "sl_stage_lag.h"
#include "sl_stage_out.h"
#include "sl_stage_part.h"
#include "sl_stage_work.h"
#include "sluice/sl_err.h"
#include "sluice/sl_flow.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A stage full this long pauses its partitions: nothing is prefetched for
 * it any more, and the consumers are polled (rebalances, the poll interval)
 * while it waits. */
#define SL_THROTTLE_PAUSE_MS 1000

/* How late a batched log line may be written (log.batch); the tick
 * (every 100 ms) flushes as well. */
#define SL_LOG_BATCH_MS 100

/* Per-key ordering: the key's queue of waiting jobs. */
typedef struct keyq {
  char key[128];
  UT_hash_handle hh;
  sl_queue waiting; /* in arrival order */
} keyq;

typedef struct loop_t {
  sl_jobs R; /* what the modules share; the registry */
  uv_loop_t uv;
  sl_retry_policy rp; /* tiers, budget, Retry-After cap (sl_retry.h) */
  char tier_label[SL_RETRY_TIERS_MAX][16];
  char tier_topic[SL_RETRY_TIERS_MAX][160];
  sl_kafka_uv *pku;
  /* the modules */
  sl_parts P;
  sl_groups S;
  sl_gate G;
  sl_work W;
  sl_output X;
  sl_lagq *lag;
  /* the loop's own */
  keyq *keys;
  uv_timer_t tick;
  int64_t active; /* jobs past parking: what a drain waits for */
  /* jobs taken beyond stage.max_in_flight, waiting in order for a slot (at
   * most stage.prefetch): a slot that frees starts the next one at once */
  sl_queue rq;
  int64_t prefetch;
  int admitting;       /* admit_waiting() is running: no recursion */
  sl_flow_limits flow; /* when fetching pauses (sl_flow.h) */
  /* at a flow limit: no message is taken from the consumers (what they
   * prefetched waits there, bounded) until work finishes; still at it after
   * SL_THROTTLE_PAUSE_MS, every partition is paused instead */
  int throttled;
  int throttled_by_bytes; /* the byte limit alone was reached */
  int64_t throttled_ms;   /* since when (monotonic) */
  uv_timer_t drain_timer; /* takes what waits, once below the limits */
  int64_t stop_deadline;
  sl_metric *m_waiting, *m_oldest, *m_oldest_waiting, *m_pause_msgs, *m_pause_bytes;
  /* the producer's settings, kept for a renewal (renew_producer) */
  char client[128], props[1024];
  const char *pkv[2 * 16 + 1];
  uv_timer_t renew_timer;
  sl_kafka_renewals renewals;
  /* producers replaced while a job on the pool still held one (its
   * processor may emit through it): destroyed once none does */
  rd_kafka_t *retired[SL_KAFKA_RENEW_MAX * 2];
  int nretired;
} loop_t;

static loop_t *loop_of(const sl_jobs *R) {
  return (loop_t *)(void *)((char *)R - offsetof(loop_t, R));
}

static void admit_waiting(loop_t *L);
static void holds_key(job *j);

/* ---- work in flight: fetching pauses and resumes (sl_flow.h) ---- */

static void drain_consumer(void *ud);
static void on_drain_timer(uv_timer_t *t) {
  loop_t *L = t->data;
  for (int i = 0; i < L->S.n; i++) drain_consumer(&L->S.g[i]);
}

/* Pauses or resumes fetching as the limits on work in flight say;
 * nothing while stopping or closing. */
static void flow(loop_t *L) {
  if (L->R.stopping || L->R.closing) return;
  int by_bytes = 0;
  switch (sl_flow_next(&L->flow, L->S.paused_all || L->throttled, L->R.inflight, L->R.bytes,
                       &by_bytes)) {
  case SL_FLOW_PAUSE: /* take no more for now; pause if it lasts (on_tick) */
    L->throttled = 1;
    L->throttled_ms = sl__mono_ms();
    L->throttled_by_bytes = by_bytes;
    break;
  case SL_FLOW_RESUME:
    if (L->S.paused_all) sl__groups_pause(&L->S, 0);
    if (L->throttled) {
      L->throttled = 0; /* on the next turn of the loop, not inside whoever finished */
      uv_timer_start(&L->drain_timer, on_drain_timer, 0, 0);
    }
    break;
  case SL_FLOW_KEEP:
    break;
  }
}

void sl_job_hold(job *j, int64_t held) {
  if (!j) return;
  int64_t want = (j->m ? (int64_t)j->m->len : 0) + (held > 0 ? held : 0);
  int64_t delta = want - j->bytes;
  sl__job_bytes(j, delta);
  if (delta < 0) admit_waiting(loop_of(j->R)); /* room for a waiting job */
  flow(loop_of(j->R));
}

/* ---- the partitions' assignment ---- */

/* The assignment changed: the lag thread queries it, readiness follows. */
static void assignment_changed(loop_t *L) {
  const rd_kafka_topic_partition_list_t *a[2] = {L->S.g[0].assignment, L->S.g[1].assignment};
  sl__lag_assigned(L->lag, a);
  sl_admin_set_ready(L->R.o->admin, !sl__groups_revoking(&L->S)); /* not while handing over */
}

/* Work ended on a partition being revoked: the groups with none left are
 * handed over. */
static void revoke_check(loop_t *L) {
  if (sl__groups_revoke_check(&L->S)) assignment_changed(L);
}

/* ---- per-key order ---- */

/* j takes its key, or waits behind the job holding it (KEYQ): 1 when it
 * holds it (or keys are not ordered). */
static int key_take(loop_t *L, job *j) {
  if (!L->R.cc->per_key_order || !j->key[0]) return 1;
  keyq *q = NULL;
  HASH_FIND_STR(L->keys, j->key, q);
  if (q) { /* someone holds the key: wait behind it */
    sl__job_to(j, SL_JOB_KEYQ);
    return 0;
  }
  q = calloc(1, sizeof *q);
  if (q) {
    snprintf(q->key, sizeof q->key, "%s", j->key);
    HASH_ADD_STR(L->keys, key, q);
    j->keyed = 1;
  }
  return 1;
}

static void key_wait(loop_t *L, job *j) {
  keyq *q = NULL;
  HASH_FIND_STR(L->keys, j->key, q);
  if (q) sl_queue_push(&q->waiting, &j->link);
}

/* j ends: its key goes to the next job waiting for it. */
static void key_release(loop_t *L, job *j) {
  if (!j->keyed) return;
  keyq *q = NULL;
  HASH_FIND_STR(L->keys, j->key, q);
  j->keyed = 0;
  if (!q) return;
  job *next = sl__job_pop(&q->waiting);
  if (!next) {
    HASH_DEL(L->keys, q);
    free(q);
    return;
  }
  next->keyed = 1; /* it finds what this one stored */
  if (L->R.closing)
    sl__job_to(next, SL_JOB_DROPPED);
  else
    holds_key(next);
}

/* ---- ends ---- */

/* The job is over: its offset is done once everything it produced is
 * acknowledged (the outbox guarantees that). After a fatal producer error
 * no job counts as done: its outputs may not all be written, and the
 * offsets committed on the way out must not pass them. */
static void finish(loop_t *L, job *j) {
  int revoking = j->p && j->p->revoking;
  sl__job_timer_release(j);
  key_release(L, j);
  sl__gate_finished(j, L->X.fatal); /* a dead letter's claim becomes its end mark */
  if (!L->X.fatal && !j->uncommitted && j->p && !j->p->revoked && j->epoch == j->p->ring.epoch)
    sl_offsets_done(&j->p->ring, j->epoch, j->offset);
  L->active--;
  sl__job_free(j);
  admit_waiting(L);
  flow(L);
  if (revoking) revoke_check(L);
}

/* Lets a started job go without finishing it: its offset stays uncommitted
 * and the message is redelivered (to this stage or the partition's next
 * owner). One not started yet (parked, waiting for a slot) is just freed. */
static void release(loop_t *L, job *j, sl_job_state from) {
  if (from == SL_JOB_PARKED || from == SL_JOB_WAITING) {
    sl__job_free(j);
    return;
  }
  int revoking = j->p && j->p->revoking;
  sl__job_timer_release(j);
  key_release(L, j);
  sl__gate_released(j); /* it did not die on it: its start is not charged */
  L->active--;
  sl__job_free(j);
  admit_waiting(L);
  flow(L);
  if (revoking) revoke_check(L);
}

/* The loop's hand-over (sl_jobs.handover): j is in a new state; its owner
 * acts on it. */
static void park(loop_t *L, job *j);
static void admit(loop_t *L, job *j);

static void handover(job *j, sl_job_state from) {
  loop_t *L = loop_of(j->R);
  switch (j->state) {
  case SL_JOB_NEW:
    return;
  case SL_JOB_PARKED:
    park(L, j);
    return;
  case SL_JOB_WAITING:
    admit(L, j);
    return;
  case SL_JOB_KEYQ:
    key_wait(L, j);
    return;
  case SL_JOB_LOOKUP:
    sl__out_lookup(j);
    return;
  case SL_JOB_GATE:
    sl__gate_enter(j);
    return;
  case SL_JOB_CLAIM:
    sl__gate_claim(j);
    return;
  case SL_JOB_CALL:
    sl__work_call(j);
    return;
  case SL_JOB_POOL: /* queued by the work */
    return;
  case SL_JOB_OUTCOME:
    sl__gate_outcome(j);
    if (L->R.closing)
      sl__job_to(j, SL_JOB_DROPPED);
    else
      sl__out_outcome(j);
    return;
  case SL_JOB_STORED:
    sl__gate_stored(j);
    sl__out_produce(j);
    return;
  case SL_JOB_REUSE:
    sl__out_reuse(j);
    return;
  case SL_JOB_FINISHED:
    finish(L, j);
    return;
  case SL_JOB_RELEASED:
    release(L, j, from);
    return;
  case SL_JOB_DROPPED:
  case SL_JOB_NSTATES:
    sl__job_free(j); /* redelivered: its offset stays uncommitted */
    return;
  }
}

/* ---- taking messages ---- */

/* A slot is free, and the bytes in flight leave room (or nothing runs: a
 * job larger than the limit still runs, alone). */
static int may_start(const loop_t *L) {
  if (L->active >= L->R.cc->max_in_flight) return 0;
  return L->R.cc->max_bytes_in_flight <= 0 || L->R.bytes < L->R.cc->max_bytes_in_flight ||
         L->active == 0;
}

/* The job may run (it holds its key, or keys are not ordered): the
 * idempotency lookup, then the gate. A job handed its key by the one
 * before it comes here too, so it finds what that one stored. */
static void holds_key(job *j) {
  if (j->R->o->idempotent) {
    sl_sha256_hex(j->m->payload, j->m->len, j->digest);
    /* the gate may read stored outputs itself: one round trip, not two */
    if (!sl__gate_looks_up(j)) {
      sl__job_to(j, SL_JOB_LOOKUP);
      return;
    }
  }
  sl__job_to(j, SL_JOB_GATE);
}

/* Past parking: the bytes it will hold reserved, then per-key order, the
 * idempotency lookup and the gate. */
static void start(loop_t *L, job *j) {
  L->active++;
  j->started_ms = sl_now_ms();
  if (L->R.o->bytes_of) {
    int64_t r = L->R.o->bytes_of(L->R.o->ud, j->m);
    if (r > 0) sl__job_bytes(j, r);
  }
  flow(L); /* at a limit: nothing more is taken until work finishes */
  if (key_take(L, j)) holds_key(j);
}

/* WAITING: runs the job if a slot is free, else it waits in order. */
static void admit(loop_t *L, job *j) {
  if (!L->rq.head && may_start(L)) {
    start(L, j);
    return;
  }
  sl_queue_push(&L->rq, &j->link);
  sl_metric_set(L->m_waiting, L->rq.len);
}

/* Slots or bytes freed: start the waiting jobs they make room for (while
 * stopping, nothing new starts: what waits is redelivered after the
 * restart). Fetching resumes by flow(), once half the prefetch has
 * started. */
static void admit_waiting(loop_t *L) {
  if (L->admitting || L->R.stopping || L->R.closing) return;
  L->admitting = 1; /* a job may end inside start(): it must not recurse here */
  while (L->rq.head && may_start(L)) start(L, sl__job_pop(&L->rq));
  L->admitting = 0;
  sl_metric_set(L->m_waiting, L->rq.len);
}

static int of_part(sl_qlink *l, void *p) {
  const part *jp = sl__job_of(l)->p;
  return p ? jp == p : jp && jp->revoking;
}

/* Lets go of the jobs waiting for a slot, uncalled, of p (NULL: of every
 * partition being revoked; all: everyone's); their offsets stay
 * uncommitted, so they come back. */
static void release_waiting(loop_t *L, part *p, int all) {
  sl_queue gone = {NULL, NULL, 0};
  if (all) {
    gone = L->rq;
    sl_queue_forget(&L->rq);
  } else {
    sl_queue_split(&L->rq, 0, of_part, p, &gone);
  }
  job *j;
  while ((j = sl__job_pop(&gone)) != NULL) sl__job_to(j, SL_JOB_RELEASED);
  sl_metric_set(L->m_waiting, L->rq.len);
}

static void on_park_timer(uv_timer_t *t) {
  part *p = t->data;
  loop_t *L = p->park_timer.loop->data;
  int64_t now = sl_now_ms();
  job *j;
  while ((j = sl__part_due(p, now)) != NULL) sl__job_to(j, SL_JOB_WAITING);
  int64_t due = sl__part_next_due(p);
  if (due)
    uv_timer_start(&p->park_timer, on_park_timer, (uint64_t)(due > now ? due - now : 0), 0);
  else if (p->paused_for_park)
    sl__group_pause_one(&L->S, p, 0);
}

/* PARKED: not due (or queued behind one that is not): park, pause, set
 * the timer. */
static void park(loop_t *L, job *j) {
  part *p = j->p;
  int first = !p->parked.head;
  sl__part_park(p, j);
  if (!p->paused_for_park) sl__group_pause_one(&L->S, p, 1);
  if (first) {
    int64_t now = sl_now_ms();
    uv_timer_start(&p->park_timer, on_park_timer,
                   (uint64_t)(j->not_before_ms > now ? j->not_before_ms - now : 0), 0);
  }
}

/* A retry copy waits until it is due, behind those parked before it. */
static int must_park(const job *j, int64_t now) {
  return j->p->retry_tier >= 0 && (j->p->parked.head || j->not_before_ms > now);
}

/* The job's headers: its attempts, cost and when it is due. */
static void job_headers(loop_t *L, job *j) {
  const rd_kafka_message_t *m = j->m;
  j->attempts = (unsigned)sl__hdr_i64(m, SL_HDR_ATTEMPT);
  j->cost_before = sl__hdr_cost(m);
  char tenant[SL_TENANT_MAX + 2]; /* one byte more: a longer one is refused, not cut */
  sl__job_tenant(j, sl__hdr(m, SL_HDR_TENANT, tenant, sizeof tenant));
  j->first_failure_ms = sl__hdr_i64(m, SL_HDR_FIRST_FAILURE);
  j->not_before_ms = sl__hdr_i64(m, SL_HDR_NOT_BEFORE);
  char cls[16];
  j->was_deferred = j->p->retry_tier >= 0 && sl__hdr(m, SL_HDR_ERROR_CLASS, cls, sizeof cls) &&
                    strcmp(cls, "deferred") == 0;
  j->defer_due_ms = j->was_deferred ? sl__hdr_i64(m, SL_HDR_DEFER_DUE) : 0;
  char hop[SL_DEFER_ORIGIN_MAX + 24];
  if (!j->was_deferred || !sl__hdr(m, SL_HDR_DEFER_HOP, hop, sizeof hop) ||
      sl_defer_hop_parse(hop, j->defer_origin, sizeof j->defer_origin, &j->defer_hop) != 0)
    j->defer_hop = 0; /* none, or not ours to read: no twin check */
  if (j->p->retry_tier >= 0) {
    /* the header is the sending replica's clock: never wait longer than
     * the delay it chose (or, without one, this tier's delay or the
     * Retry-After cap) from now, whatever it says (a clock ahead, a copy
     * written before the cap existed) */
    j->not_before_ms = sl_retry_due(&L->rp, j->p->retry_tier, j->not_before_ms,
                                    sl__hdr_i64(m, SL_HDR_DELAY), sl_now_ms());
  }
}

/* Tracks j's offset on its partition: 0, or -1 when it is not taken (its
 * partition was taken away, or no memory). */
static int track(loop_t *L, job *j) {
  const rd_kafka_message_t *m = j->m;
  part *p = sl__part_get(&L->P, rd_kafka_topic_name(m->rkt), m->partition, 1);
  if (p && (p->revoking || p->revoked)) return -1; /* fetched before it was taken away */
  int64_t ts = rd_kafka_message_timestamp(m, NULL);
  int took = p ? sl_offsets_take(&p->ring, m->offset, ts > 0 ? ts : sl_now_ms()) : SL_ENOMEM;
  if (took < 0) {
    sl_log(SL_LOG_ERROR, NULL, "out of memory tracking a message");
    return -1;
  }
  if (took == 1) {
    /* the consumer went back (an offset reset, a seek): everything from
     * here is delivered again, so what waits parked is let go (it comes
     * back) and jobs still running no longer count for the commit */
    sl_log(SL_LOG_WARN, NULL, "%s [%d] refetched from offset %lld: a new epoch of its offsets",
           p->id.topic, (int)p->id.partition, (long long)m->offset);
    sl__part_release_parked(p);
    release_waiting(L, p, 0);
    if (p->paused_for_park) sl__group_pause_one(&L->S, p, 0);
  }
  j->p = p;
  j->epoch = p->ring.epoch;
  return 0;
}

static void take(loop_t *L, rd_kafka_message_t *m) {
  job *j = sl__job_new(&L->R, m);
  if (!j) {
    /* cannot track it: leave it uncommitted; it is redelivered later */
    sl_log(SL_LOG_ERROR, NULL, "out of memory taking a message");
    rd_kafka_message_destroy(m);
    return;
  }
  if (track(L, j) != 0) { /* not taken: its owner reads it, or it comes again */
    sl__job_free(j);
    return;
  }
  j->ticket = (sl_kafka_ticket){sl__on_delivery, j, 0};
  job_headers(L, j);
  flow(L);
  sl__job_to(j, must_park(j, sl_now_ms()) ? SL_JOB_PARKED : SL_JOB_WAITING);
}

static void drain_consumer(void *ud) {
  grp *g = ud;
  loop_t *L = loop_of(g->S->R);
  rd_kafka_message_t *m;
  while (g->rk && !L->throttled && (m = rd_kafka_consumer_poll(g->rk, 0)) != NULL) {
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        sl_log(SL_LOG_WARN, NULL, "consume: %s", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    if (L->R.stopping) { /* not taken: stays uncommitted, redelivered later */
      rd_kafka_message_destroy(m);
      continue;
    }
    take(L, m);
  }
}

/* ---- rebalances: the groups carry them out, the loop lets go of what
 * waits on partitions taken away ---- */

static void on_revoke_timer(uv_timer_t *t) {
  grp *g = t->data;
  sl__group_revoke_finish(g);
  assignment_changed(loop_of(g->S->R));
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
  grp *g = opaque;
  loop_t *L = loop_of(g->S->R);
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    sl__group_assign(g, rk, parts);
    assignment_changed(L);
    return;
  }
  sl__group_revoke_begin(g, rk, parts); /* paused, marked, their parked let go */
  assignment_changed(L);
  release_waiting(L, NULL, 0);       /* not started: redelivered */
  sl__gate_release_partition(&L->G); /* held, or queued at the limiter: the same */
  if (sl__group_revoke_decide(g))
    assignment_changed(L);
  else
    uv_timer_start(&g->revoke_timer, on_revoke_timer, (uint64_t)L->R.cc->revoke_wait_ms, 0);
}

/* ---- a producer that failed for good ---- */

/* Is rk held by a job whose processor runs on the pool (and may emit
 * through it at any moment)? */
static int held_on_pool(const loop_t *L, const rd_kafka_t *rk) {
  for (const job *j = L->R.all; j; j = j->all_next)
    if (j->state == SL_JOB_POOL && j->out.producer == rk) return 1;
  return 0;
}

/* Destroys the retired producers no job on the pool holds any more. */
static void destroy_retired(loop_t *L, int all) {
  for (int i = 0; i < L->nretired;) {
    if (all || !held_on_pool(L, L->retired[i])) {
      rd_kafka_destroy(L->retired[i]);
      L->retired[i] = L->retired[--L->nretired];
    } else {
      i++;
    }
  }
}

/* From renew_timer: a new producer in the failed one's place (librdkafka
 * 2.0.2's fatal "sequence desynchronization" after a broker died,
 * confluentinc/librdkafka#4438, is the case seen). The old one's messages
 * come back to their jobs as failed deliveries, and each job produces its
 * whole set again through the new one after its 1 s backoff: nothing was
 * committed for them. Only when renewals come too often (a broker that
 * refuses every producer) does the stage stop as before: no offset counts
 * as done, and the process exits non-zero. */
static void renew_now(uv_timer_t *t) {
  loop_t *L = t->data;
  if (L->R.closing || L->X.fatal || !sl_kafka_fatal(L->R.producer, L->R.o->stage)) return;
  char err[512] = "";
  rd_kafka_t *old = NULL;
  int rc = SL_EKAFKA;
  if (L->nretired >= (int)(sizeof L->retired / sizeof L->retired[0]))
    snprintf(err, sizeof err, "%d failed producers are still held by running work", L->nretired);
  else if (!sl_kafka_renew_due(&L->renewals, sl__mono_ms()))
    snprintf(err, sizeof err, "renewed %d times within %d s already", SL_KAFKA_RENEW_MAX,
             SL_KAFKA_RENEW_WINDOW_MS / 1000);
  else
    rc = sl_kafka_producer_renew(&L->R.producer, &L->pku, &L->uv, L->R.cc->kafka_brokers, L->client,
                                 L->pkv, &old, err, sizeof err);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "kafka producer not renewed (%s): stopping", err);
    L->X.fatal = 1;
    *L->R.stop = 1;
    return;
  }
  for (job *j = L->R.all; j; j = j->all_next) /* on this thread: safe to move */
    if (j->out.producer == old && j->state != SL_JOB_POOL) j->out.producer = L->R.producer;
  L->retired[L->nretired++] = old;
  destroy_retired(L, 0);
}

static void renew_producer(sl_jobs *R) {
  loop_t *L = loop_of(R);
  if (!uv_is_active((uv_handle_t *)&L->renew_timer))
    uv_timer_start(&L->renew_timer, renew_now, 0, 0);
}

/* ---- the tick: commits, metrics, stop ---- */

static void begin_stop(loop_t *L);

static void on_tick(uv_timer_t *t) {
  loop_t *L = t->data;
  sl_log_flush(); /* batched lines are at most a tick late */
  if (L->throttled && sl__mono_ms() - L->throttled_ms >= SL_THROTTLE_PAUSE_MS) {
    L->throttled = 0; /* full for a while: pause instead (see the top of this file) */
    sl_metric_add(L->throttled_by_bytes ? L->m_pause_bytes : L->m_pause_msgs, 1);
    sl__groups_pause(&L->S, 1);
  }
  for (int i = 0; i < L->S.n; i++) drain_consumer(&L->S.g[i]);
  sl__groups_tick(&L->S);
  sl__gate_tick(&L->G);
  int64_t now = sl_now_ms();
  /* the age of the oldest message taken and not finished; the same over
   * main inputs only (retry topics hold messages that wait on purpose) */
  sl_metric_set(L->m_oldest, sl__parts_oldest(&L->P, 0, now) / 1000);
  sl_metric_set(L->m_oldest_waiting, sl__parts_oldest(&L->P, 1, now) / 1000);
  flow(L); /* work let go unfinished (a revoke) resumes fetching too */
  if (L->nretired) destroy_retired(L, 0);
  if (*L->R.stop && !L->R.stopping) begin_stop(L);
  if (L->R.stopping && (L->active == 0 || now >= L->stop_deadline)) {
    if (L->active)
      sl_log(SL_LOG_WARN, NULL,
             "drain bound reached with %lld message(s) unfinished; they will be redelivered",
             (long long)L->active);
    uv_stop(&L->uv);
  }
}

static void begin_stop(loop_t *L) {
  L->R.stopping = 1;
  L->throttled = 0; /* paused below: the consumers are polled and take nothing */
  L->stop_deadline = sl_now_ms() + (int64_t)(L->R.cc->drain_timeout_s * 1000);
  sl_log(SL_LOG_INFO, NULL, "stopping: no new messages; %lld in flight", (long long)L->active);
  sl__groups_pause(&L->S, 1);
  part *p, *tmp;
  HASH_ITER(hh, L->P.table, p, tmp) { /* parked retries are not in flight */
    sl__part_release_parked(p);
  }
  release_waiting(L, NULL, 1); /* nor is what waits for a slot */
  sl__gate_stop(&L->G);        /* held, or behind a solo run: redelivered after the restart */
}

/* ---- start-up ---- */

/* A loop for o, its settings checked (NULL: logged why, *rc set). */
static loop_t *loop_new(const sl_stage_opts *o, volatile sig_atomic_t *stop, int *rc) {
  *rc = SL_EINVAL;
  if (!o->process == !o->start) {
    sl_log(SL_LOG_ERROR, NULL, "stage %s: set exactly one of process and start", o->stage);
    return NULL;
  }
  if (!o->common->topic_dlq || !o->common->retry_tiers) {
    sl_log(SL_LOG_ERROR, NULL, "stage %s: no pipeline loaded (sl_common_pipeline)", o->stage);
    return NULL;
  }
  loop_t *L = calloc(1, sizeof *L);
  if (!L) {
    *rc = SL_ENOMEM;
    return NULL;
  }
  const sl_common_conf *cc = o->common;
  L->rp.ntiers = sl_retry_tiers_parse(cc->retry_tiers, L->rp.tier_ms, L->tier_label);
  L->rp.budget_ms = (int64_t)(cc->retry_budget_s * 1000);
  L->rp.max_retry_after_ms = cc->max_retry_after_ms;
  if (L->rp.ntiers < 0) {
    sl_log(SL_LOG_ERROR, NULL, "retry.tiers \"%s\": expected e.g. 5s,30s,2m,10m (ascending)",
           cc->retry_tiers);
    free(L);
    *rc = SL_ECONFIG;
    return NULL;
  }
  for (int i = 0; i < L->rp.ntiers; i++)
    snprintf(L->tier_topic[i], sizeof L->tier_topic[i], "%s.retry.%s", o->stage, L->tier_label[i]);
  L->R = (sl_jobs){.o = o,
                   .cc = cc,
                   .uv = &L->uv,
                   .stop = stop,
                   .rp = &L->rp,
                   .tier_topic = (const char(*)[160])L->tier_topic,
                   .tier_label = (const char(*)[16])L->tier_label,
                   .handover = handover,
                   .renew_producer = renew_producer};
  L->prefetch =
      cc->prefetch >= 0 ? cc->prefetch : (cc->max_in_flight / 4 > 4 ? cc->max_in_flight / 4 : 4);
  /* taken: the running ones and the prefetch; fetching resumes when half
   * of the prefetch has started */
  L->flow = (sl_flow_limits){cc->max_in_flight + L->prefetch, cc->max_bytes_in_flight,
                             cc->max_in_flight + L->prefetch / 2};
  *rc = 0;
  return L;
}

/* The loop's own series (the modules register theirs). */
static void loop_metrics(loop_t *L) {
  const char *st = L->R.o->stage;
  L->R.m_inflight = sl__metric("sluice_in_flight", st, NULL,
                               "Messages taken and not finished (running, waiting for a slot, "
                               "parked for a retry tier)",
                               1);
  L->m_waiting = sl__metric("sluice_waiting_for_slot", st, NULL,
                            "Messages taken beyond stage.max_in_flight, waiting for a slot "
                            "(at most stage.prefetch)",
                            1);
  L->R.m_bytes = sl__metric("sluice_in_flight_bytes", st, NULL,
                            "Bytes the messages being processed hold: their Kafka messages plus "
                            "what the stage holds for them (stage.max_bytes_in_flight)",
                            1);
  const char *h_pause = "Times fetching paused at a limit on work in flight, by limit";
  L->m_pause_msgs = sl__metric("sluice_fetch_pauses_total", st, "limit=\"messages\"", h_pause, 0);
  L->m_pause_bytes = sl__metric("sluice_fetch_pauses_total", st, "limit=\"bytes\"", h_pause, 0);
  L->m_oldest = sl__metric("sluice_oldest_uncommitted_age_seconds", st, NULL,
                           "Age of the oldest message taken and not yet finished", 1);
  L->m_oldest_waiting = sl__metric(
      "sluice_oldest_unprocessed_age_seconds", st, NULL,
      "Age of the oldest input message (main topics, not retry tiers) not yet finished", 1);
}

/* The modules, each with its own state, metrics and timers. */
static int modules_init(loop_t *L, char *err, size_t errlen) {
  sl__groups_init(&L->S, &L->R, &L->P);
  const char *gname[2] = {L->S.g[0].name, L->S.g[1].name};
  sl__parts_init(&L->P, &L->uv, (const char(*)[160])L->tier_topic, L->rp.ntiers, gname, L->S.n);
  sl__work_init(&L->W, &L->R);
  sl__out_init(&L->X, &L->R);
  uv_timer_init(&L->uv, &L->tick);
  L->tick.data = L;
  uv_timer_init(&L->uv, &L->drain_timer);
  L->drain_timer.data = L;
  uv_timer_init(&L->uv, &L->renew_timer);
  L->renew_timer.data = L;
  return sl__gate_init(&L->G, &L->R, err, errlen);
}

/* The clients: the producer, Redis, HTTP for async plugins, the consumers
 * and the lag thread. */
static int clients_open(loop_t *L, char *err, size_t errlen) {
  const sl_common_conf *cc = L->R.cc;
  snprintf(L->client, sizeof L->client, "sluice-%s", L->R.o->stage);
  int rc = sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, cc->kafka_producer_properties, L->props,
                                sizeof L->props, L->pkv, 16, err, errlen);
  if (rc == 0)
    rc = sl_kafka_producer_new(&L->R.producer, cc->kafka_brokers, L->client, L->pkv, err, errlen);
  if (rc == 0) rc = sl_aredis_new(&L->R.redis, &L->uv, cc->redis_url);
  if (rc == 0) rc = sl_aredis_set_timeout(L->R.redis, cc->redis_command_timeout_ms);
  if (rc == 0 && L->R.o->start) rc = sl_httpc_new(&L->R.http, &L->uv);
  if (rc == 0) rc = sl_kafka_uv_attach(&L->pku, L->R.producer, &L->uv);
  if (rc == 0)
    rc = sl__groups_open(&L->S, L->R.o->topics, L->R.o->ntopics, on_rebalance, drain_consumer, err,
                         errlen);
  const char *gname[2] = {L->S.g[0].name, L->S.g[1].name};
  if (rc == 0) rc = sl__lag_start(&L->lag, &L->R, &L->P, &L->G, gname, L->S.n, err, errlen);
  return rc;
}

static void log_consuming(const loop_t *L) {
  const sl_stage_opts *o = L->R.o;
  const sl_common_conf *cc = L->R.cc;
  sl_log(SL_LOG_INFO, NULL,
         "consuming %s%s%s as group %s (%s); %d retry tiers (%s .. %s) as group %s (%s); up to "
         "%lld messages and %lld MiB in flight (0: no byte limit)",
         o->topics[0], o->ntopics > 1 ? ", " : "", o->ntopics > 1 ? o->topics[1] : "",
         L->S.g[0].name, cc->kafka_assignment, L->rp.ntiers, L->tier_topic[0],
         L->tier_topic[L->rp.ntiers - 1], L->S.g[1].name, cc->kafka_retry_assignment,
         (long long)cc->max_in_flight,
         (long long)(cc->max_bytes_in_flight > 0 ? cc->max_bytes_in_flight >> 20 : 0));
}

/* ---- shutdown ---- */

/* The loop stopped: what waits to be handed over goes now, what finished is
 * committed, the consumers close, the producer's deliveries finish their
 * jobs; what finished meanwhile is committed too. */
static int loop_stopped(loop_t *L) {
  L->R.closing = 1; /* from here on unfinished jobs are dropped (never committed) */
  sl__lag_stop(L->lag);
  for (int i = 0; i < L->S.n; i++) sl__group_revoke_finish(&L->S.g[i]);
  sl__groups_commit(&L->S, 1);
  sl_log(SL_LOG_INFO, NULL, "closing consumers");
  sl__groups_close(&L->S);
  rd_kafka_flush(L->R.producer, 10000);       /* delivery reports finish their jobs */
  if (rd_kafka_outq_len(L->R.producer) > 0) { /* Kafka gone: their offsets stay uncommitted */
    rd_kafka_purge(L->R.producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(L->R.producer, 0);
  }
  sl__groups_commit(&L->S, 1);
  return L->X.fatal ? SL_EKAFKA : 0;
}

static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Drops what is left (pending replies come back NULL, cancelled requests
 * end their jobs, the rest here, except work on the pool) and frees it all. */
static void loop_free(loop_t *L) {
  L->R.closing = 1;
  sl__lag_stop(L->lag);
  sl__groups_detach(&L->S);
  sl_kafka_uv_detach(L->pku);
  sl_aredis_free(L->R.redis);
  L->R.redis = NULL;
  sl_httpc_free(L->R.http);
  L->R.http = NULL;
  sl__gate_close(&L->G);
  sl__out_close(&L->X);
  sl_queue_forget(&L->rq);
  for (job *j = L->R.all, *nx; j; j = nx) {
    nx = j->all_next;
    if (j->state != SL_JOB_POOL && j->state != SL_JOB_CALL && !j->outstanding)
      sl__job_to(j, SL_JOB_DROPPED);
  }
  sl__parts_close(&L->P);
  keyq *q, *qt;
  HASH_ITER(hh, L->keys, q, qt) {
    HASH_DEL(L->keys, q);
    free(q);
  }
  sl__lag_free(L->lag); /* stopped long since: joins at once */
  uv_walk(&L->uv, walk_close, NULL);
  uv_run(&L->uv, UV_RUN_DEFAULT);
  uv_loop_close(&L->uv);
  sl__groups_free(&L->S);
  destroy_retired(L, 1); /* the pool is idle now */
  if (L->R.producer) rd_kafka_destroy(L->R.producer);
  free(L);
  sl_log_batch(0); /* the lines still collected go out */
}

int sl_stage_run(const sl_stage_opts *o, volatile sig_atomic_t *stop) {
  char err[512] = "";
  int rc;
  loop_t *L = loop_new(o, stop, &rc);
  if (!L) return rc;
  uv_loop_init(&L->uv);
  L->uv.data = L;
  loop_metrics(L);
  rc = modules_init(L, err, sizeof err);
  if (rc == 0) rc = clients_open(L, err, sizeof err);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err[0] ? err : sl_strerror(rc));
    loop_free(L);
    return rc;
  }
  log_consuming(L);
  uv_timer_start(&L->tick, on_tick, 100, 100);
  if (L->R.cc->log_batch) sl_log_batch(SL_LOG_BATCH_MS); /* flushed by the tick too */
  uv_run(&L->uv, UV_RUN_DEFAULT);
  rc = loop_stopped(L);
  loop_free(L);
  return rc;
}
