/* SPDX-License-Identifier: Apache-2.0 */
/*
 * openai.c — stt/openai: speech-to-text through any OpenAI-compatible
 * POST /v1/audio/transcriptions (OpenAI, Groq, whisper.cpp's server,
 * faster-whisper-server, LocalAI, `sluice-fakeprovider`).
 *
 * Async: call() builds a multipart form (file, model, response_format,
 * language, prompt, timestamp_granularities[]) and hands it to
 * host->http_send on the stage's loop; the callback judges the answer and
 * completes the call. No threads, no blocking; one instance serves every
 * call in flight. The file part points at the input's audio, which the host
 * streams from the buffer it holds (no copy), so nothing is kept between
 * calls and the answer is in memory once per call.
 *
 * Reply: verbose_json (default) gives text, language, duration, words
 * (asked for with timestamp_granularities[]=word) and segments: when the
 * input has preflight's pauses, reported as how many segments there are
 * ("segments") and how many of preflight's silent
 * pauses (pause_spans of its input, in the timeline of the audio sent) hold a
 * boundary between two consecutive segments, give or take SPAN_SLACK_S
 * ("segment_pauses": pauses between segments; the grader calls the rest
 * inside them); plain json gives text only, and the duration then comes
 * from the WAV header when there is one.
 * cost_units = audio seconds (what providers bill).
 *
 * Outcomes: HTTP statuses as in common/openai_http.h. A 2xx body that is
 * not JSON (a proxy's HTML page, a body cut short) is RETRY
 * provider_bad_reply: a transient fault, counted in
 * sluice_openai_bad_replies_total. A JSON reply without a "text" string is
 * FAIL provider_bad_reply: the server answered completely but not in the
 * transcription format, and asking again would get the same answer. Empty
 * audio is FAIL empty_audio without a request, and so is what no server
 * could transcribe (a self-hosted one answers such audio with a 500, which
 * would be retried): bytes of no audio container (WAV, FLAC, Ogg, MP3,
 * WebM/Matroska, MP4) are FAIL undecodable_audio; a length known from a WAV
 * header or FLAC STREAMINFO below min_seconds (a truncated recording) is
 * FAIL audio_too_short, above max_seconds FAIL audio_too_long.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/openai_http.h"
#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

#define SPAN_SLACK_S 0.3 /* how far a segment boundary may lie outside a pause */
#define MAX_SPANS 64     /* preflight writes no more (SL_PF_MAX_SPANS) */

static const sl_plugin_conf_key conf_keys[] = {
    {"base_url", SL_PLUGIN_CONF_STR, "https://api.openai.com",
     "server base URL; requests go to {base_url}/v1/audio/transcriptions (a trailing /v1 is "
     "accepted)",
     0},
    {"api_key", SL_PLUGIN_CONF_STR, "",
     "API key sent as Authorization: Bearer (empty: no header, for local servers)", 1},
    {"model", SL_PLUGIN_CONF_STR, "whisper-1", "model name sent with each request", 0},
    {"language", SL_PLUGIN_CONF_STR, "",
     "ISO-639-1 language of the audio (empty: the question's language hint, if any)", 0},
    {"prompt", SL_PLUGIN_CONF_STR, "",
     "text to guide the model's style or vocabulary (empty: none)", 0},
    {"response_format", SL_PLUGIN_CONF_STR, "verbose_json",
     "verbose_json (text, duration, words) or json (text only, for servers without "
     "verbose_json)",
     0},
    {"word_timestamps", SL_PLUGIN_CONF_BOOL, "true",
     "ask for word timings (timestamp_granularities[]=word; verbose_json only)", 0},
    {"timeout_ms", SL_PLUGIN_CONF_INT, "120000", "whole request timeout (upload + answer)", 0},
    {"connect_timeout_ms", SL_PLUGIN_CONF_INT, "5000", "connection timeout", 0},
    {"max_response", SL_PLUGIN_CONF_INT, "4194304",
     "largest reply accepted, bytes (a larger one is a transfer error: retry)", 0},
    {"min_seconds", SL_PLUGIN_CONF_DOUBLE, "0.3",
     "audio known (WAV, FLAC) to be shorter fails for good as audio_too_short, without a "
     "request",
     0},
    {"max_seconds", SL_PLUGIN_CONF_DOUBLE, "600",
     "audio known (WAV, FLAC) to be longer fails for good as audio_too_long, without a "
     "request (0: no limit)",
     0},
};

typedef struct {
  const sl_plugin_host *h;
  char url[1024];
  char auth[600]; /* "Authorization: Bearer ..." or "" */
  char model[128], language[32], prompt[1024];
  int verbose, words;
  long timeout_ms, connect_timeout_ms;
  size_t max_response;
  double min_seconds, max_seconds;
  sl_plugin_metric *m_bad_reply;
} stt_state;

/* One request in flight. */
typedef struct {
  stt_state *s;
  sl_plugin_call *call;
  char key[160];
  double secs; /* duration from the WAV header or FLAC STREAMINFO, or -1 */
} stt_req;

static int copy_conf(char *dst, size_t len, const char *v, const char *key, char *err,
                     size_t errlen) {
  if (strlen(v) >= len) {
    snprintf(err, errlen, "stt.openai.%s is too long (at most %zu bytes)", key, len - 1);
    return SL_ECONFIG;
  }
  memcpy(dst, v, strlen(v) + 1);
  return 0;
}

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  stt_state *s = h->alloc(sizeof *s);
  if (!s) return SL_ENOMEM;
  memset(s, 0, sizeof *s);
  s->h = h;
  const char *base = h->conf_str(c, "base_url"), *fmt = h->conf_str(c, "response_format");
  const char *key = h->conf_str(c, "api_key");
  int rc = 0;
  if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
    snprintf(err, errlen, "stt.openai.base_url must start with http:// or https://");
    rc = SL_ECONFIG;
  } else if (oai_url(base, "/audio/transcriptions", s->url, sizeof s->url) != 0) {
    snprintf(err, errlen, "stt.openai.base_url is too long");
    rc = SL_ECONFIG;
  } else if (strcmp(fmt, "verbose_json") != 0 && strcmp(fmt, "json") != 0) {
    snprintf(err, errlen, "stt.openai.response_format must be verbose_json or json");
    rc = SL_ECONFIG;
  } else if (!*h->conf_str(c, "model")) {
    snprintf(err, errlen, "stt.openai.model must not be empty");
    rc = SL_ECONFIG;
  } else if (h->conf_int(c, "timeout_ms") <= 0 || h->conf_int(c, "connect_timeout_ms") <= 0 ||
             h->conf_int(c, "max_response") < 1024) {
    snprintf(err, errlen,
             "stt.openai.timeout_ms and connect_timeout_ms must be > 0, max_response >= 1024");
    rc = SL_ECONFIG;
  } else if (!(h->conf_double(c, "min_seconds") >= 0) || !(h->conf_double(c, "max_seconds") >= 0)) {
    snprintf(err, errlen, "stt.openai.min_seconds and max_seconds must be >= 0");
    rc = SL_ECONFIG;
  } else if (strpbrk(key, "\r\n")) {
    snprintf(err, errlen, "stt.openai.api_key must be one line");
    rc = SL_ECONFIG;
  }
  if (!rc) rc = copy_conf(s->model, sizeof s->model, h->conf_str(c, "model"), "model", err, errlen);
  if (!rc)
    rc = copy_conf(s->language, sizeof s->language, h->conf_str(c, "language"), "language", err,
                   errlen);
  if (!rc)
    rc = copy_conf(s->prompt, sizeof s->prompt, h->conf_str(c, "prompt"), "prompt", err, errlen);
  if (!rc && *key &&
      snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", key) >= (int)sizeof s->auth) {
    snprintf(err, errlen, "stt.openai.api_key is too long");
    rc = SL_ECONFIG;
  }
  if (rc) {
    h->free(s);
    return rc;
  }
  s->verbose = strcmp(fmt, "verbose_json") == 0;
  s->words = s->verbose && h->conf_bool(c, "word_timestamps");
  s->timeout_ms = (long)h->conf_int(c, "timeout_ms");
  s->connect_timeout_ms = (long)h->conf_int(c, "connect_timeout_ms");
  s->max_response = (size_t)h->conf_int(c, "max_response");
  s->min_seconds = h->conf_double(c, "min_seconds");
  s->max_seconds = h->conf_double(c, "max_seconds");
  if (h->counter)
    s->m_bad_reply = h->counter("sluice_openai_bad_replies_total", "plugin=\"stt/openai\"",
                                "Provider replies that were not the expected JSON");
  *out = s;
  return 0;
}

static void destroy(void *v) {
  stt_state *s = v;
  if (s) s->h->free(s);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Seconds of PCM audio from a RIFF/WAVE header (what the file holds, when it
 * is cut short), or -1 when not a WAV or not found. */
static double wav_seconds(const unsigned char *d, size_t n) {
  if (n < 12 || memcmp(d, "RIFF", 4) != 0 || memcmp(d + 8, "WAVE", 4) != 0) return -1;
  uint32_t byte_rate = 0;
  for (size_t off = 12; off + 8 <= n;) {
    uint32_t sz = le32(d + off + 4);
    if (memcmp(d + off, "fmt ", 4) == 0 && sz >= 16 && off + 24 <= n)
      byte_rate = le32(d + off + 16);
    if (memcmp(d + off, "data", 4) == 0 && byte_rate) {
      size_t avail = n - off - 8;
      return (double)(sz < avail ? sz : avail) / byte_rate;
    }
    if (sz > n - off - 8) break;
    off += 8 + (size_t)sz + (sz & 1);
  }
  return -1;
}

/* Seconds from a FLAC stream's STREAMINFO (the first metadata block: 20-bit
 * sample rate at byte 18, 36-bit total samples from byte 21), or -1. */
static double flac_seconds(const unsigned char *d, size_t n) {
  if (n < 26 || memcmp(d, "fLaC", 4) != 0 || (d[4] & 0x7F) != 0) return -1;
  uint32_t rate = (uint32_t)d[18] << 12 | (uint32_t)d[19] << 4 | d[20] >> 4;
  uint64_t total = (uint64_t)(d[21] & 0x0F) << 32 | (uint64_t)d[22] << 24 | (uint64_t)d[23] << 16 |
                   (uint64_t)d[24] << 8 | d[25];
  return rate && total ? (double)total / rate : -1; /* total 0: not known */
}

/* Is it in a container the transcription APIs read: WAV, FLAC, Ogg, MP3 (an
 * ID3 tag or an MPEG frame sync), WebM/Matroska (EBML), MP4/M4A (ftyp)? */
static int audio_container(const unsigned char *d, size_t n) {
  if (n < 12) return 0;
  return (memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WAVE", 4) == 0) ||
         memcmp(d, "fLaC", 4) == 0 || memcmp(d, "OggS", 4) == 0 || memcmp(d, "ID3", 3) == 0 ||
         (d[0] == 0xFF && (d[1] & 0xE0) == 0xE0) || memcmp(d, "\x1A\x45\xDF\xA3", 4) == 0 ||
         memcmp(d + 4, "ftyp", 4) == 0;
}

static void finish(stt_req *q, sl_plugin_outcome o, int64_t retry_ms, int throttled,
                   const char *cls, const char *reason) {
  const sl_plugin_host *h = q->s->h;
  sl_plugin_call *call = q->call;
  h->free(q);
  h->complete(call, o, retry_ms, throttled, cls, reason);
}

static void bad_reply(stt_req *q, const char *what, const sl_plugin_http_response *r) {
  const sl_plugin_host *h = q->s->h;
  char snip[160], reason[400];
  oai_snippet(r->body, r->body_len, 120, snip, sizeof snip);
  snprintf(reason, sizeof reason, "%s (HTTP %ld, %zu bytes): %s", what, r->status, r->body_len,
           snip);
  if (q->s->m_bad_reply && h->counter_add) h->counter_add(q->s->m_bad_reply, 1);
  h->log(SL_PLUGIN_LOG_WARN, q->key, "stt/openai: %s", reason);
  finish(q, SL_PLUGIN_RETRY, 0, 0, "provider_bad_reply", reason);
}

/* preflight's "start-end start-end ..." into spans (at most MAX_SPANS, in
 * order, well formed; parsing stops at the first that is not): how many */
static size_t pause_spans(const char *s, double spans[MAX_SPANS][2]) {
  size_t n = 0;
  while (s && *s && n < MAX_SPANS) {
    char *end;
    double a = strtod(s, &end);
    if (end == s || *end != '-') break;
    s = end + 1;
    double b = strtod(s, &end);
    if (end == s || !(a >= 0) || !(b > a) || (n && a < spans[n - 1][1])) break;
    spans[n][0] = a, spans[n][1] = b;
    n++;
    s = end;
    while (*s == ' ') s++;
  }
  return n;
}

/* 1 when a pause not yet taken holds the boundary t (give or take
 * SPAN_SLACK_S); that pause is then taken (its start set to -1) */
static int boundary_in_pause(double t, double spans[][2], size_t n) {
  for (size_t i = 0; i < n; i++)
    if (spans[i][0] >= 0 && t >= spans[i][0] - SPAN_SLACK_S && t <= spans[i][1] + SPAN_SLACK_S) {
      spans[i][0] = -1;
      return 1;
    }
  return 0;
}

static void on_reply(const sl_plugin_http_response *r, void *ud) {
  stt_req *q = ud;
  const sl_plugin_host *h = q->s->h;
  oai_verdict v;
  if (!oai_judge(r, q->s->timeout_ms, &v)) {
    finish(q, v.outcome, v.retry_after_ms, v.throttled, v.error_class, v.reason);
    return;
  }
  json_error_t jerr;
  json_t *o = r->body && r->body_len ? json_loadb(r->body, r->body_len, 0, &jerr) : NULL;
  if (!json_is_object(o)) {
    json_decref(o);
    bad_reply(q, "reply is not a JSON object (truncated or not JSON)", r);
    return;
  }
  const char *text = json_string_value(json_object_get(o, "text"));
  if (!text) {
    char msg[400], reason[480];
    oai_error_text(r->body, r->body_len, msg, sizeof msg);
    snprintf(reason, sizeof reason, "reply has no \"text\" string: %s", msg);
    json_decref(o);
    finish(q, SL_PLUGIN_FAIL, 0, 0, "provider_bad_reply", reason);
    return;
  }
  double dur = json_number_value(json_object_get(o, "duration"));
  if (!(dur > 0) && q->secs > 0) dur = q->secs;
  const char *lang = json_string_value(json_object_get(o, "language"));
  /* the transcript without the blanks around it (faster-whisper-server
   * starts every segment, so its text, with one) */
  while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r') text++;
  size_t tl = strlen(text);
  while (tl && (text[tl - 1] == ' ' || text[tl - 1] == '\t' || text[tl - 1] == '\n' ||
                text[tl - 1] == '\r'))
    tl--;
  char *trimmed = h->alloc(tl + 1);
  int rc = trimmed ? 0 : SL_ENOMEM;
  if (trimmed) {
    memcpy(trimmed, text, tl);
    trimmed[tl] = '\0';
    rc = h->out_str(q->call, "text", trimmed);
    h->free(trimmed);
  }
  if (!rc && lang && *lang) rc = h->out_str(q->call, "language", lang);
  if (!rc) {
    char engine[160];
    snprintf(engine, sizeof engine, "openai:%s", q->s->model);
    rc = h->out_str(q->call, "engine", engine);
  }
  if (!rc && dur > 0) rc = h->out_num(q->call, "duration_s", dur);
  if (!rc) rc = h->out_num(q->call, "cost_units", dur > 0 ? dur : 0);
  size_t i, dropped = 0;
  json_t *w;
  json_array_foreach(json_object_get(o, "words"), i, w) {
    const char *word = json_string_value(json_object_get(w, "word"));
    json_t *st = json_object_get(w, "start"), *en = json_object_get(w, "end");
    if (rc || dropped || !word || !json_is_number(st) || !json_is_number(en)) continue;
    if (h->out_word(q->call, word, json_number_value(st), json_number_value(en)) != 0)
      dropped = json_array_size(json_object_get(o, "words")) - i; /* over the host's bound */
  }
  if (dropped)
    h->log(SL_PLUGIN_LOG_WARN, q->key,
           "stt/openai: %zu word timings beyond the host's limit dropped", dropped);
  /* segments, in the order given; one without numeric times ends them */
  double spans[MAX_SPANS][2];
  size_t nspans = pause_spans(h->in_str ? h->in_str(q->call, "pause_spans") : NULL, spans);
  size_t nseg = 0, between = 0;
  double prev_end = 0;
  json_array_foreach(json_object_get(o, "segments"), i, w) {
    json_t *st = json_object_get(w, "start"), *en = json_object_get(w, "end");
    if (!json_is_number(st) || !json_is_number(en)) break;
    if (nseg) between += boundary_in_pause((prev_end + json_number_value(st)) / 2, spans, nspans);
    prev_end = json_number_value(en);
    nseg++;
  }
  if (!rc && nseg && nspans) rc = h->out_num(q->call, "segments", (double)nseg);
  if (!rc && nseg && nspans) rc = h->out_num(q->call, "segment_pauses", (double)between);
  json_decref(o);
  if (rc)
    finish(q, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "recording the transcript failed");
  else
    finish(q, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  stt_state *s = v;
  const sl_plugin_host *h = s->h;
  if (!in->audio || in->audio_len == 0) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "empty_audio", "the uploaded answer has no bytes");
    return;
  }
  double secs = wav_seconds(in->audio, in->audio_len);
  if (secs < 0) secs = flac_seconds(in->audio, in->audio_len);
  char why[200];
  if (!audio_container(in->audio, in->audio_len)) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "undecodable_audio",
                "not audio: no WAV, FLAC, Ogg, MP3, WebM or MP4 header");
    return;
  }
  if (secs >= 0 && secs < s->min_seconds) {
    snprintf(why, sizeof why, "%.2f s of audio, under stt.openai.min_seconds %.2f (truncated?)",
             secs, s->min_seconds);
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "audio_too_short", why);
    return;
  }
  if (s->max_seconds > 0 && secs > s->max_seconds) {
    snprintf(why, sizeof why, "%.1f s of audio, over stt.openai.max_seconds %.1f", secs,
             s->max_seconds);
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "audio_too_long", why);
    return;
  }
  stt_req *q = h->alloc(sizeof *q);
  if (!q) {
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "no memory for the request");
    return;
  }
  memset(q, 0, sizeof *q);
  q->s = s;
  q->call = c;
  snprintf(q->key, sizeof q->key, "%s", in->key ? in->key : "");
  q->secs = secs;

  /* language: configured, else the question's BCP 47 hint cut to its
   * primary subtag ("en-US" -> "en") */
  char lang[32];
  const char *l = s->language[0] ? s->language : (in->language ? in->language : "");
  size_t ll = strcspn(l, "-_");
  snprintf(lang, sizeof lang, "%.*s", (int)(ll < sizeof lang ? ll : sizeof lang - 1), l);
  const char *fmt = s->verbose ? "verbose_json" : "json";
  const char *fname = in->filename && *in->filename ? in->filename : "audio.wav";
  sl_plugin_form_part parts[8];
  size_t np = 0;
  parts[np++] =
      (sl_plugin_form_part){"file", in->audio, in->audio_len, fname,
                            in->content_type && *in->content_type ? in->content_type : NULL};
  parts[np++] = (sl_plugin_form_part){"model", s->model, strlen(s->model), NULL, NULL};
  parts[np++] = (sl_plugin_form_part){"response_format", fmt, strlen(fmt), NULL, NULL};
  if (lang[0]) parts[np++] = (sl_plugin_form_part){"language", lang, strlen(lang), NULL, NULL};
  if (s->prompt[0])
    parts[np++] = (sl_plugin_form_part){"prompt", s->prompt, strlen(s->prompt), NULL, NULL};
  if (s->words) {
    parts[np++] = (sl_plugin_form_part){"timestamp_granularities[]", "word", 4, NULL, NULL};
    parts[np++] = (sl_plugin_form_part){"timestamp_granularities[]", "segment", 7, NULL, NULL};
  }
  const char *hdrs[3] = {"Accept: application/json", NULL, NULL};
  if (s->auth[0]) hdrs[1] = s->auth;
  sl_plugin_http_request req = {.struct_size = sizeof req,
                                .method = "POST",
                                .url = s->url,
                                .headers = hdrs,
                                .form = parts,
                                .nform = np,
                                .timeout_ms = s->timeout_ms,
                                .connect_timeout_ms = s->connect_timeout_ms,
                                .max_response = s->max_response};
  int rc = h->http_send ? h->http_send(c, &req, on_reply, q) : SL_EINVAL;
  if (rc) {
    h->free(q);
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "http_send_failed",
                "the host could not start the request");
  }
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STT,
    .name = "openai",
    .version = "1.0.0",
    .description = "Speech-to-text through an OpenAI-compatible POST /v1/audio/transcriptions "
                   "(OpenAI, Groq, whisper.cpp server, faster-whisper-server, LocalAI)",
    .flags = 0,
    .conf = conf_keys,
    .nconf = sizeof conf_keys / sizeof conf_keys[0],
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
