/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugins.c — finding and choosing a stage's plugin (see plugins.h): every
 * plugin of the kind along plugin.path is opened before the configuration is
 * read, so their settings are known to the loader; one is chosen after.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/plugins.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"

#define PC(f) offsetof(sl__plugin_conf, f)
const sl_conf_entry sl__plugin_table[] = {
    {"plugin.path", SL_CONF_STR, "", PC(path),
     "':'-separated directories searched for <kind>-<name>.so plugins (\"\" = "
     "../lib/sluice/plugins next to the sluice binary)",
     0},
};
const size_t sl__plugin_table_len = sizeof sl__plugin_table / sizeof sl__plugin_table[0];

static void warn_plugin(const char *msg, void *ud) {
  fprintf(stderr, "sluice %s: skipping a plugin: %s\n", (const char *)ud, msg);
}

int sl__plugins_open(sl__plugins *p, int argc, char **argv, const char *kind) {
  memset(p, 0, sizeof *p);
  p->argv = calloc((size_t)argc + 2, sizeof *p->argv);
  if (!p->argv) return 1001;
  const char *direct = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--plugin") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sluice %s: --plugin needs a NAME\n", kind);
        return 1002;
      }
      snprintf(p->set_buf, sizeof p->set_buf, "%s.plugin=%s", kind, argv[++i]);
      p->argv[p->argc++] = "--set";
      p->argv[p->argc++] = p->set_buf;
      if (strchr(argv[i], '/')) direct = argv[i];
    } else {
      p->argv[p->argc++] = argv[i];
    }
  }
  char path[4096] = "", key[64], name[512] = "";
  sl_cli_peek(p->argc, p->argv, "plugin.path", path, sizeof path);
  snprintf(key, sizeof key, "%s.plugin", kind);
  if (!direct && sl_cli_peek(p->argc, p->argv, key, name, sizeof name) && strchr(name, '/'))
    direct = name;
  if (sl_plugin_scan(path, kind, &p->libs, &p->nlibs, warn_plugin, (void *)kind) != 0) return 1001;
  if (direct) {
    char err[1024];
    sl_plugin_lib *l = NULL;
    if (sl_plugin_lib_open(&l, NULL, kind, direct, err, sizeof err) != 0) {
      fprintf(stderr, "sluice %s: %s\n", kind, err);
      return 1002;
    }
    sl_plugin_lib **g = realloc(p->libs, (p->nlibs + 1) * sizeof *g);
    if (!g) {
      sl_plugin_lib_close(l);
      return 1001;
    }
    p->libs = g;
    p->libs[p->nlibs++] = l;
  }
  return 0;
}

size_t sl__plugins_binds(sl__plugins *p, sl_conf_bind *b, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < p->nlibs && n < max; i++) {
    sl_conf_bind c = sl_plugin_lib_conf(p->libs[i]);
    int dup = 0; /* a file path naming a plugin also found on the path */
    for (size_t j = 0; j < n; j++) dup |= b[j].entries == c.entries;
    if (c.n && !dup) b[n++] = c;
  }
  return n;
}

int sl__plugins_choose(sl__plugins *p, const char *kind, const char *name, char *err,
                       size_t errlen) {
  for (size_t i = 0; i < p->nlibs; i++) {
    const sl_plugin *d = sl_plugin_lib_desc(p->libs[i]);
    if (strchr(name, '/') ? strcmp(sl_plugin_lib_file(p->libs[i]), name) == 0
                          : strcmp(d->name, name) == 0) {
      p->chosen = p->libs[i];
      return 0;
    }
  }
  size_t off = (size_t)snprintf(err, errlen, "no %s plugin \"%s\" (available:", kind, name);
  for (size_t i = 0; i < p->nlibs && off < errlen; i++)
    off += (size_t)snprintf(err + off, errlen - off, " %s", sl_plugin_lib_desc(p->libs[i])->name);
  if (off < errlen)
    snprintf(err + off, errlen - off, "%s; plugin.path \"%s\")", p->nlibs ? "" : " none",
             sl_plugin_default_path());
  return SL_ENOTFOUND;
}

void sl__plugins_close(sl__plugins *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nlibs; i++) {
    sl_conf_bind c = sl_plugin_lib_conf(p->libs[i]);
    sl_conf_release(&c, 1);
  }
  sl_plugin_libs_free(p->libs, p->nlibs);
  free(p->argv);
  memset(p, 0, sizeof *p);
}
