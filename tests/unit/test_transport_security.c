/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_transport_security.c — redis[s]:// URLs (user info, %-decoding,
 * redaction), the Kafka security combinations refused at start-up, and the
 * s3.ca_file / endpoint rules. No network.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_s3.h"

static void test_redis_url(void **state) {
  (void)state;
  sl_redis_addr a;
  assert_int_equal(sl_redis_addr_parse("redis://127.0.0.1:6380/2", &a), 0);
  assert_string_equal(a.host, "127.0.0.1");
  assert_int_equal(a.port, 6380);
  assert_int_equal(a.db, 2);
  assert_int_equal(a.tls, 0);
  assert_string_equal(a.password, "");

  assert_int_equal(sl_redis_addr_parse("rediss://app:p%40ss%3Aw0rd@redis.internal:6390/1", &a), 0);
  assert_int_equal(a.tls, 1);
  assert_string_equal(a.user, "app");
  assert_string_equal(a.password, "p@ss:w0rd");
  assert_string_equal(a.host, "redis.internal");
  assert_int_equal(a.port, 6390);
  assert_int_equal(a.db, 1);

  /* a lone user-info part is the password (default user) */
  assert_int_equal(sl_redis_addr_parse("redis://s3cret@h", &a), 0);
  assert_string_equal(a.user, "");
  assert_string_equal(a.password, "s3cret");
  assert_int_equal(a.port, 6379);

  assert_int_equal(sl_redis_addr_parse("http://h:1", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://u:@h", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://u:%zz@h", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://u:%0@h", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://u:%00x@h", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://:pw@h:0", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis://h/16", &a), SL_EINVAL);
}

static void test_redact(void **state) {
  (void)state;
  char b[128];
  sl_redis_redact("rediss://app:hunter2@h:6390/1", b, sizeof b);
  assert_string_equal(b, "rediss://app:***@h:6390/1");
  sl_redis_redact("redis://hunter2@h", b, sizeof b);
  assert_string_equal(b, "redis://***@h");
  sl_redis_redact("redis://h:1/0", b, sizeof b);
  assert_string_equal(b, "redis://h:1/0");
  assert_null(strstr(b, "hunter2"));
}

static void test_redis_security(void **state) {
  (void)state;
  char err[512];
  sl_redis_security s = {.user = "app", .password = ""};
  assert_int_equal(sl_redis_security_set(&s, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "redis.password"));
  sl_redis_security bad_ca = {.ca_file = "/nonexistent/ca.pem"};
  assert_int_equal(sl_redis_security_set(&bad_ca, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "redis.tls_ca_file"));
  sl_redis_security half = {.cert_file = "/etc/hostname"};
  assert_int_equal(sl_redis_security_set(&half, err, sizeof err), SL_ECONFIG);
  /* the process-wide password fills in a URL without one, not one with */
  sl_redis_security ok = {.user = "app", .password = "pw1"};
  assert_int_equal(sl_redis_security_set(&ok, err, sizeof err), 0);
  sl_redis_addr a;
  assert_int_equal(sl__redis_target("redis://h:1", &a), 0);
  assert_string_equal(a.user, "app");
  assert_string_equal(a.password, "pw1");
  assert_int_equal(sl__redis_target("redis://other:pw2@h:1", &a), 0);
  assert_string_equal(a.user, "other");
  assert_string_equal(a.password, "pw2");
  sl_redis_security_reset();
  assert_int_equal(sl__redis_target("redis://h:1", &a), 0);
  assert_string_equal(a.password, "");
}

static void test_kafka_security(void **state) {
  (void)state;
  char err[512];
  sl_kafka_security s = {.protocol = "sasl_ssl", .username = "sluice", .verify_hostname = 1};
  assert_int_equal(sl_kafka_security_set(&s, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "kafka.sasl_password"));
  assert_int_equal(sl_kafka_security_enabled(), 0);

  sl_kafka_security bogus = {.protocol = "tls"};
  assert_int_equal(sl_kafka_security_set(&bogus, err, sizeof err), SL_ECONFIG);
  sl_kafka_security mech = {
      .protocol = "sasl_plaintext", .mechanism = "GSSAPI", .username = "u", .password = "p"};
  assert_int_equal(sl_kafka_security_set(&mech, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "kafka.sasl_mechanism"));
  /* a password without SASL is a mistake, not something to ignore */
  sl_kafka_security stray = {.protocol = "ssl", .username = "u", .password = "p"};
  assert_int_equal(sl_kafka_security_set(&stray, err, sizeof err), SL_ECONFIG);
  sl_kafka_security files = {.protocol = "plaintext", .ca_file = "/etc/hostname"};
  assert_int_equal(sl_kafka_security_set(&files, err, sizeof err), SL_ECONFIG);
  sl_kafka_security missing = {.protocol = "ssl", .ca_file = "/nonexistent/ca.pem"};
  assert_int_equal(sl_kafka_security_set(&missing, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "/nonexistent/ca.pem"));

  sl_kafka_security ok = {.protocol = "SASL_SSL",
                          .mechanism = "SCRAM-SHA-512",
                          .username = "u",
                          .password = "very-secret",
                          .verify_hostname = 1};
  assert_int_equal(sl_kafka_security_set(&ok, err, sizeof err), 0);
  assert_int_equal(sl_kafka_security_enabled(), 1);
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  assert_int_equal(sl_kafka_conf_secure(c, err, sizeof err), 0);
  char v[128];
  size_t n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(c, "security.protocol", v, &n), RD_KAFKA_CONF_OK);
  assert_string_equal(v, "sasl_ssl");
  n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(c, "sasl.mechanisms", v, &n), RD_KAFKA_CONF_OK);
  assert_string_equal(v, "SCRAM-SHA-512");
  n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(c, "ssl.endpoint.identification.algorithm", v, &n),
                   RD_KAFKA_CONF_OK);
  assert_string_equal(v, "https");
  rd_kafka_conf_destroy(c);
  sl_kafka_security_reset();
  assert_int_equal(sl_kafka_security_enabled(), 0);
}

/* kafka.producer_properties: split, trimmed, checked against librdkafka;
 * the properties the delivery guarantee rests on are refused */
/* the durable settings every producer writes with, extras over them */
static void test_conf_durable(void **state) {
  (void)state;
  char err[256], v[64];
  size_t n;
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  const char *const extra[] = {"linger.ms", "5", "message.timeout.ms", "9000", NULL};
  assert_int_equal(sl_kafka_conf_durable(c, extra, err, sizeof err), 0);
  static const char *const want[][2] = {{"enable.idempotence", "true"},
                                        {"acks", "-1"}, /* all */
                                        {"linger.ms", "5"},
                                        {"message.timeout.ms", "9000"}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    n = sizeof v;
    assert_int_equal(rd_kafka_conf_get(c, want[i][0], v, &n), RD_KAFKA_CONF_OK);
    assert_string_equal(v, want[i][1]);
  }
  assert_int_equal(sl_kafka_conf_durable(c, NULL, err, sizeof err), 0); /* the defaults again */
  n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(c, "message.timeout.ms", v, &n), RD_KAFKA_CONF_OK);
  assert_string_equal(v, "30000");
  /* one produce request in flight per broker: librdkafka 2.0.2's idempotent
   * producer desynchronises its sequence numbers across a leader change with
   * more (the fatal error of librdkafka PR #4438's family, seen in
   * test_kafka_nodes) */
  n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(c, "max.in.flight.requests.per.connection", v, &n),
                   RD_KAFKA_CONF_OK);
  assert_string_equal(v, "1");
  const char *const bad[] = {"no.such.property", "1", NULL};
  assert_int_equal(sl_kafka_conf_durable(c, bad, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "no.such.property"));
  assert_int_equal(sl_kafka_conf_durable(NULL, NULL, err, sizeof err), SL_EINVAL);
  rd_kafka_conf_destroy(c);
}

static void test_producer_properties(void **state) {
  (void)state;
  char buf[128], err[256];
  const char *kv[2 * 3 + 1];
  assert_int_equal(
      sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "", buf, sizeof buf, kv, 3, err, sizeof err),
      0);
  assert_null(kv[0]);
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS,
                                        " compression.type = zstd ,, linger.ms=5", buf, sizeof buf,
                                        kv, 3, err, sizeof err),
                   0);
  assert_string_equal(kv[0], "compression.type");
  assert_string_equal(kv[1], "zstd");
  assert_string_equal(kv[2], "linger.ms");
  assert_string_equal(kv[3], "5");
  assert_null(kv[4]);
  err[0] = '\0';
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "acks=1", buf, sizeof buf, kv, 3,
                                        err, sizeof err),
                   SL_ECONFIG);
  assert_non_null(strstr(err, "may not set acks"));
  assert_null(kv[0]);
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS,
                                        "linger.ms=1,enable.idempotence=false", buf, sizeof buf, kv,
                                        3, err, sizeof err),
                   SL_ECONFIG);
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "no.such.property=1", buf,
                                        sizeof buf, kv, 3, err, sizeof err),
                   SL_ECONFIG);
  assert_non_null(strstr(err, "no.such.property"));
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "linger.ms=abc", buf, sizeof buf,
                                        kv, 3, err, sizeof err),
                   SL_ECONFIG);
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "linger.ms", buf, sizeof buf, kv,
                                        3, err, sizeof err),
                   SL_ECONFIG);
  assert_non_null(strstr(err, "not name=value"));
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS,
                                        "linger.ms=1,linger.ms=2,linger.ms=3,linger.ms=4", buf,
                                        sizeof buf, kv, 3, err, sizeof err),
                   SL_ECONFIG);
  char big[300];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(
      sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, big, buf, sizeof buf, kv, 3, err, sizeof err),
      SL_ECONFIG);
}

/* kafka.consumer_properties: the same checks; the group, commit, offset,
 * prefetch and fetch settings (keys of Sluice's own) are refused, and what
 * is accepted reaches the consumer sl_kafka_consumer_new creates, beside
 * the fetch batching of kafka.fetch_min_bytes / kafka.fetch_wait_ms */
static void test_consumer_properties(void **state) {
  (void)state;
  char buf[128], err[256];
  const char *kv[2 * 3 + 1];
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_CONSUMER_PROPS,
                                        "client.rack=zone-a, fetch.max.bytes = 2097152", buf,
                                        sizeof buf, kv, 3, err, sizeof err),
                   0);
  assert_string_equal(kv[0], "client.rack");
  assert_string_equal(kv[3], "2097152");
  assert_null(kv[4]);
  static const char *const refused[] = {
      "enable.auto.commit=true",  "group.id=other",
      "auto.offset.reset=latest", "queued.max.messages.kbytes=1000000",
      "session.timeout.ms=45000", "fetch.wait.max.ms=5",
      "fetch.min.bytes=1"};
  const char *rkv[2 * 3 + 1];
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    err[0] = '\0';
    assert_int_equal(sl_kafka_props_split(SL_KAFKA_CONSUMER_PROPS, refused[i], buf + 64, 64, rkv, 3,
                                          err, sizeof err),
                     SL_ECONFIG);
    assert_non_null(strstr(err, "kafka.consumer_properties may not set"));
  }
  /* a producer may set what a consumer may not, and the other way round */
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_PRODUCER_PROPS, "session.timeout.ms=45000",
                                        buf + 64, 64, rkv, 3, err, sizeof err),
                   0);
  assert_int_equal(sl_kafka_props_split(SL_KAFKA_CONSUMER_PROPS, "acks=1", buf + 64, 64, rkv, 3,
                                        err, sizeof err),
                   0);
  sl_kafka_group_opts g = {.fetch_min_bytes = 65536, .fetch_wait_ms = 150, .extra = kv};
  rd_kafka_t *rk = NULL;
  assert_int_equal(sl_kafka_consumer_new(&rk, "127.0.0.1:1", "g", "t", &g, err, sizeof err, NULL,
                                         NULL, NULL, NULL),
                   0);
  static const char *const want[][2] = {{"client.rack", "zone-a"},
                                        {"fetch.max.bytes", "2097152"},
                                        {"fetch.min.bytes", "65536"},
                                        {"fetch.wait.max.ms", "150"},
                                        /* Sluice's own settings are still in place */
                                        {"enable.auto.commit", "false"},
                                        /* a fetch from a stopped leader is given up
                                         * after 10 s, not 60 (test_kafka_nodes) */
                                        {"socket.timeout.ms", "10000"}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char v[64];
    size_t n = sizeof v;
    assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), want[i][0], v, &n), RD_KAFKA_CONF_OK);
    assert_string_equal(v, want[i][1]);
  }
  rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  /* 0: librdkafka's own (1 byte, 500 ms) */
  sl_kafka_group_opts d = {0};
  assert_int_equal(sl_kafka_consumer_new(&rk, "127.0.0.1:1", "g", "t", &d, err, sizeof err, NULL,
                                         NULL, NULL, NULL),
                   0);
  char v[64];
  size_t n = sizeof v;
  assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), "fetch.wait.max.ms", v, &n),
                   RD_KAFKA_CONF_OK);
  assert_string_equal(v, "500");
  rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

static void test_s3_ca(void **state) {
  (void)state;
  sl_s3_target t;
  sl_s3_conf c = {.endpoint = "https://s3.internal:7443",
                  .bucket = "answers",
                  .path_style = 1,
                  .ca_file = "/etc/hostname"};
  assert_int_equal(sl_s3_target_init(&t, &c), 0);
  assert_string_equal(t.scheme, "https");
  assert_string_equal(t.ca_file, "/etc/hostname");
  c.ca_file = "/nonexistent/ca.pem";
  assert_int_equal(sl_s3_target_init(&t, &c), SL_ECONFIG);
  c.endpoint = "http://127.0.0.1:7070"; /* a CA file for plain http is a mistake */
  c.ca_file = "/etc/hostname";
  assert_int_equal(sl_s3_target_init(&t, &c), SL_ECONFIG);
  c.endpoint = "ftp://h";
  c.ca_file = "";
  assert_int_equal(sl_s3_target_init(&t, &c), SL_ECONFIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_redis_url),
      cmocka_unit_test(test_redact),
      cmocka_unit_test(test_redis_security),
      cmocka_unit_test(test_kafka_security),
      cmocka_unit_test(test_s3_ca),
      cmocka_unit_test(test_conf_durable),
      cmocka_unit_test(test_producer_properties),
      cmocka_unit_test(test_consumer_properties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
