/*
 * sl_stage.c — the at-least-once loop (see sl_stage.h for the contract).
 *
 * Ordering of the steps for one message is what makes it safe:
 *   poll -> process -> produce outputs -> flush (wait for every delivery
 *   report) -> commit offset (synchronous) -> next.
 * If any delivery fails the whole set is produced again (duplicates are
 * harmless downstream); the offset is never committed past an unwritten
 * output.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_stage.h"
#include "sluice/sl_admin.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice.pb-c.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define C(field) offsetof(sl_common_conf, field)
const sl_conf_entry sl_common_conf_table[] = {
    {"kafka.brokers", SL_CONF_STR, "127.0.0.1:9092", C(kafka_brokers),
     "Kafka bootstrap servers (host:port,...)", 0},
    {"redis.url", SL_CONF_STR, "redis://127.0.0.1:6379", C(redis_url),
     "Redis URL redis://host:port[/db]", 0},
    {"topic.submissions", SL_CONF_STR, "submissions", C(topic_submissions),
     "topic of SubmissionCreated messages", 0},
    {"topic.storage_events", SL_CONF_STR, "storage-events", C(topic_storage_events),
     "topic the storage publishes S3 event JSON to", 0},
    {"topic.stt_requests", SL_CONF_STR, "stt.requests", C(topic_stt_requests),
     "topic of UploadCompleted (transcription requests)", 0},
    {"topic.grade_requests", SL_CONF_STR, "grade.requests", C(topic_grade_requests),
     "topic of Transcript (grading requests)", 0},
    {"topic.results", SL_CONF_STR, "results", C(topic_results),
     "topic of QuestionStatus events", 0},
    {"topic.dlq", SL_CONF_STR, "dlq", C(topic_dlq), "dead-letter topic", 0},
    {"log.level", SL_CONF_STR, "info", C(log_level), "debug, info, warn or error", 0},
    {"admin.listen", SL_CONF_STR, "", C(admin_listen),
     "host:port for /healthz /readyz /metrics (empty: the stage's default)", 0},
    {"retry.budget_s", SL_CONF_DOUBLE, "21600", C(retry_budget_s),
     "give up on transient errors this many seconds after the first failure", 0},
    {"retry.initial_ms", SL_CONF_INT, "500", C(retry_initial_ms),
     "first backoff after a transient error", 0},
    {"retry.max_ms", SL_CONF_INT, "30000", C(retry_max_ms), "backoff cap", 0},
};
const size_t sl_common_conf_table_len =
    sizeof sl_common_conf_table / sizeof sl_common_conf_table[0];

int64_t sl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sl_outbox_add(sl_outbox *ob, const char *topic, const char *key, const void *value,
                  size_t len) {
  if (!ob || !topic || !key) return SL_EINVAL;
  if (ob->n >= SL_OUTBOX_MAX || strlen(key) >= sizeof ob->items[0].key) return SL_ETOOBIG;
  sl_out *o = &ob->items[ob->n];
  o->value = malloc(len ? len : 1);
  if (!o->value) return SL_ENOMEM;
  if (len) memcpy(o->value, value, len);
  o->len = len;
  o->topic = topic;
  strcpy(o->key, key);
  ob->n++;
  return 0;
}

void sl_outbox_clear(sl_outbox *ob) {
  if (!ob) return;
  for (size_t i = 0; i < ob->n; i++) free(ob->items[i].value);
  ob->n = 0;
}

int sl_outbox_add_pb(sl_outbox *ob, const char *topic, const char *key,
                     const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t stackbuf[4096], *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
  if (!buf) return SL_ENOMEM;
  protobuf_c_message_pack(msg, buf);
  int rc = sl_outbox_add(ob, topic, key, buf, n);
  if (buf != stackbuf) free(buf);
  return rc;
}

void sl_outbox_emit_now(sl_outbox *ob, const char *topic, const char *key,
                        const ProtobufCMessage *msg) {
  if (!ob || !ob->producer) return;
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return;
  protobuf_c_message_pack(msg, buf);
  rd_kafka_resp_err_t e = rd_kafka_producev(
      ob->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
      RD_KAFKA_V_VALUE(buf, n), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
      RD_KAFKA_V_OPAQUE(NULL), RD_KAFKA_V_END);
  if (e) free(buf); /* on error librdkafka did not take ownership */
}

sl_outcome sl_result_set(sl_result *res, sl_outcome o, const char *cls, const char *fmt, ...) {
  res->outcome = o;
  snprintf(res->error_class, sizeof res->error_class, "%s", cls ? cls : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->error_message, sizeof res->error_message, fmt, ap);
  va_end(ap);
  return o;
}

int sl_key_parse(const char *key, size_t len, char sid[64], unsigned *qno) {
  if (!key || !len) return SL_EPARSE;
  const char *slash = memchr(key, '/', len);
  if (!slash || slash == key || (size_t)(slash - key) >= 64) return SL_EPARSE;
  size_t sl = (size_t)(slash - key), rest = len - sl - 1;
  if (rest == 0 || rest > 4) return SL_EPARSE;
  unsigned q = 0;
  for (size_t i = 0; i < rest; i++) {
    if (!isdigit((unsigned char)slash[1 + i])) return SL_EPARSE;
    q = q * 10 + (unsigned)(slash[1 + i] - '0');
  }
  if (q == 0) return SL_EPARSE;
  memcpy(sid, key, sl);
  sid[sl] = '\0';
  *qno = q;
  return 0;
}

/* ---------- the loop ---------- */

typedef struct {
  const sl_stage_opts *o;
  rd_kafka_t *consumer, *producer;
  sl_metric *m_done, *m_retry, *m_failed, *m_inflight;
} loop_t;

/* Produces all outputs and waits for their delivery reports. */
static int produce_all(loop_t *L, const sl_outbox *ob) {
  sl_kafka_batch b = {0, RD_KAFKA_RESP_ERR_NO_ERROR};
  for (size_t i = 0; i < ob->n; i++) {
    const sl_out *it = &ob->items[i];
    rd_kafka_resp_err_t e = rd_kafka_producev(
        L->producer, RD_KAFKA_V_TOPIC(it->topic),
        RD_KAFKA_V_KEY(it->key, strlen(it->key)),
        RD_KAFKA_V_VALUE(it->value, it->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(&b), RD_KAFKA_V_END);
    if (e) {
      if (!b.first_error) b.first_error = e;
      break;
    }
    b.outstanding++;
  }
  while (b.outstanding > 0) rd_kafka_poll(L->producer, 100);
  char why[256];
  if (rd_kafka_fatal_error(L->producer, why, sizeof why)) {
    /* the idempotent producer cannot go on (e.g. the cluster lost its
     * state); nothing was committed, so exiting loses nothing */
    sl_log(SL_LOG_ERROR, NULL, "kafka producer fatal error: %s", why);
    return SL_ESTATE;
  }
  if (b.first_error) {
    sl_log(SL_LOG_WARN, NULL, "produce failed: %s", rd_kafka_err2str(b.first_error));
    return SL_EKAFKA;
  }
  return 0;
}

static void add_dead_letter(loop_t *L, const rd_kafka_message_t *m, const sl_result *res,
                            unsigned attempts, int64_t first_ms, sl_outbox *ob) {
  const sl_common_conf *cc = L->o->common;
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = (char *)L->o->stage;
  dl.topic = (char *)rd_kafka_topic_name(m->rkt);
  dl.partition = m->partition;
  dl.offset = m->offset;
  dl.key.data = (uint8_t *)m->key;
  dl.key.len = m->key_len;
  dl.payload.data = m->payload;
  dl.payload.len = m->len;
  dl.error_class = (char *)res->error_class;
  dl.error_message = (char *)res->error_message;
  dl.attempts = attempts;
  dl.first_failure_ms = first_ms;
  dl.last_failure_ms = sl_now_ms();
  size_t n = sluice__v1__dead_letter__get_packed_size(&dl);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return;
  sluice__v1__dead_letter__pack(&dl, buf);
  char key[128];
  snprintf(key, sizeof key, "%.*s", (int)(m->key_len < 120 ? m->key_len : 120),
           m->key ? (const char *)m->key : "");
  /* keys are binary-safe in Kafka but ours are text; keep non-empty */
  if (!key[0]) snprintf(key, sizeof key, "%s/%d/%lld", dl.topic, m->partition,
                        (long long)m->offset);
  sl_outbox_add(ob, cc->topic_dlq, key, buf, n);
  free(buf);

  char sid[64];
  unsigned qno;
  if (m->key && sl_key_parse(m->key, m->key_len, sid, &qno) == 0) {
    Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
    st.submission_id = sid;
    st.question_no = qno;
    st.state = SLUICE__V1__QUESTION_STATE__FAILED;
    st.at_ms = sl_now_ms();
    st.stage = (char *)L->o->stage;
    st.error_class = (char *)res->error_class;
    st.error_message = (char *)res->error_message;
    n = sluice__v1__question_status__get_packed_size(&st);
    buf = malloc(n ? n : 1);
    if (!buf) return;
    sluice__v1__question_status__pack(&st, buf);
    sl_outbox_add(ob, cc->topic_results, key, buf, n);
    free(buf);
  }
}

/* Sleeps ms milliseconds unless stop is raised. Returns 1 if stopped. */
static int nap(int64_t ms, volatile sig_atomic_t *stop) {
  while (ms > 0 && !*stop) {
    int64_t step = ms > 100 ? 100 : ms;
    struct timespec ts = {(time_t)(step / 1000), (long)(step % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return *stop != 0;
}

/* Processes one message to a committed state. Returns 0, 1 when asked to
 * stop before the message was finished, or -1 when the producer failed for
 * good (in both cases the message is redelivered to the next consumer). */
static int handle(loop_t *L, rd_kafka_message_t *m, volatile sig_atomic_t *stop) {
  const sl_common_conf *cc = L->o->common;
  char keybuf[128];
  snprintf(keybuf, sizeof keybuf, "%.*s", (int)(m->key_len < 120 ? m->key_len : 120),
           m->key ? (const char *)m->key : "");
  unsigned attempts = 0;
  int64_t first_fail = 0, backoff = cc->retry_initial_ms;
  for (;;) {
    sl_outbox ob = {.n = 0, .producer = L->producer};
    sl_result res = {.outcome = SL_OUTCOME_DONE};
    attempts++;
    sl_metric_gauge_add(L->m_inflight, 1);
    L->o->process(L->o->ud, m, &ob, &res);
    sl_metric_gauge_add(L->m_inflight, -1);
    if (res.outcome == SL_OUTCOME_RETRY) {
      sl_outbox_clear(&ob);
      if (!first_fail) first_fail = sl_now_ms();
      sl_metric_add(L->m_retry, 1);
      if ((double)(sl_now_ms() - first_fail) / 1000.0 >= cc->retry_budget_s) {
        char why[sizeof res.error_message];
        snprintf(why, sizeof why, "%s", res.error_message);
        sl_result_set(&res, SL_OUTCOME_FAIL, "budget_exhausted",
                      "gave up after %u attempts over %.0f s: %s", attempts,
                      cc->retry_budget_s, why);
      } else {
        sl_log(SL_LOG_WARN, keybuf, "transient failure (%s: %s), retrying in %lld ms",
               res.error_class, res.error_message, (long long)backoff);
        if (nap(backoff, stop)) return 1;
        backoff = backoff * 2 > cc->retry_max_ms ? cc->retry_max_ms : backoff * 2;
        continue;
      }
    }
    if (res.outcome == SL_OUTCOME_FAIL) {
      sl_outbox_clear(&ob);
      sl_log(SL_LOG_WARN, keybuf, "dead-lettered (%s): %s", res.error_class,
             res.error_message);
      add_dead_letter(L, m, &res, attempts, first_fail ? first_fail : sl_now_ms(), &ob);
    }
    /* produce until acknowledged; a Kafka outage blocks here, never drops */
    int64_t pb = cc->retry_initial_ms;
    int prc;
    while ((prc = produce_all(L, &ob)) != 0) {
      if (prc == SL_ESTATE) {
        sl_outbox_clear(&ob);
        return -1;
      }
      if (nap(pb, stop)) {
        sl_outbox_clear(&ob);
        return 1;
      }
      pb = pb * 2 > cc->retry_max_ms ? cc->retry_max_ms : pb * 2;
    }
    sl_outbox_clear(&ob);
    sl_metric_add(res.outcome == SL_OUTCOME_FAIL ? L->m_failed : L->m_done, 1);
    break;
  }
  rd_kafka_resp_err_t e;
  while ((e = rd_kafka_commit_message(L->consumer, m, 0)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    sl_log(SL_LOG_WARN, keybuf, "offset commit failed: %s", rd_kafka_err2str(e));
    if (e == RD_KAFKA_RESP_ERR__NO_OFFSET || e == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID ||
        e == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION || e == RD_KAFKA_RESP_ERR__STATE ||
        e == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS)
      break; /* partition moved: the new owner redelivers; outputs are idempotent */
    if (nap(500, stop)) break;
  }
  return 0;
}

int sl_stage_run(const sl_stage_opts *o, volatile sig_atomic_t *stop) {
  char err[512];
  loop_t L = {.o = o};
  char labels[128];
  snprintf(labels, sizeof labels, "stage=\"%s\",outcome=\"done\"", o->stage);
  L.m_done = sl_metrics_counter("sluice_messages_total", labels,
                                "Input messages finished, by outcome");
  snprintf(labels, sizeof labels, "stage=\"%s\",outcome=\"dead_lettered\"", o->stage);
  L.m_failed = sl_metrics_counter("sluice_messages_total", labels,
                                  "Input messages finished, by outcome");
  snprintf(labels, sizeof labels, "stage=\"%s\"", o->stage);
  L.m_retry = sl_metrics_counter("sluice_retries_total", labels,
                                 "Transient failures that were retried");
  L.m_inflight = sl_metrics_gauge("sluice_in_flight", labels, "Messages being processed");

  char group[128], client[128];
  snprintf(group, sizeof group, "sluice-%s", o->stage);
  snprintf(client, sizeof client, "sluice-%s", o->stage);
  int rc = sl_kafka_consumer_new(&L.consumer, o->common->kafka_brokers, group, client,
                                 err, sizeof err);
  if (rc == 0)
    rc = sl_kafka_producer_new(&L.producer, o->common->kafka_brokers, client, NULL, NULL,
                               err, sizeof err);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "kafka set-up failed: %s", err);
    if (L.consumer) rd_kafka_destroy(L.consumer);
    return rc;
  }
  rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new((int)o->ntopics);
  for (size_t i = 0; i < o->ntopics; i++)
    rd_kafka_topic_partition_list_add(subs, o->topics[i], RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(L.consumer, subs);
  rd_kafka_topic_partition_list_destroy(subs);
  if (e) {
    sl_log(SL_LOG_ERROR, NULL, "subscribe failed: %s", rd_kafka_err2str(e));
    rd_kafka_destroy(L.producer);
    rd_kafka_destroy(L.consumer);
    return SL_EKAFKA;
  }
  sl_log(SL_LOG_INFO, NULL, "consuming %s%s%s as group %s", o->topics[0],
         o->ntopics > 1 ? ", " : "", o->ntopics > 1 ? o->topics[1] : "", group);

  int fatal = 0;
  while (!*stop) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(L.consumer, 200);
    if (!m) continue;
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        sl_log(SL_LOG_WARN, NULL, "consume: %s", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    int hr = handle(&L, m, stop);
    rd_kafka_message_destroy(m);
    if (hr < 0) {
      fatal = SL_EKAFKA;
      break;
    }
  }
  sl_log(SL_LOG_INFO, NULL, "stopping: closing consumer");
  rd_kafka_consumer_close(L.consumer);
  rd_kafka_destroy(L.consumer);
  rd_kafka_flush(L.producer, 10000);
  rd_kafka_destroy(L.producer);
  return fatal;
}
