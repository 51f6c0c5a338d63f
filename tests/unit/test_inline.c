/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_inline.c — unit tests for where a stage runs its blocking processor
 * (sl_inline): never on the loop before SL_INLINE_WARMUP runs or with the
 * limit 0, on the loop while the mean is under the limit, back on the pool
 * when it rises, a cool-down after a very slow run on the loop that a run
 * measured by CPU confirms (not after one on the pool, and not when the
 * runs after it are short: the loop was stopped, not the processor slow),
 * and the measure of a run: CPU time when it ran, wall time when it
 * blocked (slept).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "sluice/sl_inline.h"

#define US 1000ull

static void test_warmup_then_inline(void **state) {
  (void)state;
  sl_inline s = {.max_ns = 50 * US};
  for (int i = 0; i < SL_INLINE_WARMUP; i++) {
    assert_false(sl_inline_here(&s, 1000));
    sl_inline_note(&s, 5 * US, SL_INLINE_POOL, 1000);
  }
  assert_true(sl_inline_here(&s, 1000));
  assert_int_equal(s.mean_ns, 5 * US);
  assert_false(sl_inline_here(NULL, 0));
}

static void test_limit_zero_never(void **state) {
  (void)state;
  sl_inline s = {.max_ns = 0};
  for (int i = 0; i < 100; i++) sl_inline_note(&s, 1, SL_INLINE_POOL, 0);
  assert_false(sl_inline_here(&s, 0));
}

static void test_mean_follows_runs(void **state) {
  (void)state;
  sl_inline s = {.max_ns = 50 * US};
  for (int i = 0; i < SL_INLINE_WARMUP; i++) sl_inline_note(&s, 1000 * US, SL_INLINE_POOL, 0);
  assert_false(sl_inline_here(&s, 0)); /* a recognizer: 1 ms a run */
  int n = 0;
  while (!sl_inline_here(&s, 0) && n < 1000) {
    sl_inline_note(&s, 5 * US, SL_INLINE_POOL, 0);
    n++;
  }
  assert_true(n > 16 && n < 200); /* the mean came down, not at once */
  /* runs that grow slower send work back to the pool */
  n = 0;
  while (sl_inline_here(&s, 0) && n < 1000) {
    sl_inline_note(&s, 150 * US, SL_INLINE_LOOP, 0); /* under the slow mark: no cool-down */
    n++;
  }
  assert_true(n >= 1 && n < 100);
  assert_int_equal(s.cool_until_ns, 0);
}

#define SLOW (50 * US * SL_INLINE_SLOW_FACTOR + 1)

static void test_slow_inline_run_cools_down(void **state) {
  (void)state;
  sl_inline s = {.max_ns = 50 * US};
  for (int i = 0; i < 100; i++) sl_inline_note(&s, 2 * US, SL_INLINE_POOL, 0);
  uint64_t t = 5000000000ull;
  assert_true(sl_inline_here(&s, t));
  /* a very slow run on the pool only moves the mean */
  assert_int_equal(sl_inline_note(&s, SLOW, SL_INLINE_POOL, t), 0);
  assert_int_equal(s.cool_until_ns, 0);
  assert_false(sl_inline_checking(&s));
  for (int i = 0; i < 200; i++) sl_inline_note(&s, 2 * US, SL_INLINE_POOL, t);
  assert_true(sl_inline_here(&s, t));
  /* one on the loop by the wall clock: the next runs are measured by CPU */
  assert_int_equal(sl_inline_note(&s, SLOW, SL_INLINE_LOOP, t), 0);
  assert_int_equal(s.cool_until_ns, 0);
  assert_true(sl_inline_checking(&s));
  for (int i = 0; i < 200; i++) sl_inline_note(&s, 2 * US, SL_INLINE_POOL, t);
  /* one of them that slow too: the pool for SL_INLINE_COOL_NS, whatever
   * the mean */
  assert_int_equal(sl_inline_note(&s, SLOW, SL_INLINE_CHECKED, t), 1);
  assert_false(sl_inline_checking(&s));
  for (int i = 0; i < 200; i++) sl_inline_note(&s, 2 * US, SL_INLINE_POOL, t);
  assert_false(sl_inline_here(&s, t));
  assert_false(sl_inline_here(&s, t + SL_INLINE_COOL_NS - 1));
  assert_true(sl_inline_here(&s, t + SL_INLINE_COOL_NS));
}

/* the loop stopped during a run (preempted, SIGSTOP): slow by the wall
 * clock, then short runs by CPU; no cool-down, and the runs after the
 * checks are measured by the wall clock again */
static void test_stopped_loop_no_cool_down(void **state) {
  (void)state;
  sl_inline s = {.max_ns = 50 * US};
  for (int i = 0; i < 100; i++) sl_inline_note(&s, 2 * US, SL_INLINE_POOL, 0);
  uint64_t t = 5000000000ull;
  for (int stop = 0; stop < 5; stop++) {
    assert_int_equal(sl_inline_note(&s, SLOW, SL_INLINE_LOOP, t), 0);
    for (int i = 0; i < SL_INLINE_CHECKS; i++) {
      assert_true(sl_inline_checking(&s));
      assert_int_equal(sl_inline_note(&s, 2 * US, SL_INLINE_CHECKED, t), 0);
    }
    assert_false(sl_inline_checking(&s));
    for (int i = 0; i < 200; i++) sl_inline_note(&s, 2 * US, SL_INLINE_LOOP, t);
  }
  assert_int_equal(s.cool_until_ns, 0);
  assert_true(sl_inline_here(&s, t));
  /* the wall-clock samples moved the mean: one every few runs keeps a
   * processor off the loop */
  sl_inline p = {.max_ns = 50 * US};
  for (int i = 0; i < 100; i++) sl_inline_note(&p, 2 * US, SL_INLINE_POOL, 0);
  for (int i = 0; i < 40; i++) sl_inline_note(&p, i % 4 ? 2 * US : SLOW, SL_INLINE_LOOP, t);
  assert_false(sl_inline_here(&p, t));
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_measure_cpu_or_blocked(void **state) {
  (void)state;
  /* a run that sleeps blocked: its wall time counts */
  sl_inline_mark m;
  sl_inline_begin(&m);
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  uint64_t slept = sl_inline_end(&m);
  assert_true(slept >= 20 * 1000 * 1000);
  /* a run that computes: its CPU time, never more than its wall time */
  volatile uint64_t x = 0;
  uint64_t w0 = now_ns();
  sl_inline_begin(&m);
  while (now_ns() - w0 < 2 * 1000 * 1000) x += 1;
  uint64_t ran = sl_inline_end(&m);
  uint64_t wall = now_ns() - w0;
  assert_true(ran > 0);
  assert_true(ran <= wall);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_warmup_then_inline),
      cmocka_unit_test(test_limit_zero_never),
      cmocka_unit_test(test_mean_follows_runs),
      cmocka_unit_test(test_slow_inline_run_cools_down),
      cmocka_unit_test(test_stopped_loop_no_cool_down),
      cmocka_unit_test(test_measure_cpu_or_blocked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
