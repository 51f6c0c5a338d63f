/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topics.c — sluicectl topics ensure / list.
 *
 * `ensure` sends one CreateTopics request for every named topic (Admin API;
 * no JVM, one round trip) and treats TOPIC_ALREADY_EXISTS as success. With
 * --partitions, an existing topic with fewer partitions is grown to that
 * count (one CreatePartitions request for all of them); one with more is a
 * failure, since Kafka cannot take partitions away. It prints one line per
 * topic: "created NAME", "exists NAME", "grew NAME from A to B partitions"
 * or "failed NAME: reason", and exits 1 if any failed.
 * `list` prints every topic's name and partition count from the metadata.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"

static int valid_topic_name(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > 249 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = t[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

/* One CreatePartitions request growing topics grow[0..n) to o->partitions;
 * prints "grew" or "failed" per topic (from[i]: its count before). Returns
 * how many failed. */
static int grow(const sc_opts *o, rd_kafka_t *rk, const char **topics, const int *from, int n) {
  rd_kafka_NewPartitions_t **np = calloc((size_t)n, sizeof *np);
  rd_kafka_AdminOptions_t *ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATEPARTITIONS);
  rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
  rd_kafka_event_t *ev = NULL;
  char err[512];
  int failed = n, made = 0;
  if (!np || !ao || !q) goto out;
  int op_ms = o->timeout_ms > 2000 ? o->timeout_ms - 1000 : o->timeout_ms;
  if (rd_kafka_AdminOptions_set_request_timeout(ao, o->timeout_ms, err, sizeof err) ||
      rd_kafka_AdminOptions_set_operation_timeout(ao, op_ms, err, sizeof err)) {
    fprintf(stderr, "sluicectl: %s\n", err);
    goto out;
  }
  for (; made < n; made++) {
    np[made] = rd_kafka_NewPartitions_new(topics[made], (size_t)o->partitions, err, sizeof err);
    if (!np[made]) {
      fprintf(stderr, "sluicectl: topic %s: %s\n", topics[made], err);
      goto out;
    }
  }
  rd_kafka_CreatePartitions(rk, np, (size_t)n, ao, q);
  ev = rd_kafka_queue_poll(q, o->timeout_ms + 2000);
  if (!ev || rd_kafka_event_error(ev)) {
    sc_report_kafka_error(o, "adding partitions",
                          ev ? rd_kafka_event_error(ev) : RD_KAFKA_RESP_ERR__TIMED_OUT);
    goto out;
  }
  const rd_kafka_CreatePartitions_result_t *res = rd_kafka_event_CreatePartitions_result(ev);
  size_t nres = 0;
  const rd_kafka_topic_result_t **tr =
      res ? rd_kafka_CreatePartitions_result_topics(res, &nres) : NULL;
  failed = 0;
  for (int i = 0; i < n; i++) {
    const rd_kafka_topic_result_t *r = NULL;
    for (size_t k = 0; k < nres && !r; k++)
      if (strcmp(rd_kafka_topic_result_name(tr[k]), topics[i]) == 0) r = tr[k];
    rd_kafka_resp_err_t e = r ? rd_kafka_topic_result_error(r) : RD_KAFKA_RESP_ERR__TIMED_OUT;
    if (!e) {
      printf("grew %s from %d to %d partitions\n", topics[i], from[i], o->partitions);
      continue;
    }
    const char *msg = r ? rd_kafka_topic_result_error_string(r) : NULL;
    printf("failed %s: adding partitions: %s\n", topics[i],
           msg && *msg ? msg : rd_kafka_err2str(e));
    failed++;
  }
out:
  if (np) rd_kafka_NewPartitions_destroy_array(np, (size_t)made);
  free(np);
  if (ev) rd_kafka_event_destroy(ev);
  if (q) rd_kafka_queue_destroy(q);
  if (ao) rd_kafka_AdminOptions_destroy(ao);
  return failed;
}

/* The topics that already existed: "exists" when no --partitions was given
 * or they have that many, grown when they have fewer, "failed" when they
 * have more. Returns how many failed. */
static int settle_existing(const sc_opts *o, rd_kafka_t *rk, const char **topics, int n) {
  const char **less = calloc((size_t)n + 1, sizeof *less);
  int *from = calloc((size_t)n + 1, sizeof *from);
  int nless = 0, failed = 0;
  if (!less || !from) {
    free(less);
    free(from);
    return n;
  }
  for (int i = 0; i < n; i++) {
    int have = 0;
    int st = o->partitions > 0 ? sc_topic_exists(o, rk, topics[i], &have) : 1;
    if (st < 0) {
      printf("failed %s: its partition count could not be read\n", topics[i]);
      failed++;
    } else if (st == 0) {
      printf("failed %s: it was reported as existing but is gone\n", topics[i]);
      failed++;
    } else if (o->partitions <= 0 || have == o->partitions) {
      printf("exists %s\n", topics[i]);
    } else if (have > o->partitions) {
      printf("failed %s: it has %d partitions, more than the %d asked for; Kafka cannot remove "
             "partitions (ask for %d or more, or recreate the topic)\n",
             topics[i], have, o->partitions, have);
      failed++;
    } else {
      less[nless] = topics[i];
      from[nless++] = have;
    }
  }
  if (nless) failed += grow(o, rk, less, from, nless);
  free(less);
  free(from);
  return failed;
}

int sc_topics_ensure(const sc_opts *o) {
  for (int i = 0; i < o->nargs; i++) {
    if (!valid_topic_name(o->args[i])) {
      fprintf(stderr, "sluicectl: \"%s\" is not a valid topic name (1-249 of a-z A-Z 0-9 . _ -)\n",
              o->args[i]);
      return SC_EXIT_USAGE;
    }
  }
  for (size_t i = 0; i < o->nconfigs; i++) {
    const char *eq = strchr(o->configs[i], '=');
    if (!eq || eq == o->configs[i] || strlen(o->configs[i]) >= 512) {
      fprintf(stderr, "sluicectl: --config wants KEY=VALUE, not \"%s\"\n", o->configs[i]);
      return SC_EXIT_USAGE;
    }
  }
  /* each name once (a request naming a topic twice is refused as a whole) */
  const char **names = calloc((size_t)o->nargs, sizeof *names);
  const char **existing = calloc((size_t)o->nargs, sizeof *existing);
  rd_kafka_NewTopic_t **nt = calloc((size_t)o->nargs, sizeof *nt);
  int n = 0, nexisting = 0, rc = SC_EXIT_FAIL;
  rd_kafka_t *rk = NULL;
  rd_kafka_AdminOptions_t *ao = NULL;
  rd_kafka_queue_t *q = NULL;
  rd_kafka_event_t *ev = NULL;
  char err[512];
  if (!names || !existing || !nt) goto out;
  for (int i = 0; i < o->nargs; i++) {
    int dup = 0;
    for (int j = 0; j < n && !dup; j++) dup = strcmp(names[j], o->args[i]) == 0;
    if (dup) continue;
    nt[n] = rd_kafka_NewTopic_new(o->args[i], o->partitions, o->replication, err, sizeof err);
    if (!nt[n]) {
      fprintf(stderr, "sluicectl: topic %s: %s\n", o->args[i], err);
      rc = SC_EXIT_USAGE;
      goto out;
    }
    names[n++] = o->args[i];
    for (size_t c = 0; c < o->nconfigs; c++) {
      char kv[512];
      snprintf(kv, sizeof kv, "%s", o->configs[c]);
      char *eq = strchr(kv, '=');
      if (!eq) continue; /* checked above */
      *eq = '\0';
      rd_kafka_resp_err_t e = rd_kafka_NewTopic_set_config(nt[n - 1], kv, eq + 1);
      if (e) {
        fprintf(stderr, "sluicectl: --config %s: %s\n", o->configs[c], rd_kafka_err2str(e));
        rc = SC_EXIT_USAGE;
        goto out;
      }
    }
  }

  rd_kafka_conf_t *c = sc_conf_new(o);
  if (!c) goto out;
  rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    goto out;
  }
  ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  /* the broker waits up to the operation timeout for the topics to exist */
  int op_ms = o->timeout_ms > 2000 ? o->timeout_ms - 1000 : o->timeout_ms;
  if (rd_kafka_AdminOptions_set_request_timeout(ao, o->timeout_ms, err, sizeof err) ||
      rd_kafka_AdminOptions_set_operation_timeout(ao, op_ms, err, sizeof err)) {
    fprintf(stderr, "sluicectl: %s\n", err);
    goto out;
  }
  q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, nt, (size_t)n, ao, q);
  ev = rd_kafka_queue_poll(q, o->timeout_ms + 2000);
  if (!ev) {
    sc_report_kafka_error(o, "creating topics", RD_KAFKA_RESP_ERR__TIMED_OUT);
    goto out;
  }
  if (rd_kafka_event_error(ev)) {
    sc_report_kafka_error(o, "creating topics", rd_kafka_event_error(ev));
    goto out;
  }
  const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
  size_t nres = 0;
  const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &nres) : NULL;
  int failed = 0;
  for (int i = 0; i < n; i++) {
    const rd_kafka_topic_result_t *r = NULL;
    for (size_t k = 0; k < nres && !r; k++)
      if (strcmp(rd_kafka_topic_result_name(tr[k]), names[i]) == 0) r = tr[k];
    if (!r) {
      printf("failed %s: no result from the broker\n", names[i]);
      failed++;
      continue;
    }
    rd_kafka_resp_err_t e = rd_kafka_topic_result_error(r);
    if (!e) {
      printf("created %s\n", names[i]);
    } else if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      existing[nexisting++] = names[i];
    } else {
      const char *msg = rd_kafka_topic_result_error_string(r);
      printf("failed %s: %s\n", names[i], msg && *msg ? msg : rd_kafka_err2str(e));
      failed++;
    }
  }
  failed += settle_existing(o, rk, existing, nexisting);
  rc = failed ? SC_EXIT_FAIL : SC_EXIT_OK;
out:
  free(existing);
  if (ev) rd_kafka_event_destroy(ev);
  if (q) rd_kafka_queue_destroy(q);
  if (ao) rd_kafka_AdminOptions_destroy(ao);
  if (nt) rd_kafka_NewTopic_destroy_array(nt, (size_t)n);
  free(nt);
  free(names);
  if (rk) rd_kafka_destroy(rk);
  return rc;
}

static int cmp_topic(const void *a, const void *b) {
  const rd_kafka_metadata_topic_t *x = *(const rd_kafka_metadata_topic_t *const *)a;
  const rd_kafka_metadata_topic_t *y = *(const rd_kafka_metadata_topic_t *const *)b;
  return strcmp(x->topic, y->topic);
}

int sc_topics_list(const sc_opts *o) {
  rd_kafka_conf_t *c = sc_conf_new(o);
  if (!c) return SC_EXIT_FAIL;
  char err[512];
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return SC_EXIT_FAIL;
  }
  const rd_kafka_metadata_t *md = NULL;
  int rc = SC_EXIT_FAIL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, o->timeout_ms);
  if (e) {
    sc_report_kafka_error(o, "listing topics", e);
    md = NULL;
    goto out;
  }
  const rd_kafka_metadata_topic_t **v = calloc((size_t)md->topic_cnt + 1, sizeof *v);
  if (!v) goto out;
  size_t n = 0;
  for (int i = 0; i < md->topic_cnt; i++)
    if (o->all || strncmp(md->topics[i].topic, "__", 2) != 0) v[n++] = &md->topics[i];
  if (n > 1) qsort(v, n, sizeof *v, cmp_topic);
  if (!o->json) printf("%-40s %10s\n", "TOPIC", "PARTITIONS");
  for (size_t i = 0; i < n; i++) {
    if (o->json) {
      json_t *j = json_pack("{s:s,s:i}", "topic", v[i]->topic, "partitions", v[i]->partition_cnt);
      if (j && v[i]->err) json_object_set_new(j, "error", json_string(rd_kafka_err2str(v[i]->err)));
      char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
      if (s) puts(s);
      free(s);
      json_decref(j);
    } else {
      printf("%-40s %10d%s%s\n", v[i]->topic, v[i]->partition_cnt, v[i]->err ? "  " : "",
             v[i]->err ? rd_kafka_err2str(v[i]->err) : "");
    }
  }
  free(v);
  rc = SC_EXIT_OK;
out:
  if (md) rd_kafka_metadata_destroy(md);
  rd_kafka_destroy(rk);
  return rc;
}
