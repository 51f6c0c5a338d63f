/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_httpc.c — libcurl multi on libuv (see sl_httpc.h).
 *
 * curl tells us which sockets to watch (socket callback) and when to wake
 * (timer callback); libuv tells curl when a socket is ready
 * (curl_multi_socket_action). Finished transfers are collected with
 * curl_multi_info_read; their callbacks run right after curl reports
 * completion, which is never inside sl_httpc_send() (a transfer cannot
 * complete before the loop runs), and after the transfer's handle and form
 * are freed. Bodies: one allocation of the announced Content-Length when
 * there is one (else doubling), which the callback may take
 * (sl_httpc_take_body) rather than copy.
 *
 * Connections stay open between requests, up to SL_HTTPC_MAX_IDLE: curl's
 * own bound is four per transfer still running, so as a wave of calls ended
 * one by one it closed all but a few, and the next wave connected again (a
 * stage at full speed paid a TCP, or TLS, handshake on most calls); a fixed
 * 1024 still closed connections of a stage with 1000 calls in flight to two
 * hosts.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_httpc.h"
#include "sluice/sl_err.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

typedef struct req req;

/* connections kept open for reuse: more than a stage ever has open at once
 * (stage.max_in_flight, 1000 by default, with at most one request each, to
 * one of a few hosts: stt fetches from storage, then calls its provider),
 * so none it will need again is closed; what is kept is bounded by what
 * was open at once, and servers close what stays idle */
#define SL_HTTPC_MAX_IDLE 8192L

struct sl_httpc {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  req *reqs; /* in flight, doubly linked */
  size_t pending;
  int closing;
};

struct req {
  sl_httpc *c;
  CURL *easy;
  struct curl_slist *hdrs;
  struct curl_slist *resolve; /* CURLOPT_RESOLVE, or NULL */
  curl_mime *mime;
  char *body_copy;
  char *buf;
  size_t len, cap, max;
  int too_big;
  int64_t retry_after_ms;
  sl_httpc_cb cb;
  void *ud;
  char errbuf[CURL_ERROR_SIZE];
  req *prev, *next;
};

typedef struct {
  uv_poll_t poll;
  curl_socket_t fd;
  sl_httpc *c;
} sock_ctx;

static void check_done(sl_httpc *c);

static void finish_req(req *r, CURLcode code) {
  sl_httpc *c = r->c;
  if (r->prev)
    r->prev->next = r->next;
  else
    c->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  c->pending--;
  sl_httpc_response res;
  memset(&res, 0, sizeof res);
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME, &res.total_s);
  if (code == CURLE_OK && !r->too_big) {
    res.status = status;
    res.error = "";
  } else {
    res.status = 0;
    res.timed_out = code == CURLE_OPERATION_TIMEDOUT;
    res.too_big = r->too_big;
    res.error = r->too_big     ? "response body over its size limit"
                : r->errbuf[0] ? r->errbuf
                               : curl_easy_strerror(code);
  }
  res.body = r->buf ? r->buf : "";
  res.body_len = r->len;
  res.retry_after_ms = r->retry_after_ms;
  res.req_ = r;
  /* the transfer is over before the callback runs: a body streamed from
   * the caller's memory (a curl_mime_data_cb part) is never read again, so
   * the callback may free that memory */
  curl_multi_remove_handle(c->multi, r->easy);
  curl_easy_cleanup(r->easy);
  curl_slist_free_all(r->hdrs);
  curl_slist_free_all(r->resolve);
  if (r->mime) curl_mime_free(r->mime);
  free(r->body_copy);
  sl_httpc_cb cb = r->cb;
  void *ud = r->ud;
  cb(&res, ud);
  free(r->buf); /* NULL when the callback took it */
  free(r);
}

char *sl_httpc_take_body(const sl_httpc_response *res) {
  req *r = res ? res->req_ : NULL;
  if (!r) return NULL;
  char *b = r->buf;
  if (!b)
    b = calloc(1, 1);
  else if (r->cap > r->len + 1 + 4096) { /* grown by doubling: give back the slack */
    char *nb = realloc(b, r->len + 1);
    if (nb) b = nb;
  }
  r->buf = NULL;
  r->len = r->cap = 0;
  return b;
}

static void check_done(sl_httpc *c) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE) continue;
    req *r = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    finish_req(r, m->data.result);
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  sock_ctx *s = h->data;
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(s->c->multi, s->fd, flags, &running);
  check_done(s->c);
}

static void on_timeout(uv_timer_t *t) {
  sl_httpc *c = t->data;
  int running;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(c);
}

static int timer_cb(CURLM *multi, long ms, void *userp) {
  (void)multi;
  sl_httpc *c = userp;
  if (ms < 0)
    uv_timer_stop(&c->timer);
  else
    uv_timer_start(&c->timer, on_timeout, (uint64_t)ms, 0);
  return 0;
}

static void on_sock_closed(uv_handle_t *h) { free(h->data); }

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *sockp) {
  (void)easy;
  sl_httpc *c = userp;
  sock_ctx *s = sockp;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      uv_poll_stop(&s->poll);
      uv_close((uv_handle_t *)&s->poll, on_sock_closed);
      curl_multi_assign(c->multi, fd, NULL);
    }
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->fd = fd;
    s->c = c;
    if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->poll.data = s;
    curl_multi_assign(c->multi, fd, s);
  }
  int ev = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= UV_READABLE;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= UV_WRITABLE;
  uv_poll_start(&s->poll, ev, on_poll);
  return 0;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
  req *r = ud;
  size_t n = sz * nm;
  if (r->len + n > r->max) {
    r->too_big = 1;
    return 0; /* aborts the transfer */
  }
  if (r->len + n + 1 > r->cap) {
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + n + 1) cap *= 2;
    char *nb = realloc(r->buf, cap);
    if (!nb) return 0;
    r->buf = nb;
    r->cap = cap;
  }
  memcpy(r->buf + r->len, p, n);
  r->len += n;
  r->buf[r->len] = '\0';
  return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  req *r = ud;
  size_t n = sz * nm;
  if (n > 15 && strncasecmp(p, "Content-Length:", 15) == 0 && !r->buf) {
    /* the body's size is announced: one allocation of that size, not a
     * doubling chain (a large body then holds no slack); bounded by max */
    char v[32];
    size_t vl = n - 15 < sizeof v - 1 ? n - 15 : sizeof v - 1;
    memcpy(v, p + 15, vl);
    v[vl] = '\0';
    char *end;
    unsigned long long cl = strtoull(v, &end, 10);
    if (end != v && cl > 0 && cl <= r->max) {
      r->buf = malloc((size_t)cl + 1);
      if (r->buf) {
        r->cap = (size_t)cl + 1;
        r->buf[0] = '\0';
      }
    }
  }
  if (n > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
    char v[64];
    size_t vl = n - 12 < sizeof v - 1 ? n - 12 : sizeof v - 1;
    memcpy(v, p + 12, vl);
    v[vl] = '\0';
    char *s = v;
    while (*s == ' ') s++;
    char *end;
    double secs = strtod(s, &end);
    if (end != s && secs >= 0) {
      r->retry_after_ms = (int64_t)(secs * 1000);
    } else {
      time_t when = curl_getdate(s, NULL); /* HTTP-date form */
      time_t now = time(NULL);
      if (when > now) r->retry_after_ms = (int64_t)(when - now) * 1000;
    }
  }
  return n;
}

int sl_httpc_new(sl_httpc **out, uv_loop_t *loop) {
  if (!out || !loop) return SL_EINVAL;
  sl_httpc *c = calloc(1, sizeof *c);
  if (!c) return SL_ENOMEM;
  c->loop = loop;
  c->multi = curl_multi_init();
  if (!c->multi) {
    free(c);
    return SL_ENOMEM;
  }
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, SL_HTTPC_MAX_IDLE);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  *out = c;
  return 0;
}

int sl_httpc_send(sl_httpc *c, const sl_httpc_request *q, sl_httpc_cb cb, void *ud) {
  if (!q) return SL_EINVAL;
  if (!c || !q->url || !cb || c->closing) {
    if (q->mime) curl_mime_free(q->mime); /* the request owns it, sent or not */
    return SL_EINVAL;
  }
  req *r = calloc(1, sizeof *r);
  if (!r) {
    if (q->mime) curl_mime_free(q->mime);
    return SL_ENOMEM;
  }
  r->c = c;
  r->cb = cb;
  r->ud = ud;
  r->mime = q->mime;
  r->max = q->max_response ? q->max_response : 8u << 20;
  r->easy = curl_easy_init();
  if (!r->easy) {
    if (r->mime) curl_mime_free(r->mime);
    free(r);
    return SL_ENOMEM;
  }
  CURL *e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, q->url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, q->timeout_ms > 0 ? q->timeout_ms : 30000L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   q->connect_timeout_ms > 0 ? q->connect_timeout_ms : 5000L);
  if (q->method) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, q->method);
  if (q->ca_file && *q->ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, q->ca_file);
  for (size_t i = 0; q->headers && q->headers[i]; i++) {
    struct curl_slist *nl = curl_slist_append(r->hdrs, q->headers[i]);
    if (!nl) goto oom;
    r->hdrs = nl;
  }
  if (r->hdrs) curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
  if (q->resolve) {
    r->resolve = curl_slist_append(NULL, q->resolve);
    if (!r->resolve) goto oom;
    curl_easy_setopt(e, CURLOPT_RESOLVE, r->resolve);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  }
  if (q->proxy || q->resolve) { /* an explicit choice, never the environment's */
    curl_easy_setopt(e, CURLOPT_PROXY, q->proxy ? q->proxy : "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
  }
  if (r->mime) {
    curl_easy_setopt(e, CURLOPT_MIMEPOST, r->mime);
  } else if (q->body) {
    r->body_copy = malloc(q->body_len ? q->body_len : 1);
    if (!r->body_copy) goto oom;
    memcpy(r->body_copy, q->body, q->body_len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body_copy);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
  }
  if (curl_multi_add_handle(c->multi, e) != CURLM_OK) goto oom;
  r->next = c->reqs;
  if (c->reqs) c->reqs->prev = r;
  c->reqs = r;
  c->pending++;
  return 0;
oom:
  curl_easy_cleanup(e);
  curl_slist_free_all(r->hdrs);
  curl_slist_free_all(r->resolve);
  if (r->mime) curl_mime_free(r->mime);
  free(r->body_copy);
  free(r);
  return SL_ENOMEM;
}

size_t sl_httpc_pending(const sl_httpc *c) { return c ? c->pending : 0; }

static void on_timer_closed(uv_handle_t *h) {
  sl_httpc *c = h->data;
  curl_multi_cleanup(c->multi);
  free(c);
}

void sl_httpc_free(sl_httpc *c) {
  if (!c) return;
  c->closing = 1;
  while (c->reqs) {
    req *r = c->reqs;
    snprintf(r->errbuf, sizeof r->errbuf, "cancelled");
    finish_req(r, CURLE_ABORTED_BY_CALLBACK);
  }
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}
