/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_seal.c — see sl_seal.h: AES-256-GCM through OpenSSL's EVP interface,
 * the cipher fetched once, two contexts per thread (as sl_id.c's digest):
 * one sealing, one opening, each keeping the last key it was given, so that
 * a stage opening an input and sealing its outputs with the same data key
 * sets only a nonce per call, not the key's schedule again (bench/cost).
 * The last key stays in its context (its schedule, OpenSSL's memory) and
 * beside it (to compare) until another key replaces it or the thread ends
 * (both wiped then). The thread's nonce state lives beside them (sl_seal.h:
 * its random fixed field, drawn at the first seal, and its count).
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
/* raised in the child of a fork (it runs alone then, so no thread reads it
 * meanwhile): the forking thread's nonce state, copied into the child, is
 * drawn again there */
static unsigned fork_gen;

/* a thread's contexts: [0] seals, [1] opens; key[i] the key ctx[i] holds
 * when set[i] (wiped with them); its nonces: fixed (drawn when gen is not
 * fork_gen + 1, or count wrapped) then count */
typedef struct {
  EVP_CIPHER_CTX *ctx[2];
  uint8_t key[2][SL_SEAL_KEY_LEN];
  int set[2];
  uint8_t fixed[SL_SEAL_NONCE_LEN - 4];
  uint32_t count;
  unsigned gen;
} thread_ctxs;

static void ctxs_free(void *p) {
  thread_ctxs *t = p;
  EVP_CIPHER_CTX_free(t->ctx[0]);
  EVP_CIPHER_CTX_free(t->ctx[1]);
  OPENSSL_cleanse(t, sizeof *t);
  OPENSSL_free(t);
}
static void forked(void) { fork_gen++; }

static void fetch(void) {
  gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
  have_key =
      pthread_key_create(&ctx_key, ctxs_free) == 0 && pthread_atfork(NULL, NULL, forked) == 0;
}

/* The calling thread's state, made on first use; NULL when it could not be. */
static thread_ctxs *thread_state(void) {
  pthread_once(&once, fetch);
  if (!gcm || !have_key) return NULL;
  thread_ctxs *t = pthread_getspecific(ctx_key);
  if (!t) {
    t = OPENSSL_zalloc(sizeof *t);
    if (!t) return NULL;
    t->ctx[0] = EVP_CIPHER_CTX_new();
    t->ctx[1] = EVP_CIPHER_CTX_new();
    if (!t->ctx[0] || !t->ctx[1] || pthread_setspecific(ctx_key, t) != 0) {
      ctxs_free(t);
      return NULL;
    }
  }
  return t;
}

/* The next nonce of the calling thread into nonce (sl_seal.h). 1, or 0
 * when none could be made. */
static int nonce_next(uint8_t nonce[SL_SEAL_NONCE_LEN]) {
  thread_ctxs *t = thread_state();
  if (!t) return 0;
  if (t->gen != fork_gen + 1 || t->count == UINT32_MAX) {
    if (RAND_bytes(t->fixed, sizeof t->fixed) != 1) {
      t->gen = 0;
      return 0;
    }
    t->gen = fork_gen + 1;
    t->count = 0;
  }
  uint32_t c = t->count++;
  memcpy(nonce, t->fixed, sizeof t->fixed);
  for (int i = 0; i < 4; i++) nonce[sizeof t->fixed + i] = (uint8_t)(c >> (24 - 8 * i));
  return 1;
}

/* The calling thread's context for dir (0 seal, 1 open), made on first
 * use, initialised with key and nonce: the key's schedule made again only
 * when key is not the one it holds. 1, or 0 when it could not be. */
static int ctx_init(int dir, const uint8_t key[SL_SEAL_KEY_LEN], const uint8_t *nonce,
                    EVP_CIPHER_CTX **out) {
  thread_ctxs *t = thread_state();
  if (!t) return 0;
  EVP_CIPHER_CTX *c = t->ctx[dir];
  int same = t->set[dir] && CRYPTO_memcmp(key, t->key[dir], SL_SEAL_KEY_LEN) == 0;
  int ok = dir == 0 ? EVP_EncryptInit_ex2(c, same ? NULL : gcm, same ? NULL : key, nonce, NULL)
                    : EVP_DecryptInit_ex2(c, same ? NULL : gcm, same ? NULL : key, nonce, NULL);
  if (ok != 1) {
    t->set[dir] = 0;
    return 0;
  }
  if (!same) memcpy(t->key[dir], key, SL_SEAL_KEY_LEN);
  t->set[dir] = 1;
  *out = c;
  return 1;
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
  EVP_CIPHER_CTX *c = NULL;
  uint8_t *nonce = out + sizeof magic, *ct = nonce + SL_SEAL_NONCE_LEN, *tag = ct + n;
  uint8_t fin[EVP_MAX_BLOCK_LENGTH]; /* GCM's final writes nothing */
  int l = 0, ok = nonce_next(nonce) && ctx_init(0, key, nonce, &c) &&
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
  EVP_CIPHER_CTX *c = NULL;
  const uint8_t *nonce = in + sizeof magic, *ct = nonce + SL_SEAL_NONCE_LEN, *tag = ct + m;
  uint8_t tagc[SL_SEAL_TAG_LEN]; /* the ctrl takes a non-const pointer */
  memcpy(tagc, tag, sizeof tagc);
  int l = 0;
  if (!ctx_init(1, key, nonce, &c) ||
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
