/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_conf.c — the settings every stage process shares (the one table
 * sl_common_conf_table, which also documents them: docs/configuration.md
 * is generated from it), the pipeline's topics resolved for a stage, and the
 * security of its Kafka and Redis clients. Read once at start-up, before the
 * loop runs; nothing here is called from the loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_stage.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
     "(user and password %-encoded); a Redis Cluster: redis+cluster://[user:password@]"
     "host:port,host:port,... (seed nodes; rediss+cluster:// for TLS; needs redis.buckets)",
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
    {"kafka.metadata_refresh_ms", SL_CONF_INT, "10000", C(kafka_metadata_refresh_ms),
     "how often every Kafka client refreshes its topics' metadata: after a topic is grown "
     "(sluicectl topics ensure --partitions), producers send to the new partitions and the "
     "stages' groups share them out within about this long plus a rebalance (librdkafka's "
     "default is 5 minutes; 0 keeps it)",
     0},
    {"redis.command_timeout_ms", SL_CONF_INT, "2000", C(redis_command_timeout_ms),
     "a Redis that has answered none of the waiting commands for this long is treated as "
     "unavailable: the connection is dropped, its commands fail (stages fail open) and it "
     "reconnects; also the socket's TCP_USER_TIMEOUT (0: no deadline)",
     0},
    {"redis.buckets", SL_CONF_INT, "0", C(redis_buckets),
     "buckets of the Redis keyspace (0-1024): each submission's keys carry its bucket's hash "
     "tag and the view's counters, feed and pending set exist once per bucket, so every "
     "script touches one slot of a Redis Cluster (required there: 4 or more per primary). 0: "
     "one Redis, no tags. Changing it moves every submission (the view is rebuilt)",
     0},
    {"pipeline.file", SL_CONF_STR, "", C(pipeline_file),
     "the pipeline description (JSON, see docs/pipeline.md): stages, their topics and retry "
     "tiers (empty: the built-in one, the repository's pipeline.json)",
     0},
    {"log.level", SL_CONF_STR, "info", C(log_level), "debug, info, warn or error", 0},
    {"trace.endpoint", SL_CONF_STR, "", C(trace_endpoint),
     "the OpenTelemetry collector spans are sent to, OTLP over HTTP with protobuf bodies "
     "(http://host:4318; POSTs to its /v1/traces), directly (the environment's http_proxy and "
     "the like are not used for it). Empty: no spans are recorded, but trace context is still "
     "read from and written to every message, so a trace stays whole",
     0},
    {"trace.sample_ratio", SL_CONF_DOUBLE, "1", C(trace_sample_ratio),
     "the share of new traces (a create without a traceparent, a storage event) that is "
     "recorded, 0-1; a trace that arrives keeps its own decision (parent-based)",
     0},
    {"trace.queue_spans", SL_CONF_INT, "2048", C(trace_queue_spans),
     "finished spans waiting for export at most; past it they are dropped and counted "
     "(sluice_trace_spans_dropped_total): the pipeline never waits for the collector",
     0},
    {"trace.batch_spans", SL_CONF_INT, "512", C(trace_batch_spans),
     "spans sent in one request at most", 0},
    {"trace.flush_ms", SL_CONF_INT, "1000", C(trace_flush_ms),
     "a batch of spans goes out at least this often", 0},
    {"trace.timeout_ms", SL_CONF_INT, "2000", C(trace_timeout_ms),
     "the deadline of one export request; spans of a request that did not get through are "
     "dropped and counted",
     0},
    {"crypto.kek", SL_CONF_STR, "", C(crypto_kek),
     "the key-encryption key (64 hex digits, 32 random bytes: openssl rand -hex 32) that "
     "wraps each submission's data key, which seals its transcript, words and grade on every "
     "topic (docs/privacy.md); the same in every stage and sluicectl. Empty: no sealing, and "
     "an erasure cannot reach the Kafka copies",
     1},
    {"crypto.erased_ttl_s", SL_CONF_INT, "2592000", C(crypto_erased_ttl_s),
     "how long an erased submission's key stays marked erased in Redis (at least the longest "
     "retention of a topic that carries its messages): work that arrives for it meanwhile is "
     "dropped as erased, later it fails as key_unavailable",
     0},
    {"trace.propagate", SL_CONF_BOOL, "true", C(trace_propagate),
     "what the stage writes carries the trace context (traceparent, tracestate headers); "
     "false cuts every trace at this stage (for tests of the tracing)",
     0},
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
    {"provider.limit_buckets", SL_CONF_INT, "1", C(provider_limit_buckets),
     "split the shared rate limit into this many limits (1-1024) of provider.rate/K and "
     "provider.burst/K (at least 1) each, one Redis key each, every replica taking from one "
     "(provider.limit_bucket): spreads a hot limiter key (with redis.buckets over a Redis "
     "Cluster's primaries), at the cost of each replica seeing only its bucket's share of the "
     "rate; run a multiple of K replicas",
     0},
    {"provider.limit_bucket", SL_CONF_INT, "-1", C(provider_limit_bucket),
     "this replica's limiter bucket, modulo provider.limit_buckets (for example a "
     "StatefulSet's ordinal); -1: a hash of the host name and process id",
     0},
    {"provider.tenant_hold", SL_CONF_INT, "0", C(provider_tenant_hold),
     "with provider.rate: the calls of one tenant a replica keeps waiting at the limiter; "
     "more are deferred through a retry tier (not an attempt) so that the stage reads on to "
     "other tenants' work; 0: the rate for 2 s (with provider.tenant_schedule, or 1.5 times "
     "the first retry tier's delay, the longer: a deferred call comes back no sooner than "
     "that tier)",
     0},
    {"provider.tenant_schedule", SL_CONF_BOOL, "false", C(provider_tenant_schedule),
     "deferrals follow a schedule per tenant line (the rate the line is served at, whole "
     "retry-tier hops, a tier partition of the deferring replica): weighted tenants get "
     "their share while all are backlogged (75% for a weight of 3 in bench/pipeline N, 38% "
     "without), but a replica lost under a backlog leaves copies read twice that spend "
     "limiter tokens (A took 1.31x instead of 1.05x there), and a line holds 1.5 times the "
     "first tier's delay of the rate; false: a deferral is due at the rate by the first tier "
     "that reaches it (docs/operations.md)",
     0},
    {"provider.defer_hop_max_ms", SL_CONF_INT, "30000", C(provider_defer_hop_max_ms),
     "with provider.tenant_schedule: a deferred call's longest hop through the retry tiers "
     "(the first tier's delay if "
     "shorter): a copy whose slot is further off goes round again, so that its tenant's line "
     "is refilled within this long when the tenant's share grows (another tenant's backlog "
     "ends)",
     0},
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
    {"kafka.retry_assignment_strategy", SL_CONF_STR, "cooperative-sticky",
     C(kafka_retry_assignment),
     "how a stage's replicas share the retry tiers' partitions (the group "
     "sluice-<stage>-retry), as kafka.assignment_strategy does the inputs': cooperative-sticky "
     "(a rebalance moves only the partitions that change owner; a copy read again after one "
     "is a duplicate the idempotency store answers, so an eager strategy, roundrobin or range, "
     "which gives every replica partitions of every tier but revokes them all at each "
     "rebalance, re-reads far more); all replicas of a stage must agree",
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
     "refused; presign's message.timeout.ms and linger.ms are its own (presign.kafka_timeout_ms)",
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
      {"sluice.v1.ErasureRequest", offsetof(sl_common_conf, topic_erasure_requests)},
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
  if (sl_kafka_metadata_refresh_set(cc->kafka_metadata_refresh_ms) != 0) {
    snprintf(err, errlen, "kafka.metadata_refresh_ms %lld is not between 0 and 3600000",
             (long long)cc->kafka_metadata_refresh_ms);
    return SL_ECONFIG;
  }
  sl_redis_addr a;
  char shown[600];
  sl_redis_redact(cc->redis_url, shown, sizeof shown);
  if (sl_redis_addr_parse(cc->redis_url, &a) != 0) {
    if (cc->redis_url && strstr(cc->redis_url, "+cluster://"))
      snprintf(err, errlen,
               "redis.url \"%s\" is not redis[s]+cluster://[user:password@]host:port,host:port,"
               "... (at most %d seeds; a Redis Cluster has only database 0)",
               shown, SL_REDIS_MAX_SEEDS);
    else
      snprintf(err, errlen, "redis.url \"%s\" is not redis[s]://[user:password@]host[:port][/db]",
               shown);
    return SL_ECONFIG;
  }
  if (a.cluster && cc->redis_buckets == 0) {
    snprintf(err, errlen,
             "redis.buckets must be set (4 or more per primary) with a Redis Cluster (redis.url "
             "\"%s\")",
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
  if (sl_rkey_setup((int)cc->redis_buckets) != 0) {
    snprintf(err, errlen, "redis.buckets %lld is not between 0 and %d",
             (long long)cc->redis_buckets, SL_RKEY_MAX_BUCKETS);
    return SL_ECONFIG;
  }
  if (sl_dkey_setup(cc->crypto_kek, cc->crypto_erased_ttl_s) != 0) {
    snprintf(err, errlen,
             "crypto.kek is not 64 hex digits, or crypto.erased_ttl_s %lld is not positive",
             (long long)cc->crypto_erased_ttl_s);
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
  if (a.tls || a.password[0] || a.cluster) { /* a cluster: a seed maps every slot */
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
