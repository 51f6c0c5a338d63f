/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stages.h — what the `sluice` binary knows about its subcommands, and the
 * start-up/shutdown plumbing every stage main shares (internal, sl__ prefix).
 */
#ifndef SLUICE_STAGES_H
#define SLUICE_STAGES_H

#include <signal.h>

#include <protobuf-c/protobuf-c.h>

#include "sluice/sl_admin.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_stage.h"

typedef struct {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv);
  const sl_conf_entry *table; /* the stage's own table (may be NULL) */
  const size_t *table_len;
} sl__subcommand;

extern const sl__subcommand sl__subcommands[];
extern const size_t sl__nsubcommands;

/* The Redis sorted set of questions still awaiting their upload: written by
 * materialize with the view, read by ingest's sweep (stages/ingest/sweep.h). */
#define SL__PENDING "sl:pending"

/* The marker materialize sets once the Redis view is complete; missing while
 * it rebuilds a lost view (stages/materialize/materialize.c). */
#define SL__VIEW_MARKER "sl:view:epoch"

/* The view's write sequence: every apply increments it, so under one marker
 * it only grows; lower than a reader saw means Redis lost writes (an older
 * snapshot, a lagging replica; materialize.c, went_back()). */
#define SL__VIEW_SEQ "sl:view:seq"

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

/* The view's change feed: a Redis stream materialize's apply script appends
 * {k: "sl:sub:<sid>", v: version} to whenever a question's state changed;
 * results reads it to push server-sent events (stages/results/results.c). */
#define SL__VIEW_FEED "sl:view:changes"

/* A question's view in Redis: the JSON of status st, whose state reads
 * label (materialize; malloc'd, NULL when out of memory). */
struct Sluice__V1__QuestionStatus;
char *sl__status_view(const struct Sluice__V1__QuestionStatus *st, const char *label);

/* 1 when the view marker is set, 0 when it is missing (a rebuild is due or
 * under way), SL_EREDIS with err set when Redis cannot say. */
struct sl_redis;
int sl__view_marker(struct sl_redis *r, char *err, size_t errlen);

/* "<host>:<pid>": who holds a Redis lock this process takes. */
void sl__owner_id(char *buf, size_t len);

/* The client address of req as text into out: the last entry of header
 * (the one a trusted proxy appended, e.g. X-Forwarded-For) when header is
 * non-empty and that entry is an IP address, else the TCP peer. 0, or -1
 * (out "") when there is none. Used by presign's rate limits and results'
 * stream caps. */
struct sl_http_req;
int sl__client_address(const struct sl_http_req *req, const char *header, char *out, size_t len);

/* Raised by SIGTERM/SIGINT. */
extern volatile sig_atomic_t sl__stop;
void sl__install_signals(void);

/* The stage kinds this binary runs: what each reads and writes (message
 * types), checked against the pipeline description at start-up. */
#include "sluice/sl_pipeline.h"
extern const sl_pipeline_kind sl__stage_kinds[];
extern const size_t sl__nstage_kinds;

/* Loads the pipeline description for stage (sl_common_pipeline), checks it
 * against sl__stage_kinds and that it has a stage of that name and kind.
 * Returns 0 or SL_ECONFIG with the reason in err. */
int sl__pipeline_load(sl_common_conf *cc, const char *stage, char *err, size_t errlen);

/* Loads config (common table + the stage's own tables), sets up logging and
 * starts the admin endpoint (admin.listen or def_admin). Returns 0, or an exit
 * code + 1000 (see sl_cli_load). */
int sl__stage_start(int argc, char **argv, const char *stage, const char *summary,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown, const char *def_admin,
                    sl_admin **admin);

/* The stages' dead-letter hook (sl_stage_opts.on_dead_letter): a subject
 * "<submission>/<question>" gets a FAILED QuestionStatus on the stage's status topic
 * with the dead letter's class and message, so the user sees the reason, and
 * what this stage's attempts cost (not what earlier stages did). */
void sl__dead_letter_status(const sl_stage_opts *o, const char *subject, const char *error_class,
                            const char *error_message, int64_t at_ms, double cost_units,
                            sl_outbox *out);

/* Releases what sl__stage_start() set up. */
void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin *admin);

/* `sluice stage NAME` (stages/step/step.c) */
int sl__stage_main(int argc, char **argv);

/* ---- plugins (stt, grade, step) ---- */
#include "sluice/sl_pluginhost.h"
#include "sluice/sl_s3.h"

typedef struct {
  char *path; /* plugin.path ("" = next to the binary) */
} sl__plugin_conf;
extern const sl_conf_entry sl__plugin_table[];
extern const size_t sl__plugin_table_len;

typedef struct {
  sl_plugin_lib **libs; /* every plugin of the kind along the path */
  size_t nlibs;
  sl_plugin_lib *chosen;
  char **argv; /* argv with --plugin NAME rewritten as --set <kind>.plugin=NAME */
  int argc;
  char set_buf[512];
} sl__plugins;

/* Rewrites --plugin NAME, reads plugin.path early (sl_cli_peek) and opens
 * every plugin of `kind` along it, plus NAME itself when it is a file path,
 * so their settings are known to the config loader. Returns 0 or an exit
 * code + 1000 (message on stderr). */
int sl__plugins_open(sl__plugins *p, int argc, char **argv, const char *kind);
/* Appends one sl_conf_bind per plugin to b (at most max). Returns how many. */
size_t sl__plugins_binds(sl__plugins *p, sl_conf_bind *b, size_t max);
/* Picks the plugin named `name` (or the file path) among the opened ones. */
int sl__plugins_choose(sl__plugins *p, const char *kind, const char *name, char *err,
                       size_t errlen);
void sl__plugins_close(sl__plugins *p);
/* Copies a RETRY/FAIL plugin outcome into the stage result (the provider
 * was called). Returns 1 when the outcome is DONE and outputs should follow. */
int sl__plugin_outcome(const sl_plugin_result *pr, sl_result *res);
/* Content type for a file name's extension ("audio/wav"), or
 * "application/octet-stream". */
const char *sl__audio_content_type(const char *name);

int sl__presign_main(int argc, char **argv);
int sl__ingest_main(int argc, char **argv);
int sl__stt_main(int argc, char **argv);
int sl__grade_main(int argc, char **argv);
int sl__materialize_main(int argc, char **argv);
int sl__results_main(int argc, char **argv);
int sl__plugin_main(int argc, char **argv);
int sl__notify_main(int argc, char **argv);

extern const sl_conf_entry sl__presign_table[], sl__ingest_table[], sl__stt_table[],
    sl__grade_table[], sl__materialize_table[], sl__results_table[], sl__step_table[],
    sl__notify_table[];
extern const size_t sl__presign_table_len, sl__ingest_table_len, sl__stt_table_len,
    sl__grade_table_len, sl__materialize_table_len, sl__results_table_len, sl__step_table_len,
    sl__notify_table_len;

/* The objects a plugin reads and writes: the uploaded answer fetched
 * before the call (stt; a step reading "@object"), in the answers' bucket,
 * and the one a step stores (host->out_object) under derived/, in the
 * derived target (s3.derived_bucket, s3.derived_endpoint), whence a later
 * stage fetches it. sl__plugin_process (sync:
 * 1): blocking signed requests on the worker thread, one storage connection
 * (kept open) per thread; sl__plugin_start (sync: 0): presigned GETs and
 * PUTs on the stage's loop, so no thread waits on storage. Storage faults
 * become the stage's outcome the same way everywhere: unreachable, 5xx,
 * 429, 408 and a refused signature (403/401: this replica's clock or keys)
 * are retried; a missing object or one over max_bytes fails for good. */
typedef struct {
  sl_s3_conf *s3;
  sl_s3_target target;  /* the answers' bucket */
  sl_s3_target derived; /* keys under SL_S3_DERIVED_PREFIX: s3.derived_bucket */
  size_t max_bytes;
  long timeout_ms;      /* requests on the loop */
  struct sl_tls *conns; /* sync: one sl_s3_conn per worker thread */
  sl_sigv4 *loop_sig;   /* on the loop: the loop's */
} sl__objects;
/* One signer (or connection) is made at once, so bad s3 settings fail at
 * start-up. */
int sl__objects_init(sl__objects *o, sl_s3_conf *s3, size_t max_bytes, long timeout_ms, int sync,
                     char *err, size_t errlen);
void sl__objects_free(sl__objects *o); /* NULL-safe */

/* The instances of a plugin a stage calls: SYNC plugins get one per worker
 * thread (created on first use), async ones a single instance on the loop.
 * init creates one instance at once (then frees it for SYNC plugins), so a
 * bad setting fails at start-up. objects: set by the stage when its plugin
 * reads an object (then ops->object names it). */
typedef struct {
  sl_plugin_lib *lib;
  int sync;
  struct sl_tls *insts; /* SYNC */
  sl_plugin_inst *inst; /* async */
  sl__objects *objects; /* or NULL */
} sl__plugin_pool;
int sl__plugin_pool_init(sl__plugin_pool *pp, sl_plugin_lib *lib, char *err, size_t errlen);
/* The calling thread's instance (SYNC) or the loop's (async); NULL with
 * the reason in err. */
sl_plugin_inst *sl__plugin_pool_get(sl__plugin_pool *pp, char *err, size_t errlen);
/* NULL-safe; after the stage stopped. */
void sl__plugin_pool_free(sl__plugin_pool *pp);

/* A bump allocator for protobuf-c's unpack over a caller's buffer (on its
 * stack): a message decoded, used and released within one call costs no
 * malloc or free per field (a Transcript is a dozen allocations and more, a
 * fifth of a grade run around a plugin that does nothing, bench/cost). What
 * does not fit is malloc'd and freed as usual ("spilled"). Not thread-safe:
 * one per call, on the calling thread's stack. */
typedef struct {
  ProtobufCAllocator a; /* hand &a to unpack and free_unpacked */
  unsigned char *buf;
  size_t cap, used;
  int spilled; /* something did not fit and was malloc'd */
} sl__pb_arena;
#define SL__PB_ARENA_BYTES 16384
void sl__pb_arena_init(sl__pb_arena *ar, void *buf, size_t cap);
/* msg (unpacked with pa, NULL: the system allocator) freed: nothing to do
 * when pa is an arena whose every allocation fit in its buffer. */
void sl__pb_free(void *msg, ProtobufCAllocator *pa);

/* What a plugin stage does around each call; the shared drivers below run
 * it on the worker pool (SYNC plugins) or on the loop (async ones), so the
 * stages that host a plugin (grade, the step host) differ only here. */
#define SL__KEY_MAX 160
typedef struct {
  const char *setup_class; /* retry class when no instance could be made */
  /* decodes m into *msg (owned, its memory from pa: an arena on the
   * driver's stack for a SYNC call, NULL for the system allocator) and key;
   * 0 with res set when it cannot; may emit a best-effort status at once
   * (sl_outbox_emit_now on out) */
  int (*parse)(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res, void **msg,
               char key[SL__KEY_MAX], ProtobufCAllocator *pa);
  /* the plugin's input for msg; *scratch (left NULL if unused) is freed
   * with free() once the call is over. 0 with res set: no call (the input
   * could not be prepared, e.g. its object could not be fetched) */
  int (*input)(void *ud, void *msg, const char *key, sl_plugin_input *in, void **scratch,
               sl_result *res);
  /* optional: the key of the object the plugin reads (NULL: none); the
   * driver fetches it (pool->objects) into in->audio, audio_len,
   * content_type and filename before the call */
  const char *(*object)(void *ud, void *msg);
  /* optional: where a new object the plugin returns (pr->object, on
   * SL_PLUGIN_DONE) is stored: its key into k[klen], 1; or 0 with res set.
   * sl__plugin_start PUTs it there before finish (sl__plugin_process never
   * stores: a stage whose plugin stores objects runs it with start) */
  int (*store_key)(void *ud, void *msg, const sl_plugin_result *pr, char *k, size_t klen,
                   sl_result *res);
  /* the outcome into out/res; stored: the key pr->object was stored as,
   * or NULL when nothing was stored */
  void (*finish)(void *ud, void *msg, const char *key, sl_plugin_result *pr, const char *stored,
                 sl_outbox *out, sl_result *res);
  void (*release)(void *msg, ProtobufCAllocator *pa); /* pa: parse's */
} sl__plugin_ops;

/* sl_stage_opts.process for a SYNC plugin: the calling worker's instance. */
void sl__plugin_process(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud,
                        const rd_kafka_message_t *m, sl_outbox *out, sl_result *res);
/* sl_stage_opts.start: the object the plugin reads is fetched, and the
 * one it returns stored, on the loop (pool->objects, made with sync 0);
 * an async plugin runs on the loop (its instance and the job's HTTP
 * client), a SYNC one on the worker pool (the worker's instance), so a
 * worker thread never waits on storage. The job is done when all of it is. */
void sl__plugin_start(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud, sl_job *job);

#endif
