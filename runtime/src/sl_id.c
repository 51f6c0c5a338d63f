/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_id.c — see sl_id.h.
 */
#include "sluice/sl_id.h"
#include "sluice/sl_err.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <string.h>

void sl_hex(const uint8_t *in, size_t n, char *out) {
  static const char hexd[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hexd[in[i] >> 4];
    out[2 * i + 1] = hexd[in[i] & 15];
  }
  out[2 * n] = '\0';
}

int sl_uuid7(int64_t ms, char out[37]) {
  unsigned char b[16];
  if (!out || ms < 0) return SL_EINVAL;
  if (RAND_bytes(b + 6, 10) != 1) return SL_ECRYPTO;
  for (int i = 0; i < 6; i++) b[i] = (unsigned char)((uint64_t)ms >> (40 - 8 * i));
  b[6] = (unsigned char)(0x70 | (b[6] & 0x0f));
  b[8] = (unsigned char)(0x80 | (b[8] & 0x3f));
  char hex[33];
  sl_hex(b, 16, hex);
  memcpy(out, hex, 8);
  out[8] = '-';
  memcpy(out + 9, hex + 8, 4);
  out[13] = '-';
  memcpy(out + 14, hex + 12, 4);
  out[18] = '-';
  memcpy(out + 19, hex + 16, 4);
  out[23] = '-';
  memcpy(out + 24, hex + 20, 12);
  out[36] = '\0';
  return 0;
}

int sl_random_hex(size_t nbytes, char *out, size_t outlen) {
  unsigned char b[64];
  if (!out || nbytes > sizeof b || outlen < 2 * nbytes + 1) return SL_EINVAL;
  if (RAND_bytes(b, (int)nbytes) != 1) return SL_ECRYPTO;
  sl_hex(b, nbytes, out);
  return 0;
}

/* SHA256() looks the algorithm up in OpenSSL 3's provider store on every
 * call (EVP_Q_digest), and EVP_Digest makes and frees a context each time:
 * the algorithm is fetched once (never freed: it lives as long as the
 * process) and each thread keeps one context, freed when the thread ends (a
 * stage hashes every input for its idempotency key). */
static EVP_MD *sha256_md;
static pthread_key_t sha256_ctx_key;
static int sha256_have_key;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static void sha256_ctx_free(void *ctx) { EVP_MD_CTX_free(ctx); }
static void sha256_fetch(void) {
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
  sha256_have_key = pthread_key_create(&sha256_ctx_key, sha256_ctx_free) == 0;
}

/* the calling thread's context, made on its first use (NULL: none) */
static EVP_MD_CTX *sha256_ctx(void) {
  if (!sha256_have_key) return NULL;
  EVP_MD_CTX *ctx = pthread_getspecific(sha256_ctx_key);
  if (!ctx && (ctx = EVP_MD_CTX_new()) != NULL && pthread_setspecific(sha256_ctx_key, ctx) != 0) {
    EVP_MD_CTX_free(ctx);
    ctx = NULL;
  }
  return ctx;
}

int sl_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  if (!out || (!data && len)) return SL_EINVAL;
  pthread_once(&sha256_once, sha256_fetch);
  EVP_MD_CTX *ctx = sha256_ctx();
  if (!sha256_md || !ctx || EVP_DigestInit_ex2(ctx, sha256_md, NULL) != 1 ||
      EVP_DigestUpdate(ctx, data, len) != 1 || EVP_DigestFinal_ex(ctx, d, NULL) != 1)
    SHA256(data, len, d); /* callers count on a digest: the slow way then */
  sl_hex(d, sizeof d, out);
  return 0;
}

int sl_secure_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la != lb) return 0;
  return CRYPTO_memcmp(a, b, la) == 0;
}
