/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/plugin_stage.h — the one main of the stages that host a plugin (stt,
 * grade, the step host of `sluice stage NAME`). It opens the plugins of the
 * stage's kind, binds the stage's settings, starts the stage
 * (lib/stage.h), chooses the plugin, lets the stage set itself up, makes
 * the plugin's pool, runs the stage (a SYNC plugin whose storage is
 * blocking on the worker pool, everything else on the loop, with
 * lib/plugin_driver.h) and frees it all in reverse. A stage says only what
 * differs: its plugin operations and the sl__plugin_stage below.
 *
 * @locality the main thread; the ops run where lib/plugin_driver.h says.
 */
#ifndef SLUICE_LIB_PLUGIN_STAGE_H
#define SLUICE_LIB_PLUGIN_STAGE_H

#include <stddef.h>

#include "lib/objects.h"
#include "lib/plugin_driver.h"
#include "lib/plugin_pool.h"
#include "lib/stage.h"
#include "sluice/sl_pluginhost.h"
#include "sluice/sl_s3.h"

/* What the host holds for one run of a plugin stage; the stage's hooks
 * read and fill it. Owned by sl__plugin_stage_main. */
typedef struct {
  const char *name; /* the stage's name in the pipeline */
  const sl__plugin_ops *ops;
  sl_common_conf *cc;    /* the common settings, loaded */
  sl_s3_conf *s3;        /* storage settings when the stage binds them, else NULL */
  void *conf;            /* the stage's own settings (its descriptor's table) */
  void *state;           /* the stage's state: the ud of its ops */
  sl_plugin_lib *chosen; /* the plugin it runs */
  int sync;              /* the plugin is SYNC */
  sl__objects objects;   /* storage, when setup made it (has_objects) */
  int has_objects;
  sl__plugin_pool pool;
  const char *topics[1]; /* the topic it consumes: setup sets it */
  char provider[96];     /* "<name>-<plugin>" */
} sl__plugin_host;

typedef struct sl__plugin_stage {
  const char *kind; /* the plugin kind ("stt", "grade", "step") */
  const sl__plugin_ops *ops;
  size_t conf_size;  /* the stage's settings struct, bound to its table */
  size_t state_size; /* the stage's state, zeroed; its ops' ud */
  int s3;            /* the stage reads storage settings (sl_s3_conf_table) */
  /* the plugin to run: a name along plugin.path or a file path */
  const char *(*plugin_name)(const sl__plugin_host *h);
  /* after the plugin is chosen, before its pool is made: checks the
   * settings, fills the state, makes storage (sl__objects_init into
   * h->objects, then h->has_objects), sets h->topics[0] and what o needs
   * beyond the host's defaults (bytes_of; provider or on_dead_letter
   * cleared). 0, or SL_E* with the reason in err. */
  int (*setup)(sl__plugin_host *h, sl_stage_opts *o, char *err, size_t errlen);
} sl__plugin_stage;

/* Runs the plugin stage of descriptor d (d->plugin) as the stage `name`
 * (argv[0]: the subcommand or NAME). Returns an exit code, + 1000 when it
 * comes from the configuration loader. */
int sl__plugin_stage_main(const sl__stage_desc *d, const char *name, int argc, char **argv);

#endif
