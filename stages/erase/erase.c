/* SPDX-License-Identifier: Apache-2.0 */
/*
 * erase.c — `sluice erase`: carries out erasures (docs/privacy.md).
 *
 * Input: ErasureRequest on the erasure requests topic, keyed by the
 * submission id, written by results for an owner's DELETE
 * /v1/submissions/{id} and by the retention sweeper (retention.h). Each is
 * carried out by lib/erase.h (blocking, on the worker pool: one Redis and
 * one storage connection per worker thread; its tombstone and audit record
 * through one producer, each waited for): its data key destroyed, its
 * objects and Redis keys deleted, the erasure recorded on the audit topic
 * and its state record set to "erased". Every step may run again, so a
 * request retried (storage, Redis or Kafka unreachable: the retry tiers)
 * or read twice after a rebalance finishes the same erasure; one that is
 * not a request, or names no submission, is dead-lettered with the reason.
 *
 * Also input: SubmissionCreated on the submissions topic, each put into
 * the retention index (retention.h) when a retention is on, else only
 * read.
 *
 * @locality process() on the stage's worker threads; the retention
 * sweeper and its index's mirror on their own.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/erase.h"
#include "lib/objects.h"
#include "lib/process.h"
#include "lib/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retention.h"
#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_tls.h"

typedef struct {
  sl_common_conf *cc;
  sl__retention_conf *rc;
  sl__objects objects;  /* one storage connection per worker thread */
  sl_tls *redis;        /* one sl_redis per worker thread */
  rd_kafka_t *producer; /* tombstones and audit records, each waited for */
  sl_metric *m_erased, *m_parts;
} eraser;

/* sl__erase_produce_fn: one message, waited for */
static int produce(void *ud, const char *topic, const char *key, const void *val, size_t len,
                   char *err, size_t errlen) {
  eraser *E = ud;
  rd_kafka_resp_err_t e = sl_kafka_send_wait(E->producer, topic, key, strlen(key), val, len);
  if (e) snprintf(err, errlen, "%s: %s", topic, rd_kafka_err2str(e));
  return e ? SL_EKAFKA : 0;
}

static void erase_one(eraser *E, const rd_kafka_message_t *m, sl_result *res) {
  Sluice__V1__ErasureRequest *q =
      sluice__v1__erasure_request__unpack(NULL, m->len, (const uint8_t *)m->payload);
  char rkey[SL__ERASURE_RKEY_MAX];
  if (!q || sl__erasure_rkey(q->submission_id, rkey) != 0 ||
      (q->parts & ~(SL__ERASE_AUDIO | SL__ERASE_DERIVED))) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_request",
                  "not an erasure request (ErasureRequest naming a submission)");
    if (q) sluice__v1__erasure_request__free_unpacked(q, NULL);
    return;
  }
  snprintf(res->subject, sizeof res->subject, "%s", q->submission_id);
  char err[768] = "";
  sl_redis *redis = sl_tls_get(E->redis, err, sizeof err);
  sl_s3_conn *s3 = redis ? sl_tls_get(E->objects.conns, err, sizeof err) : NULL;
  if (!s3) {
    sl_result_set(res, SL_OUTCOME_RETRY, redis ? "storage" : "redis", "%s", err);
    sluice__v1__erasure_request__free_unpacked(q, NULL);
    return;
  }
  sl__eraser e = {.redis = redis,
                  .s3 = s3,
                  .bucket = &E->objects.target,
                  .derived = &E->objects.derived,
                  .datakeys_topic = sl_pipeline_datakeys(E->cc->pipeline),
                  .audit_topic = sl_pipeline_erasures(E->cc->pipeline),
                  .produce = produce,
                  .produce_ud = E};
  sl__erased done;
  const char *actor = q->actor && *q->actor ? q->actor : "unknown";
  const char *reason = q->reason && *q->reason ? q->reason : "request";
  int rc = sl__erase(&e, q->submission_id, q->parts, actor, reason, &done, err, sizeof err);
  if (rc == SL_EUNSUPPORTED || rc == SL_EINVAL)
    sl_result_set(res, SL_OUTCOME_FAIL, rc == SL_EINVAL ? "bad_request" : "unsupported", "%s", err);
  else if (rc)
    sl_result_set(res, SL_OUTCOME_RETRY, "erase", "%s", err);
  else
    sl_metric_add(q->parts ? E->m_parts : E->m_erased, 1);
  sluice__v1__erasure_request__free_unpacked(q, NULL);
}

static void index_one(eraser *E, const rd_kafka_message_t *m, sl_result *res) {
  char err[256] = "";
  sl_redis *redis = sl_tls_get(E->redis, err, sizeof err);
  int rc =
      redis ? sl__retention_index(E->rc, redis, m->payload, m->len, err, sizeof err) : SL_EREDIS;
  if (rc == SL_EINVAL)
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_submission", "%s", err);
  else if (rc)
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", err);
}

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  eraser *E = ud;
  (void)out;
  char origin[160]; /* a retry copy comes back on erase.retry.*: its origin decides */
  if (strcmp(sl_message_origin(m, origin, sizeof origin), E->cc->topic_submissions) == 0) {
    if (sl__retention_on(E->rc)) index_one(E, m, res);
    return;
  }
  erase_one(E, m, res);
}

extern const sl__stage_desc sl__erase_stage; /* its descriptor, at the end */

static int erase_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  sl__retention_conf rc = {0};
  sl_s3_conf s3 = {0};
  sl_conf_bind own[] = {{sl__retention_table, sl__retention_table_len, &rc},
                        {sl_s3_conf_table, sl_s3_conf_table_len, &s3}};
  sl_admin *admin = NULL;
  int st = sl__stage_start(&sl__erase_stage, sl__erase_stage.name, argc, argv, &cc, own, 2, &admin);
  if (st) return st;
  eraser E = {.cc = &cc, .rc = &rc};
  char err[512] = "";
  int ret = sl__retention_check(&rc, err, sizeof err);
  if (ret == 0) ret = sl__objects_init(&E.objects, &s3, 0, 0, 1, err, sizeof err);
  if (ret == 0 && (ret = sl_redis_tls_new(&E.redis, cc.redis_url)))
    snprintf(err, sizeof err, "redis.url: %s", sl_strerror(ret));
  if (ret == 0)
    ret =
        sl_kafka_producer_new(&E.producer, cc.kafka_brokers, "sluice-erase", NULL, err, sizeof err);
  sl__retention *rt = NULL;
  if (ret == 0) ret = sl__retention_start(&rt, &rc, &cc, err, sizeof err);
  if (ret) sl_log(SL_LOG_ERROR, NULL, "%s", err[0] ? err : sl_strerror(ret));
  if (ret == 0) {
    E.m_erased = sl_metrics_counter("sluice_erasures_total", NULL,
                                    "Submissions erased (by request or by retention)");
    E.m_parts = sl_metrics_counter("sluice_erasures_partial_total", NULL,
                                   "Retentions of one part (audio, derived) carried out");
    const char *topics[] = {cc.topic_erasure_requests, cc.topic_submissions};
    sl_stage_opts o = {.stage = "erase",
                       .common = &cc,
                       .topics = topics,
                       .ntopics = 2,
                       .process = process,
                       .ud = &E,
                       .admin = admin,
                       /* a run is a few storage and Redis round trips and
                        * two acknowledged produces, nearly all waiting */
                       .default_workers = 8};
    ret = sl_stage_run(&o, &sl__stop);
  }
  sl__retention_stop(rt);
  if (E.producer) {
    rd_kafka_flush(E.producer, 5000);
    rd_kafka_destroy(E.producer);
  }
  sl_tls_free(E.redis);
  sl__objects_free(&E.objects);
  sl__retention_conf_release(&rc);
  sl__stage_finish(&cc, own, 2, admin);
  return ret ? 1 : 0;
}

const sl__stage_desc sl__erase_stage = {
    .name = "erase",
    .summary = "erases submissions on request and by retention",
    .kind = {"erase", {SL__MSG_ERASURE, SL__MSG_SUBMISSION, NULL}, {NULL}, 0, 1, 0},
    .table = sl__retention_table,
    .table_len = &sl__retention_table_len,
    .admin = "127.0.0.1:9188",
    .main = erase_main};
