/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_out.c — what becomes of a job: processing (on the worker pool or
 * async on the loop), its outcome (done, retry copy, dead letter), the
 * idempotency store (sl_idem.h), and producing the outputs.
 *
 * A job's offset counts as done only once every output it produced is
 * acknowledged by Kafka; a delivery that failed is produced again (the
 * whole set: duplicates are harmless), a permanent refusal turns the input
 * into a dead letter (output_rejected), and after a fatal producer error
 * nothing counts as done any more. Loop thread only, except sl__work_cb.
 */
#include "sl_stage_int.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_log.h"
#include "sluice/sl_redis.h"
#include "sluice.pb-c.h"

#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- producing ---- */

static void on_backoff(uv_timer_t *t) { sl__produce(t->data); }

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

void sl__on_delivery(rd_kafka_resp_err_t err, void *opaque) {
  job *j = opaque;
  if (!j) return; /* emit_now notices */
  if (err && (!j->produce_err || produce_permanent(err))) j->produce_err = err;
  if (--j->outstanding > 0) return;
  if (j->produce_err && j->L->closing) {
    sl__job_drop(j);
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
    sl__add_dead_letter(j);
    sl__produce(j);
    return;
  }
  if (j->produce_err) {
    /* never drop: produce the whole set again (duplicates are harmless) */
    rd_kafka_resp_err_t e = j->produce_err;
    j->produce_err = 0;
    sl_log(SL_LOG_WARN, j->key, "delivery failed: %s; producing again in 1 s", rd_kafka_err2str(e));
    if (!j->L->fatal && sl_kafka_fatal(j->L->producer, j->L->o->stage)) {
      j->L->fatal = 1;
      *j->L->stop = 1;
    }
    sl__job_after(j, 1000, on_backoff, sl__produce);
    return;
  }
  sl__job_finish(j);
}

void sl__produce(job *j) {
  loop_t *L = j->L;
  if (L->fatal) { /* nothing more can be written; the offset stays uncommitted */
    sl__job_finish(j);
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
    sl__job_finish(j);
    return;
  }
  if (j->out.n == 0) {
    sl__job_finish(j);
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
    rd_kafka_headers_t *hs = NULL;
    if (it->retry_copy) { /* a retry-tier copy carries the retry headers */
      char b[5][32], origin[160];
      hs = rd_kafka_headers_new(8);
      rd_kafka_header_add(hs, SL_HDR_ORIGIN_TOPIC, -1,
                          sl_message_origin(j->m, origin, sizeof origin), -1);
      snprintf(b[0], 32, "%u", j->attempts + 1);
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
    }
    rd_kafka_resp_err_t e;
    if (hs)
      e = rd_kafka_producev(
          L->producer, RD_KAFKA_V_TOPIC(it->topic), RD_KAFKA_V_KEY(it->key, strlen(it->key)),
          RD_KAFKA_V_VALUE(it->value, it->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_HEADERS(hs), RD_KAFKA_V_OPAQUE(&j->ticket), RD_KAFKA_V_END);
    else
      e = rd_kafka_producev(
          L->producer, RD_KAFKA_V_TOPIC(it->topic), RD_KAFKA_V_KEY(it->key, strlen(it->key)),
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

void sl__add_dead_letter(job *j) {
  loop_t *L = j->L;
  const rd_kafka_message_t *m = j->m;
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = (char *)L->o->stage;
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
                             : j->p && j->p->retry_tier >= 0 ? L->o->topics[0]
                                                             : dl.topic);
  const char *subject = j->key[0] ? j->key : j->res.subject;
  dl.subject_key = (char *)subject;
  char key[128];
  if (subject[0])
    snprintf(key, sizeof key, "%s", subject);
  else
    snprintf(key, sizeof key, "%s/%d/%lld", dl.topic, m->partition, (long long)m->offset);
  sl_outbox_add_pb(&j->out, L->cc->topic_dlq, key, &dl.base);

  if (L->o->on_dead_letter) /* the stage's own word about it (stages/common.c) */
    L->o->on_dead_letter(L->o, subject, j->res.error_class, j->res.error_message,
                         dl.last_failure_ms, j->cost_before + j->res.cost_units, &j->out);
  sl_metric_add(L->m_dead, 1);
  sl_log(SL_LOG_WARN, subject, "dead-lettered after %u attempt(s) (%s): %s", j->attempts + 1,
         j->res.error_class, j->res.error_message);
}

/* The provider's Retry-After, cut to provider.max_retry_after_ms. */
int64_t sl__retry_after(const loop_t *L, const sl_result *res) {
  return sl_retry_after_clamp(&L->rp, res->retry_after_ms);
}

/* Transient failure: to the next retry tier, or the dead-letter topic when
 * the budget from the first failure is spent. */

void sl__to_retry(job *j) {
  loop_t *L = j->L;
  int64_t now = sl_now_ms();
  if (!j->first_failure_ms) j->first_failure_ms = now;
  sl_outbox_clear(&j->out);
  int t = sl_retry_plan(&L->rp, j->attempts, j->first_failure_ms, now, j->res.retry_after_ms,
                        &j->not_before_ms);
  j->retry_delay_ms = t >= 0 ? j->not_before_ms - now : 0;
  if (t < 0) {
    char why[sizeof j->res.error_message];
    snprintf(why, sizeof why, "%s", j->res.error_message);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "budget_exhausted",
                  "gave up after %u attempts over %.0f s: %s: %s", j->attempts + 1,
                  (double)(now - j->first_failure_ms) / 1000.0, j->res.error_class, why);
    sl__add_dead_letter(j);
    return;
  }
  if (sl_outbox_add(&j->out, L->tier_topic[t], j->key, j->m->payload, j->m->len) == 0)
    j->out.items[j->out.n - 1].retry_copy = 1;
  sl_metric_add(L->m_retried, 1);
  sl_metric_add(L->m_tier[t], 1);
  sl_log(SL_LOG_INFO, j->key, "transient failure (%s: %s); retry %u via %s", j->res.error_class,
         j->res.error_message, j->attempts + 1, L->tier_topic[t]);
}

/* ---- idempotency store ---- */

void sl__idem_key(job *j, char *buf, size_t len) {
  if (sl_idem_key(buf, len, j->L->o->stage, j->key, j->digest) != 0 && len) buf[0] = '\0';
}

/* j's store answered: r is its element of the batch's reply (an integer:
 * 1 its claim released, 0 not the owner's any more, -1 not claimed), or
 * the error, or NULL (Redis unavailable). */
static void stored(job *j, const redisReply *r) {
  if (j->L->closing) {
    sl__job_drop(j);
    return;
  }
  if (!r || r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, j->key, "idempotency store unavailable; outputs not stored");
  else if (j->claimed && r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
    j->claimed = 0; /* the store script released it (or it was not ours any more) */
  if (r && r->type == REDIS_REPLY_INTEGER) sl__starts_stored(j); /* its count went with it */
  sl__claim_release(j); /* after the store: a waiting replica finds the outputs */
  sl__produce(j);
}

static void on_stores(redisReply *r, void *ud) {
  job_batch *b = ud;
  redisReply **el = sl__batch_reply(b, r, 1);
  for (int i = 0; i < b->n; i++)
    stored(b->jobs[i], el ? el[i] : r && r->type == REDIS_REPLY_ERROR ? r : NULL);
  free(b);
}

/* Sends the stores waiting in L->sq, SL_STORE_BATCH to a script: each job's
 * outputs (and, holding the input's claim, its release in the same script,
 * after the store); each job is produced once its store answered. */
void sl__stores_flush(loop_t *L) {
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", (long long)L->cc->idempotency_ttl_s);
  while (L->sq_head) {
    job_batch *b = malloc(sizeof *b);
    struct {
      char k[256], ck[256], tk[256]; /* stored, claim and starts key */
      uint8_t *buf;                  /* the packed outputs (sl_idem_pack) */
      size_t n;
    } e[SL_STORE_BATCH];
    if (!b) { /* no memory: produced unstored, as without Redis */
      job *j;
      while ((j = sl__q_pop(&L->sq_head, &L->sq_tail)) != NULL) {
        L->sq_len--;
        sl__claim_release(j);
        sl__produce(j);
      }
      return;
    }
    b->n = 0;
    job *j;
    while (b->n < SL_STORE_BATCH && (j = sl__q_pop(&L->sq_head, &L->sq_tail)) != NULL) {
      L->sq_len--;
      int i = b->n;
      sl__idem_key(j, e[i].k, sizeof e[i].k);
      if (!e[i].k[0] || sl_idem_pack(&j->out, sl_now_ms(), &e[i].buf, &e[i].n) != 0) {
        sl__claim_release(j); /* cannot be stored: produced as it is */
        sl__produce(j);
        continue;
      }
      if (!j->claimed || sl_idem_claim_key(e[i].ck, sizeof e[i].ck, L->o->stage, j->key, j->digest))
        e[i].ck[0] = '\0'; /* stored only; a claim is released on its own after */
      /* its run is over once its outputs are stored: its start count goes too */
      e[i].tk[0] = '\0';
      if (j->starts > 0) sl__starts_key(j, e[i].tk, sizeof e[i].tk);
      b->jobs[b->n++] = j;
    }
    int n = b->n;
    const char *argv[5 * SL_STORE_BATCH + 1];
    size_t lens[5 * SL_STORE_BATCH + 1];
    for (int i = 0; i < n; i++) {
      const char *owner = e[i].ck[0] ? b->jobs[i]->owner : "";
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
        n ? sl_aredis_eval(L->redis, on_stores, b, &L->s_claim_store, 3 * n, 5 * n + 1, argv, lens)
          : 0;
    for (int i = 0; i < n; i++) free(e[i].buf);
    if (!n)
      free(b);
    else if (rc != 0)
      on_stores(NULL, b); /* Redis unavailable: produced unstored */
  }
}

/* Queues the job's outputs for the store (sent with the other stores of
 * this turn of the loop), then produces them. */
static void store_and_produce(job *j) {
  loop_t *L = j->L;
  sl__q_push(&L->sq_head, &L->sq_tail, j);
  if (++L->sq_len >= SL_STORE_BATCH) {
    sl__stores_flush(L);
    return;
  }
  sl__batch_soon(L);
}

/* Answers the job from outputs stored by an earlier run (this replica's or
 * another's): 1 when they were usable and are being produced. */
int sl__use_stored(job *j, const char *v, size_t n) {
  loop_t *L = j->L;
  if (sl_idem_unpack(v, n, &j->out) != 0) return 0; /* unusable: as if there were none */
  sl_metric_add(L->m_idem_hits, 1);
  sl_metric_add(L->m_done, 1);
  j->stored = 1;
  sl_log(SL_LOG_INFO, j->key, "already processed: stored outputs reused, no provider call");
  sl__produce(j);
  return 1;
}

void sl__on_lookup(redisReply *r, void *ud) {
  job *j = ud;
  loop_t *L = j->L;
  if (L->closing) {
    sl__job_drop(j);
    return;
  }
  if (r && r->type == REDIS_REPLY_STRING) {
    if (sl__use_stored(j, r->str, r->len)) return;
  } else if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_log(SL_LOG_DEBUG, j->key, "idempotency lookup unavailable; processing");
  }
  sl__gate(j);
}

/* ---- processing on the pool ---- */

void sl__work_cb(uv_work_t *w) {
  job *j = w->data;
  if (atomic_load(&j->claim_lost)) { /* lost while it queued for a worker: not called */
    j->claim_skip = 1;
    return;
  }
  sl_inline_mark mk;
  sl_inline_begin(&mk);
  j->L->o->process(j->L->o->ud, j->m, &j->out, &j->res);
  j->ran_ns = sl_inline_end(&mk);
}

void sl__after_work_cb(uv_work_t *w, int status) {
  job *j = w->data;
  (void)status;
  j->in_pool = 0;
  if (j->claim_skip) { /* claims again: calls, waits for the new owner's outputs, or ends */
    j->claim_skip = 0;
    sl__call_end(j);
    if (j->L->closing) {
      sl__job_drop(j);
      return;
    }
    sl__run_process(j);
    return;
  }
  if (status == 0) sl_inline_note(&j->L->inl, j->ran_ns, 0, uv_hrtime());
  sl__complete(j);
}

void sl_job_done(job *j) {
  j->in_async = 0;
  sl__complete(j);
}

const rd_kafka_message_t *sl_job_message(const job *j) { return j->m; }
sl_outbox *sl_job_outbox(job *j) { return &j->out; }
sl_result *sl_job_result(job *j) { return &j->res; }
const char *sl_job_key(const job *j) { return j->key; }
sl_httpc *sl_job_http(job *j) { return j->L->http; }
sl_aredis *sl_job_redis(job *j) { return j->L->redis; }
uv_loop_t *sl_job_loop(job *j) { return &j->L->loop; }

static void on_again(uv_timer_t *t) { sl__run_process(t->data); }

/* A RETRY that asked to run again shortly (sl_result.again_in_ms) runs again
 * here after that delay, through its claim as before: no retry copy, no
 * tier's wait, its slot and uncommitted offset kept. 1 when it does. */
static int again(job *j) {
  int64_t ms = j->res.again_in_ms;
  if (ms <= 0 || j->agains >= SL_AGAIN_MAX || sl__job_stale(j)) return 0;
  if (ms > SL_AGAIN_MAX_MS) ms = SL_AGAIN_MAX_MS;
  j->agains++;
  sl_outbox_clear(&j->out);
  sl_metric_add(j->L->m_again, 1);
  sl_log(SL_LOG_DEBUG, j->key, "%s: %s; running it again in %lld ms", j->res.error_class,
         j->res.error_message, (long long)ms);
  sl__job_after(j, ms, on_again, sl__run_process);
  return 1;
}

/* The processor is finished with the job: act on its outcome. */
void sl__complete(job *j) {
  loop_t *L = j->L;
  sl__call_end(j);
  if (L->closing) {
    sl__job_drop(j);
    return;
  }
  if (L->o->provider && j->res.provider_called) {
    int ok = j->res.outcome != SL_OUTCOME_RETRY;
    sl_breaker_record(L->breaker, sl__mono_ms(), ok);
    sl_metric_add(j->res.outcome == SL_OUTCOME_DONE   ? L->m_calls_ok
                  : j->res.outcome == SL_OUTCOME_FAIL ? L->m_calls_perm
                  : j->res.provider_throttled         ? L->m_calls_throttled
                                                      : L->m_calls_fail,
                  1);
    sl_histogram_observe(L->h_call, (double)(uv_hrtime() - j->call_ns) / 1e9);
    sl_metric_add_real(L->m_cost, j->res.cost_units);
    sl_breaker_state st = sl_breaker_get_state(L->breaker);
    if ((int64_t)st != (int64_t)sl_metric_value(L->m_breaker_state) && st == SL_BREAKER_OPEN)
      sl_log(SL_LOG_WARN, NULL, "provider %s: circuit breaker opened", L->o->provider);
    sl_metric_set(L->m_breaker_state, st);
    if (L->bq_head && st != SL_BREAKER_OPEN) /* the probe answered: let the held go */
      uv_timer_start(&L->bq_timer, sl__on_bq_timer, 0, 0);
    if (j->res.provider_throttled && sl__retry_after(L, &j->res) > 0 && !L->closing) {
      /* pause the provider for every replica (one atomic script that only
       * ever extends a pause), for at most provider.max_retry_after_ms */
      char ms[32];
      snprintf(ms, sizeof ms, "%lld", (long long)sl__retry_after(L, &j->res));
      const char *a[] = {L->pause_key, ms};
      sl_aredis_eval(L->redis, NULL, NULL, &L->s_pause, 1, 2, a, NULL);
      sl__pause_noted(L, sl__retry_after(L, &j->res));
      sl_log(SL_LOG_WARN, j->key, "provider %s throttled us: pausing all replicas for %s ms",
             L->o->provider, ms);
    }
  }
  if (j->res.outcome == SL_OUTCOME_DONE && j->out.failed) {
    /* the processor's outputs are incomplete (an add failed: outbox full,
     * topic or key too long, no memory): storing or producing the rest and
     * committing would lose the missing one */
    int e = j->out.failed;
    sl_outbox_clear(&j->out);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "output_invalid",
                  "an output could not be added to the outbox: %s", sl_strerror(e));
  }
  if (j->res.outcome == SL_OUTCOME_FAIL && j->claimed)
    j->claim_end = 1; /* held until its dead letter is written, then an end mark */
  else if (!(j->res.outcome == SL_OUTCOME_DONE && L->o->idempotent && j->out.n))
    sl__claim_release(j); /* nothing to store: the next claimant calls */
  switch (j->res.outcome) {
  case SL_OUTCOME_DONE:
    sl_metric_add(L->m_done, 1);
    if (L->o->idempotent && j->out.n) {
      store_and_produce(j);
      return;
    }
    break;
  case SL_OUTCOME_RETRY:
    if (again(j)) return;
    sl__to_retry(j);
    break;
  case SL_OUTCOME_FAIL:
    sl_outbox_clear(&j->out);
    sl__add_dead_letter(j);
    break;
  }
  sl__produce(j);
}
