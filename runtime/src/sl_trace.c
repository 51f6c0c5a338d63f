/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_trace.c — see sl_trace.h. The exporter is a ring of packed spans
 * under one mutex and one thread. A span is packed as OTLP/protobuf
 * (protobuf-c, proto/otlp_trace.proto) by the thread that ends it, into
 * its ring slot under the mutex, while its fields are still in that core's
 * cache (packed on the exporter's thread, a span's struct had gone cold
 * there: most of the encoder's time was cache misses, bench/cost/
 * trace_bench). The thread marks up to a batch at the ring's head as
 * taken, wraps their bytes in one body without the mutex, POSTs it with
 * libcurl (blocking, on its own thread, with a deadline) and only then
 * gives the slots back. The ring has room for trace.queue_spans waiting
 * beside the batch taken.
 * Each span is packed on its own and each of its attributes too (the same
 * bytes on the wire as OTLP's nested messages); an attribute's packed bytes
 * are kept in a small direct-mapped cache on the encoder, so that the ones
 * every span of a stage repeats (system, topic, group, partition, attempt,
 * outcome) are copied, not packed again by protobuf-c's generic packer.
 * Buffers are sized by a bound of the packed size, not by protobuf-c's
 * get_packed_size (a second walk as long as the packing).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_trace.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include "otlp_trace.pb-c.h"

#include <curl/curl.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

void sl_trace_format(const sl_trace_ctx *c, char out[SL_TRACEPARENT_LEN + 1]) {
  memcpy(out, "00-", 3);
  sl_hex(c->trace_id, 16, out + 3);
  out[35] = '-';
  sl_hex(c->span_id, 8, out + 36);
  out[52] = '-';
  sl_hex(&c->flags, 1, out + 53);
}

void sl_trace_id_hex(const sl_trace_ctx *c, char out[33]) { sl_hex(c->trace_id, 16, out); }
void sl_span_id_hex(const uint8_t id[8], char out[17]) { sl_hex(id, 8, out); }

static double ratio = 1.0;

/* n random bytes (n <= 64): from this thread's buffer, refilled by one
 * RAND_bytes (OpenSSL's DRBG) per 512 bytes: an id per message without a
 * lock or a system call each; a fork's child refills before its first */
static _Thread_local size_t rand_left;
static void rand_forget(void) { rand_left = 0; } /* a fork's child: its own ids */
static void rand_once(void) { pthread_atfork(NULL, NULL, rand_forget); }

static int random_bytes(uint8_t *out, size_t n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  static _Thread_local uint8_t buf[512];
  size_t left = rand_left;
  if (left < n) {
    pthread_once(&once, rand_once);
    if (RAND_bytes(buf, (int)sizeof buf) != 1) return SL_ECRYPTO;
    left = sizeof buf;
  }
  memcpy(out, buf + sizeof buf - left, n); /* each byte handed out once: left shrinks */
  rand_left = left - n;
  return 0;
}

static int new_span_id(uint8_t id[8]) {
  do
    if (random_bytes(id, 8)) return SL_ECRYPTO;
  while (all_zero(id, 8));
  return 0;
}

int sl_trace_root(sl_trace_ctx *out) {
  memset(out, 0, sizeof *out);
  do
    if (random_bytes(out->trace_id, 16)) return SL_ECRYPTO;
  while (all_zero(out->trace_id, 16));
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

/* the attributes s holds (nattr, within the array whatever it says) */
static int attrs_of(const sl_span *s) {
  return s->nattr < 0 ? 0 : s->nattr > SL_SPAN_ATTRS ? SL_SPAN_ATTRS : s->nattr;
}

/* src into dst[cap], cut to fit, NUL-terminated; its length */
static size_t copy_cut(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
  return n;
}

void sl_span_begin(sl_span *s, const sl_trace_ctx *ctx, const uint8_t *parent_span,
                   const char *name, int kind, int64_t start_ns) {
  s->has_parent = parent_span != NULL;
  s->has_link = 0;
  memcpy(s->trace_id, ctx->trace_id, 16);
  memcpy(s->span_id, ctx->span_id, 8);
  if (parent_span) memcpy(s->parent_id, parent_span, 8);
  s->sampled = sl_trace_sampled(ctx);
  copy_cut(s->name, sizeof s->name, name);
  s->kind = kind;
  s->start_ns = start_ns ? start_ns : sl_trace_now_ns();
  s->end_ns = 0;
  s->status = SL_SPAN_UNSET;
  s->status_msg[0] = '\0';
  s->nattr = 0;
  s->ntext = 0;
}

static sl_span_attr *attr(sl_span *s, const char *key, int type) {
  if (s->nattr >= SL_SPAN_ATTRS) return NULL;
  sl_span_attr *a = &s->attr[s->nattr++];
  a->key = key;
  a->type = type;
  return a;
}

void sl_span_str(sl_span *s, const char *key, const char *v) {
  if (s->ntext >= SL_SPAN_TEXT) return; /* no room for even its NUL */
  sl_span_attr *a = attr(s, key, 's');
  if (!a) return;
  size_t room = SL_SPAN_TEXT - s->ntext;
  a->off = s->ntext;
  s->ntext +=
      (unsigned)copy_cut(s->text + a->off,
                         room < SL_SPAN_VALUE_MAX + 1 ? room : SL_SPAN_VALUE_MAX + 1, v ? v : "") +
      1;
}

void sl_span_int(sl_span *s, const char *key, int64_t v) {
  sl_span_attr *a = attr(s, key, 'i');
  if (a) a->v.i = v;
}

void sl_span_real(sl_span *s, const char *key, double v) {
  sl_span_attr *a = attr(s, key, 'd');
  if (a) a->v.d = v;
}

void sl_span_error(sl_span *s, const char *msg) {
  s->status = SL_SPAN_ERROR;
  copy_cut(s->status_msg, sizeof s->status_msg, msg ? msg : "");
}

void sl_span_link(sl_span *s, const sl_trace_ctx *other) {
  memcpy(s->link_trace, other->trace_id, 16);
  memcpy(s->link_span, other->span_id, 8);
  s->has_link = 1;
}

/* ---- OTLP/protobuf ---- */

/* A KeyValue packed before, kept for the next span with the same key (a
 * literal: compared as a pointer) and value, or for a double the same key
 * whatever its value: a direct-mapped cache of KV_CACHE of them, a new one
 * replacing whatever was in its slot. */
#define KV_CACHE 256
#define KV_CACHE_STR 48     /* longer string values are packed every time */
#define KV_CACHE_PACKED 128 /* so are KeyValues packed longer than this */
typedef struct {
  const char *key; /* NULL: an empty slot */
  int type;
  uint8_t slen, plen;
  uint8_t any_double; /* a double's KeyValue, kept for its key whatever the value (below) */
  uint64_t bits;      /* an int's or a double's */
  char s[KV_CACHE_STR];
  uint8_t packed[KV_CACHE_PACKED];
} kv_cached;

/* what a body is built from, kept between bodies: the structs of the span
 * being packed (they point into it: nothing is copied), its attributes'
 * packed bytes (cached or in kvbuf), the packed spans and the body */
struct sl__otlp_enc {
  size_t cap; /* spans per body at most */
  Sluice__Otlp__PackedSpan sp;
  ProtobufCBinaryData attrs[SL_SPAN_ATTRS];
  Sluice__Otlp__Span__Link lk, *lkp;
  Sluice__Otlp__Status st;
  uint8_t *kvbuf; /* the span's attributes that were not cached, packed */
  size_t kvbuf_cap;
  kv_cached *kv;               /* KV_CACHE of them */
  ProtobufCBinaryData *packed; /* cap of them: each span's bytes in spans */
  size_t *off;                 /* where each starts in spans */
  uint8_t *spans, *out;
  size_t spans_cap, out_cap;
};

void sl__otlp_enc_free(sl__otlp_enc *e) {
  if (!e) return;
  free(e->packed), free(e->off), free(e->spans), free(e->out), free(e->kvbuf), free(e->kv);
  free(e);
}

sl__otlp_enc *sl__otlp_enc_new(size_t cap) {
  sl__otlp_enc *e = calloc(1, sizeof *e);
  if (!e || cap == 0) return free(e), NULL;
  e->cap = cap;
  e->packed = calloc(cap, sizeof *e->packed);
  e->off = calloc(cap, sizeof *e->off);
  e->kv = calloc(KV_CACHE, sizeof *e->kv);
  if (!e->packed || !e->off || !e->kv) return sl__otlp_enc_free(e), NULL;
  return e;
}

/* protobuf-c's string fields are char *: it only reads them */
static char *unconst(const char *s) { return (char *)(uintptr_t)s; }
static ProtobufCBinaryData bin(const uint8_t *b, size_t n) {
  return (ProtobufCBinaryData){n, (uint8_t *)(uintptr_t)b};
}

/* buf grown to hold need bytes */
static int room(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  uint8_t *b = realloc(*buf, c);
  if (!b) return SL_ENOMEM;
  *buf = b, *cap = c;
  return 0;
}

/* a's int or double value, as bits */
static uint64_t bits_of(const sl_span_attr *a) {
  uint64_t b = 0;
  if (a->type == 'i') b = (uint64_t)a->v.i;
  if (a->type == 'd') memcpy(&b, &a->v.d, sizeof b);
  return b;
}

/* a double's 8 bytes as protobuf's fixed64 has them: little-endian */
static void le64(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* the slot of a's key and value (str: its string value, slen bytes); a
 * double's by its key alone (its value differs from span to span: the
 * phase times) */
static kv_cached *kv_slot(sl__otlp_enc *e, const sl_span_attr *a, const char *str, size_t slen) {
  uint64_t h = (uint64_t)(uintptr_t)a->key * 0x9E3779B97F4A7C15u ^ (uint64_t)a->type;
  if (a->type == 's')
    for (size_t i = 0; i < slen; i++) h = (h ^ (uint8_t)str[i]) * 0x100000001B3u; /* FNV-1a */
  else if (a->type == 'i')
    h ^= bits_of(a) * 0xC2B2AE3D27D4EB4Fu;
  h ^= h >> 29;
  return &e->kv[(h * 0x9E3779B97F4A7C15u) >> 56]; /* KV_CACHE == 256 */
}

static int kv_same(const kv_cached *c, const sl_span_attr *a, const char *str, size_t slen) {
  if (c->key != a->key || c->type != a->type) return 0;
  if (a->type == 's') return c->slen == slen && memcmp(c->s, str, slen) == 0;
  return c->any_double || c->bits == bits_of(a);
}

/* s's attribute k packed as a KeyValue at *used in e->kvbuf, copied from
 * the cache or packed (and then kept in the cache when it fits); its
 * length and offset in e->attrs[k] (kvbuf may still move: pb_span makes
 * them pointers when the span's are all there). A copy even of a cached
 * one: a later attribute of the same span may take its slot. 0, or
 * SL_ENOMEM. */
static int pb_attr(sl__otlp_enc *e, const sl_span *s, int k, size_t *used) {
  static const Sluice__Otlp__KeyValue kv0 = SLUICE__OTLP__KEY_VALUE__INIT;
  static const Sluice__Otlp__AnyValue av0 = SLUICE__OTLP__ANY_VALUE__INIT;
  const sl_span_attr *a = &s->attr[k];
  const char *str = a->type == 's' ? (a->off < s->ntext ? s->text + a->off : "") : NULL;
  size_t slen = str ? strlen(str) : 0;
  kv_cached *c = kv_slot(e, a, str, slen);
  if (kv_same(c, a, str, slen)) {
    if (room(&e->kvbuf, &e->kvbuf_cap, *used + c->plen)) return SL_ENOMEM;
    memcpy(e->kvbuf + *used, c->packed, c->plen);
    if (c->any_double) le64(bits_of(a), e->kvbuf + *used + c->plen - 8); /* its own value */
    e->attrs[k] = (ProtobufCBinaryData){c->plen, (uint8_t *)(uintptr_t)*used};
    *used += c->plen;
    return 0;
  }
  Sluice__Otlp__KeyValue kv = kv0;
  Sluice__Otlp__AnyValue av = av0;
  kv.key = unconst(a->key);
  kv.value = &av;
  if (a->type == 's') {
    av.value_case = SLUICE__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
    av.string_value = unconst(str);
  } else if (a->type == 'i') {
    av.value_case = SLUICE__OTLP__ANY_VALUE__VALUE_INT_VALUE;
    av.int_value = a->v.i;
  } else {
    av.value_case = SLUICE__OTLP__ANY_VALUE__VALUE_DOUBLE_VALUE;
    av.double_value = a->v.d;
  }
  /* room for its packed size at most (tags, lengths and the value's 8
   * bytes in 24), not protobuf-c's exact count: that walk costs as much
   * as the packing */
  if (room(&e->kvbuf, &e->kvbuf_cap, *used + strlen(a->key) + slen + 24)) return SL_ENOMEM;
  size_t len = sluice__otlp__key_value__pack(&kv, e->kvbuf + *used);
  e->attrs[k] = (ProtobufCBinaryData){len, (uint8_t *)(uintptr_t)*used}; /* an offset for now */
  if (len <= KV_CACHE_PACKED && slen <= KV_CACHE_STR) {
    c->key = a->key, c->type = a->type, c->bits = bits_of(a), c->plen = (uint8_t)len;
    c->slen = (uint8_t)slen;
    /* a double is protobuf's fixed64, 8 bytes whatever its value, at the
     * end of its KeyValue (AnyValue's last and only field): the same bytes
     * serve any value of that key with the last 8 replaced. Kept so only
     * when protobuf-c's bytes show it (its value there, little-endian). */
    uint8_t tail[8];
    le64(c->bits, tail);
    c->any_double = a->type == 'd' && len >= 8 && memcmp(e->kvbuf + *used + len - 8, tail, 8) == 0;
    if (str) memcpy(c->s, str, slen);
    memcpy(c->packed, e->kvbuf + *used, len);
  }
  *used += len;
  return 0;
}

/* e's PackedSpan struct for s; 0, or SL_ENOMEM */
static int pb_span(sl__otlp_enc *e, const sl_span *s) {
  static const Sluice__Otlp__PackedSpan span0 = SLUICE__OTLP__PACKED_SPAN__INIT;
  static const Sluice__Otlp__Span__Link lk0 = SLUICE__OTLP__SPAN__LINK__INIT;
  static const Sluice__Otlp__Status st0 = SLUICE__OTLP__STATUS__INIT;
  Sluice__Otlp__PackedSpan *o = &e->sp;
  *o = span0;
  o->trace_id = bin(s->trace_id, 16);
  o->span_id = bin(s->span_id, 8);
  if (s->has_parent) o->parent_span_id = bin(s->parent_id, 8);
  o->name = unconst(s->name);
  o->kind = (Sluice__Otlp__Span__SpanKind)s->kind;
  o->start_time_unix_nano = (uint64_t)s->start_ns;
  o->end_time_unix_nano = (uint64_t)s->end_ns;
  o->flags = s->sampled ? 1 : 0;
  int n = attrs_of(s);
  size_t used = 0;
  for (int k = 0; k < n; k++)
    if (pb_attr(e, s, k, &used)) return SL_ENOMEM;
  for (int k = 0; k < n; k++) /* kvbuf has stopped moving: offsets into pointers */
    e->attrs[k].data = e->kvbuf + (size_t)(uintptr_t)e->attrs[k].data;
  o->n_attributes = (size_t)n;
  o->attributes = e->attrs;
  if (s->has_link) {
    e->lk = lk0;
    e->lk.trace_id = bin(s->link_trace, 16);
    e->lk.span_id = bin(s->link_span, 8);
    e->lkp = &e->lk;
    o->n_links = 1;
    o->links = &e->lkp;
  }
  if (s->status != SL_SPAN_UNSET) {
    e->st = st0;
    e->st.code = (Sluice__Otlp__Status__StatusCode)s->status;
    e->st.message = unconst(s->status_msg);
    o->status = &e->st;
  }
  return 0;
}

/* at least the packed size of e->sp (pb_span's PackedSpan): each field's
 * bytes, plus 12 for its tag and length (protobuf's are at most 2 and 5
 * bytes long here), without protobuf-c's walk of them */
static size_t packed_bound(const sl__otlp_enc *e) {
  const Sluice__Otlp__PackedSpan *o = &e->sp;
  size_t n = 16 + 8 + 8 + strlen(o->name) + 8 + 8 + 4 + 10 + 12 * 9;
  for (size_t k = 0; k < o->n_attributes; k++) n += o->attributes[k].len + 12;
  if (o->n_links) n += 16 + 8 + 12 * 4;
  if (o->status) n += strlen(o->status->message) + 10 + 12 * 3;
  return n;
}

/* s packed (a PackedSpan) at *buf + at, *buf grown to fit; its length,
 * or 0 without memory */
static size_t pack_at(sl__otlp_enc *e, const sl_span *s, uint8_t **buf, size_t *cap, size_t at) {
  if (pb_span(e, s) || room(buf, cap, at + packed_bound(e))) return 0;
  return sluice__otlp__packed_span__pack(&e->sp, *buf + at);
}

/* the body of e->packed's first n spans, packed before, into e->out: its
 * length, or 0 without memory */
static size_t wrap(sl__otlp_enc *e, size_t n, const char *service) {
  Sluice__Otlp__AnyValue svc_v = SLUICE__OTLP__ANY_VALUE__INIT;
  svc_v.value_case = SLUICE__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
  svc_v.string_value = unconst(service);
  Sluice__Otlp__KeyValue svc = SLUICE__OTLP__KEY_VALUE__INIT, *svcp = &svc;
  svc.key = unconst("service.name");
  svc.value = &svc_v;
  Sluice__Otlp__Resource res = SLUICE__OTLP__RESOURCE__INIT;
  res.n_attributes = 1, res.attributes = &svcp;
  Sluice__Otlp__InstrumentationScope scope = SLUICE__OTLP__INSTRUMENTATION_SCOPE__INIT;
  scope.name = unconst("sluice");
  Sluice__Otlp__ScopeSpans ss = SLUICE__OTLP__SCOPE_SPANS__INIT, *ssp = &ss;
  ss.scope = &scope, ss.n_spans = n, ss.spans = e->packed;
  Sluice__Otlp__ResourceSpans rs = SLUICE__OTLP__RESOURCE_SPANS__INIT, *rsp = &rs;
  rs.resource = &res, rs.n_scope_spans = 1, rs.scope_spans = &ssp;
  Sluice__Otlp__ExportTraceServiceRequest req = SLUICE__OTLP__EXPORT_TRACE_SERVICE_REQUEST__INIT;
  req.n_resource_spans = 1, req.resource_spans = &rsp;
  size_t len = sluice__otlp__export_trace_service_request__get_packed_size(&req);
  if (room(&e->out, &e->out_cap, len)) return 0;
  return sluice__otlp__export_trace_service_request__pack(&req, e->out);
}

int sl__otlp_encode(sl__otlp_enc *e, const sl_span *spans, size_t n, const char *service,
                    const uint8_t **out, size_t *len) {
  if (n > e->cap) return SL_EINVAL;
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    e->off[i] = used;
    e->packed[i].len = pack_at(e, &spans[i], &e->spans, &e->spans_cap, used);
    if (!e->packed[i].len) return SL_ENOMEM;
    used += e->packed[i].len;
  }
  for (size_t i = 0; i < n; i++) e->packed[i].data = e->spans + e->off[i];
  *len = wrap(e, n, service);
  *out = e->out;
  return *len ? 0 : SL_ENOMEM;
}

/* ---- the exporter ---- */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running, stop;
  struct slot {
    uint8_t *b; /* a span packed, grown to the largest it held */
    size_t len, cap;
  } * ring;            /* queue_spans + batch_spans of them */
  size_t cap, head, n; /* n spans from head, the first `taken` being sent */
  size_t taken, queue_cap, batch_cap;
  sl__otlp_enc *pack; /* the callers', under mu: a span packed as it ends */
  sl__otlp_enc *enc;  /* the thread's: the body around them */
  int flush_ms, timeout_ms;
  int64_t stop_by_ns; /* sl_trace_stop: what is still queued after this is dropped */
  char url[512];
  char service[64];
  sl_metric *m_exported, *m_dropped_full, *m_dropped_failed;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int sl_trace_enabled(void) { return E.running; }

size_t sl__trace_queued(void) {
  pthread_mutex_lock(&E.mu);
  size_t n = E.n - E.taken;
  pthread_mutex_unlock(&E.mu);
  return n;
}

int sl_span_end(sl_span *s, int64_t end_ns) {
  s->end_ns = end_ns ? end_ns : sl_trace_now_ns();
  if (!s->sampled || !E.running) return 0;
  int rc = 0;
  pthread_mutex_lock(&E.mu);
  if (E.n - E.taken >= E.queue_cap) {
    rc = SL_EUNAVAIL;
  } else { /* packed here, while its bytes are in this core's cache */
    struct slot *to = &E.ring[(E.head + E.n) % E.cap];
    to->len = pack_at(E.pack, s, &to->b, &to->cap, 0);
    if (!to->len)
      rc = SL_ENOMEM;
    else if (++E.n - E.taken == E.batch_cap)
      pthread_cond_signal(&E.cv); /* a batch is ready */
  }
  pthread_mutex_unlock(&E.mu);
  if (rc) sl_metric_add(rc == SL_EUNAVAIL ? E.m_dropped_full : E.m_dropped_failed, 1);
  return rc;
}

static size_t discard(void *p, size_t size, size_t n, void *ud) {
  (void)p, (void)ud;
  return size * n;
}

/* One POST of body; 0 when the collector took it (2xx). */
static int post(CURL *h, struct curl_slist *hdr, const uint8_t *body, size_t len, long *status) {
  curl_easy_setopt(h, CURLOPT_URL, E.url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)E.timeout_ms);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)E.timeout_ms);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  /* straight to the collector named: the environment's proxy variables
   * (there for a process's provider calls, say) are not used for it */
  curl_easy_setopt(h, CURLOPT_PROXY, "");
  CURLcode rc = curl_easy_perform(h);
  *status = 0;
  if (rc != CURLE_OK) return SL_EHTTP;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  return *status >= 200 && *status < 300 ? 0 : SL_EHTTP;
}

/* k spans sent (or not): counted, an outage logged once */
static void sent(size_t k, int rc, long status, int64_t *failures) {
  if (rc == 0) {
    sl_metric_add(E.m_exported, k);
    if (*failures) sl_log(SL_LOG_INFO, NULL, "tracing: the collector takes spans again");
    *failures = 0;
    return;
  }
  sl_metric_add(E.m_dropped_failed, k);
  if ((*failures)++ == 0) /* once per outage; the metric counts the rest */
    sl_log(SL_LOG_WARN, NULL, "tracing: %zu span(s) not taken by %s (HTTP %ld): dropped", k, E.url,
           status);
}

static void *export_main(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "sluice-trace", 0, 0, 0); /* top -H, perf: the exporter's CPU apart */
  CURL *h = curl_easy_init();
  /* protobuf; no "Expect: 100-continue" round trip before a large body */
  struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
  struct curl_slist *h2 = hdr ? curl_slist_append(hdr, "Expect:") : NULL;
  if (h2) hdr = h2;
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
    E.taken = k; /* theirs until sent: callers write past them */
    size_t head = E.head;
    int stop = E.stop;
    pthread_mutex_unlock(&E.mu);
    if (k) {
      for (size_t i = 0; i < k; i++) { /* theirs alone until given back */
        const struct slot *sl = &E.ring[(head + i) % E.cap];
        E.enc->packed[i] = bin(sl->b, sl->len);
      }
      size_t len = wrap(E.enc, k, E.service);
      long status = 0;
      int rc = len && h && hdr ? post(h, hdr, E.enc->out, len, &status) : SL_ENOMEM;
      sent(k, rc, status, &failures);
    }
    pthread_mutex_lock(&E.mu);
    E.head = (E.head + k) % E.cap;
    E.n -= k;
    E.taken = 0;
    int more = E.n > 0;
    pthread_mutex_unlock(&E.mu);
    if (stop && (!more || sl_trace_now_ns() > E.stop_by_ns)) break;
  }
  curl_slist_free_all(hdr);
  curl_easy_cleanup(h);
  return NULL;
}

/* the ring, its spans' bytes and the encoders freed */
static void release(void) {
  for (size_t i = 0; E.ring && i < E.cap; i++) free(E.ring[i].b);
  free(E.ring);
  E.ring = NULL;
  sl__otlp_enc_free(E.enc);
  sl__otlp_enc_free(E.pack);
  E.enc = E.pack = NULL;
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
  E.queue_cap = (size_t)c->queue_spans;
  E.batch_cap = (size_t)c->batch_spans;
  E.cap = E.queue_cap + E.batch_cap;
  E.flush_ms = c->flush_ms;
  E.timeout_ms = c->timeout_ms;
  E.ring = calloc(E.cap, sizeof *E.ring);
  E.enc = sl__otlp_enc_new(E.batch_cap);
  E.pack = sl__otlp_enc_new(1);
  if (!E.ring || !E.enc || !E.pack) return release(), SL_ENOMEM;
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
  E.head = E.n = E.taken = 0;
  if (pthread_create(&E.thread, NULL, export_main, NULL) != 0) return release(), SL_ENOMEM;
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
  release();
  E.n = E.head = E.taken = 0;
}
