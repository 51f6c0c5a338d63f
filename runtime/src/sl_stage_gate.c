/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_gate.c — the provider gate: what a job passes between its
 * idempotency lookup and its provider call.
 *
 *   breaker  while the provider's breaker is open, jobs are held in order
 *            (breaker.hold) or sent to a retry tier; one probe per interval;
 *   limiter  with provider.rate, jobs queue in order and only the head asks
 *            the shared Redis limiter, so a backlog costs one call per grant;
 *   pause    without a rate, a provider's 429 pause (a Redis key every
 *            replica reads) holds the call;
 *   claim    an idempotent stage claims the input in Redis with a lease
 *            before calling (sl_claim.h): one paid call across replicas;
 *   starts   every stage (stage.max_starts) counts the input's start in
 *            Redis before calling, batched per turn of the loop, and deletes
 *            the count when the input ends: a count past max_starts means
 *            the process died during each earlier run (a poison input), so
 *            it becomes a dead letter of class poison, uncalled; a count
 *            above 1 makes it a suspect, which runs alone (no other call at
 *            once) at its last chance, its start number max_starts: the
 *            death that decides is its own, not one of an input running
 *            beside it; earlier restarts run at full concurrency (a death
 *            kills every call the process had running: most are collateral).
 * A job whose partition was taken away meanwhile is released uncalled.
 * Redis unavailable: every step fails open (the start runs uncounted,
 * counted in sluice_starts_uncounted_total, with a warning). Loop thread
 * only.
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

/* ---- the provider gate ---- */

/* A call waits wait_ms for the shared limiter or the provider's pause: the
 * provider is the bottleneck meanwhile (sl_stage_lag.c, actionable lag). */
static void gate_waits(loop_t *L, int64_t wait_ms) {
  sl_metric_add(L->m_limiter_waits, 1);
  int64_t until = sl__mono_ms() + wait_ms;
  if (until > L->gate_wait_until_ms) L->gate_wait_until_ms = until;
}

static void limiter_try(loop_t *L);

static void on_lq_timer(uv_timer_t *t) { limiter_try(t->data); }

void sl__q_push(job **head, job **tail, job *j) {
  j->next = NULL;
  if (*tail)
    (*tail)->next = j;
  else
    *head = j;
  *tail = j;
}

job *sl__q_pop(job **head, job **tail) {
  job *j = *head;
  if (!j) return NULL;
  *head = j->next;
  if (!*head) *tail = NULL;
  j->next = NULL;
  return j;
}

static job *lq_pop(loop_t *L) { return sl__q_pop(&L->lq_head, &L->lq_tail); }
static job *cq_pop(loop_t *L) {
  job *j = sl__q_pop(&L->cq_head, &L->cq_tail);
  if (j) L->cq_len--;
  return j;
}

/* The head's answer: go (or Redis unavailable: fail open), or wait. */
static void on_limit_q(redisReply *r, void *ud) {
  loop_t *L = ud;
  L->lq_busy = 0;
  if (L->closing) {
    job *j;
    while ((j = lq_pop(L)) != NULL) sl__job_drop(j);
    return;
  }
  int64_t wait = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  if (wait > 0) {
    gate_waits(L, wait);
    uv_timer_start(&L->lq_timer, on_lq_timer, (uint64_t)wait, 0);
    return;
  }
  job *j = lq_pop(L);
  if (j) sl__run_process(j);
  limiter_try(L);
}

static void limiter_try(loop_t *L) {
  if (L->lq_busy || !L->lq_head || L->closing) return;
  char rate[32], burst[32];
  snprintf(rate, sizeof rate, "%.17g", L->cc->provider_rate);
  snprintf(burst, sizeof burst, "%.17g", L->cc->provider_burst >= 1 ? L->cc->provider_burst : 1);
  const char *argv[] = {L->limit_key, L->pause_key, rate, burst, "1"};
  L->lq_busy = 1;
  if (sl_aredis_eval(L->redis, on_limit_q, L, &L->s_limit, 2, 5, argv, NULL) != 0) {
    L->lq_busy = 0; /* Redis unavailable: fail open for the head */
    job *j = lq_pop(L);
    if (j) sl__run_process(j);
    if (L->lq_head) uv_timer_start(&L->lq_timer, on_lq_timer, 10, 0);
  }
}

static void gate_limits(job *j);
static int claims_on(const job *j);

static void bq_push(loop_t *L, job *j) {
  sl__q_push(&L->bq_head, &L->bq_tail, j);
  L->bq_len++;
  sl_metric_set(L->m_held, L->bq_len);
}

job *sl__bq_pop(loop_t *L) {
  job *j = sl__q_pop(&L->bq_head, &L->bq_tail);
  if (!j) return NULL;
  L->bq_len--;
  sl_metric_set(L->m_held, L->bq_len);
  return j;
}

/* The breaker may let something through: one probe while it is half-open,
 * everything once it is closed again. */
void sl__on_bq_timer(uv_timer_t *t) {
  loop_t *L = t->data;
  while (L->bq_head && !L->closing) {
    int64_t retry_in = 0;
    if (!sl_breaker_allow(L->breaker, sl__mono_ms(), &retry_in)) {
      uv_timer_start(&L->bq_timer, sl__on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
      return;
    }
    sl_metric_set(L->m_breaker_state, sl_breaker_get_state(L->breaker));
    gate_limits(sl__bq_pop(L));
    if (sl_breaker_get_state(L->breaker) != SL_BREAKER_CLOSED) { /* a probe is out */
      uv_timer_start(&L->bq_timer, sl__on_bq_timer, (uint64_t)L->cc->breaker_probe_interval_ms, 0);
      return;
    }
  }
}

static void circuit_open(job *j, int64_t retry_in) {
  loop_t *L = j->L;
  sl_metric_add(L->m_circuit_skips, 1);
  if (L->cc->breaker_hold) {
    if (L->stopping) { /* not processed: redelivered after the restart */
      sl__held_release(j);
      return;
    }
    bq_push(L, j);
    if (!uv_is_active((uv_handle_t *)&L->bq_timer))
      uv_timer_start(&L->bq_timer, sl__on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
    return;
  }
  memset(&j->res, 0, sizeof j->res);
  sl_result_set(&j->res, SL_OUTCOME_RETRY, "circuit_open",
                "provider %s is failing; its circuit breaker is open", L->o->provider);
  sl__to_retry(j);
  sl__produce(j);
}

/* Without a rate only a 429's pause (the pause key's PTTL) can hold a call.
 * The key is read at most once per SL_PAUSE_FRESH_MS, not per call: another
 * replica's pause is seen that much later (its own is seen at once,
 * sl__pause_noted), a few calls that the provider answers with another 429
 * and that are retried. */
#define SL_PAUSE_FRESH_MS 100

static void on_pause_ttl(uv_timer_t *t) { sl__gate(t->data); }

/* j holds no stored outputs it has not looked for: 1 when it may wait */
static int looked_for_stored(job *j) {
  return j->looked_up || !j->L->o->idempotent || sl__lookup(j) != 0;
}

/* The pause as last read decides: wait it out, or go on to the claim. */
static void pause_decide(job *j) {
  loop_t *L = j->L;
  int64_t wait = L->pause_until_ms - sl__mono_ms();
  if (wait <= 0) {
    sl__run_process(j);
    return;
  }
  if (!looked_for_stored(j)) return; /* stored outputs are answered, paused or not */
  gate_waits(L, wait);
  sl__job_after(j, wait, on_pause_ttl, sl__gate);
}

static job *pq_pop(loop_t *L) { return sl__q_pop(&L->pq_head, &L->pq_tail); }

static void on_pause(redisReply *r, void *ud) {
  loop_t *L = ud;
  job *j;
  L->pq_busy = 0;
  if (L->closing) {
    while ((j = pq_pop(L)) != NULL) sl__job_drop(j);
    return;
  }
  /* Redis unavailable: not paused (fail open) */
  int64_t now = sl__mono_ms(), ttl = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  L->pause_read_ms = now;
  if (ttl > 0 && now + ttl > L->pause_until_ms) L->pause_until_ms = now + ttl;
  while ((j = pq_pop(L)) != NULL) pause_decide(j);
}

void sl__pause_noted(loop_t *L, int64_t ms) {
  int64_t until = sl__mono_ms() + ms;
  if (until > L->pause_until_ms) L->pause_until_ms = until;
}

void sl__gate(job *j) {
  loop_t *L = j->L;
  if (L->closing) {
    sl__job_drop(j);
    return;
  }
  if (sl__job_stale(j)) {
    sl__held_release(j);
    return;
  }
  if (L->o->provider) {
    int64_t retry_in = 0;
    if (L->bq_head || !sl_breaker_allow(L->breaker, sl__mono_ms(), &retry_in)) {
      if (!looked_for_stored(j)) return; /* stored outputs are answered, open or not */
      circuit_open(j, retry_in);         /* behind those already held, in order */
      return;
    }
    sl_metric_set(L->m_breaker_state, sl_breaker_get_state(L->breaker));
  }
  gate_limits(j);
}

/* The rest of the gate, once the breaker let the job through. */
static void gate_limits(job *j) {
  loop_t *L = j->L;
  if (L->o->provider) {
    if (L->cc->provider_rate > 0) { /* queue behind the limiter */
      sl__q_push(&L->lq_head, &L->lq_tail, j);
      limiter_try(L);
      return;
    }
    if (L->pause_read_ms && sl__mono_ms() - L->pause_read_ms < SL_PAUSE_FRESH_MS) {
      pause_decide(j);
      return;
    }
    sl__q_push(&L->pq_head, &L->pq_tail, j);
    if (L->pq_busy) return; /* the answer on its way decides for it too */
    const char *argv[] = {"PTTL", L->pause_key};
    L->pq_busy = 1;
    if (sl_aredis_argv(L->redis, on_pause, L, 2, argv, NULL) == 0) return;
    on_pause(NULL, L); /* Redis unavailable: fail open */
    return;
  }
  sl__run_process(j);
}

int sl__lookup_in_claim(const job *j) {
  const loop_t *L = j->L;
  return claims_on(j) && L->cc->provider_rate <= 0 && !L->bq_head &&
         sl_breaker_get_state(L->breaker) == SL_BREAKER_CLOSED;
}

/* ---- the claim: one paid call per input across replicas (sl_claim.h) ---- */

static void call_now(job *j);
static void claim_try(job *j);
static void counted_as(job *j, long long n);
static void starts_key(const job *j, char *buf, size_t len);

static int claims_on(const job *j) {
  const loop_t *L = j->L;
  return L->o->provider && L->o->idempotent && L->cc->claim_lease_ms > 0 && j->digest[0];
}

static void claim_key(const job *j, char *buf, size_t len) {
  if (sl_idem_claim_key(buf, len, j->L->o->stage, j->key, j->digest) != 0 && len) buf[0] = '\0';
}

void sl__claim_release(job *j) {
  j->claim_end = 0;
  if (!j->claimed) return;
  j->claimed = 0;
  char k[256];
  claim_key(j, k, sizeof k);
  const char *argv[] = {k, j->owner};
  sl_aredis_eval(j->L->redis, NULL, NULL, &j->L->s_claim_release, 1, 2, argv, NULL);
}

/* "<topic>/<partition>/<offset>" of j's message: which run of the input an
 * end mark speaks for */
static void claim_tag(const job *j, char *buf, size_t len) {
  snprintf(buf, len, "%s/%d/%lld", rd_kafka_topic_name(j->m->rkt), (int)j->m->partition,
           (long long)j->m->offset);
}

void sl__claim_finish(job *j) {
  loop_t *L = j->L;
  if (!j->claimed) return;
  if (!j->claim_end || L->fatal || j->uncommitted) { /* nothing durable to point at */
    sl__claim_release(j);
    return;
  }
  j->claimed = 0;
  j->claim_end = 0;
  char k[256], tag[200], mark[300], ttl[32];
  claim_key(j, k, sizeof k);
  claim_tag(j, tag, sizeof tag);
  snprintf(mark, sizeof mark, "!%s|%s", tag, j->res.error_class);
  snprintf(ttl, sizeof ttl, "%lld",
           (long long)(L->cc->claim_lease_ms + L->cc->kafka_session_timeout_ms));
  const char *argv[] = {k, j->owner, mark, ttl};
  sl_aredis_eval(L->redis, NULL, NULL, &L->s_claim_end, 1, 4, argv, NULL);
}

static void on_claim_timer(uv_timer_t *t) { claim_try(t->data); }

/* j's answer: code and v from the claim script's reply, or NULL (no
 * usable answer) */
static void on_claim(job *j, const redisReply *code_r, const redisReply *v) {
  loop_t *L = j->L;
  if (L->closing) {
    sl__job_drop(j);
    return;
  }
  if (!code_r || !v || code_r->type != REDIS_REPLY_INTEGER || v->type != REDIS_REPLY_STRING) {
    call_now(j); /* Redis unavailable: fail open, as the store does */
    return;
  }
  long long code = code_r->integer;
  if (code == SL_CLAIM_STORED) {
    if (sl__use_stored(j, v->str, v->len)) return;
    call_now(j); /* unusable stored outputs: as if there were none */
    return;
  }
  if (code == SL_CLAIM_CLAIMED) {
    j->claimed = 1;
    if (v->len && !j->starts) { /* counted with the claim (one round trip) */
      L->counting++;
      counted_as(j, strtoll(v->str, NULL, 10));
      return;
    }
    call_now(j);
    return;
  }
  if (code == SL_CLAIM_ENDED) {
    /* this very message failed for good on another replica, and its dead
     * letter is written: nothing to call, nothing to write again */
    sl_metric_add(L->m_claim_ends, 1);
    sl_log(SL_LOG_INFO, j->key,
           "failed for good on another replica (%.*s), its dead letter written: not calling %s "
           "again",
           (int)(v->len < 64 ? v->len : 64), v->str, L->o->provider);
    sl__job_finish(j);
    return;
  }
  /* another replica is calling for this input: wait for its outputs (or
   * for its lease to end), asking again every half second */
  int64_t ttl = strtoll(v->str, NULL, 10);
  if (j->claim_waits++ == 0) {
    sl_metric_add(L->m_claim_waits, 1);
    sl_log(SL_LOG_INFO, j->key,
           "another replica is calling %s for this input (lease %lld ms left): waiting for "
           "its outputs instead of calling",
           L->o->provider, (long long)ttl);
  }
  sl__job_after(j, ttl > 0 && ttl < 500 ? ttl + 1 : 500, on_claim_timer, claim_try);
}

/* The claims sent together (one script), answered together. */
static void on_claims(redisReply *r, void *ud) {
  job_batch *b = ud;
  redisReply **el = sl__batch_reply(b, r, 2);
  for (int i = 0; i < b->n; i++)
    on_claim(b->jobs[i], el ? el[2 * i] : NULL, el ? el[2 * i + 1] : NULL);
  free(b);
}

/* Sends the claims waiting in L->cq, SL_CLAIM_BATCH to a script. */
void sl__claims_flush(loop_t *L) {
  char lease[32], starts_ttl[32];
  snprintf(lease, sizeof lease, "%lld", (long long)L->cc->claim_lease_ms);
  snprintf(starts_ttl, sizeof starts_ttl, "%d", SL_STARTS_TTL_S);
  while (L->cq_head) {
    job_batch *b = malloc(sizeof *b);
    char keys[SL_CLAIM_BATCH][3][256]; /* claim, store and starts key of each */
    char tags[SL_CLAIM_BATCH][200];    /* its message (sl_claim_take_lua) */
    if (!b) {                          /* no memory: each one calls (fail open, as without Redis) */
      job *j;
      while ((j = cq_pop(L)) != NULL) call_now(j);
      return;
    }
    b->n = 0;
    const char *argv[5 * SL_CLAIM_BATCH + 2];
    while (L->cq_head && b->n < SL_CLAIM_BATCH) {
      job *j = cq_pop(L);
      if (sl__job_stale(j)) { /* its partition went away while it waited */
        sl__held_release(j);
        continue;
      }
      claim_key(j, keys[b->n][0], sizeof keys[b->n][0]);
      sl__idem_key(j, keys[b->n][1], sizeof keys[b->n][1]);
      keys[b->n][2][0] = '\0'; /* its start is counted with the claim, once */
      if (!j->starts && L->cc->max_starts > 0) starts_key(j, keys[b->n][2], sizeof keys[b->n][2]);
      claim_tag(j, tags[b->n], sizeof tags[b->n]);
      b->jobs[b->n++] = j;
    }
    int n = b->n;
    if (n == 0) {
      free(b);
      continue;
    }
    for (int i = 0; i < n; i++) {
      argv[3 * i] = keys[i][0];
      argv[3 * i + 1] = keys[i][1];
      argv[3 * i + 2] = keys[i][2];
      argv[3 * n + 2 + i] = b->jobs[i]->owner;
      argv[4 * n + 2 + i] = tags[i];
    }
    argv[3 * n] = lease;
    argv[3 * n + 1] = starts_ttl;
    int rc = sl_aredis_eval(L->redis, on_claims, b, &L->s_claim_take, 3 * n, 5 * n + 2, argv, NULL);
    if (rc != 0) on_claims(NULL, b); /* Redis unavailable: each one calls */
  }
}

/* Claims j's input: queued, and sent with the other claims of this turn of
 * the loop (one script for up to SL_CLAIM_BATCH inputs, not one each). */
static void claim_try(job *j) {
  loop_t *L = j->L;
  if (sl__job_stale(j)) { /* its partition went away while it waited */
    sl__held_release(j);
    return;
  }
  if (!j->owner[0]) {
    j->owner_seq = ++L->owner_seq;
    snprintf(j->owner, sizeof j->owner, "%s:%llu", L->owner, (unsigned long long)j->owner_seq);
  }
  j->claim_ms = sl__mono_ms(); /* a claim it gets is held from the request on */
  atomic_store(&j->claim_lost, 0);
  sl__q_push(&L->cq_head, &L->cq_tail, j);
  if (++L->cq_len >= SL_CLAIM_BATCH) {
    sl__claims_flush(L);
    return;
  }
  sl__batch_soon(L);
}

/* ---- renewals: the claims of the jobs that hold one, every third of the
 * lease; each claim answered (sl_claim_renew_lua) ---- */

enum { RENEW_BATCH = 256 };

/* One renewal script's jobs, by their owner sequence (sorted: the answer
 * finds a live job's claim by bsearch; a job that ended meanwhile is not
 * in L->jobs any more and its answer is ignored). */
typedef struct {
  loop_t *L;
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
  loop_t *L = j->L;
  int running = j->in_call && !j->in_pool;
  j->claimed = 0;
  j->claim_end = 0;
  atomic_store(&j->claim_lost, 1);
  sl_metric_add(L->m_claims_lost, 1);
  sl_log(SL_LOG_WARN, j->key,
         "lost its claim on this input (it lapsed or Redis lost it, and another replica took "
         "it or stored outputs): %s",
         running ? "its call runs on, and its end leaves the claim alone"
                 : "it claims again before calling");
}

/* The renewal's answer: each claim extended, taken again, or lost. */
static void on_renewed(redisReply *r, void *ud) {
  renew_batch *b = ud;
  loop_t *L = b->L;
  int ok = !L->closing && r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)b->n;
  for (int k = 0; ok && k < b->n; k++)
    if (r->element[k]->type != REDIS_REPLY_INTEGER) ok = 0;
  if (!ok) { /* Redis unavailable: the leases run on (sl__claim_stale) */
    free(b);
    return;
  }
  qsort(b->e, (size_t)b->n, sizeof b->e[0], renewed_cmp);
  for (job *j = L->jobs, *nx; j; j = nx) {
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

/* Renews the claims of every job holding one (one script per batch). */
void sl__on_claim_renew(uv_timer_t *t) {
  loop_t *L = t->data;
  char(*keys)[2][256] = malloc(RENEW_BATCH * sizeof *keys);
  const char **argv = malloc((3 + 3 * RENEW_BATCH + 1) * sizeof *argv);
  if (!keys || !argv) { /* next time: the leases outlast two missed renewals */
    free(keys);
    free(argv);
    return;
  }
  char lease[32];
  snprintf(lease, sizeof lease, "%lld", (long long)L->cc->claim_lease_ms);
  job *j = L->jobs;
  while (j) {
    renew_batch *b = malloc(sizeof *b);
    if (!b) break;
    b->L = L;
    b->sent_ms = sl__mono_ms();
    b->n = 0;
    const char *owners[RENEW_BATCH];
    for (; j && b->n < RENEW_BATCH; j = j->all_next)
      if (j->claimed) {
        claim_key(j, keys[b->n][0], sizeof keys[b->n][0]);
        sl__idem_key(j, keys[b->n][1], sizeof keys[b->n][1]);
        owners[b->n] = j->owner;
        b->e[b->n].seq = j->owner_seq;
        b->e[b->n].i = b->n;
        b->n++;
      }
    int n = b->n;
    if (!n) {
      free(b);
      break;
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
    if (sl_aredis_argv(L->redis, on_renewed, b, a, argv, NULL) != 0) free(b);
  }
  free(keys);
  free(argv);
}

/* A claim the job may not rely on before it calls: a renewal found it lost,
 * or no request has confirmed it for a whole lease (Redis did not answer:
 * it may have lapsed and been taken). */
int sl__claim_stale(const job *j) {
  const loop_t *L = j->L;
  if (!claims_on(j)) return 0;
  if (atomic_load(&j->claim_lost)) return 1;
  return j->claimed && sl__mono_ms() - j->claim_ms >= L->cc->claim_lease_ms;
}

/* Claims j's input again before its call (sl__claim_stale). */
void sl__claim_again(job *j) {
  j->claimed = 0; /* ours or not, the take script says (and extends it when ours) */
  j->claim_end = 0;
  claim_try(j);
}

/* ---- the start count: poison inputs (stage.max_starts) ---- */

static void call_go(job *j);

static void starts_key(const job *j, char *buf, size_t len) {
  const part *p = j->p;
  if ((!p || sl_idem_starts_key(buf, len, p->g->name, p->id.topic, p->id.partition, j->offset)) &&
      len)
    buf[0] = '\0';
}

void sl__starts_key(const job *j, char *buf, size_t len) { starts_key(j, buf, len); }

/* what waits on the count may go (on the next turn of the loop) */
static void solo_kick(loop_t *L) {
  if (L->pending || L->xq_head) sl__batch_soon(L);
}

/* A deletion or un-count answered: a solo run waits for these, so that
 * the process cannot die on it before they are in. */
static void on_counted(redisReply *r, void *ud) {
  loop_t *L = ud;
  (void)r;
  L->counting--;
  if (!L->closing) solo_kick(L);
}

/* Deletes the counts of the inputs that ended (one DEL). */
static void starts_del_flush(loop_t *L) {
  if (!L->sdel_n) return;
  const char *argv[1 + SL_STARTS_DEL_MAX];
  argv[0] = "DEL";
  for (int i = 0; i < L->sdel_n; i++) argv[1 + i] = L->sdel[i];
  if (sl_aredis_argv(L->redis, on_counted, L, 1 + L->sdel_n, argv, NULL) == 0) L->counting++;
  L->sdel_n = 0;
}

/* Takes j's start back (it did not run): its count is one less, so what
 * it started before stays counted. Sent at once; a solo run waits for it. */
static void starts_uncount(job *j) {
  loop_t *L = j->L;
  char k[256];
  starts_key(j, k, sizeof k);
  if (j->starts > 0) L->counted--;
  j->starts = 0;
  if (!k[0]) return;
  const char *argv[] = {"DECR", k};
  if (sl_aredis_argv(L->redis, on_counted, L, 2, argv, NULL) == 0) L->counting++;
}

void sl__starts_stored(job *j) {
  loop_t *L = j->L;
  if (j->starts <= 0) return;
  j->starts = 0; /* deleted with the store: nothing left for sl__starts_end */
  L->counted--;
  solo_kick(L);
}

void sl__starts_end(job *j) {
  loop_t *L = j->L;
  if (j->starts <= 0 || L->closing) return;
  if (!j->ran) { /* counted, never called (released, its partition gone) */
    starts_uncount(j);
    return;
  }
  j->starts = 0;
  L->counted--;
  solo_kick(L);
  if (!L->sdel && !(L->sdel = malloc(SL_STARTS_DEL_MAX * sizeof *L->sdel)))
    return; /* no memory: the count stays until its TTL */
  starts_key(j, L->sdel[L->sdel_n], sizeof L->sdel[0]);
  if (!L->sdel[L->sdel_n][0]) return;
  if (++L->sdel_n >= SL_STARTS_DEL_MAX) {
    starts_del_flush(L);
    return;
  }
  sl__batch_soon(L);
}

/* j's start could not be counted: it runs all the same (progress over the
 * count), said once a minute and counted */
static void uncounted(job *j) {
  loop_t *L = j->L;
  j->starts = -1;
  sl_metric_add(L->m_uncounted, 1);
  int64_t now = sl__mono_ms();
  if (!L->uncounted_warned_ms || now - L->uncounted_warned_ms >= 60000) {
    L->uncounted_warned_ms = now;
    sl_log(SL_LOG_WARN, j->key,
           "start counts unavailable (Redis): inputs run uncounted, unprotected from poison "
           "inputs (stage.max_starts) until Redis answers again");
  }
}

/* The process died during each of j's earlier runs: a dead letter, uncalled. */
static void poison(job *j) {
  loop_t *L = j->L;
  sl__claim_release(j);
  sl_result_set(&j->res, SL_OUTCOME_FAIL, "poison",
                "started %lld times without finishing (the process ended during each run: a "
                "crash, an abort, an OOM kill; stage.max_starts %lld): not run again",
                (long long)(j->starts - 1), (long long)L->cc->max_starts);
  sl__add_dead_letter(j);
  sl__produce(j);
}

/* j waits for a solo run, uncounted (a start it has not made must not be
 * charged to it if the solo run kills the process) */
static void solo_wait(job *j) {
  if (j->L->stopping) { /* nothing waits while stopping: redelivered after the restart */
    sl__claim_release(j);
    sl__held_release(j); /* takes its start back */
    return;
  }
  if (j->starts > 0) starts_uncount(j);
  sl__q_push(&j->L->xq_head, &j->L->xq_tail, j);
}

/* j's count came back: n its starts so far, this one included (< 1: it
 * could not be counted); a command of L->counting answered */
static void counted_as(job *j, long long n) {
  loop_t *L = j->L;
  L->counting--;
  if (L->closing) {
    sl__job_drop(j);
    return;
  }
  solo_kick(L);
  if (n < 1) {
    uncounted(j);
  } else {
    j->starts = n;
    L->counted++;
  }
  if (sl__job_stale(j)) { /* its partition went away meanwhile: the start is taken back */
    sl__claim_release(j);
    sl__held_release(j);
    return;
  }
  if (j->starts < 0) {
    call_now(j);
    return;
  }
  if (j->starts > L->cc->max_starts) {
    poison(j);
    return;
  }
  /* A suspect (it started before without finishing) runs alone only at its
   * last chance, the start that decides whether it is poison: a process's
   * death kills every call it had running, so most suspects are collateral
   * and run at full concurrency; a poison input dies beside others until
   * its last chance, and that death, alone, is its own. */
  int alone = j->starts >= 2 && j->starts >= L->cc->max_starts;
  if (j->starts >= 2 && !alone && !j->suspect_noted) {
    j->suspect_noted = 1;
    sl_log(SL_LOG_INFO, j->key,
           "%s [%d] offset %lld started %lld time(s) before without finishing: running it "
           "(alone at start %lld, dead-lettered as poison after that)",
           j->p->id.topic, (int)j->p->id.partition, (long long)j->offset,
           (long long)(j->starts - 1), (long long)L->cc->max_starts);
  }
  if (!alone && !L->solo) { /* counted: it runs (a suspect pending waits for it) */
    call_go(j);
    return;
  }
  if (!alone || L->pending || L->solo || L->stopping) { /* another suspect first */
    solo_wait(j);
    return;
  }
  L->pending = j; /* runs alone once the calls and counts under way are over */
  solo_kick(L);
  sl_log(SL_LOG_WARN, j->key,
         "%s [%d] offset %lld started %lld time(s) before without finishing: running it alone "
         "(at %lld of stage.max_starts it is dead-lettered as poison)",
         j->p->id.topic, (int)j->p->id.partition, (long long)j->offset, (long long)(j->starts - 1),
         (long long)L->cc->max_starts);
}

/* j's count came back: r its element of the batch's reply, or NULL */
static void started(job *j, const redisReply *r) {
  counted_as(j, r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0);
}

/* One starts script: the jobs counted, and whether it also deleted the
 * counts of inputs that ended (a solo run waits for that answer too). */
typedef struct {
  job_batch b;
  int dels;
} starts_batch;

static void on_starts(redisReply *r, void *ud) {
  starts_batch *sb = ud;
  loop_t *L = sb->b.n ? sb->b.jobs[0]->L : NULL;
  redisReply **el = sl__batch_reply(&sb->b, r, 1);
  for (int i = 0; i < sb->b.n; i++) started(sb->b.jobs[i], el ? el[i] : NULL);
  if (sb->dels && L) on_counted(r, L);
  free(sb);
}

void sl__starts_flush(loop_t *L) {
  char ttl[32], nk[16];
  snprintf(ttl, sizeof ttl, "%d", SL_STARTS_TTL_S);
  while (L->tq_head) {
    starts_batch *sb = malloc(sizeof *sb);
    job_batch *b = sb ? &sb->b : NULL;
    char keys[SL_CLAIM_BATCH][256];
    job *j;
    if (!b) { /* no memory: each one runs uncounted, as without Redis */
      starts_del_flush(L);
      while ((j = sl__q_pop(&L->tq_head, &L->tq_tail)) != NULL) {
        L->tq_len--;
        L->counting--;
        uncounted(j);
        call_now(j);
      }
      return;
    }
    b->n = 0;
    sb->dels = 0;
    while (b->n < SL_CLAIM_BATCH && (j = sl__q_pop(&L->tq_head, &L->tq_tail)) != NULL) {
      L->tq_len--;
      starts_key(j, keys[b->n], sizeof keys[b->n]);
      if (!keys[b->n][0]) { /* no key for it: uncounted */
        L->counting--;
        uncounted(j);
        call_now(j);
        continue;
      }
      b->jobs[b->n++] = j;
    }
    int n = b->n;
    if (!n) {
      free(sb);
      continue;
    }
    /* the counts of the inputs that ended go first, in the same script
     * when they fit (an input taken again after it ended counts from 0) */
    if (L->sdel_n > SL__REDIS_SCRIPT_MAX_ARGS - 2 - n) starts_del_flush(L);
    int d = L->sdel_n;
    const char *argv[SL__REDIS_SCRIPT_MAX_ARGS];
    for (int i = 0; i < n; i++) argv[i] = keys[i];
    for (int i = 0; i < d; i++) argv[n + i] = L->sdel[i];
    snprintf(nk, sizeof nk, "%d", n);
    argv[n + d] = ttl;
    argv[n + d + 1] = nk;
    sb->dels = d > 0;
    L->sdel_n = 0;
    if (sb->dels) L->counting++;
    if (sl_aredis_eval(L->redis, on_starts, sb, &L->s_starts, n + d, n + d + 2, argv, NULL) != 0)
      on_starts(NULL, sb); /* Redis unavailable: each one runs uncounted */
  }
  starts_del_flush(L); /* no count to send them with */
}

/* The folded lookup's answer: stored outputs (nothing was counted), or
 * the count, as sl__starts_flush's scripts answer it. */
static void on_lookup_counted(redisReply *r, void *ud) {
  job *j = ud;
  loop_t *L = j->L;
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER;
  if (ok && r->element[0]->integer == 1 && r->element[1]->type == REDIS_REPLY_STRING &&
      !L->closing) {
    L->counting--;
    solo_kick(L);
    if (sl__use_stored(j, r->element[1]->str, r->element[1]->len)) return;
    /* unusable stored outputs: as if there were none, counted on its own */
    sl__gate(j);
    return;
  }
  if (!ok) sl_log(SL_LOG_DEBUG, j->key, "idempotency lookup unavailable; processing");
  started(j, ok ? r->element[1] : NULL); /* NULL: runs uncounted */
}

int sl__lookup_counted(job *j) {
  loop_t *L = j->L;
  if (L->o->provider || L->cc->max_starts <= 0) return SL_EINVAL; /* the gate may hold it */
  char k[256], sk[256], ttl[32];
  sl__idem_key(j, k, sizeof k);
  starts_key(j, sk, sizeof sk);
  if (!k[0] || !sk[0]) return SL_EINVAL;
  snprintf(ttl, sizeof ttl, "%d", SL_STARTS_TTL_S);
  const char *argv[] = {k, sk, ttl};
  j->looked_up = 1;
  L->counting++;
  int rc = sl_aredis_eval(L->redis, on_lookup_counted, j, &L->s_lookup, 2, 3, argv, NULL);
  if (rc != 0) L->counting--;
  return rc;
}

/* Counts j's start: queued, and sent with the other counts of this turn of
 * the loop (one script for up to SL_CLAIM_BATCH inputs). */
static void starts_count(job *j) {
  loop_t *L = j->L;
  L->counting++;
  sl__q_push(&L->tq_head, &L->tq_tail, j);
  if (++L->tq_len >= SL_CLAIM_BATCH) {
    sl__starts_flush(L);
    return;
  }
  sl__batch_soon(L);
}

/* ---- solo runs: a suspect runs with no other call beside it ---- */

void sl__calls_resume(loop_t *L) {
  if (L->solo || L->closing || L->stopping) return;
  if (L->pending) {
    /* every other counted job has ended (its count deleted: the deletion
     * answered), nothing runs: its call_end / on_counted / starts_end kicks */
    if (L->calls || L->counting || L->counted > 1) return;
    job *j = L->pending;
    L->pending = NULL;
    if (sl__job_stale(j)) {
      sl__claim_release(j);
      sl__held_release(j);
    } else {
      L->solo = j;
      call_go(j); /* may end j */
      return;
    }
  }
  /* no solo run: what waited is counted and called as usual */
  while (L->xq_head && !L->solo && !L->pending) call_now(sl__q_pop(&L->xq_head, &L->xq_tail));
}

void sl__calls_release(loop_t *L) {
  job *j;
  if ((j = L->pending) != NULL) {
    L->pending = NULL;
    sl__claim_release(j);
    sl__held_release(j); /* never ran: its count is taken back */
  }
  while ((j = sl__q_pop(&L->xq_head, &L->xq_tail)) != NULL) {
    sl__claim_release(j);
    sl__held_release(j);
  }
}

void sl__call_end(job *j) {
  loop_t *L = j->L;
  if (!j->in_call) return;
  j->in_call = 0;
  L->calls--;
  if (L->solo == j) L->solo = NULL;
  solo_kick(L); /* on the next turn: not inside j's outcome */
}

/* claim_try and call_now release a job whose partition went away meanwhile */
void sl__run_process(job *j) {
  if (claims_on(j) && !j->claimed) {
    claim_try(j);
    return;
  }
  call_now(j);
}

static void call_now(job *j) {
  loop_t *L = j->L;
  if (sl__job_stale(j)) {
    sl__claim_release(j);
    sl__held_release(j);
    return;
  }
  if (sl__claim_stale(j)) { /* lost while it waited: claim again first */
    sl__claim_again(j);
    return;
  }
  if (L->solo || (L->pending && L->pending != j)) { /* behind a solo run, in order */
    solo_wait(j);
    return;
  }
  if (!j->starts && L->cc->max_starts > 0) { /* counted before it begins */
    starts_count(j);
    return;
  }
  call_go(j);
}

/* process() or start() */
static void call_go(job *j) {
  loop_t *L = j->L;
  j->in_call = 1;
  j->ran = 1;
  L->calls++;
  j->work.data = j;
  j->out.producer = j->L->producer;
  j->res.outcome = SL_OUTCOME_DONE;
  j->res.again_in_ms = 0;
  j->res.cost_units = 0;
  j->res.cost_before = j->cost_before;
  j->call_ns = uv_hrtime();
  if (j->L->o->start) {
    j->in_async = 1;
    j->L->o->start(j->L->o->ud, j);
    return;
  }
  if (sl_inline_here(&L->inl, uv_hrtime())) { /* short runs: no hand-over (sl_inline.h) */
    uint64_t t0 = uv_hrtime();
    L->o->process(L->o->ud, j->m, &j->out, &j->res);
    uint64_t t1 = uv_hrtime();
    sl_inline_note(&L->inl, t1 - t0, 1, t1);
    sl__complete(j); /* may end j */
    return;
  }
  j->in_pool = 1;
  if (uv_queue_work(&j->L->loop, &j->work, sl__work_cb, sl__after_work_cb) != 0) {
    j->in_pool = 0;
    sl__call_end(j);
    sl_result_set(&j->res, SL_OUTCOME_RETRY, "internal", "could not queue work");
    sl__to_retry(j);
    sl__produce(j);
  }
}
