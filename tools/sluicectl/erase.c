/* SPDX-License-Identifier: Apache-2.0 */
/*
 * erase.c — `sluicectl submission delete ID`: one submission erased
 * everywhere (stages/lib/erase.h: its data key destroyed, its objects and
 * Redis keys deleted, the erasure recorded), and `sluicectl erasures`:
 * those records (docs/privacy.md).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluicectl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/erase.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_err.h"
#include "sluice/sl_pipeline.h"

typedef struct {
  const sc_opts *o;
  sc_producer *p;
} produce_ctx;

/* sl__erase_produce_fn: one message, waited for */
static int produce(void *ud, const char *topic, const char *key, const void *val, size_t len,
                   char *err, size_t errlen) {
  produce_ctx *c = ud;
  sc_delivery d;
  if (sc_produce(c->p, topic, key, strlen(key), val, len, NULL, NULL, &d) == 0)
    sc_producer_wait(c->p, c->o->timeout_ms, NULL);
  if (!d.done || d.err) {
    snprintf(err, errlen, "%s: %s", topic,
             d.done ? rd_kafka_err2str(d.err) : "not acknowledged in time");
    return SL_EKAFKA;
  }
  return 0;
}

int sc_submission_delete(const sc_opts *o) {
  const char *sid = o->args[0];
  if (!sc_is_uuid(sid)) {
    fprintf(stderr, "sluicectl: \"%s\" is not a submission id\n", sid);
    return SC_EXIT_USAGE;
  }
  sl_s3_conf s3 = {0};
  sl_conf_bind b = {sl_s3_conf_table, sl_s3_conf_table_len, &s3};
  char err[1024];
  if (sl_conf_load(&b, 1, NULL, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "sluicectl: storage settings (SLUICE_S3_*): %s\n", err);
    return SC_EXIT_USAGE;
  }
  sl_s3_target bucket, derived;
  sl_s3_conn *conn = NULL;
  int rc = sl_s3_target_init(&bucket, &s3);
  if (rc == 0) rc = sl_s3_target_init_derived(&derived, &s3);
  if (rc == 0) rc = sl_s3_conn_new(&conn, &s3);
  sl_redis *r = rc == 0 ? sc_redis_connect(o->redis_url) : NULL;
  sc_producer p = {0};
  int out = SC_EXIT_FAIL;
  if (rc) fprintf(stderr, "sluicectl: storage settings: %s\n", sl_strerror(rc));
  if (r && sc_producer_open(o, &p) == 0) {
    char actor[128];
    sc_resolve_actor(o, actor, sizeof actor);
    produce_ctx pc = {o, &p};
    sl__eraser e = {.redis = r,
                    .s3 = conn,
                    .bucket = &bucket,
                    .derived = &derived,
                    .datakeys_topic = sl_pipeline_datakeys(o->pipeline),
                    .audit_topic = sl_pipeline_erasures(o->pipeline),
                    .produce = produce,
                    .produce_ud = &pc};
    sl__erased done;
    rc = sl__erase(&e, sid, 0, actor, "request", &done, err, sizeof err);
    if (rc) {
      fprintf(stderr, "sluicectl: erasing %s stopped (run it again): %s\n", sid, err);
    } else if (o->json) {
      json_t *j = json_pack("{s:s,s:s,s:b,s:i,s:i,s:i,s:s}", "submission_id", sid, "state",
                            "erased", "key_destroyed", done.key_destroyed, "objects",
                            (int)done.objects, "redis_keys", (int)done.redis_keys, "feed_entries",
                            (int)done.feed_entries, "audit_id", done.audit_id);
      char *s = json_dumps(j, JSON_COMPACT);
      if (s) puts(s);
      free(s);
      json_decref(j);
      out = SC_EXIT_OK;
    } else {
      printf("erased %s: data key destroyed, %u object(s), %u Redis key(s), %u feed entr%s "
             "(audit %s)\n",
             sid, done.objects, done.redis_keys, done.feed_entries,
             done.feed_entries == 1 ? "y" : "ies", done.audit_id);
      out = SC_EXIT_OK;
    }
    sc_producer_close(&p);
  }
  sl_redis_free(r);
  sl_s3_conn_free(conn);
  sl_conf_release(&b, 1);
  return out;
}

static int erasure_cb(void *arg, int32_t partition, int64_t offset, const void *payload,
                      size_t len) {
  const sc_opts *o = arg;
  (void)partition;
  (void)offset;
  Sluice__V1__ErasureAudit *a = sluice__v1__erasure_audit__unpack(NULL, len, payload);
  if (!a) return 0;
  if (o->json) {
    json_t *j = sc_pb_to_json(&a->base);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s) puts(s);
    free(s);
    json_decref(j);
  } else {
    char at[40];
    sc_fmt_time(a->at_ms, at);
    printf("%-24s  %-36s  %-10s  %-20s  %7u  %7u\n", at, a->submission_id, a->reason, a->actor,
           a->objects_deleted, a->redis_keys_deleted);
  }
  sluice__v1__erasure_audit__free_unpacked(a, NULL);
  return 0;
}

int sc_erasures(const sc_opts *o) {
  if (!o->json)
    printf("%-24s  %-36s  %-10s  %-20s  %7s  %7s\n", "AT", "SUBMISSION", "REASON", "ACTOR",
           "OBJECTS", "KEYS");
  int rc = sc_scan_topic(o, sl_pipeline_erasures(o->pipeline), -1, 0, erasure_cb, (void *)o);
  return rc ? SC_EXIT_FAIL : SC_EXIT_OK;
}
