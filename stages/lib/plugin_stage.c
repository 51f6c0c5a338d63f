/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_stage.c — the one main of the plugin stages (see plugin_stage.h):
 * open → bind → start → choose → set up → pool → options → run → free, once
 * for stt, grade and the step host.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/plugin_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/plugins.h"
#include "lib/process.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

#define MAX_BINDS 24

/* sl_stage_opts.process and .start: the drivers with the stage's ops */
static void run_process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  sl__plugin_host *h = ud;
  sl__plugin_process(&h->pool, h->ops, h->state, m, out, res);
}

static void run_start(void *ud, sl_job *job) {
  sl__plugin_host *h = ud;
  sl__plugin_start(&h->pool, h->ops, h->state, job);
}

/* The stage's settings, the plugin settings, storage's when it reads
 * them, and every opened plugin's, into b (MAX_BINDS): how many. */
static size_t bind_all(const sl__stage_desc *d, sl__plugin_host *h, sl__plugin_conf *pc,
                       sl__plugins *pl, sl_conf_bind *b) {
  size_t n = 0;
  if (d->table) b[n++] = (sl_conf_bind){d->table, *d->table_len, h->conf};
  b[n++] = (sl_conf_bind){sl__plugin_table, sl__plugin_table_len, pc};
  if (h->s3) b[n++] = (sl_conf_bind){sl_s3_conf_table, sl_s3_conf_table_len, h->s3};
  return n + sl__plugins_binds(pl, b + n, MAX_BINDS - n);
}

/* Choose, set up, pool: 0 or SL_E* with err. */
static int prepare(const sl__plugin_stage *ps, sl__plugin_host *h, sl__plugins *pl,
                   sl_stage_opts *o, char *err, size_t errlen) {
  int rc = sl__plugins_choose(pl, ps->kind, ps->plugin_name(h), err, errlen);
  if (rc) return rc;
  h->chosen = pl->chosen;
  const sl_plugin *pd = sl_plugin_lib_desc(h->chosen);
  h->sync = (pd->flags & SL_PLUGIN_SYNC) != 0;
  snprintf(h->provider, sizeof h->provider, "%s-%s", h->name, pd->name);
  o->provider = h->provider;
  rc = ps->setup(h, o, err, errlen);
  if (rc == 0) rc = sl__plugin_pool_init(&h->pool, h->chosen, err, errlen);
  if (rc == 0 && h->has_objects) h->pool.objects = &h->objects;
  h->pool.inl.max_ns = h->cc->inline_max_us > 0 ? (uint64_t)h->cc->inline_max_us * 1000 : 0;
  return rc;
}

/* Runs the stage until it is stopped: a SYNC plugin on the worker pool
 * (process) unless its storage is on the loop, anything else by way of
 * start. */
static int run(const sl__plugin_stage *ps, sl__plugin_host *h, sl_stage_opts *o) {
  /* with crypto.kek each input's data key is read with its claim
   * (sl_stage_opts.data_key); where the runtime does not claim
   * (stage.claim_lease_ms 0) the driver looks it up on the loop first, and
   * sl__plugin_start runs a SYNC plugin */
  o->data_key = 1;
  int via_process = h->sync && !(h->has_objects && h->objects.loop_sig) &&
                    (!sl_dkey_enabled() || sl_stage_reads_data_keys(o));
  const sl_plugin *pd = sl_plugin_lib_desc(h->chosen);
  sl_log(SL_LOG_INFO, NULL, "plugin %s/%s %s (%s) from %s", ps->kind, pd->name,
         pd->version ? pd->version : "",
         h->sync
             ? (via_process ? "sync, worker pool" : "sync, worker pool; storage on the event loop")
             : "async, event loop",
         sl_plugin_lib_file(h->chosen));
  o->topics = h->topics;
  o->ntopics = 1;
  o->process = via_process ? run_process : NULL;
  o->start = via_process ? NULL : run_start;
  return sl_stage_run(o, &sl__stop);
}

int sl__plugin_stage_main(const sl__stage_desc *d, const char *name, int argc, char **argv) {
  const sl__plugin_stage *ps = d->plugin;
  sl__plugins pl;
  int rc = sl__plugins_open(&pl, argc, argv, ps->kind);
  sl_common_conf cc = {0};
  sl_s3_conf s3 = {0};
  sl__plugin_conf pc = {0};
  sl__plugin_host h = {.name = name, .ops = ps->ops, .cc = &cc, .s3 = ps->s3 ? &s3 : NULL};
  h.conf = calloc(1, ps->conf_size ? ps->conf_size : 1);
  h.state = calloc(1, ps->state_size ? ps->state_size : 1);
  if (rc == 0 && (!h.conf || !h.state)) rc = 1001;
  sl_conf_bind own[MAX_BINDS];
  size_t nown = rc ? 0 : bind_all(d, &h, &pc, &pl, own);
  sl_admin *admin = NULL;
  if (rc == 0) rc = sl__stage_start(d, name, pl.argc, pl.argv, &cc, own, nown, &admin);
  if (rc) {
    free(h.conf);
    free(h.state);
    sl__plugins_close(&pl);
    return rc;
  }
  char err[1024] = "";
  sl_stage_opts o = {.stage = name,
                     .common = &cc,
                     .ud = &h,
                     .idempotent = 1,
                     .admin = admin,
                     .on_dead_letter = sl__dead_letter_status};
  rc = prepare(ps, &h, &pl, &o, err, sizeof err);
  if (rc == 0)
    rc = run(ps, &h, &o);
  else
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  sl__plugin_pool_free(&h.pool);
  sl__objects_free(&h.objects);
  sl__stage_finish(&cc, own, nown, admin);
  sl__plugins_close(&pl);
  free(h.conf);
  free(h.state);
  return rc ? 1 : 0;
}
