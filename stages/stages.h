/*
 * stages.h — what the `sluice` binary knows about its subcommands, and the
 * start-up/shutdown plumbing every stage main shares (internal, sl__ prefix).
 */
#ifndef SLUICE_STAGES_H
#define SLUICE_STAGES_H

#include <signal.h>

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

/* Raised by SIGTERM/SIGINT. */
extern volatile sig_atomic_t sl__stop;
void sl__install_signals(void);

/* Loads config (common table + the stage's own tables), sets up logging and
 * starts the admin endpoint (admin.listen or def_admin). Returns 0, or an exit
 * code + 1000 (see sl_cli_load). */
int sl__stage_start(int argc, char **argv, const char *stage, const char *summary,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown,
                    const char *def_admin, sl_admin **admin);

/* Releases what sl__stage_start() set up. */
void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown,
                      sl_admin *admin);

int sl__presign_main(int argc, char **argv);
int sl__ingest_main(int argc, char **argv);
int sl__stt_main(int argc, char **argv);
int sl__grade_main(int argc, char **argv);
int sl__materialize_main(int argc, char **argv);
int sl__results_main(int argc, char **argv);
int sl__fakeprovider_main(int argc, char **argv);

extern const sl_conf_entry sl__presign_table[], sl__ingest_table[], sl__stt_table[],
    sl__materialize_table[], sl__results_table[], sl__fakeprovider_table[];
extern const size_t sl__presign_table_len, sl__ingest_table_len, sl__stt_table_len,
    sl__materialize_table_len, sl__results_table_len, sl__fakeprovider_table_len;

#endif
