/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_fair.h — a shared provider limit (sl_limiter.h) divided among tenants
 * by weight, across every replica of a stage.
 *
 * Each replica keeps its waiting calls in one line per tenant. When it asks
 * the limiter for a token it names the tenants it has waiting (at most
 * SL_FAIR_CANDIDATES, with their weights), and one Lua script decides, on
 * Redis, which of them gets the token, with the usage every replica has
 * recorded:
 *
 *   usage u(T)  calls granted to tenant T divided by its weight, kept in a
 *               sorted set per limit; a tenant seen again after it was gone
 *               starts at the floor (the least usage of the tenants still
 *               active), so idle time is not banked as credit;
 *   active     tenants named by some replica within SL_FAIR_ACTIVE_MS (a
 *               second sorted set, by the time last named); others are
 *               forgotten;
 *   pick        of the tenants named, the one of least usage;
 *   ahead       if even that one is more than SL_FAIR_SLACK above the
 *               floor, the token is left for another replica, whose waiting
 *               tenant is behind (reply: wait about one token's interval);
 *   take        the GCRA step of the plain script; a granted token adds
 *               cost / weight to the tenant's usage.
 *
 * Over time every tenant with calls waiting somewhere gets calls in
 * proportion to its weight, whichever replicas hold them: u(T) stays within
 * SL_FAIR_SLACK of the floor for all of them. A tenant alone gets the whole
 * limit. Weights come from the caller (`sluicectl tenant set`, read by the
 * gate); a weight that is not a number > 0 counts as 1.
 *
 * Keys: sl:fair:u:<rest> and sl:fair:s:<rest>, where <rest> is what follows
 * "sl:limit:" in the limit's key (braces included): one slot with it in a
 * Redis Cluster. Both expire SL_FAIR_ACTIVE_MS after the last take.
 *
 * ---- Script contract: sl_fair_take_lua ----------------------------------
 *   EVAL sl_fair_take_lua 3|4 <limit key> <usage key> <seen key> [<pause key>]
 *        <rate> <burst> <cost> <n> <tenant 1> <weight 1> ... <tenant n> <weight n>
 *   rate, burst, cost: as sl_limiter_lua's; n: 1..SL_FAIR_CANDIDATES; a
 *   tenant is any string ("" for work of no tenant).
 *   Reply: {0, i} go now for tenant i (1-based; the tokens are taken);
 *          {1, ms} the limit (or the pause) says wait ms, nothing taken;
 *          {2, ms} the tenants named are ahead of another active tenant:
 *                  try again in ms, nothing taken.
 *
 * Pure (no I/O): any thread.
 */
#ifndef SLUICE_SL_FAIR_H
#define SLUICE_SL_FAIR_H

#include <stddef.h>

#define SL_FAIR_CANDIDATES 8   /* tenants named in one take */
#define SL_FAIR_ACTIVE_MS 2000 /* a tenant not named for this long is gone */
#define SL_FAIR_SLACK 1.0      /* usage a tenant may run ahead of the floor */
#define SL_FAIR_KEY_MAX 112

extern const char sl_fair_take_lua[];

/* The usage and seen keys of the limit whose key is limit_key (it must start
 * with "sl:limit:"). 0, or SL_EINVAL / SL_ETOOBIG. */
int sl_fair_keys(const char *limit_key, char usage[SL_FAIR_KEY_MAX], char seen[SL_FAIR_KEY_MAX]);

#endif
