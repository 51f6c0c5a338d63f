/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_retry.h — the retry policy of a stage: tiers, budget, Retry-After.
 *
 * A transient failure sends the input to the retry topic of tier
 * min(attempts, last) — or a later tier when the provider asked for a
 * longer wait (Retry-After, cut to max_retry_after_ms) — until
 * budget_ms have passed since its first failure; then it is a dead letter
 * (budget_exhausted). A retry copy is due at its not-before time, but never
 * later than the delay its sender chose (at most its tier's delay or the
 * Retry-After cap) after it is read: the not-before header is the sending
 * replica's wall clock, and a clock that runs ahead must not hold a
 * partition.
 *
 * Pure: no Kafka, no clock (callers pass "now"). @locality any thread.
 */
#ifndef SLUICE_SL_RETRY_H
#define SLUICE_SL_RETRY_H

#include <stdint.h>

#define SL_RETRY_TIERS_MAX 8

/* Parses "5s,30s,2m,10m" (ms, s, m, h suffixes) into ascending delays.
 * Returns the number of tiers (1..SL_RETRY_TIERS_MAX) or SL_ECONFIG. */
int sl_retry_tiers_parse(const char *spec, int64_t delays_ms[SL_RETRY_TIERS_MAX],
                         char labels[SL_RETRY_TIERS_MAX][16]);

typedef struct {
  int ntiers;                          /* >= 1 */
  int64_t tier_ms[SL_RETRY_TIERS_MAX]; /* ascending */
  int64_t budget_ms;                   /* from the first failure */
  int64_t max_retry_after_ms;          /* a provider's Retry-After is cut to this */
} sl_retry_policy;

/* The provider's Retry-After (ms, <= 0: none) cut to the policy's cap. */
int64_t sl_retry_after_clamp(const sl_retry_policy *p, int64_t retry_after_ms);

/* Where a transient failure goes. attempts counts the failed attempts
 * before this one; first_failure_ms is the first failure's time (0: this
 * is the first). Returns the tier index and sets *not_before_ms, or -1 when
 * the budget is spent (a dead letter). */
int sl_retry_plan(const sl_retry_policy *p, unsigned attempts, int64_t first_failure_ms,
                  int64_t now_ms, int64_t retry_after_ms, int64_t *not_before_ms);

/* When a retry copy read from tier now is due: its not-before header, but
 * no later than now + the delay its sender chose (delay_ms > 0, itself at
 * most max(tier delay, Retry-After cap)), or now + that maximum when the
 * copy carries no delay. */
int64_t sl_retry_due(const sl_retry_policy *p, int tier, int64_t not_before_ms, int64_t delay_ms,
                     int64_t now_ms);

#endif
