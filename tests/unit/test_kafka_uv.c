/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_kafka_uv.c — the librdkafka → libuv bridge (sl_kafka_uv) wakes the
 * loop for events that were queued before it was attached.
 *
 * librdkafka writes its io-event wake-up only when a queue goes from empty
 * to one op. A producer whose brokers refuse connections queues error
 * events at once; when they land before sl_kafka_uv_attach (a busy machine
 * delays the attach), no later op ever makes the queue length 1 again, so
 * without a wake-up of our own the loop never serves the queue: delivery
 * reports (a create's 503) never arrive. This test makes that order
 * certain — it waits until the main queue holds events before attaching —
 * and then expects the delivery report of a timed-out message on the loop.
 *
 * Also: what sl_kafka_prefetch holds and refuses.
 *
 * Real librdkafka against a refused loopback port (nothing listens on
 * 127.0.0.1:1); no broker is needed.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>
#include <uv.h>

#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"

static int reports;
static rd_kafka_resp_err_t last_err;
static void *last_ctx;

/* the report goes to the message's own callback with its own context */
static void on_dr(rd_kafka_resp_err_t err, void *ctx) {
  reports++;
  last_err = err;
  last_ctx = ctx;
}

static void on_deadline(uv_timer_t *t) { uv_stop(t->loop); }
static void on_check(uv_timer_t *t) {
  if (reports > 0) uv_stop(t->loop);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_events_queued_before_attach_are_served(void **state) {
  (void)state;
  reports = 0;
  const char *extra[] = {"message.timeout.ms", "800", "linger.ms", "0", NULL};
  rd_kafka_t *rk = NULL;
  char err[512] = "";
  assert_int_equal(
      sl_kafka_producer_new(&rk, "127.0.0.1:1", "test-kafka-uv", extra, err, sizeof err), 0);
  /* the refused connection queues error events on the main queue */
  rd_kafka_queue_t *mq = rd_kafka_queue_get_main(rk);
  for (int i = 0; i < 100 && rd_kafka_queue_length(mq) == 0; i++) sleep_ms(50);
  assert_true(rd_kafka_queue_length(mq) > 0);
  rd_kafka_queue_destroy(mq);

  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sl_kafka_uv *ku = NULL;
  assert_int_equal(sl_kafka_uv_attach(&ku, rk, &loop), 0);
  static int marker;
  char x[] = "x";
  assert_int_equal(sl_kafka_send(rk, "t", NULL, 0, x, 1, RD_KAFKA_MSG_F_COPY, on_dr, &marker),
                   RD_KAFKA_RESP_ERR_NO_ERROR);
  /* a message without a ticket reports to nobody (and does not crash) */
  assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("t"), RD_KAFKA_V_VALUE("y", 1),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                   RD_KAFKA_RESP_ERR_NO_ERROR);
  /* the report comes within message.timeout.ms plus librdkafka's 1 s scan */
  uv_timer_t deadline, check;
  uv_timer_init(&loop, &deadline);
  uv_timer_init(&loop, &check);
  uv_timer_start(&deadline, on_deadline, 6000, 0);
  uv_timer_start(&check, on_check, 50, 50);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(reports, 1);
  assert_int_equal(last_err, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  assert_ptr_equal(last_ctx, &marker);
  /* refused at once: no report will come, nothing leaks (ASan) */
  assert_int_equal(sl_kafka_send(rk, NULL, NULL, 0, x, 1, RD_KAFKA_MSG_F_COPY, on_dr, NULL),
                   RD_KAFKA_RESP_ERR__INVALID_ARG);
  assert_int_equal(sl_kafka_fatal(rk, "test"), 0); /* not fatal: only timed out */

  sl_kafka_uv_detach(ku);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_close((uv_handle_t *)&check, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  rd_kafka_destroy(rk);
}

/* sl_kafka_prefetch holds one handle per topic until released, refuses
 * bad arguments holding nothing, and does not wait for the (refused) broker;
 * that the first message then goes out at once is
 * tests/integration/test_presign_first_create.sh, against a real broker. */
static void test_prefetch_holds_the_topics(void **state) {
  (void)state;
  rd_kafka_t *rk = NULL;
  char err[512] = "";
  assert_int_equal(
      sl_kafka_producer_new(&rk, "127.0.0.1:1", "test-prefetch", NULL, err, sizeof err), 0);
  const char *topics[] = {"submissions", "storage-events"}, *bad[] = {"ok", ""};
  rd_kafka_topic_t *held[2] = {NULL, NULL};
  assert_int_equal(sl_kafka_prefetch(NULL, topics, 2, held), SL_EINVAL);
  assert_int_equal(sl_kafka_prefetch(rk, NULL, 2, held), SL_EINVAL);
  assert_int_equal(sl_kafka_prefetch(rk, bad, 2, held), SL_EINVAL);
  assert_null(held[0]);
  assert_null(held[1]);
  assert_int_equal(sl_kafka_prefetch(rk, topics, 0, NULL), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(sl_kafka_prefetch(rk, topics, 2, held), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_true(t1.tv_sec - t0.tv_sec < 1); /* asynchronous */
  assert_string_equal(rd_kafka_topic_name(held[0]), "submissions");
  assert_string_equal(rd_kafka_topic_name(held[1]), "storage-events");
  sl_kafka_prefetch_release(held, 2);
  assert_null(held[0]);
  assert_null(held[1]);
  sl_kafka_prefetch_release(NULL, 2);
  rd_kafka_destroy(rk);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_events_queued_before_attach_are_served),
      cmocka_unit_test(test_prefetch_holds_the_topics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
