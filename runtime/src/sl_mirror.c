/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_mirror.c — a compacted topic mirrored into Redis: the watcher and the
 * rebuild (see sl_mirror.h), on a thread with a blocking Redis connection
 * (sl_redis) and an assign-only librdkafka consumer, so a replay never
 * stalls its owner's loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_mirror.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_stage.h" /* sl_now_ms */

#define LEASE_MS 30000
#define STALL_MS 60000 /* a replay gives up after this long without a message */
#define MAX_PARTS 256  /* partitions of the topic read */

struct sl_mirror {
  sl_mirror_opts o;
  char *redis_url, *brokers;
  char id[33]; /* this replica's lease token */
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_int seen_marked; /* the store was seen complete at least once */
  int warned;             /* the loss was logged (watcher thread only) */
  sl_redis *r;
  sl_metric *m_rebuilds, *m_records;
};

/* lease: take it (NX) / keep it / finish with the marker, each only while
 * it is this replica's */
static const char renew_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                "  redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1\n"
                                "end\n"
                                "return 0\n";
static const char finish_lua[] = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
                                 "redis.call('DEL', KEYS[1])\n"
                                 "redis.call('SET', KEYS[2], ARGV[2])\n"
                                 "return 1\n";
static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                  "  redis.call('DEL', KEYS[1])\n"
                                  "end\n"
                                  "return 0\n";
static sl_redis_script renew_s, finish_s, release_s;

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Sleeps up to ms in short steps; 1 when asked to stop. */
static int nap(sl_mirror *k, int64_t ms) {
  for (int64_t slept = 0; slept < ms && !atomic_load(&k->stop); slept += 100)
    sleep_ms(ms - slept < 100 ? ms - slept : 100);
  return atomic_load(&k->stop);
}

/* An integer reply of a command or script, or -1 (error, no connection). */
static long long int_of(redisReply *r) {
  long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  freeReplyObject(r);
  return v;
}

static long long lease(sl_mirror *k, const sl_redis_script *s, const char *extra) {
  char err[256];
  const char *argv[] = {k->o.lock_key, k->id, extra};
  const char *fargv[] = {k->o.lock_key, k->o.marker_key, k->id, extra};
  if (s == &finish_s) return int_of(sl_redis_eval(k->r, s, 2, 4, fargv, NULL, err, sizeof err));
  return int_of(sl_redis_eval(k->r, s, 1, extra ? 3 : 2, argv, NULL, err, sizeof err));
}

/* The end offsets of every partition of the topic into high, in one
 * ListOffsets request (a watermark query per partition took ~0.5 s each
 * while the consumer fetched). */
static int ends(sl_mirror *k, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts,
                int64_t *high) {
  rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(parts->cnt);
  for (int i = 0; i < parts->cnt; i++)
    rd_kafka_topic_partition_list_add(q, k->o.topic, parts->elems[i].partition)->offset =
        RD_KAFKA_OFFSET_END; /* as a timestamp: the latest offset */
  int rc = rd_kafka_offsets_for_times(rk, q, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : SL_EKAFKA;
  for (int i = 0; rc == 0 && i < parts->cnt; i++) {
    if (q->elems[i].err || q->elems[i].offset < 0) rc = SL_EKAFKA;
    high[i] = q->elems[i].offset;
  }
  rd_kafka_topic_partition_list_destroy(q);
  return rc;
}

/* Replays the topic from its beginning up to ends that stay put. 0 when all
 * of it was applied and the lease held throughout. */
static int replay(sl_mirror *k, rd_kafka_t *rk, long *applied) {
  int rc = 0;
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(16);
  const struct rd_kafka_metadata *md = NULL;
  rd_kafka_topic_t *kt = rd_kafka_topic_new(rk, k->o.topic, NULL);
  if (!kt || rd_kafka_metadata(rk, 0, kt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt > MAX_PARTS) {
    sl_log(SL_LOG_ERROR, NULL, "%s: no metadata for topic %s", k->o.name, k->o.topic);
    rc = SL_EKAFKA;
  } else {
    for (int p = 0; p < md->topics[0].partition_cnt; p++)
      rd_kafka_topic_partition_list_add(parts, k->o.topic, md->topics[0].partitions[p].id)->offset =
          RD_KAFKA_OFFSET_BEGINNING;
  }
  if (md) rd_kafka_metadata_destroy(md);
  if (kt) rd_kafka_topic_destroy(kt);
  /* a partition is read to its end when the broker said so (EOF, the end
   * the fetch saw) at or past the end queried: not on the queried ends
   * alone, which a broker still electing a leader may report as 0 */
  int64_t high[MAX_PARTS], pos[MAX_PARTS];
  int eof[MAX_PARTS];
  for (int i = 0; i < parts->cnt; i++) pos[i] = 0, eof[i] = 0;
  if (rc == 0) rc = ends(k, rk, parts, high);
  if (rc == 0 && rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) rc = SL_EKAFKA;
  int64_t deadline = sl_now_ms() + STALL_MS, renewed = sl_now_ms();
  char lease_ms[16];
  snprintf(lease_ms, sizeof lease_ms, "%d", LEASE_MS);
  while (rc == 0 && !atomic_load(&k->stop)) {
    int open = 0;
    for (int i = 0; i < parts->cnt; i++) open += !eof[i] || pos[i] < high[i];
    if (!open) { /* at the ends: done if they did not move meanwhile */
      int64_t again[MAX_PARTS];
      if ((rc = ends(k, rk, parts, again)) != 0) break;
      int moved = 0;
      for (int i = 0; i < parts->cnt; i++) {
        moved |= again[i] != high[i];
        high[i] = again[i];
      }
      if (!moved) break;
      continue;
    }
    if (sl_now_ms() >= deadline) {
      rc = SL_ETIMEDOUT;
      break;
    }
    if (sl_now_ms() - renewed > LEASE_MS / 3) {
      if (lease(k, &renew_s, lease_ms) != 1) {
        rc = SL_ESTATE; /* another replica's now, or Redis lost it */
        break;
      }
      renewed = sl_now_ms();
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
    if (!m) continue;
    int idx = -1;
    for (int i = 0; i < parts->cnt; i++)
      if (parts->elems[i].partition == m->partition) idx = i;
    if (idx < 0) {
      rd_kafka_message_destroy(m);
      continue;
    }
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) { /* compaction leaves gaps: EOF is the end */
      if (m->offset > pos[idx]) pos[idx] = m->offset;
      eof[idx] = 1;
    } else if (m->err) {
      sl_log(SL_LOG_WARN, NULL, "%s: %s", k->o.name, rd_kafka_message_errstr(m));
    } else {
      while (!atomic_load(&k->stop) && k->o.apply(k->o.ud, k->r, m) != 0) { /* never skip one */
        if (sl_now_ms() >= deadline) {
          rc = SL_ETIMEDOUT;
          break;
        }
        sleep_ms(200);
      }
      if (rc == 0) {
        (*applied)++;
        pos[idx] = m->offset + 1;
        eof[idx] = 0;
        deadline = sl_now_ms() + STALL_MS;
      }
    }
    rd_kafka_message_destroy(m);
  }
  if (atomic_load(&k->stop) && rc == 0) rc = SL_EUNAVAIL;
  rd_kafka_assign(rk, NULL);
  rd_kafka_topic_partition_list_destroy(parts);
  return rc;
}

static rd_kafka_t *consumer(sl_mirror *k) {
  char err[512];
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (rd_kafka_conf_set(c, "bootstrap.servers", k->brokers, err, sizeof err) ||
      rd_kafka_conf_set(c, "group.id", k->o.client_id, err, sizeof err) ||
      rd_kafka_conf_set(c, "client.id", k->o.client_id, err, sizeof err) ||
      rd_kafka_conf_set(c, "enable.auto.commit", "false", err, sizeof err) ||
      rd_kafka_conf_set(c, "enable.partition.eof", "true", err, sizeof err) ||
      rd_kafka_conf_set(c, "auto.offset.reset", "earliest", err, sizeof err) ||
      rd_kafka_conf_set(c, "log_level", "3", err, sizeof err) ||
      sl_kafka_conf_secure(c, err, sizeof err) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s: consumer: %s", k->o.name, err);
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) {
    sl_log(SL_LOG_ERROR, NULL, "%s: consumer: %s", k->o.name, err);
    rd_kafka_conf_destroy(c);
  }
  return rk;
}

/* One rebuild under the lease: replay, then the marker. 0 when the store
 * is complete. */
static int rebuild(sl_mirror *k) {
  if (!k->warned) /* once per loss, not once per attempt */
    sl_log(SL_LOG_WARN, NULL,
           "%s: its marker %s is missing (Redis lost its data, or is new): "
           "rebuilding it from topic %s; %s meanwhile",
           k->o.name, k->o.marker_key, k->o.topic, k->o.while_lost);
  k->warned = 1;
  rd_kafka_t *rk = consumer(k);
  long applied = 0;
  int rc = rk ? replay(k, rk, &applied) : SL_EKAFKA;
  /* it joined no group and committed nothing: nothing to leave (a consumer
   * close waited ~6 s for a group coordinator, keeping the marker unset) */
  if (rk) rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  char now[24];
  snprintf(now, sizeof now, "%lld", (long long)sl_now_ms());
  if (rc == 0 && lease(k, &finish_s, now) == 1) {
    sl_metric_add(k->m_rebuilds, 1);
    sl_metric_add(k->m_records, (uint64_t)applied);
    sl_log(SL_LOG_INFO, NULL, "%s rebuilt: %ld record(s) replayed", k->o.name, applied);
    return 0;
  }
  sl_log(SL_LOG_ERROR, NULL,
         "%s: the rebuild did not finish (%s, %ld applied); trying again in %lld ms", k->o.name,
         rc ? sl_strerror(rc) : "the lease was lost: Redis lost data again", applied,
         (long long)k->o.interval_ms);
  lease(k, &release_s, NULL);
  return rc ? rc : SL_ESTATE;
}

static void *watch(void *arg) {
  sl_mirror *k = arg;
  char err[256], px[16];
  snprintf(px, sizeof px, "%d", LEASE_MS);
  while (!atomic_load(&k->stop)) {
    const char *ex[] = {"EXISTS", k->o.marker_key};
    long long marked = int_of(sl_redis_argv(k->r, 2, ex, NULL, err, sizeof err));
    if (marked == 1) {
      atomic_store(&k->seen_marked, 1);
      k->warned = 0;
    }
    if (marked == 0) {
      const char *take[] = {"SET", k->o.lock_key, k->id, "NX", "PX", px};
      redisReply *r = sl_redis_argv(k->r, 6, take, NULL, err, sizeof err);
      int mine = r && r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      /* rebuilt: check the marker again at once; failed (Kafka or Redis
       * unreachable, the topic missing): after the interval, not in a loop */
      if (mine && rebuild(k) == 0) continue;
    }
    nap(k, k->o.interval_ms);
  }
  return NULL;
}

static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;
static void scripts_init(void) {
  sl_redis_script_init(&renew_s, renew_lua);
  sl_redis_script_init(&finish_s, finish_lua);
  sl_redis_script_init(&release_s, release_lua);
}

int sl_mirror_start(sl_mirror **out, const char *redis_url, const char *brokers,
                    const sl_mirror_opts *o) {
  *out = NULL;
  if (!redis_url || !brokers || !o || !o->name || !o->topic || !o->lock_key || !o->marker_key ||
      !o->client_id || !o->while_lost || !o->m_rebuilds || !o->m_replayed || !o->apply ||
      o->interval_ms <= 0)
    return SL_EINVAL;
  sl_mirror *k = calloc(1, sizeof *k);
  if (!k) return SL_ENOMEM;
  k->o = *o;
  k->redis_url = strdup(redis_url);
  k->brokers = strdup(brokers);
  atomic_init(&k->stop, 0);
  atomic_init(&k->seen_marked, 0);
  if (!k->redis_url || !k->brokers || sl_random_hex(16, k->id, sizeof k->id) != 0 ||
      sl_redis_new(&k->r, redis_url) != 0) {
    sl_mirror_stop(k);
    return SL_ENOMEM;
  }
  pthread_once(&scripts_once, scripts_init);
  k->m_rebuilds = sl_metrics_counter(
      o->m_rebuilds, NULL, "rebuilds of this store from its topic that this process completed");
  k->m_records = sl_metrics_counter(o->m_replayed, NULL, "records replayed by those rebuilds");
  if (pthread_create(&k->thread, NULL, watch, k) != 0) {
    sl_mirror_stop(k);
    return SL_ENOMEM;
  }
  k->started = 1;
  *out = k;
  return 0;
}

int sl_mirror_wait(sl_mirror *k, int64_t timeout_ms) {
  for (int64_t waited = 0; !atomic_load(&k->seen_marked); waited += 50) {
    if (waited >= timeout_ms) return 0;
    sleep_ms(50);
  }
  return 1;
}

void sl_mirror_stop(sl_mirror *k) {
  if (!k) return;
  atomic_store(&k->stop, 1);
  if (k->started) pthread_join(k->thread, NULL);
  sl_redis_free(k->r);
  free(k->redis_url);
  free(k->brokers);
  free(k);
}
