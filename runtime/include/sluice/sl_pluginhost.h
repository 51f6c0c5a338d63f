/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pluginhost.h — the host side of the plugin ABI (sl_plugin.h): finding
 * and loading plugins, their configuration tables, instances, and running
 * one call with the outcome and results collected in an sl_plugin_result.
 *
 * The stt and grade stages and `sluice plugin run` all go through
 * sl_plugin_run(), so a plugin behaves the same under a stage and on the
 * command line.
 *
 * Search path: a ':'-separated list of directories holding
 * <kind>-<name>.so files; the default is ../lib/sluice/plugins next to the
 * directory of the running executable (the build tree and an installed
 * prefix both look like that).
 *
 * @locality Loading, configuration and instance creation happen at start-up
 * on one thread. A SYNC plugin's instance is used by one thread at a time
 * (the stage keeps one per worker); an async instance lives on the loop
 * thread and sl_plugin_run() must be called there.
 */
#ifndef SLUICE_SL_PLUGINHOST_H
#define SLUICE_SL_PLUGINHOST_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_plugin.h"

struct sl_httpc;

/* Upper bounds on what a plugin may report for one call. */
#define SL_PLUGIN_MAX_WORDS 20000
#define SL_PLUGIN_MAX_CRITERIA 16
#define SL_PLUGIN_MAX_TEXT 65536     /* bytes of any string field */
#define SL_PLUGIN_MAX_RAW_REPLY 8192 /* raw_reply is cut to this */
#define SL_PLUGIN_MAX_FIELDS 32      /* fields written by name in one call */

/* A loaded shared object. */
typedef struct sl_plugin_lib sl_plugin_lib;

/* The default search path (static string): <exe dir>/../lib/sluice/plugins. */
const char *sl_plugin_default_path(void);

/* Opens the plugin `name` of `kind` ("stt"/"grade"): a name containing '/'
 * is a file path, anything else is looked up as <kind>-<name>.so along
 * `path` (NULL = default). Checks the entry symbol, ABI version, struct
 * size, kind, name and config table. Returns 0, SL_ENOTFOUND, or
 * SL_EPLUGIN with the reason in err. */
int sl_plugin_lib_open(sl_plugin_lib **out, const char *path, const char *kind, const char *name,
                       char *err, size_t errlen);
/* dlclose()s the object. Instances made from it must be gone. NULL-safe. */
void sl_plugin_lib_close(sl_plugin_lib *lib);
const sl_plugin *sl_plugin_lib_desc(const sl_plugin_lib *lib);
const char *sl_plugin_lib_file(const sl_plugin_lib *lib);

/* The plugin's configuration as an sl_conf table bound to its values: keys
 * "<kind>.<name>.<key>". Pass it to sl_conf_load() with the stage's tables
 * and release it with sl_conf_release() (the lib owns the table). */
sl_conf_bind sl_plugin_lib_conf(sl_plugin_lib *lib);

/* Opens every plugin along `path` (NULL = default) whose kind is `kind`
 * (NULL = any), sorted by kind and name. Files that fail to load are
 * reported through `warn` (may be NULL) and skipped. The caller closes each
 * lib and frees the array with sl_plugin_libs_free(). Returns 0 or
 * SL_ENOMEM. */
int sl_plugin_scan(const char *path, const char *kind, sl_plugin_lib ***libs, size_t *n,
                   void (*warn)(const char *msg, void *ud), void *ud);
void sl_plugin_libs_free(sl_plugin_lib **libs, size_t n);

/* Is `env` (a SLUICE_* variable name) declared by some plugin's table along
 * the default path or $SLUICE_PLUGIN_PATH? Scans once and remembers. */
int sl_plugin_env_known(const char *env);

/* One instance (the plugin's create()). err gets the plugin's reason. */
typedef struct sl_plugin_inst sl_plugin_inst;
int sl_plugin_inst_new(sl_plugin_inst **out, sl_plugin_lib *lib, char *err, size_t errlen);
void sl_plugin_inst_free(sl_plugin_inst *inst);
int sl_plugin_inst_is_sync(const sl_plugin_inst *inst);

/* What one call produced. Strings are NULL when the plugin did not set them. */
typedef struct {
  char *name;
  double score;
  char *comment;
} sl_plugin_criterion;

/* A field written by name (out_str / out_num), for a step's output. */
typedef struct {
  char *name; /* the path */
  char *str;  /* when !is_num */
  double num;
  int is_num;
} sl_plugin_field;

typedef struct {
  sl_plugin_outcome outcome;
  char error_class[48];
  char reason[512];
  int64_t retry_after_ms;
  int throttled;
  int64_t elapsed_ms;
  /* stt */
  char *text, *language;
  double duration_s;
  double segments;       /* the transcript's segments (0: not reported) */
  double segment_pauses; /* gaps of 0.25 s or more between consecutive ones */
  sl_plugin_word *words; /* words[i].word owned here */
  size_t nwords;
  /* grade */
  char *level, *feedback, *raw_reply;
  double score, words_per_minute, lexical_variety, filler_rate, relevance;
  sl_plugin_criterion criteria[SL_PLUGIN_MAX_CRITERIA];
  size_t ncriteria;
  /* both */
  char *engine;
  double cost_units;
  /* every field written by name, in order (ABI 2; a step's output) */
  sl_plugin_field fields[SL_PLUGIN_MAX_FIELDS];
  size_t nfields;
  /* a step's new object (host->out_object), owned here; NULL when none */
  void *object;
  size_t object_len;
  char object_field[128]; /* the output field that gets its key */
  char object_suffix[40];
  char object_type[96]; /* Content-Type */
} sl_plugin_result;

/* Frees what the result holds and zeroes it. NULL-safe. */
void sl_plugin_result_clear(sl_plugin_result *r);

/* Called once per sl_plugin_run(); the result belongs to the callee (clear
 * it when done). SYNC: on the calling thread before sl_plugin_run returns;
 * async: on the loop thread. */
typedef void (*sl_plugin_done_fn)(sl_plugin_result *res, void *ud);

/* Runs one call. `http` is the loop's HTTP client (required for async
 * plugins, ignored for SYNC). Returns 0 (done will be called exactly once)
 * or a negative code (it will not). A plugin that breaks the contract
 * (completes twice, or a SYNC one returns without completing) gets a FAIL
 * outcome of class "plugin_error", never a crash of the host. */
int sl_plugin_run(sl_plugin_inst *inst, const sl_plugin_input *in, struct sl_httpc *http,
                  sl_plugin_done_fn done, void *ud);

/* Checks the fields the plugin declares (ABI 2: reads, writes) against
 * the message types around it: reads against in, writes against out
 * (single strings and numbers only). NULL in/out: not a protobuf message
 * (then the plugin may declare nothing on that side). ABI 1 plugins declare
 * nothing and pass. Returns 0 or SL_ECONFIG naming the plugin, the field
 * and what is missing. */
int sl_plugin_check_fields(const sl_plugin_lib *lib, const ProtobufCMessageDescriptor *in,
                           const ProtobufCMessageDescriptor *out, char *err, size_t errlen);

/* The path of the field naming the object a step reading "@object" gets
 * ("object_key" or "upload.object_key"), or NULL when the plugin does not
 * read "@object" or `in` has neither. */
const char *sl_plugin_object_path(const sl_plugin_lib *lib, const ProtobufCMessageDescriptor *in);

/* Outcome names: "done", "retry", "failed". */
const char *sl_plugin_outcome_name(sl_plugin_outcome o);

/* Writes docs/plugins.md (every plugin along the default path). */
void sl_plugin_print_markdown(sl_plugin_lib **libs, size_t n, void *out_file);

#endif
