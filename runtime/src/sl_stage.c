/*
 * sl_stage.c — the stage runtime (see sl_stage.h for the contract).
 *
 * Everything but process() runs on one libuv loop:
 *   - the consumer's queue wakes the loop through a pipe (sl_kafka_uv); each
 *     message becomes a job; at max_in_flight all partitions are paused and
 *     resumed below 80% of it, so memory follows in-flight work, never the
 *     backlog;
 *   - per partition a sorted ring of in-flight offsets: a job marks its
 *     offset done, the head is popped while done, and the next offset to
 *     read is committed (asynchronously, coalesced every 200 ms; synchronously
 *     on revoke and shutdown);
 *   - retry-tier messages that are not yet due wait in a FIFO on their
 *     partition, which is paused; a timer fires when the head is due;
 *   - Redis (idempotency store, shared limiter) is spoken to asynchronously;
 *     a Redis outage makes the runtime skip the store and fail the limiter
 *     open, it never blocks the loop;
 *   - delivery reports arrive through the producer's pipe; a job whose
 *     outputs all arrived is finished.
 * A job is owned by the loop except while process() runs on the pool; it
 * holds its rd_kafka_message_t until it is finished.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_stage.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_breaker.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_id.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice.pb-c.h"

#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>
#include <unistd.h>
#include <uv.h>

#define C(field) offsetof(sl_common_conf, field)
const sl_conf_entry sl_common_conf_table[] = {
    {"kafka.brokers", SL_CONF_STR, "127.0.0.1:9092", C(kafka_brokers),
     "Kafka bootstrap servers (host:port,...)", 0},
    {"kafka.security_protocol", SL_CONF_STR, "plaintext", C(kafka_security_protocol),
     "plaintext, ssl, sasl_plaintext or sasl_ssl (every Kafka client of the process)", 0},
    {"kafka.sasl_mechanism", SL_CONF_STR, "PLAIN", C(kafka_sasl_mechanism),
     "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (sasl_* protocols)", 0},
    {"kafka.sasl_username", SL_CONF_STR, "", C(kafka_sasl_username),
     "SASL user name (sasl_* protocols)", 0},
    {"kafka.sasl_password", SL_CONF_STR, "", C(kafka_sasl_password),
     "SASL password (sasl_* protocols)", 1},
    {"kafka.ssl_ca_file", SL_CONF_STR, "", C(kafka_ssl_ca_file),
     "PEM file of the CAs that verify the brokers (ssl, sasl_ssl; empty: the system's CAs)", 0},
    {"kafka.ssl_cert_file", SL_CONF_STR, "", C(kafka_ssl_cert_file),
     "PEM client certificate for mutual TLS (optional; needs kafka.ssl_key_file)", 0},
    {"kafka.ssl_key_file", SL_CONF_STR, "", C(kafka_ssl_key_file),
     "PEM private key of kafka.ssl_cert_file", 0},
    {"kafka.ssl_key_password", SL_CONF_STR, "", C(kafka_ssl_key_password),
     "password of an encrypted kafka.ssl_key_file", 1},
    {"kafka.ssl_verify_hostname", SL_CONF_BOOL, "true", C(kafka_ssl_verify_hostname),
     "check that a broker's certificate names the host connected to (endpoint "
     "identification); the certificate chain is always verified", 0},
    {"redis.url", SL_CONF_STR, "redis://127.0.0.1:6379", C(redis_url),
     "Redis URL redis://[user:password@]host:port[/db]; rediss:// for TLS "
     "(user and password %-encoded)", 0},
    {"redis.username", SL_CONF_STR, "", C(redis_username),
     "ACL user name sent with AUTH (when redis.url has none; empty: the default user)", 0},
    {"redis.password", SL_CONF_STR, "", C(redis_password),
     "password sent with AUTH on every (re)connect (when redis.url has none)", 1},
    {"redis.tls_ca_file", SL_CONF_STR, "", C(redis_tls_ca_file),
     "PEM file of the CAs that verify the server (rediss://; empty: the system's CAs)", 0},
    {"redis.tls_cert_file", SL_CONF_STR, "", C(redis_tls_cert_file),
     "PEM client certificate for mutual TLS (rediss://, optional; needs redis.tls_key_file)",
     0},
    {"redis.tls_key_file", SL_CONF_STR, "", C(redis_tls_key_file),
     "PEM private key of redis.tls_cert_file (unencrypted)", 0},
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
    {"stage.max_in_flight", SL_CONF_INT, "1000", C(max_in_flight),
     "messages processed concurrently by this process (all partitions)", 0},
    {"stage.per_key_order", SL_CONF_BOOL, "false", C(per_key_order),
     "never run two messages with the same key at once", 0},
    {"stage.drain_timeout_s", SL_CONF_DOUBLE, "30", C(drain_timeout_s),
     "on SIGTERM, how long in-flight work may finish before the stage exits", 0},
    {"stage.workers", SL_CONF_INT, "4", C(workers),
     "worker threads for blocking processing (libuv pool)", 0},
    {"retry.tiers", SL_CONF_STR, "5s,30s,2m,10m", C(retry_tiers),
     "delays of the retry topics <stage>.retry.<delay>, ascending", 0},
    {"retry.budget_s", SL_CONF_DOUBLE, "21600", C(retry_budget_s),
     "transient errors retry until this many seconds after the first failure", 0},
    {"idempotency.ttl_s", SL_CONF_INT, "604800", C(idempotency_ttl_s),
     "how long stored outputs answer a redelivered input", 0},
    {"provider.rate", SL_CONF_DOUBLE, "0", C(provider_rate),
     "provider calls per second shared by all replicas (0: unlimited)", 0},
    {"provider.burst", SL_CONF_DOUBLE, "10", C(provider_burst),
     "calls that may go out at once before the rate applies", 0},
    {"breaker.failure_ratio", SL_CONF_DOUBLE, "0.5", C(breaker_failure_ratio),
     "share of failed provider calls in the window that opens the breaker", 0},
    {"breaker.min_calls", SL_CONF_INT, "20", C(breaker_min_calls),
     "calls in the window before the breaker may open", 0},
    {"breaker.window_ms", SL_CONF_INT, "10000", C(breaker_window_ms),
     "sliding window of the failure ratio", 0},
    {"breaker.hold", SL_CONF_BOOL, "true", C(breaker_hold),
     "while the breaker is open, hold messages (the backlog stays in Kafka, fetching stops "
     "at stage.max_in_flight) instead of sending each through the retry tiers", 0},
    {"breaker.probe_interval_ms", SL_CONF_INT, "1000", C(breaker_probe_interval_ms),
     "while open, one probe call per interval", 0},
    {"kafka.assignment_strategy", SL_CONF_STR, "roundrobin", C(kafka_assignment),
     "how a stage's replicas share partitions: roundrobin (eager: a rebalance revokes every "
     "partition, running calls finish first; each topic's partitions spread evenly) or "
     "cooperative-sticky (incremental, KIP-429: only the partitions that change owner move, "
     "but librdkafka 2.0 balances the count over all topics, so a new replica may get only "
     "retry tiers, and loses assignments on ILLEGAL_GENERATION; see docs/architecture.md); "
     "all replicas of a stage must agree", 0},
    {"kafka.session_timeout_ms", SL_CONF_INT, "10000", C(kafka_session_timeout_ms),
     "a replica that stops heart-beating (SIGKILL, lost node) loses its partitions after "
     "this long (the broker's group.min/max.session.timeout.ms bound it)", 0},
    {"kafka.heartbeat_interval_ms", SL_CONF_INT, "2000", C(kafka_heartbeat_ms),
     "group heartbeat; also how soon the others learn of a rebalance", 0},
    {"stage.revoke_wait_ms", SL_CONF_INT, "10000", C(revoke_wait_ms),
     "when partitions are taken away, work on them that is already running (a provider "
     "call) may finish, store its outputs and commit for this long before they are handed "
     "over; waiting work is released at once, uncalled (0: release everything at once)", 0},
    {"provider.max_retry_after_ms", SL_CONF_INT, "600000", C(max_retry_after_ms),
     "the longest wait a provider's Retry-After may impose; longer ones are cut to this, both "
     "the pause every replica honours after a 429 and the delay of the message's retry copy "
     "(a misbehaving \"Retry-After: 86400\" must not stop a stage for a day)", 0},
    {"stage.claim_lease_ms", SL_CONF_INT, "15000", C(claim_lease_ms),
     "before a provider call, a stage with a provider claims the input in Redis for this "
     "long, renewed every third of it while the call runs; a replica that meets another's "
     "claim waits for its stored outputs instead of calling, so an input is paid once across "
     "replicas (a crash costs a second call after the lease) (0: no claims)", 0},
};
const size_t sl_common_conf_table_len =
    sizeof sl_common_conf_table / sizeof sl_common_conf_table[0];

static int any_env(const char *name) {
  (void)name;
  return 1;
}

int sl_common_secure_from_env(char *err, size_t errlen) {
  sl_common_conf cc;
  memset(&cc, 0, sizeof cc);
  sl_conf_bind b = {sl_common_conf_table, sl_common_conf_table_len, &cc};
  sl_conf_set_known_env(any_env);
  int rc = sl_conf_load(&b, 1, NULL, NULL, 0, err, errlen);
  if (rc == 0) rc = sl_common_secure(&cc, 0, err, errlen);
  sl_conf_release(&b, 1);
  return rc;
}

int sl_common_secure(const sl_common_conf *cc, int check, char *err, size_t errlen) {
  if (!cc) return SL_EINVAL;
  sl_kafka_security ks = {cc->kafka_security_protocol, cc->kafka_sasl_mechanism,
                          cc->kafka_sasl_username,     cc->kafka_sasl_password,
                          cc->kafka_ssl_ca_file,       cc->kafka_ssl_cert_file,
                          cc->kafka_ssl_key_file,      cc->kafka_ssl_key_password,
                          cc->kafka_ssl_verify_hostname};
  int rc = sl_kafka_security_set(&ks, err, errlen);
  if (rc) return rc;
  sl_redis_addr a;
  char shown[600];
  sl_redis_redact(cc->redis_url, shown, sizeof shown);
  if (sl_redis_addr_parse(cc->redis_url, &a) != 0) {
    snprintf(err, errlen, "redis.url \"%s\" is not redis[s]://[user:password@]host[:port][/db]",
             shown);
    return SL_ECONFIG;
  }
  int tls_files = (cc->redis_tls_ca_file && *cc->redis_tls_ca_file) ||
                  (cc->redis_tls_cert_file && *cc->redis_tls_cert_file) ||
                  (cc->redis_tls_key_file && *cc->redis_tls_key_file);
  if (tls_files && !a.tls) {
    snprintf(err, errlen, "redis.tls_* files are set but redis.url \"%s\" is not rediss://",
             shown);
    return SL_ECONFIG;
  }
  sl_redis_security rs = {cc->redis_username, cc->redis_password, cc->redis_tls_ca_file,
                          cc->redis_tls_cert_file, cc->redis_tls_key_file};
  rc = sl_redis_security_set(&rs, err, errlen);
  if (rc || !check) return rc;
  char why[768];
  if (sl_kafka_security_enabled()) {
    rc = sl_kafka_check(cc->kafka_brokers, 10000, why, sizeof why);
    if (rc == SL_ECONFIG) {
      snprintf(err, errlen, "%s", why);
      return rc;
    }
    if (rc) sl_log(SL_LOG_WARN, NULL, "%s (carrying on: the clients retry)", why);
  }
  sl__redis_target(cc->redis_url, &a);
  if (a.tls || a.password[0]) {
    rc = sl_redis_check(cc->redis_url, why, sizeof why);
    if (rc == SL_ECONFIG) {
      snprintf(err, errlen, "%s", why);
      return rc;
    }
    if (rc) sl_log(SL_LOG_WARN, NULL, "%s (carrying on: the clients retry)", why);
  }
  memset(a.password, 0, sizeof a.password);
  return 0;
}

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

int64_t sl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sl_outbox_add(sl_outbox *ob, const char *topic, const char *key, const void *value,
                  size_t len) {
  if (!ob) return SL_EINVAL;
  if (!topic || !key) return ob->failed = SL_EINVAL;
  if (ob->n >= SL_OUTBOX_MAX || strlen(key) >= sizeof ob->items[0].key ||
      strlen(topic) >= sizeof ob->items[0].topic)
    return ob->failed = SL_ETOOBIG;
  sl_out *o = &ob->items[ob->n];
  o->value = malloc(len ? len : 1);
  if (!o->value) return ob->failed = SL_ENOMEM;
  if (len) memcpy(o->value, value, len);
  o->len = len;
  strcpy(o->topic, topic);
  strcpy(o->key, key);
  o->retry_copy = 0;
  ob->n++;
  return 0;
}

void sl_outbox_clear(sl_outbox *ob) {
  if (!ob) return;
  for (size_t i = 0; i < ob->n; i++) free(ob->items[i].value);
  ob->n = 0;
  ob->failed = 0;
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

int sl_retry_tiers_parse(const char *spec, int64_t delays[SL_RETRY_TIERS_MAX],
                         char labels[SL_RETRY_TIERS_MAX][16]) {
  if (!spec) return SL_ECONFIG;
  int n = 0;
  const char *p = spec;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    if (n == SL_RETRY_TIERS_MAX) return SL_ECONFIG;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v <= 0) return SL_ECONFIG;
    int64_t mul;
    size_t ul;
    if (strncmp(end, "ms", 2) == 0) mul = 1, ul = 2;
    else if (*end == 's') mul = 1000, ul = 1;
    else if (*end == 'm') mul = 60000, ul = 1;
    else if (*end == 'h') mul = 3600000, ul = 1;
    else return SL_ECONFIG;
    const char *after = end + ul;
    if (*after && *after != ',' && *after != ' ') return SL_ECONFIG;
    size_t ll = (size_t)(after - p);
    if (ll >= 16) return SL_ECONFIG;
    memcpy(labels[n], p, ll);
    labels[n][ll] = '\0';
    delays[n] = (int64_t)v * mul;
    if (n > 0 && delays[n] <= delays[n - 1]) return SL_ECONFIG;
    n++;
    p = after;
  }
  return n > 0 ? n : SL_ECONFIG;
}

/* ------------------------------------------------------------------ */
/* state                                                               */

typedef struct loop_t loop_t;
typedef struct sl_job job;

/* at most this many per-partition lag series per process */
#define SL_LAG_SERIES_MAX 128

typedef struct {
  char topic[128];
  int32_t partition;
} part_id;

/* One assigned partition. */
typedef struct part {
  part_id id;
  UT_hash_handle hh;
  loop_t *L;
  int64_t *offs;   /* ring of in-flight offsets, ascending */
  int64_t *ts;     /* their Kafka timestamps (ms), for the oldest-age gauge */
  uint8_t *done;
  uint64_t epoch;  /* bumped when the partition is assigned again */
  size_t cap, head, n;
  int64_t commit_next; /* next offset to commit (-1: nothing yet) */
  int dirty;
  int revoked;     /* no longer ours: nothing of it is committed */
  int revoking;    /* being taken away: running work may still finish */
  int retry_tier;  /* index of the tier this topic is, or -1 for a main input */
  job *parked_head, *parked_tail;
  int paused_for_park;
  uv_timer_t park_timer;
  int timer_inited;
} part;

/* Per-key ordering: the key's queue of waiting jobs. */
typedef struct keyq {
  char key[128];
  UT_hash_handle hh;
  job *head, *tail; /* waiting, in arrival order */
} keyq;

struct sl_job {
  loop_t *L;
  rd_kafka_message_t *m;
  part *p;
  uint64_t epoch;         /* p->epoch when taken */
  int64_t offset;
  char key[128];
  unsigned attempts;      /* failed attempts before this one */
  int64_t first_failure_ms;
  int64_t not_before_ms;
  int64_t started_ms;
  uint64_t call_ns;       /* uv_hrtime() when process()/start() began */
  char digest[65];
  char owner[112];        /* its claim's owner id (sl_claim.h) */
  int claimed;            /* it holds the claim on its input */
  unsigned claim_waits;   /* times it found another replica's claim */
  sl_outbox out;
  sl_result res;
  int outstanding;        /* deliveries pending */
  rd_kafka_resp_err_t produce_err; /* a delivery of the set failed: the first permanent
                                    * error, else the first one (0: none) */
  int rejected;           /* Kafka refused an output for good: now a dead letter */
  int uncommitted;        /* ends without its offset counting as done */
  int stored;             /* outputs came from the idempotency store */
  uv_work_t work;
  uv_timer_t *timer;      /* limiter waits, produce backoff */
  job *next;              /* park FIFO / key queue */
  job *all_prev, *all_next; /* every live job, for shutdown */
  int keyed;              /* holds its key's slot */
  int in_pool;            /* process() is running on the worker pool */
  int in_async;           /* start() was called, sl_job_done() not yet */
};

struct loop_t {
  const sl_stage_opts *o;
  const sl_common_conf *cc;
  uv_loop_t loop;
  rd_kafka_t *consumer, *producer;
  sl_kafka_uv *cku, *pku;
  sl_aredis *redis;
  sl_httpc *http;     /* for async processors */
  sl_breaker *breaker;
  part *parts;
  keyq *keys;
  uv_timer_t tick;
  int64_t inflight;   /* jobs taken and not finished (parked included) */
  int64_t active;     /* jobs past parking: what a drain waits for */
  job *jobs;          /* every live job */
  int paused_all;
  int stopping;
  int closing;        /* the loop has stopped: drop instead of continuing */
  int64_t stop_deadline;
  int fatal;
  volatile sig_atomic_t *stop;
  int ntiers;
  int64_t tier_ms[SL_RETRY_TIERS_MAX];
  char tier_label[SL_RETRY_TIERS_MAX][16];
  char tier_topic[SL_RETRY_TIERS_MAX][160];
  char limit_key[160], pause_key[160];
  /* jobs waiting for the shared limiter, in order: only the head asks Redis,
   * so a backlog costs one limiter call per grant, not one per waiter */
  job *lq_head, *lq_tail;
  int lq_busy;
  uv_timer_t lq_timer;
  rd_kafka_topic_partition_list_t *assignment;
  /* partitions being revoked: unassigned once their running work is over
   * or stage.revoke_wait_ms has passed */
  rd_kafka_topic_partition_list_t *revoking;
  int revoking_lost;  /* the assignment was lost: commit nothing */
  /* after a cooperative revoke the member rejoins at once; an asynchronous
   * commit in flight across that join gets ILLEGAL_GENERATION, which
   * librdkafka < 2.10 (#4059) turns into a lost assignment. Periodic
   * commits wait for the rejoin's assign (or rejoin_until_ms). */
  int rejoin_assigns;
  int64_t rejoin_until_ms;
  int cooperative;    /* the group's protocol is incremental (KIP-429) */
  uv_timer_t revoke_timer;
  /* input claims (sl_claim.h): this process's owner prefix, renewed while
   * their calls run */
  char owner[80];
  uint64_t owner_seq;
  uv_timer_t claim_timer;
  sl_metric *m_claim_waits;
  /* jobs held while the breaker is open (breaker.hold), in order */
  job *bq_head, *bq_tail;
  int64_t bq_len;
  uv_timer_t bq_timer;
  sl_metric *m_held;
  sl_metric *m_done, *m_retried, *m_dead, *m_inflight, *m_idem_hits, *m_limiter_waits,
      *m_breaker_state, *m_breaker_open, *m_oldest, *m_calls_ok, *m_calls_fail,
      *m_circuit_skips, *m_tier[SL_RETRY_TIERS_MAX], *m_calls_throttled, *m_calls_perm,
      *m_assigned, *m_oldest_waiting;
  sl_histogram *h_call;
  /* consumer lag gauges, one per partition this process has been assigned */
  struct {
    char topic[128];
    int32_t partition;
    sl_metric *m;
  } lag[SL_LAG_SERIES_MAX];
  int nlag;
};

static void gate(job *j);
static void holds_key(job *j);
static void revoke_check(loop_t *L);
static void run_process(job *j);
static void finish(job *j);
static void produce(job *j);
static void dispatch(loop_t *L, job *j);

/* ------------------------------------------------------------------ */
/* partitions                                                          */

static part *part_get(loop_t *L, const char *topic, int32_t partition, int create) {
  part_id id;
  memset(&id, 0, sizeof id);
  snprintf(id.topic, sizeof id.topic, "%s", topic);
  id.partition = partition;
  part *p = NULL;
  HASH_FIND(hh, L->parts, &id, sizeof id, p);
  if (p || !create) return p;
  p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->id = id;
  p->L = L;
  p->commit_next = -1;
  p->retry_tier = -1;
  for (int i = 0; i < L->ntiers; i++)
    if (strcmp(topic, L->tier_topic[i]) == 0) p->retry_tier = i;
  uv_timer_init(&L->loop, &p->park_timer);
  p->park_timer.data = p;
  p->timer_inited = 1;
  HASH_ADD(hh, L->parts, id, sizeof id, p);
  return p;
}

static int ring_push(part *p, int64_t off, int64_t ts) {
  if (p->n == p->cap) {
    size_t ncap = p->cap ? p->cap * 2 : 64;
    int64_t *no = malloc(ncap * sizeof *no), *nt = malloc(ncap * sizeof *nt);
    uint8_t *nd = malloc(ncap);
    if (!no || !nd || !nt) {
      free(no);
      free(nd);
      free(nt);
      return SL_ENOMEM;
    }
    for (size_t i = 0; i < p->n; i++) {
      no[i] = p->offs[(p->head + i) % p->cap];
      nt[i] = p->ts[(p->head + i) % p->cap];
      nd[i] = p->done[(p->head + i) % p->cap];
    }
    free(p->offs);
    free(p->ts);
    free(p->done);
    p->offs = no;
    p->ts = nt;
    p->done = nd;
    p->cap = ncap;
    p->head = 0;
  }
  size_t at = (p->head + p->n) % p->cap;
  p->offs[at] = off;
  p->ts[at] = ts;
  p->done[at] = 0;
  p->n++;
  return 0;
}

/* The partition is ours again: start a fresh ring (jobs of the old epoch no
 * longer count). */
static void part_reset(part *p) {
  p->epoch++;
  p->head = p->n = 0;
  p->commit_next = -1;
  p->dirty = 0;
  p->revoked = 0;
  p->revoking = 0;
  p->paused_for_park = 0;
}

/* Marks off done and advances the commit point past every done head. */
static void ring_done(part *p, int64_t off) {
  size_t lo = 0, hi = p->n;
  while (lo < hi) { /* offsets are ascending: binary search */
    size_t mid = (lo + hi) / 2;
    if (p->offs[(p->head + mid) % p->cap] < off) lo = mid + 1;
    else hi = mid;
  }
  if (lo < p->n && p->offs[(p->head + lo) % p->cap] == off) p->done[(p->head + lo) % p->cap] = 1;
  while (p->n && p->done[p->head]) {
    p->commit_next = p->offs[p->head] + 1;
    p->dirty = 1;
    p->head = (p->head + 1) % p->cap;
    p->n--;
  }
}

static void part_close_cb(uv_handle_t *h) {
  part *p = h->data;
  free(p->offs);
  free(p->ts);
  free(p->done);
  free(p);
}

static void part_drop(loop_t *L, part *p) {
  HASH_DEL(L->parts, p);
  uv_timer_stop(&p->park_timer);
  uv_close((uv_handle_t *)&p->park_timer, part_close_cb);
}

/* Commits every dirty partition; sync on revoke/shutdown. */
static void commit(loop_t *L, int sync, part *only) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) {
    if (only && p != only) continue;
    if (!p->dirty || p->revoked || p->commit_next < 0) continue;
    rd_kafka_topic_partition_list_add(l, p->id.topic, p->id.partition)->offset = p->commit_next;
    p->dirty = 0;
  }
  if (l->cnt) {
    rd_kafka_resp_err_t e = rd_kafka_commit(L->consumer, l, sync ? 0 : 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
      sl_log(SL_LOG_WARN, NULL, "offset commit: %s", rd_kafka_err2str(e));
  }
  rd_kafka_topic_partition_list_destroy(l);
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque) {
  (void)rk;
  (void)offsets;
  (void)opaque;
  if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
    sl_log(SL_LOG_WARN, NULL, "offset commit failed: %s (the messages will be redelivered)",
           rd_kafka_err2str(err));
}

static void set_pause(loop_t *L, int pause) {
  if (!L->assignment || L->paused_all == pause) return;
  L->paused_all = pause;
  if (pause)
    rd_kafka_pause_partitions(L->consumer, L->assignment);
  else {
    /* resume all but the ones parked for a retry tier */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(L->assignment->cnt);
    for (int i = 0; i < L->assignment->cnt; i++) {
      part *p = part_get(L, L->assignment->elems[i].topic, L->assignment->elems[i].partition, 0);
      if (p && p->paused_for_park) continue;
      rd_kafka_topic_partition_list_add(l, L->assignment->elems[i].topic,
                                        L->assignment->elems[i].partition);
    }
    rd_kafka_resume_partitions(L->consumer, l);
    rd_kafka_topic_partition_list_destroy(l);
  }
}

static void pause_one(loop_t *L, part *p, int pause) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, p->id.topic, p->id.partition);
  if (pause)
    rd_kafka_pause_partitions(L->consumer, l);
  else if (!L->paused_all && !L->stopping)
    rd_kafka_resume_partitions(L->consumer, l);
  rd_kafka_topic_partition_list_destroy(l);
  p->paused_for_park = pause;
}

/* ------------------------------------------------------------------ */
/* jobs                                                                */

static void job_free(job *j) {
  loop_t *L = j->L;
  if (j->all_prev) j->all_prev->all_next = j->all_next;
  else if (L->jobs == j) L->jobs = j->all_next;
  if (j->all_next) j->all_next->all_prev = j->all_prev;
  sl_outbox_clear(&j->out);
  if (j->m) rd_kafka_message_destroy(j->m);
  free(j);
}

static void timer_free_cb(uv_handle_t *h) { free(h); }

static void job_timer_release(job *j) {
  if (!j->timer) return;
  uv_timer_stop(j->timer);
  uv_close((uv_handle_t *)j->timer, timer_free_cb);
  j->timer = NULL;
}

/* Drops a job during shutdown: its offset stays uncommitted (redelivered). */
static void job_drop(job *j) {
  job_timer_release(j);
  j->L->inflight--;
  job_free(j);
}

/* Runs cb(timer whose data is j) after ms; now(j) at once if no timer can be
 * allocated. */
static void job_after(job *j, int64_t ms, uv_timer_cb cb, void (*now)(job *)) {
  if (!j->timer) {
    j->timer = malloc(sizeof *j->timer);
    if (!j->timer) { /* no memory for a timer: try at once */
      now(j);
      return;
    }
    uv_timer_init(&j->L->loop, j->timer);
    j->timer->data = j;
  }
  uv_timer_start(j->timer, cb, (uint64_t)(ms > 0 ? ms : 0), 0);
}

static const char *hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
  rd_kafka_headers_t *h = NULL;
  const void *v;
  size_t n;
  if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR) return NULL;
  if (rd_kafka_header_get_last(h, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR || !v) return NULL;
  if (n >= len) n = len - 1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  return buf;
}

const char *sl_message_origin(const rd_kafka_message_t *m, char *buf, size_t len) {
  const char *h = m && buf && len ? hdr(m, SL_HDR_ORIGIN_TOPIC, buf, len) : NULL;
  if (h && *h) return h;
  return m && m->rkt ? rd_kafka_topic_name(m->rkt) : "";
}

static int64_t hdr_i64(const rd_kafka_message_t *m, const char *name) {
  char buf[32];
  return hdr(m, name, buf, sizeof buf) ? strtoll(buf, NULL, 10) : 0;
}

int64_t sl_message_first_failure_ms(const rd_kafka_message_t *m) {
  return m ? hdr_i64(m, SL_HDR_FIRST_FAILURE) : 0;
}

static void key_release(job *j) {
  if (!j->keyed) return;
  loop_t *L = j->L;
  keyq *q = NULL;
  HASH_FIND_STR(L->keys, j->key, q);
  j->keyed = 0;
  if (!q) return;
  if (q->head) { /* hand the key to the next waiting job */
    job *next = q->head;
    q->head = next->next;
    if (!q->head) q->tail = NULL;
    next->next = NULL;
    next->keyed = 1;
    if (L->closing)
      job_drop(next);
    else
      holds_key(next);
  } else {
    HASH_DEL(L->keys, q);
    free(q);
  }
}

/* The job is over: its offset is done once everything it produced is
 * acknowledged (the caller guarantees that). After a fatal producer error
 * no job counts as done: its outputs may not all be written (produce()
 * ends such jobs without writing), and the offsets committed on the way
 * out must not pass them. */
static void finish(job *j) {
  loop_t *L = j->L;
  int revoking = j->p && j->p->revoking;
  job_timer_release(j);
  key_release(j);
  if (!L->fatal && !j->uncommitted && j->p && !j->p->revoked && j->epoch == j->p->epoch)
    ring_done(j->p, j->offset);
  L->inflight--;
  L->active--;
  sl_metric_gauge_add(L->m_inflight, -1);
  job_free(j);
  if (L->paused_all && !L->stopping && L->inflight < L->cc->max_in_flight * 8 / 10)
    set_pause(L, 0);
  if (revoking) revoke_check(L);
}

/* ---- producing ---- */

static void on_backoff(uv_timer_t *t) { produce(t->data); }

static void add_dead_letter(job *j);

/* Errors that producing the same message again cannot cure. */
static int produce_permanent(rd_kafka_resp_err_t e) {
  switch (e) {
  case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
  case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_INVALID_RECORD:
  case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
  case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
  case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
  case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
  case RD_KAFKA_RESP_ERR__INVALID_ARG:
    return 1;
  default:
    return 0;
  }
}

static void on_delivery(rd_kafka_resp_err_t err, void *opaque) {
  job *j = opaque;
  if (!j) return; /* emit_now notices */
  if (err && (!j->produce_err || produce_permanent(err))) j->produce_err = err;
  if (--j->outstanding > 0) return;
  if (j->produce_err && j->L->closing) {
    job_drop(j);
    return;
  }
  if (produce_permanent(j->produce_err) && !j->rejected) {
    /* producing it again cannot work and would hold the partition's commit
     * for ever: the input becomes a dead letter instead (what was delivered
     * of the set stays; duplicates are harmless) */
    rd_kafka_resp_err_t e = j->produce_err;
    j->produce_err = 0;
    j->rejected = 1;
    sl_outbox_clear(&j->out);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "output_rejected",
                  "Kafka refused an output for good: %s", rd_kafka_err2str(e));
    add_dead_letter(j);
    produce(j);
    return;
  }
  if (j->produce_err) {
    /* never drop: produce the whole set again (duplicates are harmless) */
    rd_kafka_resp_err_t e = j->produce_err;
    j->produce_err = 0;
    sl_log(SL_LOG_WARN, j->key, "delivery failed: %s; producing again in 1 s",
           rd_kafka_err2str(e));
    char why[256];
    if (rd_kafka_fatal_error(j->L->producer, why, sizeof why)) {
      sl_log(SL_LOG_ERROR, NULL, "kafka producer fatal error: %s; stopping", why);
      j->L->fatal = 1;
      *j->L->stop = 1;
    }
    job_after(j, 1000, on_backoff, produce);
    return;
  }
  finish(j);
}

static void produce(job *j) {
  loop_t *L = j->L;
  if (L->fatal) { /* nothing more can be written; the offset stays uncommitted */
    finish(j);
    return;
  }
  if (j->out.failed) {
    /* what had to be written (a dead letter, a retry copy, a status) could
     * not even be added: finishing would commit the input without it, so
     * its offset stays uncommitted (the partition commits up to it; a
     * restart or a rebalance delivers it again) */
    sl_log(SL_LOG_ERROR, j->key, "an output could not be added to the outbox (%s): the input "
           "stays uncommitted", sl_strerror(j->out.failed));
    sl_outbox_clear(&j->out);
    j->uncommitted = 1;
    finish(j);
    return;
  }
  if (j->out.n == 0) {
    finish(j);
    return;
  }
  /* Delivery reports come only from rd_kafka_poll on the loop, never from
   * inside producev; a message librdkafka refuses at once is counted here
   * and reported after the loop (reporting it inside would let the outcome
   * replace the outbox this loop walks). */
  size_t n = j->out.n;
  int refused = 0;
  rd_kafka_resp_err_t refused_err = RD_KAFKA_RESP_ERR_NO_ERROR;
  j->outstanding = (int)n;
  for (size_t i = 0; i < n; i++) {
    sl_out *it = &j->out.items[i];
    rd_kafka_headers_t *hs = NULL;
    if (it->retry_copy) { /* a retry-tier copy carries the retry headers */
      char b[5][32], origin[160];
      hs = rd_kafka_headers_new(7);
      rd_kafka_header_add(hs, SL_HDR_ORIGIN_TOPIC, -1,
                          sl_message_origin(j->m, origin, sizeof origin), -1);
      snprintf(b[0], 32, "%u", j->attempts + 1);
      snprintf(b[1], 32, "%lld", (long long)j->first_failure_ms);
      snprintf(b[2], 32, "%lld", (long long)j->not_before_ms);
      rd_kafka_header_add(hs, SL_HDR_ATTEMPT, -1, b[0], -1);
      rd_kafka_header_add(hs, SL_HDR_FIRST_FAILURE, -1, b[1], -1);
      rd_kafka_header_add(hs, SL_HDR_NOT_BEFORE, -1, b[2], -1);
      rd_kafka_header_add(hs, SL_HDR_ERROR_CLASS, -1, j->res.error_class, -1);
      rd_kafka_header_add(hs, SL_HDR_ERROR_MESSAGE, -1, j->res.error_message, -1);
    }
    rd_kafka_resp_err_t e;
    if (hs)
      e = rd_kafka_producev(L->producer, RD_KAFKA_V_TOPIC(it->topic),
                            RD_KAFKA_V_KEY(it->key, strlen(it->key)),
                            RD_KAFKA_V_VALUE(it->value, it->len),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hs),
                            RD_KAFKA_V_OPAQUE(j), RD_KAFKA_V_END);
    else
      e = rd_kafka_producev(L->producer, RD_KAFKA_V_TOPIC(it->topic),
                            RD_KAFKA_V_KEY(it->key, strlen(it->key)),
                            RD_KAFKA_V_VALUE(it->value, it->len),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(j),
                            RD_KAFKA_V_END);
    if (e) {
      if (hs) rd_kafka_headers_destroy(hs);
      /* not queued: a failed delivery, reported below */
      if (!j->produce_err || produce_permanent(e)) j->produce_err = e;
      refused++;
      refused_err = e;
    }
  }
  if (refused) {
    j->outstanding -= refused - 1; /* on_delivery takes the last one */
    on_delivery(refused_err, j);
  }
}

/* ---- outcomes ---- */

/* A dead letter of class output_rejected keeps at most this much of its
 * input, so that it fits where the rejected output did not. */
#define SL_DL_REJECTED_PAYLOAD_MAX (256 * 1024)

static void add_dead_letter(job *j) {
  loop_t *L = j->L;
  const rd_kafka_message_t *m = j->m;
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = (char *)L->o->stage;
  dl.topic = (char *)rd_kafka_topic_name(m->rkt);
  dl.partition = m->partition;
  dl.offset = m->offset;
  dl.key.data = (uint8_t *)m->key;
  dl.key.len = m->key_len;
  dl.payload.data = m->payload;
  dl.payload.len = m->len;
  if (j->rejected && dl.payload.len > SL_DL_REJECTED_PAYLOAD_MAX) {
    /* the input itself may be what Kafka refuses: keep its head */
    dl.payload.len = SL_DL_REJECTED_PAYLOAD_MAX;
    size_t n = strlen(j->res.error_message);
    snprintf(j->res.error_message + n, sizeof j->res.error_message - n,
             " (payload cut to %d of %zu bytes)", SL_DL_REJECTED_PAYLOAD_MAX, m->len);
  }
  dl.error_class = j->res.error_class;
  dl.error_message = j->res.error_message;
  dl.attempts = j->attempts + 1;
  dl.last_failure_ms = sl_now_ms();
  dl.first_failure_ms = j->first_failure_ms ? j->first_failure_ms : dl.last_failure_ms;
  /* a replay goes where the message first came from; a retry copy written
   * before copies carried their origin: the stage's first input */
  char origin[160];
  const char *from = hdr(m, SL_HDR_ORIGIN_TOPIC, origin, sizeof origin);
  dl.replay_topic = (char *)(from && *from                          ? from
                             : j->p && j->p->retry_tier >= 0 ? L->o->topics[0]
                                                             : dl.topic);
  const char *subject = j->key[0] ? j->key : j->res.subject;
  dl.subject_key = (char *)subject;
  char key[128];
  if (subject[0])
    snprintf(key, sizeof key, "%s", subject);
  else
    snprintf(key, sizeof key, "%s/%d/%lld", dl.topic, m->partition, (long long)m->offset);
  sl_outbox_add_pb(&j->out, L->cc->topic_dlq, key, &dl.base);

  if (L->o->on_dead_letter) /* the stage's own word about it (stages/common.c) */
    L->o->on_dead_letter(L->o, subject, j->res.error_class, j->res.error_message,
                         dl.last_failure_ms, &j->out);
  sl_metric_add(L->m_dead, 1);
  sl_log(SL_LOG_WARN, subject, "dead-lettered after %u attempt(s) (%s): %s", j->attempts + 1,
         j->res.error_class, j->res.error_message);
}

/* The provider's Retry-After, cut to provider.max_retry_after_ms. */
static int64_t retry_after(const loop_t *L, const sl_result *res) {
  int64_t cap = L->cc->max_retry_after_ms > 0 ? L->cc->max_retry_after_ms : 0;
  return res->retry_after_ms > cap ? cap : res->retry_after_ms > 0 ? res->retry_after_ms : 0;
}

/* Transient failure: to the next retry tier, or the dead-letter topic when
 * the budget from the first failure is spent. */

static void to_retry(job *j) {
  loop_t *L = j->L;
  int64_t now = sl_now_ms();
  if (!j->first_failure_ms) j->first_failure_ms = now;
  sl_outbox_clear(&j->out);
  if ((double)(now - j->first_failure_ms) / 1000.0 >= L->cc->retry_budget_s) {
    char why[sizeof j->res.error_message];
    snprintf(why, sizeof why, "%s", j->res.error_message);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "budget_exhausted",
                  "gave up after %u attempts over %.0f s: %s: %s", j->attempts + 1,
                  (double)(now - j->first_failure_ms) / 1000.0, j->res.error_class, why);
    add_dead_letter(j);
    return;
  }
  int t = (int)(j->attempts < (unsigned)L->ntiers ? j->attempts : (unsigned)L->ntiers - 1);
  int64_t ra = retry_after(L, &j->res);
  while (ra > L->tier_ms[t] && t + 1 < L->ntiers) t++;
  int64_t delay = L->tier_ms[t] > ra ? L->tier_ms[t] : ra;
  j->not_before_ms = now + delay;
  if (sl_outbox_add(&j->out, L->tier_topic[t], j->key, j->m->payload, j->m->len) == 0)
    j->out.items[j->out.n - 1].retry_copy = 1;
  sl_metric_add(L->m_retried, 1);
  sl_metric_add(L->m_tier[t], 1);
  sl_log(SL_LOG_INFO, j->key, "transient failure (%s: %s); retry %u via %s", j->res.error_class,
         j->res.error_message, j->attempts + 1, L->tier_topic[t]);
}

/* ---- idempotency store ---- */

static void idem_key(job *j, char *buf, size_t len) {
  snprintf(buf, len, "sl:idem:%s:%s:%.32s", j->L->o->stage, j->key, j->digest);
}

static void claim_release(job *j);

static void on_stored(redisReply *r, void *ud) {
  job *j = ud;
  if (j->L->closing) {
    job_drop(j);
    return;
  }
  if (!r || r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, j->key, "idempotency store unavailable; outputs not stored");
  claim_release(j); /* after the store: a waiting replica finds the outputs */
  produce(j);
}

static void store_and_produce(job *j) {
  loop_t *L = j->L;
  Sluice__V1__StoredOutputs so = SLUICE__V1__STORED_OUTPUTS__INIT;
  Sluice__V1__StoredOutputs__Output outs[SL_OUTBOX_MAX], *op[SL_OUTBOX_MAX];
  for (size_t i = 0; i < j->out.n; i++) {
    sluice__v1__stored_outputs__output__init(&outs[i]);
    outs[i].topic = j->out.items[i].topic;
    outs[i].key = j->out.items[i].key;
    outs[i].value.data = j->out.items[i].value;
    outs[i].value.len = j->out.items[i].len;
    op[i] = &outs[i];
  }
  so.outputs = op;
  so.n_outputs = j->out.n;
  so.stored_at_ms = sl_now_ms();
  size_t n = sluice__v1__stored_outputs__get_packed_size(&so);
  uint8_t *buf = malloc(n ? n : 1);
  char k[256], ttl[32];
  idem_key(j, k, sizeof k);
  snprintf(ttl, sizeof ttl, "%lld", (long long)L->cc->idempotency_ttl_s);
  if (buf) {
    sluice__v1__stored_outputs__pack(&so, buf);
    const char *argv[] = {"SET", k, (const char *)buf, "EX", ttl};
    size_t lens[] = {3, strlen(k), n, 2, strlen(ttl)};
    int rc = sl_aredis_argv(L->redis, on_stored, j, 5, argv, lens);
    free(buf);
    if (rc == 0) return;
  }
  claim_release(j);
  produce(j);
}

/* Answers the job from outputs stored by an earlier run (this replica's or
 * another's): 1 when they were usable and are being produced. */
static int use_stored(job *j, const char *v, size_t n) {
  loop_t *L = j->L;
  Sluice__V1__StoredOutputs *so = sluice__v1__stored_outputs__unpack(NULL, n, (const uint8_t *)v);
  int ok = so != NULL;
  for (size_t i = 0; ok && i < so->n_outputs; i++)
    ok = sl_outbox_add(&j->out, so->outputs[i]->topic, so->outputs[i]->key,
                       so->outputs[i]->value.data, so->outputs[i]->value.len) == 0;
  if (so) sluice__v1__stored_outputs__free_unpacked(so, NULL);
  if (!ok) {
    sl_outbox_clear(&j->out);
    return 0;
  }
  sl_metric_add(L->m_idem_hits, 1);
  sl_metric_add(L->m_done, 1);
  j->stored = 1;
  sl_log(SL_LOG_INFO, j->key, "already processed: stored outputs reused, no provider call");
  produce(j);
  return 1;
}

static void on_lookup(redisReply *r, void *ud) {
  job *j = ud;
  loop_t *L = j->L;
  if (L->closing) {
    job_drop(j);
    return;
  }
  if (r && r->type == REDIS_REPLY_STRING) {
    if (use_stored(j, r->str, r->len)) return;
  } else if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_log(SL_LOG_DEBUG, j->key, "idempotency lookup unavailable; processing");
  }
  gate(j);
}

/* ---- the provider gate ---- */

static void limiter_try(loop_t *L);

static void on_lq_timer(uv_timer_t *t) { limiter_try(t->data); }

static job *lq_pop(loop_t *L) {
  job *j = L->lq_head;
  if (!j) return NULL;
  L->lq_head = j->next;
  if (!L->lq_head) L->lq_tail = NULL;
  j->next = NULL;
  return j;
}

/* The head's answer: go (or Redis unavailable: fail open), or wait. */
static void on_limit_q(redisReply *r, void *ud) {
  loop_t *L = ud;
  L->lq_busy = 0;
  if (L->closing) {
    job *j;
    while ((j = lq_pop(L)) != NULL) job_drop(j);
    return;
  }
  int64_t wait = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  if (wait > 0) {
    sl_metric_add(L->m_limiter_waits, 1);
    uv_timer_start(&L->lq_timer, on_lq_timer, (uint64_t)wait, 0);
    return;
  }
  job *j = lq_pop(L);
  if (j) run_process(j);
  limiter_try(L);
}

static void limiter_try(loop_t *L) {
  if (L->lq_busy || !L->lq_head || L->closing) return;
  char rate[32], burst[32];
  snprintf(rate, sizeof rate, "%.17g", L->cc->provider_rate);
  snprintf(burst, sizeof burst, "%.17g", L->cc->provider_burst >= 1 ? L->cc->provider_burst : 1);
  const char *argv[] = {"EVAL", sl_limiter_lua, "2", L->limit_key, L->pause_key, rate, burst, "1"};
  L->lq_busy = 1;
  if (sl_aredis_argv(L->redis, on_limit_q, L, 8, argv, NULL) != 0) {
    L->lq_busy = 0; /* Redis unavailable: fail open for the head */
    job *j = lq_pop(L);
    if (j) run_process(j);
    if (L->lq_head) uv_timer_start(&L->lq_timer, on_lq_timer, 10, 0);
  }
}

static void gate_limits(job *j);

/* Lets a held job go without finishing it: its offset stays uncommitted and
 * the message is redelivered (to this stage or the partition's next owner). */
static void held_release(job *j) {
  loop_t *L = j->L;
  int revoking = j->p && j->p->revoking;
  job_timer_release(j);
  key_release(j);
  L->inflight--;
  L->active--;
  sl_metric_gauge_add(L->m_inflight, -1);
  job_free(j);
  if (revoking) revoke_check(L);
}

/* The job's partition is being taken away (or was): it must not start a
 * provider call; its message is redelivered to the partition's owner. */
static int job_stale(const job *j) {
  return j->p && (j->p->revoking || j->p->revoked || j->epoch != j->p->epoch);
}

static void bq_push(loop_t *L, job *j) {
  j->next = NULL;
  if (L->bq_tail) L->bq_tail->next = j;
  else L->bq_head = j;
  L->bq_tail = j;
  L->bq_len++;
  sl_metric_set(L->m_held, L->bq_len);
}

static job *bq_pop(loop_t *L) {
  job *j = L->bq_head;
  if (!j) return NULL;
  L->bq_head = j->next;
  if (!L->bq_head) L->bq_tail = NULL;
  j->next = NULL;
  L->bq_len--;
  sl_metric_set(L->m_held, L->bq_len);
  return j;
}

/* The breaker may let something through: one probe while it is half-open,
 * everything once it is closed again. */
static void on_bq_timer(uv_timer_t *t) {
  loop_t *L = t->data;
  while (L->bq_head && !L->closing) {
    int64_t retry_in = 0;
    if (!sl_breaker_allow(L->breaker, sl_now_ms(), &retry_in)) {
      uv_timer_start(&L->bq_timer, on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
      return;
    }
    sl_metric_set(L->m_breaker_state, sl_breaker_get_state(L->breaker));
    gate_limits(bq_pop(L));
    if (sl_breaker_get_state(L->breaker) != SL_BREAKER_CLOSED) { /* a probe is out */
      uv_timer_start(&L->bq_timer, on_bq_timer, (uint64_t)L->cc->breaker_probe_interval_ms, 0);
      return;
    }
  }
}

static void circuit_open(job *j, int64_t retry_in) {
  loop_t *L = j->L;
  sl_metric_add(L->m_circuit_skips, 1);
  if (L->cc->breaker_hold) {
    if (L->stopping) { /* not processed: redelivered after the restart */
      held_release(j);
      return;
    }
    bq_push(L, j);
    if (!uv_is_active((uv_handle_t *)&L->bq_timer))
      uv_timer_start(&L->bq_timer, on_bq_timer, (uint64_t)(retry_in > 10 ? retry_in : 10), 0);
    return;
  }
  memset(&j->res, 0, sizeof j->res);
  sl_result_set(&j->res, SL_OUTCOME_RETRY, "circuit_open",
                "provider %s is failing; its circuit breaker is open", L->o->provider);
  to_retry(j);
  produce(j);
}

/* Without a rate: only a 429 pause (PTTL of the pause key) can hold a call. */
static void on_pause_ttl(uv_timer_t *t) { gate(t->data); }

static void on_pause(redisReply *r, void *ud) {
  job *j = ud;
  if (j->L->closing) {
    job_drop(j);
    return;
  }
  int64_t wait = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  if (wait > 0) {
    sl_metric_add(j->L->m_limiter_waits, 1);
    job_after(j, wait, on_pause_ttl, gate);
    return;
  }
  run_process(j); /* not paused, or Redis unavailable: fail open */
}

static void gate(job *j) {
  loop_t *L = j->L;
  if (L->closing) {
    job_drop(j);
    return;
  }
  if (job_stale(j)) {
    held_release(j);
    return;
  }
  if (L->o->provider) {
    int64_t retry_in = 0;
    if (L->bq_head || !sl_breaker_allow(L->breaker, sl_now_ms(), &retry_in)) {
      circuit_open(j, retry_in); /* behind those already held, in order */
      return;
    }
    sl_metric_set(L->m_breaker_state, sl_breaker_get_state(L->breaker));
  }
  gate_limits(j);
}

/* The rest of the gate, once the breaker let the job through. */
static void gate_limits(job *j) {
  loop_t *L = j->L;
  if (L->o->provider) {
    if (L->cc->provider_rate > 0) { /* queue behind the limiter */
      if (L->lq_tail) L->lq_tail->next = j;
      else L->lq_head = j;
      L->lq_tail = j;
      limiter_try(L);
      return;
    }
    const char *argv[] = {"PTTL", L->pause_key};
    if (sl_aredis_argv(L->redis, on_pause, j, 2, argv, NULL) == 0) return;
  }
  run_process(j);
}

/* ---- processing on the pool ---- */

static void work_cb(uv_work_t *w) {
  job *j = w->data;
  j->L->o->process(j->L->o->ud, j->m, &j->out, &j->res);
}

static void complete(job *j);

static void after_work_cb(uv_work_t *w, int status) {
  job *j = w->data;
  (void)status;
  j->in_pool = 0;
  complete(j);
}

void sl_job_done(job *j) {
  j->in_async = 0;
  complete(j);
}

const rd_kafka_message_t *sl_job_message(const job *j) { return j->m; }
sl_outbox *sl_job_outbox(job *j) { return &j->out; }
sl_result *sl_job_result(job *j) { return &j->res; }
const char *sl_job_key(const job *j) { return j->key; }
sl_httpc *sl_job_http(job *j) { return j->L->http; }

/* The processor is finished with the job: act on its outcome. */
static void complete(job *j) {
  loop_t *L = j->L;
  if (L->closing) {
    job_drop(j);
    return;
  }
  if (L->o->provider && j->res.provider_called) {
    int ok = j->res.outcome != SL_OUTCOME_RETRY;
    sl_breaker_record(L->breaker, sl_now_ms(), ok);
    sl_metric_add(j->res.outcome == SL_OUTCOME_DONE   ? L->m_calls_ok
                  : j->res.outcome == SL_OUTCOME_FAIL ? L->m_calls_perm
                  : j->res.provider_throttled         ? L->m_calls_throttled
                                                      : L->m_calls_fail,
                  1);
    sl_histogram_observe(L->h_call, (double)(uv_hrtime() - j->call_ns) / 1e9);
    sl_breaker_state st = sl_breaker_get_state(L->breaker);
    if ((int64_t)st != (int64_t)sl_metric_value(L->m_breaker_state) && st == SL_BREAKER_OPEN)
      sl_log(SL_LOG_WARN, NULL, "provider %s: circuit breaker opened", L->o->provider);
    sl_metric_set(L->m_breaker_state, st);
    if (L->bq_head && st != SL_BREAKER_OPEN) /* the probe answered: let the held go */
      uv_timer_start(&L->bq_timer, on_bq_timer, 0, 0);
    if (j->res.provider_throttled && retry_after(L, &j->res) > 0 && !L->closing) {
      /* pause the provider for every replica (one atomic script that only
       * ever extends a pause), for at most provider.max_retry_after_ms */
      char ms[32];
      snprintf(ms, sizeof ms, "%lld", (long long)retry_after(L, &j->res));
      const char *a[] = {"EVAL", sl_limiter_pause_lua, "1", L->pause_key, ms};
      sl_aredis_argv(L->redis, NULL, NULL, 5, a, NULL);
      sl_log(SL_LOG_WARN, j->key, "provider %s throttled us: pausing all replicas for %s ms",
             L->o->provider, ms);
    }
  }
  if (j->res.outcome == SL_OUTCOME_DONE && j->out.failed) {
    /* the processor's outputs are incomplete (an add failed: outbox full,
     * topic or key too long, no memory): storing or producing the rest and
     * committing would lose the missing one */
    int e = j->out.failed;
    sl_outbox_clear(&j->out);
    sl_result_set(&j->res, SL_OUTCOME_FAIL, "output_invalid",
                  "an output could not be added to the outbox: %s", sl_strerror(e));
  }
  if (!(j->res.outcome == SL_OUTCOME_DONE && L->o->idempotent && j->out.n))
    claim_release(j); /* nothing to store: the next claimant calls */
  switch (j->res.outcome) {
  case SL_OUTCOME_DONE:
    sl_metric_add(L->m_done, 1);
    if (L->o->idempotent && j->out.n) {
      store_and_produce(j);
      return;
    }
    break;
  case SL_OUTCOME_RETRY:
    to_retry(j);
    break;
  case SL_OUTCOME_FAIL:
    sl_outbox_clear(&j->out);
    add_dead_letter(j);
    break;
  }
  produce(j);
}

/* ---- the claim: one paid call per input across replicas (sl_claim.h) ---- */

static void call_now(job *j);
static void claim_try(job *j);

static int claims_on(const job *j) {
  const loop_t *L = j->L;
  return L->o->provider && L->o->idempotent && L->cc->claim_lease_ms > 0 && j->digest[0];
}

static void claim_key(const job *j, char *buf, size_t len) {
  snprintf(buf, len, "sl:claim:%s:%s:%.32s", j->L->o->stage, j->key, j->digest);
}

static void claim_release(job *j) {
  if (!j->claimed) return;
  j->claimed = 0;
  char k[256];
  claim_key(j, k, sizeof k);
  const char *argv[] = {"EVAL", sl_claim_release_lua, "1", k, j->owner};
  sl_aredis_argv(j->L->redis, NULL, NULL, 5, argv, NULL);
}

static void on_claim_timer(uv_timer_t *t) { claim_try(t->data); }

static void on_claim(redisReply *r, void *ud) {
  job *j = ud;
  loop_t *L = j->L;
  if (L->closing) {
    job_drop(j);
    return;
  }
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
    call_now(j); /* Redis unavailable: fail open, as the store does */
    return;
  }
  long long code = r->element[0]->integer;
  const redisReply *v = r->element[1];
  if (code == SL_CLAIM_STORED) {
    if (use_stored(j, v->str, v->len)) return;
    call_now(j); /* unusable stored outputs: as if there were none */
    return;
  }
  if (code == SL_CLAIM_CLAIMED) {
    j->claimed = 1;
    call_now(j);
    return;
  }
  /* another replica is calling for this input: wait for its outputs (or
   * for its lease to end), asking again every half second */
  int64_t ttl = strtoll(v->str, NULL, 10);
  if (j->claim_waits++ == 0) {
    sl_metric_add(L->m_claim_waits, 1);
    sl_log(SL_LOG_INFO, j->key,
           "another replica is calling %s for this input (lease %lld ms left): waiting for "
           "its outputs instead of calling",
           L->o->provider, (long long)ttl);
  }
  job_after(j, ttl > 0 && ttl < 500 ? ttl + 1 : 500, on_claim_timer, claim_try);
}

static void claim_try(job *j) {
  loop_t *L = j->L;
  if (job_stale(j)) { /* its partition went away while it waited */
    held_release(j);
    return;
  }
  char k[256], sk[256], lease[32];
  claim_key(j, k, sizeof k);
  idem_key(j, sk, sizeof sk);
  snprintf(lease, sizeof lease, "%lld", (long long)L->cc->claim_lease_ms);
  if (!j->owner[0])
    snprintf(j->owner, sizeof j->owner, "%s:%llu", L->owner, (unsigned long long)++L->owner_seq);
  const char *argv[] = {"EVAL", sl_claim_take_lua, "2", k, sk, j->owner, lease};
  if (sl_aredis_argv(L->redis, on_claim, j, 7, argv, NULL) != 0) call_now(j);
}

/* Extends the claims of every call still running (one script per batch). */
static void on_claim_renew(uv_timer_t *t) {
  loop_t *L = t->data;
  enum { BATCH = 256 };
  char(*keys)[256] = malloc(BATCH * sizeof *keys);
  const char **argv = malloc((3 + 2 * BATCH + 1) * sizeof *argv);
  if (!keys || !argv) { /* next time: the leases outlast two missed renewals */
    free(keys);
    free(argv);
    return;
  }
  char lease[32];
  snprintf(lease, sizeof lease, "%lld", (long long)L->cc->claim_lease_ms);
  job *j = L->jobs;
  while (j) {
    const char *owners[BATCH];
    int n = 0;
    for (; j && n < BATCH; j = j->all_next)
      if (j->claimed) {
        claim_key(j, keys[n], sizeof keys[n]);
        owners[n++] = j->owner;
      }
    if (!n) break;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", n);
    int a = 0;
    argv[a++] = "EVAL";
    argv[a++] = sl_claim_renew_lua;
    argv[a++] = nk;
    for (int i = 0; i < n; i++) argv[a++] = keys[i];
    argv[a++] = lease;
    for (int i = 0; i < n; i++) argv[a++] = owners[i];
    sl_aredis_argv(L->redis, NULL, NULL, a, argv, NULL);
  }
  free(keys);
  free(argv);
}

/* claim_try and call_now release a job whose partition went away meanwhile */
static void run_process(job *j) {
  if (claims_on(j) && !j->claimed) {
    claim_try(j);
    return;
  }
  call_now(j);
}

static void call_now(job *j) {
  if (job_stale(j)) {
    claim_release(j);
    held_release(j);
    return;
  }
  j->work.data = j;
  j->out.producer = j->L->producer;
  j->res.outcome = SL_OUTCOME_DONE;
  j->call_ns = uv_hrtime();
  if (j->L->o->start) {
    j->in_async = 1;
    j->L->o->start(j->L->o->ud, j);
    return;
  }
  j->in_pool = 1;
  if (uv_queue_work(&j->L->loop, &j->work, work_cb, after_work_cb) != 0) {
    j->in_pool = 0;
    sl_result_set(&j->res, SL_OUTCOME_RETRY, "internal", "could not queue work");
    to_retry(j);
    produce(j);
  }
}

/* ---- taking messages ---- */

/* Past parking: per-key order, then idempotency lookup, then the gate. */
static void start(job *j) {
  loop_t *L = j->L;
  L->active++;
  j->started_ms = sl_now_ms();
  if (L->cc->per_key_order && j->key[0]) {
    keyq *q = NULL;
    HASH_FIND_STR(L->keys, j->key, q);
    if (q) { /* someone holds the key: wait behind it */
      if (q->tail) q->tail->next = j;
      else q->head = j;
      q->tail = j;
      return;
    }
    q = calloc(1, sizeof *q);
    if (q) {
      snprintf(q->key, sizeof q->key, "%s", j->key);
      HASH_ADD_STR(L->keys, key, q);
      j->keyed = 1;
    }
  }
  holds_key(j);
}

/* The job may run (it holds its key, or keys are not ordered): the
 * idempotency lookup, then the gate. A job handed its key by the one
 * before it comes here too, so it finds what that one stored. */
static void holds_key(job *j) {
  loop_t *L = j->L;
  if (L->o->idempotent) {
    sl_sha256_hex(j->m->payload, j->m->len, j->digest);
    char k[256];
    idem_key(j, k, sizeof k);
    const char *argv[] = {"GET", k};
    if (sl_aredis_argv(L->redis, on_lookup, j, 2, argv, NULL) == 0) return;
  }
  gate(j);
}

static void on_park_timer(uv_timer_t *t) {
  part *p = t->data;
  loop_t *L = p->L;
  int64_t now = sl_now_ms();
  while (p->parked_head && p->parked_head->not_before_ms <= now) {
    job *j = p->parked_head;
    p->parked_head = j->next;
    if (!p->parked_head) p->parked_tail = NULL;
    j->next = NULL;
    start(j);
  }
  if (p->parked_head)
    uv_timer_start(&p->park_timer, on_park_timer,
                   (uint64_t)(p->parked_head->not_before_ms - now), 0);
  else if (p->paused_for_park)
    pause_one(L, p, 0);
}

static void dispatch(loop_t *L, job *j) {
  if (j->p && j->p->retry_tier >= 0) {
    int64_t now = sl_now_ms();
    if (j->p->parked_head || j->not_before_ms > now) {
      /* not due (or queued behind one that is not): park, pause, set the timer */
      if (j->p->parked_tail) j->p->parked_tail->next = j;
      else j->p->parked_head = j;
      j->p->parked_tail = j;
      if (!j->p->paused_for_park) pause_one(L, j->p, 1);
      if (j == j->p->parked_head)
        uv_timer_start(&j->p->park_timer, on_park_timer, (uint64_t)(j->not_before_ms - now), 0);
      return;
    }
  }
  start(j);
}

static void take(loop_t *L, rd_kafka_message_t *m) {
  job *j = calloc(1, sizeof *j);
  if (!j) {
    /* cannot track it: leave it uncommitted; it is redelivered later */
    sl_log(SL_LOG_ERROR, NULL, "out of memory taking a message");
    rd_kafka_message_destroy(m);
    return;
  }
  j->L = L;
  j->m = m;
  j->offset = m->offset;
  snprintf(j->key, sizeof j->key, "%.*s", (int)(m->key_len < 127 ? m->key_len : 127),
           m->key ? (const char *)m->key : "");
  j->p = part_get(L, rd_kafka_topic_name(m->rkt), m->partition, 1);
  if (j->p && (j->p->revoking || j->p->revoked)) {
    /* fetched before the partition was taken away: its owner reads it */
    rd_kafka_message_destroy(m);
    free(j);
    return;
  }
  int64_t ts = rd_kafka_message_timestamp(m, NULL);
  if (!j->p || ring_push(j->p, m->offset, ts > 0 ? ts : sl_now_ms()) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "out of memory tracking a message");
    rd_kafka_message_destroy(m);
    free(j);
    return;
  }
  j->epoch = j->p->epoch;
  j->all_next = L->jobs;
  if (L->jobs) L->jobs->all_prev = j;
  L->jobs = j;
  j->attempts = (unsigned)hdr_i64(m, SL_HDR_ATTEMPT);
  j->first_failure_ms = hdr_i64(m, SL_HDR_FIRST_FAILURE);
  j->not_before_ms = hdr_i64(m, SL_HDR_NOT_BEFORE);
  if (j->p->retry_tier >= 0) {
    /* the header is the sending replica's clock: never wait longer than
     * this tier's delay (or the Retry-After cap) from now, whatever it says
     * (a clock ahead, a copy written before the cap existed) */
    int64_t tier = L->tier_ms[j->p->retry_tier], cap = L->cc->max_retry_after_ms;
    int64_t latest = sl_now_ms() + (tier > cap ? tier : cap);
    if (j->not_before_ms > latest) j->not_before_ms = latest;
  }
  L->inflight++;
  sl_metric_gauge_add(L->m_inflight, 1);
  if (L->inflight >= L->cc->max_in_flight) set_pause(L, 1);
  dispatch(L, j);
}

static void drain_consumer(void *ud) {
  loop_t *L = ud;
  rd_kafka_message_t *m;
  while ((m = rd_kafka_consumer_poll(L->consumer, 0)) != NULL) {
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        sl_log(SL_LOG_WARN, NULL, "consume: %s", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    if (L->stopping) { /* not taken: stays uncommitted, redelivered later */
      rd_kafka_message_destroy(m);
      continue;
    }
    take(L, m);
  }
}

/* Frees a partition's parked (not yet due) retry messages without
 * processing them; their offsets stay uncommitted, so they come back. */
static void release_parked(loop_t *L, part *p) {
  while (p->parked_head) {
    job *j = p->parked_head;
    p->parked_head = j->next;
    L->inflight--;
    sl_metric_gauge_add(L->m_inflight, -1);
    job_free(j);
  }
  p->parked_tail = NULL;
  uv_timer_stop(&p->park_timer);
}

/* ---- rebalancing ----
 *
 * Cooperative (KIP-429, the default): an assign or revoke names only the
 * partitions that change owner; the others keep running. Eager (range,
 * roundrobin): every rebalance revokes everything first. Either way a
 * revoke is two steps:
 *   1. at once: the partitions are paused; their parked retries, the jobs
 *      held by the breaker or queued at the limiter, and every job that has
 *      not yet reached its provider call are released uncalled (their
 *      offsets stay uncommitted: the new owner reads them);
 *   2. once the calls already running on them have finished, stored their
 *      outputs and had them acknowledged, or stage.revoke_wait_ms has
 *      passed: commit, then unassign, which lets the rebalance complete.
 * So the new owner repeats a paid call only when one ran longer than the
 * wait. A lost assignment (session timed out) skips the wait and commits
 * nothing: someone else owns those partitions already.
 */

static int list_has(const rd_kafka_topic_partition_list_t *l, const char *topic, int32_t pn) {
  return l && rd_kafka_topic_partition_list_find(l, topic, pn) != NULL;
}

/* Jobs of partitions being revoked that have not finished. */
static int64_t revoke_pending(loop_t *L) {
  int64_t n = 0;
  for (job *j = L->jobs; j; j = j->all_next)
    if (j->p && j->p->revoking && j->epoch == j->p->epoch) n++;
  return n;
}

/* Removes the stale jobs of a FIFO (breaker hold, limiter queue) and
 * releases them uncalled. */
static void release_stale(loop_t *L, job **head, job **tail, int64_t *len) {
  job *keep = NULL, *keep_tail = NULL, *stale = NULL;
  for (job *j = *head, *nx; j; j = nx) {
    nx = j->next;
    j->next = NULL;
    if (job_stale(j)) {
      j->next = stale;
      stale = j;
      if (len) (*len)--;
    } else {
      if (keep_tail) keep_tail->next = j;
      else keep = j;
      keep_tail = j;
    }
  }
  *head = keep;
  *tail = keep_tail;
  while (stale) {
    job *j = stale;
    stale = j->next;
    j->next = NULL;
    held_release(j);
  }
}

static void revoke_finish(loop_t *L) {
  rd_kafka_topic_partition_list_t *l = L->revoking;
  if (!l) return;
  uv_timer_stop(&L->revoke_timer);
  int64_t left = revoke_pending(L);
  if (!L->revoking_lost) commit(L, 1, NULL); /* what finished on them, and the rest */
  L->revoking = NULL;
  for (int i = 0; i < l->cnt; i++) {
    part *p = part_get(L, l->elems[i].topic, l->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 0;
    p->revoked = 1;
    release_parked(L, p);
    p->paused_for_park = 0;
  }
  if (L->cooperative) {
    rd_kafka_error_t *e = rd_kafka_incremental_unassign(L->consumer, l);
    if (e) {
      sl_log(SL_LOG_WARN, NULL, "incremental unassign: %s", rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
    }
  } else {
    rd_kafka_assign(L->consumer, NULL);
  }
  /* what stays assigned */
  rd_kafka_topic_partition_list_t *keep =
      rd_kafka_topic_partition_list_new(L->assignment ? L->assignment->cnt : 0);
  for (int i = 0; L->assignment && i < L->assignment->cnt; i++)
    if (!list_has(l, L->assignment->elems[i].topic, L->assignment->elems[i].partition))
      rd_kafka_topic_partition_list_add(keep, L->assignment->elems[i].topic,
                                        L->assignment->elems[i].partition);
  if (L->assignment) rd_kafka_topic_partition_list_destroy(L->assignment);
  L->assignment = keep;
  if (left)
    sl_log(SL_LOG_WARN, NULL,
           "revoked %d partition(s)%s with %lld message(s) still running: the new owner "
           "reads them again (and waits for their outputs where a claim holds them)",
           l->cnt, L->revoking_lost ? " (lost)" : " after stage.revoke_wait_ms", (long long)left);
  else
    sl_log(SL_LOG_INFO, NULL, "revoked %d partition(s)%s; %d assigned", l->cnt,
           L->revoking_lost ? " (lost)" : "", keep->cnt);
  sl_metric_set(L->m_assigned, keep->cnt);
  sl_admin_set_ready(L->o->admin, 1);
  rd_kafka_topic_partition_list_destroy(l);
}

static void revoke_check(loop_t *L) {
  if (L->revoking && revoke_pending(L) == 0) revoke_finish(L);
}

static void on_revoke_timer(uv_timer_t *t) { revoke_finish(t->data); }

static void revoke_begin(loop_t *L, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts) {
  if (L->revoking) revoke_finish(L); /* not expected: librdkafka waits for the first */
  if (L->cooperative) { /* this generation's assign, then the rejoin's */
    L->rejoin_assigns = rd_kafka_assignment_lost(rk) ? 1 : 2;
    L->rejoin_until_ms = sl_now_ms() + L->cc->revoke_wait_ms + L->cc->kafka_session_timeout_ms;
  }
  L->revoking = rd_kafka_topic_partition_list_copy(parts);
  L->revoking_lost = rd_kafka_assignment_lost(rk);
  rd_kafka_pause_partitions(rk, parts); /* nothing new from them */
  for (int i = 0; i < parts->cnt; i++) {
    part *p = part_get(L, parts->elems[i].topic, parts->elems[i].partition, 0);
    if (!p) continue;
    p->revoking = 1;
    release_parked(L, p); /* not due yet, uncalled: redelivered */
    p->paused_for_park = 0;
  }
  sl_admin_set_ready(L->o->admin, 0);
  release_stale(L, &L->bq_head, &L->bq_tail, &L->bq_len);
  sl_metric_set(L->m_held, L->bq_len);
  if (!L->lq_busy) { /* the head may be waiting on Redis: it checks itself */
    release_stale(L, &L->lq_head, &L->lq_tail, NULL);
  } else if (L->lq_head) {
    job *h = L->lq_head, *rest_tail = L->lq_tail;
    job *rest = h->next;
    h->next = NULL;
    job *rt = rest ? rest_tail : NULL;
    release_stale(L, &rest, &rt, NULL);
    h->next = rest;
    L->lq_tail = rest ? rt : h;
  }
  int64_t pending = revoke_pending(L);
  sl_log(SL_LOG_INFO, NULL, "revoking %d partition(s)%s; %lld message(s) of them still running",
         parts->cnt, L->revoking_lost ? " (assignment lost)" : "", (long long)pending);
  if (pending == 0 || L->revoking_lost || L->closing || L->cc->revoke_wait_ms <= 0) {
    revoke_finish(L);
    return;
  }
  uv_timer_start(&L->revoke_timer, on_revoke_timer, (uint64_t)L->cc->revoke_wait_ms, 0);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
  loop_t *L = opaque;
  L->cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    if (L->revoking) revoke_finish(L);
    if (L->rejoin_assigns > 0) L->rejoin_assigns--;
    for (int i = 0; i < parts->cnt; i++) { /* ours from here on: fresh rings */
      part *p = part_get(L, parts->elems[i].topic, parts->elems[i].partition, 1);
      if (p) part_reset(p);
    }
    if (L->cooperative) {
      rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
      if (e) {
        sl_log(SL_LOG_WARN, NULL, "incremental assign: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, parts);
    }
    if (!L->assignment || !L->cooperative) {
      if (L->assignment) rd_kafka_topic_partition_list_destroy(L->assignment);
      L->assignment = rd_kafka_topic_partition_list_new(parts->cnt);
    }
    for (int i = 0; i < parts->cnt; i++)
      if (!list_has(L->assignment, parts->elems[i].topic, parts->elems[i].partition))
        rd_kafka_topic_partition_list_add(L->assignment, parts->elems[i].topic,
                                          parts->elems[i].partition);
    /* librdkafka keeps a partition's pause flag across unassign and assign:
     * resume what was handed to us, then pause again where we must */
    rd_kafka_resume_partitions(rk, parts);
    if (L->paused_all || L->stopping) rd_kafka_pause_partitions(rk, parts);
    sl_log(SL_LOG_INFO, NULL, "assigned %d partition(s) (%s); %d in all", parts->cnt,
           L->cooperative ? "incremental" : "eager", L->assignment->cnt);
    sl_metric_set(L->m_assigned, L->assignment->cnt);
    sl_admin_set_ready(L->o->admin, 1);
  } else {
    revoke_begin(L, rk, parts);
  }
}

/* ---- consumer lag from librdkafka's statistics ---- */

/* a series labelled with the stage (and extra labels) */
static sl_metric *metric(const char *name, const char *stage, const char *extra,
                         const char *help, int gauge) {
  char l[256];
  snprintf(l, sizeof l, "stage=\"%s\"%s%s", stage, extra ? "," : "", extra ? extra : "");
  return gauge ? sl_metrics_gauge(name, l, help) : sl_metrics_counter(name, l, help);
}

static sl_metric *lag_series(loop_t *L, const char *topic, int32_t partition) {
  for (int i = 0; i < L->nlag; i++)
    if (L->lag[i].partition == partition && strcmp(L->lag[i].topic, topic) == 0)
      return L->lag[i].m;
  if (L->nlag >= SL_LAG_SERIES_MAX || strlen(topic) >= sizeof L->lag[0].topic) return NULL;
  char l[200];
  snprintf(l, sizeof l, "topic=\"%s\",partition=\"%d\"", topic, (int)partition);
  sl_metric *m = metric("sluice_consumer_lag_messages", L->o->stage, l,
                               "Messages not yet committed by this stage's group, by assigned "
                               "partition (from the consumer's statistics, every 5 s)",
                               1);
  if (!m) return NULL;
  snprintf(L->lag[L->nlag].topic, sizeof L->lag[0].topic, "%s", topic);
  L->lag[L->nlag].partition = partition;
  L->lag[L->nlag].m = m;
  L->nlag++;
  return m;
}

/* Statistics JSON (STATISTICS.md): topics.<t>.partitions.<p>.consumer_lag is
 * the high watermark minus the committed offset (-1 while unknown). Only the
 * partitions assigned to this process are reported; a partition that went
 * elsewhere drops to 0 here (its new owner reports it). Runs inside
 * rd_kafka_consumer_poll(), on the loop thread. */
static int on_stats(rd_kafka_t *rk, char *js, size_t len, void *opaque) {
  (void)rk;
  loop_t *L = opaque;
  json_t *root = json_loadb(js, len, 0, NULL);
  if (!root) return 0;
  json_t *topics = json_object_get(root, "topics");
  int seen[SL_LAG_SERIES_MAX] = {0};
  for (int i = 0; L->assignment && i < L->assignment->cnt; i++) {
    const rd_kafka_topic_partition_t *tp = &L->assignment->elems[i];
    char pn[16];
    snprintf(pn, sizeof pn, "%d", (int)tp->partition);
    json_t *pj = json_object_get(
        json_object_get(json_object_get(topics, tp->topic), "partitions"), pn);
    json_t *lj = json_object_get(pj, "consumer_lag");
    if (!json_is_integer(lj)) continue;
    json_int_t lag = json_integer_value(lj);
    if (lag < 0) { /* nothing committed yet: all that is retained waits */
      json_int_t hi = json_integer_value(json_object_get(pj, "hi_offset"));
      json_int_t lo = json_integer_value(json_object_get(pj, "lo_offset"));
      if (!json_is_integer(json_object_get(pj, "hi_offset")) || hi < 0 || lo < 0) continue;
      lag = hi - lo;
    }
    sl_metric *m = lag_series(L, tp->topic, tp->partition);
    sl_metric_set(m, (int64_t)lag);
    for (int k = 0; k < L->nlag; k++)
      if (L->lag[k].m == m) seen[k] = 1;
  }
  for (int k = 0; k < L->nlag; k++)
    if (!seen[k]) sl_metric_set(L->lag[k].m, 0);
  json_decref(root);
  return 0;
}

/* ---- the tick: commits, metrics, stop ---- */

static void begin_stop(loop_t *L);

static void on_tick(uv_timer_t *t) {
  loop_t *L = t->data;
  drain_consumer(L);
  if (L->rejoin_assigns > 0 && sl_now_ms() < L->rejoin_until_ms) {
    /* rejoining after a revoke: commit once the new generation is ours */
  } else {
    L->rejoin_assigns = 0;
    commit(L, 0, NULL);
  }
  /* age of the oldest message taken and not finished */
  int64_t oldest = 0, now = sl_now_ms();
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) {
    if (p->n && !p->revoked && (!oldest || p->ts[p->head] < oldest)) oldest = p->ts[p->head];
  }
  sl_metric_set(L->m_oldest, oldest ? (now - oldest) / 1000 : 0);
  /* the same over main inputs only: retry topics hold messages that wait on
   * purpose (their tier's delay) */
  int64_t waiting = 0;
  HASH_ITER(hh, L->parts, p, tmp) {
    if (p->n && !p->revoked && p->retry_tier < 0 && (!waiting || p->ts[p->head] < waiting))
      waiting = p->ts[p->head];
  }
  sl_metric_set(L->m_oldest_waiting, waiting && now > waiting ? (now - waiting) / 1000 : 0);
  if (*L->stop && !L->stopping) begin_stop(L);
  if (L->stopping) {
    if (L->active == 0 || now >= L->stop_deadline) {
      if (L->active)
        sl_log(SL_LOG_WARN, NULL,
               "drain bound reached with %lld message(s) unfinished; they will be redelivered",
               (long long)L->active);
      uv_stop(&L->loop);
    }
  }
}

static void begin_stop(loop_t *L) {
  L->stopping = 1;
  L->stop_deadline = sl_now_ms() + (int64_t)(L->cc->drain_timeout_s * 1000);
  sl_log(SL_LOG_INFO, NULL, "stopping: no new messages; %lld in flight",
         (long long)L->active);
  set_pause(L, 1);
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) { /* parked retries are not in flight */
    release_parked(L, p);
  }
  uv_timer_stop(&L->bq_timer);
  job *h;
  while ((h = bq_pop(L)) != NULL) held_release(h); /* redelivered after the restart */
}

/* ------------------------------------------------------------------ */


static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int sl_stage_run(const sl_stage_opts *o, volatile sig_atomic_t *stop) {
  char err[512];
  loop_t *L = calloc(1, sizeof *L);
  if (!L) return SL_ENOMEM;
  L->o = o;
  L->cc = o->common;
  L->stop = stop;
  int rc = 0;
  if (!o->process == !o->start) {
    sl_log(SL_LOG_ERROR, NULL, "stage %s: set exactly one of process and start", o->stage);
    free(L);
    return SL_EINVAL;
  }
  L->ntiers = sl_retry_tiers_parse(L->cc->retry_tiers, L->tier_ms, L->tier_label);
  if (L->ntiers < 0) {
    sl_log(SL_LOG_ERROR, NULL, "retry.tiers \"%s\": expected e.g. 5s,30s,2m,10m (ascending)",
           L->cc->retry_tiers);
    free(L);
    return SL_ECONFIG;
  }
  for (int i = 0; i < L->ntiers; i++)
    snprintf(L->tier_topic[i], sizeof L->tier_topic[i], "%s.retry.%s", o->stage,
             L->tier_label[i]);
  snprintf(L->limit_key, sizeof L->limit_key, "sl:limit:%s", o->provider ? o->provider : "-");
  snprintf(L->pause_key, sizeof L->pause_key, "sl:pause:%s", o->provider ? o->provider : "-");

  const char *h_out = "Input messages finished, by outcome";
  L->m_done = metric("sluice_messages_total", o->stage, "outcome=\"done\"", h_out, 0);
  L->m_retried = metric("sluice_messages_total", o->stage, "outcome=\"retried\"", h_out, 0);
  L->m_dead = metric("sluice_messages_total", o->stage, "outcome=\"dead_lettered\"", h_out, 0);
  for (int i = 0; i < L->ntiers; i++) {
    char t[64];
    snprintf(t, sizeof t, "tier=\"%s\"", L->tier_label[i]);
    L->m_tier[i] = metric("sluice_retries_total", o->stage, t,
                          "Messages sent to a retry tier, by tier", 0);
  }
  L->m_inflight = metric("sluice_in_flight", o->stage, NULL, "Messages being processed", 1);
  L->m_idem_hits = metric("sluice_idempotency_hits_total", o->stage, NULL,
                          "Inputs answered from stored outputs (provider calls avoided)", 0);
  L->m_oldest = metric("sluice_oldest_uncommitted_age_seconds", o->stage, NULL,
                       "Age of the oldest message taken and not yet finished", 1);
  L->m_oldest_waiting =
      metric("sluice_oldest_unprocessed_age_seconds", o->stage, NULL,
             "Age of the oldest input message (main topics, not retry tiers) not yet finished", 1);
  L->m_claim_waits =
      metric("sluice_claim_waits_total", o->stage, NULL,
             "Inputs another replica was already calling the provider for: waited for its "
             "outputs instead of calling", 0);
  {
    char host[40] = "", rnd[17] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    if (sl_random_hex(8, rnd, sizeof rnd) != 0) snprintf(rnd, sizeof rnd, "%llx",
                                                          (unsigned long long)uv_hrtime());
    snprintf(L->owner, sizeof L->owner, "%.39s:%ld:%.16s", host, (long)getpid(), rnd);
  }
  L->m_assigned = metric("sluice_assigned_partitions", o->stage, NULL,
                         "Partitions assigned to this process (0: not consuming)", 1);
  if (o->provider) {
    char pl[128];
    snprintf(pl, sizeof pl, "provider=\"%s\"", o->provider);
    L->m_limiter_waits = metric("sluice_limiter_waits_total", o->stage, pl,
                                "Calls delayed by the shared rate limit", 0);
    L->m_breaker_state = metric("sluice_breaker_state", o->stage, pl,
                                "Circuit breaker: 0 closed, 1 open, 2 half-open", 1);
    L->m_circuit_skips = metric("sluice_breaker_rejections_total", o->stage, pl,
                                "Messages the open breaker held back (breaker.hold) or sent "
                                "to a retry tier", 0);
    L->m_held = metric("sluice_breaker_held", o->stage, pl,
                       "Messages held in memory while the breaker is open", 1);
    char okl[192], fl[192];
    snprintf(okl, sizeof okl, "%s,result=\"ok\"", pl);
    snprintf(fl, sizeof fl, "%s,result=\"transient_failure\"", pl);
    L->m_calls_ok = metric("sluice_provider_calls_total", o->stage, okl,
                           "Provider calls by result", 0);
    L->m_calls_fail = metric("sluice_provider_calls_total", o->stage, fl,
                             "Provider calls by result", 0);
    char tl[192], perml[192];
    snprintf(tl, sizeof tl, "%s,result=\"throttled\"", pl);
    snprintf(perml, sizeof perml, "%s,result=\"permanent_failure\"", pl);
    L->m_calls_throttled = metric("sluice_provider_calls_total", o->stage, tl,
                                  "Provider calls by result", 0);
    L->m_calls_perm = metric("sluice_provider_calls_total", o->stage, perml,
                             "Provider calls by result", 0);
    char hl[256];
    snprintf(hl, sizeof hl, "stage=\"%s\",%s", o->stage, pl);
    L->h_call = sl_metrics_histogram("sluice_provider_call_seconds", hl,
                                     "Provider call latency (from the call to its outcome)",
                                     sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
    sl_breaker_opts bo = {L->cc->breaker_failure_ratio, (unsigned)L->cc->breaker_min_calls,
                          L->cc->breaker_window_ms, L->cc->breaker_probe_interval_ms};
    if ((rc = sl_breaker_new(&L->breaker, &bo)) != 0) {
      sl_log(SL_LOG_ERROR, NULL, "breaker settings: %s", sl_strerror(rc));
      free(L);
      return rc;
    }
  }

  /* the worker pool starts on first use: size it before that */
  char nworkers[16];
  snprintf(nworkers, sizeof nworkers, "%lld",
           (long long)(L->cc->workers > 0 ? (L->cc->workers < 128 ? L->cc->workers : 128) : 4));
  setenv("UV_THREADPOOL_SIZE", nworkers, 1);
  char group[128], client[128], tp[32];
  snprintf(group, sizeof group, "sluice-%s", o->stage);
  snprintf(client, sizeof client, "sluice-%s", o->stage);
  uv_loop_init(&L->loop);
  sl_kafka_group_opts gopts = {L->cc->kafka_assignment, L->cc->kafka_session_timeout_ms,
                               L->cc->kafka_heartbeat_ms};
  rc = sl_kafka_consumer_new(&L->consumer, L->cc->kafka_brokers, group, client, &gopts, err,
                             sizeof err, on_rebalance, on_commit, on_stats, L);
  if (rc == 0)
    rc = sl_kafka_producer_new(&L->producer, L->cc->kafka_brokers, client, on_delivery, NULL,
                               err, sizeof err);
  if (rc == 0) rc = sl_aredis_new(&L->redis, &L->loop, L->cc->redis_url);
  if (rc == 0 && o->start) rc = sl_httpc_new(&L->http, &L->loop);
  if (rc == 0) rc = sl_kafka_uv_attach(&L->pku, L->producer, &L->loop);
  if (rc == 0) rc = sl_kafka_uv_attach_consumer(&L->cku, L->consumer, &L->loop, drain_consumer, L);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err[0] ? err : sl_strerror(rc));
    goto out;
  }
  rd_kafka_topic_partition_list_t *subs =
      rd_kafka_topic_partition_list_new((int)(o->ntopics + (size_t)L->ntiers));
  for (size_t i = 0; i < o->ntopics; i++)
    rd_kafka_topic_partition_list_add(subs, o->topics[i], RD_KAFKA_PARTITION_UA);
  for (int i = 0; i < L->ntiers; i++)
    rd_kafka_topic_partition_list_add(subs, L->tier_topic[i], RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(L->consumer, subs);
  rd_kafka_topic_partition_list_destroy(subs);
  if (e) {
    sl_log(SL_LOG_ERROR, NULL, "subscribe failed: %s", rd_kafka_err2str(e));
    rc = SL_EKAFKA;
    goto out;
  }
  snprintf(tp, sizeof tp, "%d", L->ntiers);
  sl_log(SL_LOG_INFO, NULL,
         "consuming %s%s%s and %s retry tiers (%s .. %s) as group %s; up to %lld in flight",
         o->topics[0], o->ntopics > 1 ? ", " : "", o->ntopics > 1 ? o->topics[1] : "", tp,
         L->tier_topic[0], L->tier_topic[L->ntiers - 1], group,
         (long long)L->cc->max_in_flight);
  uv_timer_init(&L->loop, &L->tick);
  L->tick.data = L;
  uv_timer_init(&L->loop, &L->lq_timer);
  L->lq_timer.data = L;
  uv_timer_init(&L->loop, &L->bq_timer);
  L->bq_timer.data = L;
  uv_timer_init(&L->loop, &L->revoke_timer);
  L->revoke_timer.data = L;
  uv_timer_init(&L->loop, &L->claim_timer);
  L->claim_timer.data = L;
  if (L->o->provider && L->o->idempotent && L->cc->claim_lease_ms > 0) {
    uint64_t every = (uint64_t)(L->cc->claim_lease_ms / 3 > 0 ? L->cc->claim_lease_ms / 3 : 1);
    uv_timer_start(&L->claim_timer, on_claim_renew, every, every);
  }
  uv_timer_start(&L->tick, on_tick, 100, 100);
  uv_run(&L->loop, UV_RUN_DEFAULT);

  /* stopped: from here on unfinished jobs are dropped (never committed) */
  L->closing = 1;
  revoke_finish(L); /* a revoke still waiting: hand its partitions over now */
  commit(L, 1, NULL);
  sl_log(SL_LOG_INFO, NULL, "closing consumer");
  sl_kafka_uv_detach(L->cku);
  L->cku = NULL;
  rd_kafka_consumer_close(L->consumer);
  rd_kafka_flush(L->producer, 10000); /* delivery reports finish their jobs */
  if (rd_kafka_outq_len(L->producer) > 0) { /* Kafka gone: their offsets stay uncommitted */
    rd_kafka_purge(L->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(L->producer, 0);
  }
  commit(L, 1, NULL);
  rc = L->fatal ? SL_EKAFKA : 0;
out:
  L->closing = 1;
  sl_kafka_uv_detach(L->cku);
  sl_kafka_uv_detach(L->pku);
  sl_aredis_free(L->redis); /* pending replies come back NULL: their jobs drop */
  L->redis = NULL;
  sl_httpc_free(L->http);   /* cancelled requests end their jobs (dropped) */
  L->http = NULL;
  L->lq_head = L->lq_tail = NULL; /* their jobs are dropped just below */
  for (job *j = L->jobs, *nx; j; j = nx) { /* what is left, except pool work */
    nx = j->all_next;
    job_timer_release(j);
    if (!j->in_pool && !j->in_async && !j->outstanding) job_drop(j);
  }
  {
    part *p, *tmp;
    HASH_ITER(hh, L->parts, p, tmp) { part_drop(L, p); }
    keyq *q, *qt;
    HASH_ITER(hh, L->keys, q, qt) {
      HASH_DEL(L->keys, q);
      free(q);
    }
  }
  uv_walk(&L->loop, walk_close, NULL);
  uv_run(&L->loop, UV_RUN_DEFAULT);
  uv_loop_close(&L->loop);
  if (L->consumer) rd_kafka_destroy(L->consumer);
  if (L->producer) rd_kafka_destroy(L->producer);
  if (L->assignment) rd_kafka_topic_partition_list_destroy(L->assignment);
  sl_breaker_free(L->breaker);
  free(L);
  return rc;
}
