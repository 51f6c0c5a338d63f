/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pbseal.c — personal fields sealed inside real Sluice messages
 * (sl_pbseal): a Transcript sealed keeps its other fields readable and its
 * text nowhere in the packed bytes, reads empty without the key and whole
 * with it; another key or question (aad) opens nothing and changes nothing;
 * a message with nothing personal set is packed unsealed; names that are
 * not fields, or a type without "sealed", are refused; opened fields are
 * freed with the message (the sanitizer build finds a double free or a
 * leak).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_pbseal.h"

static const char *const personal[] = {"text", "words"};
static const char aad[] = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d/3";
static const char phrase[] = "purple elephants dance near the river";

/* a Transcript as stt writes it, packed sealed with key (NULL: plain) */
static uint8_t *sealed_sample(const uint8_t *key, size_t *len) {
  Sluice__V1__UploadCompleted up = SLUICE__V1__UPLOAD_COMPLETED__INIT;
  up.submission_id = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d";
  up.question_no = 3;
  Sluice__V1__Word w[2] = {SLUICE__V1__WORD__INIT, SLUICE__V1__WORD__INIT};
  w[0].word = "purple";
  w[0].end_s = 0.5;
  w[1].word = "elephants";
  w[1].start_s = 0.5;
  w[1].end_s = 1.25;
  Sluice__V1__Word *wp[2] = {&w[0], &w[1]};
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.upload = &up;
  t.text = (char *)phrase;
  t.duration_s = 4.5;
  t.words = wp;
  t.n_words = 2;
  t.engine = "whisper";
  uint8_t *out = NULL;
  assert_int_equal(sl_pbseal_pack(&t.base, personal, 2, key, aad, strlen(aad), &out, len), 0);
  assert_non_null(out);
  assert_string_equal(t.text, phrase); /* the caller's message is as it was */
  assert_int_equal(t.n_words, 2);
  assert_int_equal(t.sealed.len, 0);
  return out;
}

static int contains(const uint8_t *b, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(b + i, s, k) == 0) return 1;
  return 0;
}

static void test_sealed_and_opened(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_seal_key_new(key), 0);
  size_t n = 0;
  uint8_t *b = sealed_sample(key, &n);
  assert_false(contains(b, n, "purple"));
  assert_false(contains(b, n, "elephants"));
  assert_true(contains(b, n, "whisper")); /* what is not personal stays plain */
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(NULL, n, b);
  assert_non_null(t);
  /* without the key: the message, its personal fields empty */
  assert_true(sl_pbseal_sealed(&t->base));
  assert_string_equal(t->text, "");
  assert_int_equal(t->n_words, 0);
  assert_string_equal(t->engine, "whisper");
  assert_int_equal(t->upload->question_no, 3);
  assert_true(t->duration_s == 4.5);
  /* with it: whole */
  assert_int_equal(sl_pbseal_open(&t->base, key, aad, strlen(aad), NULL), 0);
  assert_false(sl_pbseal_sealed(&t->base));
  assert_string_equal(t->text, phrase);
  assert_int_equal(t->n_words, 2);
  assert_string_equal(t->words[1]->word, "elephants");
  assert_true(t->words[1]->end_s == 1.25);
  assert_string_equal(t->engine, "whisper");
  /* opening again: nothing sealed is left, nothing changes */
  assert_int_equal(sl_pbseal_open(&t->base, key, aad, strlen(aad), NULL), 0);
  assert_string_equal(t->text, phrase);
  sluice__v1__transcript__free_unpacked(t, NULL);
  free(b);
}

static void test_wrong_key_or_question(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN], other[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_seal_key_new(key), 0);
  assert_int_equal(sl_seal_key_new(other), 0);
  size_t n = 0;
  uint8_t *b = sealed_sample(key, &n);
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(NULL, n, b);
  assert_int_equal(sl_pbseal_open(&t->base, other, aad, strlen(aad), NULL), SL_EAUTH);
  const char q4[] = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d/4";
  assert_int_equal(sl_pbseal_open(&t->base, key, q4, strlen(q4), NULL), SL_EAUTH);
  assert_int_equal(sl_pbseal_open(&t->base, NULL, aad, strlen(aad), NULL), SL_EINVAL);
  /* refused: unchanged, and still opens with the right ones */
  assert_true(sl_pbseal_sealed(&t->base));
  assert_string_equal(t->text, "");
  /* a field both plain and sealed is not merged */
  t->text = strdup("planted");
  assert_int_equal(sl_pbseal_open(&t->base, key, aad, strlen(aad), NULL), SL_EPARSE);
  assert_string_equal(t->text, "planted");
  free(t->text);
  t->text = (char *)protobuf_c_empty_string;
  assert_int_equal(sl_pbseal_open(&t->base, key, aad, strlen(aad), NULL), 0);
  assert_string_equal(t->text, phrase);
  sluice__v1__transcript__free_unpacked(t, NULL);
  free(b);
}

static void test_plain_when_nothing_personal(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_seal_key_new(key), 0);
  /* a QUEUED status: no transcript, no grade */
  Sluice__V1__QuestionStatus s = SLUICE__V1__QUESTION_STATUS__INIT;
  s.submission_id = "sub";
  s.question_no = 1;
  s.state = SLUICE__V1__QUESTION_STATE__QUEUED;
  const char *const qp[] = {"transcript", "grade"};
  uint8_t *out = NULL;
  size_t n = 0;
  assert_int_equal(sl_pbseal_pack(&s.base, qp, 2, key, aad, strlen(aad), &out, &n), 0);
  assert_int_equal(n, sluice__v1__question_status__get_packed_size(&s));
  Sluice__V1__QuestionStatus *u = sluice__v1__question_status__unpack(NULL, n, out);
  assert_false(sl_pbseal_sealed(&u->base));
  sluice__v1__question_status__free_unpacked(u, NULL);
  free(out);
  /* a DONE one: the grade (a sub-message) travels sealed */
  Sluice__V1__GradeResult g = SLUICE__V1__GRADE_RESULT__INIT;
  g.score = 87.5;
  g.feedback = (char *)phrase;
  s.grade = &g;
  s.transcript = "what was said";
  s.state = SLUICE__V1__QUESTION_STATE__DONE;
  assert_int_equal(sl_pbseal_pack(&s.base, qp, 2, key, aad, strlen(aad), &out, &n), 0);
  assert_false(contains(out, n, "elephants"));
  u = sluice__v1__question_status__unpack(NULL, n, out);
  assert_null(u->grade);
  assert_int_equal(u->state, SLUICE__V1__QUESTION_STATE__DONE);
  assert_int_equal(sl_pbseal_open(&u->base, key, aad, strlen(aad), NULL), 0);
  assert_non_null(u->grade);
  assert_true(u->grade->score == 87.5);
  assert_string_equal(u->grade->feedback, phrase);
  assert_string_equal(u->transcript, "what was said");
  sluice__v1__question_status__free_unpacked(u, NULL);
  free(out);
  /* no key: packed as it is */
  assert_int_equal(sl_pbseal_pack(&s.base, qp, 2, NULL, aad, strlen(aad), &out, &n), 0);
  assert_true(contains(out, n, "elephants"));
  free(out);
}

/* A transcript longer than the buffers sealing keeps on the stack (2 KB:
 * sealed and opened through malloc'd ones), its fields found through the
 * personal table resolved at set-up (the stages' way), and a short one
 * right after it (the stack again): each opens to what was sealed. */
static void test_long_through_the_table(void **state) {
  (void)state;
  static const sl_pbseal_type table[] = {{&sluice__v1__transcript__descriptor, personal, 2}};
  sl_pbseal_set_personal(table, 1);
  const char *const *fields = NULL;
  size_t nf = 0;
  assert_true(sl_pbseal_personal(&sluice__v1__transcript__descriptor, &fields, &nf));
  uint8_t key[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_seal_key_new(key), 0);
  size_t lens[] = {6000, 40};
  for (size_t k = 0; k < 2; k++) {
    char *text = malloc(lens[k] + sizeof phrase);
    assert_non_null(text);
    memset(text, 'a', lens[k]);
    memcpy(text + lens[k], phrase, sizeof phrase);
    Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
    t.text = text;
    t.engine = "whisper";
    uint8_t *out = NULL;
    size_t n = 0;
    assert_int_equal(sl_pbseal_pack(&t.base, fields, nf, key, aad, strlen(aad), &out, &n), 0);
    assert_false(contains(out, n, "elephants"));
    Sluice__V1__Transcript *u = sluice__v1__transcript__unpack(NULL, n, out);
    assert_non_null(u);
    assert_int_equal(sl_pbseal_open(&u->base, key, aad, strlen(aad), NULL), 0);
    assert_string_equal(u->text, text);
    sluice__v1__transcript__free_unpacked(u, NULL);
    free(out);
    free(text);
  }
  sl_pbseal_set_personal(NULL, 0);
}

static void test_refused(void **state) {
  (void)state;
  uint8_t key[SL_SEAL_KEY_LEN];
  assert_int_equal(sl_seal_key_new(key), 0);
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.text = "x";
  uint8_t *out = (uint8_t *)"untouched";
  size_t n = 0;
  const char *const bad[] = {"no_such_field"};
  assert_int_equal(sl_pbseal_pack(&t.base, bad, 1, key, aad, 1, &out, &n), SL_EINVAL);
  assert_null(out);
  const char *const self[] = {"sealed"};
  assert_int_equal(sl_pbseal_pack(&t.base, self, 1, key, aad, 1, &out, &n), SL_EINVAL);
  /* a type without "sealed" */
  Sluice__V1__Word w = SLUICE__V1__WORD__INIT;
  w.word = "x";
  const char *const wf[] = {"word"};
  assert_int_equal(sl_pbseal_pack(&w.base, wf, 1, key, aad, 1, &out, &n), SL_EINVAL);
  /* already sealed */
  uint8_t junk[40] = {0};
  t.sealed = (ProtobufCBinaryData){sizeof junk, junk};
  assert_int_equal(sl_pbseal_pack(&t.base, personal, 2, key, aad, 1, &out, &n), SL_EINVAL);
  /* sealed bytes that are not sealed: not opened */
  Sluice__V1__Transcript *u = sluice__v1__transcript__unpack(NULL, 0, (const uint8_t *)"");
  u->sealed.data = malloc(sizeof junk);
  memcpy(u->sealed.data, junk, sizeof junk);
  u->sealed.len = sizeof junk;
  assert_int_equal(sl_pbseal_open(&u->base, key, aad, 1, NULL), SL_EPARSE);
  sluice__v1__transcript__free_unpacked(u, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sealed_and_opened),
      cmocka_unit_test(test_wrong_key_or_question),
      cmocka_unit_test(test_plain_when_nothing_personal),
      cmocka_unit_test(test_long_through_the_table),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
