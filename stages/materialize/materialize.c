/*
 * materialize.c — `sluice materialize`: Kafka -> the Redis view clients poll.
 *
 * Redis layout, one hash per submission, key "sl:sub:<sid>":
 *   accepted_at_ms, n, user (who created it), token (the results token hash
 *   bound to sid and user, see stages/auth/auth.h)
 *   spec<no>  JSON {content_type,size,prompt,key} — what presign issued
 *   q<no>     JSON view of the question (state, transcript, grade, error)
 *   r<no>     rank of the state stored in q<no>
 *   u<no>:<etag>  the upload's time, written by ingest (first event wins)
 * The hash expires materialize.ttl_s after its last change. The same script
 * keeps "<sid>/<no>" in the sorted set SL__PENDING while the question awaits
 * its upload (ingest's sweep reads it, stages/ingest/sweep.h).
 *
 * Monotonic: a state is written only if its rank is higher than the stored
 * one, checked and written atomically by one Lua script. The states are the
 * pipeline's progress labels in stage order (`sluice pipeline`: awaiting_upload
 * 1 < queued 20 < checking 30 < transcribing 40 < grading 50), then failed
 * < done (sl_pipeline_progress_rank). A duplicate or late event therefore
 * changes nothing, and a replayed dead letter that completes moves the
 * question from failed to done. A status names its label (progress); one
 * from before labels existed has only the built-in state, whose name is its
 * label. Ranks stored before labels existed (2 queued, 3 transcribing,
 * 4 grading, 5 failed, 6 done) are translated by the script to today's
 * ranks of those labels, so a view written by an older materialize stays
 * monotonic across the upgrade. Kafka stays the source of
 * truth: replaying the topics from the start rebuilds the same view.
 *
 * Losing Redis (a restart without persistence, a failover to an empty
 * replica) is detected and repaired: the marker key "sl:view:epoch" is set
 * whenever a view is known to be complete; a watcher thread checks it every
 * materialize.watch_interval_ms, and when it is missing — including on the
 * very first start — it sets it and replays `submissions`, then `results`,
 * each from the beginning up to its current end with a group-less consumer,
 * through the same monotonic apply. The live consumer keeps running
 * meanwhile; both paths apply the same monotonic writes, so the result is
 * the view a full replay gives. Topic retention bounds what can be rebuilt.
 * One replica rebuilds at a time (the lease REBUILD_LOCK, renewed while it
 * works); a rebuild gives up only when no message was applied for
 * REBUILD_STALL_MS, so a large view is not cut off by a fixed deadline.
 *
 * A partial loss leaves the marker in place: Redis restarted from an older
 * snapshot or failed over to a lagging replica still holds the marker it
 * had. Every apply therefore increments the view's write sequence and
 * returns it with the marker's value (Redis's clock when the last rebuild
 * started); a thread that sees the sequence go down under the same marker,
 * or an older marker, knows writes it saw are gone and deletes the marker,
 * which rebuilds the view as above (went_back()). A materialize that starts
 * on such a Redis (everything restarted together) has seen nothing, so
 * before consuming it compares the highest offset applied per input
 * partition, which the apply script records, with its group's committed
 * offsets (behind_committed()).
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.pb-c.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_tls.h"

#include "apply_lua.h"

typedef struct {
  int64_t ttl_s;
  int64_t watch_interval_ms;
} mat_conf;

const sl_conf_entry sl__materialize_table[] = {
    {"materialize.ttl_s", SL_CONF_INT, "604800", offsetof(mat_conf, ttl_s),
     "how long a submission's view stays in Redis after its last change", 0},
    {"materialize.watch_interval_ms", SL_CONF_INT, "1000", offsetof(mat_conf, watch_interval_ms),
     "how often the view marker is checked; a missing marker (Redis lost its data) "
     "rebuilds the view from the topics", 0},
};
const size_t sl__materialize_table_len =
    sizeof sl__materialize_table / sizeof sl__materialize_table[0];

typedef struct {
  sl_common_conf *cc;
  mat_conf *mc;
  sl_tls *redis; /* one sl_redis per worker thread */
  sl_histogram *h_done, *h_failed; /* accept-to-done latency by outcome */
  atomic_int stop_watch;
  sl_metric *m_rebuilds, *m_rebuilt, *m_rollbacks;
  sl_redis *watch_r;  /* the watcher thread's connection (rebuild lock) */
  char owner[64];     /* this process in the rebuild lock */
  /* today's ranks of what an older materialize stored as 2..6 (queued,
   * transcribing, grading, failed, done): the apply script's ARGV 9..13 */
  char legacy_rank[5][16];
} mat;


/* Set on the rebuild thread: replayed events were observed when they first
 * happened, so they do not count again in the latency histogram. */
static _Thread_local int replaying;

static redisReply *cmd(mat *M, int argc, const char **argv, char *err, size_t errlen) {
  sl_redis *r = sl_tls_get(M->redis, err, errlen);
  return r ? sl_redis_argv(r, argc, argv, NULL, err, errlen) : NULL;
}

/* Every apply increments this; a Redis that answers with a lower value than
 * one this process saw under the same marker lost writes. */
#define VIEW_SEQ "sl:view:seq"
/* "<topic>:<partition>" -> the highest offset applied from it */
#define VIEW_APPLIED "sl:view:applied"

/* Redis went back in time (restarted from an older snapshot, failed over to
 * a replica that lagged): writes this process saw applied are gone, while
 * the marker — restored with them — says the view is complete, so nothing
 * would rebuild it. Detected from the apply script's answer: under one
 * marker value the sequence only grows, and marker values (Redis's own
 * clock when a rebuild started) only grow. A lower sequence under the same
 * marker, or an older marker, means writes were lost: the marker is
 * deleted (if it is still the one seen), which makes ingest wait
 * (view_rebuilding), results answer 503, and one replica rebuild the view.
 * What a thread saw is its own (thread-local): one thread's commands run
 * one after the other, so what it reads can only grow, while two threads'
 * answers may arrive in either order. The watcher thread reads the same two
 * keys every tick, so an idle view is checked too. */
static _Thread_local long long seen_marker, seen_seq;

static void went_back(mat *M, long long seq, const char *marker) {
  if (!marker) return; /* the view is missing already: the watcher rebuilds */
  long long mk = strtoll(marker, NULL, 10);
  int back = 0;
  if (mk < seen_marker) {
    back = 1;
  } else if (mk > seen_marker) { /* a rebuild since: a new life of the view */
    seen_marker = mk;
    seen_seq = seq;
  } else if (seq < seen_seq) {
    back = 1;
  } else {
    seen_seq = seq;
  }
  long long was_seq = seen_seq, was_mk = seen_marker;
  if (back) seen_marker = seen_seq = 0;
  if (!back) return;
  sl_log(SL_LOG_ERROR, NULL,
         "Redis went back in time (view sequence %lld under marker %lld, %lld under %lld seen "
         "before): it lost writes (an older snapshot, a lagging replica); rebuilding the view",
         seq, mk, was_seq, was_mk);
  sl_metric_add(M->m_rollbacks, 1);
  char err[256];
  const char *argv[] = {"EVAL", sl_claim_release_lua, "1", SL__VIEW_MARKER, marker};
  redisReply *rep = cmd(M, 5, argv, err, sizeof err);
  if (rep) freeReplyObject(rep);
}

/* the built-in states' names: the label of a status without one */
static const char *state_names[] = {NULL,      "awaiting_upload", "queued", "transcribing",
                                    "grading", "done",            "failed"};

static const char *label_of(const Sluice__V1__QuestionStatus *st) {
  if (st->state == SLUICE__V1__QUESTION_STATE__DONE) return "done";
  if (st->state == SLUICE__V1__QUESTION_STATE__FAILED) return "failed";
  if (st->progress && st->progress[0]) return st->progress;
  return st->state >= 0 && st->state < (int)(sizeof state_names / sizeof state_names[0])
             ? state_names[st->state]
             : NULL;
}

/* Runs the monotonic apply. Returns 1 written, 0 not, <0 on Redis error. */
static int apply(mat *M, const rd_kafka_message_t *m, const char *sid, unsigned qno, int rank,
                 const char *json, int64_t accepted_ms, char *err, size_t errlen) {
  char hkey[96], q[16], r[16], ttl[32], member[96], acc[32], tp[200], off[32];
  snprintf(tp, sizeof tp, "%s:%d", m && m->rkt ? rd_kafka_topic_name(m->rkt) : "-",
           m ? (int)m->partition : -1);
  snprintf(off, sizeof off, "%lld", m ? (long long)m->offset : -1LL);
  snprintf(hkey, sizeof hkey, "sl:sub:%s", sid);
  snprintf(q, sizeof q, "%u", qno);
  snprintf(r, sizeof r, "%d", rank);
  snprintf(ttl, sizeof ttl, "%lld", (long long)M->mc->ttl_s);
  snprintf(member, sizeof member, "%s/%u", sid, qno);
  snprintf(acc, sizeof acc, "%lld", (long long)accepted_ms);
  const char(*was)[16] = M->legacy_rank;
  const char *argv[] = {"EVAL",  apply_lua, "5",    hkey,   SL__PENDING, VIEW_SEQ,
                        SL__VIEW_MARKER, VIEW_APPLIED, q, r, json, ttl, member, acc, tp, off,
                        was[0], was[1], was[2], was[3], was[4]};
  redisReply *rep = cmd(M, 21, argv, err, errlen);
  if (!rep) return SL_EREDIS;
  int rc = SL_EREDIS;
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
      rep->element[0]->type == REDIS_REPLY_INTEGER &&
      rep->element[1]->type == REDIS_REPLY_INTEGER) {
    rc = (int)rep->element[0]->integer;
    const redisReply *mk = rep->elements > 2 ? rep->element[2] : NULL;
    went_back(M, rep->element[1]->integer,
              mk && mk->type == REDIS_REPLY_STRING ? mk->str : NULL);
  } else if (rep->type == REDIS_REPLY_ERROR) {
    snprintf(err, errlen, "redis: %s", rep->str);
  } else {
    snprintf(err, errlen, "redis: unexpected reply to the apply script");
  }
  freeReplyObject(rep);
  return rc;
}

static void on_submission(mat *M, const rd_kafka_message_t *m, sl_result *res) {
  Sluice__V1__SubmissionCreated *sc =
      sluice__v1__submission_created__unpack(NULL, m->len, m->payload);
  if (!sc || !sc->submission_id[0] || sc->n_questions == 0) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "not a valid SubmissionCreated");
    if (sc) sluice__v1__submission_created__free_unpacked(sc, NULL);
    return;
  }
  char hkey[96], err[256], acc[32], n[16], ttl[32];
  snprintf(hkey, sizeof hkey, "sl:sub:%s", sc->submission_id);
  snprintf(acc, sizeof acc, "%lld", (long long)sc->accepted_at_ms);
  snprintf(n, sizeof n, "%zu", sc->n_questions);
  snprintf(ttl, sizeof ttl, "%lld", (long long)M->mc->ttl_s);
  /* HSET meta + specs in one command */
  size_t argc = 0, cap = 10 + 2 * sc->n_questions;
  const char **argv = calloc(cap, sizeof *argv);
  char **owned = calloc(2 * sc->n_questions + 1, sizeof *owned);
  if (!argv || !owned) {
    free(argv);
    free(owned);
    sluice__v1__submission_created__free_unpacked(sc, NULL);
    sl_result_set(res, SL_OUTCOME_RETRY, "internal", "out of memory");
    return;
  }
  argv[argc++] = "HSET";
  argv[argc++] = hkey;
  argv[argc++] = "accepted_at_ms";
  argv[argc++] = acc;
  argv[argc++] = "n";
  argv[argc++] = n;
  argv[argc++] = "token";
  argv[argc++] = sc->results_token_sha256;
  argv[argc++] = "user";
  argv[argc++] = sc->user_id;
  size_t nown = 0;
  for (size_t i = 0; i < sc->n_questions; i++) {
    const Sluice__V1__QuestionSpec *q = sc->questions[i];
    json_t *j = json_pack("{s:s,s:I,s:s,s:s}", "content_type", q->content_type, "size",
                          (json_int_t)q->size, "prompt", q->prompt, "key", q->object_key);
    char field[32];
    snprintf(field, sizeof field, "spec%u", q->no);
    owned[nown++] = strdup(field);
    owned[nown++] = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    argv[argc++] = owned[nown - 2];
    argv[argc++] = owned[nown - 1] ? owned[nown - 1] : "{}";
  }
  redisReply *rep = cmd(M, (int)argc, argv, err, sizeof err);
  int ok = rep && rep->type != REDIS_REPLY_ERROR;
  if (rep && !ok) snprintf(err, sizeof err, "redis: %s", rep->str);
  if (rep) freeReplyObject(rep);
  const char *first = sl_pipeline_progress_at(M->cc->pipeline, 0);
  for (size_t i = 0; ok && i < sc->n_questions; i++) {
    char view[256];
    snprintf(view, sizeof view, "{\"no\":%u,\"state\":\"%s\",\"updated_at_ms\":%lld}",
             sc->questions[i]->no, first ? first : "awaiting_upload",
             (long long)sc->accepted_at_ms);
    ok = apply(M, m, sc->submission_id, sc->questions[i]->no, 1, view,
               sc->accepted_at_ms, err, sizeof err) >= 0;
  }
  for (size_t i = 0; i < nown; i++) free(owned[i]);
  free(owned);
  free(argv);
  if (!ok)
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", err);
  else
    sl_log(SL_LOG_INFO, sc->submission_id, "submission recorded (%zu questions)",
           sc->n_questions);
  sluice__v1__submission_created__free_unpacked(sc, NULL);
}

static void on_status(mat *M, const rd_kafka_message_t *m, sl_result *res) {
  Sluice__V1__QuestionStatus *st =
      sluice__v1__question_status__unpack(NULL, m->len, m->payload);
  const char *label = st ? label_of(st) : NULL;
  if (!st || !st->submission_id[0] || !st->question_no || !label) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "not a valid QuestionStatus");
    if (st) sluice__v1__question_status__free_unpacked(st, NULL);
    return;
  }
  int rank = sl_pipeline_progress_rank(M->cc->pipeline, label);
  if (!rank) {
    sl_result_set(res, SL_OUTCOME_FAIL, "unknown_progress",
                  "status from stage \"%.64s\" says \"%.64s\", which no stage of the pipeline "
                  "has as its progress (`sluice pipeline`)", st->stage, label);
    sluice__v1__question_status__free_unpacked(st, NULL);
    return;
  }
  json_t *j = json_pack("{s:i,s:s,s:I,s:s}", "no", (int)st->question_no, "state", label,
                        "updated_at_ms", (json_int_t)st->at_ms, "stage", st->stage);
  if ((st->transcript && st->transcript[0]) || st->state == SLUICE__V1__QUESTION_STATE__DONE) {
    json_object_set_new(j, "transcript", json_string(st->transcript ? st->transcript : ""));
    json_object_set_new(j, "duration_s", json_real(st->duration_s));
  }
  if (st->grade) {
    const Sluice__V1__GradeResult *g = st->grade;
    json_object_set_new(
        j, "grade",
        json_pack("{s:f,s:s,s:s,s:f,s:f,s:f,s:f,s:s}", "score", g->score, "level", g->level,
                  "feedback", g->feedback, "words_per_minute", g->words_per_minute,
                  "lexical_variety", g->lexical_variety, "filler_rate", g->filler_rate,
                  "relevance", g->relevance, "engine", g->engine));
    json_t *gj = json_object_get(j, "grade");
    if (gj && g->n_criteria) {
      json_t *c = json_array();
      for (size_t i = 0; i < g->n_criteria; i++)
        json_array_append_new(c, json_pack("{s:s,s:f,s:s}", "name", g->criteria[i]->name,
                                           "score", g->criteria[i]->score, "comment",
                                           g->criteria[i]->comment));
      json_object_set_new(gj, "criteria", c);
    }
  }
  if (st->state == SLUICE__V1__QUESTION_STATE__FAILED)
    json_object_set_new(j, "error", json_pack("{s:s,s:s}", "class", st->error_class,
                                              "message", st->error_message));
  if (st->accepted_at_ms > 0 && (st->state == SLUICE__V1__QUESTION_STATE__DONE ||
                                 st->state == SLUICE__V1__QUESTION_STATE__FAILED))
    json_object_set_new(j, "accept_to_done_ms",
                        json_integer((json_int_t)(st->at_ms - st->accepted_at_ms)));
  char *view = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  char err[256] = "", key[96];
  snprintf(key, sizeof key, "%s/%u", st->submission_id, st->question_no);
  int rc = view ? apply(M, m, st->submission_id, st->question_no, rank, view, st->accepted_at_ms, err, sizeof err)
                : SL_ENOMEM;
  if (rc < 0)
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "%s", err[0] ? err : sl_strerror(rc));
  /* observed once per question and final state: only when this event moved
   * the view (a redelivery or late duplicate is "not newer") */
  if (rc == 1 && !replaying && st->accepted_at_ms > 0 && st->at_ms >= st->accepted_at_ms &&
      (st->state == SLUICE__V1__QUESTION_STATE__DONE ||
       st->state == SLUICE__V1__QUESTION_STATE__FAILED))
    sl_histogram_observe(st->state == SLUICE__V1__QUESTION_STATE__DONE ? M->h_done : M->h_failed,
                         (double)(st->at_ms - st->accepted_at_ms) / 1000.0);
  if (rc >= 0)
    sl_log(SL_LOG_DEBUG, key, "%s %s", label, rc ? "applied" : "ignored (not newer)");
  free(view);
  sluice__v1__question_status__free_unpacked(st, NULL);
}

/* KEYS[1] the offsets applied per partition; ARGV "<topic>:<partition>",
 * offset: raised to offset if lower. */
static const char record_lua[] =
    "if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') then\n"
    "  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  mat *M = ud;
  (void)out;
  char origin[160]; /* a retry copy comes back on materialize.retry.*: its origin decides */
  if (strcmp(sl_message_origin(m, origin, sizeof origin), M->cc->topic_submissions) == 0)
    on_submission(M, m, res);
  else
    on_status(M, m, res);
  if (res->outcome == SL_OUTCOME_FAIL && m->rkt) {
    /* a message that is a dead letter (not a QuestionStatus, ...) is done
     * with too: recorded as applied, or a starting materialize would find
     * the partition's committed offset past what Redis holds and rebuild
     * the view for nothing (behind_committed()) */
    char tp[200], off[32], err[256];
    snprintf(tp, sizeof tp, "%s:%d", rd_kafka_topic_name(m->rkt), (int)m->partition);
    snprintf(off, sizeof off, "%lld", (long long)m->offset);
    const char *argv[] = {"EVAL", record_lua, "1", VIEW_APPLIED, tp, off};
    redisReply *rep = cmd(M, 6, argv, err, sizeof err);
    if (rep) freeReplyObject(rep);
  }
}

/* ---- rebuilding a lost view ---------------------------------------------------- */

#define MARKER SL__VIEW_MARKER
/* One replica rebuilds at a time: it holds this lock (its owner id, a lease
 * renewed while messages are applied); the others wait for the marker. A
 * rebuilder that dies lets its lease lapse and another one starts over. */
#define REBUILD_LOCK "sl:lock:view-rebuild"
#define REBUILD_LEASE_MS 30000
#define REBUILD_STALL_MS 60000 /* no message applied this long: give up, retry */

static void lock_renew(mat *M) {
  char err[256], lease[32];
  snprintf(lease, sizeof lease, "%d", REBUILD_LEASE_MS);
  const char *argv[] = {"EVAL", sl_claim_renew_lua, "1", REBUILD_LOCK, lease, M->owner};
  redisReply *rep = sl_redis_argv(M->watch_r, 6, argv, NULL, err, sizeof err);
  if (rep) freeReplyObject(rep);
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Replays one topic from its beginning to the end it has now, with rk (a
 * group-less consumer). Returns 0 when everything up to that end was
 * applied; *applied counts what was. */
static int replay_topic(mat *M, rd_kafka_t *rk, const char *topic, long *applied) {
  int rc = 0;
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(16);
  const struct rd_kafka_metadata *md = NULL;
  rd_kafka_topic_t *kt = rd_kafka_topic_new(rk, topic, NULL);
  if (!kt || rd_kafka_metadata(rk, 0, kt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md->topic_cnt != 1 || md->topics[0].err) {
    sl_log(SL_LOG_ERROR, NULL, "rebuild: no metadata for %s", topic);
    rc = SL_EKAFKA;
  } else {
    for (int p = 0; p < md->topics[0].partition_cnt; p++)
      rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[p].id)->offset =
          RD_KAFKA_OFFSET_BEGINNING;
  }
  if (md) rd_kafka_metadata_destroy(md);
  if (kt) rd_kafka_topic_destroy(kt);
  int64_t *high = calloc((size_t)parts->cnt + 1, sizeof *high);
  int open = 0;
  for (int i = 0; rc == 0 && high && i < parts->cnt; i++) {
    int64_t lo = 0, hi = 0;
    if (rd_kafka_query_watermark_offsets(rk, topic, parts->elems[i].partition, &lo, &hi,
                                         10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rc = SL_EKAFKA;
      break;
    }
    high[i] = hi;
    if (hi > lo) open++;
  }
  if (rc == 0 && (!high || rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR))
    rc = SL_EKAFKA;
  /* bounded by progress, not by size: it goes on while messages come */
  int64_t deadline = sl_now_ms() + REBUILD_STALL_MS, renewed = sl_now_ms();
  while (rc == 0 && open > 0 && !atomic_load(&M->stop_watch) && sl_now_ms() < deadline) {
    if (sl_now_ms() - renewed >= REBUILD_LEASE_MS / 3) {
      lock_renew(M);
      renewed = sl_now_ms();
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
    if (!m) continue;
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        sl_log(SL_LOG_WARN, NULL, "rebuild: %s", rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      continue;
    }
    int idx = -1;
    for (int i = 0; i < parts->cnt; i++)
      if (parts->elems[i].partition == m->partition) idx = i;
    if (idx >= 0 && m->offset < high[idx]) {
      sl_outbox ob = {0};
      for (int attempt = 0;; attempt++) { /* Redis may still be coming back */
        sl_result res = {0};
        process(M, m, &ob, &res);
        if (res.outcome != SL_OUTCOME_RETRY || attempt == 50 || atomic_load(&M->stop_watch))
          break;
        sleep_ms(200);
      }
      (*applied)++;
      deadline = sl_now_ms() + REBUILD_STALL_MS;
      if (m->offset + 1 >= high[idx]) open--;
    }
    rd_kafka_message_destroy(m);
  }
  if (rc == 0 && open > 0) rc = SL_ETIMEDOUT;
  rd_kafka_assign(rk, NULL);
  free(high);
  rd_kafka_topic_partition_list_destroy(parts);
  return rc;
}

/* Replays `submissions`, then `results`, each from the beginning to the end
 * it has now: every question exists (awaiting_upload) before its statuses
 * land, as it did live. Returns 0 when everything up to those ends was
 * applied. */
static int rebuild(mat *M) {
  char err[512];
  replaying = 1;
  rd_kafka_t *rk = NULL;
  int rc = sl_kafka_consumer_new(&rk, M->cc->kafka_brokers, "sluice-materialize-rebuild",
                                 "sluice-materialize-rebuild", NULL, err, sizeof err, NULL, NULL,
                                 NULL, NULL);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "rebuild: %s", err);
    return rc;
  }
  long applied = 0;
  rc = replay_topic(M, rk, M->cc->topic_submissions, &applied);
  if (rc == 0) rc = replay_topic(M, rk, M->cc->topic_results, &applied);
  sl_log(rc ? SL_LOG_ERROR : SL_LOG_INFO, NULL, "rebuild: %ld message(s) replayed%s", applied,
         rc ? " before giving up" : "; the view is complete");
  sl_metric_add(M->m_rebuilt, (uint64_t)applied);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return rc;
}

/* At start: is Redis behind what the group committed? A view restored from
 * an older snapshot while no materialize ran (all restarted together) is
 * not noticed by went_back(): nothing in this fresh process saw the newer
 * writes. But Kafka remembers them: for every partition of submissions and
 * results the group committed offset c on, every message below c was
 * applied, so the highest offset applied (VIEW_APPLIED) is at least c - 1
 * unless writes were lost. Behind: the marker is dropped (the view is
 * rebuilt). Nothing to compare (no marker, no offsets recorded yet: a new
 * Redis, or the first start of this version): nothing is done. Runs before
 * the stage consumes, so the live consumer cannot record newer offsets
 * first. Returns 1 when behind. */
static int behind_committed(mat *M) {
  char err[512];
  const char *get[] = {"GET", SL__VIEW_MARKER};
  redisReply *mk = cmd(M, 2, get, err, sizeof err);
  const char *hl[] = {"HLEN", VIEW_APPLIED};
  redisReply *n = cmd(M, 2, hl, err, sizeof err);
  int comparable = mk && mk->type == REDIS_REPLY_STRING && n &&
                   n->type == REDIS_REPLY_INTEGER && n->integer > 0;
  if (n) freeReplyObject(n);
  if (!comparable) {
    if (mk) freeReplyObject(mk);
    return 0;
  }
  rd_kafka_t *rk = NULL;
  /* the group the stage runtime runs as (sl_pipeline_group); it only reads
   * committed offsets, it never joins */
  char group[64];
  sl_pipeline_group(group, sizeof group, "materialize", 0);
  if (sl_kafka_consumer_new(&rk, M->cc->kafka_brokers, group,
                            "sluice-materialize-check", NULL,
                            err, sizeof err, NULL, NULL, NULL, NULL) != 0) {
    sl_log(SL_LOG_WARN, NULL, "start check of the view: %s (skipped)", err);
    freeReplyObject(mk);
    return 0;
  }
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(32);
  const char *topics[] = {M->cc->topic_submissions, M->cc->topic_results};
  for (int t = 0; t < 2; t++) {
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *kt = rd_kafka_topic_new(rk, topics[t], NULL);
    if (kt && rd_kafka_metadata(rk, 0, kt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err)
      for (int p = 0; p < md->topics[0].partition_cnt; p++)
        rd_kafka_topic_partition_list_add(l, topics[t], md->topics[0].partitions[p].id);
    if (md) rd_kafka_metadata_destroy(md);
    if (kt) rd_kafka_topic_destroy(kt);
  }
  int behind = 0;
  rd_kafka_resp_err_t e = l->cnt ? rd_kafka_committed(rk, l, 10000) : RD_KAFKA_RESP_ERR__FAIL;
  if (e)
    sl_log(SL_LOG_WARN, NULL, "start check of the view: committed offsets: %s (skipped)",
           rd_kafka_err2str(e));
  for (int i = 0; !e && !behind && i < l->cnt; i++) {
    const rd_kafka_topic_partition_t *tp = &l->elems[i];
    if (tp->err || tp->offset < 1) continue; /* nothing committed there */
    char field[200];
    snprintf(field, sizeof field, "%s:%d", tp->topic, (int)tp->partition);
    const char *hg[] = {"HGET", VIEW_APPLIED, field};
    redisReply *a = cmd(M, 3, hg, err, sizeof err);
    if (!a) break; /* Redis unavailable: the watcher checks the marker anyway */
    long long applied = a->type == REDIS_REPLY_STRING ? strtoll(a->str, NULL, 10) : -1;
    freeReplyObject(a);
    if (applied < tp->offset - 1) {
      behind = 1;
      sl_log(SL_LOG_ERROR, NULL,
             "Redis is behind the group's committed offsets (%s: applied up to %lld, committed "
             "%lld): it lost writes (an older snapshot, a lagging replica) while no "
             "materialize ran; rebuilding the view",
             field, applied, (long long)tp->offset);
    }
  }
  if (behind) {
    sl_metric_add(M->m_rollbacks, 1);
    const char *del[] = {"EVAL", sl_claim_release_lua, "1", SL__VIEW_MARKER, mk->str};
    redisReply *rep = cmd(M, 5, del, err, sizeof err);
    if (rep) freeReplyObject(rep);
  }
  freeReplyObject(mk);
  rd_kafka_topic_partition_list_destroy(l);
  rd_kafka_destroy(rk);
  return behind;
}

static void *watch(void *arg) {
  mat *M = arg;
  sl_redis *r = NULL;
  if (sl_redis_new(&r, M->cc->redis_url) != 0) return NULL;
  M->watch_r = r;
  while (!atomic_load(&M->stop_watch)) {
    char err[256];
    const char *get[] = {"MGET", MARKER, VIEW_SEQ};
    redisReply *rep = sl_redis_argv(r, 3, get, NULL, err, sizeof err);
    int missing = 0;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
      const redisReply *mk = rep->element[0], *seq = rep->element[1];
      missing = mk->type != REDIS_REPLY_STRING;
      if (!missing && seq->type == REDIS_REPLY_STRING) /* an idle view is checked too */
        went_back(M, strtoll(seq->str, NULL, 10), mk->str);
    }
    if (rep) freeReplyObject(rep);
    int locked = 0;
    if (missing) {
      char lease[32];
      snprintf(lease, sizeof lease, "%d", REBUILD_LEASE_MS);
      const char *take[] = {"SET", REBUILD_LOCK, M->owner, "NX", "PX", lease};
      rep = sl_redis_argv(r, 6, take, NULL, err, sizeof err);
      locked = rep && rep->type == REDIS_REPLY_STATUS;
      if (rep) freeReplyObject(rep);
      if (!locked)
        sl_log(SL_LOG_DEBUG, NULL, "the view marker is missing; another replica rebuilds");
    }
    if (locked) {
      sl_log(SL_LOG_WARN, NULL, "the view marker %s is missing (a new or emptied Redis): "
                                "rebuilding the view from the topics", MARKER);
      sl_metric_add(M->m_rebuilds, 1);
      /* the marker's value is Redis's own clock (ms) when the rebuild
       * started: a later rebuild always sets a larger one (went_back()) */
      char epoch[32];
      const char *tm[] = {"TIME"};
      rep = sl_redis_argv(r, 1, tm, NULL, err, sizeof err);
      if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
          rep->element[0]->type == REDIS_REPLY_STRING && rep->element[1]->type == REDIS_REPLY_STRING)
        snprintf(epoch, sizeof epoch, "%lld",
                 strtoll(rep->element[0]->str, NULL, 10) * 1000 +
                     strtoll(rep->element[1]->str, NULL, 10) / 1000);
      else
        snprintf(epoch, sizeof epoch, "%lld", (long long)sl_now_ms());
      if (rep) freeReplyObject(rep);
      if (rebuild(M) == 0) {
        /* set only now: a crash mid-rebuild rebuilds again on restart */
        const char *set[] = {"SET", MARKER, epoch};
        rep = sl_redis_argv(r, 3, set, NULL, err, sizeof err);
        if (rep) freeReplyObject(rep);
      }
      const char *rel[] = {"EVAL", sl_claim_release_lua, "1", REBUILD_LOCK, M->owner};
      rep = sl_redis_argv(r, 5, rel, NULL, err, sizeof err);
      if (rep) freeReplyObject(rep);
    }
    for (int64_t t = 0; t < M->mc->watch_interval_ms && !atomic_load(&M->stop_watch); t += 100)
      sleep_ms(100);
  }
  sl_redis_free(r);
  return NULL;
}

int sl__materialize_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  mat_conf mc = {0};
  sl_conf_bind own[] = {{sl__materialize_table, sl__materialize_table_len, &mc}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(argc, argv, "materialize",
                           "Writes question states and results into Redis.", &cc, own, 1,
                           "127.0.0.1:9184", &admin);
  if (rc) return rc;
  const char *h_help = "Seconds from a submission's acceptance to its question's final state";
  mat M = {.cc = &cc, .mc = &mc};
  sl__owner_id(M.owner, sizeof M.owner);
  static const char *const legacy[] = {"queued", "transcribing", "grading", "failed", "done"};
  for (size_t i = 0; i < 5; i++) {
    int now = sl_pipeline_progress_rank(cc.pipeline, legacy[i]);
    /* a label the pipeline no longer has: anything is newer */
    snprintf(M.legacy_rank[i], sizeof M.legacy_rank[i], "%d", now ? now : 1);
  }
  M.h_done = sl_metrics_histogram("sluice_accept_to_done_seconds", "outcome=\"done\"", h_help,
                                  sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
  M.h_failed = sl_metrics_histogram("sluice_accept_to_done_seconds", "outcome=\"failed\"",
                                    h_help, sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
  M.m_rebuilds = sl_metrics_counter("sluice_view_rebuilds_total", NULL,
                                    "Times materialize found the Redis view gone and replayed the topics");
  M.m_rebuilt = sl_metrics_counter("sluice_view_rebuild_messages_total", NULL,
                                   "Messages replayed into Redis by view rebuilds");
  M.m_rollbacks = sl_metrics_counter(
      "sluice_view_rollbacks_total", NULL,
      "Times materialize found Redis behind writes it had seen (an older snapshot, a lagging "
      "replica) and dropped the view marker to rebuild");

  rc = sl_redis_tls_new(&M.redis, cc.redis_url);
  if (rc == 0) behind_committed(&M); /* before anything is consumed */
  pthread_t watcher;
  int watching = 0;
  if (rc == 0 && mc.watch_interval_ms > 0)
    watching = pthread_create(&watcher, NULL, watch, &M) == 0;
  if (rc == 0) {
    const char *topics[] = {cc.topic_results, cc.topic_submissions};
    sl_stage_opts o = {.stage = "materialize", .common = &cc, .topics = topics, .ntopics = 2,
                       .process = process, .ud = &M, .admin = admin,
                       .on_dead_letter = sl__dead_letter_status};
    rc = sl_stage_run(&o, &sl__stop);
  }
  atomic_store(&M.stop_watch, 1);
  if (watching) pthread_join(watcher, NULL);
  sl_tls_free(M.redis);
  sl__stage_finish(&cc, own, 1, admin);
  return rc ? 1 : 0;
}
