/*
 * sl_kafka.c — producer/consumer construction and the libuv bridge for
 * delivery reports (see sl_kafka.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_kafka.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sl_metric *m_kafka_errors;

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *conf_opaque) {
  (void)rk;
  if (m->err) sl_metric_add(m_kafka_errors, 1);
  ((sl_kafka_dr_fn)conf_opaque)(m->err, m->_private);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)rk;
  (void)opaque;
  sl_metric_add(m_kafka_errors, 1);
  sl_log(SL_LOG_WARN, NULL, "kafka: %s: %s", rd_kafka_err2name(err), reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  sl_log(level <= 3 ? SL_LOG_ERROR : level <= 4 ? SL_LOG_WARN : SL_LOG_DEBUG, NULL,
         "rdkafka %s: %s", fac, buf);
}

static int set(rd_kafka_conf_t *c, const char *k, const char *v, char *err, size_t errlen) {
  if (rd_kafka_conf_set(c, k, v, err, errlen) != RD_KAFKA_CONF_OK) return SL_ECONFIG;
  return 0;
}

static rd_kafka_conf_t *base_conf(const char *brokers, const char *client_id, char *err,
                                  size_t errlen) {
  if (!m_kafka_errors)
    m_kafka_errors = sl_metrics_counter("sluice_kafka_errors_total", NULL,
                                        "Kafka client errors and failed deliveries");
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (!c) return NULL;
  if (set(c, "bootstrap.servers", brokers, err, errlen) ||
      set(c, "client.id", client_id ? client_id : "sluice", err, errlen)) {
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  rd_kafka_conf_set_error_cb(c, on_error);
  rd_kafka_conf_set_log_cb(c, on_log);
  return c;
}

int sl_kafka_producer_new(rd_kafka_t **out, const char *brokers, const char *client_id,
                          sl_kafka_dr_fn dr, const char *const *extra, char *err,
                          size_t errlen) {
  if (!out || !brokers || !dr) return SL_EINVAL;
  rd_kafka_conf_t *c = base_conf(brokers, client_id, err, errlen);
  if (!c) return SL_ECONFIG;
  if (set(c, "enable.idempotence", "true", err, errlen) ||
      set(c, "acks", "all", err, errlen) || set(c, "linger.ms", "2", err, errlen) ||
      set(c, "message.timeout.ms", "30000", err, errlen)) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
    if (set(c, extra[i], extra[i + 1], err, errlen)) {
      rd_kafka_conf_destroy(c);
      return SL_ECONFIG;
    }
  rd_kafka_conf_set_dr_msg_cb(c, on_dr);
  rd_kafka_conf_set_opaque(c, (void *)dr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, errlen);
  if (!rk) {
    rd_kafka_conf_destroy(c);
    return SL_EKAFKA;
  }
  *out = rk;
  return 0;
}

int sl_kafka_consumer_new(rd_kafka_t **out, const char *brokers, const char *group_id,
                          const char *client_id, char *err, size_t errlen,
                          void (*rebalance)(rd_kafka_t *, rd_kafka_resp_err_t,
                                            rd_kafka_topic_partition_list_t *, void *),
                          void (*committed)(rd_kafka_t *, rd_kafka_resp_err_t,
                                            rd_kafka_topic_partition_list_t *, void *),
                          int (*stats)(rd_kafka_t *, char *, size_t, void *), void *opaque) {
  if (!out || !brokers || !group_id) return SL_EINVAL;
  rd_kafka_conf_t *c = base_conf(brokers, client_id, err, errlen);
  if (!c) return SL_ECONFIG;
  if (set(c, "group.id", group_id, err, errlen) ||
      set(c, "enable.auto.commit", "false", err, errlen) ||
      set(c, "enable.auto.offset.store", "false", err, errlen) ||
      set(c, "auto.offset.reset", "earliest", err, errlen) ||
      set(c, "max.poll.interval.ms", "600000", err, errlen)) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  /* bounded prefetch: memory follows in-flight work, not the backlog;
   * a member that dies (SIGKILL) is replaced within ~10 s */
  if (set(c, "queued.max.messages.kbytes", "8192", err, errlen) ||
      set(c, "session.timeout.ms", "10000", err, errlen) ||
      set(c, "heartbeat.interval.ms", "2000", err, errlen)) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  if (rebalance) rd_kafka_conf_set_rebalance_cb(c, rebalance);
  if (committed) rd_kafka_conf_set_offset_commit_cb(c, committed);
  if (stats) {
    if (set(c, "statistics.interval.ms", "5000", err, errlen)) {
      rd_kafka_conf_destroy(c);
      return SL_ECONFIG;
    }
    rd_kafka_conf_set_stats_cb(c, stats);
  }
  if (opaque) rd_kafka_conf_set_opaque(c, opaque);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, errlen);
  if (!rk) {
    rd_kafka_conf_destroy(c);
    return SL_EKAFKA;
  }
  rd_kafka_poll_set_consumer(rk);
  *out = rk;
  return 0;
}

struct sl_kafka_uv {
  uv_poll_t poll;
  rd_kafka_t *rk;
  int consumer;
  void (*ready)(void *ud);
  void *ud;
  int fds[2];
};

static void on_readable(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  sl_kafka_uv *ku = h->data;
  char buf[256];
  while (read(ku->fds[0], buf, sizeof buf) > 0) {
  }
  if (ku->ready)
    ku->ready(ku->ud);
  else
    rd_kafka_poll(ku->rk, 0);
}

static rd_kafka_queue_t *queue_of(sl_kafka_uv *ku) {
  return ku->consumer ? rd_kafka_queue_get_consumer(ku->rk) : rd_kafka_queue_get_main(ku->rk);
}

static int attach(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop, int consumer,
                  void (*ready)(void *), void *ud);

int sl_kafka_uv_attach(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop) {
  return attach(out, rk, loop, 0, NULL, NULL);
}

int sl_kafka_uv_attach_consumer(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop,
                                void (*ready)(void *ud), void *ud) {
  return attach(out, rk, loop, 1, ready, ud);
}

static int attach(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop, int consumer,
                  void (*ready)(void *), void *ud) {
  sl_kafka_uv *ku = calloc(1, sizeof *ku);
  if (!ku) return SL_ENOMEM;
  ku->consumer = consumer;
  ku->ready = ready;
  ku->ud = ud;
  if (pipe(ku->fds) != 0) {
    free(ku);
    return SL_EKAFKA;
  }
  fcntl(ku->fds[0], F_SETFL, O_NONBLOCK);
  fcntl(ku->fds[1], F_SETFL, O_NONBLOCK);
  ku->rk = rk;
  rd_kafka_queue_t *q = queue_of(ku);
  rd_kafka_queue_io_event_enable(q, ku->fds[1], "1", 1);
  rd_kafka_queue_destroy(q);
  uv_poll_init(loop, &ku->poll, ku->fds[0]);
  ku->poll.data = ku;
  uv_poll_start(&ku->poll, UV_READABLE, on_readable);
  *out = ku;
  return 0;
}

static void on_poll_closed(uv_handle_t *h) {
  sl_kafka_uv *ku = h->data;
  close(ku->fds[0]);
  close(ku->fds[1]);
  free(ku);
}

void sl_kafka_uv_detach(sl_kafka_uv *ku) {
  if (!ku) return;
  rd_kafka_queue_t *q = queue_of(ku);
  rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
  rd_kafka_queue_destroy(q);
  uv_close((uv_handle_t *)&ku->poll, on_poll_closed);
}
