/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pipeline.c — the pipeline description: the built-in one (the
 * repository's pipeline.json) resolves as the stages expect, a step
 * inserted by description alone is found by message type, and every kind
 * of mistake is refused with a message naming it.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_stage.h"

#define UP "sluice.v1.UploadCompleted"
#define TR "sluice.v1.Transcript"
#define QS "sluice.v1.QuestionStatus"

static void test_builtin(void **state) {
  (void)state;
  sl_pipeline *p = NULL;
  char err[512] = "";
  assert_int_equal(sl_pipeline_load(&p, NULL, err, sizeof err), 0);
  assert_string_equal(sl_pipeline_name(p), "sluice");
  assert_int_equal(sl_pipeline_nstages(p), 9);
  assert_string_equal(sl_pipeline_topic_of(p, "stt", 0, UP), "stt.requests");
  /* preflight sits between ingest and stt */
  assert_string_equal(sl_pipeline_topic_of(p, "ingest", 1, UP), "preflight.requests");
  assert_string_equal(sl_pipeline_topic_of(p, "preflight", 1, UP), "stt.requests");
  assert_string_equal(sl_pipeline_progress_next(p, "ingest"), "checking");
  assert_string_equal(sl_pipeline_progress_next(p, "stt"), "grading");
  assert_int_equal(sl_pipeline_progress_rank(p, "awaiting_upload"), 1);
  assert_true(sl_pipeline_progress_rank(p, "checking") <
              sl_pipeline_progress_rank(p, "transcribing"));
  assert_string_equal(sl_pipeline_topic_of(p, "stt", 1, TR), "grade.requests");
  assert_string_equal(sl_pipeline_topic_of(p, "grade", 1, QS), "results");
  assert_null(sl_pipeline_topic_of(p, "grade", 1, TR));
  assert_null(sl_pipeline_topic_of(p, "nosuch", 1, TR));
  assert_string_equal(sl_pipeline_topic_of(p, "materialize", 0, "sluice.v1.SubmissionCreated"),
                      "submissions");
  assert_string_equal(sl_pipeline_retry_tiers(p), "5s,30s,2m,10m");
  assert_string_equal(sl_pipeline_dlq(p), "dlq");
  const sl_pipeline_stage *g = sl_pipeline_stage_find(p, "grade");
  assert_non_null(g);
  assert_true(g->provider && g->retry);
  assert_string_equal(g->retry_topics[1], "grade.retry.30s");
  assert_false(sl_pipeline_stage_find(p, "presign")->provider);
  /* notify reads results beside materialize, with tiers of its own */
  assert_string_equal(sl_pipeline_topic_of(p, "notify", 0, QS), "results");
  assert_true(sl_pipeline_stage_find(p, "notify")->retry);
  /* 7 declared + dlq + dlq.audit + apikeys + datakeys + erasures + 4 tiers of ingest, preflight,
   * stt, grade, materialize, notify, erase */
  const char *all[64];
  assert_int_equal(sl_pipeline_all_topics(p, all, 64), 40);
  assert_string_equal(all[6], "erasure.requests");
  assert_string_equal(all[7], "dlq");
  assert_string_equal(all[9], "apikeys");
  assert_string_equal(all[10], "datakeys");
  assert_string_equal(all[11], "erasures");
  assert_string_equal(all[31], "materialize.retry.10m");
  assert_string_equal(all[35], "notify.retry.10m");
  assert_string_equal(all[39], "erase.retry.10m");
  /* results writes the owners' erasure requests, erase reads them */
  assert_string_equal(sl_pipeline_topic_of(p, "results", 1, "sluice.v1.ErasureRequest"),
                      "erasure.requests");
  assert_string_equal(sl_pipeline_topic_of(p, "erase", 0, "sluice.v1.ErasureRequest"),
                      "erasure.requests");
  assert_int_equal(sl_pipeline_all_topics(p, all, 3), 40); /* counts past max */
  assert_string_equal(sl_pipeline_apikeys(p), "apikeys");
  assert_string_equal(sl_pipeline_message_of(p, "apikeys"), "json:sluice-apikey");
  assert_string_equal(sl_pipeline_datakeys(p), "datakeys");
  assert_string_equal(sl_pipeline_message_of(p, "datakeys"), "bytes:sluice-datakey");
  assert_string_equal(sl_pipeline_erasures(p), "erasures");
  assert_string_equal(sl_pipeline_message_of(p, "erasures"), "sluice.v1.ErasureAudit");
  assert_string_equal(sl_pipeline_message_of(p, "stt.retry.2m"), UP);
  assert_null(sl_pipeline_message_of(p, "materialize.retry.2m")); /* two input types */
  assert_string_equal(sl_pipeline_message_of(p, "dlq"), "sluice.v1.DeadLetter");
  assert_string_equal(sl_pipeline_message_of(p, "results"), QS);
  assert_null(sl_pipeline_message_of(p, "nosuch"));
  /* a tier the stages were given instead of the pipeline's (retry.tiers,
   * SLUICE_RETRY_TIERS=1s,2s,4s in the tests): still that stage's tier */
  assert_string_equal(sl_pipeline_message_of(p, "stt.retry.1s"), UP);
  assert_string_equal(sl_pipeline_retry_stage(p, "ingest.retry.1s")->name, "ingest");
  assert_null(sl_pipeline_retry_stage(p, "ingest.retry."));    /* no tier */
  assert_null(sl_pipeline_retry_stage(p, "ingest.retryx.1s")); /* not a tier */
  assert_null(sl_pipeline_retry_stage(p, "nosuch.retry.1s"));  /* no such stage */
  assert_null(sl_pipeline_retry_stage(p, "stt.requests"));     /* a declared topic */
  assert_null(sl_pipeline_retry_stage(p, NULL));
  assert_non_null(sl_pipeline_descriptor(TR));
  assert_string_equal(sl_pipeline_descriptor(TR)->name, TR);
  assert_null(sl_pipeline_descriptor("json:s3-event"));
  char grp[32];
  assert_int_equal(sl_pipeline_group(grp, sizeof grp, "stt", 1), 0);
  assert_string_equal(grp, "sluice-stt-retry");
  assert_int_equal(sl_pipeline_group(grp, 8, "materialize", 0), SL_ETOOBIG);
  sl_pipeline_free(p);
  sl_pipeline_free(NULL);
}

/* the same pipeline with a filter between stt and grade, by description only */
static const char *filtered =
    "{\"pipeline\":\"t\",\"version\":1,"
    "\"topics\":[{\"name\":\"up\",\"message\":\"" UP "\"},"
    "{\"name\":\"raw\",\"message\":\"" TR "\"},{\"name\":\"clean\",\"message\":\"" TR "\"},"
    "{\"name\":\"st\",\"message\":\"" QS "\"}],"
    "\"dead_letters\":{\"topic\":\"dl\",\"audit\":\"dl.a\"},\"retry_tiers\":[\"1s\",\"1m\"],"
    "\"stages\":["
    "{\"name\":\"src\",\"kind\":\"k\",\"inputs\":[],\"outputs\":[\"up\"]},"
    "{\"name\":\"stt\",\"kind\":\"stt\",\"inputs\":[\"up\"],\"outputs\":[\"raw\",\"st\"],"
    "\"retry\":true,\"provider\":true,\"progress\":\"transcribing\"},"
    "{\"name\":\"mask\",\"kind\":\"filter\",\"inputs\":[\"raw\"],\"outputs\":[\"clean\"],"
    "\"retry\":true},"
    "{\"name\":\"grade\",\"kind\":\"grade\",\"inputs\":[\"clean\"],\"outputs\":[\"st\"],"
    "\"progress\":\"grading\"},"
    "{\"name\":\"sink\",\"kind\":\"k2\",\"inputs\":[\"st\"],\"outputs\":[]}]}";

static void test_inserted_step(void **state) {
  (void)state;
  sl_pipeline *p = NULL;
  char err[512] = "";
  assert_int_equal(sl_pipeline_parse(&p, filtered, strlen(filtered), "t", err, sizeof err), 0);
  assert_string_equal(sl_pipeline_topic_of(p, "stt", 1, TR), "raw");
  assert_string_equal(sl_pipeline_topic_of(p, "mask", 0, TR), "raw");
  assert_string_equal(sl_pipeline_topic_of(p, "mask", 1, TR), "clean");
  assert_string_equal(sl_pipeline_topic_of(p, "grade", 0, TR), "clean");
  assert_string_equal(sl_pipeline_stage_find(p, "mask")->retry_topics[1], "mask.retry.1m");
  /* progress is data: the labels in stage order, ranked; the next label
   * skips a stage without one (mask) */
  assert_int_equal(sl_pipeline_nprogress(p), 2);
  assert_string_equal(sl_pipeline_progress_at(p, 0), "transcribing");
  assert_string_equal(sl_pipeline_progress_at(p, 1), "grading");
  assert_null(sl_pipeline_progress_at(p, 2));
  assert_int_equal(sl_pipeline_progress_rank(p, "transcribing"), 1);
  assert_int_equal(sl_pipeline_progress_rank(p, "grading"), 20);
  assert_int_equal(sl_pipeline_progress_rank(p, "checking"), 0);
  assert_true(sl_pipeline_progress_rank(p, "failed") > 20);
  assert_true(sl_pipeline_progress_rank(p, "done") > sl_pipeline_progress_rank(p, "failed"));
  assert_string_equal(sl_pipeline_progress_of(p, "stt"), "transcribing");
  assert_null(sl_pipeline_progress_of(p, "mask"));
  assert_string_equal(sl_pipeline_progress_next(p, "stt"), "grading");
  assert_string_equal(sl_pipeline_progress_next(p, "mask"), "grading");
  assert_string_equal(sl_pipeline_progress_next(p, "src"), "transcribing");
  assert_null(sl_pipeline_progress_next(p, "grade"));
  const sl_pipeline_kind kinds[] = {
      {"k", {NULL}, {UP, NULL}, 0, 0, 0},          {"stt", {UP, NULL}, {TR, QS, NULL}, 1, 1, 0},
      {"filter", {TR, NULL}, {TR, NULL}, 0, 1, 0}, {"grade", {TR, NULL}, {QS, NULL}, 0, 0, 0},
      {"k2", {QS, NULL}, {NULL}, 0, 0, 0},
  };
  assert_int_equal(sl_pipeline_check_kinds(p, kinds, 5, err, sizeof err), 0);
  /* grade's kind needs a status output the stage lacks */
  const sl_pipeline_kind strict[] = {
      {"k", {NULL}, {UP, NULL}, 0, 0, 0},
      {"stt", {UP, NULL}, {TR, QS, NULL}, 1, 1, 0},
      {"filter", {TR, NULL}, {TR, QS, NULL}, 0, 1, 0},
      {"grade", {TR, NULL}, {QS, NULL}, 0, 0, 0},
      {"k2", {QS, NULL}, {NULL}, 0, 0, 0},
  };
  assert_int_equal(sl_pipeline_check_kinds(p, strict, 5, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "stage \"mask\" (kind filter) must write a topic of " QS));
  assert_int_equal(sl_pipeline_check_kinds(p, kinds, 4, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "no stage kind \"k2\""));
  const sl_pipeline_kind wide[] = {
      {"k", {NULL}, {UP, NULL}, 0, 0, 0},          {"stt", {UP, NULL}, {TR, QS, NULL}, 1, 1, 0},
      {"filter", {TR, NULL}, {TR, NULL}, 0, 1, 0}, {"grade", {TR, NULL}, {QS, NULL}, 0, 0, 0},
      {"k2", {QS, UP, NULL}, {NULL}, 0, 0, 0},
  };
  assert_int_equal(sl_pipeline_check_kinds(p, wide, 5, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "stage \"sink\" (kind k2) must read a topic of " UP));
  /* the description may not claim a gate or tiers the code does not have */
  const sl_pipeline_kind gated[] = {
      {"k", {NULL}, {UP, NULL}, 0, 0, 0},          {"stt", {UP, NULL}, {TR, QS, NULL}, 1, 1, 0},
      {"filter", {TR, NULL}, {TR, NULL}, 1, 1, 0}, {"grade", {TR, NULL}, {QS, NULL}, 0, 0, 0},
      {"k2", {QS, NULL}, {NULL}, 0, 0, 0},
  };
  assert_int_equal(sl_pipeline_check_kinds(p, gated, 5, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "stage \"mask\" (kind filter) must say \"provider\": true"));
  FILE *f = tmpfile();
  assert_int_equal(sl_pipeline_print(p, f, 1), 0);
  assert_int_equal(sl_pipeline_print(p, f, 0), 0);
  fclose(f);
  sl_pipeline_free(p);
}

/* Replaces the first occurrence of from in filtered by to and parses it:
 * must fail with an error containing want. */
static void refused(const char *from, const char *to, const char *want) {
  char doc[4096], err[512] = "";
  const char *at = strstr(filtered, from);
  if (!at) fail_msg("test bug: \"%s\" not in the document", from);
  snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - filtered), filtered, to, at + strlen(from));
  sl_pipeline *p = (sl_pipeline *)1;
  int rc = sl_pipeline_parse(&p, doc, strlen(doc), "t.json", err, sizeof err);
  if (rc != SL_ECONFIG || p != NULL || !strstr(err, want))
    fail_msg("replacing %s with %s: rc %d, error \"%s\", wanted \"%s\"", from, to, rc, err, want);
  if (!strstr(err, "pipeline t.json: ")) fail_msg("error does not name its source: %s", err);
}

static void test_refused(void **state) {
  (void)state;
  refused("{\"pipeline\"", "[{\"pipeline\"", "line 1");
  refused("\"version\":1", "\"version\":2", "\"version\" must be 1");
  refused("\"version\":1", "\"version\":1,\"stagez\":[]",
          "unknown key \"stagez\" in the description");
  refused("\"retry\":true,\"provider\"", "\"retyr\":true,\"provider\"",
          "unknown key \"retyr\" in stage \"stt\"");
  refused("{\"name\":\"up\",", "{\"name\":\"up\",\"partitions\":3,",
          "unknown key \"partitions\" in topic 1");
  refused("\"name\":\"raw\"", "\"name\":\"up\"", "topic \"up\" is declared twice");
  refused("\"name\":\"raw\"", "\"name\":\"r/w\"", "is not a Kafka topic name");
  refused("\"message\":\"" QS "\"", "\"message\":\"sluice.v1.Nope\"",
          "message \"sluice.v1.Nope\" is neither");
  refused("\"inputs\":[\"raw\"]", "\"inputs\":[\"rwa\"]",
          "stage \"mask\" reads topic \"rwa\", which is not declared");
  refused("\"outputs\":[\"raw\",\"st\"]", "\"outputs\":[\"raw\",\"clean\",\"st\"]",
          "stage \"stt\" writes two topics of " TR " (raw and clean)");
  refused("\"name\":\"mask\"", "\"name\":\"stt\"", "two stages are named \"stt\"");
  refused("\"name\":\"mask\"", "\"name\":\"Mask\"", "stage name \"Mask\" must be");
  refused("\"kind\":\"filter\",", "", "stage \"mask\" has no \"kind\"");
  refused("\"outputs\":[\"raw\",\"st\"]", "\"outputs\":[\"raw\",\"st\",\"up\"]",
          "stage \"stt\" reads and writes up");
  refused("\"retry\":true},", "\"retry\":1},", "\"retry\" of stage \"mask\" must be true or false");
  refused("\"inputs\":[\"st\"],\"outputs\":[]", "\"inputs\":[],\"outputs\":[]",
          "no stage reads topic \"st\"");
  refused("{\"name\":\"src\",\"kind\":\"k\",\"inputs\":[],\"outputs\":[\"up\"]},", "",
          "no stage writes topic \"up\"");
  refused("\"progress\":\"grading\"", "\"progress\":\"transcribing\"",
          "progress \"transcribing\" is given to stages \"stt\" and \"grade\"");
  refused("\"progress\":\"grading\"", "\"progress\":\"done\"",
          "progress \"done\" of stage \"grade\": done and failed are the final states");
  refused("\"progress\":\"grading\"", "\"progress\":\"Grading now\"",
          "progress \"Grading now\" of stage \"grade\" is not a word");
  refused("[\"1s\",\"1m\"]", "[\"1m\",\"1s\"]", "delays must be ascending");
  refused("[\"1s\",\"1m\"]", "[]", "\"retry_tiers\" must be a list");
  refused("\"audit\":\"dl.a\"", "\"audit\":\"dl\"", "dead-letter topic \"dl\"");
  refused("\"topic\":\"dl\"", "\"topic\":\"st\"", "dead-letter topic \"st\"");
  refused("\"inputs\":[],\"outputs\":[\"up\"]", "\"inputs\":[],\"outputs\":[\"up\"],\"retry\":true",
          "stage \"src\" has retry tiers but reads no topic");
}

static void test_retry_name_clash(void **state) {
  (void)state;
  /* a declared topic named like a stage's retry tier */
  const char *doc =
      "{\"pipeline\":\"t\",\"version\":1,"
      "\"topics\":[{\"name\":\"a.retry.1s\",\"message\":\"" QS "\"}],"
      "\"dead_letters\":{\"topic\":\"dl\",\"audit\":\"dl.a\"},\"retry_tiers\":[\"1s\"],"
      "\"stages\":[{\"name\":\"w\",\"kind\":\"k\",\"inputs\":[],\"outputs\":[\"a.retry.1s\"]},"
      "{\"name\":\"a\",\"kind\":\"k\",\"inputs\":[\"a.retry.1s\"],\"outputs\":[],"
      "\"retry\":true}]}";
  sl_pipeline *p = NULL;
  char err[512] = "";
  assert_int_equal(sl_pipeline_parse(&p, doc, strlen(doc), "t", err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "topic \"a.retry.1s\" is also stage \"a\"'s retry tier"));
  assert_int_equal(sl_pipeline_load(&p, "/nonexistent/pipeline.json", err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "cannot read it"));
}

/* the repository's pipeline.json is the built-in one */
static void test_file_is_builtin(void **state) {
  (void)state;
  FILE *f = fopen(SLUICE_SOURCE_DIR "/pipeline.json", "rb");
  assert_non_null(f);
  char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_int_equal(n, sl_pipeline_builtin_len);
  assert_memory_equal(buf, sl_pipeline_builtin, n);
}

/* a stage's topics resolved into its settings, by message type */
static void test_common_conf(void **state) {
  (void)state;
  char err[512] = "";
  sl_common_conf cc;
  memset(&cc, 0, sizeof cc);
  assert_int_equal(sl_common_pipeline(&cc, "stt", err, sizeof err), 0);
  assert_string_equal(cc.topic_stt_requests, "stt.requests");
  assert_string_equal(cc.topic_grade_requests, "grade.requests");
  assert_string_equal(cc.topic_results, "results");
  assert_null(cc.topic_submissions); /* stt neither reads nor writes it */
  assert_string_equal(cc.topic_dlq, "dlq");
  assert_string_equal(cc.retry_tiers, "5s,30s,2m,10m");
  /* not a stage of the pipeline: the first topic of each type */
  assert_int_equal(sl_common_pipeline(&cc, "harness", err, sizeof err), 0);
  assert_string_equal(cc.topic_submissions, "submissions");
  assert_string_equal(cc.topic_results, "results");
  sl_common_release(&cc);
  sl_common_release(&cc);
  free(cc.retry_tiers);
  /* a set retry.tiers stays */
  memset(&cc, 0, sizeof cc);
  cc.retry_tiers = strdup("1s,2s");
  cc.pipeline_file = (char *)"/nonexistent.json";
  assert_int_equal(sl_common_pipeline(&cc, "stt", err, sizeof err), SL_ECONFIG);
  cc.pipeline_file = NULL;
  assert_int_equal(sl_common_pipeline(&cc, "stt", err, sizeof err), 0);
  assert_string_equal(cc.retry_tiers, "1s,2s");
  sl_common_release(&cc);
  free(cc.retry_tiers);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builtin),         cmocka_unit_test(test_inserted_step),
      cmocka_unit_test(test_refused),         cmocka_unit_test(test_retry_name_clash),
      cmocka_unit_test(test_file_is_builtin), cmocka_unit_test(test_common_conf),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
