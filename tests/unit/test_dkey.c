/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dkey.c — submissions' data keys (sl_dkey): a key made for a
 * submission comes back from its wrapped form with the same KEK and for
 * that submission only; the erased sentinel, a missing value and an error
 * reply are told apart; a KEK that is not 64 hex digits is refused; with
 * crypto off nothing is made; the Redis name carries the submission's
 * bucket tag. The thread's memo of unwrapped keys answers only for the very
 * bytes it unwrapped, under the same KEK (a new KEK failed test_round_trip
 * before the memo kept the KEK's generation).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "sluice/sl_dkey.h"
#include "sluice/sl_stage.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

static const char kek1[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
static const char kek2[] = "F00102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F";
static const char sid[] = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d";

static redisReply str_reply(const void *v, size_t n) {
  redisReply r = {0};
  r.type = REDIS_REPLY_STRING;
  r.str = (char *)v;
  r.len = n;
  return r;
}

static void test_round_trip(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  assert_true(sl_dkey_enabled());
  uint8_t dk[SL_SEAL_KEY_LEN], w[SL_DKEY_WRAPPED_LEN], back[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_dkey_new(sid, dk, w), 0);
  assert_null(memmem(w, sizeof w, dk, sizeof dk)); /* not in the clear */
  redisReply r = str_reply(w, sizeof w);
  assert_int_equal(sl_dkey_from_reply(&r, sid, back), 0);
  assert_memory_equal(dk, back, sizeof dk);
  /* another submission's name, or another KEK: it does not open */
  assert_int_equal(sl_dkey_from_reply(&r, "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6e", back), SL_EAUTH);
  assert_int_equal(sl_dkey_setup(kek2, 60), 0);
  assert_int_equal(sl_dkey_from_reply(&r, sid, back), SL_EAUTH);
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  assert_int_equal(sl_dkey_from_reply(&r, sid, back), 0);
  /* two keys differ */
  uint8_t dk2[SL_SEAL_KEY_LEN], w2[SL_DKEY_WRAPPED_LEN];
  assert_int_equal(sl_dkey_new(sid, dk2, w2), 0);
  assert_memory_not_equal(dk, dk2, sizeof dk);
}

static void test_answers(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  uint8_t dk[SL_SEAL_KEY_LEN];
  redisReply r = str_reply(SL_DKEY_ERASED, strlen(SL_DKEY_ERASED));
  assert_int_equal(sl_dkey_from_reply(&r, sid, dk), SL_EERASED);
  r = (redisReply){.type = REDIS_REPLY_NIL};
  assert_int_equal(sl_dkey_from_reply(&r, sid, dk), SL_ENOTFOUND);
  r = (redisReply){.type = REDIS_REPLY_ERROR, .str = "LOADING", .len = 7};
  assert_int_equal(sl_dkey_from_reply(&r, sid, dk), SL_EREDIS);
  assert_int_equal(sl_dkey_from_reply(NULL, sid, dk), SL_EREDIS);
  r = str_reply("short", 5);
  assert_int_equal(sl_dkey_from_reply(&r, sid, dk), SL_EAUTH);
  assert_int_equal(sl_dkey_from_reply(&r, "a/b", dk), SL_EINVAL);
}

static void test_setup_refused_and_off(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup("00ff", 60), SL_EINVAL);
  assert_int_equal(
      sl_dkey_setup("zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 60),
      SL_EINVAL);
  assert_int_equal(sl_dkey_setup(kek1, 0), SL_EINVAL);
  assert_int_equal(sl_dkey_setup("", 60), 0);
  assert_false(sl_dkey_enabled());
  uint8_t dk[SL_SEAL_KEY_LEN], w[SL_DKEY_WRAPPED_LEN];
  assert_int_equal(sl_dkey_new(sid, dk, w), SL_ESTATE);
  redisReply r = {.type = REDIS_REPLY_NIL};
  assert_int_equal(sl_dkey_from_reply(&r, sid, dk), SL_ESTATE);
}

static void test_names(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 3600), 0);
  char k[SL_DKEY_RKEY_MAX];
  assert_int_equal(sl_rkey_setup(0), 0);
  assert_int_equal(sl_dkey_rkey(sid, k), 0);
  char hex[65];
  assert_int_equal(sl_sha256_hex(sid, strlen(sid), hex), 0);
  hex[32] = '\0';
  char want0[SL_DKEY_RKEY_MAX];
  snprintf(want0, sizeof want0, "sl:dk:%s", hex);
  assert_string_equal(k, want0); /* the id itself is not in it */
  assert_null(strstr(k, sid));
  assert_int_equal(sl_rkey_setup(16), 0);
  assert_int_equal(sl_dkey_rkey(sid, k), 0);
  char want[SL_DKEY_RKEY_MAX];
  snprintf(want, sizeof want, "sl:dk:%s%s", sl_rkey_tag_of(sid, strlen(sid)), hex);
  assert_string_equal(k, want);
  assert_non_null(strchr(k, '{'));
  assert_int_equal(sl_dkey_rkey("", k), SL_EINVAL);
  assert_int_equal(sl_dkey_rkey("a/1", k), SL_EINVAL);
  char buf[SL_DKEY_RKEY_MAX + 32];
  const char *argv[6];
  assert_int_equal(sl_dkey_erase_argv(sid, buf, argv), 0);
  assert_string_equal(argv[0], "SET");
  assert_string_equal(argv[1], want);
  assert_string_equal(argv[2], SL_DKEY_ERASED);
  assert_string_equal(argv[3], "EX");
  assert_string_equal(argv[4], "3600");
  assert_int_equal(sl_rkey_setup(0), 0);
}

/* the memo: the same bytes give the same key; a new key for the same
 * submission (other bytes) is unwrapped, not taken from the memo; the
 * sentinel and a missing value answer as they do without it */
static void test_memo(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  uint8_t dk1[SL_SEAL_KEY_LEN], w1[SL_DKEY_WRAPPED_LEN], dk2[SL_SEAL_KEY_LEN],
      w2[SL_DKEY_WRAPPED_LEN], back[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_dkey_new(sid, dk1, w1), 0);
  assert_int_equal(sl_dkey_new(sid, dk2, w2), 0);
  for (int round = 0; round < 2; round++) {
    assert_int_equal(sl_dkey_open((const char *)w1, sizeof w1, sid, back), 0);
    assert_memory_equal(back, dk1, sizeof back);
    assert_int_equal(sl_dkey_open((const char *)w2, sizeof w2, sid, back), 0);
    assert_memory_equal(back, dk2, sizeof back);
  }
  assert_int_equal(sl_dkey_open(SL_DKEY_ERASED, strlen(SL_DKEY_ERASED), sid, back), SL_EERASED);
  assert_int_equal(sl_dkey_open(NULL, 0, sid, back), SL_ENOTFOUND);
  /* what a stage is told (sl_outbox.key_state) */
  assert_int_equal(sl_key_state_of(0), SL_KEY_FOUND);
  assert_int_equal(sl_key_state_of(SL_EERASED), SL_KEY_ERASED);
  assert_int_equal(sl_key_state_of(SL_ENOTFOUND), SL_KEY_MISSING);
  assert_int_equal(sl_key_state_of(SL_EAUTH), SL_KEY_INVALID);
  assert_int_equal(sl_key_state_of(SL_EREDIS), SL_KEY_UNAVAILABLE);
  /* a missing key, by the store's marker (EXISTS): complete, lost, unknown */
  redisReply one = {.type = REDIS_REPLY_INTEGER, .integer = 1};
  redisReply zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};
  redisReply err = {.type = REDIS_REPLY_ERROR, .str = "LOADING", .len = 7};
  assert_int_equal(sl_key_state_of_marker(&one), SL_KEY_NONE);
  assert_int_equal(sl_key_state_of_marker(&zero), SL_KEY_MISSING);
  assert_int_equal(sl_key_state_of_marker(&err), SL_KEY_UNAVAILABLE);
  assert_int_equal(sl_key_state_of_marker(NULL), SL_KEY_UNAVAILABLE);
  uint8_t bad[SL_DKEY_WRAPPED_LEN];
  memcpy(bad, w2, sizeof bad);
  bad[sizeof bad - 1] ^= 1; /* altered: the tag does not match */
  assert_int_equal(sl_dkey_open((const char *)bad, sizeof bad, sid, back), SL_EAUTH);
  assert_int_equal(sl_dkey_open((const char *)w2, sizeof w2, sid, back), 0);
  assert_memory_equal(back, dk2, sizeof back);
}

/* what the memo answers without Redis (sl_dkey_cached): the key last
 * opened for the submission, nothing once a lookup found the sentinel, once
 * forgotten, for another submission or after a new KEK; and the process's
 * memo is shared by its threads */
static void *open_elsewhere(void *arg) {
  uint8_t back[SL_SEAL_KEY_LEN];
  return (void *)(intptr_t)sl_dkey_open(arg, SL_DKEY_WRAPPED_LEN, sid, back);
}

static void test_cached(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  uint8_t dk[SL_SEAL_KEY_LEN], w[SL_DKEY_WRAPPED_LEN], dk2[SL_SEAL_KEY_LEN],
      w2[SL_DKEY_WRAPPED_LEN], gotw[SL_DKEY_WRAPPED_LEN], got[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_dkey_new(sid, dk, w), 0);
  sl_dkey_forget(sid);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), SL_ENOTFOUND);
  pthread_t t;
  void *rc = NULL;
  assert_int_equal(pthread_create(&t, NULL, open_elsewhere, w), 0);
  assert_int_equal(pthread_join(t, &rc), 0);
  assert_int_equal((intptr_t)rc, 0);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), 0); /* opened on another thread */
  assert_memory_equal(gotw, w, sizeof w);
  assert_memory_equal(got, dk, sizeof dk);
  assert_int_equal(sl_dkey_cached("01other", gotw, got), SL_ENOTFOUND);
  assert_int_equal(sl_dkey_cached("a/b", gotw, got), SL_EINVAL);
  sl_dkey_forget(sid);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), SL_ENOTFOUND);
  assert_int_equal(sl_dkey_open((const char *)w, sizeof w, sid, got), 0);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), 0);
  assert_int_equal(sl_dkey_open(SL_DKEY_ERASED, strlen(SL_DKEY_ERASED), sid, got), SL_EERASED);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), SL_ENOTFOUND);
  assert_int_equal(sl_dkey_open((const char *)w, sizeof w, sid, got), 0);
  assert_int_equal(sl_dkey_setup(kek2, 60), 0); /* a new KEK: what the memo holds is stale */
  assert_int_equal(sl_dkey_cached(sid, gotw, got), SL_ENOTFOUND);
  assert_int_equal(sl_dkey_new(sid, dk2, w2), 0);
  assert_int_equal(sl_dkey_open((const char *)w2, sizeof w2, sid, got), 0);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), 0);
  assert_memory_equal(got, dk2, sizeof dk2);
  assert_int_equal(sl_dkey_setup("", 60), 0);
  assert_int_equal(sl_dkey_cached(sid, gotw, got), SL_ESTATE);
}

/* The memo in sets (sl_dkey.c: 1,024 sets of 4 by the id's CRC16): five
 * submissions of one set, the first found again before the fifth comes,
 * so the second, the least recently used, is the one replaced. */
static void test_cached_lru(void **state) {
  (void)state;
  assert_int_equal(sl_dkey_setup(kek1, 60), 0);
  char ids[5][40];
  unsigned set = 0;
  int found = 0;
  for (int i = 0; found < 5 && i < 1000000; i++) {
    char id[40];
    snprintf(id, sizeof id, "0190f5a2-7c1e-7b3a-9c2d-%012d", i);
    unsigned s = sl_slot_crc16(id, strlen(id)) % 1024;
    if (found == 0) set = s;
    if (s == set) memcpy(ids[found++], id, sizeof id);
  }
  assert_int_equal(found, 5);
  uint8_t dk[5][SL_SEAL_KEY_LEN], w[5][SL_DKEY_WRAPPED_LEN], got[SL_SEAL_KEY_LEN],
      gotw[SL_DKEY_WRAPPED_LEN];
  for (int i = 0; i < 5; i++) {
    assert_int_equal(sl_dkey_new(ids[i], dk[i], w[i]), 0);
    sl_dkey_forget(ids[i]);
  }
  for (int i = 0; i < 4; i++)
    assert_int_equal(sl_dkey_open((const char *)w[i], sizeof w[i], ids[i], got), 0);
  for (int i = 0; i < 4; i++) assert_int_equal(sl_dkey_cached(ids[i], gotw, got), 0);
  assert_int_equal(sl_dkey_cached(ids[0], gotw, got), 0); /* the first, used last */
  assert_int_equal(sl_dkey_open((const char *)w[4], sizeof w[4], ids[4], got), 0);
  assert_int_equal(sl_dkey_cached(ids[4], gotw, got), 0);
  assert_memory_equal(got, dk[4], sizeof got);
  assert_int_equal(sl_dkey_cached(ids[0], gotw, got), 0);
  assert_memory_equal(got, dk[0], sizeof got);
  assert_int_equal(sl_dkey_cached(ids[1], gotw, got), SL_ENOTFOUND);
  assert_int_equal(sl_dkey_cached(ids[2], gotw, got), 0);
  assert_int_equal(sl_dkey_cached(ids[3], gotw, got), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_answers),
      cmocka_unit_test(test_setup_refused_and_off),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_memo),
      cmocka_unit_test(test_cached),
      cmocka_unit_test(test_cached_lru),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
