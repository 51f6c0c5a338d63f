/*
 * grade.c — `sluice grade`: transcript -> grade.
 *
 * Input Transcript on grade.requests; output a DONE QuestionStatus carrying
 * the transcript and the GradeResult on results. The rubric grader is
 * deterministic and offline (plugins/grade/rubric, docs/grading.md); a
 * redelivered message therefore produces the identical result.
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <stdio.h>
#include <string.h>

#include "grade/rubric/rubric.h"
#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

typedef struct {
  sl_common_conf *cc;
} grade;

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  grade *g = ud;
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(NULL, m->len, m->payload);
  if (!t || !t->upload || !t->upload->submission_id[0] || !t->upload->question_no) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message",
                  "grade.requests message is not a valid Transcript");
    if (t) sluice__v1__transcript__free_unpacked(t, NULL);
    return;
  }
  char key[128];
  snprintf(key, sizeof key, "%s/%u", t->upload->submission_id, t->upload->question_no);
  sl_rubric_result r;
  int rc = sl_rubric_grade(t->text, t->duration_s > 0 ? t->duration_s : 0.001,
                           t->upload->prompt, &r);
  if (rc) {
    sl_result_set(res, SL_OUTCOME_FAIL, "grade_failed", "rubric: %s", sl_strerror(rc));
    sluice__v1__transcript__free_unpacked(t, NULL);
    return;
  }
  Sluice__V1__GradeResult gr = SLUICE__V1__GRADE_RESULT__INIT;
  gr.score = r.score;
  gr.level = r.level;
  gr.feedback = r.feedback;
  gr.words_per_minute = r.words_per_minute;
  gr.lexical_variety = r.lexical_variety;
  gr.filler_rate = r.filler_rate;
  gr.relevance = r.relevance;
  gr.engine = "rubric";
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = t->upload->submission_id;
  st.question_no = t->upload->question_no;
  st.state = SLUICE__V1__QUESTION_STATE__DONE;
  st.at_ms = sl_now_ms();
  st.stage = "grade";
  st.transcript = t->text;
  st.duration_s = t->duration_s;
  st.grade = &gr;
  st.accepted_at_ms = t->upload->accepted_at_ms;
  res->provider_called = 1;
  rc = sl_outbox_add_pb(out, g->cc->topic_results, key, &st.base);
  if (rc)
    sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing result: %s", sl_strerror(rc));
  else
    sl_log(SL_LOG_INFO, key, "graded: score %.1f level %s", r.score, r.level);
  sluice__v1__transcript__free_unpacked(t, NULL);
}

int sl__grade_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(argc, argv, "grade", "Grades transcripts with the rubric grader.",
                           &cc, NULL, 0, "127.0.0.1:9183", &admin);
  if (rc) return rc;
  grade g = {&cc};
  const char *topics[] = {cc.topic_grade_requests};
  sl_stage_opts o = {.stage = "grade", .common = &cc, .topics = topics, .ntopics = 1,
                     .process = process, .ud = &g, .provider = "grade-rubric", .idempotent = 1,
                     .admin = admin};
  rc = sl_stage_run(&o, &sl__stop);
  sl__stage_finish(&cc, NULL, 0, admin);
  return rc ? 1 : 0;
}
