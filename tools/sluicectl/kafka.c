/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kafka.c — librdkafka plumbing of sluicectl: client configuration with the
 * last broker error captured (so a failure can say why), reading a whole
 * topic without a consumer group, and an idempotent producer (the
 * runtime's settings, sl_kafka_conf_durable) whose delivery reports are
 * awaited with a deadline.
 *
 * Every wait is bounded by --timeout (10 s): an unreachable cluster is an
 * error after that long, never a hang.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"
#include "sluice/sl_kafka.h"

static pthread_mutex_t last_err_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_err[512];

static void remember(const char *msg) {
  pthread_mutex_lock(&last_err_mu);
  snprintf(last_err, sizeof last_err, "%s", msg);
  pthread_mutex_unlock(&last_err_mu);
}

const char *sc_last_kafka_error(void) {
  static char copy[sizeof last_err];
  pthread_mutex_lock(&last_err_mu);
  memcpy(copy, last_err, sizeof copy);
  pthread_mutex_unlock(&last_err_mu);
  return copy;
}

/* librdkafka logs from its own threads: keep errors for the final message,
 * print everything only with SLUICECTL_DEBUG set. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  if (level <= 4) remember(buf);
  if (getenv("SLUICECTL_DEBUG")) fprintf(stderr, "rdkafka %d %s: %s\n", level, fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  remember(reason);
}

int sc_conf_set(rd_kafka_conf_t *c, const char *k, const char *v) {
  char err[256];
  if (rd_kafka_conf_set(c, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
    fprintf(stderr, "sluicectl: kafka setting %s=%s: %s\n", k, v, err);
    return -1;
  }
  return 0;
}

rd_kafka_conf_t *sc_conf_new(const sc_opts *o) {
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  char t[32];
  snprintf(t, sizeof t, "%d", o->timeout_ms);
  if (sc_conf_set(c, "bootstrap.servers", o->brokers) || sc_conf_set(c, "client.id", "sluicectl") ||
      sc_conf_set(c, "socket.connection.setup.timeout.ms", t) ||
      sc_conf_set(c, "allow.auto.create.topics", "false") ||
      sc_conf_set(c, "log.connection.close", "false")) {
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  /* SLUICECTL_DEBUG=1 shows librdkafka's log; a list (eos,msg,...) also
   * turns on those debug contexts */
  const char *dbg = getenv("SLUICECTL_DEBUG");
  if (dbg && *dbg && strcmp(dbg, "1") != 0 && sc_conf_set(c, "debug", dbg)) {
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  char err[512];
  if (sl_kafka_conf_secure(c, err, sizeof err) != 0) { /* kafka.security_protocol & co. */
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  rd_kafka_conf_set_log_cb(c, log_cb);
  rd_kafka_conf_set_error_cb(c, error_cb);
  return c;
}

void sc_report_kafka_error(const sc_opts *o, const char *what, rd_kafka_resp_err_t e) {
  const char *last = sc_last_kafka_error();
  fprintf(stderr, "sluicectl: %s (Kafka at %s): %s%s%s%s\n", what, o->brokers, rd_kafka_err2str(e),
          *last ? " (last error: " : "", last, *last ? ")" : "");
}

void sc_report_kafka_reason(const sc_opts *o, const char *reason) {
  const char *last = sc_last_kafka_error();
  fprintf(stderr, "sluicectl: %s (Kafka at %s)%s%s%s\n", reason, o->brokers,
          *last ? " (last error: " : "", last, *last ? ")" : "");
}

/* ---- reading a topic ---------------------------------------------------------- */

static int scan(const sc_opts *o, const char *topic, int32_t only_partition, int64_t at,
                sc_msg_cb cb, sc_kmsg_cb kcb, void *arg) {
  rd_kafka_conf_t *c = sc_conf_new(o);
  if (!c) return SC_EXIT_FAIL;
  if (sc_conf_set(c, "group.id", "sluicectl") || sc_conf_set(c, "enable.auto.commit", "false") ||
      sc_conf_set(c, "enable.partition.eof", "true") ||
      sc_conf_set(c, "auto.offset.reset", "earliest")) {
    rd_kafka_conf_destroy(c);
    return SC_EXIT_FAIL;
  }
  char err[512];
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return SC_EXIT_FAIL;
  }
  int rc = SC_EXIT_FAIL;
  int64_t *high = NULL;
  char *done = NULL;
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
  const rd_kafka_metadata_t *md = NULL;
  rd_kafka_resp_err_t e =
      rkt ? rd_kafka_metadata(rk, 0, rkt, &md, o->timeout_ms) : rd_kafka_last_error();
  if (e) {
    char what[300];
    snprintf(what, sizeof what, "cannot read topic %s", topic);
    sc_report_kafka_error(o, what, e);
    md = NULL;
    goto out;
  }
  if (md->topic_cnt != 1 || md->topics[0].err) {
    fprintf(stderr, "sluicectl: cannot read topic %s at %s: %s\n", topic, o->brokers,
            rd_kafka_err2str(md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN));
    goto out;
  }
  int np = md->topics[0].partition_cnt;
  if (only_partition >= np) {
    rc = SC_SCAN_NOT_FOUND;
    goto out;
  }
  high = calloc((size_t)np, sizeof *high);
  done = calloc((size_t)np, 1);
  if (!high || !done) goto out;
  rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new(np);
  int remaining = 0;
  for (int p = 0; p < np; p++) {
    done[p] = 1;
    if (only_partition >= 0 && p != only_partition) continue;
    int64_t lo, hi;
    e = rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, o->timeout_ms);
    if (e) {
      char what[300];
      snprintf(what, sizeof what, "watermarks of %s[%d]", topic, p);
      sc_report_kafka_error(o, what, e);
      rd_kafka_topic_partition_list_destroy(assign);
      goto out;
    }
    high[p] = hi;
    int64_t start = lo;
    if (only_partition >= 0) {
      if (at < lo || at >= hi) {
        rd_kafka_topic_partition_list_destroy(assign);
        rc = SC_SCAN_NOT_FOUND;
        goto out;
      }
      start = at;
      high[p] = at + 1;
    }
    if (high[p] > start) {
      rd_kafka_topic_partition_list_add(assign, topic, p)->offset = start;
      done[p] = 0;
      remaining++;
    }
  }
  e = rd_kafka_assign(rk, assign);
  rd_kafka_topic_partition_list_destroy(assign);
  if (e) {
    sc_report_kafka_error(o, "assigning partitions", e);
    goto out;
  }
  int found = 0, stop = 0, idle_ms = 0;
  while (remaining > 0 && !stop && idle_ms < o->timeout_ms) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
    if (!m) {
      idle_ms += 100;
      continue;
    }
    idle_ms = 0;
    int32_t p = m->partition;
    int in_range = p >= 0 && p < np && !done[p];
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (in_range) {
        done[p] = 1;
        remaining--;
      }
    } else if (m->err) {
      fprintf(stderr, "sluicectl: reading %s: %s\n", topic, rd_kafka_message_errstr(m));
    } else if (in_range) {
      if (m->offset < high[p] && (only_partition < 0 || m->offset == at)) {
        found = 1;
        if (cb ? cb(arg, p, m->offset, m->payload, m->len) : kcb(arg, m)) stop = 1;
      }
      if (m->offset + 1 >= high[p]) {
        done[p] = 1;
        remaining--;
      }
    }
    rd_kafka_message_destroy(m);
  }
  if (remaining > 0 && !stop) {
    fprintf(stderr, "sluicectl: timed out reading %s (%d partitions unfinished)\n", topic,
            remaining);
    goto out;
  }
  rc = only_partition >= 0 && !found ? SC_SCAN_NOT_FOUND : 0;
out:
  free(high);
  free(done);
  if (md) rd_kafka_metadata_destroy(md);
  if (rkt) rd_kafka_topic_destroy(rkt);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return rc;
}

int sc_scan_topic(const sc_opts *o, const char *topic, int32_t only_partition, int64_t at,
                  sc_msg_cb cb, void *arg) {
  return scan(o, topic, only_partition, at, cb, NULL, arg);
}

int sc_scan_topic_msgs(const sc_opts *o, const char *topic, sc_kmsg_cb cb, void *arg) {
  return scan(o, topic, -1, 0, NULL, cb, arg);
}

/* ---- producing ------------------------------------------------------------------ */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  sc_producer *p = opaque;
  sc_delivery *d = m->_private;
  if (d) {
    d->err = m->err;
    d->partition = m->partition;
    d->offset = m->offset;
    d->done = 1;
  }
  p->delivered++;
  if (m->err) p->failed++;
}

int sc_producer_open(const sc_opts *o, sc_producer *p) {
  memset(p, 0, sizeof *p);
  rd_kafka_conf_t *c = sc_conf_new(o);
  if (!c) return -1;
  /* the runtime's producer settings (idempotent, acks=all), with this
   * tool's linger and its --timeout as the message timeout */
  char t[32], err[512];
  snprintf(t, sizeof t, "%d", o->timeout_ms);
  const char *const extra[] = {"linger.ms", "5", "message.timeout.ms", t, NULL};
  if (sl_kafka_conf_durable(c, extra, err, sizeof err)) {
    fprintf(stderr, "sluicectl: kafka producer settings: %s\n", err);
    rd_kafka_conf_destroy(c);
    return -1;
  }
  rd_kafka_conf_set_dr_msg_cb(c, dr_cb);
  rd_kafka_conf_set_opaque(c, p);
  p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
  if (!p->rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return -1;
  }
  return 0;
}

int sc_produce(sc_producer *p, const char *topic, const void *key, size_t klen, const void *val,
               size_t vlen, const char *hdr_name, const char *hdr_val, sc_delivery *d) {
  const char *hdrs[2 * SC_HEADERS_MAX] = {hdr_name, hdr_val};
  return sc_produce_headers(p, topic, key, klen, val, vlen, hdrs, d);
}

int sc_produce_headers(sc_producer *p, const char *topic, const void *key, size_t klen,
                       const void *val, size_t vlen, const char *const hdrs[2 * SC_HEADERS_MAX],
                       sc_delivery *d) {
  int nh = 0;
  while (nh < SC_HEADERS_MAX && hdrs[2 * nh]) nh++;
  memset(d, 0, sizeof *d);
  d->partition = -1;
  d->offset = -1;
  for (int tries = 0;; tries++) {
    rd_kafka_resp_err_t e;
    if (nh) {
      rd_kafka_headers_t *h = rd_kafka_headers_new((size_t)nh);
      for (int i = 0; i < nh; i++)
        if (hdrs[2 * i + 1]) rd_kafka_header_add(h, hdrs[2 * i], -1, hdrs[2 * i + 1], -1);
      e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                            RD_KAFKA_V_VALUE((void *)val, vlen),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                            RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END);
      if (e) rd_kafka_headers_destroy(h);
    } else {
      e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                            RD_KAFKA_V_VALUE((void *)val, vlen),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(d),
                            RD_KAFKA_V_END);
    }
    if (!e) {
      p->produced++;
      return 0;
    }
    /* a full local queue drains as delivery reports are served */
    if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL && tries < 100) {
      rd_kafka_poll(p->rk, 100);
      continue;
    }
    d->err = e;
    d->done = 1;
    return -1;
  }
}

size_t sc_producer_wait(sc_producer *p, int timeout_ms, sc_progress *prog) {
  double deadline = sc_mono_s() + timeout_ms / 1000.0;
  while (p->delivered < p->produced && sc_mono_s() < deadline) {
    rd_kafka_poll(p->rk, 100);
    if (prog) sc_progress_update(prog, p->delivered);
  }
  return p->produced - p->delivered;
}

void sc_producer_close(sc_producer *p) {
  if (!p->rk) return;
  /* whatever is still queued fails now (its delivery report is served here,
   * while the caller's sc_delivery slots are still alive) */
  if (p->delivered < p->produced) {
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    double until = sc_mono_s() + 1;
    while (p->delivered < p->produced && sc_mono_s() < until) rd_kafka_poll(p->rk, 50);
  }
  rd_kafka_destroy(p->rk);
  p->rk = NULL;
}

int sc_topic_exists(const sc_opts *o, rd_kafka_t *rk, const char *topic, int *partitions) {
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
  if (!rkt) {
    fprintf(stderr, "sluicectl: topic %s: %s\n", topic, rd_kafka_err2str(rd_kafka_last_error()));
    return -1;
  }
  const rd_kafka_metadata_t *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, o->timeout_ms);
  int rc;
  if (e) {
    char what[300];
    snprintf(what, sizeof what, "metadata of topic %s", topic);
    sc_report_kafka_error(o, what, e);
    rc = -1;
  } else if (md->topic_cnt != 1 || md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
    rc = 0;
  } else if (md->topics[0].err) {
    fprintf(stderr, "sluicectl: metadata of topic %s: %s\n", topic,
            rd_kafka_err2str(md->topics[0].err));
    rc = -1;
  } else {
    if (partitions) *partitions = md->topics[0].partition_cnt;
    rc = 1;
  }
  if (md) rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  return rc;
}
