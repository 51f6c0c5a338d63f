/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_driver.c — running a stage's plugin for each message (see
 * plugin_driver.h): sl__plugin_process on a worker for SYNC plugins whose
 * storage is blocking, sl__plugin_start on the loop for the rest, with
 * the object a plugin reads fetched and the one it returns stored on the
 * loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/plugin_driver.h"
#include "lib/pb_arena.h"

#include <openssl/crypto.h>
#include <uv.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_pbseal.h"
#include "sluice/sl_log.h"
#include "sluice/sl_trace.h"
#include "sluice/sl_tls.h"

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
  int rc = sl_s3_get(conn, sl__objects_target(pp->objects, key), key, pp->objects->max_bytes, data,
                     &len, &status, err, sizeof err);
  if (rc) {
    sl__storage_fault(res, rc, status, key, err);
    return rc;
  }
  sl__give_object(in, key, *data, len);
  return 0;
}

static void take_result(sl_plugin_result *r, void *ud) { *(sl_plugin_result *)ud = *r; }

/* With crypto.kek, a stage that writes personal fields (ops->keyed) or
 * reads sealed ones needs its submission's data key; *sealed: whether msg's
 * are (key_decide opens them) */
static int needs_key(const sl__plugin_ops *ops, void *msg, int *sealed) {
  *sealed = 0;
  if (!sl_dkey_enabled()) return 0;
  *sealed = sl_pbseal_sealed(msg);
  return ops->keyed || *sealed;
}

/* What msg's data key decides (state: sl_outbox.key_state; dk the key when
 * found): 1 go on, the input opened and the outputs sealed with it (or,
 * for a submission from before crypto.kek, nothing sealed); 0 the job is
 * over, res says how: erased, done with no output and the provider not
 * paid; a key Redis lost (a sealed input whose key is missing from a
 * complete store: out->key_lost, so the runtime deletes the store's marker
 * and presign rebuilds it) or one not there yet, tried again; one that
 * does not open, failed (docs/privacy.md). pa: msg's allocator; sealed:
 * whether msg has sealed fields (needs_key). */
static int key_decide(int state, const uint8_t *dk, void *msg, int sealed, const char *key,
                      ProtobufCAllocator *pa, sl_outbox *out, sl_result *res) {
  int rc;
  char sid[64];
  unsigned q = 0;
  switch (state) {
  case SL_KEY_FOUND:
    rc = sealed ? sl_pbseal_open(msg, dk, key, strlen(key), pa) : 0;
    if (rc) {
      sl_result_set(res, SL_OUTCOME_FAIL, "sealed_invalid",
                    "its sealed fields do not open with its submission's key: %s", sl_strerror(rc));
      return 0;
    }
    sl_outbox_seal_with(out, dk);
    return 1;
  case SL_KEY_ERASED:
    sl_log(SL_LOG_INFO, key, "its submission was erased: dropped, nothing written");
    sl_dkey_count_erased_drop();
    return 0; /* DONE, no output */
  case SL_KEY_NONE:
    if (!sealed) {
      sl_log(SL_LOG_WARN, key,
             "its submission has no data key (created before crypto.kek?): "
             "what it writes is not sealed");
      return 1;
    }
    out->key_lost = 1; /* Redis lost it: presign rebuilds the store */
    /* fall through */
  case SL_KEY_MISSING:
    sl_result_set(res, SL_OUTCOME_RETRY, "key_unavailable",
                  "its submission's data key is not in Redis (lost; being rebuilt)");
    res->again_in_ms = SL_AGAIN_MAX_MS;
    return 0;
  case SL_KEY_INVALID:
    sl_result_set(res, SL_OUTCOME_FAIL, "key_invalid",
                  "its submission's data key does not open with crypto.kek");
    return 0;
  case SL_KEY_UNREAD:
    if (sl_key_parse(key, strlen(key), sid, &q) != 0) {
      sl_result_set(res, SL_OUTCOME_FAIL, "bad_key", "its key names no submission: %s", key);
      return 0;
    }
    /* the runtime did not read it: its claim had no answer */
    /* fall through */
  default:
    sl_result_set(res, SL_OUTCOME_RETRY, "redis", "its data key could not be read from Redis");
    res->again_in_ms = SL_AGAIN_MAX_MS;
    return 0;
  }
}

void sl__plugin_process(sl__plugin_pool *pp, const sl__plugin_ops *ops, void *ud,
                        const rd_kafka_message_t *m, sl_outbox *out, sl_result *res) {
  char key[SL__KEY_MAX], err[512] = "";
  void *msg = NULL, *scratch = NULL;
  /* the message lives only for this call: decoded into an arena here */
  _Alignas(max_align_t) unsigned char space[SL__PB_ARENA_BYTES];
  sl__pb_arena ar;
  sl__pb_arena_init(&ar, space, sizeof space);
  if (!ops->parse(ud, m, out, res, &msg, key, &ar.a)) return;
  /* its data key: read by the runtime with its claim (plugin_stage.c runs
   * a keyed stage this way only then) */
  int sealed;
  if (needs_key(ops, msg, &sealed) &&
      !key_decide(out->key_state, out->seal_key, msg, sealed, key, &ar.a, out, res)) {
    ops->release(msg, &ar.a);
    return;
  }
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
  uint64_t ran_ns;        /* SYNC: what the run cost (sl_inline_end) */
  int ran;                /* SYNC: the run returned pr (else why says why not) */
  const char *why_class;  /* SYNC: the retry class when it did not */
  char why[512];
  char stored[1200]; /* the key pr.object is stored as */
  int64_t io_ns;     /* when its storage GET or PUT went out (its span's start) */
  char sid[64];      /* the submission, whose data key is looked up */
  uint8_t dk[SL_SEAL_KEY_LEN];
  int dk_state; /* what its lookup found (SL_KEY_*: sl_outbox.key_state's) */
  int sealed;   /* its input has sealed fields (needs_key) */
} plugin_job;

static void plugin_job_free(plugin_job *c) {
  OPENSSL_cleanse(c->dk, sizeof c->dk);
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
static void on_stored_in(const sl_httpc_response *r, void *ud) {
  plugin_job *c = ud;
  sl_job_span(c->job, "storage PUT", c->io_ns, (int)r->status,
              r->status == 200 ? NULL
              : r->status      ? "HTTP error"
                               : r->error);
  if (r->status == 200) {
    job_finish(c, c->stored);
    return;
  }
  char why[1400];
  snprintf(why, sizeof why, "PUT %s: %s", c->stored, r->status ? "HTTP error" : r->error);
  sl__storage_fault(sl_job_result(c->job), r->status ? SL_ESTORAGE : SL_EUNAVAIL, r->status,
                    c->stored, why);
  job_end(c);
}

/* the callback's log lines carry the job's trace id */
static void on_stored(const sl_httpc_response *r, void *ud) {
  char prev[33];
  sl_log_trace(sl_job_trace_id(((plugin_job *)ud)->job), prev);
  on_stored_in(r, ud);
  sl_log_trace(prev, NULL);
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
  const sl_s3_target *t = sl__objects_target(o, c->stored);
  int rc = sl_s3_presign_put(o->loop_sig, t, c->stored, 600, url, sizeof url);
  sl_httpc_request q = {.method = "PUT",
                        .url = url,
                        .headers = hdrs,
                        .body = c->pr.object,
                        .body_len = c->pr.object_len,
                        .timeout_ms = o->timeout_ms,
                        .max_response = 65536,
                        .ca_file = t->ca_file};
  c->io_ns = sl_trace_now_ns();
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

static void on_plugin_done_in(sl_plugin_result *pr, void *ud) {
  plugin_job *c = ud;
  c->pr = *pr; /* ours now: cleared with the job */
  after_run(c);
}

/* the callback's log lines carry the job's trace id */
static void on_plugin_done(sl_plugin_result *pr, void *ud) {
  char prev[33];
  sl_log_trace(sl_job_trace_id(((plugin_job *)ud)->job), prev);
  on_plugin_done_in(pr, ud);
  sl_log_trace(prev, NULL);
}

/* SYNC: the run, on a worker thread or on the loop (a short plugin) */
static void plugin_call(plugin_job *c) {
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

/* SYNC: on a worker thread, measured as sl_inline.h says */
static void pool_run(uv_work_t *w) {
  plugin_job *c = w->data;
  sl_inline_mark mk;
  sl_inline_begin(&mk);
  plugin_call(c);
  c->ran_ns = sl_inline_end(&mk);
}

/* SYNC: the run over (or not made), on the loop */
static void ran_out(plugin_job *c, int cancelled) {
  if (c->ran) {
    after_run(c);
    return;
  }
  sl_result_set(sl_job_result(c->job), SL_OUTCOME_RETRY, c->why_class ? c->why_class : "internal",
                "%s", cancelled ? "cancelled before it ran" : c->why);
  job_end(c);
}

/* SYNC: back on the loop */
static void pool_ran_in(uv_work_t *w, int status) {
  plugin_job *c = w->data;
  if (status == 0) sl_inline_note(&c->pp->inl, c->ran_ns, SL_INLINE_POOL, uv_hrtime());
  ran_out(c, status == UV_ECANCELED);
}

/* the callback's log lines carry the job's trace id */
static void pool_ran(uv_work_t *w, int status) {
  char prev[33];
  sl_log_trace(sl_job_trace_id(((plugin_job *)w->data)->job), prev);
  pool_ran_in(w, status);
  sl_log_trace(prev, NULL);
}

/* SYNC: a short plugin's run on the loop, measured and noted as the
 * runtime's processor's is (sl_inline_call) */
static void plugin_call_here(void *c) { plugin_call(c); }
static void loop_run(plugin_job *c) {
  sl_inline_call(&c->pp->inl, plugin_call_here, c);
  ran_out(c, 0);
}

static void run_plugin(plugin_job *c) {
  int rc;
  if (c->pp->sync && sl_inline_here(&c->pp->inl, uv_hrtime())) {
    loop_run(c); /* the pool's hand-over would cost more than the run */
    return;
  }
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
static void on_object_in(const sl_httpc_response *r, void *ud) {
  plugin_job *c = ud;
  sl_job *job = c->job;
  sl_job_span(job, "storage GET", c->io_ns, (int)r->status,
              r->status == 200 ? NULL
              : r->status      ? "HTTP error"
                               : r->error);
  sl_result *res = sl_job_result(job);
  const char *k = c->object_key;
  if (r->status == 200) {
    c->object = sl_httpc_take_body(r);
    if (!c->object) {
      sl_result_set(res, SL_OUTCOME_RETRY, "out_of_memory", "holding %zu bytes of %s", r->body_len,
                    k);
    } else {
      sl_job_hold(job, (int64_t)r->body_len); /* what it weighs, not what was reserved */
      sl__give_object(&c->in, k, c->object, r->body_len);
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
    sl__storage_fault(res, r->status ? SL_ESTORAGE : SL_EUNAVAIL, r->status, k, why);
  }
  job_end(c);
}

/* the callback's log lines carry the job's trace id */
static void on_object(const sl_httpc_response *r, void *ud) {
  char prev[33];
  sl_log_trace(sl_job_trace_id(((plugin_job *)ud)->job), prev);
  on_object_in(r, ud);
  sl_log_trace(prev, NULL);
}

static void fetch_async(plugin_job *c) {
  sl__objects *o = c->pp->objects;
  char url[4096];
  const sl_s3_target *t = sl__objects_target(o, c->object_key);
  int rc = sl_s3_presign_get(o->loop_sig, t, c->object_key, 600, url, sizeof url);
  sl_httpc_request q = {.method = "GET",
                        .url = url,
                        .timeout_ms = o->timeout_ms,
                        .max_response = o->max_bytes,
                        .ca_file = t->ca_file};
  c->io_ns = sl_trace_now_ns();
  if (rc == 0) rc = sl_httpc_send(sl_job_http(c->job), &q, on_object, c);
  if (rc) {
    sl_result_set(sl_job_result(c->job), SL_OUTCOME_RETRY, "storage", "fetching %s: %s",
                  c->object_key, sl_strerror(rc));
    job_end(c);
  }
}

/* Parsed (and opened): the input, then the object or the run. */
static void go_on(plugin_job *c) {
  if (!c->ops->input(c->ud, c->msg, c->key, &c->in, &c->scratch, sl_job_result(c->job))) {
    job_end(c);
    return;
  }
  c->object_key = c->pp->objects && c->ops->object ? c->ops->object(c->ud, c->msg) : NULL;
  if (c->object_key)
    fetch_async(c);
  else
    run_plugin(c);
}

/* The data key's state known (c->dk_state, c->dk): on, or the job's end. */
static void data_key_known(plugin_job *c) {
  if (key_decide(c->dk_state, c->dk, c->msg, c->sealed, c->key, NULL, sl_job_outbox(c->job),
                 sl_job_result(c->job)))
    go_on(c);
  else
    job_end(c);
}

static void on_data_key_marker(redisReply *r, void *ud) {
  plugin_job *c = ud;
  c->dk_state = sl_key_state_of_marker(r);
  data_key_known(c);
}

/* the key's GET answered: the key or the sentinel decide at once; nothing
 * there, the store's marker says whether Redis lost it (a second round
 * trip only then: the GET alone is every other message's) */
static void on_data_key_get(redisReply *r, void *ud) {
  plugin_job *c = ud;
  int rc = sl_dkey_from_reply(r, c->sid, c->dk);
  c->dk_state = sl_key_state_of(rc);
  const char *ex[] = {"EXISTS", sl_dkey_marker()};
  if (rc != SL_ENOTFOUND ||
      sl_aredis_argv(sl_job_redis(c->job), on_data_key_marker, c, 2, ex, NULL) != 0)
    data_key_known(c); /* not sent: incomplete, retried */
}

/* The data key first, when the stage needs it (needs_key): as the runtime
 * read it with the input's claim (sl_stage_opts.data_key), else looked up
 * here; 1 when the job goes on from data_key_known. */
static int data_key(plugin_job *c) {
  unsigned q = 0;
  if (!needs_key(c->ops, c->msg, &c->sealed)) return 0;
  const sl_outbox *ob = sl_job_outbox(c->job);
  if (ob->key_state != SL_KEY_UNREAD) { /* read with its claim */
    c->dk_state = ob->key_state;
    if (ob->key_state == SL_KEY_FOUND) memcpy(c->dk, ob->seal_key, sizeof c->dk);
    data_key_known(c);
    return 1;
  }
  char rkey[SL_DKEY_RKEY_MAX];
  int rc = sl_key_parse(c->key, strlen(c->key), c->sid, &q);
  if (rc == 0) rc = sl_dkey_rkey(c->sid, rkey);
  const char *get[] = {"GET", rkey};
  c->dk_state = SL_KEY_UNAVAILABLE;
  if (rc == 0) rc = sl_aredis_argv(sl_job_redis(c->job), on_data_key_get, c, 2, get, NULL);
  if (rc == 0) return 1;
  sl_result_set(sl_job_result(c->job), rc == SL_EPARSE ? SL_OUTCOME_FAIL : SL_OUTCOME_RETRY,
                rc == SL_EPARSE ? "bad_key" : "redis", "looking up its data key: %s",
                sl_strerror(rc));
  job_end(c);
  return 1;
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
  c->pp = pp;
  if (!ops->parse(ud, sl_job_message(job), sl_job_outbox(job), res, &c->msg, c->key, NULL)) {
    free(c);
    sl_job_done(job);
    return;
  }
  if (!data_key(c)) go_on(c);
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
