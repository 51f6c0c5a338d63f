/* SPDX-License-Identifier: Apache-2.0 */
/*
 * presign.c — `sluice presign`: the API that creates submissions.
 *
 * POST /v1/submissions {"questions":[{"no":1,"content_type":"audio/wav",
 * "size":123456,"prompt":"…","sha256":"<hex, optional>"}]} -> 201 with, per
 * question, a SigV4 presigned PUT URL whose signature covers content-length
 * and content-type, and x-amz-checksum-sha256 when sha256 is given (so storage
 * itself refuses a different size, type or content), plus the submission
 * id (UUIDv7), a results bearer token and the results URL.
 *
 * Callers authenticate with an API key or a JWT (stages/lib/auth.h) that
 * names the user; the submission belongs to that user (SubmissionCreated
 * .user_id) and its results token is bound to submission and user; an API
 * key's digest travels as .apikey_id (notify signs with that key's webhook
 * secret), and a key Redis does not know while the key store is being
 * rebuilt after a loss (keystore.h) is 503 auth_unavailable, not 401. Each
 * user and each client address may create presign.rate_per_user /
 * .rate_per_address submissions per minute (a fixed window in Redis); more
 * get 429 with Retry-After.
 *
 * An optional "callback_url" (where the notify stage POSTs the results) is
 * held to the callback policy (stages/lib/callback.h) before anything
 * else: its form and host at once, then the addresses its host resolves to
 * (uv_getaddrinfo on libuv's pool, the create parked meanwhile); refused:
 * 422 callback_url_refused with the reason. It travels in
 * SubmissionCreated.callback_url.
 *
 * Idempotency-Key (scoped to the user: another user's identical key is
 * another record): a retried create with the same key and body returns the
 * same submission (Idempotent-Replayed: true); the same key with another
 * body is 422; while the first is still in flight, 409 + Retry-After. The
 * records live in Redis as long as the presigned URLs do.
 *
 * With presign.static_dir set, the browser client (web/) is served at "/"
 * from memory (sl_static): the page talks to this API from its own origin.
 *
 * Durability: the reply is sent only after the SubmissionCreated message is
 * acknowledged by Kafka (idempotent producer, acks=all). The HTTP request
 * stays parked on its connection while the produce is in flight; the
 * delivery report (served on this loop via sl_kafka_uv) answers it: 201 on
 * success, 503 with Retry-After when Kafka could not take it. Nothing is
 * written anywhere else, so a refused submission leaves no trace.
 *
 * @locality single thread: the libuv loop runs HTTP, signing and Kafka
 * delivery reports.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/client_address.h"
#include "lib/stage.h"

#include <jansson.h>
#include <libxml/parser.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "sluice.pb-c.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_jsonw.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_http.h"
#include "sluice/sl_id.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_trace.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_static.h"
#include "keycache.h"
#include "quota.h"
#include "keystore.h"
#include "sluice/sl_dkey.h"
#include "multipart.h"
#include "request.h"
#include "lib/auth.h"
#include "lib/callback.h"
#include "webhook.h"

#define MAX_TYPES 16

typedef struct {
  char *listen;
  char *results_base_url;
  int64_t max_questions;
  int64_t max_size;
  int64_t max_prompt;
  char *content_types;
  int64_t kafka_timeout_ms;
  char *cors_origins;
  int64_t request_timeout_ms;
  int64_t max_connections;
  char *static_dir;
  int64_t rate_per_user;
  int64_t rate_per_address;
  char *client_address_header;
  int64_t apikey_cache_ms;
  int64_t apikey_cache_max;
  int64_t apikey_watch_ms;
} presign_conf;

#define P(f) offsetof(presign_conf, f)
static const sl_conf_entry presign_table[] = {
    {"presign.listen", SL_CONF_STR, "127.0.0.1:8080", P(listen), "API listen address", 0},
    {"presign.results_base_url", SL_CONF_STR, "http://127.0.0.1:8081", P(results_base_url),
     "public base URL of the results API (used in replies)", 0},
    {"presign.max_questions", SL_CONF_INT, "30", P(max_questions),
     "most questions in one submission", 0},
    {"presign.max_size", SL_CONF_INT, "104857600", P(max_size), "largest answer in bytes", 0},
    {"presign.max_prompt", SL_CONF_INT, "4000", P(max_prompt), "longest question prompt in bytes",
     0},
    {"presign.content_types", SL_CONF_STR,
     "audio/webm,audio/ogg,audio/mp4,audio/mpeg,audio/wav,audio/flac", P(content_types),
     "comma-separated allowlist of answer content types", 0},
    {"presign.kafka_timeout_ms", SL_CONF_INT, "5000", P(kafka_timeout_ms),
     "how long a create waits for Kafka before answering 503", 0},
    {"presign.cors_origins", SL_CONF_STR, "", P(cors_origins),
     "browser origins allowed by CORS, comma-separated, or * (empty: CORS off)", 0},
    {"presign.request_timeout_ms", SL_CONF_INT, "10000", P(request_timeout_ms),
     "a request must arrive whole within this time (slow clients get 408 and are closed)", 0},
    {"presign.max_connections", SL_CONF_INT, "1024", P(max_connections),
     "open connections at once; more get 503 and are closed", 0},
    {"presign.static_dir", SL_CONF_STR, "", P(static_dir),
     "directory of the browser client served at / (read at start-up; empty: none)", 0},
    {"presign.rate_per_user", SL_CONF_INT, "30", P(rate_per_user),
     "submissions one user may create per minute (0: no limit)", 0},
    {"presign.rate_per_address", SL_CONF_INT, "300", P(rate_per_address),
     "submissions one client address may create per minute (0: no limit)", 0},
    {"presign.client_address_header", SL_CONF_STR, "", P(client_address_header),
     "header a trusted proxy sets to the client address, e.g. X-Forwarded-For (its last "
     "entry is used); empty: the TCP peer address",
     0},
    {"presign.apikey_cache_ms", SL_CONF_INT, "30000", P(apikey_cache_ms),
     "how long presign may answer for an API key without asking Redis; `sluicectl apikey "
     "revoke` reaches the cache at once, so this bounds only records deleted some other way "
     "(0: no cache)",
     0},
    {"presign.apikey_cache_max", SL_CONF_INT, "10000", P(apikey_cache_max),
     "most API keys presign caches", 0},
    {"presign.apikey_watch_ms", SL_CONF_INT, "1000", P(apikey_watch_ms),
     "how often presign checks that the API-key store in Redis is complete (its marker); "
     "after a loss one replica rebuilds it from the API-key topic, and meanwhile unknown keys "
     "get 503 auth_unavailable instead of 401",
     0},
};
static const size_t presign_table_len = sizeof presign_table / sizeof presign_table[0];

typedef struct {
  sl_common_conf *cc;
  presign_conf *pc;
  sl_s3_conf *s3;
  sl_s3_target target;
  sl_sigv4 *sig;
  rd_kafka_t *producer;
  rd_kafka_topic_t *topics[2]; /* kept known to it (sl_kafka_prefetch) */
  /* its settings, kept for a renewal after a fatal error (renew_producer) */
  char timeout[32], props[1024];
  const char *extra[2 * 16 + 5];
  sl_kafka_renewals renewals;
  uv_timer_t renew_timer;
  uv_loop_t *loop;
  sl_http_server *srv;
  sl_kafka_uv *ku;
  uv_signal_t sigterm, sigint;
  char *types_buf; /* a copy of presign.content_types split in place */
  char *types[MAX_TYPES];
  size_t ntypes;
  sl_metric *m_created, *m_rejected, *m_unavailable;
  int fatal; /* the producer failed for good and could not be renewed */
  int shutting_down;
  size_t inflight; /* creates handed to Kafka, not yet answered */
  int holders;     /* route modules (multipart, webhook) still using the
                    * producer and Redis presign lends them */
  int released;    /* Kafka reports and Redis let go (after the last create) */
  uv_timer_t release_timer;
  uv_timer_t stop_timer; /* a fatal producer error stops presign from here */
  sl_aredis *redis;      /* Idempotency-Key records */
  sl_metric *m_replayed;
  sl__mpu *mpu;   /* the multipart endpoints (multipart.c) */
  sl_static *web; /* presign.static_dir, or NULL */
  sl__auth *auth;
  sl__keycache *keys;        /* or NULL (presign.apikey_cache_ms 0) */
  sl_mirror *store;          /* rebuilds the API-key store after a Redis loss */
  sl_mirror *dkstore;        /* and the data keys' (sl_dkey.h), with crypto.kek */
  sl_redis_script apikey;    /* apikey_lua */
  sl_redis_script rate;      /* rate_lua, run by its SHA-1 */
  sl_redis_script rate_undo; /* rate_undo_lua */
  sl_metric *m_unauth, *m_limited, *m_quota;
  sl__webhook *hook;              /* POST /v1/storage-events (webhook.c), or NULL when off */
  sl__callback_policy *callbacks; /* which callback_url a create may name */
} presign;

/* Who creates (fixed once authenticated) and what the create was counted
 * as against the tenant's day (quota.h). */
typedef struct {
  char user[SL__USER_MAX + 1];
  char tenant[SL_TENANT_MAX + 1];
  char keyid[65];          /* the API key's digest, "" for a JWT */
  sl__quota_verdict quota; /* ok once its answers are counted */
} creator;

/* A create on its way through authentication and the rate limits. */
typedef struct {
  presign *ps;
  sl_http_req *req;
  creator who;
  char rkey[80]; /* an API key's record */
  uint64_t mark; /* sl__keycache_mark when its HGET was sent */
  /* its rate windows (user, address): checked and counted by one script,
   * or with redis.buckets (a Redis Cluster: two slots) one at a time, the
   * first one's count taken back when the second refuses */
  char rl_key[2][SL__USER_MAX + 16], rl_lim[2][24];
  int rl_n, rl_i;
} caller;

/* An Idempotency-Key being served: Redis key sl:idem:presign:<sha256(user\0key)>
 * holds "pending <body sha256>" while the create runs (30 s), then
 * "done <body sha256> <201 body>" for as long as the presigned URLs live. */
typedef struct {
  presign *ps;
  sl_http_req *req;
  char rkey[96];
  char body_hash[65];
  creator who;
} idem;

/* A create's traces: each question's (presign's span in it) is a child of
 * the create's traceparent when it came with one, else a trace of its own. */
typedef struct {
  sl_trace_ctx client; /* the create's own traceparent */
  int has_client;
  sl_trace_ctx *qctx; /* n of them */
  unsigned *qno;
  char *tps; /* their traceparents, SL_TRACEPARENT_LEN + 1 bytes each */
  size_t n;
  int64_t start_ns;
} create_trace;

/* 0, or SL_ENOMEM */
static int create_trace_begin(create_trace *t, sl_http_req *req, size_t n) {
  memset(t, 0, sizeof *t);
  t->start_ns = sl_trace_now_ns();
  const char *tph = sl_http_req_header(req, "traceparent");
  t->has_client = tph && sl_trace_parse(tph, strlen(tph), &t->client) == 0;
  if (t->has_client) {
    const char *tsh = sl_http_req_header(req, "tracestate");
    sl_trace_set_state(&t->client, tsh, tsh ? strlen(tsh) : 0);
  }
  t->qctx = calloc(n ? n : 1, sizeof *t->qctx);
  t->qno = calloc(n ? n : 1, sizeof *t->qno);
  t->tps = calloc(n ? n : 1, SL_TRACEPARENT_LEN + 1);
  t->n = n;
  return t->qctx && t->qno && t->tps ? 0 : SL_ENOMEM;
}

/* question i's (number no) context: its traceparent, and its trace id in id */
static const char *create_trace_question(create_trace *t, size_t i, unsigned no, char id[33]) {
  char *tp = t->tps + (SL_TRACEPARENT_LEN + 1) * i;
  id[0] = '\0';
  t->qno[i] = no;
  if ((t->has_client ? sl_trace_child(&t->client, &t->qctx[i]) : sl_trace_root(&t->qctx[i])) == 0) {
    sl_trace_format(&t->qctx[i], tp);
    sl_trace_id_hex(&t->qctx[i], id);
  }
  return tp;
}

static void create_trace_free(create_trace *t) {
  free(t->qctx);
  free(t->qno);
  free(t->tps);
  memset(t, 0, sizeof *t);
}

typedef struct {
  presign *ps;
  sl_http_req *req;
  char *body; /* the 201 reply, sent once Kafka acknowledges */
  char sid[37];
  idem *ik;                /* or NULL */
  create_trace tr;         /* its questions' traces, for their spans once Kafka has answered */
  sl__quota_verdict quota; /* taken back when Kafka refuses it */
  /* with crypto.kek: its data key, wrapped (sl_dkey.h), produced beside
   * the submission and stored in Redis before the 201 */
  uint8_t wrapped[SL_DKEY_WRAPPED_LEN];
  int has_key;
  int waiting;             /* delivery reports still to come */
  rd_kafka_resp_err_t err; /* the first one that failed */
} pending;

/* each question's span of the create: its trace's first (or a child of the
 * client's span), ended when Kafka answered */
static void create_spans(const pending *p, int status) {
  const create_trace *t = &p->tr;
  if (!sl_trace_enabled()) return;
  int64_t now = sl_trace_now_ns();
  for (size_t i = 0; i < t->n; i++) {
    sl_span s;
    sl_span_begin(&s, &t->qctx[i], t->has_client ? t->client.span_id : NULL, "POST /v1/submissions",
                  SL_SPAN_SERVER, t->start_ns);
    sl_span_str(&s, "http.request.method", "POST");
    sl_span_str(&s, "http.route", "/v1/submissions");
    sl_span_int(&s, "http.response.status_code", status);
    sl_span_str(&s, "sluice.submission", p->sid);
    sl_span_int(&s, "sluice.question", t->qno[i]);
    if (status >= 500) sl_span_error(&s, "the submission could not be stored");
    sl_span_end(&s, now);
  }
}

static void pending_free(pending *p) {
  free(p->body);
  create_trace_free(&p->tr);
  free(p);
}

static const char *ext_for(const char *ct) {
  static const char *map[][2] = {
      {"audio/webm", "webm"}, {"audio/ogg", "ogg"},   {"audio/mp4", "m4a"},  {"audio/mpeg", "mp3"},
      {"audio/wav", "wav"},   {"audio/x-wav", "wav"}, {"audio/flac", "flac"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i][0], ct) == 0) return map[i][1];
  return "bin";
}

static void shutdown_loop(presign *ps);

/* ---- Idempotency-Key ---- */

/* Frees the claim (after a refusal or a failure): the key may be used again. */
static void idem_release(idem *ik) {
  if (!ik) return;
  const char *argv[] = {"DEL", ik->rkey};
  sl_aredis_argv(ik->ps->redis, NULL, NULL, 2, argv, NULL);
  free(ik);
}

static void create_done(presign *ps);

static void on_idem_stored(redisReply *r, void *ud) {
  pending *p = ud;
  presign *ps = p->ps;
  if (!r || r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, p->sid, "idempotency record not stored; a retry would create anew");
  sl_http_respond(p->req, 201, "application/json", "Cache-Control: no-store\r\n", p->body,
                  strlen(p->body));
  free(p->ik);
  pending_free(p);
  create_done(ps);
}

/* Stores "done <hash> <reply>" for the URLs' lifetime. 1 if the reply now
 * waits for Redis, 0 if the caller should answer at once. */
static int idem_store(pending *p) {
  presign *ps = p->ik->ps;
  size_t n = strlen(p->body) + 80;
  char *v = malloc(n), ttl[32];
  if (!v) {
    free(p->ik);
    p->ik = NULL;
    return 0;
  }
  int vl = snprintf(v, n, "done %s %s", p->ik->body_hash, p->body);
  snprintf(ttl, sizeof ttl, "%lld", (long long)ps->s3->url_expiry_s * 1000);
  const char *argv[] = {"SET", p->ik->rkey, v, "PX", ttl};
  size_t lens[] = {3, strlen(p->ik->rkey), (size_t)vl, 2, strlen(ttl)};
  int rc = sl_aredis_argv(ps->redis, on_idem_stored, p, 5, argv, lens);
  free(v);
  if (rc != 0) {
    free(p->ik);
    p->ik = NULL;
    return 0;
  }
  return 1;
}

/* Stopping: once no create waits for its delivery report, stop serving
 * reports and close Redis (Idempotency-Key records still being stored are
 * answered 201 without one). On a timer, never inside a report. */
static void release_rest(uv_timer_t *t) {
  presign *ps = t->data;
  if (ps->released) return;
  ps->released = 1;
  sl_kafka_uv_detach(ps->ku);
  ps->ku = NULL;
  sl_aredis_free(ps->redis);
  ps->redis = NULL;
  sl__keycache_free(ps->keys);
  ps->keys = NULL;
  uv_close((uv_handle_t *)&ps->release_timer, NULL);
}

static void on_stop_timer(uv_timer_t *t) { shutdown_loop(t->data); }

static int prefetch_topics(presign *ps, char *err, size_t errlen);

/* From renew_timer: a new producer in place of the one that failed for
 * good (librdkafka 2.0.2's fatal "sequence desynchronization" after a
 * broker died, confluentinc/librdkafka#4438, is the case seen). The creates
 * and storage events the old one held are answered 503 (their senders
 * retry; one it may have written is at worst a submission never uploaded
 * to, which expires), the webhook writes through the new one at once.
 * Only when renewals come too often does presign stop as before: it
 * answers what is in flight, takes nothing more and exits non-zero. */
static void renew_now(uv_timer_t *t) {
  presign *ps = t->data;
  if (ps->fatal || ps->released || !sl_kafka_fatal(ps->producer, "presign")) return;
  char err[512] = "";
  int rc = SL_EKAFKA;
  if (!sl_kafka_renew_due(&ps->renewals, (int64_t)uv_now(ps->loop))) {
    snprintf(err, sizeof err, "renewed %d times within %d s already", SL_KAFKA_RENEW_MAX,
             SL_KAFKA_RENEW_WINDOW_MS / 1000);
  } else {
    sl_kafka_prefetch_release(ps->topics, 2); /* the old producer's handles */
    rc = sl_kafka_producer_renew(&ps->producer, &ps->ku, ps->loop, ps->cc->kafka_brokers,
                                 "sluice-presign", ps->extra, NULL, err, sizeof err);
  }
  if (rc == 0) {
    if (prefetch_topics(ps, err, sizeof err) != 0)
      sl_log(SL_LOG_WARN, NULL, "renewed producer: %s (the first create looks them up)", err);
    return;
  }
  sl_log(SL_LOG_ERROR, NULL, "kafka producer not renewed (%s): stopping", err);
  ps->fatal = 1;
  if (!ps->shutting_down) uv_timer_start(&ps->stop_timer, on_stop_timer, 0, 0);
}

/* The producer failed for good (noticed by a create or by the webhook):
 * renewed from a timer, never inside the delivery report that noticed. */
static void on_fatal(void *ud) {
  presign *ps = ud;
  if (ps->fatal || ps->shutting_down || uv_is_active((uv_handle_t *)&ps->renew_timer)) return;
  uv_timer_start(&ps->renew_timer, renew_now, 0, 0);
}

/* A create is answered (with its Idempotency-Key record stored, or not):
 * when stopping, the last one lets go of the delivery reports and Redis. */
static void create_done(presign *ps) {
  ps->inflight--;
  if (ps->shutting_down && !ps->released && ps->inflight == 0 && ps->holders == 0)
    uv_timer_start(&ps->release_timer, release_rest, 0, 0);
}

static void accepted(pending *p);

static void on_key_stored(redisReply *r, void *ud) {
  pending *p = ud;
  if (!r ||
      r->type == REDIS_REPLY_ERROR) /* the mirror's next rebuild, or a stage's miss, fixes it */
    sl_log(SL_LOG_WARN, p->sid, "data key not stored in Redis (it is in Kafka): %s",
           r && r->str ? r->str : "no connection");
  accepted(p);
}

/* Stores the wrapped data key in Redis (Kafka has it): 1 when the reply
 * waits for it. */
static int key_store(pending *p) {
  char rkey[SL_DKEY_RKEY_MAX];
  if (sl_dkey_rkey(p->sid, rkey) != 0) return 0;
  const char *argv[] = {"SET", rkey, (const char *)p->wrapped};
  size_t lens[] = {3, strlen(rkey), sizeof p->wrapped};
  return sl_aredis_argv(p->ps->redis, on_key_stored, p, 3, argv, lens) == 0;
}

static void on_delivery(rd_kafka_resp_err_t err, void *ctx) {
  pending *p = ctx;
  presign *ps = p->ps;
  if (err && !p->err) p->err = err;
  if (--p->waiting > 0) return; /* the other of submission and key */
  err = p->err;
  create_spans(p, err ? 503 : 201);
  if (err && sl_kafka_fatal(ps->producer, "presign")) on_fatal(ps);
  if (err) {
    sl_metric_add(ps->m_unavailable, 1);
    sl_log(SL_LOG_WARN, p->sid, "submission not accepted: kafka: %s", rd_kafka_err2str(err));
    sl__quota_undo(ps->redis, &p->quota);
    sl_http_respond_error(p->req, 503, "unavailable",
                          "the submission could not be stored; retry later", "Retry-After: 2\r\n");
    idem_release(p->ik);
  } else {
    sl_metric_add(ps->m_created, 1);
    sl_log(SL_LOG_INFO, p->sid, "submission accepted");
    if (p->has_key && key_store(p)) return; /* accepted once Redis answers */
    accepted(p);
    return;
  }
  pending_free(p);
  create_done(ps);
}

/* Kafka has the submission (and its key, which Redis has too): 201. */
static void accepted(pending *p) {
  presign *ps = p->ps;
  if (p->ik && idem_store(p)) return; /* answers once the record is stored */
  sl_http_respond(p->req, 201, "application/json", "Cache-Control: no-store\r\n", p->body,
                  strlen(p->body));
  pending_free(p);
  create_done(ps);
}

static int bad(presign *ps, sl_http_req *req, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(presign *ps, sl_http_req *req, int status, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sl_metric_add(ps->m_rejected, 1);
  return sl_http_respond_error(req, status, code, msg, NULL);
}

static void iso8601(time_t t, char out[32]) {
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* create_checked's steps done already */
enum { CALLBACK_RESOLVED = 1 };

static int create_checked(presign *ps, sl_http_req *req, idem *ik, const creator *who, int done);

/* A create waiting for its callback_url host to be resolved (callback.h)
 * or for its quota (quota.h): it owns ik and counts as in flight until it
 * goes on or is refused. */
typedef struct {
  presign *ps;
  sl_http_req *req;
  idem *ik;
  creator who;
} resolving_create;

static void on_callback_resolved(void *ud, int rc, const char *pin, const char *why) {
  (void)pin;
  resolving_create *rcr = ud;
  presign *ps = rcr->ps;
  if (rc) {
    bad(ps, rcr->req, 422, "callback_url_refused", "%s", why);
    idem_release(rcr->ik);
  } else if (create_checked(ps, rcr->req, rcr->ik, &rcr->who, CALLBACK_RESOLVED) != 0) {
    idem_release(rcr->ik);
  }
  free(rcr);
  create_done(ps);
}

/* The create's callback_url against the policy: 1 when answered (refused,
 * or no resolution could start), -1 when the create goes on once the host
 * is resolved and its addresses checked (the resolution then owns ik). */
static int check_callback(presign *ps, sl_http_req *req, idem *ik, const creator *who,
                          const char *url) {
  sl__callback_target t;
  char why[320];
  if (sl__callback_check_url(ps->callbacks, url, &t, why, sizeof why) != 0) {
    bad(ps, req, 422, "callback_url_refused", "%s", why);
    return 1;
  }
  resolving_create *rcr = calloc(1, sizeof *rcr);
  if (!rcr) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return 1;
  }
  *rcr = (resolving_create){.ps = ps, .req = req, .ik = ik, .who = *who};
  if (sl__callback_resolve(ps->loop, ps->callbacks, &t, on_callback_resolved, rcr) != 0) {
    free(rcr);
    sl_http_respond_error(req, 503, "unavailable", "name resolution unavailable; retry later",
                          "Retry-After: 2\r\n");
    return 1;
  }
  ps->inflight++;
  return -1;
}

/* Question q's upload: its object key (into okey, 128 bytes), its
 * presigned PUT appended to the 201 body w (the i-th, with its trace id),
 * and its spec for
 * SubmissionCreated (pointing into q and okey). 0, or -1 when signing
 * failed. */
static int sign_question(const presign *ps, const sl__question_req *q, const char *sid, time_t now,
                         const char *expires, size_t i, char *okey, const char *trace_id,
                         Sluice__V1__QuestionSpec *spec, sl_jsonw *w) {
  snprintf(okey, 128, "submissions/%s/q%02u.%s", sid, q->no, ext_for(q->content_type));
  char path[512], url[4096], len[24];
  snprintf(len, sizeof len, "%lld", (long long)q->size);
  sl_sigv4_header hdrs[] = {{"content-length", len},
                            {"content-type", q->content_type},
                            {"x-amz-checksum-sha256", q->sha256_b64}};
  size_t nh = q->sha256_b64[0] ? 3 : 2;
  if (sl_s3_object_path(&ps->target, okey, path, sizeof path) ||
      sl_sigv4_presign(ps->sig, "PUT", ps->target.scheme, ps->target.host, path, NULL, now,
                       (unsigned)ps->s3->url_expiry_s, hdrs, nh, url, sizeof url))
    return -1;
  sluice__v1__question_spec__init(spec);
  spec->no = q->no;
  spec->content_type = (char *)q->content_type;
  spec->size = (uint64_t)q->size;
  spec->prompt = (char *)q->prompt;
  spec->object_key = okey;
  char no[64];
  snprintf(no, sizeof no, "%s{\"no\":%u,\"method\":\"PUT\",\"url\":", i ? "," : "", q->no);
  sl_jsonw_kstr(w, no, url);
  sl_jsonw_kstr(w, ",\"headers\":{\"Content-Type\":", q->content_type);
  sl_jsonw_kstr(w, ",\"Content-Length\":", len);
  if (q->sha256_b64[0]) sl_jsonw_kstr(w, ",\"x-amz-checksum-sha256\":", q->sha256_b64);
  sl_jsonw_kstr(w, "},\"object_key\":", okey);
  sl_jsonw_kstr(w, ",\"expires_at\":", expires);
  if (*trace_id) sl_jsonw_kstr(w, ",\"trace_id\":", trace_id);
  sl_jsonw_raw(w, "}");
  return 0;
}

/* Sends sc (the 201 body in w, the traces in tr: the pending create's from
 * here) to Kafka: 1 when the create now waits for the delivery report (the
 * pending record owns ik), 0 when it was answered. */
static int send_created(presign *ps, sl_http_req *req, idem *ik,
                        const Sluice__V1__SubmissionCreated *sc, sl_jsonw *w, create_trace *tr,
                        const sl__quota_verdict *quota) {
  size_t plen = sluice__v1__submission_created__get_packed_size(sc);
  uint8_t *payload = malloc(plen ? plen : 1);
  pending *p = calloc(1, sizeof *p);
  if (!payload || !p || w->oom) {
    free(payload);
    free(p);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return 0;
  }
  sluice__v1__submission_created__pack(sc, payload);
  p->ps = ps;
  p->req = req;
  p->body = sl_jsonw_take(w);
  p->ik = ik;
  p->quota = *quota;
  snprintf(p->sid, sizeof p->sid, "%s", sc->submission_id);
  p->tr = *tr;
  memset(tr, 0, sizeof *tr);
  rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
  p->waiting = 1;
  if (sl_dkey_enabled()) { /* its key first: a submission is never there without one */
    uint8_t dk[SL_SEAL_KEY_LEN];
    if (sl_dkey_new(p->sid, dk, p->wrapped) != 0) {
      free(payload);
      pending_free(p);
      sl_http_respond_error(req, 500, "internal", "no data key could be made", NULL);
      return 0;
    }
    OPENSSL_cleanse(dk, sizeof dk); /* presign seals nothing: the wrapped form is all it keeps */
    p->has_key = 1;
    e = sl_kafka_send(ps->producer, sl_pipeline_datakeys(ps->cc->pipeline), p->sid, strlen(p->sid),
                      p->wrapped, sizeof p->wrapped, RD_KAFKA_MSG_F_COPY, on_delivery, p);
    if (!e) p->waiting = 2;
  }
  /* the submission is recorded in its first question's trace */
  if (!e)
    e = sl_kafka_send_traced(ps->producer, ps->cc->topic_submissions, p->sid, 36, payload, plen,
                             RD_KAFKA_MSG_F_FREE, sc->n_questions ? p->tr.tps : NULL, on_delivery,
                             p);
  if (e && p->waiting == 2) { /* the key is on its way: its report ends the create */
    free(payload);
    p->err = e;
    p->waiting = 1;
    ps->inflight++;
    return 1;
  }
  if (e) {
    free(payload);
    pending_free(p);
    sl_metric_add(ps->m_unavailable, 1);
    sl_http_respond_error(req, 503, "unavailable", "the submission queue is full; retry later",
                          "Retry-After: 2\r\n");
    return 0;
  }
  ps->inflight++;
  return 1;
}

/* Validates, signs and produces. Returns 0 when the request now waits for
 * Kafka (the pending record owns ik) or for its callback host's name, or 1
 * when it was answered already. */
static int create(presign *ps, sl_http_req *req, idem *ik, const creator *who) {
  return create_checked(ps, req, ik, who, 0);
}

static void on_quota(void *ud, const sl__quota_verdict *v) {
  resolving_create *rcr = ud;
  presign *ps = rcr->ps;
  if (v->state == SL__QUOTA_UNCHECKED) /* on without it (quota.h) */
    sl_log(SL_LOG_WARN, NULL, "quota store unavailable: tenant %s's create not checked",
           rcr->who.tenant);
  if (v->state == SL__QUOTA_REFUSED) {
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Retry-After: %lld\r\n", (long long)v->retry_after_s);
    sl_metric_add(ps->m_quota, 1);
    sl_log(SL_LOG_INFO, NULL, "quota exceeded: tenant %s", rcr->who.tenant);
    sl_http_respond_error(rcr->req, 429, "quota_exceeded", v->message, hdr);
    idem_release(rcr->ik);
  } else {
    rcr->who.quota = *v;
    if (create_checked(ps, rcr->req, rcr->ik, &rcr->who, CALLBACK_RESOLVED) != 0)
      idem_release(rcr->ik);
  }
  free(rcr);
  create_done(ps);
}

/* The tenant's quotas for n answers: 1 when answered (no check could
 * start), -1 when the create goes on once they are counted (the check then
 * owns ik). */
static int check_quota(presign *ps, sl_http_req *req, idem *ik, const creator *who, size_t n) {
  resolving_create *rcr = calloc(1, sizeof *rcr);
  if (!rcr) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return 1;
  }
  *rcr = (resolving_create){.ps = ps, .req = req, .ik = ik, .who = *who};
  if (sl__quota_check(ps->redis, who->tenant, (long)n, sl_now_ms(), on_quota, rcr) != 0) {
    /* Redis not connected: on unchecked (quota.h) */
    sl__quota_verdict v = {.state = SL__QUOTA_UNCHECKED};
    ps->inflight++;
    on_quota(rcr, &v); /* it owns ik from here, as an answer would */
    return -1;
  }
  ps->inflight++;
  return -1;
}

static int create_checked(presign *ps, sl_http_req *req, idem *ik, const creator *who, int done) {
  int handed = 0;
  size_t blen, n = 0;
  const char *body = sl_http_req_body(req, &blen);
  sl__create_limits lim = {ps->pc->max_questions,          ps->pc->max_size, ps->pc->max_prompt,
                           (const char *const *)ps->types, ps->ntypes,       ps->pc->content_types};
  sl__question_req *qr = calloc((size_t)ps->pc->max_questions, sizeof *qr);
  json_t *root = NULL;
  /* the 201 body, written as it is built (sl_jsonw): jansson's pack and
   * dumps of 15 questions cost more CPU than everything else in a create
   * (~180 us of ~500 us) */
  sl_jsonw w = {.initial = 16384};
  Sluice__V1__QuestionSpec *specs = NULL, **specp = NULL;
  char *keys = NULL, code[64], msg[512];
  create_trace tr = {0};
  if (!qr) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return 1;
  }
  int st = sl__create_parse(sl_http_req_header(req, "Content-Type"), body, blen, &lim, &root, qr,
                            &n, code, sizeof code, msg, sizeof msg);
  if (st) {
    bad(ps, req, st, code, "%s", msg);
    free(qr);
    return 1;
  }
  const char *callback = json_string_value(json_object_get(root, "callback_url"));
  if ((callback && !(done & CALLBACK_RESOLVED)) || who->quota.state == SL__QUOTA_UNASKED) {
    int c = callback && !(done & CALLBACK_RESOLVED) ? check_callback(ps, req, ik, who, callback)
                                                    : check_quota(ps, req, ik, who, n);
    json_decref(root);
    free(qr);
    return c < 0 ? 0 : 1;
  }
  char sid[37], token[65], token_hash[65];
  int64_t now_ms = sl_now_ms();
  if (sl_uuid7(now_ms, sid) || sl_random_hex(24, token, sizeof token) ||
      sl__results_token_hash(sid, who->user, token, token_hash)) {
    sl_http_respond_error(req, 500, "internal", "random source failed", NULL);
    goto out;
  }
  specs = calloc(n, sizeof *specs);
  specp = calloc(n, sizeof *specp);
  keys = calloc(n, 128);
  if (!specs || !specp || !keys || create_trace_begin(&tr, req, n) != 0) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    goto out;
  }
  time_t now = (time_t)(now_ms / 1000);
  char expires[32], results_url[512];
  iso8601(now + (time_t)ps->s3->url_expiry_s, expires);
  snprintf(results_url, sizeof results_url, "%s/v1/submissions/%s", ps->pc->results_base_url, sid);
  sl_jsonw_kstr(&w, "{\"submission_id\":", sid);
  sl_jsonw_kstr(&w, ",\"results_token\":", token);
  sl_jsonw_kstr(&w, ",\"results_url\":", results_url);
  sl_jsonw_kstr(&w, ",\"expires_at\":", expires);
  sl_jsonw_raw(&w, ",\"questions\":[");
  for (size_t i = 0; i < n; i++) {
    char *okey = keys + 128 * i;
    char trace_id[33];
    const char *tp = create_trace_question(&tr, i, qr[i].no, trace_id);
    if (sign_question(ps, &qr[i], sid, now, expires, i, okey, trace_id, &specs[i], &w) != 0) {
      sl_http_respond_error(req, 500, "internal", "signing failed", NULL);
      goto out;
    }
    specp[i] = &specs[i];
    specs[i].traceparent = (char *)tp;
  }
  sl_jsonw_raw(&w, "]}");

  Sluice__V1__SubmissionCreated sc = SLUICE__V1__SUBMISSION_CREATED__INIT;
  sc.submission_id = sid;
  sc.accepted_at_ms = now_ms;
  sc.bucket = ps->s3->bucket;
  sc.questions = specp;
  sc.n_questions = n;
  sc.results_token_sha256 = token_hash;
  sc.user_id = (char *)who->user;
  sc.tenant = (char *)who->tenant;
  sc.apikey_id = (char *)who->keyid;
  sc.callback_url = (char *)(callback ? callback : "");
  handed = send_created(ps, req, ik, &sc, &w, &tr, &who->quota);
out:
  if (!handed) sl__quota_undo(ps->redis, &who->quota); /* answered with an error */
  sl_jsonw_free(&w);
  json_decref(root);
  free(specs);
  free(specp);
  free(keys);
  free(qr);
  create_trace_free(&tr);
  return handed ? 0 : 1;
}

static void on_idem_existing(redisReply *r, void *ud) {
  idem *ik = ud;
  if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_http_respond_error(ik->req, 503, "unavailable", "idempotency store unavailable; retry later",
                          "Retry-After: 2\r\n");
  } else if (r->type != REDIS_REPLY_STRING || r->len < 70) { /* expired meanwhile */
    sl_http_respond_error(ik->req, 409, "in_progress",
                          "a request with this Idempotency-Key is being processed; retry",
                          "Retry-After: 1\r\n");
  } else if (strncmp(r->str + (r->str[0] == 'd' ? 5 : 8), ik->body_hash, 64) != 0) {
    sl_http_respond_error(ik->req, 422, "idempotency_key_reused",
                          "this Idempotency-Key was used with a different request body", NULL);
  } else if (strncmp(r->str, "done ", 5) == 0) {
    sl_metric_add(ik->ps->m_replayed, 1);
    const char *body = r->str + 5 + 64 + 1;
    sl_http_respond(ik->req, 201, "application/json",
                    "Cache-Control: no-store\r\nIdempotent-Replayed: true\r\n", body,
                    r->len - (size_t)(body - r->str));
  } else {
    sl_http_respond_error(ik->req, 409, "in_progress",
                          "a request with this Idempotency-Key is being processed; retry",
                          "Retry-After: 1\r\n");
  }
  free(ik);
}

static void on_idem_claim(redisReply *r, void *ud) {
  idem *ik = ud;
  if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_http_respond_error(ik->req, 503, "unavailable", "idempotency store unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(ik);
  } else if (r->type == REDIS_REPLY_STATUS) { /* claimed: create it */
    if (create(ik->ps, ik->req, ik, &ik->who) != 0) idem_release(ik);
  } else { /* someone has the key: look at what they left */
    const char *argv[] = {"GET", ik->rkey};
    if (sl_aredis_argv(ik->ps->redis, on_idem_existing, ik, 2, argv, NULL) != 0) {
      sl_http_respond_error(ik->req, 503, "unavailable",
                            "idempotency store unavailable; retry later", "Retry-After: 2\r\n");
      free(ik);
    }
  }
}

/* A create with an Idempotency-Key: claim it, or answer from the record. */
static void create_idempotent(presign *ps, sl_http_req *req, const char *key, const creator *who) {
  size_t kl = strlen(key);
  int ok = kl >= 1 && kl <= 255;
  for (size_t i = 0; ok && i < kl; i++) ok = key[i] > 0x20 && key[i] < 0x7f;
  if (!ok) {
    bad(ps, req, 400, "invalid_idempotency_key",
        "Idempotency-Key must be 1 to 255 visible ASCII characters");
    return;
  }
  idem *ik = calloc(1, sizeof *ik);
  if (!ik) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  ik->ps = ps;
  ik->req = req;
  ik->who = *who;
  char kh[65];
  size_t blen;
  const char *body = sl_http_req_body(req, &blen);
  /* the record is the user's own: another user's identical key is another record */
  size_t ul = strlen(who->user);
  char *scoped = malloc(ul + 1 + kl);
  if (!scoped) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    free(ik);
    return;
  }
  memcpy(scoped, who->user, ul + 1);
  memcpy(scoped + ul + 1, key, kl);
  sl_sha256_hex(scoped, ul + 1 + kl, kh);
  free(scoped);
  sl_sha256_hex(body, blen, ik->body_hash);
  snprintf(ik->rkey, sizeof ik->rkey, "sl:idem:presign:%s", kh);
  char val[80];
  snprintf(val, sizeof val, "pending %s", ik->body_hash);
  const char *argv[] = {"SET", ik->rkey, val, "NX", "PX", "30000"};
  if (sl_aredis_argv(ps->redis, on_idem_claim, ik, 6, argv, NULL) != 0) {
    sl_http_respond_error(req, 503, "unavailable", "idempotency store unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(ik);
  }
}

/* ---- who is calling, and how often ---- */

static int unauthorized(presign *ps, sl_http_req *req, const char *code, const char *msg) {
  sl_metric_add(ps->m_unauth, 1);
  return sl_http_respond_error(req, 401, code, msg,
                               "WWW-Authenticate: Bearer realm=\"sluice\"\r\n");
}

/* Authenticated and within the limits: create (with or without a key). */
static void proceed(caller *c) {
  const char *ikey = sl_http_req_header(c->req, "Idempotency-Key");
  /* the API key's digest (its record sl:apikey:<digest>): notify signs the
   * submission's deliveries with that key's webhook secret */
  snprintf(c->who.keyid, sizeof c->who.keyid, "%s",
           c->rkey[0] ? c->rkey + strlen(sl__apikey_prefix()) : "");
  if (!c->who.tenant[0]) /* an API key's tenant is its user */
    snprintf(c->who.tenant, sizeof c->who.tenant, "%s", c->who.user);
  if (ikey)
    create_idempotent(c->ps, c->req, ikey, &c->who);
  else
    create(c->ps, c->req, NULL, &c->who);
  free(c);
}

static int rate_send(caller *c);

/* Takes back the counts of the windows before c->rl_i (one script each). */
static void rate_undo(caller *c) {
  for (int i = 0; i < c->rl_i; i++) {
    const char *argv[] = {c->rl_key[i]};
    sl_aredis_eval(c->ps->redis, NULL, NULL, &c->ps->rate_undo, 1, 1, argv, NULL);
  }
}

static void on_rate(redisReply *r, void *ud) {
  caller *c = ud;
  if (sl_rkey_bucketed() && r && r->type == REDIS_REPLY_INTEGER && r->integer == 0 &&
      c->rl_i + 1 < c->rl_n) {
    c->rl_i++; /* one window at a time: the next one */
    if (rate_send(c) == 0) return;
    r = NULL;
  }
  if (!r || r->type != REDIS_REPLY_INTEGER || r->integer > 0) rate_undo(c);
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    sl_http_respond_error(c->req, 503, "unavailable", "rate limiter unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(c);
    return;
  }
  if (r->integer > 0) {
    char hdr[64], msg[160];
    long long s = (r->integer + 999) / 1000;
    snprintf(hdr, sizeof hdr, "Retry-After: %lld\r\n", s);
    snprintf(msg, sizeof msg, "too many submissions from this user or address; retry in %lld s", s);
    sl_metric_add(c->ps->m_limited, 1);
    sl_log(SL_LOG_INFO, NULL, "rate limited: user %s", c->who.user);
    sl_http_respond_error(c->req, 429, "rate_limited", msg, hdr);
    free(c);
    return;
  }
  proceed(c);
}

/* The client address: the TCP peer, or the last entry of the trusted
 * proxy's header when presign.client_address_header is set. */
static void client_address(presign *ps, sl_http_req *req, char *out, size_t len) {
  if (sl__client_address(req, ps->pc->client_address_header, out, len) != 0)
    snprintf(out, len, "unknown");
}

/* One fixed one-minute window per user and per address. Every window is
 * checked first and counted only when all allow the request, so a refused
 * request uses up nothing. Returns the ms until the first exhausted window
 * ends, or 0 (counted). With redis.buckets (a Redis Cluster, where the
 * user's and the address's keys are in different slots) it runs once per
 * window, in turn, and a refusal takes back the counts made before it
 * (rate_undo_lua): a refused request uses up nothing once that is in. */
static const char rate_lua[] =
    "for i, k in ipairs(KEYS) do\n"
    "  if tonumber(redis.call('GET', k) or '0') >= tonumber(ARGV[i]) then\n"
    "    local t = redis.call('PTTL', k)\n"
    "    if t < 1 then t = 1 end\n"
    "    return t\n"
    "  end\n"
    "end\n"
    "for i, k in ipairs(KEYS) do\n"
    "  if redis.call('INCR', k) == 1 then redis.call('PEXPIRE', k, 60000) end\n"
    "end\n"
    "return 0\n";
/* a count taken back (a later window refused); a window gone meanwhile
 * stays gone */
static const char rate_undo_lua[] =
    "if redis.call('DECR', KEYS[1]) < 0 then redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

/* Sends the rate script for c's windows: all of them, or (bucketed) the
 * one at c->rl_i. */
static int rate_send(caller *c) {
  const char *argv[4];
  int one = sl_rkey_bucketed(), from = one ? c->rl_i : 0, nk = one ? 1 : c->rl_n, argc = 0;
  for (int i = 0; i < nk; i++) argv[argc++] = c->rl_key[from + i];
  for (int i = 0; i < nk; i++) argv[argc++] = c->rl_lim[from + i];
  return sl_aredis_eval(c->ps->redis, on_rate, c, &c->ps->rate, nk, argc, argv, NULL);
}

static void authed(caller *c) {
  presign *ps = c->ps;
  char addr[64];
  int nk = 0;
  if (ps->pc->rate_per_user > 0) {
    snprintf(c->rl_key[nk], sizeof c->rl_key[nk], "sl:rl:u:%s", c->who.user);
    snprintf(c->rl_lim[nk++], sizeof c->rl_lim[0], "%lld", (long long)ps->pc->rate_per_user);
  }
  if (ps->pc->rate_per_address > 0) {
    client_address(ps, c->req, addr, sizeof addr);
    snprintf(c->rl_key[nk], sizeof c->rl_key[nk], "sl:rl:a:%s", addr);
    snprintf(c->rl_lim[nk++], sizeof c->rl_lim[0], "%lld", (long long)ps->pc->rate_per_address);
  }
  if (nk == 0) {
    proceed(c);
    return;
  }
  c->rl_n = nk;
  c->rl_i = 0;
  if (rate_send(c) != 0) {
    sl_http_respond_error(c->req, 503, "unavailable", "rate limiter unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(c);
  }
}

/* SL__APIKEY_LOOKUP_LUA: the key's user, or whether the store is complete
 * (keystore.h). */
static const char apikey_lua[] = SL__APIKEY_LOOKUP_LUA;

static void on_apikey(redisReply *r, void *ud) {
  caller *c = ud;
  if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_http_respond_error(c->req, 503, "unavailable", "credential store unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(c);
  } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
    sl_http_respond_error(c->req, 503, "auth_unavailable", SL__APIKEY_UNAVAILABLE,
                          "Retry-After: 2\r\n");
    free(c);
  } else if (r->type != REDIS_REPLY_STRING || r->len > SL__USER_MAX ||
             (snprintf(c->who.user, sizeof c->who.user, "%s", r->str),
              !sl__user_valid(c->who.user))) {
    unauthorized(c->ps, c->req, "invalid_credentials", "unknown or revoked API key");
    free(c);
  } else {
    sl__keycache_put(c->ps->keys, c->rkey, c->who.user, c->mark);
    authed(c);
  }
}

/* POST /v1/submissions: authenticate, rate-limit, then create. */
static void begin_create(presign *ps, sl_http_req *req) {
  sl__cred_kind kind;
  const char *cred = sl__auth_bearer(req, &kind);
  if (kind == SL__CRED_NONE) {
    unauthorized(ps, req, "unauthenticated",
                 "send an API key or a JWT as Authorization: Bearer <credential>");
    return;
  }
  if (kind == SL__CRED_OTHER) {
    unauthorized(ps, req, "invalid_credentials", "the credential is neither an API key nor a JWT");
    return;
  }
  caller *c = calloc(1, sizeof *c);
  if (!c) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  c->ps = ps;
  c->req = req;
  if (kind == SL__CRED_JWT) {
    char why[160];
    if (sl__auth_jwt(ps->auth, cred, sl_now_ms() / 1000, c->who.user, c->who.tenant, why,
                     sizeof why) != 0) {
      unauthorized(ps, req, "invalid_credentials", why);
      free(c);
      return;
    }
    authed(c);
    return;
  }
  const char *argv[] = {c->rkey, SL__APIKEY_MARKER};
  if (sl__apikey_rkey(cred, c->rkey) != 0) {
    unauthorized(ps, req, "invalid_credentials", "malformed API key");
    free(c);
    return;
  }
  if (sl__keycache_get(ps->keys, c->rkey, c->who.user)) {
    authed(c);
    return;
  }
  c->mark = sl__keycache_mark(ps->keys);
  if (sl_aredis_eval(ps->redis, on_apikey, c, &ps->apikey, 2, 2, argv, NULL) != 0) {
    sl_http_respond_error(req, 503, "unavailable", "credential store unavailable; retry later",
                          "Retry-After: 2\r\n");
    free(c);
  }
}

/* ---- routes ---- */

/* Each route module answers the requests it owns (1) or leaves them (0). */
static int route_create(presign *ps, sl_http_req *req) {
  if (strcmp(sl_http_req_path(req), "/v1/submissions") != 0) return 0;
  if (strcmp(sl_http_req_method(req), "POST") == 0)
    begin_create(ps, req);
  else
    sl_http_respond_error(req, 405, "method_not_allowed", "use POST", "Allow: POST\r\n");
  return 1;
}
static int route_multipart(presign *ps, sl_http_req *req) { return sl__mpu_handle(ps->mpu, req); }
static int route_webhook(presign *ps, sl_http_req *req) {
  return sl__webhook_handle(ps->hook, req);
}
static int route_static(presign *ps, sl_http_req *req) { return sl_static_serve(ps->web, req); }

/* What presign serves, tried in order (docs/openapi.yaml): the create API,
 * the Companion-style multipart endpoints (multipart.h), the storage
 * webhook (webhook.h), the browser client's files; anything else is 404. */
static int (*const routes[])(presign *ps, sl_http_req *req) = {
    route_create,
    route_multipart,
    route_webhook,
    route_static,
};

static void handle(sl_http_req *req, void *ud) {
  presign *ps = ud;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (routes[i](ps, req)) return;
  sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
}

/* a route module let go of what presign lent it */
static void on_module_done(void *ud) {
  presign *ps = ud;
  ps->holders--;
  if (!ps->released && ps->shutting_down && ps->inflight == 0 && ps->holders == 0)
    uv_timer_start(&ps->release_timer, release_rest, 0, 0);
}

static void shutdown_loop(presign *ps) {
  if (ps->shutting_down) return;
  ps->shutting_down = 1;
  uv_close((uv_handle_t *)&ps->stop_timer, NULL);
  uv_close((uv_handle_t *)&ps->renew_timer, NULL); /* what is in flight gets its 503 */
  /* no new requests; those taken are answered (test_presign_drain) */
  sl_http_server_drain(ps->srv);
  ps->srv = NULL;
  /* creates waiting for Kafka, multipart requests and storage events in
   * flight keep the delivery reports and Redis until the last is answered
   * (within presign.kafka_timeout_ms and the storage timeouts) */
  ps->holders = (ps->mpu != NULL) + (ps->hook != NULL);
  sl__mpu_free(ps->mpu, on_module_done, ps);
  ps->mpu = NULL;
  sl__webhook_free(ps->hook, on_module_done, ps); /* may be done at once */
  ps->hook = NULL;
  if (ps->inflight == 0 && ps->holders == 0) uv_timer_start(&ps->release_timer, release_rest, 0, 0);
  uv_close((uv_handle_t *)&ps->sigterm, NULL);
  uv_close((uv_handle_t *)&ps->sigint, NULL);
}

static void on_signal(uv_signal_t *h, int sig) {
  sl_log(SL_LOG_INFO, NULL, "signal %d: no new requests; finishing the ones in flight", sig);
  shutdown_loop(h->data);
}

extern const sl__stage_desc sl__presign_stage; /* its descriptor, at the end */

/* The settings no other check covers: 0, or SL_ECONFIG with err. */
static int check_settings(const presign_conf *pc, char *err, size_t errlen) {
  if (pc->rate_per_user < 0 || pc->rate_per_address < 0)
    snprintf(err, errlen, "presign.rate_per_user and presign.rate_per_address must be >= 0");
  else if (pc->apikey_cache_ms < 0 || pc->apikey_cache_max < 0)
    snprintf(err, errlen, "presign.apikey_cache_ms and presign.apikey_cache_max must be >= 0");
  else if (pc->apikey_watch_ms <= 0)
    snprintf(err, errlen, "presign.apikey_watch_ms must be > 0");
  else
    return 0;
  return SL_ECONFIG;
}

static void count_requests(presign *ps) {
  const char *help = "Submission create requests by outcome";
  ps->m_created = sl_metrics_counter("sluice_submissions_total", "outcome=\"accepted\"", help);
  ps->m_rejected = sl_metrics_counter("sluice_submissions_total", "outcome=\"rejected\"", help);
  ps->m_unavailable =
      sl_metrics_counter("sluice_submissions_total", "outcome=\"unavailable\"", help);
  ps->m_replayed = sl_metrics_counter("sluice_submissions_total", "outcome=\"replayed\"", help);
  ps->m_unauth =
      sl_metrics_counter("sluice_submissions_total", "outcome=\"unauthenticated\"", help);
  ps->m_limited = sl_metrics_counter("sluice_submissions_total", "outcome=\"rate_limited\"", help);
  ps->m_quota = sl_metrics_counter("sluice_submissions_total", "outcome=\"quota_exceeded\"", help);
}

/* What presign needs before its loop: the accepted content types, who may
 * call, which callbacks they may name, storage's signer and the producer. */
static int open_clients(presign *ps, const sl__auth_conf *ac, const sl__callback_conf *cbc,
                        char *err, size_t errlen) {
  char *save = NULL;
  ps->types_buf = strdup(ps->pc->content_types);
  for (char *t = ps->types_buf ? strtok_r(ps->types_buf, ", ", &save) : NULL;
       t && ps->ntypes < MAX_TYPES; t = strtok_r(NULL, ", ", &save))
    ps->types[ps->ntypes++] = t;
  /* the 503 must come within kafka_timeout_ms, librdkafka's 1 s scan included */
  snprintf(ps->timeout, sizeof ps->timeout, "%lld",
           (long long)sl_kafka_message_timeout_for(ps->pc->kafka_timeout_ms));
  /* kafka.producer_properties as every stage takes them, then presign's
   * own two, which the 503's timing rests on (set last: they win) */
  int rc = sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, ps->cc->kafka_producer_properties,
                                ps->props, sizeof ps->props, ps->extra, 16, err, errlen);
  size_t n = 0;
  while (rc == 0 && ps->extra[n]) n++;
  const char *own[] = {"message.timeout.ms", ps->timeout, "linger.ms", "0", NULL};
  if (rc == 0) memcpy(ps->extra + n, own, sizeof own);
  if (rc == 0) rc = sl__auth_new(&ps->auth, ac, err, errlen);
  if (rc == 0) rc = sl__callback_policy_new(&ps->callbacks, cbc, err, errlen);
  if (rc == 0) rc = check_settings(ps->pc, err, errlen);
  if (rc == 0) rc = sl_s3_target_init(&ps->target, ps->s3);
  if (rc == 0)
    rc = sl_sigv4_new(&ps->sig, ps->s3->access_key, ps->s3->secret_key, ps->s3->region, "s3");
  if (rc && !err[0]) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  if (rc == 0)
    rc = sl_kafka_producer_new(&ps->producer, ps->cc->kafka_brokers, "sluice-presign", ps->extra,
                               err, errlen);
  return rc;
}

/* Redis (the idempotency records, the API-key cache and store). */
static int open_redis(presign *ps, char *err, size_t errlen) {
  const sl_common_conf *cc = ps->cc;
  const presign_conf *pc = ps->pc;
  int rc = sl_aredis_new(&ps->redis, ps->loop, cc->redis_url);
  if (rc) snprintf(err, errlen, "redis.url %s: %s", cc->redis_url, sl_strerror(rc));
  if (rc == 0 && (rc = sl_aredis_set_timeout(ps->redis, cc->redis_command_timeout_ms)) != 0)
    snprintf(err, errlen, "redis.command_timeout_ms %lld: %s",
             (long long)cc->redis_command_timeout_ms, sl_strerror(rc));
  if (rc == 0 &&
      (rc = sl__keycache_new(&ps->keys, ps->loop, cc->redis_url, cc->redis_command_timeout_ms,
                             pc->apikey_cache_ms, (size_t)pc->apikey_cache_max)) != 0)
    snprintf(err, errlen, "API-key cache: %s", sl_strerror(rc));
  if (rc == 0 && (rc = sl__keystore_start(&ps->store, cc->redis_url, cc->kafka_brokers,
                                          sl_pipeline_apikeys(cc->pipeline), pc->apikey_watch_ms)))
    snprintf(err, errlen, "API-key store: %s", sl_strerror(rc));
  sl_mirror_opts dko = {.name = "data-key store",
                        .topic = sl_pipeline_datakeys(cc->pipeline),
                        .lock_key = sl_dkey_lock(),
                        .marker_key = sl_dkey_marker(),
                        .client_id = "sluice-presign-datakeys",
                        .while_lost = "stages retry work whose key Redis lost",
                        .m_rebuilds = "sluice_datakey_store_rebuilds_total",
                        .m_replayed = "sluice_datakey_store_replayed_total",
                        .interval_ms = pc->apikey_watch_ms,
                        .apply = sl_dkey_apply};
  if (rc == 0 && sl_dkey_enabled() &&
      (rc = sl_mirror_start(&ps->dkstore, cc->redis_url, cc->kafka_brokers, &dko)))
    snprintf(err, errlen, "data-key store: %s", sl_strerror(rc));
  return rc;
}

/* The routes beside the create: the static page, multipart uploads, the
 * storage-event webhook. */
static int open_routes(presign *ps, const sl__webhook_conf *wc, char *err, size_t errlen) {
  const presign_conf *pc = ps->pc;
  int rc = 0;
  if (pc->static_dir[0]) {
    char serr[384];
    rc = sl_static_new(&ps->web, pc->static_dir, serr, sizeof serr);
    if (rc)
      snprintf(err, errlen, "presign.static_dir: %s", serr);
    else
      sl_log(SL_LOG_INFO, NULL, "serving %zu files of %s at /", sl_static_count(ps->web),
             pc->static_dir);
  }
  if (rc == 0) {
    xmlInitParser(); /* libxml2 (S3 replies) before any use, on this thread */
    rc = sl__mpu_new(&ps->mpu, ps->loop, ps->sig, &ps->target, ps->s3, ps->redis,
                     (unsigned)ps->s3->url_expiry_s);
    if (rc) snprintf(err, errlen, "multipart endpoints: %s", sl_strerror(rc));
  }
  if (rc == 0)
    rc =
        sl__webhook_new(&ps->hook, wc, ps->cc, &ps->producer, ps->redis, on_fatal, ps, err, errlen);
  return rc;
}

/* The HTTP server on presign.listen, with its limits and CORS. */
static int open_server(presign *ps, const sl_http_conf *hc, char *err, size_t errlen) {
  const presign_conf *pc = ps->pc;
  sl_http_limits lim = {
      .request_timeout_ms = pc->request_timeout_ms > 0 && pc->request_timeout_ms < 3600000
                                ? (unsigned)pc->request_timeout_ms
                                : 10000,
      .max_connections = pc->max_connections > 0 ? (size_t)pc->max_connections : 0};
  sl_http_limits_from_conf(&lim, hc);
  int rc = sl_http_server_new(&ps->srv, ps->loop, pc->listen, &lim, handle, ps);
  if (rc) snprintf(err, errlen, "listen %s: %s", pc->listen, sl_strerror(rc));
  if (rc == 0 && (rc = sl_http_server_set_cors(ps->srv, pc->cors_origins, "GET, POST, DELETE",
                                               "Content-Type, Idempotency-Key, Authorization",
                                               "ETag, Retry-After, Idempotent-Replayed")))
    snprintf(err, errlen, "presign.cors_origins: %s", sl_strerror(rc));
  return rc;
}

/* The topics it writes to, known to the producer before the first create
 * (else up to 1 s); err says why not. */
static int prefetch_topics(presign *ps, char *err, size_t errlen) {
  const char *topics[] = {ps->cc->topic_submissions, ps->cc->topic_storage_events};
  int rc = sl_kafka_prefetch(ps->producer, topics, ps->hook ? 2 : 1, ps->topics);
  if (rc) snprintf(err, errlen, "kafka topics: %s", sl_strerror(rc));
  return rc;
}

/* Everything on presign's loop, in order; the first failure stops it. */
static int open_on_loop(presign *ps, const sl__webhook_conf *wc, const sl_http_conf *hc, char *err,
                        size_t errlen) {
  int rc = sl_kafka_uv_attach(&ps->ku, ps->producer, ps->loop);
  if (rc == 0) rc = open_redis(ps, err, errlen);
  if (rc == 0) rc = open_routes(ps, wc, err, errlen);
  if (rc == 0) rc = prefetch_topics(ps, err, errlen);
  if (rc == 0) rc = open_server(ps, hc, err, errlen);
  return rc;
}

/* Serves until SIGTERM/SIGINT (shutdown_loop) or a fatal producer error. */
static void serve(presign *ps, sl_admin *admin) {
  uv_signal_init(ps->loop, &ps->sigterm);
  uv_signal_init(ps->loop, &ps->sigint);
  ps->sigterm.data = ps->sigint.data = ps;
  uv_signal_start(&ps->sigterm, on_signal, SIGTERM);
  uv_signal_start(&ps->sigint, on_signal, SIGINT);
  sl_log(SL_LOG_INFO, NULL, "listening on http://%s (storage %s, bucket %s)", ps->pc->listen,
         ps->s3->endpoint, ps->s3->bucket);
  if (!sl_mirror_wait(ps->store, 15000))
    sl_log(SL_LOG_WARN, NULL,
           "the API-key store is not complete after 15 s (Redis or Kafka unreachable?): "
           "ready anyway; API keys get 503 auth_unavailable until it is");
  sl_admin_set_ready(admin, 1);
  uv_run(ps->loop, UV_RUN_DEFAULT);
}

/* Start-up failed: what was opened on the loop is closed on it. */
static void abandon(presign *ps, const char *err) {
  sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  sl_http_server_free(ps->srv);
  ps->released = 1;
  uv_close((uv_handle_t *)&ps->release_timer, NULL);
  uv_close((uv_handle_t *)&ps->stop_timer, NULL);
  uv_close((uv_handle_t *)&ps->renew_timer, NULL);
  sl_kafka_uv_detach(ps->ku);
  sl_aredis_free(ps->redis);
  sl__keycache_free(ps->keys);
  sl__mpu_free(ps->mpu, NULL, NULL);
  sl__webhook_free(ps->hook, NULL, NULL);
  uv_run(ps->loop, UV_RUN_DEFAULT);
}

/* After the loop ran out: what presign opened before it. */
static void close_clients(presign *ps) {
  if (ps->producer) {
    rd_kafka_flush(ps->producer, (int)ps->pc->kafka_timeout_ms + 1000);
    sl_kafka_prefetch_release(ps->topics, 2);
    rd_kafka_destroy(ps->producer);
  }
  sl_mirror_stop(ps->store);
  sl_mirror_stop(ps->dkstore);
  sl_sigv4_free(ps->sig);
  sl_static_free(ps->web);
  free(ps->types_buf);
  sl__auth_free(ps->auth);
  sl__callback_policy_free(ps->callbacks);
}

static int presign_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  presign_conf pc = {0};
  sl_s3_conf s3 = {0};
  sl__auth_conf ac = {0};
  sl__webhook_conf wc = {0};
  sl__callback_conf cbc = {0};
  sl_http_conf hc = {0};
  sl_conf_bind own[] = {{presign_table, presign_table_len, &pc},
                        {sl_http_conf_table, sl_http_conf_table_len, &hc},
                        {sl_s3_conf_table, sl_s3_conf_table_len, &s3},
                        {sl__auth_table, sl__auth_table_len, &ac},
                        {sl__webhook_table, sl__webhook_table_len, &wc},
                        {sl__callback_table, sl__callback_table_len, &cbc}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(&sl__presign_stage, sl__presign_stage.name, argc, argv, &cc, own,
                           sizeof own / sizeof own[0], &admin);
  if (rc) return rc;
  presign ps = {.cc = &cc, .pc = &pc, .s3 = &s3};
  sl_redis_script_init(&ps.rate, rate_lua);
  sl__quota_init();
  sl_redis_script_init(&ps.rate_undo, rate_undo_lua);
  sl_redis_script_init(&ps.apikey, apikey_lua);
  count_requests(&ps);
  char err[512] = "";
  rc = open_clients(&ps, &ac, &cbc, err, sizeof err);
  uv_loop_t loop;
  uv_loop_init(&loop);
  ps.loop = &loop;
  uv_timer_init(&loop, &ps.release_timer);
  ps.release_timer.data = &ps;
  uv_timer_init(&loop, &ps.stop_timer);
  ps.stop_timer.data = &ps;
  uv_timer_init(&loop, &ps.renew_timer);
  ps.renew_timer.data = &ps;
  if (rc == 0) rc = open_on_loop(&ps, &wc, &hc, err, sizeof err);
  if (rc == 0)
    serve(&ps, admin);
  else
    abandon(&ps, err);
  close_clients(&ps); /* the producer flushed before the loop closes, as always */
  uv_loop_close(&loop);
  sl__stage_finish(&cc, own, sizeof own / sizeof own[0], admin);
  return rc || ps.fatal ? 1 : 0;
}

const sl__stage_desc sl__presign_stage = {
    .name = "presign",
    .summary = "the public edge API: submissions, uploads, the storage webhook, the web page",
    .kind = {"presign", {NULL}, {SL__MSG_SUBMISSION, SL__MSG_S3EVENT, NULL}, 0, 0, 0},
    .table = presign_table,
    .table_len = &presign_table_len,
    .part_title = "Storage-event webhook (presign; see [security.md](security.md))",
    .part_table = sl__webhook_table,
    .part_table_len = &sl__webhook_table_len,
    .admin = "127.0.0.1:9180",
    .main = presign_main};
