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
 * The watcher and the rebuild are sl_mirror's (sl_mirror.h: one replica
 * at a time replays the topic under a lease, then sets the marker); this
 * file says what a record (HSET) and a tombstone (DEL, and PUBLISH on
 * SL__APIKEY_REVOKED_CHANNEL for the caches) do. Since sluicectl writes
 * Kafka before Redis, a revocation either is among what the rebuild
 * replays or deletes the key in Redis after every write of the rebuild: a
 * revoked key never comes back.
 *
 * @locality sl_mirror's thread.
 */
#ifndef SLUICE_PRESIGN_KEYSTORE_H
#define SLUICE_PRESIGN_KEYSTORE_H

#include <stdint.h>

#include "sluice/sl_mirror.h"

/* Starts the mirror of the API-key topic: wait for it with sl_mirror_wait
 * (presign reports ready only once the store was seen complete), stop it
 * with sl_mirror_stop. interval_ms > 0. Returns 0, SL_EINVAL or
 * SL_ENOMEM. */
int sl__keystore_start(sl_mirror **out, const char *redis_url, const char *brokers,
                       const char *topic, int64_t interval_ms);

#endif
