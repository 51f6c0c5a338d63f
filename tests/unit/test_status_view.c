/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_status_view.c — materialize's question view (sl__status_view), now
 * written with sl_jsonw instead of jansson's pack and dumps: read back with
 * jansson it has the same keys in the same order and the same values as
 * before, for a queued, a done (grade, criteria, cost, accept-to-done) and a
 * failed status; strings are escaped and bytes that are not UTF-8 replaced;
 * reals keep 17 digits and read as reals; and sl_jsonw and sl_fmt_ll on
 * their own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_jsonw.h"
#include "lib/view.h"

/* the view of st parsed; its keys in order must be `keys` (NULL-ended) */
static json_t *view_of(const Sluice__V1__QuestionStatus *st, const char *label,
                       const char *const *keys) {
  char *v = sl__status_view(st, label);
  assert_non_null(v);
  json_error_t e;
  json_t *j = json_loads(v, JSON_REJECT_DUPLICATES, &e);
  assert_non_null(j);
  const char *k;
  json_t *val;
  size_t i = 0;
  json_object_foreach(j, k, val) {
    assert_non_null(keys[i]);
    assert_string_equal(k, keys[i]);
    i++;
  }
  assert_null(keys[i]);
  free(v);
  return j;
}

/* a status of question no of submission s1, at at_ms, from stage */
static Sluice__V1__QuestionStatus status(unsigned no, Sluice__V1__QuestionState state,
                                         int64_t at_ms, char *stage) {
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = "s1";
  st.question_no = no;
  st.state = state;
  st.at_ms = at_ms;
  st.stage = stage;
  return st;
}

static void test_queued(void **state) {
  (void)state;
  Sluice__V1__QuestionStatus st =
      status(4, SLUICE__V1__QUESTION_STATE__QUEUED, 1764720000123, "ingest");
  const char *keys[] = {"no", "state", "updated_at_ms", "stage", NULL};
  json_t *j = view_of(&st, "queued", keys);
  assert_int_equal(json_integer_value(json_object_get(j, "no")), 4);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "queued");
  assert_true(json_integer_value(json_object_get(j, "updated_at_ms")) == 1764720000123);
  assert_string_equal(json_string_value(json_object_get(j, "stage")), "ingest");
  json_decref(j);
}

static void test_done(void **state) {
  (void)state;
  Sluice__V1__Criterion c[2];
  Sluice__V1__Criterion *cp[2] = {&c[0], &c[1]};
  for (int i = 0; i < 2; i++) sluice__v1__criterion__init(&c[i]);
  c[0].name = "fluency";
  c[0].score = 100.0;
  c[0].comment = "";
  c[1].name = "variety";
  c[1].score = 0.1; /* 17 digits: 0.10000000000000001 */
  c[1].comment = "say \"more\"\n\ttabs \\ and \x01";
  Sluice__V1__GradeResult g = SLUICE__V1__GRADE_RESULT__INIT;
  g.score = 45.0;
  g.level = "IM1";
  g.feedback = "caf\xc3\xa9 \xff"; /* é, then a byte that is not UTF-8 */
  g.words_per_minute = 123.456;
  g.lexical_variety = 1e-7;
  g.filler_rate = 0;
  g.relevance = 1.0 / 3.0;
  g.engine = "rubric";
  g.criteria = cp;
  g.n_criteria = 2;
  Sluice__V1__QuestionStatus st = status(15, SLUICE__V1__QUESTION_STATE__DONE, 2000, "grade");
  st.transcript = ""; /* done: written even when empty */
  st.duration_s = 2.5;
  st.grade = &g;
  st.cost_units = 12.0;
  st.accepted_at_ms = 500;
  const char *keys[] = {"no",    "state", "updated_at_ms",     "stage", "transcript", "duration_s",
                        "grade", "cost",  "accept_to_done_ms", NULL};
  json_t *j = view_of(&st, "done", keys);
  assert_string_equal(json_string_value(json_object_get(j, "transcript")), "");
  assert_true(json_is_real(json_object_get(j, "duration_s")));
  assert_true(json_real_value(json_object_get(j, "duration_s")) == 2.5);
  assert_true(json_is_real(json_object_get(j, "cost"))); /* 12.0, not 12 */
  assert_int_equal(json_integer_value(json_object_get(j, "accept_to_done_ms")), 1500);
  json_t *gj = json_object_get(j, "grade");
  const char *gkeys[] = {"score",           "level",       "feedback",  "words_per_minute",
                         "lexical_variety", "filler_rate", "relevance", "engine",
                         "criteria"};
  const char *k;
  json_t *v;
  size_t i = 0;
  json_object_foreach(gj, k, v) assert_string_equal(k, gkeys[i++]);
  assert_int_equal(i, 9);
  assert_true(json_is_real(json_object_get(gj, "score")));
  assert_true(json_real_value(json_object_get(gj, "score")) == 45.0);
  assert_string_equal(json_string_value(json_object_get(gj, "feedback")),
                      "caf\xc3\xa9 \xef\xbf\xbd");
  assert_true(json_real_value(json_object_get(gj, "words_per_minute")) == 123.456);
  assert_true(json_real_value(json_object_get(gj, "lexical_variety")) == 1e-7);
  assert_true(json_is_real(json_object_get(gj, "filler_rate")));
  assert_true(json_real_value(json_object_get(gj, "relevance")) == 1.0 / 3.0); /* exact */
  json_t *cr = json_object_get(gj, "criteria");
  assert_int_equal(json_array_size(cr), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(cr, 0), "name")), "fluency");
  assert_true(json_real_value(json_object_get(json_array_get(cr, 1), "score")) == 0.1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(cr, 1), "comment")),
                      "say \"more\"\n\ttabs \\ and \x01");
  json_decref(j);

  /* no criteria: no "criteria" key; no cost: no "cost" */
  g.n_criteria = 0;
  st.cost_units = 0;
  const char *keys2[] = {"no",         "state", "updated_at_ms",     "stage", "transcript",
                         "duration_s", "grade", "accept_to_done_ms", NULL};
  j = view_of(&st, "done", keys2);
  assert_null(json_object_get(json_object_get(j, "grade"), "criteria"));
  json_decref(j);
}

static void test_failed(void **state) {
  (void)state;
  Sluice__V1__QuestionStatus st = status(1, SLUICE__V1__QUESTION_STATE__FAILED, 10, "preflight");
  st.transcript = "partial words";
  st.error_class = "audio_too_short";
  st.error_message = "0.2 s of audio";
  const char *keys[] = {"no",    "state", "updated_at_ms", "stage", "transcript", "duration_s",
                        "error", NULL}; /* accepted_at_ms 0: no accept_to_done_ms */
  json_t *j = view_of(&st, "failed", keys);
  json_t *e = json_object_get(j, "error");
  assert_string_equal(json_string_value(json_object_get(e, "class")), "audio_too_short");
  assert_string_equal(json_string_value(json_object_get(e, "message")), "0.2 s of audio");
  json_decref(j);
}

static void test_jsonw(void **state) {
  (void)state;
  sl_jsonw w = {.initial = 4}; /* grows many times */
  sl_jsonw_raw(&w, "[");
  sl_jsonw_real(&w, NAN);
  sl_jsonw_raw(&w, ",");
  sl_jsonw_real(&w, INFINITY);
  sl_jsonw_raw(&w, ",");
  sl_jsonw_real(&w, 1e300);
  sl_jsonw_raw(&w, ",");
  sl_jsonw_real(&w, -0.5);
  sl_jsonw_raw(&w, ",");
  sl_jsonw_int(&w, -9223372036854775807LL - 1);
  sl_jsonw_raw(&w, ",");
  sl_jsonw_str(&w, NULL);
  sl_jsonw_raw(&w, "]");
  char *t = sl_jsonw_take(&w);
  assert_string_equal(t, "[null,null,1.0000000000000001e+300,-0.5,-9223372036854775808,\"\"]");
  free(t);
  assert_null(sl_jsonw_take(&w)); /* empty again */
  sl_jsonw_raw(&w, "x");
  sl_jsonw_free(&w);
  /* integers without printf, against printf */
  const long long ints[] = {
      0, 7, -1, 10, 1234567890, -9223372036854775807LL - 1, 9223372036854775807LL};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    char got[21], want[32];
    snprintf(want, sizeof want, "%lld", ints[i]);
    assert_int_equal(sl_fmt_ll(got, ints[i]), strlen(want));
    assert_string_equal(got, want);
  }
  sl_jsonw_free(&w);
  sl_jsonw_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queued),
      cmocka_unit_test(test_done),
      cmocka_unit_test(test_failed),
      cmocka_unit_test(test_jsonw),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
