/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_s3.c — unit tests for the S3 multipart helpers in sl_s3: reading
 * storage replies (InitiateMultipartUpload, ListParts with and without a
 * next page, CompleteMultipartUpload, an <Error> inside a 200, error
 * statuses, garbage) and the presigned UploadPart URL (its query and the
 * part-number range). The calls themselves are exercised against Versity
 * Gateway by tests/integration/test_multipart.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_s3.h"

static int parse(int op, long status, const char *body, sl_s3_result *r) {
  memset(r, 0, sizeof *r);
  return sl_s3_parse_reply(op, status, body, strlen(body), r);
}

static void test_initiate(void **state) {
  (void)state;
  sl_s3_result r;
  assert_int_equal(
      parse(SL_S3_OP_CREATE, 200,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Bucket>answers</Bucket><Key>a/b.wav</Key>"
            "<UploadId>VXBsb2FkIElE-1</UploadId></InitiateMultipartUploadResult>",
            &r),
      0);
  assert_string_equal(r.upload_id, "VXBsb2FkIElE-1");
  /* no UploadId: not a usable reply */
  assert_int_equal(parse(SL_S3_OP_CREATE, 200,
                         "<InitiateMultipartUploadResult><Key>k</Key>"
                         "</InitiateMultipartUploadResult>",
                         &r),
                   SL_ESTORAGE);
}

static void test_list_parts(void **state) {
  (void)state;
  sl_s3_result r;
  const char *page1 =
      "<ListPartsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Bucket>answers</Bucket><Key>k</Key><UploadId>u</UploadId>"
      "<PartNumberMarker>0</PartNumberMarker><NextPartNumberMarker>3</NextPartNumberMarker>"
      "<MaxParts>2</MaxParts><IsTruncated>true</IsTruncated>"
      "<Part><PartNumber>1</PartNumber><ETag>\"aa\"</ETag><Size>8388608</Size></Part>"
      "<Part><PartNumber>3</PartNumber><ETag>&quot;bb&quot;</ETag><Size>17</Size></Part>"
      "</ListPartsResult>";
  assert_int_equal(parse(SL_S3_OP_LIST, 200, page1, &r), 0);
  assert_int_equal(r.nparts, 2);
  assert_int_equal(r.parts[0].number, 1);
  assert_int_equal(r.parts[0].size, 8388608);
  assert_string_equal(r.parts[0].etag, "\"aa\"");
  assert_int_equal(r.parts[1].number, 3);
  assert_int_equal(r.parts[1].size, 17);
  assert_string_equal(r.parts[1].etag, "\"bb\"");
  assert_int_equal(r.truncated, 1);
  assert_int_equal(r.next_marker, 3);
  free(r.parts);
  assert_int_equal(parse(SL_S3_OP_LIST, 200,
                         "<ListPartsResult><IsTruncated>false</IsTruncated></ListPartsResult>", &r),
                   0);
  assert_int_equal(r.nparts, 0);
  assert_int_equal(r.truncated, 0);
  free(r.parts);
  /* a part number out of range or a truncated page without a marker */
  assert_int_equal(parse(SL_S3_OP_LIST, 200,
                         "<ListPartsResult><Part><PartNumber>10001</PartNumber><Size>1</Size>"
                         "</Part></ListPartsResult>",
                         &r),
                   SL_ESTORAGE);
  free(r.parts);
  assert_int_equal(parse(SL_S3_OP_LIST, 200,
                         "<ListPartsResult><IsTruncated>true</IsTruncated></ListPartsResult>", &r),
                   SL_ESTORAGE);
  free(r.parts);
}

static void test_errors(void **state) {
  (void)state;
  sl_s3_result r;
  assert_int_equal(parse(SL_S3_OP_LIST, 404,
                         "<Error><Code>NoSuchUpload</Code><Message>The specified multipart "
                         "upload does not exist.</Message></Error>",
                         &r),
                   SL_ENOTFOUND);
  assert_string_equal(r.code, "NoSuchUpload");
  assert_true(strstr(r.message, "does not exist") != NULL);
  /* CompleteMultipartUpload can fail inside a 200 */
  assert_int_equal(parse(SL_S3_OP_COMPLETE, 200,
                         "<?xml version=\"1.0\"?>\n<Error><Code>InvalidPart</Code>"
                         "<Message>bad etag</Message></Error>",
                         &r),
                   SL_EINVAL);
  assert_string_equal(r.code, "InvalidPart");
  assert_int_equal(parse(SL_S3_OP_COMPLETE, 400, "<Error><Code>EntityTooSmall</Code></Error>", &r),
                   SL_EINVAL);
  assert_int_equal(
      parse(SL_S3_OP_CREATE, 403, "<Error><Code>SignatureDoesNotMatch</Code></Error>", &r),
      SL_ESTORAGE);
  assert_int_equal(parse(SL_S3_OP_CREATE, 503, "", &r), SL_EUNAVAIL);
  assert_int_equal(parse(SL_S3_OP_CREATE, 0, "", &r), SL_EUNAVAIL);
  assert_int_equal(parse(SL_S3_OP_CREATE, 200, "not xml at all <", &r), SL_ESTORAGE);
  assert_int_equal(parse(SL_S3_OP_LIST, 200, "<Other/>", &r), SL_ESTORAGE);
  /* abort answers 204 without a body */
  assert_int_equal(parse(SL_S3_OP_ABORT, 204, "", &r), 0);
  assert_int_equal(parse(SL_S3_OP_COMPLETE, 200,
                         "<CompleteMultipartUploadResult><Location>http://x/k</Location>"
                         "<ETag>\"ab-8\"</ETag></CompleteMultipartUploadResult>",
                         &r),
                   0);
  assert_string_equal(r.etag, "\"ab-8\"");
}

/* the derived objects' target: s3.derived_endpoint and s3.derived_bucket,
 * each falling back to the answers' endpoint and bucket */
static void test_derived_target(void **state) {
  (void)state;
  sl_s3_conf c = {.endpoint = "http://127.0.0.1:7070", .bucket = "answers", .path_style = 1};
  sl_s3_target t;
  assert_int_equal(sl_s3_target_init_derived(&t, &c), 0); /* neither set */
  assert_string_equal(t.host, "127.0.0.1:7070");
  assert_string_equal(t.path_prefix, "/answers");
  c.derived_endpoint = "";
  c.derived_bucket = "derived";
  assert_int_equal(sl_s3_target_init_derived(&t, &c), 0);
  assert_string_equal(t.host, "127.0.0.1:7070");
  assert_string_equal(t.path_prefix, "/derived");
  c.derived_endpoint = "http://127.0.0.1:7072";
  assert_int_equal(sl_s3_target_init_derived(&t, &c), 0);
  assert_string_equal(t.host, "127.0.0.1:7072");
  assert_string_equal(t.path_prefix, "/derived");
  c.derived_bucket = NULL; /* the answers' bucket behind another endpoint */
  assert_int_equal(sl_s3_target_init_derived(&t, &c), 0);
  assert_string_equal(t.path_prefix, "/answers");
  c.path_style = 0;
  assert_int_equal(sl_s3_target_init_derived(&t, &c), 0);
  assert_string_equal(t.host, "answers.127.0.0.1:7072");
  c.derived_endpoint = "ftp://x"; /* checked like s3.endpoint */
  assert_int_equal(sl_s3_target_init_derived(&t, &c), SL_ECONFIG);
  assert_true(sl_s3_is_derived("derived/submissions/x/q01.wav.16k.flac"));
  assert_false(sl_s3_is_derived("submissions/x/q01.wav"));
  assert_false(sl_s3_is_derived("derived")); /* the prefix has its slash */
  c.derived_bucket = "";
  assert_string_equal(sl_s3_derived_bucket(&c), "answers");
  c.derived_bucket = "derived";
  assert_string_equal(sl_s3_derived_bucket(&c), "derived");
  /* the answers' own target is unchanged by either */
  assert_int_equal(sl_s3_target_init(&t, &c), 0);
  assert_string_equal(t.host, "answers.127.0.0.1:7070");
}

static void test_presign_part(void **state) {
  (void)state;
  sl_s3_conf c = {.endpoint = "http://127.0.0.1:7070", .bucket = "answers", .path_style = 1};
  sl_s3_target t;
  assert_int_equal(sl_s3_target_init(&t, &c), 0);
  sl_sigv4 *sig = NULL;
  assert_int_equal(sl_sigv4_new(&sig, "AK", "SECRET", "us-east-1", "s3"), 0);
  char url[4096];
  assert_int_equal(sl_s3_presign_part(sig, &t, "submissions/x/q01.wav", "up+id/1", 7, 1700000000,
                                      900, url, sizeof url),
                   0);
  assert_true(strncmp(url, "http://127.0.0.1:7070/answers/submissions/x/q01.wav?", 52) == 0);
  assert_true(strstr(url, "partNumber=7&") != NULL);
  assert_true(strstr(url, "uploadId=up%2Bid%2F1") != NULL);
  assert_true(strstr(url, "X-Amz-SignedHeaders=host&") != NULL);
  assert_int_equal(sl_s3_presign_part(sig, &t, "k", "u", 0, 1700000000, 900, url, sizeof url),
                   SL_EINVAL);
  assert_int_equal(sl_s3_presign_part(sig, &t, "k", "u", 10001, 1700000000, 900, url, sizeof url),
                   SL_EINVAL);
  assert_int_equal(sl_s3_presign_part(sig, &t, "k", "u", 10000, 1700000000, 900, url, sizeof url),
                   0);
  assert_int_equal(sl_s3_presign_part(sig, &t, "k", "", 1, 1700000000, 900, url, sizeof url),
                   SL_EINVAL);
  sl_sigv4_free(sig);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_derived_target), cmocka_unit_test(test_initiate),
      cmocka_unit_test(test_list_parts),     cmocka_unit_test(test_errors),
      cmocka_unit_test(test_presign_part),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
