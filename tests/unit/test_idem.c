/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_idem.c — unit tests for the idempotency store's records (sl_idem):
 * outputs survive a pack/unpack round trip byte for byte (empty values and
 * binary ones included), a malformed record or one that overflows the
 * outbox leaves the outbox empty, and keys are refused rather than cut.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_idem.h"

static void test_round_trip(void **state) {
  (void)state;
  sl_outbox a = {.n = 0}, b = {.n = 0};
  const uint8_t bin[] = {0, 1, 2, 0xff, 0};
  assert_int_equal(sl_outbox_add(&a, "grade.requests", "s1/1", bin, sizeof bin), 0);
  assert_int_equal(sl_outbox_add(&a, "results", "s1/1", "", 0), 0);
  uint8_t *buf = NULL;
  size_t n = 0;
  assert_int_equal(sl_idem_pack(&a, 1234, &buf, &n), 0);
  assert_non_null(buf);
  assert_int_equal(sl_idem_unpack(buf, n, &b), 0);
  assert_int_equal(b.n, 2);
  assert_string_equal(b.items[0].topic, "grade.requests");
  assert_string_equal(b.items[0].key, "s1/1");
  assert_int_equal(b.items[0].len, sizeof bin);
  assert_memory_equal(b.items[0].value, bin, sizeof bin);
  assert_string_equal(b.items[1].topic, "results");
  assert_int_equal(b.items[1].len, 0);
  free(buf);
  /* an empty outbox packs to a record with no outputs */
  sl_outbox e = {.n = 0}, e2 = {.n = 0};
  assert_int_equal(sl_idem_pack(&e, 1, &buf, &n), 0);
  assert_int_equal(sl_idem_unpack(buf, n, &e2), 0);
  assert_int_equal(e2.n, 0);
  free(buf);
  sl_outbox_clear(&a);
  sl_outbox_clear(&b);
}

static void test_malformed(void **state) {
  (void)state;
  sl_outbox b = {.n = 0};
  const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  assert_int_equal(sl_idem_unpack(junk, sizeof junk, &b), SL_EPARSE);
  assert_int_equal(b.n, 0);
  assert_int_equal(b.failed, 0);
  /* a record of more outputs than an outbox holds: nothing half-added */
  sl_outbox big = {.n = 0};
  for (int i = 0; i < SL_OUTBOX_MAX; i++)
    assert_int_equal(sl_outbox_add(&big, "t", "k", "v", 1), 0);
  uint8_t *buf = NULL;
  size_t n = 0;
  assert_int_equal(sl_idem_pack(&big, 1, &buf, &n), 0);
  sl_outbox one = {.n = 0};
  assert_int_equal(sl_outbox_add(&one, "t", "k", "v", 1), 0); /* already holds one */
  assert_int_equal(sl_idem_unpack(buf, n, &one), SL_ETOOBIG);
  assert_int_equal(one.n, 0);
  free(buf);
  sl_outbox_clear(&big);
}

static void test_keys(void **state) {
  (void)state;
  char k[256];
  const char *dg = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  assert_int_equal(sl_idem_key(k, sizeof k, "stt", "s1/3", dg), 0);
  assert_string_equal(k, "sl:idem:stt:s1/3:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_claim_key(k, sizeof k, "grade", "s1/3", dg), 0);
  assert_string_equal(k, "sl:claim:grade:s1/3:0123456789abcdef0123456789abcdef");
  char small[40];
  assert_int_equal(sl_idem_key(small, sizeof small, "stt", "s1/3", dg), SL_ETOOBIG);
  assert_string_equal(small, ""); /* refused, never cut */
  /* exactly the key and its NUL fits; one byte less does not */
  char exact[49]; /* "sl:idem:stt:s1/:" (16) + 32 hex digits + NUL */
  assert_int_equal(sl_idem_key(exact, sizeof exact, "stt", "s1/", dg), 0);
  assert_string_equal(exact, "sl:idem:stt:s1/:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_key(exact, sizeof exact - 1, "stt", "s1/", dg), SL_ETOOBIG);
  /* a short digest is taken whole */
  assert_int_equal(sl_idem_key(k, sizeof k, "stt", "s1/3", "abc"), 0);
  assert_string_equal(k, "sl:idem:stt:s1/3:abc");
  assert_int_equal(sl_idem_key(NULL, 0, "stt", "s1/3", dg), SL_ETOOBIG);
}

/* the start count's key (stage.max_starts): group, topic, partition, offset */
static void test_starts_key(void **state) {
  (void)state;
  char k[256];
  assert_int_equal(sl_idem_starts_key(k, sizeof k, "sluice-grade", "grade.requests", 3, 1234567),
                   0);
  assert_string_equal(k, "sl:starts:sluice-grade:grade.requests:3:1234567");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, "g", "t", 0, 0), 0);
  assert_string_equal(k, "sl:starts:g:t:0:0");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, "g", "t", 2147483647, INT64_MAX), 0);
  assert_string_equal(k, "sl:starts:g:t:2147483647:9223372036854775807");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, "g", "t", -1, INT64_MIN), 0);
  assert_string_equal(k, "sl:starts:g:t:-1:-9223372036854775808");
  /* exactly the key and its NUL fits; one byte less does not, and is never cut */
  char exact[sizeof "sl:starts:g:t:12:345"];
  assert_int_equal(sl_idem_starts_key(exact, sizeof exact, "g", "t", 12, 345), 0);
  assert_string_equal(exact, "sl:starts:g:t:12:345");
  assert_int_equal(sl_idem_starts_key(exact, sizeof exact - 1, "g", "t", 12, 345), SL_ETOOBIG);
  assert_string_equal(exact, "");
  assert_int_equal(sl_idem_starts_key(NULL, 0, "g", "t", 1, 1), SL_ETOOBIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_keys),
      cmocka_unit_test(test_starts_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
