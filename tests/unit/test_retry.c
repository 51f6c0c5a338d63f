/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_retry.c — unit tests for the retry policy (sl_retry): parsing tier
 * specs (and refusing bad ones), the tier and not-before time of a failure
 * by attempt, a Retry-After that skips tiers or is cut to the cap, the
 * budget from the first failure, and when a copy read from a tier is due
 * whatever the sending replica's clock said.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_retry.h"

static void test_parse(void **state) {
  (void)state;
  int64_t d[SL_RETRY_TIERS_MAX];
  char l[SL_RETRY_TIERS_MAX][16];
  assert_int_equal(sl_retry_tiers_parse("5s,30s,2m,10m", d, l), 4);
  assert_int_equal(d[0], 5000);
  assert_int_equal(d[1], 30000);
  assert_int_equal(d[2], 120000);
  assert_int_equal(d[3], 600000);
  assert_string_equal(l[2], "2m");
  assert_int_equal(sl_retry_tiers_parse(" 250ms, 1s ,1h", d, l), 3);
  assert_int_equal(d[0], 250);
  assert_int_equal(d[2], 3600000);
  assert_string_equal(l[0], "250ms");
  const char *bad[] = {"",
                       ",",
                       "5",
                       "5x",
                       "0s",
                       "-1s",
                       "30s,5s",
                       "5s,5s",
                       "5s;10s",
                       "1s,2s,3s,4s,5s,6s,7s,8s,9s",
                       "99999999999999999999s",
                       "99999999999999h"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(sl_retry_tiers_parse(bad[i], d, l), SL_ECONFIG);
  assert_int_equal(sl_retry_tiers_parse(NULL, d, l), SL_ECONFIG);
}

static sl_retry_policy policy(void) {
  sl_retry_policy p = {.ntiers = 3,
                       .tier_ms = {5000, 30000, 120000},
                       .budget_ms = 3600000,
                       .max_retry_after_ms = 600000};
  return p;
}

static void test_plan_by_attempt(void **state) {
  (void)state;
  sl_retry_policy p = policy();
  int64_t nb = 0, now = 1000000;
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 0, &nb), 0);
  assert_int_equal(nb, now + 5000);
  assert_int_equal(sl_retry_plan(&p, 1, now - 5000, now, 0, &nb), 1);
  assert_int_equal(nb, now + 30000);
  assert_int_equal(sl_retry_plan(&p, 2, now - 40000, now, 0, &nb), 2);
  /* beyond the last tier: stays on the last */
  assert_int_equal(sl_retry_plan(&p, 9, now - 400000, now, 0, &nb), 2);
  assert_int_equal(nb, now + 120000);
}

static void test_plan_retry_after(void **state) {
  (void)state;
  sl_retry_policy p = policy();
  int64_t nb = 0, now = 1000000;
  /* 40 s asked on a first failure: the 2m tier (the first that holds it),
   * due after the tier's delay */
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 40000, &nb), 2);
  assert_int_equal(nb, now + 120000);
  /* 7 s: the 30s tier */
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 7000, &nb), 1);
  /* a day: cut to the cap (10 min), on the last tier, due after the cap */
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 86400000, &nb), 2);
  assert_int_equal(nb, now + 600000);
  assert_int_equal(sl_retry_after_clamp(&p, 86400000), 600000);
  assert_int_equal(sl_retry_after_clamp(&p, -5), 0);
  assert_int_equal(sl_retry_after_clamp(&p, 1234), 1234);
  p.max_retry_after_ms = 0; /* no Retry-After honoured at all */
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 86400000, &nb), 0);
  assert_int_equal(nb, now + 5000);
}

static void test_plan_budget(void **state) {
  (void)state;
  sl_retry_policy p = policy();
  int64_t nb = -7, now = 10000000;
  assert_int_equal(sl_retry_plan(&p, 3, now - 3599999, now, 0, &nb), 2);
  assert_int_equal(sl_retry_plan(&p, 3, now - 3600000, now, 0, &nb), -1);
  nb = -7;
  assert_int_equal(sl_retry_plan(&p, 3, now - 9999999, now, 0, &nb), -1);
  assert_int_equal(nb, -7); /* untouched */
  p.budget_ms = 0;          /* no retries at all: the first failure is final */
  assert_int_equal(sl_retry_plan(&p, 0, 0, now, 0, &nb), -1);
}

/* A copy read from a tier: its not-before header, but never later than the
 * delay its sender chose — or, without one, the tier's delay (or the
 * Retry-After cap) — from now. */
static void test_due(void **state) {
  (void)state;
  sl_retry_policy p = policy();
  int64_t now = 5000000;
  assert_int_equal(sl_retry_due(&p, 0, now + 3000, 5000, now), now + 3000);
  assert_int_equal(sl_retry_due(&p, 0, now - 3000, 5000, now), now - 3000); /* due already */
  /* the sender's clock 9 minutes ahead: held only the 5 s it chose */
  assert_int_equal(sl_retry_due(&p, 0, now + 540000, 5000, now), now + 5000);
  /* a sender that chose more than is allowed: the cap */
  assert_int_equal(sl_retry_due(&p, 0, now + 3600000, 86400000, now), now + 600000);
  /* a copy without the delay (written by an older version): the larger of
   * the tier's delay and the cap */
  assert_int_equal(sl_retry_due(&p, 0, now + 3600000, 0, now), now + 600000);
  p.max_retry_after_ms = 0;
  assert_int_equal(sl_retry_due(&p, 1, now + 3600000, 0, now), now + 30000);
  assert_int_equal(sl_retry_due(&p, 7, now + 3600000, 0, now), now); /* unknown tier */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_plan_by_attempt),
      cmocka_unit_test(test_plan_retry_after),
      cmocka_unit_test(test_plan_budget),
      cmocka_unit_test(test_due),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
