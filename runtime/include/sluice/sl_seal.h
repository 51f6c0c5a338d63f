/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_seal.h — authenticated encryption of personal data, so that it can be
 * erased from an append-only log by destroying its key (crypto-shredding,
 * issue 46).
 *
 * A value is sealed with a 32-byte key (a submission's data key, or the
 * operator's key-encryption key wrapping a data key) by AES-256-GCM
 * (OpenSSL's EVP interface):
 *
 *   "SLS1" | nonce (12 bytes) | ciphertext (as long as the value) | tag (16)
 *
 * SL_SEAL_OVERHEAD bytes more than the value. `aad` names what the value
 * belongs to (for example "<topic>\0<submission>/<question>\0<field>"): it
 * is authenticated, not stored, so a sealed value copied to another place
 * does not open there. A value opens only with the same key and aad and
 * unaltered bytes; anything else is SL_EAUTH, and nothing of the value is
 * written.
 *
 * Nonces (NIST SP 800-38D, 8.2.1, the deterministic construction): 8
 * random bytes drawn by each thread (its fixed field: drawn again after
 * 2^32 seals, and in the child of a fork) and a 4-byte count of the
 * thread's seals. Unique for any one key as long as no two threads sealing
 * with it drew the same 8 bytes: about T^2 / 2^65 for T threads (a
 * submission's key is used by a few stages' threads), where 96 random bits
 * per value gave N^2 / 2^97 for N values. Not a random draw per value:
 * RAND_bytes was three quarters of a seal's time (bench/cost).
 *
 * Pure apart from OpenSSL (the cipher is fetched once per process; each
 * thread keeps its cipher contexts and nonce state, freed when the thread
 * ends).
 * @locality any thread; the caller owns every buffer.
 */
#ifndef SLUICE_SL_SEAL_H
#define SLUICE_SL_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define SL_SEAL_KEY_LEN 32
#define SL_SEAL_NONCE_LEN 12
#define SL_SEAL_TAG_LEN 16
#define SL_SEAL_OVERHEAD (4 + SL_SEAL_NONCE_LEN + SL_SEAL_TAG_LEN)
#define SL_SEAL_MAX (16u << 20) /* the longest value sealed or opened */

/* A new random key. 0, or SL_EINVAL / SL_ECRYPTO. */
int sl_seal_key_new(uint8_t key[SL_SEAL_KEY_LEN]);

/* Seals in[0..n) into out (capacity cap; n + SL_SEAL_OVERHEAD needed),
 * *outlen its length. 0, or SL_EINVAL (a NULL key or out, n over
 * SL_SEAL_MAX), SL_ETOOBIG (cap short), SL_ECRYPTO. */
int sl_seal(const uint8_t key[SL_SEAL_KEY_LEN], const void *aad, size_t aadlen, const void *in,
            size_t n, uint8_t *out, size_t cap, size_t *outlen);

/* Opens the sealed in[0..n) into out (capacity cap; n - SL_SEAL_OVERHEAD
 * needed), *outlen its length. 0, or SL_EPARSE (not a sealed value: too
 * short or another format), SL_EAUTH (another key or aad, or altered),
 * SL_EINVAL, SL_ETOOBIG (cap short, or over SL_SEAL_MAX), SL_ECRYPTO. On
 * an error nothing is left in out. */
int sl_seal_open(const uint8_t key[SL_SEAL_KEY_LEN], const void *aad, size_t aadlen,
                 const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *outlen);

/* 1 when in[0..n) has the sealed format's header and length (it may still
 * not open), 0 otherwise. */
int sl_seal_is_sealed(const void *in, size_t n);

#endif
