/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_webhook.c — the pure parts of presign's storage-event webhook
 * (stages/lib/webhook_sig.c, stages/presign/webhook.c): the X-Sluice-Signature check (HMAC-SHA256
 * over "<t>.<body>", known vectors computed with
 *   printf '%s' '1796000000.{"Records":[]}' | openssl dgst -sha256 -hmac SECRET
 * ), timestamp tolerance, rotation, malformed headers, the bearer check,
 * and the normalisation of events (AWS passes through, R2 is rewritten into
 * Records that ingest's parser reads back).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3event.h"
#include "lib/webhook_sig.h"
#include "presign/webhook.h"
#include "sluice/sl_err.h"

#define SECRET "whsec_test_secret_0123456789"
#define PREVIOUS "whsec_previous_secret_abcdef"
#define T 1796000000
#define BODY "{\"Records\":[]}"
/* openssl dgst -sha256 -hmac SECRET over "1796000000.{"Records":[]}" */
#define SIG "5fd37c3d5a726734d278d70404b4e720b13fdf5f95a9618660675af038586fce"
/* the same with PREVIOUS */
#define SIG_PREV "8833d7d405ad9b217fb4845dfe7adfff546b651a8b9f911c2b5f93445693f10c"
/* SECRET over "1796000000." (empty body) */
#define SIG_EMPTY "000f389b298bc0dc4ae5ff10b08750f4121d348b43444e4e6956a1b4fa5a2719"

static const char *const one[] = {SECRET};
static const char *const both[] = {SECRET, PREVIOUS};

static int check(const char *hdr, const char *body, const char *const *secrets, size_t n,
                 int64_t now) {
  int64_t t = -1;
  return sl__webhook_check_signature(hdr, body, strlen(body), secrets, n, now, 300, &t);
}

static void test_sign_vectors(void **state) {
  (void)state;
  char hex[65];
  assert_int_equal(sl__webhook_sign(SECRET, T, BODY, strlen(BODY), hex), 0);
  assert_string_equal(hex, SIG);
  assert_int_equal(sl__webhook_sign(PREVIOUS, T, BODY, strlen(BODY), hex), 0);
  assert_string_equal(hex, SIG_PREV);
  assert_int_equal(sl__webhook_sign(SECRET, T, "", 0, hex), 0);
  assert_string_equal(hex, SIG_EMPTY);
}

static void test_signature_good(void **state) {
  (void)state;
  int64_t t = 0;
  assert_int_equal(
      sl__webhook_check_signature("t=1796000000,v1=" SIG, BODY, strlen(BODY), one, 1, T, 300, &t),
      0);
  assert_int_equal(t, T);
  /* blanks after commas, upper-case hex, an unknown scheme, a second v1 */
  assert_int_equal(check("t=1796000000, v0=abc, v1=" SIG, BODY, one, 1, T), 0);
  char upper[96];
  snprintf(upper, sizeof upper, "t=1796000000,v1=%s", SIG);
  for (char *p = upper + 16; *p; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  assert_int_equal(check(upper, BODY, one, 1, T), 0);
  assert_int_equal(check("t=1796000000,v1=" SIG_EMPTY ",v1=" SIG, BODY, one, 1, T), 0);
  assert_int_equal(check("t=1796000000,v1=" SIG_EMPTY, "", one, 1, T), 0);
}

static void test_signature_rotation(void **state) {
  (void)state;
  /* signed with the previous secret: good only while it is configured */
  assert_int_equal(check("t=1796000000,v1=" SIG_PREV, BODY, both, 2, T), 0);
  assert_int_equal(check("t=1796000000,v1=" SIG_PREV, BODY, one, 1, T), SL_EINVAL);
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, both, 2, T), 0);
  /* an empty secret signs nothing */
  const char *const empty[] = {"", NULL};
  char hex[65];
  sl__webhook_sign("", T, BODY, strlen(BODY), hex);
  char hdr[100];
  snprintf(hdr, sizeof hdr, "t=1796000000,v1=%s", hex);
  assert_int_equal(check(hdr, BODY, empty, 2, T), SL_EINVAL);
}

static void test_signature_forged(void **state) {
  (void)state;
  /* another body, another timestamp, another secret, one flipped digit */
  assert_int_equal(check("t=1796000000,v1=" SIG, "{\"Records\":[1]}", one, 1, T), SL_EINVAL);
  assert_int_equal(check("t=1796000001,v1=" SIG, BODY, one, 1, T), SL_EINVAL);
  const char *const other[] = {"whsec_some_other_secret_xyz"};
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, other, 1, T), SL_EINVAL);
  char hdr[100];
  snprintf(hdr, sizeof hdr, "t=1796000000,v1=%s", SIG);
  hdr[strlen(hdr) - 1] = hdr[strlen(hdr) - 1] == 'e' ? 'f' : 'e';
  assert_int_equal(check(hdr, BODY, one, 1, T), SL_EINVAL);
}

static void test_signature_tolerance(void **state) {
  (void)state;
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, one, 1, T + 300), 0);
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, one, 1, T - 300), 0);
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, one, 1, T + 301), SL_ETIMEDOUT);
  assert_int_equal(check("t=1796000000,v1=" SIG, BODY, one, 1, T - 301), SL_ETIMEDOUT);
  /* a stale forgery is a forgery first */
  assert_int_equal(check("t=1796000000,v1=" SIG_EMPTY, BODY, one, 1, T + 9999), SL_EINVAL);
}

static void test_signature_malformed(void **state) {
  (void)state;
  const char *bad[] = {
      "",
      "garbage",
      "v1=" SIG,                           /* no timestamp */
      "t=1796000000",                      /* no signature */
      "t=17960000x0,v1=" SIG,              /* not a number */
      "t=-1796000000,v1=" SIG,             /* negative */
      "t=1796000000,t=1796000000,v1=" SIG, /* two timestamps */
      "t=1796000000,v1=5fd37c",            /* short */
      "t=1796000000,v1=" SIG "00",         /* long */
      "t=1796000000,v1=zfd37c3d5a726734d278d70404b4e720b13fdf5f95a9618660675af038586fce",
      "t=1796000000000000000000,v1=" SIG,                                 /* overflow */
      "t=1796000000,v1=" SIG ",v1=" SIG ",v1=" SIG ",v1=" SIG ",v1=" SIG, /* > 4 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = check(bad[i], BODY, one, 1, T);
    if (rc != SL_EPARSE) fail_msg("header %zu \"%s\": %d", i, bad[i], rc);
  }
  assert_int_equal(sl__webhook_check_signature(NULL, BODY, 0, one, 1, T, 300, NULL), SL_EPARSE);
}

static void test_bearer(void **state) {
  (void)state;
  assert_int_equal(sl__webhook_check_bearer("Bearer " SECRET, one, 1), 0);
  assert_int_equal(sl__webhook_check_bearer("bearer " SECRET, one, 1), 0);
  assert_int_equal(sl__webhook_check_bearer("Bearer " PREVIOUS, both, 2), 0);
  assert_int_equal(sl__webhook_check_bearer("Bearer " PREVIOUS, one, 1), SL_EINVAL);
  assert_int_equal(sl__webhook_check_bearer("Bearer " SECRET "x", one, 1), SL_EINVAL);
  assert_int_equal(sl__webhook_check_bearer("Bearer whsec_test_secret_012345678", one, 1),
                   SL_EINVAL);
  assert_int_equal(sl__webhook_check_bearer(SECRET, one, 1), SL_EINVAL);
  assert_int_equal(sl__webhook_check_bearer("Basic " SECRET, one, 1), SL_EINVAL);
  assert_int_equal(sl__webhook_check_bearer(NULL, one, 1), SL_EINVAL);
  const char *const empty[] = {""};
  assert_int_equal(sl__webhook_check_bearer("Bearer ", empty, 1), SL_EINVAL);
}

static int norm(const char *body, char **out, size_t *outlen, size_t *nrec, char *label) {
  char why[512];
  return sl__webhook_normalize(body, strlen(body), 16, out, outlen, nrec, label, 1400, why,
                               sizeof why);
}

#define SID "01a22aab-3f9e-7b97-99e8-d9bfeb18307e"

static void test_normalize_aws(void **state) {
  (void)state;
  char *out = NULL, label[1400];
  size_t outlen = 0, nrec = 0;
  const char *aws =
      "{\"Records\":[{\"eventName\":\"s3:ObjectCreated:Put\",\"s3\":{\"bucket\":"
      "{\"name\":\"answers\"},\"object\":{\"key\":\"submissions/" SID "/q01.wav\",\"size\":10}}}]}";
  assert_int_equal(norm(aws, &out, &outlen, &nrec, label), 0);
  assert_null(out); /* produced as received */
  assert_int_equal(nrec, 1);
  assert_string_equal(label, "answers/submissions/" SID "/q01.wav");
  assert_int_equal(norm("{\"Event\":\"s3:TestEvent\"}", &out, &outlen, &nrec, label), 0);
  assert_int_equal(nrec, 0);
  assert_int_equal(norm("not json", &out, &outlen, &nrec, label), SL_EPARSE);
  assert_int_equal(norm("{\"hello\":1}", &out, &outlen, &nrec, label), SL_EPARSE);
  assert_int_equal(norm("{\"Records\":[{\"eventName\":\"x\"}]}", &out, &outlen, &nrec, label),
                   SL_EPARSE);
  assert_null(out);
  /* 17 records: more than ingest can emit for one event */
  char big[8192] = "{\"Records\":[";
  for (int i = 0; i < 17; i++)
    strcat(big, i ? ",{\"eventName\":\"s3:ObjectCreated:Put\",\"s3\":{\"bucket\":{\"name\":\"a\"},"
                    "\"object\":{\"key\":\"k\"}}}"
                  : "{\"eventName\":\"s3:ObjectCreated:Put\",\"s3\":{\"bucket\":{\"name\":\"a\"},"
                    "\"object\":{\"key\":\"k\"}}}");
  strcat(big, "]}");
  assert_int_equal(norm(big, &out, &outlen, &nrec, label), SL_ETOOBIG);
}

/* Reads record i of a normalised body the way ingest does. */
static void read_back(const char *out, size_t outlen, size_t i, sl__s3rec *rec) {
  json_t *root, *recs;
  char why[256];
  assert_int_equal(sl__s3event_load(out, outlen, &root, &recs, why, sizeof why), 0);
  assert_non_null(recs);
  assert_int_equal(sl__s3event_record(json_array_get(recs, i), rec, why, sizeof why), 0);
  /* strings point into root: copy what the caller checks */
  static char ev[64], bucket[64], etag[64];
  snprintf(ev, sizeof ev, "%s", rec->event_name);
  snprintf(bucket, sizeof bucket, "%s", rec->bucket);
  snprintf(etag, sizeof etag, "%s", rec->etag ? rec->etag : "");
  rec->event_name = ev;
  rec->bucket = bucket;
  rec->etag = etag;
  rec->raw_key = NULL;
  json_decref(root);
}

static void test_normalize_r2(void **state) {
  (void)state;
  char *out = NULL, label[1400];
  size_t outlen = 0, nrec = 0;
  const char *r2 = "{\"account\":\"3f4b\",\"action\":\"PutObject\",\"bucket\":\"answers\","
                   "\"object\":{\"key\":\"submissions/" SID "/q01.wav\",\"size\":65536,"
                   "\"eTag\":\"c846ff\"},\"eventTime\":\"2024-05-24T19:36:44.379Z\"}";
  assert_int_equal(norm(r2, &out, &outlen, &nrec, label), 0);
  assert_non_null(out);
  assert_int_equal(nrec, 1);
  assert_string_equal(label, "answers/submissions/" SID "/q01.wav");
  sl__s3rec rec;
  read_back(out, outlen, 0, &rec);
  assert_string_equal(rec.event_name, "s3:ObjectCreated:Put");
  assert_string_equal(rec.bucket, "answers");
  assert_string_equal(rec.key, "submissions/" SID "/q01.wav");
  assert_int_equal(rec.size, 65536);
  assert_string_equal(rec.etag, "c846ff");
  assert_int_equal(rec.ours, 1);
  assert_int_equal(rec.qno, 1);
  free(out);

  /* a batch; R2 keys are raw, so '+', '%' and blanks survive the trip */
  const char *batch =
      "[{\"action\":\"CompleteMultipartUpload\",\"bucket\":\"b\",\"object\":{\"key\":\"a b+c%d\"}},"
      "{\"action\":\"DeleteObject\",\"bucket\":\"b\",\"object\":{\"key\":\"x\"}}]";
  assert_int_equal(norm(batch, &out, &outlen, &nrec, label), 0);
  assert_int_equal(nrec, 2);
  read_back(out, outlen, 0, &rec);
  assert_string_equal(rec.event_name, "s3:ObjectCreated:CompleteMultipartUpload");
  assert_string_equal(rec.key, "a b+c%d");
  assert_int_equal(rec.size, -1);
  assert_int_equal(rec.ours, 0);
  read_back(out, outlen, 1, &rec);
  assert_string_equal(rec.event_name, "s3:ObjectRemoved:Delete");
  assert_int_equal(rec.created, 0);
  free(out);

  out = NULL;
  assert_int_equal(norm("{\"action\":\"Frobnicate\",\"bucket\":\"b\",\"object\":{\"key\":\"k\"}}",
                        &out, &outlen, &nrec, label),
                   SL_EPARSE);
  assert_int_equal(
      norm("{\"action\":\"PutObject\",\"object\":{\"key\":\"k\"}}", &out, &outlen, &nrec, label),
      SL_EPARSE);
  assert_int_equal(norm("{\"action\":\"PutObject\",\"bucket\":\"b\",\"object\":{\"key\":\"k\","
                        "\"size\":\"12\"}}",
                        &out, &outlen, &nrec, label),
                   SL_EPARSE);
  assert_int_equal(norm("[]", &out, &outlen, &nrec, label), SL_EPARSE);
  assert_int_equal(norm("[1]", &out, &outlen, &nrec, label), SL_EPARSE);
  assert_null(out);
}

/* Ingest compares the ETags of a gateway's event (quoted), a HEAD (quoted)
 * and the sweep's event (bare) without their quotes. */
static void test_etag_bare(void **state) {
  (void)state;
  char out[16];
  sl__etag_bare("\"abc\"", out, sizeof out);
  assert_string_equal(out, "abc");
  sl__etag_bare("abc", out, sizeof out);
  assert_string_equal(out, "abc");
  sl__etag_bare("\"", out, sizeof out); /* one quote is not a pair */
  assert_string_equal(out, "\"");
  sl__etag_bare("\"\"", out, sizeof out);
  assert_string_equal(out, "");
  sl__etag_bare(NULL, out, sizeof out);
  assert_string_equal(out, "");
  sl__etag_bare("\"0123456789abcdefXYZ\"", out, sizeof out); /* bounded */
  assert_string_equal(out, "0123456789abcde");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sign_vectors),
      cmocka_unit_test(test_signature_good),
      cmocka_unit_test(test_signature_rotation),
      cmocka_unit_test(test_signature_forged),
      cmocka_unit_test(test_signature_tolerance),
      cmocka_unit_test(test_signature_malformed),
      cmocka_unit_test(test_bearer),
      cmocka_unit_test(test_normalize_aws),
      cmocka_unit_test(test_normalize_r2),
      cmocka_unit_test(test_etag_bare),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
