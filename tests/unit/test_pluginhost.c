/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pluginhost.c — the plugin host: loading and refusing plugins, their
 * configuration tables, and the call contract (sl_pluginhost.h).
 *
 * Uses the real plugins from the build tree (SLUICE_PLUGIN_DIR) and the
 * test-only plugins in tests/plugins (wrong ABI, no entry symbol, a grader
 * that breaks the contract on request).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice.pb-c.h"
#include "sluice/sl_pluginhost.h"

static void test_scan_finds_real_plugins(void **st) {
  (void)st;
  sl_plugin_lib **libs = NULL;
  size_t n = 0;
  assert_int_equal(sl_plugin_scan(SLUICE_PLUGIN_DIR, NULL, &libs, &n, NULL, NULL), 0);
  int ps = 0, rubric = 0;
  for (size_t i = 0; i < n; i++) {
    const sl_plugin *d = sl_plugin_lib_desc(libs[i]);
    assert_int_equal(d->abi_version, SL_PLUGIN_ABI_VERSION);
    assert_true(d->struct_size >= offsetof(sl_plugin, reserved));
    ps |= !strcmp(d->kind, "stt") && !strcmp(d->name, "pocketsphinx");
    rubric |= !strcmp(d->kind, "grade") && !strcmp(d->name, "rubric");
  }
  assert_true(ps);
  assert_true(rubric);
  sl_plugin_libs_free(libs, n);
  /* a kind filter keeps only that kind */
  assert_int_equal(sl_plugin_scan(SLUICE_PLUGIN_DIR, "grade", &libs, &n, NULL, NULL), 0);
  for (size_t i = 0; i < n; i++) assert_string_equal(sl_plugin_lib_desc(libs[i])->kind, "grade");
  sl_plugin_libs_free(libs, n);
}

static void test_refuses_other_abi(void **st) {
  (void)st;
  sl_plugin_lib *l = (sl_plugin_lib *)1;
  char err[1024] = "";
  int rc = sl_plugin_lib_open(&l, SLUICE_TEST_PLUGIN_DIR, "stt", "badabi", err, sizeof err);
  assert_int_equal(rc, SL_EPLUGIN);
  assert_null(l);
  assert_non_null(strstr(err, "ABI 99"));
  assert_non_null(strstr(err, "ABI 1"));
}

static void warn(const char *m, void *ud) {
  assert_non_null(m);
  (*(int *)ud)++;
}

static void test_refuses_non_plugin_and_wrong_kind(void **st) {
  (void)st;
  sl_plugin_lib *l = NULL;
  char err[1024] = "";
  assert_int_equal(
      sl_plugin_lib_open(&l, SLUICE_TEST_PLUGIN_DIR, "grade", "noentry", err, sizeof err),
      SL_EPLUGIN);
  assert_non_null(strstr(err, "not a Sluice plugin"));
  /* a grader asked for as an STT plugin, by path */
  assert_int_equal(
      sl_plugin_lib_open(&l, NULL, "stt", SLUICE_PLUGIN_DIR "/grade-rubric.so", err, sizeof err),
      SL_EPLUGIN);
  assert_non_null(strstr(err, "not a stt plugin"));
  assert_int_equal(sl_plugin_lib_open(&l, SLUICE_PLUGIN_DIR, "stt", "nosuch", err, sizeof err),
                   SL_ENOTFOUND);
  assert_int_equal(sl_plugin_lib_open(&l, SLUICE_PLUGIN_DIR, "stt", "Bad Name", err, sizeof err),
                   SL_EINVAL);
  /* the scan skips what it cannot load and says why */
  sl_plugin_lib **libs = NULL;
  size_t n = 0;
  int warnings = 0;
  assert_int_equal(sl_plugin_scan(SLUICE_TEST_PLUGIN_DIR, NULL, &libs, &n, warn, &warnings), 0);
  assert_int_equal(n, 5); /* misbehave, abi1, lateread, earlydone and step-mask load; badabi and
                           * noentry do not */
  assert_int_equal(warnings, 2);
  sl_plugin_libs_free(libs, n);
}

static sl_plugin_lib *open_misbehave(void) {
  sl_plugin_lib *l = NULL;
  char err[1024] = "";
  int rc = sl_plugin_lib_open(&l, SLUICE_TEST_PLUGIN_DIR, "grade", "misbehave", err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return l;
}

static void test_config_keys_prefixed_typed_and_strict(void **st) {
  (void)st;
  sl_plugin_lib *l = open_misbehave();
  sl_conf_bind b = sl_plugin_lib_conf(l);
  assert_int_equal(b.n, 5);
  assert_string_equal(b.entries[0].key, "grade.misbehave.score");
  assert_int_equal(b.entries[4].secret, 1);
  char err[512];
  const char *good[] = {"grade.misbehave.score=73.5", "grade.misbehave.label=AL"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, good, 2, err, sizeof err), 0);
  sl_plugin_inst *in = NULL;
  assert_int_equal(sl_plugin_inst_new(&in, l, err, sizeof err), 0);
  assert_true(sl_plugin_inst_is_sync(in));
  sl_plugin_inst_free(in);
  const char *unknown[] = {"grade.misbehave.scor=1"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, unknown, 1, err, sizeof err), SL_EUNKNOWNKEY);
  const char *badtype[] = {"grade.misbehave.count=three"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, badtype, 1, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "grade.misbehave.count"));
  const char *badbool[] = {"grade.misbehave.strict=maybe"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, badbool, 1, err, sizeof err), SL_ECONFIG);
  sl_conf_release(&b, 1);
  sl_plugin_lib_close(l);
}

typedef struct {
  int calls;
  sl_plugin_result r;
} got;

static void on_done(sl_plugin_result *r, void *ud) {
  got *g = ud;
  g->calls++;
  sl_plugin_result_clear(&g->r);
  g->r = *r;
}

static void run_grade(sl_plugin_inst *in, const char *transcript, got *g) {
  sl_plugin_input pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  pi.key = "s/1";
  pi.prompt = "Tell me about your weekend.";
  pi.transcript = transcript;
  pi.duration_s = 30;
  assert_int_equal(sl_plugin_run(in, &pi, NULL, on_done, g), 0);
}

static void test_contract_breaches_become_plugin_errors(void **st) {
  (void)st;
  sl_plugin_lib *l = open_misbehave();
  sl_conf_bind b = sl_plugin_lib_conf(l);
  char err[512];
  const char *sets[] = {"grade.misbehave.score=73.5", "grade.misbehave.label=AL"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, sets, 2, err, sizeof err), 0);
  sl_plugin_inst *in = NULL;
  assert_int_equal(sl_plugin_inst_new(&in, l, err, sizeof err), 0);
  got g = {0};
  run_grade(in, "a fine answer", &g);
  assert_int_equal(g.calls, 1);
  assert_int_equal(g.r.outcome, SL_PLUGIN_DONE);
  assert_true(g.r.score == 73.5); /* configuration reached the plugin */
  assert_string_equal(g.r.level, "AL");
  assert_string_equal(g.r.engine, "misbehave"); /* defaulted to the plugin name */
  run_grade(in, "forget", &g);
  assert_int_equal(g.calls, 2);
  assert_int_equal(g.r.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(g.r.error_class, "plugin_error");
  run_grade(in, "twice", &g); /* the first completion counts */
  assert_int_equal(g.calls, 3);
  assert_int_equal(g.r.outcome, SL_PLUGIN_DONE);
  run_grade(in, "badoutcome", &g);
  assert_int_equal(g.calls, 4);
  assert_int_equal(g.r.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(g.r.error_class, "plugin_error");
  sl_plugin_result_clear(&g.r);
  sl_plugin_inst_free(in);
  sl_conf_release(&b, 1);
  sl_plugin_lib_close(l);
}

static void test_rubric_through_the_host(void **st) {
  (void)st;
  sl_plugin_lib *l = NULL;
  char err[512];
  assert_int_equal(sl_plugin_lib_open(&l, SLUICE_PLUGIN_DIR, "grade", "rubric", err, sizeof err),
                   0);
  sl_plugin_inst *in = NULL;
  assert_int_equal(sl_plugin_inst_new(&in, l, err, sizeof err), 0);
  got g = {0}, g2 = {0};
  const char *t = "on the weekend i usually go hiking with my friends in the mountains near "
                  "my town and then we eat dinner together and talk about our week";
  run_grade(in, t, &g);
  run_grade(in, t, &g2);
  assert_int_equal(g.r.outcome, SL_PLUGIN_DONE);
  assert_true(g.r.score >= 0 && g.r.score <= 100);
  assert_non_null(g.r.level);
  assert_non_null(g.r.feedback);
  assert_int_equal(g.r.ncriteria, 5);
  assert_string_equal(g.r.criteria[0].name, "fluency");
  assert_true(g.r.score == g2.r.score); /* deterministic */
  assert_string_equal(g.r.level, g2.r.level);
  sl_plugin_result_clear(&g.r);
  sl_plugin_result_clear(&g2.r);
  sl_plugin_inst_free(in);
  sl_plugin_lib_close(l);
}

/* ABI 1 plugins are adapted: same layout, nothing declared */
static void test_abi1_adapted(void **st) {
  (void)st;
  sl_plugin_lib *l = NULL;
  char err[512] = "";
  assert_int_equal(sl_plugin_lib_open(&l, SLUICE_TEST_PLUGIN_DIR, "grade", "abi1", err, sizeof err),
                   0);
  assert_int_equal(sl_plugin_lib_desc(l)->abi_version, 1);
  assert_int_equal(sl_plugin_check_fields(l, &sluice__v1__transcript__descriptor,
                                          &sluice__v1__question_status__descriptor, err,
                                          sizeof err),
                   0);
  sl_plugin_inst *in = NULL;
  assert_int_equal(sl_plugin_inst_new(&in, l, err, sizeof err), 0);
  got g = {0};
  run_grade(in, "anything", &g);
  assert_int_equal(g.r.outcome, SL_PLUGIN_DONE);
  assert_true(g.r.score == 42);
  assert_string_equal(g.r.level, "ABI1");
  sl_plugin_result_clear(&g.r);
  sl_plugin_inst_free(in);
  sl_plugin_lib_close(l);
}

static void take(sl_plugin_result *r, void *ud) { *(sl_plugin_result *)ud = *r; }

/* A step reads its input by name and writes declared fields by name; its
 * declared fields are checked against the messages around it. */
static void test_step_fields(void **st) {
  (void)st;
  sl_plugin_lib *l = NULL;
  char err[512] = "";
  assert_int_equal(sl_plugin_lib_open(&l, SLUICE_TEST_PLUGIN_DIR, "step", "mask", err, sizeof err),
                   0);
  const ProtobufCMessageDescriptor *tr = &sluice__v1__transcript__descriptor;
  assert_int_equal(sl_plugin_check_fields(l, tr, tr, err, sizeof err), 0);
  /* UploadCompleted has no "text": refused, naming plugin, field and type */
  assert_int_equal(
      sl_plugin_check_fields(l, &sluice__v1__upload_completed__descriptor, tr, err, sizeof err),
      SL_ECONFIG);
  assert_non_null(strstr(err, "plugin step/mask reads \"text\": sluice.v1.UploadCompleted has no "
                              "field \"text\""));
  assert_int_equal(
      sl_plugin_check_fields(l, tr, &sluice__v1__upload_completed__descriptor, err, sizeof err),
      SL_ECONFIG);
  assert_non_null(strstr(err, "writes \"text\""));
  assert_int_equal(sl_plugin_check_fields(l, NULL, tr, err, sizeof err), SL_ECONFIG);
  /* a call: the masked text comes back as a field written by name */
  sl_conf_bind b = sl_plugin_lib_conf(l);
  const char *sets[] = {"step.mask.words=River,near"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, sets, 1, err, sizeof err), 0);
  sl_plugin_inst *in = NULL;
  assert_int_equal(sl_plugin_inst_new(&in, l, err, sizeof err), 0);
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.text = "I live near the river.";
  sl_plugin_input pin = {
      .struct_size = sizeof pin, .key = "k", .prompt = "", .language = "", .message = &t.base};
  sl_plugin_result r = {0};
  assert_int_equal(sl_plugin_run(in, &pin, NULL, take, &r), 0);
  assert_int_equal(r.outcome, SL_PLUGIN_DONE);
  assert_int_equal(r.nfields, 1);
  assert_string_equal(r.fields[0].name, "text");
  assert_string_equal(r.fields[0].str, "I live *** the ***.");
  sl_plugin_result_clear(&r);
  /* no message (an ABI 1 style input): the plugin sees no text */
  pin.message = NULL;
  assert_int_equal(sl_plugin_run(in, &pin, NULL, take, &r), 0);
  assert_int_equal(r.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(r.error_class, "bad_input");
  sl_plugin_result_clear(&r);
  sl_plugin_inst_free(in);
  sl_conf_release(&b, 1);
  sl_plugin_lib_close(l);
}

static void test_null_safety(void **st) {
  (void)st;
  sl_plugin_lib_close(NULL);
  sl_plugin_inst_free(NULL);
  sl_plugin_result_clear(NULL);
  sl_plugin_libs_free(NULL, 0);
  assert_int_equal(sl_plugin_run(NULL, NULL, NULL, NULL, NULL), SL_EINVAL);
  assert_string_equal(sl_plugin_outcome_name(SL_PLUGIN_RETRY), "retry");
}

/* The suite may run under tools/test, whose SLUICE_* variables no table here
 * declares; the environment check is sl_conf's business, not this test's. */
static int any_env(const char *name) {
  (void)name;
  return 1;
}

int main(void) {
  sl_conf_set_known_env(any_env);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scan_finds_real_plugins),
      cmocka_unit_test(test_refuses_other_abi),
      cmocka_unit_test(test_refuses_non_plugin_and_wrong_kind),
      cmocka_unit_test(test_config_keys_prefixed_typed_and_strict),
      cmocka_unit_test(test_contract_breaches_become_plugin_errors),
      cmocka_unit_test(test_rubric_through_the_host),
      cmocka_unit_test(test_null_safety),
      cmocka_unit_test(test_abi1_adapted),
      cmocka_unit_test(test_step_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
