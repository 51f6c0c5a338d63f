/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_gate.c — the provider gate (sl_stage_gate.h): what a job passes
 * between its idempotency lookup and its provider call.
 *
 *   breaker  while the provider's breaker is open, jobs are held in order
 *            (breaker.hold) or sent to a retry tier; one probe per interval;
 *   limiter  with provider.rate, jobs queue in one line per tenant and one
 *            take at a time asks the shared Redis limiter which tenant's
 *            head goes (sl_stage_fair.h, sl_fair.h), so a backlog costs one
 *            call per grant; a tenant with a full line is deferred through
 *            a retry tier (no attempt);
 *   pause    without a rate, a provider's 429 pause (a Redis key every
 *            replica reads) holds the call;
 *   claim    an idempotent stage claims the input in Redis with a lease
 *            before calling (sl_claim.h): one paid call across replicas;
 *   starts   every stage (stage.max_starts) counts the input's start in
 *            Redis before calling, batched per turn of the loop, and deletes
 *            the count when the input ends: a count past max_starts means
 *            the process died during each earlier run (a poison input), so
 *            it becomes a dead letter of class poison, uncalled; a suspect
 *            runs alone at its last chance (sl_admit.h).
 * The decisions are sl_admit.h's; this file carries them out. A job whose
 * partition was taken away meanwhile is released uncalled. Redis
 * unavailable: every step fails open (the start runs uncounted, counted in
 * sluice_starts_uncounted_total, with a warning). Loop thread only.
 */
#include "sl_stage_gate.h"
#include "sluice/sl_admit.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_log.h"
#include "sluice/sl_rkey.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Without a rate only a 429's pause (the pause key's PTTL) can hold a call.
 * The key is read at most once per SL_PAUSE_FRESH_MS, not per call: another
 * replica's pause is seen that much later (its own is seen at once), a few
 * calls that the provider answers with another 429 and that are retried. */
#define SL_PAUSE_FRESH_MS 100

static void gate_limits(job *j);
static void defer(job *j, int64_t due_ms);
static void claim_try(job *j);
static void call_now(job *j);
static void call_go(job *j);
static void counted_as(job *j, long long n);
static void starts_flush(sl_gate *G);
static void claims_flush(sl_gate *G);
static void calls_resume(sl_gate *G);
static int lookup_counted(job *j);
static int counts_with_lookup(const job *j);
static void provider_outcome(job *j);

static sl_gate *gate_of(const job *j) { return j->R->gate; }

static int claims_on(const job *j) {
  const sl_jobs *R = j->R;
  return R->o->provider && R->o->idempotent && R->cc->claim_lease_ms > 0 && j->digest[0];
}

/* its data key is read with its claim (sl_stage_opts.data_key) */
static int data_key_on(const job *j) {
  return j->R->o->data_key && sl_dkey_enabled() && claims_on(j);
}

int sl_stage_reads_data_keys(const sl_stage_opts *o) {
  return o && o->data_key && sl_dkey_enabled() && o->provider && o->idempotent && o->common &&
         o->common->claim_lease_ms > 0;
}

/* The claims, counts and deletions queued this turn go before the loop
 * polls again. */
static void batch_soon(sl_gate *G);

/* A call waits wait_ms for the shared limiter or the provider's pause: the
 * provider is the bottleneck meanwhile (the lag's actionable part). */
static void gate_waits(sl_gate *G, int64_t wait_ms) {
  sl_metric_add(G->m_limiter_waits, 1);
  int64_t until = sl__mono_ms() + wait_ms;
  if (until > G->wait_until_ms) G->wait_until_ms = until;
}

/* What sl_admit decides from. */
static sl_admit_in admit_in(const job *j) {
  const sl_gate *G = gate_of(j);
  const sl_jobs *R = j->R;
  sl_admit_in in = {0};
  in.closing = R->closing;
  in.stale = sl__job_stale(j);
  in.stopping = R->stopping;
  in.provider = R->o->provider != NULL;
  in.looked_up = j->looked_up || !R->o->idempotent;
  in.held = G->bq.len > 0;
  in.hold = R->cc->breaker_hold;
  in.rate = R->cc->provider_rate > 0;
  in.pause_fresh = G->pause_read_ms && sl__mono_ms() - G->pause_read_ms < SL_PAUSE_FRESH_MS;
  in.pause_left_ms = G->pause_until_ms - sl__mono_ms();
  return in;
}

/* ---- the limiter ---- */

static void limiter_try(sl_gate *G);

static void on_lq_timer(uv_timer_t *t) { limiter_try(t->data); }

/* The fair take's answer (sl_fair.h): the head of the tenant it picked
 * goes (Redis unavailable: any head, fail open), or all wait: for the limit
 * (the provider is the bottleneck) or while the tenants waiting here are
 * ahead of one waiting elsewhere. */
static void on_limit_q(redisReply *r, void *ud) {
  sl_gate *G = ud;
  job *j;
  G->lq_busy = 0;
  if (G->R->closing) {
    while ((j = sl__fair_pop_any(&G->fl)) != NULL) sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER;
  long long code = ok ? r->element[0]->integer : -1, v = ok ? r->element[1]->integer : 0;
  if ((code == 1 || code == 2) && v > 0) {
    if (code == 1) gate_waits(G, v);
    uv_timer_start(&G->lq_timer, on_lq_timer, (uint64_t)v, 0);
    return;
  }
  if (code != 0 && r && r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, NULL, "fair take: %s (going on without the limiter)", r->str);
  j = code == 0 ? sl__fair_pop(&G->fl, (int)v - 1) : sl__fair_pop_any(&G->fl);
  if (j) sl__gate_claim(j);
  limiter_try(G);
}

/* The pause, read for the limiter (its take script does not read it: a
 * limit split into buckets of other slots): then the head tries again. */
static void on_limit_pause(redisReply *r, void *ud) {
  sl_gate *G = ud;
  G->lq_busy = 0;
  /* Redis unavailable: not paused (fail open) */
  int64_t now = sl__mono_ms(), ttl = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  G->pause_read_ms = now;
  if (ttl > 0 && now + ttl > G->pause_until_ms) G->pause_until_ms = now + ttl;
  limiter_try(G);
}

/* 1 when the head waits for the pause (read first when stale), 0 when it
 * may ask the limiter. Only for a take script without the pause key. */
static int limiter_paused(sl_gate *G) {
  int64_t now = sl__mono_ms();
  if (!G->pause_read_ms || now - G->pause_read_ms >= SL_PAUSE_FRESH_MS) {
    const char *argv[] = {"PTTL", G->pause_key};
    G->lq_busy = 1;
    if (sl_aredis_argv(G->R->redis, on_limit_pause, G, 2, argv, NULL) == 0) return 1;
    G->lq_busy = 0; /* Redis unavailable: on to the limiter (which fails open too) */
    return 0;
  }
  if (G->pause_until_ms <= now) return 0;
  gate_waits(G, G->pause_until_ms - now);
  uv_timer_start(&G->lq_timer, on_lq_timer, (uint64_t)(G->pause_until_ms - now), 0);
  return 1;
}

static void limiter_try(sl_gate *G) {
  const sl_jobs *R = G->R;
  if (G->lq_busy || !G->fl.waiting || R->closing) return;
  if (!G->pause_in_take && limiter_paused(G)) return;
  const char *argv[4 + 4 + 2 * SL_FAIR_CANDIDATES];
  char n[8];
  int k = 0;
  argv[k++] = G->limit_key;
  argv[k++] = G->fair_u;
  argv[k++] = G->fair_s;
  if (G->pause_in_take) argv[k++] = G->pause_key;
  int nk = k;
  argv[k++] = G->limit_rate;
  argv[k++] = G->limit_burst;
  argv[k++] = "1";
  int named = sl__fair_candidates(&G->fl, argv + k + 1);
  if (named == 0) return; /* every line is empty */
  snprintf(n, sizeof n, "%d", named);
  argv[k++] = n;
  k += 2 * named;
  G->lq_busy = 1;
  if (sl_aredis_eval(R->redis, on_limit_q, G, &G->s_fair, nk, k, argv, NULL) != 0) {
    G->lq_busy = 0; /* Redis unavailable: fail open for one */
    job *j = sl__fair_pop_any(&G->fl);
    if (j) sl__gate_claim(j);
    if (G->fl.waiting) uv_timer_start(&G->lq_timer, on_lq_timer, 10, 0);
  }
}

/* ---- the breaker ---- */

static void held_count(sl_gate *G) { sl_metric_set(G->m_held, G->bq.len); }

/* The breaker may let something through: one probe while it is half-open,
 * everything once it is closed again. */
static void on_bq_timer(uv_timer_t *t) {
  sl_gate *G = t->data;
  while (G->bq.head && !G->R->closing) {
    int64_t retry_in = 0;
    if (!sl_breaker_allow(G->breaker, sl__mono_ms(), &retry_in)) {
      uv_timer_start(&G->bq_timer, on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
      return;
    }
    sl_metric_set(G->m_breaker_state, sl_breaker_get_state(G->breaker));
    job *j = sl__job_pop(&G->bq);
    held_count(G);
    gate_limits(j);
    if (sl_breaker_get_state(G->breaker) != SL_BREAKER_CLOSED) { /* a probe is out */
      uv_timer_start(&G->bq_timer, on_bq_timer, (uint64_t)G->R->cc->breaker_probe_interval_ms, 0);
      return;
    }
  }
}

static void hold(job *j, int64_t retry_in) {
  sl_gate *G = gate_of(j);
  sl_queue_push(&G->bq, &j->link);
  held_count(G);
  if (!uv_is_active((uv_handle_t *)&G->bq_timer))
    uv_timer_start(&G->bq_timer, on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
}

/* The breaker is open and nothing is held: a retry copy, uncalled. */
static void circuit_retry(job *j) {
  memset(&j->res, 0, sizeof j->res);
  sl_result_set(&j->res, SL_OUTCOME_RETRY, "circuit_open",
                "provider %s is failing; its circuit breaker is open", j->R->o->provider);
  sl__job_to(j, SL_JOB_OUTCOME);
}

/* j's end (done, failed) in its tenant's series */
static void tenant_outcome(job *j) {
  const sl_fair_counts *c = sl__fair_counts(&gate_of(j)->fl, j->tenant);
  if (c) sl_metric_add(j->res.outcome == SL_OUTCOME_DONE ? c->done : c->failed, 1);
}

/* j's tenant spent its cost budget for today: a dead letter of its own
 * class, uncalled (sl_stage_budget.h) */
static void budget_spent(job *j, double spent, double limit) {
  memset(&j->res, 0, sizeof j->res);
  sl_result_set(&j->res, SL_OUTCOME_FAIL, SL_BUDGET_CLASS,
                "tenant %s spent %.6g of its %.6g provider cost units for today (cost_per_day; "
                "sluicectl tenant set): not called; replay it once the budget allows",
                j->tenant, spent, limit);
  tenant_outcome(j);
  sl__job_to(j, SL_JOB_OUTCOME);
}

void sl__gate_enter(job *j) {
  sl_gate *G = gate_of(j);
  const sl_jobs *R = j->R;
  if (!j->looked_up && counts_with_lookup(j)) {
    /* a stage without a provider counts the start with the lookup */
    if (lookup_counted(j) == 0) return;
  }
  int64_t retry_in = 0;
  sl_admit_in in = admit_in(j);
  if (R->o->provider && !in.held && !in.closing && !in.stale)
    in.breaker_allows = sl_breaker_allow(G->breaker, sl__mono_ms(), &retry_in);
  sl_admit_step s = sl_admit_breaker(&in);
  if (s == SL_ADMIT_HOLD || s == SL_ADMIT_RETRY || s == SL_ADMIT_RELEASE)
    if (R->o->provider && !in.closing && !in.stale) sl_metric_add(G->m_circuit_skips, 1);
  switch (s) {
  case SL_ADMIT_DROP:
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  case SL_ADMIT_RELEASE:
    sl__job_to(j, SL_JOB_RELEASED);
    return;
  case SL_ADMIT_LOOKUP:
    sl__job_to(j, SL_JOB_LOOKUP); /* stored outputs are answered, open or not */
    return;
  case SL_ADMIT_HOLD:
    hold(j, retry_in); /* behind those already held, in order */
    return;
  case SL_ADMIT_RETRY:
    circuit_retry(j);
    return;
  default:
    break;
  }
  if (R->o->provider) sl_metric_set(G->m_breaker_state, sl_breaker_get_state(G->breaker));
  gate_limits(j);
}

/* ---- the limits: the shared limiter, or the provider's pause ---- */

static void on_pause_ttl(uv_timer_t *t) { sl__gate_enter(t->data); }

/* The pause as last read decides: wait it out, or go on to the claim. */
static void pause_decide(job *j) {
  sl_admit_in in = admit_in(j);
  in.pause_fresh = 1; /* just read, or read for it */
  switch (sl_admit_limits(&in)) {
  case SL_ADMIT_CLAIM:
    sl__gate_claim(j);
    return;
  case SL_ADMIT_LOOKUP:
    sl__job_to(j, SL_JOB_LOOKUP); /* stored outputs are answered, paused or not */
    return;
  default: /* SL_ADMIT_PAUSE_WAIT */
    gate_waits(gate_of(j), in.pause_left_ms);
    sl__job_after(j, in.pause_left_ms, on_pause_ttl, sl__gate_enter);
    return;
  }
}

static void on_pause(redisReply *r, void *ud) {
  sl_gate *G = ud;
  job *j;
  G->pq_busy = 0;
  if (G->R->closing) {
    while ((j = sl__job_pop(&G->pq)) != NULL) sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  /* Redis unavailable: not paused (fail open) */
  int64_t now = sl__mono_ms(), ttl = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  G->pause_read_ms = now;
  if (ttl > 0 && now + ttl > G->pause_until_ms) G->pause_until_ms = now + ttl;
  while ((j = sl__job_pop(&G->pq)) != NULL) pause_decide(j);
}

/* j's tenant holds enough waiting jobs here: j leaves through a retry tier
 * until due_ms, uncounted as an attempt, and its slot goes to what the
 * stage reads behind it (sl_stage_fair.h) */
static void defer(job *j, int64_t due_ms) {
  sl_gate *G = gate_of(j);
  sl__fair_deferred(&G->fl, j);
  memset(&j->res, 0, sizeof j->res);
  sl_result_set(&j->res, SL_OUTCOME_RETRY, "deferred",
                "tenant %s has %lld calls waiting here already; its slot is in %lld ms",
                j->tenant[0] ? j->tenant : "(none)", (long long)G->fl.hold,
                (long long)(due_ms - sl_now_ms()));
  j->deferred = 1;
  j->defer_due_ms = due_ms;
  sl__job_to(j, SL_JOB_OUTCOME);
}

/* The rest of the gate, once the breaker let the job through. */
static void gate_limits(job *j) {
  sl_gate *G = gate_of(j);
  sl_admit_in in = admit_in(j);
  switch (sl_admit_limits(&in)) {
  case SL_ADMIT_LIMITER: { /* in its tenant's line at the limiter, or deferred */
    int64_t due = 0;
    int rc = sl__fair_push(&G->fl, j, &due);
    if (rc > 0) {
      defer(j, due);
      return;
    }
    if (rc < 0) { /* no memory for its line: on without the limiter */
      sl__gate_claim(j);
      return;
    }
    limiter_try(G);
    return;
  }
  case SL_ADMIT_PAUSE_ASK: {
    sl_queue_push(&G->pq, &j->link);
    if (G->pq_busy) return; /* the answer on its way decides for it too */
    const char *argv[] = {"PTTL", G->pause_key};
    G->pq_busy = 1;
    if (sl_aredis_argv(j->R->redis, on_pause, G, 2, argv, NULL) == 0) return;
    on_pause(NULL, G); /* Redis unavailable: fail open */
    return;
  }
  case SL_ADMIT_CLAIM:
    sl__gate_claim(j);
    return;
  default: /* the pause as last read: wait, or look up first */
    pause_decide(j);
    return;
  }
}

/* the claim reads the stored outputs itself: claims on, no rate limiter to
 * wait for, the breaker closed (a job the gate then holds looks up first) */
static int lookup_in_claim(const job *j) {
  const sl_gate *G = gate_of(j);
  return claims_on(j) && j->R->cc->provider_rate <= 0 && !G->bq.head &&
         sl_breaker_get_state(G->breaker) == SL_BREAKER_CLOSED;
}

/* a stage without a provider counts the start with its lookup */
static int counts_with_lookup(const job *j) {
  return !j->R->o->provider && j->R->o->idempotent && j->R->cc->max_starts > 0;
}

int sl__gate_looks_up(const job *j) { return lookup_in_claim(j) || counts_with_lookup(j); }

/* ---- the claim: one paid call per input across replicas (sl_claim.h) ---- */

static void claim_key(const job *j, char *buf, size_t len) {
  if (sl_idem_claim_key(buf, len, sl_rkey_tag(j->bucket), j->R->o->stage, j->key, j->digest) != 0 &&
      len)
    buf[0] = '\0';
}

static void claim_release(job *j) {
  j->claim_end = 0;
  if (!j->claimed) return;
  j->claimed = 0;
  char k[256];
  claim_key(j, k, sizeof k);
  const char *argv[] = {k, j->owner};
  sl_aredis_eval(j->R->redis, NULL, NULL, &gate_of(j)->s_claim_release, 1, 2, argv, NULL);
}

/* "<topic>/<partition>/<offset>" of j's message: which run of the input an
 * end mark speaks for */
static void claim_tag(const job *j, char *buf, size_t len) {
  snprintf(buf, len, "%s/%d/%lld", rd_kafka_topic_name(j->m->rkt), (int)j->m->partition,
           (long long)j->m->offset);
}

/* j ends holding its claim: a dead letter acknowledged (j->claim_end, not
 * fatal) turns it into the end mark, else it is released. */
static void claim_finish(job *j, int fatal) {
  const sl_jobs *R = j->R;
  if (!j->claimed) return;
  if (!j->claim_end || fatal || j->uncommitted) { /* nothing durable to point at */
    claim_release(j);
    return;
  }
  j->claimed = 0;
  j->claim_end = 0;
  char k[256], tag[200], mark[300], ttl[32];
  claim_key(j, k, sizeof k);
  claim_tag(j, tag, sizeof tag);
  snprintf(mark, sizeof mark, "!%s|%s", tag, j->res.error_class);
  snprintf(ttl, sizeof ttl, "%lld",
           (long long)(R->cc->claim_lease_ms + R->cc->kafka_session_timeout_ms));
  const char *argv[] = {k, j->owner, mark, ttl};
  sl_aredis_eval(R->redis, NULL, NULL, &gate_of(j)->s_claim_end, 1, 4, argv, NULL);
}

static void on_claim_timer(uv_timer_t *t) { claim_try(t->data); }

/* Another replica is calling for this input: wait for its outputs (or for
 * its lease to end), asking again every half second. */
static void claim_wait(job *j, const redisReply *v) {
  sl_gate *G = gate_of(j);
  int64_t ttl = strtoll(v->str, NULL, 10);
  if (j->claim_waits++ == 0) {
    sl_metric_add(G->m_claim_waits, 1);
    sl_log(SL_LOG_INFO, j->key,
           "another replica is calling %s for this input (lease %lld ms left): waiting for "
           "its outputs instead of calling",
           j->R->o->provider, (long long)ttl);
  }
  sl__job_after(j, ttl > 0 && ttl < 500 ? ttl + 1 : 500, on_claim_timer, claim_try);
}

/* ---- its data key, read by the claim's script (sl_stage_opts.data_key) ---- */

/* j's data key from d, the script's value for it (NULL: no answer) into
 * j->dk_state and j->dk: 1 when it is not there, and the store's marker
 * must say whether Redis lost it (data_key_marker) */
static int data_key_read(job *j, const redisReply *d) {
  char sid[64];
  j->dk_state = SL_KEY_UNREAD;
  if (!j->dk_sid_len || j->dk_sid_len >= sizeof sid)
    return 0; /* not asked for (a key that names no submission: its processor refuses it) */
  if (!d || d->type != REDIS_REPLY_STRING) {
    j->dk_state = SL_KEY_UNAVAILABLE;
    return 0;
  }
  memcpy(sid, j->key, j->dk_sid_len); /* checked by sl_key_parse in claims_take */
  sid[j->dk_sid_len] = '\0';
  int rc = sl_dkey_open(d->str, d->len, sid, j->dk);
  j->dk_state = sl_key_state_of(rc);
  return rc == SL_ENOTFOUND;
}

/* claimed: counted with the claim (one round trip), or called */
static void claimed_go(job *j) {
  if (j->claim_count >= 0) {
    counted_as(j, j->claim_count);
    return;
  }
  call_now(j);
}

static void on_data_key_marker(redisReply *r, void *ud) {
  job *j = ud;
  if (j->R->closing) {
    if (j->claim_count >= 0) gate_of(j)->counting--;
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  j->dk_state = sl_key_state_of_marker(r);
  if (j->claimed)
    claimed_go(j);
  else
    call_now(j);
}

/* j's key is not in Redis: does the store's marker say it is complete?
 * (the one more round trip of a missing key) */
static void data_key_marker(job *j) {
  const char *ex[] = {"EXISTS", sl_dkey_marker()};
  if (sl_aredis_argv(j->R->redis, on_data_key_marker, j, 2, ex, NULL) != 0)
    on_data_key_marker(NULL, j);
}

/* j's answer: code, v and its data key d from the claim script's reply, or
 * NULL (no usable answer) */
static void on_claim(job *j, const redisReply *code_r, const redisReply *v, const redisReply *d) {
  sl_gate *G = gate_of(j);
  if (j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  if (!code_r || !v || code_r->type != REDIS_REPLY_INTEGER || v->type != REDIS_REPLY_STRING) {
    data_key_read(j, NULL);
    call_now(j); /* Redis unavailable: fail open, as the store does */
    return;
  }
  int missing = data_key_read(j, d);
  j->claim_count = -1; /* not counted with this claim (CLAIMED says otherwise) */
  switch (code_r->integer) {
  case SL_CLAIM_STORED:
    if (sl_idem_unpack(v->str, v->len, &j->out) == 0) {
      sl__job_to(j, SL_JOB_REUSE);
      return;
    }
    if (missing) /* unusable stored outputs: as if there were none */
      data_key_marker(j);
    else
      call_now(j);
    return;
  case SL_CLAIM_CLAIMED:
    j->claimed = 1;
    if (v->len && !j->starts) { /* counted with the claim (one round trip) */
      G->counting++;
      j->claim_count = strtoll(v->str, NULL, 10);
    }
    if (missing)
      data_key_marker(j);
    else
      claimed_go(j);
    return;
  case SL_CLAIM_ENDED:
    /* this very message failed for good on another replica, and its dead
     * letter is written: nothing to call, nothing to write again */
    sl_metric_add(G->m_claim_ends, 1);
    sl_log(SL_LOG_INFO, j->key,
           "failed for good on another replica (%.*s), its dead letter written: not calling %s "
           "again",
           (int)(v->len < 64 ? v->len : 64), v->str, j->R->o->provider);
    sl__job_to(j, SL_JOB_FINISHED);
    return;
  default:
    claim_wait(j, v);
    return;
  }
}

/* The claims sent together (one script), answered together. */
static void on_claims(redisReply *r, void *ud) {
  job_batch *b = ud;
  redisReply **el = sl__batch_reply(b, r, 3);
  for (int i = 0; i < b->n; i++)
    on_claim(b->jobs[i], el ? el[3 * i] : NULL, el ? el[3 * i + 1] : NULL,
             el ? el[3 * i + 2] : NULL);
  free(b);
}

/* The keys and tags of one claim script; b's jobs taken from G->cq (those
 * whose partition went away meanwhile let go). */
typedef struct {
  char keys[SL_CLAIM_BATCH][4][256]; /* claim, store, starts and data key of each */
  char tags[SL_CLAIM_BATCH][200];    /* its message (sl_claim_take_lua) */
} claim_args;

static void claims_take(sl_gate *G, job_batch *b, claim_args *a) {
  job *j;
  int bucket = -1; /* the first one's: one slot a script */
  b->n = 0;
  while (b->n < SL_CLAIM_BATCH && (j = sl__job_pop_bucket(&G->cq, bucket)) != NULL) {
    if (sl__job_stale(j)) { /* its partition went away while it waited */
      sl__job_to(j, SL_JOB_RELEASED);
      continue;
    }
    bucket = j->bucket;
    claim_key(j, a->keys[b->n][0], sizeof a->keys[b->n][0]);
    sl__idem_key(j, a->keys[b->n][1], sizeof a->keys[b->n][1]);
    /* its start is counted with the claim, once; else a placeholder of its slot */
    snprintf(a->keys[b->n][2], sizeof a->keys[b->n][2], "%s", sl_rkey_tag(bucket));
    if (!j->starts && G->R->cc->max_starts > 0 &&
        (sl__starts_key(j, a->keys[b->n][2], sizeof a->keys[b->n][2]), !a->keys[b->n][2][0]))
      snprintf(a->keys[b->n][2], sizeof a->keys[b->n][2], "%s", sl_rkey_tag(bucket));
    /* its data key read with its claim (data_key_read), else a placeholder */
    char sid[64];
    unsigned q = 0;
    j->dk_sid_len = 0;
    if (!data_key_on(j) || sl_key_parse(j->key, strlen(j->key), sid, &q) != 0 ||
        sl_dkey_rkey(sid, a->keys[b->n][3]) != 0)
      snprintf(a->keys[b->n][3], sizeof a->keys[b->n][3], "%s", sl_rkey_tag(bucket));
    else
      j->dk_sid_len = strlen(sid); /* the answer opens with it (data_key_read) */
    claim_tag(j, a->tags[b->n], sizeof a->tags[b->n]);
    b->jobs[b->n++] = j;
  }
}

/* Sends the claims waiting in G->cq, SL_CLAIM_BATCH of one bucket to a
 * script. */
static void claims_flush(sl_gate *G) {
  char lease[32], starts_ttl[32];
  snprintf(lease, sizeof lease, "%lld", (long long)G->R->cc->claim_lease_ms);
  snprintf(starts_ttl, sizeof starts_ttl, "%d", SL_STARTS_TTL_S);
  while (G->cq.head) {
    job_batch *b = malloc(sizeof *b);
    claim_args a;
    if (!b) { /* no memory: each one calls (fail open, as without Redis) */
      job *j;
      while ((j = sl__job_pop(&G->cq)) != NULL) call_now(j);
      return;
    }
    claims_take(G, b, &a);
    int n = b->n;
    if (n == 0) {
      free(b);
      continue;
    }
    const char *argv[6 * SL_CLAIM_BATCH + 2];
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < 4; k++) argv[4 * i + k] = a.keys[i][k];
      argv[4 * n + 2 + i] = b->jobs[i]->owner;
      argv[5 * n + 2 + i] = a.tags[i];
    }
    argv[4 * n] = lease;
    argv[4 * n + 1] = starts_ttl;
    int rc =
        sl_aredis_eval(G->R->redis, on_claims, b, &G->s_claim_take, 4 * n, 6 * n + 2, argv, NULL);
    if (rc != 0) on_claims(NULL, b); /* Redis unavailable: each one calls */
  }
}

/* Claims j's input: queued, and sent with the other claims of this turn of
 * the loop (one script for up to SL_CLAIM_BATCH inputs, not one each). */
static void claim_try(job *j) {
  sl_gate *G = gate_of(j);
  if (sl__job_stale(j)) { /* its partition went away while it waited */
    sl__job_to(j, SL_JOB_RELEASED);
    return;
  }
  if (!j->owner[0]) {
    j->owner_seq = ++G->owner_seq;
    snprintf(j->owner, sizeof j->owner, "%s:%llu", G->owner, (unsigned long long)j->owner_seq);
  }
  j->claim_ms = sl__mono_ms(); /* a claim it gets is held from the request on */
  atomic_store(&j->claim_lost, 0);
  sl_queue_push(&G->cq, &j->link);
  if (G->cq.len >= SL_CLAIM_BATCH) {
    claims_flush(G);
    return;
  }
  batch_soon(G);
}

/* ---- renewals: the claims of the jobs that hold one, every third of the
 * lease; each claim answered (sl_claim_renew_lua) ---- */

enum { RENEW_BATCH = 256 };

/* One renewal script's jobs, by their owner sequence (sorted: the answer
 * finds a live job's claim by bsearch; a job that ended meanwhile is not
 * in the registry any more and its answer is ignored). */
typedef struct {
  sl_gate *G;
  int64_t sent_ms;
  int n;
  struct renewed {
    uint64_t seq;
    int i; /* its place in the script's answer */
  } e[RENEW_BATCH];
} renew_batch;

static int renewed_cmp(const void *a, const void *b) {
  uint64_t x = ((const struct renewed *)a)->seq, y = ((const struct renewed *)b)->seq;
  return x < y ? -1 : x > y;
}

/* A claim another owner holds now: a call that has not begun must not
 * begin without claiming again; one that runs is paid already. */
static void claim_lost(job *j) {
  int running = j->in_call && j->state != SL_JOB_POOL;
  j->claimed = 0;
  j->claim_end = 0;
  atomic_store(&j->claim_lost, 1);
  sl_metric_add(gate_of(j)->m_claims_lost, 1);
  sl_log(SL_LOG_WARN, j->key,
         "lost its claim on this input (it lapsed or Redis lost it, and another replica took "
         "it or stored outputs): %s",
         running ? "its call runs on, and its end leaves the claim alone"
                 : "it claims again before calling");
}

/* The renewal's answer: each claim extended, taken again, or lost. */
static void on_renewed(redisReply *r, void *ud) {
  renew_batch *b = ud;
  sl_jobs *R = b->G->R;
  int ok = !R->closing && r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)b->n;
  for (int k = 0; ok && k < b->n; k++)
    if (r->element[k]->type != REDIS_REPLY_INTEGER) ok = 0;
  if (!ok) { /* Redis unavailable: the leases run on (claim_stale) */
    free(b);
    return;
  }
  qsort(b->e, (size_t)b->n, sizeof b->e[0], renewed_cmp);
  for (job *j = R->all, *nx; j; j = nx) {
    nx = j->all_next;
    if (!j->claimed) continue;
    struct renewed key = {.seq = j->owner_seq}, *e;
    e = bsearch(&key, b->e, (size_t)b->n, sizeof b->e[0], renewed_cmp);
    if (!e) continue; /* claimed after this renewal was sent */
    long long code = r->element[e->i]->integer;
    if (code == SL_RENEW_LOST)
      claim_lost(j);
    else if (b->sent_ms > j->claim_ms)
      j->claim_ms = b->sent_ms;
  }
  free(b);
}

/* Sends one renewal script for the claims of js[0..n) (n <= RENEW_BATCH,
 * one bucket). 0 sent, -1 no memory. */
static int renew_some(sl_gate *G, job *const *js, int n, char (*keys)[2][256], const char **argv,
                      const char *lease) {
  renew_batch *b = malloc(sizeof *b);
  if (!b) return -1;
  b->G = G;
  b->sent_ms = sl__mono_ms();
  b->n = n;
  const char *owners[RENEW_BATCH];
  for (int i = 0; i < n; i++) {
    const job *j = js[i];
    claim_key(j, keys[i][0], sizeof keys[i][0]);
    sl__idem_key(j, keys[i][1], sizeof keys[i][1]);
    owners[i] = j->owner;
    b->e[i].seq = j->owner_seq;
    b->e[i].i = i;
  }
  char nk[16];
  snprintf(nk, sizeof nk, "%d", 2 * n);
  int a = 0;
  argv[a++] = "EVAL";
  argv[a++] = sl_claim_renew_lua;
  argv[a++] = nk;
  for (int i = 0; i < n; i++) {
    argv[a++] = keys[i][0];
    argv[a++] = keys[i][1];
  }
  argv[a++] = lease;
  for (int i = 0; i < n; i++) argv[a++] = owners[i];
  if (sl_aredis_argv(G->R->redis, on_renewed, b, a, argv, NULL) != 0) free(b);
  return 0;
}

/* by Redis bucket, then by owner sequence (a stable order) */
static int bucket_cmp(const void *a, const void *b) {
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  return x->owner_seq < y->owner_seq ? -1 : x->owner_seq > y->owner_seq;
}

/* Renews the claims of every job holding one: one script per batch of up
 * to RENEW_BATCH claims of one bucket (one slot of a Redis Cluster). */
static void on_claim_renew(uv_timer_t *t) {
  sl_gate *G = t->data;
  size_t n = 0;
  for (job *j = G->R->all; j; j = j->all_next) n += j->claimed != 0;
  if (!n) return;
  char(*keys)[2][256] = malloc(RENEW_BATCH * sizeof *keys);
  const char **argv = malloc((3 + 3 * RENEW_BATCH + 1) * sizeof *argv);
  job **js = malloc(n * sizeof *js);
  char lease[32];
  snprintf(lease, sizeof lease, "%lld", (long long)G->R->cc->claim_lease_ms);
  size_t k = 0;
  for (job *j = G->R->all; js && j; j = j->all_next)
    if (j->claimed) js[k++] = j;
  if (js && sl_rkey_bucketed()) qsort(js, n, sizeof *js, bucket_cmp);
  /* no memory: next time (the leases outlast two missed renewals) */
  for (size_t i = 0, e; keys && argv && js && i < n; i = e) {
    for (e = i + 1; e < n && e - i < RENEW_BATCH && js[e]->bucket == js[i]->bucket; e++) {
    }
    if (renew_some(G, js + i, (int)(e - i), keys, argv, lease) != 0) break;
  }
  free(js);
  free(keys);
  free(argv);
}

/* A claim the job may not rely on before it calls: a renewal found it lost,
 * or no request has confirmed it for a whole lease (Redis did not answer:
 * it may have lapsed and been taken). */
static int claim_stale(const job *j) {
  if (!claims_on(j)) return 0;
  if (atomic_load(&j->claim_lost)) return 1;
  return j->claimed && sl__mono_ms() - j->claim_ms >= j->R->cc->claim_lease_ms;
}

/* Claims j's input again before its call (claim_stale). */
static void claim_again(job *j) {
  j->claimed = 0; /* ours or not, the take script says (and extends it when ours) */
  j->claim_end = 0;
  claim_try(j);
}

/* ---- the start count: poison inputs (stage.max_starts) ---- */

/* what waits on the count may go (on the next turn of the loop) */
static void solo_kick(sl_gate *G) {
  if (G->pending || G->xq.head) batch_soon(G);
}

/* A deletion or un-count answered: a solo run waits for these, so that
 * the process cannot die on it before they are in. */
static void on_counted(redisReply *r, void *ud) {
  sl_gate *G = ud;
  (void)r;
  G->counting--;
  if (!G->R->closing) solo_kick(G);
}

/* Moves the ended counts of bucket to the front of G->sdel, both parts in
 * their order; returns how many there are. */
static int sdel_front(sl_gate *G, int bucket) {
  char(*tmp)[256] = G->sdel + SL_STARTS_DEL_MAX; /* the second half: scratch */
  int tb[SL_STARTS_DEL_MAX], d = 0, r;
  for (int i = 0; i < G->sdel_n; i++)
    if (G->sdel_bucket[i] == bucket) memcpy(tmp[d++], G->sdel[i], sizeof tmp[0]);
  r = d;
  for (int i = 0; i < G->sdel_n; i++)
    if (G->sdel_bucket[i] != bucket) {
      tb[r] = G->sdel_bucket[i];
      memcpy(tmp[r++], G->sdel[i], sizeof tmp[0]);
    }
  memcpy(G->sdel, tmp, (size_t)G->sdel_n * sizeof tmp[0]);
  for (int i = 0; i < G->sdel_n; i++) G->sdel_bucket[i] = i < d ? bucket : tb[i];
  return d;
}

/* Forgets the first d ended counts (sent). */
static void sdel_drop(sl_gate *G, int d) {
  if (d <= 0) return; /* G->sdel may not be there yet */
  memmove(G->sdel, G->sdel + d, (size_t)(G->sdel_n - d) * sizeof G->sdel[0]);
  memmove(G->sdel_bucket, G->sdel_bucket + d, (size_t)(G->sdel_n - d) * sizeof G->sdel_bucket[0]);
  G->sdel_n -= d;
}

/* Deletes the first d counts of inputs that ended (one DEL: one bucket). */
static void starts_del_send(sl_gate *G, int d) {
  const char *argv[1 + SL_STARTS_DEL_MAX];
  argv[0] = "DEL";
  for (int i = 0; i < d; i++) argv[1 + i] = G->sdel[i];
  if (d && sl_aredis_argv(G->R->redis, on_counted, G, 1 + d, argv, NULL) == 0) G->counting++;
  sdel_drop(G, d);
}

/* Deletes the counts of the inputs that ended (one DEL per bucket). */
static void starts_del_flush(sl_gate *G) {
  while (G->sdel_n > 0) starts_del_send(G, sdel_front(G, G->sdel_bucket[0]));
}

/* Takes j's start back (it did not run): its count is one less, so what
 * it started before stays counted. Sent at once; a solo run waits for it. */
static void starts_uncount(job *j) {
  sl_gate *G = gate_of(j);
  char k[256];
  sl__starts_key(j, k, sizeof k);
  if (j->starts > 0) G->counted--;
  j->starts = 0;
  if (!k[0]) return;
  const char *argv[] = {"DECR", k};
  if (sl_aredis_argv(j->R->redis, on_counted, G, 2, argv, NULL) == 0) G->counting++;
}

/* j ends (finished or let go) without the process dying: its start count
 * goes (batched). */
static void starts_end(job *j) {
  sl_gate *G = gate_of(j);
  if (j->starts <= 0 || j->R->closing) return;
  if (!j->ran) { /* counted, never called (released, its partition gone) */
    starts_uncount(j);
    return;
  }
  j->starts = 0;
  G->counted--;
  solo_kick(G);
  if (!G->sdel && !(G->sdel = malloc(2 * SL_STARTS_DEL_MAX * sizeof *G->sdel)))
    return; /* no memory: the count stays until its TTL */
  sl__starts_key(j, G->sdel[G->sdel_n], sizeof G->sdel[0]);
  if (!G->sdel[G->sdel_n][0]) return;
  G->sdel_bucket[G->sdel_n] = j->bucket;
  if (++G->sdel_n >= SL_STARTS_DEL_MAX) {
    starts_del_flush(G);
    return;
  }
  batch_soon(G);
}

/* j's start could not be counted: it runs all the same (progress over the
 * count), said once a minute and counted */
static void uncounted(job *j) {
  sl_gate *G = gate_of(j);
  j->starts = -1;
  sl_metric_add(G->m_uncounted, 1);
  int64_t now = sl__mono_ms();
  if (!G->uncounted_warned_ms || now - G->uncounted_warned_ms >= 60000) {
    G->uncounted_warned_ms = now;
    sl_log(SL_LOG_WARN, j->key,
           "start counts unavailable (Redis): inputs run uncounted, unprotected from poison "
           "inputs (stage.max_starts) until Redis answers again");
  }
}

/* The process died during each of j's earlier runs: a dead letter, uncalled. */
static void poison(job *j) {
  claim_release(j);
  sl_result_set(&j->res, SL_OUTCOME_FAIL, "poison",
                "started %lld times without finishing (the process ended during each run: a "
                "crash, an abort, an OOM kill; stage.max_starts %lld): not run again",
                (long long)(j->starts - 1), (long long)j->R->cc->max_starts);
  sl__job_to(j, SL_JOB_OUTCOME);
}

/* j waits for a solo run, uncounted (a start it has not made must not be
 * charged to it if the solo run kills the process) */
static void solo_wait(job *j) {
  sl_gate *G = gate_of(j);
  if (j->R->stopping) { /* nothing waits while stopping: redelivered after the restart */
    claim_release(j);
    sl__job_to(j, SL_JOB_RELEASED); /* takes its start back */
    return;
  }
  if (j->starts > 0) starts_uncount(j);
  sl_queue_push(&G->xq, &j->link);
}

static void log_start(const job *j, int alone) {
  const part *p = j->p;
  if (alone)
    sl_log(SL_LOG_WARN, j->key,
           "%s [%d] offset %lld started %lld time(s) before without finishing: running it "
           "alone (at %lld of stage.max_starts it is dead-lettered as poison)",
           p->id.topic, (int)p->id.partition, (long long)j->offset, (long long)(j->starts - 1),
           (long long)j->R->cc->max_starts);
  else
    sl_log(SL_LOG_INFO, j->key,
           "%s [%d] offset %lld started %lld time(s) before without finishing: running it "
           "(alone at start %lld, dead-lettered as poison after that)",
           p->id.topic, (int)p->id.partition, (long long)j->offset, (long long)(j->starts - 1),
           (long long)j->R->cc->max_starts);
}

/* j's count came back: n its starts so far, this one included (< 1: it
 * could not be counted); a command of G->counting answered */
static void counted_as(job *j, long long n) {
  sl_gate *G = gate_of(j);
  G->counting--;
  if (!j->R->closing) {
    solo_kick(G);
    if (n < 1) {
      uncounted(j);
    } else {
      j->starts = n;
      G->counted++;
    }
  }
  sl_start_in in = {
      j->R->closing,     0, j->R->stopping, j->starts, j->R->cc->max_starts, G->solo != NULL,
      G->pending != NULL};
  in.stale = !in.closing && sl__job_stale(j);
  sl_start_step s = sl_admit_started(&in);
  if ((s == SL_START_GO || s == SL_START_SOLO_WAIT) && sl_admit_suspect(j->starts, in.max_starts) &&
      !j->suspect_noted) {
    j->suspect_noted = 1;
    log_start(j, 0);
  }
  switch (s) {
  case SL_START_DROP:
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  case SL_START_RELEASE: /* its partition went away meanwhile: the start is taken back */
    claim_release(j);
    sl__job_to(j, SL_JOB_RELEASED);
    return;
  case SL_START_UNCOUNTED:
    call_now(j);
    return;
  case SL_START_POISON:
    poison(j);
    return;
  case SL_START_GO: /* counted: it runs (a suspect pending waits for it) */
    call_go(j);
    return;
  case SL_START_SOLO_WAIT: /* another suspect first */
    solo_wait(j);
    return;
  case SL_START_ALONE: /* runs alone once the calls and counts under way are over */
    G->pending = j;
    solo_kick(G);
    log_start(j, 1);
    return;
  }
}

/* j's count came back: r its element of the batch's reply, or NULL */
static void started(job *j, const redisReply *r) {
  counted_as(j, r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0);
}

/* One starts script: the jobs counted, and whether it also deleted the
 * counts of inputs that ended (a solo run waits for that answer too). */
typedef struct {
  job_batch b;
  sl_gate *G;
  int dels;
} starts_batch;

static void on_starts(redisReply *r, void *ud) {
  starts_batch *sb = ud;
  redisReply **el = sl__batch_reply(&sb->b, r, 1);
  for (int i = 0; i < sb->b.n; i++) started(sb->b.jobs[i], el ? el[i] : NULL);
  if (sb->dels) on_counted(r, sb->G);
  free(sb);
}

/* j runs uncounted: no count could be asked for it */
static void run_uncounted(job *j) {
  gate_of(j)->counting--;
  uncounted(j);
  call_now(j);
}

/* Takes up to SL_CLAIM_BATCH counts of one bucket from G->tq into b with
 * their keys; *bucket becomes theirs (-1: none taken). */
static void starts_take(sl_gate *G, job_batch *b, char (*keys)[256], int *bucket) {
  job *j;
  b->n = 0;
  *bucket = -1;
  while (b->n < SL_CLAIM_BATCH && (j = sl__job_pop_bucket(&G->tq, *bucket)) != NULL) {
    sl__starts_key(j, keys[b->n], 256);
    if (!keys[b->n][0]) { /* no key for it: uncounted */
      run_uncounted(j);
      continue;
    }
    *bucket = j->bucket;
    b->jobs[b->n++] = j;
  }
}

/* Sends the queued start counts (with the deletions of ended ones). */
static void starts_flush(sl_gate *G) {
  char ttl[32], nk[16];
  snprintf(ttl, sizeof ttl, "%d", SL_STARTS_TTL_S);
  while (G->tq.head) {
    starts_batch *sb = malloc(sizeof *sb);
    char keys[SL_CLAIM_BATCH][256];
    if (!sb) { /* no memory: each one runs uncounted, as without Redis */
      starts_del_flush(G);
      job *j;
      while ((j = sl__job_pop(&G->tq)) != NULL) run_uncounted(j);
      return;
    }
    sb->G = G;
    int bucket;
    starts_take(G, &sb->b, keys, &bucket);
    int n = sb->b.n;
    if (!n) {
      free(sb);
      continue;
    }
    /* the counts of the inputs of this bucket that ended go first, in the
     * same script when they fit (an input taken again after it ended
     * counts from 0); those of other buckets wait for their own */
    int d = G->sdel_n ? sdel_front(G, bucket) : 0;
    if (d > SL__REDIS_SCRIPT_MAX_ARGS - 2 - n) {
      starts_del_send(G, d);
      d = 0;
    }
    const char *argv[SL__REDIS_SCRIPT_MAX_ARGS];
    for (int i = 0; i < n; i++) argv[i] = keys[i];
    for (int i = 0; i < d; i++) argv[n + i] = G->sdel[i];
    snprintf(nk, sizeof nk, "%d", n);
    argv[n + d] = ttl;
    argv[n + d + 1] = nk;
    sb->dels = d > 0;
    if (sb->dels) G->counting++;
    int rc = sl_aredis_eval(G->R->redis, on_starts, sb, &G->s_starts, n + d, n + d + 2, argv, NULL);
    sdel_drop(G, d);                  /* sent (copied) or lost with Redis */
    if (rc != 0) on_starts(NULL, sb); /* Redis unavailable: each one runs uncounted */
  }
  starts_del_flush(G); /* no count to send them with */
}

/* The folded lookup's answer: stored outputs (nothing was counted), or
 * the count, as starts_flush's scripts answer it. */
static void on_lookup_counted(redisReply *r, void *ud) {
  job *j = ud;
  sl_gate *G = gate_of(j);
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER;
  if (ok && r->element[0]->integer == 1 && r->element[1]->type == REDIS_REPLY_STRING &&
      !j->R->closing) {
    G->counting--;
    solo_kick(G);
    if (sl_idem_unpack(r->element[1]->str, r->element[1]->len, &j->out) == 0) {
      sl__job_to(j, SL_JOB_REUSE);
      return;
    }
    /* unusable stored outputs: as if there were none, counted on its own */
    sl__gate_enter(j);
    return;
  }
  if (!ok) sl_log(SL_LOG_DEBUG, j->key, "idempotency lookup unavailable; processing");
  started(j, ok ? r->element[1] : NULL); /* NULL: runs uncounted */
}

/* A stage without a provider gate counts an input's start with its
 * idempotency lookup, in one round trip (sl_claim_lookup_lua): 0 sent,
 * else nothing sent (the gate goes on without a lookup). */
static int lookup_counted(job *j) {
  sl_gate *G = gate_of(j);
  char k[256], sk[256], ttl[32];
  j->looked_up = 1;
  sl__idem_key(j, k, sizeof k);
  sl__starts_key(j, sk, sizeof sk);
  if (!k[0] || !sk[0]) return SL_EINVAL;
  snprintf(ttl, sizeof ttl, "%d", SL_STARTS_TTL_S);
  const char *argv[] = {k, sk, ttl};
  G->counting++;
  int rc = sl_aredis_eval(j->R->redis, on_lookup_counted, j, &G->s_lookup, 2, 3, argv, NULL);
  if (rc != 0) G->counting--;
  return rc;
}

/* Counts j's start: queued, and sent with the other counts of this turn of
 * the loop (one script for up to SL_CLAIM_BATCH inputs). */
static void starts_count(job *j) {
  sl_gate *G = gate_of(j);
  G->counting++;
  sl_queue_push(&G->tq, &j->link);
  if (G->tq.len >= SL_CLAIM_BATCH) {
    starts_flush(G);
    return;
  }
  batch_soon(G);
}

/* ---- solo runs: a suspect runs with no other call beside it ---- */

/* Starts the solo run, or the jobs waiting behind one, that may go now. */
static void calls_resume(sl_gate *G) {
  if (G->solo || G->R->closing || G->R->stopping) return;
  if (G->pending) {
    /* every other counted job has ended (its count deleted: the deletion
     * answered), nothing runs: its call end / on_counted / starts_end kicks */
    if (!sl_admit_solo_ready(G->calls, G->counting, G->counted)) return;
    job *j = G->pending;
    G->pending = NULL;
    if (sl__job_stale(j)) {
      claim_release(j);
      sl__job_to(j, SL_JOB_RELEASED);
    } else {
      G->solo = j;
      call_go(j); /* may end j */
      return;
    }
  }
  /* no solo run: what waited is counted and called as usual */
  while (G->xq.head && !G->solo && !G->pending) call_now(sl__job_pop(&G->xq));
}

/* j's call is over (its outcome is in): a solo run may start, or what
 * waited behind one go. */
static void call_end(job *j) {
  sl_gate *G = gate_of(j);
  if (!j->in_call) return;
  j->in_call = 0;
  sl_metric_gauge_add(j->m_calling, -1);
  G->calls--;
  if (G->solo == j) G->solo = NULL;
  solo_kick(G); /* on the next turn: not inside j's outcome */
}

/* ---- the call ---- */

static void call_now(job *j) {
  sl_gate *G = gate_of(j);
  sl_call_in in = {j->R->closing,  sl__job_stale(j),
                   claim_stale(j), G->solo != NULL || (G->pending && G->pending != j),
                   j->starts != 0, j->R->cc->max_starts};
  switch (sl_admit_call(&in)) {
  case SL_CALL_DROP:
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  case SL_CALL_RELEASE:
    claim_release(j);
    sl__job_to(j, SL_JOB_RELEASED);
    return;
  case SL_CALL_RECLAIM: /* lost while it waited: claim again first */
    claim_again(j);
    return;
  case SL_CALL_SOLO_WAIT: /* behind a solo run, in order */
    solo_wait(j);
    return;
  case SL_CALL_COUNT: /* counted before it begins */
    starts_count(j);
    return;
  case SL_CALL_GO:
    call_go(j);
    return;
  }
}

/* Counted in the calls a solo run waits for, then handed to the work. */
static void call_go(job *j) {
  const sl_fair_counts *c = sl__fair_counts(&gate_of(j)->fl, j->tenant);
  j->m_calling = c ? c->calling : NULL;
  sl_metric_gauge_add(j->m_calling, 1);
  j->in_call = 1;
  j->ran = 1;
  gate_of(j)->calls++;
  sl__job_to(j, SL_JOB_CALL);
}

/* ---- what the loop calls ---- */

static void on_batch_idle(uv_idle_t *h) {
  sl_gate *G = h->data;
  uv_idle_stop(h); /* what a flush queues arms it again */
  starts_flush(G);
  claims_flush(G);
  calls_resume(G);
}

static void batch_soon(sl_gate *G) {
  if (!uv_is_active((uv_handle_t *)&G->batch_idle)) uv_idle_start(&G->batch_idle, on_batch_idle);
}

void sl__gate_claim(job *j) {
  call_end(j); /* a run again, or a claim lost before a worker called */
  if (j->R->closing) {
    sl__job_to(j, SL_JOB_DROPPED);
    return;
  }
  double spent, limit;
  if (j->R->o->provider && !j->claimed &&
      sl__budget_over(&gate_of(j)->budgets, j->tenant, &spent, &limit)) {
    budget_spent(j, spent, limit); /* the last step before the call */
    return;
  }
  if (claims_on(j) && !j->claimed) {
    claim_try(j); /* claim_try and call_now let go of a job whose partition went away */
    return;
  }
  call_now(j);
}

void sl__gate_outcome(job *j) {
  const sl_jobs *R = j->R;
  call_end(j);
  if (R->closing) return;
  if (j->out.key_lost) { /* Redis lost its data key: presign rebuilds the store */
    const char *del[] = {"DEL", sl_dkey_marker()};
    sl_aredis_argv(R->redis, NULL, NULL, 2, del, NULL);
  }
  if (R->o->provider && j->res.provider_called) provider_outcome(j);
  if (R->o->provider && j->res.outcome != SL_OUTCOME_RETRY) tenant_outcome(j);
  /* the claim: a dead letter holds it until it is written (then an end
   * mark); outputs to store release it with the store; else it goes now,
   * and the next claimant calls */
  int fail =
      j->res.outcome == SL_OUTCOME_FAIL || (j->res.outcome == SL_OUTCOME_DONE && j->out.failed);
  int stores = j->res.outcome == SL_OUTCOME_DONE && !j->out.failed && R->o->idempotent && j->out.n;
  if (fail && j->claimed)
    j->claim_end = 1;
  else if (!stores)
    claim_release(j);
}

/* KEYS: a tenant's cost of the day (sl_tenant.h); ARGV: units, its TTL (s) */
static const char tenant_cost_lua[] =
    "redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])\n"
    "if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end\n"
    "return 0\n";

/* What j's call cost, counted against its tenant's day (presign refuses
 * the tenant's creates once it reaches cost_per_day). Sent and not waited
 * for: a count lost with Redis errs toward the tenant. */
static void tenant_spent(job *j) {
  char key[SL_TENANT_KEY_MAX], units[32], ttl[24];
  const sl_fair_counts *c = sl__fair_counts(&gate_of(j)->fl, j->tenant);
  if (c) sl_metric_add_real(c->cost, j->res.cost_units);
  if (!j->tenant[0] || !(j->res.cost_units > 0) ||
      sl_tenant_day_key(j->tenant, sl_now_ms(), "cost", key))
    return;
  sl__budget_spend(&gate_of(j)->budgets, j->tenant, j->res.cost_units);
  snprintf(units, sizeof units, "%.17g", j->res.cost_units);
  snprintf(ttl, sizeof ttl, "%d", SL_TENANT_DAY_TTL_S);
  const char *a[] = {key, units, ttl};
  sl_aredis_eval(j->R->redis, NULL, NULL, &gate_of(j)->s_tenant_cost, 1, 3, a, NULL);
}

/* A provider call's outcome: the breaker, the metrics, a 429's pause. */
static void provider_outcome(job *j) {
  sl_gate *G = gate_of(j);
  const sl_jobs *R = j->R;
  int ok = j->res.outcome != SL_OUTCOME_RETRY;
  sl_breaker_record(G->breaker, sl__mono_ms(), ok);
  sl_metric_add(j->res.outcome == SL_OUTCOME_DONE   ? G->m_calls_ok
                : j->res.outcome == SL_OUTCOME_FAIL ? G->m_calls_perm
                : j->res.provider_throttled         ? G->m_calls_throttled
                                                    : G->m_calls_fail,
                1);
  sl_histogram_observe(G->h_call, (double)(uv_hrtime() - j->call_ns) / 1e9);
  sl_metric_add_real(G->m_cost, j->res.cost_units);
  tenant_spent(j);
  sl_breaker_state st = sl_breaker_get_state(G->breaker);
  if ((int64_t)st != (int64_t)sl_metric_value(G->m_breaker_state) && st == SL_BREAKER_OPEN)
    sl_log(SL_LOG_WARN, NULL, "provider %s: circuit breaker opened", R->o->provider);
  sl_metric_set(G->m_breaker_state, st);
  if (G->bq.head && st != SL_BREAKER_OPEN) /* the probe answered: let the held go */
    uv_timer_start(&G->bq_timer, on_bq_timer, 0, 0);
  int64_t pause =
      j->res.provider_throttled ? sl_retry_after_clamp(R->rp, j->res.retry_after_ms) : 0;
  if (pause > 0) {
    /* pause the provider for every replica (one atomic script that only
     * ever extends a pause), for at most provider.max_retry_after_ms; this
     * process's own calls see it at once */
    char ms[32];
    snprintf(ms, sizeof ms, "%lld", (long long)pause);
    const char *a[] = {G->pause_key, ms};
    sl_aredis_eval(R->redis, NULL, NULL, &G->s_pause, 1, 2, a, NULL);
    int64_t until = sl__mono_ms() + pause;
    if (until > G->pause_until_ms) G->pause_until_ms = until;
    sl_log(SL_LOG_WARN, j->key, "provider %s throttled us: pausing all replicas for %s ms",
           R->o->provider, ms);
  }
}

void sl__gate_stored(job *j) {
  sl_gate *G = gate_of(j);
  if (j->store_reply == 2) j->claimed = 0; /* the store script released it */
  if (j->store_reply && j->starts > 0) {   /* its count went with the store */
    j->starts = 0;
    G->counted--;
    solo_kick(G);
  }
  claim_release(j); /* after the store: a waiting replica finds the outputs */
}

void sl__gate_finished(job *j, int fatal) {
  starts_end(j);
  claim_finish(j, fatal); /* a dead letter's claim becomes its end mark */
}

void sl__gate_released(job *j) {
  starts_end(j); /* it did not die on it: its start is not charged */
}

static int stale_link(sl_qlink *l, void *ud) {
  (void)ud;
  return sl__job_stale(sl__job_of(l));
}

/* Lets go of the stale jobs of q (the head stays when busy: it is waiting
 * on Redis and checks itself). */
static void release_stale(sl_queue *q, int keep_head) {
  sl_queue stale = {NULL, NULL, 0};
  sl_queue_split(q, keep_head, stale_link, NULL, &stale);
  job *j;
  while ((j = sl__job_pop(&stale)) != NULL) sl__job_to(j, SL_JOB_RELEASED);
}

void sl__gate_release_partition(sl_gate *G) {
  release_stale(&G->bq, 0);
  held_count(G);
  sl_queue stale = {NULL, NULL, 0};
  sl__fair_split(&G->fl, stale_link, &stale);
  job *j;
  while ((j = sl__job_pop(&stale)) != NULL) sl__job_to(j, SL_JOB_RELEASED);
}

int64_t sl__gate_held(const sl_gate *G) { return G->bq.len; }

int sl__gate_provider_bound(const sl_gate *G, int64_t within_ms) {
  if (!G->R->o->provider) return 0;
  if (G->bq.len > 0 || sl_breaker_get_state(G->breaker) != SL_BREAKER_CLOSED) return 1;
  return sl__mono_ms() < G->wait_until_ms + within_ms;
}

void sl__gate_stop(sl_gate *G) {
  job *j;
  uv_timer_stop(&G->bq_timer);
  while ((j = sl__job_pop(&G->bq)) != NULL) /* redelivered after the restart */
    sl__job_to(j, SL_JOB_RELEASED);
  held_count(G);
  if ((j = G->pending) != NULL) { /* behind a solo run: the same */
    G->pending = NULL;
    claim_release(j);
    sl__job_to(j, SL_JOB_RELEASED); /* never ran: its count is taken back */
  }
  while ((j = sl__job_pop(&G->xq)) != NULL) {
    claim_release(j);
    sl__job_to(j, SL_JOB_RELEASED);
  }
}

void sl__gate_tick(sl_gate *G) {
  int64_t now = sl__mono_ms();
  if (now - G->tick_ms < 1000) return;
  G->tick_ms = now;
  sl__fair_tick(&G->fl);
  sl__budget_tick(&G->budgets);
}

void sl__gate_close(sl_gate *G) {
  if (!G || !G->R) return;
  /* their jobs are dropped by the loop's last walk */
  sl__fair_close(&G->fl);
  sl__budget_close(&G->budgets);
  sl_queue_forget(&G->pq);
  sl_queue_forget(&G->cq);
  sl_queue_forget(&G->tq);
  sl_queue_forget(&G->xq);
  sl_queue_forget(&G->bq);
  G->pending = G->solo = NULL;
  sl_breaker_free(G->breaker);
  G->breaker = NULL;
  free(G->sdel);
  G->sdel = NULL;
}

/* ---- set-up ---- */

static void gate_metrics(sl_gate *G) {
  const sl_stage_opts *o = G->R->o;
  G->m_claim_waits =
      sl__metric("sluice_claim_waits_total", o->stage, NULL,
                 "Inputs another replica was already calling the provider for: waited for its "
                 "outputs instead of calling",
                 0);
  G->m_claims_lost = sl__metric("sluice_claims_lost_total", o->stage, NULL,
                                "Claims a renewal found lost (lapsed or lost by Redis, and taken "
                                "by another replica): a call not begun claims again first",
                                0);
  G->m_claim_ends = sl__metric("sluice_claim_ends_total", o->stage, NULL,
                               "Inputs ended without a call: the same message failed for good on "
                               "another replica, which wrote its dead letter",
                               0);
  G->m_uncounted =
      sl__metric("sluice_starts_uncounted_total", o->stage, NULL,
                 "Inputs started without their start being counted (Redis unavailable): "
                 "unprotected from poison inputs (stage.max_starts)",
                 0);
}

/* the provider's series: its name without the "<stage>-" prefix is the plugin */
static void provider_metrics(sl_gate *G) {
  const sl_stage_opts *o = G->R->o;
  char pl[128], l[192], hl[256];
  snprintf(pl, sizeof pl, "provider=\"%s\"", o->provider);
  G->m_limiter_waits = sl__metric("sluice_limiter_waits_total", o->stage, pl,
                                  "Calls delayed by the shared rate limit", 0);
  G->m_breaker_state = sl__metric("sluice_breaker_state", o->stage, pl,
                                  "Circuit breaker: 0 closed, 1 open, 2 half-open", 1);
  G->m_circuit_skips = sl__metric("sluice_breaker_rejections_total", o->stage, pl,
                                  "Messages the open breaker held back (breaker.hold) or sent "
                                  "to a retry tier",
                                  0);
  G->m_held = sl__metric("sluice_breaker_held", o->stage, pl,
                         "Messages held in memory while the breaker is open", 1);
  size_t sn = strlen(o->stage);
  const char *plugin = strncmp(o->provider, o->stage, sn) == 0 && o->provider[sn] == '-'
                           ? o->provider + sn + 1
                           : o->provider;
  snprintf(l, sizeof l, "stage=\"%s\",plugin=\"%s\"", o->stage, plugin);
  G->m_cost = sl_metrics_counter_real("sluice_provider_cost_units_total", l,
                                      "What provider calls cost, in the plugin's units "
                                      "(docs/operations.md), retries included");
  static const char *const results[] = {"ok", "transient_failure", "throttled",
                                        "permanent_failure"};
  sl_metric **by[] = {&G->m_calls_ok, &G->m_calls_fail, &G->m_calls_throttled, &G->m_calls_perm};
  for (int i = 0; i < 4; i++) {
    snprintf(l, sizeof l, "%s,result=\"%s\"", pl, results[i]);
    *by[i] = sl__metric("sluice_provider_calls_total", o->stage, l, "Provider calls by result", 0);
  }
  snprintf(hl, sizeof hl, "stage=\"%s\",%s", o->stage, pl);
  G->h_call = sl_metrics_histogram("sluice_provider_call_seconds", hl,
                                   "Provider call latency (from the call to its outcome)",
                                   sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
}

/* "<host>:<pid>:<random>": this process's claims */
static void owner_prefix(sl_gate *G) {
  char host[40] = "", rnd[17] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "host");
  host[sizeof host - 1] = '\0';
  if (sl_random_hex(8, rnd, sizeof rnd) != 0)
    snprintf(rnd, sizeof rnd, "%llx", (unsigned long long)uv_hrtime());
  snprintf(G->owner, sizeof G->owner, "%.39s:%ld:%.16s", host, (long)getpid(), rnd);
}

/* The limiter's keys and share: bucket (provider.limit_bucket, or this
 * process's hash) of provider.limit_buckets, named for redis.buckets
 * (sl_limiter.h). */
static int limiter_setup(sl_gate *G, char *err, size_t errlen) {
  const sl_common_conf *cc = G->R->cc;
  const char *p = G->R->o->provider ? G->R->o->provider : "-";
  int64_t k = cc->provider_limit_buckets;
  if (k < 1 || k > SL_LIMITER_MAX_BUCKETS) {
    snprintf(err, errlen, "provider.limit_buckets %lld is not between 1 and %d", (long long)k,
             SL_LIMITER_MAX_BUCKETS);
    return SL_ECONFIG;
  }
  int b = cc->provider_limit_bucket >= 0 ? (int)(cc->provider_limit_bucket % k)
                                         : sl_limiter_replica_bucket((int)k);
  if (sl_limiter_keys_of(p, b, (int)k, G->limit_key, sizeof G->limit_key, G->pause_key,
                         sizeof G->pause_key) != 0) {
    /* not a limiter name ([A-Za-z0-9._-], 64 at most): the plain names */
    snprintf(G->limit_key, sizeof G->limit_key, "sl:limit:%s", p);
    snprintf(G->pause_key, sizeof G->pause_key, "sl:pause:%s", p);
  }
  G->pause_in_take = sl_limiter_pause_in_take((int)k);
  double rate, burst;
  sl_limiter_share(cc->provider_rate, cc->provider_burst >= 1 ? cc->provider_burst : 1, (int)k,
                   &rate, &burst);
  snprintf(G->limit_rate, sizeof G->limit_rate, "%.17g", rate);
  snprintf(G->limit_burst, sizeof G->limit_burst, "%.17g", burst);
  if (sl_fair_keys(G->limit_key, G->fair_u, G->fair_s) != 0) { /* the plain names' */
    snprintf(G->fair_u, sizeof G->fair_u, "sl:fair:u:%s", p);
    snprintf(G->fair_s, sizeof G->fair_s, "sl:fair:s:%s", p);
  }
  /* a tenant's line holds 2 s of the rate; with the schedule, 1.5 times
   * the first retry tier's delay if longer (a deferral comes back no sooner
   * than that: the line must last it); provider.tenant_hold */
  double hold_s =
      cc->provider_tenant_schedule ? fmax(2, 1.5 * (double)G->R->rp->tier_ms[0] / 1000) : 2;
  int64_t hold = cc->provider_tenant_hold > 0 ? cc->provider_tenant_hold
                                              : (int64_t)ceil(hold_s * (rate > 0 ? rate : 1));
  sl__fair_init(&G->fl, G->R, hold, rate > 0 ? 1000 / rate : 1000);
  if (G->R->o->provider && cc->provider_rate > 0 && k > 1)
    sl_log(SL_LOG_INFO, NULL, "provider %s: limiter bucket %d of %lld (%s calls/s, burst %s)", p, b,
           (long long)k, G->limit_rate, G->limit_burst);
  return 0;
}

static void gate_timer(sl_gate *G, uv_timer_t *t) {
  uv_timer_init(G->R->uv, t);
  t->data = G;
}

int sl__gate_init(sl_gate *G, sl_jobs *R, char *err, size_t errlen) {
  const sl_stage_opts *o = R->o;
  memset(G, 0, sizeof *G);
  G->R = R;
  R->gate = G;
  sl_redis_script_init(&G->s_fair, sl_fair_take_lua);
  sl_redis_script_init(&G->s_pause, sl_limiter_pause_lua);
  sl_redis_script_init(&G->s_claim_take, sl_claim_take_lua);
  sl_redis_script_init(&G->s_claim_release, sl_claim_release_lua);
  sl_redis_script_init(&G->s_claim_end, sl_claim_end_lua);
  sl_redis_script_init(&G->s_starts, sl_claim_starts_lua);
  sl_redis_script_init(&G->s_lookup, sl_claim_lookup_lua);
  sl_redis_script_init(&G->s_tenant_cost, tenant_cost_lua);
  sl__budget_init(&G->budgets, G->R);
  int rc = limiter_setup(G, err, errlen);
  if (rc) return rc;
  gate_metrics(G);
  owner_prefix(G);
  if (o->provider) {
    provider_metrics(G);
    sl_breaker_opts bo = {R->cc->breaker_failure_ratio, (unsigned)R->cc->breaker_min_calls,
                          R->cc->breaker_window_ms, R->cc->breaker_probe_interval_ms};
    rc = sl_breaker_new(&G->breaker, &bo);
    if (rc) {
      snprintf(err, errlen, "breaker settings: %s", sl_strerror(rc));
      return rc;
    }
  }
  gate_timer(G, &G->lq_timer);
  gate_timer(G, &G->bq_timer);
  gate_timer(G, &G->claim_timer);
  uv_idle_init(R->uv, &G->batch_idle);
  G->batch_idle.data = G;
  if (o->provider && o->idempotent && R->cc->claim_lease_ms > 0) {
    uint64_t every = (uint64_t)(R->cc->claim_lease_ms / 3 > 0 ? R->cc->claim_lease_ms / 3 : 1);
    uv_timer_start(&G->claim_timer, on_claim_renew, every, every);
  }
  return 0;
}
