/* SPDX-License-Identifier: Apache-2.0 */
/* test_openai_grade.c — grade/openai against a scripted host
 * (plugin_testhost.h): the request, the grade-schema validation,
 * regeneration, the json_schema -> json_object fallback, refusals and the
 * HTTP status policy. The plugin source is compiled into this test. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grade/openai/openai.c"
#include "plugin_testhost.h"

static void *inst;

static int setup(void **st) {
  (void)st;
  th_reset(sluice_plugin_entry());
  return 0;
}
static int teardown(void **st) {
  (void)st;
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  return 0;
}

static const sl_plugin_input input = {.struct_size = sizeof(sl_plugin_input),
                                      .key = "sub/2",
                                      .prompt = "What do you do on weekends?",
                                      .language = "en",
                                      .transcript = "on weekends i go hiking with my friends",
                                      .duration_s = 12.5};

static void start(void) {
  char err[256] = "";
  if (!inst) assert_int_equal(create(&th_host, NULL, &inst, err, sizeof err), 0);
  call(inst, &input, (sl_plugin_call *)&th);
}

static const char good[] =
    "{\"score\":58,\"level\":\"IM1\",\"criteria\":[{\"name\":\"fluency\",\"score\":60,"
    "\"comment\":\"steady\"},{\"name\":\"vocabulary\",\"score\":50,\"comment\":\"basic\"}],"
    "\"feedback\":\"Add more detail.\"}";

/* a chat.completion whose message content is `content`, ended for `finish` */
static char *completion_ended(const char *content, int tokens, const char *finish) {
  json_t *o = json_pack("{s:s,s:s,s:[{s:i,s:{s:s,s:s},s:s}],s:{s:i,s:i,s:i}}", "id", "c1", "object",
                        "chat.completion", "choices", "index", 0, "message", "role", "assistant",
                        "content", content, "finish_reason", finish, "usage", "prompt_tokens",
                        tokens - 10, "completion_tokens", 10, "total_tokens", tokens);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

static char *completion(const char *content, int tokens) {
  return completion_ended(content, tokens, "stop");
}

static void reply_content(const char *content, int tokens) {
  char *s = completion(content, tokens);
  th_reply(200, s);
  free(s);
}

/* Request i's body, parsed; it must be exactly what json_dumps writes for
 * it (the plugin puts it together from parts serialized once). */
static json_t *req_json(int i) {
  json_t *o = json_loads(th.req[i].body, 0, NULL);
  assert_non_null(o);
  char *again = json_dumps(o, JSON_COMPACT);
  assert_non_null(again);
  assert_string_equal(again, th.req[i].body);
  free(again);
  return o;
}

static void test_request_and_valid_reply(void **st) {
  (void)st;
  th_set("base_url", "http://127.0.0.1:9");
  th_set("api_key", "sk-g");
  th_set("max_tokens", "300");
  start();
  assert_int_equal(th.nreq, 1);
  const th_request *r = &th.req[0];
  assert_string_equal(r->url, "http://127.0.0.1:9/v1/chat/completions");
  assert_true(th_has_header(r, "Authorization: Bearer sk-g"));
  assert_true(th_has_header(r, "Content-Type: application/json"));
  json_t *b = req_json(0);
  assert_string_equal(json_string_value(json_object_get(b, "model")), "gpt-4o-mini");
  assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 300);
  json_t *rf = json_object_get(b, "response_format");
  assert_string_equal(json_string_value(json_object_get(rf, "type")), "json_schema");
  json_t *js = json_object_get(rf, "json_schema");
  assert_true(json_is_true(json_object_get(js, "strict")));
  json_t *schema = json_object_get(js, "schema");
  assert_int_equal(json_array_size(json_object_get(schema, "required")), 4);
  assert_true(json_is_false(json_object_get(schema, "additionalProperties")));
  assert_int_equal(json_array_size(json_object_get(
                       json_object_get(json_object_get(schema, "properties"), "level"), "enum")),
                   9);
  json_t *msgs = json_object_get(b, "messages");
  assert_int_equal(json_array_size(msgs), 2);
  const char *user = json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
  assert_non_null(strstr(user, "Question: What do you do on weekends?"));
  assert_non_null(strstr(user, "12.5 seconds"));
  assert_non_null(strstr(user, "on weekends i go hiking with my friends"));
  assert_null(strstr(user, "{{"));
  json_decref(b);

  reply_content(good, 345);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_float_equal(th_num("score"), 58, 1e-9);
  assert_string_equal(th_str("level"), "IM1");
  assert_string_equal(th_str("feedback"), "Add more detail.");
  assert_string_equal(th_str("engine"), "openai:gpt-4o-mini");
  assert_float_equal(th_num("cost_units"), 345, 1e-9);
  assert_float_equal(th_num("words_per_minute"), 8 * 60 / 12.5, 1e-9);
  assert_int_equal(th.ncrit, 2);
  assert_string_equal(th.crit_name[1], "vocabulary");
  assert_float_equal(th.crit_score[1], 50, 1e-9);
}

static void test_schema_validation(void **st) {
  (void)st;
  static const struct {
    const char *doc, *why; /* why == NULL: valid */
  } cases[] = {
      {"{\"score\":0,\"level\":\"NL\",\"criteria\":[{\"name\":\"a\",\"score\":0,\"comment\":\"\"}],"
       "\"feedback\":\"x\"}",
       NULL},
      {"{\"score\":100,\"level\":\"AL\",\"criteria\":[{\"name\":\"a\",\"score\":100.0,\"comment\":"
       "\"c\"}],\"feedback\":\"x\"}",
       NULL},
      {"{\"score\":100.5,\"level\":\"AL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":"
       "\"c\"}],\"feedback\":\"x\"}",
       "score"},
      {"{\"score\":-1,\"level\":\"AL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\"}"
       "],\"feedback\":\"x\"}",
       "score"},
      {"{\"score\":\"55\",\"level\":\"AL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":"
       "\"c\"}],\"feedback\":\"x\"}",
       "score"},
      {"{\"score\":5,\"level\":\"B2\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\"}]"
       ",\"feedback\":\"x\"}",
       "level"},
      {"{\"score\":5,\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\"}],\"feedback\":"
       "\"x\"}",
       "level"},
      {"{\"score\":5,\"level\":\"IL\",\"feedback\":\"x\"}", "criteria"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[],\"feedback\":\"x\"}", "criteria"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[{\"name\":\"a\",\"score\":1}],\"feedback\":"
       "\"x\"}",
       "criteria[0]"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[{\"name\":\"a\",\"score\":101,\"comment\":"
       "\"c\"}"
       "],\"feedback\":\"x\"}",
       "criteria[0]"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\","
       "\"extra\":1}],\"feedback\":\"x\"}",
       "criteria[0]"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\"}]"
       ",\"feedback\":\"\"}",
       "feedback"},
      {"{\"score\":5,\"level\":\"IL\",\"criteria\":[{\"name\":\"a\",\"score\":1,\"comment\":\"c\"}]"
       ",\"feedback\":\"x\",\"confidence\":0.9}",
       "unexpected field \"confidence\""},
      {"[1,2]", "not a JSON object"},
      {"Sure! The score is 55.", "not JSON"},
      {"{\"score\":55,\"level\":\"IM1\",\"crit", "not JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char why[200] = "";
    json_t *d = grade_check(cases[i].doc, why, sizeof why);
    if (!cases[i].why && !d) fail_msg("case %zu should be valid: %s", i, why);
    if (cases[i].why && d) fail_msg("case %zu should be invalid (%s)", i, cases[i].why);
    if (cases[i].why && !strstr(why, cases[i].why))
      fail_msg("case %zu: reason \"%s\" lacks \"%s\"", i, why, cases[i].why);
    json_decref(d);
  }
}

static void test_regenerates_then_succeeds(void **st) {
  (void)st;
  start();
  reply_content("{\"score\":140,\"level\":\"IM1\",\"criteria\":[{\"name\":\"a\",\"score\":1,"
                "\"comment\":\"c\"}],\"feedback\":\"x\"}",
                100);
  assert_int_equal(th.completes, 0);
  assert_int_equal(th.nreq, 2);
  json_t *b = req_json(1);
  json_t *msgs = json_object_get(b, "messages");
  assert_int_equal(json_array_size(msgs), 4); /* system, user, bad reply, correction */
  assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 2), "role")),
                      "assistant");
  assert_non_null(
      strstr(json_string_value(json_object_get(json_array_get(msgs, 2), "content")), "140"));
  assert_non_null(strstr(json_string_value(json_object_get(json_array_get(msgs, 3), "content")),
                         "score must be a number from 0 to 100"));
  json_decref(b);
  reply_content(good, 150);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_float_equal(th_num("cost_units"), 250, 1e-9); /* both attempts cost tokens */
  assert_null(th_str("raw_reply"));
}

static void test_regenerations_exhausted(void **st) {
  (void)st;
  th_set("max_regenerations", "2");
  th_set("max_raw_reply", "10");
  start();
  for (int i = 0; i < 3; i++) {
    assert_int_equal(th.nreq, i + 1);
    assert_int_equal(th.completes, 0);
    reply_content("Sure! The answer deserves level IM1, roughly 55 points.", 50);
  }
  assert_int_equal(th.nreq, 3); /* 1 + 2 regenerations, no more */
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "invalid_grade");
  assert_non_null(strstr(th.reason, "after 3 attempts"));
  assert_non_null(strstr(th.reason, "not JSON"));
  assert_non_null(strstr(th.reason, "Sure! The answer"));
  assert_string_equal(th_str("raw_reply"), "Sure! The "); /* cut to max_raw_reply */
  assert_float_equal(th_num("cost_units"), 150, 1e-9);
  assert_int_equal(th.ncrit, 0);
  assert_null(th_str("level"));

  /* max_regenerations = 0: the first invalid reply fails the call */
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  th_set("max_regenerations", "0");
  start();
  reply_content("{\"score\":5}", 20);
  assert_int_equal(th.nreq, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "invalid_grade");
  assert_non_null(strstr(th.reason, "after 1 attempt:"));
}

static void test_json_object_fallback(void **st) {
  (void)st;
  start();
  th_reply(400, "{\"error\":{\"message\":\"response_format of type 'json_schema' is not "
                "supported with this model\",\"type\":\"invalid_request_error\",\"param\":"
                "\"response_format\"}}");
  assert_int_equal(th.completes, 0);
  assert_int_equal(th.nreq, 2);
  json_t *b = req_json(1);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(b, "response_format"), "type")),
      "json_object");
  assert_int_equal(json_array_size(json_object_get(b, "messages")), 2); /* not a regeneration */
  json_decref(b);
  reply_content(good, 80);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  /* the instance remembers: the next call starts in JSON mode */
  th.completes = 0;
  start();
  b = req_json(2);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(b, "response_format"), "type")),
      "json_object");
  json_decref(b);
  /* a 400 about response_format in JSON mode is not retried again */
  th_reply(400, "{\"error\":{\"message\":\"response_format json_object unsupported\"}}");
  assert_int_equal(th.nreq, 3);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "provider_rejected");
}

static void test_configured_json_object_and_template(void **st) {
  (void)st;
  th_set("structured_output", "json_object");
  th_set("prompt_template", "[{{language}}] {{words}} words: {{transcript}} / {{transcript}}");
  th_set("system_prompt", "Grade it. Answer in JSON.");
  th_set("model", "llama3");
  start();
  json_t *b = req_json(0);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(b, "response_format"), "type")),
      "json_object");
  json_t *msgs = json_object_get(b, "messages");
  assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
                      "Grade it. Answer in JSON.");
  assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                      "[en] 8 words: on weekends i go hiking with my friends / on weekends i go "
                      "hiking with my friends");
  assert_string_equal(json_string_value(json_object_get(b, "model")), "llama3");
  assert_null(json_object_get(b, "max_tokens"));
  json_decref(b);
  reply_content(good, 10);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
}

static void expect(long status, const char *body, int64_t ra, int timed_out, const char *error,
                   sl_plugin_outcome o, const char *cls, int throttled, const char *in_reason) {
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  th_set("structured_output", "json_object"); /* no fallback in play */
  start();
  th_reply_full(status, body, ra, timed_out, error);
  assert_int_equal(th.completes, 1);
  if (th.outcome != o || strcmp(th.error_class, cls) != 0)
    fail_msg("HTTP %ld: got outcome %d class %s (%s), want %d %s", status, th.outcome,
             th.error_class, th.reason, o, cls);
  assert_int_equal(th.throttled, throttled);
  assert_int_equal(th.retry_after_ms, o == SL_PLUGIN_RETRY ? ra : 0);
  if (in_reason && !strstr(th.reason, in_reason))
    fail_msg("HTTP %ld: reason \"%s\" lacks \"%s\"", status, th.reason, in_reason);
}

static void test_status_policy_and_bad_bodies(void **st) {
  (void)st;
  expect(429, "{\"error\":{\"message\":\"Rate limit reached\"}}", 3000, 0, NULL, SL_PLUGIN_RETRY,
         "provider_throttled", 1, "Rate limit reached");
  expect(503, "", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_unavailable", 0, "HTTP 503");
  expect(408, "", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_timeout", 0, NULL);
  expect(400, "{\"error\":{\"message\":\"model 'x' not found\"}}", 0, 0, NULL, SL_PLUGIN_FAIL,
         "provider_rejected", 0, "model 'x' not found");
  expect(403, "{}", 0, 0, NULL, SL_PLUGIN_FAIL, "provider_auth", 0, NULL);
  expect(0, NULL, 0, 1, "timeout", SL_PLUGIN_RETRY, "provider_timeout", 0, "60000 ms");
  expect(0, NULL, 0, 0, "Connection reset by peer", SL_PLUGIN_RETRY, "provider_unreachable", 0,
         "Connection reset");
  expect(200, "<html>502 Bad Gateway</html>", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_bad_reply", 0,
         "502 Bad Gateway");
  expect(200, "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"mess", 0,
         0, NULL, SL_PLUGIN_RETRY, "provider_bad_reply", 0, "truncated");
  expect(200, "{\"id\":\"c1\",\"choices\":[]}", 0, 0, NULL, SL_PLUGIN_FAIL, "provider_bad_reply", 0,
         "choices[0].message.content");
  expect(200,
         "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
         "\"refusal\":\"I can't help with that.\"},\"finish_reason\":\"stop\"}]}",
         0, 0, NULL, SL_PLUGIN_FAIL, "model_refused", 0, "I can't help");
}

static void test_config_errors(void **st) {
  (void)st;
  static const char *bad[][2] = {{"base_url", "localhost:8080"},
                                 {"structured_output", "xml"},
                                 {"prompt_template", "{{transcript}} {{score}}"},
                                 {"prompt_template", "{{transcript"},
                                 {"max_regenerations", "-1"},
                                 {"temperature", "3"},
                                 {"model", ""}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    th_reset(sluice_plugin_entry());
    th_set(bad[i][0], bad[i][1]);
    char err[256] = "";
    void *s = NULL;
    assert_int_equal(create(&th_host, NULL, &s, err, sizeof err), SL_ECONFIG);
    assert_null(s);
    if (!strstr(err, bad[i][0])) fail_msg("error for %s lacks the key: %s", bad[i][0], err);
  }
  const sl_plugin *d = sluice_plugin_entry();
  assert_string_equal(d->kind, "grade");
  assert_false(d->flags & SL_PLUGIN_SYNC);
}

/* by default an invalid reply is asked for again once, then the call fails
 * as invalid_grade with no grade reported */
static void test_default_one_regeneration(void **st) {
  (void)st;
  start();
  reply_content("{\"score\":55,\"level\":\"B2\",\"criteria\":[],\"feedback\":\"ok\"}", 40);
  assert_int_equal(th.nreq, 2);
  assert_int_equal(th.completes, 0);
  reply_content("{\"score\":\"55\"}", 40);
  assert_int_equal(th.nreq, 2);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "invalid_grade");
  assert_non_null(strstr(th.reason, "after 2 attempts"));
  assert_int_equal(th.ncrit, 0);
  assert_float_equal(th_num("score"), -1, 0); /* none reported */
  assert_null(th_str("level"));
}

/* a reply cut at the token limit is invalid even when what arrived parses */
static void test_truncated_reply(void **st) {
  (void)st;
  start();
  char *cut = completion_ended("{\"score\":58,\"level\":\"IM1\",\"crit", 30, "length");
  th_reply(200, cut);
  free(cut);
  assert_int_equal(th.nreq, 2);
  assert_non_null(strstr(th.req[1].body, "finish_reason length"));
  cut = completion_ended(good, 60, "length"); /* whole, but the server says it was cut */
  th_reply(200, cut);
  free(cut);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "invalid_grade");
  assert_non_null(strstr(th.reason, "token limit"));
  assert_int_equal(th.ncrit, 0);

  /* cut once, then whole: stored */
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  start();
  cut = completion_ended("{\"score\":58", 30, "length");
  th_reply(200, cut);
  free(cut);
  reply_content(good, 60);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_int_equal(th.ncrit, 2);
}

/* the user message of a request body (its second message) */
static const char *user_message(const json_t *body) {
  return json_string_value(
      json_object_get(json_array_get(json_object_get(body, "messages"), 1), "content"));
}

/* the answer's timing and the rubric's criteria go into the prompt */
static void test_prompt_evidence(void **st) {
  (void)st;
  th_in("upload.speaking_s", 11.0);
  th_in("upload.speech_s", 9.0);
  th_in("upload.pauses", 2);
  th_in("upload.pause_mean_s", 0.8);
  th_in("upload.pause_longest_s", 1.1);
  start();
  json_t *b = req_json(0);
  const char *user = user_message(b);
  assert_non_null(user);
  /* 8 words over 11 s of speaking: 44 per minute; 2 pauses, 8 / 3 words between them */
  assert_non_null(
      strstr(user, "Timing: 44 words per minute over 11.0 s of speaking; 2 silent pauses"));
  assert_non_null(strstr(user, "longest 1.10 s"));
  assert_non_null(strstr(user, "2.7 words between pauses"));
  assert_non_null(strstr(user, "\n- fluency: "));
  assert_non_null(strstr(user, "\n- relevance: "));
  assert_non_null(strstr(user, "key words used)"));
  assert_null(strstr(user, "{{"));
  json_decref(b);
  reply_content(good, 100);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);

  /* without the timing: said so, and the rubric's fluency over the recording */
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  start();
  b = req_json(0);
  user = user_message(b);
  assert_non_null(strstr(user, "Timing: (not measured: when the words were spoken is not known)"));
  assert_non_null(strstr(user, "over the whole 12.5 s recording"));
  json_decref(b);
  reply_content(good, 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_request_and_valid_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_schema_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_regenerates_then_succeeds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_regenerations_exhausted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_object_fallback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_configured_json_object_and_template, setup, teardown),
      cmocka_unit_test_setup_teardown(test_status_policy_and_bad_bodies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_config_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_default_one_regeneration, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prompt_evidence, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
