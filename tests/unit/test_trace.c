/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trace.c — unit tests for sl_trace: traceparent parsing (W3C's
 * valid and invalid forms) and formatting, parent-based sampling by ratio,
 * children of a context, the OTLP/protobuf body (read back with protobuf-c),
 * string values bounded by the span's text, and
 * what the exporter sends (read back from its POSTs), and the exporter
 * against a collector that accepts a connection and never answers: submitting never blocks, a full
 * queue drops and counts, what the collector did not take is counted as failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_trace.h"

#include "otlp_trace.pb-c.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void test_parse_format(void **state) {
  (void)state;
  sl_trace_ctx c;
  assert_int_equal(sl_trace_parse(TP, strlen(TP), &c), 0);
  assert_true(sl_trace_sampled(&c));
  char out[SL_TRACEPARENT_LEN + 1], id[33];
  sl_trace_format(&c, out);
  assert_string_equal(out, TP);
  sl_trace_id_hex(&c, id);
  assert_string_equal(id, "4bf92f3577b34da6a3ce929d0e0e4736");
  /* a later version may carry more after a '-'; read as 00 */
  const char *v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra";
  assert_int_equal(sl_trace_parse(v1, strlen(v1), &c), 0);
  assert_false(sl_trace_sampled(&c));
  const char *bad[] = {
      "",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    /* short */
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* 00 is exactly 55 */
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* version ff */
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace */
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero span */
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* separator */
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   /* not hex */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_int_equal(sl_trace_parse(bad[i], strlen(bad[i]), &c), SL_EINVAL);
  sl_trace_set_state(&c, "congo=t61rcWkgMzE", 17);
  assert_string_equal(c.state, "congo=t61rcWkgMzE");
  sl_trace_set_state(&c, "a=\x01", 3); /* not printable: dropped */
  assert_string_equal(c.state, "");
}

static void test_child(void **state) {
  (void)state;
  sl_trace_ctx p, c;
  assert_int_equal(sl_trace_parse(TP, strlen(TP), &p), 0);
  sl_trace_set_state(&p, "k=v", 3);
  assert_int_equal(sl_trace_child(&p, &c), 0);
  assert_memory_equal(c.trace_id, p.trace_id, 16);
  assert_memory_not_equal(c.span_id, p.span_id, 8);
  assert_int_equal(c.flags, p.flags);
  assert_string_equal(c.state, "k=v");
}

static int sampled_of(int n) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    sl_trace_ctx c;
    assert_int_equal(sl_trace_root(&c), 0);
    k += sl_trace_sampled(&c);
  }
  return k;
}

static void set_ratio(double r) {
  sl_trace_conf tc = {.endpoint = "",
                      .sample_ratio = r,
                      .queue_spans = 8,
                      .batch_spans = 4,
                      .flush_ms = 100,
                      .timeout_ms = 100};
  assert_int_equal(sl_trace_start(&tc), 0);
}

static void test_sampling(void **state) {
  (void)state;
  set_ratio(0);
  assert_int_equal(sampled_of(1000), 0);
  set_ratio(1);
  assert_int_equal(sampled_of(1000), 1000);
  set_ratio(0.25);
  int k = sampled_of(4000); /* binomial(4000, 0.25): mean 1000, sd 27 */
  assert_in_range(k, 850, 1150);
  sl_trace_conf bad = {.endpoint = "",
                       .sample_ratio = 1.5,
                       .queue_spans = 8,
                       .batch_spans = 4,
                       .flush_ms = 100,
                       .timeout_ms = 100};
  assert_int_equal(sl_trace_start(&bad), SL_EINVAL);
  assert_false(sl_trace_enabled());
}

static void test_otlp_pb(void **state) {
  (void)state;
  sl_trace_ctx p, c;
  assert_int_equal(sl_trace_parse(TP, strlen(TP), &p), 0);
  assert_int_equal(sl_trace_child(&p, &c), 0);
  sl_span s[2];
  sl_span_begin(&s[0], &c, p.span_id, "process stt.requests", SL_SPAN_CONSUMER, 1000);
  sl_span_str(&s[0], "messaging.system", "kafka");
  sl_span_int(&s[0], "messaging.kafka.offset", 42);
  sl_span_real(&s[0], "sluice.cost_units", 4.5);
  char longv[600];
  memset(longv, 'v', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  sl_span_str(&s[0], "long", longv); /* cut to SL_SPAN_VALUE_MAX */
  sl_span_error(&s[0], "provider said \"no\"");
  sl_span_link(&s[0], &p);
  s[0].end_ns = 2000;
  sl_span_begin(&s[1], &p, NULL, "root", SL_SPAN_SERVER, 3000);
  for (int i = 0; i < SL_SPAN_ATTRS + 3; i++) sl_span_int(&s[1], "n", i); /* extra dropped */
  s[1].end_ns = 4000;
  sl__otlp_enc *enc = sl__otlp_enc_new(2);
  assert_non_null(enc);
  const uint8_t *body = NULL;
  size_t len = 0;
  assert_int_equal(sl__otlp_encode(enc, s, 3, "sluice-stt", &body, &len), SL_EINVAL);
  assert_int_equal(sl__otlp_encode(enc, s, 2, "sluice-stt", &body, &len), 0);
  assert_true(len > 0);
  /* read back as a collector would */
  Sluice__Otlp__ExportTraceServiceRequest *req =
      sluice__otlp__export_trace_service_request__unpack(NULL, len, body);
  assert_non_null(req);
  assert_int_equal(req->n_resource_spans, 1);
  Sluice__Otlp__ResourceSpans *rs = req->resource_spans[0];
  assert_int_equal(rs->resource->n_attributes, 1);
  assert_string_equal(rs->resource->attributes[0]->key, "service.name");
  assert_string_equal(rs->resource->attributes[0]->value->string_value, "sluice-stt");
  assert_int_equal(rs->n_scope_spans, 1);
  /* our ScopeSpans carries each span packed (the same bytes on the wire as
   * OTLP's repeated Span): read each as OTLP's Span */
  assert_int_equal(rs->scope_spans[0]->n_spans, 2);
  Sluice__Otlp__Span *a = sluice__otlp__span__unpack(NULL, rs->scope_spans[0]->spans[0].len,
                                                     rs->scope_spans[0]->spans[0].data);
  assert_non_null(a);
  assert_int_equal(a->trace_id.len, 16);
  assert_memory_equal(a->trace_id.data, p.trace_id, 16);
  assert_memory_equal(a->span_id.data, c.span_id, 8);
  assert_int_equal(a->parent_span_id.len, 8);
  assert_memory_equal(a->parent_span_id.data, p.span_id, 8);
  assert_string_equal(a->name, "process stt.requests");
  assert_int_equal(a->kind, SL_SPAN_CONSUMER);
  assert_int_equal(a->start_time_unix_nano, 1000);
  assert_int_equal(a->end_time_unix_nano, 2000);
  assert_int_equal(a->flags, 1);
  assert_int_equal(a->n_attributes, 4);
  assert_string_equal(a->attributes[0]->key, "messaging.system");
  assert_string_equal(a->attributes[0]->value->string_value, "kafka");
  assert_int_equal(a->attributes[1]->value->value_case, SLUICE__OTLP__ANY_VALUE__VALUE_INT_VALUE);
  assert_int_equal(a->attributes[1]->value->int_value, 42);
  assert_true(a->attributes[2]->value->double_value == 4.5);
  assert_int_equal(strlen(a->attributes[3]->value->string_value), SL_SPAN_VALUE_MAX);
  assert_non_null(a->status);
  assert_int_equal(a->status->code, SL_SPAN_ERROR);
  assert_string_equal(a->status->message, "provider said \"no\"");
  assert_int_equal(a->n_links, 1);
  assert_memory_equal(a->links[0]->span_id.data, p.span_id, 8);
  Sluice__Otlp__Span *b = sluice__otlp__span__unpack(NULL, rs->scope_spans[0]->spans[1].len,
                                                     rs->scope_spans[0]->spans[1].data);
  assert_non_null(b);
  assert_int_equal(b->parent_span_id.len, 0);
  assert_null(b->status);
  assert_int_equal(b->n_attributes, SL_SPAN_ATTRS);
  assert_int_equal(b->attributes[SL_SPAN_ATTRS - 1]->value->int_value, SL_SPAN_ATTRS - 1);
  sluice__otlp__span__free_unpacked(a, NULL);
  sluice__otlp__span__free_unpacked(b, NULL);
  sluice__otlp__export_trace_service_request__free_unpacked(req, NULL);
  sl__otlp_enc_free(enc);
}

/* packed attributes kept between spans (sl_trace.c's cache) come back as
 * they went in: over bodies of spans whose attributes repeat (a few
 * topics, outcomes, partitions) and differ (offsets, keys, times), more of
 * them than the cache has slots, every attribute read back equals its
 * span's, in order */
static void test_otlp_pb_repeats(void **state) {
  (void)state;
  static const char *topics[] = {"grade.requests", "grade.retry.1s", "grade.retry.5m"};
  static const char *outcomes[] = {"done", "retry", "failed", "reused"};
  enum { PER_BODY = 64, BODIES = 40 };
  sl_trace_ctx root;
  assert_int_equal(sl_trace_root(&root), 0);
  sl__otlp_enc *enc = sl__otlp_enc_new(PER_BODY);
  assert_non_null(enc);
  sl_span *s = calloc(PER_BODY, sizeof *s);
  assert_non_null(s);
  for (int body = 0; body < BODIES; body++) {
    for (int i = 0; i < PER_BODY; i++) {
      long n = (long)body * PER_BODY + i;
      char key[64];
      snprintf(key, sizeof key, "sub-%ld/%ld", n / 15, n % 15 + 1);
      sl_span_begin(&s[i], &root, NULL, "process x", SL_SPAN_CONSUMER, 1000 + n);
      sl_span_str(&s[i], "messaging.destination.name", topics[n % 3]);
      sl_span_int(&s[i], "messaging.destination.partition.id", n % 12);
      sl_span_int(&s[i], "messaging.kafka.offset", n);
      sl_span_str(&s[i], "messaging.kafka.message.key", key);
      sl_span_str(&s[i], "sluice.outcome", outcomes[n % 4]);
      sl_span_real(&s[i], "sluice.queued_ms", (double)(n % 5) * 0.5);
      sl_span_real(&s[i], "sluice.running_ms", 0.001 * (double)n);
      sl_span_int(&s[i], "sluice.attempt", 0); /* zero is written, not left out */
      s[i].end_ns = 2000 + n;
    }
    const uint8_t *out = NULL;
    size_t len = 0;
    assert_int_equal(sl__otlp_encode(enc, s, PER_BODY, "sluice-grade", &out, &len), 0);
    Sluice__Otlp__ExportTraceServiceRequest *req =
        sluice__otlp__export_trace_service_request__unpack(NULL, len, out);
    assert_non_null(req);
    Sluice__Otlp__ScopeSpans *ss = req->resource_spans[0]->scope_spans[0];
    assert_int_equal(ss->n_spans, PER_BODY);
    for (int i = 0; i < PER_BODY; i++) {
      Sluice__Otlp__Span *a = sluice__otlp__span__unpack(NULL, ss->spans[i].len, ss->spans[i].data);
      assert_non_null(a);
      assert_int_equal(a->n_attributes, (size_t)s[i].nattr);
      for (int k = 0; k < s[i].nattr; k++) {
        const sl_span_attr *want = &s[i].attr[k];
        const Sluice__Otlp__KeyValue *got = a->attributes[k];
        assert_string_equal(got->key, want->key);
        if (want->type == 's') {
          assert_int_equal(got->value->value_case, SLUICE__OTLP__ANY_VALUE__VALUE_STRING_VALUE);
          assert_string_equal(got->value->string_value, s[i].text + want->off);
        } else if (want->type == 'i') {
          assert_int_equal(got->value->value_case, SLUICE__OTLP__ANY_VALUE__VALUE_INT_VALUE);
          assert_int_equal(got->value->int_value, want->v.i);
        } else {
          assert_int_equal(got->value->value_case, SLUICE__OTLP__ANY_VALUE__VALUE_DOUBLE_VALUE);
          assert_true(got->value->double_value == want->v.d);
        }
      }
      sluice__otlp__span__free_unpacked(a, NULL);
    }
    sluice__otlp__export_trace_service_request__free_unpacked(req, NULL);
  }
  free(s);
  sl__otlp_enc_free(enc);
}

/* string values past the span's text are dropped, never written past it */
static void test_span_text_bound(void **state) {
  (void)state;
  sl_trace_ctx c;
  assert_int_equal(sl_trace_root(&c), 0);
  sl_span s;
  sl_span_begin(&s, &c, NULL, "x", SL_SPAN_INTERNAL, 1);
  char v[SL_SPAN_VALUE_MAX + 50];
  memset(v, 'a', sizeof v - 1);
  v[sizeof v - 1] = '\0';
  sl_span_str(&s, "short", "ab");
  for (int i = 0; i < SL_SPAN_ATTRS; i++) sl_span_str(&s, "k", v);
  /* "ab", then values cut to the maximum while they fit, then one cut to
   * what was left, then none */
  int whole = (SL_SPAN_TEXT - 3) / (SL_SPAN_VALUE_MAX + 1);
  assert_int_equal(s.nattr, 1 + whole + 1);
  assert_int_equal(s.ntext, SL_SPAN_TEXT);
  assert_string_equal(s.text + s.attr[0].off, "ab");
  assert_int_equal(strlen(s.text + s.attr[1].off), SL_SPAN_VALUE_MAX);
  assert_int_equal(strlen(s.text + s.attr[whole + 1].off),
                   SL_SPAN_TEXT - 3 - whole * (SL_SPAN_VALUE_MAX + 1) - 1);
}

static uint64_t counter(const char *name) {
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(sl_metrics_render(&text, &len), 0);
  const char *p = strstr(text, name);
  uint64_t v = p ? strtoull(p + strlen(name), NULL, 10) : 0;
  free(text);
  return v;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* a listening socket on loopback; its port in *port */
static int listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(fd, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* a collector that takes the connection (the kernel's backlog) and never answers */
static void test_exporter_never_blocks(void **state) {
  (void)state;
  int port, ls = listener(&port);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  sl_trace_conf tc = {.endpoint = url,
                      .service = "t",
                      .sample_ratio = 1,
                      .queue_spans = 8,
                      .batch_spans = 4,
                      .flush_ms = 60000,
                      .timeout_ms = 3000};
  assert_int_equal(sl_trace_start(&tc), 0);
  assert_true(sl_trace_enabled());
  sl_trace_ctx c;
  sl_span s;
  assert_int_equal(sl_trace_root(&c), 0);
  for (int i = 0; i < 4; i++) { /* a full batch: the thread takes it and hangs in its POST */
    sl_span_begin(&s, &c, NULL, "x", SL_SPAN_INTERNAL, 0);
    assert_int_equal(sl_span_end(&s, 0), 0);
  }
  for (int i = 0; i < 200 && sl__trace_queued() > 0; i++)
    nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
  assert_int_equal(sl__trace_queued(), 0);
  double t0 = mono_s();
  int dropped = 0;
  for (int i = 0; i < 12; i++) {
    sl_span_begin(&s, &c, NULL, "y", SL_SPAN_INTERNAL, 0);
    dropped += sl_span_end(&s, 0) == SL_EUNAVAIL;
  }
  double took = mono_s() - t0;
  assert_true(took < 1.0); /* the POST hangs 3 s: a submit that waited on it would show */
  assert_int_equal(dropped, 4);
  assert_int_equal(counter("sluice_trace_spans_dropped_total{reason=\"queue_full\"} "), 4);
  sl_trace_stop();
  assert_false(sl_trace_enabled());
  assert_int_equal(counter("sluice_trace_spans_dropped_total{reason=\"export_failed\"} "), 12);
  assert_int_equal(counter("sluice_trace_spans_exported_total "), 0);
  close(ls);
}

/* fd's request (headers, then Content-Length bytes of body) read into
 * buf[cap]; the body's offset in *at, its length returned */
static size_t read_request(int fd, char *buf, size_t cap, size_t *at) {
  size_t n = 0;
  const char *end = NULL;
  long clen = -1;
  for (;;) {
    assert_true(n < cap);
    ssize_t r = recv(fd, buf + n, cap - n, 0);
    assert_true(r > 0);
    n += (size_t)r;
    if (!end) {
      buf[n < cap ? n : cap - 1] = '\0';
      end = strstr(buf, "\r\n\r\n");
      if (!end) continue;
      const char *cl = strstr(buf, "Content-Length: ");
      assert_non_null(cl);
      clen = atol(cl + 16);
    }
    *at = (size_t)(end + 4 - buf);
    if (n >= *at + (size_t)clen) return (size_t)clen;
  }
}

/* What the exporter sends, read back as a collector would: each span as
 * it was when it ended (packed then, in its queue slot), a large one
 * (every attribute, the text full) and small ones after it in the same
 * slots, repeated attributes (the encoder's cache) with their own values. */
static void test_exporter_body(void **state) {
  (void)state;
  int port, ls = listener(&port);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
  enum { BATCH = 3, ROUNDS = 3 };
  sl_trace_conf tc = {.endpoint = url,
                      .service = "sluice-t",
                      .sample_ratio = 1,
                      .queue_spans = BATCH,
                      .batch_spans = BATCH,
                      .flush_ms = 60000,
                      .timeout_ms = 5000};
  assert_int_equal(sl_trace_start(&tc), 0);
  sl_trace_ctx root, c;
  assert_int_equal(sl_trace_root(&root), 0);
  char big[SL_SPAN_VALUE_MAX + 1];
  memset(big, 'b', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  static char buf[1 << 20];
  int fd = -1;
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < BATCH; i++) { /* a full batch: the exporter sends it */
      sl_span s;
      assert_int_equal(sl_trace_child(&root, &c), 0);
      sl_span_begin(&s, &c, root.span_id, r == 0 ? "big" : "small", SL_SPAN_CONSUMER, 100 + i);
      sl_span_str(&s, "messaging.system", "kafka");
      sl_span_int(&s, "sluice.round", r);
      sl_span_real(&s, "sluice.i", i + 0.5);
      for (int k = 0; r == 0 && k < SL_SPAN_ATTRS; k++) sl_span_str(&s, "v", big);
      assert_int_equal(sl_span_end(&s, 200 + i), 0);
      memset(&s, 0x5a, sizeof s); /* the struct is the caller's again */
    }
    if (fd < 0) fd = accept(ls, NULL, NULL); /* the same connection after the first */
    assert_true(fd >= 0);
    size_t at, len = read_request(fd, buf, sizeof buf, &at);
    const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(send(fd, ok, sizeof ok - 1, 0), (ssize_t)(sizeof ok - 1));
    Sluice__Otlp__ExportTraceServiceRequest *req =
        sluice__otlp__export_trace_service_request__unpack(NULL, len, (uint8_t *)buf + at);
    assert_non_null(req);
    Sluice__Otlp__ScopeSpans *ss = req->resource_spans[0]->scope_spans[0];
    assert_string_equal(req->resource_spans[0]->resource->attributes[0]->value->string_value,
                        "sluice-t");
    assert_int_equal(ss->n_spans, BATCH);
    for (int i = 0; i < BATCH; i++) {
      Sluice__Otlp__Span *a = sluice__otlp__span__unpack(NULL, ss->spans[i].len, ss->spans[i].data);
      assert_non_null(a);
      assert_string_equal(a->name, r == 0 ? "big" : "small");
      assert_memory_equal(a->trace_id.data, root.trace_id, 16);
      assert_memory_equal(a->parent_span_id.data, root.span_id, 8);
      assert_int_equal(a->start_time_unix_nano, 100 + i);
      assert_int_equal(a->end_time_unix_nano, 200 + i);
      /* the big ones: 3, as many whole values as the text holds after
       * "kafka", and one cut to what was left (test_span_text_bound) */
      size_t want = r == 0 ? 3 + (SL_SPAN_TEXT - 6) / (SL_SPAN_VALUE_MAX + 1) + 1 : 3;
      assert_int_equal(a->n_attributes, want);
      assert_string_equal(a->attributes[0]->value->string_value, "kafka");
      assert_int_equal(a->attributes[1]->value->int_value, r);
      assert_true(a->attributes[2]->value->double_value == i + 0.5);
      if (r == 0) assert_string_equal(a->attributes[3]->value->string_value, big);
      sluice__otlp__span__free_unpacked(a, NULL);
    }
    sluice__otlp__export_trace_service_request__free_unpacked(req, NULL);
  }
  for (int i = 0; i < 200 && counter("sluice_trace_spans_exported_total ") < 3 * BATCH; i++)
    nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
  sl_trace_stop();
  close(fd);
  close(ls);
}

/* fd has a connection to accept within ms */
static int connected(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, ms) == 1;
}

/* The proxy variables of the environment are not the exporter's: spans go
 * to the collector named, not through whatever http_proxy says (CI once
 * found notify's exporter posting spans to a test's stand-in proxy). */
static void test_exporter_ignores_env_proxy(void **state) {
  (void)state;
  int cport, pport;
  int collector = listener(&cport), proxy = listener(&pport);
  char url[64], purl[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", cport);
  snprintf(purl, sizeof purl, "http://127.0.0.1:%d", pport);
  const char *vars[] = {"http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) setenv(vars[i], purl, 1);
  unsetenv("no_proxy");
  unsetenv("NO_PROXY");
  sl_trace_conf tc = {.endpoint = url,
                      .service = "t",
                      .sample_ratio = 1,
                      .queue_spans = 8,
                      .batch_spans = 1,
                      .flush_ms = 50,
                      .timeout_ms = 500};
  assert_int_equal(sl_trace_start(&tc), 0);
  sl_trace_ctx c;
  sl_span s;
  assert_int_equal(sl_trace_root(&c), 0);
  sl_span_begin(&s, &c, NULL, "x", SL_SPAN_INTERNAL, 0);
  assert_int_equal(sl_span_end(&s, 0), 0);
  int to_collector = connected(collector, 5000), to_proxy = connected(proxy, 0);
  sl_trace_stop(); /* the POST times out: nobody answers */
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  close(collector);
  close(proxy);
  assert_false(to_proxy);
  assert_true(to_collector);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_format),
      cmocka_unit_test(test_child),
      cmocka_unit_test(test_sampling),
      cmocka_unit_test(test_otlp_pb),
      cmocka_unit_test(test_otlp_pb_repeats),
      cmocka_unit_test(test_span_text_bound),
      cmocka_unit_test(test_exporter_never_blocks),
      cmocka_unit_test(test_exporter_body),
      cmocka_unit_test(test_exporter_ignores_env_proxy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
