/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage.c — the stage descriptors (see stage.h) and the start-up and
 * shutdown every stage main shares. The registry is written once by main()
 * before anything reads it, so it needs no lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/stage.h"

#include <stdio.h>
#include <string.h>

#include "lib/plugin_stage.h"
#include "lib/process.h"
#include "sluice.pb-c.h"
#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pbseal.h"
#include "sluice/sl_trace.h"

#define SL__STAGES_MAX 32

static const sl__stage_desc *const *registered;
static size_t nregistered;

void sl__stages_register(const sl__stage_desc *const *descs, size_t n) {
  registered = descs;
  nregistered = n;
}

const sl__stage_desc *const *sl__stages(size_t *n) {
  *n = nregistered;
  return registered;
}

const sl__stage_desc *sl__stage_of_kind(const char *kind) {
  for (size_t i = 0; i < nregistered; i++)
    if (registered[i]->kind.kind && strcmp(registered[i]->kind.kind, kind) == 0)
      return registered[i];
  return NULL;
}

size_t sl__stage_kinds(sl_pipeline_kind *out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < nregistered && n < max; i++)
    if (registered[i]->kind.kind) out[n++] = registered[i]->kind;
  return n;
}

int sl__stage_desc_run(const sl__stage_desc *d, const char *name, int argc, char **argv) {
  return d->main ? d->main(argc, argv) : sl__plugin_stage_main(d, name, argc, argv);
}

/* The kind of the stage NAME in the pipeline (pipeline.file, else the
 * built-in one) into kind: 0, or an exit code + 1000 (message on stderr). */
static int kind_of(int argc, char **argv, const char *name, char *kind, size_t len) {
  char file[4096] = "", err[1024];
  sl_cli_peek(argc, argv, "pipeline.file", file, sizeof file);
  sl_pipeline *p = NULL;
  if (sl_pipeline_load(&p, file, err, sizeof err) != 0) {
    fprintf(stderr, "sluice stage %s: %s\n", name, err);
    return 1002;
  }
  const sl_pipeline_stage *st = sl_pipeline_stage_find(p, name);
  if (st) snprintf(kind, len, "%s", st->kind);
  sl_pipeline_free(p);
  if (!st) {
    fprintf(stderr, "sluice stage: the pipeline (%s) has no stage \"%s\" (see `sluice pipeline`)\n",
            file[0] ? file : "built-in", name);
    return 1002;
  }
  return 0;
}

int sl__stage_main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: sluice stage NAME [--config FILE] [--set key=value]... [--help]\n"
                    "Runs the stage NAME of the pipeline description (`sluice pipeline`).\n");
    return argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? 1000
                                                                                       : 1002;
  }
  const char *name = argv[1];
  char kind[64] = "";
  int rc = kind_of(argc, argv, name, kind, sizeof kind);
  if (rc) return rc;
  const sl__stage_desc *d = sl__stage_of_kind(kind);
  /* a generic kind runs under any name; a built-in one under its own */
  if (d && (d->kind.generic || strcmp(kind, name) == 0))
    return d->plugin ? sl__plugin_stage_main(d, name, argc - 1, argv + 1)
                     : d->main(argc - 1, argv + 1);
  fprintf(stderr, "sluice stage %s: a stage of kind %s must be named %s (for now)\n", name, kind,
          kind);
  return 1002;
}

void sl__dead_letter_status(const sl_stage_opts *o, const char *subject, const char *error_class,
                            const char *error_message, int64_t at_ms, double cost_units,
                            sl_outbox *out) {
  char sid[64];
  unsigned qno;
  if (!subject || sl_key_parse(subject, strlen(subject), sid, &qno) != 0) return;
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = sid;
  st.question_no = qno;
  st.state = SLUICE__V1__QUESTION_STATE__FAILED;
  st.at_ms = at_ms;
  st.stage = (char *)o->stage;
  st.error_class = (char *)error_class;
  st.error_message = (char *)error_message;
  st.cost_units = cost_units;
  sl_outbox_add_pb(out, o->common->topic_results, subject, &st.base);
}

int sl__pipeline_load(sl_common_conf *cc, const char *stage, char *err, size_t errlen) {
  sl_pipeline_kind kinds[SL__STAGES_MAX];
  size_t nk = sl__stage_kinds(kinds, SL__STAGES_MAX);
  int rc = sl_common_pipeline(cc, stage, err, errlen);
  if (rc == 0) rc = sl_pipeline_check_kinds(cc->pipeline, kinds, nk, err, errlen);
  if (rc) return rc;
  const sl_pipeline_stage *s = sl_pipeline_stage_find(cc->pipeline, stage);
  if (!s) {
    snprintf(err, errlen, "pipeline %s has no stage \"%s\"",
             cc->pipeline_file && *cc->pipeline_file ? cc->pipeline_file : "(built-in)", stage);
    return SL_ECONFIG;
  }
  int builtin = 0; /* a stage named like a built-in kind is of that kind */
  for (size_t i = 0; i < nk; i++) builtin |= !kinds[i].generic && strcmp(kinds[i].kind, stage) == 0;
  if (strcmp(s->kind, builtin ? stage : "plugin") != 0) {
    snprintf(err, errlen, "stage \"%s\" of the pipeline is of kind %s, not %s", stage, s->kind,
             builtin ? stage : "plugin");
    return SL_ECONFIG;
  }
  return 0;
}

/* What an answer says, and what is judged of it: sealed with the
 * submission's data key wherever it is written (docs/privacy.md). */
static const char *const transcript_personal[] = {"text", "words"};
static const char *const status_personal[] = {"transcript", "grade"};
static const sl_pbseal_type personal[] = {
    {&sluice__v1__transcript__descriptor, transcript_personal, 2},
    {&sluice__v1__question_status__descriptor, status_personal, 2},
};

void sl__personal_register(void) {
  sl_pbseal_set_personal(personal, sizeof personal / sizeof personal[0]);
}

int sl__stage_start(const sl__stage_desc *d, const char *stage, int argc, char **argv,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin **admin) {
  sl_conf_bind binds[32];
  size_t nb = 0;
  binds[nb++] = (sl_conf_bind){sl_common_conf_table, sl_common_conf_table_len, cc};
  for (size_t i = 0; i < nown && nb < 32; i++) binds[nb++] = own[i];
  int rc = sl_cli_load(argc, argv, stage, d->summary, binds, nb);
  if (rc) return rc;
  if (sl_log_init(stage, cc->log_level) != 0) {
    fprintf(stderr, "sluice %s: log.level must be debug, info, warn or error\n", stage);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  char err[1024];
  if (sl__pipeline_load(cc, stage, err, sizeof err) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s", err);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  if (sl_common_secure(cc, 1, err, sizeof err) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s", err);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  sl__personal_register();
  char service[80];
  snprintf(service, sizeof service, "sluice-%s", stage);
  sl_trace_conf tc = {.endpoint = cc->trace_endpoint,
                      .service = service,
                      .sample_ratio = cc->trace_sample_ratio,
                      .queue_spans = (int)cc->trace_queue_spans,
                      .batch_spans = (int)cc->trace_batch_spans,
                      .flush_ms = (int)cc->trace_flush_ms,
                      .timeout_ms = (int)cc->trace_timeout_ms};
  if (cc->trace_queue_spans > 1000000 || cc->trace_batch_spans > 1000000 ||
      cc->trace_flush_ms > 60000 || cc->trace_timeout_ms > 60000 || sl_trace_start(&tc) != 0) {
    sl_log(SL_LOG_ERROR, NULL,
           "trace settings: sample_ratio must be 0-1, queue_spans 1-1000000 and at least "
           "batch_spans, flush_ms and timeout_ms 10-60000, the endpoint a URL");
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  if (tc.endpoint && *tc.endpoint)
    sl_log(SL_LOG_INFO, NULL, "tracing: spans to %s as %s, %.3g of new traces sampled", tc.endpoint,
           service, tc.sample_ratio);
  sl__install_signals();
  const char *listen = cc->admin_listen && *cc->admin_listen ? cc->admin_listen : d->admin;
  rc = sl_admin_start(admin, listen);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "admin endpoint %s: %s", listen, sl_strerror(rc));
    sl__stage_finish(cc, own, nown, NULL);
    return 1001;
  }
  sl_log(SL_LOG_INFO, NULL, "admin endpoint on http://%s (/healthz /readyz /metrics)", listen);
  return 0;
}

void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin *admin) {
  sl_trace_stop(); /* what is queued goes out, within trace.timeout_ms */
  sl_admin_stop(admin);
  sl_common_release(cc);
  sl_conf_bind c = {sl_common_conf_table, sl_common_conf_table_len, cc};
  sl_conf_release(&c, 1);
  sl_conf_release(own, nown);
  sl_log(SL_LOG_INFO, NULL, "stopped");
}