/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_job.c — a stage's jobs (sl_stage_job.h): the registry of live
 * jobs, the one transition function, and what any module needs of a job
 * (its headers, its timer, its keys). Loop thread only; the public
 * accessors (sl_job_*) are the plugin's, called on the loop or, for
 * process(), on the worker that runs it.
 */
#include "sl_stage_job.h"

#include <openssl/crypto.h>
#include "sluice/sl_idem.h"
#include "sluice/sl_log.h"
#include "sluice/sl_rkey.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t sl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sl__mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the retry tiers' partitions this replica owns ---- */

void sl__tier_own(sl_jobs *R, int t, int32_t partition, int on) {
  if (t < 0 || t >= SL_RETRY_TIERS_MAX || partition < 0 || partition >= SL_TIER_PARTS_MAX) return;
  uint64_t bit = (uint64_t)1 << (partition % 64);
  if (on)
    R->tier_owned[t][partition / 64] |= bit;
  else
    R->tier_owned[t][partition / 64] &= ~bit;
}

/* ---- its trace ---- */

/* the phases of a job's span, by state: every phase's time is on the job's
 * span as sluice.<phase>_ms. A provider's call that took
 * SL_PHASE_SPAN_MIN_NS or more is a child span ("call <provider>"); so are
 * parked, gated and a run without a provider when they took
 * SL_WAIT_SPAN_MIN_NS or more and at least 1/SL_PHASE_SPAN_SHARE of the
 * message's time in the stage: where its time went, at the scale a person
 * asking "why did this answer take 40 s" looks at. One span per message when
 * nothing waited (a span costs a few µs: bench/cost), and under a backlog,
 * where waiting for a slot is most of every message's time and Redis round
 * trips queue for tens of ms, those short gates stay attributes. */
#define SL_PHASE_SPAN_MIN_NS 10000000
#define SL_WAIT_SPAN_MIN_NS 100000000
#define SL_PHASE_SPAN_SHARE 10
enum { PH_QUEUED, PH_PARKED, PH_GATED, PH_RUNNING, PH_PRODUCING, PH_END };
static const char *const phase_name[] = {"queued", "parked", "gated", "running", "producing"};
/* span attribute keys are kept as pointers (sl_trace.h): literals */
static const char *const phase_key[] = {"sluice.queued_ms", "sluice.parked_ms", "sluice.gated_ms",
                                        "sluice.running_ms", "sluice.producing_ms"};

static int phase_of(sl_job_state s) {
  switch (s) {
  case SL_JOB_PARKED:
    return PH_PARKED;
  case SL_JOB_LOOKUP:
  case SL_JOB_GATE:
  case SL_JOB_CLAIM:
    return PH_GATED;
  case SL_JOB_CALL:
  case SL_JOB_POOL:
    return PH_RUNNING;
  case SL_JOB_OUTCOME:
  case SL_JOB_STORED:
  case SL_JOB_REUSE:
    return PH_PRODUCING;
  case SL_JOB_FINISHED:
  case SL_JOB_RELEASED:
  case SL_JOB_DROPPED:
    return PH_END;
  default:
    return PH_QUEUED;
  }
}

/* j's context: a child of its message's (traceparent, tracestate), else a
 * new trace */
static void trace_begin(job *j, const rd_kafka_message_t *m) {
  char tp[64], ts[SL_TRACE_STATE_MAX];
  const char *h = sl__hdr(m, SL_TRACE_HDR, tp, sizeof tp);
  sl_trace_ctx in;
  if (h && sl_trace_parse(h, strlen(h), &in) == 0) {
    const char *st = sl__hdr(m, SL_TRACE_STATE_HDR, ts, sizeof ts);
    sl_trace_set_state(&in, st, st ? strlen(st) : 0);
    memcpy(j->parent_span, in.span_id, 8);
    j->has_parent = 1;
    sl_trace_child(&in, &j->tc);
  } else {
    sl_trace_root(&j->tc);
  }
  sl_trace_id_hex(&j->tc, j->trace_hex);
  j->taken_ns = sl_trace_now_ns();
  j->seg[0].phase = PH_QUEUED;
  j->seg[0].at_ns = j->taken_ns;
  j->nseg = 1;
}

void sl__job_trace_adopt(job *j, const char *traceparent) {
  sl_trace_ctx in;
  if (j->has_parent || !traceparent || sl_trace_parse(traceparent, strlen(traceparent), &in))
    return;
  memcpy(j->tc.trace_id, in.trace_id, 16);
  j->tc.flags = in.flags;
  memcpy(j->parent_span, in.span_id, 8);
  j->has_parent = 1;
  sl_trace_id_hex(&j->tc, j->trace_hex);
}

void sl__job_trace_headers(const job *j, rd_kafka_headers_t *hs) {
  if (!j->R->cc->trace_propagate) return;
  char tp[SL_TRACEPARENT_LEN + 1];
  sl_trace_format(&j->tc, tp);
  rd_kafka_header_add(hs, SL_TRACE_HDR, -1, tp, SL_TRACEPARENT_LEN);
  if (j->tc.state[0]) rd_kafka_header_add(hs, SL_TRACE_STATE_HDR, -1, j->tc.state, -1);
}

static const char *outcome_word(const job *j, sl_job_state end) {
  if (end != SL_JOB_FINISHED) return end == SL_JOB_RELEASED ? "released" : "dropped";
  if (j->uncommitted) return "uncommitted";
  if (j->rejected) return "failed";
  return j->res.outcome == SL_OUTCOME_DONE    ? (j->stored ? "reused" : "done")
         : j->res.outcome == SL_OUTCOME_RETRY ? "retry"
                                              : "failed";
}

/* topic's names (R->names), made the first time it is traced; NULL past
 * the table (more topics than a stage reads: its own scratch is used) */
static const struct sl__span_names *names_of(sl_jobs *R, const char *topic,
                                             struct sl__span_names *scratch) {
  for (int i = 0; i < R->nnames; i++)
    if (R->names[i].topic == topic) return &R->names[i];
  struct sl__span_names *n =
      R->nnames < (int)(sizeof R->names / sizeof R->names[0]) ? &R->names[R->nnames++] : scratch;
  n->topic = topic;
  n->tier = -1; /* the retry tier it is, if one */
  for (int t = 0; t < R->rp->ntiers && n->tier < 0; t++)
    if (strcmp(topic, R->tier_topic[t]) == 0) n->tier = t;
  snprintf(n->span, sizeof n->span, "process %s", topic);
  snprintf(n->group, sizeof n->group, "sluice-%s%s", R->o->stage, n->tier >= 0 ? "-retry" : "");
  return n;
}

/* the process span's messaging attributes (OpenTelemetry's conventions) */
static void process_attrs(const job *j, const struct sl__span_names *n, sl_span *s) {
  const rd_kafka_message_t *m = j->m;
  sl_span_str(s, "messaging.system", "kafka");
  sl_span_str(s, "messaging.destination.name", n->topic);
  sl_span_int(s, "messaging.destination.partition.id", m ? m->partition : -1);
  sl_span_int(s, "messaging.kafka.offset", j->offset);
  sl_span_str(s, "messaging.consumer.group.name", n->group);
  sl_span_str(s, "messaging.kafka.message.key", j->key);
  sl_span_int(s, "sluice.attempt", (int64_t)j->attempts + 1);
  if (n->tier >= 0) sl_span_str(s, "sluice.retry_tier", j->R->tier_label[n->tier]);
}

/* a client span of j's, from start_ns to end_ns (0: now): a storage
 * request and its HTTP status (0: none), or err */
static void client_span(const job *j, const char *name, int64_t start_ns, int64_t end_ns,
                        int http_status, const char *err) {
  sl_trace_ctx c;
  if (sl_trace_child(&j->tc, &c)) return;
  sl_span s;
  sl_span_begin(&s, &c, j->tc.span_id, name, SL_SPAN_CLIENT, start_ns);
  if (http_status) sl_span_int(&s, "http.response.status_code", http_status);
  if (err) sl_span_error(&s, err);
  sl_span_end(&s, end_ns);
}

/* the timed steps its last run recorded (sl_result_step), children of j's */
static void trace_steps(const job *j) {
  for (int i = 0; i < j->res.nsteps && i < SL_RESULT_STEPS; i++)
    client_span(j, j->res.step[i].name, j->res.step[i].start_ns, j->res.step[i].end_ns,
                j->res.step[i].status, j->res.step[i].status ? NULL : "no answer");
}

/* j's spans, at its end: the process span, its steps and one child per
 * phase that took a while */
static void trace_end(job *j, sl_job_state end) {
  if (!sl_trace_enabled() || !sl_trace_sampled(&j->tc)) return;
  int64_t now = sl_trace_now_ns();
  const char *word = outcome_word(j, end);
  sl_span s;
  char name[200];
  struct sl__span_names scratch;
  const struct sl__span_names *n =
      names_of(j->R, j->m && j->m->rkt ? rd_kafka_topic_name(j->m->rkt) : "?", &scratch);
  sl_span_begin(&s, &j->tc, j->has_parent ? j->parent_span : NULL, n->span, SL_SPAN_CONSUMER,
                j->taken_ns);
  process_attrs(j, n, &s);
  sl_span_str(&s, "sluice.outcome", word);
  if (strcmp(word, "done") && strcmp(word, "reused")) {
    sl_span_str(&s, "error.type", j->res.error_class[0] ? j->res.error_class : word);
    sl_span_error(&s, j->res.error_message);
  }
  /* where its time went, per phase, on the span itself */
  double ms[PH_END] = {0};
  for (unsigned i = 0; i < j->nseg; i++)
    ms[j->seg[i].phase] +=
        (double)((i + 1 < j->nseg ? j->seg[i + 1].at_ns : now) - j->seg[i].at_ns) / 1e6;
  for (int ph = 0; ph < PH_END; ph++)
    if (ms[ph] > 0) sl_span_real(&s, phase_key[ph], ms[ph]);
  sl_span_end(&s, now);
  trace_steps(j);
  for (unsigned i = 0; i < j->nseg; i++) {
    int ph = j->seg[i].phase;
    int64_t to = i + 1 < j->nseg ? j->seg[i + 1].at_ns : now;
    int call = ph == PH_RUNNING && j->R->o->provider;
    /* a child span for each wait or run that took a while; waiting for a
     * slot and for Kafka's acknowledgement are on the job's span alone
     * (a backlog makes them long for every message) */
    int64_t took = to - j->seg[i].at_ns;
    if (ph == PH_QUEUED || ph == PH_PRODUCING || took < SL_PHASE_SPAN_MIN_NS ||
        (!call && (took < SL_WAIT_SPAN_MIN_NS || took * SL_PHASE_SPAN_SHARE < now - j->taken_ns)))
      continue;
    sl_trace_ctx c;
    if (sl_trace_child(&j->tc, &c)) return;
    const char *pname = phase_name[ph];
    if (call) {
      snprintf(name, sizeof name, "call %s", j->R->o->provider);
      pname = name;
    }
    sl_span_begin(&s, &c, j->tc.span_id, pname, call ? SL_SPAN_CLIENT : SL_SPAN_INTERNAL,
                  j->seg[i].at_ns);
    if (ph == PH_RUNNING) {
      if (call) {
        sl_span_str(&s, "sluice.provider", j->R->o->provider);
        sl_span_real(&s, "sluice.cost_units", j->res.cost_units);
      }
      sl_span_str(&s, "sluice.outcome", word);
      if (j->res.outcome != SL_OUTCOME_DONE) {
        sl_span_str(&s, "sluice.retry_class", j->res.error_class);
        sl_span_error(&s, j->res.error_message);
      }
    }
    sl_span_end(&s, to);
  }
}

void sl__job_tenant(job *j, const char *t) {
  size_t n = t ? strlen(t) : 0;
  if (n && sl_tenant_valid(t, n)) {
    memmove(j->tenant, t, n + 1);
    return;
  }
  static int64_t warned_ms, unsaid; /* loop thread: said at most once a minute */
  int64_t now = sl__mono_ms();
  if (n && warned_ms && now - warned_ms < 60000) {
    unsaid++;
  } else if (n) {
    sl_log(SL_LOG_WARN, j->key,
           "tenant %.40s... is not valid: its work counts as no tenant's (%lld more since the "
           "last such line)",
           t, (long long)unsaid);
    warned_ms = now;
    unsaid = 0;
  }
  j->tenant[0] = '\0';
}

/* j enters state to: a new phase starts a segment */
static void trace_to(job *j, sl_job_state to) {
  int ph = phase_of(to);
  if (ph == PH_END || j->nseg == 0 || j->seg[j->nseg - 1].phase == ph || j->nseg >= SL_JOB_SEGMENTS)
    return;
  j->seg[j->nseg].phase = (unsigned char)ph;
  j->seg[j->nseg].at_ns = sl_trace_now_ns();
  j->nseg++;
}

/* ---- the registry ---- */

job *sl__job_new(sl_jobs *R, rd_kafka_message_t *m) {
  job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->R = R;
  j->state = SL_JOB_NEW;
  j->m = m;
  j->offset = m->offset;
  size_t kn = m->key ? (m->key_len < sizeof j->key ? m->key_len : sizeof j->key - 1) : 0;
  memcpy(j->key, m->key ? m->key : "", kn); /* a C string: ends at its first NUL */
  j->key[kn] = '\0';
  j->bucket = sl_rkey_bucket_of_key(j->key);
  j->all_next = R->all;
  if (R->all) R->all->all_prev = j;
  R->all = j;
  R->inflight++;
  sl_metric_gauge_add(R->m_inflight, 1);
  sl__job_bytes(j, (int64_t)m->len);
  trace_begin(j, m);
  return j;
}

static int in_bucket(sl_qlink *l, void *ud) { return sl__job_of(l)->bucket == *(const int *)ud; }

job *sl__job_pop_bucket(sl_queue *q, int bucket) {
  if (bucket < 0) return sl__job_pop(q);
  return sl__job_of(sl_queue_pop_first(q, in_bucket, &bucket));
}

void sl__job_bytes(job *j, int64_t delta) {
  j->bytes += delta;
  j->R->bytes += delta;
  sl_metric_gauge_add(j->R->m_bytes, delta);
}

void sl__job_free(job *j) {
  sl_jobs *R = j->R;
  sl__job_timer_release(j);
  if (j->all_prev)
    j->all_prev->all_next = j->all_next;
  else if (R->all == j)
    R->all = j->all_next;
  if (j->all_next) j->all_next->all_prev = j->all_prev;
  R->inflight--;
  sl_metric_gauge_add(R->m_inflight, -1);
  sl__job_bytes(j, -j->bytes);
  sl_outbox_clear(&j->out);
  OPENSSL_cleanse(j->dk, sizeof j->dk);
  if (j->m) rd_kafka_message_destroy(j->m);
  free(j);
}

void sl__job_to(job *j, sl_job_state to) {
  sl_job_state from = j->state;
  if (!sl_job_may(from, to))
    sl_log(SL_LOG_ERROR, j->key, "defect: a job moved from %s to %s, which sl_jobstate forbids",
           sl_job_state_name(from), sl_job_state_name(to));
  j->state = to;
  trace_to(j, to);
  if (sl_job_terminal(to)) trace_end(j, to);
  char prev[33]; /* its lines carry its trace id */
  sl_log_trace(j->trace_hex, prev);
  j->R->handover(j, from);
  sl_log_trace(prev, NULL);
}

/* ---- its timer ---- */

static void timer_free_cb(uv_handle_t *h) { free(h); }

void sl__job_timer_release(job *j) {
  if (!j->timer) return;
  uv_timer_stop(j->timer);
  uv_close((uv_handle_t *)j->timer, timer_free_cb);
  j->timer = NULL;
}

void sl__job_after(job *j, int64_t ms, uv_timer_cb cb, void (*now)(job *)) {
  if (!j->timer) {
    j->timer = malloc(sizeof *j->timer);
    if (!j->timer) { /* no memory for a timer: try at once */
      now(j);
      return;
    }
    uv_timer_init(j->R->uv, j->timer);
    j->timer->data = j;
  }
  uv_timer_start(j->timer, cb, (uint64_t)(ms > 0 ? ms : 0), 0);
}

/* ---- its message ---- */

const char *sl__hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
  rd_kafka_headers_t *h = NULL;
  const void *v;
  size_t n;
  if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR) return NULL;
  if (rd_kafka_header_get_last(h, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR || !v) return NULL;
  if (n >= len) n = len - 1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  return buf;
}

const char *sl_message_origin(const rd_kafka_message_t *m, char *buf, size_t len) {
  const char *h = m && buf && len ? sl__hdr(m, SL_HDR_ORIGIN_TOPIC, buf, len) : NULL;
  if (h && *h) return h;
  return m && m->rkt ? rd_kafka_topic_name(m->rkt) : "";
}

int64_t sl__hdr_i64(const rd_kafka_message_t *m, const char *name) {
  char buf[32];
  return sl__hdr(m, name, buf, sizeof buf) ? strtoll(buf, NULL, 10) : 0;
}

/* SL_HDR_COST: a finite, non-negative number, or 0 */
double sl__hdr_cost(const rd_kafka_message_t *m) {
  char buf[32];
  double v = sl__hdr(m, SL_HDR_COST, buf, sizeof buf) ? strtod(buf, NULL) : 0;
  return isfinite(v) && v > 0 ? v : 0;
}

int64_t sl_message_first_failure_ms(const rd_kafka_message_t *m) {
  return m ? sl__hdr_i64(m, SL_HDR_FIRST_FAILURE) : 0;
}

void sl__idem_key(const job *j, char *buf, size_t len) {
  if (sl_idem_key(buf, len, sl_rkey_tag(j->bucket), j->R->o->stage, j->key, j->digest) != 0 && len)
    buf[0] = '\0';
}

/* ---- shared small pieces ---- */

sl_metric *sl__metric(const char *name, const char *stage, const char *extra, const char *help,
                      int gauge) {
  char l[256];
  snprintf(l, sizeof l, "stage=\"%s\"%s%s", stage, extra ? "," : "", extra ? extra : "");
  return gauge ? sl_metrics_gauge(name, l, help) : sl_metrics_counter(name, l, help);
}

_Static_assert(SL_CLAIM_BATCH <= SL_STORE_BATCH, "a job_batch holds either");

redisReply **sl__batch_reply(const job_batch *b, const redisReply *r, size_t per) {
  return r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)b->n * per ? r->element : NULL;
}

/* ---- the plugin's accessors (sl_stage.h) ---- */

const rd_kafka_message_t *sl_job_message(const job *j) { return j->m; }
sl_outbox *sl_job_outbox(job *j) { return &j->out; }
sl_result *sl_job_result(job *j) { return &j->res; }
const char *sl_job_key(const job *j) { return j->key; }
const char *sl_job_trace_id(const job *j) { return j->trace_hex; }

void sl_job_span(const job *j, const char *name, int64_t start_ns, int http_status,
                 const char *err) {
  if (sl_trace_enabled() && sl_trace_sampled(&j->tc))
    client_span(j, name, start_ns, 0, http_status, err);
}
sl_httpc *sl_job_http(job *j) { return j->R->http; }
sl_aredis *sl_job_redis(job *j) { return j->R->redis; }
uv_loop_t *sl_job_loop(job *j) { return j->R->uv; }
