/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_offsets.h — one partition's offsets in flight, and what may be
 * committed (the part of librdkafka's consumer that Sluice does itself,
 * because it completes messages out of order).
 *
 * Messages of a partition are taken in offset order and finish in any
 * order. The tracker keeps the offsets taken and not finished in an
 * ascending ring; when the oldest ones are done the commit point moves
 * past them, never past an unfinished one. So a commit never passes a
 * message whose outputs are not yet written.
 *
 *   - An epoch numbers the tracker's lives: sl_offsets_reset() (the
 *     partition is assigned again) starts a new one and forgets everything,
 *     the commit point included; a job remembers the epoch it was taken in
 *     and its sl_offsets_done() of an older epoch counts for nothing.
 *   - A refetch (an offset at or below the last one taken in this epoch:
 *     the consumer went back, e.g. an offset reset or a seek) also starts a
 *     new epoch, but keeps the commit point: what finished before is still
 *     finished, and the commit point never moves backwards.
 *   - A failed asynchronous commit makes its offset pending again
 *     (sl_offsets_commit_failed), so the next round commits it again.
 *
 * Pure: no Kafka, no clock. @locality one thread (the stage's loop).
 */
#ifndef SLUICE_SL_OFFSETS_H
#define SLUICE_SL_OFFSETS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_offsets {
  int64_t *offs; /* ring of offsets taken and not yet committed past, ascending */
  int64_t *ts;   /* their Kafka timestamps (ms), for age gauges */
  uint8_t *done; /* finished, waiting for an older one */
  size_t cap, head, n;
  int64_t last;        /* highest offset taken in this epoch (-1: none) */
  int64_t commit_next; /* the next offset to read, to be committed (-1: nothing yet) */
  uint64_t epoch;
  int dirty; /* commit_next moved since it was last taken for a commit */
} sl_offsets;

/* Zeroes r (no allocation until the first take). */
void sl_offsets_init(sl_offsets *r);

/* Releases r's buffers; r may be re-used after sl_offsets_init(). NULL-safe. */
void sl_offsets_free(sl_offsets *r);

/* The partition is (again) ours: a new epoch, nothing in flight, nothing
 * to commit. */
void sl_offsets_reset(sl_offsets *r);

/* Tracks off (with its timestamp) as taken. Returns 0, 1 when off is a
 * refetch (a new epoch was started first: jobs taken before no longer
 * count), or SL_ENOMEM (nothing changed). r->epoch afterwards is the epoch
 * to hand to sl_offsets_done(). */
int sl_offsets_take(sl_offsets *r, int64_t off, int64_t ts);

/* Marks off, taken in epoch, finished; the commit point moves past every
 * finished head. An older epoch or an unknown offset changes nothing.
 * Returns 1 when the commit point moved. */
int sl_offsets_done(sl_offsets *r, uint64_t epoch, int64_t off);

/* The offset to commit now, or -1 when there is nothing new; clears dirty. */
int64_t sl_offsets_commit_take(sl_offsets *r);

/* A commit of off failed: commit the current point again next round
 * (unless the tracker was reset since: then it has nothing of that life). */
void sl_offsets_commit_failed(sl_offsets *r, int64_t off);

/* Offsets taken and not yet committed past (finished or not). */
size_t sl_offsets_pending(const sl_offsets *r);

/* Timestamp of the oldest offset in flight, or 0 when none. */
int64_t sl_offsets_oldest_ts(const sl_offsets *r);

#endif
