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
#include "../stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

typedef struct {
  char *plugin;
} grade_conf;

const sl_conf_entry sl__grade_table[] = {
    {"grade.plugin", SL_CONF_STR, "rubric", offsetof(grade_conf, plugin),
     "grading plugin: a name found along plugin.path (grade-<name>.so) or a file path "
     "(also --plugin NAME); docs/plugins.md lists them",
     0},
};
const size_t sl__grade_table_len = sizeof sl__grade_table / sizeof sl__grade_table[0];

typedef struct {
  sl_common_conf *cc;
  sl__plugin_pool pool; /* SYNC: one instance per worker; async: one on the loop */
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
                                   .parse = parse,
                                   .input = input_for,
                                   .finish = finish,
                                   .release = release};

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  sl__plugin_process(&((grade *)ud)->pool, &ops, ud, m, out, res);
}

static void start(void *ud, sl_job *job) { sl__plugin_start(&((grade *)ud)->pool, &ops, ud, job); }

int sl__grade_main(int argc, char **argv) {
  sl__plugins pl;
  int rc = sl__plugins_open(&pl, argc, argv, "grade");
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  sl_common_conf cc = {0};
  grade_conf gc = {0};
  sl__plugin_conf pc = {0};
  sl_conf_bind own[24] = {{sl__grade_table, sl__grade_table_len, &gc},
                          {sl__plugin_table, sl__plugin_table_len, &pc}};
  size_t nown = 2 + sl__plugins_binds(&pl, own + 2, 24 - 2);
  sl_admin *admin = NULL;
  rc = sl__stage_start(pl.argc, pl.argv, "grade", "Grades transcripts with a grading plugin.", &cc,
                       own, nown, "127.0.0.1:9183", &admin);
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  grade g = {.cc = &cc};
  char err[1024] = "", provider[80];
  rc = sl__plugins_choose(&pl, "grade", gc.plugin, err, sizeof err);
  if (rc == 0) rc = sl__plugin_pool_init(&g.pool, pl.chosen, err, sizeof err);
  int sync = g.pool.sync;
  if (rc == 0) {
    const sl_plugin *d = sl_plugin_lib_desc(pl.chosen);
    snprintf(provider, sizeof provider, "grade-%s", d->name);
    sl_log(SL_LOG_INFO, NULL, "plugin grade/%s %s (%s) from %s", d->name,
           d->version ? d->version : "", sync ? "sync, worker pool" : "async, event loop",
           sl_plugin_lib_file(pl.chosen));
    const char *topics[] = {cc.topic_grade_requests};
    sl_stage_opts o = {.stage = "grade",
                       .common = &cc,
                       .topics = topics,
                       .ntopics = 1,
                       .process = sync ? process : NULL,
                       .start = sync ? NULL : start,
                       .ud = &g,
                       .provider = provider,
                       .idempotent = 1,
                       .admin = admin,
                       .on_dead_letter = sl__dead_letter_status};
    rc = sl_stage_run(&o, &sl__stop);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  }
  sl__plugin_pool_free(&g.pool);
  sl__stage_finish(&cc, own, nown, admin);
  sl__plugins_close(&pl);
  return rc ? 1 : 0;
}
