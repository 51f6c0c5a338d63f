/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keycache.h — presign's cache of API keys, with revocation pushed to it
 * (internal to presign).
 *
 * A create authenticated by an API key costs a Redis round trip (HGET
 * sl:apikey:<digest> user) unless the answer is cached here. A cached answer
 * is used only while it is provably current:
 *   - `sluicectl apikey revoke` deletes the record and, in the same script,
 *     PUBLISHes the digest on SL__APIKEY_REVOKED_CHANNEL; the cache holds a
 *     subscription to it (its own Redis connection) and drops the entry;
 *   - nothing is cached or served from the cache while that subscription is
 *     down, and everything is dropped when it goes down or comes up (a
 *     revocation published meanwhile is lost);
 *   - a lookup is served from the cache only when the subscription has no
 *     unread input (sl_aredis_settled): a revocation that reached this host
 *     before the request did is applied before the request is answered;
 *   - an answer is cached only if no revocation and no subscription change
 *     happened while its HGET was in flight (a generation taken when it was
 *     sent, sl__keycache_mark);
 *   - entries live presign.apikey_cache_ms at most: the bound for records
 *     deleted some other way (DEL by hand, FLUSHALL), which publish nothing.
 * Unknown keys are never cached. At most presign.apikey_cache_max entries;
 * a full cache drops its expired entries and, if still full, caches no more.
 *
 * @locality loop thread only.
 */
#ifndef SLUICE_PRESIGN_KEYCACHE_H
#define SLUICE_PRESIGN_KEYCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lib/auth.h"

typedef struct sl__keycache sl__keycache;

/* Starts the subscription on its own connection to redis_url (deadline
 * timeout_ms for its SUBSCRIBE). ttl_ms 0 turns the cache off (*out NULL,
 * every call below a miss / no-op). Returns 0, SL_EINVAL or SL_ENOMEM. */
int sl__keycache_new(sl__keycache **out, uv_loop_t *loop, const char *redis_url, int64_t timeout_ms,
                     int64_t ttl_ms, size_t max);

/* Closes the subscription; run the loop afterwards. NULL-safe. */
void sl__keycache_free(sl__keycache *k);

/* The user of the API key whose record is rkey (sl__apikey_rkey), when the
 * cache may answer for it now: 1 with user set, else 0. */
int sl__keycache_get(sl__keycache *k, const char *rkey, char user[SL__USER_MAX + 1]);

/* The generation to hand to sl__keycache_put, taken when the HGET is sent. */
uint64_t sl__keycache_mark(const sl__keycache *k);

/* Caches what the HGET sent at mark answered (a valid user), unless the
 * subscription changed or a revocation arrived since. */
void sl__keycache_put(sl__keycache *k, const char *rkey, const char *user, uint64_t mark);

#endif
