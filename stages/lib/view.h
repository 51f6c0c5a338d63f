/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/view.h — the view protocol: the Redis keys materialize writes the
 * question view under and the readers (results, ingest's sweep) read, and
 * how a reader tells that the view went back in time.
 *
 * Materialize owns the view: it sets the marker once the view is complete,
 * deletes it when a rebuild is due, and increments the write sequence on
 * every apply. A reader compares what it reads with what it saw last
 * (sl__view_seen) and waits, or rebuilds, when Redis lost writes.
 *
 * The keys, built here and nowhere else (sl__view_sub_key, sl__view_key):
 * a submission's hash "sl:sub:<tag><sid>", and per bucket b of the keyspace
 * (sluice/sl_rkey.h) the families below with b's tag appended:
 * "sl:view:seq<tag>", "sl:view:applied<tag>", "sl:view:epoch<tag>",
 * "sl:view:changes<tag>", "sl:pending<tag>". A submission's hash and its
 * bucket's keys share one hash tag, so the apply script touches one slot of
 * a Redis Cluster. redis.buckets = 0: no tag, one bucket, today's names.
 * Each bucket is a view of its own as far as loss goes: its own marker and
 * sequence, so a shard that failed over is noticed (and rebuilt) alone.
 */
#ifndef SLUICE_LIB_VIEW_H
#define SLUICE_LIB_VIEW_H

#include <stddef.h>

/* The Redis sorted set of questions still awaiting their upload: written by
 * materialize with the view, read by ingest's sweep (stages/ingest/sweep.h). */
#define SL__PENDING "sl:pending"
/* materialize's "<topic>:<partition>" -> highest offset applied (a bucket's) */
#define SL__VIEW_APPLIED "sl:view:applied"

/* The marker materialize sets once the Redis view is complete; missing while
 * it rebuilds a lost view (stages/materialize/materialize.c). */
#define SL__VIEW_MARKER "sl:view:epoch"

/* The view's write sequence: every apply increments it, so under one marker
 * it only grows; lower than a reader saw means Redis lost writes (an older
 * snapshot, a lagging replica; materialize.c, went_back()). */
#define SL__VIEW_SEQ "sl:view:seq"

/* A writing thread's own count of its applies in a bucket,
 * "sl:view:w<tag>:<writer>": every apply increments the bucket's sequence
 * and its writer's count (apply_lua.h). Other writers' applies refill the
 * shared sequence after a loss; only the writer refills its own count, so
 * an answer (or a read) below what the writer counted means Redis lost its
 * writes. Expires with the view's TTL after the writer's last apply. */
#define SL__VIEW_WRITER "sl:view:w"

/* The view's change feed: a Redis stream materialize's apply script appends
 * {k: "sl:sub:<sid>", v: version} to whenever a question's state changed;
 * results reads it to push server-sent events (stages/results/results.c). */
#define SL__VIEW_FEED "sl:view:changes"

/* The view as one reader last read it: the marker's value (Redis's clock
 * when the last rebuild started) and the write sequence under it; {0, 0}
 * before the first read. Owned by the reader; one thread reads into it. */
typedef struct {
  long long marker, seq;
} sl__view_seen;

/* Whether the view just read (marker, seq) went back in time from *seen:
 * an older marker, or a lower sequence under the same one, means Redis lost
 * writes the reader saw (restored from an older snapshot, failed over to a
 * lagging replica). Returns 1 and leaves *seen as it was; else records the
 * pair in *seen (a newer marker: a rebuild since, a new life of the view)
 * and returns 0. Materialize deletes the marker on 1 (a rebuild follows);
 * ingest's sweep waits until it reads a newer one. */
int sl__view_went_back(sl__view_seen *seen, long long marker, long long seq);

/* The longest view key: "sl:sub:" + tag + a submission id (64) */
#define SL__VIEW_KEY_MAX 96

/* dst := bucket b's key of a family above (SL__VIEW_SEQ, ...): the family
 * and b's tag (none when unbucketed). Cut to fit cap. */
void sl__view_key(char *dst, size_t cap, const char *family, int bucket);

/* dst := bucket b's count of the writer named writer (SL__VIEW_WRITER). Cut
 * to fit cap. */
void sl__view_writer_key(char *dst, size_t cap, int bucket, const char *writer);

/* dst := the view hash of submission sid, "sl:sub:<tag><sid>". Cut to fit
 * cap. */
void sl__view_sub_key(char *dst, size_t cap, const char *sid);

/* a, b and c one after the other into dst, cut to fit cap (as snprintf
 * would; without its cost on materialize's hot path) */
void sl__view_join3(char *dst, size_t cap, const char *a, const char *b, const char *c);

/* The submission id in a view hash key (what sl__view_sub_key built), or
 * NULL when key is not one. Points into key. */
const char *sl__view_sub_sid(const char *key);

/* 1 when bucket b's view marker is set, 0 when it is missing (a rebuild is
 * due or under way), SL_EREDIS with err set when Redis cannot say. b: the
 * bucket of the submission concerned (sl_rkey_bucket). @locality the thread
 * that owns r. */
struct sl_redis;
int sl__view_marker(struct sl_redis *r, int bucket, char *err, size_t errlen);

/* A question's view in Redis: the JSON of status st, whose state reads
 * label (malloc'd, NULL when out of memory). Defined by materialize, the
 * view's one writer (stages/materialize/materialize.c); declared here for
 * its unit test. */
struct Sluice__V1__QuestionStatus;
char *sl__status_view(const struct Sluice__V1__QuestionStatus *st, const char *label);

#endif
