/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_sigv4.c — AWS Signature Version 4 signer (contract in sl_sigv4.h).
 *
 * Design: one internal routine, sign_request(), serves both the presigned-URL
 * and the Authorization-header flavours. It
 *   1. makes sure the per-day cache (date, credential scope, URL-encoded
 *      credential and the derived signing key, already loaded into the
 *      object's HMAC context) matches the UTC day of `now`;
 *   2. collects host + caller headers into a small array, validates them and
 *      insertion-sorts them by lowercased name (stable, so repeated names keep
 *      their order and are joined with ',');
 *   3. URI-encodes the caller's raw query into a stack arena, adds the
 *      X-Amz-* parameters (presign) and sorts all of them by encoded name,
 *      then value;
 *   4. writes the canonical request into one stack buffer, remembering where
 *      the encoded path and the canonical query sit so the presigned URL can
 *      reuse those bytes instead of encoding twice;
 *   5. SHA-256 over the canonical request, HMAC-SHA256 (cached key) over the
 *      string-to-sign, both via OpenSSL EVP contexts owned by the object.
 * Every buffer is bounded: overflow of a stack buffer or of a caller buffer
 * ends in SL_ETOOBIG, never in truncated output. No malloc after
 * sl_sigv4_new() in this file (OpenSSL 3.0 may still allocate internally when
 * (re)initialising its digest/MAC contexts).
 *
 * Threading: not thread-safe per object (key cache and EVP contexts mutate).
 */
#include "sluice/sl_sigv4.h"

#include "sluice/sl_err.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ALGORITHM "AWS4-HMAC-SHA256"
#define SCOPE_TERMINATOR "aws4_request"
#define UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SECS_PER_DAY 86400
#define MAX_EXPIRES 604800u
#define MAX_UNIX_TIME INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* "YYYYMMDD/<region>/<service>/aws4_request" */
#define SCOPE_MAX                                                                                  \
  (8 + 1 + SL_SIGV4_MAX_SCOPE_PART + 1 + SL_SIGV4_MAX_SCOPE_PART + 1 + sizeof SCOPE_TERMINATOR)
/* URI-encoded "<access key>/<scope>" (worst case every byte as %XX) */
#define CRED_Q_MAX (3 * (SL_SIGV4_MAX_ACCESS_KEY + 1 + SCOPE_MAX) + 1)
/* "AWS4-HMAC-SHA256\n" date "\n" scope "\n" hex */
#define STS_MAX (sizeof ALGORITHM + SL_SIGV4_AMZ_DATE_LEN + 1 + SCOPE_MAX + 65)
/* signed-headers list "a;b;c" and the query arena (encoded extra params and
 * the encoded signed-headers value) */
#define SIGNED_HEADERS_MAX 2048
#define QUERY_ARENA_MAX 8192
/* number of X-Amz-* parameters the presigner adds */
#define PRESIGN_PARAMS 5

struct sl_sigv4 {
  char access_key[SL_SIGV4_MAX_ACCESS_KEY + 1];
  size_t access_key_len;
  char region[SL_SIGV4_MAX_SCOPE_PART + 1];
  size_t region_len;
  char service[SL_SIGV4_MAX_SCOPE_PART + 1];
  size_t service_len;
  unsigned char ksecret[4 + SL_SIGV4_MAX_SECRET]; /* "AWS4" + secret */
  size_t ksecret_len;

  /* One-day cache, valid when have_day. */
  int have_day;
  int64_t day; /* days since 1970-01-01 */
  char date8[9];
  char scope[SCOPE_MAX];
  size_t scope_len;
  char cred_q[CRED_Q_MAX]; /* URI-encoded "<ak>/<scope>" */
  size_t cred_q_len;
  unsigned char signing_key[32];
  unsigned long derivations;

  EVP_MD *sha256;
  EVP_MD_CTX *md;
  EVP_MAC *hmac_alg;
  EVP_MAC_CTX *hmac; /* keyed with signing_key while have_day */
};

/* ---- small bounded string builder ------------------------------------ */

typedef struct {
  char *buf;
  size_t cap; /* bytes usable (callers reserve room for a NUL themselves) */
  size_t len;
  int over; /* sticky overflow flag */
} sbuf;

static void sb_init(sbuf *b, char *buf, size_t cap) {
  b->buf = buf;
  b->cap = cap;
  b->len = 0;
  b->over = 0;
}

static inline void sb_mem(sbuf *b, const void *p, size_t n) {
  if (b->over || b->cap - b->len < n) {
    b->over = 1;
    return;
  }
  memcpy(b->buf + b->len, p, n);
  b->len += n;
}

static inline void sb_str(sbuf *b, const char *s) { sb_mem(b, s, strlen(s)); }

static inline void sb_ch(sbuf *b, char c) {
  if (b->over || b->len == b->cap) {
    b->over = 1;
    return;
  }
  b->buf[b->len++] = c;
}

static const char HEX_LOWER[16] = {'0', '1', '2', '3', '4', '5', '6', '7',
                                   '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};
static const char HEX_UPPER[16] = {'0', '1', '2', '3', '4', '5', '6', '7',
                                   '8', '9', 'A', 'B', 'C', 'D', 'E', 'F'};

static inline int is_unreserved(unsigned char c) {
  return (unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

/* S3 URI encoding: unreserved bytes kept, '/' kept iff keep_slash, anything
 * else %XX with uppercase hex. */
static void sb_uri(sbuf *b, const char *s, size_t n, int keep_slash) {
  if (b->over) return;
  char *p = b->buf + b->len;
  char *end = b->buf + b->cap;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      if (p == end) goto overflow;
      *p++ = (char)c;
    } else {
      if (end - p < 3) goto overflow;
      p[0] = '%';
      p[1] = HEX_UPPER[c >> 4];
      p[2] = HEX_UPPER[c & 15];
      p += 3;
    }
  }
  b->len = (size_t)(p - b->buf);
  return;
overflow:
  b->over = 1;
}

static void hex_lower(char *out, const unsigned char *in, size_t n) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = HEX_LOWER[in[i] >> 4];
    out[2 * i + 1] = HEX_LOWER[in[i] & 15];
  }
  out[2 * n] = '\0';
}

static inline char ascii_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

/* RFC 9110 token character (header names, methods). */
static int is_tchar(unsigned char c) {
  if ((unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u) return 1;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_token(const char *s) {
  if (*s == '\0') return 0;
  for (; *s; s++)
    if (!is_tchar((unsigned char)*s)) return 0;
  return 1;
}

/* Host/authority: printable ASCII, no space and no URL delimiters. */
static int is_host(const char *s) {
  if (*s == '\0') return 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c <= 0x20 || c >= 0x7f || c == '/' || c == '?' || c == '#' || c == '\\') return 0;
  }
  return 1;
}

/* ---- time ---------------------------------------------------------- */

static inline void put2(char *p, unsigned v) {
  p[0] = (char)('0' + v / 10);
  p[1] = (char)('0' + v % 10);
}

/* Proleptic Gregorian date of a day count since 1970-01-01 (days >= 0),
 * using the 400-year era decomposition with March-based years. */
static void civil_date(int64_t days, unsigned *y, unsigned *m, unsigned *d) {
  int64_t z = days + 719468; /* shift epoch to 0000-03-01 */
  int64_t era = z / 146097;
  unsigned doe = (unsigned)(z - era * 146097); /* 0..146096 */
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100); /* 0..365 */
  unsigned mp = (5 * doy + 2) / 153;                      /* 0..11 */
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (unsigned)(yoe + era * 400) + (*m <= 2);
}

/* ---- crypto helpers -------------------------------------------------- */

static int hmac_with_key(sl_sigv4 *s, const unsigned char *key, size_t klen, const void *msg,
                         size_t mlen, unsigned char out[32]) {
  size_t olen = 0;
  if (!EVP_MAC_init(s->hmac, key, klen, NULL) || !EVP_MAC_update(s->hmac, msg, mlen) ||
      !EVP_MAC_final(s->hmac, out, &olen, 32) || olen != 32)
    return SL_ECRYPTO;
  return 0;
}

/* HMAC with the cached signing key (context already keyed). */
static int hmac_signing(sl_sigv4 *s, const void *msg, size_t mlen, unsigned char out[32]) {
  size_t olen = 0;
  if (!EVP_MAC_init(s->hmac, NULL, 0, NULL) || !EVP_MAC_update(s->hmac, msg, mlen) ||
      !EVP_MAC_final(s->hmac, out, &olen, 32) || olen != 32)
    return SL_ECRYPTO;
  return 0;
}

static int sha256(sl_sigv4 *s, const void *msg, size_t mlen, unsigned char out[32]) {
  unsigned olen = 0;
  if (!EVP_DigestInit_ex2(s->md, s->sha256, NULL) || !EVP_DigestUpdate(s->md, msg, mlen) ||
      !EVP_DigestFinal_ex(s->md, out, &olen) || olen != 32)
    return SL_ECRYPTO;
  return 0;
}

/* Refreshes the per-day cache when `day` differs from the cached day. */
static int ensure_day(sl_sigv4 *s, int64_t day) {
  if (s->have_day && s->day == day) return 0;
  s->have_day = 0;

  unsigned y, m, d;
  civil_date(day, &y, &m, &d);
  put2(s->date8, y / 100);
  put2(s->date8 + 2, y % 100);
  put2(s->date8 + 4, m);
  put2(s->date8 + 6, d);
  s->date8[8] = '\0';

  sbuf b;
  sb_init(&b, s->scope, sizeof s->scope - 1);
  sb_mem(&b, s->date8, 8);
  sb_ch(&b, '/');
  sb_mem(&b, s->region, s->region_len);
  sb_ch(&b, '/');
  sb_mem(&b, s->service, s->service_len);
  sb_ch(&b, '/');
  sb_str(&b, SCOPE_TERMINATOR);
  if (b.over) return SL_ETOOBIG; /* unreachable: sizes are checked in sl_sigv4_new */
  s->scope[b.len] = '\0';
  s->scope_len = b.len;

  sb_init(&b, s->cred_q, sizeof s->cred_q - 1);
  sb_uri(&b, s->access_key, s->access_key_len, 0);
  sb_uri(&b, "/", 1, 0);
  sb_uri(&b, s->scope, s->scope_len, 0);
  if (b.over) return SL_ETOOBIG; /* unreachable, as above */
  s->cred_q[b.len] = '\0';
  s->cred_q_len = b.len;

  unsigned char k1[32], k2[32];
  int rc = hmac_with_key(s, s->ksecret, s->ksecret_len, s->date8, 8, k1);
  if (rc == 0) rc = hmac_with_key(s, k1, 32, s->region, s->region_len, k2);
  if (rc == 0) rc = hmac_with_key(s, k2, 32, s->service, s->service_len, k1);
  if (rc == 0)
    rc = hmac_with_key(s, k1, 32, SCOPE_TERMINATOR, sizeof SCOPE_TERMINATOR - 1, s->signing_key);
  /* Leave the context keyed with the signing key for hmac_signing(). */
  if (rc == 0 && !EVP_MAC_init(s->hmac, s->signing_key, 32, NULL)) rc = SL_ECRYPTO;
  OPENSSL_cleanse(k1, sizeof k1);
  OPENSSL_cleanse(k2, sizeof k2);
  if (rc != 0) return rc;
  s->day = day;
  s->have_day = 1;
  s->derivations++;
  return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static int copy_part(char *dst, size_t dst_size, size_t *len, const char *src, int scope_part) {
  size_t n = strlen(src);
  if (n == 0) return SL_EINVAL;
  if (n >= dst_size) return SL_ETOOBIG;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c < 0x20 || c == 0x7f || (scope_part && c == '/')) return SL_EINVAL;
  }
  memcpy(dst, src, n + 1);
  *len = n;
  return 0;
}

int sl_sigv4_new(sl_sigv4 **out, const char *access_key, const char *secret_key, const char *region,
                 const char *service) {
  if (out == NULL) return SL_EINVAL;
  *out = NULL;
  if (access_key == NULL || secret_key == NULL || region == NULL || service == NULL)
    return SL_EINVAL;
  size_t slen = strlen(secret_key);
  if (slen == 0) return SL_EINVAL;
  if (slen > SL_SIGV4_MAX_SECRET) return SL_ETOOBIG;

  sl_sigv4 *s = calloc(1, sizeof *s);
  if (s == NULL) return SL_ENOMEM;
  int rc = copy_part(s->access_key, sizeof s->access_key, &s->access_key_len, access_key, 0);
  if (rc == 0) rc = copy_part(s->region, sizeof s->region, &s->region_len, region, 1);
  if (rc == 0) rc = copy_part(s->service, sizeof s->service, &s->service_len, service, 1);
  if (rc != 0) {
    sl_sigv4_free(s);
    return rc;
  }
  memcpy(s->ksecret, "AWS4", 4);
  memcpy(s->ksecret + 4, secret_key, slen);
  s->ksecret_len = 4 + slen;

  s->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  s->md = EVP_MD_CTX_new();
  s->hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
  s->hmac = s->hmac_alg ? EVP_MAC_CTX_new(s->hmac_alg) : NULL;
  if (s->sha256 == NULL || s->md == NULL || s->hmac == NULL) {
    sl_sigv4_free(s);
    return SL_ECRYPTO;
  }
  OSSL_PARAM params[2];
  params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
  params[1] = OSSL_PARAM_construct_end();
  if (!EVP_MAC_CTX_set_params(s->hmac, params)) {
    sl_sigv4_free(s);
    return SL_ECRYPTO;
  }
  *out = s;
  return 0;
}

void sl_sigv4_free(sl_sigv4 *s) {
  if (s == NULL) return;
  EVP_MAC_CTX_free(s->hmac);
  EVP_MAC_free(s->hmac_alg);
  EVP_MD_CTX_free(s->md);
  EVP_MD_free(s->sha256);
  OPENSSL_cleanse(s, sizeof *s);
  free(s);
}

unsigned long sl_sigv4_key_derivations(const sl_sigv4 *s) { return s ? s->derivations : 0; }

/* ---- headers ----------------------------------------------------------- */

typedef struct {
  const char *name;
  size_t nlen;
  const char *val; /* already trimmed */
  size_t vlen;
} hent;

static inline int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Compares lowercased names; a proper prefix sorts first. */
static int hname_cmp(const hent *a, const hent *b) {
  size_t n = a->nlen < b->nlen ? a->nlen : b->nlen;
  for (size_t i = 0; i < n; i++) {
    char ca = ascii_lower(a->name[i]), cb = ascii_lower(b->name[i]);
    if (ca != cb) return (unsigned char)ca < (unsigned char)cb ? -1 : 1;
  }
  return (a->nlen > b->nlen) - (a->nlen < b->nlen);
}

static int hname_is(const char *name, const char *lower) {
  for (; *name && *lower; name++, lower++)
    if (ascii_lower(*name) != *lower) return 0;
  return *name == '\0' && *lower == '\0';
}

static void hent_set(hent *h, const char *name, const char *val) {
  h->name = name;
  h->nlen = strlen(name);
  size_t vlen = strlen(val);
  while (vlen > 0 && is_blank(*val)) {
    val++;
    vlen--;
  }
  while (vlen > 0 && is_blank(val[vlen - 1])) vlen--;
  h->val = val;
  h->vlen = vlen;
}

/* Validates caller headers and appends them to ents (after the signer's own
 * entries at ents[0..*n)), then sorts everything by lowercased name. */
static int collect_headers(const sl_sigv4_header *hdrs, size_t nhdrs, int authorize, hent *ents,
                           size_t *n) {
  for (size_t i = 0; i < nhdrs; i++) {
    const char *name = hdrs[i].name, *val = hdrs[i].value;
    if (name == NULL || val == NULL || !is_token(name)) return SL_EINVAL;
    if (strpbrk(val, "\r\n") != NULL) return SL_EINVAL;
    if (hname_is(name, "host") ||
        (authorize && (hname_is(name, "x-amz-date") || hname_is(name, "x-amz-content-sha256"))))
      return SL_EINVAL;
    hent_set(&ents[(*n)++], name, val);
  }
  for (size_t i = 1; i < *n; i++) { /* stable insertion sort */
    hent t = ents[i];
    size_t j = i;
    while (j > 0 && hname_cmp(&ents[j - 1], &t) > 0) {
      ents[j] = ents[j - 1];
      j--;
    }
    ents[j] = t;
  }
  return 0;
}

static void sb_lower(sbuf *b, const char *s, size_t n) {
  if (b->over || b->cap - b->len < n) {
    b->over = 1;
    return;
  }
  char *p = b->buf + b->len;
  for (size_t i = 0; i < n; i++) p[i] = ascii_lower(s[i]);
  b->len += n;
}

/* Value with internal runs of blanks collapsed to one space. */
static void sb_header_value(sbuf *b, const char *v, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && !is_blank(v[j])) j++;
    sb_mem(b, v + i, j - i);
    if (j == n) break;
    sb_ch(b, ' ');
    while (j < n && is_blank(v[j])) j++;
    i = j;
  }
}

/* "name:value\n" lines (repeated names joined with ','). */
static void sb_canonical_headers(sbuf *b, const hent *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && hname_cmp(&e[i - 1], &e[i]) == 0) {
      sb_ch(b, ',');
    } else {
      if (i > 0) sb_ch(b, '\n');
      sb_lower(b, e[i].name, e[i].nlen);
      sb_ch(b, ':');
    }
    sb_header_value(b, e[i].val, e[i].vlen);
  }
  sb_ch(b, '\n');
}

/* "a;b;c" of the distinct lowercased names. */
static void sb_signed_headers(sbuf *b, const hent *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && hname_cmp(&e[i - 1], &e[i]) == 0) continue;
    if (i > 0) sb_ch(b, ';');
    sb_lower(b, e[i].name, e[i].nlen);
  }
}

/* ---- query ------------------------------------------------------------- */

typedef struct {
  const char *k;
  size_t klen;
  const char *v;
  size_t vlen;
} qent;

static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen) {
  size_t n = alen < blen ? alen : blen;
  int c = n ? memcmp(a, b, n) : 0;
  if (c != 0) return c;
  return (alen > blen) - (alen < blen);
}

static int qent_cmp(const qent *a, const qent *b) {
  int c = bytes_cmp(a->k, a->klen, b->k, b->klen);
  return c != 0 ? c : bytes_cmp(a->v, a->vlen, b->v, b->vlen);
}

static const char *const RESERVED_PARAMS[] = {"X-Amz-Algorithm",     "X-Amz-Credential",
                                              "X-Amz-Date",          "X-Amz-Expires",
                                              "X-Amz-SignedHeaders", "X-Amz-Signature"};

/* Splits a raw query on '&' and the first '=', URI-encodes names and values
 * into the arena and appends entries to ents[*n..max). */
static int parse_query(const char *q, sbuf *arena, qent *ents, size_t *n, size_t max) {
  if (q == NULL) return 0;
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t seg = amp ? (size_t)(amp - q) : strlen(q);
    if (seg > 0) {
      if (*n == max) return SL_ETOOBIG;
      const char *eq = memchr(q, '=', seg);
      size_t klen = eq ? (size_t)(eq - q) : seg;
      qent *e = &ents[(*n)++];
      size_t k0 = arena->len;
      sb_uri(arena, q, klen, 0);
      size_t v0 = arena->len;
      if (eq) sb_uri(arena, eq + 1, seg - klen - 1, 0);
      if (arena->over) return SL_ETOOBIG;
      e->k = arena->buf + k0;
      e->klen = v0 - k0;
      e->v = arena->buf + v0;
      e->vlen = arena->len - v0;
      for (size_t r = 0; r < sizeof RESERVED_PARAMS / sizeof *RESERVED_PARAMS; r++)
        if (bytes_cmp(e->k, e->klen, RESERVED_PARAMS[r], strlen(RESERVED_PARAMS[r])) == 0)
          return SL_EINVAL;
    }
    q += seg;
    if (*q == '&') q++;
  }
  return 0;
}

static void sort_query(qent *e, size_t n) {
  for (size_t i = 1; i < n; i++) {
    qent t = e[i];
    size_t j = i;
    while (j > 0 && qent_cmp(&e[j - 1], &t) > 0) {
      e[j] = e[j - 1];
      j--;
    }
    e[j] = t;
  }
}

static void sb_query(sbuf *b, const qent *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i > 0) sb_ch(b, '&');
    sb_mem(b, e[i].k, e[i].klen);
    sb_ch(b, '=');
    sb_mem(b, e[i].v, e[i].vlen);
  }
}

static qent qent_lit(const char *k, const char *v, size_t vlen) {
  qent e = {k, strlen(k), v, vlen};
  return e;
}

/* ---- the signer ------------------------------------------------------- */

typedef struct {
  int presign;
  const char *method, *scheme, *host, *path, *query, *payload;
  time_t now;
  unsigned expires;
  const sl_sigv4_header *hdrs;
  size_t nhdrs;
} sreq;

static int copy_out(char *dst, size_t dst_size, const char *src, size_t n) {
  if (dst_size <= n) return SL_ETOOBIG;
  memcpy(dst, src, n);
  dst[n] = '\0';
  return 0;
}

static int is_payload_hash(const char *p) {
  if (strcmp(p, UNSIGNED_PAYLOAD) == 0) return 1;
  size_t i = 0;
  for (; p[i]; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
  return i == 64;
}

/* 0 when r can be signed, else SL_EINVAL or SL_ETOOBIG. */
static int check_request(const sreq *r) {
  if (r->method == NULL || r->host == NULL || r->path == NULL || r->payload == NULL ||
      (r->hdrs == NULL && r->nhdrs > 0))
    return SL_EINVAL;
  if (!is_token(r->method) || !is_host(r->host) || r->path[0] != '/') return SL_EINVAL;
  if (r->presign) {
    if (r->scheme == NULL || (strcmp(r->scheme, "http") != 0 && strcmp(r->scheme, "https") != 0))
      return SL_EINVAL;
    if (r->expires < 1 || r->expires > MAX_EXPIRES) return SL_EINVAL;
  } else if (!is_payload_hash(r->payload)) {
    return SL_EINVAL;
  }
  if ((int64_t)r->now < 0 || (int64_t)r->now > MAX_UNIX_TIME) return SL_EINVAL;
  if (r->nhdrs > SL_SIGV4_MAX_HEADERS) return SL_ETOOBIG;
  return 0;
}

/* r's x-amz-date (YYYYMMDDTHHMMSSZ), s's day made current */
static int amz_date_of(sl_sigv4 *s, const sreq *r, char amz_date[SL_SIGV4_AMZ_DATE_LEN + 1]) {
  int64_t t = (int64_t)r->now;
  int rc = ensure_day(s, t / SECS_PER_DAY);
  if (rc != 0) return rc;
  unsigned sod = (unsigned)(t % SECS_PER_DAY);
  memcpy(amz_date, s->date8, 8);
  amz_date[8] = 'T';
  put2(amz_date + 9, sod / 3600);
  put2(amz_date + 11, sod / 60 % 60);
  put2(amz_date + 13, sod % 60);
  amz_date[15] = 'Z';
  amz_date[16] = '\0';
  return 0;
}

/* The string to sign of the canonical request creq (into sts, its length
 * in *sts_len) and its signature in hex. */
static int signature(sl_sigv4 *s, const char *creq, size_t creq_len, const char *amz_date,
                     char sts[STS_MAX], size_t *sts_len, char sig[65]) {
  unsigned char digest[32];
  int rc = sha256(s, creq, creq_len, digest);
  if (rc != 0) return rc;
  sbuf sb;
  sb_init(&sb, sts, STS_MAX - 1);
  sb_mem(&sb, ALGORITHM "\n", sizeof ALGORITHM);
  sb_mem(&sb, amz_date, SL_SIGV4_AMZ_DATE_LEN);
  sb_ch(&sb, '\n');
  sb_mem(&sb, s->scope, s->scope_len);
  sb_ch(&sb, '\n');
  if (sb.over || sb.cap - sb.len < 64)
    return SL_ETOOBIG; /* unreachable: STS_MAX covers the worst case */
  hex_lower(sts + sb.len, digest, 32);
  sb.len += 64;
  *sts_len = sb.len;
  unsigned char mac[32];
  rc = hmac_signing(s, sts, sb.len, mac);
  if (rc != 0) return rc;
  hex_lower(sig, mac, 32);
  return 0;
}

/* Where the canonical request's parts are, for the output. */
typedef struct {
  const char *creq;
  size_t creq_len, uri_off, uri_len, q_off, q_len;
  const char *signed_hdrs;
  size_t signed_len;
} canon;

/* Presign: the URL; authorize: the Authorization value. */
static int write_out(const sl_sigv4 *s, const sreq *r, const canon *c, const char *sig, char *out,
                     size_t out_size) {
  sbuf o;
  sb_init(&o, out, out_size - 1);
  if (r->presign) {
    sb_str(&o, r->scheme);
    sb_mem(&o, "://", 3);
    sb_str(&o, r->host);
    sb_mem(&o, c->creq + c->uri_off, c->uri_len);
    sb_ch(&o, '?');
    sb_mem(&o, c->creq + c->q_off, c->q_len);
    sb_mem(&o, "&X-Amz-Signature=", 17);
    sb_mem(&o, sig, 64);
  } else {
    sb_mem(&o, ALGORITHM " Credential=", sizeof ALGORITHM + 11);
    sb_mem(&o, s->access_key, s->access_key_len);
    sb_ch(&o, '/');
    sb_mem(&o, s->scope, s->scope_len);
    sb_mem(&o, ",SignedHeaders=", 15);
    sb_mem(&o, c->signed_hdrs, c->signed_len);
    sb_mem(&o, ",Signature=", 11);
    sb_mem(&o, sig, 64);
  }
  if (o.over) return SL_ETOOBIG;
  out[o.len] = '\0';
  return 0;
}

/* Signs r. Presign: writes the URL into out. Authorize: writes the
 * Authorization value into out and the x-amz-date into amz_date_out. */
static int sign_request(sl_sigv4 *s, const sreq *r, char *out, size_t out_size, char *amz_date_out,
                        sl_sigv4_debug *dbg) {
  int rc = check_request(r);
  if (rc != 0) return rc;
  char amz_date[SL_SIGV4_AMZ_DATE_LEN + 1];
  if ((rc = amz_date_of(s, r, amz_date)) != 0) return rc;

  /* Headers: the signer's own first, then the caller's; sorted. */
  hent hents[SL_SIGV4_MAX_HEADERS + 3];
  size_t nh = 0;
  hent_set(&hents[nh++], "host", r->host);
  if (!r->presign) {
    hent_set(&hents[nh++], "x-amz-content-sha256", r->payload);
    hent_set(&hents[nh++], "x-amz-date", amz_date);
  }
  rc = collect_headers(r->hdrs, r->nhdrs, !r->presign, hents, &nh);
  if (rc != 0) return rc;

  char signed_hdrs[SIGNED_HEADERS_MAX];
  sbuf shb;
  sb_init(&shb, signed_hdrs, sizeof signed_hdrs);
  sb_signed_headers(&shb, hents, nh);
  if (shb.over) return SL_ETOOBIG;

  /* Query: caller params (encoded into the arena) + X-Amz-* for presign. */
  char arena_buf[QUERY_ARENA_MAX];
  sbuf arena;
  sb_init(&arena, arena_buf, sizeof arena_buf);
  qent qents[SL_SIGV4_MAX_QUERY + PRESIGN_PARAMS];
  size_t nq = 0;
  rc = parse_query(r->query, &arena, qents, &nq, SL_SIGV4_MAX_QUERY);
  if (rc != 0) return rc;
  if (r->presign) {
    char expires_dec[16];
    int ne = 0;
    for (unsigned v = r->expires; v > 0; v /= 10) /* digits, reversed */
      expires_dec[ne++] = (char)('0' + v % 10);
    size_t x0 = arena.len;
    while (ne > 0) sb_ch(&arena, expires_dec[--ne]);
    size_t h0 = arena.len;
    sb_uri(&arena, signed_hdrs, shb.len, 0);
    if (arena.over) return SL_ETOOBIG;
    qents[nq++] = qent_lit("X-Amz-Algorithm", ALGORITHM, sizeof ALGORITHM - 1);
    qents[nq++] = qent_lit("X-Amz-Credential", s->cred_q, s->cred_q_len);
    qents[nq++] = qent_lit("X-Amz-Date", amz_date, SL_SIGV4_AMZ_DATE_LEN);
    qents[nq++] = qent_lit("X-Amz-Expires", arena.buf + x0, h0 - x0);
    qents[nq++] = qent_lit("X-Amz-SignedHeaders", arena.buf + h0, arena.len - h0);
  }
  sort_query(qents, nq);

  /* Canonical request. */
  char creq[SL_SIGV4_MAX_CANONICAL];
  sbuf cr;
  sb_init(&cr, creq, sizeof creq - 1);
  sb_str(&cr, r->method);
  sb_ch(&cr, '\n');
  size_t uri_off = cr.len;
  sb_uri(&cr, r->path, strlen(r->path), 1);
  size_t uri_len = cr.len - uri_off;
  sb_ch(&cr, '\n');
  size_t q_off = cr.len;
  sb_query(&cr, qents, nq);
  size_t q_len = cr.len - q_off;
  sb_ch(&cr, '\n');
  sb_canonical_headers(&cr, hents, nh);
  sb_ch(&cr, '\n');
  sb_mem(&cr, signed_hdrs, shb.len);
  sb_ch(&cr, '\n');
  sb_str(&cr, r->presign ? UNSIGNED_PAYLOAD : r->payload);
  if (cr.over) return SL_ETOOBIG;
  creq[cr.len] = '\0';

  /* String to sign and signature. */
  char sts[STS_MAX], sig[65];
  size_t sts_len = 0;
  if ((rc = signature(s, creq, cr.len, amz_date, sts, &sts_len, sig)) != 0) return rc;

  if (dbg != NULL) {
    hex_lower(dbg->signing_key_hex, s->signing_key, 32);
    if (dbg->canonical_request != NULL &&
        copy_out(dbg->canonical_request, dbg->canonical_request_size, creq, cr.len) != 0)
      return SL_ETOOBIG;
    if (dbg->string_to_sign != NULL &&
        copy_out(dbg->string_to_sign, dbg->string_to_sign_size, sts, sts_len) != 0)
      return SL_ETOOBIG;
  }

  canon c = {creq, cr.len, uri_off, uri_len, q_off, q_len, signed_hdrs, shb.len};
  if ((rc = write_out(s, r, &c, sig, out, out_size)) != 0) return rc;
  if (amz_date_out != NULL) memcpy(amz_date_out, amz_date, SL_SIGV4_AMZ_DATE_LEN + 1);
  return 0;
}

static void clear_debug(sl_sigv4_debug *dbg) {
  if (dbg == NULL) return;
  dbg->signing_key_hex[0] = '\0';
  if (dbg->canonical_request != NULL && dbg->canonical_request_size > 0)
    dbg->canonical_request[0] = '\0';
  if (dbg->string_to_sign != NULL && dbg->string_to_sign_size > 0) dbg->string_to_sign[0] = '\0';
}

static int presign_impl(sl_sigv4 *s, const char *method, const char *scheme, const char *host,
                        const char *path, const char *query, time_t now, unsigned expires,
                        const sl_sigv4_header *hdrs, size_t nhdrs, char *url, size_t url_size,
                        sl_sigv4_debug *dbg) {
  if (url == NULL || url_size == 0) return SL_EINVAL;
  url[0] = '\0';
  if (s == NULL) return SL_EINVAL;
  sreq r = {.presign = 1,
            .method = method,
            .scheme = scheme,
            .host = host,
            .path = path,
            .query = query,
            .payload = UNSIGNED_PAYLOAD,
            .now = now,
            .expires = expires,
            .hdrs = hdrs,
            .nhdrs = nhdrs};
  int rc = sign_request(s, &r, url, url_size, NULL, dbg);
  if (rc != 0) {
    url[0] = '\0';
    clear_debug(dbg);
  }
  return rc;
}

int sl_sigv4_presign(sl_sigv4 *s, const char *method, const char *scheme, const char *host,
                     const char *path, const char *query, time_t now, unsigned expires,
                     const sl_sigv4_header *hdrs, size_t nhdrs, char *url, size_t url_size) {
  return presign_impl(s, method, scheme, host, path, query, now, expires, hdrs, nhdrs, url,
                      url_size, NULL);
}

int sl_sigv4_presign_debug(sl_sigv4 *s, const char *method, const char *scheme, const char *host,
                           const char *path, const char *query, time_t now, unsigned expires,
                           const sl_sigv4_header *hdrs, size_t nhdrs, char *url, size_t url_size,
                           sl_sigv4_debug *dbg) {
  if (dbg == NULL) return SL_EINVAL;
  return presign_impl(s, method, scheme, host, path, query, now, expires, hdrs, nhdrs, url,
                      url_size, dbg);
}

static int authorize_impl(sl_sigv4 *s, const char *method, const char *host, const char *path,
                          const char *query, const char *payload_sha256_hex, time_t now,
                          const sl_sigv4_header *hdrs, size_t nhdrs, char *auth, size_t auth_size,
                          char amz_date[17], sl_sigv4_debug *dbg) {
  if (auth == NULL || auth_size == 0 || amz_date == NULL) return SL_EINVAL;
  auth[0] = '\0';
  amz_date[0] = '\0';
  if (s == NULL) return SL_EINVAL;
  sreq r = {.presign = 0,
            .method = method,
            .host = host,
            .path = path,
            .query = query,
            .payload = payload_sha256_hex,
            .now = now,
            .hdrs = hdrs,
            .nhdrs = nhdrs};
  int rc = sign_request(s, &r, auth, auth_size, amz_date, dbg);
  if (rc != 0) {
    auth[0] = '\0';
    amz_date[0] = '\0';
    clear_debug(dbg);
  }
  return rc;
}

int sl_sigv4_authorize(sl_sigv4 *s, const char *method, const char *host, const char *path,
                       const char *query, const char *payload_sha256_hex, time_t now,
                       const sl_sigv4_header *hdrs, size_t nhdrs, char *auth, size_t auth_size,
                       char amz_date[17]) {
  return authorize_impl(s, method, host, path, query, payload_sha256_hex, now, hdrs, nhdrs, auth,
                        auth_size, amz_date, NULL);
}

int sl_sigv4_authorize_debug(sl_sigv4 *s, const char *method, const char *host, const char *path,
                             const char *query, const char *payload_sha256_hex, time_t now,
                             const sl_sigv4_header *hdrs, size_t nhdrs, char *auth,
                             size_t auth_size, char amz_date[17], sl_sigv4_debug *dbg) {
  if (dbg == NULL) return SL_EINVAL;
  return authorize_impl(s, method, host, path, query, payload_sha256_hex, now, hdrs, nhdrs, auth,
                        auth_size, amz_date, dbg);
}

/* ---- standalone encoders -------------------------------------------- */

int sl_sigv4_encode_path(const char *path, char *out, size_t out_size) {
  if (out == NULL || out_size == 0) return SL_EINVAL;
  out[0] = '\0';
  if (path == NULL || path[0] != '/') return SL_EINVAL;
  sbuf b;
  sb_init(&b, out, out_size - 1);
  sb_uri(&b, path, strlen(path), 1);
  if (b.over) {
    out[0] = '\0';
    return SL_ETOOBIG;
  }
  out[b.len] = '\0';
  return 0;
}

int sl_sigv4_encode_query(const char *query, char *out, size_t out_size) {
  if (out == NULL || out_size == 0) return SL_EINVAL;
  out[0] = '\0';
  char arena_buf[QUERY_ARENA_MAX];
  sbuf arena;
  sb_init(&arena, arena_buf, sizeof arena_buf);
  qent qents[SL_SIGV4_MAX_QUERY];
  size_t nq = 0;
  int rc = parse_query(query, &arena, qents, &nq, SL_SIGV4_MAX_QUERY);
  if (rc != 0) return rc;
  sort_query(qents, nq);
  sbuf b;
  sb_init(&b, out, out_size - 1);
  sb_query(&b, qents, nq);
  if (b.over) {
    out[0] = '\0';
    return SL_ETOOBIG;
  }
  out[b.len] = '\0';
  return 0;
}
