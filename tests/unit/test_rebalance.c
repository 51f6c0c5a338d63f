/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rebalance.c — unit tests for a consumer group's rebalance
 * (sl_rebalance): a revoke waits for running work, hands over when it is
 * done or the wait is over, commits nothing when the assignment was lost;
 * an assign hands a waiting revoke over first; after a cooperative revoke
 * periodic commits wait for the rejoin's assigns or a deadline.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_rebalance.h"

static sl_rebal_revoke_in revoke_in(int64_t pending) {
  sl_rebal_revoke_in in = {0};
  in.pending = pending;
  in.now_ms = 1000000;
  in.revoke_wait_ms = 10000;
  in.session_ms = 10000;
  return in;
}

static void test_revoke_waits_for_running_work(void **state) {
  (void)state;
  sl_rebal r = {0};
  sl_rebal_revoke_in in = revoke_in(2);
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_WAIT);
  assert_true(r.revoking);
  assert_int_equal(sl_rebal_progress(&r, 1), SL_REBAL_WAIT);
  assert_int_equal(sl_rebal_progress(&r, 0), SL_REBAL_HANDOVER); /* done: commit, unassign */
  sl_rebal_finished(&r);
  assert_false(r.revoking);
  assert_int_equal(sl_rebal_progress(&r, 0), SL_REBAL_WAIT); /* nothing being revoked */
}

static void test_revoke_now(void **state) {
  (void)state;
  sl_rebal r = {0};
  sl_rebal_revoke_in in = revoke_in(0); /* nothing running */
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_HANDOVER);
  sl_rebal_finished(&r);
  in = revoke_in(3);
  in.revoke_wait_ms = 0; /* no wait configured */
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_HANDOVER);
  sl_rebal_finished(&r);
  in = revoke_in(3);
  in.closing = 1;
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_HANDOVER);
}

/* A lost assignment: someone else owns the partitions already; no wait,
 * and no commit (it could move another owner's commit point back). */
static void test_lost_commits_nothing(void **state) {
  (void)state;
  sl_rebal r = {0};
  sl_rebal_revoke_in in = revoke_in(5);
  in.lost = 1;
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_HANDOVER_LOST);
  assert_int_equal(sl_rebal_timeout(&r), SL_REBAL_HANDOVER_LOST);
  sl_rebal_finished(&r);
  in.lost = 0; /* the next revoke is not lost */
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_WAIT);
  assert_int_equal(sl_rebal_timeout(&r), SL_REBAL_HANDOVER);
}

static void test_assign_hands_over_first(void **state) {
  (void)state;
  sl_rebal r = {0};
  assert_false(sl_rebal_assign(&r));
  sl_rebal_revoke_in in = revoke_in(1);
  assert_int_equal(sl_rebal_revoke(&r, &in), SL_REBAL_WAIT);
  assert_true(sl_rebal_assign(&r)); /* the waiting revoke goes first */
}

static void test_cooperative_rejoin_commits_wait(void **state) {
  (void)state;
  sl_rebal r = {0};
  r.cooperative = 1;
  assert_true(sl_rebal_may_commit(&r, 1000000)); /* nothing revoked yet */
  sl_rebal_revoke_in in = revoke_in(0);
  sl_rebal_revoke(&r, &in);
  sl_rebal_finished(&r);
  assert_false(sl_rebal_may_commit(&r, in.now_ms + 1)); /* rejoining */
  sl_rebal_assign(&r);                                  /* this generation's */
  assert_false(sl_rebal_may_commit(&r, in.now_ms + 2));
  sl_rebal_assign(&r); /* the rejoin's */
  assert_true(sl_rebal_may_commit(&r, in.now_ms + 3));
  /* lost: one assign to see; or the deadline (wait + session) passes */
  in.lost = 1;
  sl_rebal_revoke(&r, &in);
  sl_rebal_finished(&r);
  assert_false(sl_rebal_may_commit(&r, in.now_ms + 1));
  assert_true(sl_rebal_may_commit(&r, in.now_ms + in.revoke_wait_ms + in.session_ms));
  /* eager: no rejoin wait */
  sl_rebal e = {0};
  in.lost = 0;
  sl_rebal_revoke(&e, &in);
  sl_rebal_finished(&e);
  assert_true(sl_rebal_may_commit(&e, in.now_ms + 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_revoke_waits_for_running_work),
      cmocka_unit_test(test_revoke_now),
      cmocka_unit_test(test_lost_commits_nothing),
      cmocka_unit_test(test_assign_hands_over_first),
      cmocka_unit_test(test_cooperative_rejoin_commits_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
