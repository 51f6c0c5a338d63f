/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c — `sluice plugin`: run, list and document plugins outside a stage.
 *
 *   sluice plugin run stt|grade|step NAME [--config FILE] [--set k=v]... [--prompt TEXT]
 *                    [--object-out FILE] INPUT
 *   sluice plugin list [--set plugin.path=DIR]
 *   sluice plugin doc          (docs/plugins.md)
 *
 * `run` loads the plugin exactly as a stage does (same search path, same
 * configuration keys and sources, sl_plugin_run with the same host), runs it
 * once on INPUT — an audio file for STT and for a step that reads the
 * uploaded object (step/preflight: as an UploadCompleted of that file; the
 * output is the fields it writes and the object it would store, saved with
 * --object-out), a transcript JSON for graders
 * ({"transcript":..., "duration_s":..., "prompt":..., "words":[...]}) — and
 * prints the outcome as one JSON object on stdout. Async plugins get a libuv
 * loop and the runtime's HTTP client, as under the stage.
 *
 * Exit status: 0 done, 3 retry later, 4 failed for good, 2 usage or input
 * error, 1 the plugin could not be loaded or created.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/objects.h"
#include "lib/plugins.h"
#include "lib/stage.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "sluice.pb-c.h"
#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_file.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pbfield.h"

#define SL_RUN_MAX_INPUT (512u << 20)
#define MAX_SETS 64

static int usage(FILE *f) {
  fprintf(
      f, "usage: sluice plugin run stt|grade|step NAME [--config FILE] [--set key=value]...\n"
         "                         [--prompt TEXT] [--language LANG] [--object-out FILE] INPUT\n"
         "       sluice plugin list [--set plugin.path=DIRS]\n"
         "       sluice plugin doc\n\n"
         "run: one plugin call through the stage's plugin host; prints the outcome as JSON.\n"
         "  INPUT is an audio file (stt, and a step that reads \"@object\", such as\n"
         "  step/preflight; --object-out saves the object it stores) or a transcript\n"
         "  JSON (grade):\n"
         "  {\"transcript\": \"...\", \"duration_s\": 30.5, \"prompt\": \"...\", "
         "\"words\": [{\"word\": \"...\", \"start_s\": 0, \"end_s\": 0.4}],\n"
         "   \"upload\": {\"speaking_s\": 28.1, \"pauses\": 6, ...}}  (the answer's numbers, e.g.\n"
         "  preflight's timing: what a grader reads as upload.<name>)\n"
         "  exit 0 done, 3 retry, 4 failed, 2 usage/input error, 1 plugin not loadable\n");
  return f == stdout ? 0 : 2;
}

static int write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, len, f);
  return fclose(f) == 0 && w == len ? 0 : -1;
}

typedef struct {
  int finished;
  sl_plugin_result res;
} run_ctx;

static void on_done(sl_plugin_result *r, void *ud) {
  run_ctx *c = ud;
  c->res = *r;
  c->finished = 1;
}

static json_t *result_json(const sl_plugin *d, int sync, const sl_plugin_result *r) {
  json_t *o = json_object();
  char name[128];
  snprintf(name, sizeof name, "%s/%s", d->kind, d->name);
  json_object_set_new(o, "plugin", json_string(name));
  json_object_set_new(o, "version", json_string(d->version ? d->version : ""));
  json_object_set_new(o, "mode", json_string(sync ? "sync" : "async"));
  json_object_set_new(o, "outcome", json_string(sl_plugin_outcome_name(r->outcome)));
  if (r->outcome != SL_PLUGIN_DONE) {
    json_object_set_new(o, "error_class", json_string(r->error_class));
    json_object_set_new(o, "reason", json_string(r->reason));
    if (r->outcome == SL_PLUGIN_RETRY) {
      json_object_set_new(o, "retry_after_ms", json_integer(r->retry_after_ms));
      json_object_set_new(o, "throttled", json_boolean(r->throttled));
    }
  }
  json_object_set_new(o, "elapsed_ms", json_integer(r->elapsed_ms));
  if (r->engine) json_object_set_new(o, "engine", json_string(r->engine));
  json_object_set_new(o, "cost_units", json_real(r->cost_units));
  if (!strcmp(d->kind, SL_PLUGIN_KIND_STEP)) {
    json_t *f = json_object();
    for (size_t i = 0; i < r->nfields; i++)
      json_object_set_new(f, r->fields[i].name,
                          r->fields[i].is_num
                              ? json_real(r->fields[i].num)
                              : json_string(r->fields[i].str ? r->fields[i].str : ""));
    json_object_set_new(o, "fields", f);
    if (r->object)
      json_object_set_new(o, "object",
                          json_pack("{s:s,s:s,s:s,s:I}", "field", r->object_field, "suffix",
                                    r->object_suffix, "content_type", r->object_type, "bytes",
                                    (json_int_t)r->object_len));
  } else if (!strcmp(d->kind, SL_PLUGIN_KIND_STT)) {
    if (r->text) json_object_set_new(o, "text", json_string(r->text));
    if (r->language) json_object_set_new(o, "language", json_string(r->language));
    json_object_set_new(o, "duration_s", json_real(r->duration_s));
    if (r->segments >= 1) {
      json_object_set_new(o, "segments", json_real(r->segments));
      json_object_set_new(o, "segment_pauses", json_real(r->segment_pauses));
    }
    json_t *w = json_array();
    for (size_t i = 0; i < r->nwords; i++)
      json_array_append_new(w, json_pack("{s:s,s:f,s:f}", "word", r->words[i].word, "start_s",
                                         r->words[i].start_s, "end_s", r->words[i].end_s));
    json_object_set_new(o, "words", w);
  } else {
    json_object_set_new(o, "score", json_real(r->score));
    if (r->level) json_object_set_new(o, "level", json_string(r->level));
    if (r->feedback) json_object_set_new(o, "feedback", json_string(r->feedback));
    json_object_set_new(o, "words_per_minute", json_real(r->words_per_minute));
    json_object_set_new(o, "lexical_variety", json_real(r->lexical_variety));
    json_object_set_new(o, "filler_rate", json_real(r->filler_rate));
    json_object_set_new(o, "relevance", json_real(r->relevance));
    json_t *c = json_array();
    for (size_t i = 0; i < r->ncriteria; i++)
      json_array_append_new(c, json_pack("{s:s,s:f,s:s}", "name", r->criteria[i].name, "score",
                                         r->criteria[i].score, "comment",
                                         r->criteria[i].comment ? r->criteria[i].comment : ""));
    json_object_set_new(o, "criteria", c);
    if (r->raw_reply) json_object_set_new(o, "raw_reply", json_string(r->raw_reply));
  }
  return o;
}

/* Fills in for a grade call from the transcript JSON; words go to *wbuf. */
static int grade_input(json_t *j, sl_plugin_input *in, sl_plugin_word **wbuf, char *err,
                       size_t errlen) {
  json_t *t = json_object_get(j, "transcript");
  if (!t) t = json_object_get(j, "text");
  json_t *d = json_object_get(j, "duration_s");
  if (!json_is_string(t) || !json_is_number(d) || !(json_number_value(d) > 0)) {
    snprintf(err, errlen,
             "grade input needs \"transcript\" (string) and \"duration_s\" "
             "(number > 0)");
    return -1;
  }
  in->transcript = json_string_value(t);
  in->duration_s = json_number_value(d);
  json_t *p = json_object_get(j, "prompt");
  if (json_is_string(p) && !in->prompt[0]) in->prompt = json_string_value(p);
  json_t *l = json_object_get(j, "language");
  if (json_is_string(l) && !in->language[0]) in->language = json_string_value(l);
  json_t *w = json_object_get(j, "words");
  if (json_is_array(w) && json_array_size(w)) {
    *wbuf = calloc(json_array_size(w), sizeof **wbuf);
    if (!*wbuf) return -1;
    size_t i;
    json_t *x;
    json_array_foreach(w, i, x) {
      json_t *ww = json_object_get(x, "word");
      if (!json_is_string(ww)) {
        snprintf(err, errlen, "words[%zu].word must be a string", i);
        return -1;
      }
      (*wbuf)[i] =
          (sl_plugin_word){json_string_value(ww), json_number_value(json_object_get(x, "start_s")),
                           json_number_value(json_object_get(x, "end_s"))};
    }
    in->words = *wbuf;
    in->nwords = json_array_size(w);
  }
  return 0;
}

/* `sluice plugin run`'s arguments (pointers into argv). */
typedef struct {
  const char *kind, *name, *file, *sets[MAX_SETS], *input, *prompt, *lang, *object_out;
  size_t nsets;
} run_args;

/* Reads argv (from "run") into a: 0, or 2 with the reason on stderr. */
static int run_args_parse(int argc, char **argv, run_args *a) {
  *a = (run_args){.kind = argv[1], .name = argv[2], .prompt = "", .lang = ""};
  if (strcmp(a->kind, "stt") && strcmp(a->kind, "grade") && strcmp(a->kind, "step")) {
    fprintf(stderr, "sluice plugin run: kind must be stt, grade or step, not \"%s\"\n", a->kind);
    return 2;
  }
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) {
      a->file = argv[++i];
    } else if (!strcmp(argv[i], "--set") && i + 1 < argc && a->nsets < MAX_SETS) {
      a->sets[a->nsets++] = argv[++i];
    } else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) {
      a->prompt = argv[++i];
    } else if (!strcmp(argv[i], "--language") && i + 1 < argc) {
      a->lang = argv[++i];
    } else if (!strcmp(argv[i], "--object-out") && i + 1 < argc) {
      a->object_out = argv[++i];
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "sluice plugin run: unknown or incomplete option \"%s\"\n", argv[i]);
      return 2;
    } else if (!a->input) {
      a->input = argv[i];
    } else {
      fprintf(stderr, "sluice plugin run: one INPUT only (got \"%s\" too)\n", argv[i]);
      return 2;
    }
  }
  if (!a->input) {
    fprintf(stderr, "sluice plugin run: INPUT missing\n");
    return 2;
  }
  return 0;
}

/* The plugin's input, and what it points at (owned here until run_free). */
typedef struct {
  sl_plugin_input in;
  Sluice__V1__UploadCompleted up;
  Sluice__V1__Transcript tr; /* grade: the message a grader reads by name */
  char *data;
  size_t len;
  json_t *tj;
  sl_plugin_word *wbuf;
} run_input;

static void run_input_free(run_input *ri) {
  json_decref(ri->tj);
  free(ri->wbuf);
  free(ri->data);
}

/* ri's Transcript message, for a grader reading fields by name: its text,
 * duration and prompt, and the upload's numbers the JSON's "upload" object
 * names (e.g. preflight's timing: {"speaking_s": 5.2, "pauses": 2}). 0, or
 * -1 with the reason in err. */
static int grade_message(run_input *ri, char *err, size_t errlen) {
  ri->tr = (Sluice__V1__Transcript)SLUICE__V1__TRANSCRIPT__INIT;
  ri->tr.text = (char *)ri->in.transcript;
  ri->tr.duration_s = ri->in.duration_s;
  ri->tr.upload = &ri->up;
  ri->up.submission_id = "plugin-run";
  ri->up.question_no = 1;
  ri->up.prompt = (char *)ri->in.prompt;
  json_t *u = json_object_get(ri->tj, "upload");
  if (u && !json_is_object(u)) {
    snprintf(err, errlen, "\"upload\" must be an object of numbers");
    return -1;
  }
  const char *k;
  json_t *v;
  json_object_foreach(u, k, v) {
    if (!json_is_number(v) || sl_pbfield_set_num(&ri->up.base, k, json_number_value(v)) != 0) {
      snprintf(err, errlen, "upload.%.64s: not a number field of UploadCompleted", k);
      return -1;
    }
  }
  ri->in.message = &ri->tr.base;
  return 0;
}

/* INPUT read into ri: audio (stt, and a step as an upload of it), else a
 * transcript JSON. 0, or 2 with the reason on stderr. */
static int run_input_read(const run_args *a, run_input *ri) {
  char err[1024] = "";
  memset(ri, 0, sizeof *ri);
  ri->up = (Sluice__V1__UploadCompleted)SLUICE__V1__UPLOAD_COMPLETED__INIT;
  sl_plugin_input *in = &ri->in;
  in->struct_size = sizeof *in;
  in->question_no = 1;
  in->key = "plugin-run/1";
  in->prompt = a->prompt;
  in->language = a->lang;
  int r = sl_file_read(a->input, SL_RUN_MAX_INPUT, (uint8_t **)&ri->data, &ri->len);
  if (r) {
    fprintf(stderr, "sluice plugin run: cannot read %s%s\n", a->input,
            r == SL_ETOOBIG ? ": larger than 512 MiB" : "");
    return 2;
  }
  if (!strcmp(a->kind, "stt") || !strcmp(a->kind, "step")) {
    sl__give_object(in, a->input, ri->data, ri->len);
    /* a step reads its message by name: an upload of INPUT as question 1 */
    ri->up.submission_id = "plugin-run";
    ri->up.question_no = 1;
    ri->up.object_key = (char *)in->filename;
    ri->up.size = ri->len;
    ri->up.content_type = (char *)in->content_type;
    ri->up.prompt = (char *)a->prompt;
    in->message = &ri->up.base;
    return 0;
  }
  json_error_t je;
  ri->tj = json_loadb(ri->data, ri->len, 0, &je);
  if (!json_is_object(ri->tj)) {
    fprintf(stderr, "sluice plugin run: %s is not a JSON object (%s, line %d)\n", a->input, je.text,
            je.line);
    return 2;
  }
  if (grade_input(ri->tj, in, &ri->wbuf, err, sizeof err) || grade_message(ri, err, sizeof err)) {
    fprintf(stderr, "sluice plugin run: %s: %s\n", a->input, err);
    return 2;
  }
  return 0;
}

/* The outcome as JSON on stdout (the object into --object-out): the exit
 * code. */
static int run_report(const run_args *a, sl_plugin_lib *lib, int sync, sl_plugin_result *res) {
  int exit_code = 0;
  json_t *o = result_json(sl_plugin_lib_desc(lib), sync, res);
  if (a->object_out && res->object && write_file(a->object_out, res->object, res->object_len)) {
    fprintf(stderr, "sluice plugin run: cannot write %s\n", a->object_out);
    exit_code = 2;
  }
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  if (s) puts(s);
  free(s);
  json_decref(o);
  if (!exit_code)
    exit_code = res->outcome == SL_PLUGIN_DONE ? 0 : res->outcome == SL_PLUGIN_RETRY ? 3 : 4;
  return exit_code;
}

/* One call of a new instance of lib on in, on a loop of its own (async
 * plugins) as under the stage: the exit code. */
static int run_once(const run_args *a, sl_plugin_lib *lib, const sl_plugin_input *in) {
  char err[1024] = "";
  sl_plugin_inst *inst = NULL;
  if (sl_plugin_inst_new(&inst, lib, err, sizeof err) != 0) {
    fprintf(stderr, "sluice plugin run: %s\n", err);
    return 1;
  }
  int exit_code;
  run_ctx ctx = {0};
  uv_loop_t loop;
  sl_httpc *http = NULL;
  int sync = sl_plugin_inst_is_sync(inst);
  int rc = uv_loop_init(&loop);
  if (rc == 0 && !sync) rc = sl_httpc_new(&http, &loop);
  if (rc == 0) rc = sl_plugin_run(inst, in, http, on_done, &ctx);
  if (rc == 0 && !sync) uv_run(&loop, UV_RUN_DEFAULT);
  if (rc == 0 && !ctx.finished) {
    ctx.res.outcome = SL_PLUGIN_FAIL;
    snprintf(ctx.res.error_class, sizeof ctx.res.error_class, "plugin_error");
    snprintf(ctx.res.reason, sizeof ctx.res.reason,
             "the plugin left the loop idle without completing the call");
  }
  if (rc) {
    fprintf(stderr, "sluice plugin run: %s\n", sl_strerror(rc));
    exit_code = 1;
  } else {
    exit_code = run_report(a, lib, sync, &ctx.res);
  }
  sl_plugin_result_clear(&ctx.res);
  sl_plugin_inst_free(inst);
  sl_httpc_free(http);
  uv_run(&loop, UV_RUN_DEFAULT); /* let closed handles finish */
  uv_loop_close(&loop);
  return exit_code;
}

static int cmd_run(int argc, char **argv) {
  if (argc < 4) return usage(stderr);
  run_args a;
  int rc = run_args_parse(argc, argv, &a);
  if (rc) return rc;
  char path[4096] = "", err[1024] = "";
  sl_conf_peek(a.file, a.sets, a.nsets, "plugin.path", path, sizeof path);
  sl_plugin_lib *lib = NULL;
  if (sl_plugin_lib_open(&lib, path, a.kind, a.name, err, sizeof err) != 0) {
    fprintf(stderr, "sluice plugin run: %s\n", err);
    return 1;
  }
  if (!strcmp(a.kind, "step") &&
      !sl_plugin_object_path(lib, &sluice__v1__upload_completed__descriptor)) {
    fprintf(stderr,
            "sluice plugin run: step/%s does not read an object (\"@object\"): it runs "
            "on messages in its stage (sluice stage NAME)\n",
            a.name);
    sl_plugin_lib_close(lib);
    return 2;
  }
  sl__plugin_conf pc = {0};
  sl_conf_bind binds[2] = {{sl__plugin_table, sl__plugin_table_len, &pc}, sl_plugin_lib_conf(lib)};
  rc = sl_conf_load(binds, 2, a.file, a.sets, a.nsets, err, sizeof err);
  int exit_code = 2;
  if (rc) {
    fprintf(stderr, "sluice plugin run: %s\n", err);
  } else {
    run_input ri;
    exit_code = run_input_read(&a, &ri);
    if (!exit_code) exit_code = run_once(&a, lib, &ri.in);
    run_input_free(&ri);
  }
  sl_conf_release(binds, 2);
  sl_plugin_lib_close(lib);
  return exit_code;
}

static void warn_skip(const char *msg, void *ud) {
  (void)ud;
  fprintf(stderr, "sluice plugin: skipping: %s\n", msg);
}

static int cmd_list_doc(int argc, char **argv, int doc) {
  char path[4096] = "";
  const char *sets[MAX_SETS];
  size_t nsets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < MAX_SETS) {
      sets[nsets++] = argv[++i];
    } else {
      fprintf(stderr, "sluice plugin: unknown argument \"%s\"\n", argv[i]);
      return 2;
    }
  }
  if (!doc) sl_conf_peek(NULL, sets, nsets, "plugin.path", path, sizeof path);
  sl_plugin_lib **libs = NULL;
  size_t n = 0;
  if (sl_plugin_scan(path, NULL, &libs, &n, warn_skip, NULL) != 0) return 1;
  if (doc) {
    sl_plugin_print_markdown(libs, n, stdout);
  } else {
    for (size_t i = 0; i < n; i++) {
      const sl_plugin *d = sl_plugin_lib_desc(libs[i]);
      printf("%-6s %-14s %-8s %-5s %s\n", d->kind, d->name, d->version ? d->version : "",
             (d->flags & SL_PLUGIN_SYNC) ? "sync" : "async", sl_plugin_lib_file(libs[i]));
    }
  }
  sl_plugin_libs_free(libs, n);
  return n ? 0 : 1;
}

static int plugin_main(int argc, char **argv) {
  sl_log_init("plugin", "warn");
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage(stdout);
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
  if (!strcmp(argv[1], "list")) return cmd_list_doc(argc - 1, argv + 1, 0);
  if (!strcmp(argv[1], "doc")) return cmd_list_doc(argc - 1, argv + 1, 1);
  fprintf(stderr, "sluice plugin: unknown command \"%s\"\n", argv[1]);
  return usage(stderr);
}

/* no pipeline kind: `sluice plugin` runs outside the pipeline */
const sl__stage_desc sl__plugin_command = {
    .name = "plugin",
    .summary = "run one plugin on one input, list plugins, document them",
    .main = plugin_main};
