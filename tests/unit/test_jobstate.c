/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_jobstate.c — unit tests for the transitions of a stage's jobs
 * (sl_jobstate): the paths a job takes (a call and its store, stored
 * outputs reused, a retry copy parked, a claim lost on a worker, a run
 * again in place) are allowed; what would lose or repeat work is not (a
 * finished job moving again, a running call let go, a job called without
 * passing the gate, an outcome before a call).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_jobstate.h"

/* every step of path is allowed */
static void path_ok(const sl_job_state *path, size_t n) {
  for (size_t i = 1; i < n; i++) {
    if (!sl_job_may(path[i - 1], path[i]))
      fail_msg("%s -> %s refused", sl_job_state_name(path[i - 1]), sl_job_state_name(path[i]));
  }
}
#define PATH_OK(...)                                                                               \
  do {                                                                                             \
    const sl_job_state p_[] = {__VA_ARGS__};                                                       \
    path_ok(p_, sizeof p_ / sizeof p_[0]);                                                         \
  } while (0)

static void test_paths(void **state) {
  (void)state;
  /* a call on a worker, its outputs stored, produced */
  PATH_OK(SL_JOB_NEW, SL_JOB_WAITING, SL_JOB_LOOKUP, SL_JOB_GATE, SL_JOB_CALL, SL_JOB_POOL,
          SL_JOB_OUTCOME, SL_JOB_STORED, SL_JOB_FINISHED);
  /* stored outputs answer it */
  PATH_OK(SL_JOB_NEW, SL_JOB_WAITING, SL_JOB_LOOKUP, SL_JOB_REUSE, SL_JOB_FINISHED);
  PATH_OK(SL_JOB_NEW, SL_JOB_GATE, SL_JOB_REUSE, SL_JOB_FINISHED);
  /* a retry copy parked, then due */
  PATH_OK(SL_JOB_NEW, SL_JOB_PARKED, SL_JOB_WAITING, SL_JOB_KEYQ, SL_JOB_GATE, SL_JOB_CALL,
          SL_JOB_OUTCOME, SL_JOB_FINISHED);
  /* its claim lost while it queued for a worker: claims again */
  PATH_OK(SL_JOB_GATE, SL_JOB_CALL, SL_JOB_POOL, SL_JOB_CLAIM, SL_JOB_CALL, SL_JOB_OUTCOME);
  /* run again in place, then a dead letter written */
  PATH_OK(SL_JOB_OUTCOME, SL_JOB_CLAIM, SL_JOB_OUTCOME, SL_JOB_FINISHED);
  /* the breaker open: a lookup, then a retry copy without a call */
  PATH_OK(SL_JOB_GATE, SL_JOB_LOOKUP, SL_JOB_GATE, SL_JOB_OUTCOME, SL_JOB_FINISHED);
  /* another replica ended it */
  PATH_OK(SL_JOB_CLAIM, SL_JOB_FINISHED);
  /* let go before the call, or dropped while closing */
  PATH_OK(SL_JOB_GATE, SL_JOB_RELEASED);
  PATH_OK(SL_JOB_POOL, SL_JOB_DROPPED);
}

static void test_refused(void **state) {
  (void)state;
  /* a finished job never moves again (a second outcome would pay twice) */
  for (int s = 0; s < SL_JOB_NSTATES; s++) {
    assert_false(sl_job_may(SL_JOB_FINISHED, (sl_job_state)s));
    assert_false(sl_job_may(SL_JOB_RELEASED, (sl_job_state)s));
    assert_false(sl_job_may(SL_JOB_DROPPED, (sl_job_state)s));
  }
  /* a call that runs is paid: it ends by its outcome, never let go */
  assert_false(sl_job_may(SL_JOB_CALL, SL_JOB_RELEASED));
  assert_false(sl_job_may(SL_JOB_POOL, SL_JOB_RELEASED));
  /* a call only through the gate */
  assert_false(sl_job_may(SL_JOB_WAITING, SL_JOB_CALL));
  assert_false(sl_job_may(SL_JOB_LOOKUP, SL_JOB_CALL));
  /* no outcome without a call or the gate's word */
  assert_false(sl_job_may(SL_JOB_WAITING, SL_JOB_OUTCOME));
  assert_false(sl_job_may(SL_JOB_LOOKUP, SL_JOB_OUTCOME));
  /* an outcome is acted on once: not stored again, not let go */
  assert_false(sl_job_may(SL_JOB_STORED, SL_JOB_OUTCOME));
  assert_false(sl_job_may(SL_JOB_OUTCOME, SL_JOB_RELEASED));
  /* a finish only once outputs are in (or none are needed) */
  assert_false(sl_job_may(SL_JOB_CALL, SL_JOB_FINISHED));
  assert_false(sl_job_may(SL_JOB_WAITING, SL_JOB_FINISHED));
  assert_false(sl_job_may((sl_job_state)-1, SL_JOB_GATE));
  assert_false(sl_job_may(SL_JOB_GATE, SL_JOB_NSTATES));
}

static void test_names(void **state) {
  (void)state;
  assert_string_equal(sl_job_state_name(SL_JOB_POOL), "pool");
  assert_string_equal(sl_job_state_name(SL_JOB_DROPPED), "dropped");
  assert_string_equal(sl_job_state_name(SL_JOB_NSTATES), "?");
  assert_true(sl_job_terminal(SL_JOB_RELEASED));
  assert_false(sl_job_terminal(SL_JOB_STORED));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paths),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
