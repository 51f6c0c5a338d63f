/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_trace.h — W3C trace context (traceparent, tracestate) and spans
 * exported to an OpenTelemetry collector over OTLP/HTTP (protobuf).
 *
 * A context names one span of one trace: the span id a child takes as its
 * parent. Messages carry theirs in the `traceparent` and `tracestate`
 * headers (SL_TRACE_HDR, SL_TRACE_STATE_HDR); a stage's span for a message
 * is a child of the message's context, and what it writes carries the
 * context of its own span.
 *
 * Sampling is parent-based: a context that arrived keeps its sampled flag;
 * a new trace (a create without a traceparent) is sampled with the ratio
 * given to sl_trace_start (trace.sample_ratio), decided by its trace id so
 * that every process decides alike. A context that is not sampled is still
 * passed on: the trace stays one trace, only its spans are not recorded.
 *
 * Export never holds up the caller: sl_span_end packs a finished span
 * into a bounded queue (trace.queue_spans) or, when it is full, drops and
 * counts it (sluice_trace_spans_dropped_total{reason="queue_full"}); one
 * background thread sends batches (trace.batch_spans, at least every
 * trace.flush_ms) with a deadline (trace.timeout_ms) and counts what a
 * collector did not take (reason="export_failed"). A collector stopped or
 * frozen costs the pipeline nothing but those spans.
 *
 * A span costs its caller its packing (OTLP/protobuf, into its queue slot,
 * under the queue's mutex) and nothing else: keys are pointers (literals),
 * string values are copied into the span's own text, attributes a stage
 * repeats are packed once and copied after; the exporter only wraps the
 * packed spans in a body (bench/cost/trace_bench measures each part).
 *
 * @locality the context functions are pure (ids from OpenSSL's RAND_bytes,
 * taken 512 bytes at a time into a per-thread buffer); sl_span_end may be called from any thread;
 * sl_trace_start and sl_trace_stop once each, from the main thread.
 */
#ifndef SLUICE_SL_TRACE_H
#define SLUICE_SL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define SL_TRACE_HDR "traceparent"
#define SL_TRACE_STATE_HDR "tracestate"
#define SL_TRACEPARENT_LEN 55 /* "00-" 32 "-" 16 "-" 2 */
#define SL_TRACE_STATE_MAX 256

typedef struct {
  uint8_t trace_id[16];
  uint8_t span_id[8];
  uint8_t flags;                  /* bit 0: sampled */
  char state[SL_TRACE_STATE_MAX]; /* tracestate as received ("" none) */
} sl_trace_ctx;

/* Parses a traceparent (version 00, or a later one read as 00 per W3C);
 * SL_EINVAL for anything else (all-zero ids included): the caller then
 * starts a new trace. The state is left empty (sl_trace_set_state). */
int sl_trace_parse(const char *traceparent, size_t len, sl_trace_ctx *out);
/* tracestate as received, kept when it fits SL_TRACE_STATE_MAX and is
 * printable ASCII, else dropped (W3C lets a vendor drop it). */
void sl_trace_set_state(sl_trace_ctx *c, const char *state, size_t len);
/* "00-<trace>-<span>-<flags>", NUL-terminated. */
void sl_trace_format(const sl_trace_ctx *c, char out[SL_TRACEPARENT_LEN + 1]);
/* the trace id as 32 lowercase hex digits */
void sl_trace_id_hex(const sl_trace_ctx *c, char out[33]);
void sl_span_id_hex(const uint8_t id[8], char out[17]);

/* A new trace with a new span id, sampled with sl_trace_start's ratio. */
int sl_trace_root(sl_trace_ctx *out);
/* The same trace (flags and state) with a new span id. */
int sl_trace_child(const sl_trace_ctx *parent, sl_trace_ctx *out);
static inline int sl_trace_sampled(const sl_trace_ctx *c) { return c->flags & 1; }
/* Whether spans are recorded at all (an endpoint is set): callers skip
 * building spans otherwise. */
int sl_trace_enabled(void);

/* ---- spans ---- */

enum { SL_SPAN_INTERNAL = 1, SL_SPAN_SERVER, SL_SPAN_CLIENT, SL_SPAN_PRODUCER, SL_SPAN_CONSUMER };
enum { SL_SPAN_UNSET = 0, SL_SPAN_OK = 1, SL_SPAN_ERROR = 2 };
#define SL_SPAN_ATTRS 18
#define SL_SPAN_TEXT 1024     /* the string values' bytes in a span, NULs included */
#define SL_SPAN_VALUE_MAX 255 /* one string value's bytes at most: longer ones are cut */

typedef struct {
  const char *key; /* not copied: a string that lives as long as the process (a literal) */
  int type;        /* 's' string, 'i' int, 'd' double */
  unsigned off;    /* 's': its value, NUL-terminated, at the span's text + off */
  union {
    int64_t i;
    double d;
  } v;
} sl_span_attr;

/* A span being built (sl_span_end queues it packed: the struct is the
 * caller's again once it returns). */
typedef struct {
  uint8_t trace_id[16], span_id[8], parent_id[8];
  int has_parent;
  uint8_t link_trace[16], link_span[8]; /* one link (a replay's first trace) */
  int has_link;
  int sampled;
  char name[64];
  int kind;                 /* SL_SPAN_* */
  int64_t start_ns, end_ns; /* unix time */
  int status;               /* SL_SPAN_UNSET, _OK, _ERROR */
  char status_msg[112];
  int nattr;
  unsigned ntext;
  sl_span_attr attr[SL_SPAN_ATTRS];
  char text[SL_SPAN_TEXT]; /* last: a copy takes only the ntext used */
} sl_span;

/* s: a span of ctx's trace with ctx's span id, child of parent (NULL: a
 * root), named name, started at start_ns (0: now). */
void sl_span_begin(sl_span *s, const sl_trace_ctx *ctx, const uint8_t *parent_span,
                   const char *name, int kind, int64_t start_ns);
/* key: a literal (kept as a pointer). Attributes past SL_SPAN_ATTRS are
 * dropped; string values cut to SL_SPAN_VALUE_MAX and to the text left. */
void sl_span_str(sl_span *s, const char *key, const char *v);
void sl_span_int(sl_span *s, const char *key, int64_t v);
void sl_span_real(sl_span *s, const char *key, double v);
void sl_span_error(sl_span *s, const char *msg);
void sl_span_link(sl_span *s, const sl_trace_ctx *other);
/* Ends s at end_ns (0: now) and queues it when its trace is sampled and
 * the exporter runs; 0, or SL_EUNAVAIL when dropped (the queue full) or
 * SL_ENOMEM (no memory to pack it; counted as export_failed). */
int sl_span_end(sl_span *s, int64_t end_ns);

/* unix time in ns (CLOCK_REALTIME) */
int64_t sl_trace_now_ns(void);

/* ---- the exporter ---- */

typedef struct {
  const char *endpoint; /* the collector's OTLP/HTTP base URL ("": tracing off) */
  const char *service;  /* service.name of every span ("sluice-stt") */
  double sample_ratio;  /* of new traces, 0..1 */
  int queue_spans;      /* spans waiting at most */
  int batch_spans;      /* spans per request at most */
  int flush_ms;         /* a batch goes out at least this often */
  int timeout_ms;       /* a request's deadline */
} sl_trace_conf;

/* Starts the export thread (nothing when the endpoint is empty: sampling
 * still decides and contexts still flow). SL_EINVAL for bad settings. */
int sl_trace_start(const sl_trace_conf *c);
/* Sends what is queued (within one timeout) and stops the thread. */
void sl_trace_stop(void);

/* The exporter's encoder (for its tests and bench/cost/trace_bench): the
 * OTLP/protobuf body (ExportTraceServiceRequest) of up to cap spans, its
 * buffers kept from one body to the next. sl__otlp_encode: *out is e's,
 * good until the next call; 0, SL_EINVAL (n > cap) or SL_ENOMEM. One
 * thread at a time. */
typedef struct sl__otlp_enc sl__otlp_enc;
sl__otlp_enc *sl__otlp_enc_new(size_t cap);
void sl__otlp_enc_free(sl__otlp_enc *e);
int sl__otlp_encode(sl__otlp_enc *e, const sl_span *spans, size_t n, const char *service,
                    const uint8_t **out, size_t *len);
/* spans waiting in the queue now (for tests) */
size_t sl__trace_queued(void);

#endif
