/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_kafka.c — producer/consumer construction, the libuv bridge for
 * delivery reports, and a consumer group's lag as Kafka has it (see
 * sl_kafka.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_kafka.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static sl_metric *m_kafka_errors;

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *conf_opaque) {
  (void)rk;
  (void)conf_opaque;
  if (m->err) sl_metric_add(m_kafka_errors, 1);
  sl_kafka_ticket *t = m->_private;
  if (!t) return; /* produced without a destination: nobody waits */
  sl_kafka_sent_fn cb = t->cb;
  void *ctx = t->ctx;
  if (t->owned) free(t);
  cb(m->err, ctx);
}

rd_kafka_resp_err_t sl_kafka_send(rd_kafka_t *rk, const char *topic, const void *key, size_t keylen,
                                  void *value, size_t len, int msgflags, sl_kafka_sent_fn cb,
                                  void *ctx) {
  return sl_kafka_send_traced(rk, topic, key, keylen, value, len, msgflags, NULL, cb, ctx);
}

typedef struct {
  atomic_int done;
  rd_kafka_resp_err_t err;
} sync_wait;

static void on_waited(rd_kafka_resp_err_t err, void *ctx) {
  sync_wait *w = ctx;
  w->err = err;
  atomic_store(&w->done, 1);
}

rd_kafka_resp_err_t sl_kafka_send_wait(rd_kafka_t *rk, const char *topic, const void *key,
                                       size_t keylen, const void *val, size_t len) {
  sync_wait w = {0};
  rd_kafka_resp_err_t e =
      sl_kafka_send(rk, topic, key, keylen, (void *)val, len, RD_KAFKA_MSG_F_COPY, on_waited, &w);
  if (e) return e;
  while (!atomic_load(&w.done)) rd_kafka_poll(rk, 50);
  return w.err;
}

rd_kafka_resp_err_t sl_kafka_send_traced(rd_kafka_t *rk, const char *topic, const void *key,
                                         size_t keylen, void *value, size_t len, int msgflags,
                                         const char *traceparent, sl_kafka_sent_fn cb, void *ctx) {
  if (!rk || !topic || !cb) return RD_KAFKA_RESP_ERR__INVALID_ARG;
  sl_kafka_ticket *t = malloc(sizeof *t);
  if (!t) return RD_KAFKA_RESP_ERR__QUEUE_FULL;
  *t = (sl_kafka_ticket){cb, ctx, 1};
  rd_kafka_headers_t *hs = NULL;
  if (traceparent && *traceparent) {
    hs = rd_kafka_headers_new(1);
    rd_kafka_header_add(hs, "traceparent", -1, traceparent, -1);
  }
  rd_kafka_resp_err_t e =
      hs ? rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? keylen : 0),
                             RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(msgflags),
                             RD_KAFKA_V_HEADERS(hs), RD_KAFKA_V_OPAQUE(t), RD_KAFKA_V_END)
         : rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? keylen : 0),
                             RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(msgflags),
                             RD_KAFKA_V_OPAQUE(t), RD_KAFKA_V_END);
  if (e) {
    if (hs) rd_kafka_headers_destroy(hs);
    free(t);
  }
  return e;
}

int sl_kafka_fatal(rd_kafka_t *rk, const char *who) {
  static rd_kafka_t *said; /* once per producer: every later report says the same */
  char why[512];
  if (!rk || !rd_kafka_fatal_error(rk, why, sizeof why)) return 0;
  if (__atomic_exchange_n(&said, rk, __ATOMIC_SEQ_CST) != rk)
    sl_log(SL_LOG_ERROR, NULL, "kafka producer fatal error (noticed by %s): %s",
           who ? who : "a sender", why);
  return 1;
}

int sl_kafka_renew_due(sl_kafka_renewals *r, int64_t now_ms) {
  if (!r) return 0;
  if (r->n == 0 || now_ms - r->window_start_ms >= SL_KAFKA_RENEW_WINDOW_MS) {
    r->window_start_ms = now_ms;
    r->n = 0;
  }
  if (r->n >= SL_KAFKA_RENEW_MAX) return 0;
  r->n++;
  return 1;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)rk;
  (void)opaque;
  sl_metric_add(m_kafka_errors, 1);
  sl_log(SL_LOG_WARN, NULL, "kafka: %s: %s", rd_kafka_err2name(err), reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  sl_log(level <= 3   ? SL_LOG_ERROR
         : level <= 4 ? SL_LOG_WARN
                      : SL_LOG_DEBUG,
         NULL, "rdkafka %s: %s", fac, buf);
}

static int set(rd_kafka_conf_t *c, const char *k, const char *v, char *err, size_t errlen) {
  if (rd_kafka_conf_set(c, k, v, err, errlen) != RD_KAFKA_CONF_OK) return SL_ECONFIG;
  return 0;
}

/* ---- security ------------------------------------------------------------ */

#define SEC_MAX 12
static struct {
  int n;
  int enabled;
  char *kv[SEC_MAX][2];
} sec;

void sl_kafka_security_reset(void) {
  for (int i = 0; i < sec.n; i++) {
    free(sec.kv[i][0]);
    if (sec.kv[i][1]) memset(sec.kv[i][1], 0, strlen(sec.kv[i][1]));
    free(sec.kv[i][1]);
  }
  memset(&sec, 0, sizeof sec);
}

int sl_kafka_security_enabled(void) { return sec.enabled; }

static int set_(const char *s) { return s && *s; }

static int readable(const char *key, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s %s: %s", key, path, strerror(errno));
    return 0;
  }
  fclose(f);
  return 1;
}

static int push(const char *k, const char *v) {
  if (sec.n >= SEC_MAX) return SL_ENOMEM;
  sec.kv[sec.n][0] = strdup(k);
  sec.kv[sec.n][1] = strdup(v);
  sec.n++;
  return sec.kv[sec.n - 1][0] && sec.kv[sec.n - 1][1] ? 0 : SL_ENOMEM;
}

int sl_kafka_security_set(const sl_kafka_security *s, char *err, size_t errlen) {
  if (!s) return SL_EINVAL;
  const char *proto = set_(s->protocol) ? s->protocol : "plaintext";
  static const char *protos[] = {"plaintext", "ssl", "sasl_plaintext", "sasl_ssl"};
  int pi = -1;
  for (int i = 0; i < 4; i++)
    if (strcasecmp(proto, protos[i]) == 0) pi = i;
  if (pi < 0) {
    snprintf(err, errlen,
             "kafka.security_protocol must be plaintext, ssl, sasl_plaintext or sasl_ssl, got "
             "\"%s\"",
             proto);
    return SL_ECONFIG;
  }
  int sasl = pi >= 2, tls = pi == 1 || pi == 3;
  const char *mech = set_(s->mechanism) ? s->mechanism : "PLAIN";
  if (sasl) {
    if (strcmp(mech, "PLAIN") != 0 && strcmp(mech, "SCRAM-SHA-256") != 0 &&
        strcmp(mech, "SCRAM-SHA-512") != 0) {
      snprintf(err, errlen,
               "kafka.sasl_mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got \"%s\"",
               mech);
      return SL_ECONFIG;
    }
    if (!set_(s->username) || !set_(s->password)) {
      snprintf(err, errlen,
               "kafka.security_protocol=%s needs kafka.sasl_username and "
               "kafka.sasl_password (%s is empty)",
               protos[pi], set_(s->username) ? "kafka.sasl_password" : "kafka.sasl_username");
      return SL_ECONFIG;
    }
  } else if (set_(s->username) || set_(s->password)) {
    snprintf(err, errlen,
             "kafka.sasl_username/kafka.sasl_password are set but "
             "kafka.security_protocol=%s does not use SASL (sasl_plaintext or sasl_ssl)",
             protos[pi]);
    return SL_ECONFIG;
  }
  if (!tls && (set_(s->ca_file) || set_(s->cert_file) || set_(s->key_file))) {
    snprintf(err, errlen,
             "kafka.ssl_* files are set but kafka.security_protocol=%s does not "
             "use TLS (ssl or sasl_ssl)",
             protos[pi]);
    return SL_ECONFIG;
  }
  if (set_(s->cert_file) != set_(s->key_file)) {
    snprintf(err, errlen, "kafka.ssl_cert_file and kafka.ssl_key_file go together");
    return SL_ECONFIG;
  }
  if ((set_(s->ca_file) && !readable("kafka.ssl_ca_file", s->ca_file, err, errlen)) ||
      (set_(s->cert_file) && !readable("kafka.ssl_cert_file", s->cert_file, err, errlen)) ||
      (set_(s->key_file) && !readable("kafka.ssl_key_file", s->key_file, err, errlen)))
    return SL_ECONFIG;
  sl_kafka_security_reset();
  int rc = push("security.protocol", protos[pi]);
  if (rc == 0 && sasl) {
    rc = push("sasl.mechanisms", mech);
    if (rc == 0) rc = push("sasl.username", s->username);
    if (rc == 0) rc = push("sasl.password", s->password);
  }
  if (rc == 0 && tls) {
    rc = push("enable.ssl.certificate.verification", "true");
    if (rc == 0)
      rc = push("ssl.endpoint.identification.algorithm", s->verify_hostname ? "https" : "none");
    if (rc == 0 && set_(s->ca_file)) rc = push("ssl.ca.location", s->ca_file);
    if (rc == 0 && set_(s->cert_file)) rc = push("ssl.certificate.location", s->cert_file);
    if (rc == 0 && set_(s->key_file)) rc = push("ssl.key.location", s->key_file);
    if (rc == 0 && set_(s->key_password)) rc = push("ssl.key.password", s->key_password);
  }
  if (rc) {
    sl_kafka_security_reset();
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  /* librdkafka's own checks (SASL/SSL support built in, file formats) */
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  rc = sl_kafka_conf_secure(c, err, errlen);
  rd_kafka_conf_destroy(c);
  if (rc) {
    sl_kafka_security_reset();
    return rc;
  }
  sec.enabled = pi != 0;
  return 0;
}

int sl_kafka_conf_secure(rd_kafka_conf_t *c, char *err, size_t errlen) {
  if (!c) return SL_EINVAL;
  for (int i = 0; i < sec.n; i++) {
    char why[256];
    if (rd_kafka_conf_set(c, sec.kv[i][0], sec.kv[i][1], why, sizeof why) != RD_KAFKA_CONF_OK) {
      snprintf(err, errlen, "kafka %s: %s", sec.kv[i][0], why);
      return SL_ECONFIG;
    }
  }
  return 0;
}

typedef struct {
  int err;
  char reason[512];
} probe_state;

static void on_probe_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)rk;
  probe_state *p = opaque;
  /* a refusal outranks "all brokers down", which follows it */
  if (p->err == RD_KAFKA_RESP_ERR__AUTHENTICATION || p->err == RD_KAFKA_RESP_ERR__SSL) return;
  p->err = err;
  snprintf(p->reason, sizeof p->reason, "%s", reason);
}

int sl_kafka_check(const char *brokers, int timeout_ms, char *err, size_t errlen) {
  probe_state ps = {0, ""};
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  char why[512];
  if (rd_kafka_conf_set(c, "bootstrap.servers", brokers, why, sizeof why) != RD_KAFKA_CONF_OK ||
      rd_kafka_conf_set(c, "client.id", "sluice-check", why, sizeof why) != RD_KAFKA_CONF_OK ||
      sl_kafka_conf_secure(c, why, sizeof why) != 0) {
    rd_kafka_conf_destroy(c);
    snprintf(err, errlen, "kafka: %s", why);
    return SL_ECONFIG;
  }
  rd_kafka_conf_set_error_cb(c, on_probe_error);
  rd_kafka_conf_set_log_cb(c, on_log);
  rd_kafka_conf_set_opaque(c, &ps);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, why, sizeof why);
  if (!rk) {
    rd_kafka_conf_destroy(c);
    snprintf(err, errlen, "kafka: %s", why);
    return SL_ECONFIG;
  }
  int rc = SL_EUNAVAIL;
  for (int waited = 0; waited < timeout_ms; waited += 250) {
    /* nobody answers: no need to wait the whole timeout (a refusal, which
     * comes before "all brokers down", has had its chance) */
    if (ps.err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && waited + 1000 < timeout_ms)
      waited = timeout_ms - 1000;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 0, NULL, &md, 250) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_metadata_destroy(md);
      rc = 0;
      break;
    }
    rd_kafka_poll(rk, 0);
    if (ps.err == RD_KAFKA_RESP_ERR__AUTHENTICATION || ps.err == RD_KAFKA_RESP_ERR__SSL) {
      rc = SL_ECONFIG;
      break;
    }
  }
  if (rc)
    snprintf(err, errlen, "kafka %s: %s", brokers, ps.reason[0] ? ps.reason : "no broker answered");
  rd_kafka_destroy(rk);
  return rc;
}

/* ---- clients --------------------------------------------------------------- */

static int64_t metadata_refresh_ms; /* 0: librdkafka's default */

int sl_kafka_metadata_refresh_set(int64_t ms) {
  if (ms < 0 || ms > 3600000) return SL_EINVAL;
  metadata_refresh_ms = ms;
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
      set(c, "client.id", client_id ? client_id : "sluice", err, errlen) ||
      sl_kafka_conf_secure(c, err, errlen)) {
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  if (metadata_refresh_ms > 0) {
    char v[24];
    snprintf(v, sizeof v, "%lld", (long long)metadata_refresh_ms);
    if (set(c, "topic.metadata.refresh.interval.ms", v, err, errlen)) {
      rd_kafka_conf_destroy(c);
      return NULL;
    }
  }
  rd_kafka_conf_set_error_cb(c, on_error);
  rd_kafka_conf_set_log_cb(c, on_log);
  return c;
}

static char *trim(char *a) {
  while (*a == ' ' || *a == '\t') a++;
  char *e = a + strlen(a);
  while (e > a && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
  return a;
}

/* what each kind of client may not be given: the delivery guarantee rests
 * on them, or a key of Sluice's own sets them */
static const char *const producer_guarded[] = {"enable.idempotence",
                                               "acks",
                                               "request.required.acks",
                                               "transactional.id",
                                               "dr_cb",
                                               "dr_msg_cb",
                                               "opaque",
                                               NULL};
static const char *const consumer_guarded[] = {"group.id",
                                               "enable.auto.commit",
                                               "enable.auto.offset.store",
                                               "auto.offset.reset",
                                               "max.poll.interval.ms",
                                               "queued.max.messages.kbytes",
                                               "partition.assignment.strategy",
                                               "session.timeout.ms",
                                               "heartbeat.interval.ms",
                                               "rebalance_cb",
                                               "offset_commit_cb",
                                               "opaque",
                                               "enable.partition.eof",
                                               "fetch.min.bytes",
                                               "fetch.wait.max.ms",
                                               NULL};

int sl_kafka_props_split(sl_kafka_props_kind kind, const char *spec, char *buf, size_t buflen,
                         const char **kv, size_t maxpairs, char *err, size_t errlen) {
  const char *const *guarded =
      kind == SL_KAFKA_CONSUMER_PROPS ? consumer_guarded : producer_guarded;
  const char *what =
      kind == SL_KAFKA_CONSUMER_PROPS ? "kafka.consumer_properties" : "kafka.producer_properties";
  if (!buf || !kv || maxpairs == 0) return SL_EINVAL;
  kv[0] = NULL;
  if (!spec || !*spec) return 0;
  if (strlen(spec) >= buflen) {
    snprintf(err, errlen, "%s is longer than %zu bytes", what, buflen - 1);
    return SL_ECONFIG;
  }
  memcpy(buf, spec, strlen(spec) + 1);
  rd_kafka_conf_t *probe = rd_kafka_conf_new();
  if (!probe) return SL_ENOMEM;
  size_t n = 0;
  int rc = 0;
  char *save = NULL;
  for (char *it = strtok_r(buf, ",", &save); it && rc == 0; it = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(it, '=');
    if (!eq) {
      if (*trim(it) == '\0') continue;
      snprintf(err, errlen, "%s: \"%s\" is not name=value", what, trim(it));
      rc = SL_ECONFIG;
      break;
    }
    *eq = '\0';
    char *k = trim(it), *v = trim(eq + 1);
    for (size_t i = 0; guarded[i]; i++)
      if (strcmp(k, guarded[i]) == 0) {
        snprintf(err, errlen,
                 "%s may not set %s: Sluice's delivery guarantee or a key of its own "
                 "sets it",
                 what, k);
        rc = SL_ECONFIG;
      }
    if (rc) break;
    char why[256];
    if (rd_kafka_conf_set(probe, k, v, why, sizeof why) != RD_KAFKA_CONF_OK) {
      snprintf(err, errlen, "%s: %s", what, why);
      rc = SL_ECONFIG;
      break;
    }
    if (n >= maxpairs) {
      snprintf(err, errlen, "%s has more than %zu properties", what, maxpairs);
      rc = SL_ECONFIG;
      break;
    }
    kv[2 * n] = k;
    kv[2 * n + 1] = v;
    n++;
    kv[2 * n] = NULL;
  }
  rd_kafka_conf_destroy(probe);
  if (rc) kv[0] = NULL;
  return rc;
}

/* max.in.flight.requests.per.connection=1: librdkafka 2.0.2 (Debian 12's)
 * lets the idempotent producer send a partition's next batch to the new
 * leader while an earlier one that the old leader refused
 * (NOT_LEADER_FOR_PARTITION, not persisted) waits for its retry; the
 * broker answers OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka raises a fatal
 * error ("sequence desynchronization", fixed by 2.3.0, PR #4438 and its
 * family), which stops the stage. Seen in test_kafka_nodes when a killed
 * broker came back and took its leaderships back; with one request in
 * flight per broker a partition has one batch in flight and the retry goes
 * first. A request still carries every partition's batch for that broker. */
int sl_kafka_conf_durable(rd_kafka_conf_t *c, const char *const *extra, char *err, size_t errlen) {
  if (!c) return SL_EINVAL;
  if (set(c, "enable.idempotence", "true", err, errlen) || set(c, "acks", "all", err, errlen) ||
      set(c, "linger.ms", "2", err, errlen) || set(c, "message.timeout.ms", "30000", err, errlen) ||
      set(c, "max.in.flight.requests.per.connection", "1", err, errlen))
    return SL_ECONFIG;
  for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
    if (set(c, extra[i], extra[i + 1], err, errlen)) return SL_ECONFIG;
  return 0;
}

int sl_kafka_producer_new(rd_kafka_t **out, const char *brokers, const char *client_id,
                          const char *const *extra, char *err, size_t errlen) {
  if (!out || !brokers) return SL_EINVAL;
  rd_kafka_conf_t *c = base_conf(brokers, client_id, err, errlen);
  if (!c) return SL_ECONFIG;
  if (sl_kafka_conf_durable(c, extra, err, errlen)) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  rd_kafka_conf_set_dr_msg_cb(c, on_dr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, errlen);
  if (!rk) {
    rd_kafka_conf_destroy(c);
    return SL_EKAFKA;
  }
  *out = rk;
  return 0;
}

int sl_kafka_prefetch(rd_kafka_t *rk, const char *const *topics, size_t n,
                      rd_kafka_topic_t **held) {
  if (!rk || ((!topics || !held) && n)) return SL_EINVAL;
  for (size_t i = 0; i < n; i++) held[i] = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!topics[i] || !topics[i][0]) {
      sl_kafka_prefetch_release(held, n);
      return SL_EINVAL;
    }
    /* unlike a produce by name, a new topic handle sends a leader query */
    held[i] = rd_kafka_topic_new(rk, topics[i], NULL);
    if (!held[i]) {
      sl_kafka_prefetch_release(held, n);
      return SL_ENOMEM;
    }
  }
  return 0;
}

void sl_kafka_prefetch_release(rd_kafka_topic_t **held, size_t n) {
  for (size_t i = 0; held && i < n; i++) {
    if (held[i]) rd_kafka_topic_destroy(held[i]);
    held[i] = NULL;
  }
}

int sl_kafka_group_reader_new(rd_kafka_t **out, const char *brokers, const char *group,
                              const char *client_id, char *err, size_t errlen) {
  if (!out || !brokers || !group) return SL_EINVAL;
  rd_kafka_conf_t *c = base_conf(brokers, client_id, err, errlen);
  if (!c) return SL_ECONFIG;
  /* sl_kafka_group_oldest needs one message per partition: fetch little */
  if (set(c, "group.id", group, err, errlen) ||
      set(c, "enable.auto.commit", "false", err, errlen) ||
      set(c, "enable.auto.offset.store", "false", err, errlen) ||
      set(c, "queued.max.messages.kbytes", "1024", err, errlen) ||
      set(c, "fetch.message.max.bytes", "65536", err, errlen)) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, errlen);
  if (!rk) {
    rd_kafka_conf_destroy(c);
    return SL_EKAFKA;
  }
  *out = rk;
  return 0;
}

void sl_kafka_group_reader_free(rd_kafka_t *rk) {
  if (rk) rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

/* ---- a group's lag ---------------------------------------------------------- */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(int64_t deadline) {
  int64_t l = deadline - mono_ms();
  return l > 0 ? (int)l : 0;
}

/* One ListOffsets round for every partition of parts: at = -1 (the high
 * watermark) or -2 (the low one), answered in lo or hi of out. */
static int watermarks(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *parts, int64_t at,
                      int64_t deadline, sl_kafka_lag *out, char *err, size_t errlen) {
  const char *which = at == RD_KAFKA_OFFSET_END ? "high" : "low";
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(parts);
  if (!l) return SL_ENOMEM;
  for (int i = 0; i < l->cnt; i++) l->elems[i].offset = at;
  rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, l, left_ms(deadline));
  for (int i = 0; !e && i < l->cnt; i++) {
    if (l->elems[i].err) {
      snprintf(err, errlen, "%s watermark of %s [%d]: %s", which, l->elems[i].topic,
               (int)l->elems[i].partition, rd_kafka_err2str(l->elems[i].err));
      rd_kafka_topic_partition_list_destroy(l);
      return SL_EKAFKA;
    }
    int64_t *w = at == RD_KAFKA_OFFSET_END ? &out[i].hi : &out[i].lo;
    *w = l->elems[i].offset;
  }
  rd_kafka_topic_partition_list_destroy(l);
  if (e) {
    snprintf(err, errlen, "%s watermarks: %s", which, rd_kafka_err2str(e));
    return e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EKAFKA;
  }
  return 0;
}

/* The committed offsets of rk's group on parts, from the group's
 * coordinator (OffsetFetch): rd_kafka_committed waits for the coordinator
 * and retries until the deadline. */
static int committed_offsets(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *parts,
                             int64_t deadline, sl_kafka_lag *out, char *err, size_t errlen) {
  char group[160] = "?";
  size_t glen = sizeof group;
  if (rd_kafka_conf_get(rd_kafka_conf(rk), "group.id", group, &glen) != RD_KAFKA_CONF_OK)
    snprintf(group, sizeof group, "?");
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(parts);
  if (!l) return SL_ENOMEM;
  rd_kafka_resp_err_t e = rd_kafka_committed(rk, l, left_ms(deadline));
  int rc = 0;
  if (e) {
    snprintf(err, errlen, "committed offsets of group %s: %s", group, rd_kafka_err2str(e));
    rc = e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EKAFKA;
  }
  for (int i = 0; rc == 0 && i < l->cnt; i++) {
    if (l->elems[i].err) {
      snprintf(err, errlen, "committed offset of group %s on %s [%d]: %s", group, l->elems[i].topic,
               (int)l->elems[i].partition, rd_kafka_err2str(l->elems[i].err));
      rc = SL_EKAFKA;
      break;
    }
    out[i].committed = l->elems[i].offset >= 0 ? l->elems[i].offset : -1;
  }
  rd_kafka_topic_partition_list_destroy(l);
  return rc;
}

int sl_kafka_group_lag(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *parts, int timeout_ms,
                       sl_kafka_lag *out, char *err, size_t errlen) {
  if (!rk || !parts || !out) return SL_EINVAL;
  if (parts->cnt == 0) return 0;
  int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  /* committed first: a message committed between the two reads can only
   * make the lag look one too high, never negative */
  int rc = committed_offsets(rk, parts, deadline, out, err, errlen);
  if (rc == 0) rc = watermarks(rk, parts, RD_KAFKA_OFFSET_END, deadline, out, err, errlen);
  if (rc == 0) rc = watermarks(rk, parts, RD_KAFKA_OFFSET_BEGINNING, deadline, out, err, errlen);
  for (int i = 0; rc == 0 && i < parts->cnt; i++) {
    int64_t from = out[i].committed >= out[i].lo ? out[i].committed : out[i].lo;
    out[i].lag = out[i].hi > from ? out[i].hi - from : 0;
  }
  return rc;
}

int sl_kafka_group_oldest(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *oldest_ms,
                          char *err, size_t errlen) {
  if (!rk || !topic || !oldest_ms) return SL_EINVAL;
  *oldest_ms = -1;
  int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
  if (!rkt) return SL_ENOMEM;
  const struct rd_kafka_metadata *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, left_ms(deadline));
  rd_kafka_topic_destroy(rkt);
  if (e || md->topic_cnt != 1 || md->topics[0].err) {
    snprintf(err, errlen, "partitions of %s: %s", topic,
             rd_kafka_err2str(e                    ? e
                              : md->topic_cnt == 1 ? md->topics[0].err
                                                   : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    if (md) rd_kafka_metadata_destroy(md);
    return e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EKAFKA;
  }
  int n = md->topics[0].partition_cnt;
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(n > 0 ? n : 1);
  sl_kafka_lag *lag = calloc((size_t)(n > 0 ? n : 1), sizeof *lag);
  int64_t *first = malloc((size_t)(n > 0 ? n : 1) * sizeof *first);
  int rc = parts && lag && first ? 0 : SL_ENOMEM;
  for (int i = 0; rc == 0 && i < n; i++)
    rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id);
  rd_kafka_metadata_destroy(md);
  if (rc == 0) rc = sl_kafka_group_lag(rk, parts, left_ms(deadline), lag, err, errlen);
  /* read the first message not committed on every partition that has one */
  rd_kafka_topic_partition_list_t *at =
      rc == 0 ? rd_kafka_topic_partition_list_new(n > 0 ? n : 1) : NULL;
  if (rc == 0 && !at) rc = SL_ENOMEM;
  for (int i = 0; rc == 0 && i < n; i++) {
    first[i] = -1;
    if (lag[i].lag <= 0) continue;
    rd_kafka_topic_partition_list_add(at, topic, parts->elems[i].partition)->offset =
        lag[i].committed >= lag[i].lo ? lag[i].committed : lag[i].lo;
  }
  int waiting = at ? at->cnt : 0;
  if (waiting && (e = rd_kafka_assign(rk, at)) != 0) {
    snprintf(err, errlen, "reading %s: %s", topic, rd_kafka_err2str(e));
    rc = SL_EKAFKA;
    waiting = 0;
  }
  while (rc == 0 && waiting > 0) {
    int left = left_ms(deadline);
    if (left <= 0) {
      snprintf(err, errlen, "reading %s: %d partition(s) not answered in time", topic, waiting);
      rc = SL_ETIMEDOUT;
      break;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, left);
    if (!m) continue;
    if (!m->err && m->rkt && strcmp(rd_kafka_topic_name(m->rkt), topic) == 0) {
      for (int i = 0; i < n; i++) {
        if (parts->elems[i].partition != m->partition || first[i] >= 0) continue;
        int64_t ts = rd_kafka_message_timestamp(m, NULL);
        first[i] = ts >= 0 ? ts : 0; /* no timestamp: as old as can be */
        waiting--;
      }
    }
    rd_kafka_message_destroy(m);
  }
  if (at && at->cnt) rd_kafka_assign(rk, NULL);
  for (int i = 0; rc == 0 && i < n; i++)
    if (first[i] >= 0 && (*oldest_ms < 0 || first[i] < *oldest_ms)) *oldest_ms = first[i];
  if (at) rd_kafka_topic_partition_list_destroy(at);
  if (parts) rd_kafka_topic_partition_list_destroy(parts);
  free(lag);
  free(first);
  return rc;
}

int64_t sl_kafka_message_timeout_for(int64_t answer_within_ms) {
  int64_t t = answer_within_ms - 1000;
  return t >= 100 ? t : 100;
}

int sl_kafka_consumer_new(
    rd_kafka_t **out, const char *brokers, const char *group_id, const char *client_id,
    const sl_kafka_group_opts *group, char *err, size_t errlen,
    void (*rebalance)(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *, void *),
    void (*committed)(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *, void *),
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
   * a member that dies (SIGKILL) loses its partitions after the session
   * timeout. socket.timeout.ms 10 s, not librdkafka's 60: a leader that
   * stops answering without closing its connections (a hung or SIGSTOPped
   * broker) holds its partitions' fetches until the request times out, and
   * only then does the consumer look up their new leaders; at 60 s,
   * materialize recorded submissions a minute late and ingest dead-lettered
   * their answers as unknown (test_kafka_nodes) */
  sl_kafka_group_opts g = {"roundrobin", 10000, 2000, 0, 0, NULL};
  if (group && group->assignment && group->assignment[0]) g.assignment = group->assignment;
  if (group && group->session_timeout_ms > 0) g.session_timeout_ms = group->session_timeout_ms;
  if (group && group->heartbeat_ms > 0) g.heartbeat_ms = group->heartbeat_ms;
  char st[32], hb[32], fmin[32], fwait[32];
  snprintf(st, sizeof st, "%lld", (long long)g.session_timeout_ms);
  snprintf(hb, sizeof hb, "%lld", (long long)g.heartbeat_ms);
  snprintf(fmin, sizeof fmin, "%lld", (long long)(group ? group->fetch_min_bytes : 0));
  snprintf(fwait, sizeof fwait, "%lld", (long long)(group ? group->fetch_wait_ms : 0));
  if (set(c, "queued.max.messages.kbytes", "8192", err, errlen) ||
      set(c, "socket.timeout.ms", "10000", err, errlen) ||
      set(c, "partition.assignment.strategy", g.assignment, err, errlen) ||
      set(c, "session.timeout.ms", st, err, errlen) ||
      set(c, "heartbeat.interval.ms", hb, err, errlen) ||
      (group && group->fetch_min_bytes > 0 && set(c, "fetch.min.bytes", fmin, err, errlen)) ||
      (group && group->fetch_wait_ms > 0 && set(c, "fetch.wait.max.ms", fwait, err, errlen))) {
    rd_kafka_conf_destroy(c);
    return SL_ECONFIG;
  }
  for (size_t i = 0; group && group->extra && group->extra[i] && group->extra[i + 1]; i += 2)
    if (set(c, group->extra[i], group->extra[i + 1], err, errlen)) {
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
  /* librdkafka writes its wake-up only when the queue goes from empty to
   * one op: events queued before this point (a refused broker's errors, on a
   * busy machine) would never be served, nor anything queued after them.
   * One wake-up of our own makes the first turn of the loop serve them. */
  if (write(ku->fds[1], "1", 1) != 1) {
    /* the pipe is new and empty: cannot be full */
  }
  uv_poll_init(loop, &ku->poll, ku->fds[0]);
  ku->poll.data = ku;
  uv_poll_start(&ku->poll, UV_READABLE, on_readable);
  *out = ku;
  return 0;
}

int sl_kafka_producer_renew(rd_kafka_t **rk, sl_kafka_uv **ku, uv_loop_t *loop, const char *brokers,
                            const char *client_id, const char *const *extra, rd_kafka_t **retired,
                            char *err, size_t errlen) {
  if (!rk || !*rk || (ku && !loop)) return SL_EINVAL;
  static sl_metric *m_renewals;
  if (!m_renewals)
    m_renewals = sl_metrics_counter("sluice_kafka_producer_renewals_total", NULL,
                                    "producers replaced after a fatal error (sl_kafka_fatal)");
  rd_kafka_t *fresh = NULL, *old = *rk;
  int rc = sl_kafka_producer_new(&fresh, brokers, client_id, extra, err, errlen);
  sl_kafka_uv *nku = NULL;
  if (rc == 0 && ku && (rc = sl_kafka_uv_attach(&nku, fresh, loop)) != 0) {
    snprintf(err, errlen, "polling the new producer: %s", sl_strerror(rc));
    rd_kafka_destroy(fresh);
  }
  if (rc) return rc;
  if (ku) {
    sl_kafka_uv_detach(*ku);
    *ku = nku;
  }
  *rk = fresh; /* the reports below see the new producer */
  int before = rd_kafka_outq_len(old);
  rd_kafka_purge(old, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  for (int i = 0; i < 50 && rd_kafka_outq_len(old) > 0; i++) rd_kafka_poll(old, 100);
  int left = rd_kafka_outq_len(old);
  if (left > 0)
    sl_log(SL_LOG_ERROR, NULL,
           "the failed producer still holds %d message(s) or event(s) 5 s after the purge; "
           "their delivery reports are lost with it",
           left);
  if (retired)
    *retired = old;
  else
    rd_kafka_destroy(old);
  sl_metric_add(m_renewals, 1);
  sl_log(SL_LOG_WARN, NULL,
         "kafka producer %s renewed after its fatal error: the %d message(s) and event(s) it "
         "held went back to their senders as failed",
         client_id ? client_id : "sluice", before);
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
