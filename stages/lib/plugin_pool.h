/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/plugin_pool.h — the instances of a plugin a stage calls: SYNC plugins
 * get one per worker thread (created on first use), async ones a single
 * instance on the loop. init creates one instance at once (then frees it for
 * SYNC plugins), so a bad setting fails at start-up.
 */
#ifndef SLUICE_LIB_PLUGIN_POOL_H
#define SLUICE_LIB_PLUGIN_POOL_H

#include <stddef.h>

#include "sluice/sl_inline.h"
#include "sluice/sl_pluginhost.h"

struct sl__objects;

/* lib is borrowed (the caller's sl__plugins own it) and must outlive the
 * pool. objects: set by the stage when its plugin reads an object (then
 * the driver's ops->object names it); borrowed. */
typedef struct {
  sl_plugin_lib *lib;
  int sync;
  struct sl_tls *insts;        /* SYNC */
  sl_plugin_inst *inst;        /* async */
  struct sl__objects *objects; /* or NULL */
  /* SYNC runs started on the loop (sl__plugin_start): short ones run on
   * it, the rest on the pool, as the runtime decides for a processor
   * (sl_inline.h; max_ns from stage.inline_max_us). @locality the loop */
  sl_inline inl;
} sl__plugin_pool;
int sl__plugin_pool_init(sl__plugin_pool *pp, sl_plugin_lib *lib, char *err, size_t errlen);
/* The calling thread's instance (SYNC: @locality any worker) or the loop's
 * (async: @locality the loop); NULL with the reason in err. */
sl_plugin_inst *sl__plugin_pool_get(sl__plugin_pool *pp, char *err, size_t errlen);
/* NULL-safe; after the stage stopped. */
void sl__plugin_pool_free(sl__plugin_pool *pp);

#endif
