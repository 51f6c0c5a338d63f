/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_cli.c — see sl_cli.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"

#include <stdio.h>
#include <string.h>

#define MAX_SETS 64

int sl_cli_load(int argc, char **argv, const char *stage, const char *summary,
                const sl_conf_bind *binds, size_t nbinds) {
  /* a subcommand of sluice ("presign"), or a program of its own
   * ("sluice-fakeprovider") */
  const char *pre = strncmp(stage, "sluice-", 7) == 0 ? "" : "sluice ";
  const char *file = NULL, *sets[MAX_SETS];
  size_t nsets = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: %s%s [--config FILE] [--set key=value]...\n\n%s\n\n"
             "Settings (file key, environment variable, default):\n",
             pre, stage, summary);
      for (size_t b = 0; b < nbinds; b++) sl_conf_print_help(binds[b].entries, binds[b].n, stdout);
      return 1000;
    } else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
      file = argv[++i];
    } else if (strcmp(a, "--set") == 0 && i + 1 < argc) {
      if (nsets == MAX_SETS) {
        fprintf(stderr, "%s%s: too many --set options\n", pre, stage);
        return 1002;
      }
      sets[nsets++] = argv[++i];
    } else {
      fprintf(stderr, "%s%s: unknown argument \"%s\" (try --help)\n", pre, stage, a);
      return 1002;
    }
  }
  char err[512];
  int rc = sl_conf_load(binds, nbinds, file, sets, nsets, err, sizeof err);
  if (rc) {
    fprintf(stderr, "%s%s: %s\n", pre, stage, err);
    sl_conf_release(binds, nbinds); /* what was loaded before the error */
    return 1002;
  }
  return 0;
}

int sl_cli_peek(int argc, char **argv, const char *key, char *buf, size_t len) {
  const char *file = NULL, *sets[MAX_SETS];
  size_t nsets = 0;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--config") == 0)
      file = argv[++i];
    else if (strcmp(argv[i], "--set") == 0 && nsets < MAX_SETS)
      sets[nsets++] = argv[++i];
  }
  return sl_conf_peek(file, sets, nsets, key, buf, len);
}
