/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_view_seen.c — sl__view_went_back, the one rule by which materialize
 * and ingest's sweep tell that Redis lost writes they saw: a lower write
 * sequence under the same marker, or an older marker, went back; a higher
 * sequence, or a newer marker with any sequence (a rebuild numbers anew),
 * did not and is recorded; what went back is not recorded, so a reader
 * keeps refusing the old view until a rebuild sets a newer marker.
 * And the view's keys (sl__view_key, sl__view_sub_key): today's names with
 * redis.buckets 0; with buckets, a submission's hash and its bucket's keys
 * in one Redis Cluster slot (checked with sl_slot_of).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "lib/view.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

static void test_forward(void **state) {
  (void)state;
  sl__view_seen s = {0, 0};
  assert_int_equal(sl__view_went_back(&s, 100, 5), 0); /* first read */
  assert_int_equal(s.marker, 100);
  assert_int_equal(s.seq, 5);
  assert_int_equal(sl__view_went_back(&s, 100, 5), 0); /* nothing written since */
  assert_int_equal(sl__view_went_back(&s, 100, 9), 0);
  assert_int_equal(s.seq, 9);
  /* a rebuild since: a newer marker, its sequence starts low again */
  assert_int_equal(sl__view_went_back(&s, 200, 1), 0);
  assert_int_equal(s.marker, 200);
  assert_int_equal(s.seq, 1);
}

static void test_back(void **state) {
  (void)state;
  sl__view_seen s = {100, 9};
  /* the same marker, a lower sequence: an older snapshot of this view */
  assert_int_equal(sl__view_went_back(&s, 100, 8), 1);
  assert_int_equal(s.marker, 100); /* not recorded */
  assert_int_equal(s.seq, 9);
  /* read again: still back (the sweep keeps waiting) */
  assert_int_equal(sl__view_went_back(&s, 100, 8), 1);
  /* an older marker, whatever its sequence: a snapshot of an earlier life */
  assert_int_equal(sl__view_went_back(&s, 50, 1000), 1);
  assert_int_equal(s.marker, 100);
  assert_int_equal(s.seq, 9);
  /* once materialize rebuilt it: a newer marker is trusted again */
  assert_int_equal(sl__view_went_back(&s, 300, 2), 0);
  assert_int_equal(s.marker, 300);
}

static const char *const families[] = {SL__VIEW_SEQ, SL__VIEW_APPLIED, SL__VIEW_MARKER,
                                       SL__VIEW_FEED, SL__PENDING};

static void test_keys_unbucketed(void **state) {
  (void)state;
  assert_int_equal(sl_rkey_setup(0), 0);
  char k[SL__VIEW_KEY_MAX];
  sl__view_sub_key(k, sizeof k, "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d");
  assert_string_equal(k, "sl:sub:0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d");
  assert_string_equal(sl__view_sub_sid(k), "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d");
  sl__view_key(k, sizeof k, SL__VIEW_MARKER, 0);
  assert_string_equal(k, "sl:view:epoch");
  sl__view_key(k, sizeof k, SL__PENDING, 0);
  assert_string_equal(k, "sl:pending");
  assert_null(sl__view_sub_sid("sl:view:seq"));
  assert_null(sl__view_sub_sid("sl:sub:"));
}

static void test_keys_bucketed(void **state) {
  (void)state;
  assert_int_equal(sl_rkey_setup(8), 0);
  static const char *const sids[] = {
      "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d", "a", "b", "c", "d", "e"};
  for (size_t i = 0; i < sizeof sids / sizeof sids[0]; i++) {
    char hk[SL__VIEW_KEY_MAX], k[SL__VIEW_KEY_MAX];
    sl__view_sub_key(hk, sizeof hk, sids[i]);
    assert_string_equal(sl__view_sub_sid(hk), sids[i]);
    int b = sl_rkey_bucket(sids[i], strlen(sids[i]));
    int slot = sl_slot_of(hk, strlen(hk));
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
      sl__view_key(k, sizeof k, families[f], b);
      assert_int_equal(strncmp(k, families[f], strlen(families[f])), 0);
      assert_int_equal(sl_slot_of(k, strlen(k)), slot); /* one slot: no CROSSSLOT */
    }
  }
  /* the buckets' keys lie in different slots */
  char k0[SL__VIEW_KEY_MAX], k1[SL__VIEW_KEY_MAX];
  sl__view_key(k0, sizeof k0, SL__VIEW_SEQ, 0);
  sl__view_key(k1, sizeof k1, SL__VIEW_SEQ, 1);
  assert_int_not_equal(sl_slot_of(k0, strlen(k0)), sl_slot_of(k1, strlen(k1)));
  assert_int_equal(sl_rkey_setup(0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_back),
      cmocka_unit_test(test_keys_unbucketed),
      cmocka_unit_test(test_keys_bucketed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
