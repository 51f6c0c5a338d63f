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
 * Also: what sl_kafka_prefetch holds and refuses; sl_kafka_producer_renew
 * hands the old producer's messages back as failed deliveries, with the
 * new producer already in place, and sl_kafka_renew_due bounds renewals.
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

/* what a report sees of the producer in place when it runs */
static rd_kafka_t **current;
static rd_kafka_t *seen_current;
static void on_dr_current(rd_kafka_resp_err_t err, void *ctx) {
  on_dr(err, ctx);
  seen_current = *current;
}

static void test_renew_fails_back_what_the_old_one_held(void **state) {
  (void)state;
  reports = 0;
  const char *extra[] = {"message.timeout.ms", "60000", "linger.ms", "0", NULL};
  rd_kafka_t *rk = NULL, *old = NULL;
  char err[512] = "";
  assert_int_equal(sl_kafka_producer_new(&rk, "127.0.0.1:1", "test-renew", extra, err, sizeof err),
                   0);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sl_kafka_uv *ku = NULL, *ku0;
  assert_int_equal(sl_kafka_uv_attach(&ku, rk, &loop), 0);
  ku0 = ku;
  static int marker;
  char x[] = "x";
  current = &rk;
  /* two messages no broker will ever take (nothing listens there) */
  for (int i = 0; i < 2; i++)
    assert_int_equal(
        sl_kafka_send(rk, "t", NULL, 0, x, 1, RD_KAFKA_MSG_F_COPY, on_dr_current, &marker),
        RD_KAFKA_RESP_ERR_NO_ERROR);
  old = rk;
  assert_int_equal(sl_kafka_producer_renew(NULL, &ku, &loop, "127.0.0.1:1", "test-renew", extra,
                                           NULL, err, sizeof err),
                   SL_EINVAL);
  assert_int_equal(sl_kafka_producer_renew(&rk, &ku, NULL, "127.0.0.1:1", "test-renew", extra, NULL,
                                           err, sizeof err),
                   SL_EINVAL);
  assert_ptr_equal(rk, old);
  assert_int_equal(reports, 0);
  /* renewed: both reports ran inside, as failures, seeing the new producer */
  assert_int_equal(sl_kafka_producer_renew(&rk, &ku, &loop, "127.0.0.1:1", "test-renew", extra,
                                           NULL, err, sizeof err),
                   0);
  assert_ptr_not_equal(rk, old);
  assert_ptr_not_equal(ku, ku0);
  assert_int_equal(reports, 2);
  assert_int_not_equal(last_err, RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_ptr_equal(last_ctx, &marker);
  assert_ptr_equal(seen_current, rk);
  /* the new one works as the old did: its own message, its own report */
  assert_int_equal(
      sl_kafka_send(rk, "t", NULL, 0, x, 1, RD_KAFKA_MSG_F_COPY, on_dr_current, &marker),
      RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_t *kept = NULL;
  assert_int_equal(sl_kafka_producer_renew(&rk, &ku, &loop, "127.0.0.1:1", "test-renew", extra,
                                           &kept, err, sizeof err),
                   0);
  assert_int_equal(reports, 3);
  assert_non_null(kept); /* handed back, not destroyed: still usable here */
  assert_int_equal(rd_kafka_outq_len(kept), 0);
  rd_kafka_destroy(kept);
  sl_kafka_uv_detach(ku);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  rd_kafka_destroy(rk);
}

static void test_renewals_are_bounded(void **state) {
  (void)state;
  sl_kafka_renewals r = {0};
  assert_int_equal(sl_kafka_renew_due(NULL, 0), 0);
  int64_t t = 1000000;
  for (int i = 0; i < SL_KAFKA_RENEW_MAX; i++) assert_int_equal(sl_kafka_renew_due(&r, t + i), 1);
  assert_int_equal(sl_kafka_renew_due(&r, t + 10), 0); /* one more within the window */
  assert_int_equal(sl_kafka_renew_due(&r, t + SL_KAFKA_RENEW_WINDOW_MS - 1), 0);
  assert_int_equal(sl_kafka_renew_due(&r, t + SL_KAFKA_RENEW_WINDOW_MS), 1); /* a new window */
  assert_int_equal(r.n, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_events_queued_before_attach_are_served),
      cmocka_unit_test(test_prefetch_holds_the_topics),
      cmocka_unit_test(test_renew_fails_back_what_the_old_one_held),
      cmocka_unit_test(test_renewals_are_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
