/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http.c — unit tests for the HTTP/1.1 server (sl_http).
 *
 * Design: each test starts a server on 127.0.0.1:0 on its own uv loop, run
 * by a separate pthread; the test talks to it with plain blocking sockets
 * (receive timeout 3 s, so a missing response fails instead of hanging) and
 * stops it through a uv_async whose callback calls sl_http_server_free() on
 * the loop thread. The loop must then run out of work and uv_loop_close()
 * must succeed, and LeakSanitizer checks nothing was left allocated. An
 * alarm() per test bounds every test in time.
 *
 * The handler echoes what it parsed as one JSON line:
 *   {"method":…,"path":…,"query":…,"x_test":…|null,"body_len":N,
 *    "body_sha256":"…"}
 * Paths "/later" answer from a uv_timer 50 ms later, "/hold" never answer
 * until the server is stopped, "/big" answer BIG_BODY bytes (more than the
 * kernel's socket buffers hold, so a peer that does not read stalls it),
 * "/stream" the same as a streamed response (sl_http_stream_start).
 */
#define _GNU_SOURCE /* memmem, asprintf */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#define RCV_TIMEOUT_MS 3000
#define LATER_MS 50
#define MAX_HELD 8
#define BIG_BODY (16u << 20)

/* ---- server fixture ---------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  sl_http_server *srv;
  pthread_t th;
  int port;
  int running;
  int loop_close_rc;
  atomic_int nreq;             /* requests the handler saw */
  atomic_int nheld;            /* "/hold" requests parked */
  atomic_int late_rc;          /* non-zero: a late sl_http_respond failed */
  atomic_int stream_closed;    /* "/stream": its on_closed ran */
  sl_http_req *held[MAX_HELD]; /* loop thread only */
} fixture;

typedef struct {
  uv_timer_t t;
  sl_http_req *req;
} later;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void echo(sl_http_req *req) {
  char out[4096], sha[65];
  size_t blen = 0;
  const char *body = sl_http_req_body(req, &blen);
  sl_sha256_hex(body, blen, sha);
  size_t p = 0;
  p += (size_t)snprintf(out + p, sizeof out - p, "{\"method\":\"");
  sl_json_escape(out, sizeof out, &p, sl_http_req_method(req));
  p += (size_t)snprintf(out + p, sizeof out - p, "\",\"path\":\"");
  sl_json_escape(out, sizeof out, &p, sl_http_req_path(req));
  p += (size_t)snprintf(out + p, sizeof out - p, "\",\"query\":\"");
  sl_json_escape(out, sizeof out, &p, sl_http_req_query(req));
  const char *xt = sl_http_req_header(req, "x-test");
  if (xt) {
    p += (size_t)snprintf(out + p, sizeof out - p, "\",\"x_test\":\"");
    sl_json_escape(out, sizeof out, &p, xt);
    p += (size_t)snprintf(out + p, sizeof out - p, "\"");
  } else {
    p += (size_t)snprintf(out + p, sizeof out - p, "\",\"x_test\":null");
  }
  p += (size_t)snprintf(out + p, sizeof out - p, ",\"body_len\":%zu,\"body_sha256\":\"%s\"}", blen,
                        sha);
  sl_http_respond(req, 200, "application/json", "X-Echo: 1\r\n", out, p);
}

static void on_later_closed(uv_handle_t *h) { free(h->data); }

static void on_later(uv_timer_t *t) {
  later *l = t->data;
  echo(l->req); /* the request stays valid until answered */
  uv_close((uv_handle_t *)t, on_later_closed);
}

static void on_stream_closed(sl_http_stream *st, void *ud) {
  (void)st;
  atomic_store(&((fixture *)ud)->stream_closed, 1);
}

static void handler(sl_http_req *req, void *ud) {
  fixture *f = ud;
  atomic_fetch_add(&f->nreq, 1);
  const char *path = sl_http_req_path(req);
  if (strcmp(path, "/later") == 0) {
    later *l = calloc(1, sizeof *l);
    if (!l) {
      sl_http_respond_error(req, 500, "nomem", "out of memory", NULL);
      return;
    }
    l->req = req;
    uv_timer_init(&f->loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, on_later, LATER_MS, 0);
    return;
  }
  if (strcmp(path, "/big") == 0) { /* BIG_BODY bytes, more than socket buffers hold */
    char *b = malloc(BIG_BODY);
    if (!b) {
      sl_http_respond_error(req, 500, "nomem", "out of memory", NULL);
      return;
    }
    memset(b, 'x', BIG_BODY);
    sl_http_respond(req, 200, "text/plain", NULL, b, BIG_BODY);
    free(b);
    return;
  }
  if (strcmp(path, "/stream") == 0) { /* a stream of BIG_BODY bytes in 64 KiB writes */
    sl_http_stream *st = NULL;
    if (sl_http_stream_start(req, 200, "text/plain", NULL, 2 * BIG_BODY, on_stream_closed, f,
                             &st) != 0)
      return;
    static char chunk[65536];
    memset(chunk, 'y', sizeof chunk);
    for (size_t n = 0; n < BIG_BODY; n += sizeof chunk)
      if (sl_http_stream_write(st, chunk, sizeof chunk) != 0) return;
    return;
  }
  if (strcmp(path, "/hold") == 0) {
    int i = atomic_load(&f->nheld);
    if (i < MAX_HELD) {
      f->held[i] = req;
      atomic_store(&f->nheld, i + 1);
      return;
    }
  }
  echo(req);
}

static void on_stop(uv_async_t *a) {
  fixture *f = a->data;
  sl_http_server_free(f->srv);
  f->srv = NULL;
  /* a handler answering after the server is gone: dropped, and freed */
  int n = atomic_load(&f->nheld);
  for (int i = 0; i < n; i++) {
    int rc = sl_http_respond(f->held[i], 200, NULL, NULL, "", 0);
    if (rc) atomic_store(&f->late_rc, rc);
  }
  atomic_store(&f->nheld, 0);
  uv_close((uv_handle_t *)a, NULL);
}

static void *loop_main(void *arg) {
  fixture *f = arg;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  f->loop_close_rc = uv_loop_close(&f->loop);
  return NULL;
}

static void start_server(fixture *f, const sl_http_limits *lim) {
  assert_int_equal(uv_loop_init(&f->loop), 0);
  assert_int_equal(sl_http_server_new(&f->srv, &f->loop, "127.0.0.1:0", lim, handler, f), 0);
  f->port = sl_http_server_port(f->srv);
  assert_true(f->port > 0 && f->port < 65536);
  assert_int_equal(uv_async_init(&f->loop, &f->stop, on_stop), 0);
  f->stop.data = f;
  assert_int_equal(pthread_create(&f->th, NULL, loop_main, f), 0);
  f->running = 1;
}

/* Frees the server on its loop and waits for the loop to finish. */
static void stop_server(fixture *f) {
  if (!f->running) return;
  f->running = 0;
  uv_async_send(&f->stop);
  assert_int_equal(pthread_join(f->th, NULL), 0);
  assert_int_equal(f->loop_close_rc, 0); /* every handle was closed */
  assert_int_equal(atomic_load(&f->late_rc), 0);
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  *state = f;
  alarm(20); /* hard bound per test */
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->running) {
    f->running = 0;
    uv_async_send(&f->stop);
    pthread_join(f->th, NULL);
  }
  free(f);
  alarm(0);
  return 0;
}

/* ---- client ------------------------------------------------------------ */

typedef struct {
  int fd;
  char buf[1 << 18];
  size_t len;
} client;

typedef struct {
  int status;
  char head[8192]; /* status line + headers, NUL-terminated */
  char *body;      /* malloc'd, NUL-terminated */
  size_t body_len;
} response;

/* A client connected from the local address from ("127.0.0.2": another
 * client address on the loopback; NULL: the kernel's choice, 127.0.0.1)
 * with a receive buffer of rcvbuf bytes (0: the kernel's). */
static client *connect_client_from(const fixture *f, const char *from, int rcvbuf) {
  client *c = calloc(1, sizeof *c);
  assert_non_null(c);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(c->fd >= 0);
  if (rcvbuf) setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (from) {
    struct sockaddr_in b = {0};
    b.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, from, &b.sin_addr), 1);
    assert_int_equal(bind(c->fd, (struct sockaddr *)&b, sizeof b), 0);
  }
  struct timeval tv = {RCV_TIMEOUT_MS / 1000, (RCV_TIMEOUT_MS % 1000) * 1000};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)f->port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0);
  return c;
}

static client *connect_client(const fixture *f) { return connect_client_from(f, NULL, 0); }

static void client_close(client *c) {
  if (!c) return;
  close(c->fd);
  free(c);
}

static void send_all(client *c, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    assert_true(n > 0);
    p += n;
    len -= (size_t)n;
  }
}

static void send_str(client *c, const char *s) { send_all(c, s, strlen(s)); }

/* Reads more bytes into the buffer: >0 bytes, 0 EOF, -1 error/timeout. */
static ssize_t fill(client *c) {
  if (c->len >= sizeof c->buf) return -1;
  for (;;) {
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) c->len += (size_t)n;
    return n < 0 ? -1 : n;
  }
}

static const char *header(const response *r, const char *name) {
  static _Thread_local char val[1024];
  size_t nl = strlen(name);
  for (const char *line = strstr(r->head, "\r\n"); line && line[2];
       line = strstr(line + 2, "\r\n")) {
    const char *h = line + 2;
    if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
      const char *v = h + nl + 1;
      while (*v == ' ') v++;
      const char *e = strstr(v, "\r\n");
      size_t n = e ? (size_t)(e - v) : strlen(v);
      if (n >= sizeof val) n = sizeof val - 1;
      memcpy(val, v, n);
      val[n] = '\0';
      return val;
    }
  }
  return NULL;
}

/* Reads one response (Content-Length framed). 0, or -1 on EOF/timeout. */
static int read_response(client *c, response *r) {
  memset(r, 0, sizeof *r);
  char *end;
  for (;;) {
    end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (end) break;
    if (fill(c) <= 0) return -1;
  }
  size_t hl = (size_t)(end - c->buf) + 2; /* keep the last header's CRLF */
  assert_true(hl < sizeof r->head);
  memcpy(r->head, c->buf, hl);
  r->head[hl] = '\0';
  assert_int_equal(sscanf(r->head, "HTTP/1.1 %d ", &r->status), 1);
  const char *cl = header(r, "Content-Length");
  assert_non_null(cl);
  char *cend = NULL;
  r->body_len = strtoull(cl, &cend, 10);
  assert_true(cend && *cend == '\0' && cend != cl);
  size_t total = hl + 2 + r->body_len;
  assert_true(total <= sizeof c->buf);
  while (c->len < total)
    if (fill(c) <= 0) return -1;
  r->body = malloc(r->body_len + 1);
  assert_non_null(r->body);
  memcpy(r->body, c->buf + hl + 2, r->body_len);
  r->body[r->body_len] = '\0';
  memmove(c->buf, c->buf + total, c->len - total);
  c->len -= total;
  return 0;
}

static void response_free(response *r) {
  free(r->body);
  r->body = NULL;
}

/* Waits until the server closes the connection. Returns the ms it took, or
 * -1 when the connection is still open after limit_ms or data arrived. */
static int64_t wait_closed(client *c, int limit_ms) {
  int64_t t0 = now_ms();
  for (;;) {
    int64_t left = limit_ms - (now_ms() - t0);
    if (left <= 0) return -1;
    struct pollfd p = {c->fd, POLLIN, 0};
    int n = poll(&p, 1, (int)left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    char b[256];
    ssize_t r = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return now_ms() - t0;
    if (r > 0) return -1; /* unexpected bytes */
  }
}

static char *expected_echo(const char *method, const char *path, const char *query,
                           const char *x_test, const void *body, size_t blen) {
  char sha[65];
  sl_sha256_hex(body, blen, sha);
  char *s = NULL;
  char xt[512];
  if (x_test)
    snprintf(xt, sizeof xt, "\"%s\"", x_test);
  else
    snprintf(xt, sizeof xt, "null");
  assert_true(asprintf(&s,
                       "{\"method\":\"%s\",\"path\":\"%s\",\"query\":\"%s\",\"x_test\":%s,"
                       "\"body_len\":%zu,\"body_sha256\":\"%s\"}",
                       method, path, query, xt, blen, sha) > 0);
  return s;
}

static void assert_echo(const response *r, const char *method, const char *path, const char *query,
                        const char *x_test, const void *body, size_t blen) {
  char *want = expected_echo(method, path, query, x_test, body, blen);
  assert_int_equal(r->status, 200);
  assert_string_equal(header(r, "Content-Type"), "application/json");
  assert_string_equal(header(r, "X-Echo"), "1");
  assert_string_equal(r->body, want);
  free(want);
}

/* Checks a JSON error response {"error":{"code":code,"message":"…"}}. */
static void assert_json_error(const response *r, int status, const char *code) {
  assert_int_equal(r->status, status);
  assert_string_equal(header(r, "Content-Type"), "application/json");
  assert_string_equal(header(r, "Connection"), "close");
  json_error_t je;
  json_t *j = json_loadb(r->body, r->body_len, 0, &je);
  if (!j) fail_msg("bad JSON (%s): %s", je.text, r->body);
  json_t *e = json_object_get(j, "error");
  assert_true(json_is_object(e));
  assert_int_equal(json_object_size(j), 1);
  assert_string_equal(json_string_value(json_object_get(e, "code")), code);
  const char *msg = json_string_value(json_object_get(e, "message"));
  assert_non_null(msg);
  assert_true(strlen(msg) > 0);
  json_decref(j);
}

/* ---- tests ------------------------------------------------------------- */

static void test_simple_get(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  client *c = connect_client(f);
  send_str(c, "GET /hello/w%20x?a=1&b=two HTTP/1.1\r\n"
              "Host: 127.0.0.1\r\n"
              "X-Empty:\r\n"
              "X-TEST: v1 \"q\"\r\n"
              "\r\n");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/hello/w%20x", "a=1&b=two", "v1 \\\"q\\\"", "", 0);
  char cl[32];
  snprintf(cl, sizeof cl, "%zu", strlen(r.body));
  assert_string_equal(header(&r, "Content-Length"), cl);
  assert_string_equal(header(&r, "Connection"), "keep-alive");
  assert_memory_equal(r.head, "HTTP/1.1 200 OK\r\n", 17);
  response_free(&r);
  assert_int_equal(atomic_load(&f->nreq), 1);
  client_close(c);

  /* HTTP/1.0 without keep-alive: answered, then closed; no header, no query */
  c = connect_client(f);
  send_str(c, "GET /plain HTTP/1.0\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/plain", "", NULL, "", 0);
  assert_string_equal(header(&r, "Connection"), "close");
  response_free(&r);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 2);
}

static void test_keep_alive(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  client *c = connect_client(f);
  response r;
  for (int i = 0; i < 3; i++) {
    char req[128], path[32];
    snprintf(path, sizeof path, "/n%d", i);
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: h\r\nX-Test: %d\r\n\r\n", path, i);
    send_str(c, req);
    assert_int_equal(read_response(c, &r), 0);
    char xt[8];
    snprintf(xt, sizeof xt, "%d", i);
    assert_echo(&r, "GET", path, "", xt, "", 0);
    assert_string_equal(header(&r, "Connection"), "keep-alive");
    response_free(&r);
  }
  assert_int_equal(atomic_load(&f->nreq), 3);
  /* "Connection: close" on the last request ends the connection */
  send_str(c, "GET /bye HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/bye", "", NULL, "", 0);
  assert_string_equal(header(&r, "Connection"), "close");
  response_free(&r);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);
  stop_server(f);
}

static void test_pipelining(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  client *c = connect_client(f);
  /* three requests in one send; the first answers late, yet the responses
   * come back in request order */
  send_str(c, "GET /later?n=1 HTTP/1.1\r\nHost: h\r\n\r\n"
              "GET /one HTTP/1.1\r\nHost: h\r\nX-Test: a\r\n\r\n"
              "POST /two HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/later", "n=1", NULL, "", 0);
  response_free(&r);
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/one", "", "a", "", 0);
  response_free(&r);
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "POST", "/two", "", NULL, "hello", 5);
  response_free(&r);
  assert_int_equal(c->len, 0); /* nothing extra */
  assert_int_equal(atomic_load(&f->nreq), 3);

  /* two requests written in one send, plain handler */
  send_str(c, "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/a", "", NULL, "", 0);
  response_free(&r);
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/b", "", NULL, "", 0);
  response_free(&r);
  client_close(c);
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 5);
}

static void test_post_body(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  client *c = connect_client(f);
  size_t n = 200000;
  unsigned char *body = malloc(n);
  assert_non_null(body);
  for (size_t i = 0; i < n; i++) body[i] = (unsigned char)((i * 7919u) >> 3); /* has NULs */
  char head[256];
  snprintf(head, sizeof head,
           "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Type: application/octet-stream\r\n"
           "Content-Length: %zu\r\n\r\n",
           n);
  send_str(c, head);
  send_all(c, body, n);
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "POST", "/upload", "", NULL, body, n);
  response_free(&r);

  /* chunked transfer encoding: the chunks are joined */
  send_str(c, "POST /chunked HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n"
              "7\r\n, world\r\n"
              "0\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "POST", "/chunked", "", NULL, "hello, world", 12);
  response_free(&r);

  /* a body split across many small writes */
  send_str(c, "PUT /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n");
  for (int i = 0; i < 10; i++) {
    send_all(c, "0123456789" + i, 1);
    usleep(2000);
  }
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "PUT", "/slow", "", NULL, "0123456789", 10);
  response_free(&r);
  free(body);
  client_close(c);
  stop_server(f);
}

static void test_body_too_large(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.max_body = 1000};
  start_server(f, &lim);

  /* exactly at the limit is fine */
  client *c = connect_client(f);
  char *body = malloc(1000);
  assert_non_null(body);
  memset(body, 'b', 1000);
  send_str(c, "POST /ok HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n");
  send_all(c, body, 1000);
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "POST", "/ok", "", NULL, body, 1000);
  response_free(&r);

  /* declared length over the limit: refused at the headers */
  send_str(c, "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_json_error(&r, 413, "body_too_large");
  response_free(&r);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);

  /* chunked body growing over the limit */
  c = connect_client(f);
  char head[] = "POST /bigchunks HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                "258\r\n"; /* 600 bytes per chunk */
  char msg[2048];
  size_t p = 0;
  memcpy(msg, head, sizeof head - 1);
  p = sizeof head - 1;
  memset(msg + p, 'x', 600);
  p += 600;
  memcpy(msg + p, "\r\n258\r\n", 7);
  p += 7;
  memset(msg + p, 'y', 600);
  p += 600;
  memcpy(msg + p, "\r\n0\r\n\r\n", 7);
  p += 7;
  send_all(c, msg, p);
  assert_int_equal(read_response(c, &r), 0);
  assert_json_error(&r, 413, "body_too_large");
  response_free(&r);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);
  free(body);
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 1); /* the handler never saw them */
}

static void test_headers_too_large(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.max_header = 512};
  start_server(f, &lim);

  client *c = connect_client(f);
  char req[2048];
  char big[1001];
  memset(big, 'h', 1000);
  big[1000] = '\0';
  snprintf(req, sizeof req, "GET /h HTTP/1.1\r\nHost: h\r\nX-Big: %s\r\n\r\n", big);
  send_str(c, req);
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_json_error(&r, 431, "headers_too_large");
  assert_memory_equal(r.head, "HTTP/1.1 431 Request Header Fields Too Large\r\n", 46);
  response_free(&r);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);

  /* a long URL counts too */
  c = connect_client(f);
  snprintf(req, sizeof req, "GET /%s HTTP/1.1\r\nHost: h\r\n\r\n", big);
  send_str(c, req);
  assert_int_equal(read_response(c, &r), 0);
  assert_json_error(&r, 431, "headers_too_large");
  response_free(&r);
  client_close(c);

  /* many small headers adding up */
  c = connect_client(f);
  size_t p = (size_t)snprintf(req, sizeof req, "GET /many HTTP/1.1\r\n");
  for (int i = 0; i < 60; i++) p += (size_t)snprintf(req + p, sizeof req - p, "X-H%02d: v\r\n", i);
  p += (size_t)snprintf(req + p, sizeof req - p, "\r\n");
  send_all(c, req, p);
  assert_int_equal(read_response(c, &r), 0);
  assert_json_error(&r, 431, "headers_too_large");
  response_free(&r);
  client_close(c);

  /* under the limit still works */
  c = connect_client(f);
  send_str(c, "GET /small HTTP/1.1\r\nHost: h\r\nX-Test: fine\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/small", "", "fine", "", 0);
  response_free(&r);
  client_close(c);
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 1);
}

/* Default limits: a count of headers over the server's table (48) is 431
 * too, while 40 headers are fine. */
static void test_too_many_headers(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  char req[4096];
  response r;
  for (int round = 0; round < 2; round++) {
    int nh = round == 0 ? 40 : 60;
    client *c = connect_client(f);
    size_t p = (size_t)snprintf(req, sizeof req, "GET /count HTTP/1.1\r\n");
    for (int i = 0; i < nh - 1; i++)
      p += (size_t)snprintf(req + p, sizeof req - p, "X-H%02d: v%d\r\n", i, i);
    p += (size_t)snprintf(req + p, sizeof req - p, "X-Test: last\r\n\r\n");
    send_all(c, req, p);
    assert_int_equal(read_response(c, &r), 0);
    if (round == 0)
      assert_echo(&r, "GET", "/count", "", "last", "", 0);
    else
      assert_json_error(&r, 431, "headers_too_large");
    response_free(&r);
    client_close(c);
  }
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 1);
}

static void test_malformed(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  static const char *bad[] = {
      "NOT A REQUEST\r\n\r\n",
      "GET /x HTTP/1.x\r\nHost: h\r\n\r\n",
      "GET /a\001b HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET /x HTTP/1.1\r\nHost\001: h\r\n\r\n",
      "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: abc\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    client *c = connect_client(f);
    send_str(c, bad[i]);
    response r;
    if (read_response(c, &r) != 0) fail_msg("no response to case %zu", i);
    if (r.status != 400) fail_msg("case %zu: status %d", i, r.status);
    assert_json_error(&r, 400, "bad_request");
    assert_memory_equal(r.head, "HTTP/1.1 400 Bad Request\r\n", 26);
    response_free(&r);
    if (wait_closed(c, 2000) < 0) fail_msg("case %zu: connection left open", i);
    client_close(c);
  }
  /* a good request after a bad one on another connection is unaffected */
  client *c = connect_client(f);
  send_str(c, "GET /fine HTTP/1.1\r\nHost: h\r\n\r\n");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/fine", "", NULL, "", 0);
  response_free(&r);
  client_close(c);
  stop_server(f);
  assert_int_equal(atomic_load(&f->nreq), 1);
}

/* A NUL byte starting a header value (http-parser passes it on) is a 400, and
 * a request after it on a new connection is parsed normally (fuzz_http
 * found it overrunning the header arena). */
static void test_nul_in_header(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  static const char req[] = "GET /x HTTP/1.1\r\nHost: h\r\nX-Test:\0b\r\nA: b\r\n\r\n";
  client *c = connect_client(f);
  send_all(c, req, sizeof req - 1);
  response r;
  if (read_response(c, &r) != 0) fail_msg("no response");
  assert_json_error(&r, 400, "bad_request");
  assert_non_null(strstr(r.body, "NUL byte"));
  response_free(&r);
  if (wait_closed(c, 2000) < 0) fail_msg("connection left open");
  client_close(c);
  c = connect_client(f);
  send_str(c, "GET /fine HTTP/1.1\r\nHost: h\r\nX-Test: ok\r\n\r\n");
  if (read_response(c, &r) != 0) fail_msg("no response to the good request");
  assert_int_equal(r.status, 200);
  response_free(&r);
  client_close(c);
}

static void test_delayed_response(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  client *c = connect_client(f);
  int64_t t0 = now_ms();
  send_str(c, "POST /later?x=y HTTP/1.1\r\nHost: h\r\nX-Test: late\r\n"
              "Content-Length: 3\r\n\r\nabc");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  int64_t took = now_ms() - t0;
  assert_true(took >= LATER_MS - 5);
  assert_echo(&r, "POST", "/later", "x=y", "late", "abc", 3);
  assert_string_equal(header(&r, "Connection"), "keep-alive");
  response_free(&r);
  /* the connection is reusable afterwards */
  send_str(c, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/after", "", NULL, "", 0);
  response_free(&r);
  client_close(c);
  stop_server(f);
}

static void test_request_timeout(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.request_timeout_ms = 200, .idle_timeout_ms = 300};
  start_server(f, &lim);

  /* half a header, then silence: 408 after request_timeout_ms, then closed */
  client *c = connect_client(f);
  int64_t t1 = now_ms();
  send_str(c, "GET /slow HTTP/1.1\r\nHost: h\r\nX-Te");
  response r408;
  assert_int_equal(read_response(c, &r408), 0);
  int64_t t = now_ms() - t1;
  assert_int_equal(r408.status, 408);
  assert_non_null(strstr(r408.body, "\"request_timeout\""));
  assert_string_equal(header(&r408, "Connection"), "close");
  response_free(&r408);
  assert_true(t >= 150);
  assert_true(t < 1500);
  assert_true(wait_closed(c, 2000) >= 0);
  client_close(c);

  /* trickling bytes does not extend the deadline */
  c = connect_client(f);
  int64_t t0 = now_ms();
  send_str(c, "GET /trickle HTTP/1.1\r\n");
  int closed = 0;
  for (int i = 0; i < 40 && !closed; i++) {
    if (send(c->fd, "X", 1, MSG_NOSIGNAL) != 1) {
      closed = 1;
      break;
    }
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, 25) > 0) closed = 1;
  }
  assert_true(closed);
  assert_true(now_ms() - t0 < 900);
  client_close(c);

  /* idle connection that never sends anything */
  c = connect_client(f);
  t = wait_closed(c, 2000);
  assert_true(t >= 200);
  assert_true(t < 1500);
  client_close(c);

  /* idle after a complete request/response on a kept-alive connection */
  c = connect_client(f);
  send_str(c, "GET /once HTTP/1.1\r\nHost: h\r\n\r\n");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/once", "", NULL, "", 0);
  response_free(&r);
  t = wait_closed(c, 2000);
  assert_true(t >= 200);
  assert_true(t < 1500);
  client_close(c);

  /* a handler slower than the request timeout is not cut off */
  sl_http_limits lim2 = {.request_timeout_ms = 20};
  fixture *g = calloc(1, sizeof *g);
  assert_non_null(g);
  start_server(g, &lim2);
  c = connect_client(g);
  send_str(c, "GET /later HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/later", "", NULL, "", 0);
  response_free(&r);
  client_close(c);
  stop_server(g);
  free(g);
  stop_server(f);
}

static void test_free_closes_connections(void **state) {
  fixture *f = *state;
  start_server(f, NULL);
  /* idle keep-alive connection after one exchange */
  client *a = connect_client(f);
  send_str(a, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
  response r;
  assert_int_equal(read_response(a, &r), 0);
  assert_echo(&r, "GET", "/a", "", NULL, "", 0);
  response_free(&r);
  /* a connection in the middle of a request */
  client *b = connect_client(f);
  send_str(b, "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\npartial");
  /* a request the handler is still holding */
  client *h = connect_client(f);
  send_str(h, "GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
  /* a connection that sent nothing */
  client *n = connect_client(f);

  int64_t t0 = now_ms();
  while (atomic_load(&f->nheld) < 1 && now_ms() - t0 < 2000) usleep(1000);
  assert_int_equal(atomic_load(&f->nheld), 1);

  stop_server(f); /* the loop can only end if every connection was closed */
  assert_true(wait_closed(a, 1000) >= 0);
  assert_true(wait_closed(b, 1000) >= 0);
  assert_true(wait_closed(h, 1000) >= 0); /* the late answer was dropped */
  assert_true(wait_closed(n, 1000) >= 0);
  client_close(a);
  client_close(b);
  client_close(h);
  client_close(n);
  /* and nobody listens any more */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)f->port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), -1);
  assert_int_equal(errno, ECONNREFUSED);
  close(fd);
}

static void dummy_handler(sl_http_req *req, void *ud) {
  (void)ud;
  sl_http_respond(req, 204, NULL, NULL, NULL, 0);
}

static void test_new_errors(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sl_http_server *s = NULL, *s2 = NULL;
  static const char *bad[] = {"nohost",       "127.0.0.1:99999", "127.0.0.1:abc",
                              "127.0.0.1:-1", "localhost:80",    "1.2.3:80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (sl_http_server_new(&s, &loop, bad[i], NULL, dummy_handler, NULL) != SL_EINVAL)
      fail_msg("listen \"%s\" accepted", bad[i]);
    assert_null(s);
  }
  assert_int_equal(sl_http_server_new(NULL, &loop, "127.0.0.1:0", NULL, dummy_handler, NULL),
                   SL_EINVAL);
  assert_int_equal(sl_http_server_new(&s, NULL, "127.0.0.1:0", NULL, dummy_handler, NULL),
                   SL_EINVAL);
  assert_int_equal(sl_http_server_new(&s, &loop, "127.0.0.1:0", NULL, NULL, NULL), SL_EINVAL);
  assert_int_equal(sl_http_server_new(&s, &loop, NULL, NULL, dummy_handler, NULL), SL_EINVAL);

  /* port already taken: a libuv error, and nothing leaked or freed wrongly */
  assert_int_equal(sl_http_server_new(&s, &loop, "127.0.0.1:0", NULL, dummy_handler, NULL), 0);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", sl_http_server_port(s));
  int rc = sl_http_server_new(&s2, &loop, addr, NULL, dummy_handler, NULL);
  assert_int_equal(rc, UV_EADDRINUSE);
  assert_null(s2);
  sl_http_server_free(s);
  sl_http_server_free(NULL);
  assert_int_equal(sl_http_server_port(NULL), -1);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* max_connections: N open connections are served; connection N+1 gets a
 * 503 JSON and is closed (whether or not it sent its request first), the N
 * keep working, and once one closes a new connection is served again. */
/* After refusals at a cap of n connections: each of the n held ones (c)
 * is still served; once one of them leaves, a new connection is served
 * (refused with `refused` until the server has seen the close); closes
 * them all. */
static void still_served_then_freed(fixture *f, client **c, int n, int refused) {
  response r;
  for (int i = 0; i < n; i++) {
    send_str(c[i], "GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(read_response(c[i], &r), 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
  }
  client_close(c[0]);
  int status = 0;
  for (int tries = 0; tries < 200 && status != 200; tries++) {
    client *x = connect_client(f);
    send_str(x, "GET /later-one HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(read_response(x, &r), 0);
    status = r.status;
    assert_true(status == 200 || status == refused);
    response_free(&r);
    client_close(x);
  }
  assert_int_equal(status, 200);
  for (int i = 1; i < n; i++) client_close(c[i]);
}

static void test_max_connections(void **state) {
  fixture *f = *state;
  enum { N = 3 };
  sl_http_limits lim = {.max_connections = N};
  start_server(f, &lim);
  client *c[N];
  response r;
  for (int i = 0; i < N; i++) { /* answered: the server has counted them */
    c[i] = connect_client(f);
    send_str(c[i], "GET /held HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(read_response(c[i], &r), 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
  }
  /* N+1: request sent before the refusal arrives */
  client *x = connect_client(f);
  send_str(x, "GET /extra HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(x, &r), 0);
  assert_int_equal(r.status, 503);
  assert_non_null(strstr(r.body, "\"too_many_connections\""));
  assert_string_equal(header(&r, "Content-Type"), "application/json");
  assert_string_equal(header(&r, "Connection"), "close");
  assert_string_equal(header(&r, "Retry-After"), "1");
  response_free(&r);
  assert_true(wait_closed(x, 3000) >= 0);
  client_close(x);
  /* N+1 again, silent: refused all the same */
  x = connect_client(f);
  assert_int_equal(read_response(x, &r), 0);
  assert_int_equal(r.status, 503);
  response_free(&r);
  client_close(x);
  still_served_then_freed(f, c, N, 503);
  stop_server(f);
}

/* first_byte_timeout_ms: a connection that sends nothing is closed then,
 * not at the (longer) idle timeout. */
static void test_first_byte_timeout(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.idle_timeout_ms = 10000, .first_byte_timeout_ms = 300};
  start_server(f, &lim);
  client *c = connect_client(f);
  int64_t t = wait_closed(c, 3000);
  if (t < 0) fail_msg("a silent connection was still open after 3 s (first byte timeout 300 ms)");
  assert_true(t >= 250);
  client_close(c);
  /* a connection that sent its request is not cut off by it */
  c = connect_client(f);
  usleep(100 * 1000);
  send_str(c, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n");
  response r;
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/ok", "", NULL, "", 0);
  response_free(&r);
  /* kept alive afterwards for the idle timeout, not the first-byte one */
  assert_true(wait_closed(c, 1000) < 0);
  send_str(c, "GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(c, &r), 0);
  assert_echo(&r, "GET", "/again", "", NULL, "", 0);
  response_free(&r);
  client_close(c);
  stop_server(f);
}

/* write_timeout_ms: a client that asks for a large response and never reads
 * it is closed once the response has waited that long; a client that reads
 * gets all of it. */
static void test_write_timeout(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.write_timeout_ms = 500};
  start_server(f, &lim);
  client *c = connect_client_from(f, NULL, 4096);
  send_str(c, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
  usleep(1500 * 1000); /* never reads while the timeout runs out */
  /* now drain: what the kernel buffered, then the close (EOF or reset) */
  size_t got = 0;
  int closed = 0;
  int64_t t0 = now_ms();
  for (;;) {
    char b[65536];
    ssize_t n = recv(c->fd, b, sizeof b, 0);
    if (n > 0) {
      got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    closed = n == 0 || errno == ECONNRESET;
    break; /* EOF, reset, or the 3 s receive timeout */
  }
  if (!closed)
    fail_msg("the connection was still open %lld ms after the write timeout (%zu of %u bytes "
             "received)",
             (long long)(now_ms() - t0 + 1000), got, BIG_BODY);
  assert_true(got < BIG_BODY);
  client_close(c);
  /* a client that reads gets the whole response */
  c = connect_client(f);
  send_str(c, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
  size_t want = 0;
  got = 0;
  char head[4096];
  size_t hl = 0;
  while (!want) {
    ssize_t n = recv(c->fd, head + hl, sizeof head - hl - 1, 0);
    assert_true(n > 0);
    hl += (size_t)n;
    head[hl] = '\0';
    char *e = strstr(head, "\r\n\r\n");
    if (e) {
      want = BIG_BODY;
      got = hl - (size_t)(e + 4 - head);
    }
  }
  while (got < want) {
    char b[65536];
    ssize_t n = recv(c->fd, b, sizeof b, 0);
    assert_true(n > 0);
    got += (size_t)n;
  }
  assert_int_equal(got, want);
  client_close(c);
  stop_server(f);
}

/* max_per_address: N connections from one address are served; N+1 from it
 * gets 429 JSON and is closed (counted in sluice_http_refused_total), while
 * the N stay open and another address is still served; once one of the N
 * closes, that address is served again. */
static void test_max_per_address(void **state) {
  fixture *f = *state;
  enum { N = 3 };
  sl_http_limits lim = {.max_per_address = N, .max_connections = 100};
  start_server(f, &lim);
  sl_metric *refused = sl_metrics_counter("sluice_http_refused_total", "reason=\"per_address\"",
                                          "connections refused");
  uint64_t refused0 = sl_metric_value(refused);
  client *c[N];
  response r;
  for (int i = 0; i < N; i++) {
    c[i] = connect_client(f);
    send_str(c[i], "GET /held HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(read_response(c[i], &r), 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
  }
  client *x = connect_client(f);
  send_str(x, "GET /extra HTTP/1.1\r\nHost: h\r\n\r\n");
  if (read_response(x, &r) != 0) fail_msg("connection N+1 got no response");
  if (r.status != 429) fail_msg("connection N+1 from one address: %d, not 429", r.status);
  assert_json_error(&r, 429, "too_many_connections_from_address");
  assert_string_equal(header(&r, "Retry-After"), "1");
  response_free(&r);
  assert_true(wait_closed(x, 3000) >= 0);
  client_close(x);
  assert_int_equal(sl_metric_value(refused), refused0 + 1);
  /* another address is served meanwhile */
  client *o = connect_client_from(f, "127.0.0.2", 0);
  send_str(o, "GET /other HTTP/1.1\r\nHost: h\r\n\r\n");
  assert_int_equal(read_response(o, &r), 0);
  assert_echo(&r, "GET", "/other", "", NULL, "", 0);
  response_free(&r);
  client_close(o);
  still_served_then_freed(f, c, N, 429);
  stop_server(f);
}

/* write_timeout_ms on a streamed response: a peer that stops reading is
 * closed once the oldest pending write has waited that long (on_closed
 * runs), although far less than max_queued is waiting. */
static void test_stream_write_timeout(void **state) {
  fixture *f = *state;
  sl_http_limits lim = {.write_timeout_ms = 500};
  start_server(f, &lim);
  client *c = connect_client_from(f, NULL, 4096);
  send_str(c, "GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
  int64_t t0 = now_ms();
  while (!atomic_load(&f->stream_closed) && now_ms() - t0 < 3000) usleep(10 * 1000);
  if (!atomic_load(&f->stream_closed))
    fail_msg("a stream whose peer does not read was still open after 3 s (write timeout 500 ms)");
  assert_true(now_ms() - t0 >= 400);
  client_close(c);
  stop_server(f);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_simple_get),       T(test_keep_alive),      T(test_pipelining),
      T(test_post_body),        T(test_body_too_large),  T(test_headers_too_large),
      T(test_too_many_headers), T(test_malformed),       T(test_nul_in_header),
      T(test_delayed_response), T(test_request_timeout), T(test_free_closes_connections),
      T(test_new_errors),       T(test_max_connections), T(test_first_byte_timeout),
      T(test_write_timeout),    T(test_max_per_address), T(test_stream_write_timeout),
  };
#undef T
  sl_log_init("test_http", "error");
  return cmocka_run_group_tests(tests, NULL, NULL);
}
