/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_cli.h — the command line every `sluice <stage>` shares:
 *   --help                 list every setting (key, env var, default)
 *   --config FILE          key = value file
 *   --set key=value        override one setting (repeatable)
 * Loads the bound tables with sl_conf_load() and initialises logging from the
 * common table's log.level.
 */
#ifndef SLUICE_SL_CLI_H
#define SLUICE_SL_CLI_H

#include "sluice/sl_conf.h"

/* `stage` names the command in messages: a subcommand of sluice
 * ("presign": "sluice presign: ..."), or a program of its own when it starts
 * with "sluice-" ("sluice-fakeprovider: ...").
 * Returns 0 to go on, or a process exit code + 1000 to exit with at once
 * (1000 after --help, 1002 on a usage/config error, printed on stderr).
 * On any non-zero return nothing is left allocated in the bound structs. */
int sl_cli_load(int argc, char **argv, const char *stage, const char *summary,
                const sl_conf_bind *binds, size_t nbinds);

/* The value a setting will get from --config/--set/environment, read before
 * the tables are loaded (see sl_conf_peek). Returns 1 when set, else 0. */
int sl_cli_peek(int argc, char **argv, const char *key, char *buf, size_t len);

#endif
