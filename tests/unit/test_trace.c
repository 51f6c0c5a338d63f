/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trace.c — unit tests for sl_trace: traceparent parsing (W3C's
 * valid and invalid forms) and formatting, parent-based sampling by ratio,
 * children of a context, the OTLP/JSON body (read back with jansson), and
 * the exporter against a collector that accepts a connection and never
 * answers: submitting never blocks, a full queue drops and counts, what the
 * collector did not take is counted as failed.
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

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
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

static void test_otlp_json(void **state) {
  (void)state;
  sl_trace_ctx p, c;
  assert_int_equal(sl_trace_parse(TP, strlen(TP), &p), 0);
  assert_int_equal(sl_trace_child(&p, &c), 0);
  sl_span s[2];
  sl_span_begin(&s[0], &c, p.span_id, "process stt.requests", SL_SPAN_CONSUMER, 1000);
  sl_span_str(&s[0], "messaging.system", "kafka");
  sl_span_int(&s[0], "messaging.kafka.offset", 42);
  sl_span_real(&s[0], "sluice.cost_units", 4.5);
  sl_span_error(&s[0], "provider said \"no\"");
  sl_span_link(&s[0], &p);
  s[0].end_ns = 2000;
  sl_span_begin(&s[1], &p, NULL, "root", SL_SPAN_SERVER, 3000);
  for (int i = 0; i < SL_SPAN_ATTRS + 3; i++) sl_span_int(&s[1], "n", i); /* extra dropped */
  s[1].end_ns = 4000;
  char *body = sl__trace_otlp_json(s, 2, "sluice-stt");
  assert_non_null(body);
  json_error_t e;
  json_t *j = json_loads(body, 0, &e);
  assert_non_null(j);
  json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
  json_t *svc = json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(svc, "value"), "stringValue")),
      "sluice-stt");
  json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
  assert_int_equal(json_array_size(spans), 2);
  json_t *a = json_array_get(spans, 0);
  assert_string_equal(json_string_value(json_object_get(a, "traceId")),
                      "4bf92f3577b34da6a3ce929d0e0e4736");
  assert_string_equal(json_string_value(json_object_get(a, "parentSpanId")), "00f067aa0ba902b7");
  assert_int_equal(json_integer_value(json_object_get(a, "kind")), SL_SPAN_CONSUMER);
  assert_string_equal(json_string_value(json_object_get(a, "startTimeUnixNano")), "1000");
  assert_string_equal(json_string_value(json_object_get(a, "endTimeUnixNano")), "2000");
  json_t *attrs = json_object_get(a, "attributes");
  assert_int_equal(json_array_size(attrs), 3);
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_array_get(attrs, 1), "value"), "intValue")),
                      "42");
  assert_true(json_real_value(json_object_get(json_object_get(json_array_get(attrs, 2), "value"),
                                              "doubleValue")) == 4.5);
  json_t *st = json_object_get(a, "status");
  assert_int_equal(json_integer_value(json_object_get(st, "code")), SL_SPAN_ERROR);
  assert_string_equal(json_string_value(json_object_get(st, "message")), "provider said \"no\"");
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(json_object_get(a, "links"), 0), "spanId")),
      "00f067aa0ba902b7");
  json_t *b = json_array_get(spans, 1);
  assert_null(json_object_get(b, "parentSpanId"));
  assert_int_equal(json_array_size(json_object_get(b, "attributes")), SL_SPAN_ATTRS);
  json_decref(j);
  free(body);
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

/* a collector that takes the connection (the kernel's backlog) and never answers */
static void test_exporter_never_blocks(void **state) {
  (void)state;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(ls >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(ls, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", ntohs(a.sin_port));
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_format),
      cmocka_unit_test(test_child),
      cmocka_unit_test(test_sampling),
      cmocka_unit_test(test_otlp_json),
      cmocka_unit_test(test_exporter_never_blocks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
