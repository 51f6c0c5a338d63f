/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage.c — the stage runtime's loop (see sl_stage.h for the contract,
 * sl_stage_int.h for how the runtime is split).
 *
 * Everything but process() runs on one libuv loop:
 *   - the consumer's queue wakes the loop through a pipe (sl_kafka_uv); each
 *     message becomes a job; max_in_flight jobs run at once, up to
 *     stage.prefetch more wait in order for a slot, so a slot that frees
 *     never waits for a fetch; a waiting job starts only while the bytes in
 *     flight (each job's message plus what the stage holds for it: reserved
 *     when it starts, corrected by sl_job_hold) are under
 *     max_bytes_in_flight; at max_in_flight + prefetch messages or at
 *     max_bytes_in_flight bytes no more messages are taken from the
 *     consumers (what they prefetched, at most 8 MiB, waits in librdkafka),
 *     and taking starts again when half the waiting ones have started and
 *     the bytes are below 80% (sl_flow.h); a stage still at a limit after
 *     SL_THROTTLE_PAUSE_MS pauses all partitions instead, so the consumers
 *     keep being polled (rebalances) and memory follows in-flight work,
 *     never the backlog. Not pausing at once matters: a pause drops what
 *     was prefetched and a resume fetches it again, and a stage draining a
 *     backlog at full speed reaches its limit every few hundred messages
 *     (bench/cost: the consumer's and the broker's fetching cost more than
 *     the stage's own work);
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
#include "sl_stage_int.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_redis.h"
#include "sluice.pb-c.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
     "identification); the certificate chain is always verified",
     0},
    {"redis.url", SL_CONF_STR, "redis://127.0.0.1:6379", C(redis_url),
     "Redis URL redis://[user:password@]host:port[/db]; rediss:// for TLS "
     "(user and password %-encoded)",
     0},
    {"redis.username", SL_CONF_STR, "", C(redis_username),
     "ACL user name sent with AUTH (when redis.url has none; empty: the default user)", 0},
    {"redis.password", SL_CONF_STR, "", C(redis_password),
     "password sent with AUTH on every (re)connect (when redis.url has none)", 1},
    {"redis.tls_ca_file", SL_CONF_STR, "", C(redis_tls_ca_file),
     "PEM file of the CAs that verify the server (rediss://; empty: the system's CAs)", 0},
    {"redis.tls_cert_file", SL_CONF_STR, "", C(redis_tls_cert_file),
     "PEM client certificate for mutual TLS (rediss://, optional; needs redis.tls_key_file)", 0},
    {"redis.tls_key_file", SL_CONF_STR, "", C(redis_tls_key_file),
     "PEM private key of redis.tls_cert_file (unencrypted)", 0},
    {"redis.command_timeout_ms", SL_CONF_INT, "2000", C(redis_command_timeout_ms),
     "a Redis that has answered none of the waiting commands for this long is treated as "
     "unavailable: the connection is dropped, its commands fail (stages fail open) and it "
     "reconnects; also the socket's TCP_USER_TIMEOUT (0: no deadline)",
     0},
    {"pipeline.file", SL_CONF_STR, "", C(pipeline_file),
     "the pipeline description (JSON, see docs/pipeline.md): stages, their topics and retry "
     "tiers (empty: the built-in one, the repository's pipeline.json)",
     0},
    {"log.level", SL_CONF_STR, "info", C(log_level), "debug, info, warn or error", 0},
    {"log.batch", SL_CONF_BOOL, "true", C(log_batch),
     "a consuming stage writes its debug and info lines in batches, at most "
     "SL_LOG_BATCH_MS (100 ms) late (one write for many lines: a line per message written "
     "one by one costs a stage ~15% of its CPU); warn and error lines go out at once, after "
     "those before them; a process killed outright (SIGKILL) loses at most the last 100 ms "
     "of its info lines (false: every line at once)",
     0},
    {"admin.listen", SL_CONF_STR, "", C(admin_listen),
     "host:port for /healthz /readyz /metrics (empty: the stage's default)", 0},
    {"stage.max_in_flight", SL_CONF_INT, "1000", C(max_in_flight),
     "messages processed concurrently by this process (all partitions)", 0},
    {"stage.prefetch", SL_CONF_INT, "-1", C(prefetch),
     "messages taken beyond stage.max_in_flight that wait, in order, for a slot, so a slot "
     "that frees starts the next message at once rather than after a fetch (-1: "
     "max_in_flight / 4, at least 4); fetching pauses at max_in_flight + prefetch",
     0},
    {"stage.max_bytes_in_flight", SL_CONF_INT, "201326592", C(max_bytes_in_flight),
     "bytes the messages in flight may hold: each one's Kafka message plus what the stage "
     "holds for it (stt: the answer it fetched, reserved at the size the upload declares); "
     "fetching pauses at this or at stage.max_in_flight, whichever comes first, and a "
     "message larger than this still runs, alone (0: no byte limit). The default, 192 MiB, "
     "keeps an stt process under 256 MB (docs/operations.md, Memory)",
     0},
    {"stage.per_key_order", SL_CONF_BOOL, "false", C(per_key_order),
     "never run two messages with the same key at once", 0},
    {"stage.drain_timeout_s", SL_CONF_DOUBLE, "30", C(drain_timeout_s),
     "on SIGTERM, how long in-flight work may finish before the stage exits", 0},
    {"stage.workers", SL_CONF_INT, "0", C(workers),
     "worker threads for blocking processing (libuv pool; at most 128); 0: the stage's own "
     "choice, 32 for ingest (each event waits on a HEAD and Redis round trips, so its "
     "concurrency is this count), 4 for the others",
     0},
    {"stage.inline_max_us", SL_CONF_INT, "50", C(inline_max_us),
     "a blocking processor whose recent runs average under this many microseconds is called "
     "on the stage's loop instead of a worker thread: the hand-over to a worker and back "
     "costs more than such a run (a rubric grade); its first 32 runs, and for 1 s after one "
     "of its runs on the loop took 100x this, go to the workers (sl_inline.h) (0: always the "
     "workers)",
     0},
    {"retry.tiers", SL_CONF_STR, "", C(retry_tiers),
     "delays of the retry topics <stage>.retry.<delay>, ascending (empty: the pipeline's "
     "retry_tiers)",
     0},
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
     "at stage.max_in_flight) instead of sending each through the retry tiers",
     0},
    {"breaker.probe_interval_ms", SL_CONF_INT, "1000", C(breaker_probe_interval_ms),
     "while open, one probe call per interval", 0},
    {"kafka.assignment_strategy", SL_CONF_STR, "cooperative-sticky", C(kafka_assignment),
     "how a stage's replicas share partitions: cooperative-sticky (incremental, KIP-429: only "
     "the partitions that change owner move, the others keep flowing; the inputs and the "
     "retry tiers are balanced as two groups, sluice-<stage> and sluice-<stage>-retry, so "
     "every replica gets a share of the input) or an eager one, roundrobin or range (a "
     "rebalance revokes every partition first); all replicas of a stage must agree (see "
     "docs/deploy.md, Upgrading)",
     0},
    {"kafka.session_timeout_ms", SL_CONF_INT, "10000", C(kafka_session_timeout_ms),
     "a replica that stops heart-beating (SIGKILL, lost node) loses its partitions after "
     "this long (the broker's group.min/max.session.timeout.ms bound it)",
     0},
    {"kafka.heartbeat_interval_ms", SL_CONF_INT, "2000", C(kafka_heartbeat_ms),
     "group heartbeat; also how soon the others learn of a rebalance", 0},
    {"kafka.fetch_min_bytes", SL_CONF_INT, "65536", C(kafka_fetch_min_bytes),
     "Kafka answers a consumer's fetch once this many bytes are there, or after "
     "kafka.fetch_wait_ms: fewer, fuller fetches. At 68 questions/s on 2 cores, 64 KiB / "
     "100 ms used 0.68-0.90x the broker CPU and 0.82-0.95x the machine's of librdkafka's 1 byte "
     "/ 500 ms, for 0.2 s more done p95 (docs/benchmarks.md, scenario K); 1: answered as soon "
     "as one message is there",
     0},
    {"kafka.fetch_wait_ms", SL_CONF_INT, "100", C(kafka_fetch_wait_ms),
     "the longest a fetch waits for kafka.fetch_min_bytes: what a message may wait per stage "
     "while traffic is light (six stages: at most 0.6 s per question)",
     0},
    {"kafka.retry_fetch_wait_ms", SL_CONF_INT, "500", C(kafka_retry_fetch_wait_ms),
     "the same for the retry tiers' consumer group. A retried message waits its tier (5 s "
     "or more) anyway, so a longer wait costs it little, and an idle group at 500 asks the "
     "broker 2 times a second instead of 10: 0.60x Kafka's idle CPU against 100 "
     "(docs/benchmarks.md, scenario I). 0: librdkafka's 500 ms",
     0},
    {"kafka.producer_properties", SL_CONF_STR, "", C(kafka_producer_properties),
     "extra librdkafka properties of the stage's producer, name=value,... (for example "
     "compression.type=zstd); enable.idempotence, acks and transactional.id are Sluice's and "
     "refused",
     0},
    {"kafka.consumer_properties", SL_CONF_STR, "", C(kafka_consumer_properties),
     "extra librdkafka properties of the stage's consumers, name=value,... (for example "
     "client.rack=eu-west-1a); the group, commit, offset-reset, prefetch and fetch settings "
     "are Sluice's and refused",
     0},
    {"stage.revoke_wait_ms", SL_CONF_INT, "10000", C(revoke_wait_ms),
     "when partitions are taken away, work on them that is already running (a provider "
     "call) may finish, store its outputs and commit for this long before they are handed "
     "over; waiting work is released at once, uncalled (0: release everything at once)",
     0},
    {"provider.max_retry_after_ms", SL_CONF_INT, "600000", C(max_retry_after_ms),
     "the longest wait a provider's Retry-After may impose; longer ones are cut to this, both "
     "the pause every replica honours after a 429 and the delay of the message's retry copy "
     "(a misbehaving \"Retry-After: 86400\" must not stop a stage for a day)",
     0},
    {"stage.claim_lease_ms", SL_CONF_INT, "15000", C(claim_lease_ms),
     "before a provider call, a stage with a provider claims the input in Redis for this "
     "long, renewed every third of it while the call runs; a replica that meets another's "
     "claim waits for its stored outputs instead of calling, so an input is paid once across "
     "replicas (a crash costs a second call after the lease) (0: no claims)",
     0},
    {"stage.max_starts", SL_CONF_INT, "3", C(max_starts),
     "poison inputs: each input's starts are counted in Redis (per consumer group, topic, "
     "partition and offset, kept a day) before its work begins, and the count is dropped when "
     "it finishes; an input that started this many times without finishing (the process died "
     "during each run: a crash, an abort, an OOM kill) is dead-lettered with class poison "
     "instead of being run again, and its partition moves on. An input at its last chance (this "
     "start, the one before the dead letter) runs alone (no other call at the same time), so "
     "the death that decides is its own; earlier restarts run at full concurrency (a death "
     "kills every call the process had running: most are collateral). Redis unavailable: run "
     "uncounted (sluice_starts_uncounted_total, a warning) "
     "(0: no count)",
     0},
    {"stage.lag_interval_ms", SL_CONF_INT, "5000", C(lag_interval_ms),
     "how often the stage asks Kafka for its groups' committed offsets and the high "
     "watermarks of the partitions assigned to it, for sluice_consumer_lag_messages and "
     "sluice_consumer_lag_actionable_messages (a thread of their own, never the loop, with a "
     "client per group that never joins it; right while fetching is paused) (0: no lag "
     "gauges)",
     0},
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

int sl_common_pipeline(sl_common_conf *cc, const char *stage, char *err, size_t errlen) {
  if (!cc) return SL_EINVAL;
  sl_pipeline_free(cc->pipeline);
  cc->pipeline = NULL;
  int rc = sl_pipeline_load(&cc->pipeline, cc->pipeline_file, err, errlen);
  if (rc) return rc;
  const sl_pipeline *p = cc->pipeline;
  static const struct {
    const char *message;
    size_t field;
  } by_type[] = {
      {"sluice.v1.SubmissionCreated", offsetof(sl_common_conf, topic_submissions)},
      {"json:s3-event", offsetof(sl_common_conf, topic_storage_events)},
      {"sluice.v1.UploadCompleted", offsetof(sl_common_conf, topic_stt_requests)},
      {"sluice.v1.Transcript", offsetof(sl_common_conf, topic_grade_requests)},
      {"sluice.v1.QuestionStatus", offsetof(sl_common_conf, topic_results)},
  };
  for (size_t i = 0; i < sizeof by_type / sizeof by_type[0]; i++) {
    /* what the stage writes wins over what it reads (there is one of each
     * type per direction; a stage of the builtin kinds never has both) */
    const char *t = sl_pipeline_topic_of(p, stage, 1, by_type[i].message);
    if (!t) t = sl_pipeline_topic_of(p, stage, 0, by_type[i].message);
    /* not a stage of the pipeline (a tool, the test harness): the first
     * topic of the type */
    for (size_t k = 0; !t && !sl_pipeline_stage_find(p, stage) && k < sl_pipeline_ntopics(p); k++)
      if (strcmp(sl_pipeline_topic_at(p, k)->message, by_type[i].message) == 0)
        t = sl_pipeline_topic_at(p, k)->name;
    *(const char **)((char *)cc + by_type[i].field) = t;
  }
  cc->topic_dlq = sl_pipeline_dlq(p);
  if (!cc->retry_tiers || !*cc->retry_tiers) {
    char *t = strdup(sl_pipeline_retry_tiers(p));
    if (!t) return SL_ENOMEM;
    free(cc->retry_tiers);
    cc->retry_tiers = t;
  }
  return 0;
}

void sl_common_release(sl_common_conf *cc) {
  if (!cc) return;
  sl_pipeline_free(cc->pipeline);
  cc->pipeline = NULL;
}

int sl_common_secure(const sl_common_conf *cc, int check, char *err, size_t errlen) {
  if (!cc) return SL_EINVAL;
  sl_kafka_security ks = {
      cc->kafka_security_protocol, cc->kafka_sasl_mechanism,   cc->kafka_sasl_username,
      cc->kafka_sasl_password,     cc->kafka_ssl_ca_file,      cc->kafka_ssl_cert_file,
      cc->kafka_ssl_key_file,      cc->kafka_ssl_key_password, cc->kafka_ssl_verify_hostname};
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
    snprintf(err, errlen, "redis.tls_* files are set but redis.url \"%s\" is not rediss://", shown);
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

/* A stage full this long pauses its partitions: nothing is prefetched for
 * it any more, and the consumers are polled (rebalances, the poll interval)
 * while it waits. */
#define SL_THROTTLE_PAUSE_MS 1000

/* How late a batched log line may be written (log.batch); the tick
 * (every 100 ms) flushes as well. */
#define SL_LOG_BATCH_MS 100

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

int64_t sl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sl__mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* jobs                                                                */

void sl__job_free(job *j) {
  loop_t *L = j->L;
  if (j->all_prev)
    j->all_prev->all_next = j->all_next;
  else if (L->jobs == j)
    L->jobs = j->all_next;
  if (j->all_next) j->all_next->all_prev = j->all_prev;
  L->bytes -= j->bytes;
  sl_metric_gauge_add(L->m_bytes, -j->bytes);
  sl_outbox_clear(&j->out);
  if (j->m) rd_kafka_message_destroy(j->m);
  free(j);
}

static void admit_waiting(loop_t *L);

/* j holds delta bytes more (or fewer) */
static void job_bytes_add(job *j, int64_t delta) {
  j->bytes += delta;
  j->L->bytes += delta;
  sl_metric_gauge_add(j->L->m_bytes, delta);
}

void sl_job_hold(job *j, int64_t held) {
  if (!j) return;
  int64_t want = (j->m ? (int64_t)j->m->len : 0) + (held > 0 ? held : 0);
  int64_t delta = want - j->bytes;
  job_bytes_add(j, delta);
  if (delta < 0) admit_waiting(j->L); /* room for a waiting job */
  sl__flow(j->L);
}

static void drain_consumer(void *ud);
static void on_drain_timer(uv_timer_t *t) {
  loop_t *L = t->data;
  for (int i = 0; i < L->ngroups; i++) drain_consumer(&L->g[i]);
}

void sl__flow(loop_t *L) {
  if (L->stopping || L->closing) return;
  int by_bytes = 0;
  switch (sl_flow_next(&L->flow, L->paused_all || L->throttled, L->inflight, L->bytes, &by_bytes)) {
  case SL_FLOW_PAUSE: /* take no more for now; pause if it lasts (on_tick) */
    L->throttled = 1;
    L->throttled_ms = sl__mono_ms();
    L->throttled_by_bytes = by_bytes;
    break;
  case SL_FLOW_RESUME:
    if (L->paused_all) sl__set_pause(L, 0);
    if (L->throttled) {
      L->throttled = 0; /* on the next turn of the loop, not inside whoever finished */
      uv_timer_start(&L->drain_timer, on_drain_timer, 0, 0);
    }
    break;
  case SL_FLOW_KEEP:
    break;
  }
}

static void timer_free_cb(uv_handle_t *h) { free(h); }

void sl__job_timer_release(job *j) {
  if (!j->timer) return;
  uv_timer_stop(j->timer);
  uv_close((uv_handle_t *)j->timer, timer_free_cb);
  j->timer = NULL;
}

/* Drops a job during shutdown: its offset stays uncommitted (redelivered). */
void sl__job_drop(job *j) {
  sl__job_timer_release(j);
  j->L->inflight--;
  sl__job_free(j);
}

/* Runs cb(timer whose data is j) after ms; now(j) at once if no timer can be
 * allocated. */
void sl__job_after(job *j, int64_t ms, uv_timer_cb cb, void (*now)(job *)) {
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

const char *sl__hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
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
  const char *h = m && buf && len ? sl__hdr(m, SL_HDR_ORIGIN_TOPIC, buf, len) : NULL;
  if (h && *h) return h;
  return m && m->rkt ? rd_kafka_topic_name(m->rkt) : "";
}

int64_t sl__hdr_i64(const rd_kafka_message_t *m, const char *name) {
  char buf[32];
  return sl__hdr(m, name, buf, sizeof buf) ? strtoll(buf, NULL, 10) : 0;
}

/* SL_HDR_COST: a finite, non-negative number, or 0 */
double sl__hdr_cost(const rd_kafka_message_t *m) {
  char buf[32];
  double v = sl__hdr(m, SL_HDR_COST, buf, sizeof buf) ? strtod(buf, NULL) : 0;
  return isfinite(v) && v > 0 ? v : 0;
}

int64_t sl_message_first_failure_ms(const rd_kafka_message_t *m) {
  return m ? sl__hdr_i64(m, SL_HDR_FIRST_FAILURE) : 0;
}

void sl__key_release(job *j) {
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
      sl__job_drop(next);
    else
      sl__holds_key(next);
  } else {
    HASH_DEL(L->keys, q);
    free(q);
  }
}

/* The job is over: its offset is done once everything it produced is
 * acknowledged (the caller guarantees that). After a fatal producer error
 * no job counts as done: its outputs may not all be written (sl__produce()
 * ends such jobs without writing), and the offsets committed on the way
 * out must not pass them. */
void sl__job_finish(job *j) {
  loop_t *L = j->L;
  int revoking = j->p && j->p->revoking;
  sl__job_timer_release(j);
  sl__key_release(j);
  sl__starts_end(j);
  sl__claim_finish(j); /* a dead letter's claim becomes its end mark */
  if (!L->fatal && !j->uncommitted && j->p && !j->p->revoked && j->epoch == j->p->ring.epoch)
    sl_offsets_done(&j->p->ring, j->epoch, j->offset);
  L->inflight--;
  L->active--;
  sl_metric_gauge_add(L->m_inflight, -1);
  sl__job_free(j);
  admit_waiting(L);
  sl__flow(L);
  if (revoking) sl__revoke_check(L);
}

/* Lets a held job go without finishing it: its offset stays uncommitted and
 * the message is redelivered (to this stage or the partition's next owner). */
void sl__held_release(job *j) {
  loop_t *L = j->L;
  int revoking = j->p && j->p->revoking;
  sl__job_timer_release(j);
  sl__key_release(j);
  sl__starts_end(j); /* it did not die on it: its start is not charged */
  L->inflight--;
  L->active--;
  sl_metric_gauge_add(L->m_inflight, -1);
  sl__job_free(j);
  admit_waiting(L);
  sl__flow(L);
  if (revoking) sl__revoke_check(L);
}

/* The job's partition is being taken away (or was): it must not start a
 * provider call; its message is redelivered to the partition's owner. */
int sl__job_stale(const job *j) {
  return j->p && (j->p->revoking || j->p->revoked || j->epoch != j->p->ring.epoch);
}
/* Frees a partition's parked (not yet due) retry messages without
 * processing them; their offsets stay uncommitted, so they come back. */
void sl__release_parked(loop_t *L, part *p) {
  while (p->parked_head) {
    job *j = p->parked_head;
    p->parked_head = j->next;
    L->inflight--;
    sl_metric_gauge_add(L->m_inflight, -1);
    sl__job_free(j);
  }
  p->parked_tail = NULL;
  uv_timer_stop(&p->park_timer);
}
/* a series labelled with the stage (and extra labels) */
sl_metric *sl__metric(const char *name, const char *stage, const char *extra, const char *help,
                      int gauge) {
  char l[256];
  snprintf(l, sizeof l, "stage=\"%s\"%s%s", stage, extra ? "," : "", extra ? extra : "");
  return gauge ? sl_metrics_gauge(name, l, help) : sl_metrics_counter(name, l, help);
}
/* ---- taking messages ---- */

static void start(job *j);

/* A slot is free, and the bytes in flight leave room (or nothing runs: a
 * job larger than the limit still runs, alone). */
static int may_start(const loop_t *L) {
  if (L->active >= L->cc->max_in_flight) return 0;
  return L->cc->max_bytes_in_flight <= 0 || L->bytes < L->cc->max_bytes_in_flight || L->active == 0;
}

/* Past parking: runs the job if a slot is free, else it waits in order. */
static void admit(job *j) {
  loop_t *L = j->L;
  if (!L->rq_head && may_start(L)) {
    start(j);
    return;
  }
  j->next = NULL;
  if (L->rq_tail)
    L->rq_tail->next = j;
  else
    L->rq_head = j;
  L->rq_tail = j;
  L->rq_len++;
  sl_metric_set(L->m_waiting, L->rq_len);
}

/* Slots or bytes freed: start the waiting jobs they make room for (while
 * stopping, nothing new starts: what waits is redelivered after the
 * restart). Fetching resumes by sl__flow(), once half the prefetch has
 * started. */
static void admit_waiting(loop_t *L) {
  if (L->admitting || L->stopping || L->closing) return;
  L->admitting = 1; /* a job may end inside start(): it must not recurse here */
  while (L->rq_head && may_start(L)) {
    job *j = L->rq_head;
    L->rq_head = j->next;
    if (!L->rq_head) L->rq_tail = NULL;
    j->next = NULL;
    L->rq_len--;
    start(j);
  }
  L->admitting = 0;
  sl_metric_set(L->m_waiting, L->rq_len);
}

void sl__release_waiting(loop_t *L, part *p) {
  job *keep = NULL, *keep_tail = NULL;
  for (job *j = L->rq_head, *nx; j; j = nx) {
    nx = j->next;
    j->next = NULL;
    if (!p || j->p == p) {
      L->inflight--;
      L->rq_len--;
      sl_metric_gauge_add(L->m_inflight, -1);
      sl__job_free(j);
      continue;
    }
    if (keep_tail)
      keep_tail->next = j;
    else
      keep = j;
    keep_tail = j;
  }
  L->rq_head = keep;
  L->rq_tail = keep_tail;
  sl_metric_set(L->m_waiting, L->rq_len);
}

/* Past parking: the bytes it will hold reserved, then per-key order, the
 * idempotency lookup and the gate. */
static void start(job *j) {
  loop_t *L = j->L;
  L->active++;
  j->started_ms = sl_now_ms();
  if (L->o->bytes_of) {
    int64_t r = L->o->bytes_of(L->o->ud, j->m);
    if (r > 0) job_bytes_add(j, r);
  }
  sl__flow(L); /* at a limit: nothing more is taken until work finishes */
  if (L->cc->per_key_order && j->key[0]) {
    keyq *q = NULL;
    HASH_FIND_STR(L->keys, j->key, q);
    if (q) { /* someone holds the key: wait behind it */
      if (q->tail)
        q->tail->next = j;
      else
        q->head = j;
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
  sl__holds_key(j);
}

/* The job may run (it holds its key, or keys are not ordered): the
 * idempotency lookup, then the gate. A job handed its key by the one
 * before it comes here too, so it finds what that one stored. */
void sl__holds_key(job *j) {
  loop_t *L = j->L;
  if (L->o->idempotent) {
    sl_sha256_hex(j->m->payload, j->m->len, j->digest);
    /* a claim reads the stored outputs anyway: one round trip, not two */
    if (!sl__lookup_in_claim(j) && (sl__lookup_counted(j) == 0 || sl__lookup(j) == 0)) return;
  }
  sl__gate(j);
}

int sl__lookup(job *j) {
  char k[256];
  sl__idem_key(j, k, sizeof k);
  const char *argv[] = {"GET", k};
  j->looked_up = 1;
  return sl_aredis_argv(j->L->redis, sl__on_lookup, j, 2, argv, NULL);
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
    admit(j);
  }
  if (p->parked_head)
    uv_timer_start(&p->park_timer, on_park_timer, (uint64_t)(p->parked_head->not_before_ms - now),
                   0);
  else if (p->paused_for_park)
    sl__pause_one(L, p, 0);
}

static void dispatch(loop_t *L, job *j) {
  if (j->p && j->p->retry_tier >= 0) {
    int64_t now = sl_now_ms();
    if (j->p->parked_head || j->not_before_ms > now) {
      /* not due (or queued behind one that is not): park, pause, set the timer */
      if (j->p->parked_tail)
        j->p->parked_tail->next = j;
      else
        j->p->parked_head = j;
      j->p->parked_tail = j;
      if (!j->p->paused_for_park) sl__pause_one(L, j->p, 1);
      if (j == j->p->parked_head)
        uv_timer_start(&j->p->park_timer, on_park_timer, (uint64_t)(j->not_before_ms - now), 0);
      return;
    }
  }
  admit(j);
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
  j->ticket = (sl_kafka_ticket){sl__on_delivery, j, 0};
  size_t kn = m->key ? (m->key_len < sizeof j->key ? m->key_len : sizeof j->key - 1) : 0;
  memcpy(j->key, m->key ? m->key : "", kn); /* a C string: ends at its first NUL */
  j->key[kn] = '\0';
  j->p = sl__part_get(L, rd_kafka_topic_name(m->rkt), m->partition, 1);
  if (j->p && (j->p->revoking || j->p->revoked)) {
    /* fetched before the partition was taken away: its owner reads it */
    rd_kafka_message_destroy(m);
    free(j);
    return;
  }
  int64_t ts = rd_kafka_message_timestamp(m, NULL);
  int took = j->p ? sl_offsets_take(&j->p->ring, m->offset, ts > 0 ? ts : sl_now_ms()) : SL_ENOMEM;
  if (took < 0) {
    sl_log(SL_LOG_ERROR, NULL, "out of memory tracking a message");
    rd_kafka_message_destroy(m);
    free(j);
    return;
  }
  if (took == 1) {
    /* the consumer went back (an offset reset, a seek): everything from
     * here is delivered again, so what waits parked is let go (it comes
     * back) and jobs still running no longer count for the commit */
    sl_log(SL_LOG_WARN, NULL, "%s [%d] refetched from offset %lld: a new epoch of its offsets",
           j->p->id.topic, (int)j->p->id.partition, (long long)m->offset);
    sl__release_parked(L, j->p);
    sl__release_waiting(L, j->p);
    if (j->p->paused_for_park) sl__pause_one(L, j->p, 0);
  }
  j->epoch = j->p->ring.epoch;
  j->all_next = L->jobs;
  if (L->jobs) L->jobs->all_prev = j;
  L->jobs = j;
  j->attempts = (unsigned)sl__hdr_i64(m, SL_HDR_ATTEMPT);
  j->cost_before = sl__hdr_cost(m);
  j->first_failure_ms = sl__hdr_i64(m, SL_HDR_FIRST_FAILURE);
  j->not_before_ms = sl__hdr_i64(m, SL_HDR_NOT_BEFORE);
  if (j->p->retry_tier >= 0) {
    /* the header is the sending replica's clock: never wait longer than
     * the delay it chose (or, without one, this tier's delay or the
     * Retry-After cap) from now, whatever it says (a clock ahead, a copy
     * written before the cap existed) */
    j->not_before_ms = sl_retry_due(&L->rp, j->p->retry_tier, j->not_before_ms,
                                    sl__hdr_i64(m, SL_HDR_DELAY), sl_now_ms());
  }
  L->inflight++;
  sl_metric_gauge_add(L->m_inflight, 1);
  job_bytes_add(j, (int64_t)m->len);
  sl__flow(L);
  dispatch(L, j);
}

static void drain_consumer(void *ud) {
  grp *g = ud;
  loop_t *L = g->L;
  rd_kafka_message_t *m;
  while (g->rk && !L->throttled && (m = rd_kafka_consumer_poll(g->rk, 0)) != NULL) {
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

/* ---- batches to Redis ---- */

static void on_batch_idle(uv_idle_t *h) {
  loop_t *L = h->data;
  uv_idle_stop(h); /* what a flush queues arms it again */
  sl__starts_flush(L);
  sl__claims_flush(L);
  sl__stores_flush(L);
  sl__calls_resume(L);
}

_Static_assert(SL_CLAIM_BATCH <= SL_STORE_BATCH, "a job_batch holds either");

redisReply **sl__batch_reply(const job_batch *b, const redisReply *r, size_t per) {
  return r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)b->n * per ? r->element : NULL;
}

void sl__batch_soon(loop_t *L) {
  if (!uv_is_active((uv_handle_t *)&L->batch_idle)) uv_idle_start(&L->batch_idle, on_batch_idle);
}

/* ---- the tick: commits, metrics, stop ---- */

static void begin_stop(loop_t *L);

static void on_tick(uv_timer_t *t) {
  loop_t *L = t->data;
  sl_log_flush(); /* batched lines are at most a tick late */
  if (L->throttled && sl__mono_ms() - L->throttled_ms >= SL_THROTTLE_PAUSE_MS) {
    L->throttled = 0; /* full for a while: pause instead (see the top of this file) */
    sl_metric_add(L->throttled_by_bytes ? L->m_pause_bytes : L->m_pause_msgs, 1);
    sl__set_pause(L, 1);
  }
  for (int i = 0; i < L->ngroups; i++) {
    grp *g = &L->g[i];
    drain_consumer(g);
    if (g->rejoin_assigns > 0 && sl_now_ms() < g->rejoin_until_ms) {
      /* rejoining after a revoke: commit once the new generation is ours */
    } else {
      g->rejoin_assigns = 0;
      sl__commit(g, 0);
    }
  }
  /* age of the oldest message taken and not finished */
  int64_t oldest = 0, now = sl_now_ms();
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) {
    int64_t ts = sl_offsets_oldest_ts(&p->ring);
    if (ts && !p->revoked && (!oldest || ts < oldest)) oldest = ts;
  }
  sl_metric_set(L->m_oldest, oldest ? (now - oldest) / 1000 : 0);
  /* the same over main inputs only: retry topics hold messages that wait on
   * purpose (their tier's delay) */
  int64_t waiting = 0;
  HASH_ITER(hh, L->parts, p, tmp) {
    int64_t ts = sl_offsets_oldest_ts(&p->ring);
    if (ts && !p->revoked && p->retry_tier < 0 && (!waiting || ts < waiting)) waiting = ts;
  }
  sl_metric_set(L->m_oldest_waiting, waiting && now > waiting ? (now - waiting) / 1000 : 0);
  sl__flow(L); /* work let go unfinished (a revoke) resumes fetching too */
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
  L->throttled = 0; /* paused below: the consumers are polled and take nothing */
  L->stop_deadline = sl_now_ms() + (int64_t)(L->cc->drain_timeout_s * 1000);
  sl_log(SL_LOG_INFO, NULL, "stopping: no new messages; %lld in flight", (long long)L->active);
  sl__set_pause(L, 1);
  part *p, *tmp;
  HASH_ITER(hh, L->parts, p, tmp) { /* parked retries are not in flight */
    sl__release_parked(L, p);
  }
  sl__release_waiting(L, NULL); /* nor is what waits for a slot */
  uv_timer_stop(&L->bq_timer);
  job *h;
  while ((h = sl__bq_pop(L)) != NULL) sl__held_release(h); /* redelivered after the restart */
  sl__calls_release(L);                                    /* behind a solo run: the same */
}

/* ------------------------------------------------------------------ */

/* Serves the rebalance events that reached g since the loop stopped (the
 * other group's close can take seconds, waiting for a join): here, not
 * inside rd_kafka_consumer_close. An incremental assign served there, once
 * the close has begun, leaves librdkafka before 2.5 (Debian 12 has 2.0.2)
 * waiting for an assign call forever (confluentinc/librdkafka#4527). What
 * comes with them is not taken: its offsets stay uncommitted. */
static void serve_pending(grp *g) {
  for (int i = 0; i < 10000; i++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(g->rk, 0);
    if (!m) break;
    rd_kafka_message_destroy(m);
  }
}

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
  if (!L->cc->topic_dlq || !L->cc->retry_tiers) {
    sl_log(SL_LOG_ERROR, NULL, "stage %s: no pipeline loaded (sl_common_pipeline)", o->stage);
    free(L);
    return SL_EINVAL;
  }
  L->rp.ntiers = sl_retry_tiers_parse(L->cc->retry_tiers, L->rp.tier_ms, L->tier_label);
  L->rp.budget_ms = (int64_t)(L->cc->retry_budget_s * 1000);
  L->rp.max_retry_after_ms = L->cc->max_retry_after_ms;
  if (L->rp.ntiers < 0) {
    sl_log(SL_LOG_ERROR, NULL, "retry.tiers \"%s\": expected e.g. 5s,30s,2m,10m (ascending)",
           L->cc->retry_tiers);
    free(L);
    return SL_ECONFIG;
  }
  for (int i = 0; i < L->rp.ntiers; i++)
    snprintf(L->tier_topic[i], sizeof L->tier_topic[i], "%s.retry.%s", o->stage, L->tier_label[i]);
  sl_redis_script_init(&L->s_limit, sl_limiter_lua);
  sl_redis_script_init(&L->s_pause, sl_limiter_pause_lua);
  sl_redis_script_init(&L->s_claim_take, sl_claim_take_lua);
  sl_redis_script_init(&L->s_claim_release, sl_claim_release_lua);
  sl_redis_script_init(&L->s_claim_store, sl_claim_store_lua);
  sl_redis_script_init(&L->s_claim_end, sl_claim_end_lua);
  sl_redis_script_init(&L->s_starts, sl_claim_starts_lua);
  sl_redis_script_init(&L->s_lookup, sl_claim_lookup_lua);
  snprintf(L->limit_key, sizeof L->limit_key, "sl:limit:%s", o->provider ? o->provider : "-");
  snprintf(L->pause_key, sizeof L->pause_key, "sl:pause:%s", o->provider ? o->provider : "-");

  const char *h_out = "Input messages finished, by outcome";
  L->m_done = sl__metric("sluice_messages_total", o->stage, "outcome=\"done\"", h_out, 0);
  L->m_retried = sl__metric("sluice_messages_total", o->stage, "outcome=\"retried\"", h_out, 0);
  L->m_dead = sl__metric("sluice_messages_total", o->stage, "outcome=\"dead_lettered\"", h_out, 0);
  L->m_again = sl__metric("sluice_reruns_total", o->stage, NULL,
                          "Transient failures run again in place, a moment later, instead of "
                          "through a retry tier (what they lacked was expected within moments)",
                          0);
  for (int i = 0; i < L->rp.ntiers; i++) {
    char t[64];
    snprintf(t, sizeof t, "tier=\"%s\"", L->tier_label[i]);
    L->m_tier[i] = sl__metric("sluice_retries_total", o->stage, t,
                              "Messages sent to a retry tier, by tier", 0);
  }
  L->m_inflight = sl__metric("sluice_in_flight", o->stage, NULL,
                             "Messages taken and not finished (running, waiting for a slot, "
                             "parked for a retry tier)",
                             1);
  L->m_waiting = sl__metric("sluice_waiting_for_slot", o->stage, NULL,
                            "Messages taken beyond stage.max_in_flight, waiting for a slot "
                            "(at most stage.prefetch)",
                            1);
  L->inl.max_ns = L->cc->inline_max_us > 0 ? (uint64_t)L->cc->inline_max_us * 1000 : 0;
  L->prefetch = L->cc->prefetch >= 0
                    ? L->cc->prefetch
                    : (L->cc->max_in_flight / 4 > 4 ? L->cc->max_in_flight / 4 : 4);
  L->m_bytes = sl__metric("sluice_in_flight_bytes", o->stage, NULL,
                          "Bytes the messages being processed hold: their Kafka messages plus "
                          "what the stage holds for them (stage.max_bytes_in_flight)",
                          1);
  const char *h_pause = "Times fetching paused at a limit on work in flight, by limit";
  L->m_pause_msgs =
      sl__metric("sluice_fetch_pauses_total", o->stage, "limit=\"messages\"", h_pause, 0);
  L->m_pause_bytes =
      sl__metric("sluice_fetch_pauses_total", o->stage, "limit=\"bytes\"", h_pause, 0);
  /* taken: the running ones and the prefetch; fetching resumes when half
   * of the prefetch has started */
  L->flow = (sl_flow_limits){L->cc->max_in_flight + L->prefetch, L->cc->max_bytes_in_flight,
                             L->cc->max_in_flight + L->prefetch / 2};
  L->m_idem_hits = sl__metric("sluice_idempotency_hits_total", o->stage, NULL,
                              "Inputs answered from stored outputs (provider calls avoided)", 0);
  L->m_oldest = sl__metric("sluice_oldest_uncommitted_age_seconds", o->stage, NULL,
                           "Age of the oldest message taken and not yet finished", 1);
  L->m_oldest_waiting = sl__metric(
      "sluice_oldest_unprocessed_age_seconds", o->stage, NULL,
      "Age of the oldest input message (main topics, not retry tiers) not yet finished", 1);
  L->m_claim_waits =
      sl__metric("sluice_claim_waits_total", o->stage, NULL,
                 "Inputs another replica was already calling the provider for: waited for its "
                 "outputs instead of calling",
                 0);
  L->m_claims_lost = sl__metric("sluice_claims_lost_total", o->stage, NULL,
                                "Claims a renewal found lost (lapsed or lost by Redis, and taken "
                                "by another replica): a call not begun claims again first",
                                0);
  L->m_claim_ends = sl__metric("sluice_claim_ends_total", o->stage, NULL,
                               "Inputs ended without a call: the same message failed for good on "
                               "another replica, which wrote its dead letter",
                               0);
  {
    char host[40] = "", rnd[17] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    if (sl_random_hex(8, rnd, sizeof rnd) != 0)
      snprintf(rnd, sizeof rnd, "%llx", (unsigned long long)uv_hrtime());
    snprintf(L->owner, sizeof L->owner, "%.39s:%ld:%.16s", host, (long)getpid(), rnd);
  }
  L->m_uncounted =
      sl__metric("sluice_starts_uncounted_total", o->stage, NULL,
                 "Inputs started without their start being counted (Redis unavailable): "
                 "unprotected from poison inputs (stage.max_starts)",
                 0);
  L->m_assigned = sl__metric("sluice_assigned_partitions", o->stage, NULL,
                             "Partitions assigned to this process (0: not consuming)", 1);
  if (o->provider) {
    char pl[128];
    snprintf(pl, sizeof pl, "provider=\"%s\"", o->provider);
    L->m_limiter_waits = sl__metric("sluice_limiter_waits_total", o->stage, pl,
                                    "Calls delayed by the shared rate limit", 0);
    L->m_breaker_state = sl__metric("sluice_breaker_state", o->stage, pl,
                                    "Circuit breaker: 0 closed, 1 open, 2 half-open", 1);
    L->m_circuit_skips = sl__metric("sluice_breaker_rejections_total", o->stage, pl,
                                    "Messages the open breaker held back (breaker.hold) or sent "
                                    "to a retry tier",
                                    0);
    L->m_held = sl__metric("sluice_breaker_held", o->stage, pl,
                           "Messages held in memory while the breaker is open", 1);
    char okl[192], fl[192];
    snprintf(okl, sizeof okl, "%s,result=\"ok\"", pl);
    snprintf(fl, sizeof fl, "%s,result=\"transient_failure\"", pl);
    /* plugin: the provider name without its "<stage>-" prefix */
    size_t sn = strlen(o->stage);
    const char *plugin = strncmp(o->provider, o->stage, sn) == 0 && o->provider[sn] == '-'
                             ? o->provider + sn + 1
                             : o->provider;
    char cl[192];
    snprintf(cl, sizeof cl, "stage=\"%s\",plugin=\"%s\"", o->stage, plugin);
    L->m_cost = sl_metrics_counter_real("sluice_provider_cost_units_total", cl,
                                        "What provider calls cost, in the plugin's units "
                                        "(docs/operations.md), retries included");
    L->m_calls_ok =
        sl__metric("sluice_provider_calls_total", o->stage, okl, "Provider calls by result", 0);
    L->m_calls_fail =
        sl__metric("sluice_provider_calls_total", o->stage, fl, "Provider calls by result", 0);
    char tl[192], perml[192];
    snprintf(tl, sizeof tl, "%s,result=\"throttled\"", pl);
    snprintf(perml, sizeof perml, "%s,result=\"permanent_failure\"", pl);
    L->m_calls_throttled =
        sl__metric("sluice_provider_calls_total", o->stage, tl, "Provider calls by result", 0);
    L->m_calls_perm =
        sl__metric("sluice_provider_calls_total", o->stage, perml, "Provider calls by result", 0);
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
  int64_t nw = L->cc->workers > 0       ? L->cc->workers
               : o->default_workers > 0 ? o->default_workers
                                        : 4;
  snprintf(nworkers, sizeof nworkers, "%d", (int)(nw < 128 ? nw : 128));
  setenv("UV_THREADPOOL_SIZE", nworkers, 1);
  char client[128], tp[32];
  snprintf(client, sizeof client, "sluice-%s", o->stage);
  uv_loop_init(&L->loop);
  char cprops[1024];
  const char *ckv[2 * 16 + 1];
  rc = sl_kafka_props_split(SL_KAFKA_CONSUMER_PROPS, L->cc->kafka_consumer_properties, cprops,
                            sizeof cprops, ckv, 16, err, sizeof err);
  sl_kafka_group_opts gopts = {L->cc->kafka_assignment,    L->cc->kafka_session_timeout_ms,
                               L->cc->kafka_heartbeat_ms,  L->cc->kafka_fetch_min_bytes,
                               L->cc->kafka_fetch_wait_ms, ckv};
  /* the retry tiers' group: the same, but fetches held longer (kafka.retry_fetch_wait_ms) */
  sl_kafka_group_opts ropts = gopts;
  ropts.fetch_wait_ms = L->cc->kafka_retry_fetch_wait_ms;
  /* two groups: the inputs, and the retry tiers (sl_stage_group.c) */
  L->ngroups = 2;
  for (int i = 0; i < L->ngroups; i++) {
    grp *g = &L->g[i];
    g->L = L;
    sl_pipeline_group(g->name, sizeof g->name, o->stage, i);
    uv_timer_init(&L->loop, &g->revoke_timer);
    g->revoke_timer.data = g;
    if (rc == 0)
      rc = sl_kafka_consumer_new(&g->rk, L->cc->kafka_brokers, g->name, client,
                                 i == 0 ? &gopts : &ropts, err, sizeof err, sl__on_rebalance,
                                 sl__on_commit, NULL, g);
  }
  char props[1024];
  const char *pkv[2 * 16 + 1];
  if (rc == 0)
    rc = sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, L->cc->kafka_producer_properties, props,
                              sizeof props, pkv, 16, err, sizeof err);
  if (rc == 0)
    rc = sl_kafka_producer_new(&L->producer, L->cc->kafka_brokers, client, pkv, err, sizeof err);
  if (rc == 0) rc = sl_aredis_new(&L->redis, &L->loop, L->cc->redis_url);
  if (rc == 0) rc = sl_aredis_set_timeout(L->redis, L->cc->redis_command_timeout_ms);
  if (rc == 0 && o->start) rc = sl_httpc_new(&L->http, &L->loop);
  if (rc == 0) rc = sl_kafka_uv_attach(&L->pku, L->producer, &L->loop);
  for (int i = 0; rc == 0 && i < L->ngroups; i++)
    rc = sl_kafka_uv_attach_consumer(&L->g[i].cku, L->g[i].rk, &L->loop, drain_consumer, &L->g[i]);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err[0] ? err : sl_strerror(rc));
    goto out;
  }
  rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new((int)o->ntopics);
  for (size_t i = 0; i < o->ntopics; i++)
    rd_kafka_topic_partition_list_add(subs, o->topics[i], RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(L->g[0].rk, subs);
  rd_kafka_topic_partition_list_destroy(subs);
  subs = rd_kafka_topic_partition_list_new(L->rp.ntiers);
  for (int i = 0; i < L->rp.ntiers; i++)
    rd_kafka_topic_partition_list_add(subs, L->tier_topic[i], RD_KAFKA_PARTITION_UA);
  if (!e) e = rd_kafka_subscribe(L->g[1].rk, subs);
  rd_kafka_topic_partition_list_destroy(subs);
  if (e) {
    sl_log(SL_LOG_ERROR, NULL, "subscribe failed: %s", rd_kafka_err2str(e));
    rc = SL_EKAFKA;
    goto out;
  }
  if ((rc = sl__lag_start(L, err, sizeof err)) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
    goto out;
  }
  snprintf(tp, sizeof tp, "%d", L->rp.ntiers);
  sl_log(SL_LOG_INFO, NULL,
         "consuming %s%s%s as group %s; %s retry tiers (%s .. %s) as group %s (%s); up to "
         "%lld messages and %lld MiB in flight (0: no byte limit)",
         o->topics[0], o->ntopics > 1 ? ", " : "", o->ntopics > 1 ? o->topics[1] : "", L->g[0].name,
         tp, L->tier_topic[0], L->tier_topic[L->rp.ntiers - 1], L->g[1].name,
         L->cc->kafka_assignment, (long long)L->cc->max_in_flight,
         (long long)(L->cc->max_bytes_in_flight > 0 ? L->cc->max_bytes_in_flight >> 20 : 0));
  uv_timer_init(&L->loop, &L->tick);
  L->tick.data = L;
  uv_timer_init(&L->loop, &L->lq_timer);
  L->lq_timer.data = L;
  uv_timer_init(&L->loop, &L->bq_timer);
  L->bq_timer.data = L;
  uv_timer_init(&L->loop, &L->claim_timer);
  L->claim_timer.data = L;
  uv_idle_init(&L->loop, &L->batch_idle);
  L->batch_idle.data = L;
  uv_timer_init(&L->loop, &L->drain_timer);
  L->drain_timer.data = L;
  if (L->o->provider && L->o->idempotent && L->cc->claim_lease_ms > 0) {
    uint64_t every = (uint64_t)(L->cc->claim_lease_ms / 3 > 0 ? L->cc->claim_lease_ms / 3 : 1);
    uv_timer_start(&L->claim_timer, sl__on_claim_renew, every, every);
  }
  uv_timer_start(&L->tick, on_tick, 100, 100);
  if (L->cc->log_batch) sl_log_batch(SL_LOG_BATCH_MS); /* flushed by the tick too */
  uv_run(&L->loop, UV_RUN_DEFAULT);

  /* stopped: from here on unfinished jobs are dropped (never committed) */
  L->closing = 1;
  sl__lag_stop(L);
  for (int i = 0; i < L->ngroups; i++) /* a revoke still waiting: hand its partitions over now */
    sl__revoke_finish(&L->g[i]);
  sl__commit_all(L, 1);
  sl_log(SL_LOG_INFO, NULL, "closing consumers");
  for (int i = 0; i < L->ngroups; i++) {
    sl_kafka_uv_detach(L->g[i].cku);
    L->g[i].cku = NULL;
    serve_pending(&L->g[i]);
    L->g[i].in_close = 1;
    rd_kafka_consumer_close(L->g[i].rk);
    L->g[i].in_close = 0;
  }
  rd_kafka_flush(L->producer, 10000);       /* delivery reports finish their jobs */
  if (rd_kafka_outq_len(L->producer) > 0) { /* Kafka gone: their offsets stay uncommitted */
    rd_kafka_purge(L->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(L->producer, 0);
  }
  sl__commit_all(L, 1);
  rc = L->fatal ? SL_EKAFKA : 0;
out:
  L->closing = 1;
  sl__lag_stop(L);
  for (int i = 0; i < L->ngroups; i++) {
    sl_kafka_uv_detach(L->g[i].cku);
    L->g[i].cku = NULL;
  }
  sl_kafka_uv_detach(L->pku);
  sl_aredis_free(L->redis); /* pending replies come back NULL: their jobs drop */
  L->redis = NULL;
  sl_httpc_free(L->http); /* cancelled requests end their jobs (dropped) */
  L->http = NULL;
  L->lq_head = L->lq_tail = NULL; /* their jobs are dropped just below */
  L->pq_head = L->pq_tail = NULL;
  L->cq_head = L->cq_tail = NULL;
  L->cq_len = 0;
  L->sq_head = L->sq_tail = NULL;
  L->sq_len = 0;
  L->tq_head = L->tq_tail = NULL;
  L->tq_len = 0;
  L->xq_head = L->xq_tail = NULL;
  L->pending = L->solo = NULL;
  L->rq_head = L->rq_tail = NULL;
  L->rq_len = 0;
  for (job *j = L->jobs, *nx; j; j = nx) { /* what is left, except pool work */
    nx = j->all_next;
    sl__job_timer_release(j);
    if (!j->in_pool && !j->in_async && !j->outstanding) sl__job_drop(j);
  }
  {
    part *p, *tmp;
    HASH_ITER(hh, L->parts, p, tmp) { sl__part_drop(L, p); }
    keyq *q, *qt;
    HASH_ITER(hh, L->keys, q, qt) {
      HASH_DEL(L->keys, q);
      free(q);
    }
  }
  sl__lag_free(L); /* stopped long since (sl__lag_stop): joins at once */
  uv_walk(&L->loop, walk_close, NULL);
  uv_run(&L->loop, UV_RUN_DEFAULT);
  uv_loop_close(&L->loop);
  for (int i = 0; i < L->ngroups; i++)
    if (L->g[i].rk) rd_kafka_destroy(L->g[i].rk);
  if (L->producer) rd_kafka_destroy(L->producer);
  for (int i = 0; i < L->ngroups; i++) {
    if (L->g[i].assignment) rd_kafka_topic_partition_list_destroy(L->g[i].assignment);
    if (L->g[i].revoking) rd_kafka_topic_partition_list_destroy(L->g[i].revoking);
  }
  sl_breaker_free(L->breaker);
  free(L->sdel);
  free(L);
  sl_log_batch(0); /* the lines still collected go out */
  return rc;
}
