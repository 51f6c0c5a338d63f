/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota.h — a tenant's daily quotas at create (internal to presign).
 *
 * Before a submission is accepted, one script in the tenant's Redis slot
 * (sl_tenant.h) checks what `sluicectl tenant set` allows the tenant per
 * UTC day, answers (answers_per_day) and provider cost units
 * (cost_per_day, spent as the provider gate counts calls), and counts the
 * submission's answers when both allow it. A refused create counts
 * nothing; a create that fails after it was counted (Kafka refused it)
 * takes its count back (sl__quota_undo). The answers counter is kept for
 * every tenant, limited or not: it is the tenant's accepted answers of the
 * day. Without Redis the create goes on unchecked and uncounted
 * (SL__QUOTA_UNCHECKED): a create with a JWT and no rate limits needs no
 * Redis, and quotas do not take that away; a tenant may pass its quota by
 * what it creates while Redis does not answer.
 *
 * @locality loop thread only (sl_aredis).
 */
#ifndef SLUICE_PRESIGN_QUOTA_H
#define SLUICE_PRESIGN_QUOTA_H

#include <stdint.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_tenant.h"

/* What a check found. */
typedef enum {
  SL__QUOTA_UNASKED = 0, /* no check yet */
  SL__QUOTA_COUNTED,     /* allowed, and its answers counted */
  SL__QUOTA_UNCHECKED,   /* Redis did not answer: on, neither checked nor counted */
  SL__QUOTA_REFUSED,     /* past a quota: 429 */
} sl__quota_state;

typedef struct {
  sl__quota_state state;
  int64_t retry_after_s;           /* refused: when the quota refills */
  char message[320];               /* refused: why, for the client */
  char counted[SL_TENANT_KEY_MAX]; /* counted: the counter n was added to */
  long n;
} sl__quota_verdict;

typedef void (*sl__quota_cb)(void *ud, const sl__quota_verdict *v);

/* Builds the scripts. Once, before the loop runs. */
void sl__quota_init(void);

/* Checks tenant's quotas for a submission of n answers at now_ms and, when
 * they allow it, counts it; cb gets the verdict (once, on the loop). 0, or
 * SL_E* when nothing was sent (cb is not called). */
int sl__quota_check(sl_aredis *r, const char *tenant, long n, int64_t now_ms, sl__quota_cb cb,
                    void *ud);

/* Takes back what a verdict counted (its counter and n); no-op for one that
 * counted nothing. */
void sl__quota_undo(sl_aredis *r, const sl__quota_verdict *v);

#endif
