/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage.h — the runtime every Kafka stage runs: consume -> process ->
 * produce -> commit, with many messages in flight, retry tiers with a time
 * budget, dead letters, an idempotency store, and a breaker plus a shared
 * rate limit around the external provider.
 *
 * Guarantee (at-least-once; nothing accepted is lost): an input offset is
 * committed only when it and every offset before it in its partition are
 * finished, and a message is finished only once all of its outputs (results,
 * retry-tier copy or dead letter) are acknowledged by Kafka. A crash at any
 * point redelivers the unfinished messages; outputs are idempotent per
 * question key downstream, and the idempotency store answers a redelivered
 * input without a second provider call.
 *
 * Life of a message:
 *   1. from a retry tier and not yet due -> parked; its partition is paused
 *      and a timer resumes it when the head is due (no polling, the main
 *      input keeps flowing);
 *   2. idempotency lookup (stages with `idempotent`): stored outputs are
 *      produced again and the provider is not called;
 *   3. provider gate (stages with `provider`): circuit breaker, then the
 *      shared limiter in Redis (GCRA; a 429 pauses all replicas). While the
 *      breaker is open, messages are held in memory (breaker.hold) and one
 *      probe per probe interval goes through; at max_in_flight (or
 *      max_bytes_in_flight) fetching stops, so an outage's backlog waits in
 *      Kafka rather than hopping through the retry tiers, and drains at the
 *      limiter's rate when the provider is back;
 *   4. its start counted in Redis (stage.max_starts; sl_stage_gate.c): an
 *      input that started that many times without finishing (each run ended
 *      with the process: a crash, an abort, an OOM kill) is a dead letter of
 *      class "poison", not run again; one that started before runs alone;
 *      then process() on the worker pool (it may block), or on the loop once
 *      its runs average under stage.inline_max_us (sl_inline.h);
 *   5. outcome: DONE -> store outputs, produce them; RETRY -> a copy of the
 *      input goes to <stage>.retry.<tier> with the retry headers (or to the
 *      dead-letter topic when the budget is spent); FAIL -> dead letter plus
 *      a FAILED status for question keys;
 *   6. all deliveries acknowledged -> the offset is done; the highest
 *      contiguous done offset per partition is committed.
 *
 * @locality sl_stage_run() owns a libuv loop on the calling thread; process()
 * runs on libuv's worker pool, or on the loop thread when its runs are short
 * (sl_inline.h), and must be thread-safe (use sl_tls for per-thread
 * resources: the loop thread gets one of its own too); start() and
 * sl_job_done() run on the loop.
 */
#ifndef SLUICE_SL_STAGE_H
#define SLUICE_SL_STAGE_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_admin.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_retry.h"
#include "sluice/sl_seal.h"
#include "sluice/sl_tenant.h"

#define SL_OUTBOX_MAX 32

/* Retry headers on <stage>.retry.<tier> messages (text values). */
#define SL_HDR_ATTEMPT "sluice-attempt"
#define SL_HDR_FIRST_FAILURE "sluice-first-failure-ms"
#define SL_HDR_NOT_BEFORE "sluice-not-before-ms"
/* the delay the sender chose (ms): a reader never waits longer than this
 * from when it reads the copy, whatever the sender's clock wrote above */
#define SL_HDR_DELAY "sluice-delay-ms"
/* a deferred copy's slot in its tenant's schedule (unix ms; the gate's) */
#define SL_HDR_DEFER_DUE "sluice-defer-due-ms"
/* a deferred copy's input and hop, "<partition>.<offset>:<hop>": the main
 * input it was first deferred from and how many deferrals it has been
 * through (provider.tenant_schedule: a twin of an older hop is dropped) */
#define SL_HDR_DEFER_HOP "sluice-defer-hop"
#define SL_HDR_ERROR_CLASS "sluice-error-class"
#define SL_HDR_ERROR_MESSAGE "sluice-error-message"
#define SL_HDR_REPLAY_ID "sluice-replay-id"
/* On retry copies: the topic the message first came from (its stage's input,
 * not the retry tier it comes back on). */
#define SL_HDR_ORIGIN_TOPIC "sluice-origin-topic"
/* On retry copies: the provider cost units (sl_result.cost_units) of every
 * attempt so far, summed ("%.17g"); the next attempt starts from it
 * (sl_result.cost_before). */
#define SL_HDR_COST "sluice-cost-units"

/* Settings shared by every stage (one table: sl_common_conf_table). */
typedef struct {
  char *kafka_brokers;
  char *kafka_security_protocol; /* plaintext|ssl|sasl_plaintext|sasl_ssl */
  char *kafka_sasl_mechanism;    /* PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 */
  char *kafka_sasl_username;
  char *kafka_sasl_password; /* secret */
  char *kafka_ssl_ca_file;
  char *kafka_ssl_cert_file;
  char *kafka_ssl_key_file;
  char *kafka_ssl_key_password; /* secret */
  int kafka_ssl_verify_hostname;
  int64_t kafka_metadata_refresh_ms; /* sl_kafka_metadata_refresh_set */
  char *redis_url;
  char *redis_username;
  char *redis_password; /* secret */
  char *redis_tls_ca_file;
  char *redis_tls_cert_file;
  char *redis_tls_key_file;
  int64_t redis_command_timeout_ms; /* sl_aredis_set_timeout */
  int64_t redis_buckets;            /* sl_rkey_setup */
  char *pipeline_file;              /* "" = the built-in description */
  /* filled by sl_common_pipeline from the description, not settings: the
   * stage's topics by message type (NULL where it has none), owned by
   * pipeline */
  struct sl_pipeline *pipeline;
  const char *topic_submissions;      /* sluice.v1.SubmissionCreated */
  const char *topic_storage_events;   /* json:s3-event */
  const char *topic_stt_requests;     /* sluice.v1.UploadCompleted */
  const char *topic_grade_requests;   /* sluice.v1.Transcript */
  const char *topic_results;          /* sluice.v1.QuestionStatus */
  const char *topic_erasure_requests; /* sluice.v1.ErasureRequest */
  const char *topic_dlq;              /* the dead letters */
  char *log_level;
  int log_batch;      /* consuming stages: info lines written in batches (sl_log_batch) */
  char *admin_listen; /* "" = the stage's default */
  int64_t max_in_flight;
  int64_t prefetch;            /* -1: max_in_flight / 4, at least 4 */
  int64_t max_bytes_in_flight; /* 0: no byte limit (sl_flow.h) */
  int per_key_order;
  double drain_timeout_s;
  int64_t workers;
  int64_t inline_max_us; /* a processor whose runs average under this runs on the loop */
  char *retry_tiers;     /* "5s,30s,2m,10m" */
  double retry_budget_s;
  int64_t idempotency_ttl_s;
  double provider_rate;
  double provider_burst;
  int64_t provider_limit_buckets;    /* sl_limiter buckets (K) */
  int64_t provider_limit_bucket;     /* this replica's (mod K); -1: sl_limiter_replica_bucket */
  int64_t provider_tenant_hold;      /* jobs of one tenant waiting at the limiter; 0: 2 s' worth */
  int provider_tenant_schedule;      /* deferrals by each line's schedule (sl_defer.h) */
  int64_t provider_defer_hop_max_ms; /* with it: a deferral's longest hop through the tiers */
  double breaker_failure_ratio;
  int64_t breaker_min_calls;
  int64_t breaker_window_ms;
  int64_t breaker_probe_interval_ms;
  int breaker_hold;
  char *kafka_assignment;       /* partition.assignment.strategy */
  char *kafka_retry_assignment; /* the same, for the retry tiers' group */
  int64_t kafka_session_timeout_ms;
  int64_t kafka_heartbeat_ms;
  int64_t kafka_fetch_min_bytes;     /* a fetch is answered at this many bytes ... */
  int64_t kafka_fetch_wait_ms;       /* ... or after this long */
  int64_t kafka_retry_fetch_wait_ms; /* ... for the retry tiers' group */
  char *kafka_producer_properties;   /* "name=value,..." for librdkafka */
  char *kafka_consumer_properties;   /* the same for the stage's consumers */
  int64_t revoke_wait_ms;            /* a revoke waits this long for running calls */
  int64_t claim_lease_ms;            /* lease of an input claimed before a paid call */
  int64_t max_starts;                /* starts without finishing before an input is poison */
  int64_t max_retry_after_ms;        /* a provider's Retry-After is cut to this */
  int64_t lag_interval_ms;           /* how often the lag gauges are queried (0: never) */
  char *trace_endpoint;              /* OTLP/HTTP collector ("": no spans) */
  double trace_sample_ratio;         /* of new traces */
  int64_t trace_queue_spans, trace_batch_spans, trace_flush_ms, trace_timeout_ms;
  int trace_propagate;         /* outputs carry the trace context */
  char *crypto_kek;            /* secret: wraps the data keys (sl_dkey.h); "" = off */
  int64_t crypto_erased_ttl_s; /* an erased key's sentinel */
} sl_common_conf;

extern const sl_conf_entry sl_common_conf_table[];
extern const size_t sl_common_conf_table_len;

/* Loads the pipeline description (cc->pipeline_file, "" = built-in) into
 * cc->pipeline and resolves stage's topics into cc->topic_* by message type
 * (what the stage writes, else what it reads; stage NULL or not in the
 * description: the first topic of each type). An empty retry.tiers becomes the pipeline's.
 * Returns 0 or SL_ECONFIG (SL_ENOMEM) with the reason in err. Release with
 * sl_common_release. */
int sl_common_pipeline(sl_common_conf *cc, const char *stage, char *err, size_t errlen);

/* Frees what sl_common_pipeline loaded (NULL-safe); the settings themselves
 * are released with sl_conf_release. */
void sl_common_release(sl_common_conf *cc);

/* Installs the transport security of cc (kafka.security_protocol and
 * friends, redis.password / redis.tls_*) process-wide, for every Kafka and
 * Redis client made afterwards (sl_kafka_security_set,
 * sl_redis_security_set). With check set, and only where security is
 * configured, it then connects once to each: a refusal (wrong password,
 * certificate not trusted) is an error, an unreachable service only a
 * warning (the clients retry). Returns 0 or SL_ECONFIG with the reason in
 * err (never a secret). Call once at start-up, before threads. */
int sl_common_secure(const sl_common_conf *cc, int check, char *err, size_t errlen);

/* For tools that are not stages (sluicectl, load generators): reads the
 * common table from SLUICE_* variables only (any other SLUICE_* variable is
 * allowed: those belong to the stages) and calls sl_common_secure() without
 * the check. 0 or an error code with err set. Call once, before threads. */
int sl_common_secure_from_env(char *err, size_t errlen);

typedef struct {
  char topic[160];
  char key[128];
  void *value; /* owned by the outbox */
  size_t len;
  int retry_copy; /* set by the runtime: produce with the retry headers */
} sl_out;

/* Zero-initialised ({0}) it is empty; sl_outbox_clear() frees what it
 * holds and leaves it empty (and reusable). The items are allocated as they
 * are added, not inline: a job is allocated per message and most hold one
 * to three outputs, so a fixed array of SL_OUTBOX_MAX (10 KB) zeroed per
 * message cost more than the rest of the job (bench/cost). */
typedef struct {
  sl_out *items; /* n of them, room for cap */
  size_t n, cap;
  void *producer; /* set by the runtime; used by sl_outbox_emit_now() */
  int failed;     /* the error of the first add that failed, 0 when none */
  /* set by the stage (sl_outbox_seal_with) once it has the job's data key:
   * the personal fields (sl_pbseal_personal) of what sl_outbox_add_pb and
   * sl_outbox_emit_now add are sealed with it, the message key as aad;
   * wiped by sl_outbox_clear */
  int sealing;
  uint8_t seal_key[SL_SEAL_KEY_LEN];
  /* the input's data key as the runtime read it with the input's claim
   * (sl_stage_opts.data_key), set before process()/start(): SL_KEY_FOUND
   * also sets sealing; kept until sl_outbox_clear */
  int key_state;
  /* set by the processor: the input holds sealed fields but its key is
   * missing from a store that says it is complete, so Redis lost it: the
   * runtime deletes the store's marker at the job's end, and presign
   * rebuilds the store (docs/privacy.md) */
  int key_lost;
} sl_outbox;

/* sl_outbox.key_state */
enum {
  SL_KEY_UNREAD = 0,  /* not read by the runtime: the stage looks it up itself */
  SL_KEY_FOUND,       /* opened with crypto.kek: in seal_key, sealing on */
  SL_KEY_ERASED,      /* the submission was erased (its sentinel) */
  SL_KEY_MISSING,     /* not in Redis while the store is not complete: lost, being rebuilt */
  SL_KEY_NONE,        /* not in Redis and the store complete: a submission from before crypto.kek */
  SL_KEY_INVALID,     /* it does not open with crypto.kek */
  SL_KEY_UNAVAILABLE, /* Redis did not answer */
};
/* The SL_KEY_* a data key lookup's code stands for (sl_dkey_open: 0,
 * SL_EERASED, SL_ENOTFOUND (SL_KEY_MISSING until the store's marker says
 * otherwise), SL_EAUTH, anything else SL_KEY_UNAVAILABLE). */
int sl_key_state_of(int rc);
/* The SL_KEY_* of a key missing from Redis, by the store's marker: r is
 * the answer to EXISTS sl_dkey_marker() (NULL: none). Marker set, the
 * store is complete: SL_KEY_NONE (a submission from before crypto.kek);
 * not set: SL_KEY_MISSING (lost, being rebuilt); no answer:
 * SL_KEY_UNAVAILABLE. One decision for every reader of data keys. */
struct redisReply;
int sl_key_state_of_marker(const struct redisReply *r);

/* Appends copies of topic, key and value. Returns 0, SL_ETOOBIG (outbox
 * full, topic or key too long) or SL_ENOMEM. A failed add is also kept in
 * ob->failed (until sl_outbox_clear()): the runtime then neither stores,
 * produces nor commits the job's outputs as they are. A job the processor
 * called done becomes a dead letter of class output_invalid; a dead letter
 * or retry copy that cannot be added leaves the input uncommitted. */
int sl_outbox_add(sl_outbox *ob, const char *topic, const char *key, const void *value, size_t len);
void sl_outbox_clear(sl_outbox *ob);

/* Seals what is added from now on with key (the job's data key, copied). */
void sl_outbox_seal_with(sl_outbox *ob, const uint8_t key[SL_SEAL_KEY_LEN]);

/* Appends a packed protobuf message (any ProtobufCMessage), its personal
 * fields sealed when the outbox seals (sl_outbox_seal_with). */
struct ProtobufCMessage;
int sl_outbox_add_pb(sl_outbox *ob, const char *topic, const char *key,
                     const struct ProtobufCMessage *msg);

/* Produces a progress notice at once, without waiting for it (best effort):
 * for status events such as TRANSCRIBING that a later state supersedes, so
 * losing one is harmless. Outputs that matter go through sl_outbox_add().
 * Thread-safe. */
void sl_outbox_emit_now(sl_outbox *ob, const char *topic, const char *key,
                        const struct ProtobufCMessage *msg);

typedef enum { SL_OUTCOME_DONE = 0, SL_OUTCOME_RETRY, SL_OUTCOME_FAIL } sl_outcome;

#define SL_AGAIN_MAX_MS 1000 /* sl_result.again_in_ms is cut to this */
#define SL_AGAIN_MAX 100     /* runs again in place per message, then the tiers */
#define SL_RESULT_STEPS 4    /* timed steps a run records at most (sl_result_step) */

typedef struct {
  sl_outcome outcome;
  char error_class[48];       /* short machine word: "bad_event", "storage", ... */
  char error_message[512];    /* human sentence */
  int provider_called;        /* the external provider was called (breaker input) */
  int provider_throttled;     /* it answered 429: pause it for every replica */
  int64_t retry_after_ms;     /* it asked to wait this long (Retry-After), or 0 */
  int64_t again_in_ms;        /* RETRY only: what it lacks is expected within moments
                                 (another stage's write): run it again in this process
                                 after this many ms (at most SL_AGAIN_MAX_MS, at most
                                 SL_AGAIN_MAX times per message) instead of a retry
                                 copy that waits a whole tier. Its offset stays
                                 uncommitted meanwhile: a crash or a lost partition
                                 hands it on as it was. 0 (the runtime resets it
                                 before each run): the retry tiers */
  double cost_units;          /* what this attempt's provider call cost (the
                                 plugin's cost_units), whatever its outcome: the
                                 stage sets it; counted in
                                 sluice_provider_cost_units_total */
  double cost_before;         /* what the earlier attempts of this input cost
                                 (SL_HDR_COST of a retry copy, else 0): the
                                 runtime sets it before process()/start(); a
                                 stage's final status reports cost_before +
                                 cost_units */
  char subject[128];          /* "<submission>/<question>" when the input's key does
                                 not say (storage events): names the dead letter
                                 and gets the FAILED status */
  char traceparent[56];       /* the trace the input belongs to when its message
                                 carried none (storage events: ingest finds the
                                 question's in its submission): the stage's span
                                 for it, and what it writes, join that trace */
  struct {                    /* timed steps of this run (sl_result_step): child
                                 spans of the stage's span for the input when its
                                 trace is recorded; reset before each run */
    const char *name;         /* a literal: "storage HEAD" */
    int64_t start_ns, end_ns; /* unix time (sl_trace_now_ns) */
    int status;               /* the HTTP status it got, or 0 (none: failed) */
  } step[SL_RESULT_STEPS];
  int nsteps;
  /* whose work the input is when its message did not say (SL_HDR_TENANT;
   * ingest finds it in the submission): what the stage writes carries it */
  char tenant[SL_TENANT_MAX + 1];
} sl_result;

/* Convenience: fills res (keeping the provider fields) and returns o. */
sl_outcome sl_result_set(sl_result *res, sl_outcome o, const char *cls, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records a timed step of this run that began at start_ns (sl_trace_now_ns)
 * and ends now, e.g. a storage request and its HTTP status (0: none); past
 * SL_RESULT_STEPS they are dropped. name: a literal. */
void sl_result_step(sl_result *res, const char *name, int64_t start_ns, int status);

/* Called on a worker thread (or on the loop thread once its runs proved
 * short: sl_inline.h); must describe outputs in out and the outcome in res
 * (which starts as DONE). Must be thread-safe. */
typedef void (*sl_stage_process_fn)(void *ud, const rd_kafka_message_t *msg, sl_outbox *out,
                                    sl_result *res);

/* Async processing (HTTP providers): start() is called on the loop thread
 * and must not block; it starts I/O (sl_job_http) and, when the work is
 * over, fills the job's outbox and result and calls sl_job_done(), also on
 * the loop thread. Thousands of jobs can wait on I/O at once. */
typedef struct sl_job sl_job;
typedef void (*sl_stage_start_fn)(void *ud, sl_job *job);

struct sl_httpc;
const rd_kafka_message_t *sl_job_message(const sl_job *job);
sl_outbox *sl_job_outbox(sl_job *job);
sl_result *sl_job_result(sl_job *job);
const char *sl_job_key(const sl_job *job);
/* The job's trace id (32 hex digits): a callback of the job's sets it for
 * its log lines (sl_log_trace). */
const char *sl_job_trace_id(const sl_job *job);
/* A span of the job's trace, a child of the job's span (recorded when its
 * trace is): an I/O of the processor's own, e.g. "storage GET", from
 * start_ns (sl_trace_now_ns() when it went out) to now; http_status (0:
 * none) and err (NULL: it went well) on it. Loop thread, or the worker
 * running the job. */
void sl_job_span(const sl_job *job, const char *name, int64_t start_ns, int http_status,
                 const char *err);
/* The stage's HTTP client (curl multi on the loop). */
struct sl_httpc *sl_job_http(sl_job *job);
/* The stage's asynchronous Redis connection (the one its idempotency store
 * and claims use), on the loop: what one job sends goes out pipelined with
 * every other job's. */
struct sl_aredis;
struct sl_aredis *sl_job_redis(sl_job *job);
/* The stage's loop, for I/O of the processor's own (uv_getaddrinfo). */
struct uv_loop_s;
struct uv_loop_s *sl_job_loop(sl_job *job);
/* What the stage holds for the job now, in bytes, beyond its message (the
 * answer it fetched): replaces what it held before, starting with the
 * reservation sl_stage_opts.bytes_of made, and counts towards
 * stage.max_bytes_in_flight until the job is over. Set it when the size is
 * known (after a fetch) and 0 once the memory is freed. Loop thread. */
void sl_job_hold(sl_job *job, int64_t bytes);
/* Hands the job back to the runtime; it must not be touched afterwards. */
void sl_job_done(sl_job *job);

struct sl_stage_opts;

/* A message of the stage is being dead-lettered. subject is the message key
 * (or what the processor named in sl_result.subject; may be ""); the hook
 * may add outputs to out that tell the domain about it (Sluice's stages add
 * a FAILED QuestionStatus for "<submission>/<question>", see stages/lib/stage.c),
 * produced with the dead letter, all or nothing. cost_units: what every
 * attempt of the message cost (sl_result.cost_before + cost_units). Runs on
 * the loop thread and must not block; the runtime itself knows nothing of
 * questions. */
typedef void (*sl_stage_dead_letter_fn)(const struct sl_stage_opts *o, const char *subject,
                                        const char *error_class, const char *error_message,
                                        int64_t at_ms, double cost_units, sl_outbox *out);

typedef struct sl_stage_opts {
  const char *stage; /* "stt"; retry topics are <stage>.retry.<tier> */
  const sl_common_conf *common;
  const char *const *topics; /* main inputs; a dead letter replays to its
                              * message's origin (sl_message_origin) */
  size_t ntopics;
  sl_stage_process_fn process; /* blocking, on the worker pool (short: the loop) ... */
  sl_stage_start_fn start;     /* ... or async on the loop (set one) */
  void *ud;
  const char *provider;                   /* external provider name, or NULL */
  int idempotent;                         /* reuse stored outputs per (key, input digest) */
  sl_admin *admin;                        /* readiness follows partition assignment; may be NULL */
  sl_stage_dead_letter_fn on_dead_letter; /* may be NULL */
  /* may be NULL: the bytes the stage will hold for m beyond the message (the
   * object it is going to fetch, as the message declares it), reserved
   * towards stage.max_bytes_in_flight when the message starts (past
   * parking), so fetching pauses before the memory is taken; corrected
   * with sl_job_hold. Loop thread, must not block. */
  int64_t (*bytes_of)(void *ud, const rd_kafka_message_t *m);
  /* the worker threads when stage.workers is 0 (its default); 0: 4. A stage
   * whose blocking runs mostly wait on round trips (ingest: a HEAD and
   * Redis per event) asks for more, as its concurrency is that count */
  int default_workers;
  /* with crypto.kek (sl_dkey.h), where the stage claims its inputs
   * (provider, idempotent, stage.claim_lease_ms > 0): each input's
   * submission data key is read by its claim's script (no round trip of
   * its own) and handed over in the job's outbox (key_state, seal_key)
   * before process() or start(); a key found also seals the outputs. A
   * missing key costs one more round trip, the store's marker. */
  int data_key;
} sl_stage_opts;

/* 1 when the runtime reads each input's data key for this stage
 * (sl_stage_opts.data_key with crypto.kek and claims on): a processor may
 * then rely on sl_outbox.key_state. */
int sl_stage_reads_data_keys(const sl_stage_opts *o);

/* Runs until *stop becomes non-zero (checked every 100 ms; set it from a
 * signal handler), then stops fetching, lets in-flight work finish for up to
 * drain_timeout_s, commits and closes the consumer. Returns 0 on a clean
 * stop or a negative code on a fatal error. */
int sl_stage_run(const sl_stage_opts *opts, volatile sig_atomic_t *stop);

/* Message key helpers: "<submission>/<question>". sid must hold 64 bytes.
 * Returns 0 or SL_EPARSE. */
int sl_key_parse(const char *key, size_t len, char sid[64], unsigned *qno);

/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t sl_now_ms(void);

/* The topic m first came from: its sluice-origin-topic header (retry copies
 * carry it) or else the topic it was read from. Dispatch on this, never on
 * the topic name, when a stage has several inputs. Returns buf or the
 * topic's own name; buf holds at least 160 bytes. */
const char *sl_message_origin(const rd_kafka_message_t *m, char *buf, size_t len);

/* When the message first failed (its SL_HDR_FIRST_FAILURE header, which
 * retry copies carry), in ms since the epoch; 0 for a first attempt. */
int64_t sl_message_first_failure_ms(const rd_kafka_message_t *m);

#endif
