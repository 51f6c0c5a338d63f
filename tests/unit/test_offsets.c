/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_offsets.c — unit tests for a partition's offset tracker
 * (sl_offsets): the commit point never passes an unfinished offset, out of
 * order completion, epochs (a reassigned partition, a job of an old life),
 * a refetch at a lower offset, a failed commit made pending again, growth
 * past the first allocation, and the oldest-timestamp gauge.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_offsets.h"

static void take(sl_offsets *r, int64_t from, int64_t to) {
  for (int64_t o = from; o <= to; o++) assert_int_equal(sl_offsets_take(r, o, 1000 + o), 0);
}

static void test_in_order(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  assert_int_equal(sl_offsets_commit_take(&r), -1); /* nothing yet */
  take(&r, 10, 12);
  assert_int_equal(sl_offsets_pending(&r), 3);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 10), 1);
  assert_int_equal(sl_offsets_commit_take(&r), 11);
  assert_int_equal(sl_offsets_commit_take(&r), -1); /* taken: not dirty any more */
  assert_int_equal(sl_offsets_done(&r, r.epoch, 11), 1);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 12), 1);
  assert_int_equal(sl_offsets_commit_take(&r), 13);
  assert_int_equal(sl_offsets_pending(&r), 0);
  sl_offsets_free(&r);
}

/* A later offset finishing first moves nothing; the commit point jumps
 * once the oldest finishes. */
static void test_out_of_order(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  take(&r, 0, 4);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 3), 0);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 1), 0);
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 0), 1);
  assert_int_equal(sl_offsets_commit_take(&r), 2); /* 0 and 1 done, 2 not */
  assert_int_equal(sl_offsets_done(&r, r.epoch, 2), 1);
  assert_int_equal(sl_offsets_commit_take(&r), 4); /* 3 was done already */
  assert_int_equal(sl_offsets_pending(&r), 1);
  /* an unknown offset and a repeated one change nothing */
  assert_int_equal(sl_offsets_done(&r, r.epoch, 99), 0);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 3), 0);
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  sl_offsets_free(&r);
}

/* Gaps (compacted topics, transaction markers) are fine: offsets need only
 * ascend. */
static void test_gaps(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  assert_int_equal(sl_offsets_take(&r, 5, 1), 0);
  assert_int_equal(sl_offsets_take(&r, 9, 2), 0);
  assert_int_equal(sl_offsets_take(&r, 20, 3), 0);
  sl_offsets_done(&r, r.epoch, 9);
  sl_offsets_done(&r, r.epoch, 5);
  assert_int_equal(sl_offsets_commit_take(&r), 10);
  sl_offsets_free(&r);
}

/* Reassigned: a new life. A job of the old one finishing later counts for
 * nothing, and nothing of the old life is committed. */
static void test_reset_epoch(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  take(&r, 0, 2);
  uint64_t old = r.epoch;
  sl_offsets_done(&r, old, 0); /* commit point 1, not yet taken */
  sl_offsets_reset(&r);
  assert_int_not_equal(r.epoch, old);
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  assert_int_equal(sl_offsets_pending(&r), 0);
  take(&r, 50, 51);
  assert_int_equal(sl_offsets_done(&r, old, 50), 0); /* same offset, old life */
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  assert_int_equal(sl_offsets_done(&r, r.epoch, 50), 1);
  assert_int_equal(sl_offsets_commit_take(&r), 51);
  sl_offsets_free(&r);
}

/* The consumer goes back (an offset reset, a seek): the offsets come again.
 * The tracker must stay ascending (a ring with 12 after 20 would never find
 * 12 again and hold the commit for ever), start a new epoch, and never move
 * the commit point backwards. */
static void test_refetch_lower(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  take(&r, 10, 20);
  uint64_t first = r.epoch;
  for (int64_t o = 10; o <= 14; o++) sl_offsets_done(&r, first, o);
  assert_int_equal(sl_offsets_commit_take(&r), 15);
  assert_int_equal(sl_offsets_take(&r, 12, 5), 1); /* a refetch */
  assert_int_not_equal(r.epoch, first);
  for (int64_t o = 13; o <= 20; o++) assert_int_equal(sl_offsets_take(&r, o, 5), 0);
  assert_int_equal(sl_offsets_pending(&r), 9);
  /* a job of the first fetch finishing: no longer counts */
  assert_int_equal(sl_offsets_done(&r, first, 15), 0);
  /* the refetched 12..14 finish again: the commit point stays at 15 */
  for (int64_t o = 12; o <= 14; o++) sl_offsets_done(&r, r.epoch, o);
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  /* and moves on from there */
  for (int64_t o = 15; o <= 20; o++) sl_offsets_done(&r, r.epoch, o);
  assert_int_equal(sl_offsets_commit_take(&r), 21);
  assert_int_equal(sl_offsets_pending(&r), 0);
  /* the same offset twice is a refetch too */
  assert_int_equal(sl_offsets_take(&r, 21, 5), 0);
  assert_int_equal(sl_offsets_take(&r, 21, 5), 1);
  sl_offsets_free(&r);
}

/* A failed asynchronous commit: the point is committed again next round;
 * after a reset the failure of the old life is ignored. */
static void test_commit_failed(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  take(&r, 0, 3);
  sl_offsets_done(&r, r.epoch, 0);
  sl_offsets_done(&r, r.epoch, 1);
  assert_int_equal(sl_offsets_commit_take(&r), 2);
  sl_offsets_commit_failed(&r, 2);
  assert_int_equal(sl_offsets_commit_take(&r), 2); /* again */
  sl_offsets_done(&r, r.epoch, 2);
  assert_int_equal(sl_offsets_commit_take(&r), 3);
  sl_offsets_commit_failed(&r, 2);                 /* an older one failed late */
  assert_int_equal(sl_offsets_commit_take(&r), 3); /* the current point again */
  sl_offsets_reset(&r);
  sl_offsets_commit_failed(&r, 3);
  assert_int_equal(sl_offsets_commit_take(&r), -1);
  sl_offsets_free(&r);
}

/* Many in flight: the ring grows (and wraps) without losing order. */
static void test_growth_and_wrap(void **state) {
  (void)state;
  sl_offsets r;
  sl_offsets_init(&r);
  take(&r, 0, 39);
  for (int64_t o = 0; o < 30; o++) sl_offsets_done(&r, r.epoch, o); /* head moves to 30 */
  assert_int_equal(sl_offsets_commit_take(&r), 30);
  take(&r, 40, 299); /* wraps, then grows past 64 */
  assert_int_equal(sl_offsets_pending(&r), 270);
  assert_int_equal(sl_offsets_oldest_ts(&r), 1030);
  for (int64_t o = 299; o >= 31; o--) sl_offsets_done(&r, r.epoch, o);
  assert_int_equal(sl_offsets_commit_take(&r), -1); /* 30 still running */
  sl_offsets_done(&r, r.epoch, 30);
  assert_int_equal(sl_offsets_commit_take(&r), 300);
  assert_int_equal(sl_offsets_oldest_ts(&r), 0);
  sl_offsets_free(&r);
  sl_offsets_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_order),
      cmocka_unit_test(test_out_of_order),
      cmocka_unit_test(test_gaps),
      cmocka_unit_test(test_reset_epoch),
      cmocka_unit_test(test_refetch_lower),
      cmocka_unit_test(test_commit_failed),
      cmocka_unit_test(test_growth_and_wrap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
