/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_client.c — the API client code sluicectl and the load generators
 * share (tools/client/sl_client.h): the create body as presign reads it,
 * presign's reply as both parse it (a reply shaped like docs/openapi.yaml's
 * CreateReply), and what a malformed reply gives instead of a crash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sl_client.h"

static void test_create_body(void **state) {
  (void)state;
  const sl_client_question q[] = {{1, "audio/webm", 24000, "What do you do on weekends?"},
                                  {0, "audio/wav", 96044, NULL},
                                  {7, "audio/mpeg", 1, ""}};
  char *body = sl_client_create_body(q, 3);
  assert_non_null(body);
  json_t *j = json_loads(body, 0, NULL);
  assert_non_null(j);
  json_t *qs = json_object_get(j, "questions");
  assert_int_equal(json_array_size(qs), 3);
  json_t *a = json_array_get(qs, 0), *b = json_array_get(qs, 1), *c = json_array_get(qs, 2);
  assert_int_equal(json_integer_value(json_object_get(a, "no")), 1);
  assert_string_equal(json_string_value(json_object_get(a, "content_type")), "audio/webm");
  assert_int_equal(json_integer_value(json_object_get(a, "size")), 24000);
  assert_string_equal(json_string_value(json_object_get(a, "prompt")),
                      "What do you do on weekends?");
  assert_int_equal(json_integer_value(json_object_get(b, "no")), 2); /* 0: its position */
  assert_null(json_object_get(b, "prompt"));                         /* none: not sent */
  assert_int_equal(json_integer_value(json_object_get(c, "no")), 7);
  assert_null(json_object_get(c, "prompt"));
  assert_int_equal(json_object_size(j), 1);
  json_decref(j);
  free(body);
}

static const char reply[] =
    "{\"submission_id\":\"0193e0a0-0000-7000-8000-000000000001\",\"results_token\":\"tok\","
    "\"results_url\":\"http://r/v1/submissions/0193e0a0-0000-7000-8000-000000000001\","
    "\"expires_at\":\"2026-12-01T22:00:00Z\",\"questions\":["
    "{\"no\":1,\"url\":\"http://s/b/k1?X-Amz-Signature=a\",\"method\":\"PUT\","
    "\"headers\":{\"Content-Type\":\"audio/webm\",\"Content-Length\":\"24000\","
    "\"x-amz-checksum-sha256\":\"abc=\"},\"object_key\":\"submissions/x/q01.webm\","
    "\"expires_at\":\"2026-12-01T22:00:00Z\"},"
    "{\"no\":2,\"url\":\"http://s/b/k2\",\"headers\":{\"Content-Type\":\"audio/wav\"},"
    "\"object_key\":\"submissions/x/q02.wav\"}]}";

static void test_parse_reply(void **state) {
  (void)state;
  sl_client_created c;
  char err[256] = "";
  assert_int_equal(sl_client_created_parse(reply, strlen(reply), 2, &c, err, sizeof err), 0);
  assert_string_equal(c.submission_id, "0193e0a0-0000-7000-8000-000000000001");
  assert_string_equal(c.results_token, "tok");
  assert_non_null(strstr(c.results_url, "/v1/submissions/"));
  assert_int_equal(c.n, 2);
  assert_int_equal(c.uploads[0].no, 1);
  assert_string_equal(c.uploads[0].url, "http://s/b/k1?X-Amz-Signature=a");
  assert_string_equal(c.uploads[0].object_key, "submissions/x/q01.webm");
  /* every signed header as given, Content-Length left to the HTTP client */
  assert_string_equal(c.uploads[0].headers[0], "Content-Type: audio/webm");
  assert_string_equal(c.uploads[0].headers[1], "x-amz-checksum-sha256: abc=");
  assert_null(c.uploads[0].headers[2]);
  assert_string_equal(c.uploads[1].headers[0], "Content-Type: audio/wav");
  assert_null(c.uploads[1].headers[1]);
  sl_client_created_free(&c);
  assert_null(c.uploads);
  sl_client_created_free(&c); /* twice, and NULL: harmless */
  sl_client_created_free(NULL);
}

static void refused(const char *body, size_t want, const char *why) {
  sl_client_created c;
  char err[256] = "";
  assert_int_equal(
      sl_client_created_parse(body, body ? strlen(body) : 0, want, &c, err, sizeof err), -1);
  if (!strstr(err, why)) fail_msg("\"%s\" does not say \"%s\"", err, why);
  assert_null(c.submission_id);
  assert_null(c.uploads);
  sl_client_created_free(&c);
}

static void test_bad_replies(void **state) {
  (void)state;
  refused("not json", 1, "not a JSON object");
  refused(NULL, 1, "not a JSON object");
  refused("[1,2]", 1, "not a JSON object");
  refused("{\"results_token\":\"t\",\"results_url\":\"u\",\"questions\":[]}", 0,
          "lacks submission_id");
  refused(reply, 3, "one upload per question");
  refused("{\"submission_id\":\"s\",\"results_token\":\"t\",\"results_url\":\"u\","
          "\"questions\":[{\"no\":1,\"url\":\"x\",\"headers\":{}}]}",
          1, "lacks no, url, object_key");
  refused("{\"submission_id\":\"s\",\"results_token\":\"t\",\"results_url\":\"u\","
          "\"questions\":[{\"no\":1,\"url\":\"x\",\"object_key\":\"k\",\"headers\":{\"A\":1}}]}",
          1, "not a string");
}

static void test_content_types(void **state) {
  (void)state;
  assert_string_equal(sl_client_content_type("a/b/answer.webm"), "audio/webm");
  assert_string_equal(sl_client_content_type("x.OGG"), "audio/ogg");
  assert_string_equal(sl_client_content_type("x.opus"), "audio/ogg");
  assert_string_equal(sl_client_content_type("x.m4a"), "audio/mp4");
  assert_string_equal(sl_client_content_type("x.mp3"), "audio/mpeg");
  assert_null(sl_client_content_type("x.txt"));
  assert_null(sl_client_content_type("no-extension"));
  assert_null(sl_client_content_type("dir.wav/file"));
  assert_null(sl_client_content_type(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_body),
      cmocka_unit_test(test_parse_reply),
      cmocka_unit_test(test_bad_replies),
      cmocka_unit_test(test_content_types),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
