/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_seal.c — unit tests for sealing personal data (sl_seal): a value
 * sealed opens with the same key and aad and with nothing else; a changed
 * byte anywhere, a truncated value or another format is refused and leaves
 * nothing in the output; two seals of one value differ (their nonces: one
 * thread's share its random fixed field and count up, another thread's and
 * a forked child's have fields of their own); the
 * format is AES-256-GCM's (the GCM specification's test case 16 opens);
 * buffers too short are refused, not overrun. Each thread's contexts keep
 * the last key they were given: keys taken in turn, a refusal between, and
 * a key that differs from the held one in its last byte only, each seal
 * and open with its own key and no other.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_seal.h"

static const char aad[] = "grade.requests\0sub-1/3\0text";

static size_t unhex(const char *h, uint8_t *out) {
  size_t n = strlen(h) / 2;
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
    out[i] = (uint8_t)v;
  }
  return n;
}

static void test_round_trip(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN], sealed[256], plain[256];
  const char *v = "my unique phrase: purple elephants dance";
  size_t n = strlen(v), sl = 0, pl = 0;
  assert_int_equal(sl_seal_key_new(key), 0);
  assert_int_equal(sl_seal(key, aad, sizeof aad, v, n, sealed, sizeof sealed, &sl), 0);
  assert_int_equal(sl, n + SL_SEAL_OVERHEAD);
  assert_true(sl_seal_is_sealed(sealed, sl));
  assert_null(memmem(sealed, sl, "purple", 6)); /* the text is not in the sealed bytes */
  assert_int_equal(sl_seal_open(key, aad, sizeof aad, sealed, sl, plain, sizeof plain, &pl), 0);
  assert_int_equal(pl, n);
  assert_memory_equal(plain, v, n);
  /* an empty value seals and opens too */
  assert_int_equal(sl_seal(key, NULL, 0, "", 0, sealed, sizeof sealed, &sl), 0);
  assert_int_equal(sl, SL_SEAL_OVERHEAD);
  assert_int_equal(sl_seal_open(key, NULL, 0, sealed, sl, NULL, 0, &pl), 0);
  assert_int_equal(pl, 0);
}

static void test_keys_in_turn(void **state) {
  (void)state;
  uint8_t k1[SL_SEAL_KEY_LEN], k2[SL_SEAL_KEY_LEN], s1[128], s2[128], s3[128], plain[128];
  size_t n1 = 0, n2 = 0, n3 = 0, pl = 0;
  assert_int_equal(sl_seal_key_new(k1), 0);
  memcpy(k2, k1, sizeof k2);
  k2[SL_SEAL_KEY_LEN - 1] ^= 1; /* the held key's near twin */
  for (int round = 0; round < 2; round++) {
    assert_int_equal(sl_seal(k1, aad, sizeof aad, "one", 3, s1, sizeof s1, &n1), 0);
    assert_int_equal(sl_seal(k2, aad, sizeof aad, "two", 3, s2, sizeof s2, &n2), 0);
    assert_int_equal(sl_seal(k2, aad, sizeof aad, "three", 5, s3, sizeof s3, &n3), 0);
    assert_int_equal(sl_seal_open(k1, aad, sizeof aad, s1, n1, plain, sizeof plain, &pl), 0);
    assert_memory_equal(plain, "one", 3);
    assert_int_equal(sl_seal_open(k1, aad, sizeof aad, s2, n2, plain, sizeof plain, &pl), SL_EAUTH);
    assert_int_equal(sl_seal_open(k2, aad, sizeof aad, s1, n1, plain, sizeof plain, &pl), SL_EAUTH);
    assert_int_equal(sl_seal_open(k2, aad, sizeof aad, s2, n2, plain, sizeof plain, &pl), 0);
    assert_memory_equal(plain, "two", 3);
    assert_int_equal(sl_seal_open(k2, aad, sizeof aad, s3, n3, plain, sizeof plain, &pl), 0);
    assert_memory_equal(plain, "three", 5);
    assert_int_equal(sl_seal_open(k1, aad, sizeof aad, s1, n1, plain, sizeof plain, &pl), 0);
    assert_memory_equal(plain, "one", 3);
  }
}

static void test_other_key_or_aad_refused(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN], other[SL_SEAL_KEY_LEN], sealed[128], plain[128];
  size_t sl = 0, pl = 99;
  assert_int_equal(sl_seal_key_new(key), 0);
  assert_int_equal(sl_seal_key_new(other), 0);
  assert_memory_not_equal(key, other, sizeof key);
  assert_int_equal(sl_seal(key, aad, sizeof aad, "feedback", 8, sealed, sizeof sealed, &sl), 0);
  memset(plain, 0x5a, sizeof plain);
  assert_int_equal(sl_seal_open(other, aad, sizeof aad, sealed, sl, plain, sizeof plain, &pl),
                   SL_EAUTH);
  assert_int_equal(pl, 0);
  for (size_t i = 0; i < 8; i++) assert_true(plain[i] == 0 || plain[i] == 0x5a);
  static const char aad2[] = "grade.requests\0sub-1/4\0text"; /* another question */
  assert_int_equal(sl_seal_open(key, aad2, sizeof aad2, sealed, sl, plain, sizeof plain, &pl),
                   SL_EAUTH);
  assert_int_equal(sl_seal_open(key, NULL, 0, sealed, sl, plain, sizeof plain, &pl), SL_EAUTH);
}

static void test_any_changed_byte_refused(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN], sealed[128], plain[128];
  size_t sl = 0, pl = 0;
  assert_int_equal(sl_seal_key_new(key), 0);
  assert_int_equal(sl_seal(key, aad, sizeof aad, "transcript", 10, sealed, sizeof sealed, &sl), 0);
  for (size_t i = 0; i < sl; i++) { /* header, nonce, ciphertext and tag */
    sealed[i] ^= 0x01;
    int r = sl_seal_open(key, aad, sizeof aad, sealed, sl, plain, sizeof plain, &pl);
    assert_int_equal(r, i < 4 ? SL_EPARSE : SL_EAUTH);
    assert_int_equal(pl, 0);
    sealed[i] ^= 0x01;
  }
  /* after every refusal, with the same key held: the value as it was opens */
  assert_int_equal(sl_seal_open(key, aad, sizeof aad, sealed, sl, plain, sizeof plain, &pl), 0);
  assert_memory_equal(plain, "transcript", 10);
  /* cut short, or not sealed at all */
  assert_int_equal(sl_seal_open(key, aad, sizeof aad, sealed, sl - 1, plain, sizeof plain, &pl),
                   SL_EAUTH);
  assert_int_equal(
      sl_seal_open(key, aad, sizeof aad, sealed, SL_SEAL_OVERHEAD - 1, plain, sizeof plain, &pl),
      SL_EPARSE);
  assert_false(sl_seal_is_sealed("plain text, not sealed at all", 29));
  assert_int_equal(sl_seal_open(key, aad, sizeof aad,
                                (const uint8_t *)"plain text, not sealed at all", 29, plain,
                                sizeof plain, &pl),
                   SL_EPARSE);
  /* and it still opens, unchanged */
  assert_int_equal(sl_seal_open(key, aad, sizeof aad, sealed, sl, plain, sizeof plain, &pl), 0);
  assert_memory_equal(plain, "transcript", 10);
}

static void test_nonces_differ(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN], a[64], b[64];
  size_t al = 0, bl = 0;
  assert_int_equal(sl_seal_key_new(key), 0);
  assert_int_equal(sl_seal(key, aad, sizeof aad, "same", 4, a, sizeof a, &al), 0);
  assert_int_equal(sl_seal(key, aad, sizeof aad, "same", 4, b, sizeof b, &bl), 0);
  assert_int_equal(al, bl);
  assert_memory_not_equal(a + 4, b + 4, SL_SEAL_NONCE_LEN);
  assert_memory_not_equal(a + 4 + SL_SEAL_NONCE_LEN, b + 4 + SL_SEAL_NONCE_LEN, 4);
  /* one thread: the same fixed field, the count one up */
  assert_memory_equal(a + 4, b + 4, SL_SEAL_NONCE_LEN - 4);
  uint32_t ca = 0, cb = 0;
  for (int i = 0; i < 4; i++) {
    ca = ca << 8 | a[4 + 8 + i];
    cb = cb << 8 | b[4 + 8 + i];
  }
  assert_int_equal(cb, ca + 1);
}

static void *seal_elsewhere(void *arg) {
  static const uint8_t key[SL_SEAL_KEY_LEN] = {7};
  size_t n = 0;
  return (void *)(intptr_t)sl_seal(key, aad, sizeof aad, "same", 4, arg, 64, &n);
}

/* Another thread, and the child of a fork (which starts with a copy of the
 * forking thread's state: the same field and count, were they not drawn
 * again), seal with nonces of their own. */
static void test_nonces_elsewhere(void **state) {
  (void)state;
  static const uint8_t key[SL_SEAL_KEY_LEN] = {7};
  uint8_t mine[64], other[64], child[64], next[64];
  size_t n = 0;
  assert_int_equal(sl_seal(key, aad, sizeof aad, "same", 4, mine, sizeof mine, &n), 0);
  pthread_t t;
  void *rc = (void *)1;
  assert_int_equal(pthread_create(&t, NULL, seal_elsewhere, other), 0);
  assert_int_equal(pthread_join(t, &rc), 0);
  assert_int_equal((intptr_t)rc, 0);
  assert_memory_not_equal(mine + 4, other + 4, SL_SEAL_NONCE_LEN - 4);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    size_t cn = 0;
    int ok = sl_seal(key, aad, sizeof aad, "same", 4, child, sizeof child, &cn) == 0 &&
             write(fds[1], child, cn) == (ssize_t)cn;
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], child, sizeof child);
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(got, (ssize_t)n);
  assert_int_equal(sl_seal(key, aad, sizeof aad, "same", 4, next, sizeof next, &n), 0);
  assert_memory_not_equal(child + 4, next + 4, SL_SEAL_NONCE_LEN);
  assert_memory_not_equal(child + 4, mine + 4, SL_SEAL_NONCE_LEN - 4);
}

/* The GCM specification's test case 16 (AES-256, 96-bit IV, AAD), put in
 * the sealed format: it opens to the specification's plaintext. */
static void test_known_answer(void **state) {
  (void)state;
  uint8_t key[32], iv[12], p[64], a[20], sealed[128], out[128];
  unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key);
  unhex("cafebabefacedbaddecaf888", iv);
  size_t pn = unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
                    p);
  size_t an = unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2", a);
  memcpy(sealed, "SLS1", 4);
  memcpy(sealed + 4, iv, 12);
  size_t cn = unhex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
                    "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
                    "76fc6ece0f4e1768cddf8853bb2d551b",
                    sealed + 16);
  size_t ol = 0;
  assert_int_equal(cn, pn + SL_SEAL_TAG_LEN);
  assert_int_equal(sl_seal_open(key, a, an, sealed, 16 + cn, out, sizeof out, &ol), 0);
  assert_int_equal(ol, pn);
  assert_memory_equal(out, p, pn);
}

static void test_bounds(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN] = {1}, sealed[64], plain[64];
  size_t sl = 7, pl = 7;
  /* an output one byte short is refused, and nothing is said to be written */
  assert_int_equal(sl_seal(key, NULL, 0, "abcd", 4, sealed, 4 + SL_SEAL_OVERHEAD - 1, &sl),
                   SL_ETOOBIG);
  assert_int_equal(sl, 0);
  assert_int_equal(sl_seal(key, NULL, 0, "abcd", 4, sealed, sizeof sealed, &sl), 0);
  assert_int_equal(sl_seal_open(key, NULL, 0, sealed, sl, plain, 3, &pl), SL_ETOOBIG);
  assert_int_equal(pl, 0);
  assert_int_equal(sl_seal(NULL, NULL, 0, "abcd", 4, sealed, sizeof sealed, &sl), SL_EINVAL);
  assert_int_equal(sl_seal(key, NULL, 5, "abcd", 4, sealed, sizeof sealed, &sl), SL_EINVAL);
  assert_int_equal(
      sl_seal(key, NULL, 0, "abcd", (size_t)SL_SEAL_MAX + 1, sealed, sizeof sealed, &sl),
      SL_EINVAL);
  assert_int_equal(sl_seal_open(NULL, NULL, 0, sealed, sl, plain, sizeof plain, &pl), SL_EINVAL);
  assert_int_equal(sl_seal_key_new(NULL), SL_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_keys_in_turn),
      cmocka_unit_test(test_other_key_or_aad_refused),
      cmocka_unit_test(test_any_changed_byte_refused),
      cmocka_unit_test(test_nonces_differ),
      cmocka_unit_test(test_nonces_elsewhere),
      cmocka_unit_test(test_known_answer),
      cmocka_unit_test(test_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
