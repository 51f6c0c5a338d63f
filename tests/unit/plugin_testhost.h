/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_testhost.h — a scripted plugin host for unit tests of async
 * plugins (sl_plugin.h), without the runtime, a loop or a network.
 *
 * Configuration: th_set("key", "value") overrides; other keys read the
 * plugin's own defaults from its table, as the real host does. http_send
 * records each request (URL, headers, body, form parts) and queues it; the
 * test answers the oldest one with th_reply(), which runs the plugin's
 * callback — so, as with the real host, a callback never runs inside
 * http_send. out_* and complete() are recorded in `th`.
 *
 * Single-threaded, one test at a time: th_reset() between tests.
 */
#ifndef SLUICE_TESTS_PLUGIN_TESTHOST_H
#define SLUICE_TESTS_PLUGIN_TESTHOST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

#define TH_MAX 32

typedef struct {
  char url[1024];
  char headers[8][700];
  int nheaders;
  char *body; /* copy, NUL-terminated */
  size_t body_len;
  struct {
    char name[64], filename[64], ctype[64];
    char *data;
    size_t len;
  } form[16];
  int nform;
  long timeout_ms;
  sl_plugin_http_cb cb;
  void *ud;
} th_request;

typedef struct {
  /* configuration */
  const sl_plugin *desc;
  char keys[TH_MAX][64], vals[TH_MAX][4096];
  int nset;
  int http_fail; /* http_send returns this (0 = accept) */
  /* requests: all ever sent, and the index of the next one to answer */
  th_request req[TH_MAX];
  int nreq, answered;
  /* results */
  char str_field[TH_MAX][32];
  char *str_val[TH_MAX];
  int nstr;
  char num_field[TH_MAX][32];
  double num_val[TH_MAX];
  int nnum;
  int nwords;
  char first_word[64];
  double last_word_end;
  int ncrit;
  char crit_name[16][64];
  double crit_score[16];
  int completes;
  sl_plugin_outcome outcome;
  int64_t retry_after_ms;
  int throttled;
  char error_class[64], reason[1024];
  int logs;
  /* the input message's numbers (in_num), set with th_in */
  char in_path[8][64];
  double in_val[8];
  int nin;
  char in_spath[4][64], in_sval[4][1024]; /* and strings (in_str), th_in_str */
  int nins;
} th_state;

static th_state th;

static void th_free_results(void) {
  for (int i = 0; i < th.nstr; i++) free(th.str_val[i]);
  for (int i = 0; i < th.nreq; i++) {
    free(th.req[i].body);
    for (int k = 0; k < th.req[i].nform; k++) free(th.req[i].form[k].data);
  }
}

static void th_reset(const sl_plugin *plugin) {
  th_free_results();
  memset(&th, 0, sizeof th);
  th.desc = plugin;
  th.outcome = (sl_plugin_outcome)-1;
}

static void th_set(const char *k, const char *v) {
  snprintf(th.keys[th.nset], sizeof th.keys[0], "%s", k);
  snprintf(th.vals[th.nset], sizeof th.vals[0], "%s", v);
  th.nset++;
}

/* a number of the input message in_num finds (path as "upload.pauses") */
static inline void th_in(const char *path, double v) {
  snprintf(th.in_path[th.nin], sizeof th.in_path[0], "%s", path);
  th.in_val[th.nin++] = v;
}

static inline void th_in_str(const char *path, const char *v) {
  snprintf(th.in_spath[th.nins], sizeof th.in_spath[0], "%s", path);
  snprintf(th.in_sval[th.nins++], sizeof th.in_sval[0], "%s", v);
}

static const char *th_in_strf(sl_plugin_call *c, const char *path) {
  (void)c;
  for (int i = 0; i < th.nins; i++)
    if (strcmp(th.in_spath[i], path) == 0) return th.in_sval[i];
  return NULL;
}

static int th_in_num(sl_plugin_call *c, const char *path, double *out) {
  (void)c;
  for (int i = 0; i < th.nin; i++)
    if (strcmp(th.in_path[i], path) == 0) {
      *out = th.in_val[i];
      return 0;
    }
  return SL_ENOTFOUND;
}

static const char *th_conf_str(const sl_plugin_conf *c, const char *key) {
  (void)c;
  for (int i = th.nset - 1; i >= 0; i--)
    if (strcmp(th.keys[i], key) == 0) return th.vals[i];
  for (size_t i = 0; i < th.desc->nconf; i++)
    if (strcmp(th.desc->conf[i].key, key) == 0)
      return th.desc->conf[i].def ? th.desc->conf[i].def : "";
  return "";
}
static int64_t th_conf_int(const sl_plugin_conf *c, const char *k) {
  return strtoll(th_conf_str(c, k), NULL, 10);
}
static double th_conf_double(const sl_plugin_conf *c, const char *k) {
  return strtod(th_conf_str(c, k), NULL);
}
static int th_conf_bool(const sl_plugin_conf *c, const char *k) {
  const char *v = th_conf_str(c, k);
  return !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1") || !strcasecmp(v, "on");
}

__attribute__((format(printf, 3, 4))) static void th_log(sl_plugin_log_level l, const char *key,
                                                         const char *fmt, ...) {
  (void)l;
  (void)key;
  (void)fmt;
  th.logs++;
}
static void *th_alloc(size_t n) { return malloc(n); }
static void *th_realloc(void *p, size_t n) { return realloc(p, n); }
static void th_freep(void *p) { free(p); }
static sl_plugin_metric *th_counter(const char *n, const char *l, const char *h) {
  (void)n, (void)l, (void)h;
  return NULL;
}
static void th_counter_add(sl_plugin_metric *m, uint64_t n) { (void)m, (void)n; }

static int th_http_send(sl_plugin_call *call, const sl_plugin_http_request *q, sl_plugin_http_cb cb,
                        void *ud) {
  (void)call;
  if (th.http_fail) return th.http_fail;
  if (th.nreq == TH_MAX) return -1;
  th_request *r = &th.req[th.nreq++];
  snprintf(r->url, sizeof r->url, "%s", q->url);
  for (int i = 0; q->headers && q->headers[i] && i < 8; i++)
    snprintf(r->headers[r->nheaders++], sizeof r->headers[0], "%s", q->headers[i]);
  if (q->body) {
    r->body = malloc(q->body_len + 1);
    memcpy(r->body, q->body, q->body_len);
    r->body[q->body_len] = '\0';
    r->body_len = q->body_len;
  }
  for (size_t i = 0; i < q->nform && i < 16; i++) {
    snprintf(r->form[i].name, sizeof r->form[i].name, "%s", q->form[i].name);
    snprintf(r->form[i].filename, sizeof r->form[i].filename, "%s",
             q->form[i].filename ? q->form[i].filename : "");
    snprintf(r->form[i].ctype, sizeof r->form[i].ctype, "%s",
             q->form[i].content_type ? q->form[i].content_type : "");
    r->form[i].data = malloc(q->form[i].len + 1);
    memcpy(r->form[i].data, q->form[i].data, q->form[i].len);
    r->form[i].data[q->form[i].len] = '\0';
    r->form[i].len = q->form[i].len;
    r->nform++;
  }
  r->timeout_ms = q->timeout_ms;
  r->cb = cb;
  r->ud = ud;
  return 0;
}

static int th_out_str(sl_plugin_call *c, const char *f, const char *v) {
  (void)c;
  snprintf(th.str_field[th.nstr], sizeof th.str_field[0], "%s", f);
  th.str_val[th.nstr++] = strdup(v ? v : "");
  return 0;
}
static int th_out_num(sl_plugin_call *c, const char *f, double v) {
  (void)c;
  snprintf(th.num_field[th.nnum], sizeof th.num_field[0], "%s", f);
  th.num_val[th.nnum++] = v;
  return 0;
}
static int th_out_word(sl_plugin_call *c, const char *w, double s, double e) {
  (void)c;
  (void)s;
  if (th.nwords++ == 0) snprintf(th.first_word, sizeof th.first_word, "%s", w);
  th.last_word_end = e;
  return 0;
}
static int th_out_criterion(sl_plugin_call *c, const char *n, double s, const char *cm) {
  (void)c;
  (void)cm;
  if (th.ncrit == 16) return -1;
  snprintf(th.crit_name[th.ncrit], sizeof th.crit_name[0], "%s", n);
  th.crit_score[th.ncrit++] = s;
  return 0;
}
static void th_complete(sl_plugin_call *c, sl_plugin_outcome o, int64_t ra, int thr,
                        const char *cls, const char *reason) {
  (void)c;
  th.completes++;
  th.outcome = o;
  th.retry_after_ms = ra;
  th.throttled = thr;
  snprintf(th.error_class, sizeof th.error_class, "%s", cls ? cls : "");
  snprintf(th.reason, sizeof th.reason, "%s", reason ? reason : "");
}

static const sl_plugin_host th_host = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin_host),
    .log = th_log,
    .alloc = th_alloc,
    .realloc = th_realloc,
    .free = th_freep,
    .conf_str = th_conf_str,
    .conf_int = th_conf_int,
    .conf_double = th_conf_double,
    .conf_bool = th_conf_bool,
    .counter = th_counter,
    .counter_add = th_counter_add,
    .http_send = th_http_send,
    .out_str = th_out_str,
    .out_num = th_out_num,
    .out_word = th_out_word,
    .out_criterion = th_out_criterion,
    .complete = th_complete,
    .in_num = th_in_num,
    .in_str = th_in_strf,
};

/* Answers the oldest unanswered request. */
static void th_reply_full(long status, const char *body, int64_t retry_after_ms, int timed_out,
                          const char *error) {
  if (th.answered >= th.nreq) {
    fprintf(stderr, "th_reply: no request pending\n");
    abort();
  }
  th_request *r = &th.req[th.answered++];
  sl_plugin_http_response resp = {status,
                                  error ? error : "",
                                  timed_out,
                                  body ? body : "",
                                  body ? strlen(body) : 0,
                                  retry_after_ms,
                                  0.1};
  r->cb(&resp, r->ud);
}
static inline void th_reply(long status, const char *body) {
  th_reply_full(status, body, 0, 0, NULL);
}

static inline const char *th_str(const char *field) {
  for (int i = th.nstr - 1; i >= 0; i--)
    if (strcmp(th.str_field[i], field) == 0) return th.str_val[i];
  return NULL;
}
static inline double th_num(const char *field) {
  for (int i = th.nnum - 1; i >= 0; i--)
    if (strcmp(th.num_field[i], field) == 0) return th.num_val[i];
  return -1;
}
static inline const char *th_form(const th_request *r, const char *name) {
  for (int i = 0; i < r->nform; i++)
    if (strcmp(r->form[i].name, name) == 0) return r->form[i].data;
  return NULL;
}
static inline int th_has_header(const th_request *r, const char *h) {
  for (int i = 0; i < r->nheaders; i++)
    if (strcmp(r->headers[i], h) == 0) return 1;
  return 0;
}

#endif
