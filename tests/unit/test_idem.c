/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_idem.c — unit tests for the idempotency store's records (sl_idem):
 * outputs survive a pack/unpack round trip byte for byte (empty values and
 * binary ones included), a malformed record or one that overflows the
 * outbox leaves the outbox empty, and keys are refused rather than cut;
 * with redis.buckets the keys of one input share a cluster slot, and
 * without they are today's names byte for byte.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

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
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", "s1/3", dg), 0);
  assert_string_equal(k, "sl:idem:stt:s1/3:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_claim_key(k, sizeof k, NULL, "grade", "s1/3", dg), 0);
  assert_string_equal(k, "sl:claim:grade:s1/3:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_hop_key(k, sizeof k, "", "stt", "s1/3", dg), 0);
  assert_string_equal(k, "sl:hop:stt:s1/3:0123456789abcdef0123456789abcdef");
  char small[40];
  assert_int_equal(sl_idem_key(small, sizeof small, NULL, "stt", "s1/3", dg), SL_ETOOBIG);
  assert_string_equal(small, ""); /* refused, never cut */
  /* exactly the key and its NUL fits; one byte less does not */
  char exact[49]; /* "sl:idem:stt:s1/:" (16) + 32 hex digits + NUL */
  assert_int_equal(sl_idem_key(exact, sizeof exact, NULL, "stt", "s1/", dg), 0);
  assert_string_equal(exact, "sl:idem:stt:s1/:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_key(exact, sizeof exact - 1, NULL, "stt", "s1/", dg), SL_ETOOBIG);
  /* a short digest is taken whole */
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", "s1/3", "abc"), 0);
  assert_string_equal(k, "sl:idem:stt:s1/3:abc");
  assert_int_equal(sl_idem_key(NULL, 0, NULL, "stt", "s1/3", dg), SL_ETOOBIG);
}

/* the start count's key (stage.max_starts): group, topic, partition, offset */
static void test_starts_key(void **state) {
  (void)state;
  char k[256];
  assert_int_equal(
      sl_idem_starts_key(k, sizeof k, NULL, "sluice-grade", "grade.requests", 3, 1234567), 0);
  assert_string_equal(k, "sl:starts:sluice-grade:grade.requests:3:1234567");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, NULL, "g", "t", 0, 0), 0);
  assert_string_equal(k, "sl:starts:g:t:0:0");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, NULL, "g", "t", 2147483647, INT64_MAX), 0);
  assert_string_equal(k, "sl:starts:g:t:2147483647:9223372036854775807");
  assert_int_equal(sl_idem_starts_key(k, sizeof k, NULL, "g", "t", -1, INT64_MIN), 0);
  assert_string_equal(k, "sl:starts:g:t:-1:-9223372036854775808");
  /* exactly the key and its NUL fits; one byte less does not, and is never cut */
  char exact[sizeof "sl:starts:g:t:12:345"];
  assert_int_equal(sl_idem_starts_key(exact, sizeof exact, NULL, "g", "t", 12, 345), 0);
  assert_string_equal(exact, "sl:starts:g:t:12:345");
  assert_int_equal(sl_idem_starts_key(exact, sizeof exact - 1, NULL, "g", "t", 12, 345),
                   SL_ETOOBIG);
  assert_string_equal(exact, "");
  assert_int_equal(sl_idem_starts_key(NULL, 0, NULL, "g", "t", 1, 1), SL_ETOOBIG);
}

/* redis.buckets > 0: each key carries its submission's bucket tag right
 * after "sl:<kind>:", so that an input's keys share one Redis Cluster slot;
 * back to 0 the names are today's again, byte for byte */
static void test_bucketed_keys(void **state) {
  (void)state;
  char k[256], c[256], t[256], want[256];
  const char *dg = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  assert_int_equal(sl_rkey_setup(8), 0);
  const char *tag = sl_rkey_tag(sl_rkey_bucket_of_key("s1/3"));
  assert_true(tag[0] == '{');
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", "s1/3", dg), 0);
  snprintf(want, sizeof want, "sl:idem:%sstt:s1/3:0123456789abcdef0123456789abcdef", tag);
  assert_string_equal(k, want);
  /* the caller's tag is taken as it is (the runtime's, worked out once a job) */
  assert_int_equal(sl_idem_claim_key(c, sizeof c, tag, "grade", "s1/3", dg), 0);
  snprintf(want, sizeof want, "sl:claim:%sgrade:s1/3:0123456789abcdef0123456789abcdef", tag);
  assert_string_equal(c, want);
  assert_int_equal(sl_idem_starts_key(t, sizeof t, tag, "g", "t", 1, 2), 0);
  snprintf(want, sizeof want, "sl:starts:%sg:t:1:2", tag);
  assert_string_equal(t, want);
  /* one slot for the three, whatever the stage or the key hold (a '{' of
   * theirs comes after the tag) */
  int slot = sl_slot_of(k, strlen(k));
  assert_int_equal(sl_slot_of(c, strlen(c)), slot);
  assert_int_equal(sl_slot_of(t, strlen(t)), slot);
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "st{x}", "s1/{y}", dg), 0);
  assert_int_equal(sl_slot_of(k, strlen(k)), slot);
  /* another question of the same submission: the same slot */
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", "s1/4", dg), 0);
  assert_int_equal(sl_slot_of(k, strlen(k)), slot);
  /* a submission of another bucket: another tag */
  const char *other = NULL;
  char sid[16];
  for (int i = 0; !other && i < 100; i++) {
    snprintf(sid, sizeof sid, "s%d/1", i);
    if (sl_rkey_bucket_of_key(sid) != sl_rkey_bucket_of_key("s1/3")) other = sid;
  }
  assert_non_null(other);
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", other, dg), 0);
  assert_int_not_equal(sl_slot_of(k, strlen(k)), slot);
  /* the tag counts against the buffer like the rest */
  char small[sizeof "sl:idem:stt:s1/3:abc"];
  assert_int_equal(sl_idem_key(small, sizeof small, NULL, "stt", "s1/3", "abc"), SL_ETOOBIG);
  assert_string_equal(small, "");
  /* off again: today's names */
  assert_int_equal(sl_rkey_setup(0), 0);
  assert_int_equal(sl_idem_key(k, sizeof k, NULL, "stt", "s1/3", dg), 0);
  assert_string_equal(k, "sl:idem:stt:s1/3:0123456789abcdef0123456789abcdef");
  assert_int_equal(sl_idem_starts_key(t, sizeof t, sl_rkey_tag(0), "g", "t", 1, 2), 0);
  assert_string_equal(t, "sl:starts:g:t:1:2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip), cmocka_unit_test(test_bucketed_keys),
      cmocka_unit_test(test_malformed),  cmocka_unit_test(test_keys),
      cmocka_unit_test(test_starts_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
