/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.c — `sluice notify`: signed webhooks to a submission's callback_url.
 *
 * Consumes the question statuses (the pipeline's sluice.v1.QuestionStatus
 * topic, `results`) beside materialize. For a final status (done, failed)
 * of a submission that named a callback_url (materialize keeps it in the
 * view, field "callback" of sl:sub:<sid>), it POSTs what the results API
 * shows:
 *   notify.mode=question:   {"event":"question.final","submission_id":…,
 *                            "question":{…the question's view…}} per question;
 *   notify.mode=submission: {"event":"submission.complete","submission_id":…,
 *                            "summary":{…},"questions":[…]} once all are final.
 * The body comes from the view, read with one HGETALL once the view shows
 * the status being handled (materialize may be behind notify: a view that
 * does not show it yet is a retry, view_behind). In submission mode the
 * delivery that finds every question final sends, so the last question to
 * reach the view triggers it (two may, when they land together: the same
 * delivery id, see below).
 *
 * Every delivery carries
 *   X-Sluice-Signature: t=<unix s>,v2=<hex HMAC-SHA256(secret,
 *                       "<t>.<url>.<body>")>[,v2=<same with the previous secret>]
 *                       [,v1=<HMAC(notify.secret, "<t>.<body>")>,...]
 *     — secret is the webhook secret of the API key that created the
 *     submission (view field "apikey" -> sl:apikey:<digest> whsec, and
 *     whsec_prev while rotated: `sluicectl apikey add/rotate-secret`), else
 *     notify.secret (and notify.secret_previous), which alone also signs
 *     v1, the scheme POST /v1/storage-events verifies (lib/webhook_sig.h:
 *     sl__webhook_sign). url is the URL requested (the normalised
 *     callback_url): a delivery for one receiver does not verify at another;
 *   X-Sluice-Key: the id (12 hex) of the key whose secret signed, or "global";
 *   X-Sluice-Delivery: an id the receiver dedupes on, the same for every
 *     attempt of the same content: "<sid>/<no>/<state>" per question,
 *     "<sid>/all/<16 hex of sha256 over the states>" per submission;
 *   X-Sluice-Event: question.final or submission.complete.
 * Delivery is at least once: a retried, redelivered or replayed message
 * sends again with the same id.
 *
 * The URL is checked again against the callback policy (callback.h) and its
 * host resolved and checked on every delivery; the connection goes to the
 * checked address (sl_httpc_request.resolve) of the normalised URL (one
 * host for check, pin and request: "example.com." is sent as example.com),
 * redirects are not followed, and no proxy is used unless notify.proxy
 * names one (never one from the environment: a proxy resolves the name
 * itself, past the pin).
 * Outcomes: 2xx delivered; 5xx, 408, 429, a timeout or a transport error
 * -> RETRY (the stage's retry tiers, then the dead letters); 410 Gone ->
 * FAIL callback_gone and the submission's later deliveries are skipped
 * (field "notify_gone" in the view) except a replay from the dead letters;
 * a redirect, any other 4xx, or a URL or address the policy refuses ->
 * FAIL. Dead letters of notify are not the question's failure: no FAILED
 * status is written (on_dead_letter is NULL). `sluicectl dlq replay`
 * re-sends.
 *
 * @locality the stage loop: Redis (the stage's async connection), name
 * resolution (libuv's pool) and HTTP (sl_httpc) all answer on it.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/process.h"
#include "lib/stage.h"
#include "lib/view.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/auth.h"
#include "lib/callback.h"
#include "lib/webhook_sig.h"
#include "sluice.pb-c.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

typedef struct {
  char *secret;
  char *secret_previous;
  char *mode;
  int64_t timeout_ms;
  char *proxy;
} notify_conf;

#define N(f) offsetof(notify_conf, f)
static const sl_conf_entry notify_table[] = {
    {"notify.secret", SL_CONF_STR, "", N(secret),
     "HMAC-SHA256 key signing every delivery (X-Sluice-Signature, docs/operations.md); "
     "required when callback.allowed_hosts is set",
     1},
    {"notify.secret_previous", SL_CONF_STR, "", N(secret_previous),
     "while rotating: deliveries carry a second v1 signature made with this key", 1},
    {"notify.mode", SL_CONF_STR, "question", N(mode),
     "question: one POST per question when it is final; submission: one POST when every "
     "question is final",
     0},
    {"notify.timeout_ms", SL_CONF_INT, "10000", N(timeout_ms),
     "a delivery that has not been answered in this long is retried", 0},
    {"notify.proxy", SL_CONF_STR, "", N(proxy),
     "HTTP(S) proxy every delivery goes through (\"http://proxy.internal:3128\"); the proxy "
     "then connects, so it must refuse private and metadata addresses itself; empty: direct "
     "to the checked address (http_proxy, https_proxy, all_proxy and no_proxy in the "
     "environment are ignored)",
     0},
};
static const size_t notify_table_len = sizeof notify_table / sizeof notify_table[0];

typedef struct {
  sl_common_conf *cc;
  notify_conf *nc;
  sl__callback_policy *policy;
  int whole; /* notify.mode=submission */
  int rank_done, rank_failed;
  sl_metric *m_delivered, *m_retried, *m_failed, *m_gone, *m_skipped;
} notifier;

/* One delivery, from the status to the receiver's answer. */
typedef struct {
  notifier *N;
  sl_job *job;
  sl_result *res;
  char sid[64];
  unsigned qno;
  int replay; /* from sluicectl dlq replay: sent even after a 410 */
  char hkey[96];
  char *url;
  char *body;
  char id[160];
  const char *event;
  sl__callback_target target;
  char keyid[65];      /* the API key that created the submission, or "" */
  char whsec[96];      /* that key's webhook secret, "" = notify.secret signs */
  char whsec_prev[96]; /* its previous one, during a rotation */
} delivery;

static void finish(delivery *d) {
  sl_job *job = d->job;
  free(d->url);
  free(d->body);
  free(d);
  sl_job_done(job);
}

static const char *field(const redisReply *rep, const char *name) {
  return sl_redis_hash_field(rep, name);
}

/* A view's rank field r<no> as stored: a final one is rank_done/failed. */
static int is_final(const notifier *N, const char *r) {
  int v = r ? atoi(r) : 0;
  return v == N->rank_done || v == N->rank_failed;
}

/* The question's view (q<no>) parsed, or NULL. */
static json_t *question_of(const redisReply *rep, unsigned no) {
  char f[32];
  snprintf(f, sizeof f, "q%u", no);
  const char *v = field(rep, f);
  return v ? json_loads(v, 0, NULL) : NULL;
}

/* The body and id of this delivery from the view rep; 0 (d->body set), 1
 * when there is nothing to send yet (submission mode, not all final), or an
 * error code. */
static int build(delivery *d, const redisReply *rep) {
  notifier *N = d->N;
  json_t *body = NULL;
  if (!N->whole) {
    json_t *q = question_of(rep, d->qno);
    if (!q) return SL_EPARSE;
    const char *st = json_string_value(json_object_get(q, "state"));
    snprintf(d->id, sizeof d->id, "%s/%u/%s", d->sid, d->qno, st ? st : "?");
    d->event = "question.final";
    body = json_pack("{s:s,s:s,s:s,s:o}", "event", d->event, "delivery_id", d->id, "submission_id",
                     d->sid, "question", q);
  } else {
    long n = strtol(field(rep, "n") ? field(rep, "n") : "0", NULL, 10);
    json_t *qs = json_array();
    int done = 0, failed = 0;
    char states[1024 * 8] = "";
    size_t sl = 0;
    for (unsigned no = 1; no <= 999 && (long)json_array_size(qs) < n; no++) {
      char spec[32], r[32];
      snprintf(spec, sizeof spec, "spec%u", no);
      if (!field(rep, spec)) continue;
      snprintf(r, sizeof r, "r%u", no);
      json_t *q = is_final(N, field(rep, r)) ? question_of(rep, no) : NULL;
      if (!q) {
        json_decref(qs);
        return 1;
      }
      const char *st = json_string_value(json_object_get(q, "state"));
      done += st && strcmp(st, "done") == 0;
      failed += st && strcmp(st, "failed") == 0;
      if (sl + 16 < sizeof states)
        sl += (size_t)snprintf(states + sl, sizeof states - sl, "%u=%s;", no, st ? st : "?");
      json_array_append_new(qs, q);
    }
    char digest[65];
    sl_sha256_hex(states, sl, digest);
    snprintf(d->id, sizeof d->id, "%s/all/%.16s", d->sid, digest);
    d->event = "submission.complete";
    const char *acc = field(rep, "accepted_at_ms");
    body = json_pack("{s:s,s:s,s:s,s:I,s:{s:i,s:i,s:i},s:o}", "event", d->event, "delivery_id",
                     d->id, "submission_id", d->sid, "accepted_at_ms",
                     (json_int_t)(acc ? strtoll(acc, NULL, 10) : 0), "summary", "total", (int)n,
                     "done", done, "failed", failed, "questions", qs);
  }
  d->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  return d->body ? 0 : SL_ENOMEM;
}

/* ---- the POST ---- */

static void on_answer(const sl_httpc_response *r, void *ud) {
  delivery *d = ud;
  notifier *N = d->N;
  char key[96];
  snprintf(key, sizeof key, "%s/%u", d->sid, d->qno);
  if (r->status >= 200 && r->status < 300) {
    sl_metric_add(N->m_delivered, 1);
    sl_log(SL_LOG_INFO, key, "delivered %s %s (%ld)", d->event, d->id, r->status);
    if (d->replay) { /* a replay that got through: the callback works again */
      const char *argv[] = {"HDEL", d->hkey, "notify_gone"};
      sl_aredis_argv(sl_job_redis(d->job), NULL, NULL, 3, argv, NULL);
    }
  } else if (r->status == 410) {
    sl_metric_add(N->m_gone, 1);
    const char *argv[] = {"HSET", d->hkey, "notify_gone", "1"};
    sl_aredis_argv(sl_job_redis(d->job), NULL, NULL, 4, argv, NULL);
    sl_result_set(d->res, SL_OUTCOME_FAIL, "callback_gone",
                  "the receiver answered 410 Gone to %s: this submission's deliveries stopped",
                  d->id);
  } else if (r->status >= 300 && r->status < 400) {
    sl_metric_add(N->m_failed, 1);
    sl_result_set(d->res, SL_OUTCOME_FAIL, "callback_redirect",
                  "the receiver answered %ld (a redirect; redirects are not followed)", r->status);
  } else if (r->status >= 400 && r->status < 500 && r->status != 408 && r->status != 429) {
    sl_metric_add(N->m_failed, 1);
    sl_result_set(d->res, SL_OUTCOME_FAIL, "callback_rejected", "the receiver answered %ld to %s",
                  r->status, d->id);
  } else {
    sl_metric_add(N->m_retried, 1);
    if (r->status == 0)
      sl_result_set(d->res, SL_OUTCOME_RETRY,
                    r->timed_out ? "callback_timeout" : "callback_unavailable",
                    "delivery of %s: %s", d->id, r->error);
    else
      sl_result_set(d->res, SL_OUTCOME_RETRY, "callback_unavailable",
                    "the receiver answered %ld to %s", r->status, d->id);
    d->res->retry_after_ms = r->retry_after_ms;
  }
  finish(d);
}

/* Appends ",<name>=<hex HMAC-SHA256(secret, "<t>.<msg>")>" to sig (when
 * secret is set). 0, or an error code. */
static int add_sig(char *sig, size_t cap, const char *name, const char *secret, int64_t t,
                   const char *msg, size_t len) {
  char mac[65];
  if (!secret || !secret[0]) return 0;
  if (sl__webhook_sign(secret, t, msg, len, mac) != 0) return SL_EINVAL;
  size_t used = strlen(sig);
  snprintf(sig + used, cap - used, ",%s=%s", name, mac);
  return 0;
}

/* X-Sluice-Signature: t=<unix s>, then
 *   v2=HMAC(secret, "<t>.<url>.<body>") — url as requested (sl__callback_target.url): a
 *       delivery signed for one receiver does not verify at another;
 *   v1=HMAC(secret, "<t>.<body>") — only with notify.secret, for receivers of before v2.
 * secret: the webhook secret of the API key that created the submission
 * (and its previous one while rotated), else notify.secret (and
 * notify.secret_previous). 0, or an error code. */
static int signature(const delivery *d, int64_t t, char *sig, size_t cap) {
  const notify_conf *nc = d->N->nc;
  const char *s1 = d->whsec[0] ? d->whsec : nc->secret;
  const char *s2 = d->whsec[0] ? d->whsec_prev : nc->secret_previous;
  size_t ul = strlen(d->target.url), bl = strlen(d->body);
  char *um = malloc(ul + 1 + bl + 1);
  if (!um) return SL_ENOMEM;
  memcpy(um, d->target.url, ul);
  um[ul] = '.';
  memcpy(um + ul + 1, d->body, bl + 1);
  snprintf(sig, cap, "X-Sluice-Signature: t=%lld", (long long)t);
  int rc = add_sig(sig, cap, "v2", s1, t, um, ul + 1 + bl);
  if (rc == 0) rc = add_sig(sig, cap, "v2", s2, t, um, ul + 1 + bl);
  if (rc == 0 && !d->whsec[0]) rc = add_sig(sig, cap, "v1", s1, t, d->body, bl);
  if (rc == 0 && !d->whsec[0]) rc = add_sig(sig, cap, "v1", s2, t, d->body, bl);
  free(um);
  return rc;
}

static void on_resolved(void *ud, int rc, const char *pin, const char *why) {
  delivery *d = ud;
  notifier *N = d->N;
  if (rc) {
    sl_metric_add(rc == SL_EINVAL ? N->m_failed : N->m_retried, 1);
    sl_result_set(d->res, rc == SL_EINVAL ? SL_OUTCOME_FAIL : SL_OUTCOME_RETRY,
                  rc == SL_EINVAL ? "callback_refused" : "callback_unresolvable", "%s", why);
    finish(d);
    return;
  }
  char sig[512], id[200], ev[64], kid[64] = "X-Sluice-Key: global";
  size_t len = strlen(d->body);
  if (signature(d, sl_now_ms() / 1000, sig, sizeof sig) != 0) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "internal", "signing failed");
    finish(d);
    return;
  }
  if (d->whsec[0]) snprintf(kid, sizeof kid, "X-Sluice-Key: %.12s", d->keyid);
  snprintf(id, sizeof id, "X-Sluice-Delivery: %s", d->id);
  snprintf(ev, sizeof ev, "X-Sluice-Event: %s", d->event);
  const char *headers[] = {"Content-Type: application/json", sig,       id,  ev, kid,
                           "User-Agent: sluice-notify",      "Expect:", NULL};
  /* the normalised URL: the host pinned is the host curl sees */
  sl_httpc_request q = {.method = "POST",
                        .url = d->target.url,
                        .headers = headers,
                        .body = d->body,
                        .body_len = len,
                        .timeout_ms = (long)N->nc->timeout_ms,
                        .max_response = 65536,
                        .resolve = pin,
                        .proxy = N->nc->proxy};
  if (sl_httpc_send(sl_job_http(d->job), &q, on_answer, d) != 0) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "internal", "the HTTP client refused the request");
    finish(d);
  }
}

/* ---- the view ---- */

static void resolve(delivery *d) {
  if (sl__callback_resolve(sl_job_loop(d->job), d->N->policy, &d->target, on_resolved, d) != 0) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "callback_unresolvable", "name resolution failed");
    finish(d);
  }
}

/* The webhook secrets of the API key that created the submission. A key
 * without one (revoked since, or issued before keys had secrets) leaves
 * notify.secret to sign. */
static void on_secrets(redisReply *rep, void *ud) {
  delivery *d = ud;
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "redis", "redis: %s",
                  rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "unavailable");
    finish(d);
    return;
  }
  const redisReply *a = rep->element[0], *b = rep->element[1];
  if (a->type == REDIS_REPLY_STRING && a->len > 0 && a->len < sizeof d->whsec) {
    snprintf(d->whsec, sizeof d->whsec, "%s", a->str);
    if (b->type == REDIS_REPLY_STRING && b->len < sizeof d->whsec_prev)
      snprintf(d->whsec_prev, sizeof d->whsec_prev, "%s", b->str);
  }
  resolve(d);
}

static void on_view(redisReply *rep, void *ud) {
  delivery *d = ud;
  notifier *N = d->N;
  char why[320];
  if (!rep || rep->type != REDIS_REPLY_ARRAY) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "redis", "redis: %s",
                  rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "unavailable");
    finish(d);
    return;
  }
  if (rep->elements == 0) { /* materialize has not recorded the submission (yet) */
    sl_result_set(d->res, SL_OUTCOME_RETRY, "view_missing",
                  "submission %s is not in the view (yet)", d->sid);
    finish(d);
    return;
  }
  const char *url = field(rep, "callback");
  if (!url) { /* no callback: nothing to do */
    finish(d);
    return;
  }
  char r[32];
  snprintf(r, sizeof r, "r%u", d->qno);
  if (!is_final(N, field(rep, r))) { /* materialize is behind this status */
    sl_result_set(d->res, SL_OUTCOME_RETRY, "view_behind",
                  "the view does not show this question final yet");
    finish(d);
    return;
  }
  if (field(rep, "notify_gone") && !d->replay) {
    sl_metric_add(N->m_skipped, 1);
    sl_log(SL_LOG_INFO, NULL, "%s/%u: not delivered: the receiver answered 410 Gone before", d->sid,
           d->qno);
    finish(d);
    return;
  }
  int rc = build(d, rep);
  if (rc == 1) { /* submission mode: another question is not final yet */
    finish(d);
    return;
  }
  if (rc) {
    sl_result_set(d->res, SL_OUTCOME_FAIL, "bad_view", "the view of the question is not JSON");
    finish(d);
    return;
  }
  d->url = strdup(url);
  if (!d->url) {
    sl_result_set(d->res, SL_OUTCOME_RETRY, "internal", "out of memory");
    finish(d);
    return;
  }
  /* the policy of today, not the one of the day it was created */
  if (sl__callback_check_url(N->policy, d->url, &d->target, why, sizeof why) != 0) {
    sl_metric_add(N->m_failed, 1);
    sl_result_set(d->res, SL_OUTCOME_FAIL, "callback_refused", "%s", why);
    finish(d);
    return;
  }
  const char *keyid = field(rep, "apikey");
  if (keyid && strlen(keyid) == 64) { /* signed with that key's secret */
    snprintf(d->keyid, sizeof d->keyid, "%s", keyid);
    char rkey[80];
    sl__apikey_rkey_of(d->keyid, rkey);
    const char *argv[] = {"HMGET", rkey, "whsec", "whsec_prev"};
    if (sl_aredis_argv(sl_job_redis(d->job), on_secrets, d, 4, argv, NULL) != 0) {
      sl_result_set(d->res, SL_OUTCOME_RETRY, "redis", "redis: not connected");
      finish(d);
    }
    return;
  }
  resolve(d);
}

static void start(void *ud, sl_job *job) {
  notifier *N = ud;
  const rd_kafka_message_t *m = sl_job_message(job);
  sl_result *res = sl_job_result(job);
  Sluice__V1__QuestionStatus *st = sluice__v1__question_status__unpack(NULL, m->len, m->payload);
  int final = st && (st->state == SLUICE__V1__QUESTION_STATE__DONE ||
                     st->state == SLUICE__V1__QUESTION_STATE__FAILED);
  if (!st || !final || !sl__callback_enabled(N->policy)) {
    /* a malformed status is materialize's to dead-letter, not ours */
    if (st) sluice__v1__question_status__free_unpacked(st, NULL);
    sl_job_done(job);
    return;
  }
  delivery *d = calloc(1, sizeof *d);
  if (!d) {
    sluice__v1__question_status__free_unpacked(st, NULL);
    sl_result_set(res, SL_OUTCOME_RETRY, "internal", "out of memory");
    sl_job_done(job);
    return;
  }
  *d = (delivery){.N = N, .job = job, .res = res, .qno = st->question_no};
  snprintf(d->sid, sizeof d->sid, "%s", st->submission_id);
  sluice__v1__question_status__free_unpacked(st, NULL);
  rd_kafka_headers_t *h = NULL;
  const void *v;
  size_t vl;
  d->replay = rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
              rd_kafka_header_get_last(h, SL_HDR_REPLAY_ID, &v, &vl) == RD_KAFKA_RESP_ERR_NO_ERROR;
  sl__view_sub_key(d->hkey, sizeof d->hkey, d->sid);
  const char *argv[] = {"HGETALL", d->hkey};
  if (sl_aredis_argv(sl_job_redis(job), on_view, d, 2, argv, NULL) != 0) {
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "redis: not connected");
    finish(d);
  }
}

/* notify.proxy: an http(s) URL with a host and nothing else that curl
 * would take as credentials or a path. */
static int proxy_ok(const char *proxy) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL;
  int ok = u && curl_url_set(u, CURLUPART_URL, proxy, 0) == CURLUE_OK &&
           curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
           curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
           (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0);
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return ok;
}

extern const sl__stage_desc sl__notify_stage; /* its descriptor, at the end */

static int notify_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  notify_conf nc = {0};
  sl__callback_conf cbc = {0};
  sl_conf_bind own[] = {{notify_table, notify_table_len, &nc},
                        {sl__callback_table, sl__callback_table_len, &cbc}};
  sl_admin *admin = NULL;
  int rc =
      sl__stage_start(&sl__notify_stage, sl__notify_stage.name, argc, argv, &cc, own, 2, &admin);
  if (rc) return rc;
  notifier N = {.cc = &cc, .nc = &nc};
  char err[512] = "";
  rc = sl__callback_policy_new(&N.policy, &cbc, err, sizeof err);
  if (rc == 0 && strcmp(nc.mode, "question") != 0 && strcmp(nc.mode, "submission") != 0) {
    snprintf(err, sizeof err, "notify.mode must be question or submission, not \"%.64s\"", nc.mode);
    rc = SL_ECONFIG;
  }
  if (rc == 0 && sl__callback_enabled(N.policy) && !nc.secret[0]) {
    snprintf(err, sizeof err, "notify.secret must be set when callback.allowed_hosts is");
    rc = SL_ECONFIG;
  }
  if (rc == 0 && nc.proxy[0] && !proxy_ok(nc.proxy)) {
    snprintf(err, sizeof err,
             "notify.proxy must be an http:// or https:// URL of a proxy, not \"%.64s\"", nc.proxy);
    rc = SL_ECONFIG;
  }
  if (rc == 0 && nc.timeout_ms <= 0) {
    snprintf(err, sizeof err, "notify.timeout_ms must be > 0");
    rc = SL_ECONFIG;
  }
  if (rc == 0) {
    N.whole = strcmp(nc.mode, "submission") == 0;
    N.rank_done = sl_pipeline_progress_rank(cc.pipeline, "done");
    N.rank_failed = sl_pipeline_progress_rank(cc.pipeline, "failed");
    const char *help = "Webhook deliveries by outcome";
    N.m_delivered =
        sl_metrics_counter("sluice_notify_deliveries_total", "outcome=\"delivered\"", help);
    N.m_retried = sl_metrics_counter("sluice_notify_deliveries_total", "outcome=\"retried\"", help);
    N.m_failed = sl_metrics_counter("sluice_notify_deliveries_total", "outcome=\"failed\"", help);
    N.m_gone = sl_metrics_counter("sluice_notify_deliveries_total", "outcome=\"gone\"", help);
    N.m_skipped = sl_metrics_counter("sluice_notify_deliveries_total", "outcome=\"skipped\"", help);
    if (!sl__callback_enabled(N.policy))
      sl_log(SL_LOG_INFO, NULL, "callbacks are off (callback.allowed_hosts is empty)");
    const char *topics[] = {cc.topic_results};
    sl_stage_opts o = {.stage = "notify",
                       .common = &cc,
                       .topics = topics,
                       .ntopics = 1,
                       .start = start,
                       .ud = &N,
                       .admin = admin};
    rc = sl_stage_run(&o, &sl__stop);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "%s", err);
  }
  sl__callback_policy_free(N.policy);
  sl__stage_finish(&cc, own, 2, admin);
  return rc ? 1 : 0;
}

const sl__stage_desc sl__notify_stage = {
    .name = "notify",
    .summary = "POSTs signed results to the callback_url of submissions",
    .kind = {"notify", {SL__MSG_STATUS, NULL}, {NULL}, 0, 1, 0},
    .table = notify_table,
    .table_len = &notify_table_len,
    .admin = "127.0.0.1:9187",
    .main = notify_main};
