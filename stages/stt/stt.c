/*
 * stt.c — `sluice stt`: fetch each uploaded answer and transcribe it.
 *
 * Input UploadCompleted on stt.requests; output a Transcript on
 * grade.requests and a GRADING status (carrying the transcript) on results,
 * both keyed "<sid>/<no>". A TRANSCRIBING status is emitted at once, best
 * effort. Storage connection errors and 5xx are transient (retried); a
 * missing object, an oversized one, or audio the decoder cannot read are
 * permanent and dead-lettered with the reason.
 *
 * PocketSphinx is compiled in for now (plugins/stt/pocketsphinx); it runs on
 * the stage thread, one answer at a time.
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_tls.h"
#include "stt/pocketsphinx/pocketsphinx.h"

typedef struct {
  char *model_dir;
  int64_t max_audio_bytes;
  double max_seconds;
} stt_conf;

const sl_conf_entry sl__stt_table[] = {
    {"stt.model_dir", SL_CONF_STR, SL_PS_DEFAULT_MODELDIR, offsetof(stt_conf, model_dir),
     "PocketSphinx model directory (en-us/, en-us.lm.bin, cmudict-en-us.dict)", 0},
    {"stt.max_audio_bytes", SL_CONF_INT, "67108864", offsetof(stt_conf, max_audio_bytes),
     "largest answer object fetched from storage", 0},
    {"stt.max_seconds", SL_CONF_DOUBLE, "600", offsetof(stt_conf, max_seconds),
     "longest answer transcribed, in seconds of audio", 0},
};
const size_t sl__stt_table_len = sizeof sl__stt_table / sizeof sl__stt_table[0];

typedef struct {
  sl_common_conf *cc;
  stt_conf *sc;
  sl_s3_conf *s3;
  sl_s3_target target;
  sl_tls *tools; /* one worker per thread: signer + decoder */
} stt;

typedef struct {
  sl_sigv4 *sig;
  sl_ps *ps;
} worker;

static void worker_destroy(void *v) {
  worker *w = v;
  if (!w) return;
  sl_ps_free(w->ps);
  sl_sigv4_free(w->sig);
  free(w);
}

static void *worker_create(void *arg, char *err, unsigned long errlen) {
  stt *s = arg;
  worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  int rc = sl_sigv4_new(&w->sig, s->s3->access_key, s->s3->secret_key, s->s3->region, "s3");
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  if (rc == 0) rc = sl_ps_new(&w->ps, s->sc->model_dir, s->sc->max_seconds, err, errlen);
  if (rc) {
    worker_destroy(w);
    return NULL;
  }
  return w;
}

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  stt *s = ud;
  Sluice__V1__UploadCompleted *up =
      sluice__v1__upload_completed__unpack(NULL, m->len, m->payload);
  if (!up || !up->submission_id[0] || !up->question_no || !up->object_key[0]) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message",
                  "stt.requests message is not a valid UploadCompleted");
    if (up) sluice__v1__upload_completed__free_unpacked(up, NULL);
    return;
  }
  char key[128];
  snprintf(key, sizeof key, "%s/%u", up->submission_id, up->question_no);

  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = up->submission_id;
  st.question_no = up->question_no;
  st.state = SLUICE__V1__QUESTION_STATE__TRANSCRIBING;
  st.at_ms = sl_now_ms();
  st.stage = "stt";
  st.accepted_at_ms = up->accepted_at_ms;
  sl_outbox_emit_now(out, s->cc->topic_results, key, &st.base);

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
  int rc = sl_s3_get(w->sig, &s->target, up->object_key, (size_t)s->sc->max_audio_bytes,
                     &audio, &len, &status, err, sizeof err);
  if (rc == SL_EUNAVAIL || (rc == SL_ESTORAGE && (status >= 500 || status == 429 ||
                                                   status == 408))) {
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", err);
  } else if (rc) {
    sl_result_set(res, SL_OUTCOME_FAIL, rc == SL_ETOOBIG ? "audio_too_large" : "storage",
                  "%s", err);
  } else {
    sl_ps_result tr = {0};
    int64_t t0 = sl_now_ms();
    rc = sl_ps_transcribe(w->ps, audio, len, &tr, err, sizeof err);
    res->provider_called = 1;
    if (rc) {
      sl_result_set(res, SL_OUTCOME_FAIL,
                    rc == SL_EDECODE    ? "undecodable_audio"
                    : rc == SL_ETOOBIG ? "audio_too_long"
                                       : "stt_failed",
                    "%s", err);
    } else {
      Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
      t.upload = up;
      t.text = tr.text;
      t.duration_s = tr.duration_s;
      t.engine = "pocketsphinx";
      Sluice__V1__Word *words = calloc(tr.nwords ? tr.nwords : 1, sizeof *words);
      Sluice__V1__Word **wp = calloc(tr.nwords ? tr.nwords : 1, sizeof *wp);
      if (words && wp) {
        for (size_t i = 0; i < tr.nwords; i++) {
          sluice__v1__word__init(&words[i]);
          words[i].word = tr.words[i].word;
          words[i].start_s = tr.words[i].start_s;
          words[i].end_s = tr.words[i].end_s;
          wp[i] = &words[i];
        }
        t.words = wp;
        t.n_words = tr.nwords;
      }
      rc = sl_outbox_add_pb(out, s->cc->topic_grade_requests, key, &t.base);
      st.state = SLUICE__V1__QUESTION_STATE__GRADING;
      st.at_ms = sl_now_ms();
      st.transcript = tr.text;
      st.duration_s = tr.duration_s;
      if (rc == 0) rc = sl_outbox_add_pb(out, s->cc->topic_results, key, &st.base);
      if (rc)
        sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing transcript: %s",
                      sl_strerror(rc));
      else
        sl_log(SL_LOG_INFO, key, "transcribed %.1f s of audio in %lld ms: \"%.80s\"",
               tr.duration_s, (long long)(sl_now_ms() - t0), tr.text);
      free(words);
      free(wp);
      sl_ps_result_clear(&tr);
    }
  }
  free(audio);
  sluice__v1__upload_completed__free_unpacked(up, NULL);
}

int sl__stt_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  stt_conf sc = {0};
  sl_s3_conf s3 = {0};
  sl_conf_bind own[] = {{sl__stt_table, sl__stt_table_len, &sc},
                        {sl_s3_conf_table, sl_s3_conf_table_len, &s3}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(argc, argv, "stt", "Transcribes uploaded answers with PocketSphinx.",
                           &cc, own, 2, "127.0.0.1:9182", &admin);
  if (rc) return rc;
  stt s = {.cc = &cc, .sc = &sc, .s3 = &s3};
  char err[512] = "";
  rc = sl_s3_target_init(&s.target, &s3);
  if (rc) snprintf(err, sizeof err, "s3 settings: %s", sl_strerror(rc));
  if (rc == 0) rc = sl_tls_new(&s.tools, worker_create, worker_destroy, &s);
  if (rc == 0) { /* load one decoder now so a bad model path fails at start-up */
    worker *w = worker_create(&s, err, sizeof err);
    if (!w) rc = SL_ECONFIG;
    worker_destroy(w);
  }
  if (rc == 0) {
    const char *topics[] = {cc.topic_stt_requests};
    sl_stage_opts o = {.stage = "stt", .common = &cc, .topics = topics, .ntopics = 1,
                       .process = process, .ud = &s, .provider = "stt-pocketsphinx",
                       .idempotent = 1, .admin = admin};
    rc = sl_stage_run(&o, &sl__stop);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  }
  sl_tls_free(s.tools);
  sl__stage_finish(&cc, own, 2, admin);
  return rc ? 1 : 0;
}
