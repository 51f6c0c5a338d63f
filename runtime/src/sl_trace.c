/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_trace.c — see sl_trace.h. The exporter is a ring of span copies under
 * one mutex and one thread that takes up to a batch out, writes it as
 * OTLP/JSON (sl_jsonw) and POSTs it with libcurl (blocking, on its own
 * thread, with a deadline). Callers only ever take the mutex to copy one
 * span in: the thread never holds it while it writes or sends.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_trace.h"
#include "sluice/sl_err.h"
#include "sluice/sl_jsonw.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include <curl/curl.h>
#include <stddef.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- context ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* W3C: lowercase only */
}

static int unhex(const char *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static int all_zero(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

int sl_trace_parse(const char *tp, size_t len, sl_trace_ctx *out) {
  if (!tp || !out || len < SL_TRACEPARENT_LEN) return SL_EINVAL;
  uint8_t ver;
  if (unhex(tp, &ver, 1) || ver == 0xff || tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
    return SL_EINVAL;
  /* version 00 is exactly 55 characters; a later one may go on after a '-' */
  if (ver == 0 ? len != SL_TRACEPARENT_LEN : (len > SL_TRACEPARENT_LEN && tp[55] != '-'))
    return SL_EINVAL;
  sl_trace_ctx c;
  memset(&c, 0, sizeof c);
  if (unhex(tp + 3, c.trace_id, 16) || unhex(tp + 36, c.span_id, 8) || unhex(tp + 53, &c.flags, 1))
    return SL_EINVAL;
  if (all_zero(c.trace_id, 16) || all_zero(c.span_id, 8)) return SL_EINVAL;
  *out = c;
  return 0;
}

void sl_trace_set_state(sl_trace_ctx *c, const char *state, size_t len) {
  c->state[0] = '\0';
  if (!state || len == 0 || len >= sizeof c->state) return;
  for (size_t i = 0; i < len; i++)
    if (state[i] < 0x20 || state[i] > 0x7e) return;
  memcpy(c->state, state, len);
  c->state[len] = '\0';
}

static void to_hex(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[b[i] >> 4];
    out[2 * i + 1] = d[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void sl_trace_format(const sl_trace_ctx *c, char out[SL_TRACEPARENT_LEN + 1]) {
  memcpy(out, "00-", 3);
  to_hex(c->trace_id, 16, out + 3);
  out[35] = '-';
  to_hex(c->span_id, 8, out + 36);
  out[52] = '-';
  to_hex(&c->flags, 1, out + 53);
}

void sl_trace_id_hex(const sl_trace_ctx *c, char out[33]) { to_hex(c->trace_id, 16, out); }
void sl_span_id_hex(const uint8_t id[8], char out[17]) { to_hex(id, 8, out); }

static double ratio = 1.0;

static int new_span_id(uint8_t id[8]) {
  do {
    if (RAND_bytes(id, 8) != 1) return SL_ECRYPTO;
  } while (all_zero(id, 8));
  return 0;
}

int sl_trace_root(sl_trace_ctx *out) {
  memset(out, 0, sizeof *out);
  do {
    if (RAND_bytes(out->trace_id, 16) != 1) return SL_ECRYPTO;
  } while (all_zero(out->trace_id, 16));
  /* the trace id's last 8 bytes against ratio * 2^64: every process that
   * looks at this trace would decide the same */
  uint64_t r = 0;
  for (int i = 8; i < 16; i++) r = r << 8 | out->trace_id[i];
  double bound = ratio * 18446744073709551616.0;
  out->flags = ratio >= 1.0 || (double)r < bound ? 1 : 0;
  return new_span_id(out->span_id);
}

int sl_trace_child(const sl_trace_ctx *parent, sl_trace_ctx *out) {
  if (out != parent) *out = *parent;
  return new_span_id(out->span_id);
}

int64_t sl_trace_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- spans ---- */

void sl_span_begin(sl_span *s, const sl_trace_ctx *ctx, const uint8_t *parent_span,
                   const char *name, int kind, int64_t start_ns) {
  s->has_parent = parent_span != NULL;
  s->has_link = 0;
  memcpy(s->trace_id, ctx->trace_id, 16);
  memcpy(s->span_id, ctx->span_id, 8);
  if (parent_span) memcpy(s->parent_id, parent_span, 8);
  s->sampled = sl_trace_sampled(ctx);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->kind = kind;
  s->start_ns = start_ns ? start_ns : sl_trace_now_ns();
  s->end_ns = 0;
  s->status = SL_SPAN_UNSET;
  s->status_msg[0] = '\0';
  s->nattr = 0;
}

static sl_span_attr *attr(sl_span *s, const char *key, int type) {
  if (s->nattr >= SL_SPAN_ATTRS) return NULL;
  sl_span_attr *a = &s->attr[s->nattr++];
  snprintf(a->key, sizeof a->key, "%s", key);
  a->type = type;
  return a;
}

void sl_span_str(sl_span *s, const char *key, const char *v) {
  sl_span_attr *a = attr(s, key, 's');
  if (a) snprintf(a->s, sizeof a->s, "%s", v ? v : "");
}

void sl_span_int(sl_span *s, const char *key, int64_t v) {
  sl_span_attr *a = attr(s, key, 'i');
  if (a) a->i = v;
}

void sl_span_real(sl_span *s, const char *key, double v) {
  sl_span_attr *a = attr(s, key, 'd');
  if (a) a->d = v;
}

void sl_span_error(sl_span *s, const char *msg) {
  s->status = SL_SPAN_ERROR;
  snprintf(s->status_msg, sizeof s->status_msg, "%s", msg ? msg : "");
}

void sl_span_link(sl_span *s, const sl_trace_ctx *other) {
  memcpy(s->link_trace, other->trace_id, 16);
  memcpy(s->link_span, other->span_id, 8);
  s->has_link = 1;
}

/* ---- OTLP/JSON ---- */

static void kv_key(sl_jsonw *w, const char *key) {
  sl_jsonw_raw(w, "{\"key\":");
  sl_jsonw_str(w, key);
}

/* key (raw text before the value), then n bytes as a quoted hex string */
static void kv_hex(sl_jsonw *w, const char *key, const uint8_t *b, size_t n) {
  char hex[33], q[2] = "\"";
  to_hex(b, n, hex);
  sl_jsonw_raw(w, key);
  sl_jsonw_raw(w, q);
  sl_jsonw_raw(w, hex);
  sl_jsonw_raw(w, q);
}

/* key, then v as a quoted decimal (OTLP/JSON writes 64-bit integers so) */
static void kv_i64(sl_jsonw *w, const char *key, int64_t v) {
  char num[21];
  sl_fmt_ll(num, (long long)v);
  sl_jsonw_raw(w, key);
  sl_jsonw_raw(w, "\"");
  sl_jsonw_raw(w, num);
  sl_jsonw_raw(w, "\"");
}

static void span_attrs(sl_jsonw *w, const sl_span *s) {
  sl_jsonw_raw(w, ",\"attributes\":[");
  for (int a = 0; a < s->nattr; a++) {
    const sl_span_attr *at = &s->attr[a];
    if (a) sl_jsonw_raw(w, ",");
    kv_key(w, at->key);
    if (at->type == 's')
      sl_jsonw_kstr(w, ",\"value\":{\"stringValue\":", at->s);
    else if (at->type == 'i')
      kv_i64(w, ",\"value\":{\"intValue\":", at->i);
    else
      sl_jsonw_kreal(w, ",\"value\":{\"doubleValue\":", at->d);
    sl_jsonw_raw(w, "}}");
  }
  sl_jsonw_raw(w, "]");
}

char *sl__trace_otlp_json(const sl_span *spans, size_t n, const char *service) {
  sl_jsonw w = {.initial = 4096 + n * 768};
  sl_jsonw_raw(&w, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
  kv_key(&w, "service.name");
  sl_jsonw_kstr(&w, ",\"value\":{\"stringValue\":", service);
  sl_jsonw_raw(&w, "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"sluice\"},\"spans\":[");
  for (size_t i = 0; i < n; i++) {
    const sl_span *s = &spans[i];
    kv_hex(&w, i ? ",{\"traceId\":" : "{\"traceId\":", s->trace_id, 16);
    kv_hex(&w, ",\"spanId\":", s->span_id, 8);
    if (s->has_parent) kv_hex(&w, ",\"parentSpanId\":", s->parent_id, 8);
    sl_jsonw_kstr(&w, ",\"name\":", s->name);
    sl_jsonw_kint(&w, ",\"kind\":", s->kind);
    kv_i64(&w, ",\"startTimeUnixNano\":", s->start_ns);
    kv_i64(&w, ",\"endTimeUnixNano\":", s->end_ns);
    span_attrs(&w, s);
    if (s->has_link) {
      kv_hex(&w, ",\"links\":[{\"traceId\":", s->link_trace, 16);
      kv_hex(&w, ",\"spanId\":", s->link_span, 8);
      sl_jsonw_raw(&w, "}]");
    }
    if (s->status != SL_SPAN_UNSET) {
      sl_jsonw_kint(&w, ",\"status\":{\"code\":", s->status);
      if (s->status_msg[0]) sl_jsonw_kstr(&w, ",\"message\":", s->status_msg);
      sl_jsonw_raw(&w, "}");
    }
    sl_jsonw_raw(&w, "}");
  }
  sl_jsonw_raw(&w, "]}]}]}");
  return sl_jsonw_take(&w);
}

/* ---- the exporter ---- */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running, stop;
  sl_span *ring; /* queue_spans of them */
  size_t cap, head, n;
  sl_span *batch; /* the thread's: batch_spans of them */
  size_t batch_cap;
  int flush_ms, timeout_ms;
  int64_t stop_by_ns; /* sl_trace_stop: what is still queued after this is dropped */
  char url[512];
  char service[64];
  sl_metric *m_exported, *m_dropped_full, *m_dropped_failed;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int sl_trace_enabled(void) { return E.running; }

/* a span's fields and the attributes it has (not all SL_SPAN_ATTRS slots:
 * a span is ~3 KB, its used part a few hundred bytes) */
static void span_copy(sl_span *to, const sl_span *from) {
  int n = from->nattr < 0 ? 0 : from->nattr > SL_SPAN_ATTRS ? SL_SPAN_ATTRS : from->nattr;
  memcpy(to, from, offsetof(sl_span, attr) + (size_t)n * sizeof(sl_span_attr));
}

size_t sl__trace_queued(void) {
  pthread_mutex_lock(&E.mu);
  size_t n = E.n;
  pthread_mutex_unlock(&E.mu);
  return n;
}

int sl_span_end(sl_span *s, int64_t end_ns) {
  s->end_ns = end_ns ? end_ns : sl_trace_now_ns();
  if (!s->sampled || !E.running) return 0;
  int rc = 0;
  pthread_mutex_lock(&E.mu);
  if (E.n == E.cap) {
    rc = SL_EUNAVAIL;
  } else {
    span_copy(&E.ring[(E.head + E.n) % E.cap], s);
    if (++E.n >= E.batch_cap) pthread_cond_signal(&E.cv);
  }
  pthread_mutex_unlock(&E.mu);
  if (rc) sl_metric_add(E.m_dropped_full, 1);
  return rc;
}

static size_t discard(void *p, size_t size, size_t n, void *ud) {
  (void)p, (void)ud;
  return size * n;
}

/* One POST of body; 0 when the collector took it (2xx). */
static int post(CURL *h, const char *body, long *status) {
  struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
  if (!hdr) return SL_ENOMEM;
  curl_easy_setopt(h, CURLOPT_URL, E.url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)E.timeout_ms);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)E.timeout_ms);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(hdr);
  *status = 0;
  if (rc != CURLE_OK) return SL_EHTTP;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  return *status >= 200 && *status < 300 ? 0 : SL_EHTTP;
}

static void *export_main(void *arg) {
  (void)arg;
  CURL *h = curl_easy_init();
  int64_t failures = 0;
  for (;;) {
    pthread_mutex_lock(&E.mu);
    if (!E.stop && E.n < E.batch_cap) {
      struct timespec dl;
      clock_gettime(CLOCK_REALTIME, &dl);
      dl.tv_nsec += (long)(E.flush_ms % 1000) * 1000000L;
      dl.tv_sec += E.flush_ms / 1000 + dl.tv_nsec / 1000000000L;
      dl.tv_nsec %= 1000000000L;
      pthread_cond_timedwait(&E.cv, &E.mu, &dl);
    }
    size_t k = E.n < E.batch_cap ? E.n : E.batch_cap;
    for (size_t i = 0; i < k; i++) span_copy(&E.batch[i], &E.ring[(E.head + i) % E.cap]);
    E.head = (E.head + k) % E.cap;
    E.n -= k;
    int stop = E.stop, more = E.n > 0;
    pthread_mutex_unlock(&E.mu);
    if (k) {
      char *body = sl__trace_otlp_json(E.batch, k, E.service);
      long status = 0;
      int rc = body && h ? post(h, body, &status) : SL_ENOMEM;
      free(body);
      if (rc == 0) {
        sl_metric_add(E.m_exported, k);
        if (failures) sl_log(SL_LOG_INFO, NULL, "tracing: the collector takes spans again");
        failures = 0;
      } else {
        sl_metric_add(E.m_dropped_failed, k);
        if (failures++ == 0) /* once per outage; the metric counts the rest */
          sl_log(SL_LOG_WARN, NULL, "tracing: %zu span(s) not taken by %s (HTTP %ld): dropped", k,
                 E.url, status);
      }
    }
    if (stop && (!more || sl_trace_now_ns() > E.stop_by_ns)) break;
  }
  curl_easy_cleanup(h);
  return NULL;
}

int sl_trace_start(const sl_trace_conf *c) {
  if (!c || c->sample_ratio < 0 || c->sample_ratio > 1 || c->queue_spans < 1 ||
      c->queue_spans > 1000000 || c->batch_spans < 1 || c->batch_spans > c->queue_spans ||
      c->flush_ms < 10 || c->flush_ms > 60000 || c->timeout_ms < 10 || c->timeout_ms > 60000)
    return SL_EINVAL;
  ratio = c->sample_ratio;
  if (!c->endpoint || !*c->endpoint || E.running) return 0;
  size_t n = strlen(c->endpoint);
  while (n && c->endpoint[n - 1] == '/') n--;
  if (n == 0 ||
      snprintf(E.url, sizeof E.url, "%.*s/v1/traces", (int)n, c->endpoint) >= (int)sizeof E.url)
    return SL_EINVAL;
  snprintf(E.service, sizeof E.service, "%s", c->service ? c->service : "sluice");
  E.cap = (size_t)c->queue_spans;
  E.batch_cap = (size_t)c->batch_spans;
  E.flush_ms = c->flush_ms;
  E.timeout_ms = c->timeout_ms;
  E.ring = calloc(E.cap, sizeof *E.ring);
  E.batch = calloc(E.batch_cap, sizeof *E.batch);
  if (!E.ring || !E.batch) {
    free(E.ring), free(E.batch);
    E.ring = E.batch = NULL;
    return SL_ENOMEM;
  }
  E.m_exported = sl_metrics_counter("sluice_trace_spans_exported_total", NULL,
                                    "spans the trace collector took");
  E.m_dropped_full = sl_metrics_counter(
      "sluice_trace_spans_dropped_total", "reason=\"queue_full\"",
      "spans dropped: the export queue was full (trace.queue_spans), or the collector "
      "did not take them");
  E.m_dropped_failed = sl_metrics_counter(
      "sluice_trace_spans_dropped_total", "reason=\"export_failed\"",
      "spans dropped: the export queue was full (trace.queue_spans), or the collector "
      "did not take them");
  E.stop = 0;
  E.head = E.n = 0;
  if (pthread_create(&E.thread, NULL, export_main, NULL) != 0) {
    free(E.ring), free(E.batch);
    E.ring = E.batch = NULL;
    return SL_ENOMEM;
  }
  E.running = 1;
  return 0;
}

void sl_trace_stop(void) {
  if (!E.running) return;
  pthread_mutex_lock(&E.mu);
  E.stop = 1;
  E.stop_by_ns = sl_trace_now_ns() + (int64_t)E.timeout_ms * 1000000;
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
  pthread_join(E.thread, NULL);
  E.running = 0;
  if (E.n) sl_metric_add(E.m_dropped_failed, E.n);
  free(E.ring), free(E.batch);
  E.ring = E.batch = NULL;
  E.n = E.head = 0;
}
