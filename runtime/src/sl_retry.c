/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_retry.c — the retry policy (see sl_retry.h): tier spec parsing, the
 * tier and not-before time of a transient failure, when a copy is due.
 */
#include "sluice/sl_retry.h"
#include "sluice/sl_err.h"

#include <stdlib.h>
#include <string.h>

int sl_retry_tiers_parse(const char *spec, int64_t delays[SL_RETRY_TIERS_MAX],
                         char labels[SL_RETRY_TIERS_MAX][16]) {
  if (!spec) return SL_ECONFIG;
  int n = 0;
  const char *p = spec;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    if (n == SL_RETRY_TIERS_MAX) return SL_ECONFIG;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v <= 0) return SL_ECONFIG;
    int64_t mul;
    size_t ul;
    if (strncmp(end, "ms", 2) == 0)
      mul = 1, ul = 2;
    else if (*end == 's')
      mul = 1000, ul = 1;
    else if (*end == 'm')
      mul = 60000, ul = 1;
    else if (*end == 'h')
      mul = 3600000, ul = 1;
    else
      return SL_ECONFIG;
    if (v > INT64_MAX / mul) return SL_ECONFIG; /* would overflow */
    const char *after = end + ul;
    if (*after && *after != ',' && *after != ' ') return SL_ECONFIG;
    size_t ll = (size_t)(after - p);
    if (ll >= 16) return SL_ECONFIG;
    memcpy(labels[n], p, ll);
    labels[n][ll] = '\0';
    delays[n] = (int64_t)v * mul;
    if (n > 0 && delays[n] <= delays[n - 1]) return SL_ECONFIG;
    n++;
    p = after;
  }
  return n > 0 ? n : SL_ECONFIG;
}

int64_t sl_retry_after_clamp(const sl_retry_policy *p, int64_t ra) {
  int64_t cap = p->max_retry_after_ms > 0 ? p->max_retry_after_ms : 0;
  return ra > cap ? cap : ra > 0 ? ra : 0;
}

int sl_retry_plan(const sl_retry_policy *p, unsigned attempts, int64_t first_failure_ms,
                  int64_t now_ms, int64_t retry_after_ms, int64_t *not_before_ms) {
  if (p->ntiers < 1) return -1;
  int64_t first = first_failure_ms ? first_failure_ms : now_ms;
  if (now_ms - first >= p->budget_ms) return -1;
  int t = attempts < (unsigned)p->ntiers ? (int)attempts : p->ntiers - 1;
  int64_t ra = sl_retry_after_clamp(p, retry_after_ms);
  while (ra > p->tier_ms[t] && t + 1 < p->ntiers) t++;
  *not_before_ms = now_ms + (p->tier_ms[t] > ra ? p->tier_ms[t] : ra);
  return t;
}

int64_t sl_retry_due(const sl_retry_policy *p, int tier, int64_t not_before_ms, int64_t delay_ms,
                     int64_t now_ms) {
  int64_t d = tier >= 0 && tier < p->ntiers ? p->tier_ms[tier] : 0;
  int64_t cap = p->max_retry_after_ms > 0 ? p->max_retry_after_ms : 0;
  int64_t most = d > cap ? d : cap;
  int64_t latest = now_ms + (delay_ms > 0 && delay_ms < most ? delay_ms : most);
  return not_before_ms > latest ? latest : not_before_ms;
}
