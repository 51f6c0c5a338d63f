/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fakeprovider.c — `sluice-fakeprovider` (tools/, not part of the shipped
 * `sluice` binary): a test double for paid AI providers,
 * speaking the OpenAI-compatible HTTP API the provider plugins use:
 *
 *   POST /v1/audio/transcriptions  multipart/form-data: file, model,
 *        language, prompt, response_format json|text|verbose_json,
 *        timestamp_granularities[] (segment, word). The transcript is one of
 *        a few fixed sentences chosen by a hash of the audio bytes, so the
 *        same file always gives the same text; the duration comes from the
 *        WAV header (or the byte count at 16 kHz 16-bit mono); verbose_json
 *        carries segments and, when asked, words with evenly spread times.
 *   POST /v1/chat/completions  a chat.completion object (id, created, model,
 *        choices[0].message, finish_reason, usage). With response_format
 *        json_schema or json_object the content is a grade document
 *        {score, level, criteria[{name,score,comment}], feedback} computed
 *        from the first user message (length, lexical variety, word length):
 *        deterministic for the same text. When that message has a line
 *        "Timing: ..." (grade/openai's default template) a fourth
 *        criterion, fluency, cites it as its comment: the evidence the
 *        prompt carried comes back in the grade. Grade replies a test can
 *        ask for by a marker in the message (e.g. in the question's
 *        prompt): "[fake-grade:invalid]" every reply violates the schema,
 *        "[fake-grade:invalid-once]" only the first of a conversation (no
 *        assistant message in it yet), "[fake-grade:truncated]" every reply
 *        is cut in half at the token limit (finish_reason "length").
 *   POST /v1/traces  a collector that stores nothing: any OTLP/HTTP body
 *        is read and answered at once with 200 and an empty (protobuf)
 *        ExportTraceServiceResponse, so a bench can measure what tracing
 *        costs a stage without a collector's work beside it (bench/cost).
 *   GET  /stats  calls by endpoint and status, bad replies, truncated
 *        replies, in flight, peak in flight.
 *
 * Each reply is prepared when the request arrives and sent after a latency
 * drawn per endpoint (uniform mean ± jitter, or lognormal with that mean and
 * standard deviation) by a libuv timer: thousands of requests wait at once
 * on one thread. sl_http has no connection cap of its own; the limit is the
 * process's file descriptors (see docs/fakeprovider.md for a measurement).
 *
 * Misbehaviour to test clients against, in this order of precedence:
 * scripted outage windows (every call 503), a quota in requests/s above
 * which calls get 429 with Retry-After, a failure probability (503 after the
 * latency), a "bad reply" probability (chat content that violates the grade
 * schema: out-of-range score, unknown level, missing field, prose instead of
 * JSON), a "truncated" probability (the JSON body cut in half, with a
 * Content-Length that matches the cut, so the client sees a complete HTTP
 * response holding half a document), and optionally no json_schema support
 * (400 naming response_format, as servers without structured output do).
 * Deterministic for a given seed and arrival order. @locality one loop thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stddef.h>

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#include "sluice/sl_admin.h"
#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_stage.h"

#define MAX_OUTAGES 8
#define MAX_PARTS 16

typedef struct {
  char *listen;
  int64_t stt_latency_ms, stt_jitter_ms, chat_latency_ms, chat_jitter_ms;
  char *latency_dist;
  double failure_rate;
  double quota_rps;
  char *outage;
  double bad_reply_rate;
  double truncate_rate;
  int json_schema;
  int64_t seed;
  int64_t max_body;
  int64_t request_timeout_ms;
  int64_t max_connections;
} fake_conf;

#define F(x) offsetof(fake_conf, x)
static const sl_conf_entry fake_table[] = {
    {"fakeprovider.listen", SL_CONF_STR, "127.0.0.1:8090", F(listen), "listen address", 0},
    {"fakeprovider.stt_latency_ms", SL_CONF_INT, "3000", F(stt_latency_ms),
     "mean latency of /v1/audio/transcriptions", 0},
    {"fakeprovider.stt_jitter_ms", SL_CONF_INT, "500", F(stt_jitter_ms),
     "latency spread of transcriptions (uniform: +-; lognormal: standard deviation)", 0},
    {"fakeprovider.chat_latency_ms", SL_CONF_INT, "4500", F(chat_latency_ms),
     "mean latency of /v1/chat/completions", 0},
    {"fakeprovider.chat_jitter_ms", SL_CONF_INT, "500", F(chat_jitter_ms),
     "latency spread of chat completions (uniform: +-; lognormal: standard deviation)", 0},
    {"fakeprovider.latency_dist", SL_CONF_STR, "uniform", F(latency_dist),
     "latency distribution: uniform (mean +- jitter) or lognormal (mean, sd = jitter)", 0},
    {"fakeprovider.failure_rate", SL_CONF_DOUBLE, "0", F(failure_rate),
     "probability that a call answers 503 (after its latency)", 0},
    {"fakeprovider.quota_rps", SL_CONF_DOUBLE, "0", F(quota_rps),
     "requests per second above which calls get 429 + Retry-After (0: no quota)", 0},
    {"fakeprovider.outage", SL_CONF_STR, "", F(outage),
     "outage windows START-END (seconds after start, comma-separated, up to 8) during "
     "which every call is 503, e.g. 60-360,600-660",
     0},
    {"fakeprovider.bad_reply_rate", SL_CONF_DOUBLE, "0", F(bad_reply_rate),
     "probability that a JSON-mode chat reply violates the grade schema", 0},
    {"fakeprovider.truncate_rate", SL_CONF_DOUBLE, "0", F(truncate_rate),
     "probability that a 200 reply's JSON body is cut in half", 0},
    {"fakeprovider.json_schema", SL_CONF_BOOL, "true", F(json_schema),
     "accept response_format json_schema (false: 400 naming response_format, like servers "
     "without structured output)",
     0},
    {"fakeprovider.seed", SL_CONF_INT, "1", F(seed), "random seed (latency and failures)", 0},
    {"fakeprovider.max_body", SL_CONF_INT, "67108864", F(max_body),
     "largest request body accepted (audio uploads)", 0},
    {"fakeprovider.request_timeout_ms", SL_CONF_INT, "60000", F(request_timeout_ms),
     "a request must arrive completely within this time", 0},
    {"fakeprovider.max_connections", SL_CONF_INT, "100000", F(max_connections),
     "open connections at once, beyond which a new one gets 503 (a provider at scale has no "
     "small cap: every replica of stt and grade holds up to its max_in_flight)",
     0},
};
static const size_t fake_table_len = sizeof fake_table / sizeof fake_table[0];

/* ---------- counters ---------- */

enum { EP_STT, EP_CHAT, EP_OTHER, EP_N };
static const char *const ep_names[EP_N] = {"transcriptions", "chat", "other"};
static const int statuses[] = {200, 400, 404, 405, 413, 429, 500, 503};
#define NSTATUS (sizeof statuses / sizeof statuses[0])

typedef struct pending pending;

typedef struct {
  fake_conf *fc;
  pending *waiting; /* replies not yet due */
  uv_loop_t loop;
  sl_http_server *srv;
  uv_signal_t sigterm, sigint;
  uint64_t rng;
  int64_t started_ms;
  int lognormal;
  int noutage;
  double outage_from[MAX_OUTAGES], outage_to[MAX_OUTAGES];
  /* quota: a token bucket of quota_rps with a one-second burst */
  double tokens;
  int64_t tokens_at_ms;
  int64_t in_flight, peak;
  uint64_t calls[EP_N][NSTATUS];
  uint64_t bad_replies, truncated;
  sl_metric *m_calls[EP_N][NSTATUS];
} fake;

/* A reply prepared on arrival and sent when its timer fires. */
struct pending {
  uv_timer_t timer;
  pending *prev, *next;
  fake *F;
  sl_http_req *req;
  int status, ep;
  const char *ctype;
  char extra[96];
  char *body; /* malloc'd */
  size_t len;
};

static double rnd(fake *F) { /* xorshift64*, uniform in [0,1) */
  F->rng ^= F->rng >> 12;
  F->rng ^= F->rng << 25;
  F->rng ^= F->rng >> 27;
  return (double)((F->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static void count(fake *F, int ep, int status) {
  for (size_t i = 0; i < NSTATUS; i++)
    if (statuses[i] == status) {
      F->calls[ep][i]++;
      sl_metric_add(F->m_calls[ep][i], 1);
      return;
    }
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
  return h;
}

/* An OpenAI-style error body: {"error":{"message","type","param","code"}}. */
static char *error_body(const char *message, const char *type, const char *param, const char *code,
                        size_t *len) {
  json_t *o = json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", message, "type", type,
                        "param", param, "code", code);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(o);
  *len = s ? strlen(s) : 0;
  return s;
}

/* ---------- multipart/form-data ---------- */

typedef struct {
  char name[64];
  char filename[128];
  const char *data;
  size_t len;
} mpart;

static const char *mem_find(const char *h, size_t hl, const char *n, size_t nl) {
  if (nl == 0 || hl < nl) return NULL;
  const char *end = h + hl - nl + 1;
  for (const char *p = h; p < end;) {
    p = memchr(p, n[0], (size_t)(end - p));
    if (!p) return NULL;
    if (memcmp(p, n, nl) == 0) return p;
    p++;
  }
  return NULL;
}

/* Copies the value of attr="..." (or attr=token) from a header line. */
static void header_param(const char *line, size_t len, const char *attr, char *out, size_t outlen) {
  out[0] = '\0';
  size_t al = strlen(attr);
  for (size_t i = 0; i + al + 1 < len; i++) {
    if ((i > 0 && line[i - 1] != ' ' && line[i - 1] != ';') ||
        strncasecmp(line + i, attr, al) != 0 || line[i + al] != '=')
      continue;
    const char *v = line + i + al + 1, *e = line + len;
    int quoted = v < e && *v == '"';
    if (quoted) v++;
    size_t n = 0;
    while (v + n < e && (quoted ? v[n] != '"' : (v[n] != ';' && v[n] != ' ' && v[n] != '\r'))) n++;
    if (n >= outlen) n = outlen - 1;
    memcpy(out, v, n);
    out[n] = '\0';
    return;
  }
}

/* Splits a multipart body. Returns the number of parts, or -1 when the body
 * is not well-formed multipart with the given boundary. */
static int parse_multipart(const char *ctype, const char *body, size_t len, mpart *parts, int max) {
  char boundary[128], delim[136];
  if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0) return -1;
  header_param(ctype, strlen(ctype), "boundary", boundary, sizeof boundary);
  if (!boundary[0]) return -1;
  int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary);
  /* the first delimiter may start the body (no preceding CRLF) */
  const char *p = mem_find(body, len, delim + 2, (size_t)dl - 2), *end = body + len;
  if (!p) return -1;
  p += dl - 2;
  int n = 0;
  for (;;) {
    if (end - p >= 2 && p[0] == '-' && p[1] == '-') return n; /* closing delimiter */
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return -1;
    p += 2;
    const char *hend = mem_find(p, (size_t)(end - p), "\r\n\r\n", 4);
    if (!hend) return -1;
    mpart part = {0};
    for (const char *l = p; l < hend;) {
      const char *le = mem_find(l, (size_t)(hend - l), "\r\n", 2);
      if (!le) le = hend;
      if ((size_t)(le - l) > 20 && strncasecmp(l, "Content-Disposition:", 20) == 0) {
        header_param(l, (size_t)(le - l), "name", part.name, sizeof part.name);
        header_param(l, (size_t)(le - l), "filename", part.filename, sizeof part.filename);
      }
      l = le + 2;
    }
    const char *data = hend + 4;
    const char *next = mem_find(data, (size_t)(end - data), delim, (size_t)dl);
    if (!next) return -1;
    part.data = data;
    part.len = (size_t)(next - data);
    if (n >= max) return -1;
    parts[n++] = part;
    p = next + dl;
  }
}

static const mpart *form_get(const mpart *parts, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(parts[i].name, name) == 0) return &parts[i];
  return NULL;
}

static void form_str(const mpart *parts, int n, const char *name, char *out, size_t len) {
  const mpart *p = form_get(parts, n, name);
  size_t k = p ? p->len : 0;
  if (k >= len) k = len - 1;
  if (k) memcpy(out, p->data, k);
  out[k] = '\0';
}

/* ---------- /v1/audio/transcriptions ---------- */

static const char *transcripts[] = {
    "On weekends I usually go hiking in the mountains with my friends. We bring sandwiches "
    "and we talk about our week.",
    "My favorite food is kimchi stew because it is spicy and warm. My mother makes it every "
    "Sunday.",
    "I live in a small apartment near the river. There is a park next to my building where "
    "I walk my dog.",
    "Last summer I traveled to the beach with my brother. We swam every day and ate fresh "
    "fish at night.",
};

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A known audio container? (the real API answers 400 for anything else) */
static int looks_like_audio(const unsigned char *d, size_t n) {
  if (n < 12) return 0;
  return (memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WAVE", 4) == 0) ||
         memcmp(d, "fLaC", 4) == 0 || memcmp(d, "OggS", 4) == 0 || memcmp(d, "ID3", 3) == 0 ||
         (d[0] == 0xFF && (d[1] & 0xE0) == 0xE0) || memcmp(d + 4, "ftyp", 4) == 0 ||
         memcmp(d, "\x1A\x45\xDF\xA3", 4) == 0;
}

/* Seconds of audio: from the WAV header when there is one. */
static double audio_seconds(const unsigned char *d, size_t n) {
  if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WAVE", 4) == 0) {
    uint32_t byte_rate = 0;
    for (size_t off = 12; off + 8 <= n;) {
      uint32_t sz = le32(d + off + 4);
      if (memcmp(d + off, "fmt ", 4) == 0 && sz >= 16 && off + 8 + 16 <= n)
        byte_rate = le32(d + off + 8 + 8);
      if (memcmp(d + off, "data", 4) == 0 && byte_rate) {
        size_t avail = n - off - 8;
        return (double)(sz < avail ? sz : avail) / byte_rate;
      }
      if (sz > n - off - 8) break;
      off += 8 + sz + (sz & 1);
    }
  }
  if (n >= 42 && memcmp(d, "fLaC", 4) == 0 && (d[4] & 0x7F) == 0) {
    /* STREAMINFO: 20-bit sample rate, then 36-bit total samples */
    const unsigned char *si = d + 8;
    uint32_t rate = (uint32_t)si[10] << 12 | (uint32_t)si[11] << 4 | si[12] >> 4;
    uint64_t total = (uint64_t)(si[13] & 0x0F) << 32 | (uint64_t)si[14] << 24 |
                     (uint64_t)si[15] << 16 | (uint64_t)si[16] << 8 | si[17];
    if (rate && total) return (double)total / rate;
  }
  if (n >= 58 && memcmp(d, "OggS", 4) == 0 && memcmp(d + 29, "vorbis", 6) == 0) {
    /* Vorbis identification header: rate at 40; the last page's granule
     * position counts the samples */
    uint32_t rate = le32(d + 40);
    for (size_t off = n - 27; rate && off > 0; off--) {
      if (memcmp(d + off, "OggS", 4) != 0) continue;
      uint64_t g = 0;
      for (int i = 7; i >= 0; i--) g = g << 8 | d[off + 6 + (size_t)i];
      return (double)g / rate;
    }
  }
  return (double)n / 32000.0;
}

static int stt_reply(fake *F, sl_http_req *req, pending *p) {
  (void)F;
  size_t blen;
  const char *body = sl_http_req_body(req, &blen);
  mpart parts[MAX_PARTS];
  int np = parse_multipart(sl_http_req_header(req, "Content-Type"), body, blen, parts, MAX_PARTS);
  p->ctype = "application/json";
  if (np < 0) {
    p->status = 400;
    p->body =
        error_body("Could not parse multipart form", "invalid_request_error", NULL, NULL, &p->len);
    return 0;
  }
  const mpart *file = form_get(parts, np, "file");
  char model[128], fmt[32], lang[32];
  form_str(parts, np, "model", model, sizeof model);
  form_str(parts, np, "response_format", fmt, sizeof fmt);
  form_str(parts, np, "language", lang, sizeof lang);
  if (!fmt[0]) snprintf(fmt, sizeof fmt, "json");
  const char *msg = NULL, *param = NULL;
  if (!file || !file->filename[0])
    msg = "Missing required parameter: 'file'.", param = "file";
  else if (!model[0])
    msg = "Missing required parameter: 'model'.", param = "model";
  else if (strcmp(fmt, "json") != 0 && strcmp(fmt, "text") != 0 && strcmp(fmt, "verbose_json") != 0)
    msg = "response_format must be json, text or verbose_json", param = "response_format";
  else if (!looks_like_audio((const unsigned char *)file->data, file->len))
    msg = "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', "
          "'mpga', 'oga', 'ogg', 'wav', 'webm']",
    param = "file";
  if (msg) {
    p->status = 400;
    p->body = error_body(msg, "invalid_request_error", param, NULL, &p->len);
    return 0;
  }
  int want_words = 0;
  for (int i = 0; i < np; i++)
    if (strcmp(parts[i].name, "timestamp_granularities[]") == 0 && parts[i].len == 4 &&
        memcmp(parts[i].data, "word", 4) == 0)
      want_words = 1;
  const char *text =
      transcripts[fnv1a(file->data, file->len) % (sizeof transcripts / sizeof transcripts[0])];
  double dur = audio_seconds((const unsigned char *)file->data, file->len);
  p->status = 200;
  if (strcmp(fmt, "text") == 0) {
    p->ctype = "text/plain; charset=utf-8";
    p->len = strlen(text) + 1;
    p->body = malloc(p->len + 1);
    if (p->body) snprintf(p->body, p->len + 1, "%s\n", text);
    return p->body ? 0 : SL_ENOMEM;
  }
  json_t *o;
  if (strcmp(fmt, "json") == 0) {
    o = json_pack("{s:s}", "text", text);
  } else {
    /* words of the transcript, spread evenly over the audio; segments of up
     * to 8 words */
    const char *w[64];
    size_t wl[64], nw = 0;
    for (const char *s = text; *s && nw < 64;) {
      while (*s == ' ') s++;
      if (!*s) break;
      w[nw] = s;
      while (*s && *s != ' ') s++;
      wl[nw] = (size_t)(s - w[nw]);
      nw++;
    }
    double per = nw ? dur / (double)nw : 0;
    json_t *segs = json_array(), *words = json_array();
    for (size_t i = 0; i < nw; i += 8) {
      size_t j = i + 8 < nw ? i + 8 : nw;
      char seg[512];
      size_t sl = (size_t)(w[j - 1] + wl[j - 1] - w[i]);
      snprintf(seg, sizeof seg, " %.*s", (int)(sl < sizeof seg - 2 ? sl : sizeof seg - 2), w[i]);
      json_array_append_new(
          segs, json_pack("{s:i,s:i,s:f,s:f,s:s,s:f,s:f,s:f,s:f}", "id", (int)(i / 8), "seek", 0,
                          "start", round(per * (double)i * 100) / 100, "end",
                          round(per * (double)j * 100) / 100, "text", seg, "temperature", 0.0,
                          "avg_logprob", -0.25, "compression_ratio", 1.3, "no_speech_prob", 0.01));
    }
    for (size_t i = 0; want_words && i < nw; i++) {
      char word[64];
      size_t k = 0;
      for (size_t c = 0; c < wl[i] && k < sizeof word - 1; c++)
        if (w[i][c] != '.' && w[i][c] != ',') word[k++] = w[i][c];
      word[k] = '\0';
      json_array_append_new(words, json_pack("{s:s,s:f,s:f}", "word", word, "start",
                                             round(per * (double)i * 100) / 100, "end",
                                             round(per * (double)(i + 1) * 100) / 100));
    }
    o = json_pack("{s:s,s:s,s:f,s:s,s:o}", "task", "transcribe", "language",
                  lang[0] && strcmp(lang, "en") != 0 ? lang : "english", "duration",
                  round(dur * 100) / 100, "text", text, "segments", segs);
    if (o && want_words) json_object_set(o, "words", words);
    json_decref(words);
  }
  p->body = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(o);
  if (!p->body) return SL_ENOMEM;
  p->len = strlen(p->body);
  return 0;
}

/* ---------- /v1/chat/completions ---------- */

static const char *level_for(int score) {
  static const struct {
    int below;
    const char *level;
  } t[] = {{10, "NL"},  {20, "NM"},  {30, "NH"}, {42, "IL"}, {54, "IM1"},
           {64, "IM2"}, {74, "IM3"}, {86, "IH"}, {101, "AL"}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (score < t[i].below) return t[i].level;
  return "AL";
}

/* The grade document for a text: deterministic, satisfies the schema. */
static json_t *grade_doc(const char *text) {
  uint64_t seen[512] = {0};
  size_t words = 0, distinct = 0, letters = 0;
  for (const char *s = text; *s;) {
    while (*s && !isalnum((unsigned char)*s)) s++;
    if (!*s) break;
    uint64_t h = 1469598103934665603ULL;
    while (*s && (isalnum((unsigned char)*s) || *s == '\'')) {
      h = (h ^ (unsigned char)tolower((unsigned char)*s)) * 1099511628211ULL;
      s++, letters++;
    }
    words++;
    for (size_t i = h % 512;; i = (i + 1) % 512) { /* open addressing; 0 = empty */
      if (seen[i] == (h | 1)) break;
      if (seen[i] == 0 && distinct < 500) {
        seen[i] = h | 1, distinct++;
        break;
      }
      if (seen[i] == 0) break;
    }
  }
  int length = words >= 84 ? 100 : (int)(words * 100 / 84);
  int variety = words ? (int)(distinct * 100 / words) : 0;
  double avg = words ? (double)letters / (double)words : 0;
  int vocab = avg <= 2.5 ? 0 : avg >= 5.0 ? 100 : (int)((avg - 2.5) * 40);
  int score = (int)lround(0.4 * length + 0.35 * variety + 0.25 * vocab);
  if (score > 100) score = 100;
  const char *weakest = length <= variety && length <= vocab ? "length"
                        : variety <= vocab                   ? "variety"
                                                             : "vocabulary";
  char fb[256];
  snprintf(fb, sizeof fb, "%s answer of %zu words. To improve, work on %s: %s.",
           score >= 64   ? "A clear"
           : score >= 30 ? "An understandable"
                         : "A very short",
           words, weakest,
           strcmp(weakest, "length") == 0    ? "say more, with examples and reasons"
           : strcmp(weakest, "variety") == 0 ? "use a wider range of words"
                                             : "try some longer, more precise words");
  return json_pack("{s:i,s:s,s:[{s:s,s:i,s:s},{s:s,s:i,s:s},{s:s,s:i,s:s}],s:s}", "score", score,
                   "level", level_for(score), "criteria", "name", "length", "score", length,
                   "comment", length >= 60 ? "Well developed." : "Too short to show your range.",
                   "name", "variety", "score", variety, "comment",
                   variety >= 60 ? "Varied wording." : "Many words are repeated.", "name",
                   "vocabulary", "score", vocab, "comment",
                   vocab >= 60 ? "Good choice of words." : "Mostly basic words.", "feedback", fb);
}

/* The line "Timing: ..." of a user message as a fluency criterion whose
 * comment is that evidence (score: its words per minute, 150 = 100). */
static void add_timing_criterion(json_t *doc, const char *text) {
  const char *t = strstr(text, "Timing: ");
  if (!t || (t != text && t[-1] != '\n')) return;
  t += 8;
  size_t n = strcspn(t, "\n");
  if (n > 400) n = 400;
  char *end;
  double wpm = strtod(t, &end);
  int score = end == t || !(wpm >= 0) ? 50 : wpm >= 150 ? 100 : (int)(wpm * 100 / 150);
  json_array_append_new(
      json_object_get(doc, "criteria"),
      json_pack("{s:s,s:i,s:s%}", "name", "fluency", "score", score, "comment", t, n));
}

/* A reply that violates the grade schema, in one of five ways. */
static char *bad_content(fake *F, const json_t *good) {
  json_t *o = json_deep_copy(good);
  switch ((int)(rnd(F) * 5)) {
  case 0:
    json_object_set_new(o, "score", json_integer(140));
    break;
  case 1:
    json_object_set_new(o, "level", json_string("B2"));
    break;
  case 2:
    json_object_del(o, "criteria");
    break;
  case 3:
    json_object_set_new(o, "score", json_string("55"));
    break;
  default:
    json_decref(o);
    return strdup("Sure! Here is my evaluation: the answer is fairly good, level IM1, "
                  "score about 55.");
  }
  char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  json_decref(o);
  return s;
}

static int chat_reply(fake *F, sl_http_req *req, pending *p) {
  size_t blen;
  const char *body = sl_http_req_body(req, &blen);
  json_error_t jerr;
  json_t *in = json_loadb(body, blen, 0, &jerr);
  p->ctype = "application/json";
  const char *msg = NULL, *param = NULL;
  json_t *msgs = json_object_get(in, "messages");
  json_t *rf = json_object_get(in, "response_format");
  const char *rf_type = json_string_value(json_object_get(rf, "type"));
  const char *model = json_string_value(json_object_get(in, "model"));
  if (!json_is_object(in))
    msg = "We could not parse the JSON body of your request.";
  else if (!model || !*model)
    msg = "you must provide a model parameter", param = "model";
  else if (!json_is_array(msgs) || json_array_size(msgs) == 0)
    msg = "'messages' must be a non-empty array", param = "messages";
  else if (json_is_true(json_object_get(in, "stream")))
    msg = "stream is not supported by the fake provider", param = "stream";
  else if (rf &&
           (!rf_type || (strcmp(rf_type, "text") != 0 && strcmp(rf_type, "json_object") != 0 &&
                         strcmp(rf_type, "json_schema") != 0)))
    msg = "Invalid value for 'response_format.type'", param = "response_format";
  else if (rf_type && strcmp(rf_type, "json_schema") == 0 && !F->fc->json_schema)
    msg = "response_format of type 'json_schema' is not supported with this model",
    param = "response_format";
  else if (rf_type && strcmp(rf_type, "json_schema") == 0 &&
           !json_is_object(json_object_get(json_object_get(rf, "json_schema"), "schema")))
    msg = "Missing required parameter: 'response_format.json_schema.schema'",
    param = "response_format";
  if (msg) {
    json_decref(in);
    p->status = 400;
    p->body = error_body(msg, "invalid_request_error", param, NULL, &p->len);
    return 0;
  }
  /* the first user message's text (later ones ask again after an invalid
   * reply); prompt tokens ~ characters / 4 */
  const char *text = NULL;
  size_t chars = 0, i;
  int answered = 0; /* an assistant message: this asks again */
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *c = json_string_value(json_object_get(m, "content"));
    if (!c) continue;
    chars += strlen(c);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (role && strcmp(role, "user") == 0 && !text) text = c;
    if (role && strcmp(role, "assistant") == 0) answered = 1;
  }
  if (!text) text = "";
  json_t *doc = grade_doc(text);
  add_timing_criterion(doc, text);
  char *content;
  const char *finish = "stop";
  int want_bad = strstr(text, "[fake-grade:invalid]") != NULL ||
                 (strstr(text, "[fake-grade:invalid-once]") != NULL && !answered);
  if (rf_type && strcmp(rf_type, "text") != 0 && strstr(text, "[fake-grade:truncated]")) {
    char *whole = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (whole) whole[strlen(whole) / 2] = '\0';
    content = whole;
    finish = "length";
    F->truncated++;
  } else if (rf_type && strcmp(rf_type, "text") != 0) {
    if (want_bad || rnd(F) < F->fc->bad_reply_rate) {
      content = bad_content(F, doc);
      F->bad_replies++;
    } else {
      content = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(6));
    }
  } else {
    content = strdup(json_string_value(json_object_get(doc, "feedback")));
  }
  json_decref(doc);
  if (!content) {
    json_decref(in);
    return SL_ENOMEM;
  }
  size_t ctoks = strlen(content) / 4 + 1, ptoks = chars / 4 + 8;
  char id[48];
  snprintf(id, sizeof id, "chatcmpl-fake%016llx", (unsigned long long)(F->rng >> 1));
  json_t *o =
      json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:{s:s,s:s,s:n},s:n,s:s}],s:{s:I,s:I,s:I},s:s}", "id", id,
                "object", "chat.completion", "created", (json_int_t)(sl_now_ms() / 1000), "model",
                model, "choices", "index", 0, "message", "role", "assistant", "content", content,
                "refusal", "logprobs", "finish_reason", finish, "usage", "prompt_tokens",
                (json_int_t)ptoks, "completion_tokens", (json_int_t)ctoks, "total_tokens",
                (json_int_t)(ptoks + ctoks), "system_fingerprint", "fp_sluice_fake");
  free(content);
  json_decref(in);
  p->status = 200;
  p->body = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(o);
  if (!p->body) return SL_ENOMEM;
  p->len = strlen(p->body);
  return 0;
}

/* ---------- dispatch ---------- */

static void send_pending(pending *p) {
  fake *F = p->F;
  sl_http_respond(p->req, p->status, p->ctype, p->extra[0] ? p->extra : NULL, p->body, p->len);
  count(F, p->ep, p->status);
  F->in_flight--;
}

static void on_timer_closed(uv_handle_t *h) {
  pending *p = h->data;
  free(p->body);
  free(p);
}

static void unlink_p(pending *p) {
  if (p->prev)
    p->prev->next = p->next;
  else
    p->F->waiting = p->next;
  if (p->next) p->next->prev = p->prev;
}

static void on_due(uv_timer_t *t) {
  pending *p = t->data;
  unlink_p(p);
  send_pending(p);
  uv_close((uv_handle_t *)&p->timer, on_timer_closed);
}

/* Seconds until the bucket holds a token again (0: a token was taken). */
static double over_quota(fake *F) {
  if (F->fc->quota_rps <= 0) return 0;
  int64_t now = sl_now_ms();
  F->tokens += (double)(now - F->tokens_at_ms) / 1000.0 * F->fc->quota_rps;
  if (F->tokens > F->fc->quota_rps) F->tokens = F->fc->quota_rps;
  F->tokens_at_ms = now;
  if (F->tokens >= 1.0) {
    F->tokens -= 1.0;
    return 0;
  }
  return (1.0 - F->tokens) / F->fc->quota_rps;
}

static int in_outage(const fake *F) {
  double up = (double)(sl_now_ms() - F->started_ms) / 1000.0;
  for (int i = 0; i < F->noutage; i++)
    if (up >= F->outage_from[i] && up < F->outage_to[i]) return 1;
  return 0;
}

static int64_t latency(fake *F, int ep) {
  double mean = (double)(ep == EP_CHAT ? F->fc->chat_latency_ms : F->fc->stt_latency_ms);
  double jit = (double)(ep == EP_CHAT ? F->fc->chat_jitter_ms : F->fc->stt_jitter_ms);
  double d;
  if (F->lognormal && mean > 0 && jit > 0) {
    double s2 = log(1.0 + (jit * jit) / (mean * mean)), mu = log(mean) - s2 / 2;
    double u1 = rnd(F), u2 = rnd(F); /* Box-Muller */
    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    d = exp(mu + sqrt(s2) * z);
  } else {
    d = mean + (rnd(F) * 2.0 - 1.0) * jit;
  }
  if (d < 0) d = 0;
  if (d > 600000) d = 600000;
  return (int64_t)d;
}

static void stats(fake *F, sl_http_req *req) {
  json_t *calls = json_object(), *by_ep = json_object();
  uint64_t total = 0;
  for (size_t s = 0; s < NSTATUS; s++) {
    uint64_t n = F->calls[EP_STT][s] + F->calls[EP_CHAT][s];
    char k[8];
    snprintf(k, sizeof k, "%d", statuses[s]);
    json_object_set_new(calls, k, json_integer((json_int_t)n));
    total += n;
  }
  for (int e = 0; e < EP_N; e++) {
    json_t *o = json_object();
    for (size_t s = 0; s < NSTATUS; s++) {
      char k[8];
      snprintf(k, sizeof k, "%d", statuses[s]);
      if (F->calls[e][s]) json_object_set_new(o, k, json_integer((json_int_t)F->calls[e][s]));
    }
    json_object_set_new(by_ep, ep_names[e], o);
  }
  json_t *o =
      json_pack("{s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:f}", "calls", calls, "by_endpoint", by_ep, "total",
                (json_int_t)total, "bad_replies", (json_int_t)F->bad_replies, "truncated",
                (json_int_t)F->truncated, "in_flight", (json_int_t)F->in_flight, "peak_in_flight",
                (json_int_t)F->peak, "uptime_s", (double)(sl_now_ms() - F->started_ms) / 1000.0);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(o);
  if (!s) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  sl_http_respond(req, 200, "application/json", "Cache-Control: no-store\r\n", s, strlen(s));
  free(s);
}

static void handle(sl_http_req *req, void *ud) {
  fake *F = ud;
  const char *path = sl_http_req_path(req), *m = sl_http_req_method(req);
  if (strcmp(path, "/stats") == 0 && strcmp(m, "GET") == 0) {
    stats(F, req);
    return;
  }
  if (strcmp(path, "/v1/traces") == 0 && strcmp(m, "POST") == 0) { /* read, not kept */
    sl_http_respond(req, 200, "application/x-protobuf", NULL, "", 0);
    return;
  }
  int ep = strcmp(path, "/v1/chat/completions") == 0       ? EP_CHAT
           : strcmp(path, "/v1/audio/transcriptions") == 0 ? EP_STT
                                                           : EP_OTHER;
  if (ep == EP_OTHER) {
    count(F, ep, 404);
    sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
    return;
  }
  if (strcmp(m, "POST") != 0) {
    count(F, ep, 405);
    sl_http_respond_error(req, 405, "method_not_allowed", "use POST", "Allow: POST\r\n");
    return;
  }
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    count(F, ep, 500);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  p->F = F;
  p->req = req;
  p->ep = ep;
  int64_t delay = latency(F, ep);
  double wait_s;
  if (in_outage(F)) {
    p->status = 503;
    delay = 20; /* a load balancer in front of nothing answers at once */
  } else if ((wait_s = over_quota(F)) > 0) {
    p->status = 429;
    snprintf(p->extra, sizeof p->extra, "Retry-After: %d\r\n", (int)ceil(wait_s));
    delay = 5; /* refusals are quick */
  } else if (rnd(F) < F->fc->failure_rate) {
    p->status = 503;
  }
  int rc = 0;
  if (p->status == 429) {
    p->body = error_body("Rate limit reached for requests", "requests", NULL, "rate_limit_exceeded",
                         &p->len);
  } else if (p->status == 503) {
    p->body = error_body("The server is overloaded or not ready yet.", "server_error", NULL, NULL,
                         &p->len);
  } else {
    rc = ep == EP_CHAT ? chat_reply(F, req, p) : stt_reply(F, req, p);
    if (p->status == 400) delay = 0; /* validation answers at once */
  }
  if (rc || !p->body) {
    free(p->body);
    free(p);
    count(F, ep, 500);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  if (!p->ctype) p->ctype = "application/json";
  if (p->status == 200 && strncmp(p->ctype, "application/json", 16) == 0 &&
      rnd(F) < F->fc->truncate_rate) {
    p->len /= 2;
    F->truncated++;
  }
  F->in_flight++;
  if (F->in_flight > F->peak) F->peak = F->in_flight;
  uv_timer_init(&F->loop, &p->timer);
  p->timer.data = p;
  p->next = F->waiting;
  if (F->waiting) F->waiting->prev = p;
  F->waiting = p;
  uv_timer_start(&p->timer, on_due, (uint64_t)delay, 0);
}

static void on_signal(uv_signal_t *h, int sig) {
  fake *F = h->data;
  sl_log(SL_LOG_INFO, NULL, "signal %d: shutting down", sig);
  sl_http_server_free(F->srv);
  F->srv = NULL;
  uv_close((uv_handle_t *)&F->sigterm, NULL);
  uv_close((uv_handle_t *)&F->sigint, NULL);
  uv_stop(&F->loop);
}

static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* "60-360,600-660" -> windows; 0 or -1 when malformed. */
static int parse_outages(fake *F, const char *s) {
  F->noutage = 0;
  while (s && *s) {
    double a, b;
    int used = 0;
    if (F->noutage == MAX_OUTAGES || sscanf(s, "%lf-%lf%n", &a, &b, &used) != 2 || a < 0 || b <= a)
      return -1;
    F->outage_from[F->noutage] = a;
    F->outage_to[F->noutage++] = b;
    s += used;
    if (*s == ',')
      s++;
    else if (*s)
      return -1;
  }
  return 0;
}

/* accepts the SLUICE_* environment the stages share (one shell runs both) */
static int any_env(const char *name) {
  (void)name;
  return 1;
}

static void finish_conf(sl_conf_bind *b, size_t n, sl_admin *admin) {
  sl_admin_stop(admin);
  sl_conf_release(b, n);
  sl_log(SL_LOG_INFO, NULL, "stopped");
}

int main(int argc, char **argv) {
  sl_common_conf cc = {0};
  fake_conf fc = {0};
  /* log.level and admin.listen come from the common table, as for a stage */
  sl_conf_bind own[] = {{sl_common_conf_table, sl_common_conf_table_len, &cc},
                        {fake_table, fake_table_len, &fc}};
  sl_admin *admin = NULL;
  sl_conf_set_known_env(any_env);
  int rc = sl_cli_load(argc, argv, "sluice-fakeprovider",
                       "A stand-in for paid STT/LLM providers (OpenAI-compatible API): the test\n"
                       "double tests and benchmarks use (docs/fakeprovider.md).",
                       own, 2);
  if (rc) return rc - 1000;
  if (sl_log_init("fakeprovider", cc.log_level) != 0) {
    fprintf(stderr, "sluice-fakeprovider: log.level must be debug, info, warn or error\n");
    sl_conf_release(own, 2);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  const char *alisten = cc.admin_listen && *cc.admin_listen ? cc.admin_listen : "127.0.0.1:9190";
  if ((rc = sl_admin_start(&admin, alisten)) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "admin endpoint %s: %s", alisten, sl_strerror(rc));
    sl_conf_release(own, 2);
    return 1;
  }
  fake F = {.fc = &fc, .rng = (uint64_t)fc.seed * 0x9E3779B97F4A7C15ULL + 1};
  F.started_ms = F.tokens_at_ms = sl_now_ms();
  F.tokens = fc.quota_rps;
  const char *bad = NULL;
  if (parse_outages(&F, fc.outage) != 0)
    bad = "fakeprovider.outage must be START-END seconds, comma-separated (at most 8)";
  else if (strcmp(fc.latency_dist, "uniform") != 0 && strcmp(fc.latency_dist, "lognormal") != 0)
    bad = "fakeprovider.latency_dist must be uniform or lognormal";
  else if (fc.failure_rate < 0 || fc.failure_rate > 1 || fc.bad_reply_rate < 0 ||
           fc.bad_reply_rate > 1 || fc.truncate_rate < 0 || fc.truncate_rate > 1)
    bad = "fakeprovider.failure_rate, bad_reply_rate and truncate_rate must be in 0..1";
  else if (fc.stt_latency_ms < 0 || fc.chat_latency_ms < 0 || fc.stt_jitter_ms < 0 ||
           fc.chat_jitter_ms < 0 || fc.quota_rps < 0 || fc.max_body <= 0 ||
           fc.request_timeout_ms <= 0 || fc.max_connections <= 0)
    bad = "fakeprovider latencies, jitters and quota must be >= 0, max_body, "
          "request_timeout_ms and max_connections > 0";
  if (bad) {
    fprintf(stderr, "sluice-fakeprovider: %s\n", bad);
    finish_conf(own, 2, admin);
    return 2;
  }
  F.lognormal = strcmp(fc.latency_dist, "lognormal") == 0;
  for (int e = 0; e < EP_N; e++)
    for (size_t s = 0; s < NSTATUS; s++) {
      char lbl[64];
      snprintf(lbl, sizeof lbl, "endpoint=\"%s\",status=\"%d\"", ep_names[e], statuses[s]);
      F.m_calls[e][s] = sl_metrics_counter("sluice_fakeprovider_calls_total", lbl,
                                           "Calls answered by the fake provider, by status");
    }
  uv_loop_init(&F.loop);
  sl_http_limits lim = {.max_body = (size_t)fc.max_body,
                        .request_timeout_ms = (unsigned)fc.request_timeout_ms,
                        .max_connections = (size_t)fc.max_connections};
  rc = sl_http_server_new(&F.srv, &F.loop, fc.listen, &lim, handle, &F);
  if (rc == 0) {
    uv_signal_init(&F.loop, &F.sigterm);
    uv_signal_init(&F.loop, &F.sigint);
    F.sigterm.data = F.sigint.data = &F;
    uv_signal_start(&F.sigterm, on_signal, SIGTERM);
    uv_signal_start(&F.sigint, on_signal, SIGINT);
    sl_log(SL_LOG_INFO, NULL,
           "listening on http://%s (stt %lld±%lld ms, chat %lld±%lld ms %s, failures %.0f%%, "
           "quota %g/s, bad replies %.0f%%, truncated %.0f%%%s%s)",
           fc.listen, (long long)fc.stt_latency_ms, (long long)fc.stt_jitter_ms,
           (long long)fc.chat_latency_ms, (long long)fc.chat_jitter_ms, fc.latency_dist,
           fc.failure_rate * 100, fc.quota_rps, fc.bad_reply_rate * 100, fc.truncate_rate * 100,
           F.noutage ? ", outages " : "", F.noutage ? fc.outage : "");
    sl_admin_set_ready(admin, 1);
    uv_run(&F.loop, UV_RUN_DEFAULT);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "listen %s: %s", fc.listen, sl_strerror(rc));
  }
  while (F.waiting) { /* replies not yet due: answer them now */
    pending *p = F.waiting;
    unlink_p(p);
    F.in_flight--;
    uv_timer_stop(&p->timer);
    sl_http_respond_error(p->req, 503, "shutting_down", "the provider is stopping", NULL);
    uv_close((uv_handle_t *)&p->timer, on_timer_closed);
  }
  uv_walk(&F.loop, walk_close, NULL);
  uv_run(&F.loop, UV_RUN_DEFAULT);
  uv_loop_close(&F.loop);
  finish_conf(own, 2, admin);
  return rc ? 1 : 0;
}
