/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_auth.c — the credentials an attacker controls: JWTs
 * (stages/lib/auth.c, over libjwt), the webhook's X-Sluice-Signature and
 * Bearer headers (stages/lib/webhook_sig.c) and its event normalisation (stages/presign/webhook.c),
 * and API-key / user-id shapes.
 *
 * Input: byte 0 picks the part, the rest is the text:
 *   0  a JWT for sl__auth_jwt (HS256 secret and RS256 key configured)
 *   1  "<X-Sluice-Signature header>\n<body>" for sl__webhook_check_signature
 *   2  an "Authorization" value for sl__webhook_check_bearer
 *   3  an event body for sl__webhook_normalize
 *   4  a string for sl__apikey_rkey and sl__user_valid
 *
 * Oracle (abort() on violation): the secrets are random per process, so no
 * input can know them — any JWT, signature or bearer the fuzzer makes that
 * is accepted is a forgery. Failures use the documented codes only. A
 * normalised event parses with ingest's parser and has at most
 * max_records records.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/rand.h>

#include "lib/auth.h"
#include "lib/s3event.h"
#include "lib/webhook_sig.h"
#include "presign/webhook.h"
#include "sluice/sl_err.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_auth: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static sl__auth *auth;
static sl__auth_conf conf;
static char hs_secret[65], hook_secret[65];
static char pub_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  unsigned char r[32];
  static const char hx[] = "0123456789abcdef";
  if (RAND_bytes(r, sizeof r) != 1) abort();
  for (int i = 0; i < 32; i++)
    hs_secret[2 * i] = hx[r[i] >> 4], hs_secret[2 * i + 1] = hx[r[i] & 15];
  if (RAND_bytes(r, sizeof r) != 1) abort();
  for (int i = 0; i < 32; i++)
    hook_secret[2 * i] = hx[r[i] >> 4], hook_secret[2 * i + 1] = hx[r[i] & 15];
  EVP_PKEY *k = EVP_RSA_gen(2048);
  snprintf(pub_path, sizeof pub_path, "/tmp/sluice-fuzz-auth-%d.pem", (int)getpid());
  FILE *f = fopen(pub_path, "wb");
  if (!k || !f || PEM_write_PUBKEY(f, k) != 1) abort();
  fclose(f);
  EVP_PKEY_free(k);
  conf = (sl__auth_conf){.jwt_hs256_secret = hs_secret,
                         .jwt_rs256_public_key_file = pub_path,
                         .jwt_issuer = (char *)"",
                         .jwt_audience = (char *)"",
                         .jwt_user_claim = (char *)"sub",
                         .jwt_leeway_s = 60,
                         .jwt_max_lifetime_s = 86400};
  char err[256];
  if (sl__auth_new(&auth, &conf, err, sizeof err) != 0) abort();
  unlink(pub_path); /* read once, at sl__auth_new */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char *s = malloc(size); /* the text, NUL-terminated (as a header would be) */
  if (!s) return 0;
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  const char *secrets[] = {hook_secret, ""};
  switch (data[0] % 5) {
  case 0: {
    char user[SL__USER_MAX + 1], tenant[SL__USER_MAX + 1], why[160];
    int rc = sl__auth_jwt(auth, s, 1800000000, user, tenant, why, sizeof why);
    CHECK(rc == SL_EAUTH); /* nothing made without the keys verifies */
    CHECK(user[0] == '\0' && tenant[0] == '\0' && strlen(why) < sizeof why);
    break;
  }
  case 1: {
    char *nl = strchr(s, '\n');
    const char *body = nl ? nl + 1 : "";
    if (nl) *nl = '\0';
    int64_t t = 0;
    int rc = sl__webhook_check_signature(s, body, strlen(body), secrets, 2, 1800000000, 300, &t);
    CHECK(rc == SL_EPARSE || rc == SL_EINVAL);
    break;
  }
  case 2:
    CHECK(sl__webhook_check_bearer(s, secrets, 2) == SL_EINVAL);
    break;
  case 3: {
    char *out = NULL, label[512], why[256];
    size_t outlen = 0, nrec = 0;
    int rc = sl__webhook_normalize(data + 1, size - 1, 16, &out, &outlen, &nrec, label,
                                   sizeof label, why, sizeof why);
    CHECK(rc == 0 || rc == SL_EPARSE || rc == SL_ETOOBIG || rc == SL_ENOMEM);
    if (rc == 0) {
      CHECK(nrec <= 16);
      json_t *root, *recs;
      const void *b = out ? (const void *)out : (const void *)(data + 1);
      size_t bl = out ? outlen : size - 1;
      CHECK(sl__s3event_load(b, bl, &root, &recs, why, sizeof why) == 0);
      CHECK(recs ? json_array_size(recs) == nrec : nrec == 0);
      json_decref(root);
    }
    free(out);
    break;
  }
  default: {
    char rk[80];
    if (sl__apikey_rkey(s, rk) == 0) {
      CHECK(strlen(s) == SL__APIKEY_LEN && strncmp(rk, "sl:apikey:", 10) == 0 && strlen(rk) == 74);
    }
    if (sl__user_valid(s)) CHECK(strlen(s) >= 1 && strlen(s) <= SL__USER_MAX);
    break;
  }
  }
  free(s);
  return 0;
}
