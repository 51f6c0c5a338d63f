/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/erase.h — erasing one submission everywhere it is kept
 * (docs/privacy.md), the same way for an operator's request (`sluicectl
 * submission delete`) and for retention.
 *
 * In this order, each step safe to repeat (an erasure that stopped half
 * way is finished by running it again):
 *   1. its data key destroyed: a tombstone on the data-key topic, acknowledged
 *      by Kafka, then the sentinel SL_DKEY_ERASED in Redis (sl_dkey.h): every
 *      sealed copy of its transcript and grade, on every topic and in every
 *      dead letter, is unreadable from here, and stages drop its work;
 *   2. its objects: whatever storage lists under submissions/<sid>/ in the
 *      bucket and derived/submissions/<sid>/ in the derived bucket, deleted;
 *   3. its Redis keys: the view, its pending members, its change-feed
 *      entries, every other key that names it (idempotency, claims, hops,
 *      start counts) and presign's Idempotency-Key record that answers with
 *      its id;
 *   4. the audit record (ErasureAudit, never content) on the erasures topic,
 *      acknowledged.
 * In a Redis Cluster step 3 walks every primary: the sync client's SCAN
 * goes through them one after the other (sl_redis.h), and every other
 * command goes to the owner of its key's slot.
 *
 * Its state, for the owner to follow (GET /v1/submissions/{id}/erasure,
 * results.c): the hash sl__erasure_rkey(sid) — state "erasing" from the
 * request (results) or the first step, "erased" after the last, with
 * requested_at_ms, erased_at_ms, objects and the owner's user — kept
 * crypto.erased_ttl_s, as long as the key's sentinel. It names the
 * submission by digest only, so step 3 leaves it.
 *
 * A retention of one part (SL__ERASE_AUDIO, SL__ERASE_DERIVED) deletes
 * that part's objects and records it (reason "retention:audio",
 * "retention:derived"): the submission itself stays readable.
 *
 * Blocking. @locality the calling thread; e and its connections are the
 * caller's.
 */
#ifndef SLUICE_LIB_ERASE_H
#define SLUICE_LIB_ERASE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_dkey.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_s3.h"

/* Produces one message and waits until Kafka acknowledged it: 0, or an
 * error code with err set. val NULL: a tombstone. */
typedef int (*sl__erase_produce_fn)(void *ud, const char *topic, const char *key, const void *val,
                                    size_t len, char *err, size_t errlen);

typedef struct {
  sl_redis *redis;
  sl_s3_conn *s3;
  const sl_s3_target *bucket, *derived;
  const char *datakeys_topic, *audit_topic;
  sl__erase_produce_fn produce;
  void *produce_ud;
} sl__eraser;

/* What to erase: everything (0), or one retention part */
#define SL__ERASE_AUDIO 1u   /* the uploaded answers (s3.bucket) */
#define SL__ERASE_DERIVED 2u /* the derived objects (s3.derived_bucket) */

/* The erasure state record of sid: "sl:erasure:<tag><digest>" (the data
 * key's digest, sl_dkey_rkey). 0 or SL_EINVAL. */
#define SL__ERASURE_RKEY_MAX (SL_DKEY_RKEY_MAX + 8)
int sl__erasure_rkey(const char *sid, char out[SL__ERASURE_RKEY_MAX]);

/* Writes the state record: KEYS[1] the record; ARGV[1] its TTL in
 * seconds, ARGV[2] the state, then field, value pairs; "erasing" never
 * replaces "erased". Here and in results (an owner's DELETE). */
#define SL__ERASURE_RECORD_LUA                                                                     \
  "if ARGV[2] == 'erasing' and redis.call('HGET', KEYS[1], 'state') == 'erased' then\n"            \
  "  return 0\n"                                                                                   \
  "end\n"                                                                                          \
  "redis.call('HSET', KEYS[1], 'state', ARGV[2], unpack(ARGV, 3))\n"                               \
  "redis.call('EXPIRE', KEYS[1], ARGV[1])\n"                                                       \
  "return 1\n"

/* What one erasure did (for its audit record and its caller's report). */
typedef struct {
  int key_destroyed;
  unsigned objects, redis_keys, feed_entries;
  char audit_id[40];
} sl__erased;

/* Erases submission sid (parts 0), or the parts of it (SL__ERASE_*);
 * actor and reason ("request", "retention") go to the audit record. 0, or
 * an error code with err saying which step stopped (run it again). */
int sl__erase(const sl__eraser *e, const char *sid, unsigned parts, const char *actor,
              const char *reason, sl__erased *out, char *err, size_t errlen);

#endif
