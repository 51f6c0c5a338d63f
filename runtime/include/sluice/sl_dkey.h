/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_dkey.h — each submission's data key, the key its personal fields are
 * sealed with (sl_pbseal.h), and its destruction, which erases them from
 * every copy at once (docs/privacy.md).
 *
 * presign makes a random key for each submission it creates and, before
 * it answers 201, writes it wrapped (sealed by the operator's
 * key-encryption key, crypto.kek, with aad "sluice-dk-v1\0<sid>") to the
 * pipeline's compacted data-key topic, keyed by the submission id, then to
 * Redis as sl:dk:<bucket tag><digest> (the tag of the submission's other
 * keys; the digest, the first 32 hex digits of the id's SHA-256, so that
 * the sentinel an erasure leaves does not name the submission). Kafka is the truth; Redis the store
 * stages look keys up in, rebuilt from the topic after a loss (sl_mirror; presign runs it). Neither
 * holds a key in the clear.
 *
 * Erasing writes a tombstone to the topic, then replaces the Redis value
 * with the sentinel SL_DKEY_ERASED for crypto.erased_ttl_s (as long as a
 * copy sealed with the key may still be read: the topics' retention). A
 * lookup therefore tells three answers apart: the key; erased (drop the
 * work as `erased`); or nothing, which is a Redis that lost the key (a
 * FLUSHALL, a replica promoted before it had it): the stage retries, and
 * the rebuild brings it back. A rebuild never turns a sentinel back into a
 * key (sl_dkey_apply).
 *
 * Off (crypto.kek empty): nothing is made, sealed or looked up; erasure
 * still deletes what Redis and storage hold, not the Kafka copies.
 *
 * Process-wide: sl_dkey_setup() once at start-up (sl_common_secure),
 * before threads; thread-safe after (the memo of recent submissions'
 * names and keys, sl_dkey.c, is shared by the process's threads under
 * striped locks).
 */
#ifndef SLUICE_SL_DKEY_H
#define SLUICE_SL_DKEY_H

#include <hiredis/hiredis.h>
#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_redis.h"
#include "sluice/sl_seal.h"

#define SL_DKEY_ERASED "erased"
#define SL_DKEY_WRAPPED_LEN (SL_SEAL_KEY_LEN + SL_SEAL_OVERHEAD)
#define SL_DKEY_RKEY_MAX 96 /* "sl:dk:" + tag + a submission id (at most 64) */
#define SL_DKEY_SID_MAX 64

/* Sets the key-encryption key from its hex form (64 digits; "" or NULL:
 * off) and how long an erased key's sentinel stays (seconds, > 0).
 * Returns 0 or SL_EINVAL. */
int sl_dkey_setup(const char *kek_hex, int64_t erased_ttl_s);

/* 1 when data keys are on (crypto.kek set). */
int sl_dkey_enabled(void);

/* How long an erasure's traces last (crypto.erased_ttl_s): the sentinel,
 * and the erasure's state record (stages/lib/erase.h). */
int64_t sl_dkey_erased_ttl_s(void);

/* The Redis key of sid's data key into out: "sl:dk:<tag><digest>". 0, or
 * SL_EINVAL (sid empty, longer than SL_DKEY_SID_MAX, or with a '/'). */
int sl_dkey_rkey(const char *sid, char out[SL_DKEY_RKEY_MAX]);

/* A new data key for sid, and its wrapped form (what the topic and Redis
 * hold). 0, or SL_ESTATE (off), SL_EINVAL, SL_ECRYPTO. */
int sl_dkey_new(const char *sid, uint8_t dk[SL_SEAL_KEY_LEN], uint8_t wrapped[SL_DKEY_WRAPPED_LEN]);

/* What a lookup of sid's Redis key answered (a GET's reply): 0 with dk
 * set; SL_EERASED (the sentinel); SL_ENOTFOUND (no value: Redis lost it,
 * try again later); SL_EREDIS (no reply, an error reply); SL_EAUTH (it
 * does not open with this KEK: another deployment's, or altered);
 * SL_ESTATE (off). */
int sl_dkey_from_reply(const redisReply *r, const char *sid, uint8_t dk[SL_SEAL_KEY_LEN]);
/* The same for the value v (n bytes) a script read; NULL or empty: not
 * there (SL_ENOTFOUND). */
int sl_dkey_open(const char *v, size_t n, const char *sid, uint8_t dk[SL_SEAL_KEY_LEN]);

/* What the process opened last for sid (sl_dkey_open, with this
 * KEK): its wrapped form and the key, without asking Redis. 0, or
 * SL_ENOTFOUND (not among the submissions the memo holds),
 * SL_EINVAL, SL_ESTATE (off). Only a memo: an erasure or a lost Redis
 * does not reach it, so the caller must have Redis confirm, in the
 * very step that writes, that the key there is still wrapped (materialize's
 * apply script compares them), and call sl_dkey_forget() when it is not. */
int sl_dkey_cached(const char *sid, uint8_t wrapped[SL_DKEY_WRAPPED_LEN],
                   uint8_t dk[SL_SEAL_KEY_LEN]);
/* Wipes the process's memo of sid's key (the next lookup opens
 * what Redis answers). */
void sl_dkey_forget(const char *sid);

/* sl_mirror's apply for the data-key topic (ud unused): a record SETs the
 * wrapped key unless the sentinel is there; a tombstone SETs the sentinel
 * with its TTL. A record whose key is not a submission id, or whose value
 * is not SL_DKEY_WRAPPED_LEN bytes, is skipped with a warning. */
int sl_dkey_apply(void *ud, sl_redis *r, const rd_kafka_message_t *m);

/* The data-key mirror's marker and lease (sl_mirror): with redis.buckets
 * they share the tag "{dk}" (the rebuild's end sets one and deletes the
 * other in one script). A lookup that finds nothing deletes the marker,
 * so that a key lost with one node of a cluster, whose marker lives on
 * another, is rebuilt too. */
const char *sl_dkey_marker(void);
const char *sl_dkey_lock(void);

/* Counts one input dropped because its submission was erased
 * (sluice_erased_dropped_total, registered once). Thread-safe. */
void sl_dkey_count_erased_drop(void);

/* The Redis command that erases sid's key: SET <rkey> erased EX <ttl>,
 * into argv (6 entries, pointing into buf, which must outlive them). 0 or
 * SL_EINVAL. */
int sl_dkey_erase_argv(const char *sid, char buf[SL_DKEY_RKEY_MAX + 32], const char *argv[6]);

#endif
