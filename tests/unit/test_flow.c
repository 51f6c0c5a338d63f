/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_flow.c — unit tests for the limits on a stage's work in flight
 * (sl_flow): pausing at either limit, resuming only below 80% of both, the
 * resume mark of small limits, and a simulated backlog of answers of mixed
 * sizes (one larger than the byte limit) taken the way sl_stage.c takes
 * them: bytes in flight never pass the limit by more than one job, nothing
 * deadlocks, and the large answer runs alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_flow.h"

static void test_pause_at_either_limit(void **state) {
  (void)state;
  sl_flow_limits l = {1000, 100 << 20, 0};
  int by_bytes = -1;
  assert_int_equal(sl_flow_next(&l, 0, 999, (100 << 20) - 1, &by_bytes), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 0, 1000, 0, &by_bytes), SL_FLOW_PAUSE);
  assert_int_equal(by_bytes, 0);
  assert_int_equal(sl_flow_next(&l, 0, 10, 100 << 20, &by_bytes), SL_FLOW_PAUSE);
  assert_int_equal(by_bytes, 1);
  assert_int_equal(sl_flow_next(&l, 0, 1000, 100 << 20, &by_bytes), SL_FLOW_PAUSE);
  assert_int_equal(by_bytes, 0); /* both: the message limit is named */
  assert_int_equal(sl_flow_next(&l, 0, 1000, 0, NULL), SL_FLOW_PAUSE);
  /* already paused: nothing more to do while over */
  assert_int_equal(sl_flow_next(&l, 1, 1000, 0, NULL), SL_FLOW_KEEP);
  /* no byte limit */
  l.max_bytes = 0;
  assert_int_equal(sl_flow_next(&l, 0, 1, INT64_MAX, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 800, INT64_MAX, NULL), SL_FLOW_RESUME);
  assert_int_equal(sl_flow_next(NULL, 0, 0, 0, NULL), SL_FLOW_KEEP);
}

static void test_resume_below_both(void **state) {
  (void)state;
  sl_flow_limits l = {1000, 1000000, 0};
  /* below 80% of one limit is not enough */
  assert_int_equal(sl_flow_next(&l, 1, 500, 900000, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 900, 1000, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 801, 800000, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 800, 800000, NULL), SL_FLOW_RESUME);
  assert_int_equal(sl_flow_next(&l, 1, 0, 0, NULL), SL_FLOW_RESUME);
}

static void test_resume_mark(void **state) {
  (void)state;
  assert_int_equal(sl_flow_resume_mark(1000), 800);
  assert_int_equal(sl_flow_resume_mark(6), 4);
  assert_int_equal(sl_flow_resume_mark(5), 4);
  assert_int_equal(sl_flow_resume_mark(2), 1);
  /* a limit of one resumes once the one job is over, not never */
  assert_int_equal(sl_flow_resume_mark(1), 0);
  sl_flow_limits l = {1, 0, 0};
  assert_int_equal(sl_flow_next(&l, 1, 0, 0, NULL), SL_FLOW_RESUME);
  assert_true(sl_flow_resume_mark(INT64_MAX) < INT64_MAX);
  assert_int_equal(sl_flow_resume_mark(0), 0);
}

/* The stage's own resume mark: max_in_flight 10 + prefetch 4 taken at
 * most, resumed once half the prefetch has started (12), not at 80% (11). */
static void test_resume_messages(void **state) {
  (void)state;
  sl_flow_limits l = {14, 0, 12};
  assert_int_equal(sl_flow_next(&l, 0, 14, 0, NULL), SL_FLOW_PAUSE);
  assert_int_equal(sl_flow_next(&l, 1, 13, 0, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 12, 0, NULL), SL_FLOW_RESUME);
  /* a mark at or over the limit is not one: 80% */
  l.resume_messages = 14;
  assert_int_equal(sl_flow_next(&l, 1, 12, 0, NULL), SL_FLOW_KEEP);
  assert_int_equal(sl_flow_next(&l, 1, 11, 0, NULL), SL_FLOW_RESUME);
}

/* A backlog taken as sl_stage.c does: one job at a time while fetching is
 * not paused (a limit is checked after the job is taken), the oldest job
 * finishing otherwise. */
static void test_backlog_never_deadlocks(void **state) {
  (void)state;
  enum { N = 400 };
  const int64_t limit = 8 << 20, answer = 1536 * 1024, huge = 20 << 20;
  sl_flow_limits l = {1000, limit, 0};
  int64_t size[N], inflight[N];
  for (int i = 0; i < N; i++) size[i] = i == 150 ? huge : answer + (i % 7) * 1000;
  int next = 0, head = 0, tail = 0, paused = 0, huge_alone = 0;
  int64_t bytes = 0, peak = 0, peak_ordinary = 0, steps = 0;
  while (next < N || head < tail) {
    assert_true(++steps < 10 * N); /* progress */
    if (!paused && next < N) {
      inflight[tail++] = size[next++];
      bytes += inflight[tail - 1];
    } else {
      assert_true(head < tail); /* paused with nothing to finish: a deadlock */
      bytes -= inflight[head++];
    }
    if (bytes > peak) peak = bytes;
    int with_huge = 0;
    for (int i = head; i < tail; i++) with_huge |= inflight[i] == huge;
    if (with_huge)
      huge_alone |= tail - head == 1;
    else if (bytes > peak_ordinary)
      peak_ordinary = bytes;
    sl_flow_action a = sl_flow_next(&l, paused, tail - head, bytes, NULL);
    if (a == SL_FLOW_PAUSE) paused = 1;
    if (a == SL_FLOW_RESUME) paused = 0;
  }
  assert_int_equal(bytes, 0);
  /* over the limit by less than the job that crossed it */
  assert_true(peak < limit + huge);
  /* the answers of ordinary size never passed the limit by more than one */
  assert_true(peak_ordinary < limit + answer + 7 * 1000);
  assert_true(peak_ordinary >= limit); /* and the limit was reached: it paused */
  assert_true(huge_alone);             /* the large one ran, and at some point alone */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pause_at_either_limit),
      cmocka_unit_test(test_resume_below_both),
      cmocka_unit_test(test_resume_mark),
      cmocka_unit_test(test_resume_messages),
      cmocka_unit_test(test_backlog_never_deadlocks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
