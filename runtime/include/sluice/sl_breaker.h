/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_breaker.h — a circuit breaker for calls to an external provider (an STT
 * or LLM API).
 *
 * Pure logic: no I/O, no clock of its own. Every call takes now_ms, a
 * monotonic time in milliseconds (uv_now() on the loop), so the breaker is
 * deterministic and unit-testable. Use one breaker per provider per process.
 *
 * States:
 *   CLOSED     calls go out; each result is counted in a sliding window of
 *              window_ms kept as SL_BREAKER_BUCKETS buckets. When the window
 *              holds at least min_calls results and the share of failures is
 *              >= failure_ratio, the breaker opens.
 *   OPEN       calls are refused; once per probe_interval_ms one call (the
 *              probe) is let through and the state becomes HALF_OPEN.
 *   HALF_OPEN  the probe is out; further calls are refused. Its success
 *              closes the breaker (with an empty window); its failure opens
 *              it again for another probe interval. A probe whose result is
 *              never recorded (lost callback, cancelled request) does not
 *              wedge the breaker: one probe interval after it went out,
 *              allow() hands out a new probe.
 *
 * Only transient failures should be recorded as failures (timeouts, 5xx,
 * 429, connection errors); a 4xx caused by the request itself says nothing
 * about the provider's health and should be recorded as a success or not at
 * all.
 *
 * Results are not tied to calls: a result recorded while HALF_OPEN is taken
 * as the probe's, even if it belongs to a call that went out before the
 * breaker opened (a late failure just re-opens it; a late success closes it
 * one probe early). Results recorded while OPEN are ignored.
 *
 * Time that goes backwards is treated as standing still. A NULL breaker
 * (none configured) allows every call and ignores results.
 *
 * @locality not thread-safe: use a breaker from the loop thread only (or
 * guard it with your own lock).
 */
#ifndef SLUICE_SL_BREAKER_H
#define SLUICE_SL_BREAKER_H

#include <stdint.h>

/* The sliding window is kept as this many buckets of window_ms / N each, so
 * a result ages out between 0.9 and 1.0 window_ms after it was recorded. */
#define SL_BREAKER_BUCKETS 10

typedef enum {
  SL_BREAKER_CLOSED = 0,
  SL_BREAKER_OPEN = 1,
  SL_BREAKER_HALF_OPEN = 2
} sl_breaker_state;

/* A field left 0 takes its default. */
typedef struct {
  double failure_ratio;      /* open at >= this share of failures (0, 1]; default 0.5 */
  unsigned min_calls;        /* results in the window before it may open; default 20 */
  int64_t window_ms;         /* sliding window, >= SL_BREAKER_BUCKETS; default 10000 */
  int64_t probe_interval_ms; /* while open: at most one probe per interval; default 1000 */
} sl_breaker_opts;

typedef struct sl_breaker sl_breaker;

/* Creates a closed breaker. o may be NULL (all defaults); o is copied.
 * Returns 0, SL_EINVAL (out NULL, ratio outside (0, 1] or NaN, negative
 * times, window_ms < SL_BREAKER_BUCKETS) or SL_ENOMEM. The caller owns *out
 * and frees it with sl_breaker_free(). */
int sl_breaker_new(sl_breaker **out, const sl_breaker_opts *o);

/* NULL-safe. */
void sl_breaker_free(sl_breaker *b);

/* 1: a call may go out now (closed, or this call is the probe while open —
 * the state is then HALF_OPEN until its result is recorded); 0: not now.
 * *retry_in_ms (may be NULL) gets how long until the next probe slot (0 when
 * 1 is returned). */
int sl_breaker_allow(sl_breaker *b, int64_t now_ms, int64_t *retry_in_ms);

/* Records a call's result: success=1, failure=0 (transient failures only).
 * CLOSED: counted in the window, may open the breaker. HALF_OPEN: a success
 * closes it (window reset), a failure re-opens it (next probe one interval
 * from now). OPEN: ignored. */
void sl_breaker_record(sl_breaker *b, int64_t now_ms, int success);

sl_breaker_state sl_breaker_get_state(const sl_breaker *b);

/* "closed", "open", "half_open" — for logs and metric labels (static). */
const char *sl_breaker_state_name(sl_breaker_state s);

/* How many times the breaker went from CLOSED to OPEN since it was created
 * (re-opening after a failed probe is not counted): export it as a counter,
 * e.g. sluice_breaker_opened_total{provider="..."}. */
uint64_t sl_breaker_get_opened_total(const sl_breaker *b);

/* Results (successes + failures) in the window at now_ms; *failures (may be
 * NULL) gets the failures among them. Always 0 unless CLOSED. Does not change
 * the breaker. For tests, logs and metrics. */
unsigned sl_breaker_get_window_calls(const sl_breaker *b, int64_t now_ms, unsigned *failures);

#endif
