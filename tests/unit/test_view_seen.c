/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_view_seen.c — sl__view_went_back, the one rule by which materialize
 * and ingest's sweep tell that Redis lost writes they saw: a lower write
 * sequence under the same marker, or an older marker, went back; a higher
 * sequence, or a newer marker with any sequence (a rebuild numbers anew),
 * did not and is recorded; what went back is not recorded, so a reader
 * keeps refusing the old view until a rebuild sets a newer marker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lib/view.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
