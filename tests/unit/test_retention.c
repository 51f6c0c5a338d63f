/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_retention.c — the erase stage's settings and names (stages/erase,
 * lib/erase.h): per-tenant retentions are JSON whose every kind is
 * audio_s, derived_s or results_s and a whole number >= 0, anything else
 * refused at start-up with the reason; the sweep's interval and batch must
 * be positive; a message that is no SubmissionCreated is refused before
 * Redis is touched; the erasure's state record is named by the data key's
 * digest (never the id) and refuses what is no submission id.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "erase/retention.h"
#include "lib/erase.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"

static const char sid[] = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d";

static int check(const char *tenants, int64_t interval, char *err, size_t errlen) {
  sl__retention_conf rc = {.seconds = {0, 0, 0}, .interval_s = interval, .batch = 10};
  rc.tenants = (char *)tenants;
  int r = sl__retention_check(&rc, err, errlen);
  sl__retention_conf_release(&rc);
  return r;
}

static void test_tenants(void **state) {
  (void)state;
  char err[256] = "";
  assert_int_equal(check("", 60, err, sizeof err), 0);
  assert_int_equal(
      check("{\"school-a\": {\"audio_s\": 20, \"results_s\": 35}, \"b\": {\"derived_s\": 0}}", 60,
            err, sizeof err),
      0);
  static const char *const bad[] = {
      "[1, 2]",                        /* not an object */
      "{\"a\": 5}",                    /* a tenant that is no object */
      "{\"a\": {\"video_s\": 5}}",     /* no such kind */
      "{\"a\": {\"audio\": 5}}",       /* the kind without _s */
      "{\"a\": {\"audio_s\": -1}}",    /* negative */
      "{\"a\": {\"audio_s\": \"5\"}}", /* not a number */
      "{\"a\": {\"audio_s\": 1.5}}",   /* not whole */
      "{\"a\": {\"results_sx\": 5}}",  /* a longer name */
      "{\"a\": {\"audio_s\": 5}",      /* not JSON */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    assert_int_equal(check(bad[i], 60, err, sizeof err), SL_ECONFIG);
    assert_non_null(strstr(err, "erase.retention_tenants"));
  }
  assert_int_equal(check("", 0, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "sweep_interval_s"));
}

static void test_not_a_submission(void **state) {
  (void)state;
  sl__retention_conf rc = {.seconds = {60, 0, 0}, .interval_s = 1, .batch = 1};
  char err[256] = "";
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
  /* Redis NULL: refused before any command */
  assert_int_equal(sl__retention_index(&rc, NULL, junk, sizeof junk, err, sizeof err), SL_EINVAL);
  assert_non_null(strstr(err, "not a submission"));
  assert_int_equal(sl__retention_index(&rc, NULL, "", 0, err, sizeof err), SL_EINVAL);
}

static void test_record_name(void **state) {
  (void)state;
  char rkey[SL__ERASURE_RKEY_MAX], dk[SL_DKEY_RKEY_MAX];
  assert_int_equal(sl__erasure_rkey(sid, rkey), 0);
  assert_int_equal(sl_dkey_rkey(sid, dk), 0);
  assert_string_equal(rkey + strlen("sl:erasure:"), dk + strlen("sl:dk:"));
  assert_null(strstr(rkey, sid));
  assert_int_equal(strncmp(rkey, "sl:erasure:", 11), 0);
  assert_int_equal(sl__erasure_rkey("a/b", rkey), SL_EINVAL);
  assert_int_equal(sl__erasure_rkey("", rkey), SL_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tenants),
      cmocka_unit_test(test_not_a_submission),
      cmocka_unit_test(test_record_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
