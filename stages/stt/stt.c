/*
 * stt.c — `sluice stt`: fetch each uploaded answer and transcribe it with an
 * STT plugin (plugin ABI: runtime/include/sluice/sl_plugin.h).
 *
 * Input UploadCompleted on stt.requests; output a Transcript on
 * grade.requests and a GRADING status (carrying the transcript) on results,
 * both keyed "<sid>/<no>". A TRANSCRIBING status is emitted at once, best
 * effort. Storage connection errors and 5xx are transient (retried), and so
 * is a 403/401 (storage_denied: the object exists, so this replica's clock
 * or keys are wrong; another replica or a fixed one can fetch it); a
 * missing object or an oversized one is permanent and dead-lettered with the
 * reason; the plugin decides about the audio itself (undecodable -> failed,
 * provider down -> retry).
 *
 * Two ways to run, chosen by the plugin:
 *   - SYNC plugins (pocketsphinx): the runtime's blocking path; each worker
 *     thread has its own signer and plugin instance; the object is fetched
 *     with a blocking signed GET, then transcribed on the same thread;
 *   - async plugins (openai): everything on the loop — the object is fetched
 *     through a presigned GET on the stage's HTTP client, then the plugin
 *     calls its provider on the same client; thousands of questions can wait
 *     on I/O with no thread each.
 *
 * The recording fetched is the 16 kHz mono FLAC the preflight step stored
 * (audio_key) when there is one, else the original (stt.audio).
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_log.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_tls.h"

typedef struct {
  char *plugin;
  int64_t max_audio_bytes;
  int64_t fetch_timeout_ms;
  char *audio;
} stt_conf;

#define SC(f) offsetof(stt_conf, f)
const sl_conf_entry sl__stt_table[] = {
    {"stt.plugin", SL_CONF_STR, "pocketsphinx", SC(plugin),
     "STT plugin: a name found along plugin.path (stt-<name>.so) or a file path "
     "(also --plugin NAME); docs/plugins.md lists them", 0},
    {"stt.max_audio_bytes", SL_CONF_INT, "67108864", SC(max_audio_bytes),
     "largest answer object fetched from storage", 0},
    {"stt.fetch_timeout_ms", SL_CONF_INT, "120000", SC(fetch_timeout_ms),
     "time limit for fetching one answer from storage (async plugins)", 0},
    {"stt.audio", SL_CONF_STR, "normalized", SC(audio),
     "which recording the plugin gets: normalized (the 16 kHz mono FLAC the preflight step "
     "stored, when there is one, else the original) or original (always what was uploaded)",
     0},
};
const size_t sl__stt_table_len = sizeof sl__stt_table / sizeof sl__stt_table[0];

typedef struct {
  sl_common_conf *cc;
  stt_conf *sc;
  sl_s3_conf *s3;
  sl_s3_target target;
  sl_plugin_lib *lib;
  sl_tls *tools;          /* SYNC: one worker per thread */
  sl_plugin_inst *inst;   /* async: one instance on the loop */
  sl_sigv4 *loop_sig;     /* async: signer used on the loop thread */
} stt;

typedef struct {
  sl_sigv4 *sig;
  sl_plugin_inst *inst;
} worker;

/* The object the plugin transcribes: preflight's FLAC unless told not to. */
static const char *audio_key(const stt *s, const Sluice__V1__UploadCompleted *up) {
  if (up->audio_key && up->audio_key[0] && strcmp(s->sc->audio, "original") != 0)
    return up->audio_key;
  return up->object_key;
}

static void worker_destroy(void *v) {
  worker *w = v;
  if (!w) return;
  sl_plugin_inst_free(w->inst);
  sl_sigv4_free(w->sig);
  free(w);
}

static void *worker_create(void *arg, char *err, unsigned long errlen) {
  stt *s = arg;
  worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  int rc = sl_sigv4_new(&w->sig, s->s3->access_key, s->s3->secret_key, s->s3->region, "s3");
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  if (rc == 0) rc = sl_plugin_inst_new(&w->inst, s->lib, err, errlen);
  if (rc) {
    worker_destroy(w);
    return NULL;
  }
  return w;
}

static void input_for(sl_plugin_input *in, const Sluice__V1__UploadCompleted *up,
                      const char *akey, const char *key, const void *audio, size_t len) {
  memset(in, 0, sizeof *in);
  in->struct_size = sizeof *in;
  in->question_no = up->question_no;
  in->key = key;
  in->prompt = up->prompt ? up->prompt : "";
  in->language = "";
  in->audio = audio;
  in->audio_len = len;
  in->content_type = sl__audio_content_type(akey);
  const char *slash = strrchr(akey, '/');
  in->filename = slash ? slash + 1 : akey;
  in->message = &up->base; /* ABI 2: fields by name */
}

/* Maps the plugin's outcome onto the stage result; on DONE queues the
 * transcript for grading and the GRADING status for the results view. */
static void finish(stt *s, const Sluice__V1__UploadCompleted *up, const char *key,
                   sl_plugin_result *pr, sl_outbox *out, sl_result *res) {
  if (!sl__plugin_outcome(pr, res)) return;
  const char *text = pr->text ? pr->text : "";
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.upload = (Sluice__V1__UploadCompleted *)up;
  t.text = (char *)text;
  t.duration_s = pr->duration_s;
  t.engine = pr->engine ? pr->engine : "";
  t.language = pr->language ? pr->language : "";
  t.cost_units = pr->cost_units;
  size_t nw = pr->nwords;
  Sluice__V1__Word *words = calloc(nw ? nw : 1, sizeof *words);
  Sluice__V1__Word **wp = calloc(nw ? nw : 1, sizeof *wp);
  int rc = words && wp ? 0 : SL_ENOMEM;
  for (size_t i = 0; rc == 0 && i < nw; i++) {
    sluice__v1__word__init(&words[i]);
    words[i].word = (char *)pr->words[i].word;
    words[i].start_s = pr->words[i].start_s;
    words[i].end_s = pr->words[i].end_s;
    wp[i] = &words[i];
  }
  t.words = wp;
  t.n_words = rc == 0 ? nw : 0;
  if (rc == 0) rc = sl_outbox_add_pb(out, s->cc->topic_grade_requests, key, &t.base);
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = up->submission_id;
  st.question_no = up->question_no;
  st.state = SLUICE__V1__QUESTION_STATE__GRADING;
  st.at_ms = sl_now_ms();
  st.stage = "stt";
  const char *next = sl_pipeline_progress_next(s->cc->pipeline, "stt");
  st.progress = (char *)(next ? next : "");
  st.accepted_at_ms = up->accepted_at_ms;
  st.transcript = (char *)text;
  st.duration_s = pr->duration_s;
  if (rc == 0) rc = sl_outbox_add_pb(out, s->cc->topic_results, key, &st.base);
  if (rc)
    sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing transcript: %s", sl_strerror(rc));
  else
    sl_log(SL_LOG_INFO, key, "transcribed %.1f s of audio with %s in %lld ms: \"%.80s\"",
           pr->duration_s, t.engine, (long long)pr->elapsed_ms, text);
  free(words);
  free(wp);
}

static Sluice__V1__UploadCompleted *parse(stt *s, const rd_kafka_message_t *m, sl_outbox *out,
                                          sl_result *res, char key[128]) {
  Sluice__V1__UploadCompleted *up =
      sluice__v1__upload_completed__unpack(NULL, m->len, m->payload);
  if (!up || !up->submission_id[0] || !up->question_no || !up->object_key[0]) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message",
                  "stt.requests message is not a valid UploadCompleted");
    if (up) sluice__v1__upload_completed__free_unpacked(up, NULL);
    return NULL;
  }
  snprintf(key, 128, "%s/%u", up->submission_id, up->question_no);
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = up->submission_id;
  st.question_no = up->question_no;
  st.state = SLUICE__V1__QUESTION_STATE__TRANSCRIBING;
  st.at_ms = sl_now_ms();
  st.stage = "stt";
  const char *own = sl_pipeline_progress_of(s->cc->pipeline, "stt");
  st.progress = (char *)(own ? own : "");
  st.accepted_at_ms = up->accepted_at_ms;
  sl_outbox_emit_now(out, s->cc->topic_results, key, &st.base);
  return up;
}

/* ---- SYNC plugins: worker pool ---------------------------------------------- */

static void take_result(sl_plugin_result *r, void *ud) { *(sl_plugin_result *)ud = *r; }

/* Storage refused this replica's signature (403/401). The object exists
 * (ingest saw it), so the fault is this replica's: a clock off by more
 * than the signature allows, or credentials being rotated. Retried, so the
 * copy can reach a replica that signs correctly (or this one, fixed), not
 * failed for good; the time budget still ends it. */
static void denied(sl_result *res, const char *key, long status) {
  sl_result_set(res, SL_OUTCOME_RETRY, "storage_denied",
                "GET %s: HTTP %ld: storage refused this replica's signature (is its clock "
                "right? are s3.access_key/s3.secret_key current?)", key, status);
}

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  stt *s = ud;
  char key[128];
  Sluice__V1__UploadCompleted *up = parse(s, m, out, res, key);
  if (!up) return;
  void *audio = NULL;
  size_t len = 0;
  long status = 0;
  char err[512] = "";
  worker *w = sl_tls_get(s->tools, err, sizeof err);
  if (!w) {
    sl_result_set(res, SL_OUTCOME_RETRY, "stt_setup", "%s", err);
    sluice__v1__upload_completed__free_unpacked(up, NULL);
    return;
  }
  const char *akey = audio_key(s, up);
  int rc = sl_s3_get(w->sig, &s->target, akey, (size_t)s->sc->max_audio_bytes,
                     &audio, &len, &status, err, sizeof err);
  if (rc == SL_EUNAVAIL || (rc == SL_ESTORAGE && (status >= 500 || status == 429 ||
                                                   status == 408))) {
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", err);
  } else if (rc == SL_ESTORAGE && (status == 403 || status == 401)) {
    denied(res, akey, status);
  } else if (rc) {
    sl_result_set(res, SL_OUTCOME_FAIL, rc == SL_ETOOBIG ? "audio_too_large" : "storage",
                  "%s", err);
  } else {
    sl_plugin_input in;
    input_for(&in, up, akey, key, audio, len);
    sl_plugin_result pr = {0};
    rc = sl_plugin_run(w->inst, &in, NULL, take_result, &pr);
    if (rc)
      sl_result_set(res, SL_OUTCOME_RETRY, "plugin_error", "running the plugin: %s",
                    sl_strerror(rc));
    else
      finish(s, up, key, &pr, out, res);
    sl_plugin_result_clear(&pr);
  }
  free(audio);
  sluice__v1__upload_completed__free_unpacked(up, NULL);
}

/* ---- async plugins: everything on the loop ----------------------------------- */

typedef struct {
  stt *s;
  sl_job *job;
  Sluice__V1__UploadCompleted *up;
  char key[128];
  void *audio;
  size_t len;
} job_ctx;

static void job_end(job_ctx *c) {
  sl_job *job = c->job;
  sluice__v1__upload_completed__free_unpacked(c->up, NULL);
  free(c->audio);
  free(c);
  sl_job_done(job);
}

static void on_transcribed(sl_plugin_result *pr, void *ud) {
  job_ctx *c = ud;
  finish(c->s, c->up, c->key, pr, sl_job_outbox(c->job), sl_job_result(c->job));
  sl_plugin_result_clear(pr);
  job_end(c);
}

static void on_audio(const sl_httpc_response *r, void *ud) {
  job_ctx *c = ud;
  sl_result *res = sl_job_result(c->job);
  const char *k = audio_key(c->s, c->up);
  if (r->status == 200) {
    c->audio = malloc(r->body_len ? r->body_len : 1);
    if (!c->audio) {
      sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "holding %zu bytes of audio",
                    r->body_len);
      job_end(c);
      return;
    }
    memcpy(c->audio, r->body, r->body_len);
    c->len = r->body_len;
    sl_plugin_input in;
    input_for(&in, c->up, k, c->key, c->audio, c->len);
    int rc = sl_plugin_run(c->s->inst, &in, sl_job_http(c->job), on_transcribed, c);
    if (rc) {
      sl_result_set(res, SL_OUTCOME_RETRY, "plugin_error", "running the plugin: %s",
                    sl_strerror(rc));
      job_end(c);
    }
    return;
  }
  if (r->too_big)
    sl_result_set(res, SL_OUTCOME_FAIL, "audio_too_large", "object %s is larger than %lld bytes",
                  k, (long long)c->s->sc->max_audio_bytes);
  else if (r->status == 404)
    sl_result_set(res, SL_OUTCOME_FAIL, "storage", "object %s not found in storage", k);
  else if (r->status == 0 || r->status >= 500 || r->status == 429 || r->status == 408)
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "GET %s: %s", k,
                  r->status ? "server error" : r->error);
  else if (r->status == 403 || r->status == 401)
    denied(res, k, r->status);
  else
    sl_result_set(res, SL_OUTCOME_FAIL, "storage", "GET %s: HTTP %ld", k, r->status);
  job_end(c);
}

static void start(void *ud, sl_job *job) {
  stt *s = ud;
  job_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    sl_result_set(sl_job_result(job), SL_OUTCOME_RETRY, "out_of_memory", "starting a job");
    sl_job_done(job);
    return;
  }
  c->s = s;
  c->job = job;
  c->up = parse(s, sl_job_message(job), sl_job_outbox(job), sl_job_result(job), c->key);
  if (!c->up) {
    free(c);
    sl_job_done(job);
    return;
  }
  char url[4096];
  int rc = sl_s3_presign_get(s->loop_sig, &s->target, audio_key(s, c->up), 600, url, sizeof url);
  sl_httpc_request q = {.method = "GET", .url = url,
                        .timeout_ms = (long)s->sc->fetch_timeout_ms,
                        .max_response = (size_t)s->sc->max_audio_bytes,
                        .ca_file = s->target.ca_file};
  if (rc == 0) rc = sl_httpc_send(sl_job_http(job), &q, on_audio, c);
  if (rc) {
    sl_result_set(sl_job_result(job), SL_OUTCOME_RETRY, "storage", "fetching %s: %s",
                  c->up->object_key, sl_strerror(rc));
    job_end(c);
  }
}

int sl__stt_main(int argc, char **argv) {
  sl__plugins pl;
  int rc = sl__plugins_open(&pl, argc, argv, "stt");
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  sl_common_conf cc = {0};
  stt_conf sc = {0};
  sl_s3_conf s3 = {0};
  sl__plugin_conf pc = {0};
  sl_conf_bind own[24] = {{sl__stt_table, sl__stt_table_len, &sc},
                          {sl__plugin_table, sl__plugin_table_len, &pc},
                          {sl_s3_conf_table, sl_s3_conf_table_len, &s3}};
  size_t nown = 3 + sl__plugins_binds(&pl, own + 3, 24 - 3);
  sl_admin *admin = NULL;
  rc = sl__stage_start(pl.argc, pl.argv, "stt", "Transcribes uploaded answers with an STT plugin.",
                       &cc, own, nown, "127.0.0.1:9182", &admin);
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  stt s = {.cc = &cc, .sc = &sc, .s3 = &s3};
  char err[1024] = "", provider[80];
  rc = sl__plugins_choose(&pl, "stt", sc.plugin, err, sizeof err);
  if (rc == 0 && strcmp(sc.audio, "normalized") && strcmp(sc.audio, "original")) {
    snprintf(err, sizeof err, "stt.audio must be normalized or original, not \"%s\"", sc.audio);
    rc = SL_ECONFIG;
  }
  if (rc == 0) {
    s.lib = pl.chosen;
    rc = sl_s3_target_init(&s.target, &s3);
    if (rc) snprintf(err, sizeof err, "s3 settings: %s", sl_strerror(rc));
  }
  int sync = s.lib && (sl_plugin_lib_desc(s.lib)->flags & SL_PLUGIN_SYNC);
  if (rc == 0 && sync) {
    rc = sl_tls_new(&s.tools, worker_create, worker_destroy, &s);
    if (rc == 0) { /* one instance now, so a bad setting fails at start-up */
      worker *w = worker_create(&s, err, sizeof err);
      if (!w) rc = SL_ECONFIG;
      worker_destroy(w);
    }
  } else if (rc == 0) {
    rc = sl_sigv4_new(&s.loop_sig, s3.access_key, s3.secret_key, s3.region, "s3");
    if (rc) snprintf(err, sizeof err, "s3 settings: %s", sl_strerror(rc));
    if (rc == 0) rc = sl_plugin_inst_new(&s.inst, s.lib, err, sizeof err);
  }
  if (rc == 0) {
    const sl_plugin *d = sl_plugin_lib_desc(s.lib);
    snprintf(provider, sizeof provider, "stt-%s", d->name);
    sl_log(SL_LOG_INFO, NULL, "plugin stt/%s %s (%s) from %s", d->name,
           d->version ? d->version : "", sync ? "sync, worker pool" : "async, event loop",
           sl_plugin_lib_file(s.lib));
    const char *topics[] = {cc.topic_stt_requests};
    sl_stage_opts o = {.stage = "stt", .common = &cc, .topics = topics, .ntopics = 1,
                       .process = sync ? process : NULL, .start = sync ? NULL : start,
                       .ud = &s, .provider = provider, .idempotent = 1, .admin = admin,
                       .on_dead_letter = sl__dead_letter_status};
    rc = sl_stage_run(&o, &sl__stop);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  }
  sl_tls_free(s.tools);
  sl_plugin_inst_free(s.inst);
  sl_sigv4_free(s.loop_sig);
  sl__stage_finish(&cc, own, nown, admin);
  sl__plugins_close(&pl);
  return rc ? 1 : 0;
}
