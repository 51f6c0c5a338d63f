/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_formstream.c — an async plugin's upload of its input audio is
 * streamed by the host from the buffer the stage holds, not copied
 * (sl_pluginhost.c), on the real HTTP client (sl_httpc) and server
 * (sl_http) over loopback:
 *   - stt/openai's file part arrives byte for byte, and the stage may free
 *     the audio as soon as the call is done;
 *   - a plugin that completes before its upload is sent (earlydone) still
 *     gets the original bytes sent, although the stage scribbles over the
 *     buffer and frees it at once (ASan would report the read otherwise);
 *   - when the server drops a reused connection after reading the request,
 *     libcurl rewinds the part (the seek callback) and sends it again whole
 *     on a fresh connection.
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_pluginhost.h"

#define AUDIO (3u << 20)

/* ---- an answer the stage holds ---- */

static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* n bytes of WAV (16 kHz, 16-bit mono: the plugin reads the header and
 * refuses what is not audio before any request) whose samples are noise */
static unsigned char *new_audio(size_t n, unsigned seed) {
  static const unsigned char head[44] = {'R', 'I', 'F',  'F',  0,   0,   0,   0,    'W', 'A', 'V',
                                         'E', 'f', 'm',  't',  ' ', 16,  0,   0,    0,   1,   0,
                                         1,   0,   0x80, 0x3e, 0,   0,   0,   0x7d, 0,   0,   2,
                                         0,   16,  0,    'd',  'a', 't', 'a', 0,    0,   0,   0};
  unsigned char *a = malloc(n);
  assert_non_null(a);
  assert_true(n > sizeof head);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    a[i] = (unsigned char)(seed >> 16);
  }
  memcpy(a, head, sizeof head);
  le32(a + 4, (uint32_t)(n - 8));
  le32(a + 40, (uint32_t)(n - sizeof head));
  return a;
}

/* ---- the provider: keeps the last body, answers a transcript ---- */

typedef struct {
  char *body;
  size_t len;
  int requests;
} provider;

static void on_request(sl_http_req *req, void *ud) {
  provider *p = ud;
  size_t n = 0;
  const char *b = sl_http_req_body(req, &n);
  free(p->body);
  p->body = malloc(n ? n : 1);
  assert_non_null(p->body);
  memcpy(p->body, b, n);
  p->len = n;
  p->requests++;
  const char *reply = "{\"text\":\"hello there\",\"duration\":2.5}";
  sl_http_respond(req, 200, "application/json", NULL, reply, strlen(reply));
}

/* ---- a call through the host, the way stages/lib/plugin_driver.c runs one ---- */

typedef struct {
  int calls;
  sl_plugin_result r;
  unsigned char *audio; /* freed by done(), as the stage frees its object */
  size_t len;
} held;

static void on_done(sl_plugin_result *r, void *ud) {
  held *h = ud;
  h->calls++;
  sl_plugin_result_clear(&h->r);
  h->r = *r;
  memset(h->audio, 0xEE, h->len); /* whatever reads it afterwards reads garbage... */
  free(h->audio);                 /* ...or freed memory */
  h->audio = NULL;
}

/* The loop, the stage's HTTP client and a plugin instance; with a provider
 * on the loop unless the test brings its own server (port > 0). */
typedef struct {
  uv_loop_t loop;
  provider p;
  sl_http_server *srv;
  sl_httpc *http;
  sl_plugin_lib *lib;
  sl_conf_bind b;
  sl_plugin_inst *in;
} fixture;

/* set: the plugin's URL setting, "%d" standing for the port */
static void fixture_up(fixture *f, const char *dir, const char *name, const char *set, int port) {
  memset(f, 0, sizeof *f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  if (!port) {
    sl_http_limits lim = {.max_body = 16u << 20};
    assert_int_equal(sl_http_server_new(&f->srv, &f->loop, "127.0.0.1:0", &lim, on_request, &f->p),
                     0);
    port = sl_http_server_port(f->srv);
  }
  assert_int_equal(sl_httpc_new(&f->http, &f->loop), 0);
  char err[512] = "", kv[160];
  snprintf(kv, sizeof kv, set, port);
  assert_int_equal(sl_plugin_lib_open(&f->lib, dir, "stt", name, err, sizeof err), 0);
  f->b = sl_plugin_lib_conf(f->lib);
  const char *sets[] = {kv};
  assert_int_equal(sl_conf_load(&f->b, 1, NULL, sets, 1, err, sizeof err), 0);
  assert_int_equal(sl_plugin_inst_new(&f->in, f->lib, err, sizeof err), 0);
  assert_false(sl_plugin_inst_is_sync(f->in));
}

static void fixture_down(fixture *f) {
  sl_httpc_free(f->http); /* while the plugins' reply callbacks are still loaded */
  sl_plugin_inst_free(f->in);
  sl_conf_release(&f->b, 1);
  sl_plugin_lib_close(f->lib);
  sl_http_server_free(f->srv);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f->p.body);
}

/* one call as stages/lib/plugin_driver.c runs it, the loop run until over(arg) */
static void run_call(fixture *f, held *h, int (*over)(void *), void *arg) {
  sl_plugin_input pin;
  memset(&pin, 0, sizeof pin);
  pin.struct_size = sizeof pin;
  pin.key = "s/1";
  pin.prompt = "";
  pin.language = "en";
  pin.audio = h->audio;
  pin.audio_len = h->len;
  pin.content_type = "audio/wav";
  pin.filename = "1.wav";
  assert_int_equal(sl_plugin_run(f->in, &pin, f->http, on_done, h), 0);
  uint64_t end = uv_now(&f->loop) + 10000;
  while (!over(arg) && uv_now(&f->loop) < end) uv_run(&f->loop, UV_RUN_ONCE);
  assert_true(over(arg));
}

static int got_request(void *arg) { return ((provider *)arg)->requests > 0; }
static int call_done(void *arg) { return ((held *)arg)->calls > 0; }

/* the bytes `want` stand in body once (and start there) */
static void assert_once(const char *body, size_t blen, const unsigned char *want, size_t n) {
  const char *at = memmem(body, blen, want, n);
  assert_non_null(at);
  assert_null(memmem(at + 1, blen - (size_t)(at + 1 - body), want, 4096));
}

static void test_openai_part_streamed_from_the_held_answer(void **st) {
  (void)st;
  fixture f;
  fixture_up(&f, SLUICE_PLUGIN_DIR, "openai", "stt.openai.base_url=http://127.0.0.1:%d", 0);
  held h = {.audio = new_audio(AUDIO, 1), .len = AUDIO};
  unsigned char *want = new_audio(AUDIO, 1);
  run_call(&f, &h, call_done, &h);
  assert_int_equal(h.calls, 1);
  assert_int_equal(h.r.outcome, SL_PLUGIN_DONE);
  assert_string_equal(h.r.text, "hello there");
  assert_int_equal(f.p.requests, 1);
  /* the whole answer, once, inside a well-formed form */
  assert_once(f.p.body, f.p.len, want, AUDIO);
  const char *file = "name=\"file\"; filename=\"1.wav\"", *model = "name=\"model\"";
  assert_non_null(memmem(f.p.body, f.p.len, file, strlen(file)));
  assert_non_null(memmem(f.p.body, f.p.len, model, strlen(model)));
  sl_plugin_result_clear(&h.r);
  fixture_down(&f);
  free(want);
}

static void test_completing_before_the_upload_keeps_its_bytes(void **st) {
  (void)st;
  fixture f;
  fixture_up(&f, SLUICE_TEST_PLUGIN_DIR, "earlydone", "stt.earlydone.url=http://127.0.0.1:%d/up",
             0);
  held h = {.audio = new_audio(AUDIO, 2), .len = AUDIO};
  unsigned char *want = new_audio(AUDIO, 2);
  run_call(&f, &h, got_request, &f.p);
  assert_int_equal(h.calls, 1); /* done (and the audio freed) before anything was sent */
  assert_int_equal(h.r.outcome, SL_PLUGIN_DONE);
  assert_once(f.p.body, f.p.len, want, AUDIO);
  sl_plugin_result_clear(&h.r);
  fixture_down(&f);
  free(want);
}

/* ---- a server that drops a reused connection ----
 * Connection 1: the first request is answered (keep-alive); the second,
 * sent on the same connection, is read whole and the connection closed
 * without a reply, as a server does that times an idle connection out
 * just when the client reuses it. libcurl then sends the request again on
 * a new connection, which needs the body rewound. Connection 2: that
 * request is kept and answered. */

typedef struct {
  int lfd;
  char *last; /* the body of the request answered on connection 2 */
  size_t last_len;
  int dropped;     /* requests read and dropped */
  const char *err; /* what went wrong on the server's thread, or NULL */
} dropper;

/* reads one request whole into a malloc'd body (answering an Expect:
 * 100-continue); 0, or -1 at EOF or on a request it cannot read */
static int read_request(int fd, char **body, size_t *blen) {
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap), *eoh = NULL;
  if (!buf) return -1;
  while (!(eoh = memmem(buf, len, "\r\n\r\n", 4))) {
    ssize_t n = len + 1 < cap ? read(fd, buf + len, cap - len - 1) : -1;
    if (n <= 0) {
      free(buf);
      return -1;
    }
    len += (size_t)n;
  }
  *eoh = '\0'; /* the head as a string */
  size_t hlen = (size_t)(eoh + 4 - buf);
  const char *cl = strcasestr(buf, "\r\nContent-Length:");
  size_t clen = cl ? strtoul(cl + 17, NULL, 10) : 0;
  if (strcasestr(buf, "\r\nExpect: 100-continue")) {
    const char *go = "HTTP/1.1 100 Continue\r\n\r\n";
    if (write(fd, go, strlen(go)) != (ssize_t)strlen(go)) {
      free(buf);
      return -1;
    }
  }
  char *nb = hlen + clen > cap ? realloc(buf, hlen + clen) : buf;
  if (!nb) {
    free(buf);
    return -1;
  }
  buf = nb;
  while (len < hlen + clen) {
    ssize_t n = read(fd, buf + len, hlen + clen - len);
    if (n <= 0) {
      free(buf);
      return -1;
    }
    len += (size_t)n;
  }
  *blen = clen;
  *body = malloc(clen ? clen : 1);
  if (*body) memcpy(*body, buf + hlen, clen);
  free(buf);
  return *body ? 0 : -1;
}

static int reply(int fd) {
  const char *body = "{\"text\":\"hello there\",\"duration\":2.5}";
  char r[256];
  int n = snprintf(r, sizeof r,
                   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "\r\n%s",
                   strlen(body), body);
  return write(fd, r, (size_t)n) == n ? 0 : -1;
}

static void *dropper_main(void *arg) {
  dropper *d = arg;
  char *body = NULL;
  size_t blen = 0;
  int c1 = accept(d->lfd, NULL, NULL);
  if (c1 < 0 || read_request(c1, &body, &blen) || reply(c1)) { /* 1st: answered */
    d->err = "the first request";
    return NULL;
  }
  free(body);
  if (read_request(c1, &body, &blen)) { /* 2nd: read, then dropped */
    d->err = "the second request on the reused connection";
    return NULL;
  }
  free(body);
  d->dropped++;
  close(c1);
  int c2 = accept(d->lfd, NULL, NULL); /* the 2nd again, on a new connection */
  if (c2 < 0 || read_request(c2, &d->last, &d->last_len) || reply(c2)) {
    d->err = "the second request sent again";
    return NULL;
  }
  char b;
  while (read(c2, &b, 1) > 0) {
  }
  close(c2);
  return NULL;
}

static void test_rewound_for_a_retry_on_a_fresh_connection(void **st) {
  (void)st;
  dropper d = {0};
  d.lfd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(d.lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_int_equal(bind(d.lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(d.lfd, 4), 0);
  assert_int_equal(getsockname(d.lfd, (struct sockaddr *)&a, &al), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, dropper_main, &d), 0);
  fixture f;
  fixture_up(&f, SLUICE_PLUGIN_DIR, "openai", "stt.openai.base_url=http://127.0.0.1:%d",
             ntohs(a.sin_port));

  /* under 1 MiB: libcurl sends it without waiting for a 100 Continue */
  const size_t n = 600 * 1024;
  held h1 = {.audio = new_audio(n, 3), .len = n};
  run_call(&f, &h1, call_done, &h1);
  assert_int_equal(h1.r.outcome, SL_PLUGIN_DONE);
  held h2 = {.audio = new_audio(n, 4), .len = n};
  unsigned char *want = new_audio(n, 4);
  run_call(&f, &h2, call_done, &h2);
  assert_int_equal(h2.r.outcome, SL_PLUGIN_DONE);
  assert_string_equal(h2.r.text, "hello there");
  fixture_down(&f);
  assert_int_equal(pthread_join(th, NULL), 0);
  if (d.err) fail_msg("the server could not read %s", d.err);
  assert_int_equal(d.dropped, 1);
  assert_once(d.last, d.last_len, want, n); /* sent again from its first byte, whole */
  sl_plugin_result_clear(&h1.r);
  sl_plugin_result_clear(&h2.r);
  close(d.lfd);
  free(d.last);
  free(want);
}

/* The suite may run under tools/test, whose SLUICE_* variables no table here
 * declares; the environment check is sl_conf's business, not this test's. */
static int any_env(const char *name) {
  (void)name;
  return 1;
}

int main(void) {
  sl_conf_set_known_env(any_env);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_openai_part_streamed_from_the_held_answer),
      cmocka_unit_test(test_completing_before_the_upload_keeps_its_bytes),
      cmocka_unit_test(test_rewound_for_a_retry_on_a_fresh_connection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
