/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sweep.c — ingest's reconciliation sweep (see sweep.h for the design).
 *
 * One round: take the lock, check that the view can be trusted (no round
 * while materialize rebuilds it or after it went back: view_trusted()), ask Kafka how far ingest
 * has read storage-events (the timestamp of the oldest event its group has not committed: "upto",
 * or now when it has read everything), read up to ingest.sweep_batch due members of SL__PENDING,
 * and for each look at the submission's hash (gone, or the question already past awaiting_upload:
 * drop it) and HEAD the object (missing: look again later). An object
 * stored less than the grace before upto may have its event waiting behind
 * ingest's backlog, and one whose upload ingest already recorded in the
 * submission's hash (u<no>:<etag>) had its event: look again later; only
 * an object stored earlier, of which ingest knows nothing, gets the event
 * it should have had. So a backlog, in ingest or in materialize (which
 * removes members), makes the sweep wait, not write events twice.
 * Storage, Redis or Kafka unreachable ends the round early; the members
 * stay due and the next round tries again. The events of a round are
 * flushed before the next round starts; one that Kafka refused is written
 * again when its member is next due.
 *
 * With redis.buckets the pending set and the view's marker and sequence
 * exist once per bucket (lib/view.h): a round takes the lock (one key, used
 * alone), then goes through the buckets, each trusted or not on its own
 * (a bucket being rebuilt waits, the others go on), up to
 * ingest.sweep_batch due members per bucket.
 */
#define _POSIX_C_SOURCE 200809L
#include "sweep.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "lib/s3event.h"
#include "lib/process.h"

#define LOCK_KEY "sl:lock:ingest-sweep"
#define MAX_DELAY_MS (3600 * 1000LL)

struct sl__sweep {
  const sl__sweep_conf *sc;
  const sl_common_conf *cc;
  const sl_s3_conf *s3;
  const sl_s3_target *target;
  sl_redis *redis;
  sl_s3_conn *storage; /* the sweep thread's */
  rd_kafka_t *producer;
  sl_kafka_renewals renewals; /* of the producer (renew_if_failed) */
  rd_kafka_t *reader;         /* ingest's input group, read but never joined */
  pthread_t thread;
  atomic_int stop;
  int refused;         /* deliveries Kafka refused this round (the sweep thread only) */
  sl__view_seen *seen; /* each bucket's view as last read (view_trusted(), sweep thread) */
  int bucket;          /* the bucket this round is at (sweep thread) */
  char pending[SL__VIEW_KEY_MAX]; /* its pending set's key */
  char owner[SL__OWNER_MAX];
  sl_metric *m_found, *m_dropped;
};

static void on_delivery(rd_kafka_resp_err_t err, void *ctx) {
  sl__sweep *s = ctx;
  if (err) {
    /* a producer that failed for good writes nothing more: renewed after
     * the round (renew_if_failed) */
    sl_kafka_fatal(s->producer, "ingest sweep");
    s->refused++;
    sl_log(SL_LOG_WARN, NULL, "sweep: an event was not written: %s", rd_kafka_err2str(err));
  }
}

static void iso8601_ms(int64_t ms, char out[32]) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

/* Sets member's score so it is due again after delay_ms (due = score +
 * grace <= now). */
static void reschedule(sl__sweep *s, const char *member, int64_t now, int64_t delay_ms) {
  char score[32], err[256];
  snprintf(score, sizeof score, "%lld", (long long)(now + delay_ms - s->sc->grace_s * 1000));
  const char *argv[] = {"ZADD", s->pending, "XX", score, member};
  redisReply *rep = sl_redis_argv(s->redis, 5, argv, NULL, err, sizeof err);
  if (rep) freeReplyObject(rep);
}

static void drop(sl__sweep *s, const char *member, const char *why) {
  char err[256];
  const char *argv[] = {"ZREM", s->pending, member};
  redisReply *rep = sl_redis_argv(s->redis, 3, argv, NULL, err, sizeof err);
  if (rep) freeReplyObject(rep);
  sl_log(SL_LOG_DEBUG, member, "sweep: no longer awaited (%s)", why);
}

/* Writes the event the storage should have sent. 0, or a negative code. */
static int emit(sl__sweep *s, const char *member, const char *key, const sl_s3_head_info *h) {
  char when[32], etag[80];
  iso8601_ms(h->last_modified_ms > 0 ? h->last_modified_ms : sl_now_ms(), when);
  sl__etag_bare(h->etag, etag, sizeof etag);
  json_t *ev = json_pack("{s:[{s:s,s:s,s:s,s:s,s:{s:{s:s},s:{s:s,s:I,s:s}}}]}", "Records",
                         "eventVersion", "2.2", "eventSource", "sluice:sweep", "eventTime", when,
                         "eventName", "s3:ObjectCreated:Put", "s3", "bucket", "name", s->s3->bucket,
                         "object", "key", key, "size", (json_int_t)h->size, "eTag", etag);
  char *body = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
  json_decref(ev);
  if (!body) return SL_ENOMEM;
  rd_kafka_resp_err_t e =
      sl_kafka_send(s->producer, s->cc->topic_storage_events, member, strlen(member), body,
                    strlen(body), RD_KAFKA_MSG_F_COPY, on_delivery, s);
  free(body);
  if (e) {
    sl_log(SL_LOG_WARN, member, "sweep: cannot queue the event: %s", rd_kafka_err2str(e));
    return SL_EKAFKA;
  }
  return 0;
}

/* Whether the view can be trusted to say which questions await their
 * upload: it is complete (materialize's marker is there) and has not gone
 * back in time since the sweep last read it (its write sequence lower
 * under the same marker, or an older marker: Redis restored from an older
 * snapshot, which materialize notices within a second if it runs). While
 * it is rebuilt, `submissions` is replayed before `results`, so every
 * question looks as if it still awaited its upload; a view that went back
 * shows answers graded since as unuploaded. Either way Redis has lost
 * ingest's records of the uploads it saw (u<no>:<etag>) and the stages'
 * idempotency stores, so an event written then would send a graded answer
 * through the paid providers again (test_sweep_rebuild). Of the bucket the
 * round is at (s->bucket). */
static int view_trusted(sl__sweep *s) {
  char err[256], mkey[SL__VIEW_KEY_MAX], skey[SL__VIEW_KEY_MAX];
  sl__view_key(mkey, sizeof mkey, SL__VIEW_MARKER, s->bucket);
  sl__view_key(skey, sizeof skey, SL__VIEW_SEQ, s->bucket);
  const char *argv[] = {"MGET", mkey, skey};
  redisReply *rep = sl_redis_argv(s->redis, 3, argv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
    sl_log(SL_LOG_WARN, NULL, "sweep: redis: %s", rep ? "unexpected reply" : err);
    if (rep) freeReplyObject(rep);
    return 0;
  }
  const redisReply *mk = rep->element[0], *sq = rep->element[1];
  if (mk->type != REDIS_REPLY_STRING) {
    freeReplyObject(rep);
    sl_log(SL_LOG_INFO, NULL, "sweep: the view is being rebuilt; waiting for it");
    return 0;
  }
  long long marker = strtoll(mk->str, NULL, 10);
  long long seq = sq->type == REDIS_REPLY_STRING ? strtoll(sq->str, NULL, 10) : 0;
  freeReplyObject(rep);
  sl__view_seen *seen = &s->seen[s->bucket];
  if (sl__view_went_back(seen, marker, seq)) {
    sl_log(SL_LOG_WARN, NULL,
           "sweep: the view went back in time (sequence %lld under marker %lld, %lld under %lld "
           "seen before: Redis lost writes); waiting for materialize to rebuild it",
           seq, marker, seen->seq, seen->marker);
    return 0;
  }
  return 1;
}

/* Looks at one due member; upto: ingest has read every event older than
 * this (ms). Returns 0 to go on, 1 to end the round (storage or Redis
 * unreachable). */
static int look_at(sl__sweep *s, const char *member, int64_t now, int64_t upto) {
  char sid[64], err[512];
  unsigned qno = 0;
  if (sl_key_parse(member, strlen(member), sid, &qno) != 0) {
    drop(s, member, "not <sid>/<no>");
    return 0;
  }
  char hkey[SL__VIEW_KEY_MAX], spec[32], rank[32];
  sl__view_sub_key(hkey, sizeof hkey, sid);
  snprintf(spec, sizeof spec, "spec%u", qno);
  snprintf(rank, sizeof rank, "r%u", qno);
  const char *argv[] = {"HMGET", hkey, "accepted_at_ms", spec, rank};
  redisReply *rep = sl_redis_argv(s->redis, 5, argv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) {
    sl_log(SL_LOG_WARN, NULL, "sweep: redis: %s", rep ? "unexpected reply" : err);
    if (rep) freeReplyObject(rep);
    return 1;
  }
  if (rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_STRING) {
    freeReplyObject(rep);
    drop(s, member, "submission gone");
    return 0;
  }
  int64_t accepted = strtoll(rep->element[0]->str, NULL, 10);
  long r = rep->element[2]->type == REDIS_REPLY_STRING ? strtol(rep->element[2]->str, NULL, 10) : 0;
  json_t *j = json_loads(rep->element[1]->str, 0, NULL);
  freeReplyObject(rep);
  const char *key = json_string_value(json_object_get(j, "key"));
  if (r >= 2 || !key) {
    json_decref(j);
    drop(s, member, r >= 2 ? "upload recorded" : "no object key");
    return 0;
  }
  if (now - accepted > s->sc->max_age_s * 1000) {
    json_decref(j);
    sl_metric_add(s->m_dropped, 1);
    sl_log(SL_LOG_INFO, member,
           "sweep: nothing uploaded within %lld s of acceptance; "
           "no longer looked for",
           (long long)s->sc->max_age_s);
    drop(s, member, "too old");
    return 0;
  }
  int64_t grace_ms = s->sc->grace_s * 1000;
  int64_t delay = (now - accepted) / 2;
  if (delay < s->sc->interval_s * 1000) delay = s->sc->interval_s * 1000;
  if (delay > MAX_DELAY_MS) delay = MAX_DELAY_MS;
  if (upto - accepted < grace_ms) {
    /* uploaded after acceptance, so after upto - grace: its event may be
     * in ingest's backlog; no need to ask storage yet */
    json_decref(j);
    reschedule(s, member, now, s->sc->interval_s * 1000);
    return 0;
  }
  sl_s3_head_info h;
  long status = 0;
  int rc = sl_s3_head(s->storage, s->target, key, &h, &status, err, sizeof err);
  if (rc == SL_ENOTFOUND) {
    json_decref(j);
    reschedule(s, member, now, delay);
    return 0;
  }
  if (rc) {
    json_decref(j);
    sl_log(SL_LOG_WARN, member, "sweep: %s", err);
    return rc == SL_EUNAVAIL;
  }
  if (h.last_modified_ms > 0 && upto - h.last_modified_ms < grace_ms) {
    /* stored just now, or after the oldest event ingest has not read: its
     * event is most likely on its way */
    json_decref(j);
    int64_t again = upto < now ? s->sc->interval_s * 1000 : h.last_modified_ms + grace_ms - now;
    reschedule(s, member, now, again);
    return 0;
  }
  char etag[80], field[128];
  sl__etag_bare(h.etag, etag, sizeof etag);
  sl__upload_field(qno, etag, field, sizeof field);
  const char *hargv[] = {"HEXISTS", hkey, field};
  rep = sl_redis_argv(s->redis, 3, hargv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_INTEGER) {
    sl_log(SL_LOG_WARN, NULL, "sweep: redis: %s", rep ? "unexpected reply" : err);
    if (rep) freeReplyObject(rep);
    json_decref(j);
    return 1;
  }
  long long seen = rep->integer;
  freeReplyObject(rep);
  if (seen) {
    /* ingest has had this upload's event; materialize has yet to record it */
    json_decref(j);
    sl_log(SL_LOG_DEBUG, member,
           "sweep: ingest has its event; materialize has not recorded it yet");
    reschedule(s, member, now, delay);
    return 0;
  }
  /* the view may have been lost since the round began (view_trusted()) */
  if (!view_trusted(s)) {
    json_decref(j);
    return 1;
  }
  sl_log(SL_LOG_WARN, member,
         "sweep: %s was stored %lld s ago and no event for it has "
         "been seen: writing it",
         key, (long long)((now - (h.last_modified_ms > 0 ? h.last_modified_ms : accepted)) / 1000));
  if (emit(s, member, key, &h) == 0) sl_metric_add(s->m_found, 1);
  json_decref(j);
  reschedule(s, member, now, delay);
  return 0;
}

static int lock_round(sl__sweep *s) {
  char ttl[32], err[256];
  snprintf(ttl, sizeof ttl, "%lld", (long long)s->sc->interval_s * 1000);
  const char *argv[] = {"SET", LOCK_KEY, s->owner, "NX", "PX", ttl};
  redisReply *rep = sl_redis_argv(s->redis, 6, argv, NULL, err, sizeof err);
  int ok = rep && rep->type == REDIS_REPLY_STATUS;
  if (rep) freeReplyObject(rep);
  return ok;
}

/* The round's part in bucket s->bucket; *upto: how far ingest has read
 * (asked of Kafka once a round, when a bucket first has members due; -1
 * before). Returns 1 to end the round (Redis, storage or Kafka
 * unreachable). */
static int round_bucket(sl__sweep *s, int64_t now, int64_t *upto) {
  if (!view_trusted(s)) return 0;
  char max[32], lim[32], err[256];
  snprintf(max, sizeof max, "%lld", (long long)(now - s->sc->grace_s * 1000));
  snprintf(lim, sizeof lim, "%lld", (long long)s->sc->batch);
  const char *argv[] = {"ZRANGEBYSCORE", s->pending, "-inf", max, "LIMIT", "0", lim};
  redisReply *rep = sl_redis_argv(s->redis, 7, argv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements == 0) {
    if (!rep) sl_log(SL_LOG_WARN, NULL, "sweep: redis: %s", err);
    if (rep) freeReplyObject(rep);
    return !rep; /* nothing due: Kafka is not asked */
  }
  if (*upto < 0) {
    int64_t oldest = -1;
    if (sl_kafka_group_oldest(s->reader, s->cc->topic_storage_events, 10000, &oldest, err,
                              sizeof err)) {
      sl_log(SL_LOG_WARN, NULL, "sweep: how far ingest has read is unknown (%s): next round", err);
      freeReplyObject(rep);
      return 1;
    }
    *upto = oldest >= 0 && oldest < now ? oldest : now;
  }
  int end = 0;
  for (size_t i = 0; i < rep->elements && !atomic_load(&s->stop) && !end; i++)
    if (rep->element[i]->type == REDIS_REPLY_STRING)
      end = look_at(s, rep->element[i]->str, now, *upto);
  freeReplyObject(rep);
  return end;
}

/* After a round: a producer that failed for good is replaced by a new one
 * (sl_kafka_producer_renew; what it did not write stays in the pending set
 * and is written again when next due). Renewals too often, or one that
 * fails, stop the process as every stage does. On the sweep thread, which
 * polls its producer itself. */
static void renew_if_failed(sl__sweep *s) {
  if (!sl_kafka_fatal(s->producer, "ingest sweep")) return;
  char err[512] = "";
  int rc = SL_EKAFKA;
  if (!sl_kafka_renew_due(&s->renewals, sl_now_ms()))
    snprintf(err, sizeof err, "renewed %d times within %d s already", SL_KAFKA_RENEW_MAX,
             SL_KAFKA_RENEW_WINDOW_MS / 1000);
  else
    rc = sl_kafka_producer_renew(&s->producer, NULL, NULL, s->cc->kafka_brokers,
                                 "sluice-ingest-sweep", NULL, NULL, err, sizeof err);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "sweep: kafka producer not renewed (%s): stopping", err);
    sl__stop = 1;
  }
}

static void round_once(sl__sweep *s) {
  if (!lock_round(s)) return;
  int64_t now = sl_now_ms(), upto = -1;
  s->refused = 0;
  for (int b = 0; b < sl_rkey_buckets() && !atomic_load(&s->stop); b++) {
    s->bucket = b;
    sl__view_key(s->pending, sizeof s->pending, SL__PENDING, b);
    if (round_bucket(s, now, &upto)) break;
  }
  if (upto < 0) return; /* nothing was due: nothing written */
  rd_kafka_flush(s->producer, 30000);
  if (s->refused) /* their members stay in the set: written again when next due */
    sl_log(SL_LOG_WARN, NULL, "sweep: %d event(s) not written; written again when due", s->refused);
  renew_if_failed(s);
}

static void *run(void *arg) {
  sl__sweep *s = arg;
  while (!atomic_load(&s->stop)) {
    round_once(s);
    for (int64_t t = 0; t < s->sc->interval_s * 1000 && !atomic_load(&s->stop); t += 100) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

void sl__sweep_stop(sl__sweep *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  pthread_join(s->thread, NULL);
  if (s->producer) {
    rd_kafka_flush(s->producer, 5000);
    rd_kafka_destroy(s->producer);
  }
  sl_kafka_group_reader_free(s->reader);
  sl_s3_conn_free(s->storage);
  sl_redis_free(s->redis);
  free(s->seen);
  free(s);
}

int sl__sweep_start(sl__sweep **out, const sl__sweep_conf *sc, const sl_common_conf *cc,
                    const sl_s3_conf *s3, const sl_s3_target *target, char *err, size_t errlen) {
  *out = NULL;
  if (sc->interval_s <= 0) return 0;
  if (sc->grace_s < 0 || sc->max_age_s <= 0 || sc->batch <= 0) {
    snprintf(err, errlen,
             "ingest.sweep_grace_s must be >= 0, sweep_max_age_s and "
             "sweep_batch > 0");
    return SL_ECONFIG;
  }
  sl__sweep *s = calloc(1, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->sc = sc, s->cc = cc, s->s3 = s3, s->target = target;
  sl__owner_id(s->owner, sizeof s->owner);
  s->seen = calloc((size_t)sl_rkey_buckets(), sizeof *s->seen);
  if (!s->seen) {
    free(s);
    return SL_ENOMEM;
  }
  const char *help = "Uploads found in storage whose storage event never arrived";
  s->m_found = sl_metrics_counter("sluice_ingest_sweep_events_total", NULL, help);
  s->m_dropped = sl_metrics_counter("sluice_ingest_sweep_abandoned_total", NULL,
                                    "Questions never uploaded within ingest.sweep_max_age_s");
  int rc = sl_redis_new(&s->redis, cc->redis_url);
  if (rc) snprintf(err, errlen, "redis.url %s: %s", cc->redis_url, sl_strerror(rc));
  if (rc == 0 && (rc = sl_s3_conn_new(&s->storage, s3)))
    snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  if (rc == 0)
    rc = sl_kafka_producer_new(&s->producer, cc->kafka_brokers, "sluice-ingest-sweep", NULL, err,
                               errlen);
  char group[128];
  if (rc == 0) rc = sl_pipeline_group(group, sizeof group, "ingest", 0);
  if (rc == 0)
    rc = sl_kafka_group_reader_new(&s->reader, cc->kafka_brokers, group, "sluice-ingest-sweep", err,
                                   errlen);
  if (rc == 0 && pthread_create(&s->thread, NULL, run, s) != 0) rc = SL_ENOMEM;
  if (rc) {
    if (s->producer) rd_kafka_destroy(s->producer);
    sl_kafka_group_reader_free(s->reader);
    sl_s3_conn_free(s->storage);
    sl_redis_free(s->redis);
    free(s->seen);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}
