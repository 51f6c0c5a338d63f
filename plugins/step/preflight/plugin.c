/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c — step/preflight as a Sluice plugin (ABI 2, kind "step"): the
 * check between ingest and stt that stops an answer nobody should pay to
 * transcribe, and prepares the one everybody can read.
 *
 * Reads the uploaded object ("@object"), decodes it (preflight.c), and
 *   - fails it for good, before any paid call, as
 *       unsupported_format not audio (an image, a video, an archive), a
 *                          format outside the decoders' allow-list, or a
 *                          rate or channel count above the limits;
 *       undecodable_audio  audio, but corrupt, cut short or empty;
 *       too_long           longer than max_seconds;
 *       no_speech          less than min_speech_seconds of speech;
 *       decode_limit       decoding outlasted decode_timeout_ms (wall
 *                          time): a file made to be slow is not retried;
 *   - else writes duration_s, speech_s and the timing of the speech
 *     (speaking_s, pauses, pause_total_s, pause_mean_s, pause_longest_s,
 *     runs, run_mean_s: preflight.h, docs/grading.md) into the
 *     UploadCompleted it passes on, and (normalize = true) stores a 16 kHz mono FLAC of
 *     the speech (trim_silence: the silence around it and the long ones
 *     inside cut, its length in audio_s; STT providers bill per second) beside
 *     the original (derived/<key>.16k.flac) whose key goes in audio_key,
 *     which stt hands to its plugin instead of the original.
 * A recording in a recognised format whose codec has no decoder here
 * (MP4/AAC: see preflight.h for why) fails as unsupported_format; with
 * pass_undecoded = true it is timed from its parsed frames instead
 * (sl_pf_measure), fails as too_long past max_seconds, and else passes
 * unchanged with its duration_s: the STT provider gets the original, and
 * is never paid for a length nobody checked.
 *
 * SYNC (CPU-bound): the host runs it on the worker pool, one instance per
 * thread; instances hold no decoder state (a pipeline per call).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preflight.h"
#include "sandbox.h"
#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

enum { UNDECODABLE, TOO_LONG, NO_SPEECH, UNSUPPORTED, DECODE_LIMIT, NCLASS };

typedef struct {
  const sl_plugin_host *h;
  sl_pf_conf pc;
  int pass_undecoded;
  sl_pf_sandbox *sandbox; /* NULL: decoding in this process (sandbox = false) */
  sl_plugin_metric *rejected[NCLASS], *passed, *audio_ms;
} state;

static const sl_plugin_conf_key conf[] = {
    {"max_seconds", SL_PLUGIN_CONF_DOUBLE, "600",
     "longest answer accepted, in seconds of audio (longer fails as too_long; decoding "
     "holds 32 KB per second)",
     0},
    {"min_speech_seconds", SL_PLUGIN_CONF_DOUBLE, "0.3",
     "less speech than this fails as no_speech (0: never)", 0},
    {"silence_dbfs", SL_PLUGIN_CONF_DOUBLE, "-50",
     "frames quieter than this (dBFS) are never speech", 0},
    {"normalize", SL_PLUGIN_CONF_BOOL, "true",
     "store a 16 kHz mono FLAC beside the original for the STT plugin (audio_key)", 0},
    {"trim_silence", SL_PLUGIN_CONF_BOOL, "true",
     "that FLAC holds the speech, not the silence around it (STT providers bill every second "
     "sent): from keep_silence_ms before the first speech to keep_silence_ms after the last, "
     "inner silences longer than max_silence_ms shortened to it; the timing is measured on "
     "the whole recording",
     0},
    {"keep_silence_ms", SL_PLUGIN_CONF_INT, "150",
     "silence kept before the first speech and after the last (0..5000)", 0},
    {"max_silence_ms", SL_PLUGIN_CONF_INT, "400",
     "an inner silence longer than this is shortened to it, its middle cut (0: inner silences "
     "kept whole; else 200..10000)",
     0},
    {"flac_level", SL_PLUGIN_CONF_INT, "5",
     "libFLAC compression level of that FLAC, 0 (least CPU) to 8 (fewest bytes to the STT "
     "provider); docs/benchmarks.md has both per level",
     0},
    {"pass_undecoded", SL_PLUGIN_CONF_BOOL, "false",
     "a recognised audio format with no decoder here (MP4/AAC) passes on undecoded, timed from "
     "its parsed frames (longer than max_seconds still fails as too_long), instead of failing "
     "as unsupported_format",
     0},
    {"sandbox", SL_PLUGIN_CONF_BOOL, "true",
     "decode in sluice-decode, a process of its own per worker thread with no credentials, no "
     "sockets and the limits below, killed at the deadline (false: in the stage's process; "
     "for debugging only)",
     0},
    {"sandbox_memory_mb", SL_PLUGIN_CONF_INT, "256",
     "address space of each decoding process, in MiB (past it the answer fails as "
     "decode_limit); not applied under AddressSanitizer",
     0},
    {"sandbox_path", SL_PLUGIN_CONF_STR, "",
     "the decoding program (empty: sluice-decode in the directory above the plugins')", 0},
    {"decode_timeout_ms", SL_PLUGIN_CONF_INT, "30000",
     "wall-time limit for decoding one answer (past it: decode_limit, not retried)", 0},
    {"max_sample_rate", SL_PLUGIN_CONF_INT, "96000",
     "a stream at a higher sample rate (Hz) fails as unsupported_format before it is decoded "
     "(0: no limit)",
     0},
    {"max_channels", SL_PLUGIN_CONF_INT, "2",
     "a stream with more channels fails as unsupported_format before it is decoded (0: no "
     "limit)",
     0},
};

static const char *const reads[] = {SL_PLUGIN_READ_OBJECT, "object_key", NULL};
static const char *const writes[] = {
    "audio_key", "duration_s",    "speech_s",     "speaking_s",
    "pauses",    "pause_total_s", "pause_mean_s", "pause_longest_s",
    "runs",      "run_mean_s",    "audio_s",      "pause_spans",
    NULL};
static const char *const classes[NCLASS] = {"undecodable_audio", "too_long", "no_speech",
                                            "unsupported_format", "decode_limit"};

/* the timing of the speech into the output's fields of the same names */
static int out_timing(const sl_plugin_host *h, sl_plugin_call *c, const sl_pf_timing *t) {
  int rc = h->out_num(c, "speaking_s", t->speaking_s);
  if (rc == 0) rc = h->out_num(c, "pauses", t->pauses);
  if (rc == 0) rc = h->out_num(c, "pause_total_s", t->pause_total_s);
  if (rc == 0) rc = h->out_num(c, "pause_mean_s", t->pause_mean_s);
  if (rc == 0) rc = h->out_num(c, "pause_longest_s", t->pause_longest_s);
  if (rc == 0) rc = h->out_num(c, "runs", t->runs);
  if (rc == 0) rc = h->out_num(c, "run_mean_s", t->run_mean_s);
  return rc;
}

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  double max_s = h->conf_double(c, "max_seconds");
  if (!(max_s > 0) || max_s > 24 * 3600) {
    snprintf(err, errlen, "step.preflight.max_seconds must be in (0, 86400]");
    return SL_ECONFIG;
  }
  if (!h->out_object) {
    snprintf(err, errlen,
             "this host cannot store objects (out_object): preflight needs a "
             "Sluice host of ABI 2 that runs it SYNC");
    return SL_EPLUGIN;
  }
  int64_t level = h->conf_int(c, "flac_level");
  if (level < 0 || level > SL_PF_FLAC_LEVEL_MAX) {
    snprintf(err, errlen, "step.preflight.flac_level must be 0..8");
    return SL_ECONFIG;
  }
  int64_t keep = h->conf_int(c, "keep_silence_ms"), most = h->conf_int(c, "max_silence_ms");
  if (keep < 0 || keep > 5000 || (most != 0 && (most < 200 || most > 10000))) {
    snprintf(err, errlen,
             "step.preflight: keep_silence_ms must be 0..5000, max_silence_ms 0 or 200..10000");
    return SL_ECONFIG;
  }
  int rc = sl_pf_init(err, errlen);
  if (rc) return rc;
  state *s = h->alloc(sizeof *s);
  if (!s) return SL_ENOMEM;
  memset(s, 0, sizeof *s);
  s->h = h;
  s->pc.max_seconds = max_s;
  s->pc.silence_dbfs = h->conf_double(c, "silence_dbfs");
  s->pc.timeout_ms = (long)h->conf_int(c, "decode_timeout_ms");
  int64_t rate = h->conf_int(c, "max_sample_rate"), ch = h->conf_int(c, "max_channels");
  if (rate < 0 || rate > 1000000 || ch < 0 || ch > 255 || s->pc.timeout_ms <= 0) {
    h->free(s);
    snprintf(err, errlen,
             "step.preflight: max_sample_rate must be 0..1000000, max_channels 0..255, "
             "decode_timeout_ms > 0");
    return SL_ECONFIG;
  }
  s->pc.max_rate = (int)rate;
  s->pc.max_channels = (int)ch;
  s->pc.min_speech_s = h->conf_double(c, "min_speech_seconds");
  s->pc.normalize = h->conf_bool(c, "normalize");
  s->pass_undecoded = s->pc.measure_undecoded = h->conf_bool(c, "pass_undecoded");
  s->pc.flac_level = (int)level;
  s->pc.trim = h->conf_bool(c, "trim_silence");
  s->pc.keep_silence_ms = (int)keep;
  s->pc.max_silence_ms = (int)most;
  if (h->conf_bool(c, "sandbox")) {
    sl_pf_sandbox_conf sc = {.path = h->conf_str(c, "sandbox_path"),
                             .memory_mb = (long)h->conf_int(c, "sandbox_memory_mb")};
    if ((rc = sl_pf_sandbox_new(&sc, &s->sandbox, err, errlen)) != 0) {
      h->free(s);
      return rc;
    }
  }
  for (size_t i = 0; i < NCLASS; i++) {
    char labels[64];
    snprintf(labels, sizeof labels, "class=\"%s\"", classes[i]);
    s->rejected[i] = h->counter("sluice_preflight_rejected_total", labels,
                                "answers preflight failed before any paid call, by class");
  }
  s->passed = h->counter(
      "sluice_preflight_undecoded_total", NULL,
      "answers passed on undecoded (pass_undecoded): no decoder here for their codec, length timed "
      "from their frames");
  s->audio_ms = h->counter("sluice_preflight_audio_milliseconds_total", NULL,
                           "milliseconds of audio preflight decoded");
  *out = s;
  return 0;
}

static void destroy(void *v) {
  state *s = v;
  if (!s) return;
  sl_pf_sandbox_free(s->sandbox);
  s->h->free(s);
}

static void reject(state *s, sl_plugin_call *c, int cls, const char *reason) {
  s->h->counter_add(s->rejected[cls], 1);
  s->h->complete(c, SL_PLUGIN_FAIL, 0, 0, classes[cls], reason);
}

/* the class of an answer sl_pf_decode or sl_pf_measure refused */
static int class_of(int rc) {
  switch (rc) {
  case SL_ETOOBIG:
    return TOO_LONG;
  case SL_EUNSUPPORTED:
  case SL_ENOTFOUND:
    return UNSUPPORTED;
  case SL_ETIMEDOUT:
    return DECODE_LIMIT;
  default:
    return UNDECODABLE;
  }
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  const sl_plugin_host *h = s->h;
  char why[700];
  sl_pf_result r;
  if (s->sandbox)
    sl_pf_sandbox_check(s->sandbox, in->audio, in->audio_len, &s->pc, &r);
  else
    sl_pf_check(in->audio, in->audio_len, &s->pc, &r);
  if (!r.undecoded) h->counter_add(s->audio_ms, (uint64_t)(r.duration_s * 1000));
  const char *name = in->filename ? in->filename : "answer";
  const char *type = in->content_type ? in->content_type : "?";
  switch (r.rc) {
  case 0:
    break;
  case SL_ETOOBIG:
    snprintf(why, sizeof why, "the answer is longer than the %.0f s limit%s", s->pc.max_seconds,
             s->pass_undecoded && strstr(r.err, "frames") ? " (timed from its frames)" : "");
    reject(s, c, TOO_LONG, why);
    goto out;
  case SL_EDECODE:
  case SL_ENOTFOUND:
  case SL_EUNSUPPORTED:
  case SL_ETIMEDOUT:
    snprintf(why, sizeof why, "%s (%s, %zu bytes): %s", name, type, in->audio_len, r.err);
    reject(s, c, class_of(r.rc), why);
    goto out;
  default: /* out of memory here, a decoder that could not start: not the answer's fault */
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, r.rc == SL_ENOMEM ? "out_of_memory" : "preflight",
                r.err[0] ? r.err : "decoding failed");
    goto out;
  }
  if (!r.undecoded && r.speech_s < s->pc.min_speech_s) {
    snprintf(why, sizeof why,
             "no speech in %.1f s of audio (%.2f s above the silence threshold; loudest "
             "%.0f dBFS, floor %.0f dBFS)",
             r.duration_s, r.speech_s, r.peak_dbfs, r.floor_dbfs);
    reject(s, c, NO_SPEECH, why);
    goto out;
  }
  int orc = h->out_num(c, "duration_s", r.duration_s);
  if (orc == 0 && !r.undecoded) orc = h->out_num(c, "speech_s", r.speech_s);
  if (orc == 0 && !r.undecoded) orc = out_timing(h, c, &r.timing);
  if (orc == 0 && r.flac)
    orc = h->out_object(c, "audio_key", ".16k.flac", "audio/flac", r.flac, r.flac_len);
  if (orc == 0 && r.flac) orc = h->out_num(c, "audio_s", r.flac_s);
  if (orc == 0 && r.flac && r.nspans) {
    char spans[SL_PF_MAX_SPANS * 24];
    size_t n = 0;
    for (uint32_t i = 0; i < r.nspans && n < sizeof spans; i++)
      n += (size_t)snprintf(spans + n, sizeof spans - n, "%s%.2f-%.2f", i ? " " : "",
                            (double)r.spans[i][0], (double)r.spans[i][1]);
    orc = h->out_str(c, "pause_spans", spans);
  }
  if (r.undecoded) {
    h->counter_add(s->passed, 1);
    h->log(SL_PLUGIN_LOG_INFO, in->key, "passed on undecoded (%s, %.1f s timed from its frames)",
           type, r.duration_s);
  } else {
    h->log(SL_PLUGIN_LOG_DEBUG, in->key, "%.1f s of audio, %.1f s of speech (%s, %zu bytes)",
           r.duration_s, r.speech_s, type, in->audio_len);
  }
  if (orc)
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, orc == SL_ENOMEM ? "out_of_memory" : "preflight",
                "writing the output failed");
  else
    h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
out:
  sl_pf_result_clear(&r);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STEP,
    .name = "preflight",
    .version = "1.0.0",
    .description = "Audio preflight before paid calls: decodes WebM/Ogg Opus, MP3, FLAC, WAV "
                   "and fails empty, silent or overlong answers, measures when the speech was "
                   "(speaking time, silent pauses of 250 ms or more, runs: docs/grading.md), "
                   "then stores a 16 kHz mono FLAC for STT. Decoders: GStreamer with Debian's "
                   "plugins-base and -good "
                   "(LGPL-2.1+), which use libopus, libvorbis, libFLAC (BSD) and mpg123 "
                   "(LGPL-2.1); the FLAC is written with libFLAC (BSD). MP4/AAC is recognised "
                   "but not decoded: Debian has no AAC decoder under a permissive or LGPL "
                   "licence (its ffmpeg build and faad2 are GPL), so such answers fail as "
                   "unsupported_format, or pass on timed from their frames (pass_undecoded). "
                   "Only an allow-list of elements is ever plugged",
    .flags = SL_PLUGIN_SYNC,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
    .reads = reads,
    .writes = writes,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
