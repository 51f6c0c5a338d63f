/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c — credential checks for presign and results (see auth.h).
 *
 * JWTs go through libjwt (Debian's libjwt 1.10, OpenSSL flavour). libjwt
 * verifies with whatever algorithm the token's header names, so the header
 * is read first without a key, the key of that algorithm is picked from
 * configuration (HS256 secret or RS256 public key; nothing else), the token
 * is decoded again with it, and the algorithm is checked once more: an
 * RS256 public key is never used as an HMAC secret, and "none" never passes.
 * libjwt 1.10 has no claim validation, so exp/nbf/iat/iss/aud are checked
 * here.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/auth.h"

#include <errno.h>
#include <jansson.h>
#include <jwt.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_rkey.h"

#define A(f) offsetof(sl__auth_conf, f)
const sl_conf_entry sl__auth_table[] = {
    {"auth.jwt_hs256_secret", SL_CONF_STR, "", A(jwt_hs256_secret),
     "shared secret of HS256 JWTs (empty: HS256 tokens refused); at least 32 bytes", 1},
    {"auth.jwt_rs256_public_key_file", SL_CONF_STR, "", A(jwt_rs256_public_key_file),
     "PEM file with the public key of RS256 JWTs (empty: RS256 tokens refused)", 0},
    {"auth.jwt_issuer", SL_CONF_STR, "", A(jwt_issuer),
     "required \"iss\" of JWTs (empty: not checked)", 0},
    {"auth.jwt_audience", SL_CONF_STR, "", A(jwt_audience),
     "required \"aud\" of JWTs, string or one of an array (empty: not checked)", 0},
    {"auth.jwt_user_claim", SL_CONF_STR, "sub", A(jwt_user_claim), "the JWT claim naming the user",
     0},
    {"auth.jwt_tenant_claim", SL_CONF_STR, "", A(jwt_tenant_claim),
     "the JWT claim naming the tenant whose quotas, budget and share a submission counts "
     "against (empty: the user is the tenant; an API key's tenant is its user)",
     0},
    {"auth.jwt_leeway_s", SL_CONF_INT, "60", A(jwt_leeway_s),
     "clock skew allowed on exp, nbf and iat, seconds", 0},
    {"auth.jwt_max_lifetime_s", SL_CONF_INT, "86400", A(jwt_max_lifetime_s),
     "longest accepted exp - iat (or exp - now without iat), seconds", 0},
};
const size_t sl__auth_table_len = sizeof sl__auth_table / sizeof sl__auth_table[0];

struct sl__auth {
  const sl__auth_conf *c;
  unsigned char *rsa_pem; /* the public key file's bytes, or NULL */
  size_t rsa_len;
};

/* auth.jwt_tenant_claim is set (NULL or empty: the user is the tenant) */
static int tenant_claim(const sl__auth_conf *c) {
  return c->jwt_tenant_claim && c->jwt_tenant_claim[0];
}

int sl__auth_new(sl__auth **out, const sl__auth_conf *c, char *err, size_t errlen) {
  *out = NULL;
  sl__auth *a = calloc(1, sizeof *a);
  if (!a) return SL_ENOMEM;
  a->c = c;
  size_t hl = strlen(c->jwt_hs256_secret);
  if (hl > 0 && hl < 32) {
    snprintf(err, errlen, "auth.jwt_hs256_secret must be at least 32 bytes (RFC 7518 3.2)");
    free(a);
    return SL_ECONFIG;
  }
  if (!sl__user_valid(c->jwt_user_claim) ||
      (tenant_claim(c) && !sl__user_valid(c->jwt_tenant_claim)) || c->jwt_leeway_s < 0 ||
      c->jwt_leeway_s > 3600 || c->jwt_max_lifetime_s < 60) {
    snprintf(err, errlen,
             "auth.jwt_user_claim (and auth.jwt_tenant_claim when set) must be a claim name, "
             "auth.jwt_leeway_s "
             "0..3600 and auth.jwt_max_lifetime_s at least 60");
    free(a);
    return SL_ECONFIG;
  }
  if (c->jwt_rs256_public_key_file[0]) {
    FILE *f = fopen(c->jwt_rs256_public_key_file, "rb");
    if (!f) {
      snprintf(err, errlen, "auth.jwt_rs256_public_key_file %s: %s", c->jwt_rs256_public_key_file,
               strerror(errno));
      free(a);
      return SL_ECONFIG;
    }
    a->rsa_pem = malloc(65536);
    a->rsa_len = a->rsa_pem ? fread(a->rsa_pem, 1, 65535, f) : 0;
    fclose(f);
    if (a->rsa_pem) a->rsa_pem[a->rsa_len] = '\0';
    if (!a->rsa_pem || a->rsa_len == 0 || a->rsa_len >= 65535 ||
        !strstr((const char *)a->rsa_pem, "-----BEGIN PUBLIC KEY-----")) {
      snprintf(err, errlen, "auth.jwt_rs256_public_key_file %s: not a PEM public key",
               c->jwt_rs256_public_key_file);
      sl__auth_free(a);
      return SL_ECONFIG;
    }
  }
  *out = a;
  return 0;
}

void sl__auth_free(sl__auth *a) {
  if (!a) return;
  free(a->rsa_pem);
  free(a);
}

static int b64url_part(const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return 0;
  }
  return 1;
}

static sl__cred_kind kind_of(const char *t) {
  size_t n = strlen(t);
  if (n == SL__APIKEY_LEN && strncmp(t, "slk_", 4) == 0) return SL__CRED_APIKEY;
  const char *d1 = strchr(t, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
  if (d1 && d2 && !strchr(d2 + 1, '.') && b64url_part(t, (size_t)(d1 - t)) &&
      b64url_part(d1 + 1, (size_t)(d2 - d1 - 1)) && b64url_part(d2 + 1, strlen(d2 + 1)))
    return SL__CRED_JWT;
  return SL__CRED_OTHER;
}

const char *sl__auth_bearer(const sl_http_req *req, sl__cred_kind *kind) {
  const char *h = sl_http_req_header(req, "Authorization");
  *kind = SL__CRED_NONE;
  if (!h || strncasecmp(h, "Bearer ", 7) != 0) return NULL;
  const char *t = h + 7;
  while (*t == ' ') t++;
  if (!*t) return NULL;
  *kind = kind_of(t);
  return t;
}

static int fail(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return SL_EAUTH;
}

/* aud as a string or an array of strings must contain want. */
static int aud_ok(jwt_t *j, const char *want) {
  char *js = jwt_get_grants_json(j, "aud");
  if (!js) return 0;
  json_t *v = json_loads(js, JSON_DECODE_ANY, NULL);
  free(js);
  int ok = 0;
  if (json_is_string(v)) ok = strcmp(json_string_value(v), want) == 0;
  size_t i;
  json_t *e;
  if (json_is_array(v))
    json_array_foreach(v, i, e) ok |= json_is_string(e) && strcmp(json_string_value(e), want) == 0;
  json_decref(v);
  return ok;
}

/* An integer claim: 1 present (value in *v), 0 absent, -1 present but not
 * an integer (read from the claim's JSON, whatever libjwt would coerce) or
 * not a plausible time (0..2^40 s, so sums with the leeway cannot overflow). */
static int int_claim(jwt_t *j, const char *name, long *v) {
  char *js = jwt_get_grants_json(j, name);
  if (!js) return 0;
  json_t *x = json_loads(js, JSON_DECODE_ANY, NULL);
  free(js);
  int rc = json_is_integer(x) && json_integer_value(x) >= 0 &&
                   json_integer_value(x) <= ((json_int_t)1 << 40)
               ? 1
               : -1;
  if (rc == 1) *v = (long)json_integer_value(x);
  json_decref(x);
  return rc;
}

/* The "alg" of a JWT's header: base64url -> JSON (EVP_DecodeBlock, jansson).
 * JWT_ALG_INVAL when the header cannot be read. */
static jwt_alg_t header_alg(const char *jwt) {
  const char *dot = strchr(jwt, '.');
  size_t n = dot ? (size_t)(dot - jwt) : 0;
  if (n == 0 || n > 1024) return JWT_ALG_INVAL;
  unsigned char in[1032], out[800];
  for (size_t i = 0; i < n; i++)
    in[i] = jwt[i] == '-' ? '+' : jwt[i] == '_' ? '/' : (unsigned char)jwt[i];
  size_t pad = (4 - n % 4) % 4;
  if (pad == 3) return JWT_ALG_INVAL;
  for (size_t i = 0; i < pad; i++) in[n + i] = '=';
  int len = EVP_DecodeBlock(out, in, (int)(n + pad));
  if (len < 0) return JWT_ALG_INVAL;
  len -= (int)pad; /* EVP_DecodeBlock counts the padding as zero bytes */
  json_t *h = json_loadb((const char *)out, (size_t)len, 0, NULL);
  const char *alg = json_string_value(json_object_get(h, "alg"));
  jwt_alg_t a = alg ? jwt_str_alg(alg) : JWT_ALG_INVAL;
  json_decref(h);
  return a;
}

int sl__auth_jwt(const sl__auth *a, const char *jwt, int64_t now_s, char user[SL__USER_MAX + 1],
                 char tenant[SL__USER_MAX + 1], char *why, size_t whylen) {
  user[0] = tenant[0] = '\0';
  if (strlen(jwt) > 8192) return fail(why, whylen, "token too long");
  jwt_t *j = NULL;
  /* 1. the header only: which algorithm does it claim? (libjwt reports
   * "none" for any token decoded without a key, so read it ourselves) */
  jwt_alg_t alg = header_alg(jwt);
  if (alg == JWT_ALG_INVAL) return fail(why, whylen, "malformed JWT");
  const unsigned char *key = NULL;
  int klen = 0;
  if (alg == JWT_ALG_HS256 && a->c->jwt_hs256_secret[0]) {
    key = (const unsigned char *)a->c->jwt_hs256_secret;
    klen = (int)strlen(a->c->jwt_hs256_secret);
  } else if (alg == JWT_ALG_RS256 && a->rsa_pem) {
    key = a->rsa_pem;
    klen = (int)a->rsa_len;
  } else {
    return fail(why, whylen, "JWT algorithm %s is not accepted here",
                alg == JWT_ALG_NONE ? "none"
                : jwt_alg_str(alg)  ? jwt_alg_str(alg)
                                    : "?");
  }
  /* 2. verify with that algorithm's key, and make sure it is still that one */
  if (jwt_decode(&j, jwt, key, klen) != 0 || !j || jwt_get_alg(j) != alg) {
    jwt_free(j);
    return fail(why, whylen, "JWT signature not valid");
  }
  int rc = SL_EAUTH;
  long exp, nbf, iat;
  int hexp = int_claim(j, "exp", &exp), hnbf = int_claim(j, "nbf", &nbf),
      hiat = int_claim(j, "iat", &iat);
  long leeway = (long)a->c->jwt_leeway_s;
  const char *u = jwt_get_grant(j, a->c->jwt_user_claim);
  const char *t = tenant_claim(a->c) ? jwt_get_grant(j, a->c->jwt_tenant_claim) : u;
  if (hexp != 1) {
    fail(why, whylen, "JWT has no integer exp");
  } else if (hnbf < 0 || hiat < 0) {
    fail(why, whylen, "JWT nbf/iat must be integers");
  } else if (now_s > exp + leeway) {
    fail(why, whylen, "JWT expired");
  } else if ((hnbf && now_s + leeway < nbf) || (hiat && now_s + leeway < iat)) {
    fail(why, whylen, "JWT not valid yet");
  } else if (exp - (hiat ? iat : (long)now_s) > (long)a->c->jwt_max_lifetime_s) {
    fail(why, whylen, "JWT lifetime exceeds %lld s", (long long)a->c->jwt_max_lifetime_s);
  } else if (a->c->jwt_issuer[0] &&
             (!jwt_get_grant(j, "iss") || strcmp(jwt_get_grant(j, "iss"), a->c->jwt_issuer))) {
    fail(why, whylen, "JWT issuer not accepted");
  } else if (a->c->jwt_audience[0] && !aud_ok(j, a->c->jwt_audience)) {
    fail(why, whylen, "JWT audience not accepted");
  } else if (!u || !sl__user_valid(u)) {
    fail(why, whylen, "JWT claim %s must name the user (1..%d printable characters)",
         a->c->jwt_user_claim, SL__USER_MAX);
  } else if (!t || !sl__user_valid(t)) {
    fail(why, whylen, "JWT claim %s must name the tenant (1..%d printable characters)",
         a->c->jwt_tenant_claim, SL__USER_MAX);
  } else {
    snprintf(user, SL__USER_MAX + 1, "%s", u);
    snprintf(tenant, SL__USER_MAX + 1, "%s", t);
    rc = 0;
  }
  jwt_free(j);
  return rc;
}

int sl__apikey_rkey(const char *key, char out[80]) {
  if (kind_of(key) != SL__CRED_APIKEY) return SL_EAUTH;
  for (size_t i = 4; i < SL__APIKEY_LEN; i++)
    if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f'))) return SL_EAUTH;
  char h[65];
  sl_sha256_hex(key, SL__APIKEY_LEN, h);
  sl__apikey_rkey_of(h, out);
  return 0;
}

int sl__user_valid(const char *u) {
  size_t n = strlen(u);
  if (n == 0 || n > SL__USER_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (u[i] <= 0x20 || u[i] >= 0x7f) return 0;
  return 1;
}

int sl__results_token_hash(const char *sid, const char *user, const char *token, char out[65]) {
  static const char tag[] = "sluice-results-v1";
  size_t ls = strlen(sid), lu = strlen(user), lt = strlen(token);
  size_t n = sizeof tag + ls + 1 + lu + 1 + lt;
  char *buf = malloc(n);
  if (!buf) return SL_ENOMEM;
  char *p = buf;
  memcpy(p, tag, sizeof tag), p += sizeof tag;
  memcpy(p, sid, ls + 1), p += ls + 1;
  memcpy(p, user, lu + 1), p += lu + 1;
  memcpy(p, token, lt);
  int rc = sl_sha256_hex(buf, n, out);
  free(buf);
  return rc;
}
