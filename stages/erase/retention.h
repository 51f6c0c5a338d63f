/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retention.h — how long each kind of a submission's data lives, and the
 * sweeper that erases it when that time is up (docs/privacy.md,
 * "Retention").
 *
 * Kinds: "audio" (the uploaded answers), "derived" (the objects a step
 * derived from them) and "results" (the submission itself: its data key,
 * so every sealed copy on every topic, its view, its feed entries, every
 * object). Each has a retention in seconds counted from the submission's
 * acceptance (erase.retention_<kind>_s, 0: kept), which a tenant may
 * override (erase.retention_tenants, JSON: {"<tenant>": {"audio_s": N,
 * "derived_s": N, "results_s": N}}).
 *
 * The index: when the erase stage reads a SubmissionCreated, it puts the
 * submission into one sorted set per kind whose retention is on, scored by
 * when it is due (sl__retention_index). The sets are a mirror of the
 * submissions topic (sl_mirror): after a Redis loss one replica rebuilds
 * them from the topic, so keep that topic at least as long as the longest
 * retention. An index built by a replay (the first start with a
 * retention on, or after a loss) covers every submission the topic still
 * holds; a retention changed later applies to submissions read after the
 * change.
 *
 * The sweeper (one thread per replica, one round at a time across them by
 * a lease): every erase.sweep_interval_s it takes up to erase.sweep_batch
 * due members of each set and writes an ErasureRequest for each to the
 * erasure requests topic (reason "retention", actor "retention"), which
 * the erase stage then carries out exactly as an owner's request; a member
 * leaves its set once Kafka acknowledged its request (a results erasure
 * takes the submission out of the audio and derived sets too).
 *
 * Keys share the tag {retain} (one slot in a Redis Cluster).
 *
 * @locality sl__retention_index: any thread, with its own Redis
 * connection; the sweeper and the mirror: their own threads.
 */
#ifndef SLUICE_ERASE_RETENTION_H
#define SLUICE_ERASE_RETENTION_H

#include <jansson.h>
#include <stdint.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_stage.h"

#define SL__RETAIN_KINDS 3 /* audio, derived, results */

typedef struct {
  int64_t seconds[SL__RETAIN_KINDS]; /* erase.retention_<kind>_s */
  char *tenants;                     /* erase.retention_tenants (JSON) */
  int64_t interval_s;                /* erase.sweep_interval_s */
  int64_t batch;                     /* erase.sweep_batch */
  json_t *overrides;                 /* tenants, parsed (sl__retention_check) */
} sl__retention_conf;

extern const sl_conf_entry sl__retention_table[];
extern const size_t sl__retention_table_len;

/* Checks the settings and parses the tenants' overrides. 0 or SL_ECONFIG
 * with err set. */
int sl__retention_check(sl__retention_conf *rc, char *err, size_t errlen);
/* 1 when any retention is on (a default or a tenant's): submissions are
 * indexed and swept. */
int sl__retention_on(const sl__retention_conf *rc);
/* Frees what sl__retention_check parsed. NULL-safe. */
void sl__retention_conf_release(sl__retention_conf *rc);

/* Indexes one SubmissionCreated (payload, len). 0; SL_EINVAL for a message
 * that is no submission (the caller dead-letters it); SL_EREDIS with err
 * set. */
int sl__retention_index(const sl__retention_conf *rc, sl_redis *r, const void *payload, size_t len,
                        char *err, size_t errlen);

typedef struct sl__retention sl__retention;

/* Starts the index's mirror and the sweeper (nothing when no retention is
 * on). The settings must outlive it. 0, or an error code with err set. */
int sl__retention_start(sl__retention **out, const sl__retention_conf *rc, const sl_common_conf *cc,
                        char *err, size_t errlen);
/* Stops both and frees. NULL-safe. */
void sl__retention_stop(sl__retention *rt);

#endif
