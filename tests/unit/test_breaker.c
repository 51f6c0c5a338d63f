/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_breaker.c — unit tests for the circuit breaker (sl_breaker): opening
 * only with enough calls and at the failure ratio, failures ageing out of the
 * sliding window, one probe per interval while open, and what a probe's
 * result (or its absence) does. Time is simulated; nothing sleeps.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "sluice/sl_breaker.h"
#include "sluice/sl_err.h"

static sl_breaker *new_default(void) {
  sl_breaker *b = NULL;
  assert_int_equal(sl_breaker_new(&b, NULL), 0);
  assert_non_null(b);
  return b;
}

/* Drives a default breaker (20 calls, ratio 0.5) open at time t. */
static void open_it(sl_breaker *b, int64_t t) {
  for (int i = 0; i < 20; i++) {
    assert_int_equal(sl_breaker_allow(b, t, NULL), 1);
    sl_breaker_record(b, t, 0);
  }
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
}

static void test_new_validates_and_free_is_null_safe(void **state) {
  (void)state;
  sl_breaker *b = NULL;
  sl_breaker_opts bad_ratio = {.failure_ratio = 1.5};
  sl_breaker_opts nan_ratio = {.failure_ratio = NAN};
  sl_breaker_opts neg_ratio = {.failure_ratio = -0.1};
  sl_breaker_opts tiny_window = {.window_ms = 5};
  sl_breaker_opts neg_probe = {.probe_interval_ms = -1};
  assert_int_equal(sl_breaker_new(NULL, NULL), SL_EINVAL);
  assert_int_equal(sl_breaker_new(&b, &bad_ratio), SL_EINVAL);
  assert_int_equal(sl_breaker_new(&b, &nan_ratio), SL_EINVAL);
  assert_int_equal(sl_breaker_new(&b, &neg_ratio), SL_EINVAL);
  assert_int_equal(sl_breaker_new(&b, &tiny_window), SL_EINVAL);
  assert_int_equal(sl_breaker_new(&b, &neg_probe), SL_EINVAL);
  assert_null(b);
  sl_breaker_free(NULL);
  /* NULL breaker: never in the way */
  int64_t retry = 99;
  assert_int_equal(sl_breaker_allow(NULL, 0, &retry), 1);
  assert_int_equal(retry, 0);
  sl_breaker_record(NULL, 0, 0);
  assert_int_equal(sl_breaker_get_state(NULL), SL_BREAKER_CLOSED);
  assert_string_equal(sl_breaker_state_name(SL_BREAKER_HALF_OPEN), "half_open");
}

static void test_closed_below_min_calls_even_at_full_failure(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  for (int i = 0; i < 19; i++) {
    assert_int_equal(sl_breaker_allow(b, 100 + i, NULL), 1);
    sl_breaker_record(b, 100 + i, 0);
  }
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  unsigned fails = 0;
  assert_int_equal(sl_breaker_get_window_calls(b, 200, &fails), 19);
  assert_int_equal(fails, 19);
  assert_int_equal(sl_breaker_get_opened_total(b), 0);
  /* the 20th failure reaches min_calls at 100% -> open */
  sl_breaker_record(b, 120, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
  assert_int_equal(sl_breaker_get_opened_total(b), 1);
  sl_breaker_free(b);
}

static void test_opens_at_the_ratio(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  /* 11 successes then 9 failures: 20 calls, 45% -> stays closed */
  for (int i = 0; i < 11; i++) sl_breaker_record(b, 1000, 1);
  for (int i = 0; i < 9; i++) sl_breaker_record(b, 1000, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  /* 10th failure: 10 of 21 = 47.6% -> still closed */
  sl_breaker_record(b, 1001, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  /* 11th failure: 11 of 22 = 50% -> open (>= ratio) */
  sl_breaker_record(b, 1002, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
  int64_t retry = -1;
  assert_int_equal(sl_breaker_allow(b, 1002, &retry), 0);
  assert_int_equal(retry, 1000);
  assert_int_equal(sl_breaker_allow(b, 1500, &retry), 0);
  assert_int_equal(retry, 502);
  sl_breaker_free(b);

  /* a custom ratio of 0.3 opens at exactly 30% */
  sl_breaker_opts o = {.failure_ratio = 0.3, .min_calls = 10};
  assert_int_equal(sl_breaker_new(&b, &o), 0);
  for (int i = 0; i < 7; i++) sl_breaker_record(b, 0, 1);
  sl_breaker_record(b, 0, 0);
  sl_breaker_record(b, 0, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED); /* 2 of 9 */
  sl_breaker_record(b, 0, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN); /* 3 of 10 */
  sl_breaker_free(b);
}

static void test_old_failures_age_out(void **state) {
  (void)state;
  sl_breaker *b = new_default(); /* 10 s window, 1 s buckets */
  for (int i = 0; i < 19; i++) sl_breaker_record(b, 0, 0);
  assert_int_equal(sl_breaker_get_window_calls(b, 9999, NULL), 19);
  /* a bucket lives for 10 epochs: at 10 s the bucket of time 0 is gone */
  assert_int_equal(sl_breaker_get_window_calls(b, 10000, NULL), 0);
  sl_breaker_record(b, 10000, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  unsigned fails = 0;
  assert_int_equal(sl_breaker_get_window_calls(b, 10000, &fails), 1);
  assert_int_equal(fails, 1);

  /* a steady 40% failure rate over a long time never opens, and the window
   * never holds more than about one window's worth of calls */
  sl_breaker *c = new_default();
  for (int64_t t = 0; t < 60000; t += 10) {
    assert_int_equal(sl_breaker_allow(c, t, NULL), 1);
    sl_breaker_record(c, t, (t / 10) % 5 >= 2);
    assert_true(sl_breaker_get_window_calls(c, t, NULL) <= 1000);
  }
  assert_int_equal(sl_breaker_get_state(c), SL_BREAKER_CLOSED);
  assert_true(sl_breaker_get_window_calls(c, 60000, NULL) >= 900);
  sl_breaker_free(c);

  /* time going backwards is treated as standing still */
  sl_breaker_record(b, 5000, 0);
  assert_int_equal(sl_breaker_get_window_calls(b, 10000, NULL), 2);
  sl_breaker_free(b);
}

static void test_one_probe_per_interval_while_open(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  open_it(b, 0);
  int allowed = 0;
  for (int64_t t = 1; t <= 10000; t++) {
    int64_t retry = -1;
    if (sl_breaker_allow(b, t, &retry)) {
      allowed++;
      assert_int_equal(retry, 0);
      assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_HALF_OPEN);
      sl_breaker_record(b, t, 0);
      assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
    } else {
      assert_true(retry > 0 && retry <= 1000);
    }
  }
  assert_true(allowed >= 9 && allowed <= 11);
  /* re-opening after a failed probe is not a new opening */
  assert_int_equal(sl_breaker_get_opened_total(b), 1);
  sl_breaker_free(b);
}

static void test_probe_success_closes(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  open_it(b, 0);
  assert_int_equal(sl_breaker_allow(b, 999, NULL), 0);
  assert_int_equal(sl_breaker_allow(b, 1000, NULL), 1);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_HALF_OPEN);
  /* while the probe is out nothing else goes */
  int64_t retry = 0;
  assert_int_equal(sl_breaker_allow(b, 1200, &retry), 0);
  assert_int_equal(retry, 800);
  sl_breaker_record(b, 1300, 1);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  /* the window starts empty: the 20 old failures are forgotten */
  assert_int_equal(sl_breaker_get_window_calls(b, 1300, NULL), 0);
  for (int i = 0; i < 19; i++) {
    assert_int_equal(sl_breaker_allow(b, 1301, NULL), 1);
    sl_breaker_record(b, 1301, 0);
  }
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  sl_breaker_record(b, 1302, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
  assert_int_equal(sl_breaker_get_opened_total(b), 2);
  sl_breaker_free(b);
}

static void test_probe_failure_stays_open(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  open_it(b, 0);
  assert_int_equal(sl_breaker_allow(b, 1000, NULL), 1);
  sl_breaker_record(b, 1400, 0); /* the probe took 400 ms and failed */
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
  int64_t retry = 0;
  assert_int_equal(sl_breaker_allow(b, 1401, &retry), 0);
  assert_int_equal(retry, 999); /* next probe one interval after the failure */
  assert_int_equal(sl_breaker_allow(b, 2399, NULL), 0);
  assert_int_equal(sl_breaker_allow(b, 2400, NULL), 1);
  /* results of calls that went out before it opened are ignored while OPEN */
  sl_breaker_record(b, 2500, 0); /* the probe's failure -> OPEN */
  sl_breaker_record(b, 2501, 1); /* a straggler's success: ignored */
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN);
  sl_breaker_free(b);
}

static void test_lost_probe_does_not_wedge(void **state) {
  (void)state;
  sl_breaker *b = new_default();
  open_it(b, 0);
  assert_int_equal(sl_breaker_allow(b, 1000, NULL), 1); /* result never recorded */
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_HALF_OPEN);
  int64_t retry = 0;
  assert_int_equal(sl_breaker_allow(b, 1500, &retry), 0);
  assert_int_equal(retry, 500);
  assert_int_equal(sl_breaker_allow(b, 1999, NULL), 0);
  assert_int_equal(sl_breaker_allow(b, 2000, NULL), 1); /* a new probe */
  assert_int_equal(sl_breaker_allow(b, 2001, NULL), 0);
  sl_breaker_record(b, 2100, 1);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  sl_breaker_free(b);
}

static void test_custom_options(void **state) {
  (void)state;
  sl_breaker_opts o = {.min_calls = 4, .window_ms = 1000, .probe_interval_ms = 250};
  sl_breaker *b = NULL;
  assert_int_equal(sl_breaker_new(&b, &o), 0);
  sl_breaker_record(b, 0, 0);
  sl_breaker_record(b, 0, 0);
  sl_breaker_record(b, 0, 0);
  /* 1 s window of 100 ms buckets: the bucket of time 0 is gone at 1000 */
  sl_breaker_record(b, 1000, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_CLOSED);
  sl_breaker_record(b, 1050, 0);
  sl_breaker_record(b, 1100, 1);
  sl_breaker_record(b, 1100, 0);
  assert_int_equal(sl_breaker_get_state(b), SL_BREAKER_OPEN); /* 3 of 4 */
  assert_int_equal(sl_breaker_allow(b, 1349, NULL), 0);
  assert_int_equal(sl_breaker_allow(b, 1350, NULL), 1);
  sl_breaker_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_validates_and_free_is_null_safe),
      cmocka_unit_test(test_closed_below_min_calls_even_at_full_failure),
      cmocka_unit_test(test_opens_at_the_ratio),
      cmocka_unit_test(test_old_failures_age_out),
      cmocka_unit_test(test_one_probe_per_interval_while_open),
      cmocka_unit_test(test_probe_success_closes),
      cmocka_unit_test(test_probe_failure_stays_open),
      cmocka_unit_test(test_lost_probe_does_not_wedge),
      cmocka_unit_test(test_custom_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
