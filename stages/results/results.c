/* SPDX-License-Identifier: Apache-2.0 */
/*
 * results.c — `sluice results`: the API clients poll.
 *
 * GET /v1/submissions/{id} with "Authorization: Bearer <credential>" — the
 * submission's results token, or its owner's API key or JWT — returns every
 * question's state (the progress label of the pipeline stage it reached,
 * done or failed) with transcript, grade or failure reason, the list of
 * stages in order ("stages", from the pipeline description), and a
 * summary. It reads the hash materialize maintains (one HGETALL) and never
 * writes. A missing credential, or an API key/JWT that is not valid, is
 * 401; a wrong token, another user's submission and an unknown submission
 * are the same 404, so the API does not reveal which ids exist; except
 * while materialize rebuilds a lost view (its marker missing), when any id
 * not in Redis is 503 view_rebuilding with Retry-After. The token
 * check hashes sid, owner and token together (stages/auth/auth.h) and
 * compares in constant time.
 * Replies carry an ETag (sha256 of the body) and honour If-None-Match with
 * 304; Cache-Control: no-store. Retry-After and the body's "poll" object
 * carry the polling policy (poll_after_s), including when to stop.
 *
 * @locality single thread (libuv loop); Redis calls are synchronous on the
 * loop (sub-millisecond on the same host).
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "../auth/auth.h"

typedef struct {
  char *listen;
  int64_t max_connections;
  char *cors_origins;
} results_conf;

const sl_conf_entry sl__results_table[] = {
    {"results.listen", SL_CONF_STR, "127.0.0.1:8081", offsetof(results_conf, listen),
     "API listen address", 0},
    {"results.max_connections", SL_CONF_INT, "1024", offsetof(results_conf, max_connections),
     "open connections at once; more get 503 and are closed", 0},
    {"results.cors_origins", SL_CONF_STR, "", offsetof(results_conf, cors_origins),
     "browser origins allowed by CORS, comma-separated, or * (empty: CORS off)", 0},
};
const size_t sl__results_table_len = sizeof sl__results_table / sizeof sl__results_table[0];

typedef struct {
  sl_common_conf *cc;
  results_conf *rc;
  sl_redis *redis;
  sl_http_server *srv;
  uv_signal_t sigterm, sigint;
  sl_metric *m_ok, *m_304, *m_404, *m_401, *m_err;
  sl__auth *auth;
  json_t *stages; /* the pipeline's progress labels, then "done" (built once) */
} results;

static int valid_id(const char *s) {
  size_t n = strlen(s);
  if (n != 36) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int dash = (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return 1;
}

/* The client polling policy, by time since the submission was accepted:
 * every 2 s for the first 30 s, then 5 s (to 1 min), 10 s (to 2 min), 30 s;
 * after 10 minutes, or once every question is done or failed, stop (0). */
static int poll_after_s(int64_t age_s, int complete) {
  if (complete || age_s >= 600) return 0;
  if (age_s < 30) return 2;
  if (age_s < 60) return 5;
  if (age_s < 120) return 10;
  return 30;
}

static const char *field(redisReply *rep, const char *name) {
  for (size_t i = 0; i + 1 < rep->elements; i += 2)
    if (strcmp(rep->element[i]->str, name) == 0) return rep->element[i + 1]->str;
  return NULL;
}

static int unauthorized(results *R, sl_http_req *req, const char *code, const char *msg) {
  sl_metric_add(R->m_401, 1);
  return sl_http_respond_error(req, 401, code, msg, "WWW-Authenticate: Bearer realm=\"sluice\"\r\n");
}

/* The user an API key or a JWT names: 0 with user set, 401 answered (1),
 * or 503 answered (2). */
static int caller_user(results *R, sl_http_req *req, const char *cred, sl__cred_kind kind,
                       char user[SL__USER_MAX + 1]) {
  char why[160], rkey[80], err[256];
  if (kind == SL__CRED_JWT) {
    if (sl__auth_jwt(R->auth, cred, sl_now_ms() / 1000, user, why, sizeof why) == 0) return 0;
    unauthorized(R, req, "invalid_credentials", why);
    return 1;
  }
  if (sl__apikey_rkey(cred, rkey) != 0) {
    unauthorized(R, req, "invalid_credentials", "malformed API key");
    return 1;
  }
  const char *argv[] = {"HGET", rkey, "user"};
  redisReply *rep = sl_redis_argv(R->redis, 3, argv, NULL, err, sizeof err);
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    if (rep) freeReplyObject(rep);
    sl_metric_add(R->m_err, 1);
    sl_http_respond_error(req, 503, "unavailable", "credential store unavailable; retry later",
                          "Retry-After: 2\r\n");
    return 2;
  }
  int ok = rep->type == REDIS_REPLY_STRING && rep->len <= SL__USER_MAX;
  if (ok) snprintf(user, SL__USER_MAX + 1, "%s", rep->str);
  freeReplyObject(rep);
  if (ok && sl__user_valid(user)) return 0;
  unauthorized(R, req, "invalid_credentials", "unknown or revoked API key");
  return 1;
}

/* Readable by the submission's results token, or by its owner's API key or
 * JWT. Everything else — another user, another submission's token, an
 * unknown id — is the same 404. */
static void get_submission(results *R, sl_http_req *req, const char *sid) {
  static const char nf[] = "no submission with this id for these credentials";
  sl__cred_kind kind;
  const char *cred = sl__auth_bearer(req, &kind);
  if (!cred) {
    unauthorized(R, req, "unauthorized",
                 "send the results token (or the owner's API key or JWT) as "
                 "Authorization: Bearer <credential>");
    return;
  }
  char user[SL__USER_MAX + 1] = "";
  if ((kind == SL__CRED_JWT || kind == SL__CRED_APIKEY) &&
      caller_user(R, req, cred, kind, user) != 0)
    return;
  if (!valid_id(sid)) {
    sl_metric_add(R->m_404, 1);
    sl_http_respond_error(req, 404, "not_found", nf, NULL);
    return;
  }
  char hkey[96], err[256];
  snprintf(hkey, sizeof hkey, "sl:sub:%s", sid);
  const char *argv[] = {"HGETALL", hkey};
  redisReply *rep = sl_redis_argv(R->redis, 2, argv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_ARRAY) {
    sl_metric_add(R->m_err, 1);
    sl_log(SL_LOG_WARN, sid, "results lookup failed: %s", rep ? "unexpected reply" : err);
    if (rep) freeReplyObject(rep);
    sl_http_respond_error(req, 503, "unavailable", "results are unavailable; retry later",
                          "Retry-After: 2\r\n");
    return;
  }
  const char *tok = field(rep, "token"), *owner = field(rep, "user");
  int allowed = 0;
  if (owner && user[0]) {
    allowed = sl_secure_equal(owner, user);
  } else if (owner && tok && !user[0]) {
    char token_hash[65];
    allowed = sl__results_token_hash(sid, owner, cred, token_hash) == 0 &&
              sl_secure_equal(tok, token_hash);
  }
  if (!allowed && rep->elements == 0 && sl__view_marker(R->redis, err, sizeof err) == 0) {
    /* Redis lost the view and materialize is replaying the topics: the
     * submission may well exist, so no 404 (a client would give up); the
     * same answer for every id, so nothing is revealed */
    freeReplyObject(rep);
    sl_metric_add(R->m_err, 1);
    sl_http_respond_error(req, 503, "view_rebuilding",
                          "results are being rebuilt after a storage fault; retry shortly",
                          "Retry-After: 2\r\n");
    return;
  }
  if (!allowed) {
    freeReplyObject(rep);
    sl_metric_add(R->m_404, 1);
    sl_http_respond_error(req, 404, "not_found", nf, NULL);
    return;
  }
  long n = strtol(field(rep, "n") ? field(rep, "n") : "0", NULL, 10);
  json_t *qs = json_array();
  int done = 0, failed = 0;
  /* questions are numbered by the client; collect every q<no> field of a
   * declared question (one with a spec<no>): a status for a number the
   * submission never had (forged, misrouted) is not shown or counted */
  for (size_t i = 0; i + 1 < rep->elements; i += 2) {
    const char *f = rep->element[i]->str;
    if (f[0] != 'q') continue;
    char spec[32];
    snprintf(spec, sizeof spec, "spec%.20s", f + 1);
    if (!field(rep, spec)) continue;
    json_t *q = json_loads(rep->element[i + 1]->str, 0, NULL);
    if (!q) continue;
    const char *st = json_string_value(json_object_get(q, "state"));
    if (st && strcmp(st, "done") == 0) done++;
    if (st && strcmp(st, "failed") == 0) failed++;
    json_array_append_new(qs, q);
  }
  /* stable order by question number */
  size_t nq = json_array_size(qs);
  for (size_t a = 1; a < nq; a++)
    for (size_t b = a; b > 0; b--) {
      json_t *x = json_array_get(qs, b - 1), *y = json_array_get(qs, b);
      if (json_integer_value(json_object_get(x, "no")) <=
          json_integer_value(json_object_get(y, "no")))
        break;
      json_incref(x);
      json_array_set(qs, b - 1, y);
      json_array_set_new(qs, b, x);
    }
  const char *acc = field(rep, "accepted_at_ms");
  int64_t accepted = acc ? strtoll(acc, NULL, 10) : 0;
  int complete = done + failed == (int)n;
  int after = poll_after_s((sl_now_ms() - accepted) / 1000, complete);
  json_t *body = json_pack("{s:s,s:I,s:O,s:{s:i,s:i,s:i,s:b},s:{s:i,s:b},s:o}", "submission_id",
                           sid, "accepted_at_ms", (json_int_t)accepted, "stages", R->stages,
                           "summary", "total", (int)n, "done", done, "failed", failed,
                           "complete", complete, "poll", "retry_after_s", after, "stop",
                           after == 0, "questions", qs);
  freeReplyObject(rep);
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!text) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  char digest[65], etag[80], headers[256];
  sl_sha256_hex(text, strlen(text), digest);
  snprintf(etag, sizeof etag, "\"%.32s\"", digest);
  if (after > 0)
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\nRetry-After: %d\r\n",
             etag, after);
  else
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\n", etag);
  const char *inm = sl_http_req_header(req, "If-None-Match");
  if (inm && strcmp(inm, etag) == 0) {
    sl_metric_add(R->m_304, 1);
    sl_http_respond(req, 304, NULL, headers, NULL, 0);
  } else {
    sl_metric_add(R->m_ok, 1);
    sl_http_respond(req, 200, "application/json", headers, text, strlen(text));
  }
  free(text);
}

static void handle(sl_http_req *req, void *ud) {
  results *R = ud;
  const char *path = sl_http_req_path(req);
  static const char pre[] = "/v1/submissions/";
  if (strncmp(path, pre, sizeof pre - 1) == 0 && !strchr(path + sizeof pre - 1, '/')) {
    if (strcmp(sl_http_req_method(req), "GET") != 0) {
      sl_http_respond_error(req, 405, "method_not_allowed", "use GET", "Allow: GET\r\n");
      return;
    }
    get_submission(R, req, path + sizeof pre - 1);
    return;
  }
  sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
}

static void on_signal(uv_signal_t *h, int sig) {
  results *R = h->data;
  sl_log(SL_LOG_INFO, NULL, "signal %d: shutting down", sig);
  sl_http_server_free(R->srv);
  R->srv = NULL;
  uv_close((uv_handle_t *)&R->sigterm, NULL);
  uv_close((uv_handle_t *)&R->sigint, NULL);
}

int sl__results_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  results_conf rconf = {0};
  sl__auth_conf ac = {0};
  sl_conf_bind own[] = {{sl__results_table, sl__results_table_len, &rconf},
                        {sl__auth_table, sl__auth_table_len, &ac}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(argc, argv, "results", "HTTP API clients poll for results.", &cc,
                           own, 2, "127.0.0.1:9185", &admin);
  if (rc) return rc;
  results R = {.cc = &cc, .rc = &rconf, .stages = json_array()};
  for (size_t k = 0, np = sl_pipeline_nprogress(cc.pipeline); k < np; k++)
    json_array_append_new(R.stages, json_string(sl_pipeline_progress_at(cc.pipeline, k)));
  json_array_append_new(R.stages, json_string("done"));
  const char *lbl[] = {"status=\"200\"", "status=\"304\"", "status=\"404\"", "status=\"401\"",
                       "status=\"503\""};
  sl_metric **ms[] = {&R.m_ok, &R.m_304, &R.m_404, &R.m_401, &R.m_err};
  for (size_t i = 0; i < 5; i++)
    *ms[i] = sl_metrics_counter("sluice_results_requests_total", lbl[i],
                                "Results API requests by status");
  uv_loop_t loop;
  uv_loop_init(&loop);
  char aerr[256] = "";
  rc = sl__auth_new(&R.auth, &ac, aerr, sizeof aerr);
  if (rc == 0) rc = sl_redis_new(&R.redis, cc.redis_url);
  sl_http_limits lim = {
      .max_connections = rconf.max_connections > 0 ? (size_t)rconf.max_connections : 0};
  if (rc == 0) rc = sl_http_server_new(&R.srv, &loop, rconf.listen, &lim, handle, &R);
  if (rc == 0)
    rc = sl_http_server_set_cors(R.srv, rconf.cors_origins, "GET",
                                 "Authorization, If-None-Match", "ETag, Retry-After, WWW-Authenticate");
  if (rc == 0) {
    uv_signal_init(&loop, &R.sigterm);
    uv_signal_init(&loop, &R.sigint);
    R.sigterm.data = R.sigint.data = &R;
    uv_signal_start(&R.sigterm, on_signal, SIGTERM);
    uv_signal_start(&R.sigint, on_signal, SIGINT);
    sl_log(SL_LOG_INFO, NULL, "listening on http://%s", rconf.listen);
    sl_admin_set_ready(admin, 1);
  } else {
    char shown[600]; /* a password in the URL is never logged */
    sl_redis_redact(cc.redis_url, shown, sizeof shown);
    sl_log(SL_LOG_ERROR, NULL, "start-up failed (listen %s, redis %s): %s%s%s", rconf.listen,
           shown, sl_strerror(rc), aerr[0] ? ": " : "", aerr);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  sl_redis_free(R.redis);
  sl__auth_free(R.auth);
  json_decref(R.stages);
  sl__stage_finish(&cc, own, 2, admin);
  return rc ? 1 : 0;
}
