/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_id.h — identifiers and digests: UUIDv7 submission ids (RFC 9562: 48-bit
 * unix-ms timestamp, version 7, variant 10, 74 random bits from OpenSSL's
 * CSPRNG), random bearer tokens, SHA-256 hex digests, and bytes as hex.
 * Thread-safe.
 */
#ifndef SLUICE_SL_ID_H
#define SLUICE_SL_ID_H

#include <stddef.h>
#include <stdint.h>

/* n bytes as lowercase hex into out (2*n chars + NUL). */
void sl_hex(const uint8_t *in, size_t n, char *out);

/* Writes a lowercase canonical UUIDv7 (36 chars + NUL) for time ms. */
int sl_uuid7(int64_t unix_ms, char out[37]);

/* nbytes random bytes as lowercase hex into out (2*nbytes+1). */
int sl_random_hex(size_t nbytes, char *out, size_t outlen);

/* SHA-256 of data as lowercase hex (64 chars + NUL). */
int sl_sha256_hex(const void *data, size_t len, char out[65]);

/* Constant-time comparison of two NUL-terminated strings of equal length
 * (returns 1 when equal). */
int sl_secure_equal(const char *a, const char *b);

#endif
