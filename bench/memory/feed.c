/* SPDX-License-Identifier: Apache-2.0 */
/* bench/memory/feed.c — the input of the memory benchmark (bench/memory/run):
 * stores one answer in the answers' bucket and writes COUNT UploadCompleted
 * messages naming it to TOPIC, as ingest would after COUNT uploads, so that
 * one stt process has more answers waiting than it may take at once.
 *
 * Usage: memory_feed FILE COUNT TOPIC RUN
 *   FILE   the answer (audio/wav), stored as bench-memory/<RUN>.wav
 *   RUN    a word that keeps the questions of one run apart from another's:
 *          question keys are "bm-<RUN>-<n / 10>/<n % 10 + 1>"
 * Settings from the environment as the stages read them: SLUICE_KAFKA_BROKERS
 * and SLUICE_S3_* (eval "$(tools/devstack env)"). Exits 0 once every message
 * is acknowledged by Kafka.
 */
#define _POSIX_C_SOURCE 200809L
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_stage.h"

static int any_env(const char *name) {
  (void)name;
  return 1;
}

static int read_file(const char *path, void **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return SL_ENOTFOUND;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  *data = n > 0 ? malloc((size_t)n) : NULL;
  int ok = *data && fread(*data, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  *len = ok ? (size_t)n : 0;
  return ok ? 0 : SL_EINVAL;
}

int main(int argc, char **argv) {
  if (argc != 5 || atoi(argv[2]) <= 0) {
    fprintf(stderr, "usage: memory_feed FILE COUNT TOPIC RUN\n");
    return 2;
  }
  const char *path = argv[1], *topic = argv[3], *run = argv[4];
  int count = atoi(argv[2]);
  char err[512] = "", key[160];
  sl_conf_set_known_env(any_env);
  sl_s3_conf s3;
  memset(&s3, 0, sizeof s3);
  sl_conf_bind b = {sl_s3_conf_table, sl_s3_conf_table_len, &s3};
  void *data = NULL;
  size_t len = 0;
  sl_s3_target t;
  sl_s3_conn *conn = NULL;
  long status = 0;
  int rc = sl_conf_load(&b, 1, NULL, NULL, 0, err, sizeof err);
  if (!rc && (rc = read_file(path, &data, &len)) != 0)
    snprintf(err, sizeof err, "cannot read %s", path);
  if (!rc) rc = sl_s3_target_init(&t, &s3);
  if (!rc) rc = sl_s3_conn_new(&conn, &s3);
  snprintf(key, sizeof key, "bench-memory/%s.wav", run);
  if (!rc) rc = sl_s3_put(conn, &t, key, "audio/wav", data, len, &status, err, sizeof err);
  const char *brokers = getenv("SLUICE_KAFKA_BROKERS");
  rd_kafka_t *rk = NULL;
  if (!rc)
    rc = sl_kafka_producer_new(&rk, brokers ? brokers : "127.0.0.1:9092", "memory-feed", NULL, err,
                               sizeof err);
  for (int i = 0; !rc && i < count; i++) {
    char sid[64], k[96];
    snprintf(sid, sizeof sid, "bm-%s-%d", run, i / 10);
    Sluice__V1__UploadCompleted up = SLUICE__V1__UPLOAD_COMPLETED__INIT;
    up.submission_id = sid;
    up.question_no = (uint32_t)(i % 10 + 1);
    up.bucket = s3.bucket;
    up.object_key = key;
    up.size = len;
    up.content_type = "audio/wav";
    up.prompt = "Tell me about your weekend.";
    up.accepted_at_ms = up.uploaded_at_ms = sl_now_ms();
    size_t n = sluice__v1__upload_completed__get_packed_size(&up);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
      rc = SL_ENOMEM;
      break;
    }
    sluice__v1__upload_completed__pack(&up, buf);
    int kl = snprintf(k, sizeof k, "%s/%u", sid, up.question_no);
    rd_kafka_resp_err_t e;
    while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(k, (size_t)kl),
                                  RD_KAFKA_V_VALUE(buf, n),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
      rd_kafka_poll(rk, 100);
    if (e) {
      free(buf);
      snprintf(err, sizeof err, "produce: %s", rd_kafka_err2str(e));
      rc = SL_EKAFKA;
    }
  }
  if (!rc && rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, sizeof err, "not every message was acknowledged within 60 s");
    rc = SL_EKAFKA;
  }
  if (rk) rd_kafka_destroy(rk);
  sl_s3_conn_free(conn);
  sl_conf_release(&b, 1);
  free(data);
  if (rc) {
    fprintf(stderr, "memory_feed: %s (%s)\n", err[0] ? err : sl_strerror(rc), sl_strerror(rc));
    return 1;
  }
  printf("%d UploadCompleted of %s (%zu bytes) on %s\n", count, key, len, topic);
  return 0;
}
