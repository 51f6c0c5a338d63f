/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/plugins.h — the plugins a stage may run: every plugin of a kind along
 * plugin.path opened before the configuration is loaded (so their settings
 * are known to the loader and to --help), then the one the stage names
 * chosen. Used by the plugin stages (lib/plugin_stage.h) and `sluice plugin`.
 *
 * @locality the main thread, at start-up and shutdown.
 */
#ifndef SLUICE_LIB_PLUGINS_H
#define SLUICE_LIB_PLUGINS_H

#include <stddef.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_pluginhost.h"

typedef struct {
  char *path; /* plugin.path ("" = next to the binary) */
} sl__plugin_conf;
extern const sl_conf_entry sl__plugin_table[];
extern const size_t sl__plugin_table_len;

/* Owns the opened libraries and the rewritten argv (its strings are the
 * caller's, except set_buf). */
typedef struct {
  sl_plugin_lib **libs; /* every plugin of the kind along the path */
  size_t nlibs;
  sl_plugin_lib *chosen; /* one of libs, after sl__plugins_choose */
  char **argv;           /* argv with --plugin NAME rewritten as --set <kind>.plugin=NAME */
  int argc;
  char set_buf[512];
} sl__plugins;

/* Rewrites --plugin NAME, reads plugin.path early (sl_cli_peek) and opens
 * every plugin of `kind` along it, plus NAME itself when it is a file path,
 * so their settings are known to the config loader. Returns 0 or an exit
 * code + 1000 (message on stderr); sl__plugins_close either way. */
int sl__plugins_open(sl__plugins *p, int argc, char **argv, const char *kind);
/* Appends one sl_conf_bind per plugin to b (at most max). Returns how many. */
size_t sl__plugins_binds(sl__plugins *p, sl_conf_bind *b, size_t max);
/* Picks the plugin named `name` (or the file path) among the opened ones:
 * 0 and p->chosen, or SL_ENOTFOUND with the ones there are in err. */
int sl__plugins_choose(sl__plugins *p, const char *kind, const char *name, char *err,
                       size_t errlen);
/* Releases the plugins' settings and closes them. NULL-safe. */
void sl__plugins_close(sl__plugins *p);

#endif
