/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keystore.c — the API-key store's mirror of its topic (see keystore.h):
 * what a record and a tombstone of the API-key topic do to Redis; the
 * watcher and the rebuild are sl_mirror's.
 */
#define _POSIX_C_SOURCE 200809L
#include "keystore.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/auth.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_mirror.h"
#include "sluice/sl_redis.h"

#define RECORD_MAX 16384 /* a record larger than this is not an API key's */

/* An integer reply of a command, or -1 (error, no connection). */
static long long int_of(redisReply *r) {
  long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  freeReplyObject(r);
  return v;
}

/* Applies one record of the topic: 0, or SL_EREDIS (Redis did not take it:
 * the replay holds it and tries again). A record that is not an API key's
 * is skipped with a warning (0). */
static int apply(void *ud, sl_redis *r_, const rd_kafka_message_t *m) {
  const char *topic = ud;
  char hex[65], rkey[80], err[256];
  if (!m->key || m->key_len != 64) {
    sl_log(SL_LOG_WARN, NULL, "API-key store: %s [%d] at %lld has no key digest: skipped", topic,
           (int)m->partition, (long long)m->offset);
    return 0;
  }
  memcpy(hex, m->key, 64);
  hex[64] = '\0';
  for (int i = 0; i < 64; i++)
    if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'))) return 0;
  sl__apikey_rkey_of(hex, rkey);
  redisReply *r;
  if (!m->payload) { /* a revocation: gone, and every cache told */
    const char *del[] = {"DEL", rkey};
    r = sl_redis_argv(r_, 2, del, NULL, err, sizeof err);
    if (!r || r->type == REDIS_REPLY_ERROR) {
      freeReplyObject(r);
      return SL_EREDIS;
    }
    freeReplyObject(r);
    const char *pub[] = {"PUBLISH", SL__APIKEY_REVOKED_CHANNEL, rkey};
    return int_of(sl_redis_argv(r_, 3, pub, NULL, err, sizeof err)) < 0 ? SL_EREDIS : 0;
  }
  json_t *j = m->len <= RECORD_MAX ? json_loadb(m->payload, m->len, 0, NULL) : NULL;
  const char *user = json_string_value(json_object_get(j, "user"));
  const char *label = json_string_value(json_object_get(j, "label"));
  char created[24];
  snprintf(created, sizeof created, "%lld",
           (long long)json_integer_value(json_object_get(j, "created_ms")));
  if (!user || !sl__user_valid(user)) {
    sl_log(SL_LOG_WARN, NULL, "API-key store: %s [%d] at %lld is not an API-key record: skipped",
           topic, (int)m->partition, (long long)m->offset);
    json_decref(j);
    return 0;
  }
  /* the key's webhook signing secrets (notify), when it has them */
  const char *whsec = json_string_value(json_object_get(j, "webhook_secret"));
  const char *prev = json_string_value(json_object_get(j, "webhook_secret_previous"));
  const char *argv[] = {"HSET",       rkey,
                        "user",       user,
                        "label",      label ? label : "",
                        "created_ms", created,
                        "whsec",      whsec ? whsec : "",
                        "whsec_prev", prev ? prev : ""};
  r = sl_redis_argv(r_, 12, argv, NULL, err, sizeof err);
  int rc = r && r->type == REDIS_REPLY_INTEGER ? 0 : SL_EREDIS;
  freeReplyObject(r);
  json_decref(j);
  return rc;
}

int sl__keystore_start(sl_mirror **out, const char *redis_url, const char *brokers,
                       const char *topic, int64_t interval_ms) {
  sl_mirror_opts o = {.name = "API-key store",
                      .topic = topic,
                      .lock_key = SL__APIKEY_LOCK,
                      .marker_key = SL__APIKEY_MARKER,
                      .client_id = "sluice-presign-keystore",
                      .while_lost = "unknown keys get 503 auth_unavailable",
                      .m_rebuilds = "sluice_apikey_store_rebuilds_total",
                      .m_replayed = "sluice_apikey_store_replayed_total",
                      .interval_ms = interval_ms,
                      .apply = apply,
                      .ud = (void *)topic};
  return sl_mirror_start(out, redis_url, brokers, &o);
}
