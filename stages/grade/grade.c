/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grade.c — `sluice grade`: transcript -> grade, with a grading plugin
 * (plugin ABI: runtime/include/sluice/sl_plugin.h).
 *
 * Input Transcript on grade.requests; output a DONE QuestionStatus carrying
 * the transcript and the GradeResult (with per-criterion scores) on results.
 * SYNC plugins (rubric) run on the worker pool with one instance per worker
 * thread; async plugins (openai) run on the loop and call their provider on
 * the stage's HTTP client. The rubric is deterministic, so a redelivered
 * message produces the identical result; for model graders the idempotency
 * store answers a redelivery with the stored grade instead of a second call.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/pb_arena.h"
#include "lib/plugin_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

typedef struct {
  char *plugin;
} grade_conf;

static const sl_conf_entry grade_table[] = {
    {"grade.plugin", SL_CONF_STR, "rubric", offsetof(grade_conf, plugin),
     "grading plugin: a name found along plugin.path (grade-<name>.so) or a file path "
     "(also --plugin NAME); docs/plugins.md lists them",
     0},
};
static const size_t grade_table_len = sizeof grade_table / sizeof grade_table[0];

typedef struct {
  sl_common_conf *cc;
} grade;

static int parse(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res, void **msg,
                 char key[SL__KEY_MAX], ProtobufCAllocator *pa) {
  (void)ud;
  (void)out;
  Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(pa, m->len, m->payload);
  if (!t || !t->upload || !t->upload->submission_id[0] || !t->upload->question_no) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message",
                  "grade.requests message is not a valid Transcript");
    sl__pb_free(t, pa);
    return 0;
  }
  snprintf(key, SL__KEY_MAX, "%s/%u", t->upload->submission_id, t->upload->question_no);
  *msg = t;
  return 1;
}

static void release(void *msg, ProtobufCAllocator *pa) { sl__pb_free(msg, pa); }

/* Builds the plugin input; words point into t (and into *scratch, the word
 * array). */
static int input_for(void *ud, void *msg, const char *key, sl_plugin_input *in, void **scratch,
                     sl_result *res) {
  (void)ud;
  (void)res;
  const Sluice__V1__Transcript *t = msg;
  memset(in, 0, sizeof *in);
  in->struct_size = sizeof *in;
  in->question_no = t->upload->question_no;
  in->key = key;
  in->prompt = t->upload->prompt ? t->upload->prompt : "";
  in->language = t->language ? t->language : "";
  in->transcript = t->text ? t->text : "";
  in->duration_s = t->duration_s;
  in->message = &t->base; /* ABI 2: fields by name */
  sl_plugin_word *wbuf = t->n_words ? calloc(t->n_words, sizeof *wbuf) : NULL;
  *scratch = wbuf;
  if (wbuf) {
    for (size_t i = 0; i < t->n_words; i++)
      wbuf[i] = (sl_plugin_word){t->words[i]->word, t->words[i]->start_s, t->words[i]->end_s};
    in->words = wbuf;
    in->nwords = t->n_words;
  }
  return 1;
}

static void finish(void *ud, void *msg, const char *key, sl_plugin_result *pr, const char *stored,
                   sl_outbox *out, sl_result *res) {
  (void)stored; /* its plugin stores no object */
  const grade *g = ud;
  const Sluice__V1__Transcript *t = msg;
  if (!sl__plugin_outcome(pr, res)) return;
  Sluice__V1__GradeResult gr = SLUICE__V1__GRADE_RESULT__INIT;
  gr.score = pr->score;
  gr.level = pr->level ? pr->level : "";
  gr.feedback = pr->feedback ? pr->feedback : "";
  gr.words_per_minute = pr->words_per_minute;
  gr.lexical_variety = pr->lexical_variety;
  gr.filler_rate = pr->filler_rate;
  gr.relevance = pr->relevance;
  gr.engine = pr->engine ? pr->engine : "";
  gr.cost_units = pr->cost_units;
  Sluice__V1__Criterion crit[SL_PLUGIN_MAX_CRITERIA], *cp[SL_PLUGIN_MAX_CRITERIA];
  for (size_t i = 0; i < pr->ncriteria; i++) {
    sluice__v1__criterion__init(&crit[i]);
    crit[i].name = pr->criteria[i].name;
    crit[i].score = pr->criteria[i].score;
    crit[i].comment = pr->criteria[i].comment ? pr->criteria[i].comment : "";
    cp[i] = &crit[i];
  }
  gr.criteria = cp;
  gr.n_criteria = pr->ncriteria;
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
  /* stt's cost (in the transcript) and every grading attempt's */
  st.cost_units = t->cost_units + res->cost_before + res->cost_units;
  int rc = sl_outbox_add_pb(out, g->cc->topic_results, key, &st.base);
  if (rc)
    sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing result: %s", sl_strerror(rc));
  else
    sl_log(SL_LOG_INFO, key, "graded by %s in %lld ms: score %.1f level %s", gr.engine,
           (long long)pr->elapsed_ms, gr.score, gr.level);
}

static const sl__plugin_ops ops = {.setup_class = "grade_setup",
                                   .keyed = 1,
                                   .parse = parse,
                                   .input = input_for,
                                   .finish = finish,
                                   .release = release};

static const char *plugin_name(const sl__plugin_host *h) {
  return ((const grade_conf *)h->conf)->plugin;
}

static int setup(sl__plugin_host *h, sl_stage_opts *o, char *err, size_t errlen) {
  (void)o;
  (void)err;
  (void)errlen;
  ((grade *)h->state)->cc = h->cc;
  h->topics[0] = h->cc->topic_grade_requests;
  return 0;
}

static const sl__plugin_stage grade_host = {.kind = "grade",
                                            .ops = &ops,
                                            .conf_size = sizeof(grade_conf),
                                            .state_size = sizeof(grade),
                                            .plugin_name = plugin_name,
                                            .setup = setup};

const sl__stage_desc sl__grade_stage = {
    .name = "grade",
    .summary = "grades transcripts (grading plugin, default rubric)",
    .kind = {"grade", {SL__MSG_TRANSCRIPT, NULL}, {SL__MSG_STATUS, NULL}, 1, 1, 0},
    .table = grade_table,
    .table_len = &grade_table_len,
    .admin = "127.0.0.1:9183",
    .plugin = &grade_host};
