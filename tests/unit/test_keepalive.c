/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_keepalive.c — the HTTP clients keep their connections: a stage that
 * fetches one object per message, or calls its provider once per message,
 * must not pay a TCP (or TLS) handshake per message.
 *
 * The server is a plain blocking HTTP/1.1 server on 127.0.0.1:0, one thread
 * per connection, answering every request 200 with a 2-byte body (HEAD: the
 * headers only) and never closing first; it counts the connections it
 * accepted. Clients: the blocking storage calls (sl_s3_head/get/put, as
 * ingest and the SYNC plugin stages use them on their worker threads) and
 * sl_httpc on a loop (the async plugins' provider calls and fetches), the
 * latter in waves of concurrent requests that finish one after the other
 * (a request for "/d<ms>" is answered after that many milliseconds), as a
 * stage's calls do.
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "sluice/sl_httpc.h"
#include "sluice/sl_s3.h"

#define MAX_CONNS 256

typedef struct {
  int fd, port;
  pthread_t th;
  atomic_int accepted;
  atomic_int requests;
  atomic_int stop;
  int conns[MAX_CONNS];
  pthread_t conn_th[MAX_CONNS];
} server;

typedef struct {
  server *s;
  int fd;
} conn_arg;

/* Reads requests off one connection and answers each, until the peer
 * closes it (or the server stops). */
static void *serve_conn(void *arg) {
  conn_arg a = *(conn_arg *)arg;
  free(arg);
  char buf[65536];
  size_t have = 0;
  for (;;) {
    char *end = NULL;
    while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
      if (have == sizeof buf) return NULL;
      ssize_t n = read(a.fd, buf + have, sizeof buf - have);
      if (n <= 0) return NULL;
      have += (size_t)n;
    }
    size_t head = (size_t)(end + 4 - buf), body = 0;
    for (char *p = buf; p < end; p = strstr(p, "\r\n") + 2)
      if (strncasecmp(p, "Content-Length:", 15) == 0) body = strtoul(p + 15, NULL, 10);
    while (have < head + body) { /* the request body, discarded */
      ssize_t n = read(a.fd, buf + have, sizeof buf - have);
      if (n <= 0) return NULL;
      have += (size_t)n;
      if (have == sizeof buf && head + body > have) {
        body -= have - head;
        have = head;
      }
    }
    int is_head = strncmp(buf, "HEAD ", 5) == 0;
    const char *d = strstr(buf, " /d");
    if (d && d < end) usleep((useconds_t)atoi(d + 3) * 1000);
    atomic_fetch_add(&a.s->requests, 1);
    const char *reply = "HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nETag: \"e1\"\r\n"
                        "Content-Length: 2\r\n\r\nok";
    size_t rl = strlen(reply) - (is_head ? 2 : 0);
    if (write(a.fd, reply, rl) != (ssize_t)rl) return NULL;
    memmove(buf, buf + head + body, have - head - body);
    have -= head + body;
  }
}

static void *accept_loop(void *arg) {
  server *s = arg;
  while (!atomic_load(&s->stop)) {
    int c = accept(s->fd, NULL, NULL);
    if (c < 0) continue;
    int i = atomic_fetch_add(&s->accepted, 1);
    if (i >= MAX_CONNS || atomic_load(&s->stop)) {
      close(c);
      continue;
    }
    s->conns[i] = c;
    conn_arg *a = malloc(sizeof *a);
    *a = (conn_arg){s, c};
    pthread_create(&s->conn_th[i], NULL, serve_conn, a);
  }
  return NULL;
}

static void server_start(server *s) {
  memset(s, 0, sizeof *s);
  s->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s->fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(s->fd, 512), 0);
  socklen_t sl = sizeof sa;
  getsockname(s->fd, (struct sockaddr *)&sa, &sl);
  s->port = ntohs(sa.sin_port);
  pthread_create(&s->th, NULL, accept_loop, s);
}

static void server_stop(server *s) {
  atomic_store(&s->stop, 1);
  shutdown(s->fd, SHUT_RDWR); /* wakes accept() */
  pthread_join(s->th, NULL);
  close(s->fd);
  int n = atomic_load(&s->accepted);
  for (int i = 0; i < n && i < MAX_CONNS; i++) {
    shutdown(s->conns[i], SHUT_RDWR); /* ends serve_conn */
    pthread_join(s->conn_th[i], NULL);
    close(s->conns[i]);
  }
}

/* ---- the blocking storage calls ------------------------------------------ */

static void test_s3_calls_share_a_connection(void **state) {
  (void)state;
  server s;
  server_start(&s);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", s.port);
  sl_s3_conf conf = {.endpoint = endpoint,
                     .region = "us-east-1",
                     .bucket = "answers",
                     .access_key = "k",
                     .secret_key = "s",
                     .path_style = 1,
                     .ca_file = ""};
  sl_s3_target t;
  assert_int_equal(sl_s3_target_init(&t, &conf), 0);
  sl_s3_conn *conn = NULL;
  assert_int_equal(sl_s3_conn_new(&conn, &conf), 0);
  char err[512];
  long status = 0;
  for (int i = 0; i < 4; i++) {
    sl_s3_head_info h;
    assert_int_equal(sl_s3_head(conn, &t, "submissions/a/q1.wav", &h, &status, err, sizeof err), 0);
    assert_int_equal(h.size, 2);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(
        sl_s3_get(conn, &t, "submissions/a/q1.wav", 1024, &data, &len, &status, err, sizeof err),
        0);
    assert_int_equal(len, 2);
    free(data);
    assert_int_equal(
        sl_s3_put(conn, &t, "derived/a.flac", "audio/flac", "abc", 3, &status, err, sizeof err), 0);
  }
  assert_int_equal(atomic_load(&s.requests), 12);
  /* one connection for all twelve calls (it was one per call) */
  assert_int_equal(atomic_load(&s.accepted), 1);
  sl_s3_conn_free(conn);
  server_stop(&s);
}

/* ---- sl_httpc on a loop ---------------------------------------------------- */

#define BURST 16

typedef struct {
  int done, ok;
} tally;

static void on_done(const sl_httpc_response *r, void *ud) {
  tally *t = ud;
  t->done++;
  t->ok += r->status == 200;
}

/* BURST requests at once, answered 0, 5, 10, ... ms later */
static void burst(sl_httpc *c, uv_loop_t *loop, int port) {
  tally t = {0, 0};
  for (int i = 0; i < BURST; i++) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/d%d", port, 5 * i);
    sl_httpc_request q = {.method = "GET", .url = url};
    assert_int_equal(sl_httpc_send(c, &q, on_done, &t), 0);
  }
  while (t.done < BURST) uv_run(loop, UV_RUN_ONCE);
  assert_int_equal(t.ok, BURST);
}

static void test_httpc_keeps_idle_connections(void **state) {
  (void)state;
  server s;
  server_start(&s);
  uv_loop_t loop;
  uv_loop_init(&loop);
  sl_httpc *c = NULL;
  assert_int_equal(sl_httpc_new(&c, &loop), 0);
  burst(c, &loop, s.port);
  int first = atomic_load(&s.accepted);
  assert_true(first >= 1 && first <= BURST);
  /* the next waves, as concurrent as the first, find them all open: a
   * stage whose calls end one by one must not reconnect on every wave */
  burst(c, &loop, s.port);
  burst(c, &loop, s.port);
  assert_int_equal(atomic_load(&s.accepted), first);
  sl_httpc_free(c);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  server_stop(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_s3_calls_share_a_connection),
      cmocka_unit_test(test_httpc_keeps_idle_connections),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
