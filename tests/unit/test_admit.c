/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_admit.c — unit tests for the provider gate's decisions (sl_admit):
 * the breaker holds in order and looks for stored outputs before a job
 * waits; the limiter, the 429 pause; claims lost before a call; solo runs
 * (a suspect runs alone only at its last chance, collateral at full
 * concurrency, poison past max_starts); closing and revoked partitions win
 * at every step. Each case names the transition it pins.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_admit.h"

/* a provider stage, breaker closed, nothing held, looked up, no rate */
static sl_admit_in provider(void) {
  sl_admit_in in = {0};
  in.provider = 1;
  in.looked_up = 1;
  in.breaker_allows = 1;
  in.hold = 1;
  return in;
}

static void test_breaker_closed_passes(void **state) {
  (void)state;
  sl_admit_in in = provider();
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_PASS);
  in.provider = 0; /* no provider: no breaker at all */
  in.breaker_allows = 0;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_PASS);
}

static void test_breaker_open_holds_in_order(void **state) {
  (void)state;
  sl_admit_in in = provider();
  in.breaker_allows = 0;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_HOLD);
  /* the breaker would let one through, but others are held: behind them */
  in.breaker_allows = 1;
  in.held = 1;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_HOLD);
  /* without breaker.hold: a retry copy instead */
  in.hold = 0;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_RETRY);
  /* stopping: nothing new is held, it is let go */
  in.hold = 1;
  in.stopping = 1;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_RELEASE);
}

static void test_breaker_open_looks_up_first(void **state) {
  (void)state;
  sl_admit_in in = provider();
  in.breaker_allows = 0;
  in.looked_up = 0; /* stored outputs are answered, open or not */
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_LOOKUP);
}

static void test_closing_and_stale_win(void **state) {
  (void)state;
  sl_admit_in in = provider();
  in.breaker_allows = 0;
  in.stale = 1;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_RELEASE);
  in.closing = 1;
  assert_int_equal(sl_admit_breaker(&in), SL_ADMIT_DROP);
  sl_call_in c = {1, 1, 1, 1, 0, 3};
  assert_int_equal(sl_admit_call(&c), SL_CALL_DROP);
  c.closing = 0;
  assert_int_equal(sl_admit_call(&c), SL_CALL_RELEASE);
  sl_start_in s = {0, 1, 0, 5, 3, 0, 0};
  assert_int_equal(sl_admit_started(&s), SL_START_RELEASE); /* even past max_starts */
  s.closing = 1;
  assert_int_equal(sl_admit_started(&s), SL_START_DROP);
}

static void test_limits(void **state) {
  (void)state;
  sl_admit_in in = provider();
  in.rate = 1;
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_LIMITER);
  in.rate = 0; /* no rate: the pause decides, read once per SL_PAUSE_FRESH_MS */
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_PAUSE_ASK);
  in.pause_fresh = 1;
  in.pause_left_ms = 0;
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_CLAIM);
  in.pause_left_ms = 1500;
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_PAUSE_WAIT);
  in.looked_up = 0; /* about to wait: stored outputs first */
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_LOOKUP);
  in.provider = 0; /* no provider: nothing limits */
  assert_int_equal(sl_admit_limits(&in), SL_ADMIT_CLAIM);
}

static void test_call(void **state) {
  (void)state;
  sl_call_in c = {0, 0, 0, 0, 0, 3};
  assert_int_equal(sl_admit_call(&c), SL_CALL_COUNT); /* counted before it begins */
  c.counted = 1;
  assert_int_equal(sl_admit_call(&c), SL_CALL_GO);
  c.counted = 0;
  c.max_starts = 0; /* no count */
  assert_int_equal(sl_admit_call(&c), SL_CALL_GO);
  c.solo_busy = 1; /* behind a solo run, in order */
  assert_int_equal(sl_admit_call(&c), SL_CALL_SOLO_WAIT);
  c.claim_stale = 1; /* its claim lost while it waited: claim again first */
  assert_int_equal(sl_admit_call(&c), SL_CALL_RECLAIM);
}

static sl_start_in start_in(long long starts, int64_t max) {
  sl_start_in s = {0};
  s.starts = starts;
  s.max_starts = max;
  return s;
}

static void test_started_first_run(void **state) {
  (void)state;
  sl_start_in s = start_in(1, 3);
  assert_int_equal(sl_admit_started(&s), SL_START_GO);
  assert_false(sl_admit_suspect(1, 3));
  s.starts = 0; /* the count failed: runs uncounted */
  assert_int_equal(sl_admit_started(&s), SL_START_UNCOUNTED);
  s.starts = 1;
  s.solo = 1; /* a solo run is under way: wait, uncounted */
  assert_int_equal(sl_admit_started(&s), SL_START_SOLO_WAIT);
}

/* A crash's collateral (2nd start of 3) runs at full concurrency; only the
 * last chance (3rd of 3) runs alone; the 4th is poison. */
static void test_started_suspects(void **state) {
  (void)state;
  sl_start_in s = start_in(2, 3);
  assert_int_equal(sl_admit_started(&s), SL_START_GO);
  assert_true(sl_admit_suspect(2, 3));
  s.starts = 3;
  assert_int_equal(sl_admit_started(&s), SL_START_ALONE);
  assert_false(sl_admit_suspect(3, 3));
  s.pending = 1; /* another suspect first */
  assert_int_equal(sl_admit_started(&s), SL_START_SOLO_WAIT);
  s.pending = 0;
  s.stopping = 1; /* nothing waits to run alone while stopping */
  assert_int_equal(sl_admit_started(&s), SL_START_SOLO_WAIT);
  s = start_in(4, 3);
  assert_int_equal(sl_admit_started(&s), SL_START_POISON);
  /* max_starts 1: the first start is not a suspect, the second is poison */
  s = start_in(1, 1);
  assert_int_equal(sl_admit_started(&s), SL_START_GO);
  s.starts = 2;
  assert_int_equal(sl_admit_started(&s), SL_START_POISON);
}

static void test_solo_ready(void **state) {
  (void)state;
  assert_true(sl_admit_solo_ready(0, 0, 1));  /* only the suspect holds a count */
  assert_false(sl_admit_solo_ready(1, 0, 1)); /* a call runs */
  assert_false(sl_admit_solo_ready(0, 1, 1)); /* a count or deletion unanswered */
  assert_false(sl_admit_solo_ready(0, 0, 2)); /* another job holds a count */
  assert_string_equal(sl_admit_step_name(SL_ADMIT_PAUSE_WAIT), "pause_wait");
  assert_string_equal(sl_admit_step_name((sl_admit_step)99), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_breaker_closed_passes),
      cmocka_unit_test(test_breaker_open_holds_in_order),
      cmocka_unit_test(test_breaker_open_looks_up_first),
      cmocka_unit_test(test_closing_and_stale_win),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_call),
      cmocka_unit_test(test_started_first_run),
      cmocka_unit_test(test_started_suspects),
      cmocka_unit_test(test_solo_ready),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
