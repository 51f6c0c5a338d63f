/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keycache.c — presign's API-key cache (see keycache.h for the rules that
 * keep a revoked key refused).
 *
 * A uthash table keyed by the record's Redis key, entries with the user and
 * an expiry on the loop's clock (uv_now), kept in expiry order so that
 * dropping the expired costs only them. One generation counter moves on
 * every revocation message and every edge of the subscription; an HGET's
 * answer is cached only when the counter has not moved since it was sent.
 */
#define _POSIX_C_SOURCE 200809L
#include "keycache.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

typedef struct entry {
  char rkey[80];
  char user[SL__USER_MAX + 1];
  uint64_t expires; /* uv_now ms */
  UT_hash_handle hh;
} entry;

struct sl__keycache {
  uv_loop_t *loop;
  sl_aredis *sub; /* subscribed to SL__APIKEY_REVOKED_CHANNEL */
  entry *map;
  size_t n, max;
  uint64_t ttl_ms;
  uint64_t gen; /* moves on every revocation and subscription edge */
  int up;       /* the subscription is up */
  int closing;
  sl_metric *m_hit, *m_miss, *m_revoked;
};

static void drop(sl__keycache *k, entry *e) {
  HASH_DEL(k->map, e);
  free(e);
  k->n--;
}

static void clear(sl__keycache *k) {
  entry *e, *t;
  HASH_ITER(hh, k->map, e, t) drop(k, e);
}

static void on_state(int up, void *ud) {
  sl__keycache *k = ud;
  k->up = up;
  k->gen++;
  clear(k);
  if (!k->closing)
    sl_log(up ? SL_LOG_INFO : SL_LOG_WARN, NULL,
           up ? "API-key cache on: revocations are pushed to it"
              : "API-key cache off until its subscription to revocations is back: every key is "
                "looked up in Redis");
}

static void on_revoked(const char *msg, size_t len, void *ud) {
  sl__keycache *k = ud;
  k->gen++;
  sl_metric_add(k->m_revoked, 1);
  entry *e = NULL;
  HASH_FIND(hh, k->map, msg, len, e);
  if (e) drop(k, e);
}

int sl__keycache_new(sl__keycache **out, uv_loop_t *loop, const char *redis_url, int64_t timeout_ms,
                     int64_t ttl_ms, size_t max) {
  if (!out || !loop || !redis_url || ttl_ms < 0) return SL_EINVAL;
  *out = NULL;
  if (ttl_ms == 0 || max == 0) return 0;
  sl__keycache *k = calloc(1, sizeof *k);
  if (!k) return SL_ENOMEM;
  k->loop = loop;
  k->ttl_ms = (uint64_t)ttl_ms;
  k->max = max;
  k->m_hit = sl_metrics_counter("sluice_apikey_cache_lookups_total", "result=\"hit\"",
                                "API-key lookups in presign's cache by result");
  k->m_miss = sl_metrics_counter("sluice_apikey_cache_lookups_total", "result=\"miss\"",
                                 "API-key lookups in presign's cache by result");
  k->m_revoked = sl_metrics_counter("sluice_apikey_revocations_total", NULL,
                                    "API-key revocations pushed to presign's cache");
  int rc = sl_aredis_new(&k->sub, loop, redis_url);
  if (rc == 0) rc = sl_aredis_set_timeout(k->sub, timeout_ms);
  if (rc == 0)
    rc = sl_aredis_subscribe(k->sub, SL__APIKEY_REVOKED_CHANNEL, on_revoked, on_state, k);
  if (rc) {
    sl_aredis_free(k->sub);
    free(k);
    return rc;
  }
  *out = k;
  return 0;
}

void sl__keycache_free(sl__keycache *k) {
  if (!k) return;
  k->closing = 1;
  sl_aredis_free(k->sub); /* calls on_state(0) now, if it was up */
  clear(k);
  free(k);
}

int sl__keycache_get(sl__keycache *k, const char *rkey, char user[SL__USER_MAX + 1]) {
  if (!k) return 0;
  entry *e = NULL;
  if (k->up && sl_aredis_settled(k->sub)) {
    HASH_FIND_STR(k->map, rkey, e);
    if (e && e->expires <= uv_now(k->loop)) {
      drop(k, e);
      e = NULL;
    }
  }
  sl_metric_add(e ? k->m_hit : k->m_miss, 1);
  if (!e) return 0;
  memcpy(user, e->user, sizeof e->user);
  return 1;
}

uint64_t sl__keycache_mark(const sl__keycache *k) { return k ? k->gen : 0; }

void sl__keycache_put(sl__keycache *k, const char *rkey, const char *user, uint64_t mark) {
  if (!k || !k->up || mark != k->gen) return;
  size_t rl = strlen(rkey), ul = strlen(user);
  if (rl >= sizeof((entry *)0)->rkey || ul > SL__USER_MAX) return;
  uint64_t now = uv_now(k->loop);
  /* the table's order is expiry order (one lifetime for all, uv_now never
   * goes back, a refreshed entry moves to the end): the expired ones are
   * at its front, and the sweep stops at the first that is not */
  while (k->map && k->map->expires <= now) drop(k, k->map);
  entry *e = NULL;
  HASH_FIND(hh, k->map, rkey, rl, e);
  if (e) {
    HASH_DEL(k->map, e);
  } else {
    if (k->n >= k->max) return;
    e = calloc(1, sizeof *e);
    if (!e) return;
    memcpy(e->rkey, rkey, rl + 1);
    k->n++;
  }
  memcpy(e->user, user, ul + 1);
  e->expires = now + k->ttl_ms;
  HASH_ADD(hh, k->map, rkey, rl, e);
}
