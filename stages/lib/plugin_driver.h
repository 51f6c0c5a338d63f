/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/plugin_driver.h — running a stage's plugin on each message: the
 * shared drivers that decode, fetch the object the plugin reads, call the
 * plugin (on a worker for SYNC plugins, on the loop for async ones), store
 * the object it returns and hand the outcome back to the stage. A plugin
 * stage (lib/plugin_stage.h) differs from another only in its
 * sl__plugin_ops.
 */
#ifndef SLUICE_LIB_PLUGIN_DRIVER_H
#define SLUICE_LIB_PLUGIN_DRIVER_H

#include <protobuf-c/protobuf-c.h>

#include "lib/objects.h"
#include "lib/plugin_pool.h"
#include "sluice/sl_plugin.h"
#include "sluice/sl_stage.h"

/* What a plugin stage does around each call; the shared drivers below run
 * it on the worker pool (SYNC plugins) or on the loop (async ones), so the
 * stages that host a plugin (grade, the step host) differ only here. */
#define SL__KEY_MAX 160
typedef struct {
  const char *setup_class; /* retry class when no instance could be made */
  /* 1: the stage writes personal fields (sl_pbseal_personal), so with
   * crypto.kek it needs the submission's data key even when its input
   * holds nothing sealed (stt); an input that holds something sealed is
   * opened whatever this says (the driver looks the key up after parse) */
  int keyed;
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
 * worker thread never waits on storage, or on the loop once its runs prove
 * short (pool->inl, sl_inline.h: the runtime's rule for a processor; with
 * crypto.kek a SYNC grade comes this way, its data key looked up on the
 * loop first, and a rubric or no-op grade handed to a worker cost more
 * than the run). The job is done when all of it is. */
void sl__plugin_start(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud, sl_job *job);

/* Copies a RETRY/FAIL plugin outcome into the stage result (the provider
 * was called). Returns 1 when the outcome is DONE and outputs should follow. */
int sl__plugin_outcome(const sl_plugin_result *pr, sl_result *res);

#endif
