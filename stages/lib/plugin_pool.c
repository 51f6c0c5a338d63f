/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_pool.c — the instances of the plugin a stage calls (see
 * plugin_pool.h): one per worker thread (sl_tls) for SYNC plugins, one on
 * the loop for async ones.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/plugin_pool.h"

#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_tls.h"

static void *pool_create(void *arg, char *err, unsigned long errlen) {
  sl__plugin_pool *pp = arg;
  sl_plugin_inst *in = NULL;
  return sl_plugin_inst_new(&in, pp->lib, err, errlen) == 0 ? in : NULL;
}
static void pool_destroy(void *v) { sl_plugin_inst_free(v); }

int sl__plugin_pool_init(sl__plugin_pool *pp, sl_plugin_lib *lib, char *err, size_t errlen) {
  memset(pp, 0, sizeof *pp);
  pp->lib = lib;
  pp->sync = (sl_plugin_lib_desc(lib)->flags & SL_PLUGIN_SYNC) != 0;
  if (!pp->sync) return sl_plugin_inst_new(&pp->inst, lib, err, errlen);
  int rc = sl_tls_new(&pp->insts, pool_create, pool_destroy, pp);
  if (rc) return rc;
  sl_plugin_inst *probe = pool_create(pp, err, errlen);
  if (!probe) return SL_ECONFIG;
  sl_plugin_inst_free(probe);
  return 0;
}

sl_plugin_inst *sl__plugin_pool_get(sl__plugin_pool *pp, char *err, size_t errlen) {
  return pp->sync ? sl_tls_get(pp->insts, err, errlen) : pp->inst;
}

void sl__plugin_pool_free(sl__plugin_pool *pp) {
  if (!pp) return;
  sl_tls_free(pp->insts);
  sl_plugin_inst_free(pp->inst);
  pp->insts = NULL;
  pp->inst = NULL;
}
