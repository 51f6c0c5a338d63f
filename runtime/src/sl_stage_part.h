/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_part.h — the partitions a stage takes messages from: each one's
 * offsets in flight (sl_offsets.h), whether it is being or was taken away,
 * and its parked retry copies (not yet due, in order). The loop parks and
 * unparks (it owns the partition's timer callback and its pausing, through
 * the group); the group marks revocations. Loop thread only.
 */
#ifndef SLUICE_SL_STAGE_PART_H
#define SLUICE_SL_STAGE_PART_H

#include "sl_stage_job.h"
#include "sluice/sl_offsets.h"
#include "sluice/sl_retry.h"

#include <uthash.h>

typedef struct {
  char topic[128];
  int32_t partition;
} part_id;

struct sl_part {
  part_id id;
  UT_hash_handle hh;
  sl_offsets ring;   /* offsets in flight and the commit point */
  int revoked;       /* no longer ours: nothing of it is committed */
  int revoking;      /* being taken away: running work may still finish */
  int retry_tier;    /* index of the tier this topic is, or -1 for a main input */
  int group;         /* index of the consumer group its topic is consumed in */
  const char *gname; /* that group's id (the group's storage) */
  sl_queue parked;   /* retry copies not yet due, in order */
  int paused_for_park;
  uv_timer_t park_timer; /* data: the partition; started by the loop */
};

/* The partitions (this file's). */
typedef struct {
  part *table;
  uv_loop_t *uv;
  int ntiers;
  const char (*tier_topic)[160]; /* the retry tiers' topics (the loop's storage) */
  int ngroups;
  const char *gname[2]; /* the groups' ids: [0] inputs, [1] retry tiers */
} sl_parts;

void sl__parts_init(sl_parts *P, uv_loop_t *uv, const char (*tier_topic)[160], int ntiers,
                    const char *gname[2], int ngroups);
/* The partition (created with create, NULL without memory or not found). */
part *sl__part_get(sl_parts *P, const char *topic, int32_t partition, int create);
/* Drops every partition; their timers close (freed when the loop runs). */
void sl__parts_close(sl_parts *P);

/* The partition is ours again: a fresh ring (jobs of the old epoch no
 * longer count). */
void sl__part_reset(part *p);

/* j's partition was or is being taken away: it must not call the provider,
 * its message is redelivered to the partition's owner. */
int sl__job_stale(const job *j);

/* Parks j (a retry copy not yet due) behind those parked before. */
void sl__part_park(part *p, job *j);
/* The first parked job if it is due at now (ms), taken out; else NULL. */
job *sl__part_due(part *p, int64_t now);
/* When the first parked job is due (0: none parked). */
int64_t sl__part_next_due(const part *p);
/* Lets p's parked jobs go (RELEASED, uncalled: they come back) and stops
 * its timer. */
void sl__part_release_parked(part *p);

/* j's start count key (sl_idem_starts_key), or "" */
void sl__starts_key(const job *j, char *buf, size_t len);

/* The age (ms) of the oldest message taken and not finished, over every
 * partition still ours (inputs_only: main inputs only); 0: none. */
int64_t sl__parts_oldest(const sl_parts *P, int inputs_only, int64_t now);

#endif
