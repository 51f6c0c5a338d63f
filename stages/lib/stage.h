/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/stage.h — a stage declared once. Each stage exports one descriptor
 * (sl__stage_desc): its subcommand name, its one-line summary, the messages
 * it reads and writes (its pipeline kind), its settings, its default admin
 * address, and either its main or its plugin operations (lib/plugin_stage.h
 * runs those). stages/main.c lists the descriptors and registers them
 * (sl__stages_register); `sluice --help`, `sluice config-doc`, the pipeline
 * check of every stage, `sluice pipeline` and `sluice stage NAME` read them.
 * Adding a stage kind is one descriptor and one line in main.c
 * (CONTRIBUTING.md, "Writing a stage").
 *
 * Also the start-up and shutdown every stage main shares: configuration and
 * logging, the pipeline check, signals, the admin endpoint; and the dead
 * letter hook the stages that write statuses use.
 *
 * @locality the main thread, except sl__dead_letter_status (the loop).
 */
#ifndef SLUICE_LIB_STAGE_H
#define SLUICE_LIB_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_admin.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_stage.h"

struct sl__plugin_stage; /* lib/plugin_stage.h */

/* The message types the built-in kinds read and write (sl_pipeline_kind) */
#define SL__MSG_SUBMISSION "sluice.v1.SubmissionCreated"
#define SL__MSG_S3EVENT "json:s3-event"
#define SL__MSG_UPLOAD "sluice.v1.UploadCompleted"
#define SL__MSG_TRANSCRIPT "sluice.v1.Transcript"
#define SL__MSG_STATUS "sluice.v1.QuestionStatus"
#define SL__MSG_ERASURE "sluice.v1.ErasureRequest"

typedef struct sl__stage_desc {
  const char *name;    /* the subcommand: `sluice <name>` */
  const char *summary; /* one line: `sluice --help`, and the stage's --help */
  /* the pipeline kind (kind.kind NULL: a command that is no stage, e.g.
   * `sluice plugin`): what a stage of it reads and writes, checked against
   * the pipeline description at start-up */
  sl_pipeline_kind kind;
  const sl_conf_entry *table; /* its own settings, or NULL */
  const size_t *table_len;
  /* settings of a part of it documented in a section of their own, or NULL */
  const char *part_title;
  const sl_conf_entry *part_table;
  const size_t *part_table_len;
  const char *admin; /* default admin.listen ("127.0.0.1:91xx"), or NULL */
  /* its main (argv[0] is the subcommand), or NULL: the stage is a plugin
   * stage, run by sl__plugin_stage_main with `plugin`. Returns an exit
   * code, + 1000 when it comes from the configuration loader. */
  int (*main)(int argc, char **argv);
  const struct sl__plugin_stage *plugin;
} sl__stage_desc;

/* The descriptors this binary runs (borrowed: static, kept for the life of
 * the process). Called once by main() before any other function here. */
void sl__stages_register(const sl__stage_desc *const *descs, size_t n);
/* The registered descriptors: *n of them. */
const sl__stage_desc *const *sl__stages(size_t *n);
/* The descriptor whose pipeline kind is kind, or NULL. */
const sl__stage_desc *sl__stage_of_kind(const char *kind);
/* The registered stages' pipeline kinds into out (at most max): how many. */
size_t sl__stage_kinds(sl_pipeline_kind *out, size_t max);

/* `sluice <d->name>` (argv[0]: the subcommand): its main, else the plugin
 * stage main under the name name. */
int sl__stage_desc_run(const sl__stage_desc *d, const char *name, int argc, char **argv);

/* `sluice stage NAME`: the stage NAME of the pipeline, run by the
 * descriptor of its kind (argv[0] "stage", argv[1] NAME): its plugin
 * operations when it has them (the generic step host's descriptor is also
 * the `stage` subcommand), else its main. */
int sl__stage_main(int argc, char **argv);

/* Loads the pipeline description for stage (sl_common_pipeline), checks it
 * against the registered kinds and that it has a stage of that name and
 * kind. Returns 0 or SL_ECONFIG with the reason in err. */
int sl__pipeline_load(sl_common_conf *cc, const char *stage, char *err, size_t errlen);

/* Loads config (common table + the stage's own tables, own: borrowed),
 * sets up logging and starts the admin endpoint (admin.listen or
 * d->admin), for the stage `name` of descriptor d (its summary heads
 * --help). Returns 0, or an exit code + 1000 (see sl_cli_load); on an error
 * everything it set up is released. */
int sl__stage_start(const sl__stage_desc *d, const char *name, int argc, char **argv,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin **admin);

/* Releases what sl__stage_start() set up. */
void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin *admin);

/* The stages' dead-letter hook (sl_stage_opts.on_dead_letter): a subject
 * "<submission>/<question>" gets a FAILED QuestionStatus on the stage's status topic
 * with the dead letter's class and message, so the user sees the reason, and
 * what this stage's attempts cost (not what earlier stages did). */
void sl__dead_letter_status(const sl_stage_opts *o, const char *subject, const char *error_class,
                            const char *error_message, int64_t at_ms, double cost_units,
                            sl_outbox *out);

/* Declares which fields of Sluice's messages are personal (sealed with the
 * submission's data key, sl_pbseal_set_personal): the stages call it at
 * start-up, sluicectl before it opens a message. */
void sl__personal_register(void);

#endif
