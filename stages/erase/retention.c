/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retention.c — the retention index and its sweeper (see retention.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "retention.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/erase.h"
#include "lib/process.h"
#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_mirror.h"

#define TAG "{retain}"
#define MARKER "sl:" TAG ":epoch"
#define LOCK_REBUILD "sl:lock:" TAG ":rebuild"
#define LOCK_SWEEP "sl:lock:retention-sweep"

static const char *const kinds[SL__RETAIN_KINDS] = {"audio", "derived", "results"};
/* what an erasure of each kind erases (lib/erase.h): results is all */
static const unsigned parts_of[SL__RETAIN_KINDS] = {SL__ERASE_AUDIO, SL__ERASE_DERIVED, 0};

#define R(f) offsetof(sl__retention_conf, f)
const sl_conf_entry sl__retention_table[] = {
    {"erase.retention_audio_s", SL_CONF_INT, "0", R(seconds[0]),
     "how long a submission's uploaded answers are kept after its acceptance, in seconds "
     "(0: until the submission is erased)",
     0},
    {"erase.retention_derived_s", SL_CONF_INT, "0", R(seconds[1]),
     "how long the objects derived from its answers (the stored FLAC) are kept (0: until the "
     "submission is erased)",
     0},
    {"erase.retention_results_s", SL_CONF_INT, "0", R(seconds[2]),
     "how long a submission is kept at all: then it is erased as a DELETE erases it (data key, "
     "objects, view, feed; 0: kept)",
     0},
    {"erase.retention_tenants", SL_CONF_STR, "", R(tenants),
     "per-tenant retentions over the three above, as JSON: {\"<tenant>\": {\"audio_s\": N, "
     "\"derived_s\": N, \"results_s\": N}} (a kind not named keeps the default)",
     0},
    {"erase.sweep_interval_s", SL_CONF_INT, "60", R(interval_s),
     "how often the retention sweeper looks for submissions whose retention is up", 0},
    {"erase.sweep_batch", SL_CONF_INT, "500", R(batch),
     "erasures the sweeper requests per kind and round", 0},
};
const size_t sl__retention_table_len = sizeof sl__retention_table / sizeof sl__retention_table[0];

int sl__retention_check(sl__retention_conf *rc, char *err, size_t errlen) {
  for (int k = 0; k < SL__RETAIN_KINDS; k++)
    if (rc->seconds[k] < 0) {
      snprintf(err, errlen, "erase.retention_%s_s must be >= 0", kinds[k]);
      return SL_ECONFIG;
    }
  if (rc->interval_s <= 0 || rc->batch <= 0) {
    snprintf(err, errlen, "erase.sweep_interval_s and erase.sweep_batch must be > 0");
    return SL_ECONFIG;
  }
  if (!rc->tenants || !*rc->tenants) return 0;
  json_error_t je;
  rc->overrides = json_loads(rc->tenants, 0, &je);
  const char *tenant;
  json_t *o;
  if (!json_is_object(rc->overrides)) {
    snprintf(err, errlen, "erase.retention_tenants: not a JSON object (%s)", je.text);
    goto bad;
  }
  json_object_foreach(rc->overrides, tenant, o) {
    const char *name;
    json_t *v;
    if (!json_is_object(o)) {
      snprintf(err, errlen, "erase.retention_tenants: \"%s\" is not an object", tenant);
      goto bad;
    }
    json_object_foreach(o, name, v) {
      int known = 0;
      for (int k = 0; k < SL__RETAIN_KINDS; k++)
        known |= strncmp(name, kinds[k], strlen(kinds[k])) == 0 &&
                 strcmp(name + strlen(kinds[k]), "_s") == 0;
      if (!known || !json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, errlen,
                 "erase.retention_tenants: \"%s\".\"%s\" must be audio_s, derived_s or "
                 "results_s, a whole number >= 0",
                 tenant, name);
        goto bad;
      }
    }
  }
  return 0;
bad:
  json_decref(rc->overrides);
  rc->overrides = NULL;
  return SL_ECONFIG;
}

void sl__retention_conf_release(sl__retention_conf *rc) {
  if (!rc) return;
  json_decref(rc->overrides);
  rc->overrides = NULL;
}

/* tenant's retention of kind k, in seconds (0: kept) */
static int64_t retention_of(const sl__retention_conf *rc, const char *tenant, int k) {
  json_t *o = tenant && rc->overrides ? json_object_get(rc->overrides, tenant) : NULL;
  char name[16];
  snprintf(name, sizeof name, "%s_s", kinds[k]);
  json_t *v = o ? json_object_get(o, name) : NULL;
  return v ? (int64_t)json_integer_value(v) : rc->seconds[k];
}

int sl__retention_on(const sl__retention_conf *rc) {
  for (int k = 0; k < SL__RETAIN_KINDS; k++)
    if (rc->seconds[k] > 0) return 1;
  return rc->overrides && json_object_size(rc->overrides) > 0;
}

static void set_key(char *dst, size_t cap, int k) { snprintf(dst, cap, "sl:%s:%s", TAG, kinds[k]); }

int sl__retention_index(const sl__retention_conf *conf, sl_redis *r, const void *payload,
                        size_t len, char *err, size_t errlen) {
  Sluice__V1__SubmissionCreated *s =
      sluice__v1__submission_created__unpack(NULL, len, (const uint8_t *)payload);
  char rkey[SL__ERASURE_RKEY_MAX];
  if (!s || sl__erasure_rkey(s->submission_id, rkey) != 0 || s->accepted_at_ms <= 0) {
    if (s) sluice__v1__submission_created__free_unpacked(s, NULL);
    snprintf(err, errlen, "not a submission (SubmissionCreated with an id and a time)");
    return SL_EINVAL;
  }
  int rc = 0;
  for (int k = 0; k < SL__RETAIN_KINDS && rc == 0; k++) {
    int64_t sec = retention_of(conf, s->tenant, k);
    if (sec <= 0) continue;
    char key[64], due[24];
    set_key(key, sizeof key, k);
    snprintf(due, sizeof due, "%lld", (long long)(s->accepted_at_ms + sec * 1000));
    const char *argv[] = {"ZADD", key, due, s->submission_id};
    redisReply *rep = sl_redis_argv(r, 4, argv, NULL, err, errlen);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
      if (rep) snprintf(err, errlen, "redis: %s", rep->str);
      rc = SL_EREDIS;
    }
    if (rep) freeReplyObject(rep);
  }
  sluice__v1__submission_created__free_unpacked(s, NULL);
  return rc;
}

struct sl__retention {
  const sl__retention_conf *rc;
  const sl_common_conf *cc;
  sl_mirror *index; /* rebuilds the sets after a Redis loss */
  sl_redis *redis;  /* the sweeper's */
  rd_kafka_t *producer;
  char owner[SL__OWNER_MAX];
  pthread_t thread;
  int started;
  atomic_int stop;
  sl_metric *m_requested;
};

/* sl_mirror's apply: a submission indexed (a record of another kind is
 * skipped with a warning) */
static int mirror_apply(void *ud, sl_redis *r, const rd_kafka_message_t *m) {
  const sl__retention *rt = ud;
  char err[256] = "";
  if (!m->payload) return 0;
  int rc = sl__retention_index(rt->rc, r, m->payload, m->len, err, sizeof err);
  if (rc == SL_EINVAL) {
    sl_log(SL_LOG_WARN, NULL, "retention index: offset %lld skipped: %s", (long long)m->offset,
           err);
    return 0;
  }
  return rc;
}

/* The request for sid (kind k) written and acknowledged: 0, or the error. */
static rd_kafka_resp_err_t request(sl__retention *rt, const char *sid, int k) {
  Sluice__V1__ErasureRequest q = SLUICE__V1__ERASURE_REQUEST__INIT;
  q.submission_id = (char *)sid;
  q.actor = "retention";
  q.reason = "retention";
  q.requested_at_ms = sl_now_ms();
  q.parts = parts_of[k];
  size_t n = sluice__v1__erasure_request__get_packed_size(&q);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return RD_KAFKA_RESP_ERR__FAIL;
  sluice__v1__erasure_request__pack(&q, buf);
  rd_kafka_resp_err_t e =
      sl_kafka_send_wait(rt->producer, rt->cc->topic_erasure_requests, sid, strlen(sid), buf, n);
  free(buf);
  return e;
}

static redisReply *run_cmd(sl__retention *rt, int argc, const char **argv) {
  char err[256];
  redisReply *r = sl_redis_argv(rt->redis, argc, argv, NULL, err, sizeof err);
  if (!r) sl_log(SL_LOG_WARN, NULL, "retention sweep: redis: %s", err);
  if (r && r->type == REDIS_REPLY_ERROR) {
    sl_log(SL_LOG_WARN, NULL, "retention sweep: redis: %s", r->str);
    freeReplyObject(r);
    r = NULL;
  }
  return r;
}

/* One kind's due members: a request each, acknowledged, then out of the
 * set(s). 1 to end the round (Redis or Kafka unreachable). */
static int sweep_kind(sl__retention *rt, int k, int64_t now) {
  char key[64], max[24], lim[24];
  set_key(key, sizeof key, k);
  snprintf(max, sizeof max, "%lld", (long long)now);
  snprintf(lim, sizeof lim, "%lld", (long long)rt->rc->batch);
  const char *argv[] = {"ZRANGEBYSCORE", key, "-inf", max, "LIMIT", "0", lim};
  redisReply *due = run_cmd(rt, 7, argv);
  if (!due || due->type != REDIS_REPLY_ARRAY || due->elements == 0) {
    if (due) freeReplyObject(due);
    return !due;
  }
  int end = 0;
  for (size_t i = 0; !end && i < due->elements && !atomic_load(&rt->stop); i++) {
    const char *sid = due->element[i]->str;
    rd_kafka_resp_err_t e = request(rt, sid, k);
    if (e) {
      sl_log(SL_LOG_WARN, sid, "retention sweep: %s erasure not requested (%s): next round",
             kinds[k], rd_kafka_err2str(e));
      end = 1;
      continue;
    }
    sl_metric_add(rt->m_requested, 1);
    sl_log(SL_LOG_INFO, sid, "retention: its %s retention is up, erasure requested", kinds[k]);
    for (int j = 0; j < SL__RETAIN_KINDS; j++) {
      if (j != k && parts_of[k] != 0) continue; /* a results erasure takes every kind */
      char jkey[64];
      set_key(jkey, sizeof jkey, j);
      const char *zrem[] = {"ZREM", jkey, sid};
      redisReply *z = run_cmd(rt, 3, zrem);
      if (!z)
        end = 1;
      else
        freeReplyObject(z);
    }
  }
  freeReplyObject(due);
  return end;
}

static int lock_round(sl__retention *rt) {
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", (long long)rt->rc->interval_s * 1000);
  const char *argv[] = {"SET", LOCK_SWEEP, rt->owner, "NX", "PX", ttl};
  redisReply *rep = run_cmd(rt, 6, argv);
  int ok = rep && rep->type == REDIS_REPLY_STATUS;
  if (rep) freeReplyObject(rep);
  return ok;
}

static void *sweeper(void *arg) {
  sl__retention *rt = arg;
  while (!atomic_load(&rt->stop)) {
    if (lock_round(rt)) {
      int64_t now = sl_now_ms();
      /* results first: what it erases need not be asked for again */
      for (int k = SL__RETAIN_KINDS - 1; k >= 0 && !atomic_load(&rt->stop); k--)
        if (sweep_kind(rt, k, now)) break;
      if (sl_kafka_fatal(rt->producer, "retention sweep")) {
        sl_log(SL_LOG_ERROR, NULL, "retention sweep: the producer failed for good: stopping");
        sl__stop = 1;
      }
    }
    for (int64_t t = 0; t < rt->rc->interval_s * 1000 && !atomic_load(&rt->stop); t += 100) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

void sl__retention_stop(sl__retention *rt) {
  if (!rt) return;
  atomic_store(&rt->stop, 1);
  if (rt->started) pthread_join(rt->thread, NULL);
  sl_mirror_stop(rt->index);
  if (rt->producer) {
    rd_kafka_flush(rt->producer, 5000);
    rd_kafka_destroy(rt->producer);
  }
  sl_redis_free(rt->redis);
  free(rt);
}

int sl__retention_start(sl__retention **out, const sl__retention_conf *rc, const sl_common_conf *cc,
                        char *err, size_t errlen) {
  *out = NULL;
  if (!sl__retention_on(rc)) return 0;
  if (!cc->topic_submissions || !cc->topic_erasure_requests) {
    snprintf(err, errlen, "the pipeline names no submissions or erasure requests topic");
    return SL_ECONFIG;
  }
  sl__retention *rt = calloc(1, sizeof *rt);
  if (!rt) return SL_ENOMEM;
  rt->rc = rc, rt->cc = cc;
  sl__owner_id(rt->owner, sizeof rt->owner);
  rt->m_requested = sl_metrics_counter("sluice_retention_erasures_requested_total", NULL,
                                       "Erasures the retention sweeper requested");
  int rc2 = sl_redis_new(&rt->redis, cc->redis_url);
  if (rc2) snprintf(err, errlen, "redis.url: %s", sl_strerror(rc2)); /* never the URL: a password */
  if (rc2 == 0)
    rc2 = sl_kafka_producer_new(&rt->producer, cc->kafka_brokers, "sluice-retention", NULL, err,
                                errlen);
  sl_mirror_opts mo = {.name = "retention index",
                       .topic = cc->topic_submissions,
                       .lock_key = LOCK_REBUILD,
                       .marker_key = MARKER,
                       .client_id = "sluice-retention-index",
                       .while_lost = "submissions accepted before the loss are not swept",
                       .m_rebuilds = "sluice_retention_index_rebuilds_total",
                       .m_replayed = "sluice_retention_index_replayed_total",
                       .interval_ms = 1000,
                       .apply = mirror_apply,
                       .ud = rt};
  if (rc2 == 0 && (rc2 = sl_mirror_start(&rt->index, cc->redis_url, cc->kafka_brokers, &mo)))
    snprintf(err, errlen, "retention index: %s", sl_strerror(rc2));
  if (rc2 == 0 && pthread_create(&rt->thread, NULL, sweeper, rt) != 0) rc2 = SL_ENOMEM;
  if (rc2) {
    sl__retention_stop(rt);
    return rc2;
  }
  rt->started = 1;
  *out = rt;
  return 0;
}
