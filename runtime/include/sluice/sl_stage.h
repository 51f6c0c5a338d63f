/*
 * sl_stage.h — the consume -> process -> produce loop every Kafka stage runs.
 *
 * Guarantee (at-least-once, nothing accepted is lost): for each input message
 * the runtime (1) calls the stage's process function, which only *describes*
 * outputs in an sl_outbox, (2) produces every output with the idempotent
 * producer and waits for all delivery reports, and only then (3) commits the
 * input offset, synchronously. A crash anywhere before (3) redelivers the
 * message; downstream stages and materialize are idempotent per question key,
 * so a redelivery changes nothing visible.
 *
 * Outcomes: SL_OUTCOME_DONE commits; SL_OUTCOME_FAIL (permanent) writes a
 * DeadLetter to the dlq topic plus a FAILED QuestionStatus for question keys,
 * then commits; SL_OUTCOME_RETRY (transient) retries the same message in
 * place with capped exponential backoff until retry_budget_s, then fails it
 * as "budget_exhausted". (In-place retry blocks the partition; the retry-tier
 * topics replace it in the runtime issue.)
 *
 * @locality sl_stage_run() runs on the calling thread; process() is called on
 * that thread, one message at a time.
 */
#ifndef SLUICE_SL_STAGE_H
#define SLUICE_SL_STAGE_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_conf.h"

#define SL_OUTBOX_MAX 32

/* Topic names and connection settings shared by every stage. */
typedef struct {
  char *kafka_brokers;
  char *redis_url;
  char *topic_submissions;
  char *topic_storage_events;
  char *topic_stt_requests;
  char *topic_grade_requests;
  char *topic_results;
  char *topic_dlq;
  char *log_level;
  char *admin_listen;   /* "" = the stage's default */
  double retry_budget_s;
  int64_t retry_initial_ms;
  int64_t retry_max_ms;
} sl_common_conf;

extern const sl_conf_entry sl_common_conf_table[];
extern const size_t sl_common_conf_table_len;

typedef struct {
  const char *topic;
  char key[128];
  void *value; /* owned by the outbox */
  size_t len;
} sl_out;

typedef struct {
  sl_out items[SL_OUTBOX_MAX];
  size_t n;
  void *producer; /* set by the runtime; used by sl_outbox_emit_now() */
} sl_outbox;

/* Appends a copy of value. Returns 0, SL_ETOOBIG (outbox full or key too
 * long) or SL_ENOMEM. */
int sl_outbox_add(sl_outbox *ob, const char *topic, const char *key, const void *value,
                  size_t len);
void sl_outbox_clear(sl_outbox *ob);

/* Appends a packed protobuf message (any ProtobufCMessage). */
struct ProtobufCMessage;
int sl_outbox_add_pb(sl_outbox *ob, const char *topic, const char *key,
                     const struct ProtobufCMessage *msg);

/* Produces a progress notice at once, without waiting for it (best effort):
 * for status events such as TRANSCRIBING that a later state supersedes, so
 * losing one is harmless. Outputs that matter go through sl_outbox_add(). */
void sl_outbox_emit_now(sl_outbox *ob, const char *topic, const char *key,
                        const struct ProtobufCMessage *msg);

typedef enum { SL_OUTCOME_DONE = 0, SL_OUTCOME_RETRY, SL_OUTCOME_FAIL } sl_outcome;

typedef struct {
  sl_outcome outcome;
  char error_class[48];    /* short machine word: "bad_event", "storage", ... */
  char error_message[512]; /* human sentence */
} sl_result;

/* Convenience: fills res and returns its outcome. */
sl_outcome sl_result_set(sl_result *res, sl_outcome o, const char *cls, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

typedef void (*sl_stage_process_fn)(void *ud, const rd_kafka_message_t *msg, sl_outbox *out,
                                    sl_result *res);

typedef struct {
  const char *stage;                 /* "stt" */
  const sl_common_conf *common;
  const char *const *topics;         /* input topics */
  size_t ntopics;
  sl_stage_process_fn process;
  void *ud;
} sl_stage_opts;

/* Runs until *stop becomes non-zero (set it from a signal handler), then
 * finishes the current message, commits and closes the consumer.
 * Returns 0 on a clean stop or a negative code on a fatal error. */
int sl_stage_run(const sl_stage_opts *opts, volatile sig_atomic_t *stop);

/* Message key helpers: "<submission>/<question>". sid must hold 64 bytes.
 * Returns 0 or SL_EPARSE. */
int sl_key_parse(const char *key, size_t len, char sid[64], unsigned *qno);

/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t sl_now_ms(void);

#endif
