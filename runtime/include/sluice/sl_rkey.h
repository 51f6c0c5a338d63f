/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_rkey.h — which bucket of the Redis keyspace a submission's keys live
 * in, and the hash tag that places them.
 *
 * A Redis Cluster runs a script only when all its keys share a slot. Every
 * key that belongs to a submission therefore carries the hash tag of the
 * submission's bucket, and each key that used to be global and is written
 * together with a submission's keys (the view's sequence, applied offsets,
 * marker and change feed; the sweep's pending set) exists once per bucket,
 * with the same tag. A stage iterates the buckets where it used to read the
 * one global key.
 *
 * redis.buckets = 0 (the default, for one Redis) keeps today's key names:
 * no tag, one implicit bucket. N > 0 gives N buckets, each with a tag
 * chosen so that bucket b's slot lies in the b-th of N equal slot ranges:
 * a cluster whose primaries hold contiguous slot ranges (what
 * `redis-cli --cluster create` makes) then gets its share of buckets.
 * Changing N moves every submission: it is a view rebuild (docs/architecture.md).
 *
 * Process-wide, like sl_redis_security_set: sl_rkey_setup() once at
 * start-up (sl_common_secure), before any thread builds a key; read-only
 * and thread-safe after.
 */
#ifndef SLUICE_SL_RKEY_H
#define SLUICE_SL_RKEY_H

#include <stddef.h>

#define SL_RKEY_MAX_BUCKETS 1024
/* the longest tag, NUL included: "{1023-99999}" */
#define SL_RKEY_TAG_MAX 16

/* Sets the bucket count: 0 (no tags) .. SL_RKEY_MAX_BUCKETS. Returns 0 or
 * SL_EINVAL. */
int sl_rkey_setup(int buckets);

/* 1 when keys carry bucket tags (redis.buckets > 0). */
int sl_rkey_bucketed(void);

/* How many buckets to iterate: redis.buckets, or 1 when it is 0. */
int sl_rkey_buckets(void);

/* The bucket (0 .. sl_rkey_buckets()-1) of the submission id sid (len bytes). */
int sl_rkey_bucket(const char *sid, size_t len);

/* The bucket of a question key "<submission>/<question>" (or of a bare
 * submission id): the part before the first '/'. NUL-terminated. */
int sl_rkey_bucket_of_key(const char *key);

/* The tag of bucket b, braces included ("{3-17}"), or "" when unbucketed or
 * b is out of range. Static storage. */
const char *sl_rkey_tag(int bucket);

/* The tag of sid's bucket (sl_rkey_tag(sl_rkey_bucket(sid, len))). */
const char *sl_rkey_tag_of(const char *sid, size_t len);

#endif
