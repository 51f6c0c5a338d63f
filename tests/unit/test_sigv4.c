/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sigv4.c — unit tests for the SigV4 signer (sl_sigv4).
 *
 * Design: the presign checks replay the shared vector file
 * $SLUICE_TEST_VECTORS/sigv4-presign-put.txt (read at run time, parsed by
 * its section markers) and compare signing key, canonical request,
 * string-to-sign, URL and the host-only URL byte for byte. Header signing is
 * checked against the "Example: GET Object" of the AWS S3 SigV4 docs
 * (header-based auth). The rest covers the key cache, path/query encoding,
 * header normalisation, dates, bounded outputs and argument validation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_sigv4.h"

#ifndef SLUICE_TEST_VECTORS
#error "define SLUICE_TEST_VECTORS as the test-vector directory path string"
#endif

#define AK "AKIAIOSFODNN7EXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define T_VECTOR ((time_t)1795953600) /* 20261129T120000Z */
#define HOST "127.0.0.1:9000"
#define VPATH "/answers/submissions/0b7e0b4e-0000-4000-8000-000000000001/q01.webm"

/* ---- vector file --------------------------------------------------------- */

typedef struct {
  char *text;
  char *signing_key;
  char *canonical_request;
  char *creq_sha256;
  char *string_to_sign;
  char *url;
  char *url_host_only;
} vector;

static vector g_vec;

static char *dup_range(const char *b, const char *e) {
  size_t n = (size_t)(e - b);
  char *p = malloc(n + 1);
  if (p != NULL) {
    memcpy(p, b, n);
    p[n] = '\0';
  }
  return p;
}

/* Text between `start` and the next `end` (end == NULL: end of line). */
static char *section(const char *text, const char *start, const char *end) {
  const char *b = strstr(text, start);
  if (b == NULL) return NULL;
  b += strlen(start);
  const char *e = strstr(b, end ? end : "\n");
  if (e == NULL) e = b + strlen(b);
  return dup_range(b, e);
}

static int load_vector(void **state) {
  (void)state;
  const char *path = SLUICE_TEST_VECTORS "/sigv4-presign-put.txt";
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (buf == NULL) {
    fclose(f);
    return -1;
  }
  len = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[len] = '\0';
  g_vec.text = buf;
  /* "signing key (20261129/us-east-1/s3): <hex>" */
  const char *sk = strstr(buf, "\nsigning key (");
  sk = sk ? strstr(sk, "): ") : NULL;
  g_vec.signing_key = sk ? section(sk, "): ", NULL) : NULL;
  g_vec.canonical_request =
      section(buf, "--- canonical request ---\n", "\n--- sha256(canonical request) ---");
  g_vec.creq_sha256 = section(buf, "--- sha256(canonical request) ---\n", NULL);
  g_vec.string_to_sign = section(buf, "--- string to sign ---\n", "\n--- url ---");
  g_vec.url = section(buf, "--- url ---\n", NULL);
  g_vec.url_host_only = section(buf, "host-only variant (minio): ", NULL);
  if (!g_vec.signing_key || !g_vec.canonical_request || !g_vec.creq_sha256 ||
      !g_vec.string_to_sign || !g_vec.url || !g_vec.url_host_only) {
    fprintf(stderr, "%s: missing section\n", path);
    return -1;
  }
  return 0;
}

static int free_vector(void **state) {
  (void)state;
  free(g_vec.text);
  free(g_vec.signing_key);
  free(g_vec.canonical_request);
  free(g_vec.creq_sha256);
  free(g_vec.string_to_sign);
  free(g_vec.url);
  free(g_vec.url_host_only);
  memset(&g_vec, 0, sizeof g_vec);
  return 0;
}

/* ---- helpers -------------------------------------------------------------- */

static const sl_sigv4_header VEC_HDRS[] = {
    {"content-length", "4000000"},
    {"content-type", "audio/webm"},
};

static sl_sigv4 *new_signer(void) {
  sl_sigv4 *s = NULL;
  assert_int_equal(sl_sigv4_new(&s, AK, SK, "us-east-1", "s3"), 0);
  assert_non_null(s);
  return s;
}

typedef struct {
  char creq[4096];
  char sts[512];
  sl_sigv4_debug d;
} dbgbuf;

static void dbg_init(dbgbuf *b) {
  memset(b, 0, sizeof *b);
  b->d.canonical_request = b->creq;
  b->d.canonical_request_size = sizeof b->creq;
  b->d.string_to_sign = b->sts;
  b->d.string_to_sign_size = sizeof b->sts;
}

/* Line `n` (0-based) of a canonical request, copied into out. */
static const char *line_of(const char *text, int n, char *out, size_t size) {
  for (; n > 0 && text; n--) {
    text = strchr(text, '\n');
    if (text) text++;
  }
  assert_non_null(text);
  const char *e = strchr(text, '\n');
  size_t len = e ? (size_t)(e - text) : strlen(text);
  assert_true(len < size);
  memcpy(out, text, len);
  out[len] = '\0';
  return out;
}

/* ---- shared vector -------------------------------------------------------- */

static void test_vector_presign_put(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  dbgbuf b;
  dbg_init(&b);
  char url[1024];
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900,
                                          VEC_HDRS, 2, url, sizeof url, &b.d),
                   0);
  assert_string_equal(b.d.signing_key_hex, g_vec.signing_key);
  assert_string_equal(b.creq, g_vec.canonical_request);
  assert_string_equal(b.sts, g_vec.string_to_sign);
  /* the last line of the string to sign is sha256(canonical request) */
  const char *last = strrchr(b.sts, '\n');
  assert_non_null(last);
  assert_string_equal(last + 1, g_vec.creq_sha256);
  assert_string_equal(url, g_vec.url);

  /* the plain call gives the same URL */
  char url2[1024];
  assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, VEC_HDRS, 2,
                                    url2, sizeof url2),
                   0);
  assert_string_equal(url2, g_vec.url);
  sl_sigv4_free(s);
}

static void test_vector_host_only(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  char url[1024];
  assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, NULL, 0,
                                    url, sizeof url),
                   0);
  assert_string_equal(url, g_vec.url_host_only);
  sl_sigv4_free(s);
}

/* Names in any case, values with blanks, any order: same signature. */
static void test_header_normalisation(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  const sl_sigv4_header h[] = {
      {"Content-Type", " \taudio/webm  "},
      {"CONTENT-LENGTH", "4000000"},
  };
  char url[1024];
  assert_int_equal(
      sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, h, 2, url, sizeof url),
      0);
  assert_string_equal(url, g_vec.url);

  /* internal blanks collapse; repeated names join with ',' in input order */
  const sl_sigv4_header h2[] = {
      {"X-Amz-Meta-B", "two   words"},
      {"x-amz-meta-ab", "p"},
      {"x-amz-meta-a", "1"},
      {"X-AMZ-META-B", "second"},
  };
  dbgbuf b;
  dbg_init(&b);
  assert_int_equal(sl_sigv4_presign_debug(s, "GET", "https", HOST, "/b/k", NULL, T_VECTOR, 60, h2,
                                          4, url, sizeof url, &b.d),
                   0);
  char line[512];
  assert_string_equal(line_of(b.creq, 3, line, sizeof line), "host:" HOST);
  assert_string_equal(line_of(b.creq, 4, line, sizeof line), "x-amz-meta-a:1");
  assert_string_equal(line_of(b.creq, 5, line, sizeof line), "x-amz-meta-ab:p");
  assert_string_equal(line_of(b.creq, 6, line, sizeof line), "x-amz-meta-b:two words,second");
  assert_string_equal(line_of(b.creq, 7, line, sizeof line), "");
  assert_string_equal(line_of(b.creq, 8, line, sizeof line),
                      "host;x-amz-meta-a;x-amz-meta-ab;x-amz-meta-b");
  assert_non_null(strstr(url, "&X-Amz-SignedHeaders=host%3Bx-amz-meta-a%3B"
                              "x-amz-meta-ab%3Bx-amz-meta-b&"));
  assert_true(strncmp(url, "https://" HOST "/b/k?", 8 + strlen(HOST) + 5) == 0);
  sl_sigv4_free(s);
}

/* ---- key cache ------------------------------------------------------------ */

static void test_signing_key_cache(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  assert_int_equal(sl_sigv4_key_derivations(s), 0);
  char url1[1024], url2[1024], key1[65];
  dbgbuf b;
  dbg_init(&b);
  b.d.canonical_request = NULL; /* optional outputs may be skipped */
  b.d.string_to_sign = NULL;

  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, NULL,
                                          0, url1, sizeof url1, &b.d),
                   0);
  assert_int_equal(sl_sigv4_key_derivations(s), 1);
  memcpy(key1, b.d.signing_key_hex, sizeof key1);
  assert_string_equal(key1, g_vec.signing_key);

  /* same UTC day, later time: cached key, different URL */
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL,
                                          T_VECTOR + 11 * 3600 + 59 * 60 + 59, 900, NULL, 0, url2,
                                          sizeof url2, &b.d),
                   0);
  assert_int_equal(sl_sigv4_key_derivations(s), 1);
  assert_string_equal(b.d.signing_key_hex, key1);
  assert_string_not_equal(url1, url2);
  assert_non_null(strstr(url2, "X-Amz-Date=20261129T235959Z"));

  /* authorize shares the cache */
  char auth[512], date[17];
  assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/answers", NULL, "UNSIGNED-PAYLOAD",
                                      T_VECTOR, NULL, 0, auth, sizeof auth, date),
                   0);
  assert_int_equal(sl_sigv4_key_derivations(s), 1);

  /* next day: new key */
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR + 12 * 3600,
                                          900, NULL, 0, url2, sizeof url2, &b.d),
                   0);
  assert_int_equal(sl_sigv4_key_derivations(s), 2);
  assert_string_not_equal(b.d.signing_key_hex, key1);
  assert_non_null(strstr(url2, "X-Amz-Date=20261130T000000Z"));
  assert_non_null(strstr(url2, "%2F20261130%2Fus-east-1%2Fs3%2F"));

  /* back to the first day: recomputed, identical to before */
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, NULL,
                                          0, url2, sizeof url2, &b.d),
                   0);
  assert_int_equal(sl_sigv4_key_derivations(s), 3);
  assert_string_equal(b.d.signing_key_hex, key1);
  assert_string_equal(url2, url1);
  sl_sigv4_free(s);
}

/* ---- encoding ------------------------------------------------------------- */

static void test_path_encoding(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  /* space, '+', UTF-8 "é" (C3 A9), '%', and unreserved -._~ */
  const char *raw = "/answers/sub mission/a+b/caf\xc3\xa9 100%/~x-y_z.webm";
  const char *enc = "/answers/sub%20mission/a%2Bb/caf%C3%A9%20100%25/~x-y_z.webm";
  dbgbuf b;
  dbg_init(&b);
  char url[1024], line[512];
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, raw, NULL, T_VECTOR, 900, NULL, 0,
                                          url, sizeof url, &b.d),
                   0);
  assert_string_equal(line_of(b.creq, 1, line, sizeof line), enc);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "http://%s%s?X-Amz-Algorithm=", HOST, enc);
  assert_true(strncmp(url, prefix, strlen(prefix)) == 0);

  char out[256];
  assert_int_equal(sl_sigv4_encode_path(raw, out, sizeof out), 0);
  assert_string_equal(out, enc);
  assert_int_equal(sl_sigv4_encode_path(raw, out, strlen(enc)), SL_ETOOBIG);
  assert_string_equal(out, "");
  assert_int_equal(sl_sigv4_encode_path(raw, out, strlen(enc) + 1), 0);
  assert_int_equal(sl_sigv4_encode_path("no-slash", out, sizeof out), SL_EINVAL);
  sl_sigv4_free(s);
}

static void test_query_params(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  dbgbuf b;
  dbg_init(&b);
  char url[1024], line[1024];
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH,
                                          "uploadId=abc/d e+f&partNumber=3&uploads", T_VECTOR, 900,
                                          NULL, 0, url, sizeof url, &b.d),
                   0);
  const char *cq = "X-Amz-Algorithm=AWS4-HMAC-SHA256"
                   "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261129%2Fus-east-1%2Fs3%2F"
                   "aws4_request"
                   "&X-Amz-Date=20261129T120000Z&X-Amz-Expires=900"
                   "&X-Amz-SignedHeaders=host"
                   "&partNumber=3&uploadId=abc%2Fd%20e%2Bf&uploads=";
  assert_string_equal(line_of(b.creq, 2, line, sizeof line), cq);
  const char *q = strchr(url, '?');
  assert_non_null(q);
  assert_true(strncmp(q + 1, cq, strlen(cq)) == 0);
  assert_true(strncmp(q + 1 + strlen(cq), "&X-Amz-Signature=", 17) == 0);
  assert_int_equal(strlen(q + 1 + strlen(cq) + 17), 64);

  /* a param that sorts before X-Amz-* */
  assert_int_equal(sl_sigv4_presign_debug(s, "GET", "http", HOST, "/b/k", "A=1", T_VECTOR, 900,
                                          NULL, 0, url, sizeof url, &b.d),
                   0);
  assert_true(strncmp(line_of(b.creq, 2, line, sizeof line), "A=1&X-Amz-Algorithm=", 20) == 0);

  /* the signer's own parameters cannot be passed in */
  assert_int_equal(sl_sigv4_presign(s, "GET", "http", HOST, "/b/k", "X-Amz-Expires=5", T_VECTOR,
                                    900, NULL, 0, url, sizeof url),
                   SL_EINVAL);
  assert_string_equal(url, "");

  char out[128];
  assert_int_equal(sl_sigv4_encode_query("b=2&a=1 2&&a=0", out, sizeof out), 0);
  assert_string_equal(out, "a=0&a=1%202&b=2");
  assert_int_equal(sl_sigv4_encode_query(NULL, out, sizeof out), 0);
  assert_string_equal(out, "");
  sl_sigv4_free(s);
}

/* ---- dates ---------------------------------------------------------------- */

static void test_amz_dates(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  static const struct {
    time_t t;
    const char *date;
  } cases[] = {
      {0, "19700101T000000Z"},          {94611723, "19721231T010203Z"},
      {951868800, "20000301T000000Z"},  {1709251199, "20240229T235959Z"},
      {4107587696, "21000301T123456Z"}, {253402300799, "99991231T235959Z"},
  };
  char auth[512], date[17];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/", NULL, "UNSIGNED-PAYLOAD", cases[i].t,
                                        NULL, 0, auth, sizeof auth, date),
                     0);
    assert_string_equal(date, cases[i].date);
    char scope[32];
    snprintf(scope, sizeof scope, "/%.8s/us-east-1/s3/", cases[i].date);
    assert_non_null(strstr(auth, scope));
  }
  assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/", NULL, "UNSIGNED-PAYLOAD", (time_t)-1,
                                      NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/", NULL, "UNSIGNED-PAYLOAD",
                                      (time_t)253402300800, NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  sl_sigv4_free(s);
}

/* ---- bounded outputs ------------------------------------------------------ */

static void test_buffer_too_small(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  size_t n = strlen(g_vec.url);
  char *url = malloc(n + 1);
  assert_non_null(url);
  for (size_t size = 1; size <= n; size++) {
    memset(url, 'x', n + 1);
    assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, VEC_HDRS,
                                      2, url, size),
                     SL_ETOOBIG);
    assert_int_equal(url[0], '\0');
    for (size_t i = size; i < n + 1; i++) /* nothing written past size */
      assert_int_equal(url[i], 'x');
  }
  assert_int_equal(
      sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, VEC_HDRS, 2, url, n + 1),
      0);
  assert_string_equal(url, g_vec.url);
  free(url);

  /* authorize: Authorization buffer */
  char auth[512], date[17];
  assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/x", NULL, "UNSIGNED-PAYLOAD", T_VECTOR,
                                      NULL, 0, auth, sizeof auth, date),
                   0);
  size_t an = strlen(auth);
  assert_int_equal(sl_sigv4_authorize(s, "GET", HOST, "/x", NULL, "UNSIGNED-PAYLOAD", T_VECTOR,
                                      NULL, 0, auth, an, date),
                   SL_ETOOBIG);
  assert_string_equal(auth, "");
  assert_string_equal(date, "");

  /* debug buffers */
  dbgbuf b;
  dbg_init(&b);
  b.d.canonical_request_size = strlen(g_vec.canonical_request);
  char u[1024];
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900,
                                          VEC_HDRS, 2, u, sizeof u, &b.d),
                   SL_ETOOBIG);
  assert_string_equal(u, "");

  /* inputs over the internal limits */
  sl_sigv4_header many[SL_SIGV4_MAX_HEADERS + 1];
  for (size_t i = 0; i < SL_SIGV4_MAX_HEADERS + 1; i++)
    many[i] = (sl_sigv4_header){"x-amz-meta-a", "v"};
  assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, many,
                                    SL_SIGV4_MAX_HEADERS + 1, u, sizeof u),
                   SL_ETOOBIG);
  size_t plen = SL_SIGV4_MAX_CANONICAL;
  char *longpath = malloc(plen + 1);
  assert_non_null(longpath);
  memset(longpath, ' ', plen); /* each byte becomes %20 */
  longpath[0] = '/';
  longpath[plen] = '\0';
  char *bigurl = malloc(4 * plen);
  assert_non_null(bigurl);
  assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, longpath, NULL, T_VECTOR, 900, NULL, 0,
                                    bigurl, 4 * plen),
                   SL_ETOOBIG);
  free(bigurl);
  free(longpath);
  sl_sigv4_free(s);
}

/* ---- argument validation ------------------------------------------------- */

static void test_null_and_invalid_args(void **state) {
  (void)state;
  sl_sigv4 *s = (sl_sigv4 *)0x1; /* must be reset to NULL on failure */
  assert_int_equal(sl_sigv4_new(NULL, AK, SK, "us-east-1", "s3"), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, NULL, SK, "us-east-1", "s3"), SL_EINVAL);
  assert_null(s);
  assert_int_equal(sl_sigv4_new(&s, AK, NULL, "us-east-1", "s3"), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, AK, SK, NULL, "s3"), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, AK, SK, "us-east-1", NULL), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, "", SK, "us-east-1", "s3"), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, AK, "", "us-east-1", "s3"), SL_EINVAL);
  assert_int_equal(sl_sigv4_new(&s, AK, SK, "us/east", "s3"), SL_EINVAL);
  assert_null(s);
  sl_sigv4_free(NULL);

  s = new_signer();
  char url[1024], auth[512], date[17];
  const sl_sigv4_header nullname[] = {{NULL, "v"}};
  const sl_sigv4_header nullval[] = {{"x-a", NULL}};
  const sl_sigv4_header crlf[] = {{"x-a", "v\r\nx-b: w"}};
  const sl_sigv4_header badname[] = {{"x a", "v"}};
  const sl_sigv4_header host[] = {{"Host", "evil"}};

#define PRESIGN(S, M, SC, H, P, HD, NH, U, US)                                                     \
  sl_sigv4_presign(S, M, SC, H, P, NULL, T_VECTOR, 900, HD, NH, U, US)
  assert_int_equal(PRESIGN(NULL, "PUT", "http", HOST, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, NULL, "http", HOST, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", NULL, HOST, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", NULL, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, NULL, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, NULL, 0, NULL, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, NULL, 0, url, 0), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, NULL, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, nullname, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, nullval, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, crlf, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, badname, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, VPATH, host, 1, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "ftp", HOST, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "", "http", HOST, VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", "", VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", "a b", VPATH, NULL, 0, url, sizeof url), SL_EINVAL);
  assert_int_equal(PRESIGN(s, "PUT", "http", HOST, "relative/key", NULL, 0, url, sizeof url),
                   SL_EINVAL);
#undef PRESIGN
  assert_int_equal(sl_sigv4_presign_debug(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 900, NULL,
                                          0, url, sizeof url, NULL),
                   SL_EINVAL);

  const sl_sigv4_header xdate[] = {{"X-Amz-Date", "20130524T000000Z"}};
#define AUTHZ(S, M, H, P, PL, HD, NH, A, AS, D)                                                    \
  sl_sigv4_authorize(S, M, H, P, NULL, PL, T_VECTOR, HD, NH, A, AS, D)
  assert_int_equal(
      AUTHZ(NULL, "GET", HOST, "/", "UNSIGNED-PAYLOAD", NULL, 0, auth, sizeof auth, date),
      SL_EINVAL);
  assert_int_equal(AUTHZ(s, NULL, HOST, "/", "UNSIGNED-PAYLOAD", NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", NULL, "/", "UNSIGNED-PAYLOAD", NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(
      AUTHZ(s, "GET", HOST, NULL, "UNSIGNED-PAYLOAD", NULL, 0, auth, sizeof auth, date), SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", HOST, "/", NULL, NULL, 0, auth, sizeof auth, date), SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", HOST, "/", "UNSIGNED-PAYLOAD", NULL, 0, NULL, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", HOST, "/", "UNSIGNED-PAYLOAD", NULL, 0, auth, sizeof auth, NULL),
                   SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", HOST, "/", "not-a-hash", NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(AUTHZ(s, "GET", HOST, "/",
                         "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA4959"
                         "91B7852B855",
                         NULL, 0, auth, sizeof auth, date),
                   SL_EINVAL);
  assert_int_equal(
      AUTHZ(s, "GET", HOST, "/", "UNSIGNED-PAYLOAD", xdate, 1, auth, sizeof auth, date), SL_EINVAL);
#undef AUTHZ
  sl_sigv4_free(s);
}

static void test_expires_range(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  char url[1024];
  static const struct {
    unsigned expires;
    int rc;
  } cases[] = {{0, SL_EINVAL}, {1, 0}, {604800, 0}, {604801, SL_EINVAL}, {4294967295u, SL_EINVAL}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR,
                                      cases[i].expires, NULL, 0, url, sizeof url),
                     cases[i].rc);
  assert_int_equal(sl_sigv4_presign(s, "PUT", "http", HOST, VPATH, NULL, T_VECTOR, 604800, NULL, 0,
                                    url, sizeof url),
                   0);
  assert_non_null(strstr(url, "&X-Amz-Expires=604800&"));
  sl_sigv4_free(s);
}

/* ---- header-based auth: AWS S3 docs, "Example: GET Object" ----------------- */

static void test_authorize_aws_get_object(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  const sl_sigv4_header range[] = {{"Range", "bytes=0-9"}};
  const char *empty_sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  dbgbuf b;
  dbg_init(&b);
  char auth[512], date[17];
  assert_int_equal(sl_sigv4_authorize_debug(s, "GET", "examplebucket.s3.amazonaws.com", "/test.txt",
                                            NULL, empty_sha, (time_t)1369353600, range, 1, auth,
                                            sizeof auth, date, &b.d),
                   0);
  assert_string_equal(date, "20130524T000000Z");
  assert_string_equal(b.creq, "GET\n"
                              "/test.txt\n"
                              "\n"
                              "host:examplebucket.s3.amazonaws.com\n"
                              "range:bytes=0-9\n"
                              "x-amz-content-sha256:"
                              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
                              "x-amz-date:20130524T000000Z\n"
                              "\n"
                              "host;range;x-amz-content-sha256;x-amz-date\n"
                              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert_string_equal(b.sts, "AWS4-HMAC-SHA256\n"
                             "20130524T000000Z\n"
                             "20130524/us-east-1/s3/aws4_request\n"
                             "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  assert_string_equal(auth, "AWS4-HMAC-SHA256 "
                            "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                            "Signature="
                            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");

  /* the plain call agrees */
  char auth2[512], date2[17];
  assert_int_equal(sl_sigv4_authorize(s, "GET", "examplebucket.s3.amazonaws.com", "/test.txt", NULL,
                                      empty_sha, (time_t)1369353600, range, 1, auth2, sizeof auth2,
                                      date2),
                   0);
  assert_string_equal(auth2, auth);
  assert_string_equal(date2, date);
  sl_sigv4_free(s);
}

/* Extra query params in header mode (e.g. ListParts) go into the canonical
 * query sorted and encoded. */
static void test_authorize_query(void **state) {
  (void)state;
  sl_sigv4 *s = new_signer();
  dbgbuf b;
  dbg_init(&b);
  char auth[512], date[17], line[256];
  assert_int_equal(sl_sigv4_authorize_debug(s, "POST", HOST, "/answers/a b.webm", "uploads",
                                            "UNSIGNED-PAYLOAD", T_VECTOR, NULL, 0, auth,
                                            sizeof auth, date, &b.d),
                   0);
  assert_string_equal(line_of(b.creq, 1, line, sizeof line), "/answers/a%20b.webm");
  assert_string_equal(line_of(b.creq, 2, line, sizeof line), "uploads=");
  assert_int_equal(sl_sigv4_authorize_debug(s, "GET", HOST, "/answers/k",
                                            "uploadId=x~y&max-parts=5", "UNSIGNED-PAYLOAD",
                                            T_VECTOR, NULL, 0, auth, sizeof auth, date, &b.d),
                   0);
  assert_string_equal(line_of(b.creq, 2, line, sizeof line), "max-parts=5&uploadId=x~y");
  assert_true(
      strncmp(auth,
              "AWS4-HMAC-SHA256 Credential=" AK "/20261129/us-east-1/s3/aws4_request,SignedHeaders="
              "host;x-amz-content-sha256;x-amz-date,Signature=",
              strlen("AWS4-HMAC-SHA256 Credential=" AK "/20261129/us-east-1/s3/aws4_request,"
                     "SignedHeaders=host;x-amz-content-sha256;"
                     "x-amz-date,Signature=")) == 0);
  sl_sigv4_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_presign_put),
      cmocka_unit_test(test_vector_host_only),
      cmocka_unit_test(test_header_normalisation),
      cmocka_unit_test(test_signing_key_cache),
      cmocka_unit_test(test_path_encoding),
      cmocka_unit_test(test_query_params),
      cmocka_unit_test(test_amz_dates),
      cmocka_unit_test(test_buffer_too_small),
      cmocka_unit_test(test_null_and_invalid_args),
      cmocka_unit_test(test_expires_range),
      cmocka_unit_test(test_authorize_aws_get_object),
      cmocka_unit_test(test_authorize_query),
  };
  return cmocka_run_group_tests(tests, load_vector, free_vector);
}
