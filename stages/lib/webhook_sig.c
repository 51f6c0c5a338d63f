/* SPDX-License-Identifier: Apache-2.0 */
/*
 * webhook_sig.c — the webhook signature (see webhook_sig.h): HMAC-SHA256
 * through OpenSSL's EVP_MAC, comparisons in constant time. Pure: no I/O,
 * no global state, any thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/webhook_sig.h"

#include <ctype.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"

int sl__webhook_sign(const char *secret, int64_t t, const void *body, size_t len, char out[65]) {
  char ts[24];
  int tl = snprintf(ts, sizeof ts, "%lld.", (long long)t);
  unsigned char mac[32];
  size_t maclen = 0;
  int rc = SL_ECRYPTO;
  EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = m ? EVP_MAC_CTX_new(m) : NULL;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                         OSSL_PARAM_construct_end()};
  if (ctx && EVP_MAC_init(ctx, (const unsigned char *)secret, strlen(secret), params) &&
      EVP_MAC_update(ctx, (const unsigned char *)ts, (size_t)tl) &&
      EVP_MAC_update(ctx, body, len) && EVP_MAC_final(ctx, mac, &maclen, sizeof mac) &&
      maclen == 32) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
    rc = 0;
  }
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(m);
  return rc;
}

static int hex_nibble(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* 64 hex digits -> 32 bytes; 0 or SL_EPARSE. */
static int unhex32(const char *p, size_t n, unsigned char out[32]) {
  if (n != 64) return SL_EPARSE;
  for (size_t i = 0; i < 32; i++) {
    int a = hex_nibble(p[2 * i]), b = hex_nibble(p[2 * i + 1]);
    if (a < 0 || b < 0) return SL_EPARSE;
    out[i] = (unsigned char)(a * 16 + b);
  }
  return 0;
}

#define MAX_V1 4

int sl__webhook_check_signature(const char *header, const void *body, size_t len,
                                const char *const *secrets, size_t nsecrets, int64_t now,
                                int64_t tolerance_s, int64_t *t) {
  if (!header || !secrets) return SL_EPARSE;
  long long ts = -1;
  unsigned char sigs[MAX_V1][32];
  size_t nsig = 0;
  for (const char *p = header; *p;) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    size_t n = strcspn(p, ",");
    while (n > 0 && p[n - 1] == ' ') n--;
    if (n > 2 && strncmp(p, "t=", 2) == 0) {
      if (ts >= 0 || n > 2 + 12) return SL_EPARSE;
      ts = 0;
      for (size_t i = 2; i < n; i++) {
        if (!isdigit((unsigned char)p[i])) return SL_EPARSE;
        ts = ts * 10 + (p[i] - '0');
      }
    } else if (n > 3 && strncmp(p, "v1=", 3) == 0) {
      if (nsig == MAX_V1 || unhex32(p + 3, n - 3, sigs[nsig]) != 0) return SL_EPARSE;
      nsig++;
    } /* other schemes (v0=…) are ignored, as Stripe does */
    p += n;
    while (*p && *p != ',') p++;
  }
  if (ts < 0 || nsig == 0) return SL_EPARSE;
  int match = 0;
  for (size_t k = 0; k < nsecrets; k++) {
    if (!secrets[k] || !secrets[k][0]) continue;
    char hex[65];
    unsigned char want[32];
    if (sl__webhook_sign(secrets[k], ts, body, len, hex) != 0) return SL_ECRYPTO;
    unhex32(hex, 64, want);
    for (size_t i = 0; i < nsig; i++) match |= CRYPTO_memcmp(want, sigs[i], 32) == 0;
  }
  if (!match) return SL_EINVAL;
  if (t) *t = ts;
  int64_t skew = now > ts ? now - ts : ts - now;
  return skew > tolerance_s ? SL_ETIMEDOUT : 0;
}

int sl__webhook_check_bearer(const char *authorization, const char *const *secrets,
                             size_t nsecrets) {
  if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return SL_EINVAL;
  const char *tok = authorization + 7;
  while (*tok == ' ') tok++;
  size_t tl = strlen(tok);
  int match = 0;
  for (size_t k = 0; k < nsecrets; k++) {
    if (!secrets[k] || !secrets[k][0]) continue;
    /* compare digests: equal length, so the time does not depend on where
     * (or whether) the token differs */
    char a[65], b[65];
    sl_sha256_hex(tok, tl, a);
    sl_sha256_hex(secrets[k], strlen(secrets[k]), b);
    match |= CRYPTO_memcmp(a, b, 64) == 0;
  }
  return match ? 0 : SL_EINVAL;
}
