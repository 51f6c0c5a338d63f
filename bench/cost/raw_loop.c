/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/cost/raw_loop.c — the anchor of bench/cost/run: the least a Kafka
 * consumer that never loses a message must do per message, with librdkafka
 * alone. It consumes topics as a group, produces --copies outputs per input
 * (each a copy of the input: the same key and size), and commits an input's
 * offset only once every output of it and of everything before it on its
 * partition is acknowledged — the stages' rule (runtime/src/sl_stage.c).
 *
 * Settings as the stages' (runtime/src/sl_kafka.c): the consumer with manual
 * commits and no offset store, earliest reset, 8 MiB prefetch, the
 * cooperative-sticky assignor, 10 s session and 2 s heartbeat; the producer
 * with the stages' own settings (sl_kafka_conf_durable: idempotent,
 * acks=all, linger.ms=2); asynchronous commits every 100 ms (the
 * stage's tick), a synchronous one at the end; at most --max-in-flight
 * inputs unfinished (stage.max_in_flight, 1000), beyond which it stops
 * polling the consumer until outputs are acknowledged. No pausing, no
 * per-partition bookkeeping beyond the commit point, no Redis, no logging:
 * one thread of ours, librdkafka's own threads.
 *
 * It stops consuming after --expect messages and then waits for SIGTERM, so
 * that bench/cost/watch samples it while it is alive. CPU and wall time of
 * the process between its own commits at 10% and 90% of --expect (what
 * watch measures from outside) go to stdout as one JSON line, a cross-check.
 */
#define _POSIX_C_SOURCE 200809L
#include <librdkafka/rdkafka.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sl_bench.h"
#include "sluice/sl_kafka.h"

#define MAX_PARTS 256
#define RING 4096 /* > max in flight: a slot is never reused while pending */

typedef struct {
  char topic[128];
  int32_t partition;
  int64_t off[RING]; /* offsets taken, in order */
  int pending[RING]; /* outputs not yet acknowledged */
  uint64_t head, tail;
  int64_t next;      /* the commit point: next offset to read, -1 none */
  int64_t committed; /* last commit point sent */
  int64_t first;     /* first offset seen */
} part;

static part parts[MAX_PARTS];
static int nparts;
static volatile sig_atomic_t stop;
static long long inflight, finished, committed_msgs, expect;
static double t10, t90, cpu10, cpu90;
static long long c10, c90;

static void on_signal(int s) {
  (void)s;
  stop = 1;
}

static part *part_of(const char *topic, int32_t partition) {
  for (int i = 0; i < nparts; i++)
    if (parts[i].partition == partition && !strcmp(parts[i].topic, topic)) return &parts[i];
  if (nparts == MAX_PARTS) {
    fprintf(stderr, "raw_loop: more than %d partitions\n", MAX_PARTS);
    exit(2);
  }
  part *p = &parts[nparts++];
  snprintf(p->topic, sizeof p->topic, "%s", topic);
  p->partition = partition;
  p->next = p->committed = p->first = -1;
  return p;
}

/* the slot's outputs are all acknowledged: move the commit point */
static void slot_done(part *p, uint64_t seq) {
  if (--p->pending[seq % RING] > 0) return;
  inflight--;
  finished++;
  while (p->head < p->tail && p->pending[p->head % RING] == 0) {
    p->next = p->off[p->head % RING] + 1;
    p->head++;
  }
}

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  (void)opaque;
  if (m->err) { /* the stages produce again; for an anchor, a failure is fatal */
    fprintf(stderr, "raw_loop: delivery failed: %s\n", rd_kafka_err2str(m->err));
    exit(1);
  }
  uintptr_t v = (uintptr_t)m->_private;
  slot_done(&parts[v >> 40], v & ((1ULL << 40) - 1));
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque) {
  (void)rk;
  (void)opaque;
  if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
    fprintf(stderr, "raw_loop: commit failed: %s\n", rd_kafka_err2str(err));
    return;
  }
  for (int i = 0; offsets && i < offsets->cnt; i++) {
    part *p = part_of(offsets->elems[i].topic, offsets->elems[i].partition);
    if (offsets->elems[i].err || offsets->elems[i].offset <= p->committed) continue;
    committed_msgs += offsets->elems[i].offset - (p->committed >= 0 ? p->committed : p->first);
    p->committed = offsets->elems[i].offset;
  }
  if (!t10 && committed_msgs >= expect / 10)
    t10 = sl_bench_now_s(), cpu10 = sl_bench_cpu_s(), c10 = committed_msgs;
  if (!t90 && committed_msgs >= expect * 9 / 10)
    t90 = sl_bench_now_s(), cpu90 = sl_bench_cpu_s(), c90 = committed_msgs;
}

static void commit(rd_kafka_t *rk, int sync) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts ? nparts : 1);
  for (int i = 0; i < nparts; i++)
    if (parts[i].next > parts[i].committed)
      rd_kafka_topic_partition_list_add(l, parts[i].topic, parts[i].partition)->offset =
          parts[i].next;
  if (l->cnt) {
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, l, !sync);
    if (sync) on_commit(rk, e, l, NULL);
  }
  rd_kafka_topic_partition_list_destroy(l);
}

/* Serves the consumer's callbacks once nothing more is to be taken (only
 * end-of-partition events can come). */
static void drain(rd_kafka_t *cons) {
  rd_kafka_message_t *m;
  while ((m = rd_kafka_consumer_poll(cons, 0)) != NULL) rd_kafka_message_destroy(m);
}

/* A configuration of name, value, ..., NULL. */
static rd_kafka_conf_t *conf_of(const char *const *kv) {
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  char err[256];
  for (; kv[0]; kv += 2)
    if (rd_kafka_conf_set(c, kv[0], kv[1], err, sizeof err) != RD_KAFKA_CONF_OK) {
      fprintf(stderr, "raw_loop: %s\n", err);
      exit(2);
    }
  return c;
}

static rd_kafka_t *client(rd_kafka_type_t type, rd_kafka_conf_t *c) {
  char err[512];
  rd_kafka_t *rk = rd_kafka_new(type, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "raw_loop: %s\n", err);
    exit(1);
  }
  return rk;
}

int main(int argc, char **argv) {
  const char *brokers = "127.0.0.1:9092", *group = NULL, *topics = NULL, *out = NULL;
  int copies = 1;
  long long max_inflight = 1000;
  int arg = 1;
  const sl_bench_opt opts[] = {
      {"--brokers", SL_BENCH_STR, &brokers, NULL},
      {"--group", SL_BENCH_STR, &group, NULL},
      {"--topics", SL_BENCH_STR, &topics, NULL},
      {"--out", SL_BENCH_STR, &out, NULL},
      {"--copies", SL_BENCH_INT, &copies, NULL},
      {"--expect", SL_BENCH_LL, &expect, NULL},
      {"--max-in-flight", SL_BENCH_LL, &max_inflight, NULL},
  };
  if (sl_bench_opts("raw_loop", argc, argv, &arg, opts, sizeof opts / sizeof opts[0]) != 0)
    return 2;
  if (arg != argc || !group || !topics || !out || copies < 0 || expect <= 0 || max_inflight < 1 ||
      max_inflight >= RING) {
    fprintf(stderr, "usage: raw_loop --group G --topics T[,T...] --out TOPIC --expect N "
                    "[--copies K] [--brokers B] [--max-in-flight 1000]\n");
    return 2;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  const char *prod_conf[] = {"bootstrap.servers", brokers, "client.id", "cost-raw-loop", NULL};
  const char *cons_conf[] = {"bootstrap.servers",
                             brokers,
                             "client.id",
                             "cost-raw-loop",
                             "group.id",
                             group,
                             "enable.auto.commit",
                             "false",
                             "enable.auto.offset.store",
                             "false",
                             "auto.offset.reset",
                             "earliest",
                             "max.poll.interval.ms",
                             "600000",
                             "queued.max.messages.kbytes",
                             "8192",
                             "partition.assignment.strategy",
                             "cooperative-sticky",
                             "session.timeout.ms",
                             "10000",
                             "heartbeat.interval.ms",
                             "2000",
                             NULL};
  rd_kafka_conf_t *pc = conf_of(prod_conf);
  char cerr[256];
  if (sl_kafka_conf_durable(pc, NULL, cerr, sizeof cerr)) { /* the stages' producer settings */
    fprintf(stderr, "raw_loop: %s\n", cerr);
    return 2;
  }
  rd_kafka_conf_set_dr_msg_cb(pc, on_dr);
  rd_kafka_t *prod = client(RD_KAFKA_PRODUCER, pc);
  rd_kafka_conf_t *cc = conf_of(cons_conf);
  rd_kafka_conf_set_offset_commit_cb(cc, on_commit);
  rd_kafka_t *cons = client(RD_KAFKA_CONSUMER, cc);
  rd_kafka_poll_set_consumer(cons);
  rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(4);
  char tbuf[1024];
  snprintf(tbuf, sizeof tbuf, "%s", topics);
  char *save = NULL;
  for (char *t = strtok_r(tbuf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    rd_kafka_topic_partition_list_add(subs, t, RD_KAFKA_PARTITION_UA);
  if (rd_kafka_subscribe(cons, subs)) {
    fprintf(stderr, "raw_loop: subscribe failed\n");
    return 1;
  }
  rd_kafka_topic_partition_list_destroy(subs);

  long long taken = 0;
  double t_first = 0, last_commit = sl_bench_now_s();
  while (!stop && (taken < expect || inflight > 0)) {
    rd_kafka_poll(prod, 0);
    double now = sl_bench_now_s();
    if (now - last_commit >= 0.1) {
      commit(cons, 0);
      last_commit = now;
    }
    if (inflight >= max_inflight) { /* wait for acknowledgements */
      rd_kafka_poll(prod, 1);
      continue;
    }
    if (taken >= expect) { /* the last ones: acknowledgements, commit callbacks */
      rd_kafka_poll(prod, 1);
      drain(cons);
      continue;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 1);
    if (!m) continue;
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        fprintf(stderr, "raw_loop: consume: %s\n", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    if (!t_first) t_first = sl_bench_now_s();
    part *p = part_of(rd_kafka_topic_name(m->rkt), m->partition);
    if (p->first < 0) p->first = m->offset;
    uint64_t seq = p->tail++;
    p->off[seq % RING] = m->offset;
    p->pending[seq % RING] = copies + 1; /* +1: held until every copy is queued */
    inflight++;
    taken++;
    uintptr_t tag = ((uintptr_t)(p - parts) << 40) | (uintptr_t)seq;
    for (int k = 0; k < copies; k++) {
      rd_kafka_resp_err_t e;
      while ((e = rd_kafka_producev(
                  prod, RD_KAFKA_V_TOPIC(out), RD_KAFKA_V_KEY(m->key, m->key_len),
                  RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                  RD_KAFKA_V_OPAQUE((void *)tag), RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(prod, 10);
      if (e) {
        fprintf(stderr, "raw_loop: produce: %s\n", rd_kafka_err2str(e));
        return 1;
      }
    }
    rd_kafka_message_destroy(m);
    slot_done(p, seq);
  }
  commit(cons, 1);
  double t_last = sl_bench_now_s();
  printf("{\"messages\":%lld,\"copies\":%d,\"run_s\":%.3f,\"window_messages\":%lld,"
         "\"window_s\":%.4f,\"window_cpu_s\":%.4f,\"process_cpu_s\":%.3f}\n",
         finished, copies, t_last - t_first, c90 - c10, t90 - t10, cpu90 - cpu10, sl_bench_cpu_s());
  fflush(stdout);
  while (!stop) { /* idle until the meter is done with us */
    rd_kafka_poll(prod, 100);
    drain(cons);
  }
  rd_kafka_consumer_close(cons);
  rd_kafka_destroy(cons);
  rd_kafka_flush(prod, 5000);
  rd_kafka_destroy(prod);
  return 0;
}
