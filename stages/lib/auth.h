/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/auth.h — who is calling: API keys, JWTs and results tokens (internal to
 * presign and results).
 *
 * A caller presents "Authorization: Bearer <credential>":
 *   - an API key "slk_<64 hex>" issued by `sluicectl apikey add`; only its
 *     SHA-256 is stored, in Redis (sl:apikey:<hex> -> user, label,
 *     created_ms). The keys are 256 random bits, so a fast hash is enough:
 *     there is nothing to guess (docs/security.md);
 *   - a JWT signed HS256 (auth.jwt_hs256_secret) or RS256
 *     (auth.jwt_rs256_public_key_file) by the operator's identity service;
 *     the user is its auth.jwt_user_claim ("sub");
 *   - for reading one submission: that submission's results token. The
 *     stored hash covers submission id, user and token, so a token is bound
 *     to the one submission and user it was issued for.
 *
 * @locality the functions here are pure or read only the sl__auth object:
 * any thread. The Redis lookup of API keys is the caller's (presign is
 * async, results sync).
 */
#ifndef SLUICE_LIB_AUTH_H
#define SLUICE_LIB_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_http.h"
#include "sluice/sl_rkey.h"

#define SL__USER_MAX 128  /* bytes of a user id, without the NUL */
#define SL__APIKEY_LEN 68 /* "slk_" + 64 hex */

typedef struct {
  char *jwt_hs256_secret;
  char *jwt_rs256_public_key_file;
  char *jwt_issuer;
  char *jwt_audience;
  char *jwt_user_claim;
  char *jwt_tenant_claim;
  int64_t jwt_leeway_s;
  int64_t jwt_max_lifetime_s;
} sl__auth_conf;

extern const sl_conf_entry sl__auth_table[];
extern const size_t sl__auth_table_len;

typedef struct sl__auth sl__auth;

/* Reads the RS256 public key file when one is configured. 0, or SL_ECONFIG with
 * err set. */
int sl__auth_new(sl__auth **out, const sl__auth_conf *c, char *err, size_t errlen);
void sl__auth_free(sl__auth *a); /* NULL-safe */

typedef enum {
  SL__CRED_NONE = 0, /* no Authorization: Bearer header */
  SL__CRED_APIKEY,   /* slk_… */
  SL__CRED_JWT,      /* three base64url parts */
  SL__CRED_OTHER     /* anything else (a results token, or garbage) */
} sl__cred_kind;

/* The bearer credential of req (NULL when absent) and its kind. */
const char *sl__auth_bearer(const sl_http_req *req, sl__cred_kind *kind);

/* Verifies a JWT: signature with the configured key of its own algorithm
 * (HS256 or RS256 only; "none" and every other alg are refused, and so is
 * an alg whose key is not configured), exp (required), nbf, iat no later
 * than now (with leeway), lifetime at most jwt_max_lifetime_s, iss and aud
 * when configured. The user claim must be a valid user id, and so must the
 * tenant claim when auth.jwt_tenant_claim names one (else the tenant is the
 * user: sl_tenant.h). 0 with user and tenant set, or SL_EAUTH with why set
 * (safe to show the caller: never the token). */
int sl__auth_jwt(const sl__auth *a, const char *jwt, int64_t now_s, char user[SL__USER_MAX + 1],
                 char tenant[SL__USER_MAX + 1], char *why, size_t whylen);

/* Where `sluicectl apikey revoke` publishes the Redis key of each record it
 * deletes (in the same script), so that presign's cache drops it at once
 * (stages/presign/keycache.h). */
#define SL__APIKEY_REVOKED_CHANNEL "sl:apikey:revoked"

/* The key store's marker: set by presign once the store holds every record
 * of the API-key topic (stages/presign/keystore.h); missing after Redis lost
 * its data, and until then an unknown key is "not known yet" (503
 * auth_unavailable), not "revoked" (401). Outside sl:apikey:* so that the
 * SCANs of sluicectl apikey never take it for a key.
 *
 * Redis Cluster (redis.buckets > 0): a lookup reads a record and the marker
 * in one script, and the rebuild's end deletes the lock and sets the marker
 * in one, so the records, the marker and the lock share the hash tag
 * SL__APIKEY_TAG: sl:apikey:{ak}<hex>, sl:apikeys:{ak}epoch,
 * sl:lock:{ak}apikey-rebuild. One slot holds every API key: the marker
 * then speaks for exactly the records it sits beside (a primary that lost
 * its data lost both), and sluicectl's SCAN has one node to ask. The
 * lookups are few (presign caches them, keycache.h). With redis.buckets = 0
 * the names are the plain ones. The names follow sl_rkey_setup. */
#define SL__APIKEY_TAG "{ak}"
#define SL__APIKEY_MARKER (sl__apikey_marker())
#define SL__APIKEY_LOCK (sl__apikey_lock())
static inline const char *sl__apikey_marker(void) {
  return sl_rkey_bucketed() ? "sl:apikeys:" SL__APIKEY_TAG "epoch" : "sl:apikeys:epoch";
}
static inline const char *sl__apikey_lock(void) {
  return sl_rkey_bucketed() ? "sl:lock:" SL__APIKEY_TAG "apikey-rebuild" : "sl:lock:apikey-rebuild";
}
/* "sl:apikey:", then SL__APIKEY_TAG when bucketed: what precedes the hex
 * digest in a record's key (its length: where the digest begins). */
static inline const char *sl__apikey_prefix(void) {
  return sl_rkey_bucketed() ? "sl:apikey:" SL__APIKEY_TAG : "sl:apikey:";
}
/* The record's key from the key's digest (64 hex digits). */
static inline void sl__apikey_rkey_of(const char *hex, char out[80]) {
  snprintf(out, 80, "%s%.64s", sl__apikey_prefix(), hex);
}

/* The lookup of an API key (KEYS: its record, SL__APIKEY_MARKER): its user
 * (a string), else 1 when the store is complete (unknown or revoked: 401)
 * or 0 when it is being rebuilt (503 auth_unavailable: the key may be
 * valid). One script, so a rebuild finishing in between cannot turn a
 * valid key into a 401. */
#define SL__APIKEY_LOOKUP_LUA                                                                      \
  "local u = redis.call('HGET', KEYS[1], 'user')\n"                                                \
  "if u then return u end\n"                                                                       \
  "return redis.call('EXISTS', KEYS[2])\n"
#define SL__APIKEY_UNAVAILABLE                                                                     \
  "the API-key store is being rebuilt after a storage loss; retry later (the key was not "         \
  "refused)"

/* Redis key holding an API key's record: "sl:apikey:<sha256 hex>" (with
 * SL__APIKEY_TAG after the prefix when bucketed). 0, or SL_EAUTH when key
 * is not shaped like an API key. */
int sl__apikey_rkey(const char *key, char out[80]);

/* 1 when u is 1..SL__USER_MAX bytes of printable ASCII without spaces. */
int sl__user_valid(const char *u);

/* The stored form of a results token: hex SHA-256 over
 * "sluice-results-v1\0<sid>\0<user>\0<token>". */
int sl__results_token_hash(const char *sid, const char *user, const char *token, char out[65]);

#endif
