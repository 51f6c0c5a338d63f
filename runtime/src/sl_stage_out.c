/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_out.c — what becomes of a job (sl_stage_out.h): its outcome,
 * the idempotency store (sl_idem.h), retry copies and dead letters, and
 * producing the outputs. Loop thread only.
 */
#include "sl_stage_out.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_defer.h"
#include "sluice/sl_err.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_log.h"
#include "sluice/sl_rkey.h"
#include "sluice.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void produce(job *j);
static void stores_flush(sl_output *X);

static sl_output *out_of(const job *j) { return j->R->out; }

/* ---- producing ---- */

/* ---- producing ---- */

static void on_backoff(uv_timer_t *t) { produce(t->data); }

/* Errors that producing the same message again cannot cure. */
static int produce_permanent(rd_kafka_resp_err_t e) {
  switch (e) {
  case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
  case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_INVALID_RECORD:
  case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
  case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
  case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
  case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
  case RD_KAFKA_RESP_ERR__INVALID_ARG:
    return 1;
  default:
    return 0;
  }
}

static void add_dead_letter(job *j);

/* j's input's hop record (sl_idem_hop_key), as sl__idem_key is its store's;
 * 0 or SL_ETOOBIG */
static int hop_key(const job *j, char *buf, size_t len) {
  return sl_idem_hop_key(buf, len, sl_rkey_tag(j->bucket), j->R->o->stage, j->key, j->digest);
}

/* Records j's deferral copy, which Kafka has now, as its input's newest
 * hop (unless a newer one of the same origin is recorded): a copy of an
 * older hop read again after a rebalance is then known for a twin (lookup,
 * below). Not waited for: unrecorded, a twin is only not recognised. */
static void hop_record(job *j) {
  char k[256], hop[24], ttl[24];
  if (hop_key(j, k, sizeof k) != 0) return;
  snprintf(hop, sizeof hop, "%lld", (long long)j->defer_hop);
  snprintf(ttl, sizeof ttl, "%d", SL_DEFER_HOP_TTL_MS);
  const char *argv[] = {k, j->defer_origin, hop, ttl};
  sl_aredis_eval(j->R->redis, NULL, NULL, &out_of(j)->s_hop, 1, 4, argv, NULL);
}

void sl__on_delivery(rd_kafka_resp_err_t err, void *opaque) {
  job *j = opaque;
  if (!j) return; /* emit_now notices */
  if (err && (!j->produce_err || produce_permanent(err))) j->produce_err = err;
  if (--j->outstanding > 0) return;
  if (j->produce_err && j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  if (produce_permanent(j->produce_err) && !j->rejected) {
    /* producing it again cannot work and would hold the partition's commit
     * for ever: the input becomes a dead letter instead (what was delivered
     * of the set stays; duplicates are harmless) */
    rd_kafka_resp_err_t e = j->produce_err;
    j->produce_err = 0;
    j->rejected = 1;
    sl_outbox_clear(&j->out);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "output_rejected",
                  "Kafka refused an output for good: %s", rd_kafka_err2str(e));
    add_dead_letter(j);
    produce(j);
    return;
  }
  if (j->produce_err) {
    /* never drop: produce the whole set again (duplicates are harmless) */
    rd_kafka_resp_err_t e = j->produce_err;
    j->produce_err = 0;
    sl_log(SL_LOG_WARN, j->key, "delivery failed: %s; producing again in 1 s", rd_kafka_err2str(e));
    sl_output *X = out_of(j);
    if (!X->fatal && sl_kafka_fatal(j->R->producer, j->R->o->stage) && j->R->renew_producer)
      j->R->renew_producer(j->R); /* the retry goes out through the new one */
    sl__job_after(j, 1000, on_backoff, produce);
    return;
  }
  if (j->deferred && j->defer_hop > 0 && j->R->cc->provider_tenant_schedule) hop_record(j);
  sl__job_to(j, SL_JOB_FINISHED);
}

/* Produces j's outputs; it finishes once all are acknowledged (at once
 * without any). */
static void produce(job *j) {
  rd_kafka_t *producer = j->R->producer;
  if (out_of(j)->fatal) { /* nothing more can be written; the offset stays uncommitted */
    sl__job_to(j, SL_JOB_FINISHED);
    return;
  }
  if (j->out.failed) {
    /* what had to be written (a dead letter, a retry copy, a status) could
     * not even be added: finishing would commit the input without it, so
     * its offset stays uncommitted (the partition commits up to it; a
     * restart or a rebalance delivers it again) */
    sl_log(SL_LOG_ERROR, j->key,
           "an output could not be added to the outbox (%s): the input "
           "stays uncommitted",
           sl_strerror(j->out.failed));
    sl_outbox_clear(&j->out);
    j->uncommitted = 1;
    sl__job_to(j, SL_JOB_FINISHED);
    return;
  }
  if (j->out.n == 0) {
    sl__job_to(j, SL_JOB_FINISHED);
    return;
  }
  /* Delivery reports come only from rd_kafka_poll on the loop, never from
   * inside producev; a message librdkafka refuses at once is counted here
   * and reported after the loop (reporting it inside would let the outcome
   * replace the outbox this loop walks). */
  size_t n = j->out.n;
  int refused = 0;
  rd_kafka_resp_err_t refused_err = RD_KAFKA_RESP_ERR_NO_ERROR;
  j->outstanding = (int)n;
  for (size_t i = 0; i < n; i++) {
    sl_out *it = &j->out.items[i];
    rd_kafka_headers_t *hs = rd_kafka_headers_new(it->retry_copy ? 12 : 4);
    sl__job_trace_headers(j, hs); /* every output carries j's trace context */
    if (j->tenant[0]) rd_kafka_header_add(hs, SL_HDR_TENANT, -1, j->tenant, -1); /* and tenant */
    if (it->retry_copy) { /* a retry-tier copy carries the retry headers */
      char b[5][32], origin[160];
      rd_kafka_header_add(hs, SL_HDR_ORIGIN_TOPIC, -1,
                          sl_message_origin(j->m, origin, sizeof origin), -1);
      snprintf(b[0], 32, "%u", j->attempts + !j->deferred); /* a deferral is no attempt */
      snprintf(b[1], 32, "%lld", (long long)j->first_failure_ms);
      snprintf(b[2], 32, "%lld", (long long)j->not_before_ms);
      rd_kafka_header_add(hs, SL_HDR_ATTEMPT, -1, b[0], -1);
      rd_kafka_header_add(hs, SL_HDR_FIRST_FAILURE, -1, b[1], -1);
      rd_kafka_header_add(hs, SL_HDR_NOT_BEFORE, -1, b[2], -1);
      snprintf(b[3], 32, "%lld", (long long)j->retry_delay_ms);
      rd_kafka_header_add(hs, SL_HDR_DELAY, -1, b[3], -1);
      rd_kafka_header_add(hs, SL_HDR_ERROR_CLASS, -1, j->res.error_class, -1);
      rd_kafka_header_add(hs, SL_HDR_ERROR_MESSAGE, -1, j->res.error_message, -1);
      snprintf(b[4], 32, "%.17g", j->cost_before + j->res.cost_units);
      rd_kafka_header_add(hs, SL_HDR_COST, -1, b[4], -1);
      if (j->deferred) {
        snprintf(b[4], 32, "%lld", (long long)j->defer_due_ms);
        rd_kafka_header_add(hs, SL_HDR_DEFER_DUE, -1, b[4], -1);
        if (j->defer_hop > 0) {
          char hop[SL_DEFER_ORIGIN_MAX + 24];
          snprintf(hop, sizeof hop, "%s:%lld", j->defer_origin, (long long)j->defer_hop);
          rd_kafka_header_add(hs, SL_HDR_DEFER_HOP, -1, hop, -1);
        }
      }
    }
    /* a deferral: to a tier partition of this replica (to_defer) */
    int32_t pn =
        it->retry_copy && j->deferred && j->defer_part >= 0 ? j->defer_part : RD_KAFKA_PARTITION_UA;
    rd_kafka_resp_err_t e;
    if (hs)
      e = rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(it->topic), RD_KAFKA_V_PARTITION(pn),
                            RD_KAFKA_V_KEY(it->key, strlen(it->key)),
                            RD_KAFKA_V_VALUE(it->value, it->len),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hs),
                            RD_KAFKA_V_OPAQUE(&j->ticket), RD_KAFKA_V_END);
    else
      e = rd_kafka_producev(
          producer, RD_KAFKA_V_TOPIC(it->topic), RD_KAFKA_V_KEY(it->key, strlen(it->key)),
          RD_KAFKA_V_VALUE(it->value, it->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_OPAQUE(&j->ticket), RD_KAFKA_V_END);
    if (e) {
      if (hs) rd_kafka_headers_destroy(hs);
      /* not queued: a failed delivery, reported below */
      if (!j->produce_err || produce_permanent(e)) j->produce_err = e;
      refused++;
      refused_err = e;
    }
  }
  if (refused) {
    j->outstanding -= refused - 1; /* on_delivery takes the last one */
    sl__on_delivery(refused_err, j);
  }
}

/* ---- outcomes ---- */

/* A dead letter of class output_rejected keeps at most this much of its
 * input, so that it fits where the rejected output did not. */
#define SL_DL_REJECTED_PAYLOAD_MAX (256 * 1024)

/* Adds j's dead letter (its result says why) to its outbox. */
static void add_dead_letter(job *j) {
  const sl_jobs *R = j->R;
  const rd_kafka_message_t *m = j->m;
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = (char *)R->o->stage;
  dl.topic = (char *)rd_kafka_topic_name(m->rkt);
  dl.partition = m->partition;
  dl.offset = m->offset;
  dl.key.data = (uint8_t *)m->key;
  dl.key.len = m->key_len;
  dl.payload.data = m->payload;
  dl.payload.len = m->len;
  if (j->rejected && dl.payload.len > SL_DL_REJECTED_PAYLOAD_MAX) {
    /* the input itself may be what Kafka refuses: keep its head */
    dl.payload.len = SL_DL_REJECTED_PAYLOAD_MAX;
    size_t n = strlen(j->res.error_message);
    snprintf(j->res.error_message + n, sizeof j->res.error_message - n,
             " (payload cut to %d of %zu bytes)", SL_DL_REJECTED_PAYLOAD_MAX, m->len);
  }
  dl.error_class = j->res.error_class;
  dl.error_message = j->res.error_message;
  dl.attempts = j->attempts + 1;
  dl.last_failure_ms = sl_now_ms();
  dl.first_failure_ms = j->first_failure_ms ? j->first_failure_ms : dl.last_failure_ms;
  /* a replay goes where the message first came from; a retry copy written
   * before copies carried their origin: the stage's first input */
  char origin[160];
  const char *from = sl__hdr(m, SL_HDR_ORIGIN_TOPIC, origin, sizeof origin);
  dl.replay_topic = (char *)(from && *from                   ? from
                             : j->p && j->p->retry_tier >= 0 ? R->o->topics[0]
                                                             : dl.topic);
  const char *subject = j->key[0] ? j->key : j->res.subject;
  dl.subject_key = (char *)subject;
  char tp[SL_TRACEPARENT_LEN + 1];
  sl_trace_format(&j->tc, tp); /* a replay links to this attempt's span */
  dl.traceparent = tp;
  dl.tenant = j->tenant; /* a replay counts against the same tenant */
  char key[128];
  if (subject[0])
    snprintf(key, sizeof key, "%s", subject);
  else
    snprintf(key, sizeof key, "%s/%d/%lld", dl.topic, m->partition, (long long)m->offset);
  sl_outbox_add_pb(&j->out, R->cc->topic_dlq, key, &dl.base);

  if (R->o->on_dead_letter) /* the stage's own word about it */
    R->o->on_dead_letter(R->o, subject, j->res.error_class, j->res.error_message,
                         dl.last_failure_ms, j->cost_before + j->res.cost_units, &j->out);
  sl_metric_add(out_of(j)->m_dead, 1);
  sl_log(SL_LOG_WARN, subject, "dead-lettered after %u attempt(s) (%s): %s", j->attempts + 1,
         j->res.error_class, j->res.error_message);
}

/* j's deferral copy: by tier t for delay ms, to partition pn (-1: its
 * key's), with its attempts and first failure as they were: no attempt, no
 * budget. */
static void defer_by(job *j, int t, int64_t delay, int32_t pn) {
  const sl_jobs *R = j->R;
  j->not_before_ms = sl_now_ms() + delay;
  j->retry_delay_ms = delay;
  j->defer_part = pn;
  sl_outbox_clear(&j->out);
  if (sl_outbox_add(&j->out, R->tier_topic[t], j->key, j->m->payload, j->m->len) == 0)
    j->out.items[j->out.n - 1].retry_copy = 1;
  sl_metric_add(out_of(j)->m_deferred, 1);
  sl_log(SL_LOG_DEBUG, j->key, "deferred %lld ms via %s [%d]: %s", (long long)delay,
         R->tier_topic[t], (int)pn, j->res.error_message);
}

/* Deferred by the gate (its tenant's line was full) until its due time
 * (j->defer_due_ms). By default by the first retry tier whose delay
 * reaches it (the last one else), parked there until due. With
 * provider.tenant_schedule, by the tier and to the partition of this
 * replica sl_defer.h chooses (hops of at most provider.defer_hop_max_ms),
 * for the tier's whole delay, by its key's partition when this replica
 * owns no retry partition; its slot goes with it (SL_HDR_DEFER_DUE): back
 * early to a full line, it goes round again. */
static void to_defer(job *j) {
  const sl_jobs *R = j->R;
  int64_t now = sl_now_ms(), want = j->defer_due_ms > now ? j->defer_due_ms - now : 0;
  if (!R->cc->provider_tenant_schedule) { /* the first tier that reaches its due time */
    int t = 0;
    while (t + 1 < R->rp->ntiers && R->rp->tier_ms[t] < want) t++;
    int64_t delay = want < R->rp->tier_ms[t] ? want : R->rp->tier_ms[t];
    defer_by(j, t, delay, -1);
    return;
  }
  unsigned owned = 0; /* the tiers this replica owns a partition of */
  for (int i = 0; i < R->rp->ntiers; i++)
    for (int w = 0; w < SL_TIER_PARTS_MAX / 64; w++)
      if (R->tier_owned[i][w]) owned |= 1u << i;
  if (!j->defer_origin[0] || j->defer_hop <= 0) { /* its first deferral: this input's */
    snprintf(j->defer_origin, sizeof j->defer_origin, "%d.%lld", (int)j->m->partition,
             (long long)j->offset);
    j->defer_hop = 0;
  }
  j->defer_hop++; /* the copy's hop, recorded once Kafka has it (sl__on_delivery) */
  int t = sl_defer_tier(R->rp, want, R->cc->provider_defer_hop_max_ms, owned);
  defer_by(j, t, R->rp->tier_ms[t],
           sl_defer_partition(R->tier_owned[t], SL_TIER_PARTS_MAX / 64, (uint32_t)j->offset));
}

/* Transient failure: to the next retry tier, or the dead-letter topic when
 * the budget from the first failure is spent. */
static void to_retry(job *j) {
  sl_output *X = out_of(j);
  const sl_jobs *R = j->R;
  int64_t now = sl_now_ms();
  if (j->deferred) {
    to_defer(j);
    return;
  }
  if (!j->first_failure_ms) j->first_failure_ms = now;
  sl_outbox_clear(&j->out);
  int t = sl_retry_plan(R->rp, j->attempts, j->first_failure_ms, now, j->res.retry_after_ms,
                        &j->not_before_ms);
  j->retry_delay_ms = t >= 0 ? j->not_before_ms - now : 0;
  if (t < 0) {
    char why[sizeof j->res.error_message];
    snprintf(why, sizeof why, "%s", j->res.error_message);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "budget_exhausted",
                  "gave up after %u attempts over %.0f s: %s: %s", j->attempts + 1,
                  (double)(now - j->first_failure_ms) / 1000.0, j->res.error_class, why);
    add_dead_letter(j);
    return;
  }
  if (sl_outbox_add(&j->out, R->tier_topic[t], j->key, j->m->payload, j->m->len) == 0)
    j->out.items[j->out.n - 1].retry_copy = 1;
  sl_metric_add(X->m_retried, 1);
  sl_metric_add(X->m_tier[t], 1);
  sl_log(SL_LOG_INFO, j->key, "transient failure (%s: %s); retry %u via %s", j->res.error_class,
         j->res.error_message, j->attempts + 1, R->tier_topic[t]);
}

/* ---- idempotency store ---- */

/* j's store answered: r is its element of the batch's reply (an integer:
 * 1 its claim released, 0 not the owner's any more, -1 not claimed), or
 * the error, or NULL (Redis unavailable). The gate settles its claim and
 * its count (STORED), then it is produced. */
static void stored(job *j, const redisReply *r) {
  if (j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  j->store_reply = 0;
  if (!r || r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, j->key, "idempotency store unavailable; outputs not stored");
  else if (r->type == REDIS_REPLY_INTEGER)
    j->store_reply = r->integer >= 0 ? 2 : 1;
  sl__job_to(j, SL_JOB_STORED);
}

/* j's outputs could not be stored (no key, no memory): produced as they are */
static void unstored(job *j) {
  j->store_reply = 0;
  sl__job_to(j, SL_JOB_STORED);
}

static void on_stores(redisReply *r, void *ud) {
  job_batch *b = ud;
  redisReply **el = sl__batch_reply(b, r, 1);
  for (int i = 0; i < b->n; i++)
    stored(b->jobs[i], el ? el[i] : r && r->type == REDIS_REPLY_ERROR ? r : NULL);
  free(b);
}

/* One store script's arguments, per job. */
typedef struct {
  char k[256], ck[256], tk[256]; /* stored, claim and starts key */
  uint8_t *buf;                  /* the packed outputs (sl_idem_pack) */
  size_t n;
} store_args;

/* Takes up to SL_STORE_BATCH jobs of one Redis bucket (one slot of a
 * cluster) from X->sq into b with their arguments; one that cannot be
 * stored is produced as it is. A key that is none is the bucket's bare tag
 * (sl_claim.h). */
static void stores_take(sl_output *X, job_batch *b, store_args *e) {
  job *j;
  int bucket = -1; /* the first one's */
  b->n = 0;
  while (b->n < SL_STORE_BATCH && (j = sl__job_pop_bucket(&X->sq, bucket)) != NULL) {
    int i = b->n;
    bucket = j->bucket;
    sl__idem_key(j, e[i].k, sizeof e[i].k);
    if (!e[i].k[0] || sl_idem_pack(&j->out, sl_now_ms(), &e[i].buf, &e[i].n) != 0) {
      unstored(j); /* cannot be stored: produced as it is */
      continue;
    }
    if (!j->claimed || sl_idem_claim_key(e[i].ck, sizeof e[i].ck, sl_rkey_tag(j->bucket),
                                         j->R->o->stage, j->key, j->digest))
      snprintf(e[i].ck, sizeof e[i].ck, "%s", sl_rkey_tag(bucket)); /* stored only; a claim
                                                                     * is released after */
    /* its run is over once its outputs are stored: its start count goes too */
    snprintf(e[i].tk, sizeof e[i].tk, "%s", sl_rkey_tag(bucket));
    if (j->starts > 0) sl__starts_key(j, e[i].tk, sizeof e[i].tk);
    b->jobs[b->n++] = j;
  }
}

/* Sends the stores waiting in X->sq, SL_STORE_BATCH of one bucket to a
 * script: each job's
 * outputs (and, holding the input's claim, its release in the same script,
 * after the store); each job is produced once its store answered. */
static void stores_flush(sl_output *X) {
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", (long long)X->R->cc->idempotency_ttl_s);
  while (X->sq.head) {
    job_batch *b = malloc(sizeof *b);
    store_args e[SL_STORE_BATCH];
    if (!b) { /* no memory: produced unstored, as without Redis */
      job *j;
      while ((j = sl__job_pop(&X->sq)) != NULL) unstored(j);
      return;
    }
    stores_take(X, b, e);
    int n = b->n;
    const char *argv[5 * SL_STORE_BATCH + 1];
    size_t lens[5 * SL_STORE_BATCH + 1];
    for (int i = 0; i < n; i++) {
      const char *owner = strncmp(e[i].ck, "sl:", 3) == 0 ? b->jobs[i]->owner : "";
      argv[3 * i] = e[i].k;
      argv[3 * i + 1] = e[i].ck;
      argv[3 * i + 2] = e[i].tk;
      argv[3 * n + 1 + 2 * i] = (const char *)e[i].buf;
      argv[3 * n + 2 + 2 * i] = owner;
      lens[3 * i] = strlen(e[i].k);
      lens[3 * i + 1] = strlen(e[i].ck);
      lens[3 * i + 2] = strlen(e[i].tk);
      lens[3 * n + 1 + 2 * i] = e[i].n;
      lens[3 * n + 2 + 2 * i] = strlen(owner);
    }
    argv[3 * n] = ttl;
    lens[3 * n] = strlen(ttl);
    int rc =
        n ? sl_aredis_eval(X->R->redis, on_stores, b, &X->s_store, 3 * n, 5 * n + 1, argv, lens)
          : 0;
    for (int i = 0; i < n; i++) free(e[i].buf);
    if (!n)
      free(b);
    else if (rc != 0)
      on_stores(NULL, b); /* Redis unavailable: produced unstored */
  }
}

static void on_store_idle(uv_idle_t *h) {
  uv_idle_stop(h); /* what a flush queues arms it again */
  stores_flush(h->data);
}

/* Queues the job's outputs for the store (sent with the other stores of
 * this turn of the loop), then produces them. */
static void store_and_produce(job *j) {
  sl_output *X = out_of(j);
  sl_queue_push(&X->sq, &j->link);
  if (X->sq.len >= SL_STORE_BATCH) {
    stores_flush(X);
    return;
  }
  if (!uv_is_active((uv_handle_t *)&X->store_idle)) uv_idle_start(&X->store_idle, on_store_idle);
}

void sl__out_reuse(job *j) {
  sl_output *X = out_of(j);
  if (j->twin) {
    sl_outbox_clear(&j->out);
    sl_metric_add(X->m_twins, 1);
    sl_log(SL_LOG_INFO, j->key, "deferred copy of hop %lld is a twin of a newer one: dropped",
           (long long)j->defer_hop);
    produce(j); /* nothing: finished, committed */
    return;
  }
  sl_metric_add(X->m_idem_hits, 1);
  sl_metric_add(X->m_done, 1);
  j->stored = 1;
  sl_log(SL_LOG_INFO, j->key, "already processed: stored outputs reused, no provider call");
  produce(j);
}

void sl__out_produce(job *j) { produce(j); }

static void on_hop(redisReply *r, void *ud) {
  job *j = ud;
  if (j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  if (r && r->type == REDIS_REPLY_STRING &&
      sl_defer_is_twin(r->str, j->defer_origin, j->defer_hop)) {
    j->twin = 1; /* finished with nothing to produce: its newer copy goes on */
    sl__job_to(j, SL_JOB_REUSE);
    return;
  }
  sl__job_to(j, SL_JOB_GATE); /* the newest, or no record (Redis unavailable: on) */
}

/* A deferred copy with a hop (provider.tenant_schedule): is a newer one
 * recorded? */
static void hop_lookup(job *j) {
  char k[256];
  if (hop_key(j, k, sizeof k) != 0) {
    sl__job_to(j, SL_JOB_GATE);
    return;
  }
  const char *argv[] = {"GET", k};
  if (sl_aredis_argv(j->R->redis, on_hop, j, 2, argv, NULL) != 0) sl__job_to(j, SL_JOB_GATE);
}

static void on_lookup(redisReply *r, void *ud) {
  job *j = ud;
  if (j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  if (r && r->type == REDIS_REPLY_STRING) {
    if (sl_idem_unpack(r->str, r->len, &j->out) == 0) {
      sl__job_to(j, SL_JOB_REUSE);
      return;
    }
  } else if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_log(SL_LOG_DEBUG, j->key, "idempotency lookup unavailable; processing");
  }
  if (j->defer_hop > 0 && j->R->cc->provider_tenant_schedule) {
    hop_lookup(j);
    return;
  }
  sl__job_to(j, SL_JOB_GATE);
}

void sl__out_lookup(job *j) {
  char k[256];
  sl__idem_key(j, k, sizeof k);
  const char *argv[] = {"GET", k};
  j->looked_up = 1;
  if (sl_aredis_argv(j->R->redis, on_lookup, j, 2, argv, NULL) != 0)
    sl__job_to(j, SL_JOB_GATE); /* Redis unavailable: on, unlooked */
}

/* KEYS[1] the hop key; ARGV origin, hop, ttl ms: records (origin, hop)
 * unless the same origin's hop recorded is as new */
static const char hop_record_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then\n"
    "  local o, h = string.match(v, '^(.*):(%d+)$')\n"
    "  if o == ARGV[1] and tonumber(h) >= tonumber(ARGV[2]) then return 0 end\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])\n"
    "return 1\n";

/* ---- the outcome ---- */

static void again_now(job *j) { sl__job_to(j, SL_JOB_CLAIM); }
static void on_again(uv_timer_t *t) { again_now(t->data); }

/* A RETRY that asked to run again shortly (sl_result.again_in_ms) runs again
 * after that delay, through its claim as before: no retry copy, no tier's
 * wait, its slot and uncommitted offset kept. 1 when it does. */
static int again(job *j) {
  int64_t ms = j->res.again_in_ms;
  if (ms <= 0 || j->agains >= SL_AGAIN_MAX || sl__job_stale(j)) return 0;
  if (ms > SL_AGAIN_MAX_MS) ms = SL_AGAIN_MAX_MS;
  j->agains++;
  sl_outbox_clear(&j->out);
  sl_metric_add(out_of(j)->m_again, 1);
  sl_log(SL_LOG_DEBUG, j->key, "%s: %s; running it again in %lld ms", j->res.error_class,
         j->res.error_message, (long long)ms);
  sl__job_after(j, ms, on_again, again_now);
  return 1;
}

void sl__out_outcome(job *j) {
  sl_output *X = out_of(j);
  if (j->res.traceparent[0]) /* its message had no context; the processor found its trace */
    sl__job_trace_adopt(j, j->res.traceparent);
  if (!j->tenant[0] && j->res.tenant[0]) sl__job_tenant(j, j->res.tenant);
  if (j->res.outcome == SL_OUTCOME_DONE && j->out.failed) {
    /* the processor's outputs are incomplete (an add failed: outbox full,
     * topic or key too long, no memory): storing or producing the rest and
     * committing would lose the missing one */
    int e = j->out.failed;
    sl_outbox_clear(&j->out);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "output_invalid",
                  "an output could not be added to the outbox: %s", sl_strerror(e));
  }
  switch (j->res.outcome) {
  case SL_OUTCOME_DONE:
    sl_metric_add(X->m_done, 1);
    if (j->R->o->idempotent && j->out.n) {
      store_and_produce(j);
      return;
    }
    break;
  case SL_OUTCOME_RETRY:
    if (again(j)) return;
    to_retry(j);
    break;
  case SL_OUTCOME_FAIL:
    sl_outbox_clear(&j->out);
    add_dead_letter(j);
    break;
  }
  produce(j);
}

/* ---- set-up ---- */

void sl__out_init(sl_output *X, sl_jobs *R) {
  const char *stage = R->o->stage;
  memset(X, 0, sizeof *X);
  X->R = R;
  R->out = X;
  sl_redis_script_init(&X->s_store, sl_claim_store_lua);
  sl_redis_script_init(&X->s_hop, hop_record_lua);
  uv_idle_init(R->uv, &X->store_idle);
  X->store_idle.data = X;
  const char *h_out = "Input messages finished, by outcome";
  X->m_done = sl__metric("sluice_messages_total", stage, "outcome=\"done\"", h_out, 0);
  X->m_retried = sl__metric("sluice_messages_total", stage, "outcome=\"retried\"", h_out, 0);
  X->m_dead = sl__metric("sluice_messages_total", stage, "outcome=\"dead_lettered\"", h_out, 0);
  X->m_deferred = sl__metric("sluice_messages_total", stage, "outcome=\"deferred\"", h_out, 0);
  X->m_again = sl__metric("sluice_reruns_total", stage, NULL,
                          "Transient failures run again in place, a moment later, instead of "
                          "through a retry tier (what they lacked was expected within moments)",
                          0);
  for (int i = 0; i < R->rp->ntiers; i++) {
    char t[64];
    snprintf(t, sizeof t, "tier=\"%s\"", R->tier_label[i]);
    X->m_tier[i] =
        sl__metric("sluice_retries_total", stage, t, "Messages sent to a retry tier, by tier", 0);
  }
  X->m_idem_hits = sl__metric("sluice_idempotency_hits_total", stage, NULL,
                              "Inputs answered from stored outputs (provider calls avoided)", 0);
  X->m_twins = sl__metric("sluice_deferred_twins_total", stage, NULL,
                          "Deferred copies dropped because a newer copy of the same input was "
                          "recorded (read again after a rebalance; provider.tenant_schedule)",
                          0);
}

void sl__out_close(sl_output *X) {
  if (!X) return;
  sl_queue_forget(&X->sq); /* their jobs are dropped by the loop's last walk */
}
