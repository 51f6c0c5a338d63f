/*
 * sluicectl.c — the operator's command line.
 *
 *   sluicectl dlq list [--stage S] [--class C] [--submission ID] [--json]
 *
 * `dlq list` reads the whole dead-letter topic without joining a consumer
 * group (partitions are assigned explicitly from the low to the high
 * watermark, nothing is committed), decodes each DeadLetter and prints the
 * ones matching the filters: a table for people, one JSON object per line
 * with --json for scripts.
 *
 * Connection settings come from the same environment as the stages
 * (SLUICE_KAFKA_BROKERS, SLUICE_TOPIC_DLQ) or --brokers / --topic.
 * Errors go to stderr with a non-zero exit: 2 for usage, 1 for failures.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.pb-c.h"

typedef struct {
  const char *brokers, *topic, *stage, *cls, *submission;
  int json;
} dlq_opts;

static int usage(FILE *f) {
  fprintf(f,
          "usage: sluicectl dlq list [--stage S] [--class C] [--submission ID] [--json]\n"
          "                          [--brokers HOST:PORT] [--topic NAME]\n"
          "environment: SLUICE_KAFKA_BROKERS (127.0.0.1:9092), SLUICE_TOPIC_DLQ (dlq)\n");
  return 2;
}

static void fmt_time(int64_t ms, char out[32]) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int matches(const dlq_opts *o, const Sluice__V1__DeadLetter *d) {
  if (o->stage && strcmp(o->stage, d->stage) != 0) return 0;
  if (o->cls && strcmp(o->cls, d->error_class) != 0) return 0;
  if (o->submission) {
    size_t n = strlen(o->submission);
    if (d->key.len < n || memcmp(d->key.data, o->submission, n) != 0 ||
        (d->key.len > n && d->key.data[n] != '/'))
      return 0;
  }
  return 1;
}

static void print_one(const dlq_opts *o, const rd_kafka_message_t *m,
                      const Sluice__V1__DeadLetter *d) {
  char first[32], last[32];
  fmt_time(d->first_failure_ms, first);
  fmt_time(d->last_failure_ms, last);
  if (o->json) {
    json_t *j = json_pack(
        "{s:i,s:I,s:s%,s:s,s:s,s:s,s:i,s:s,s:s,s:{s:s,s:i,s:I},s:I}", "dlq_partition",
        (int)m->partition, "dlq_offset", (json_int_t)m->offset, "key", (const char *)d->key.data,
        d->key.len, "stage", d->stage, "error_class", d->error_class, "error_message",
        d->error_message, "attempts", (int)d->attempts, "first_failure", first,
        "last_failure", last, "original", "topic", d->topic, "partition", (int)d->partition,
        "offset", (json_int_t)d->offset, "payload_bytes", (json_int_t)d->payload.len);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s) puts(s);
    free(s);
    json_decref(j);
  } else {
    printf("%d:%-6lld %-12s %-20s %-48.*s %3u  %s  %s\n", (int)m->partition,
           (long long)m->offset, d->stage, d->error_class, (int)d->key.len,
           (const char *)d->key.data, d->attempts, last, d->error_message);
  }
}

static int dlq_list(const dlq_opts *o) {
  char err[512];
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (rd_kafka_conf_set(c, "bootstrap.servers", o->brokers, err, sizeof err) ||
      rd_kafka_conf_set(c, "group.id", "sluicectl", err, sizeof err) ||
      rd_kafka_conf_set(c, "enable.auto.commit", "false", err, sizeof err) ||
      rd_kafka_conf_set(c, "log_level", "3", err, sizeof err)) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return 1;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
    return 1;
  }
  int rc = 1;
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
  const rd_kafka_metadata_t *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
  if (e || md->topic_cnt != 1 || md->topics[0].err) {
    fprintf(stderr, "sluicectl: cannot read topic %s at %s: %s\n", o->topic, o->brokers,
            rd_kafka_err2str(e ? e : md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN));
    goto out;
  }
  int np = md->topics[0].partition_cnt;
  int64_t *high = calloc((size_t)np, sizeof *high);
  rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new(np);
  int remaining = 0;
  for (int p = 0; p < np; p++) {
    int64_t lo, hi;
    e = rd_kafka_query_watermark_offsets(rk, o->topic, p, &lo, &hi, 10000);
    if (e) {
      fprintf(stderr, "sluicectl: watermarks of %s[%d]: %s\n", o->topic, p, rd_kafka_err2str(e));
      free(high);
      rd_kafka_topic_partition_list_destroy(assign);
      goto out;
    }
    high[p] = hi;
    if (hi > lo) {
      rd_kafka_topic_partition_list_add(assign, o->topic, p)->offset = lo;
      remaining++;
    }
  }
  rd_kafka_assign(rk, assign);
  rd_kafka_topic_partition_list_destroy(assign);
  if (!o->json)
    printf("%-8s %-12s %-20s %-48s %3s  %-20s  %s\n", "POS", "STAGE", "CLASS", "KEY", "TRY",
           "LAST FAILURE", "REASON");
  size_t shown = 0, total = 0;
  int idle = 0;
  while (remaining > 0 && idle < 100) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
    if (!m) {
      idle++;
      continue;
    }
    idle = 0;
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        fprintf(stderr, "sluicectl: %s\n", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    total++;
    Sluice__V1__DeadLetter *d = sluice__v1__dead_letter__unpack(NULL, m->len, m->payload);
    if (!d) {
      fprintf(stderr, "sluicectl: %s[%d]@%lld is not a DeadLetter; skipped\n", o->topic,
              (int)m->partition, (long long)m->offset);
    } else {
      if (matches(o, d)) {
        print_one(o, m, d);
        shown++;
      }
      sluice__v1__dead_letter__free_unpacked(d, NULL);
    }
    if (m->offset + 1 >= high[m->partition]) remaining--;
    rd_kafka_message_destroy(m);
  }
  free(high);
  if (remaining > 0) {
    fprintf(stderr, "sluicectl: timed out reading %s (%d partitions unfinished)\n", o->topic,
            remaining);
    goto out;
  }
  fprintf(stderr, "%zu of %zu dead letters shown\n", shown, total);
  rc = 0;
out:
  if (md) rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "dlq") != 0 || argc < 3 || strcmp(argv[2], "list") != 0) {
    fprintf(stderr, "sluicectl: unknown command \"%s%s%s\"\n", argv[1], argc > 2 ? " " : "",
            argc > 2 ? argv[2] : "");
    return usage(stderr);
  }
  dlq_opts o = {getenv("SLUICE_KAFKA_BROKERS"), getenv("SLUICE_TOPIC_DLQ"), NULL, NULL, NULL, 0};
  if (!o.brokers) o.brokers = "127.0.0.1:9092";
  if (!o.topic) o.topic = "dlq";
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      o.json = 1;
      continue;
    }
    const char **dst = strcmp(a, "--stage") == 0        ? &o.stage
                       : strcmp(a, "--class") == 0      ? &o.cls
                       : strcmp(a, "--submission") == 0 ? &o.submission
                       : strcmp(a, "--brokers") == 0    ? &o.brokers
                       : strcmp(a, "--topic") == 0      ? &o.topic
                                                        : NULL;
    if (!dst) {
      fprintf(stderr, "sluicectl: unknown option \"%s\"\n", a);
      return usage(stderr);
    }
    if (!v) {
      fprintf(stderr, "sluicectl: %s needs a value\n", a);
      return usage(stderr);
    }
    *dst = v;
    i++;
  }
  return dlq_list(&o);
}
