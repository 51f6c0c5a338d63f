/* SPDX-License-Identifier: Apache-2.0 */
/*
 * step.c — `sluice stage NAME`: runs the stage NAME of the pipeline
 * description. A stage of a built-in kind (presign, ingest, stt, grade,
 * materialize, results, notify) runs that kind's code, as `sluice <kind>` does; a
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
 * A step plugin that reads "@object" gets the object its input names
 * (object_key or upload.object_key) fetched from storage, and may store one
 * new object (host->out_object), which the host PUTs as
 * derived/<object key><suffix> before it writes the output. Both requests
 * run on the stage's event loop (sl__plugin_start), never on a worker: a
 * SYNC plugin's worker only runs the plugin, so the answers a replica holds
 * at once are bounded by stage.max_in_flight, not by stage.workers over
 * storage's latency. ingest
 * ignores storage events under derived/. Storage faults are handled as in
 * stt: unreachable, 5xx and a refused signature are retried; a missing or
 * oversized object fails for good.
 *
 * Everything the runtime gives a stage applies: in-partition concurrency,
 * retry tiers and budget, dead letters, idempotency (a redelivered input
 * is answered from the stored output), and — with "provider": true in the
 * description — the provider gate. SYNC plugins run on the worker pool
 * with one instance per worker; async plugins run on the loop with the
 * stage's HTTP client.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/plugin_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_pbfield.h"
#include "sluice/sl_s3.h"

typedef struct {
  int64_t max_object_bytes;
} step_conf;

static const sl_conf_entry step_table[] = {
    {"step.max_object_bytes", SL_CONF_INT, "67108864", offsetof(step_conf, max_object_bytes),
     "largest object a step that reads \"@object\" fetches from storage", 0},
};
static const size_t step_table_len = sizeof step_table / sizeof step_table[0];

typedef struct {
  sl_common_conf *cc;
  const sl_pipeline_stage *st;
  const ProtobufCMessageDescriptor *in_desc, *out_desc;
  const char *out_topic;
  const char *status_topic; /* where the stage writes statuses, or NULL */
  const char *progress;     /* the stage's progress label, or NULL */
  /* steps reading "@object" */
  const char *object_path; /* "object_key" / "upload.object_key", or NULL */
} step;

/* The question's progress as it enters this stage (best effort, as stt's
 * "transcribing"): when the stage has a progress label and writes
 * statuses, and its input names the question (submission_id and
 * question_no, at the top or under upload). */
static void emit_progress(const step *s, const ProtobufCMessage *msg, sl_outbox *out,
                          const char *key) {
  if (!s->progress || !s->status_topic) return;
  const char *sid = sl_pbfield_str(msg, "submission_id");
  double qno = 0, acc = 0;
  int have = sid && *sid && sl_pbfield_num(msg, "question_no", &qno) == 0;
  if (!have) {
    sid = sl_pbfield_str(msg, "upload.submission_id");
    have = sid && *sid && sl_pbfield_num(msg, "upload.question_no", &qno) == 0;
    if (have) sl_pbfield_num(msg, "upload.accepted_at_ms", &acc);
  } else {
    sl_pbfield_num(msg, "accepted_at_ms", &acc);
  }
  if (!have || qno < 1) return;
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = (char *)sid;
  st.question_no = (uint32_t)qno;
  /* the nearest built-in state, for readers from before progress labels */
  st.state = SLUICE__V1__QUESTION_STATE__QUEUED;
  st.at_ms = sl_now_ms();
  st.stage = (char *)s->st->name;
  st.accepted_at_ms = (int64_t)acc;
  st.progress = (char *)s->progress;
  sl_outbox_emit_now(out, s->status_topic, key, &st.base);
}

/* The input decoded, and its key (bounded) for logs and the output. */
static int parse(void *ud, const rd_kafka_message_t *m, sl_outbox *ob, sl_result *res, void **out,
                 char key[SL__KEY_MAX], ProtobufCAllocator *pa) {
  const step *s = ud;
  size_t kl = m->key_len < SL__KEY_MAX - 1 ? m->key_len : SL__KEY_MAX - 1;
  memcpy(key, m->key ? m->key : "", m->key ? kl : 0);
  key[m->key ? kl : 0] = '\0';
  /* not into the arena: finish edits the message in place with malloc'd
   * strings (sl_pbfield_set_str frees the ones it replaces) */
  (void)pa;
  ProtobufCMessage *msg = protobuf_c_message_unpack(s->in_desc, NULL, m->len, m->payload);
  if (!msg)
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "%s message is not a valid %s",
                  s->st->inputs[0], s->in_desc->name);
  *out = msg;
  if (msg) emit_progress(s, msg, ob, key);
  return msg != NULL;
}

static void release(void *msg, ProtobufCAllocator *pa) {
  (void)pa; /* parse used the system allocator */
  protobuf_c_message_free_unpacked(msg, NULL);
}

static int input_for(void *ud, void *msg, const char *key, sl_plugin_input *in, void **scratch,
                     sl_result *res) {
  const step *s = ud;
  memset(in, 0, sizeof *in);
  in->struct_size = sizeof *in;
  in->key = key;
  in->prompt = "";
  in->language = "";
  in->message = msg;
  if (!s->object_path) return 1;
  const char *okey = sl_pbfield_str(msg, s->object_path);
  if (!okey || !*okey) {
    sl_result_set(res, SL_OUTCOME_FAIL, "bad_message", "%s names no object (%s is empty)",
                  s->in_desc->name, s->object_path);
    return 0;
  }
  return 1;
}

/* the object the plugin reads (the driver fetches it) */
static const char *object_of(void *ud, void *msg) {
  const step *s = ud;
  return s->object_path ? sl_pbfield_str(msg, s->object_path) : NULL;
}

/* Where the plugin's new object goes: derived/<object key><suffix>
 * (sl__plugin_start stores it there before finish). Called only for a
 * plugin that reads an object, whose key input_for has checked. */
static int store_key(void *ud, void *in, const sl_plugin_result *pr, char *k, size_t klen,
                     sl_result *res) {
  const step *s = ud;
  const char *okey = sl_pbfield_str(in, s->object_path);
  if ((size_t)snprintf(k, klen, SL_S3_DERIVED_PREFIX "%s%s", okey ? okey : "", pr->object_suffix) >=
      klen) {
    sl_result_set(res, SL_OUTCOME_FAIL, "plugin_error", "derived object key too long");
    return 0;
  }
  return 1;
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
static ProtobufCMessage *convert(const ProtobufCMessage *in, const ProtobufCMessageDescriptor *od) {
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

static void finish(void *ud, void *in, const char *key, sl_plugin_result *pr, const char *stored,
                   sl_outbox *out, sl_result *res) {
  step *s = ud;
  ProtobufCMessage *msg = in;
  if (!sl__plugin_outcome(pr, res)) return;
  if (!s->st->provider) res->provider_called = 0;
  if (pr->object && !stored) {
    /* objects are stored only beside the one a plugin reads (store_key) */
    sl_result_set(res, SL_OUTCOME_FAIL, "plugin_error",
                  "the plugin returned an object to store, but reads none (\"@object\")");
    return;
  }
  const char *derived = stored ? stored : "";
  ProtobufCMessage *o = s->out_desc == s->in_desc ? msg : convert(msg, s->out_desc);
  int rc = o ? 0 : SL_ENOMEM;
  for (size_t i = 0; rc == 0 && i < pr->nfields; i++) {
    const sl_plugin_field *f = &pr->fields[i];
    const char *v = pr->object && strcmp(f->name, pr->object_field) == 0 ? derived : f->str;
    rc = f->is_num ? sl_pbfield_set_num(o, f->name, f->num) : sl_pbfield_set_str(o, f->name, v);
    if (rc)
      sl_result_set(res, SL_OUTCOME_FAIL, "plugin_error",
                    "the plugin's %s \"%s\" does not fit %s: %s", f->is_num ? "number" : "string",
                    f->name, s->out_desc->name, sl_strerror(rc));
  }
  if (rc == 0) {
    /* sealed again when the input was (the outbox has its key) */
    rc = sl_outbox_add_pb(out, s->out_topic, key, o);
    if (rc)
      sl_result_set(res, rc == SL_ENOMEM ? SL_OUTCOME_RETRY : SL_OUTCOME_FAIL,
                    rc == SL_ENOMEM ? "out_of_memory" : "internal", "queueing the output: %s",
                    sl_strerror(rc));
    else
      sl_log(SL_LOG_DEBUG, key, "%s/%s in %lld ms: %zu field(s) written", s->st->name,
             s->st->plugin, (long long)pr->elapsed_ms, pr->nfields);
  } else if (!o) {
    sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "building the output");
  }
  if (o && o != msg) protobuf_c_message_free_unpacked(o, NULL);
}

static const sl__plugin_ops ops = {.setup_class = "step_setup",
                                   .parse = parse,
                                   .input = input_for,
                                   .object = object_of,
                                   .store_key = store_key,
                                   .finish = finish,
                                   .release = release};

/* the step plugin the pipeline names for this stage */
static const char *plugin_name(const sl__plugin_host *h) {
  return sl_pipeline_stage_find(h->cc->pipeline, h->name)->plugin;
}

/* The messages around the stage (its input, and its one output that is
 * not the status topic, if it has more) into s. */
static void read_pipeline(step *s, const sl_pipeline *p, const char *name) {
  s->in_desc = sl_pipeline_descriptor(sl_pipeline_message_of(p, s->st->inputs[0]));
  for (size_t i = 0; i < s->st->noutputs && !s->out_topic; i++)
    if (s->st->noutputs == 1 ||
        strcmp(sl_pipeline_message_of(p, s->st->outputs[i]), "sluice.v1.QuestionStatus"))
      s->out_topic = s->st->outputs[i];
  s->out_desc = sl_pipeline_descriptor(sl_pipeline_message_of(p, s->out_topic));
  s->status_topic = sl_pipeline_topic_of(p, name, 1, "sluice.v1.QuestionStatus");
  s->progress = s->st->progress;
}

/* The stage as the pipeline describes it; the plugin's fields checked
 * against its messages; storage on the loop, whatever the plugin, when it
 * reads an object: no worker waits on it. */
static int setup(sl__plugin_host *h, sl_stage_opts *o, char *err, size_t errlen) {
  step *s = h->state;
  const step_conf *sc = h->conf;
  s->cc = h->cc;
  s->st = sl_pipeline_stage_find(h->cc->pipeline, h->name);
  read_pipeline(s, h->cc->pipeline, h->name);
  int rc = sl_plugin_check_fields(h->chosen, s->in_desc, s->out_desc, err, errlen);
  if (rc) return rc;
  h->topics[0] = s->st->inputs[0];
  if (!s->st->provider) o->provider = NULL;
  /* a FAILED status for the user only where the stage writes statuses */
  if (!s->status_topic) o->on_dead_letter = NULL;
  if ((s->object_path = sl_plugin_object_path(h->chosen, s->in_desc)) != NULL) {
    rc = sl__objects_init(&h->objects, h->s3, (size_t)sc->max_object_bytes, 120000, 0, err, errlen);
    h->has_objects = rc == 0;
  }
  if (rc == 0)
    sl_log(SL_LOG_INFO, NULL, "stage %s: %s -> %s (%s -> %s)", h->name, s->st->inputs[0],
           s->out_topic, s->in_desc->name, s->out_desc->name);
  return rc;
}

static const sl__plugin_stage step_host = {.kind = SL_PLUGIN_KIND_STEP,
                                           .ops = &ops,
                                           .conf_size = sizeof(step_conf),
                                           .state_size = sizeof(step),
                                           .s3 = 1,
                                           .plugin_name = plugin_name,
                                           .setup = setup};

/* `sluice stage NAME` (lib/stage.c) runs the stage NAME with the
 * descriptor of its kind; a stage of kind "plugin" is a step, run by this
 * host. */
const sl__stage_desc sl__step_stage = {
    .name = "stage",
    .summary = "run the stage NAME of the pipeline (a step plugin, or a built-in kind)",
    .kind = {"plugin", {NULL}, {NULL}, 0, 1, 1},
    .table = step_table,
    .table_len = &step_table_len,
    .admin = "127.0.0.1:9186",
    .main = sl__stage_main,
    .plugin = &step_host};
