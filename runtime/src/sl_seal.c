/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_seal.c — see sl_seal.h: AES-256-GCM through OpenSSL's EVP interface,
 * the cipher fetched once, one context per thread (as sl_id.c's digest).
 */
#include "sluice/sl_seal.h"
#include "sluice/sl_err.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <string.h>

static const uint8_t magic[4] = {'S', 'L', 'S', '1'};

static EVP_CIPHER *gcm;
static pthread_key_t ctx_key;
static int have_key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void ctx_free(void *ctx) { EVP_CIPHER_CTX_free(ctx); }
static void fetch(void) {
  gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
  have_key = pthread_key_create(&ctx_key, ctx_free) == 0;
}

/* the calling thread's context, made on its first use (NULL: none) */
static EVP_CIPHER_CTX *thread_ctx(void) {
  pthread_once(&once, fetch);
  if (!gcm || !have_key) return NULL;
  EVP_CIPHER_CTX *c = pthread_getspecific(ctx_key);
  if (!c && (c = EVP_CIPHER_CTX_new()) != NULL && pthread_setspecific(ctx_key, c) != 0) {
    EVP_CIPHER_CTX_free(c);
    c = NULL;
  }
  return c;
}

int sl_seal_key_new(uint8_t key[SL_SEAL_KEY_LEN]) {
  if (!key) return SL_EINVAL;
  return RAND_bytes(key, SL_SEAL_KEY_LEN) == 1 ? 0 : SL_ECRYPTO;
}

int sl_seal_is_sealed(const void *in, size_t n) {
  return in && n >= SL_SEAL_OVERHEAD && memcmp(in, magic, sizeof magic) == 0;
}

int sl_seal(const uint8_t key[SL_SEAL_KEY_LEN], const void *aad, size_t aadlen, const void *in,
            size_t n, uint8_t *out, size_t cap, size_t *outlen) {
  if (outlen) *outlen = 0;
  if (!key || !out || !outlen || (!in && n) || (!aad && aadlen) || n > SL_SEAL_MAX ||
      aadlen > SL_SEAL_MAX)
    return SL_EINVAL;
  if (cap < n + SL_SEAL_OVERHEAD) return SL_ETOOBIG;
  EVP_CIPHER_CTX *c = thread_ctx();
  if (!c) return SL_ECRYPTO;
  uint8_t *nonce = out + sizeof magic, *ct = nonce + SL_SEAL_NONCE_LEN, *tag = ct + n;
  uint8_t fin[EVP_MAX_BLOCK_LENGTH]; /* GCM's final writes nothing */
  int l = 0, ok = RAND_bytes(nonce, SL_SEAL_NONCE_LEN) == 1 &&
                  EVP_EncryptInit_ex2(c, gcm, key, nonce, NULL) == 1 &&
                  (!aadlen || EVP_EncryptUpdate(c, NULL, &l, aad, (int)aadlen) == 1) &&
                  (!n || EVP_EncryptUpdate(c, ct, &l, in, (int)n) == 1) &&
                  EVP_EncryptFinal_ex(c, fin, &l) == 1 &&
                  EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, SL_SEAL_TAG_LEN, tag) == 1;
  if (!ok) {
    OPENSSL_cleanse(out, n + SL_SEAL_OVERHEAD);
    return SL_ECRYPTO;
  }
  memcpy(out, magic, sizeof magic);
  *outlen = n + SL_SEAL_OVERHEAD;
  return 0;
}

int sl_seal_open(const uint8_t key[SL_SEAL_KEY_LEN], const void *aad, size_t aadlen,
                 const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *outlen) {
  if (outlen) *outlen = 0;
  if (!key || !outlen || (!in && n) || (!aad && aadlen) || aadlen > SL_SEAL_MAX) return SL_EINVAL;
  if (!sl_seal_is_sealed(in, n)) return SL_EPARSE;
  size_t m = n - SL_SEAL_OVERHEAD;
  if (m > SL_SEAL_MAX || cap < m) return SL_ETOOBIG;
  if (!out && m) return SL_EINVAL;
  EVP_CIPHER_CTX *c = thread_ctx();
  if (!c) return SL_ECRYPTO;
  const uint8_t *nonce = in + sizeof magic, *ct = nonce + SL_SEAL_NONCE_LEN, *tag = ct + m;
  uint8_t tagc[SL_SEAL_TAG_LEN]; /* the ctrl takes a non-const pointer */
  memcpy(tagc, tag, sizeof tagc);
  int l = 0;
  if (EVP_DecryptInit_ex2(c, gcm, key, nonce, NULL) != 1 ||
      (aadlen && EVP_DecryptUpdate(c, NULL, &l, aad, (int)aadlen) != 1) ||
      (m && EVP_DecryptUpdate(c, out, &l, ct, (int)m) != 1) ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, SL_SEAL_TAG_LEN, tagc) != 1) {
    if (m) OPENSSL_cleanse(out, m);
    return SL_ECRYPTO;
  }
  uint8_t fin[EVP_MAX_BLOCK_LENGTH];          /* GCM's final writes nothing */
  if (EVP_DecryptFinal_ex(c, fin, &l) != 1) { /* the tag did not match */
    if (m) OPENSSL_cleanse(out, m);
    return SL_EAUTH;
  }
  *outlen = m;
  return 0;
}
