/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keystore.h — the API-key store in Redis rebuilt after a loss (internal to
 * presign).
 *
 * Redis holds the API keys only to look them up (sl:apikey:<sha256 hex>,
 * stages/lib/auth.h); their source of truth is the pipeline's compacted
 * API-key topic (sl_pipeline_apikeys), which `sluicectl apikey add` and
 * `revoke` write before they change Redis (a record keyed by the digest, a
 * revocation a tombstone). The marker SL__APIKEY_MARKER says the store
 * holds every record of that topic. A Redis that lost its data (FLUSHALL, a
 * restart without persistence, a fresh Redis) has no marker, and until the
 * store is rebuilt an unknown key is answered 503 auth_unavailable, never
 * 401: the key may well be valid.
 *
 * A thread of presign checks the marker every presign.apikey_watch_ms.
 * When it is missing, one replica (the lease SL__APIKEY_LOCK, 30 s,
 * renewed while it replays) reads the topic from its beginning, group-less
 * and committing nothing, applying each record (HSET) and tombstone (DEL,
 * and PUBLISH on SL__APIKEY_REVOKED_CHANNEL for the caches), until it has
 * applied everything up to end offsets that did not move between two
 * queries; then one script sets the marker if the lease is still its own
 * (a Redis that lost data again meanwhile lost the lease too: the rebuild
 * starts over). Since sluicectl writes Kafka before Redis, a revocation
 * either is among what the rebuild replays or deletes the key in Redis
 * after every write of the rebuild: a revoked key never comes back.
 *
 * @locality its own thread, Redis connection and Kafka consumer; nothing
 * is shared with the loop but the stop flag.
 */
#ifndef SLUICE_PRESIGN_KEYSTORE_H
#define SLUICE_PRESIGN_KEYSTORE_H

#include <stdint.h>

typedef struct sl__keystore sl__keystore;

/* Starts the watcher thread. topic: the API-key topic; interval_ms > 0.
 * Returns 0, SL_EINVAL or SL_ENOMEM. */
int sl__keystore_start(sl__keystore **out, const char *redis_url, const char *brokers,
                       const char *topic, int64_t interval_ms);

/* Waits up to timeout_ms for the store to be seen complete (marked, or
 * rebuilt) once: presign reports ready only then, so a presign starting on
 * a fresh or emptied Redis does not answer its first clients 503. 1 when
 * it was, 0 after the timeout. */
int sl__keystore_wait(sl__keystore *k, int64_t timeout_ms);

/* Stops the thread (a rebuild in progress is abandoned, its lease left to
 * lapse) and frees. NULL-safe. */
void sl__keystore_stop(sl__keystore *k);

#endif
