/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_auth.c — stages/lib/auth: JWT verification (signature, algorithm,
 * claims), API key shape and lookup key, user ids, results-token binding.
 * Tokens are built here with OpenSSL (HMAC-SHA256, RSA PKCS#1 v1.5), not
 * with libjwt, so the verifier is checked against an independent signer.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "lib/auth.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef-test";
static const int64_t NOW = 1800000000;
static char pub_path[64];
static EVP_PKEY *rsa;

static void b64url(const unsigned char *in, size_t n, char *out) {
  unsigned char tmp[4096];
  int l = EVP_EncodeBlock(tmp, in, (int)n);
  int o = 0;
  for (int i = 0; i < l; i++) {
    if (tmp[i] == '=') break;
    out[o++] = tmp[i] == '+' ? '-' : tmp[i] == '/' ? '_' : (char)tmp[i];
  }
  out[o] = '\0';
}

/* mode: "hs" (SECRET), "hs-wrong", "rs", "none", "hs-pub" (the PEM file's bytes as HMAC key) */
static void make(char *out, const char *alg, const char *claims, const char *mode) {
  char hdr[128], h64[256], p64[2048], signing[2400], s64[1024] = "";
  snprintf(hdr, sizeof hdr, "{\"alg\":\"%s\",\"typ\":\"JWT\"}", alg);
  b64url((const unsigned char *)hdr, strlen(hdr), h64);
  b64url((const unsigned char *)claims, strlen(claims), p64);
  snprintf(signing, sizeof signing, "%s.%s", h64, p64);
  unsigned char sig[512];
  unsigned int sl = 0;
  if (strncmp(mode, "hs", 2) == 0) {
    char key[4096];
    size_t kl;
    if (strcmp(mode, "hs-pub") == 0) {
      FILE *f = fopen(pub_path, "rb");
      kl = fread(key, 1, sizeof key, f);
      fclose(f);
    } else {
      const char *k = strcmp(mode, "hs") == 0 ? SECRET : "another-secret-another-secret-00";
      kl = strlen(k);
      memcpy(key, k, kl);
    }
    HMAC(EVP_sha256(), key, (int)kl, (const unsigned char *)signing, strlen(signing), sig, &sl);
    b64url(sig, sl, s64);
  } else if (strcmp(mode, "rs") == 0) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    size_t n = sizeof sig;
    assert_int_equal(EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, rsa), 1);
    assert_int_equal(EVP_DigestSign(c, sig, &n, (const unsigned char *)signing, strlen(signing)),
                     1);
    EVP_MD_CTX_free(c);
    b64url(sig, n, s64);
  }
  sprintf(out, "%s.%s", signing, s64);
}

static sl__auth_conf conf(void) {
  sl__auth_conf c = {.jwt_hs256_secret = (char *)SECRET,
                     .jwt_rs256_public_key_file = pub_path,
                     .jwt_issuer = (char *)"https://login.example",
                     .jwt_audience = (char *)"sluice",
                     .jwt_user_claim = (char *)"sub",
                     .jwt_tenant_claim = (char *)"",
                     .jwt_leeway_s = 60,
                     .jwt_max_lifetime_s = 86400};
  return c;
}

static char tenant[SL__USER_MAX + 1]; /* the last verify's */

static int verify(const sl__auth_conf *c, const char *tok, char user[SL__USER_MAX + 1]) {
  sl__auth *a = NULL;
  char err[256], why[160];
  assert_int_equal(sl__auth_new(&a, c, err, sizeof err), 0);
  int rc = sl__auth_jwt(a, tok, NOW, user, tenant, why, sizeof why);
  if (rc != 0) print_message("refused: %s\n", why);
  sl__auth_free(a);
  return rc;
}

#define CLAIMS(extra)                                                                              \
  "{\"sub\":\"alice\",\"iss\":\"https://"                                                          \
  "login.example\",\"aud\":\"sluice\",\"exp\":1800000600" extra "}"

static void jwt_accepts_valid_tokens(void **st) {
  (void)st;
  sl__auth_conf c = conf();
  char tok[4096], user[SL__USER_MAX + 1];
  make(tok, "HS256", CLAIMS(""), "hs");
  assert_int_equal(verify(&c, tok, user), 0);
  assert_string_equal(user, "alice");
  make(tok, "RS256", CLAIMS(",\"iat\":1800000000"), "rs");
  assert_int_equal(verify(&c, tok, user), 0);
  assert_string_equal(user, "alice");
  /* aud as an array containing ours; exp within the leeway */
  make(tok, "HS256",
       "{\"sub\":\"bob@example.com\",\"iss\":\"https://login.example\",\"aud\":[\"x\",\"sluice\"],"
       "\"exp\":1799999950}",
       "hs");
  assert_int_equal(verify(&c, tok, user), 0);
  assert_string_equal(user, "bob@example.com");
  assert_string_equal(tenant, "bob@example.com"); /* no tenant claim: the user */
}

/* auth.jwt_tenant_claim names the tenant; a token without it (or with one
 * that is not an id) is refused, not counted as the user's */
static void jwt_tenant_claim(void **st) {
  (void)st;
  sl__auth_conf c = conf();
  c.jwt_tenant_claim = (char *)"org";
  char tok[4096], user[SL__USER_MAX + 1];
  make(tok, "HS256", CLAIMS(",\"org\":\"school-7\""), "hs");
  assert_int_equal(verify(&c, tok, user), 0);
  assert_string_equal(user, "alice");
  assert_string_equal(tenant, "school-7");
  make(tok, "HS256", CLAIMS(""), "hs");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  assert_string_equal(tenant, "");
  make(tok, "HS256", CLAIMS(",\"org\":\"two words\""), "hs");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  make(tok, "HS256", CLAIMS(",\"org\":7"), "hs");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  /* a claim name that is not one is a configuration error */
  sl__auth *a = NULL;
  char err[256];
  c.jwt_tenant_claim = (char *)"has space";
  assert_int_equal(sl__auth_new(&a, &c, err, sizeof err), SL_ECONFIG);
  assert_null(a);
}

static void jwt_refuses_forgeries(void **st) {
  (void)st;
  sl__auth_conf c = conf();
  char tok[4096], user[SL__USER_MAX + 1];
  make(tok, "HS256", CLAIMS(""), "hs-wrong");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  assert_string_equal(user, "");
  make(tok, "none", CLAIMS(""), "none");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  /* the public key as an HMAC secret: RS256 keys never verify HS256 */
  make(tok, "HS256", CLAIMS(""), "hs-pub");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
  sl__auth_conf only_rs = c;
  only_rs.jwt_hs256_secret = (char *)"";
  assert_int_equal(verify(&only_rs, tok, user), SL_EAUTH);
  /* HS256 when only RS256 is configured, and the other way round */
  make(tok, "HS256", CLAIMS(""), "hs");
  assert_int_equal(verify(&only_rs, tok, user), SL_EAUTH);
  sl__auth_conf only_hs = c;
  only_hs.jwt_rs256_public_key_file = (char *)"";
  make(tok, "RS256", CLAIMS(""), "rs");
  assert_int_equal(verify(&only_hs, tok, user), SL_EAUTH);
  /* a valid RS256 token with its payload swapped keeps its signature: refused */
  char other[4096];
  make(other, "RS256",
       "{\"sub\":\"mallory\",\"iss\":\"https://login.example\",\"aud\":\"sluice\","
       "\"exp\":1800000600}",
       "rs");
  char *p1 = strchr(tok, '.'), *p2 = strchr(p1 + 1, '.');
  char *q1 = strchr(other, '.'), *q2 = strchr(q1 + 1, '.');
  char spliced[8192];
  snprintf(spliced, sizeof spliced, "%.*s%.*s%s", (int)(p1 - tok), tok, (int)(q2 - q1), q1, p2);
  assert_int_equal(verify(&c, spliced, user), SL_EAUTH);
  assert_int_equal(verify(&c, "a.b.c", user), SL_EAUTH);
  assert_int_equal(verify(&c, "not a jwt", user), SL_EAUTH);
}

static void jwt_checks_claims(void **st) {
  (void)st;
  sl__auth_conf c = conf();
  char tok[4096], user[SL__USER_MAX + 1];
  const char *bad[] = {
      /* expired beyond the leeway */
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1799999900}",
      /* no exp; exp as a string */
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"aud\":\"sluice\"}",
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":\"1800000600\"}",
      /* not yet valid */
      CLAIMS(",\"nbf\":1800000200"),
      CLAIMS(",\"iat\":1800000200"),
      CLAIMS(",\"nbf\":\"soon\""),
      /* issuer, audience */
      "{\"sub\":\"a\",\"iss\":\"https://evil.example\",\"aud\":\"sluice\",\"exp\":1800000600}",
      "{\"sub\":\"a\",\"aud\":\"sluice\",\"exp\":1800000600}",
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"aud\":[\"x\"],\"exp\":1800000600}",
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"exp\":1800000600}",
      /* times that would overflow a sum with the leeway, negative times */
      "{\"sub\":\"a\",\"iss\":\"https://"
      "login.example\",\"aud\":\"sluice\",\"exp\":9223372036854775807}",
      CLAIMS(",\"nbf\":-9223372036854775807"),
      CLAIMS(",\"iat\":-5"),
      /* lifetime over a day */
      "{\"sub\":\"a\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1800090000}",
      /* no user, a user with a space, a numeric sub, an over-long one */
      "{\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1800000600}",
      "{\"sub\":\"a b\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1800000600}",
      "{\"sub\":42,\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1800000600}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    make(tok, "HS256", bad[i], "hs");
    if (verify(&c, tok, user) != SL_EAUTH) fail_msg("accepted claims #%zu: %s", i, bad[i]);
  }
  char longsub[512];
  memset(longsub, 'u', 129);
  longsub[129] = '\0';
  char claims[1024];
  snprintf(
      claims, sizeof claims,
      "{\"sub\":\"%s\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":1800000600}",
      longsub);
  make(tok, "HS256", claims, "hs");
  assert_int_equal(verify(&c, tok, user), SL_EAUTH);
}

static void config_is_checked(void **st) {
  (void)st;
  sl__auth_conf c = conf();
  sl__auth *a = NULL;
  char err[256];
  c.jwt_hs256_secret = (char *)"short";
  assert_int_equal(sl__auth_new(&a, &c, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "32 bytes"));
  c = conf();
  c.jwt_rs256_public_key_file = (char *)"/nonexistent/key.pem";
  assert_int_equal(sl__auth_new(&a, &c, err, sizeof err), SL_ECONFIG);
  c = conf();
  c.jwt_rs256_public_key_file = (char *)"/etc/hostname"; /* not a PEM key */
  assert_int_equal(sl__auth_new(&a, &c, err, sizeof err), SL_ECONFIG);
  assert_null(a);
  sl__auth_free(NULL);
}

static void api_keys_users_tokens(void **st) {
  (void)st;
  char rk[80], rk2[80];
  const char *key = "slk_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  assert_int_equal(sl__apikey_rkey(key, rk), 0);
  char h[65];
  sl_sha256_hex(key, strlen(key), h);
  assert_string_equal(rk + 10, h);
  assert_memory_equal(rk, "sl:apikey:", 10);
  assert_int_equal(
      sl__apikey_rkey("slk_00112233445566778899aabbccddeeff00112233445566778899aabbccddeefg", rk2),
      SL_EAUTH);
  assert_int_equal(sl__apikey_rkey("slk_0011", rk2), SL_EAUTH);
  assert_int_equal(
      sl__apikey_rkey("sk_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff0", rk2),
      SL_EAUTH);
  assert_true(sl__user_valid("alice"));
  assert_true(sl__user_valid("auth0|5f7c8ec7c33c6c004bbafe82"));
  assert_false(sl__user_valid(""));
  assert_false(sl__user_valid("a b"));
  assert_false(sl__user_valid("a\nb"));
  /* the token hash binds submission and user */
  char t1[65], t2[65], t3[65], t4[65];
  sl__results_token_hash("sid-1", "alice", "tok", t1);
  sl__results_token_hash("sid-2", "alice", "tok", t2);
  sl__results_token_hash("sid-1", "bob", "tok", t3);
  sl__results_token_hash("sid-1", "alice", "tok", t4);
  assert_string_not_equal(t1, t2);
  assert_string_not_equal(t1, t3);
  assert_string_equal(t1, t4);
  /* no ambiguity between fields: ("ab","c") differs from ("a","bc") */
  sl__results_token_hash("ab", "c", "tok", t2);
  sl__results_token_hash("a", "bc", "tok", t3);
  assert_string_not_equal(t2, t3);
}

static int setup(void **st) {
  (void)st;
  rsa = EVP_RSA_gen(2048);
  if (!rsa) return -1;
  snprintf(pub_path, sizeof pub_path, "/tmp/sluice-test-auth-%d.pem", (int)getpid());
  FILE *f = fopen(pub_path, "wb");
  if (!f || PEM_write_PUBKEY(f, rsa) != 1) return -1;
  fclose(f);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  unlink(pub_path);
  EVP_PKEY_free(rsa);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(jwt_accepts_valid_tokens), cmocka_unit_test(jwt_tenant_claim),
      cmocka_unit_test(jwt_refuses_forgeries),    cmocka_unit_test(jwt_checks_claims),
      cmocka_unit_test(config_is_checked),        cmocka_unit_test(api_keys_users_tokens),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
