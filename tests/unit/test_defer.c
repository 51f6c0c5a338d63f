/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_defer.c — unit tests for when and where a deferred input comes back
 * (sl_defer): slots one interval apart after what the line holds and after
 * the schedule's last; the interval from the rate the line was measured to
 * be served at (a moving average, a tenth early), and no measure from a
 * second the line was not served or was too long, nor from one it ran dry
 * unless it was served faster than the average; the tier by
 * whole hops capped by the hop limit, among the tiers the replica owns a
 * partition of; a partition only among those owned; a copy's hop header
 * read strictly, and a copy a twin only of a newer hop of the same input.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_defer.h"
#include "sluice/sl_err.h"

static void test_slots_follow_the_line_and_the_tail(void **state) {
  (void)state;
  sl_defer_sched s = {0};
  /* 10 waiting, 100 ms apart: the first slot is after them */
  assert_int_equal(sl_defer_slot(&s, 1000, 10, 100), 1000 + 1000 + 100);
  assert_int_equal(sl_defer_slot(&s, 1000, 10, 100), 2200);
  assert_int_equal(sl_defer_slot(&s, 1050, 10, 100), 2300); /* after the tail, not now */
  /* the schedule ran out: again after what the line holds now */
  assert_int_equal(sl_defer_slot(&s, 9000, 2, 100), 9000 + 200 + 100);
  /* a nonsense interval is 1 ms, a negative count none */
  sl_defer_sched z = {0};
  assert_int_equal(sl_defer_slot(&z, 0, -5, 0), 1);
}

static void test_interval_from_the_measured_rate(void **state) {
  (void)state;
  sl_defer_sched s = {0};
  assert_true(sl_defer_interval_ms(&s, 50) == 50); /* nothing measured: the estimate */
  assert_true(sl_defer_interval_ms(&s, 0) == 1);
  sl_defer_tick(&s, 30, 1000); /* the first tick: it had no inputs before, no sample */
  assert_true(s.rate == 0);
  for (int i = 0; i < 5; i++) sl_defer_served(&s);
  sl_defer_tick(&s, 30, 1000); /* 5 served in a second with inputs all along */
  assert_true(s.rate == 5);
  assert_true(sl_defer_interval_ms(&s, 50) > 179.99 && sl_defer_interval_ms(&s, 50) < 180.01);
  for (int i = 0; i < 10; i++) sl_defer_served(&s);
  sl_defer_tick(&s, 30, 500); /* 20/s: the average moves 0.3 of the way */
  assert_true(s.rate > 9.49 && s.rate < 9.51);
}

static void test_no_sample_without_a_full_second(void **state) {
  (void)state;
  sl_defer_sched s = {.rate = 4, .had_inputs = 1};
  sl_defer_served(&s);
  sl_defer_emptied(&s); /* it ran dry: served less than it could have been */
  sl_defer_tick(&s, 3, 1000);
  assert_true(s.rate == 4);
  for (int i = 0; i < 14; i++) sl_defer_served(&s);
  sl_defer_emptied(&s); /* dry, but served faster than the average: its share grew */
  sl_defer_tick(&s, 3, 1000);
  assert_true(s.rate > 6.99 && s.rate < 7.01);
  s.rate = 4;
  assert_int_equal(s.served, 0);
  sl_defer_tick(&s, 3, 1000); /* none served: the limiter paused, the breaker open */
  assert_true(s.rate == 4);
  for (int i = 0; i < 3; i++) sl_defer_served(&s);
  sl_defer_tick(&s, 3, 0); /* no time */
  assert_true(s.rate == 4);
  for (int i = 0; i < 3; i++) sl_defer_served(&s);
  sl_defer_tick(&s, 0, 60000); /* a stopped loop */
  assert_true(s.rate == 4);
  for (int i = 0; i < 3; i++) sl_defer_served(&s);
  sl_defer_tick(&s, 0, 1000); /* empty at the tick before: no sample */
  assert_true(s.rate == 4);
  assert_false(s.had_inputs);
}

static void test_tier_by_whole_hops(void **state) {
  (void)state;
  sl_retry_policy p = {.ntiers = 4, .tier_ms = {5000, 30000, 120000, 600000}};
  assert_int_equal(sl_defer_tier(&p, 0, 30000, 0), 0);
  assert_int_equal(sl_defer_tier(&p, 29999, 30000, 0), 0); /* 30 s would overshoot */
  assert_int_equal(sl_defer_tier(&p, 30000, 30000, 0), 1);
  assert_int_equal(sl_defer_tier(&p, 200000, 30000, 0), 1); /* capped: it goes round again */
  assert_int_equal(sl_defer_tier(&p, 200000, 600000, 0), 2);
  assert_int_equal(sl_defer_tier(&p, 3600000, INT64_MAX, 0), 3);
  assert_int_equal(sl_defer_tier(&p, 3600000, 1000, 0), 0); /* a cap under the first: the first */
}

static void test_tier_among_the_owned(void **state) {
  (void)state;
  sl_retry_policy p = {.ntiers = 4, .tier_ms = {5000, 30000, 120000, 600000}};
  assert_int_equal(sl_defer_tier(&p, 200000, 600000, 0xf), 2); /* all owned: as without */
  assert_int_equal(sl_defer_tier(&p, 200000, 600000, 0x3), 1); /* a shorter one of ours */
  assert_int_equal(sl_defer_tier(&p, 200000, 600000, 0x1), 0);
  assert_int_equal(sl_defer_tier(&p, 1000, 600000, 0xc), 2); /* none under: the first over */
  assert_int_equal(sl_defer_tier(&p, 1000, 600000, 0x8), 3);
  assert_int_equal(sl_defer_tier(&p, 40000, 30000, 0x4), 2); /* even past the hop's cap */
}

static void test_partition_among_the_owned(void **state) {
  (void)state;
  uint64_t none[4] = {0};
  assert_int_equal(sl_defer_partition(none, 4, 7), -1);
  uint64_t own[4] = {0};
  own[0] |= (uint64_t)1 << 3;
  own[1] |= (uint64_t)1 << (70 - 64);
  own[3] |= (uint64_t)1 << (200 - 192);
  assert_int_equal(sl_defer_partition(own, 4, 0), 3);
  assert_int_equal(sl_defer_partition(own, 4, 1), 70);
  assert_int_equal(sl_defer_partition(own, 4, 2), 200);
  assert_int_equal(sl_defer_partition(own, 4, 3), 3);
  int seen[3] = {0};
  for (uint32_t h = 0; h < 300; h++) {
    int32_t p = sl_defer_partition(own, 4, h);
    assert_true(p == 3 || p == 70 || p == 200);
    seen[p == 3 ? 0 : p == 70 ? 1 : 2]++;
  }
  assert_int_equal(seen[0], 100); /* spread evenly */
  assert_int_equal(seen[1], 100);
  assert_int_equal(seen[2], 100);
  uint64_t all = ~(uint64_t)0;
  assert_int_equal(sl_defer_partition(&all, 1, 63), 63);
}

static void test_hop_header(void **state) {
  (void)state;
  char o[SL_DEFER_ORIGIN_MAX];
  int64_t h = -1;
  assert_int_equal(sl_defer_hop_parse("3.1234:7", o, sizeof o, &h), 0);
  assert_string_equal(o, "3.1234");
  assert_int_equal(h, 7);
  /* hostile or broken values: refused, nothing half-read */
  const char *bad[] = {"",       ":3",    "3.1",   "3.1:",   "3.1:0",
                       "3.1:-2", "3.1:x", "a.b:1", "3.1:1x", "3.1:1234567890123456789",
                       "3:1:2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    h = 99;
    assert_int_equal(sl_defer_hop_parse(bad[i], o, sizeof o, &h), SL_EINVAL);
    assert_int_equal(h, 99);
    assert_string_equal(o, "");
  }
  assert_int_equal(sl_defer_hop_parse(NULL, o, sizeof o, &h), SL_EINVAL);
  char small[4];
  assert_int_equal(sl_defer_hop_parse("12345.6:1", small, sizeof small, &h), SL_EINVAL);
}

static void test_twin_only_of_a_newer_hop_of_the_same_input(void **state) {
  (void)state;
  assert_true(sl_defer_is_twin("0.7:2", "0.7", 1));   /* a newer copy exists */
  assert_false(sl_defer_is_twin("0.7:2", "0.7", 2));  /* it is the newest */
  assert_false(sl_defer_is_twin("0.7:2", "0.7", 3));  /* newer than the record */
  assert_false(sl_defer_is_twin("0.7:9", "0.70", 1)); /* another input (sent again) */
  assert_false(sl_defer_is_twin("junk", "0.7", 1));   /* unreadable: kept */
  assert_false(sl_defer_is_twin(NULL, "0.7", 1));
  assert_false(sl_defer_is_twin("0.7:2", "", 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slots_follow_the_line_and_the_tail),
      cmocka_unit_test(test_interval_from_the_measured_rate),
      cmocka_unit_test(test_no_sample_without_a_full_second),
      cmocka_unit_test(test_tier_by_whole_hops),
      cmocka_unit_test(test_tier_among_the_owned),
      cmocka_unit_test(test_partition_among_the_owned),
      cmocka_unit_test(test_hop_header),
      cmocka_unit_test(test_twin_only_of_a_newer_hop_of_the_same_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
