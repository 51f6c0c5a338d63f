/* SPDX-License-Identifier: Apache-2.0 */
/*
 * skip_backlog.c — test isolation on a shared lane stack: what earlier
 * tests left unconsumed is not the next test's work.
 *
 * Usage: skip_backlog BROKERS
 *
 * The integration tests of a lane share its Kafka. A test that ends while
 * a message still waits on a stage's input (test_poll_version stops with a
 * grading request queued) hands it to the next test's stages, which then
 * pay a provider call that test never asked for and count it. Run by
 * tests/integration/lib.sh before a test starts its stages: for every
 * consuming stage of the pipeline (SLUICE_PIPELINE_FILE, or the built-in
 * one), its input group (sluice-<stage>) on its input topics and its retry
 * group (sluice-<stage>-retry) on its retry topics commit the high
 * watermark of every partition that has lag. Prints one line per group it
 * moved. Only while no stage runs: Kafka refuses a commit from outside a
 * group that has members (then exit 1, with the reason).
 *
 * Every group gets its own reader (sl_kafka_group_reader_new), all created
 * first so that their connections come up together.
 */
#define _POSIX_C_SOURCE 200809L
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_kafka.h"
#include "sluice/sl_pipeline.h"

#define MAX_GROUPS 64
#define TIMEOUT_MS 10000

typedef struct {
  char name[128];
  const sl_pipeline_stage *stage; /* whose group */
  int retry;                      /* 0: its input group, 1: its retry group */
  rd_kafka_t *rk;
  rd_kafka_topic_partition_list_t *parts;
} group_t;

static void add_topic(rd_kafka_topic_partition_list_t *l, const rd_kafka_metadata_t *md,
                      const char *topic) {
  for (int t = 0; t < md->topic_cnt; t++)
    if (strcmp(md->topics[t].topic, topic) == 0)
      for (int k = 0; k < md->topics[t].partition_cnt; k++)
        rd_kafka_topic_partition_list_add(l, topic, md->topics[t].partitions[k].id);
}

/* Commits the high watermark where g has lag; 0, or -1 with a message. */
static int skip(group_t *g) {
  char err[512];
  int n = g->parts->cnt;
  if (n == 0) return 0;
  sl_kafka_lag *lag = calloc((size_t)n, sizeof *lag);
  if (!lag) return -1;
  int rc = sl_kafka_group_lag(g->rk, g->parts, TIMEOUT_MS, lag, err, sizeof err);
  if (rc) {
    fprintf(stderr, "skip_backlog: %s: %s\n", g->name, err);
    free(lag);
    return -1;
  }
  rd_kafka_topic_partition_list_t *c = rd_kafka_topic_partition_list_new(n);
  long long skipped = 0;
  for (int i = 0; i < n; i++) {
    if (lag[i].lag <= 0) continue;
    rd_kafka_topic_partition_list_add(c, g->parts->elems[i].topic, g->parts->elems[i].partition)
        ->offset = lag[i].hi;
    skipped += lag[i].lag;
  }
  free(lag);
  rc = 0;
  if (c->cnt) {
    rd_kafka_resp_err_t e = rd_kafka_commit(g->rk, c, 0);
    for (int i = 0; !e && i < c->cnt; i++) e = c->elems[i].err;
    if (e) {
      fprintf(stderr, "skip_backlog: %s: commit: %s\n", g->name, rd_kafka_err2str(e));
      rc = -1;
    } else {
      printf("skip_backlog: %s: skipped %lld message(s) on %d partition(s)\n", g->name, skipped,
             c->cnt);
    }
  }
  rd_kafka_topic_partition_list_destroy(c);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: skip_backlog BROKERS\n");
    return 2;
  }
  char err[512];
  sl_pipeline *p = NULL;
  if (sl_pipeline_load(&p, getenv("SLUICE_PIPELINE_FILE"), err, sizeof err) != 0) {
    fprintf(stderr, "skip_backlog: %s\n", err);
    return 1;
  }
  static group_t g[MAX_GROUPS];
  int ng = 0, rc = 0;
  const rd_kafka_metadata_t *md = NULL;
  for (size_t i = 0; i < sl_pipeline_nstages(p) && rc == 0; i++) {
    const sl_pipeline_stage *s = sl_pipeline_stage_at(p, i);
    for (int retry = 0; retry < 2 && s->ninputs; retry++) {
      if (retry && !s->retry) continue;
      if (ng == MAX_GROUPS) {
        fprintf(stderr, "skip_backlog: more than %d groups\n", MAX_GROUPS);
        rc = 1;
        break;
      }
      group_t *x = &g[ng++];
      x->stage = s, x->retry = retry;
      sl_pipeline_group(x->name, sizeof x->name, s->name, retry);
      if (sl_kafka_group_reader_new(&x->rk, argv[1], x->name, "sluice-skip-backlog", err,
                                    sizeof err) != 0) {
        fprintf(stderr, "skip_backlog: %s: %s\n", x->name, err);
        rc = 1;
      }
    }
  }
  if (rc == 0 && ng > 0) {
    rd_kafka_resp_err_t e = rd_kafka_metadata(g[0].rk, 1, NULL, &md, TIMEOUT_MS);
    if (e) {
      fprintf(stderr, "skip_backlog: topics: %s\n", rd_kafka_err2str(e));
      rc = 1;
    }
  }
  for (int i = 0; rc == 0 && i < ng; i++) {
    group_t *x = &g[i];
    x->parts = rd_kafka_topic_partition_list_new(16);
    if (!x->retry)
      for (size_t t = 0; t < x->stage->ninputs; t++) add_topic(x->parts, md, x->stage->inputs[t]);
    else
      for (size_t t = 0; t < SL_RETRY_TIERS_MAX && x->stage->retry_topics[t]; t++)
        add_topic(x->parts, md, x->stage->retry_topics[t]);
    if (skip(x) != 0) rc = 1;
  }
  if (md) rd_kafka_metadata_destroy(md);
  for (int i = 0; i < ng; i++) {
    if (g[i].parts) rd_kafka_topic_partition_list_destroy(g[i].parts);
    sl_kafka_group_reader_free(g[i].rk);
  }
  sl_pipeline_free(p);
  return rc;
}
