/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_defer.h — when and where an input deferred for its tenant comes back
 * (the gate's lines, runtime/src/sl_stage_fair.h, and the deferral's copy,
 * sl_stage_out.c).
 *
 * A tenant's line at a replica keeps a schedule: each deferred input gets
 * the next slot after the schedule's last one (or after what the line holds
 * now), one slot per call the tenant gets there. That interval is the rate
 * the line was served at while it had inputs waiting, measured once a
 * second (a moving average), a tenth on the fast side: a copy back early
 * goes round again, one back late would leave the line short. Before a
 * measure, the caller's estimate.
 *
 * The copy travels by the longest retry tier that neither overshoots its
 * slot nor a hop's cap (the first tier when all do), for the tier's whole
 * delay: every copy in a tier partition then waits as long as those before
 * it, so none waits behind a later one. It goes to a partition of that tier
 * the deferring replica owns, so that it comes back to the line whose
 * schedule gave the slot (by a tier of which the replica owns a partition,
 * when it owns none of that one: the retry group's cooperative assignment
 * balances partitions over all tiers, not per tier).
 *
 * Pure: no clock, no Kafka (callers pass times). @locality any thread; a
 * schedule belongs to its caller.
 */
#ifndef SLUICE_SL_DEFER_H
#define SLUICE_SL_DEFER_H

#include "sluice/sl_retry.h"

#include <stddef.h>
#include <stdint.h>

#define SL_DEFER_ORIGIN_MAX 48       /* "<partition>.<offset>" and its NUL */
#define SL_DEFER_HOP_TTL_MS 86400000 /* an input's newest hop is kept a day */

/* One line's schedule. Zero-initialised: no slot given, no rate known. */
typedef struct {
  int64_t tail_ms; /* the last slot given (the caller's clock) */
  double rate;     /* calls/s the line was served at while it had inputs; 0: unknown */
  int64_t served;  /* inputs taken from the line since the last tick */
  int had_inputs;  /* the line had inputs at the last tick */
  int emptied;     /* it was empty at some point since */
} sl_defer_sched;

/* The interval between the line's calls (ms): from the measured rate, else
 * estimate_ms. */
double sl_defer_interval_ms(const sl_defer_sched *s, double estimate_ms);

/* The next slot (the caller's clock, ms) for an input deferred at now_ms
 * behind the `waiting` inputs the line holds, gap_ms apart
 * (sl_defer_interval_ms). */
int64_t sl_defer_slot(sl_defer_sched *s, int64_t now_ms, int64_t waiting, double gap_ms);

/* The line gave an input to a call. */
static inline void sl_defer_served(sl_defer_sched *s) { s->served++; }
/* The line is empty now. */
static inline void sl_defer_emptied(sl_defer_sched *s) { s->emptied = 1; }

/* Once a second or so: dt_ms since the last tick, `waiting` the line holds
 * now. A sample counts when the line had inputs all along and some were
 * served (none served: the limiter paused or the breaker open, which says
 * nothing of the line's share), or, from a line that ran dry, when it is
 * above the average (the line's share grew); dt_ms <= 0 or over 10 s
 * counts none. */
void sl_defer_tick(sl_defer_sched *s, int64_t waiting, int64_t dt_ms);

/* The tier a copy due in want_ms goes by: the longest whose delay is at
 * most want_ms and at most hop_max_ms (0 when none is), among the tiers
 * set in `owned` (bit t: the replica owns a partition of tier t): the
 * longest owned one under it, else the shortest owned one over it.
 * owned 0: any tier. */
int sl_defer_tier(const sl_retry_policy *p, int64_t want_ms, int64_t hop_max_ms, unsigned owned);

/* One of the partitions set in the bitmap `owned` (bit i of word i / 64
 * is partition i; `words` words): the (h mod their count)-th. -1 when none
 * is set. */
int32_t sl_defer_partition(const uint64_t *owned, size_t words, uint32_t h);

/* A deferred copy's SL_HDR_DEFER_HOP value "<origin>:<hop>" (origin of
 * digits and dots, at most olen - 1 of them; hop > 0) into origin and *hop.
 * 0, or SL_EINVAL (nothing written to *hop; origin ""). */
int sl_defer_hop_parse(const char *v, char *origin, size_t olen, int64_t *hop);

/* 1 when the newest deferral recorded for an input (`recorded`, as
 * sl_defer_hop_parse reads it) is of the same origin and a later hop than
 * (origin, hop): that copy is a twin read again and may go; 0 otherwise
 * (another origin, an unreadable record, the same or an older hop). */
int sl_defer_is_twin(const char *recorded, const char *origin, int64_t hop);

#endif
