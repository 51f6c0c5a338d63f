/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_limiter.c — unit tests for the pure parts of the shared rate limiter
 * (sl_limiter): key naming and provider validation, the prepared EVALSHA /
 * EVAL commands (the KEYS/ARGV contract the async caller relies on), reply
 * parsing, argument checks of the synchronous helpers, and that the exported
 * SHA-1 constants match the script texts. The scripts themselves run against
 * a real Redis in tests/integration/test_limiter.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

static void sha1_hex(const char *s, char out[41]) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)s, strlen(s), d);
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha1_constants_match_scripts(void **state) {
  (void)state;
  char hex[41];
  sha1_hex(sl_limiter_lua, hex);
  assert_string_equal(hex, sl_limiter_lua_sha1);
  sha1_hex(sl_limiter_pause_lua, hex);
  assert_string_equal(hex, sl_limiter_pause_lua_sha1);
  /* the take script reads Redis's clock and the pause key */
  assert_non_null(strstr(sl_limiter_lua, "redis.call('TIME')"));
  assert_non_null(strstr(sl_limiter_lua, "PTTL', KEYS[2]"));
}

static void test_keys(void **state) {
  (void)state;
  char lk[SL_LIMITER_KEY_MAX], pk[SL_LIMITER_KEY_MAX];
  assert_int_equal(sl_limiter_keys("openai-stt", lk, sizeof lk, pk, sizeof pk), 0);
  assert_string_equal(lk, "sl:limit:openai-stt");
  assert_string_equal(pk, "sl:pause:openai-stt");
  assert_int_equal(sl_limiter_keys("a.b_C-9", lk, sizeof lk, NULL, 0), 0);
  assert_string_equal(lk, "sl:limit:a.b_C-9");

  char longest[SL_LIMITER_PROVIDER_MAX + 2];
  memset(longest, 'x', sizeof longest);
  longest[SL_LIMITER_PROVIDER_MAX] = '\0';
  assert_int_equal(sl_limiter_keys(longest, lk, sizeof lk, pk, sizeof pk), 0);
  longest[SL_LIMITER_PROVIDER_MAX] = 'x';
  longest[SL_LIMITER_PROVIDER_MAX + 1] = '\0';
  assert_int_equal(sl_limiter_keys(longest, lk, sizeof lk, pk, sizeof pk), SL_EINVAL);

  const char *bad[] = {"", "a b", "a{b}", "a}", "x:y", "ü", "a/b", NULL};
  for (int i = 0; bad[i]; i++)
    assert_int_equal(sl_limiter_keys(bad[i], lk, sizeof lk, pk, sizeof pk), SL_EINVAL);
  assert_int_equal(sl_limiter_keys(NULL, lk, sizeof lk, pk, sizeof pk), SL_EINVAL);

  char small[8];
  assert_int_equal(sl_limiter_keys("openai", small, sizeof small, NULL, 0), SL_ETOOBIG);
  assert_string_equal(small, "");
}

static void test_prepare_take(void **state) {
  (void)state;
  sl_limiter_cmd c;
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 20, 1, 2.5), 0);
  assert_int_equal(c.argc, 8);
  assert_string_equal(c.argv[0], "EVALSHA");
  assert_string_equal(c.argv[1], sl_limiter_lua_sha1);
  assert_string_equal(c.argv[2], "2");
  assert_string_equal(c.argv[3], "sl:limit:llm");
  assert_string_equal(c.argv[4], "sl:pause:llm");
  assert_string_equal(c.argv[5], "20");
  assert_string_equal(c.argv[6], "1");
  assert_string_equal(c.argv[7], "2.5");
  sl_limiter_use_eval(&c);
  assert_string_equal(c.argv[0], "EVAL");
  assert_ptr_equal(c.argv[1], sl_limiter_lua);
  assert_string_equal(c.argv[3], "sl:limit:llm");

  /* fractional rates survive formatting exactly */
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 0.1, 1.5, 1), 0);
  assert_true(strtod(c.argv[5], NULL) == 0.1);
  assert_true(strtod(c.argv[6], NULL) == 1.5);

  assert_int_equal(sl_limiter_prepare_take(NULL, "llm", 1, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "bad key", 1, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 0, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", -1, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", NAN, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", INFINITY, 1, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 1, 0.5, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 1, 1, 0), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take(&c, "llm", 1, 1, NAN), SL_EINVAL);
  assert_int_equal(c.argc, 0);
}

static void test_prepare_pause(void **state) {
  (void)state;
  sl_limiter_cmd c;
  assert_int_equal(sl_limiter_prepare_pause(&c, "stt", 2000), 0);
  assert_int_equal(c.argc, 5);
  assert_string_equal(c.argv[0], "EVALSHA");
  assert_string_equal(c.argv[1], sl_limiter_pause_lua_sha1);
  assert_string_equal(c.argv[2], "1");
  assert_string_equal(c.argv[3], "sl:pause:stt");
  assert_string_equal(c.argv[4], "2000");
  sl_limiter_use_eval(&c);
  assert_ptr_equal(c.argv[1], sl_limiter_pause_lua);
  /* clamped to an hour */
  assert_int_equal(sl_limiter_prepare_pause(&c, "stt", INT64_MAX), 0);
  assert_string_equal(c.argv[4], "3600000");
  assert_int_equal(sl_limiter_prepare_pause(&c, "stt", 0), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_pause(&c, "", 10), SL_EINVAL);
  sl_limiter_use_eval(NULL);
}

static void test_parse_reply(void **state) {
  (void)state;
  char err[128];
  int64_t v = -1;
  redisReply r;
  memset(&r, 0, sizeof r);

  r.type = REDIS_REPLY_INTEGER;
  r.integer = 0;
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), 0);
  assert_int_equal(v, 0);
  r.integer = 47;
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), 0);
  assert_int_equal(v, 47);
  assert_int_equal(sl_limiter_parse_reply(&r, NULL, NULL, 0), 0);

  r.integer = -2;
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), SL_EREDIS);

  char noscript[] = "NOSCRIPT No matching script. Please use EVAL.";
  r.type = REDIS_REPLY_ERROR;
  r.str = noscript;
  r.len = strlen(noscript);
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), SL_ENOTFOUND);

  char bad[] = "ERR sl_limiter: rate must be a number > 0";
  r.str = bad;
  r.len = strlen(bad);
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), SL_EREDIS);
  assert_non_null(strstr(err, "rate must be"));
  char tiny[6];
  assert_int_equal(sl_limiter_parse_reply(&r, &v, tiny, sizeof tiny), SL_EREDIS);
  assert_int_equal(strlen(tiny), 5);

  char status[] = "OK";
  r.type = REDIS_REPLY_STATUS;
  r.str = status;
  r.len = 2;
  assert_int_equal(sl_limiter_parse_reply(&r, &v, err, sizeof err), SL_EREDIS);
  assert_int_equal(sl_limiter_parse_reply(NULL, &v, err, sizeof err), SL_EREDIS);
}

static void test_sync_helpers_check_arguments(void **state) {
  (void)state;
  /* sl_redis_new does not connect, so argument errors never reach the wire */
  sl_redis *r = NULL;
  assert_int_equal(sl_redis_new(&r, "redis://127.0.0.1:1"), 0);
  char err[128];
  int64_t w = 5;
  assert_int_equal(sl_limiter_take(NULL, "p", 1, 1, 1, &w, err, sizeof err), SL_EINVAL);
  assert_int_equal(w, 0);
  assert_int_equal(sl_limiter_take(r, "p", 0, 1, 1, &w, err, sizeof err), SL_EINVAL);
  assert_int_equal(sl_limiter_take(r, "p q", 1, 1, 1, &w, NULL, 0), SL_EINVAL);
  assert_int_equal(sl_limiter_pause(r, "p", -5, err, sizeof err), SL_EINVAL);
  assert_int_equal(sl_limiter_pause(NULL, "p", 5, err, sizeof err), SL_EINVAL);
  /* nothing listens on port 1: a Redis error, not a crash */
  assert_int_equal(sl_limiter_take(r, "p", 1, 1, 1, &w, err, sizeof err), SL_EREDIS);
  assert_true(strlen(err) > 0);
  assert_int_equal(sl_limiter_pause(r, "p", 5, NULL, 0), SL_EREDIS);
  sl_redis_free(r);
}

/* Limiter buckets (provider.limit_buckets) and Redis Cluster names
 * (redis.buckets): K keys of rate/K and burst/K; with redis.buckets the
 * provider is the hash tag, so that the take script's keys share a slot
 * (K = 1), or each bucket has its own slot and the script leaves the pause
 * out (K > 1). Unbucketed, K = 1 is today's command byte for byte. */
static void test_buckets(void **state) {
  (void)state;
  sl_limiter_cmd c;
  char lk[SL_LIMITER_KEY_MAX], pk[SL_LIMITER_KEY_MAX];
  assert_int_equal(sl_rkey_setup(0), 0);
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 0, 1, 20, 1, 2.5), 0);
  assert_int_equal(c.argc, 8);
  assert_string_equal(c.argv[3], "sl:limit:llm");
  assert_string_equal(c.argv[4], "sl:pause:llm");
  /* K = 4, one Redis: plain names, the pause still read by the script */
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 3, 4, 20, 10, 1), 0);
  assert_int_equal(c.argc, 8);
  assert_string_equal(c.argv[2], "2");
  assert_string_equal(c.argv[3], "sl:limit:llm:3");
  assert_string_equal(c.argv[4], "sl:pause:llm");
  assert_true(strtod(c.argv[5], NULL) == 5);   /* 20 / 4 */
  assert_true(strtod(c.argv[6], NULL) == 2.5); /* 10 / 4 */
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 0, 4, 20, 2, 1), 0);
  assert_true(strtod(c.argv[6], NULL) == 1); /* burst at least 1 */
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 4, 4, 20, 2, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 0, 0, 20, 2, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", -1, 4, 20, 2, 1), SL_EINVAL);
  /* a cluster, K = 1: the provider is the tag, both keys in one slot */
  assert_int_equal(sl_rkey_setup(8), 0);
  assert_int_equal(sl_limiter_keys("llm", lk, sizeof lk, pk, sizeof pk), 0);
  assert_string_equal(lk, "sl:limit:{llm}");
  assert_string_equal(pk, "sl:pause:{llm}");
  assert_int_equal(sl_slot_of(lk, strlen(lk)), sl_slot_of(pk, strlen(pk)));
  assert_int_equal(sl_limiter_pause_in_take(1), 1);
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 0, 1, 20, 1, 1), 0);
  assert_int_equal(c.argc, 8);
  /* K = 4: a slot per bucket, and the script without the pause key */
  int slots[4];
  for (int k = 0; k < 4; k++) {
    assert_int_equal(sl_limiter_keys_of("llm", k, 4, lk, sizeof lk, pk, sizeof pk), 0);
    char want[32];
    snprintf(want, sizeof want, "sl:limit:{llm:%d}", k);
    assert_string_equal(lk, want);
    assert_string_equal(pk, "sl:pause:{llm}"); /* one pause per provider */
    slots[k] = sl_slot_of(lk, strlen(lk));
  }
  assert_true(slots[0] != slots[1] || slots[1] != slots[2] || slots[2] != slots[3]);
  assert_int_equal(sl_limiter_pause_in_take(4), 0);
  assert_int_equal(sl_limiter_prepare_take_of(&c, "llm", 2, 4, 20, 8, 1), 0);
  assert_int_equal(c.argc, 7);
  assert_string_equal(c.argv[2], "1");
  assert_string_equal(c.argv[3], "sl:limit:{llm:2}");
  assert_true(strtod(c.argv[4], NULL) == 5);
  assert_true(strtod(c.argv[5], NULL) == 2);
  assert_string_equal(c.argv[6], "1");
  /* the longest provider and bucket fit the key buffer */
  char longest[SL_LIMITER_PROVIDER_MAX + 1];
  memset(longest, 'x', SL_LIMITER_PROVIDER_MAX);
  longest[SL_LIMITER_PROVIDER_MAX] = '\0';
  assert_int_equal(sl_limiter_prepare_take_of(&c, longest, SL_LIMITER_MAX_BUCKETS - 1,
                                              SL_LIMITER_MAX_BUCKETS, 20, 1, 1),
                   0);
  assert_int_equal(sl_rkey_setup(0), 0);
  /* a replica's bucket is in range and stable */
  int b = sl_limiter_replica_bucket(7);
  assert_true(b >= 0 && b < 7);
  assert_int_equal(sl_limiter_replica_bucket(7), b);
  assert_int_equal(sl_limiter_replica_bucket(1), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buckets),
      cmocka_unit_test(test_sha1_constants_match_scripts),
      cmocka_unit_test(test_keys),
      cmocka_unit_test(test_prepare_take),
      cmocka_unit_test(test_prepare_pause),
      cmocka_unit_test(test_parse_reply),
      cmocka_unit_test(test_sync_helpers_check_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
