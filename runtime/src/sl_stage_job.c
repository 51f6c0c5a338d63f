/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_job.c — a stage's jobs (sl_stage_job.h): the registry of live
 * jobs, the one transition function, and what any module needs of a job
 * (its headers, its timer, its keys). Loop thread only; the public
 * accessors (sl_job_*) are the plugin's, called on the loop or, for
 * process(), on the worker that runs it.
 */
#include "sl_stage_job.h"
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
  if (j->m) rd_kafka_message_destroy(j->m);
  free(j);
}

void sl__job_to(job *j, sl_job_state to) {
  sl_job_state from = j->state;
  if (!sl_job_may(from, to))
    sl_log(SL_LOG_ERROR, j->key, "defect: a job moved from %s to %s, which sl_jobstate forbids",
           sl_job_state_name(from), sl_job_state_name(to));
  j->state = to;
  j->R->handover(j, from);
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
sl_httpc *sl_job_http(job *j) { return j->R->http; }
sl_aredis *sl_job_redis(job *j) { return j->R->redis; }
uv_loop_t *sl_job_loop(job *j) { return j->R->uv; }
