/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.c — start-up and shutdown shared by the stage mains: config and
 * logging, signals, the admin endpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include "stages.h"
#include "sluice/sl_tls.h"

#include <uv.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/sl_cli.h"
#include "sluice/sl_http.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_redis.h"
#include "sluice.pb-c.h"

volatile sig_atomic_t sl__stop;

int sl__view_marker(sl_redis *r, char *err, size_t errlen) {
  const char *argv[] = {"EXISTS", SL__VIEW_MARKER};
  redisReply *rep = sl_redis_argv(r, 2, argv, NULL, err, errlen);
  int rc = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer == 1 : SL_EREDIS;
  if (rep && rep->type == REDIS_REPLY_ERROR) snprintf(err, errlen, "redis: %s", rep->str);
  if (rep) freeReplyObject(rep);
  return rc;
}

int sl__view_went_back(sl__view_seen *seen, long long marker, long long seq) {
  if (marker < seen->marker || (marker == seen->marker && seq < seen->seq)) return 1;
  seen->marker = marker;
  seen->seq = seq;
  return 0;
}

int sl__client_address(const sl_http_req *req, const char *header, char *out, size_t len) {
  const char *h = header && header[0] ? sl_http_req_header(req, header) : NULL;
  if (h) {
    const char *last = strrchr(h, ',');
    last = last ? last + 1 : h;
    while (*last == ' ') last++;
    char tmp[64], bin[16];
    size_t n = strcspn(last, " ");
    if (n > 0 && n < sizeof tmp) {
      memcpy(tmp, last, n);
      tmp[n] = '\0';
      if (uv_inet_pton(AF_INET, tmp, bin) == 0 || uv_inet_pton(AF_INET6, tmp, bin) == 0) {
        snprintf(out, len, "%s", tmp);
        return 0;
      }
    }
  }
  if (sl_http_req_peer(req, out, len) == 0) return 0;
  if (len) out[0] = '\0';
  return -1;
}

void sl__owner_id(char *buf, size_t len) {
  char host[32] = "";
  gethostname(host, sizeof host - 1);
  snprintf(buf, len, "%s:%ld", host, (long)getpid());
}

void sl__dead_letter_status(const sl_stage_opts *o, const char *subject, const char *error_class,
                            const char *error_message, int64_t at_ms, double cost_units,
                            sl_outbox *out) {
  char sid[64];
  unsigned qno;
  if (!subject || sl_key_parse(subject, strlen(subject), sid, &qno) != 0) return;
  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = sid;
  st.question_no = qno;
  st.state = SLUICE__V1__QUESTION_STATE__FAILED;
  st.at_ms = at_ms;
  st.stage = (char *)o->stage;
  st.error_class = (char *)error_class;
  st.error_message = (char *)error_message;
  st.cost_units = cost_units;
  sl_outbox_add_pb(out, o->common->topic_results, subject, &st.base);
}

static void on_signal(int sig) {
  (void)sig;
  sl__stop = 1;
}

void sl__install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

/* ---- the pipeline ---------------------------------------------------------- */

#define M_SUB "sluice.v1.SubmissionCreated"
#define M_S3 "json:s3-event"
#define M_UP "sluice.v1.UploadCompleted"
#define M_TR "sluice.v1.Transcript"
#define M_QS "sluice.v1.QuestionStatus"
const sl_pipeline_kind sl__stage_kinds[] = {
    {"presign", {NULL}, {M_SUB, M_S3, NULL}, 0, 0, 0},
    {"ingest", {M_S3, NULL}, {M_UP, M_QS, NULL}, 0, 1, 0},
    {"stt", {M_UP, NULL}, {M_TR, M_QS, NULL}, 1, 1, 0},
    {"grade", {M_TR, NULL}, {M_QS, NULL}, 1, 1, 0},
    {"materialize", {M_QS, M_SUB, NULL}, {NULL}, 0, 1, 0},
    {"results", {NULL}, {NULL}, 0, 0, 0},
    {"notify", {M_QS, NULL}, {NULL}, 0, 1, 0},
    /* `sluice stage NAME`: a step plugin (stages/step/step.c) */
    {"plugin", {NULL}, {NULL}, 0, 1, 1},
};
const size_t sl__nstage_kinds = sizeof sl__stage_kinds / sizeof sl__stage_kinds[0];

int sl__pipeline_load(sl_common_conf *cc, const char *stage, char *err, size_t errlen) {
  int rc = sl_common_pipeline(cc, stage, err, errlen);
  if (rc == 0)
    rc = sl_pipeline_check_kinds(cc->pipeline, sl__stage_kinds, sl__nstage_kinds, err, errlen);
  if (rc) return rc;
  const sl_pipeline_stage *s = sl_pipeline_stage_find(cc->pipeline, stage);
  if (!s) {
    snprintf(err, errlen, "pipeline %s has no stage \"%s\"",
             cc->pipeline_file && *cc->pipeline_file ? cc->pipeline_file : "(built-in)", stage);
    return SL_ECONFIG;
  }
  int builtin = 0; /* a stage named like a built-in kind is of that kind */
  for (size_t i = 0; i < sl__nstage_kinds; i++)
    builtin |= !sl__stage_kinds[i].generic && strcmp(sl__stage_kinds[i].kind, stage) == 0;
  if (strcmp(s->kind, builtin ? stage : "plugin") != 0) {
    snprintf(err, errlen, "stage \"%s\" of the pipeline is of kind %s, not %s", stage, s->kind,
             builtin ? stage : "plugin");
    return SL_ECONFIG;
  }
  return 0;
}

int sl__stage_start(int argc, char **argv, const char *stage, const char *summary,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown, const char *def_admin,
                    sl_admin **admin) {
  sl_conf_bind binds[32];
  size_t nb = 0;
  binds[nb++] = (sl_conf_bind){sl_common_conf_table, sl_common_conf_table_len, cc};
  for (size_t i = 0; i < nown && nb < 32; i++) binds[nb++] = own[i];
  int rc = sl_cli_load(argc, argv, stage, summary, binds, nb);
  if (rc) return rc;
  if (sl_log_init(stage, cc->log_level) != 0) {
    fprintf(stderr, "sluice %s: log.level must be debug, info, warn or error\n", stage);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  char err[1024];
  if (sl__pipeline_load(cc, stage, err, sizeof err) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s", err);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  if (sl_common_secure(cc, 1, err, sizeof err) != 0) {
    sl_log(SL_LOG_ERROR, NULL, "%s", err);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  sl__install_signals();
  const char *listen = cc->admin_listen && *cc->admin_listen ? cc->admin_listen : def_admin;
  rc = sl_admin_start(admin, listen);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "admin endpoint %s: %s", listen, sl_strerror(rc));
    sl__stage_finish(cc, own, nown, NULL);
    return 1001;
  }
  sl_log(SL_LOG_INFO, NULL, "admin endpoint on http://%s (/healthz /readyz /metrics)", listen);
  return 0;
}

void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown, sl_admin *admin) {
  sl_admin_stop(admin);
  sl_common_release(cc);
  sl_conf_bind c = {sl_common_conf_table, sl_common_conf_table_len, cc};
  sl_conf_release(&c, 1);
  sl_conf_release(own, nown);
  sl_log(SL_LOG_INFO, NULL, "stopped");
}

/* ---- plugins ---------------------------------------------------------------- */

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

static void *pool_create(void *arg, char *err, unsigned long errlen) {
  sl__plugin_pool *pp = arg;
  sl_plugin_inst *in = NULL;
  return sl_plugin_inst_new(&in, pp->lib, err, errlen) == 0 ? in : NULL;
}
static void pool_destroy(void *v) { sl_plugin_inst_free(v); }

int sl__plugin_pool_init(sl__plugin_pool *pp, sl_plugin_lib *lib, char *err, size_t errlen) {
  memset(pp, 0, sizeof *pp);
  pp->lib = lib;
  pp->sync = (sl_plugin_lib_desc(lib)->flags & SL_PLUGIN_SYNC) != 0;
  if (!pp->sync) return sl_plugin_inst_new(&pp->inst, lib, err, errlen);
  int rc = sl_tls_new(&pp->insts, pool_create, pool_destroy, pp);
  if (rc) return rc;
  sl_plugin_inst *probe = pool_create(pp, err, errlen);
  if (!probe) return SL_ECONFIG;
  sl_plugin_inst_free(probe);
  return 0;
}

sl_plugin_inst *sl__plugin_pool_get(sl__plugin_pool *pp, char *err, size_t errlen) {
  return pp->sync ? sl_tls_get(pp->insts, err, errlen) : pp->inst;
}

void sl__plugin_pool_free(sl__plugin_pool *pp) {
  if (!pp) return;
  sl_tls_free(pp->insts);
  sl_plugin_inst_free(pp->inst);
  pp->insts = NULL;
  pp->inst = NULL;
}

/* ---- the objects plugins read and write ---- */

static void *signer_new(void *arg, char *err, unsigned long errlen) {
  const sl__objects *o = arg;
  sl_sigv4 *sig = NULL;
  int rc = sl_sigv4_new(&sig, o->s3->access_key, o->s3->secret_key, o->s3->region, "s3");
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  return sig;
}

static void *conn_new(void *arg, char *err, unsigned long errlen) {
  const sl__objects *o = arg;
  sl_s3_conn *c = NULL;
  int rc = sl_s3_conn_new(&c, o->s3);
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  return c;
}
static void conn_free(void *v) { sl_s3_conn_free(v); }

int sl__objects_init(sl__objects *o, sl_s3_conf *s3, size_t max_bytes, long timeout_ms, int sync,
                     char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  o->s3 = s3;
  o->max_bytes = max_bytes;
  o->timeout_ms = timeout_ms;
  int rc = sl_s3_target_init(&o->target, s3);
  if (rc == 0) rc = sl_s3_target_init_derived(&o->derived, s3);
  if (rc) {
    snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
    return rc;
  }
  if (!sync) {
    o->loop_sig = signer_new(o, err, errlen);
    return o->loop_sig ? 0 : SL_ECONFIG;
  }
  rc = sl_tls_new(&o->conns, conn_new, conn_free, o);
  if (rc) return rc;
  sl_s3_conn *probe = conn_new(o, err, errlen);
  if (!probe) return SL_ECONFIG;
  sl_s3_conn_free(probe);
  return 0;
}

void sl__objects_free(sl__objects *o) {
  if (!o) return;
  sl_tls_free(o->conns);
  sl_sigv4_free(o->loop_sig);
  o->conns = NULL;
  o->loop_sig = NULL;
}

/* Where key lives: a derived object in the derived target, an answer in
 * the answers' bucket. */
static const sl_s3_target *target_of(const sl__objects *o, const char *key) {
  return sl_s3_is_derived(key) ? &o->derived : &o->target;
}

/* Storage's answer to a GET or PUT of key as the stage's outcome. */
static void storage_fault(sl_result *res, int rc, long status, const char *key, const char *why) {
  if (rc == SL_EUNAVAIL || (rc == SL_ESTORAGE && (status >= 500 || status == 429 || status == 408)))
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", why);
  else if (rc == SL_ESTORAGE && (status == 403 || status == 401))
    /* the object exists (ingest saw it), so the fault is this replica's: a
     * clock off by more than the signature allows, or credentials being
     * rotated; retried, so another replica or this one fixed can get it */
    sl_result_set(res, SL_OUTCOME_RETRY, "storage_denied",
                  "%s: HTTP %ld: storage refused this replica's signature (is its clock right? "
                  "are s3.access_key/s3.secret_key current?)",
                  key, status);
  else
    sl_result_set(res, SL_OUTCOME_FAIL, rc == SL_ETOOBIG ? "audio_too_large" : "storage", "%s",
                  why);
}

/* the fetched object as the plugin's input */
static void give_object(sl_plugin_input *in, const char *key, const void *data, size_t len) {
  in->audio = data;
  in->audio_len = len;
  in->content_type = sl__audio_content_type(key);
  const char *slash = strrchr(key, '/');
  in->filename = slash ? slash + 1 : key;
}

/* SYNC: the object of msg fetched on this worker into *data (NULL when the
 * plugin reads none). 0, or <0 with res set. */
static int fetch_sync(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud, void *msg,
                      sl_plugin_input *in, void **data, sl_result *res) {
  const char *key = pp->objects && ops->object ? ops->object(ud, msg) : NULL;
  if (!key) return 0;
  char err[512] = "";
  sl_s3_conn *conn = sl_tls_get(pp->objects->conns, err, sizeof err);
  if (!conn) {
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", err);
    return SL_ECONFIG;
  }
  size_t len = 0;
  long status = 0;
  int rc = sl_s3_get(conn, target_of(pp->objects, key), key, pp->objects->max_bytes, data, &len,
                     &status, err, sizeof err);
  if (rc) {
    storage_fault(res, rc, status, key, err);
    return rc;
  }
  give_object(in, key, *data, len);
  return 0;
}

/* ---- protobuf arena ---- */

static void *arena_alloc(void *data, size_t size) {
  sl__pb_arena *ar = data;
  /* aligned for any type, as malloc's: the address, whatever the buffer's */
  const uintptr_t align = _Alignof(max_align_t), base = (uintptr_t)ar->buf;
  size_t at = (size_t)(((base + ar->used + align - 1) & ~(align - 1)) - base);
  if (size <= ar->cap && at <= ar->cap - size) {
    ar->used = at + size;
    return ar->buf + at;
  }
  ar->spilled = 1;
  return malloc(size ? size : 1);
}

static void arena_free(void *data, void *p) {
  sl__pb_arena *ar = data;
  unsigned char *c = p;
  /* inside the buffer: it goes with the buffer (compared as integers: the
   * two need not be parts of one object) */
  if (c && (uintptr_t)c >= (uintptr_t)ar->buf && (uintptr_t)c < (uintptr_t)(ar->buf + ar->cap))
    return;
  free(p);
}

void sl__pb_arena_init(sl__pb_arena *ar, void *buf, size_t cap) {
  *ar = (sl__pb_arena){.a = {arena_alloc, arena_free, ar}, .buf = buf, .cap = buf ? cap : 0};
}

void sl__pb_free(void *msg, ProtobufCAllocator *pa) {
  if (!msg) return;
  if (pa && pa->alloc == arena_alloc && !((sl__pb_arena *)pa->allocator_data)->spilled) return;
  protobuf_c_message_free_unpacked(msg, pa);
}

/* ---- running a plugin for each message ---- */

static void take_result(sl_plugin_result *r, void *ud) { *(sl_plugin_result *)ud = *r; }

void sl__plugin_process(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud,
                        const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  char key[SL__KEY_MAX], err[512] = "";
  void *msg = NULL, *scratch = NULL;
  /* the message lives only for this call: decoded into an arena here */
  _Alignas(max_align_t) unsigned char space[SL__PB_ARENA_BYTES];
  sl__pb_arena ar;
  sl__pb_arena_init(&ar, space, sizeof space);
  if (!ops->parse(ud, m, out, res, &msg, key, &ar.a)) return;
  sl_plugin_inst *in = sl__plugin_pool_get(pp, err, sizeof err);
  if (!in) {
    sl_result_set(res, SL_OUTCOME_RETRY, ops->setup_class, "%s", err);
    ops->release(msg, &ar.a);
    return;
  }
  sl_plugin_input pin;
  void *object = NULL;
  if (!ops->input(ud, msg, key, &pin, &scratch, res) ||
      fetch_sync(pp, ops, ud, msg, &pin, &object, res) != 0) {
    free(object);
    free(scratch);
    ops->release(msg, &ar.a);
    return;
  }
  sl_plugin_result pr = {0};
  int rc = sl_plugin_run(in, &pin, NULL, take_result, &pr);
  if (rc)
    sl_result_set(res, SL_OUTCOME_RETRY, "plugin_error", "running the plugin: %s", sl_strerror(rc));
  else
    ops->finish(ud, msg, key, &pr, NULL, out, res);
  sl_plugin_result_clear(&pr);
  free(object);
  free(scratch);
  ops->release(msg, &ar.a);
}

/* One message run by sl__plugin_start: everything the plugin's input
 * points at — the input itself included — lives here until the job is done
 * (the ABI lends the input until complete(), and the call outlives
 * sl__plugin_start). The fetched object is the one copy of the answer in
 * the process: taken from the HTTP client's buffer, not copied, and (async
 * plugins) streamed from here into the plugin's upload (sl_pluginhost.c);
 * it counts towards stage.max_bytes_in_flight (sl_job_hold) until it is
 * freed. Each step runs on the loop, except a SYNC plugin's run, on a
 * worker (work), which touches only in, pr and why while the loop leaves
 * the job alone. */
typedef struct {
  const sl__plugin_ops *ops;
  void *ud;
  sl_job *job;
  sl__plugin_pool *pp;
  void *msg, *scratch;
  char key[SL__KEY_MAX];
  sl_plugin_input in;
  const char *object_key; /* the object being fetched, or NULL */
  void *object;           /* its bytes, once fetched */
  sl_plugin_result pr;    /* what the plugin returned (owned here) */
  uv_work_t work;         /* SYNC: the run on the worker pool */
  int ran;                /* SYNC: the run returned pr (else why says why not) */
  const char *why_class;  /* SYNC: the retry class when it did not */
  char why[512];
  char stored[1200]; /* the key pr.object is stored as */
} plugin_job;

static void plugin_job_free(plugin_job *c) {
  c->ops->release(c->msg, NULL);
  free(c->scratch);
  free(c->object);
  sl_plugin_result_clear(&c->pr);
  sl_job_hold(c->job, 0); /* the job holds nothing of ours from here */
  free(c);
}

/* the job is over (its outbox and result set) */
static void job_end(plugin_job *c) {
  sl_job *job = c->job;
  plugin_job_free(c);
  sl_job_done(job);
}

static void job_finish(plugin_job *c, const char *stored) {
  c->ops->finish(c->ud, c->msg, c->key, &c->pr, stored, sl_job_outbox(c->job),
                 sl_job_result(c->job));
  job_end(c);
}

/* the new object stored (or not) */
static void on_stored(const sl_httpc_response *r, void *ud) {
  plugin_job *c = ud;
  if (r->status == 200) {
    job_finish(c, c->stored);
    return;
  }
  char why[1400];
  snprintf(why, sizeof why, "PUT %s: %s", c->stored, r->status ? "HTTP error" : r->error);
  storage_fault(sl_job_result(c->job), r->status ? SL_ESTORAGE : SL_EUNAVAIL, r->status, c->stored,
                why);
  job_end(c);
}

/* PUTs the plugin's new object where ops->store_key says, then finishes.
 * Overwrites: a redelivered message stores the same bytes again, which is
 * what makes it safe to repeat after a crash. */
static void store_async(plugin_job *c) {
  sl_result *res = sl_job_result(c->job);
  sl__objects *o = c->pp->objects;
  if (!c->ops->store_key(c->ud, c->msg, &c->pr, c->stored, sizeof c->stored, res)) {
    job_end(c);
    return;
  }
  char url[4096], ct[200];
  snprintf(ct, sizeof ct, "Content-Type: %s",
           *c->pr.object_type ? c->pr.object_type : "application/octet-stream");
  const char *hdrs[] = {ct, "Expect:", NULL}; /* no 100-continue round trip */
  const sl_s3_target *t = target_of(o, c->stored);
  int rc = sl_s3_presign_put(o->loop_sig, t, c->stored, 600, url, sizeof url);
  sl_httpc_request q = {.method = "PUT",
                        .url = url,
                        .headers = hdrs,
                        .body = c->pr.object,
                        .body_len = c->pr.object_len,
                        .timeout_ms = o->timeout_ms,
                        .max_response = 65536,
                        .ca_file = t->ca_file};
  if (rc == 0) rc = sl_httpc_send(sl_job_http(c->job), &q, on_stored, c);
  if (rc) {
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "storing %s: %s", c->stored, sl_strerror(rc));
    job_end(c);
  }
}

/* the plugin has returned c->pr: its object stored first when it made one */
static void after_run(plugin_job *c) {
  if (c->pr.outcome == SL_PLUGIN_DONE && c->pr.object && c->ops->store_key && c->pp->objects &&
      c->pp->objects->loop_sig) {
    /* the input is read: what the job holds now is the new object, twice
     * while it is PUT (the HTTP client sends a copy) */
    free(c->object);
    c->object = NULL;
    c->in.audio = NULL;
    c->in.audio_len = 0;
    sl_job_hold(c->job, 2 * (int64_t)c->pr.object_len);
    store_async(c);
  } else {
    job_finish(c, NULL);
  }
}

static void on_plugin_done(sl_plugin_result *pr, void *ud) {
  plugin_job *c = ud;
  c->pr = *pr; /* ours now: cleared with the job */
  after_run(c);
}

/* SYNC: on a worker thread */
static void pool_run(uv_work_t *w) {
  plugin_job *c = w->data;
  sl_plugin_inst *in = sl__plugin_pool_get(c->pp, c->why, sizeof c->why);
  if (!in) {
    c->why_class = c->ops->setup_class;
    return;
  }
  int rc = sl_plugin_run(in, &c->in, NULL, take_result, &c->pr);
  if (rc) {
    c->why_class = "plugin_error";
    snprintf(c->why, sizeof c->why, "running the plugin: %s", sl_strerror(rc));
    return;
  }
  c->ran = 1;
}

/* SYNC: back on the loop */
static void pool_ran(uv_work_t *w, int status) {
  plugin_job *c = w->data;
  if (c->ran) {
    after_run(c);
    return;
  }
  sl_result_set(sl_job_result(c->job), SL_OUTCOME_RETRY, c->why_class ? c->why_class : "internal",
                "%s", status == UV_ECANCELED ? "cancelled before it ran" : c->why);
  job_end(c);
}

static void run_plugin(plugin_job *c) {
  int rc;
  if (c->pp->sync) {
    c->work.data = c;
    rc = uv_queue_work(sl_job_loop(c->job), &c->work, pool_run, pool_ran); /* -errno */
  } else {
    rc = sl_plugin_run(c->pp->inst, &c->in, sl_job_http(c->job), on_plugin_done, c);
  }
  if (rc) {
    sl_result_set(sl_job_result(c->job), SL_OUTCOME_RETRY, "plugin_error", "running the plugin: %s",
                  sl_strerror(rc));
    job_end(c);
  }
}

/* the object arrived (or did not) on the loop */
static void on_object(const sl_httpc_response *r, void *ud) {
  plugin_job *c = ud;
  sl_job *job = c->job;
  sl_result *res = sl_job_result(job);
  const char *k = c->object_key;
  if (r->status == 200) {
    c->object = sl_httpc_take_body(r);
    if (!c->object) {
      sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "holding %zu bytes of %s", r->body_len,
                    k);
    } else {
      sl_job_hold(job, (int64_t)r->body_len); /* what it weighs, not what was reserved */
      give_object(&c->in, k, c->object, r->body_len);
      run_plugin(c);
      return;
    }
  } else if (r->too_big) {
    sl_result_set(res, SL_OUTCOME_FAIL, "audio_too_large", "object %s is larger than %zu bytes", k,
                  c->pp->objects->max_bytes);
  } else if (r->status == 404) {
    sl_result_set(res, SL_OUTCOME_FAIL, "storage", "object %s not found in storage", k);
  } else {
    char why[600];
    snprintf(why, sizeof why, "GET %s: %s", k, r->status ? "HTTP error" : r->error);
    storage_fault(res, r->status ? SL_ESTORAGE : SL_EUNAVAIL, r->status, k, why);
  }
  job_end(c);
}

static void fetch_async(plugin_job *c) {
  sl__objects *o = c->pp->objects;
  char url[4096];
  const sl_s3_target *t = target_of(o, c->object_key);
  int rc = sl_s3_presign_get(o->loop_sig, t, c->object_key, 600, url, sizeof url);
  sl_httpc_request q = {.method = "GET",
                        .url = url,
                        .timeout_ms = o->timeout_ms,
                        .max_response = o->max_bytes,
                        .ca_file = t->ca_file};
  if (rc == 0) rc = sl_httpc_send(sl_job_http(c->job), &q, on_object, c);
  if (rc) {
    sl_result_set(sl_job_result(c->job), SL_OUTCOME_RETRY, "storage", "fetching %s: %s",
                  c->object_key, sl_strerror(rc));
    job_end(c);
  }
}

void sl__plugin_start(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud, sl_job *job) {
  sl_result *res = sl_job_result(job);
  plugin_job *c = calloc(1, sizeof *c);
  if (!c) {
    sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "starting a job");
    sl_job_done(job);
    return;
  }
  c->ops = ops;
  c->ud = ud;
  c->job = job;
  if (!ops->parse(ud, sl_job_message(job), sl_job_outbox(job), res, &c->msg, c->key, NULL)) {
    free(c);
    sl_job_done(job);
    return;
  }
  if (!ops->input(ud, c->msg, c->key, &c->in, &c->scratch, res)) {
    job_end(c);
    return;
  }
  c->pp = pp;
  c->object_key = pp->objects && ops->object ? ops->object(ud, c->msg) : NULL;
  if (c->object_key)
    fetch_async(c);
  else
    run_plugin(c);
}

int sl__plugin_outcome(const sl_plugin_result *pr, sl_result *res) {
  res->provider_called = 1;
  res->cost_units = pr->cost_units > 0 ? pr->cost_units : 0; /* failed calls cost too */
  if (pr->outcome == SL_PLUGIN_DONE) return 1;
  if (pr->outcome == SL_PLUGIN_RETRY) {
    res->retry_after_ms = pr->retry_after_ms;
    res->provider_throttled = pr->throttled;
  }
  sl_result_set(res, pr->outcome == SL_PLUGIN_RETRY ? SL_OUTCOME_RETRY : SL_OUTCOME_FAIL,
                pr->error_class, "%s", pr->reason);
  return 0;
}

const char *sl__audio_content_type(const char *name) {
  const char *dot = name ? strrchr(name, '.') : NULL;
  static const char *map[][2] = {{".wav", "audio/wav"},   {".flac", "audio/flac"},
                                 {".ogg", "audio/ogg"},   {".oga", "audio/ogg"},
                                 {".webm", "audio/webm"}, {".mp3", "audio/mpeg"},
                                 {".m4a", "audio/mp4"},   {".mp4", "audio/mp4"}};
  for (size_t i = 0; dot && i < sizeof map / sizeof map[0]; i++)
    if (strcmp(dot, map[i][0]) == 0) return map[i][1];
  return "application/octet-stream";
}
