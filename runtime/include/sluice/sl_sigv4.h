/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_sigv4.h — AWS Signature Version 4 (AWS4-HMAC-SHA256) for S3-compatible
 * object storage.
 *
 * Two ways to sign:
 *   - sl_sigv4_presign():   query-string presigned URLs (X-Amz-Algorithm ..
 *                           X-Amz-Signature, payload "UNSIGNED-PAYLOAD"),
 *                           handed to clients that upload/download directly.
 *   - sl_sigv4_authorize(): the "Authorization" header value for requests the
 *                           server makes itself (CreateMultipartUpload,
 *                           ListParts, ...).
 *
 * Design: an sl_sigv4 object holds copies of the credentials plus a one-day
 * cache of the derived signing key (the HMAC chain over date / region /
 * service / "aws4_request"); the chain is only recomputed when the UTC date
 * of `now` differs from the cached one. The signing path itself does no
 * malloc: canonical request, string-to-sign and scratch space live in
 * bounded stack buffers (about 30 KiB of stack per call) and results go to
 * caller-provided buffers. Hashing
 * and HMAC are OpenSSL 3 EVP (digest and MAC contexts owned by the object).
 *
 * Threading: an sl_sigv4 object is NOT thread-safe (it mutates its key cache
 * and its OpenSSL contexts on every call). Use one object per thread; distinct
 * objects may be used concurrently.
 *
 * Errors: every function returns 0 or a negative SL_E* code (sl_err.h):
 *   SL_EINVAL  NULL / malformed argument, expires out of range, time outside
 *              0000..9999 years, reserved header passed in hdrs;
 *   SL_ETOOBIG an output buffer is too small (nothing is ever truncated: on
 *              error the output buffers hold an empty string when size > 0),
 *              or an input exceeds one of the SL_SIGV4_MAX_* limits below;
 *   SL_ENOMEM  allocation failed (sl_sigv4_new only);
 *   SL_ECRYPTO an OpenSSL call failed.
 */
#ifndef SLUICE_SL_SIGV4_H
#define SLUICE_SL_SIGV4_H

#include <stddef.h>
#include <time.h>

/* Input limits (exceeding one returns SL_ETOOBIG). */
#define SL_SIGV4_MAX_ACCESS_KEY 128  /* bytes of access key id */
#define SL_SIGV4_MAX_SECRET 256      /* bytes of secret key */
#define SL_SIGV4_MAX_SCOPE_PART 64   /* bytes of region, of service */
#define SL_SIGV4_MAX_HEADERS 32      /* extra headers per call */
#define SL_SIGV4_MAX_QUERY 32        /* extra query parameters per call */
#define SL_SIGV4_MAX_CANONICAL 16384 /* canonical request incl. NUL */

/* Length of an x-amz-date value "YYYYMMDDTHHMMSSZ" (without the NUL). */
#define SL_SIGV4_AMZ_DATE_LEN 16

typedef struct sl_sigv4 sl_sigv4;

/* Creates a signer. Copies all four strings (the caller keeps ownership of
 * its own); region e.g. "us-east-1", service e.g. "s3". None may be NULL or
 * empty; region and service must not contain '/' or control characters.
 * On success *out owns a new object to release with sl_sigv4_free(); on
 * failure *out is set to NULL (when out itself is not NULL). */
int sl_sigv4_new(sl_sigv4 **out, const char *access_key, const char *secret_key, const char *region,
                 const char *service);

/* Releases a signer and wipes the secret and derived key. NULL-safe. */
void sl_sigv4_free(sl_sigv4 *s);

/* An extra header to sign. name in any case (it is lowercased for signing);
 * value is trimmed and runs of blanks are collapsed to one space. Repeated
 * names are joined with ',' in the order given. "host" is always signed and
 * added by the signer and must not appear here. Values must not contain CR
 * or LF. Strings are borrowed for the duration of the call only. */
typedef struct {
  const char *name;
  const char *value;
} sl_sigv4_header;

/* Query-string presigned URL, payload "UNSIGNED-PAYLOAD".
 *   method  "GET", "PUT", ... (used verbatim)
 *   scheme  "http" or "https"
 *   host    authority incl. port, e.g. "127.0.0.1:9000"; signed as "host"
 *   path    raw (unencoded) absolute path, e.g. "/bucket/dir/key.webm"; each
 *           byte outside A-Za-z0-9-._~ and '/' becomes %XX (uppercase), S3
 *           style (no normalisation, no double encoding)
 *   query   NULL or extra raw query parameters "a=1&b=x y" ('&' and '=' are
 *           the separators, everything else is literal and gets encoded);
 *           they are sorted with the X-Amz-* parameters and signed. A name
 *           without '=' is signed as "name=". Must not repeat an X-Amz-*
 *           parameter the signer sets.
 *   now     unix time; expires in seconds, 1..604800
 *   hdrs    nhdrs extra headers to sign (hdrs may be NULL when nhdrs == 0);
 *           the client must then send exactly these headers and values.
 * Writes the NUL-terminated URL into url[url_size]:
 *   scheme://host/encoded/path?<canonical query>&X-Amz-Signature=<hex>
 * Not thread-safe for the same s. */
int sl_sigv4_presign(sl_sigv4 *s, const char *method, const char *scheme, const char *host,
                     const char *path, const char *query, time_t now, unsigned expires,
                     const sl_sigv4_header *hdrs, size_t nhdrs, char *url, size_t url_size);

/* Header-based signing. Same meaning of method/host/path/query/hdrs as
 * sl_sigv4_presign(). payload_sha256_hex is 64 lowercase hex digits (sha256
 * of the body) or "UNSIGNED-PAYLOAD". Writes the "Authorization" header value
 *   AWS4-HMAC-SHA256 Credential=<ak>/<scope>,SignedHeaders=...,Signature=...
 * into auth[auth_size] and the x-amz-date value (16 chars + NUL) into
 * amz_date. The caller must send "x-amz-date: <amz_date>" and
 * "x-amz-content-sha256: <payload_sha256_hex>" (both are signed), must not
 * pass either of them (nor "host") in hdrs, and should put the path and query
 * on the wire as sl_sigv4_encode_path()/sl_sigv4_encode_query() produce them.
 * Not thread-safe for the same s. */
int sl_sigv4_authorize(sl_sigv4 *s, const char *method, const char *host, const char *path,
                       const char *query, const char *payload_sha256_hex, time_t now,
                       const sl_sigv4_header *hdrs, size_t nhdrs, char *auth, size_t auth_size,
                       char amz_date[17]);

/* S3 URI encoding of a raw absolute path (see sl_sigv4_presign) into
 * out[out_size], NUL-terminated. Thread-safe. */
int sl_sigv4_encode_path(const char *path, char *out, size_t out_size);

/* Canonical (encoded, sorted) form of a raw query as accepted by
 * sl_sigv4_presign/authorize; "" for NULL or empty input. This is exactly
 * what gets signed, so it is also a correct wire query string. Thread-safe. */
int sl_sigv4_encode_query(const char *query, char *out, size_t out_size);

/* ---- Debug / test introspection ------------------------------------- */

/* Optional outputs of the *_debug variants. Set either buffer pointer to
 * NULL to skip it. Buffers are caller-owned; a buffer that is too small
 * makes the call fail with SL_ETOOBIG. signing_key_hex is always filled. */
typedef struct {
  char *canonical_request; /* exact bytes hashed, NUL-terminated */
  size_t canonical_request_size;
  char *string_to_sign; /* exact bytes HMACed, NUL-terminated */
  size_t string_to_sign_size;
  char signing_key_hex[65]; /* derived key for the request's date */
} sl_sigv4_debug;

/* sl_sigv4_presign() plus the intermediate values of this very call in dbg
 * (which must not be NULL). Slower than the plain call; for tests/logs. */
int sl_sigv4_presign_debug(sl_sigv4 *s, const char *method, const char *scheme, const char *host,
                           const char *path, const char *query, time_t now, unsigned expires,
                           const sl_sigv4_header *hdrs, size_t nhdrs, char *url, size_t url_size,
                           sl_sigv4_debug *dbg);

/* sl_sigv4_authorize() plus intermediate values in dbg (must not be NULL). */
int sl_sigv4_authorize_debug(sl_sigv4 *s, const char *method, const char *host, const char *path,
                             const char *query, const char *payload_sha256_hex, time_t now,
                             const sl_sigv4_header *hdrs, size_t nhdrs, char *auth,
                             size_t auth_size, char amz_date[17], sl_sigv4_debug *dbg);

/* Test hook: how many times s has derived a signing key (i.e. cache misses).
 * Returns 0 for NULL. */
unsigned long sl_sigv4_key_derivations(const sl_sigv4 *s);

#endif
