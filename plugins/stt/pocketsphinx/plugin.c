/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c — stt/pocketsphinx as a Sluice plugin (ABI in sl_plugin.h).
 *
 * Offline speech-to-text with CMU PocketSphinx (pocketsphinx.c does the
 * work: libsndfile decoding of WAV/FLAC/Ogg, libsamplerate to 16 kHz mono,
 * one utterance with word timings). CPU-bound, so the plugin is SYNC: the
 * host runs it on its worker pool with one instance (one decoder, ~100 MB of
 * models) per worker thread.
 *
 * Outcomes: audio the decoder cannot read (empty, corrupt, unsupported),
 * longer than max_seconds or shorter than min_seconds (libsndfile decodes a
 * truncated file's surviving head) fails for good with the reason; out of memory is
 * transient; anything else from the recognizer fails for good.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pocketsphinx.h"
#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
  sl_ps *ps;
  double min_seconds;
} state;

static const sl_plugin_conf_key conf[] = {
    {"model_dir", SL_PLUGIN_CONF_STR, SL_PS_DEFAULT_MODELDIR,
     "model directory holding en-us/, en-us.lm.bin and cmudict-en-us.dict", 0},
    {"max_seconds", SL_PLUGIN_CONF_DOUBLE, "600",
     "longest answer transcribed, in seconds of audio (also bounds memory, ~0.5 MB/s)", 0},
    {"min_seconds", SL_PLUGIN_CONF_DOUBLE, "0.3",
     "shorter audio fails for good as audio_too_short (e.g. a truncated recording)", 0},
};

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  double max_s = h->conf_double(c, "max_seconds");
  if (!(max_s > 0)) {
    snprintf(err, errlen, "stt.pocketsphinx.max_seconds must be > 0");
    return SL_ECONFIG;
  }
  state *s = h->alloc(sizeof *s);
  if (!s) return SL_ENOMEM;
  s->h = h;
  s->ps = NULL;
  s->min_seconds = h->conf_double(c, "min_seconds");
  int rc = sl_ps_new(&s->ps, h->conf_str(c, "model_dir"), max_s, err, errlen);
  if (rc) {
    h->free(s);
    return rc;
  }
  *out = s;
  return 0;
}

static void destroy(void *v) {
  state *s = v;
  if (!s) return;
  sl_ps_free(s->ps);
  s->h->free(s);
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  const sl_plugin_host *h = s->h;
  char err[512] = "";
  sl_ps_result r = {0};
  int rc = sl_ps_transcribe(s->ps, in->audio, in->audio_len, &r, err, sizeof err);
  if (rc == SL_EDECODE) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "undecodable_audio", err);
    return;
  }
  if (rc == SL_ETOOBIG) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "audio_too_long", err);
    return;
  }
  if (rc == SL_ENOMEM) {
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", err);
    return;
  }
  if (rc) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "stt_failed", err[0] ? err : "recognizer failed");
    return;
  }
  if (r.duration_s < s->min_seconds) {
    snprintf(err, sizeof err,
             "audio is %.2f s long, shorter than the %.2f s minimum "
             "(a truncated or empty recording?)",
             r.duration_s, s->min_seconds);
    sl_ps_result_clear(&r);
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "audio_too_short", err);
    return;
  }
  int orc = h->out_str(c, "text", r.text);
  if (orc == 0) orc = h->out_num(c, "duration_s", r.duration_s);
  if (orc == 0) orc = h->out_num(c, "cost_units", r.duration_s);
  if (orc == 0) orc = h->out_str(c, "engine", "pocketsphinx");
  if (orc == 0) orc = h->out_str(c, "language", "en");
  for (size_t i = 0; orc == 0 && i < r.nwords; i++)
    orc = h->out_word(c, r.words[i].word, r.words[i].start_s, r.words[i].end_s);
  if (orc == SL_ETOOBIG) orc = 0; /* more words than the host keeps: the text has them all */
  sl_ps_result_clear(&r);
  if (orc)
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "recording the transcript failed");
  else
    h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STT,
    .name = "pocketsphinx",
    .version = "1.0.0",
    .description = "Offline speech-to-text with CMU PocketSphinx (WAV, FLAC, Ogg/Vorbis; "
                   "resampled to 16 kHz mono; word timings)",
    .flags = SL_PLUGIN_SYNC,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
