/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_kafka.h — librdkafka set-up shared by every stage.
 *
 * Producers are idempotent (enable.idempotence=true, hence acks=all): a
 * message counts as written only once its delivery report says so. Consumers
 * never auto-commit; the stage runtime commits an offset only after the
 * outputs of that message are acknowledged (sl_stage.h).
 */
#ifndef SLUICE_SL_KAFKA_H
#define SLUICE_SL_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Transport security of every Kafka client of the process (producers,
 * consumers and admin clients made here and by the tools). Strings may be
 * NULL or "" (not set). protocol: plaintext, ssl, sasl_plaintext or
 * sasl_ssl; mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. */
typedef struct {
  const char *protocol;
  const char *mechanism;
  const char *username;
  const char *password;
  const char *ca_file;   /* "" = the system's CAs */
  const char *cert_file; /* client certificate (mutual TLS), optional */
  const char *key_file;
  const char *key_password;
  int verify_hostname; /* endpoint identification (https) */
} sl_kafka_security;

/* Validates the combination (a sasl_* protocol needs a user name and a
 * password; TLS files need an ssl protocol; files must be readable) and
 * installs it process-wide. Returns 0 or SL_ECONFIG with the reason in err
 * (never a password). Call before any thread makes a client. */
int sl_kafka_security_set(const sl_kafka_security *s, char *err, size_t errlen);
void sl_kafka_security_reset(void);
/* 1 when a protocol other than plaintext is installed. */
int sl_kafka_security_enabled(void);

/* How often every client the process makes afterwards refreshes the
 * metadata of its topics (librdkafka's topic.metadata.refresh.interval.ms,
 * 5 minutes by default): the longest a producer keeps sending to the old
 * partitions of a grown topic, and a consumer group takes to notice and
 * share the new ones (kafka.metadata_refresh_ms). 0 keeps librdkafka's
 * default. Returns 0 or SL_EINVAL (negative, or above 1 hour). Call before
 * any thread makes a client. */
int sl_kafka_metadata_refresh_set(int64_t ms);

/* Applies the installed security properties to c (every rd_kafka_conf_t the
 * process builds goes through this). Returns 0 or SL_ECONFIG. */
int sl_kafka_conf_secure(rd_kafka_conf_t *c, char *err, size_t errlen);

/* Asks brokers for metadata with the installed security. Returns 0 when
 * they answer, SL_ECONFIG when they refuse us (SASL authentication failed,
 * TLS certificate not trusted) and SL_EUNAVAIL when none answers within
 * timeout_ms; err holds the reason. */
int sl_kafka_check(const char *brokers, int timeout_ms, char *err, size_t errlen);

/* Where a message's delivery report goes: cb(err, ctx), exactly once, on
 * whichever thread polls the producer (the loop thread with
 * sl_kafka_uv_attach). Every message carries its own ticket as its
 * librdkafka opaque (RD_KAFKA_V_OPAQUE), so one producer serves any number
 * of senders, each with its own callback and context: no globals, nothing
 * stored in the producer. owned = 1: the ticket was malloc'd by
 * sl_kafka_send and is freed before cb runs; 0: the sender owns it (one
 * ticket may serve many messages, e.g. every output of one job). */
typedef void (*sl_kafka_sent_fn)(rd_kafka_resp_err_t err, void *ctx);
typedef struct {
  sl_kafka_sent_fn cb;
  void *ctx;
  int owned;
} sl_kafka_ticket;

/* Produces one message to topic with a ticket of its own for (cb, ctx).
 * msgflags: RD_KAFKA_MSG_F_COPY (value copied) or RD_KAFKA_MSG_F_FREE
 * (value is malloc'd and librdkafka frees it; on a refusal the caller
 * still owns it). Returns RD_KAFKA_RESP_ERR_NO_ERROR (cb will run)
 * or librdkafka's refusal (cb will not run). */
rd_kafka_resp_err_t sl_kafka_send(rd_kafka_t *rk, const char *topic, const void *key, size_t keylen,
                                  void *value, size_t len, int msgflags, sl_kafka_sent_fn cb,
                                  void *ctx);
/* The same, the message carrying traceparent (W3C trace context, NULL or
 * "": none) in its header of that name. */
rd_kafka_resp_err_t sl_kafka_send_traced(rd_kafka_t *rk, const char *topic, const void *key,
                                         size_t keylen, void *value, size_t len, int msgflags,
                                         const char *traceparent, sl_kafka_sent_fn cb, void *ctx);

/* Produces one message (value copied; val NULL: a tombstone) and waits
 * for its delivery report, polling rk itself (any number of threads may
 * wait at once on one producer; a report comes within message.timeout.ms).
 * Returns the report's error, or librdkafka's refusal. For producers no
 * loop serves (sl_kafka_uv): a blocking caller, e.g. a worker thread. */
rd_kafka_resp_err_t sl_kafka_send_wait(rd_kafka_t *rk, const char *topic, const void *key,
                                       size_t keylen, const void *val, size_t len);

/* The fatal error of an idempotent producer: when rk has one, logs it (once
 * per producer) with who noticed it and returns 1 (the producer can write
 * nothing more: the caller commits nothing and answers no success through
 * it, and renews it with sl_kafka_producer_renew, or stops); else 0. The
 * same decision everywhere a producer is used. */
int sl_kafka_fatal(rd_kafka_t *rk, const char *who);

typedef struct sl_kafka_uv sl_kafka_uv; /* below: sl_kafka_uv_attach */

/* Replaces *rk, a producer that failed for good (sl_kafka_fatal; for
 * example librdkafka 2.0.2's "sequence desynchronization" after a timed-out
 * request to a broker that died, confluentinc/librdkafka#4438, fixed in
 * 2.3.0), by a new one from sl_kafka_producer_new(brokers, client_id,
 * extra) served on loop in *ku's place (ku may be NULL: the caller polls).
 * *rk and *ku change before the old producer's messages are purged and
 * their delivery reports served here, each with an error (the sender
 * produces it again through *rk, or answers that it failed): a report that
 * looks at *rk sees the new producer. The old one is then destroyed, or
 * handed to the caller in *retired (non-NULL: a thread may still hold it;
 * the caller destroys it once none does); a report still missing after
 * 5 s is lost with it (logged). A new producer
 * has a new idempotence identity: what the old one may have written is
 * written again (a duplicate, which every consumer here absorbs).
 * Returns 0, or the error of creating the new one (*rk unchanged).
 * Counted in sluice_kafka_producer_renewals_total. @locality the loop
 * thread, never inside a librdkafka callback (a delivery report). */
int sl_kafka_producer_renew(rd_kafka_t **rk, sl_kafka_uv **ku, uv_loop_t *loop, const char *brokers,
                            const char *client_id, const char *const *extra, rd_kafka_t **retired,
                            char *err, size_t errlen);

/* How often a process renews its producers: sl_kafka_renew_due says whether
 * one more renewal fits in SL_KAFKA_RENEW_MAX per SL_KAFKA_RENEW_WINDOW_MS
 * (and counts it). A producer that fails again and again (a broker that
 * refuses it for good) is not renewed for ever: the caller stops instead. */
#define SL_KAFKA_RENEW_MAX 5
#define SL_KAFKA_RENEW_WINDOW_MS 60000
typedef struct {
  int64_t window_start_ms;
  int n;
} sl_kafka_renewals;
int sl_kafka_renew_due(sl_kafka_renewals *r, int64_t now_ms);

/* The message.timeout.ms that makes a delivery report arrive within
 * answer_within_ms: librdkafka looks for timed-out messages once a second,
 * so its report may come up to 1 s after the message timeout. Returns
 * answer_within_ms - 1000, at least 100. */
int64_t sl_kafka_message_timeout_for(int64_t answer_within_ms);

/* Makes the producer rk ask for these topics' partitions and leaders as
 * soon as it is connected, instead of at its first message to each:
 * librdkafka 2.0 asks about a topic first met in a produce only on its
 * one-second timer, so after every start the first messages to each topic
 * waited up to 1 s. Asynchronous: nothing here waits for Kafka, and a topic
 * that does not exist is found out at its first message, as without it.
 * held[i] gets a handle on topics[i] that keeps it known for as long as the
 * producer lives; release them with sl_kafka_prefetch_release before
 * rd_kafka_destroy. Returns 0, SL_EINVAL or SL_ENOMEM (then nothing is held).
 * @locality the thread that owns rk */
int sl_kafka_prefetch(rd_kafka_t *rk, const char *const *topics, size_t n, rd_kafka_topic_t **held);
/* Lets go of what sl_kafka_prefetch holds (NULL entries are skipped). */
void sl_kafka_prefetch_release(rd_kafka_topic_t **held, size_t n);

/* Which client's extra properties sl_kafka_props_split checks. */
typedef enum { SL_KAFKA_PRODUCER_PROPS, SL_KAFKA_CONSUMER_PROPS } sl_kafka_props_kind;

/* Splits spec, "name=value,name=value" (librdkafka properties, the value
 * of kafka.producer_properties or kafka.consumer_properties), into kv:
 * NULL-terminated name/value pairs pointing into buf (bounded: buflen
 * bytes; kv has room for 2 * maxpairs + 1 pointers). Empty items are
 * skipped; spaces around names and values are trimmed. Refused: for a
 * producer, the properties Sluice's delivery guarantee rests on
 * (enable.idempotence, acks, transactional.id, the delivery callbacks); for
 * a consumer, its group, commit and offset-reset settings, the prefetch
 * bound and what kafka.session_timeout_ms, kafka.heartbeat_interval_ms and
 * kafka.assignment set. Every name/value is checked against librdkafka.
 * Returns 0 or SL_ECONFIG with the reason in err. */
int sl_kafka_props_split(sl_kafka_props_kind kind, const char *spec, char *buf, size_t buflen,
                         const char **kv, size_t maxpairs, char *err, size_t errlen);

/* The settings every Sluice producer writes with, applied to c:
 * enable.idempotence=true and acks=all (a message counts as written only
 * once every in-sync replica has it, and a retry never duplicates it),
 * linger.ms=2, message.timeout.ms=30000, max.in.flight.requests.per.connection=1
 * (librdkafka 2.0.2's sequence desynchronisation across a leader change,
 * sl_kafka.c); then extra (NULL-terminated
 * name/value pairs of librdkafka properties, may be NULL) over them. For a
 * program that makes its own producer around c, with a delivery callback of
 * its own (sluicectl, the benches); sl_kafka_producer_new uses it too.
 * Returns 0, or SL_ECONFIG with the reason in err. */
int sl_kafka_conf_durable(rd_kafka_conf_t *c, const char *const *extra, char *err, size_t errlen);

/* Creates an idempotent producer (sl_kafka_conf_durable over the installed
 * security, sl_kafka_conf_secure). Each message must carry an
 * sl_kafka_ticket as its opaque (sl_kafka_send does); its delivery report
 * goes there. extra: NULL-terminated key/value pairs of librdkafka
 * properties applied last, may be NULL. */
int sl_kafka_producer_new(rd_kafka_t **out, const char *brokers, const char *client_id,
                          const char *const *extra, char *err, size_t errlen);

/* Creates a consumer in group_id with auto-commit off, auto.offset.reset
 * earliest, and its poll queue redirected to the consumer queue. rebalance
 * and commit callbacks (may be NULL) get opaque; they run inside
 * rd_kafka_consumer_poll(). stats (may be NULL) gets librdkafka's statistics
 * JSON every 5 s, also inside rd_kafka_consumer_poll(); it returns 0 (the
 * library frees the JSON). */
/* Group membership of a consumer (NULL for sl_kafka_consumer_new: the
 * defaults in brackets). assignment: partition.assignment.strategy
 * ["roundrobin"; "range": eager too; "cooperative-sticky": incremental,
 * KIP-429]. session_timeout_ms [10000] and heartbeat_ms [2000]: a member that
 * stops heart-beating (SIGKILL, lost node) loses its partitions after the
 * session timeout. fetch_min_bytes and fetch_wait_ms [0: librdkafka's, 1
 * byte and 500 ms]: a fetch is answered once fetch_min_bytes are there or
 * after fetch_wait_ms (fetch.min.bytes, fetch.wait.max.ms): batching that
 * saves the broker a request per message at the cost of up to
 * fetch_wait_ms of latency per hop while traffic is light. */
typedef struct {
  const char *assignment;
  int64_t session_timeout_ms;
  int64_t heartbeat_ms;
  int64_t fetch_min_bytes;
  int64_t fetch_wait_ms;
  /* NULL-terminated key/value pairs of librdkafka properties applied after
   * Sluice's (sl_kafka_props_split, SL_KAFKA_CONSUMER_PROPS); may be NULL */
  const char *const *extra;
} sl_kafka_group_opts;

int sl_kafka_consumer_new(
    rd_kafka_t **out, const char *brokers, const char *group_id, const char *client_id,
    const sl_kafka_group_opts *group, char *err, size_t errlen,
    void (*rebalance)(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *, void *),
    void (*committed)(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *, void *),
    int (*stats)(rd_kafka_t *, char *, size_t, void *), void *opaque);

/* A reader of a consumer group's lag that is not one of its members: a
 * consumer with group.id group and the installed security that is never
 * subscribed or assigned (librdkafka joins a group only on subscribe, so
 * the group's members see no rebalance), commits nothing
 * (enable.auto.commit false) and fetches nothing but what
 * sl_kafka_group_oldest reads. Its committed offsets
 * come from the group's coordinator (OffsetFetch, rd_kafka_committed), not
 * from the Admin API, whose ListConsumerGroupOffsets aborted every client
 * of the process when it timed out against a stopped Kafka (librdkafka
 * 2.0.2, rd_kafka_enq_once_del_source_return). Returns 0, SL_ECONFIG or
 * SL_EKAFKA with the reason in err. Free with sl_kafka_group_reader_free. */
int sl_kafka_group_reader_new(rd_kafka_t **out, const char *brokers, const char *group,
                              const char *client_id, char *err, size_t errlen);

/* Destroys a reader without the consumer close (it has nothing to leave or
 * commit), so it does not wait for a Kafka that is down. NULL-safe. */
void sl_kafka_group_reader_free(rd_kafka_t *rk);

/* A consumer group's lag on one partition, as Kafka has it: what the
 * stages export as sluice_consumer_lag_messages and `sluicectl status`
 * shows. Messages taken and not yet finished count (their offsets are not
 * committed). */
typedef struct {
  int64_t lo, hi;    /* low and high watermarks */
  int64_t committed; /* the group's committed offset; -1: none (it starts at lo) */
  int64_t lag;       /* hi - max(committed, lo), at least 0 */
} sl_kafka_lag;

/* Queries the committed offsets on parts of the group rk was made for
 * (rk: a consumer handle with group.id, like sl_kafka_group_reader_new's,
 * used by one thread at a time) and the partitions' watermarks (two
 * batched ListOffsets, earliest and latest), and fills out[i] for
 * parts->elems[i]. Blocks for at most about timeout_ms in all: never call
 * it on a loop thread. Returns 0, or SL_EKAFKA / SL_ETIMEDOUT with the
 * reason in err (out is then incomplete). */
int sl_kafka_group_lag(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *parts, int timeout_ms,
                       sl_kafka_lag *out, char *err, size_t errlen);

/* How far a consumer group has got on topic: *oldest_ms is the timestamp
 * of the oldest message the group has not committed (over all of topic's
 * partitions: on each, the message at its committed offset), or -1 when it
 * has committed everything. rk: a reader made by sl_kafka_group_reader_new
 * for the group, used by one thread; it is assigned those partitions for
 * the duration of the call (which never joins the group: its members see
 * no rebalance) and unassigned again. Blocks for at most about timeout_ms:
 * never call it on a loop thread. Returns 0, or SL_EKAFKA / SL_ETIMEDOUT
 * with the reason in err (*oldest_ms is then -1 and means nothing). */
int sl_kafka_group_oldest(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *oldest_ms,
                          char *err, size_t errlen);

/* Serves the producer's delivery reports on a libuv loop: librdkafka writes
 * to a pipe whenever its queue has events, a uv_poll_t wakes and calls
 * rd_kafka_poll(rk, 0). No timer, no busy loop. The handle is closed by
 * sl_kafka_uv_detach (NULL-safe). @locality loop thread only. */
int sl_kafka_uv_attach(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop);

/* The same for a consumer: when its queue has events, ready(ud) is called
 * on the loop (it should drain with rd_kafka_consumer_poll(rk, 0)). */
int sl_kafka_uv_attach_consumer(sl_kafka_uv **out, rd_kafka_t *rk, uv_loop_t *loop,
                                void (*ready)(void *ud), void *ud);
void sl_kafka_uv_detach(sl_kafka_uv *ku);

#endif
