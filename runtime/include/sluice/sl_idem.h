/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_idem.h — the idempotency store's records: what a stage stored for an
 * input (its outputs) and under which Redis keys.
 *
 * A stage that finished an input stores its outputs (a StoredOutputs
 * protobuf) under sl:idem:<stage>:<key>:<digest32>, where digest32 is the
 * first 32 hex digits of the input's SHA-256: a redelivered or refetched
 * copy of the same input is answered from there, with no provider call. A
 * replica about to call the provider claims sl:claim:<stage>:<key>:<digest32>
 * first (sl_claim.h). Before its work begins, each delivery of an input is
 * counted under sl:starts:<group>:<topic>:<partition>:<offset>
 * (stage.max_starts, sl_claim_starts_lua). The Redis conversation itself is
 * the runtime's.
 *
 * Redis Cluster (redis.buckets > 0, sl_rkey.h): each key carries the bucket
 * tag of its input's submission (the message key up to its first '/') right
 * after "sl:<kind>:", e.g. sl:idem:{3-17}stt:<sid>/<q>:<digest32>, so that
 * an input's stored, claim and starts keys share a slot and one script may
 * touch them together. With redis.buckets = 0 the tag is "" and the names
 * are exactly the ones above.
 *
 * Pure. @locality any thread.
 */
#ifndef SLUICE_SL_IDEM_H
#define SLUICE_SL_IDEM_H

#include "sluice/sl_stage.h"

#include <stddef.h>
#include <stdint.h>

/* The store's and the claim's key for (stage, message key, input digest
 * in hex): "sl:<idem|claim>:<tag><stage>:<key>:<digest32>". tag is the
 * bucket tag of key's submission when the caller knows it (sl_rkey_tag:
 * "" unbucketed), or NULL to have it worked out from key here (a CRC16).
 * Returns 0 or SL_ETOOBIG (buf too small: nothing usable). */
int sl_idem_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                const char *digest);
int sl_idem_claim_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                      const char *digest);
/* The newest deferral of the input (stage, key, digest) whose copy Kafka
 * acknowledged, "sl:hop:<tag><stage>:<key>:<digest32>" (sl_stage_out.c,
 * provider.tenant_schedule): a copy of an older hop read again after a
 * rebalance is a twin of that one. Same returns. */
int sl_idem_hop_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                    const char *digest);

/* The start count's key of the input at (topic, partition, offset) read by
 * consumer group group, with the bucket tag of the input's submission (NULL
 * or "": none): "sl:starts:<tag><group>:<topic>:<partition>:<offset>".
 * Returns 0 or SL_ETOOBIG (buf too small: nothing usable). */
int sl_idem_starts_key(char *buf, size_t len, const char *tag, const char *group, const char *topic,
                       int32_t partition, int64_t offset);

/* Packs ob's outputs with their store time. *out is malloc'd (the caller
 * frees it). Returns 0 or SL_ENOMEM. */
int sl_idem_pack(const sl_outbox *ob, int64_t stored_at_ms, uint8_t **out, size_t *len);

/* Adds a stored record's outputs to ob (which should be empty). On a
 * malformed record, or one that does not fit the outbox, ob is cleared and
 * SL_EPARSE (or the add's error) is returned. */
int sl_idem_unpack(const void *v, size_t n, sl_outbox *ob);

#endif
