/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ingest.c — `sluice ingest`: storage upload events -> transcription requests.
 *
 * Input: the S3 event JSON the storage publishes on storage-events (AWS
 * format: {"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":
 * {"name":…},"object":{"key":…,"size":…,"eTag":…}}}]}). Versity Gateway also
 * writes one {"Event":"s3:TestEvent"} at start-up: skipped.
 *
 * For each ObjectCreated record the object key must look like
 * "submissions/<uuid>/q<NN>.<ext>" and name a question of a submission that
 * materialize has recorded in Redis; then an UploadCompleted goes to
 * stt.requests and a QUEUED status to results, both keyed "<sid>/<no>".
 * Materialize may lag presign by a moment, so an unknown submission is
 * looked up again in place every RECHECK_MS for ingest.submission_recheck_s
 * after the upload (sl_result.again_in_ms: no retry copy, no tier's 5 s), then
 * retried until ingest.submission_wait_s after ingest's first failure
 * (however late the event came), then dead-lettered; while materialize rebuilds a lost view (its
 * marker SL__VIEW_MARKER is missing) it is retried as view_rebuilding, without limit but the time
 * budget. Anything unparseable is dead-lettered at once with the reason. An event of several
 * records is first split into single-record events (fan_out), so each record succeeds, retries or
 * fails on its own.
 *
 * An event is a claim, not proof (it may come through the webhook, or be
 * forged by anyone who can write to the topic), so before anything is
 * queued it is checked against what presign signed for the question:
 *   - the bucket must be s3.bucket                        (else wrong_bucket)
 *   - a size in the event must equal the declared size    (else size_mismatch)
 *   - the object is HEADed (SigV4-signed, blocking: process() runs on the
 *     worker pool, one storage connection per thread, kept open) and must
 *     exist                                               (else object_missing)
 *     with the declared Content-Length                    (else size_mismatch)
 *     and Content-Type (media type, case-insensitive)     (else type_mismatch);
 *     storage unreachable or 5xx is a RETRY.
 * ingest.verify_object = always HEADs every object; when_needed only when
 * the event has no size (Versity Gateway sends 0 for CompleteMultipartUpload),
 * trusting the event's size otherwise and not checking the type.
 *
 * Storage events are at most once (a gateway drops one Kafka does not take
 * at once), so a sweep thread (sweep.c) looks in storage for questions still
 * awaiting their upload and writes the missing events; the first event of an
 * upload to reach ingest fixes its upload time (first_upload_time), so the
 * sweep's event and a late real one give the same UploadCompleted.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* timegm */
#include "lib/objects.h"
#include "lib/process.h"
#include "lib/stage.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_trace.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_tls.h"
#include "lib/s3event.h"
#include "sweep.h"

/* how often an upload whose submission is not recorded yet is looked up
 * again in place, during ingest.submission_recheck_s */
#define RECHECK_MS 100

typedef struct {
  double submission_wait_s;
  double submission_recheck_s;
  char *verify_object;
  sl__sweep_conf sweep;
} ingest_conf;

static const sl_conf_entry ingest_table[] = {
    {"ingest.submission_wait_s", SL_CONF_DOUBLE, "300", offsetof(ingest_conf, submission_wait_s),
     "how long an upload may wait for its submission to appear before it is dead-lettered "
     "(from its first failure; not counted while materialize rebuilds the view). A broker "
     "stopped for a minute held materialize's submissions for over 70 s (test_kafka_nodes): "
     "60 s, the earlier default, failed real answers",
     0},
    {"ingest.submission_recheck_s", SL_CONF_DOUBLE, "5",
     offsetof(ingest_conf, submission_recheck_s),
     "for this long after an upload, a submission not recorded yet (materialize records it a "
     "moment after presign accepts it) is looked up again every 100 ms in place, its offset "
     "uncommitted, before the retry tiers take the upload (whose first wait is 5 s); 0: "
     "straight to the retry tiers",
     0},
    {"ingest.verify_object", SL_CONF_STR, "always", offsetof(ingest_conf, verify_object),
     "always: HEAD every uploaded object and compare its size and type with what was "
     "declared; when_needed: only when the event carries no size",
     0},
    {"ingest.sweep_interval_s", SL_CONF_INT, "30", offsetof(ingest_conf, sweep.interval_s),
     "how often questions still awaiting their upload are looked for in storage (an "
     "upload whose storage event was lost); 0 turns the sweep off",
     0},
    {"ingest.sweep_grace_s", SL_CONF_INT, "60", offsetof(ingest_conf, sweep.grace_s),
     "how long after an object was stored its own event is waited for before the sweep "
     "writes one",
     0},
    {"ingest.sweep_max_age_s", SL_CONF_INT, "86400", offsetof(ingest_conf, sweep.max_age_s),
     "how long after acceptance a question's upload is looked for", 0},
    {"ingest.sweep_batch", SL_CONF_INT, "500", offsetof(ingest_conf, sweep.batch),
     "questions looked at per sweep round", 0},
};
static const size_t ingest_table_len = sizeof ingest_table / sizeof ingest_table[0];

typedef struct {
  sl_common_conf *cc;
  ingest_conf *ic;
  sl_s3_conf *s3;
  sl__objects objects;        /* storage: one kept-open connection per worker thread */
  int head_always;            /* ingest.verify_object = always */
  sl_tls *redis;              /* one sl_redis per worker thread */
  sl_redis_script first_time; /* first_time_lua, by its SHA-1 */
} ingest;

/* The media type of a Content-Type (before ';', blanks trimmed) equals
 * the declared one, ignoring case. */
static int same_type(const char *stored, const char *declared) {
  while (*stored == ' ') stored++;
  size_t n = strcspn(stored, ";");
  while (n > 0 && stored[n - 1] == ' ') n--;
  return strlen(declared) == n && strncasecmp(stored, declared, n) == 0;
}

/* Checks the object behind rec against the declared size and type. Returns
 * 1 when it may be queued (*etag may be set from the HEAD), 0 when res says
 * why not. */
static int verify_object(ingest *in, const sl__s3rec *rec, int64_t declared, const char *ctype,
                         sl_s3_head_info *head, sl_result *res) {
  if (rec->size > 0 && rec->size != declared) {
    sl_result_set(res, SL_OUTCOME_FAIL, "size_mismatch",
                  "event for %s says %lld bytes, the question declared %lld", rec->key,
                  (long long)rec->size, (long long)declared);
    return 0;
  }
  if (!in->head_always && rec->size > 0) return 1;
  char err[512];
  long status = 0;
  sl_s3_conn *conn = sl_tls_get(in->objects.conns, err, sizeof err);
  int64_t t0 = sl_trace_now_ns();
  int rc = conn ? sl_s3_head(conn, &in->objects.target, rec->key, head, &status, err, sizeof err)
                : SL_ESTORAGE;
  sl_result_step(res, "storage HEAD", t0, (int)status);
  if (rc == SL_ENOTFOUND) {
    sl_result_set(res, SL_OUTCOME_FAIL, "object_missing",
                  "object %s does not exist in bucket %s (HEAD: 404)", rec->key, rec->bucket);
    return 0;
  }
  if (rc) {
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", err);
    return 0;
  }
  if (head->size != declared) {
    sl_result_set(res, SL_OUTCOME_FAIL, "size_mismatch",
                  "stored object %s has %lld bytes, the question declared %lld", rec->key,
                  (long long)head->size, (long long)declared);
    return 0;
  }
  if (!same_type(head->content_type, ctype)) {
    sl_result_set(res, SL_OUTCOME_FAIL, "type_mismatch",
                  "stored object %s has Content-Type \"%.100s\", the question declared \"%.100s\"",
                  rec->key, head->content_type, ctype);
    return 0;
  }
  return 1;
}

/* KEYS[1] the submission's hash; ARGV: field, time. The first time
 * recorded for the field wins; returns it. A hash that expired meanwhile is
 * not recreated (it would have no TTL): the time given is returned. */
static const char first_time_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return ARGV[2] end\n"
    "redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])\n"
    "return redis.call('HGET', KEYS[1], ARGV[1])\n";

/* *ms: in, this event's upload time; out, the first one recorded for this
 * upload (question and ETag). 0, or SL_EREDIS with err set. */
static int first_upload_time(const ingest *in, sl_redis *redis, const char *hkey, unsigned qno,
                             const char *etag, int64_t *ms, char *err, size_t errlen) {
  char field[128], val[32];
  sl__upload_field(qno, etag, field, sizeof field);
  snprintf(val, sizeof val, "%lld", (long long)*ms);
  const char *argv[] = {hkey, field, val};
  redisReply *rep = sl_redis_eval(redis, &in->first_time, 1, 3, argv, NULL, err, errlen);
  if (!rep) return SL_EREDIS;
  int rc = 0;
  if (rep->type == REDIS_REPLY_STRING)
    *ms = strtoll(rep->str, NULL, 10);
  else {
    snprintf(err, errlen, "redis: %s",
             rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
    rc = SL_EREDIS;
  }
  freeReplyObject(rep);
  return rc;
}

/* A record's eventTime ("2026-12-01T08:58:52Z", optional fraction) in ms
 * since the epoch, or -1. */
static int64_t event_time_ms(json_t *r) {
  const char *t = json_string_value(json_object_get(r, "eventTime"));
  struct tm tm;
  int ms = 0, n = 0;
  memset(&tm, 0, sizeof tm);
  if (!t || sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
    return -1;
  if (t[n] == '.') {
    int digits = 0;
    for (const char *c = t + n + 1; *c >= '0' && *c <= '9'; c++)
      if (digits++ < 3) ms = ms * 10 + (*c - '0');
    while (digits > 0 && digits < 3) ms *= 10, digits++;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t secs = timegm(&tm);
  return secs < 0 ? -1 : (int64_t)secs * 1000 + ms;
}

/* An event of several records (some storages batch them) becomes one event
 * per record on the same topic, keyed by its question, and each is checked,
 * retried or dead-lettered on its own: one bad record must not dead-letter
 * the uploads beside it, nor a transient one hold them back. */
static void fan_out(ingest *in, json_t *recs, sl_outbox *out, sl_result *res) {
  if (json_array_size(recs) > SL_OUTBOX_MAX) {
    sl_result_set(res, SL_OUTCOME_FAIL, "too_many_records",
                  "event of %zu records; at most %d are split into single events",
                  json_array_size(recs), SL_OUTBOX_MAX);
    return;
  }
  size_t i;
  json_t *r;
  json_array_foreach(recs, i, r) {
    sl__s3rec rec;
    char why[256], key[128];
    if (sl__s3event_record(r, &rec, why, sizeof why) == 0 && rec.ours)
      snprintf(key, sizeof key, "%s/%u", rec.sid, rec.qno);
    else
      snprintf(key, sizeof key, "record/%zu", i); /* its own run dead-letters it */
    json_t *one = json_pack("{s:[O]}", "Records", r);
    char *body = one ? json_dumps(one, JSON_COMPACT) : NULL;
    json_decref(one);
    int rc = body ? sl_outbox_add(out, in->cc->topic_storage_events, key, body, strlen(body))
                  : SL_ENOMEM;
    free(body);
    if (rc) { /* nothing of the split is produced: the whole event again */
      sl_outbox_clear(out);
      sl_result_set(res, SL_OUTCOME_RETRY, "internal", "splitting an event: %s", sl_strerror(rc));
      return;
    }
  }
  sl_log(SL_LOG_INFO, NULL, "event of %zu records split into single-record events",
         json_array_size(recs));
}

/* Whether the created object rec is an answer to ingest: 1; else 0, with
 * res set when the event is wrong (a derived object or a deletion is just
 * skipped). */
static int in_scope(const ingest *in, const sl__s3rec *rec, sl_result *res) {
  if (!rec->created) {
    sl_log(SL_LOG_DEBUG, NULL, "ignoring %s on %s", rec->event_name, rec->raw_key);
    return 0;
  }
  if (sl_s3_is_derived(rec->key) && (strcmp(rec->bucket, sl_s3_derived_bucket(in->s3)) == 0 ||
                                     strcmp(rec->bucket, in->s3->bucket) == 0)) {
    /* what a step stored beside an answer (preflight's FLAC): ours,
     * and nothing to ingest; in s3.derived_bucket when a storage
     * notifies for every bucket, in the answers' while replicas from
     * before s3.derived_bucket was set still store there */
    sl_log(SL_LOG_DEBUG, NULL, "ignoring %s on %s: a derived object", rec->event_name,
           rec->raw_key);
    return 0;
  }
  if (strcmp(rec->bucket, in->s3->bucket) != 0) {
    if (rec->ours) snprintf(res->subject, sizeof res->subject, "%s/%u", rec->sid, rec->qno);
    sl_result_set(res, SL_OUTCOME_FAIL, "wrong_bucket",
                  "event for %.200s names bucket \"%.100s\", answers live in \"%.100s\"",
                  rec->raw_key, rec->bucket, in->s3->bucket);
    return 0;
  }
  if (!rec->ours) {
    sl_result_set(res, SL_OUTCOME_FAIL, "unknown_object",
                  "object key \"%.200s\" matches no submission (expected "
                  "submissions/<uuid>/q<N>.<ext>)",
                  rec->raw_key);
    return 0;
  }
  return 1;
}

/* The submission rec names is not in the view: wait while the view is
 * rebuilt or the submission may still be recorded, else fail. */
static void submission_missing(const ingest *in, sl_redis *redis, const rd_kafka_message_t *m,
                               const sl__s3rec *rec, sl_result *res) {
  char rerr[256] = "";
  if (sl__view_marker(redis, sl_rkey_bucket(rec->sid, strlen(rec->sid)), rerr, sizeof rerr) != 1) {
    /* materialize is replaying the topics into an emptied Redis: the
     * submission may well exist; wait for the view, however long */
    sl_result_set(res, SL_OUTCOME_RETRY, "view_rebuilding",
                  "submission %s not in the view: the view is being rebuilt%s%s", rec->sid,
                  rerr[0] ? ": " : "", rerr);
    return;
  }
  /* The wait is measured from ingest's first failure, which a retry copy
   * carries: never from the event's timestamp, which is the upload's and
   * may be long past when the event arrives (a broker that held the
   * gateway's event and materialize's submissions for a minute; ingest's
   * sweep writing an event the gateway lost), so that such an event would
   * be dead-lettered at its first look (test_late_event). Before the first
   * retry copy, a fresh upload is looked up again in place. */
  int64_t now = sl_now_ms(), first = sl_message_first_failure_ms(m);
  if (first <= 0) {
    int64_t ts_ms = rd_kafka_message_timestamp(m, NULL);
    double since_upload = ts_ms > 0 ? (double)(now - ts_ms) / 1000.0 : 1e9;
    sl_result_set(res, SL_OUTCOME_RETRY, "unknown_submission",
                  "submission %s not recorded yet (%.1f s after upload)", rec->sid, since_upload);
    if (since_upload < in->ic->submission_recheck_s) res->again_in_ms = RECHECK_MS;
    return;
  }
  double age = (double)(now - first) / 1000.0;
  if (age < in->ic->submission_wait_s)
    sl_result_set(res, SL_OUTCOME_RETRY, "unknown_submission",
                  "submission %s not recorded yet (%.1f s after the first look)", rec->sid, age);
  else
    sl_result_set(res, SL_OUTCOME_FAIL, "unknown_submission",
                  "object %s names submission %s, which does not exist", rec->key, rec->sid);
}

/* The question's spec as materialize recorded it in the submission's hash
 * hkey (owned by the caller), and the submission's acceptance time; NULL
 * with res set when there is none (yet) or it is not this upload's. */
static json_t *question_spec(ingest *in, sl_redis *redis, const rd_kafka_message_t *m,
                             const sl__s3rec *rec, const char *hkey, int64_t *accepted,
                             sl_result *res) {
  char field[32], rerr[256];
  snprintf(field, sizeof field, "spec%u", rec->qno);
  const char *argv[] = {"HMGET", hkey, "accepted_at_ms", field};
  redisReply *rep = redis ? sl_redis_argv(redis, 4, argv, NULL, rerr, sizeof rerr) : NULL;
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", rep ? "unexpected reply" : rerr);
    if (rep) freeReplyObject(rep);
    return NULL;
  }
  if (rep->element[0]->type != REDIS_REPLY_STRING) {
    freeReplyObject(rep);
    submission_missing(in, redis, m, rec, res);
    return NULL;
  }
  if (rep->element[1]->type != REDIS_REPLY_STRING) {
    freeReplyObject(rep);
    sl_result_set(res, SL_OUTCOME_FAIL, "unknown_question",
                  "object %s: submission %s has no question %u", rec->key, rec->sid, rec->qno);
    return NULL;
  }
  *accepted = strtoll(rep->element[0]->str, NULL, 10);
  json_t *spec = json_loads(rep->element[1]->str, 0, NULL);
  freeReplyObject(rep);
  const char *spec_key = json_string_value(json_object_get(spec, "key"));
  if (!spec_key || strcmp(spec_key, rec->key) != 0) {
    sl_result_set(res, SL_OUTCOME_FAIL, "unknown_object",
                  "object %s is not the upload key issued for question %u", rec->key, rec->qno);
    json_decref(spec);
    return NULL;
  }
  return spec;
}

/* The verified upload for stt, and its QUEUED status, into out; up is
 * filled but for its times and etag. 0, or the outbox's error. */
static int queue_upload(const ingest *in, const char *rkey, Sluice__V1__UploadCompleted *up,
                        sl_outbox *out) {
  int rc = sl_outbox_add_pb(out, in->cc->topic_stt_requests, rkey, &up->base);
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = up->submission_id;
  st.question_no = up->question_no;
  st.state = SLUICE__V1__QUESTION_STATE__QUEUED;
  st.at_ms = up->uploaded_at_ms;
  st.stage = "ingest";
  st.accepted_at_ms = up->accepted_at_ms;
  const char *label = sl_pipeline_progress_of(in->cc->pipeline, "ingest");
  st.progress = (char *)(label ? label : "");
  if (rc == 0) rc = sl_outbox_add_pb(out, in->cc->topic_results, rkey, &st.base);
  return rc;
}

/* The storage event's own time (the record's eventTime, else the
 * message's Kafka timestamp), not the clock of whichever replica reads
 * it: reading the event again (a rebalance, a lost assignment, a
 * replay, a split copy) gives byte-identical outputs, so stt's
 * idempotency store and claim recognise the input and pay nothing.
 * Two different events of one upload (the storage's, late, and the
 * one the sweep wrote for it) agree through the submission's hash: the
 * first to get here records its time under u<no>:<etag>, the other
 * takes it. 0, or -1 with res set. */
static int upload_time(ingest *in, sl_redis *redis, const rd_kafka_message_t *m, json_t *r,
                       const char *hkey, unsigned qno, const char *etag, int64_t *ev_ms,
                       sl_result *res) {
  char rerr[256];
  *ev_ms = event_time_ms(r);
  if (*ev_ms <= 0) *ev_ms = rd_kafka_message_timestamp(m, NULL);
  if (*ev_ms <= 0) *ev_ms = sl_now_ms();
  if (first_upload_time(in, redis, hkey, qno, etag, ev_ms, rerr, sizeof rerr) != 0) {
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", rerr);
    return -1;
  }
  return 0;
}

/* One record of an event: checked against the submission and the stored
 * object, then queued for stt. */
static void ingest_record(ingest *in, const rd_kafka_message_t *m, json_t *r, size_t i,
                          sl_outbox *out, sl_result *res) {
  char why[512];
  sl__s3rec rec;
  if (sl__s3event_record(r, &rec, why, sizeof why) != 0) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_event", "record %zu: %s", i, why);
    return;
  }
  if (!in_scope(in, &rec, res)) return;
  char rkey[128], hkey[96], rerr[256];
  snprintf(rkey, sizeof rkey, "%s/%u", rec.sid, rec.qno);
  snprintf(res->subject, sizeof res->subject, "%s", rkey);
  sl__view_sub_key(hkey, sizeof hkey, rec.sid);
  sl_redis *redis = sl_tls_get(in->redis, rerr, sizeof rerr);
  if (!redis) {
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", rerr);
    return;
  }
  int64_t accepted = 0;
  json_t *spec = question_spec(in, redis, m, &rec, hkey, &accepted, res);
  if (!spec) return;
  const char *tp = json_string_value(json_object_get(spec, "tp"));
  sl_trace_ctx qtc;
  if (tp && sl_trace_parse(tp, strlen(tp), &qtc) == 0) {
    /* the event came without one: its span, and from here its log lines,
     * join the question's trace */
    sl_trace_format(&qtc, res->traceparent);
    char id[33];
    sl_trace_id_hex(&qtc, id);
    sl_log_trace(id, NULL);
  }
  const char *tn = json_string_value(json_object_get(spec, "tn"));
  if (tn) /* the event came without one: what ingest writes counts against it */
    snprintf(res->tenant, sizeof res->tenant, "%s", tn);
  json_int_t declared = json_integer_value(json_object_get(spec, "size"));
  const char *ct = json_string_value(json_object_get(spec, "content_type"));
  const char *prompt = json_string_value(json_object_get(spec, "prompt"));
  sl_s3_head_info head = {.size = -1};
  char etag[80];
  int64_t ev_ms = 0;
  int ok = verify_object(in, &rec, declared, ct ? ct : "", &head, res);
  if (ok) {
    sl__etag_bare(rec.etag ? rec.etag : head.etag, etag, sizeof etag);
    ok = upload_time(in, redis, m, r, hkey, rec.qno, etag, &ev_ms, res) == 0;
  }
  if (!ok) {
    json_decref(spec);
    return;
  }
  Sluice__V1__UploadCompleted up = SLUICE__V1__UPLOAD_COMPLETED__INIT;
  up.submission_id = rec.sid;
  up.question_no = rec.qno;
  up.bucket = (char *)rec.bucket;
  up.object_key = rec.key;
  /* verified: the event's size, the stored object's (HEAD) or both equal
   * the declared size (a CompleteMultipartUpload event may say 0) */
  up.size = declared > 0 ? (uint64_t)declared : 0;
  up.etag = etag;
  up.content_type = (char *)(ct ? ct : "");
  up.prompt = (char *)(prompt ? prompt : "");
  up.accepted_at_ms = accepted;
  up.uploaded_at_ms = ev_ms;
  int rc = queue_upload(in, rkey, &up, out);
  json_decref(spec);
  if (rc) {
    sl_result_set(res, SL_OUTCOME_FAIL, "too_many_records", "event: %s", sl_strerror(rc));
    return;
  }
  sl_log(SL_LOG_INFO, rkey, "upload of %s complete (%llu bytes%s), queued for stt", rec.key,
         (unsigned long long)up.size, head.size >= 0 ? ", checked in storage" : "");
}

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  ingest *in = ud;
  char why[512];
  json_t *root, *recs;
  if (sl__s3event_load(m->payload, m->len, &root, &recs, why, sizeof why) != 0) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_event", "%s", why);
    return;
  }
  if (!recs)
    sl_log(SL_LOG_DEBUG, NULL, "skipping s3:TestEvent");
  else if (json_array_size(recs) > 1)
    fan_out(in, recs, out, res);
  else if (json_array_size(recs) == 1)
    ingest_record(in, m, json_array_get(recs, 0), 0, out, res);
  json_decref(root);
}

extern const sl__stage_desc sl__ingest_stage; /* its descriptor, at the end */

static int ingest_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  ingest_conf ic = {0};
  sl_s3_conf s3 = {0};
  sl_conf_bind own[] = {{ingest_table, ingest_table_len, &ic},
                        {sl_s3_conf_table, sl_s3_conf_table_len, &s3}};
  sl_admin *admin = NULL;
  int rc =
      sl__stage_start(&sl__ingest_stage, sl__ingest_stage.name, argc, argv, &cc, own, 2, &admin);
  if (rc) return rc;
  ingest in = {.cc = &cc, .ic = &ic, .s3 = &s3};
  sl_redis_script_init(&in.first_time, first_time_lua);
  in.head_always = strcmp(ic.verify_object, "always") == 0;
  if (!in.head_always && strcmp(ic.verify_object, "when_needed") != 0) {
    sl_log(SL_LOG_ERROR, NULL, "ingest.verify_object must be always or when_needed, not \"%s\"",
           ic.verify_object);
    rc = SL_ECONFIG;
  }
  if (rc == 0) {
    char err[512] = "";
    rc = sl__objects_init(&in.objects, &s3, 0, 0, 1, err, sizeof err);
    if (rc) sl_log(SL_LOG_ERROR, NULL, "%s", err[0] ? err : sl_strerror(rc));
  }
  if (rc == 0) rc = sl_redis_tls_new(&in.redis, cc.redis_url);
  sl__sweep *sweep = NULL;
  if (rc == 0) {
    char err[512] = "";
    rc = sl__sweep_start(&sweep, &ic.sweep, &cc, &s3, &in.objects.target, err, sizeof err);
    if (rc) sl_log(SL_LOG_ERROR, NULL, "sweep: %s", err[0] ? err : sl_strerror(rc));
  }
  if (rc == 0) {
    const char *topics[] = {cc.topic_storage_events};
    sl_stage_opts o = {.stage = "ingest",
                       .common = &cc,
                       .topics = topics,
                       .ntopics = 1,
                       .process = process,
                       .ud = &in,
                       .admin = admin,
                       .on_dead_letter = sl__dead_letter_status,
                       /* a run is a HEAD and two Redis round trips, nearly
                        * all waiting: in scenario B (10x) four workers a
                        * replica moved 22 events/s with 1,100 in hand */
                       .default_workers = 32};
    rc = sl_stage_run(&o, &sl__stop);
  }
  sl__sweep_stop(sweep);
  sl_tls_free(in.redis);
  sl__objects_free(&in.objects);
  sl__stage_finish(&cc, own, 2, admin);
  return rc ? 1 : 0;
}

const sl__stage_desc sl__ingest_stage = {
    .name = "ingest",
    .summary = "turns storage upload events into transcription requests",
    .kind = {"ingest", {SL__MSG_S3EVENT, NULL}, {SL__MSG_UPLOAD, SL__MSG_STATUS, NULL}, 0, 1, 0},
    .table = ingest_table,
    .table_len = &ingest_table_len,
    .admin = "127.0.0.1:9181",
    .main = ingest_main};
