/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pbfield.c — protobuf fields by path over real Sluice messages: reads
 * (strings, numbers, bytes, sub-messages, list elements), declared paths
 * checked against descriptors, writes that free_unpacked then frees.
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
#include "sluice/sl_pbfield.h"

/* a Transcript as a stage receives it: packed, then unpacked */
static Sluice__V1__Transcript *sample(void) {
  Sluice__V1__UploadCompleted up = SLUICE__V1__UPLOAD_COMPLETED__INIT;
  up.submission_id = "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d";
  up.question_no = 3;
  up.prompt = "Where do you live?";
  up.size = 123456;
  Sluice__V1__Word w[2] = {SLUICE__V1__WORD__INIT, SLUICE__V1__WORD__INIT};
  w[0].word = "near";
  w[0].start_s = 0.5;
  w[1].word = "river";
  w[1].end_s = 2.25;
  Sluice__V1__Word *wp[2] = {&w[0], &w[1]};
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.upload = &up;
  t.text = "I live near the river";
  t.duration_s = 4.5;
  t.words = wp;
  t.n_words = 2;
  uint8_t buf[1024];
  size_t n = sluice__v1__transcript__pack(&t, buf);
  return sluice__v1__transcript__unpack(NULL, n, buf);
}

static void test_read(void **state) {
  (void)state;
  Sluice__V1__Transcript *t = sample();
  const ProtobufCMessage *m = &t->base;
  assert_string_equal(sl_pbfield_str(m, "text"), "I live near the river");
  assert_string_equal(sl_pbfield_str(m, "upload.prompt"), "Where do you live?");
  assert_string_equal(sl_pbfield_str(m, "words.1.word"), "river");
  double v = 0;
  assert_int_equal(sl_pbfield_num(m, "upload.question_no", &v), 0);
  assert_true(v == 3);
  assert_int_equal(sl_pbfield_num(m, "upload.size", &v), 0);
  assert_true(v == 123456);
  assert_int_equal(sl_pbfield_num(m, "words.1.end_s", &v), 0);
  assert_true(v == 2.25);
  assert_int_equal(sl_pbfield_count(m, "words"), 2);
  /* what is not there, or not of that kind */
  assert_null(sl_pbfield_str(m, "words.2.word")); /* out of range */
  assert_null(sl_pbfield_str(m, "words.word"));   /* a list needs an index */
  assert_null(sl_pbfield_str(m, "duration_s"));   /* a number */
  assert_null(sl_pbfield_str(m, "nosuch"));
  assert_null(sl_pbfield_str(m, "text.more"));
  assert_int_equal(sl_pbfield_num(m, "text", &v), SL_ENOTFOUND);
  assert_int_equal(sl_pbfield_count(m, "text"), -1);
  size_t len = 99;
  assert_null(sl_pbfield_bytes(m, "text", &len));
  sluice__v1__transcript__free_unpacked(t, NULL);
}

static void test_resolve(void **state) {
  (void)state;
  const ProtobufCMessageDescriptor *d = &sluice__v1__transcript__descriptor;
  char err[256] = "";
  int rep = -1;
  assert_int_equal(sl_pbfield_resolve(d, "text", &rep, err, sizeof err), SL_PBF_STRING);
  assert_int_equal(rep, 0);
  assert_int_equal(sl_pbfield_resolve(d, "upload.question_no", &rep, err, sizeof err),
                   SL_PBF_NUMBER);
  assert_int_equal(sl_pbfield_resolve(d, "words.word", &rep, err, sizeof err), SL_PBF_STRING);
  assert_int_equal(rep, 1);
  assert_int_equal(sl_pbfield_resolve(d, "words", &rep, err, sizeof err), SL_PBF_MESSAGE);
  assert_int_equal(sl_pbfield_resolve(d, "txt", &rep, err, sizeof err), SL_ENOTFOUND);
  assert_string_equal(err, "sluice.v1.Transcript has no field \"txt\"");
  assert_int_equal(sl_pbfield_resolve(d, "text.x", &rep, err, sizeof err), SL_ENOTFOUND);
  assert_non_null(strstr(err, "\"text\" is not a message"));
  assert_int_equal(sl_pbfield_resolve(d, "a..b", &rep, err, sizeof err), SL_ENOTFOUND);
  assert_int_equal(sl_pbfield_resolve(d, "", &rep, err, sizeof err), SL_ENOTFOUND);
  assert_int_equal(sl_pbfield_resolve(&sluice__v1__upload_completed__descriptor, "object_key", &rep,
                                      err, sizeof err),
                   SL_PBF_STRING);
}

static void test_write(void **state) {
  (void)state;
  Sluice__V1__Transcript *t = sample();
  ProtobufCMessage *m = &t->base;
  assert_int_equal(sl_pbfield_set_str(m, "text", "I live near the ***"), 0);
  assert_int_equal(sl_pbfield_set_str(m, "text", "twice, the first copy freed"), 0);
  assert_int_equal(sl_pbfield_set_str(m, "upload.prompt", "Where?"), 0);
  assert_int_equal(sl_pbfield_set_num(m, "duration_s", 7.5), 0);
  assert_int_equal(sl_pbfield_set_num(m, "upload.question_no", 9), 0);
  assert_int_equal(sl_pbfield_set_num(m, "upload.question_no", -1), SL_EINVAL);
  assert_int_equal(sl_pbfield_set_str(m, "duration_s", "x"), SL_EINVAL);
  assert_int_equal(sl_pbfield_set_num(m, "text", 1), SL_EINVAL);
  assert_int_equal(sl_pbfield_set_str(m, "words", "x"), SL_EINVAL); /* a list */
  assert_int_equal(sl_pbfield_set_str(m, "nosuch", "x"), SL_ENOTFOUND);
  assert_string_equal(t->text, "twice, the first copy freed");
  assert_true(t->duration_s == 7.5 && t->upload->question_no == 9);
  /* a string field that was empty (the default) is replaced, not freed */
  t->language = (char *)protobuf_c_empty_string;
  assert_int_equal(sl_pbfield_set_str(m, "language", "en"), 0);
  /* survives a pack/unpack round trip */
  uint8_t buf[1024];
  size_t n = sluice__v1__transcript__pack(t, buf);
  Sluice__V1__Transcript *u = sluice__v1__transcript__unpack(NULL, n, buf);
  assert_non_null(u);
  assert_string_equal(u->upload->prompt, "Where?");
  assert_string_equal(u->language, "en");
  sluice__v1__transcript__free_unpacked(u, NULL);
  sluice__v1__transcript__free_unpacked(t, NULL); /* frees what was written (ASan) */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_resolve),
      cmocka_unit_test(test_write),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
