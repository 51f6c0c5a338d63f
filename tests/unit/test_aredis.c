/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_aredis.c — sl_aredis's command deadline against a fake Redis on the
 * same loop (a libuv TCP server on 127.0.0.1 that answers PING with PONG and
 * nothing else, or nothing at all):
 *   - a command the server never answers gets NULL one deadline later, the
 *     connection is dropped and commands fail at once until a new one has
 *     answered its PING;
 *   - a server that accepts connections but never answers (a SIGSTOPped
 *     Redis) never counts as up: commands fail at once, and the client keeps
 *     dropping and reopening the silent connection;
 *   - with the deadline off (0) a command waits, and sl_aredis_free answers
 *     it with NULL;
 *   - a script (sl_aredis_eval) goes by its SHA-1; a server that does not
 *     know it (NOSCRIPT) gets its text once, and the caller one answer;
 *   - a server that went away (its port refuses connections) is tried every
 *     500 ms, and a refused attempt fails at once, so the client is back
 *     within about 500 ms of the server's return (a restarted Redis).
 * No Redis is needed.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"

/* ---- the fake server ---------------------------------------------------- */

#define MAX_CLIENTS 32

static uv_loop_t loop;
static uv_tcp_t server;
static int port;
static int answer_ping; /* 0: never answer anything */
static int accepted;
/* scripts: EVALSHA is answered NOSCRIPT until an EVAL has sent the text,
 * then ":7"; so is EVAL */
static int script_known, evalsha_seen, eval_seen;
static uv_tcp_t *clients[MAX_CLIENTS];
static uv_timer_t tick; /* keeps UV_RUN_ONCE from blocking long; closed in teardown */
static int tick_on;

static void on_client_closed(uv_handle_t *h) {
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (clients[i] == (uv_tcp_t *)h) clients[i] = NULL;
  free(h);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  static char slab[4096];
  *buf = uv_buf_init(slab, sizeof slab - 1);
}

static void on_written(uv_write_t *w, int status) {
  (void)status;
  free(w);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  if (n < 0) {
    if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, on_client_closed);
    return;
  }
  if (!answer_ping || n == 0) return;
  buf->base[n] = '\0';
  static char pong[] = "+PONG\r\n";
  for (const char *p = buf->base; (p = strstr(p, "PING")) != NULL; p += 4) {
    uv_write_t *w = malloc(sizeof *w);
    assert_non_null(w);
    uv_buf_t b = uv_buf_init(pong, sizeof pong - 1);
    assert_int_equal(uv_write(w, s, &b, 1, on_written), 0);
  }
  static char noscript[] = "-NOSCRIPT No matching script. Please use EVAL.\r\n", seven[] = ":7\r\n";
  for (const char *p = buf->base; (p = strstr(p, "\r\nEVAL")) != NULL; p += 6) {
    int sha = strncmp(p + 6, "SHA\r\n", 5) == 0;
    if (sha)
      evalsha_seen++;
    else
      eval_seen++, script_known = 1;
    uv_write_t *w = malloc(sizeof *w);
    assert_non_null(w);
    uv_buf_t b = sha && !script_known ? uv_buf_init(noscript, sizeof noscript - 1)
                                      : uv_buf_init(seven, sizeof seven - 1);
    assert_int_equal(uv_write(w, s, &b, 1, on_written), 0);
  }
}

static void on_connection(uv_stream_t *srv, int status) {
  assert_int_equal(status, 0);
  uv_tcp_t *c = malloc(sizeof *c);
  assert_non_null(c);
  uv_tcp_init(&loop, c);
  assert_int_equal(uv_accept(srv, (uv_stream_t *)c), 0);
  accepted++;
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (!clients[i]) {
      clients[i] = c;
      break;
    }
  uv_read_start((uv_stream_t *)c, on_alloc, on_read);
}

/* Listens on 127.0.0.1:at (0: any free port, kept in `port`). */
static void listen_on(int at) {
  uv_tcp_init(&loop, &server);
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", at, &a);
  assert_int_equal(uv_tcp_bind(&server, (const struct sockaddr *)&a, 0), 0);
  assert_int_equal(uv_listen((uv_stream_t *)&server, 64, on_connection), 0);
  struct sockaddr_storage got;
  int len = sizeof got;
  uv_tcp_getsockname(&server, (struct sockaddr *)&got, &len);
  port = ntohs(((struct sockaddr_in *)&got)->sin_port);
}

static int setup(void **state) {
  (void)state;
  uv_loop_init(&loop);
  listen_on(0);
  accepted = 0;
  answer_ping = 1;
  script_known = evalsha_seen = eval_seen = 0;
  tick_on = 0;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (clients[i] && !uv_is_closing((uv_handle_t *)clients[i]))
      uv_close((uv_handle_t *)clients[i], on_client_closed);
  if (!uv_is_closing((uv_handle_t *)&server)) uv_close((uv_handle_t *)&server, NULL);
  if (tick_on) uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  return 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* Runs the loop until cond(arg) holds or ms pass; returns cond's value. */
static int run_until(int (*cond)(void *), void *arg, uint64_t ms) {
  uint64_t end = uv_now(&loop) + ms;
  while (!cond(arg) && uv_now(&loop) < end) uv_run(&loop, UV_RUN_ONCE);
  return cond(arg);
}

static void on_tick(uv_timer_t *t) { (void)t; }
static void start_tick(void) {
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 20, 20);
  tick_on = 1;
}

static int is_connected(void *r) { return sl_aredis_connected(r); }

typedef struct {
  int called;
  int null_reply;
  long long integer; /* an integer reply */
  uint64_t at;
} answer;

static int answered(void *a) { return ((answer *)a)->called; }

static void on_answer(redisReply *reply, void *ud) {
  answer *a = ud;
  a->called++;
  a->null_reply = reply == NULL;
  a->integer = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
  a->at = uv_now(&loop);
}

static int get(sl_aredis *r, answer *a) {
  const char *argv[] = {"GET", "k"};
  return sl_aredis_argv(r, on_answer, a, 2, argv, NULL);
}

static int accepted_two(void *unused) {
  (void)unused;
  return accepted >= 2;
}

static sl_aredis *client(int64_t timeout_ms) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  sl_aredis *r = NULL;
  assert_int_equal(sl_aredis_new(&r, &loop, url), 0);
  assert_int_equal(sl_aredis_set_timeout(r, timeout_ms), 0);
  return r;
}

/* ---- tests -------------------------------------------------------------- */

static void test_unanswered_command_gets_null_after_the_deadline(void **state) {
  (void)state;
  start_tick();
  sl_aredis *r = client(300);
  answer a = {0};
  assert_int_not_equal(get(r, &a), 0); /* nothing has answered yet */
  assert_true(run_until(is_connected, r, 3000));
  uint64_t t0 = uv_now(&loop);
  assert_int_equal(get(r, &a), 0); /* our server never answers a GET */
  assert_true(run_until(answered, &a, 3000));
  assert_int_equal(a.called, 1);
  assert_true(a.null_reply);
  uint64_t took = a.at - t0;
  assert_true(took >= 300 && took < 900);
  /* dropped: commands fail at once (the callback is never called) */
  assert_false(sl_aredis_connected(r));
  answer b = {0};
  assert_int_not_equal(get(r, &b), 0);
  /* the reconnect answers its PING and the client is usable again */
  assert_true(run_until(is_connected, r, 3000));
  assert_true(accepted >= 2);
  assert_int_equal(b.called, 0);
  sl_aredis_free(r);
}

static void test_silent_server_never_counts_as_up(void **state) {
  (void)state;
  answer_ping = 0; /* accepts (the kernel does), never answers */
  start_tick();
  sl_aredis *r = client(300);
  /* the PING is never answered: dropped after the deadline, reopened */
  assert_true(run_until(accepted_two, NULL, 3000));
  assert_false(sl_aredis_connected(r));
  answer a = {0};
  assert_int_not_equal(get(r, &a), 0);
  sl_aredis_free(r);
  assert_int_equal(a.called, 0);
}

static void test_no_deadline_waits_and_free_answers_null(void **state) {
  (void)state;
  start_tick();
  sl_aredis *r = client(0);
  assert_true(run_until(is_connected, r, 3000));
  answer a = {0};
  assert_int_equal(get(r, &a), 0);
  assert_false(run_until(answered, &a, 800)); /* no deadline: still waiting */
  assert_true(sl_aredis_connected(r));
  sl_aredis_free(r); /* answers what waits, now */
  assert_int_equal(a.called, 1);
  assert_true(a.null_reply);
}

static void test_script_by_sha1_and_text_once(void **state) {
  (void)state;
  start_tick();
  sl_redis_script sc;
  assert_int_equal(sl_redis_script_init(&sc, "return 1"), 0);
  assert_string_equal(sc.sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  sl_aredis *r = client(1000);
  assert_true(run_until(is_connected, r, 3000));
  uint64_t errors = sl_metric_value(sl__redis_errors());
  const char *argv[] = {"k1", "arg"};
  answer a = {0};
  assert_int_equal(sl_aredis_eval(r, on_answer, &a, &sc, 1, 2, argv, NULL), 0);
  assert_true(run_until(answered, &a, 3000));
  /* unknown: by SHA-1, refused, then once with its text; one answer */
  assert_int_equal(a.called, 1);
  assert_int_equal(a.integer, 7);
  assert_int_equal(evalsha_seen, 1);
  assert_int_equal(eval_seen, 1);
  answer b = {0};
  assert_int_equal(sl_aredis_eval(r, on_answer, &b, &sc, 1, 2, argv, NULL), 0);
  assert_true(run_until(answered, &b, 3000));
  assert_int_equal(b.integer, 7);
  assert_int_equal(evalsha_seen, 2); /* known now: its SHA-1 only */
  assert_int_equal(eval_seen, 1);
  /* a NOSCRIPT is part of the protocol, not a Redis error */
  assert_int_equal(sl_metric_value(sl__redis_errors()), errors);
  /* more arguments than a call may have: refused, no callback */
  const char *many[SL__REDIS_SCRIPT_MAX_ARGS + 1];
  for (int i = 0; i <= SL__REDIS_SCRIPT_MAX_ARGS; i++) many[i] = "x";
  answer c = {0};
  assert_int_equal(
      sl_aredis_eval(r, on_answer, &c, &sc, 0, SL__REDIS_SCRIPT_MAX_ARGS + 1, many, NULL),
      SL_EINVAL);
  assert_int_equal(c.called, 0);
  sl_aredis_free(r);
}

static int never(void *unused) {
  (void)unused;
  return 0;
}

static void test_back_within_500ms_of_the_server(void **state) {
  (void)state;
  start_tick();
  sl_aredis *r = client(2000); /* the default deadline */
  assert_true(run_until(is_connected, r, 3000));
  /* the server goes away: its port refuses connections from now on */
  for (int i = 0; i < MAX_CLIENTS; i++)
    if (clients[i] && !uv_is_closing((uv_handle_t *)clients[i]))
      uv_close((uv_handle_t *)clients[i], on_client_closed);
  uv_close((uv_handle_t *)&server, NULL);
  uint64_t errors = sl_metric_value(sl__redis_errors());
  run_until(never, NULL, 1600);
  assert_false(sl_aredis_connected(r));
  /* every 500 ms, and each refusal counted at once, not one deadline later */
  assert_true(sl_metric_value(sl__redis_errors()) - errors >= 3);
  /* back on the same port: the next attempt, within 500 ms, gets it */
  listen_on(port);
  uint64_t t0 = uv_now(&loop);
  assert_true(run_until(is_connected, r, 3000));
  uint64_t took = uv_now(&loop) - t0;
  print_message("reconnected %llu ms after the server came back\n", (unsigned long long)took);
  assert_true(took < 900);
  sl_aredis_free(r);
}

static void test_set_timeout_arguments(void **state) {
  (void)state;
  assert_int_equal(sl_aredis_set_timeout(NULL, 100), SL_EINVAL);
  sl_aredis *r = client(100);
  assert_int_equal(sl_aredis_set_timeout(r, -1), SL_EINVAL);
  assert_int_equal(sl_aredis_set_timeout(r, 0), 0);
  sl_aredis_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unanswered_command_gets_null_after_the_deadline, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_silent_server_never_counts_as_up, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_deadline_waits_and_free_answers_null, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_script_by_sha1_and_text_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_back_within_500ms_of_the_server, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_timeout_arguments, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
