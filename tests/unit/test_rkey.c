/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rkey.c — unit tests for sl_slot (Redis Cluster key slots, checked
 * against the values the cluster specification and Redis's CLUSTER KEYSLOT
 * give) and sl_rkey (buckets and their tags).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

static int slot(const char *k) { return sl_slot_of(k, strlen(k)); }

static void test_slots(void **state) {
  (void)state;
  /* the specification's check value: CRC16-XMODEM("123456789") = 0x31C3 */
  assert_int_equal(sl_slot_crc16("123456789", 9), 0x31C3);
  /* what redis-server 7.0 answers to CLUSTER KEYSLOT */
  assert_int_equal(slot("foo"), 12182);
  assert_int_equal(slot("a"), 15495);
  assert_int_equal(slot("{user1000}.following"), slot("user1000"));
  assert_int_equal(slot("{user1000}.followers"), slot("{user1000}.following"));
  /* an empty tag is no tag: the whole key is hashed */
  assert_int_equal(slot("foo{}{bar}"), sl_slot_crc16("foo{}{bar}", 10) & 16383);
  /* only the first '{' and the first '}' after it count */
  assert_int_equal(slot("foo{{bar}}zap"), slot("{bar"));
  assert_int_equal(slot("foo{bar}{zap}"), slot("bar"));
  /* an unclosed brace is no tag */
  assert_int_equal(slot("foo{bar"), sl_slot_crc16("foo{bar", 7) & 16383);
}

static void test_unbucketed(void **state) {
  (void)state;
  assert_int_equal(sl_rkey_setup(0), 0);
  assert_int_equal(sl_rkey_bucketed(), 0);
  assert_int_equal(sl_rkey_buckets(), 1);
  assert_int_equal(sl_rkey_bucket("abc", 3), 0);
  assert_string_equal(sl_rkey_tag(0), "");
  assert_string_equal(sl_rkey_tag_of("abc", 3), "");
  assert_int_equal(sl_rkey_setup(-1), SL_EINVAL);
  assert_int_equal(sl_rkey_setup(SL_RKEY_MAX_BUCKETS + 1), SL_EINVAL);
}

/* every bucket's tag lands in its own slot range, and keys built with a
 * submission's tag share its slot */
static void test_buckets(void **state) {
  (void)state;
  const int ns[] = {1, 3, 16, 1024};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    int n = ns[i];
    assert_int_equal(sl_rkey_setup(n), 0);
    assert_int_equal(sl_rkey_buckets(), n);
    for (int b = 0; b < n; b++) {
      const char *t = sl_rkey_tag(b);
      assert_true(t[0] == '{' && strlen(t) < SL_RKEY_TAG_MAX);
      int s = slot(t);
      assert_true(s >= (long)b * 16384 / n && s < (long)(b + 1) * 16384 / n);
    }
    assert_string_equal(sl_rkey_tag(n), "");
    assert_string_equal(sl_rkey_tag(-1), "");
  }
  assert_int_equal(sl_rkey_setup(16), 0);
  int seen[16] = {0};
  for (int i = 0; i < 1600; i++) {
    char sid[32], a[64], b[64];
    int n = snprintf(sid, sizeof sid, "sub%05d", i);
    int bk = sl_rkey_bucket(sid, (size_t)n);
    assert_true(bk >= 0 && bk < 16);
    seen[bk]++;
    snprintf(a, sizeof a, "sl:sub:%s%s", sl_rkey_tag_of(sid, (size_t)n), sid);
    snprintf(b, sizeof b, "sl:view:seq%s", sl_rkey_tag(bk));
    assert_int_equal(slot(a), slot(b));
    snprintf(a, sizeof a, "%s/3", sid);
    assert_int_equal(sl_rkey_bucket_of_key(a), bk);
  }
  for (int b = 0; b < 16; b++) assert_true(seen[b] > 40); /* ~100 each */
  assert_int_equal(sl_rkey_setup(0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slots),
      cmocka_unit_test(test_unbucketed),
      cmocka_unit_test(test_buckets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
