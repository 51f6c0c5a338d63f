/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — the `sluice` binary: one subcommand per stage.
 *   sluice presign|ingest|stt|grade|materialize|results|notify|erase [--help]
 *   sluice stage NAME      the stage NAME of the pipeline (stages/step)
 *   sluice plugin run|list|doc   plugins outside a stage (stages/plugin)
 *   sluice config-doc      print every setting as Markdown (docs/configuration.md)
 *   sluice pipeline        print the pipeline description, resolved and checked
 *   sluice --version       version, git revision (baked in at build time), plugin ABI
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/auth.h"
#include "lib/callback.h"
#include "lib/plugins.h"
#include "lib/stage.h"
#include "sluice/sl_http.h"
#include "sluice/sl_plugin.h"
#include "sluice/sl_s3.h"
#include "sluice_version.h" /* generated: cmake/version.cmake */

/* Every stage and command of this binary, in `sluice --help` order: one
 * line each. A stage exports its descriptor (lib/stage.h); everything else
 * — help, config-doc, the pipeline's kinds, `sluice stage NAME` — reads
 * this list. */
#define SL__DESCRIPTORS(X)                                                                         \
  X(sl__presign_stage)                                                                             \
  X(sl__ingest_stage)                                                                              \
  X(sl__stt_stage)                                                                                 \
  X(sl__grade_stage)                                                                               \
  X(sl__materialize_stage)                                                                         \
  X(sl__results_stage)                                                                             \
  X(sl__notify_stage)                                                                              \
  X(sl__erase_stage)                                                                               \
  X(sl__plugin_command)                                                                            \
  X(sl__step_stage)

#define DECLARE(d) extern const sl__stage_desc d;
SL__DESCRIPTORS(DECLARE)
#define ENTRY(d) &d,
static const sl__stage_desc *const descriptors[] = {SL__DESCRIPTORS(ENTRY)};
static const size_t ndescriptors = sizeof descriptors / sizeof descriptors[0];

static int in_table(const sl_conf_entry *t, size_t n, const char *env) {
  char buf[256];
  for (size_t i = 0; i < n; i++)
    if (sl_conf_env_name(t[i].key, buf, sizeof buf) == 0 && strcmp(buf, env) == 0) return 1;
  return 0;
}

/* Any SLUICE_* variable some component declares is acceptable in the shared
 * environment; anything else is a typo worth refusing. */
static int known_env(const char *env) {
  /* read by the scripts in tools/ and tests/, not by the stages */
  static const char *tooling[] = {"SLUICE_BIN",
                                  "SLUICE_CACHE",
                                  "SLUICE_SOURCE_DIR",
                                  "SLUICE_TEST_PORT_BASE",
                                  "SLUICE_KEEP_SYSTEM_REDIS",
                                  "SLUICE_HARNESS",
                                  "SLUICE_API_KEY"};
  for (size_t i = 0; i < sizeof tooling / sizeof tooling[0]; i++)
    if (strcmp(env, tooling[i]) == 0) return 1;
  if (in_table(sl_common_conf_table, sl_common_conf_table_len, env) ||
      in_table(sl_s3_conf_table, sl_s3_conf_table_len, env) ||
      in_table(sl_http_conf_table, sl_http_conf_table_len, env) ||
      in_table(sl__plugin_table, sl__plugin_table_len, env) ||
      in_table(sl__auth_table, sl__auth_table_len, env) ||
      in_table(sl__callback_table, sl__callback_table_len, env))
    return 1;
  for (size_t i = 0; i < ndescriptors; i++) {
    const sl__stage_desc *d = descriptors[i];
    if ((d->table && in_table(d->table, *d->table_len, env)) ||
        (d->part_table && in_table(d->part_table, *d->part_table_len, env)))
      return 1;
  }
  /* settings of plugins this process does not load (one shell, all stages) */
  /* the fake provider's (tools/fakeprovider), read in the same shell */
  if (strncmp(env, "SLUICE_FAKEPROVIDER_", 20) == 0) return 1;
  if (strncmp(env, "SLUICE_STT_", 11) == 0 || strncmp(env, "SLUICE_GRADE_", 13) == 0 ||
      strncmp(env, "SLUICE_STEP_", 12) == 0)
    return sl_plugin_env_known(env);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: sluice <command> [--help]\n\ncommands:\n");
  for (size_t i = 0; i < ndescriptors; i++)
    fprintf(f, "  %-12s %s\n", descriptors[i]->name, descriptors[i]->summary);
  fprintf(f, "  %-12s %s\n", "pipeline", "print the pipeline description, resolved and checked");
  fprintf(f, "  %-12s %s\n", "config-doc", "print every setting as Markdown");
  fprintf(f, "  %-12s %s\n", "--version", "version, git revision and plugin ABI");
}

/* sluice pipeline [--json | --topics] [--file F]: the description stages
 * would run with (pipeline.file / SLUICE_PIPELINE_FILE, else the built-in
 * one), checked against the stage kinds of this binary. */
static int pipeline_cmd(int argc, char **argv) {
  const char *file = getenv("SLUICE_PIPELINE_FILE");
  int json = 0, topics = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--topics") == 0)
      topics = 1;
    else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
      file = argv[++i];
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: sluice pipeline [--json | --topics] [--file FILE]\n\n"
             "Prints the pipeline description (FILE, else SLUICE_PIPELINE_FILE, else the\n"
             "built-in one) resolved: stages, topics, retry tiers, consumer groups.\n"
             "--topics prints every topic the pipeline needs, one per line.\n"
             "Exits 2 with the reason when the description is not valid.\n");
      return 0;
    } else {
      fprintf(stderr, "sluice pipeline: unknown argument \"%s\" (try --help)\n", argv[i]);
      return 2;
    }
  }
  sl_pipeline *p = NULL;
  char err[1024];
  sl_pipeline_kind kinds[sizeof descriptors / sizeof descriptors[0]];
  size_t nk = sl__stage_kinds(kinds, ndescriptors);
  int rc = sl_pipeline_load(&p, file, err, sizeof err);
  if (rc == 0) rc = sl_pipeline_check_kinds(p, kinds, nk, err, sizeof err);
  if (rc) {
    fprintf(stderr, "sluice pipeline: %s\n", err);
    sl_pipeline_free(p);
    return 2;
  }
  if (topics) {
    const char *names[SL_PIPELINE_MAX_TOPICS + 3 + SL_PIPELINE_MAX_STAGES * SL_RETRY_TIERS_MAX];
    size_t n = sl_pipeline_all_topics(p, names, sizeof names / sizeof names[0]);
    for (size_t i = 0; i < n; i++) printf("%s\n", names[i]);
  } else {
    rc = sl_pipeline_print(p, stdout, json);
  }
  sl_pipeline_free(p);
  return rc ? 1 : 0;
}

static void config_doc(void) {
  printf("# Sluice configuration\n\nGenerated by `sluice config-doc`. Every key can be "
         "set in a `--config` file, as the environment variable shown, or with "
         "`--set key=value`.\n\n## Common (every stage)\n\n");
  sl_conf_print_markdown(sl_common_conf_table, sl_common_conf_table_len, stdout);
  printf("\n## Object storage (presign, ingest, stt)\n\n");
  sl_conf_print_markdown(sl_s3_conf_table, sl_s3_conf_table_len, stdout);
  printf("\n## HTTP servers (presign, results)\n\nDeadlines and caps of the HTTP server, "
         "each stage's own (a stage's table has its listen address and max_connections). "
         "See [security.md](security.md).\n\n");
  sl_conf_print_markdown(sl_http_conf_table, sl_http_conf_table_len, stdout);
  printf("\n## Plugins (stt, grade)\n\nEach plugin's own settings are in "
         "[plugins.md](plugins.md).\n\n");
  sl_conf_print_markdown(sl__plugin_table, sl__plugin_table_len, stdout);
  printf("\n## Callbacks (presign, notify)\n\nWhich `callback_url` a submission may name; "
         "presign checks it at create, notify again at every delivery. See "
         "[security.md](security.md).\n\n");
  sl_conf_print_markdown(sl__callback_table, sl__callback_table_len, stdout);
  printf("\n## Authentication (presign, results)\n\nAPI keys need no setting: they are "
         "issued with `sluicectl apikey add` and stored hashed in Redis. JWTs are accepted "
         "once a key is configured here. See [security.md](security.md).\n\n");
  sl_conf_print_markdown(sl__auth_table, sl__auth_table_len, stdout);
  for (size_t i = 0; i < ndescriptors; i++) {
    const sl__stage_desc *d = descriptors[i];
    if (!d->table) continue;
    printf("\n## sluice %s\n\n", d->name);
    sl_conf_print_markdown(d->table, *d->table_len, stdout);
    if (d->part_table) {
      printf("\n### %s\n\n", d->part_title);
      sl_conf_print_markdown(d->part_table, *d->part_table_len, stdout);
    }
  }
}

int main(int argc, char **argv) {
  sl__stages_register(descriptors, ndescriptors);
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
    printf("sluice %s\ngit revision %s\nplugin ABI %u\n", SLUICE_VERSION, SLUICE_GIT_REVISION,
           (unsigned)SL_PLUGIN_ABI_VERSION);
    return 0;
  }
  if (strcmp(argv[1], "config-doc") == 0) {
    config_doc();
    return 0;
  }
  if (strcmp(argv[1], "pipeline") == 0) return pipeline_cmd(argc - 1, argv + 1);
  sl_conf_set_known_env(known_env);
  for (size_t i = 0; i < ndescriptors; i++)
    if (strcmp(argv[1], descriptors[i]->name) == 0) {
      curl_global_init(CURL_GLOBAL_DEFAULT);
      int rc = sl__stage_desc_run(descriptors[i], descriptors[i]->name, argc - 1, argv + 1);
      curl_global_cleanup();
      return rc >= 1000 ? rc - 1000 : rc;
    }
  fprintf(stderr, "sluice: unknown command \"%s\"\n", argv[1]);
  usage(stderr);
  return 2;
}
