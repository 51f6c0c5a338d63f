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

/* a message with a oneof member and a proto2-style optional scalar, laid
 * out as protobuf-c lays them out (no .proto of ours has either) */
typedef struct {
  ProtobufCMessage base;
  uint32_t which; /* the oneof's case */
  int32_t a;
  protobuf_c_boolean has_b;
  int64_t b;
} fake_msg;

/* walking every field: counts and where each value is */
static void test_values(void **state) {
  (void)state;
  Sluice__V1__Transcript *t = sample();
  const ProtobufCMessage *m = &t->base;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const ProtobufCFieldDescriptor *text = protobuf_c_message_descriptor_get_field_by_name(d, "text"),
                                 *words =
                                     protobuf_c_message_descriptor_get_field_by_name(d, "words"),
                                 *dur = protobuf_c_message_descriptor_get_field_by_name(
                                     d, "duration_s"),
                                 *up = protobuf_c_message_descriptor_get_field_by_name(d, "upload");
  assert_int_equal(sl_pbfield_n_values(m, text), 1);
  assert_string_equal(*(char *const *)sl_pbfield_value(m, text, 0), "I live near the river");
  assert_null(sl_pbfield_value(m, text, 1));
  assert_true(*(const double *)sl_pbfield_value(m, dur, 0) == 4.5);
  const ProtobufCMessage *u = *(ProtobufCMessage *const *)sl_pbfield_value(m, up, 0);
  assert_string_equal(sl_pbfield_str(u, "prompt"), "Where do you live?");
  assert_int_equal(sl_pbfield_n_values(m, words), 2);
  const ProtobufCMessage *w1 = *(ProtobufCMessage *const *)sl_pbfield_value(m, words, 1);
  assert_string_equal(sl_pbfield_str(w1, "word"), "river");
  assert_null(sl_pbfield_value(m, words, 2));
  assert_int_equal(sl_pbfield_n_values(NULL, words), 0);
  sluice__v1__transcript__free_unpacked(t, NULL);

  /* a oneof and a proto2-style optional scalar, laid out as protobuf-c does */
  fake_msg x = {.which = 7, .a = 42, .has_b = 0, .b = 9};
  ProtobufCFieldDescriptor fa = {.name = "a",
                                 .id = 7,
                                 .label = PROTOBUF_C_LABEL_NONE,
                                 .type = PROTOBUF_C_TYPE_INT32,
                                 .quantifier_offset = (unsigned)offsetof(fake_msg, which),
                                 .offset = (unsigned)offsetof(fake_msg, a),
                                 .flags = PROTOBUF_C_FIELD_FLAG_ONEOF};
  ProtobufCFieldDescriptor fb = {.name = "b",
                                 .id = 8,
                                 .label = PROTOBUF_C_LABEL_OPTIONAL,
                                 .type = PROTOBUF_C_TYPE_INT64,
                                 .quantifier_offset = (unsigned)offsetof(fake_msg, has_b),
                                 .offset = (unsigned)offsetof(fake_msg, b)};
  assert_int_equal(sl_pbfield_n_values(&x.base, &fa), 1);
  assert_int_equal(*(const int32_t *)sl_pbfield_value(&x.base, &fa, 0), 42);
  assert_int_equal(sl_pbfield_n_values(&x.base, &fb), 0); /* has_b clear */
  assert_null(sl_pbfield_value(&x.base, &fb, 0));
  x.has_b = 1;
  x.which = 8; /* another member of the oneof chosen */
  assert_int_equal(sl_pbfield_n_values(&x.base, &fa), 0);
  assert_int_equal(*(const int64_t *)sl_pbfield_value(&x.base, &fb, 0), 9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_resolve),
      cmocka_unit_test(test_write),
      cmocka_unit_test(test_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
