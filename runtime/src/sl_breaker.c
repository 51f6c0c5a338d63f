/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_breaker.c — see sl_breaker.h.
 *
 * Design: the window is a ring of SL_BREAKER_BUCKETS buckets, each covering
 * bucket_ms = ceil(window_ms / N) of time and tagged with its epoch
 * (floor(now / bucket_ms)). A bucket is reused when its epoch is stale, so
 * nothing has to be swept: a bucket counts only while its epoch lies within
 * the last N epochs. Memory is fixed (no allocation after sl_breaker_new).
 *
 * OPEN and HALF_OPEN share one timestamp, next_probe_ms: allow() hands out a
 * probe when now >= next_probe_ms and moves next_probe_ms one interval on.
 * In OPEN that is the regular probe; in HALF_OPEN it replaces a probe whose
 * result never came back, which is what keeps a lost result from wedging the
 * breaker. A failed probe moves next_probe_ms to one interval after the
 * failure, so at most one probe goes out per interval either way.
 *
 * Counts are 32-bit and saturate; with the defaults a bucket would need 4e9
 * results in one second to get there.
 */
#include "sluice/sl_breaker.h"
#include "sluice/sl_err.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define EPOCH_EMPTY INT64_MIN

typedef struct {
  int64_t epoch; /* floor(time / bucket_ms) this bucket counts, or EPOCH_EMPTY */
  uint32_t ok;
  uint32_t fail;
} bucket;

struct sl_breaker {
  sl_breaker_opts o;
  int64_t bucket_ms;
  bucket w[SL_BREAKER_BUCKETS];
  sl_breaker_state state;
  int have_last;
  int64_t last_ms;       /* latest time seen (time never goes backwards here) */
  int64_t next_probe_ms; /* OPEN/HALF_OPEN: when allow() may hand out a probe */
  uint64_t opened_total;
};

static int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  return a + b;
}

static int64_t floor_div(int64_t a, int64_t d) {
  int64_t q = a / d;
  if (a % d < 0) q--;
  return q;
}

static int64_t clock_(sl_breaker *b, int64_t now_ms) {
  if (b->have_last && now_ms < b->last_ms) return b->last_ms;
  b->have_last = 1;
  b->last_ms = now_ms;
  return now_ms;
}

static void window_reset(sl_breaker *b) {
  for (int i = 0; i < SL_BREAKER_BUCKETS; i++) {
    b->w[i].epoch = EPOCH_EMPTY;
    b->w[i].ok = b->w[i].fail = 0;
  }
}

static void window_sum(const sl_breaker *b, int64_t now_ms, uint64_t *ok, uint64_t *fail) {
  int64_t cur = floor_div(now_ms, b->bucket_ms);
  *ok = *fail = 0;
  for (int i = 0; i < SL_BREAKER_BUCKETS; i++) {
    const bucket *k = &b->w[i];
    if (k->epoch == EPOCH_EMPTY || k->epoch > cur || k->epoch <= cur - SL_BREAKER_BUCKETS) continue;
    *ok += k->ok;
    *fail += k->fail;
  }
}

int sl_breaker_new(sl_breaker **out, const sl_breaker_opts *o) {
  if (!out) return SL_EINVAL;
  *out = NULL;
  sl_breaker_opts v = {0};
  if (o) v = *o;
  if (v.failure_ratio == 0) v.failure_ratio = 0.5;
  if (v.min_calls == 0) v.min_calls = 20;
  if (v.window_ms == 0) v.window_ms = 10000;
  if (v.probe_interval_ms == 0) v.probe_interval_ms = 1000;
  if (isnan(v.failure_ratio) || v.failure_ratio <= 0 || v.failure_ratio > 1 ||
      v.window_ms < SL_BREAKER_BUCKETS || v.probe_interval_ms < 0)
    return SL_EINVAL;
  sl_breaker *b = calloc(1, sizeof *b);
  if (!b) return SL_ENOMEM;
  b->o = v;
  b->bucket_ms = (v.window_ms + SL_BREAKER_BUCKETS - 1) / SL_BREAKER_BUCKETS;
  b->state = SL_BREAKER_CLOSED;
  window_reset(b);
  *out = b;
  return 0;
}

void sl_breaker_free(sl_breaker *b) { free(b); }

int sl_breaker_allow(sl_breaker *b, int64_t now_ms, int64_t *retry_in_ms) {
  if (retry_in_ms) *retry_in_ms = 0;
  if (!b) return 1; /* no breaker configured: never in the way */
  int64_t now = clock_(b, now_ms);
  if (b->state == SL_BREAKER_CLOSED) return 1;
  if (now >= b->next_probe_ms) {
    b->state = SL_BREAKER_HALF_OPEN;
    b->next_probe_ms = sat_add(now, b->o.probe_interval_ms);
    return 1;
  }
  if (retry_in_ms) *retry_in_ms = b->next_probe_ms - now;
  return 0;
}

static void open_(sl_breaker *b, int64_t now) {
  b->state = SL_BREAKER_OPEN;
  b->next_probe_ms = sat_add(now, b->o.probe_interval_ms);
}

void sl_breaker_record(sl_breaker *b, int64_t now_ms, int success) {
  if (!b) return;
  int64_t now = clock_(b, now_ms);
  switch (b->state) {
  case SL_BREAKER_OPEN:
    return;
  case SL_BREAKER_HALF_OPEN:
    if (success) {
      window_reset(b);
      b->state = SL_BREAKER_CLOSED;
    } else {
      open_(b, now);
    }
    return;
  case SL_BREAKER_CLOSED:
    break;
  }
  int64_t epoch = floor_div(now, b->bucket_ms);
  bucket *k = &b->w[(size_t)(epoch - floor_div(epoch, SL_BREAKER_BUCKETS) * SL_BREAKER_BUCKETS)];
  if (k->epoch != epoch) {
    k->epoch = epoch;
    k->ok = k->fail = 0;
  }
  uint32_t *c = success ? &k->ok : &k->fail;
  if (*c < UINT32_MAX) (*c)++;
  uint64_t ok, fail;
  window_sum(b, now, &ok, &fail);
  uint64_t total = ok + fail;
  if (total >= b->o.min_calls && (double)fail / (double)total >= b->o.failure_ratio) {
    b->opened_total++;
    window_reset(b);
    open_(b, now);
  }
}

sl_breaker_state sl_breaker_get_state(const sl_breaker *b) {
  return b ? b->state : SL_BREAKER_CLOSED;
}

const char *sl_breaker_state_name(sl_breaker_state s) {
  switch (s) {
  case SL_BREAKER_CLOSED:
    return "closed";
  case SL_BREAKER_OPEN:
    return "open";
  case SL_BREAKER_HALF_OPEN:
    return "half_open";
  }
  return "unknown";
}

uint64_t sl_breaker_get_opened_total(const sl_breaker *b) { return b ? b->opened_total : 0; }

unsigned sl_breaker_get_window_calls(const sl_breaker *b, int64_t now_ms, unsigned *failures) {
  if (failures) *failures = 0;
  if (!b || b->state != SL_BREAKER_CLOSED) return 0;
  if (b->have_last && now_ms < b->last_ms) now_ms = b->last_ms;
  uint64_t ok, fail;
  window_sum(b, now_ms, &ok, &fail);
  uint64_t total = ok + fail;
  if (failures) *failures = fail > UINT_MAX ? UINT_MAX : (unsigned)fail;
  return total > UINT_MAX ? UINT_MAX : (unsigned)total;
}
