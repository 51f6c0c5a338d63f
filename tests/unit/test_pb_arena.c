/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pb_arena.c — the protobuf arena plugin stages decode their input into
 * (sl__pb_arena, stages/lib/pb_arena.h): a message that fits is decoded into the
 * caller's buffer and needs no free; one that does not spills to malloc and
 * is freed as usual (under ASan/LSan a spilled part not freed, or freed
 * twice, fails the run); a decode that fails leaves nothing behind; the
 * fields read back the same either way.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "lib/pb_arena.h"

/* A Transcript of n words, packed; *len its size. */
static uint8_t *transcript(size_t n, size_t *len) {
  Sluice__V1__UploadCompleted up = SLUICE__V1__UPLOAD_COMPLETED__INIT;
  up.submission_id = "sub-1";
  up.question_no = 3;
  up.prompt = "Tell me about your hobby.";
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.upload = &up;
  t.text = "I like hiking in the hills";
  t.duration_s = 2.5;
  Sluice__V1__Word *w = calloc(n ? n : 1, sizeof *w), **wp = calloc(n ? n : 1, sizeof *wp);
  char(*text)[32] = calloc(n ? n : 1, sizeof *text);
  assert_true(w && wp && text);
  for (size_t i = 0; i < n; i++) {
    sluice__v1__word__init(&w[i]);
    snprintf(text[i], sizeof text[i], "word%zu", i);
    w[i].word = text[i];
    w[i].start_s = (double)i;
    w[i].end_s = (double)i + 0.5;
    wp[i] = &w[i];
  }
  t.words = wp;
  t.n_words = n;
  *len = sluice__v1__transcript__get_packed_size(&t);
  uint8_t *buf = malloc(*len);
  assert_non_null(buf);
  assert_int_equal(sluice__v1__transcript__pack(&t, buf), *len);
  free(w);
  free(wp);
  free(text);
  return buf;
}

static void check(const Sluice__V1__Transcript *t, size_t n) {
  assert_non_null(t);
  assert_string_equal(t->upload->submission_id, "sub-1");
  assert_int_equal(t->upload->question_no, 3);
  assert_string_equal(t->upload->prompt, "Tell me about your hobby.");
  assert_string_equal(t->text, "I like hiking in the hills");
  assert_int_equal(t->n_words, n);
  for (size_t i = 0; i < n; i++) {
    char want[32];
    snprintf(want, sizeof want, "word%zu", i);
    assert_string_equal(t->words[i]->word, want);
    assert_true(t->words[i]->end_s == (double)i + 0.5);
  }
}

/* the arena under test, over a buffer as the driver's (stages/lib/plugin_driver.c) */
static _Alignas(max_align_t) unsigned char space[SL__PB_ARENA_BYTES];
static sl__pb_arena ar;
static void arena_fresh(void) { sl__pb_arena_init(&ar, space, sizeof space); }

static int in_buf(const void *p, const unsigned char *buf, size_t cap) {
  return (uintptr_t)p >= (uintptr_t)buf && (uintptr_t)p < (uintptr_t)(buf + cap);
}

static void test_fits(void **state) {
  (void)state;
  size_t len;
  uint8_t *pb = transcript(5, &len);
  arena_fresh();
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(&ar.a, len, pb);
  check(t, 5);
  assert_false(ar.spilled);
  assert_true(ar.used > 0 && ar.used <= sizeof space);
  /* every part in the buffer, aligned for any type */
  assert_true(in_buf(t, space, sizeof space) && in_buf(t->upload, space, sizeof space));
  assert_true(in_buf(t->words[4], space, sizeof space) && in_buf(t->text, space, sizeof space));
  assert_int_equal((uintptr_t)t->upload % _Alignof(max_align_t), 0);
  sl__pb_free(t, &ar.a); /* nothing to free */
  sl__pb_free(NULL, &ar.a);
  free(pb);
}

static void test_spills(void **state) {
  (void)state;
  size_t len;
  uint8_t *pb = transcript(2000, &len); /* far more than 16 KiB decoded */
  arena_fresh();
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(&ar.a, len, pb);
  check(t, 2000);
  assert_true(ar.spilled);
  assert_true(in_buf(t, space, sizeof space));               /* the first parts fit */
  assert_false(in_buf(t->words[1999], space, sizeof space)); /* the last did not */
  sl__pb_free(t, &ar.a); /* the spilled parts freed: LSan would see them otherwise */

  /* a small buffer that is not aligned: what lands in it is, the rest spills */
  _Alignas(max_align_t) unsigned char small[512];
  sl__pb_arena_init(&ar, small + 1, sizeof small - 1);
  t = sluice__v1__transcript__unpack(&ar.a, len, pb);
  check(t, 2000);
  assert_true(ar.spilled);
  assert_true(ar.used > 0 && ar.used <= sizeof small - 1);
  assert_true(in_buf(t, small, sizeof small)); /* the first part fits, aligned */
  assert_int_equal((uintptr_t)t % _Alignof(max_align_t), 0);
  if (in_buf(t->upload, small, sizeof small))
    assert_int_equal((uintptr_t)t->upload % _Alignof(max_align_t), 0);
  sl__pb_free(t, &ar.a);
  /* no buffer: all of it malloc'd */
  sl__pb_arena_init(&ar, NULL, 4096);
  t = sluice__v1__transcript__unpack(&ar.a, len, pb);
  check(t, 2000);
  sl__pb_free(t, &ar.a);
  /* the system allocator (NULL), as an async stage decodes */
  t = sluice__v1__transcript__unpack(NULL, len, pb);
  check(t, 2000);
  sl__pb_free(t, NULL);
  free(pb);
}

static void test_bad_input(void **state) {
  (void)state;
  size_t len;
  uint8_t *pb = transcript(2000, &len);
  arena_fresh();
  /* cut short in the middle of the words: no message, what was spilled freed by unpack */
  assert_null(sluice__v1__transcript__unpack(&ar.a, len - 3, pb));
  static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  assert_null(sluice__v1__transcript__unpack(&ar.a, sizeof junk, junk));
  free(pb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fits),
      cmocka_unit_test(test_spills),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
