/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bare_produce.c — the floor under POST /v1/submissions: an open-loop
 * librdkafka producer writing what a create writes, with nothing else.
 *
 * Design: the payload is a real SubmissionCreated, the newest message of the
 * template topic (the creates bench/api/run has just sent), written verbatim;
 * each message gets a fresh UUIDv7 key as presign gives it (sl_uuid7, 36
 * bytes), so the default partitioner spreads them the same way. The producer
 * is made by sl_kafka_producer_new with the extras presign passes
 * (stages/presign/presign.c: linger.ms=0, message.timeout.ms for
 * presign.kafka_timeout_ms 5000), so idempotence, acks=all, batching and
 * compression are the stage's by construction. What is left out is the
 * whole API: no HTTP, no auth, no JSON, no signing, no libuv.
 *
 * Messages are produced on a fixed clock schedule, one every 1/R s (the main
 * thread sleeps to each scheduled time with clock_nanosleep), and a second
 * thread blocks in rd_kafka_poll, so a delivery report is served the moment
 * librdkafka has it. Latency runs from the message's scheduled time to its
 * delivery report, as bench/api/loadgen measures a create. The first W s
 * (warm-up: connections, producer id, metadata) are produced and discarded,
 * then D s are measured; afterwards the producer is flushed for at most
 * 10 s and anything still undelivered counts as "unfinished".
 *
 * Usage: bare_produce BROKERS TOPIC TEMPLATE_TOPIC RATE DURATION_S [WARMUP_S [RAW_FILE]]
 *   TOPIC must exist with as many partitions as TEMPLATE_TOPIC (checked);
 *   RAW_FILE: every delivered message's latency (ms), one a line.
 * Output (stdout, one line): {"rate":R,"duration_s":D,"sent":n,"ok":n,
 *   "achieved_rate":..,"errors":{..},"p50_ms":..,"p95_ms":..,"p99_ms":..,
 *   "max_ms":..,"late_p50_ms":..,"late_p99_ms":..,"payload_bytes":n,
 *   "key_bytes":36,"partitions":n}
 * Percentiles are nearest rank over the delivered messages; late_* is how
 * long after its scheduled time each message was produced (this program's
 * own timing, which counts in its latency).
 *
 * @locality main thread produces; the poll thread runs the delivery reports
 * and writes each slot's result once, read by main after it is joined.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_id.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_stage.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_bench.h"

#define FLUSH_MS 10000
/* presign's producer (stages/presign/presign.c): linger.ms=0 and
 * message.timeout.ms = sl_kafka_message_timeout_for(presign.kafka_timeout_ms) */
#define PRESIGN_KAFKA_TIMEOUT_MS 5000

typedef struct {
  double scheduled; /* CLOCK_MONOTONIC seconds */
  double latency_ms;
  double late_ms; /* how long after its scheduled time it was produced */
  int err;        /* rd_kafka_resp_err_t of the delivery report */
  int done;
} slot;

static volatile int stop_polling;

static void sleep_until(double t) {
  struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
}

static void on_sent(rd_kafka_resp_err_t err, void *ctx) {
  slot *s = ctx;
  s->latency_ms = (sl_bench_now_s() - s->scheduled) * 1000.0;
  s->err = err;
  s->done = 1;
}

static void *poller(void *arg) {
  rd_kafka_t *rk = arg;
  while (!__atomic_load_n(&stop_polling, __ATOMIC_ACQUIRE)) rd_kafka_poll(rk, 100);
  rd_kafka_poll(rk, 0);
  return NULL;
}

static int partitions_of(rd_kafka_t *rk, const char *topic) {
  rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
  const struct rd_kafka_metadata *md = NULL;
  int n = -1;
  if (t && rd_kafka_metadata(rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
      md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
    n = md->topics[0].partition_cnt;
  if (md) rd_kafka_metadata_destroy(md);
  if (t) rd_kafka_topic_destroy(t);
  return n;
}

/* The newest message of topic (the latest timestamp among each partition's
 * last message): its value, malloc'd, in *out. Returns its length, or -1. */
static long newest_message(const char *brokers, const char *topic, void **out) {
  char err[512];
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (rd_kafka_conf_set(c, "bootstrap.servers", brokers, err, sizeof err) ||
      rd_kafka_conf_set(c, "group.id", "sluice-bench-bare-produce", err, sizeof err) ||
      rd_kafka_conf_set(c, "enable.auto.commit", "false", err, sizeof err) ||
      sl_kafka_conf_secure(c, err, sizeof err)) {
    fprintf(stderr, "bare_produce: consumer: %s\n", err);
    rd_kafka_conf_destroy(c);
    return -1;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "bare_produce: consumer: %s\n", err);
    rd_kafka_conf_destroy(c);
    return -1;
  }
  int np = partitions_of(rk, topic), want = 0;
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np > 0 ? np : 1);
  for (int p = 0; p < np; p++) {
    int64_t lo = 0, hi = 0;
    if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 10000) == 0 && hi > lo) {
      rd_kafka_topic_partition_list_add(l, topic, p)->offset = hi - 1;
      want++;
    }
  }
  long len = -1;
  int64_t newest = -1;
  rd_kafka_assign(rk, l);
  for (int got = 0, tries = 0; got < want && tries < 100; tries++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
    if (!m) continue;
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    if (!m->err) got++;
    if (!m->err && ts > newest) {
      void *v = malloc(m->len ? m->len : 1);
      if (v) {
        memcpy(v, m->payload, m->len);
        free(*out);
        *out = v;
        len = (long)m->len;
        newest = ts;
      }
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_assign(rk, NULL);
  rd_kafka_topic_partition_list_destroy(l);
  if (len < 0) fprintf(stderr, "bare_produce: no message to copy in topic %s\n", topic);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return len;
}

int main(int argc, char **argv) {
  if (argc < 6 || argc > 8) {
    fprintf(stderr,
            "usage: %s BROKERS TOPIC TEMPLATE_TOPIC RATE DURATION_S [WARMUP_S [RAW_FILE]]\n",
            argv[0]);
    return 2;
  }
  const char *brokers = argv[1], *topic = argv[2], *template_topic = argv[3];
  double rate, dur, warm;
  if (sl_bench_schedule("bare_produce", argc, argv, 4, 2.0, &rate, &dur, &warm)) return 2;
  void *value = NULL;
  long vlen = newest_message(brokers, template_topic, &value);
  if (vlen < 0) return 1;

  char err[512], timeout[32];
  snprintf(timeout, sizeof timeout, "%lld",
           (long long)sl_kafka_message_timeout_for(PRESIGN_KAFKA_TIMEOUT_MS));
  const char *extra[] = {"message.timeout.ms", timeout, "linger.ms", "0", NULL};
  rd_kafka_t *rk = NULL;
  if (sl_kafka_producer_new(&rk, brokers, "sluice-bench-bare-produce", extra, err, sizeof err)) {
    fprintf(stderr, "bare_produce: producer: %s\n", err);
    return 1;
  }
  int np = partitions_of(rk, topic), tnp = partitions_of(rk, template_topic);
  if (np < 1 || np != tnp) {
    fprintf(stderr, "bare_produce: topic %s has %d partitions, %s has %d: want the same\n", topic,
            np, template_topic, tnp);
    return 1;
  }

  long n_warm = (long)floor(rate * warm + 0.5), n_meas = (long)floor(rate * dur + 0.5);
  if (n_meas < 1) n_meas = 1;
  long total = n_warm + n_meas;
  slot *slots = calloc((size_t)total, sizeof *slots);
  double *lat = malloc(sizeof(double) * (size_t)n_meas);
  if (!slots || !lat) return 1;
  pthread_t th;
  if (pthread_create(&th, NULL, poller, rk) != 0) return 1;

  double t0 = sl_bench_now_s() + 0.01;
  long sent = 0;
  for (long i = 0; i < total; i++) {
    slot *s = &slots[i];
    s->scheduled = t0 + (double)i / rate;
    sleep_until(s->scheduled);
    s->late_ms = (sl_bench_now_s() - s->scheduled) * 1000.0;
    char key[37];
    sl_uuid7(sl_now_ms(), key);
    rd_kafka_resp_err_t e =
        sl_kafka_send(rk, topic, key, 36, value, (size_t)vlen, RD_KAFKA_MSG_F_COPY, on_sent, s);
    if (e) {
      if (i >= n_warm) {
        char k[48];
        snprintf(k, sizeof k, "refused_%s", rd_kafka_err2name(e));
        sl_bench_count_err(k);
      }
      s->done = -1; /* nothing will come */
    }
    if (i >= n_warm) sent++;
  }
  rd_kafka_flush(rk, FLUSH_MS);
  __atomic_store_n(&stop_polling, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);

  long n_lat = 0, ok = 0;
  double *late = malloc(sizeof(double) * (size_t)n_meas);
  if (!late) return 1;
  for (long i = n_warm; i < total; i++) {
    const slot *s = &slots[i];
    late[i - n_warm] = s->late_ms;
    if (s->done == 0) sl_bench_count_err("unfinished");
    if (s->done != 1) continue;
    if (s->err) {
      sl_bench_count_err(rd_kafka_err2name((rd_kafka_resp_err_t)s->err));
      continue;
    }
    ok++;
    lat[n_lat++] = s->latency_ms;
  }
  if (sl_bench_write_raw(argc == 8 ? argv[7] : NULL, lat, (size_t)n_lat) != 0) {
    fprintf(stderr, "bare_produce: cannot write %s\n", argv[7]);
    return 1;
  }
  printf("{\"rate\":%g,\"duration_s\":%g,\"sent\":%ld,\"ok\":%ld,\"achieved_rate\":%.2f", rate, dur,
         sent, ok, (double)ok / dur);
  sl_bench_print_latencies(lat, (size_t)n_lat, late, (size_t)n_meas);
  printf(",\"payload_bytes\":%ld,\"key_bytes\":36,\"partitions\":%d}\n", vlen, np);

  rd_kafka_destroy(rk);
  free(value);
  free(slots);
  free(lat);
  free(late);
  return 0;
}
