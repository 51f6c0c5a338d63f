/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/cost/watch.c — the meter of bench/cost/run: how much CPU a consumer
 * process spent per message it finished, measured from outside the same way
 * for a Sluice stage and for the raw loop (raw_loop.c).
 *
 * It reads the group's committed offsets on the given topics every 5 ms
 * (OffsetFetch with a consumer of that group that never joins it, as
 * sluicectl does) and the process's CPU time: in nanoseconds per thread from
 * /proc/<pid>/task/<tid>/schedstat (the window's CPU: what each thread ran
 * between its ends, a thread begun meanwhile all of its time), and in
 * clock ticks from /proc/<pid>/stat (utime + stime, exited threads
 * included: the whole run, and the window's when a thread ended inside
 * it, "window_cpu_precise": false). A window of a second is then measured
 * to a microsecond, not to a tick (10 ms, 1% of it). "Finished" means committed: the consumer
 * commits an offset only once the outputs of everything before it are
 * acknowledged. The window is steady state: from the first commit that
 * passes --from of the backlog (default 10%) to the first that passes --to
 * (90%); both ends are taken right when a commit lands, so the messages in
 * flight at either end are about as many and cancel out, and neither the
 * start-up nor the tail counts. Other processes (Redis, the S3 gateway,
 * Kafka, the fake provider) are sampled at the same instants, so what the
 * stage made them do is reported beside it, never added to it.
 *
 * The backlog is what the group has not committed when the watch starts, up
 * to the high watermarks then: nothing may write to the topics meanwhile.
 *
 * The window's CPU is also given by thread name ("threads_cpu_s": the
 * loop "sluice", "sluice-worker", librdkafka's "rdk:*", the exporter
 * "sluice-trace"), the threads alive at its end: where the rounds of one
 * setting differ.
 *
 * Output: one JSON object on stdout once everything is committed (exit 0),
 * or on --timeout (exit 1, "complete": false). `cost_watch --high T[,T...]`
 * prints the sum of the topics' high watermarks instead (messages written);
 * `cost_watch --rewind 1 --group G --topics T[,T...]` commits every
 * partition's low watermark for the group (which must have no member), so
 * that a stage reads its backlog again.
 */
#define _POSIX_C_SOURCE 200809L
#include <librdkafka/rdkafka.h>

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sl_bench.h"

#define MAX_OTHERS 8

/* CPU seconds (user + system, every thread, exited ones included) of pid,
 * or -1 when it is gone. */
static double cpu_of(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold blanks */
  if (!p) return -1;
  unsigned long long ut = 0, st = 0;
  /* after ")": state(3) ... utime(14) stime(15) */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* the threads of a process and the ns each has run (schedstat's first field) */
#define MAX_TASKS 512
typedef struct {
  int n;
  long tid[MAX_TASKS];
  unsigned long long ns[MAX_TASKS];
} tasks;

static int tasks_of(long pid, tasks *t) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/task", pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  t->n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && t->n < MAX_TASKS) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[320];
    snprintf(p, sizeof p, "/proc/%ld/task/%.20s/schedstat", pid, e->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue; /* it ended just now */
    unsigned long long ns = 0;
    if (fscanf(f, "%llu", &ns) == 1) {
      t->tid[t->n] = atol(e->d_name);
      t->ns[t->n++] = ns;
    }
    fclose(f);
  }
  closedir(d);
  return 0;
}

/* seconds the threads ran from a to b; -1 when a thread of a ended (its
 * time inside the window is not in b) */
static double tasks_ran(const tasks *a, const tasks *b) {
  unsigned long long sum = 0;
  int seen = 0;
  for (int j = 0; j < b->n; j++) {
    unsigned long long before = 0;
    for (int i = 0; i < a->n; i++)
      if (a->tid[i] == b->tid[j]) before = a->ns[i], seen++;
    sum += b->ns[j] >= before ? b->ns[j] - before : 0;
  }
  return seen == a->n ? (double)sum / 1e9 : -1;
}

/* Peak resident set of pid in kB (VmHWM), or 0. */
static long peak_rss_kb(long pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", pid);
  FILE *f = fopen(path, "r");
  long kb = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

typedef struct {
  char name[64];
  long pid;
  double at0, at1;
} other;

static other others[MAX_OTHERS];
static int nothers;

/* --other NAME=PID: one more process whose CPU is sampled at the window */
static int opt_other(const char *v) {
  const char *eq = strchr(v, '=');
  char *end = NULL;
  if (nothers == MAX_OTHERS || !eq || (size_t)(eq - v) >= sizeof others[0].name) return -1;
  other *o = &others[nothers];
  long pid = strtol(eq + 1, &end, 10);
  if (end == eq + 1 || *end) return -1;
  snprintf(o->name, sizeof o->name, "%.*s", (int)(eq - v), v);
  o->pid = pid;
  nothers++;
  return 0;
}

static void die(const char *what) {
  fprintf(stderr, "cost_watch: %s\n", what);
  exit(2);
}

/* Every partition of topics (comma-separated) with its high watermark. */
static rd_kafka_topic_partition_list_t *partitions(rd_kafka_t *rk, const char *topics,
                                                   int64_t **high) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(64);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", topics);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *kt = rd_kafka_topic_new(rk, t, NULL);
    if (!kt || rd_kafka_metadata(rk, 0, kt, &md, 10000) || md->topic_cnt != 1 || md->topics[0].err)
      die("no metadata for a topic");
    for (int p = 0; p < md->topics[0].partition_cnt; p++)
      rd_kafka_topic_partition_list_add(l, t, md->topics[0].partitions[p].id);
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(kt);
  }
  *high = calloc((size_t)l->cnt + 1, sizeof **high);
  for (int i = 0; i < l->cnt; i++) {
    int64_t lo = 0, hi = 0;
    if (rd_kafka_query_watermark_offsets(rk, l->elems[i].topic, l->elems[i].partition, &lo, &hi,
                                         10000))
      die("cannot read the watermarks");
    (*high)[i] = hi;
    l->elems[i].offset = lo; /* where an uncommitted partition starts */
  }
  return l;
}

/* Sum over the partitions of what is committed (a partition without a
 * commit counts from its low watermark, base). */
static int64_t committed(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l, const int64_t *base) {
  rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_copy(l);
  for (int i = 0; i < q->cnt; i++) q->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
  int64_t sum = -1;
  if (rd_kafka_committed(rk, q, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    sum = 0;
    for (int i = 0; i < q->cnt; i++)
      sum += q->elems[i].offset >= 0 && !q->elems[i].err ? q->elems[i].offset : base[i];
  }
  rd_kafka_topic_partition_list_destroy(q);
  return sum;
}

/* The window's CPU by thread name (/proc/<pid>/task/<tid>/comm: the loop,
 * the workers, librdkafka's rdk:* threads, the trace exporter): the
 * threads alive at its end, those of one name summed, as JSON members
 * ("name":seconds,...) into out. Where a round's CPU went, when rounds of
 * one setting differ. */
static void threads_by_name(long pid, const tasks *a, const tasks *b, char *out, size_t cap) {
  char name[MAX_TASKS][32];
  double cpu[MAX_TASKS];
  int n = 0;
  for (int j = 0; j < b->n; j++) {
    char p[96], comm[32] = "?";
    snprintf(p, sizeof p, "/proc/%ld/task/%ld/comm", pid, b->tid[j]);
    FILE *f = fopen(p, "r");
    if (f) {
      if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n\"\\")] = '\0';
      fclose(f);
    }
    unsigned long long before = 0;
    for (int i = 0; i < a->n; i++)
      if (a->tid[i] == b->tid[j]) before = a->ns[i];
    double s = b->ns[j] >= before ? (double)(b->ns[j] - before) / 1e9 : 0;
    int k = 0;
    while (k < n && strcmp(name[k], comm) != 0) k++;
    if (k == n) snprintf(name[n], sizeof name[n], "%s", comm), cpu[n++] = 0;
    cpu[k] += s;
  }
  size_t used = 0;
  for (int k = 0; k < n && used < cap; k++) {
    int w = snprintf(out + used, cap - used, "%s\"%s\":%.6f", k ? "," : "", name[k], cpu[k]);
    if (w < 0 || (size_t)w >= cap - used) { /* cut: the members before it stand */
      out[used] = '\0';
      break;
    }
    used += (size_t)w;
  }
}

int main(int argc, char **argv) {
  const char *brokers = "127.0.0.1:9092", *group = NULL, *topics = NULL, *high_of = NULL;
  double from = 0.1, to = 0.9, timeout = 600;
  int rewind = 0;
  int arg = 1;
  long long pid_ll = 0;
  const sl_bench_opt opts[] = {
      {"--brokers", SL_BENCH_STR, &brokers, NULL}, {"--group", SL_BENCH_STR, &group, NULL},
      {"--topics", SL_BENCH_STR, &topics, NULL},   {"--high", SL_BENCH_STR, &high_of, NULL},
      {"--pid", SL_BENCH_LL, &pid_ll, NULL},       {"--from", SL_BENCH_DBL, &from, NULL},
      {"--to", SL_BENCH_DBL, &to, NULL},           {"--timeout", SL_BENCH_DBL, &timeout, NULL},
      {"--rewind", SL_BENCH_INT, &rewind, NULL},   {"--other", SL_BENCH_FN, NULL, opt_other},
  };
  if (sl_bench_opts("cost_watch", argc, argv, &arg, opts, sizeof opts / sizeof opts[0]) != 0)
    return 2;
  long pid = (long)pid_ll;
  if (arg != argc || (!high_of && (!group || !topics || (pid <= 0 && !rewind) ||
                                   !(from >= 0 && from < to && to <= 1)))) {
    fprintf(stderr, "usage: cost_watch --group G --topics T[,T...] --pid PID [--brokers B] "
                    "[--other NAME=PID]... [--from 0.1] [--to 0.9] [--timeout S]\n"
                    "       cost_watch --high T[,T...] [--brokers B]\n"
                    "       cost_watch --rewind 1 --group G --topics T[,T...] [--brokers B]\n");
    return 2;
  }
  char err[512];
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (rd_kafka_conf_set(c, "bootstrap.servers", brokers, err, sizeof err) ||
      rd_kafka_conf_set(c, "group.id", group ? group : "cost-watch", err, sizeof err) ||
      rd_kafka_conf_set(c, "client.id", "cost-watch", err, sizeof err))
    die(err);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) die(err);
  int64_t *high = NULL;
  rd_kafka_topic_partition_list_t *l = partitions(rk, high_of ? high_of : topics, &high);
  if (high_of) {
    long long sum = 0;
    for (int i = 0; i < l->cnt; i++) sum += high[i];
    printf("%lld\n", sum);
    rd_kafka_topic_partition_list_destroy(l);
    free(high);
    rd_kafka_destroy(rk);
    return 0;
  }
  if (rewind) { /* the low watermarks, read by partitions() */
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, l, 0);
    rd_kafka_topic_partition_list_destroy(l);
    free(high);
    rd_kafka_destroy(rk);
    if (e) fprintf(stderr, "cost_watch: rewind: %s\n", rd_kafka_err2str(e));
    return e ? 1 : 0;
  }
  int64_t *base = calloc((size_t)l->cnt + 1, sizeof *base);
  int64_t end = 0;
  for (int i = 0; i < l->cnt; i++) {
    base[i] = l->elems[i].offset;
    end += high[i];
  }
  int64_t c_start = -1;
  while (c_start < 0) c_start = committed(rk, l, base);
  int64_t backlog = end - c_start;
  if (backlog <= 0) die("nothing to consume");
  int64_t at0 = c_start + (int64_t)((double)backlog * from);
  int64_t at1 = c_start + (int64_t)((double)backlog * to);

  double t_begin = sl_bench_now_s(), t_first = 0, t0 = 0, t1 = 0, t_end = 0;
  double cpu0 = 0, cpu1 = 0;
  static tasks tk0, tk1, tk;
  int64_t c0 = 0, c1 = 0, last = c_start;
  int complete = 0;
  struct timespec nap = {0, 5 * 1000000L};
  while (sl_bench_now_s() - t_begin < timeout) {
    int64_t now = committed(rk, l, base);
    if (now > last) { /* a commit landed: sample right now */
      double t = sl_bench_now_s(), cpu = cpu_of(pid);
      if (cpu < 0 || tasks_of(pid, &tk)) die("the measured process is gone");
      if (!t_first) t_first = t;
      if (!t0 && now >= at0) {
        t0 = t, cpu0 = cpu, c0 = now, tk0 = tk;
        for (int i = 0; i < nothers; i++) others[i].at0 = cpu_of(others[i].pid);
      }
      if (t0 && !t1 && now >= at1) {
        t1 = t, cpu1 = cpu, c1 = now, tk1 = tk;
        for (int i = 0; i < nothers; i++) others[i].at1 = cpu_of(others[i].pid);
      }
      last = now;
      if (now >= end) {
        t_end = t;
        complete = 1;
        break;
      }
    }
    nanosleep(&nap, NULL);
  }
  double cpu_total = cpu_of(pid);
  double precise = t1 > t0 ? tasks_ran(&tk0, &tk1) : -1;
  char by_name[2048] = "";
  if (precise >= 0) threads_by_name(pid, &tk0, &tk1, by_name, sizeof by_name);
  printf("{\"complete\":%s,\"backlog\":%lld,\"committed\":%lld,\"window_messages\":%lld,"
         "\"window_s\":%.4f,\"window_cpu_s\":%.6f,\"window_cpu_precise\":%s,\"run_s\":%.3f,"
         "\"process_cpu_s\":%.3f,\"peak_rss_kb\":%ld,\"others_cpu_s\":{",
         complete ? "true" : "false", (long long)backlog, (long long)(last - c_start),
         (long long)(c1 - c0), t1 - t0, precise >= 0 ? precise : cpu1 - cpu0,
         precise >= 0 ? "true" : "false", complete ? t_end - t_first : 0.0, cpu_total,
         peak_rss_kb(pid));
  for (int i = 0; i < nothers; i++)
    printf("%s\"%s\":%.3f", i ? "," : "", others[i].name,
           others[i].at0 >= 0 && others[i].at1 >= 0 ? others[i].at1 - others[i].at0 : -1.0);
  printf("},\"threads_cpu_s\":{%s}}\n", by_name);
  rd_kafka_topic_partition_list_destroy(l);
  free(high);
  free(base);
  rd_kafka_destroy(rk);
  return complete && t1 > t0 ? 0 : 1;
}
