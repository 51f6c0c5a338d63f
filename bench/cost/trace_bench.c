/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_bench.c — what one span costs the process that records it, in CPU:
 * the span a stage writes for each message it takes (a Kafka process span
 * with its messaging attributes and phase times, as sl_stage_job.c builds
 * it), built and ended on this thread, encoded and sent by sl_trace's
 * exporter thread to a real collector (--endpoint, Jaeger's OTLP/HTTP).
 *
 * Design: rounds in turn, each `--spans` spans: "build" (the exporter off:
 * the span built and dropped at its end), "encode" (the OTLP body of
 * batches of trace.batch_spans, no network), and, with --endpoint, "export"
 * (built, packed and queued by this thread, wrapped and POSTed by the
 * exporter's thread, both counted; the queue kept under half full so that
 * nothing is dropped; a new trace every 16 spans). CPU is the
 * process's (all threads, getrusage) per span; the median over --rounds is
 * printed as a table. bench/cost/run measures the same cost end to end in
 * grade-noop; this program is where it is taken apart.
 */
#define _POSIX_C_SOURCE 200809L

#include "sl_bench.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* one process span like a stage's (sl_stage_job.c trace_end) */
static void build(sl_span *s, const sl_trace_ctx *root, long i) {
  /* a trace of 16 spans, then another: a collector keeping traces in
   * memory (Jaeger's max_traces) can bound them, not one that never ends */
  static _Thread_local sl_trace_ctx trace;
  if (i % 16 == 0 && sl_trace_root(&trace)) trace = *root;
  const sl_trace_ctx *parent = &trace;
  sl_trace_ctx c;
  sl_trace_child(parent, &c);
  int64_t t0 = sl_trace_now_ns();
  sl_span_begin(s, &c, parent->span_id, "process grade.requests", SL_SPAN_CONSUMER, t0 - 5000000);
  char key[64];
  snprintf(key, sizeof key, "0192f1c4-7d3e-7a51-9c2b-%012ld/%ld", i, i % 15 + 1);
  sl_span_str(s, "messaging.system", "kafka");
  sl_span_str(s, "messaging.destination.name", "grade.requests");
  sl_span_int(s, "messaging.destination.partition.id", i % 12);
  sl_span_int(s, "messaging.kafka.offset", i);
  sl_span_str(s, "messaging.consumer.group.name", "sluice-grade");
  sl_span_str(s, "messaging.kafka.message.key", key);
  sl_span_str(s, "sluice.stage", "grade");
  sl_span_int(s, "sluice.attempt", 1);
  sl_span_str(s, "sluice.outcome", "done");
  /* phase times as a stage measures them: nanoseconds apart, each its own */
  sl_span_real(s, "sluice.queued_ms", 1.25 + (double)(i % 7919) * 1e-3);
  sl_span_real(s, "sluice.gated_ms", 0.311 + (double)(i % 7907) * 1e-6);
  sl_span_real(s, "sluice.running_ms", 0.052 + (double)(i % 7901) * 1e-6);
  sl_span_real(s, "sluice.producing_ms", 2.5 + (double)(i % 7883) * 1e-4);
}

static double round_build(long n, const sl_trace_ctx *root) {
  sl_span s;
  double c0 = sl_bench_cpu_s();
  for (long i = 0; i < n; i++) {
    build(&s, root, i);
    sl_span_end(&s, 0);
  }
  return (sl_bench_cpu_s() - c0) / (double)n * 1e6;
}

static double round_encode(long n, const sl_trace_ctx *root, int batch) {
  sl_span *b = calloc((size_t)batch, sizeof *b);
  if (!b) return -1;
  for (int i = 0; i < batch; i++) build(&b[i], root, i), b[i].end_ns = sl_trace_now_ns();
  sl__otlp_enc *enc = sl__otlp_enc_new((size_t)batch);
  if (!enc) return free(b), -1;
  size_t bytes = 0;
  const uint8_t *body;
  double c0 = sl_bench_cpu_s();
  for (long done = 0; done < n; done += batch)
    if (sl__otlp_encode(enc, b, (size_t)batch, "sluice-grade", &body, &bytes)) bytes = 0;
  double us = (sl_bench_cpu_s() - c0) / (double)n * 1e6;
  sl__otlp_enc_free(enc);
  fprintf(stderr, "trace_bench: a batch of %d spans is %zu bytes (%.0f per span)\n", batch, bytes,
          (double)bytes / batch);
  free(b);
  return us;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* the export round's CPU per span on the calling thread (building, packing,
 * queueing and its waits for the queue to drain), the rest being the
 * exporter's (the body around the packed spans, the POST) */
static double caller_us;

static double round_export(long n, const sl_trace_ctx *root, size_t queue) {
  sl_span s;
  double c0 = sl_bench_cpu_s(), t0 = thread_cpu_s();
  for (long i = 0; i < n; i++) {
    build(&s, root, i);
    while (i % 64 == 0 && sl__trace_queued() > queue / 2)
      nanosleep(&(struct timespec){0, 200000}, NULL);
    sl_span_end(&s, 0);
  }
  while (sl__trace_queued() > 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
  double all = (sl_bench_cpu_s() - c0) / (double)n * 1e6;
  caller_us = (thread_cpu_s() - t0) / (double)n * 1e6;
  fprintf(stderr, "trace_bench: export round: %.3f µs per span, %.3f of them this thread's\n", all,
          caller_us);
  return all;
}

int main(int argc, char **argv) {
  const char *endpoint = "";
  long n = 200000;
  int rounds = 5, batch = 512, queue = 2048;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--endpoint") && i + 1 < argc)
      endpoint = argv[++i];
    else if (!strcmp(argv[i], "--spans") && i + 1 < argc)
      n = atol(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--queue") && i + 1 < argc)
      queue = atoi(argv[++i]);
    else {
      fprintf(
          stderr,
          "usage: trace_bench [--endpoint URL] [--spans N] [--rounds R] [--batch B] [--queue Q]\n");
      return 2;
    }
  }
  if (n < 1000 || rounds < 1 || rounds > 50 || batch < 1 || queue < batch || queue > 1000000) {
    fprintf(stderr, "trace_bench: --spans >= 1000, --rounds 1..50, 1 <= --batch <= --queue\n");
    return 2;
  }
  sl_trace_ctx root;
  sl_trace_conf off = {.endpoint = "",
                       .sample_ratio = 1,
                       .queue_spans = queue,
                       .batch_spans = batch,
                       .flush_ms = 1000,
                       .timeout_ms = 2000};
  if (sl_trace_start(&off) || sl_trace_root(&root)) return 1;
  double b[50], e[50], x[50], xc[50];
  int only_export = getenv("TRACE_BENCH_EXPORT_ONLY") != NULL; /* for a profile of it */
  for (int r = 0; r < rounds && !only_export; r++) {
    b[r] = round_build(n, &root);
    e[r] = round_encode(n, &root, off.batch_spans);
  }
  int exported = 0;
  if (*endpoint) {
    sl_trace_conf on = off;
    on.endpoint = endpoint;
    on.service = "sluice-trace-bench";
    if (sl_trace_start(&on)) {
      fprintf(stderr, "trace_bench: cannot start the exporter for %s\n", endpoint);
      return 1;
    }
    for (int r = 0; r < rounds; r++) {
      x[r] = round_export(n, &root, (size_t)on.queue_spans);
      xc[r] = caller_us;
    }
    sl_trace_stop();
    exported = 1;
  }
  printf("| what | CPU per span, µs (median of %d rounds of %ld) |\n|---|---:|\n", rounds, n);
  printf("| build and end, exporter off | %.3f |\n", sl_bench_median(b, (size_t)rounds, 0));
  printf("| encode (OTLP/protobuf body, batches of %d) | %.3f |\n", off.batch_spans,
         sl_bench_median(e, (size_t)rounds, 0));
  if (exported) {
    printf("| build, queue, encode, POST to %s | %.3f |\n", endpoint,
           sl_bench_median(x, (size_t)rounds, 0));
    printf("| ... of which the caller's thread (build, pack, queue, its waits for room) | %.3f |\n",
           sl_bench_median(xc, (size_t)rounds, 0));
  }
  return 0;
}
