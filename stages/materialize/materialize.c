/* SPDX-License-Identifier: Apache-2.0 */
/*
 * materialize.c — `sluice materialize`: Kafka -> the Redis view clients poll.
 *
 * Redis layout, one hash per submission, key "sl:sub:<sid>":
 *   accepted_at_ms, n, user (who created it), token (the results token hash
 *   bound to sid and user, see stages/lib/auth.h), callback (the
 *   submission's callback_url, only when it named one: notify reads it),
 *   apikey (the digest of the API key that created it, when one did: notify
 *   signs with that key's webhook secret)
 *   spec<no>  JSON {content_type,size,prompt,key,tp} — what presign issued
 *             (tp: the question's trace context, when presign gave one)
 *   q<no>     JSON view of the question (state, transcript, grade, error)
 *   r<no>     rank of the state stored in q<no>
 *   v<no>, v  the view's write sequence when q<no> last changed, and when
 *             any question last did: the submission's version (apply_lua.h)
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
 * very first start — it replays `submissions`, then `results`, each from
 * the beginning up to its current end with a group-less consumer, through
 * the same monotonic apply, and then sets it. The live consumer keeps
 * running meanwhile; both paths apply the same monotonic writes, so the
 * result is the view a full replay gives. Topic retention bounds what can
 * be rebuilt. One replica rebuilds at a time (the lease REBUILD_LOCK,
 * renewed while it works); a message is applied before the next, however
 * long Redis takes to answer, and a rebuild gives up only when no message
 * was applied for REBUILD_STALL_MS, so a large view is not cut off by a
 * fixed deadline. Redis may fail again mid-rebuild: the marker is set only
 * if Redis kept every write of the rebuild (finish_lua: the lease is still
 * its own, the write sequence above all it saw), else the view is rebuilt
 * again.
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
 *
 * The live stage applies on its loop (an async processor): the commands of
 * every message in flight go out pipelined on the stage's one asynchronous
 * Redis connection, scripts by their SHA-1, instead of one blocking round
 * trip per message on a worker thread (measured by bench/cost: the round
 * trips, not the script, were most of its CPU). The rebuild thread runs the
 * same steps blocking (work_next, work_reply).
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/process.h"
#include "lib/stage.h"
#include "lib/view.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice.pb-c.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_claim.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_jsonw.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_pbseal.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_tls.h"

#include "apply_lua.h"

typedef struct {
  int64_t ttl_s;
  int64_t watch_interval_ms;
  int64_t feed_len;
} mat_conf;

static const sl_conf_entry materialize_table[] = {
    {"materialize.ttl_s", SL_CONF_INT, "604800", offsetof(mat_conf, ttl_s),
     "how long a submission's view stays in Redis after its last change", 0},
    {"materialize.watch_interval_ms", SL_CONF_INT, "1000", offsetof(mat_conf, watch_interval_ms),
     "how often the view marker is checked; a missing marker (Redis lost its data) "
     "rebuilds the view from the topics",
     0},
    {"materialize.feed_len", SL_CONF_INT, "100000", offsetof(mat_conf, feed_len),
     "changes kept (about) in the Redis stream " SL__VIEW_FEED " that results reads for "
     "server-sent events; 0: no feed (no events)",
     0},
};
static const size_t materialize_table_len = sizeof materialize_table / sizeof materialize_table[0];

/* A writer's name in its count's key (lib/view.h, SL__VIEW_WRITER): the
 * process (sl__owner_id: unique, salted) and its thread's serial */
#define WRITER_ID_MAX (SL__OWNER_MAX + 12)
#define WRITER_KEY_MAX (SL__VIEW_KEY_MAX + WRITER_ID_MAX)

/* What one writer counted of its own applies in a bucket: the count its last
 * apply returned, under which marker, and when (the key expires with the
 * view's TTL after it). */
typedef struct writer_seen {
  long long marker, n;
  int64_t at_ms;
} writer_seen;

typedef struct {
  sl_common_conf *cc;
  mat_conf *mc;
  sl_tls *redis;                   /* one sl_redis per worker thread */
  sl_histogram *h_done, *h_failed; /* accept-to-done latency by outcome */
  atomic_int stop_watch;
  sl_metric *m_rebuilds, *m_rebuilt, *m_rollbacks, *m_repaired;
  sl_redis *watch_r;         /* the watcher thread's connection (rebuild lock) */
  char owner[SL__OWNER_MAX]; /* this process in the rebuild lock */
  /* today's ranks of what an older materialize stored as 2..6 (queued,
   * transcribing, grading, failed, done): the apply script's ARGV 9..13 */
  char legacy_rank[5][16];
  sl_redis_script apply, hset, record, release, raise, finish; /* by SHA-1 (sl_redis_script) */
  atomic_int writers; /* threads that named themselves a writer (writer_id()) */
  /* what the live loop's own count says per bucket (own_went_back()), for
   * the watcher to compare with Redis in a bucket the loop writes no more */
  pthread_mutex_t live_mu;
  char live_writer[WRITER_ID_MAX]; /* the loop's writer name; "" before its first apply */
  struct writer_seen *live;        /* [SL_RKEY_MAX_BUCKETS] */
} mat;

/* Set on the rebuild thread: replayed events were observed when they first
 * happened, so they do not count again in the latency histogram. */
static _Thread_local int replaying;
/* The rebuild thread's own writes: the highest view sequence its applies
 * returned (it starts at the base the rebuild raised the sequence to), and
 * whether one returned a sequence that did not grow — Redis lost writes of
 * this rebuild (restarted from a snapshot older than them, failed over), so
 * it cannot mark the view complete (rebuild(), finish_lua). */
static _Thread_local long long rebuild_seq[SL_RKEY_MAX_BUCKETS]; /* per bucket */
static _Thread_local int rebuild_lost;
/* The buckets a rebuild repairs (1: lost): a replayed message of another
 * bucket's submission is skipped (work_begin); NULL: every bucket. */
static _Thread_local const unsigned char *rebuild_only;
/* The question states a rebuild wrote back (its applies that changed the
 * view): what Redis had lost */
static _Thread_local long rebuild_written;

static redisReply *cmd(mat *M, int argc, const char **argv, char *err, size_t errlen) {
  sl_redis *r = sl_tls_get(M->redis, err, errlen);
  return r ? sl_redis_argv(r, argc, argv, NULL, err, errlen) : NULL;
}

/* Every apply increments this; a Redis that answers with a lower value than
 * one this process saw under the same marker lost writes. */
#define VIEW_SEQ SL__VIEW_SEQ
/* "<topic>:<partition>" -> the highest offset applied from it (per bucket:
 * of its submissions' messages; a dead letter's in bucket 0's) */
#define VIEW_APPLIED SL__VIEW_APPLIED

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
 * one after the other on its one connection (the live stage's loop: every
 * apply pipelined on the stage's asynchronous connection; the rebuild and
 * watcher threads: blocking ones), so what it reads can only grow, while
 * two threads' answers may arrive in either order. The watcher thread reads
 * the same two keys every tick, so an idle view is checked too. Per bucket
 * of the keyspace (lib/view.h): each has its marker and sequence. */
static _Thread_local sl__view_seen view_seen[SL_RKEY_MAX_BUCKETS];
/* This thread's own applies per bucket (apply_lua.h, KEYS[7]) and its name */
static _Thread_local writer_seen own_seen[SL_RKEY_MAX_BUCKETS];
static _Thread_local char writer_name[WRITER_ID_MAX];

static const char *writer_id(mat *M) {
  if (!writer_name[0])
    snprintf(writer_name, sizeof writer_name, "%s.%d", M->owner, atomic_fetch_add(&M->writers, 1));
  return writer_name;
}

/* Whether a count n is too old to compare: its key may have expired (the
 * view's TTL after the writer's last apply; half of it, to be safe) */
static int own_stale(const mat *M, const writer_seen *s, int64_t now) {
  return now - s->at_ms > M->mc->ttl_s * 500;
}

/* Whether the answer (sequence seq under marker) means Redis lost writes
 * this thread saw; then the caller deletes the marker (if it is still the
 * one seen), which rebuilds the view. */
static int went_back(mat *M, int bucket, long long seq, const char *marker) {
  if (!marker) return 0; /* the view is missing already: the watcher rebuilds */
  long long mk = strtoll(marker, NULL, 10);
  sl__view_seen *seen = &view_seen[bucket];
  if (!sl__view_went_back(seen, mk, seq)) return 0;
  long long was_seq = seen->seq, was_mk = seen->marker;
  *seen = (sl__view_seen){0, 0};
  if (sl_rkey_bucketed())
    sl_log(SL_LOG_ERROR, NULL,
           "Redis went back in time in bucket %d of the view (sequence %lld under marker %lld, "
           "%lld under %lld seen before): it lost writes (a failover to a lagging replica, an "
           "older snapshot); rebuilding that bucket",
           bucket, seq, mk, was_seq, was_mk);
  else
    sl_log(SL_LOG_ERROR, NULL,
           "Redis went back in time (view sequence %lld under marker %lld, %lld under %lld seen "
           "before): it lost writes (an older snapshot, a lagging replica); rebuilding the view",
           seq, mk, was_seq, was_mk);
  sl_metric_add(M->m_rollbacks, 1);
  return 1;
}

static void lost_own(mat *M, int bucket, long long n, long long was, const char *who) {
  sl_log(SL_LOG_ERROR, NULL,
         "Redis lost writes in bucket %d of the view: %s own count of its applies there is %lld, "
         "it counted %lld (a failover to a lagging replica, an older snapshot; the view's "
         "sequence was refilled by later applies); rebuilding that bucket",
         bucket, who, n, was);
  sl_metric_add(M->m_rollbacks, 1);
  view_seen[bucket] = (sl__view_seen){0, 0};
}

/* Whether this thread's apply, which returned its own count n under marker,
 * shows Redis lost writes of this thread's: n not above the last count
 * under the same marker (a newer marker: a rebuild since, counted afresh).
 * Catches what went_back() cannot: one lost apply whose sequence the next
 * apply returns again. The live loop publishes what it counted for the
 * watcher (watch_buckets()). known: went_back() said so already (not
 * logged nor counted twice). */
static int own_went_back(mat *M, int bucket, long long n, const char *marker, int live, int known) {
  if (!marker) return 0; /* the view is missing already: the watcher rebuilds */
  long long mk = strtoll(marker, NULL, 10);
  writer_seen *s = &own_seen[bucket];
  int64_t now = sl_now_ms();
  int lost = s->n > 0 && s->marker == mk && !own_stale(M, s, now) && n <= s->n;
  if (lost && !known) lost_own(M, bucket, n, s->n, "this thread's");
  *s = (writer_seen){mk, n, now};
  if (live && M->live) {
    pthread_mutex_lock(&M->live_mu);
    if (!M->live_writer[0]) snprintf(M->live_writer, sizeof M->live_writer, "%s", writer_name);
    M->live[bucket] = *s;
    pthread_mutex_unlock(&M->live_mu);
  }
  return lost;
}

/* Deletes bucket's view marker if it is still `marker` (blocking). */
static void drop_marker(mat *M, int bucket, const char *marker) {
  char err[256], key[SL__VIEW_KEY_MAX];
  sl__view_key(key, sizeof key, SL__VIEW_MARKER, bucket);
  const char *argv[] = {key, marker};
  sl_redis *r = sl_tls_get(M->redis, err, sizeof err);
  redisReply *rep = r ? sl_redis_eval(r, &M->release, 1, 2, argv, NULL, err, sizeof err) : NULL;
  if (rep) freeReplyObject(rep);
}

/* the built-in states' names: the label of a status without one */
static const char *state_names[] = {NULL,   "awaiting_upload", "queued", "transcribing", "grading",
                                    "done", "failed"};

static const char *label_of(const Sluice__V1__QuestionStatus *st) {
  if (st->state == SLUICE__V1__QUESTION_STATE__DONE) return "done";
  if (st->state == SLUICE__V1__QUESTION_STATE__FAILED) return "failed";
  if (st->progress && st->progress[0]) return st->progress;
  return st->state >= 0 && st->state < (int)(sizeof state_names / sizeof state_names[0])
             ? state_names[st->state]
             : NULL;
}

/* The view JSON of a status (malloc'd; NULL: out of memory), written as it
 * is built (sl_jsonw): jansson's pack and dumps were 42% of materialize's
 * CPU per apply (bench/cost). Keys in this order; test_status_view reads it
 * back with jansson. */
char *sl__status_view(const Sluice__V1__QuestionStatus *st, const char *label) {
  sl_jsonw w = {.initial = 512};
  sl_jsonw_kint(&w, "{\"no\":", (long long)st->question_no);
  sl_jsonw_kstr(&w, ",\"state\":", label);
  sl_jsonw_kint(&w, ",\"updated_at_ms\":", (long long)st->at_ms);
  sl_jsonw_kstr(&w, ",\"stage\":", st->stage);
  if ((st->transcript && st->transcript[0]) || st->state == SLUICE__V1__QUESTION_STATE__DONE) {
    sl_jsonw_kstr(&w, ",\"transcript\":", st->transcript);
    sl_jsonw_kreal(&w, ",\"duration_s\":", st->duration_s);
  }
  if (st->grade) {
    const Sluice__V1__GradeResult *g = st->grade;
    sl_jsonw_kreal(&w, ",\"grade\":{\"score\":", g->score);
    sl_jsonw_kstr(&w, ",\"level\":", g->level);
    sl_jsonw_kstr(&w, ",\"feedback\":", g->feedback);
    sl_jsonw_kreal(&w, ",\"words_per_minute\":", g->words_per_minute);
    sl_jsonw_kreal(&w, ",\"lexical_variety\":", g->lexical_variety);
    sl_jsonw_kreal(&w, ",\"filler_rate\":", g->filler_rate);
    sl_jsonw_kreal(&w, ",\"relevance\":", g->relevance);
    sl_jsonw_kstr(&w, ",\"engine\":", g->engine);
    if (g->n_criteria) {
      sl_jsonw_raw(&w, ",\"criteria\":[");
      for (size_t i = 0; i < g->n_criteria; i++) {
        sl_jsonw_raw(&w, i ? ",{\"name\":" : "{\"name\":");
        sl_jsonw_str(&w, g->criteria[i]->name);
        sl_jsonw_kreal(&w, ",\"score\":", g->criteria[i]->score);
        sl_jsonw_kstr(&w, ",\"comment\":", g->criteria[i]->comment);
        sl_jsonw_raw(&w, "}");
      }
      sl_jsonw_raw(&w, "]");
    }
    sl_jsonw_raw(&w, "}");
  }
  if (st->cost_units > 0) { /* a total the status carries: a redelivery sets the same */
    sl_jsonw_kreal(&w, ",\"cost\":", st->cost_units);
  }
  if (st->state == SLUICE__V1__QUESTION_STATE__FAILED) {
    sl_jsonw_kstr(&w, ",\"error\":{\"class\":", st->error_class);
    sl_jsonw_kstr(&w, ",\"message\":", st->error_message);
    sl_jsonw_raw(&w, "}");
  }
  if (st->accepted_at_ms > 0 && (st->state == SLUICE__V1__QUESTION_STATE__DONE ||
                                 st->state == SLUICE__V1__QUESTION_STATE__FAILED)) {
    sl_jsonw_kint(&w, ",\"accept_to_done_ms\":", (long long)(st->at_ms - st->accepted_at_ms));
  }
  sl_jsonw_raw(&w, "}");
  return sl_jsonw_take(&w);
}

/* KEYS[1] a counter; ARGV[1]: raised to this if lower. */
static const char raise_lua[] =
    "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then\n"
    "  redis.call('SET', KEYS[1], ARGV[1])\n"
    "end\n"
    "return 0\n";

/* A submission's HSET while its data key is checked: KEYS[1] the view's
 * hash, KEYS[2] the data key; ARGV[1] what the key must still be ("": any
 * key but the erased sentinel), then the fields and values. {-1} (nothing
 * written) when it is not. */
static const char hset_lua[] =
    "local k = redis.call('GET', KEYS[2])\n"
    "if not k or (ARGV[1] == '' and k == '" SL_DKEY_ERASED "') or (ARGV[1] ~= '' and k ~= ARGV[1]) "
    "then return {-1} end\n"
    "return redis.call('HSET', KEYS[1], unpack(ARGV, 2))\n";

static const char record_lua[] =
    "if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') then\n"
    "  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

/* ---- one message's work -------------------------------------------------------
 *
 * A message is a few Redis commands run one after the other, each only once
 * the one before succeeded:
 *   a status      the apply script (monotonic, see apply_lua.h);
 *   a submission  HSET of its meta and specs, then the apply script for each
 *                 question (awaiting_upload);
 *   a dead letter (not a valid status, an unknown progress, ...): the record
 *                 script, so that its offset counts as applied (or a starting
 *                 materialize would find the partition's committed offset past
 *                 what Redis holds and rebuild the view for nothing,
 *                 behind_committed()).
 * The same steps (work_next, work_reply) run blocking on the rebuild
 * thread (process) and on the loop in the live stage (start), where the
 * commands of every message in flight go out pipelined on the stage's one
 * asynchronous connection instead of one round trip per worker thread.
 * Scripts go by their SHA-1 (sl_redis_script). */

enum { W_DONE, W_STATUS, W_SUBMISSION, W_RECORD };
enum { KP_GET, KP_GET_SENT, KP_MARKER, KP_MARKER_SENT, KP_DONE };

typedef struct {
  mat *M;
  const rd_kafka_message_t *m;
  sl_result *res;
  sl_job *job; /* the live stage's, or NULL */
  int kind;
  Sluice__V1__QuestionStatus *st;
  Sluice__V1__SubmissionCreated *sc;
  const char *label;
  int rank;
  char *view; /* a status's */
  size_t step, napplied;
  /* the current command: a script (nkeys keys then args in argv) or not */
  const sl_redis_script *script;
  int nkeys, argc;
  const char **argv; /* argv_fixed, or malloc'd for a submission's HSET */
  const char *argv_fixed[24];
  size_t *lens; /* NULL, lens_fixed or malloc'd: argv's lengths (the key check's bytes) */
  size_t lens_fixed[24];
  char **owned; /* the HSET's strings */
  size_t nowned;
  char hkey[SL__VIEW_KEY_MAX], q[24], r[24], ttl[32], member[96], acc[32], tp[200], off[32],
      qview[256], feed[32];
  /* the keys of the submission's bucket (lib/view.h) */
  int bucket;
  char k_pending[SL__VIEW_KEY_MAX], k_seq[SL__VIEW_KEY_MAX], k_marker[SL__VIEW_KEY_MAX],
      k_applied[SL__VIEW_KEY_MAX], k_feed[SL__VIEW_KEY_MAX], k_own[WRITER_KEY_MAX];
  char back_marker[32]; /* a marker to delete (went_back), or "" */
  char err[256];
  /* with crypto.kek, the first command is the GET of the submission's data
   * key (sl_dkey.h): an erased one's messages are dropped, a sealed
   * status is opened with it before its view is built */
  int keyed;
  int key_phase;      /* KP_*: the GET of its key, then (none there) the store's marker */
  int drop_dk_marker; /* a sealed status whose key Redis lost: the store is rebuilt */
  char dkkey[SL_DKEY_RKEY_MAX];
  /* what every write checks Redis still holds in the same script
   * (apply_lua.h, KEYS[8]), so that nothing is written once an erasure has
   * left its sentinel: CHECK_KEY the very key used (expect: from the
   * process's memo, or the GET), CHECK_LIVE any key but the sentinel (a
   * message with nothing sealed needs no key, only a live submission);
   * a check that fails is followed by a GET, which decides, once */
  int checked;
  unsigned relooked;
  uint8_t expect[SL_DKEY_WRAPPED_LEN];
} work;
enum { CHECK_NONE, CHECK_KEY, CHECK_LIVE };

static void work_free_cmd(work *w) {
  for (size_t i = 0; i < w->nowned; i++) free(w->owned[i]);
  free(w->owned);
  if (w->argv != w->argv_fixed) free(w->argv);
  if (w->lens != w->lens_fixed) free(w->lens);
  w->owned = NULL;
  w->nowned = 0;
  w->argv = w->argv_fixed;
  w->lens = NULL;
}

static const char *sid_of(const work *w) {
  return w->kind == W_STATUS ? w->st->submission_id : w->sc->submission_id;
}

static int record_only(work *w);

/* The submission's key dk found (memo: in the process's memo, not asked
 * of Redis): a sealed status is opened with it and its view built. 0 to go
 * on (a memo that does not open it: forgotten, the key looked up), -1 when
 * the work stops here (w->res says why). */
static int key_found(work *w, uint8_t dk[SL_SEAL_KEY_LEN], int memo) {
  w->key_phase = KP_DONE;
  if (w->kind != W_STATUS || w->view) { /* nothing sealed */
    OPENSSL_cleanse(dk, SL_SEAL_KEY_LEN);
    return 0;
  }
  char key[96];
  snprintf(key, sizeof key, "%s/%u", w->st->submission_id, w->st->question_no);
  int rc = sl_pbseal_open(&w->st->base, dk, key, strlen(key), NULL);
  OPENSSL_cleanse(dk, SL_SEAL_KEY_LEN);
  if (rc && memo) {
    sl_dkey_forget(w->st->submission_id);
    w->checked = CHECK_NONE;
    w->key_phase = KP_GET;
    return 0;
  }
  if (rc) {
    sl_result_set(w->res, SL_OUTCOME_FAIL, "sealed_invalid",
                  "its sealed fields do not open with its submission's key: %s", sl_strerror(rc));
    return record_only(w);
  }
  if (!(w->view = sl__status_view(w->st, w->label))) {
    sl_result_set(w->res, SL_OUTCOME_RETRY, "redis", "%s", sl_strerror(SL_ENOMEM));
    return -1;
  }
  return 0;
}

static void work_end(work *w) {
  work_free_cmd(w);
  if (w->st) sluice__v1__question_status__free_unpacked(w->st, NULL);
  if (w->sc) sluice__v1__submission_created__free_unpacked(w->sc, NULL);
  free(w->view);
}

/* The keys of w's bucket (lib/view.h). */
static void view_keys(work *w) {
  sl__view_key(w->k_pending, sizeof w->k_pending, SL__PENDING, w->bucket);
  sl__view_key(w->k_seq, sizeof w->k_seq, VIEW_SEQ, w->bucket);
  sl__view_key(w->k_marker, sizeof w->k_marker, SL__VIEW_MARKER, w->bucket);
  sl__view_key(w->k_applied, sizeof w->k_applied, VIEW_APPLIED, w->bucket);
  sl__view_key(w->k_feed, sizeof w->k_feed, SL__VIEW_FEED, w->bucket);
  sl__view_writer_key(w->k_own, sizeof w->k_own, w->bucket, writer_id(w->M));
}

/* The most arguments a submission's HSET can have (cmd_hset): the checking
 * script's three (hash, key, expected) or "HSET" and the hash, four meta
 * fields, tenant, callback and apikey, two per question. */
static size_t hset_cap(const Sluice__V1__SubmissionCreated *sc) {
  return 3 + 14 + 2 * sc->n_questions;
}

/* Reads the message: what is to be done. */
static void work_begin(work *w) {
  mat *M = w->M;
  const rd_kafka_message_t *m = w->m;
  w->argv = w->argv_fixed;
  char origin[160]; /* a retry copy comes back on materialize.retry.*: its origin decides */
  if (strcmp(sl_message_origin(m, origin, sizeof origin), M->cc->topic_submissions) == 0) {
    w->sc = sluice__v1__submission_created__unpack(NULL, m->len, m->payload);
    if (!w->sc || !w->sc->submission_id[0] || w->sc->n_questions == 0)
      sl_result_set(w->res, SL_OUTCOME_FAIL, "bad_message", "not a valid SubmissionCreated");
    else
      w->kind = W_SUBMISSION;
  } else {
    w->st = sluice__v1__question_status__unpack(NULL, m->len, m->payload);
    w->label = w->st ? label_of(w->st) : NULL;
    if (!w->st || !w->st->submission_id[0] || !w->st->question_no || !w->label) {
      sl_result_set(w->res, SL_OUTCOME_FAIL, "bad_message", "not a valid QuestionStatus");
    } else if (!(w->rank = sl_pipeline_progress_rank(M->cc->pipeline, w->label))) {
      sl_result_set(w->res, SL_OUTCOME_FAIL, "unknown_progress",
                    "status from stage \"%.64s\" says \"%.64s\", which no stage of the "
                    "pipeline has as its progress (`sluice pipeline`)",
                    w->st->stage, w->label);
    } else if (!sl_pbseal_sealed(&w->st->base) &&
               !(w->view = sl__status_view(w->st, w->label))) { /* sealed: once opened */
      sl_result_set(w->res, SL_OUTCOME_RETRY, "redis", "%s", sl_strerror(SL_ENOMEM));
    } else {
      w->kind = W_STATUS;
    }
  }
  if (w->res->outcome == SL_OUTCOME_FAIL && m->rkt) w->kind = W_RECORD;
  const char *sid = w->kind == W_SUBMISSION ? w->sc->submission_id
                    : w->kind == W_STATUS   ? w->st->submission_id
                                            : NULL;
  w->bucket = sid ? sl_rkey_bucket(sid, strlen(sid)) : 0;
  w->keyed = sid && sl_dkey_enabled() && sl_dkey_rkey(sid, w->dkkey) == 0;
  if (sid && !w->keyed && w->kind == W_STATUS && !w->view) { /* sealed, and no key to look up */
    sl_result_set(w->res, SL_OUTCOME_FAIL, "key_unavailable",
                  "its transcript and grade are sealed, and crypto.kek is not set here");
    w->kind = m->rkt ? W_RECORD : W_DONE;
  }
  if (replaying && rebuild_only && !rebuild_only[w->bucket]) {
    w->kind = W_DONE; /* a bucket this rebuild does not repair */
    return;
  }
  view_keys(w);
  uint8_t dk[SL_SEAL_KEY_LEN];
  if (!w->keyed || (w->kind != W_STATUS && w->kind != W_SUBMISSION)) return;
  if ((w->kind == W_SUBMISSION && hset_cap(w->sc) <= SL__REDIS_SCRIPT_MAX_ARGS) ||
      (w->kind == W_STATUS && w->view)) { /* nothing sealed: no key needed (cmd_hset) */
    w->checked = CHECK_LIVE;
    w->key_phase = KP_DONE;
  } else if (sl_dkey_cached(sid, w->expect, dk) == 0) { /* no GET: the apply checks it */
    w->checked = CHECK_KEY;
    if (key_found(w, dk, 1) != 0) w->kind = W_DONE;
  }
}

/* The apply script for question qno of sid, to rank with view json. */
static void cmd_apply(work *w, const char *sid, unsigned qno, int rank, const char *json,
                      int64_t accepted_ms) {
  mat *M = w->M;
  const rd_kafka_message_t *m = w->m;
  /* without printf: it was a tenth of materialize's CPU per apply */
  char n[21];
  sl_fmt_ll(n, m ? (long long)m->partition : -1);
  sl__view_join3(w->tp, sizeof w->tp, m && m->rkt ? rd_kafka_topic_name(m->rkt) : "-", ":", n);
  sl_fmt_ll(w->off, m ? (long long)m->offset : -1LL);
  sl__view_sub_key(w->hkey, sizeof w->hkey, sid);
  sl_fmt_ll(w->q, (long long)qno);
  sl_fmt_ll(w->r, rank);
  sl_fmt_ll(w->ttl, (long long)M->mc->ttl_s);
  sl__view_join3(w->member, sizeof w->member, sid, "/", w->q);
  sl_fmt_ll(w->acc, (long long)accepted_ms);
  sl_fmt_ll(w->feed, (long long)(M->mc->feed_len > 0 ? M->mc->feed_len : 0));
  const char(*was)[16] = M->legacy_rank;
  const char *argv[] = {w->hkey,  w->k_pending, w->k_seq, w->k_marker, w->k_applied, w->k_feed,
                        w->k_own, w->q,         w->r,     json,        w->ttl,       w->member,
                        w->acc,   w->tp,        w->off,   was[0],      was[1],       was[2],
                        was[3],   was[4],       w->feed};
  memcpy(w->argv_fixed, argv, sizeof argv);
  w->script = &M->apply;
  w->nkeys = 7;
  w->argc = 21;
  if (w->checked) { /* KEYS[8] the data key, ARGV[15] what it must still be */
    memmove(w->argv_fixed + 8, w->argv_fixed + 7, 14 * sizeof *w->argv_fixed);
    w->argv_fixed[7] = w->dkkey;
    w->argv_fixed[22] = (const char *)w->expect;
    for (int i = 0; i < 22; i++) w->lens_fixed[i] = strlen(w->argv_fixed[i]);
    w->lens_fixed[22] = w->checked == CHECK_KEY ? sizeof w->expect : 0;
    w->lens = w->lens_fixed;
    w->nkeys = 8;
    w->argc = 23;
  }
}

/* HSET of the submission's meta and its questions' specs, in one command:
 * with its key checked (w->checked), hset_lua, unless it has more
 * arguments than a script call takes (presign.max_questions above 31; its
 * applies are checked all the same). */
static int cmd_hset(work *w) {
  const Sluice__V1__SubmissionCreated *sc = w->sc;
  size_t cap = hset_cap(sc);
  int check = w->checked && cap <= SL__REDIS_SCRIPT_MAX_ARGS;
  w->argv = calloc(cap, sizeof *w->argv);
  w->owned = calloc(2 * sc->n_questions + 1, sizeof *w->owned);
  if (check) w->lens = calloc(cap, sizeof *w->lens);
  if (!w->argv || !w->owned || (check && !w->lens)) {
    if (!w->argv) w->argv = w->argv_fixed;
    return SL_ENOMEM;
  }
  sl__view_sub_key(w->hkey, sizeof w->hkey, sc->submission_id);
  snprintf(w->acc, sizeof w->acc, "%lld", (long long)sc->accepted_at_ms);
  snprintf(w->q, sizeof w->q, "%zu", sc->n_questions);
  size_t argc = 0;
  if (check) {
    w->argv[argc++] = w->hkey;
    w->argv[argc++] = w->dkkey;
    w->argv[argc++] = (const char *)w->expect;
  } else {
    w->argv[argc++] = "HSET";
    w->argv[argc++] = w->hkey;
  }
  w->argv[argc++] = "accepted_at_ms";
  w->argv[argc++] = w->acc;
  w->argv[argc++] = "n";
  w->argv[argc++] = w->q;
  w->argv[argc++] = "token";
  w->argv[argc++] = sc->results_token_sha256;
  w->argv[argc++] = "user";
  w->argv[argc++] = sc->user_id;
  if (sc->tenant && sc->tenant[0]) {
    w->argv[argc++] = "tenant";
    w->argv[argc++] = sc->tenant;
  }
  if (sc->callback_url && sc->callback_url[0]) {
    w->argv[argc++] = "callback";
    w->argv[argc++] = sc->callback_url;
  }
  if (sc->apikey_id && sc->apikey_id[0]) { /* notify signs with this key's secret */
    w->argv[argc++] = "apikey";
    w->argv[argc++] = sc->apikey_id;
  }
  for (size_t i = 0; i < sc->n_questions; i++) {
    const Sluice__V1__QuestionSpec *q = sc->questions[i];
    json_t *j = json_pack("{s:s,s:I,s:s,s:s}", "content_type", q->content_type, "size",
                          (json_int_t)q->size, "prompt", q->prompt, "key", q->object_key);
    if (j && q->traceparent && q->traceparent[0]) /* ingest joins the question's trace */
      json_object_set_new(j, "tp", json_string(q->traceparent));
    if (j && sc->tenant && sc->tenant[0]) /* and tags the answer with its tenant */
      json_object_set_new(j, "tn", json_string(sc->tenant));
    char field[32];
    snprintf(field, sizeof field, "spec%u", q->no);
    w->owned[w->nowned++] = strdup(field);
    w->owned[w->nowned++] = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    w->argv[argc++] = w->owned[w->nowned - 2];
    w->argv[argc++] = w->owned[w->nowned - 1] ? w->owned[w->nowned - 1] : "{}";
  }
  w->script = NULL;
  w->argc = (int)argc;
  if (check) {
    for (size_t i = 0; i < argc; i++)
      w->lens[i] = i != 2 ? strlen(w->argv[i]) : w->checked == CHECK_KEY ? sizeof w->expect : 0;
    w->script = &w->M->hset;
    w->nkeys = 2;
  }
  return 0;
}

/* Prepares the next command: 1, or 0 when the work is over. */
static int work_next(work *w) {
  work_free_cmd(w);
  if (w->keyed && (w->key_phase == KP_GET || w->key_phase == KP_MARKER) &&
      (w->kind == W_STATUS || w->kind == W_SUBMISSION)) {
    int get = w->key_phase == KP_GET;
    w->argv_fixed[0] = get ? "GET" : "EXISTS";
    w->argv_fixed[1] = get ? w->dkkey : sl_dkey_marker();
    w->script = NULL;
    w->argc = 2;
    w->key_phase = get ? KP_GET_SENT : KP_MARKER_SENT;
    return 1;
  }
  size_t step = w->step++;
  switch (w->kind) {
  case W_STATUS:
    if (step > 0) return 0;
    cmd_apply(w, w->st->submission_id, w->st->question_no, w->rank, w->view, w->st->accepted_at_ms);
    return 1;
  case W_SUBMISSION: {
    const Sluice__V1__SubmissionCreated *sc = w->sc;
    if (step == 0) {
      if (cmd_hset(w) == 0) return 1;
      sl_result_set(w->res, SL_OUTCOME_RETRY, "internal", "out of memory");
      return 0;
    }
    if (step > sc->n_questions) return 0;
    const char *first = sl_pipeline_progress_at(w->M->cc->pipeline, 0);
    snprintf(w->qview, sizeof w->qview, "{\"no\":%u,\"state\":\"%s\",\"updated_at_ms\":%lld}",
             sc->questions[step - 1]->no, first ? first : "awaiting_upload",
             (long long)sc->accepted_at_ms);
    cmd_apply(w, sc->submission_id, sc->questions[step - 1]->no, 1, w->qview, sc->accepted_at_ms);
    return 1;
  }
  case W_RECORD:
    if (step > 0) return 0;
    snprintf(w->tp, sizeof w->tp, "%s:%d", rd_kafka_topic_name(w->m->rkt), (int)w->m->partition);
    snprintf(w->off, sizeof w->off, "%lld", (long long)w->m->offset);
    w->argv_fixed[0] = w->k_applied;
    w->argv_fixed[1] = w->tp;
    w->argv_fixed[2] = w->off;
    w->script = &w->M->record;
    w->nkeys = 1;
    w->argc = 3;
    return 1;
  default:
    return 0;
  }
}

/* Its offset counts as applied, nothing else is written: a dead letter's
 * (FAIL), or an erased submission's message (DONE). */
static int record_only(work *w) {
  w->kind = w->m->rkt ? W_RECORD : W_DONE;
  w->step = 0; /* a submission's erasure may come after some of its applies */
  w->key_phase = KP_DONE;
  return 0;
}

/* The GET of the data key answered: 0 to go on (opened, nothing sealed,
 * or none there: the marker is asked next), -1 when the work stops here
 * (w->res says why). An erased submission's message writes nothing but
 * its offset. */
static int key_reply(work *w, const redisReply *rep) {
  const char *sid = sid_of(w);
  uint8_t dk[SL_SEAL_KEY_LEN];
  int rc = sl_dkey_from_reply(rep, sid, dk);
  if (rc == SL_EERASED) {
    sl_log(SL_LOG_DEBUG, sid, "erased: a message of it dropped");
    sl_dkey_count_erased_drop();
    return record_only(w);
  }
  if (rc == SL_ENOTFOUND) {
    w->key_phase = KP_MARKER;
    return 0;
  }
  if (rc == SL_EAUTH) {
    sl_result_set(w->res, SL_OUTCOME_FAIL, "key_invalid",
                  "its submission's data key does not open with crypto.kek");
    return record_only(w);
  }
  if (rc) {
    sl_result_set(w->res, SL_OUTCOME_RETRY, "redis", "looking up its data key: %s",
                  rep && rep->type == REDIS_REPLY_ERROR ? rep->str : sl_strerror(rc));
    return -1;
  }
  if (rep->len == sizeof w->expect) { /* what the applies check */
    memcpy(w->expect, rep->str, sizeof w->expect);
    w->checked = CHECK_KEY;
  }
  return key_found(w, dk, 0);
}

/* No key in Redis; the store's marker answered. Complete: a submission
 * from before crypto.kek, applied as it is, unless its status is sealed
 * (it had a key: Redis lost it, so the store is rebuilt). Incomplete (a
 * Redis that lost its data): tried again once the store is rebuilt, so
 * that a view rebuild never brings back an erased submission whose
 * sentinel is not back yet. */
static int marker_reply(work *w, const redisReply *rep) {
  int complete = sl_key_state_of_marker(rep) == SL_KEY_NONE;
  int sealed = w->kind == W_STATUS && !w->view;
  if (complete && !sealed) {
    w->key_phase = KP_DONE;
    return 0;
  }
  sl_result_set(w->res, SL_OUTCOME_RETRY, "key_unavailable",
                "its submission's data key is not in Redis (the store is being rebuilt)");
  w->res->again_in_ms = SL_AGAIN_MAX_MS;
  w->drop_dk_marker = complete; /* sealed, yet no key: lost */
  return -1;
}

/* Takes the current command's answer (NULL: Redis unavailable). Returns 0
 * to go on, -1 when the work stops here (w->res says why). */
static int work_reply(work *w, const redisReply *rep) {
  if (w->keyed && w->key_phase == KP_GET_SENT) return key_reply(w, rep);
  if (w->keyed && w->key_phase == KP_MARKER_SENT) return marker_reply(w, rep);
  if (w->kind == W_RECORD) return 0; /* a dead letter's outcome stands */
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    if (!w->err[0])
      snprintf(w->err, sizeof w->err, "redis: %s",
               rep ? rep->str : "unavailable (no connection or no answer in time)");
    sl_result_set(w->res, SL_OUTCOME_RETRY, "redis", "%s", w->err);
    return -1;
  }
  if (w->checked && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
      rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == -1) {
    /* the data key is no longer the one checked (erased, or Redis lost it):
     * nothing was written; looked up again, which decides */
    sl_dkey_forget(sid_of(w));
    if (w->relooked++ > 0) {
      sl_result_set(w->res, SL_OUTCOME_RETRY, "redis",
                    "its data key in Redis changed twice while it was applied");
      return -1;
    }
    w->checked = CHECK_NONE;
    w->key_phase = KP_GET;
    w->step--; /* the same command again, after the GET */
    return 0;
  }
  if (!w->script || w->script == &w->M->hset) return 0; /* the HSET */
  /* the apply script: {1 if written else 0, the sequence, the marker} */
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
      rep->element[0]->type != REDIS_REPLY_INTEGER ||
      rep->element[1]->type != REDIS_REPLY_INTEGER) {
    sl_result_set(w->res, SL_OUTCOME_RETRY, "redis", "redis: unexpected reply to the apply script");
    return -1;
  }
  int rc = (int)rep->element[0]->integer;
  if (replaying) { /* INCR: a sequence that does not grow lost writes */
    if (rep->element[1]->integer <= rebuild_seq[w->bucket])
      rebuild_lost = 1;
    else
      rebuild_seq[w->bucket] = rep->element[1]->integer;
    if (rc == 1) rebuild_written++;
  }
  const redisReply *mk = rep->elements > 2 ? rep->element[2] : NULL;
  const char *marker = mk && mk->type == REDIS_REPLY_STRING ? mk->str : NULL;
  int back = went_back(w->M, w->bucket, rep->element[1]->integer, marker);
  if (rep->elements > 3 && rep->element[3]->type == REDIS_REPLY_INTEGER &&
      own_went_back(w->M, w->bucket, rep->element[3]->integer, marker, w->job != NULL, back))
    back = 1;
  if (back) snprintf(w->back_marker, sizeof w->back_marker, "%s", marker);
  w->napplied++;
  if (w->kind != W_STATUS) return 0;
  /* observed once per question and final state: only when this event moved
   * the view (a redelivery or late duplicate is "not newer") */
  const Sluice__V1__QuestionStatus *st = w->st;
  if (rc == 1 && !replaying && st->accepted_at_ms > 0 && st->at_ms >= st->accepted_at_ms &&
      (st->state == SLUICE__V1__QUESTION_STATE__DONE ||
       st->state == SLUICE__V1__QUESTION_STATE__FAILED))
    sl_histogram_observe(st->state == SLUICE__V1__QUESTION_STATE__DONE ? w->M->h_done
                                                                       : w->M->h_failed,
                         (double)(st->at_ms - st->accepted_at_ms) / 1000.0);
  char key[96];
  snprintf(key, sizeof key, "%s/%u", st->submission_id, st->question_no);
  sl_log(SL_LOG_DEBUG, key, "%s %s", w->label, rc ? "applied" : "ignored (not newer)");
  return 0;
}

/* The work is over: the submission's log line. */
static void work_done(work *w) {
  if (w->kind == W_SUBMISSION && w->res->outcome == SL_OUTCOME_DONE)
    sl_log(SL_LOG_INFO, w->sc->submission_id, "submission recorded (%zu questions)",
           w->sc->n_questions);
}

/* Blocking, on the calling thread's connection: the rebuild thread. */
static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  (void)out;
  work w = {.M = ud, .m = m, .res = res};
  work_begin(&w);
  while (work_next(&w)) {
    sl_redis *r = sl_tls_get(w.M->redis, w.err, sizeof w.err);
    redisReply *rep = !r         ? NULL
                      : w.script ? sl_redis_eval(r, w.script, w.nkeys, w.argc, w.argv, w.lens,
                                                 w.err, sizeof w.err)
                                 : sl_redis_argv(r, w.argc, w.argv, NULL, w.err, sizeof w.err);
    int go = work_reply(&w, rep);
    if (rep) freeReplyObject(rep);
    if (w.back_marker[0]) drop_marker(w.M, w.bucket, w.back_marker);
    w.back_marker[0] = '\0';
    if (w.drop_dk_marker && r) {
      const char *del[] = {"DEL", sl_dkey_marker()};
      freeReplyObject(sl_redis_argv(r, 2, del, NULL, w.err, sizeof w.err));
    }
    w.drop_dk_marker = 0;
    if (go) break;
  }
  work_done(&w);
  work_end(&w);
}

/* ---- the live stage: on the loop ---- */

static void async_next(work *w);

static void on_async_reply(redisReply *rep, void *ud) {
  work *w = ud;
  int go = work_reply(w, rep);
  if (w->back_marker[0]) { /* fire and forget, as the apply itself */
    const char *argv[] = {w->k_marker, w->back_marker};
    sl_aredis_eval(sl_job_redis(w->job), NULL, NULL, &w->M->release, 1, 2, argv, NULL);
    w->back_marker[0] = '\0';
  }
  if (w->drop_dk_marker) {
    const char *del[] = {"DEL", sl_dkey_marker()};
    sl_aredis_argv(sl_job_redis(w->job), NULL, NULL, 2, del, NULL);
    w->drop_dk_marker = 0;
  }
  if (go) w->kind = W_DONE; /* nothing more */
  async_next(w);
}

static void async_next(work *w) {
  if (work_next(w)) {
    sl_aredis *ar = sl_job_redis(w->job);
    int rc = w->script ? sl_aredis_eval(ar, on_async_reply, w, w->script, w->nkeys, w->argc,
                                        w->argv, w->lens)
                       : sl_aredis_argv(ar, on_async_reply, w, w->argc, w->argv, NULL);
    if (rc == 0) return;
    /* not sent (no connection): as if Redis had not answered */
    on_async_reply(NULL, w);
    return;
  }
  sl_job *job = w->job;
  work_done(w);
  work_end(w);
  free(w);
  sl_job_done(job);
}

static void start(void *ud, sl_job *job) {
  work *w = calloc(1, sizeof *w);
  if (!w) {
    sl_result_set(sl_job_result(job), SL_OUTCOME_RETRY, "internal", "out of memory");
    sl_job_done(job);
    return;
  }
  *w = (work){.M = ud, .m = sl_job_message(job), .res = sl_job_result(job), .job = job};
  work_begin(w);
  async_next(w);
}

/* ---- rebuilding a lost view ---------------------------------------------------- */

#define MARKER SL__VIEW_MARKER
/* One replica rebuilds at a time: it holds this lock (its owner id, a lease
 * renewed while messages are applied); the others wait for the marker. A
 * rebuilder that dies lets its lease lapse and another one starts over. */
#define REBUILD_LOCK "sl:lock:view-rebuild"
#define REBUILD_LEASE_MS 30000
#define REBUILD_STALL_MS 60000 /* no message applied this long: give up, retry */

/* Renews the rebuild lock when a third of its lease has passed since
 * *renewed. Returns -1 when the lock is no longer this process's (its lease
 * lapsed, or Redis lost it with what this rebuild wrote), else 0 (renewed,
 * not due yet, or Redis unreachable: tried again on the next call). */
static int keep_lease(mat *M, int64_t *renewed) {
  if (sl_now_ms() - *renewed < REBUILD_LEASE_MS / 3) return 0;
  char err[256], lease[32];
  snprintf(lease, sizeof lease, "%d", REBUILD_LEASE_MS);
  const char *argv[] = {"EVAL", sl_claim_renew_lua, "1", REBUILD_LOCK, lease, M->owner};
  redisReply *rep = sl_redis_argv(M->watch_r, 6, argv, NULL, err, sizeof err);
  if (!rep || rep->type != REDIS_REPLY_INTEGER) {
    if (rep) freeReplyObject(rep);
    return 0;
  }
  int held = rep->integer == 1;
  freeReplyObject(rep);
  *renewed = sl_now_ms();
  if (!held)
    sl_log(SL_LOG_ERROR, NULL,
           "rebuild: the lock %s is no longer this process's (its lease lapsed, or Redis lost it "
           "with what this rebuild wrote); starting over",
           REBUILD_LOCK);
  return held ? 0 : -1;
}

/* Ends a rebuild of one bucket in one step: marks it complete (KEYS[1],
 * its marker, := ARGV[2], the rebuild's epoch) only if everything was
 * replayed (ARGV[4] == '1'), the lock KEYS[3] is still this rebuild's
 * (ARGV[1]) and the bucket's write sequence KEYS[2] is above the highest
 * one the rebuild saw (ARGV[3]): Redis kept every write of the rebuild.
 * Otherwise a marker older than the rebuild — one restored with an older
 * snapshot, claiming a view that lost writes — is deleted, so that the
 * bucket is rebuilt again. With buckets the lock lies in another slot: it
 * is not passed (no KEYS[3]) and the caller checked it just before.
 * Returns 1 when marked. */
static const char finish_lua[] =
    "if ARGV[4] == '1' and (#KEYS < 3 or redis.call('GET', KEYS[3]) == ARGV[1]) and\n"
    "   redis.call('INCR', KEYS[2]) > tonumber(ARGV[3]) then\n"
    "  redis.call('SET', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "local mk = redis.call('GET', KEYS[1])\n"
    "if mk and tonumber(mk) < tonumber(ARGV[2]) then redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Replays one topic from its beginning to the end it has now, with rk (a
 * group-less consumer), each message until it applies: a Redis that does
 * not answer holds the replay (up to REBUILD_STALL_MS per message), it does
 * not skip anything. Keeps the lock's lease (*renewed: when it was last
 * renewed). Returns 0 when everything up to that end was applied; *applied
 * counts what was. */
static int replay_topic(mat *M, rd_kafka_t *rk, const char *topic, long *applied,
                        int64_t *renewed) {
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
    if (rd_kafka_query_watermark_offsets(rk, topic, parts->elems[i].partition, &lo, &hi, 10000) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      rc = SL_EKAFKA;
      break;
    }
    high[i] = hi;
    if (hi > lo) open++;
  }
  if (rc == 0 && (!high || rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR))
    rc = SL_EKAFKA;
  /* bounded by progress, not by size: it goes on while messages come */
  int64_t deadline = sl_now_ms() + REBUILD_STALL_MS;
  while (rc == 0 && open > 0 && !atomic_load(&M->stop_watch) && sl_now_ms() < deadline) {
    if (keep_lease(M, renewed) != 0) {
      rc = SL_ESTATE;
      break;
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
      for (;;) { /* Redis may be unreachable a while: never skip a message */
        sl_result res = {0};
        process(M, m, &ob, &res);
        if (res.outcome != SL_OUTCOME_RETRY) break;
        if (atomic_load(&M->stop_watch)) {
          rc = SL_EUNAVAIL;
        } else if (sl_now_ms() >= deadline) {
          sl_log(SL_LOG_ERROR, NULL, "rebuild: %s [%d] at offset %lld not applied in %d s: %s",
                 topic, (int)m->partition, (long long)m->offset, REBUILD_STALL_MS / 1000,
                 res.error_message);
          rc = SL_ETIMEDOUT;
        } else if (keep_lease(M, renewed) != 0) {
          rc = SL_ESTATE;
        }
        if (rc) break;
        sleep_ms(200);
      }
      if (rc == 0 && rebuild_lost) {
        sl_log(SL_LOG_ERROR, NULL,
               "rebuild: Redis lost writes of this rebuild (the view's sequence went down: a "
               "restart from an older snapshot, a failover); starting over");
        rc = SL_EREDIS;
      }
      if (rc == 0) {
        (*applied)++;
        deadline = sl_now_ms() + REBUILD_STALL_MS;
        if (m->offset + 1 >= high[idx]) open--;
      }
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
 * land, as it did live. base: the view sequence the rebuild raised the
 * lost buckets' to (its applies must return more, rebuild_seq); lost: the
 * buckets to repair (a message of another bucket's submission is skipped).
 * Returns 0 when everything up to those ends was applied and Redis lost
 * none of it that the rebuild could see. */
static int rebuild(mat *M, long long base, const unsigned char *lost) {
  char err[512];
  replaying = 1;
  for (int b = 0; b < sl_rkey_buckets(); b++) rebuild_seq[b] = base;
  rebuild_only = sl_rkey_bucketed() ? lost : NULL;
  rebuild_lost = 0;
  rebuild_written = 0;
  rd_kafka_t *rk = NULL;
  int rc = sl_kafka_consumer_new(&rk, M->cc->kafka_brokers, "sluice-materialize-rebuild",
                                 "sluice-materialize-rebuild", NULL, err, sizeof err, NULL, NULL,
                                 NULL, NULL);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "rebuild: %s", err);
    return rc;
  }
  long applied = 0;
  int64_t renewed = sl_now_ms();
  rc = replay_topic(M, rk, M->cc->topic_submissions, &applied, &renewed);
  if (rc == 0) rc = replay_topic(M, rk, M->cc->topic_results, &applied, &renewed);
  sl_log(rc ? SL_LOG_ERROR : SL_LOG_INFO, NULL,
         "rebuild: %ld message(s) replayed, %ld question state(s) written back (repaired)%s",
         applied, rebuild_written, rc ? " before giving up" : "; the view is complete");
  sl_metric_add(M->m_rebuilt, (uint64_t)applied);
  sl_metric_add(M->m_repaired, (uint64_t)rebuild_written);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return rc;
}

/* The highest offset applied from partition field ("<topic>:<partition>")
 * over the buckets (-1: none); SL_EREDIS when Redis does not answer. */
static int applied_max(mat *M, const char *field, long long *applied) {
  char err[256], key[SL__VIEW_KEY_MAX];
  *applied = -1;
  for (int b = 0; b < sl_rkey_buckets(); b++) {
    sl__view_key(key, sizeof key, VIEW_APPLIED, b);
    const char *hg[] = {"HGET", key, field};
    redisReply *a = cmd(M, 3, hg, err, sizeof err);
    if (!a) return SL_EREDIS;
    long long v = a->type == REDIS_REPLY_STRING ? strtoll(a->str, NULL, 10) : -1;
    freeReplyObject(a);
    if (v > *applied) *applied = v;
  }
  return 0;
}

/* The buckets' markers (marks[b], "" when missing) and whether the view
 * can be compared with the committed offsets: a marker is set and offsets
 * were recorded. */
static int start_marks(mat *M, char (*marks)[32]) {
  char err[256], key[SL__VIEW_KEY_MAX];
  int marked = 0;
  long long recorded = 0;
  for (int b = 0; b < sl_rkey_buckets(); b++) {
    sl__view_key(key, sizeof key, SL__VIEW_MARKER, b);
    const char *get[] = {"GET", key};
    redisReply *mk = cmd(M, 2, get, err, sizeof err);
    marks[b][0] = '\0';
    if (mk && mk->type == REDIS_REPLY_STRING) {
      snprintf(marks[b], sizeof marks[b], "%s", mk->str);
      marked = 1;
    }
    if (mk) freeReplyObject(mk);
    sl__view_key(key, sizeof key, VIEW_APPLIED, b);
    const char *hl[] = {"HLEN", key};
    redisReply *n = cmd(M, 2, hl, err, sizeof err);
    if (n && n->type == REDIS_REPLY_INTEGER) recorded += n->integer;
    if (n) freeReplyObject(n);
  }
  return marked && recorded > 0;
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
 * first. Returns 1 when behind.
 * With buckets each bucket records the offsets of its own submissions'
 * messages, so the highest over the buckets is compared, and behind drops
 * every bucket's marker (which bucket lost them is not known). Its blind
 * spot: a bucket that lost writes while another holds the partition's
 * newest message; a loss while materialize runs is seen per bucket by
 * went_back() (watch()). */
static int behind_committed(mat *M) {
  char err[512];
  char(*marks)[32] = calloc((size_t)sl_rkey_buckets(), sizeof *marks);
  if (!marks || !start_marks(M, marks)) {
    free(marks);
    return 0;
  }
  rd_kafka_t *rk = NULL;
  /* the group the stage runtime runs as (sl_pipeline_group); it only reads
   * committed offsets, it never joins */
  char group[64];
  sl_pipeline_group(group, sizeof group, "materialize", 0);
  if (sl_kafka_consumer_new(&rk, M->cc->kafka_brokers, group, "sluice-materialize-check", NULL, err,
                            sizeof err, NULL, NULL, NULL, NULL) != 0) {
    sl_log(SL_LOG_WARN, NULL, "start check of the view: %s (skipped)", err);
    free(marks);
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
    long long applied;
    if (applied_max(M, field, &applied) != 0)
      break; /* Redis unavailable: the watcher checks the marker anyway */
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
    for (int b = 0; b < sl_rkey_buckets(); b++)
      if (marks[b][0]) drop_marker(M, b, marks[b]);
  }
  free(marks);
  rd_kafka_topic_partition_list_destroy(l);
  rd_kafka_destroy(rk);
  return behind;
}

/* One look at every bucket's marker and sequence: a bucket whose sequence
 * went back has its marker dropped (went_back(); rebuilt on a later look).
 * Sets lost[b] when bucket b's marker is missing; returns how many are. */
static int watch_buckets(mat *M, sl_redis *r, unsigned char *lost) {
  int n = 0;
  for (int b = 0; b < sl_rkey_buckets() && !atomic_load(&M->stop_watch); b++) {
    char err[256], mkey[SL__VIEW_KEY_MAX], skey[SL__VIEW_KEY_MAX], okey[WRITER_KEY_MAX];
    sl__view_key(mkey, sizeof mkey, MARKER, b);
    sl__view_key(skey, sizeof skey, VIEW_SEQ, b);
    /* the live loop's count, read before Redis is asked: Redis had it then */
    writer_seen live = {0, 0, 0};
    pthread_mutex_lock(&M->live_mu);
    if (M->live_writer[0] && M->live[b].n > 0 && !own_stale(M, &M->live[b], sl_now_ms())) {
      live = M->live[b];
      sl__view_writer_key(okey, sizeof okey, b, M->live_writer);
    }
    pthread_mutex_unlock(&M->live_mu);
    const char *get[] = {"MGET", mkey, skey, okey}; /* okey only with a live count */
    int argc = live.n ? 4 : 3;
    redisReply *rep = sl_redis_argv(r, argc, get, NULL, err, sizeof err);
    lost[b] = 0;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)argc - 1) {
      const redisReply *mk = rep->element[0], *seq = rep->element[1];
      lost[b] = mk->type != REDIS_REPLY_STRING;
      int back = !lost[b] && seq->type == REDIS_REPLY_STRING && /* an idle view is checked too */
                 went_back(M, b, strtoll(seq->str, NULL, 10), mk->str);
      if (!lost[b] && !back && live.n && strtoll(mk->str, NULL, 10) == live.marker) {
        /* the loop writes there no more, or not yet again: its own count
         * below what it counted (or gone) means Redis lost its writes */
        const redisReply *own = rep->element[2];
        long long now_n = own->type == REDIS_REPLY_STRING ? strtoll(own->str, NULL, 10) : 0;
        if (now_n < live.n) {
          lost_own(M, b, now_n, live.n, "the live stage's");
          back = 1;
        }
      }
      if (back) drop_marker(M, b, mk->str);
    }
    if (rep) freeReplyObject(rep);
    n += lost[b];
  }
  return n;
}

/* Redis's own clock (ms) into epoch, or this host's when it does not say. */
static void redis_time(sl_redis *r, char *epoch, size_t cap) {
  char err[256];
  const char *tm[] = {"TIME"};
  redisReply *rep = sl_redis_argv(r, 1, tm, NULL, err, sizeof err);
  if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
      rep->element[0]->type == REDIS_REPLY_STRING && rep->element[1]->type == REDIS_REPLY_STRING)
    snprintf(epoch, cap, "%lld",
             strtoll(rep->element[0]->str, NULL, 10) * 1000 +
                 strtoll(rep->element[1]->str, NULL, 10) / 1000);
  else
    snprintf(epoch, cap, "%lld", (long long)sl_now_ms());
  if (rep) freeReplyObject(rep);
}

/* Marks the rebuilt buckets (finish_lua): complete, and only if Redis kept
 * the rebuild's writes. Returns how many were marked. */
static int finish_buckets(mat *M, sl_redis *r, const unsigned char *lost, const char *epoch,
                          int complete) {
  char err[256];
  if (complete && sl_rkey_bucketed()) { /* the lock lies in another slot: checked first */
    const char *get[] = {"GET", REBUILD_LOCK};
    redisReply *rep = sl_redis_argv(r, 2, get, NULL, err, sizeof err);
    complete = rep && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, M->owner) == 0;
    if (rep) freeReplyObject(rep);
  }
  int marked = 0, failed = 0;
  for (int b = 0; b < sl_rkey_buckets(); b++) {
    if (!lost[b]) continue;
    char seen[32], mkey[SL__VIEW_KEY_MAX], skey[SL__VIEW_KEY_MAX];
    snprintf(seen, sizeof seen, "%lld", rebuild_seq[b]);
    sl__view_key(mkey, sizeof mkey, MARKER, b);
    sl__view_key(skey, sizeof skey, VIEW_SEQ, b);
    int nkeys = sl_rkey_bucketed() ? 2 : 3, n = 0;
    const char *fin[7];
    fin[n++] = mkey;
    fin[n++] = skey;
    if (nkeys == 3) fin[n++] = REBUILD_LOCK;
    fin[n++] = M->owner;
    fin[n++] = epoch;
    fin[n++] = seen;
    fin[n++] = complete ? "1" : "0";
    redisReply *rep = sl_redis_eval(r, &M->finish, nkeys, n, fin, NULL, err, sizeof err);
    if (!rep) {
      sl_log(SL_LOG_ERROR, NULL, "rebuild: the view could not be marked: %s; rebuilding again",
             err);
      failed = 1;
    } else if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
      marked++;
    } else if (complete) {
      failed = 1;
    }
    if (rep) freeReplyObject(rep);
  }
  if (complete && failed)
    sl_log(SL_LOG_ERROR, NULL,
           "rebuild: not marked complete: Redis lost the lock or writes of this rebuild while "
           "it ran (emptied, or restored from an older snapshot); rebuilding again");
  return marked;
}

/* The watcher holds the rebuild lock: rebuilds the lost buckets (every
 * bucket unbucketed) and marks them. */
static void rebuild_lost_buckets(mat *M, sl_redis *r, const unsigned char *lost, int nlost) {
  char err[256];
  if (sl_rkey_bucketed())
    sl_log(SL_LOG_WARN, NULL,
           "the view marker is missing in %d of %d bucket(s) (a new or emptied Redis, a shard "
           "that lost its data or failed over): rebuilding the view from the topics in those "
           "buckets",
           nlost, sl_rkey_buckets());
  else
    sl_log(SL_LOG_WARN, NULL,
           "the view marker %s is missing (a new or emptied Redis): "
           "rebuilding the view from the topics",
           MARKER);
  sl_metric_add(M->m_rebuilds, 1);
  /* the marker's value is Redis's own clock (ms) when the rebuild started:
   * a later rebuild always sets a larger one (went_back()) */
  char epoch[32];
  redis_time(r, epoch, sizeof epoch);
  /* versions in the rebuilt view (apply_lua.h) start above any of the
   * lost one: its sequence is at most the previous marker × 1000 plus its
   * applies, fewer than 1000 a millisecond */
  char base[40];
  snprintf(base, sizeof base, "%s000", epoch);
  /* without the raised base the rebuild's first apply would look like a
   * loss (rebuild_seq): start when Redis answers */
  int raised = 1;
  for (int b = 0; b < sl_rkey_buckets() && raised; b++) {
    if (!lost[b]) continue;
    char skey[SL__VIEW_KEY_MAX];
    sl__view_key(skey, sizeof skey, VIEW_SEQ, b);
    const char *raise[] = {skey, base};
    redisReply *rep = sl_redis_eval(r, &M->raise, 1, 2, raise, NULL, err, sizeof err);
    raised = rep && rep->type != REDIS_REPLY_ERROR;
    if (!raised)
      sl_log(SL_LOG_WARN, NULL, "rebuild: not started, Redis did not answer: %s",
             rep ? rep->str : err);
    if (rep) freeReplyObject(rep);
  }
  int complete = raised && rebuild(M, strtoll(base, NULL, 10), lost) == 0;
  /* marked only now, and only if Redis kept what the rebuild wrote: a crash
   * mid-rebuild rebuilds again on restart, and so does a Redis that lost
   * the rebuild's writes (emptied or restored from an older snapshot while
   * it ran) */
  int marked = finish_buckets(M, r, lost, epoch, complete);
  if (sl_rkey_bucketed())
    sl_log(marked == nlost ? SL_LOG_INFO : SL_LOG_WARN, NULL,
           "rebuild: %d of %d lost bucket(s) marked complete", marked, nlost);
  const char *rel[] = {"EVAL", sl_claim_release_lua, "1", REBUILD_LOCK, M->owner};
  redisReply *rep = sl_redis_argv(r, 5, rel, NULL, err, sizeof err);
  if (rep) freeReplyObject(rep);
}

static void *watch(void *arg) {
  mat *M = arg;
  sl_redis *r = NULL;
  unsigned char *lost = calloc((size_t)sl_rkey_buckets(), 1);
  if (!lost || sl_redis_new(&r, M->cc->redis_url) != 0) {
    free(lost);
    return NULL;
  }
  M->watch_r = r;
  while (!atomic_load(&M->stop_watch)) {
    char err[256];
    int nlost = watch_buckets(M, r, lost);
    int locked = 0;
    if (nlost) {
      char lease[32];
      snprintf(lease, sizeof lease, "%d", REBUILD_LEASE_MS);
      const char *take[] = {"SET", REBUILD_LOCK, M->owner, "NX", "PX", lease};
      redisReply *rep = sl_redis_argv(r, 6, take, NULL, err, sizeof err);
      locked = rep && rep->type == REDIS_REPLY_STATUS;
      if (rep) freeReplyObject(rep);
      if (!locked)
        sl_log(SL_LOG_DEBUG, NULL, "the view marker is missing; another replica rebuilds");
    }
    if (locked) rebuild_lost_buckets(M, r, lost, nlost);
    for (int64_t t = 0; t < M->mc->watch_interval_ms && !atomic_load(&M->stop_watch); t += 100)
      sleep_ms(100);
  }
  sl_redis_free(r);
  free(lost);
  return NULL;
}

extern const sl__stage_desc sl__materialize_stage; /* its descriptor, at the end */

static int materialize_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  mat_conf mc = {0};
  sl_conf_bind own[] = {{materialize_table, materialize_table_len, &mc}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(&sl__materialize_stage, sl__materialize_stage.name, argc, argv, &cc, own,
                           1, &admin);
  if (rc) return rc;
  const char *h_help = "Seconds from a submission's acceptance to its question's final state";
  mat M = {.cc = &cc, .mc = &mc};
  sl__owner_id(M.owner, sizeof M.owner);
  pthread_mutex_init(&M.live_mu, NULL);
  M.live = calloc(SL_RKEY_MAX_BUCKETS, sizeof *M.live);
  sl_redis_script_init(&M.apply, apply_lua);
  sl_redis_script_init(&M.hset, hset_lua);
  sl_redis_script_init(&M.record, record_lua);
  sl_redis_script_init(&M.release, sl_claim_release_lua);
  sl_redis_script_init(&M.raise, raise_lua);
  sl_redis_script_init(&M.finish, finish_lua);
  static const char *const legacy[] = {"queued", "transcribing", "grading", "failed", "done"};
  for (size_t i = 0; i < 5; i++) {
    int now = sl_pipeline_progress_rank(cc.pipeline, legacy[i]);
    /* a label the pipeline no longer has: anything is newer */
    snprintf(M.legacy_rank[i], sizeof M.legacy_rank[i], "%d", now ? now : 1);
  }
  M.h_done = sl_metrics_histogram("sluice_accept_to_done_seconds", "outcome=\"done\"", h_help,
                                  sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
  M.h_failed = sl_metrics_histogram("sluice_accept_to_done_seconds", "outcome=\"failed\"", h_help,
                                    sl_metrics_latency_bounds, sl_metrics_latency_nbounds);
  M.m_rebuilds =
      sl_metrics_counter("sluice_view_rebuilds_total", NULL,
                         "Times materialize found the Redis view gone and replayed the topics");
  M.m_rebuilt = sl_metrics_counter("sluice_view_rebuild_messages_total", NULL,
                                   "Messages replayed into Redis by view rebuilds");
  M.m_repaired = sl_metrics_counter(
      "sluice_view_repaired_total", NULL,
      "Question states view rebuilds wrote back (applies that changed the view): what Redis had "
      "lost, in the buckets rebuilt");
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
    sl_stage_opts o = {.stage = "materialize",
                       .common = &cc,
                       .topics = topics,
                       .ntopics = 2,
                       .start = start,
                       .ud = &M,
                       .admin = admin,
                       .on_dead_letter = sl__dead_letter_status};
    rc = sl_stage_run(&o, &sl__stop);
  }
  atomic_store(&M.stop_watch, 1);
  if (watching) pthread_join(watcher, NULL);
  free(M.live);
  pthread_mutex_destroy(&M.live_mu);
  sl_tls_free(M.redis);
  sl__stage_finish(&cc, own, 1, admin);
  return rc ? 1 : 0;
}

const sl__stage_desc sl__materialize_stage = {
    .name = "materialize",
    .summary = "writes question states and results into Redis",
    .kind = {"materialize", {SL__MSG_STATUS, SL__MSG_SUBMISSION, NULL}, {NULL}, 0, 1, 0},
    .table = materialize_table,
    .table_len = &materialize_table_len,
    .admin = "127.0.0.1:9184",
    .main = materialize_main};
