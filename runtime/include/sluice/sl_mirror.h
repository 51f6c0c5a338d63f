/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_mirror.h — a compacted Kafka topic mirrored into Redis, rebuilt after
 * Redis loses it: the topic is the source of truth, Redis the store that
 * answers lookups (presign's API keys, the submissions' data keys).
 *
 * Writers write the topic first (a record keyed by what it is about, a
 * deletion a tombstone), then Redis. A marker key says the store holds
 * every record of the topic. A Redis that lost its data (FLUSHALL, a
 * restart without persistence, a fresh Redis) has no marker: until the
 * store is rebuilt, its owner answers a miss as "unavailable", not "no
 * such record".
 *
 * A thread checks the marker every interval_ms. When it is missing, one
 * process (the lease lock_key, 30 s, renewed while it replays) reads the
 * topic from its beginning, group-less and committing nothing, handing
 * each record and tombstone to the owner's apply (which writes Redis),
 * until it has applied everything up to end offsets that did not move
 * between two queries; then one script sets the marker if the lease is
 * still its own (a Redis that lost data again meanwhile lost the lease
 * too: the rebuild starts over). Since writers write Kafka before Redis, a
 * deletion either is among what the rebuild replays or reaches Redis after
 * every write of the rebuild, so apply must not bring back what a writer
 * deleted after the record it applies (for example: a tombstone leaves a
 * sentinel that apply does not overwrite).
 *
 * @locality its own thread, Redis connection and Kafka consumer; apply
 * runs on that thread. Nothing is shared with the caller but the stop
 * flag.
 */
#ifndef SLUICE_SL_MIRROR_H
#define SLUICE_SL_MIRROR_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "sluice/sl_redis.h"

typedef struct sl_mirror sl_mirror;

/* Applies one record of the topic (m->payload NULL: a tombstone) to r.
 * Returns 0 (applied, or skipped with a warning: not a record of the
 * store's), or SL_EREDIS: Redis did not take it, the replay holds it and
 * tries again. */
typedef int (*sl_mirror_apply_fn)(void *ud, sl_redis *r, const rd_kafka_message_t *m);

/* Every string must outlive the mirror (literals, the pipeline's names). */
typedef struct {
  const char *name;       /* in log lines: "API-key store" */
  const char *topic;      /* the compacted topic */
  const char *lock_key;   /* the rebuild's lease */
  const char *marker_key; /* set when the store is complete */
  const char *client_id;  /* the consumer's client and group id (no group is joined) */
  const char *while_lost; /* what happens until it is rebuilt, for the log line */
  const char *m_rebuilds; /* counter names: rebuilds completed, */
  const char *m_replayed; /* records replayed by them */
  int64_t interval_ms;    /* > 0 */
  sl_mirror_apply_fn apply;
  void *ud;
} sl_mirror_opts;

/* Starts the watcher thread. Returns 0, SL_EINVAL or SL_ENOMEM. */
int sl_mirror_start(sl_mirror **out, const char *redis_url, const char *brokers,
                    const sl_mirror_opts *o);

/* Waits up to timeout_ms for the store to be seen complete (marked, or
 * rebuilt) once: a stage reports ready only then, so one starting on a
 * fresh or emptied Redis does not answer its first clients "unavailable".
 * 1 when it was, 0 after the timeout. */
int sl_mirror_wait(sl_mirror *mi, int64_t timeout_ms);

/* Stops the thread (a rebuild in progress is abandoned, its lease left to
 * lapse) and frees. NULL-safe. */
void sl_mirror_stop(sl_mirror *mi);

#endif
