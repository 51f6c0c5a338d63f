/* SPDX-License-Identifier: Apache-2.0 */
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
 * The plugin runs on the driver every plugin stage shares (lib/plugin_driver.h,
 * sl__plugin_process / sl__plugin_start, as grade and the step host do),
 * which also fetches the answer (sl__objects):
 *   - SYNC plugins (pocketsphinx): on the worker pool, one plugin instance
 *     and one signer per worker thread; a blocking signed GET, then the
 *     call on the same thread;
 *   - async plugins (openai): everything on the loop — a presigned GET on
 *     the stage's HTTP client, then the plugin calls its provider on the
 *     same client; thousands of questions can wait on I/O with no thread
 *     each.
 *
 * The recording fetched is the 16 kHz mono FLAC the preflight step stored
 * (audio_key) when there is one, else the original (stt.audio).
 *
 * Memory: an answer is held once per question in flight (fetched into one
 * buffer, streamed from it to the provider), and what stt is about to fetch
 * is reserved towards stage.max_bytes_in_flight when the question starts
 * (answer_bytes), so at that limit fetching from Kafka pauses before the
 * memory is taken; the driver corrects it to the object's real size.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/pb_arena.h"
#include "lib/plugin_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_s3.h"

typedef struct {
  char *plugin;
  int64_t max_audio_bytes;
  int64_t fetch_timeout_ms;
  char *audio;
} stt_conf;

#define SC(f) offsetof(stt_conf, f)
static const sl_conf_entry stt_table[] = {
    {"stt.plugin", SL_CONF_STR, "pocketsphinx", SC(plugin),
     "STT plugin: a name found along plugin.path (stt-<name>.so) or a file path "
     "(also --plugin NAME); docs/plugins.md lists them",
     0},
    {"stt.max_audio_bytes", SL_CONF_INT, "67108864", SC(max_audio_bytes),
     "largest answer object fetched from storage", 0},
    {"stt.fetch_timeout_ms", SL_CONF_INT, "120000", SC(fetch_timeout_ms),
     "time limit for fetching one answer from storage (async plugins)", 0},
    {"stt.audio", SL_CONF_STR, "normalized", SC(audio),
     "which recording the plugin gets: normalized (the 16 kHz mono FLAC the preflight step "
     "stored, when there is one, else the original) or original (always what was uploaded)",
     0},
};
static const size_t stt_table_len = sizeof stt_table / sizeof stt_table[0];

typedef struct {
  sl_common_conf *cc;
  stt_conf *sc;
  /* progress labels (pipeline.json): stt's own, and the next stage's */
  const char *progress_own, *progress_next;
} stt;

/* The object the plugin transcribes: preflight's FLAC unless told not to. */
static const char *audio_key(void *ud, void *msg) {
  const stt *s = ud;
  const Sluice__V1__UploadCompleted *up = msg;
  if (up->audio_key && up->audio_key[0] && strcmp(s->sc->audio, "original") != 0)
    return up->audio_key;
  return up->object_key;
}

/* A status of the question up is about, from stt, with its progress label. */
static Sluice__V1__QuestionStatus status_of(const Sluice__V1__UploadCompleted *up,
                                            Sluice__V1__QuestionState state, const char *label) {
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = up->submission_id;
  st.question_no = up->question_no;
  st.state = state;
  st.at_ms = sl_now_ms();
  st.stage = "stt";
  st.progress = (char *)(label ? label : "");
  st.accepted_at_ms = up->accepted_at_ms;
  return st;
}

/* The upload decoded; the TRANSCRIBING status at once (best effort). */
static int parse(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res, void **msg,
                 char key[SL__KEY_MAX], ProtobufCAllocator *pa) {
  const stt *s = ud;
  Sluice__V1__UploadCompleted *up = sluice__v1__upload_completed__unpack(pa, m->len, m->payload);
  if (!up || !up->submission_id[0] || !up->question_no || !up->object_key[0]) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message",
                  "stt.requests message is not a valid UploadCompleted");
    sl__pb_free(up, pa);
    return 0;
  }
  snprintf(key, SL__KEY_MAX, "%s/%u", up->submission_id, up->question_no);
  Sluice__V1__QuestionStatus st =
      status_of(up, SLUICE__V1__QUESTION_STATE__TRANSCRIBING, s->progress_own);
  sl_outbox_emit_now(out, s->cc->topic_results, key, &st.base);
  *msg = up;
  return 1;
}

static void release(void *msg, ProtobufCAllocator *pa) { sl__pb_free(msg, pa); }

/* sl_stage_opts.bytes_of: what the answer will weigh once fetched — the
 * size the upload declared, or for preflight's FLAC (16 kHz mono) at most
 * its decoded length as 16-bit PCM — up to stt.max_audio_bytes. */
static int64_t answer_bytes(void *ud, const rd_kafka_message_t *m) {
  const stt *s = ((const sl__plugin_host *)ud)->state;
  Sluice__V1__UploadCompleted *up = sluice__v1__upload_completed__unpack(NULL, m->len, m->payload);
  if (!up) return 0;
  double n = (double)up->size;
  if (up->audio_key && up->audio_key[0] && strcmp(s->sc->audio, "original") != 0)
    n = up->duration_s > 0 ? up->duration_s * 32000 + 4096 : n;
  sluice__v1__upload_completed__free_unpacked(up, NULL);
  double max = (double)s->sc->max_audio_bytes;
  return (int64_t)(n < max ? n : max);
}

/* the input but the audio, which the driver fetches (audio_key) */
static int input_for(void *ud, void *msg, const char *key, sl_plugin_input *in, void **scratch,
                     sl_result *res) {
  (void)ud;
  (void)scratch;
  (void)res;
  const Sluice__V1__UploadCompleted *up = msg;
  memset(in, 0, sizeof *in);
  in->struct_size = sizeof *in;
  in->question_no = up->question_no;
  in->key = key;
  in->prompt = up->prompt ? up->prompt : "";
  in->language = "";
  in->message = &up->base; /* ABI 2: fields by name */
  return 1;
}

/* Maps the plugin's outcome onto the stage result; on DONE queues the
 * transcript for grading and the status for the results view. */
static void finish(void *ud, void *msg, const char *key, sl_plugin_result *pr, const char *stored,
                   sl_outbox *out, sl_result *res) {
  (void)stored; /* its plugin stores no object */
  const stt *s = ud;
  Sluice__V1__UploadCompleted *up = msg;
  if (!sl__plugin_outcome(pr, res)) return;
  const char *text = pr->text ? pr->text : "";
  Sluice__V1__Transcript t = SLUICE__V1__TRANSCRIPT__INIT;
  t.upload = up;
  t.text = (char *)text;
  /* the answer's length: preflight's decoded one when it measured it (the
   * plugin heard its FLAC, which holds the speech with the silence cut:
   * what the provider billed, in cost_units), else the plugin's */
  double duration = up->duration_s > 0 ? up->duration_s : pr->duration_s;
  t.duration_s = duration;
  t.engine = pr->engine ? pr->engine : "";
  t.language = pr->language ? pr->language : "";
  t.cost_units = res->cost_before + res->cost_units; /* every attempt's */
  /* counts a plugin reported, bounded (a count can be no more than the
   * words a transcript may hold) */
  if (pr->segments >= 1 && pr->segments <= SL_PLUGIN_MAX_WORDS) {
    t.segments = (uint32_t)pr->segments;
    if (pr->segment_pauses >= 0 && pr->segment_pauses < pr->segments)
      t.segment_pauses = (uint32_t)pr->segment_pauses;
  }
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
  /* handed on: the question is in the next stage with a progress label */
  Sluice__V1__QuestionStatus st =
      status_of(up, SLUICE__V1__QUESTION_STATE__GRADING, s->progress_next);
  st.transcript = (char *)text;
  st.duration_s = duration;
  st.cost_units = t.cost_units;
  if (rc == 0) rc = sl_outbox_add_pb(out, s->cc->topic_results, key, &st.base);
  if (rc)
    sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing transcript: %s", sl_strerror(rc));
  else
    /* never the text: logs are not sealed, nor erased (docs/privacy.md) */
    sl_log(SL_LOG_INFO, key,
           "transcribed %.1f s of audio (of %.1f) with %s in %lld ms: %zu characters",
           pr->duration_s, duration, t.engine, (long long)pr->elapsed_ms, strlen(text));
  free(words);
  free(wp);
}

static const sl__plugin_ops ops = {.setup_class = "stt_setup",
                                   .keyed = 1,
                                   .parse = parse,
                                   .input = input_for,
                                   .object = audio_key,
                                   .finish = finish,
                                   .release = release};

static const char *plugin_name(const sl__plugin_host *h) {
  return ((const stt_conf *)h->conf)->plugin;
}

/* stt's state, and its storage: blocking on the workers for a SYNC plugin,
 * on the loop for an async one. */
static int setup(sl__plugin_host *h, sl_stage_opts *o, char *err, size_t errlen) {
  stt_conf *sc = h->conf;
  stt *s = h->state;
  if (strcmp(sc->audio, "normalized") && strcmp(sc->audio, "original")) {
    snprintf(err, errlen, "stt.audio must be normalized or original, not \"%s\"", sc->audio);
    return SL_ECONFIG;
  }
  *s = (stt){.cc = h->cc,
             .sc = sc,
             .progress_own = sl_pipeline_progress_of(h->cc->pipeline, "stt"),
             .progress_next = sl_pipeline_progress_next(h->cc->pipeline, "stt")};
  h->topics[0] = h->cc->topic_stt_requests;
  o->bytes_of = answer_bytes;
  /* with crypto.kek every job starts on the loop (the data key first,
   * plugin_stage.c): its audio is fetched there too */
  int rc = sl__objects_init(&h->objects, h->s3, (size_t)sc->max_audio_bytes,
                            (long)sc->fetch_timeout_ms, h->sync && !sl_dkey_enabled(), err, errlen);
  h->has_objects = rc == 0;
  return rc;
}

static const sl__plugin_stage stt_host = {.kind = "stt",
                                          .ops = &ops,
                                          .conf_size = sizeof(stt_conf),
                                          .state_size = sizeof(stt),
                                          .s3 = 1,
                                          .plugin_name = plugin_name,
                                          .setup = setup};

const sl__stage_desc sl__stt_stage = {
    .name = "stt",
    .summary = "transcribes uploaded answers (STT plugin, default pocketsphinx)",
    .kind = {"stt", {SL__MSG_UPLOAD, NULL}, {SL__MSG_TRANSCRIPT, SL__MSG_STATUS, NULL}, 1, 1, 0},
    .table = stt_table,
    .table_len = &stt_table_len,
    .admin = "127.0.0.1:9182",
    .plugin = &stt_host};
