/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness.c — a stage for testing the stage runtime, driven by its input.
 *
 * `sluice-harness` runs the real runtime (sl_stage_run) as stage "harness"
 * (or $HARNESS_STAGE, so tests do not share topics and consumer groups):
 * it consumes <stage>.in, and for each message "calls the provider", which
 * here means: count the call in Redis (INCR harness:calls:<key>, RPUSH of
 * the call time to harness:times:<key>), sleep, and answer as the payload
 * asks. Payload JSON (all optional):
 *   {"transient": N}      the first N calls fail transiently
 *   {"permanent": true}   every call fails for good (unless healed)
 *   {"sleep_ms": M}       each call takes M ms
 *   {"retry_after_ms": R, "throttle": true}  transient failures say 429
 *   {"out_bytes": N}      the output is N bytes (JSON padded with spaces)
 *   {"cost": C}           each call costs C provider cost units
 *                         (sl_result.cost_units), whatever its outcome
 *   {"spin_us": U}        the call computes for U µs and succeeds: no
 *                         Redis, no sleep (a short processor the loop may
 *                         run inline, sl_inline.h); its output's calls is 0
 *   {"careless": true}    also adds an output to a topic name too long for
 *                         the outbox and ignores the error, as a careless
 *                         processor or plugin would
 * Redis switches the test flips while the stage runs:
 *   harness:outage        exists -> every call fails transiently (503)
 *   harness:heal:<key>    exists -> that key succeeds
 * Success produces {"key":…,"calls":n} to <stage>.out.
 *
 * With HARNESS_PROVIDER_URL set, the harness is an *async* processor
 * instead: each message is one POST to <url>/v1/chat/completions through
 * the runtime's HTTP client (curl multi on the loop), 200 -> done, 429 ->
 * throttled retry (Retry-After), 5xx/transport errors -> retry, other 4xx ->
 * failed for good. That is how provider plugins work.
 * Every setting of a real stage applies (--help, SLUICE_*).
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/sl_admin.h"
#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_log.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_stage.h"
#include "sluice/sl_tls.h"
#include "lib/stage.h" /* sl__dead_letter_status */

static volatile sig_atomic_t stop_flag;
static char out_topic[128] = "harness.out"; /* <stage>.out, set in main */
static void on_signal(int s) {
  (void)s;
  stop_flag = 1;
}

static long long cmd_int(sl_redis *r, int argc, const char **argv) {
  char err[256];
  redisReply *rep = sl_redis_argv(r, argc, argv, NULL, err, sizeof err);
  long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
  if (rep) freeReplyObject(rep);
  return v;
}

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  sl_tls *tls = ud;
  char err[256], key[128], k1[200], k2[200], k3[200], now[32];
  snprintf(key, sizeof key, "%.*s", (int)(m->key_len < 127 ? m->key_len : 127),
           m->key ? (const char *)m->key : "");
  json_t *j = json_loadb(m->payload, m->len, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "harness payload is not a JSON object");
    return;
  }
  json_int_t spin_us = json_integer_value(json_object_get(j, "spin_us"));
  if (spin_us > 0 && spin_us <= 1000000) { /* computes, then succeeds */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000LL + (t.tv_nsec - t0.tv_nsec) / 1000 < spin_us);
    char body[192];
    int n = snprintf(body, sizeof body, "{\"key\":\"%s\",\"calls\":0}", key);
    if (sl_outbox_add(out, out_topic, key, body, (size_t)n) != 0)
      sl_result_set(res, SL_OUTCOME_FAIL, "internal", "outbox full");
    json_decref(j);
    return;
  }
  sl_redis *r = sl_tls_get(tls, err, sizeof err);
  if (!r) {
    json_decref(j);
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", err);
    return;
  }
  /* the "provider call" */
  snprintf(k1, sizeof k1, "harness:calls:%s", key);
  snprintf(k2, sizeof k2, "harness:times:%s", key);
  snprintf(k3, sizeof k3, "harness:heal:%s", key);
  snprintf(now, sizeof now, "%lld", (long long)sl_now_ms());
  const char *incr[] = {"INCR", k1};
  const char *push[] = {"RPUSH", k2, now};
  const char *outage[] = {"EXISTS", "harness:outage"};
  const char *heal[] = {"EXISTS", k3};
  long long calls = cmd_int(r, 2, incr);
  cmd_int(r, 3, push);
  res->provider_called = 1;
  res->cost_units = json_number_value(json_object_get(j, "cost"));
  json_int_t sleep_ms = json_integer_value(json_object_get(j, "sleep_ms"));
  if (sleep_ms > 0) {
    struct timespec ts = {(time_t)(sleep_ms / 1000), (long)(sleep_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  int healed = cmd_int(r, 2, heal) == 1;
  if (cmd_int(r, 2, outage) == 1 && !healed) {
    sl_result_set(res, SL_OUTCOME_RETRY, "provider_unavailable", "HTTP 503 (outage)");
  } else if (!healed && calls <= json_integer_value(json_object_get(j, "transient"))) {
    json_int_t ra = json_integer_value(json_object_get(j, "retry_after_ms"));
    res->retry_after_ms = ra;
    res->provider_throttled = json_is_true(json_object_get(j, "throttle"));
    sl_result_set(res, SL_OUTCOME_RETRY,
                  res->provider_throttled ? "provider_throttled" : "provider_unavailable",
                  "HTTP %d on call %lld", res->provider_throttled ? 429 : 503, calls);
  } else if (!healed && json_is_true(json_object_get(j, "permanent"))) {
    sl_result_set(res, SL_OUTCOME_FAIL, "provider_rejected", "HTTP 400 on call %lld", calls);
  } else {
    char body[256];
    int n = snprintf(body, sizeof body, "{\"key\":\"%s\",\"calls\":%lld}", key, calls);
    json_int_t pad = json_integer_value(json_object_get(j, "out_bytes"));
    char *big = pad > n && pad <= (64 << 20) ? malloc((size_t)pad) : NULL;
    if (big) { /* an output of out_bytes bytes: the JSON, then spaces */
      memset(big, ' ', (size_t)pad);
      memcpy(big, body, (size_t)n);
    }
    if (sl_outbox_add(out, out_topic, key, big ? big : body, big ? (size_t)pad : (size_t)n) != 0)
      sl_result_set(res, SL_OUTCOME_FAIL, "internal", "outbox full");
    free(big);
    if (json_is_true(json_object_get(j, "careless"))) {
      char topic[300];
      memset(topic, 't', sizeof topic - 1);
      topic[sizeof topic - 1] = '\0';
      (void)sl_outbox_add(out, topic, key, body, (size_t)n); /* SL_ETOOBIG, ignored */
    }
  }
  json_decref(j);
}

/* ---- async mode ---- */

static char provider_url[512];

static void on_reply(const sl_httpc_response *r, void *ud) {
  sl_job *job = ud;
  sl_result *res = sl_job_result(job);
  const char *key = sl_job_key(job);
  res->provider_called = 1;
  if (r->status == 200) {
    char body[256];
    int n = snprintf(body, sizeof body, "{\"key\":\"%s\",\"calls\":1}", key);
    if (sl_outbox_add(sl_job_outbox(job), out_topic, key, body, (size_t)n) != 0)
      sl_result_set(res, SL_OUTCOME_FAIL, "internal", "outbox full");
  } else if (r->status == 429) {
    res->provider_throttled = 1;
    res->retry_after_ms = r->retry_after_ms;
    sl_result_set(res, SL_OUTCOME_RETRY, "provider_throttled", "HTTP 429");
  } else if (r->status == 0 || r->status >= 500 || r->status == 408) {
    if (r->status)
      sl_result_set(res, SL_OUTCOME_RETRY, "provider_unavailable", "HTTP %ld", r->status);
    else
      sl_result_set(res, SL_OUTCOME_RETRY, "provider_unavailable", "%s", r->error);
  } else {
    sl_result_set(res, SL_OUTCOME_FAIL, "provider_rejected", "HTTP %ld", r->status);
  }
  sl_job_done(job);
}

static void start(void *ud, sl_job *job) {
  (void)ud;
  static const char *hdrs[] = {"Content-Type: application/json", NULL};
  static const char body[] = "{\"model\":\"fake-grader\",\"messages\":[{\"role\":\"user\","
                             "\"content\":\"grade this\"}]}";
  char url[600];
  snprintf(url, sizeof url, "%s/v1/chat/completions", provider_url);
  sl_httpc_request q = {.method = "POST",
                        .url = url,
                        .headers = hdrs,
                        .body = body,
                        .body_len = sizeof body - 1,
                        .timeout_ms = 30000};
  if (sl_httpc_send(sl_job_http(job), &q, on_reply, job) != 0) {
    sl_result_set(sl_job_result(job), SL_OUTCOME_RETRY, "internal", "could not send");
    sl_job_done(job);
  }
}

/* the test environment carries variables for other tools */
static int accept_any(const char *env) {
  (void)env;
  return 1;
}

int main(int argc, char **argv) {
  sl_conf_set_known_env(accept_any);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  sl_common_conf cc = {0};
  sl_conf_bind b = {sl_common_conf_table, sl_common_conf_table_len, &cc};
  int rc = sl_cli_load(argc, argv, "harness", "Stage runtime test harness.", &b, 1);
  if (rc) return rc - 1000;
  sl_log_init("harness", cc.log_level);
  char serr[1024];
  if (sl_common_pipeline(&cc, NULL, serr, sizeof serr) != 0 ||
      sl_common_secure(&cc, 1, serr, sizeof serr) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s", serr);
    sl_common_release(&cc);
    sl_conf_release(&b, 1);
    return 2;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  sl_admin *admin = NULL;
  const char *listen = cc.admin_listen[0] ? cc.admin_listen : "127.0.0.1:9189";
  if ((rc = sl_admin_start(&admin, listen)) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "admin %s: %s", listen, sl_strerror(rc));
    sl_common_release(&cc);
    sl_conf_release(&b, 1);
    return 1;
  }
  sl_tls *tls = NULL;
  rc = sl_redis_tls_new(&tls, cc.redis_url);
  const char *stage =
      getenv("HARNESS_STAGE") && *getenv("HARNESS_STAGE") ? getenv("HARNESS_STAGE") : "harness";
  char in_topic[128];
  snprintf(in_topic, sizeof in_topic, "%s.in", stage);
  snprintf(out_topic, sizeof out_topic, "%s.out", stage);
  const char *topics[] = {in_topic};
  sl_stage_opts o = {.stage = stage,
                     .common = &cc,
                     .topics = topics,
                     .ntopics = 1,
                     .process = process,
                     .ud = tls,
                     .provider = "harness-provider",
                     .idempotent = 1,
                     .admin = admin,
                     .on_dead_letter = sl__dead_letter_status}; /* as Sluice's stages */
  const char *url = getenv("HARNESS_PROVIDER_URL");
  if (url && *url) {
    snprintf(provider_url, sizeof provider_url, "%s", url);
    o.process = NULL;
    o.start = start;
    sl_log(SL_LOG_INFO, NULL, "async mode: calling %s", provider_url);
  }
  if (rc == 0) rc = sl_stage_run(&o, &stop_flag);
  sl_tls_free(tls);
  sl_admin_stop(admin);
  sl_common_release(&cc);
  sl_conf_release(&b, 1);
  sl_log(SL_LOG_INFO, NULL, "stopped");
  curl_global_cleanup();
  return rc ? 1 : 0;
}
