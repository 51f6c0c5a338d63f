/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_tenant.h — who a submission's work counts against, and where that
 * tenant's settings and daily counters live in Redis.
 *
 * A tenant is fixed when a submission is created (the API key's user, or a
 * JWT claim: presign's auth.jwt_tenant_claim) and travels with every message
 * of the submission in the SL_HDR_TENANT header, which the runtime copies
 * from a stage's input to all it writes (sl_stage.h). An operator sets a
 * tenant's weight, answers per day and provider cost units per day with
 * `sluicectl tenant set`; presign refuses a create past either (429
 * quota_exceeded), the provider gate counts what each call cost.
 *
 * Keys (all of one tenant in one Redis Cluster slot: the tag of the
 * tenant's bucket, sl_rkey.h):
 *   sl:tenant:<tag><tenant>                    hash: weight, answers_per_day,
 *                                              cost_per_day (absent: none)
 *   sl:tenant-answers:<tag><yyyymmdd>:<tenant> answers accepted that UTC day
 *   sl:tenant-cost:<tag><yyyymmdd>:<tenant>    provider cost units spent
 * The tenant comes last, after a fixed-width part, so that no tenant's key
 * is another's whatever its characters (a user id may hold ':'). A day's
 * counters expire SL_TENANT_DAY_TTL_S after they are first written.
 *
 * Pure functions: any thread.
 */
#ifndef SLUICE_SL_TENANT_H
#define SLUICE_SL_TENANT_H

#include <stddef.h>
#include <stdint.h>

#define SL_TENANT_MAX 128 /* bytes of a tenant id, without the NUL */
/* the header every message of a submission carries its tenant in */
#define SL_HDR_TENANT "sluice-tenant"
/* a day's counters live two days: the day, and the next one's Retry-After */
#define SL_TENANT_DAY_TTL_S (2 * 86400)
/* the longest key built here, NUL included */
#define SL_TENANT_KEY_MAX (SL_TENANT_MAX + 64)

/* 1 when t (len bytes) is 1..SL_TENANT_MAX bytes of printable ASCII without
 * spaces (what a user id may be: auth.h). */
int sl_tenant_valid(const char *t, size_t len);

/* The tenant's settings hash into out (SL_TENANT_KEY_MAX). 0, or SL_EINVAL
 * for a tenant that is not valid. */
int sl_tenant_conf_key(const char *tenant, char out[SL_TENANT_KEY_MAX]);

/* The tenant's counter `what` ("answers", "cost") of the UTC day holding
 * unix_ms into out. 0, or SL_EINVAL. */
int sl_tenant_day_key(const char *tenant, int64_t unix_ms, const char *what,
                      char out[SL_TENANT_KEY_MAX]);

/* Milliseconds from unix_ms to the next UTC midnight (1 .. 86400000): when
 * a daily quota refills. */
int64_t sl_tenant_day_left_ms(int64_t unix_ms);

#endif
