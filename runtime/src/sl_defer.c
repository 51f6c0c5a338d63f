/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_defer.c — a deferred input's slot, tier and partition (see
 * sl_defer.h): a moving average of the rate a line is served at, the
 * schedule's tail, a popcount walk over the owned partitions.
 */
#include "sluice/sl_defer.h"
#include "sluice/sl_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SL_DEFER_EWMA 0.3       /* a new sample's weight in the rate */
#define SL_DEFER_FAST 0.9       /* slots a tenth early: back early goes round, late starves */
#define SL_DEFER_TICK_MAX 10000 /* ms: a longer tick (a stopped loop) measures nothing */

double sl_defer_interval_ms(const sl_defer_sched *s, double estimate_ms) {
  if (s->rate > 0) return SL_DEFER_FAST * 1000 / s->rate;
  return estimate_ms > 0 ? estimate_ms : 1;
}

int64_t sl_defer_slot(sl_defer_sched *s, int64_t now_ms, int64_t waiting, double gap_ms) {
  if (!(gap_ms > 0)) gap_ms = 1;
  int64_t after = now_ms + (int64_t)ceil((double)(waiting > 0 ? waiting : 0) * gap_ms);
  if (s->tail_ms < after) s->tail_ms = after;
  s->tail_ms += (int64_t)ceil(gap_ms);
  return s->tail_ms;
}

void sl_defer_tick(sl_defer_sched *s, int64_t waiting, int64_t dt_ms) {
  if (s->served > 0 && dt_ms > 0 && dt_ms <= SL_DEFER_TICK_MAX) {
    double r = (double)s->served * 1000 / (double)dt_ms;
    /* with inputs all along it is the rate; a line that ran dry was served
     * at least this fast, which counts only when it is faster than the
     * average (its share grew: slots spaced at the old rate would keep it
     * dry, and a dry line never measures) */
    if (s->had_inputs && !s->emptied)
      s->rate = s->rate > 0 ? (1 - SL_DEFER_EWMA) * s->rate + SL_DEFER_EWMA * r : r;
    else if (s->rate > 0 && r > s->rate)
      s->rate = (1 - SL_DEFER_EWMA) * s->rate + SL_DEFER_EWMA * r;
  }
  s->had_inputs = waiting > 0;
  s->emptied = 0;
  s->served = 0;
}

int sl_defer_tier(const sl_retry_policy *p, int64_t want_ms, int64_t hop_max_ms, unsigned owned) {
  int t = 0;
  while (t + 1 < p->ntiers && p->tier_ms[t + 1] <= want_ms && p->tier_ms[t + 1] <= hop_max_ms) t++;
  if (!owned || owned & (1u << t)) return t;
  for (int u = t - 1; u >= 0; u--) /* a shorter one of ours: it goes round again */
    if (owned & (1u << u)) return u;
  for (int u = t + 1; u < p->ntiers; u++) /* else the first longer one of ours */
    if (owned & (1u << u)) return u;
  return t;
}

int32_t sl_defer_partition(const uint64_t *owned, size_t words, uint32_t h) {
  uint32_t n = 0;
  for (size_t i = 0; i < words; i++) n += (uint32_t)__builtin_popcountll(owned[i]);
  if (!n) return -1;
  uint32_t k = h % n; /* the k-th bit set */
  for (size_t i = 0; i < words; i++) {
    uint32_t c = (uint32_t)__builtin_popcountll(owned[i]);
    if (k >= c) {
      k -= c;
      continue;
    }
    uint64_t x = owned[i];
    while (k--) x &= x - 1; /* drop the lowest bits set before it */
    return (int32_t)(i * 64 + (size_t)__builtin_ctzll(x));
  }
  return -1;
}

int sl_defer_hop_parse(const char *v, char *origin, size_t olen, int64_t *hop) {
  if (origin && olen) origin[0] = '\0';
  if (!v || !origin || olen < 2) return SL_EINVAL;
  const char *colon = strrchr(v, ':');
  size_t n = colon ? (size_t)(colon - v) : 0;
  if (!n || n >= olen || strspn(v, "0123456789.") != n) return SL_EINVAL;
  const char *d = colon + 1;
  size_t nd = strlen(d);
  if (!nd || nd > 18 || strspn(d, "0123456789") != nd) return SL_EINVAL;
  int64_t h = strtoll(d, NULL, 10);
  if (h <= 0) return SL_EINVAL;
  memcpy(origin, v, n);
  origin[n] = '\0';
  *hop = h;
  return 0;
}

int sl_defer_is_twin(const char *recorded, const char *origin, int64_t hop) {
  char o[SL_DEFER_ORIGIN_MAX];
  int64_t h = 0;
  if (!origin || !origin[0] || sl_defer_hop_parse(recorded, o, sizeof o, &h) != 0) return 0;
  return strcmp(o, origin) == 0 && h > hop;
}
