/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluicectl.h — shared declarations of the operator CLI (tools/sluicectl/).
 *
 *   sluicectl.c  command line parsing, usage, dispatch
 *   util.c       time parsing/formatting, UUIDv7, base64, escaping,
 *                protobuf -> JSON, progress bar, token bucket
 *   kafka.c      client configuration, reading a whole topic, producing
 *   dlq.c        dlq list / show / audit / inject
 *   replay.c     dlq replay
 *   topics.c     topics ensure / list
 *   status.c     status: per stage group members, lag, oldest age, rates,
 *                breaker; per provider limiter use
 *   submission.c submission ID: one submission across topics and Redis
 *   keys.c       keys [ID]: the view's Redis keys under the current settings
 *   submit.c     submit FILE...: presign, upload, poll, print
 *   multipart.c  submit's multipart upload of a large file (resumable)
 *   http.c       libcurl GET/POST/PUT and /metrics parsing, Redis via sl_redis
 *
 * Exit status everywhere: 0 success, 1 failure, 2 usage error.
 */
#ifndef SLUICECTL_H
#define SLUICECTL_H

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "sluice/sl_stage.h" /* sl_now_ms, the common settings */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice.pb-c.h"

#define SC_EXIT_OK 0
#define SC_EXIT_FAIL 1
#define SC_EXIT_USAGE 2

#define SC_MAX_CONFIGS 64
#define SC_MAX_ADMINS 32
#define SC_MAX_ADMINS_TEXT "32"
#define SC_MAX_FILES 100
/* --yes is needed to replay more than this many dead letters */
#define SC_CONFIRM_ABOVE 100

typedef struct {
  /* connection */
  const char *brokers;     /* --brokers, SLUICE_KAFKA_BROKERS, 127.0.0.1:9092 */
  const char *topic;       /* --topic, else the pipeline's dead-letter topic */
  const char *audit_topic; /* --audit-topic, else the pipeline's audit topic */
  /* the pipeline description (SLUICE_PIPELINE_FILE, else built-in): the
   * stages and topics status, submission and dlq look at */
  const struct sl_pipeline *pipeline;
  int timeout_ms; /* --timeout SECONDS: every wait on Kafka (10 s) */
  /* dead-letter filters */
  const char *stage, *cls, *submission;
  const char *since_arg, *until_arg; /* as given, for the audit record */
  int has_since, has_until;
  int64_t since_ms, until_ms; /* on last_failure_ms, inclusive */
  long limit;                 /* 0: no limit */
  /* output */
  int json, all;
  int tenants; /* status --tenants */
  /* replay */
  double rate; /* messages per second */
  int dry_run, yes;
  const char *actor;
  /* topics ensure */
  int partitions, replication; /* -1: broker default */
  const char *configs[SC_MAX_CONFIGS];
  size_t nconfigs;
  /* dlq inject (test/support tool) */
  const char *key, *replay_topic, *payload_file, *message, *origin_topic;
  long attempts, count;
  int has_failed_at;
  int64_t failed_at_ms;
  /* status */
  char admins[SC_MAX_ADMINS][128]; /* --admin / SLUICECTL_ADMIN host:port */
  int nadmins;
  const char *redis_url; /* --redis, SLUICE_REDIS_URL */
  int watch, interval_s;
  /* submit */
  const char *presign_url; /* --presign, PRESIGN_URL */
  const char *prompts[SC_MAX_FILES];
  int nprompts;
  int wait_s;
  int64_t mp_threshold; /* --multipart-threshold: files this large go multipart (16 MiB) */
  int64_t part_size;    /* --part-size (8 MiB; 5 MiB .. 5 GiB) */
  const char *api_key;  /* --api-key, SLUICE_API_KEY */
  /* apikey */
  const char *user, *label;
  /* tenant set: as given, NULL when absent */
  const char *weight, *answers_per_day, *cost_per_day;
  /* positional arguments after the command words */
  char **args;
  int nargs;
} sc_opts;

/* ---- util.c ---- */
double sc_mono_s(void);
/* RFC3339 (2026-11-29T12:00:00Z, fractions and +hh:mm offsets accepted) or a
 * duration ago (90s, 15m, 2h, 3d; also ms and w). 0 on success. */
int sc_parse_time(const char *s, int64_t now_ms, int64_t *out_ms);
/* strictly positive decimal integer not above max; 0 on success */
int sc_parse_long(const char *s, long min, long max, long *out);
void sc_fmt_time(int64_t ms, char out[40]);    /* 2026-11-29T12:00:00.123Z */
void sc_fmt_time_s(int64_t ms, char out[40]);  /* 2026-11-29T12:00:00Z */
char *sc_base64(const void *data, size_t len); /* malloc'd, NUL-terminated */
int sc_utf8_valid(const void *data, size_t len);
/* prints data with non-printable bytes as \xNN, at most max bytes (then ...) */
void sc_fput_escaped(FILE *f, const void *data, size_t len, size_t max);
/* the same into out (NUL-terminated, truncated with ...) */
void sc_escape(char *out, size_t n, const void *data, size_t len);
/* JSON string when valid UTF-8, else null */
json_t *sc_json_text(const void *data, size_t len);
/* every set field of a protobuf-c message, by field name */
json_t *sc_pb_to_json(const ProtobufCMessage *m);

typedef struct {
  int tty;
  size_t total;
  int last_decile;
  size_t last_done;
  double start, last_draw;
  int drawn;
} sc_progress;
void sc_progress_init(sc_progress *p, size_t total);
void sc_progress_update(sc_progress *p, size_t done);
void sc_progress_end(sc_progress *p);

typedef struct {
  double rate, burst, tokens, last;
} sc_bucket;
void sc_bucket_init(sc_bucket *b, double rate);
/* takes a token if one is there (returns 0), else returns the milliseconds
 * until the next one (>= 1) */
int sc_bucket_take(sc_bucket *b);

/* ---- kafka.c ---- */
/* base client configuration (brokers, quiet logs, last error captured) */
rd_kafka_conf_t *sc_conf_new(const sc_opts *o);
int sc_conf_set(rd_kafka_conf_t *c, const char *k, const char *v);
const char *sc_last_kafka_error(void);
void sc_report_kafka_error(const sc_opts *o, const char *what, rd_kafka_resp_err_t e);
/* The same for a failure already put in words (an sl_kafka_* err). */
void sc_report_kafka_reason(const sc_opts *o, const char *reason);

/* one message of a topic; return non-zero to stop reading */
typedef int (*sc_msg_cb)(void *arg, int32_t partition, int64_t offset, const void *payload,
                         size_t len);
#define SC_SCAN_NOT_FOUND 3
/* Reads topic from the low to the high watermark of every partition (or only
 * partition `only_partition` from offset `at`, one message, when
 * only_partition >= 0). No consumer group is joined and nothing committed.
 * Returns 0, SC_EXIT_FAIL (message printed) or SC_SCAN_NOT_FOUND. */
int sc_scan_topic(const sc_opts *o, const char *topic, int32_t only_partition, int64_t at,
                  sc_msg_cb cb, void *arg);

/* the same over whole messages (key, timestamp, headers): every partition,
 * low to high watermark */
typedef int (*sc_kmsg_cb)(void *arg, const rd_kafka_message_t *m);
int sc_scan_topic_msgs(const sc_opts *o, const char *topic, sc_kmsg_cb cb, void *arg);

typedef struct {
  rd_kafka_resp_err_t err;
  int done;
  int32_t partition;
  int64_t offset;
} sc_delivery;

typedef struct {
  rd_kafka_t *rk;
  size_t produced, delivered, failed;
} sc_producer;
/* idempotent producer (acks=all), message.timeout.ms = o->timeout_ms */
int sc_producer_open(const sc_opts *o, sc_producer *p);
/* produces one message (copied); d receives the delivery report. hdr_name may
 * be NULL. 0 on success, else the error is in d->err. */
int sc_produce(sc_producer *p, const char *topic, const void *key, size_t klen, const void *val,
               size_t vlen, const char *hdr_name, const char *hdr_val, sc_delivery *d);
#define SC_HEADERS_MAX 4
/* the same with up to SC_HEADERS_MAX headers: names and values in turn,
 * a NULL name ends them early and a NULL value leaves its header out */
int sc_produce_headers(sc_producer *p, const char *topic, const void *key, size_t klen,
                       const void *val, size_t vlen, const char *const hdrs[2 * SC_HEADERS_MAX],
                       sc_delivery *d);
/* serves delivery reports until every produced message has one, or the
 * deadline passes; returns the number still pending */
size_t sc_producer_wait(sc_producer *p, int timeout_ms, sc_progress *prog);
void sc_producer_close(sc_producer *p);
/* does topic exist? 1 yes, 0 no, -1 error (printed) */
int sc_topic_exists(const sc_opts *o, rd_kafka_t *rk, const char *topic, int *partitions);

/* ---- dlq.c ---- */
typedef struct {
  int32_t partition;
  int64_t offset;
  Sluice__V1__DeadLetter *d;
} sc_dead_letter;

typedef struct {
  sc_dead_letter *v;
  size_t n, cap;
  size_t total, undecodable;
} sc_dl_set;
int sc_dl_matches(const sc_opts *o, const Sluice__V1__DeadLetter *d);
/* reads the DLQ and keeps the matching dead letters, oldest last failure
 * first, at most o->limit. 0 or SC_EXIT_FAIL. */
int sc_dl_collect(const sc_opts *o, sc_dl_set *s);
void sc_dl_free(sc_dl_set *s);
/* filters as text for the audit record */
void sc_filters_text(const sc_opts *o, char *out, size_t n);

int sc_dlq_list(const sc_opts *o);
int sc_dlq_show(const sc_opts *o);
int sc_dlq_audit(const sc_opts *o);
int sc_dlq_inject(const sc_opts *o);

/* ---- replay.c ---- */
int sc_dlq_replay(const sc_opts *o);

/* ---- topics.c ---- */
int sc_topics_ensure(const sc_opts *o);
int sc_topics_list(const sc_opts *o);

/* ---- sluicectl.c / util.c ---- */
/* adds comma-separated host:port (or http://host:port) endpoints; -1 when
 * the list is full */
int sc_add_admins(sc_opts *o, const char *list);

/* ---- http.c ---- */
typedef struct {
  long status; /* HTTP status, 0 when no answer */
  char *body;  /* malloc'd, NUL-terminated */
  size_t len;
  char etag[128];
  long retry_after_s; /* -1 when absent */
  char error[256];    /* transport error, when status is 0 */
} sc_http_reply;
void sc_http_reply_free(sc_http_reply *r);
/* GET url with optional extra headers (NULL-terminated); body bounded to
 * 8 MiB. Returns 0 when an HTTP answer came (any status). */
int sc_http_get(const char *url, const char *const *headers, long timeout_ms, sc_http_reply *r);
int sc_http_post_json(const char *url, const char *body, long timeout_ms, sc_http_reply *r);
/* PUTs a file with the given headers, drawing a progress bar on stderr */
int sc_http_put_file(const char *url, const char *path, const char *const *headers, long timeout_ms,
                     sc_http_reply *r);
/* Any method with extra headers (NULL-terminated) and an optional JSON body
 * (Content-Type: application/json is added). 0 when an HTTP answer came. */
int sc_http_send(const char *method, const char *url, const char *const *headers, const char *body,
                 long timeout_ms, sc_http_reply *r);
/* PUTs bytes [off, off+len) of f (streamed, not buffered), updating bar (when
 * not NULL) with base + bytes sent; the answer's ETag lands in r->etag. */
int sc_http_put_range(const char *url, FILE *f, int64_t off, int64_t len, sc_progress *bar,
                      size_t base, long timeout_ms, sc_http_reply *r);

/* one sample of a Prometheus text exposition */
typedef struct {
  char name[128];
  char labels[384]; /* raw label text without braces */
  double value;
} sc_sample;
typedef struct {
  sc_sample *v;
  size_t n, cap;
} sc_samples;
/* parses text format 0.0.4 (comments skipped); 0 or -1 on a malformed line */
int sc_metrics_parse(const char *text, sc_samples *out);
void sc_samples_free(sc_samples *s);
/* value of label `name` in raw label text into out; 0 if found */
int sc_label(const char *labels, const char *name, char *out, size_t n);

/* Redis: a connection from redis[s]://[user:password@]host:port[/db] with
 * the AUTH/TLS settings of the environment (sl_redis: SLUICE_REDIS_PASSWORD,
 * SLUICE_REDIS_TLS_CA_FILE, ...); connects and PINGs now. NULL with a
 * message printed (the URL's password redacted) on failure. */
struct sl_redis;
struct sl_redis *sc_redis_connect(const char *url);
/* One command of NUL-terminated arguments (at most 8) on c; NULL on a
 * connection error. Free the reply with freeReplyObject(). */
struct redisReply *sc_redis(struct sl_redis *c, int argc, ...);
/* url with its password replaced by *** (for messages) */
const char *sc_redis_shown(const char *url);
/* CURLOPT_CAINFO for URLs on the S3 endpoint (SLUICE_S3_ENDPOINT) when
 * SLUICE_S3_CA_FILE is set */
void sc_http_trust(void *curl, const char *url);

/* ---- status.c / submission.c / submit.c ---- */
int sc_status(const sc_opts *o);
int sc_submission(const sc_opts *o);
/* keys.c */
int sc_keys(const sc_opts *o);
int sc_submit(const sc_opts *o);
int sc_apikey_add(const sc_opts *o);
int sc_apikey_list(const sc_opts *o);
int sc_apikey_revoke(const sc_opts *o);
int sc_apikey_rotate_secret(const sc_opts *o);
/* tenant.c */
int sc_tenant_set(const sc_opts *o);
int sc_tenant_show(const sc_opts *o);

/* ---- multipart.c ---- */
#define SC_MIN_PART_SIZE ((int64_t)5 << 20) /* S3: every part but the last */
#define SC_MAX_PART_SIZE ((int64_t)5 << 30)
#define SC_MAX_PARTS 10000
typedef struct {
  const char *presign_url; /* the public API base */
  const char *token;       /* the submission's results token */
  const char *sid;         /* submission id */
  int qno;                 /* question number */
  const char *key;         /* the question's object key (from the 201) */
  const char *path;        /* the file */
  int64_t size, part_size;
} sc_mpu_job;
/* Uploads j->path through presign's /s3/multipart endpoints: create, sign
 * parts in batches, PUT each (transient failures retried with backoff, an
 * expired URL signed again), list, upload what storage lacks, complete
 * (again after a 409 size_mismatch). Progress on stderr. 0 when the object
 * is complete; -1 after printing why on stderr (the upload is then aborted
 * when it was created). */
int sc_multipart_upload(const sc_mpu_job *j);

/* ---- shared helpers of the commands ---- */
/* the operator named in audit records: --actor, $SUDO_USER, $USER, the uid's name */
void sc_resolve_actor(const sc_opts *o, char *out, size_t n);
/* 1 when s is a canonical UUID (a submission id) */
int sc_is_uuid(const char *s);

/* ---- erase.c ---- */
int sc_submission_delete(const sc_opts *o);
int sc_erasures(const sc_opts *o);

#endif
