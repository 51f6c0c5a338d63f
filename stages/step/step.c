/*
 * step.c — `sluice stage NAME`: runs the stage NAME of the pipeline
 * description. A stage of a built-in kind (presign, ingest, stt, grade,
 * materialize, results) runs that kind's code, as `sluice <kind>` does; a
 * stage of kind "plugin" is a step: this generic host consumes its one
 * input topic, hands each message to its step plugin (plugin ABI 2, kind
 * "step"), and writes the output message to its output topic.
 *
 * The output message is the input itself when both topics carry one type
 * (a filter or a rewrite: every field passes through), else a new message
 * of the output type with the input's same-named single fields copied;
 * then the plugin's writes are applied by field path (sl_pbfield.h). The
 * plugin declares what it reads and writes, and the host refuses to start
 * when the messages around the stage lack one of those fields.
 *
 * Everything the runtime gives a stage applies: in-partition concurrency,
 * retry tiers and budget, dead letters, idempotency (a redelivered input
 * is answered from the stored output), and — with "provider": true in the
 * description — the provider gate. SYNC plugins run on the worker pool
 * with one instance per worker; async plugins run on the loop with the
 * stage's HTTP client.
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pbfield.h"

typedef struct {
  sl_common_conf *cc;
  const sl_pipeline_stage *st;
  const ProtobufCMessageDescriptor *in_desc, *out_desc;
  const char *out_topic;
  sl__plugin_pool pool;
} step;

/* The input decoded, and its key (bounded) for logs and the output. */
static int parse(void *ud, const rd_kafka_message_t *m, sl_result *res, void **out,
                 char key[SL__KEY_MAX]) {
  const step *s = ud;
  size_t kl = m->key_len < SL__KEY_MAX - 1 ? m->key_len : SL__KEY_MAX - 1;
  memcpy(key, m->key ? m->key : "", m->key ? kl : 0);
  key[m->key ? kl : 0] = '\0';
  ProtobufCMessage *msg = protobuf_c_message_unpack(s->in_desc, NULL, m->len, m->payload);
  if (!msg)
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "%s message is not a valid %s",
                  s->st->inputs[0], s->in_desc->name);
  *out = msg;
  return msg != NULL;
}

static void release(void *msg) { protobuf_c_message_free_unpacked(msg, NULL); }

static void input_for(void *ud, void *msg, const char *key, sl_plugin_input *in,
                      void **scratch) {
  (void)ud;
  (void)scratch;
  memset(in, 0, sizeof *in);
  in->struct_size = sizeof *in;
  in->key = key;
  in->prompt = "";
  in->language = "";
  in->message = msg;
}

/* a copy of a sub-message (pack, unpack with the default allocator) */
static ProtobufCMessage *copy_message(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  protobuf_c_message_pack(m, buf);
  ProtobufCMessage *c = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
  free(buf);
  return c;
}

/* A new message of the output type with the input's same-named single
 * fields (strings, numbers, sub-messages of the same type). */
static ProtobufCMessage *convert(const ProtobufCMessage *in,
                                 const ProtobufCMessageDescriptor *od) {
  ProtobufCMessage *o = calloc(1, od->sizeof_message);
  if (!o) return NULL;
  od->message_init(o);
  for (unsigned i = 0; i < od->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &od->fields[i];
    const ProtobufCFieldDescriptor *g =
        protobuf_c_message_descriptor_get_field_by_name(in->descriptor, f->name);
    if (!g || g->type != f->type || g->label == PROTOBUF_C_LABEL_REPEATED ||
        f->label == PROTOBUF_C_LABEL_REPEATED || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
        (g->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
      continue;
    if (f->type == PROTOBUF_C_TYPE_STRING) {
      const char *v = sl_pbfield_str(in, g->name);
      if (v && *v) sl_pbfield_set_str(o, f->name, v);
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
      const ProtobufCMessage *sub = *(ProtobufCMessage *const *)((const char *)in + g->offset);
      if (sub && f->descriptor == g->descriptor)
        *(ProtobufCMessage **)((char *)o + f->offset) = copy_message(sub);
    } else if (f->type != PROTOBUF_C_TYPE_BYTES) {
      double v;
      if (sl_pbfield_num(in, g->name, &v) == 0) sl_pbfield_set_num(o, f->name, v);
    }
  }
  return o;
}

static void finish(void *ud, void *in, const char *key, sl_plugin_result *pr, sl_outbox *out,
                   sl_result *res) {
  const step *s = ud;
  ProtobufCMessage *msg = in;
  if (!sl__plugin_outcome(pr, res)) return;
  if (!s->st->provider) res->provider_called = 0;
  ProtobufCMessage *o = s->out_desc == s->in_desc ? msg : convert(msg, s->out_desc);
  int rc = o ? 0 : SL_ENOMEM;
  for (size_t i = 0; rc == 0 && i < pr->nfields; i++) {
    const sl_plugin_field *f = &pr->fields[i];
    rc = f->is_num ? sl_pbfield_set_num(o, f->name, f->num)
                   : sl_pbfield_set_str(o, f->name, f->str);
    if (rc)
      sl_result_set(res, SL_OUTCOME_FAIL, "plugin_error", "the plugin's %s \"%s\" does not fit %s: %s",
                    f->is_num ? "number" : "string", f->name, s->out_desc->name, sl_strerror(rc));
  }
  if (rc == 0) {
    size_t n = protobuf_c_message_get_packed_size(o);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
      sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "packing the output");
    } else {
      protobuf_c_message_pack(o, buf);
      rc = sl_outbox_add(out, s->out_topic, key, buf, n);
      if (rc)
        sl_result_set(res, SL_OUTCOME_FAIL, "internal", "queueing the output: %s",
                      sl_strerror(rc));
      else
        sl_log(SL_LOG_DEBUG, key, "%s/%s in %lld ms: %zu field(s) written", s->st->name,
               s->st->plugin, (long long)pr->elapsed_ms, pr->nfields);
      free(buf);
    }
  } else if (!o) {
    sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "building the output");
  }
  if (o && o != msg) protobuf_c_message_free_unpacked(o, NULL);
}

static const sl__plugin_ops ops = {"step_setup", parse, input_for, finish, release};

static void process(void *ud, const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  sl__plugin_process(&((step *)ud)->pool, &ops, ud, m, out, res);
}

static void start(void *ud, sl_job *job) { sl__plugin_start(&((step *)ud)->pool, &ops, ud, job); }

/* The generic host for a stage of kind "plugin". */
static int run_step(int argc, char **argv, const char *name) {
  sl__plugins pl;
  int rc = sl__plugins_open(&pl, argc, argv, SL_PLUGIN_KIND_STEP);
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  sl_common_conf cc = {0};
  sl__plugin_conf pc = {0};
  sl_conf_bind own[24] = {{sl__plugin_table, sl__plugin_table_len, &pc}};
  size_t nown = 1 + sl__plugins_binds(&pl, own + 1, 24 - 1);
  sl_admin *admin = NULL;
  rc = sl__stage_start(pl.argc, pl.argv, name, "Runs a step plugin as a stage of the pipeline.",
                       &cc, own, nown, "127.0.0.1:9186", &admin);
  if (rc) {
    sl__plugins_close(&pl);
    return rc;
  }
  step s = {.cc = &cc, .st = sl_pipeline_stage_find(cc.pipeline, name)};
  char err[1024] = "", provider[96];
  s.in_desc = sl_pipeline_descriptor(sl_pipeline_message_of(cc.pipeline, s.st->inputs[0]));
  for (size_t i = 0; i < s.st->noutputs && !s.out_topic; i++)
    if (s.st->noutputs == 1 ||
        strcmp(sl_pipeline_message_of(cc.pipeline, s.st->outputs[i]), "sluice.v1.QuestionStatus"))
      s.out_topic = s.st->outputs[i];
  s.out_desc = sl_pipeline_descriptor(sl_pipeline_message_of(cc.pipeline, s.out_topic));
  rc = sl__plugins_choose(&pl, SL_PLUGIN_KIND_STEP, s.st->plugin, err, sizeof err);
  if (rc == 0) rc = sl_plugin_check_fields(pl.chosen, s.in_desc, s.out_desc, err, sizeof err);
  if (rc == 0) rc = sl__plugin_pool_init(&s.pool, pl.chosen, err, sizeof err);
  int sync = s.pool.sync;
  if (rc == 0) {
    const sl_plugin *d = sl_plugin_lib_desc(pl.chosen);
    snprintf(provider, sizeof provider, "%s-%s", name, d->name);
    sl_log(SL_LOG_INFO, NULL, "stage %s: plugin step/%s %s (%s) from %s; %s -> %s (%s -> %s)",
           name, d->name, d->version ? d->version : "", sync ? "sync, worker pool" : "async, event loop",
           sl_plugin_lib_file(pl.chosen), s.st->inputs[0], s.out_topic, s.in_desc->name,
           s.out_desc->name);
    const char *topics[] = {s.st->inputs[0]};
    sl_stage_opts o = {.stage = name, .common = &cc, .topics = topics, .ntopics = 1,
                       .process = sync ? process : NULL, .start = sync ? NULL : start,
                       .ud = &s, .provider = s.st->provider ? provider : NULL, .idempotent = 1,
                       .admin = admin,
                       /* a FAILED status for the user only where the stage writes statuses */
                       .on_dead_letter = sl_pipeline_topic_of(cc.pipeline, name, 1,
                                                              "sluice.v1.QuestionStatus")
                                             ? sl__dead_letter_status
                                             : NULL};
    rc = sl_stage_run(&o, &sl__stop);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "start-up failed: %s", err);
  }
  sl__plugin_pool_free(&s.pool);
  sl__stage_finish(&cc, own, nown, admin);
  sl__plugins_close(&pl);
  return rc ? 1 : 0;
}

int sl__stage_main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: sluice stage NAME [--config FILE] [--set key=value]... [--help]\n"
                    "Runs the stage NAME of the pipeline description (`sluice pipeline`).\n");
    return argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? 1000
                                                                                        : 1002;
  }
  const char *name = argv[1];
  char file[4096] = "", err[1024];
  sl_cli_peek(argc, argv, "pipeline.file", file, sizeof file);
  sl_pipeline *p = NULL;
  if (sl_pipeline_load(&p, file, err, sizeof err) != 0) {
    fprintf(stderr, "sluice stage %s: %s\n", name, err);
    return 1002;
  }
  const sl_pipeline_stage *st = sl_pipeline_stage_find(p, name);
  char kind[64] = "";
  if (st) snprintf(kind, sizeof kind, "%s", st->kind);
  sl_pipeline_free(p);
  if (!st) {
    fprintf(stderr, "sluice stage: the pipeline (%s) has no stage \"%s\" (see `sluice pipeline`)\n",
            file[0] ? file : "built-in", name);
    return 1002;
  }
  if (strcmp(kind, "plugin") == 0) return run_step(argc - 1, argv + 1, name);
  for (size_t i = 0; i < sl__nsubcommands; i++)
    if (strcmp(sl__subcommands[i].name, kind) == 0 && strcmp(kind, name) == 0)
      return sl__subcommands[i].main(argc - 1, argv + 1);
  fprintf(stderr, "sluice stage %s: a stage of kind %s must be named %s (for now)\n", name, kind,
          kind);
  return 1002;
}
