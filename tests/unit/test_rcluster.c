/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rcluster.c — the pure parts of the Redis Cluster clients
 * (sl_rcluster.c, the cluster URLs of sl_redis.c): redis[s]+cluster:// seed
 * lists, their redaction, the routing key of a command, MOVED / ASK replies
 * and the slot map read from a CLUSTER SLOTS reply. No network (the clients
 * themselves: tests/integration/test_redis_cluster.sh).
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
#include "sluice/sl_redis.h"
#include "sluice/sl_slot.h"
#include "sluice/sl_stage.h"

#include <stdlib.h>

static void test_cluster_url(void **state) {
  (void)state;
  sl_redis_addr a;
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:7000,h2:7001,10.0.0.3:7002", &a), 0);
  assert_int_equal(a.cluster, 1);
  assert_int_equal(a.tls, 0);
  assert_string_equal(a.host, "h1");
  assert_int_equal(a.port, 7000);
  assert_string_equal(a.seeds, "h1:7000,h2:7001,10.0.0.3:7002");
  assert_int_equal(sl_redis_addr_parse("rediss+cluster://app:p%40ss@h1:7000,h2/0", &a), 0);
  assert_int_equal(a.tls, 1);
  assert_int_equal(a.cluster, 1);
  assert_string_equal(a.user, "app");
  assert_string_equal(a.password, "p@ss");
  assert_string_equal(a.seeds, "h1:7000,h2");
  assert_int_equal(a.db, 0);
  /* a single-node URL is not a cluster */
  assert_int_equal(sl_redis_addr_parse("redis://h:1", &a), 0);
  assert_int_equal(a.cluster, 0);
  /* only database 0; no empty seeds or ports */
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:7000,h2:7001/1", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:7000,", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:7000,,h2:1", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:0", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://h1:70x", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+cluster://:7000", &a), SL_EINVAL);
  assert_int_equal(sl_redis_addr_parse("redis+clusters://h:1", &a), SL_EINVAL);
  char many[512] = "redis+cluster://";
  for (int i = 0; i <= SL_REDIS_MAX_SEEDS; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d:1", i ? "," : "", i);
  assert_int_equal(sl_redis_addr_parse(many, &a), SL_EINVAL);
}

static void test_cluster_redact_and_target(void **state) {
  (void)state;
  char b[256];
  sl_redis_redact("rediss+cluster://app:hunter2@h1:7000,h2:7001", b, sizeof b);
  assert_string_equal(b, "rediss+cluster://app:***@h1:7000,h2:7001");
  sl_redis_redact("redis+cluster://hunter2@h1:7000,h2:7001", b, sizeof b);
  assert_string_equal(b, "redis+cluster://***@h1:7000,h2:7001");
  char err[256];
  sl_redis_security s = {.user = "app", .password = "pw1"};
  assert_int_equal(sl_redis_security_set(&s, err, sizeof err), 0);
  sl_redis_addr a;
  assert_int_equal(sl__redis_target("redis+cluster://h1:7000,h2:7001", &a), 0);
  assert_string_equal(a.password, "pw1");
  assert_int_equal(a.cluster, 1);
  sl_redis_security_reset();
  sl__redis_map m;
  assert_int_equal(sl__redis_map_init(&m, &a), 0);
  assert_int_equal(m.n, 2);
  assert_string_equal(m.node[1].host, "h2");
  assert_int_equal(m.node[1].port, 7001);
  assert_int_equal(m.owner[0], -1);
  assert_int_equal(m.covered, 0);
}

static int route(int argc, const char **argv) { return sl_redis_route(argc, argv, NULL); }

static void test_route(void **state) {
  (void)state;
  int foo = sl_slot_of("foo", 3), bar = sl_slot_of("bar", 3);
  assert_int_not_equal(foo, bar);
  assert_int_equal(route(3, (const char *[]){"SET", "foo", "1"}), foo);
  assert_int_equal(route(2, (const char *[]){"get", "foo"}), foo);
  assert_int_equal(route(3, (const char *[]){"HGETALL", "{bar}x", "y"}), bar);
  /* scripts: the first key, or any primary without keys */
  assert_int_equal(route(5, (const char *[]){"EVALSHA", "abc", "2", "foo", "bar"}), foo);
  assert_int_equal(route(5, (const char *[]){"eval", "return 1", "1", "bar", "x"}), bar);
  assert_int_equal(route(4, (const char *[]){"FCALL", "f", "1", "foo"}), foo);
  assert_int_equal(route(4, (const char *[]){"EVAL", "return 1", "0", "foo"}), -1);
  assert_int_equal(route(3, (const char *[]){"EVAL", "return 1", "0"}), -1);
  /* streams: the first key after STREAMS */
  assert_int_equal(route(6, (const char *[]){"XREAD", "COUNT", "1", "STREAMS", "bar", "0"}), bar);
  assert_int_equal(
      route(8, (const char *[]){"XREADGROUP", "GROUP", "g", "c", "streams", "foo", "bar", ">"}),
      foo);
  assert_int_equal(route(3, (const char *[]){"XADD", "foo", "*"}), foo);
  /* key-less commands */
  assert_int_equal(route(1, (const char *[]){"PING"}), -1);
  assert_int_equal(route(2, (const char *[]){"SCRIPT", "FLUSH"}), -1);
  assert_int_equal(route(1, (const char *[]){"time"}), -1);
  assert_int_equal(route(3, (const char *[]){"PUBLISH", "foo", "m"}), -1);
  assert_int_equal(route(2, (const char *[]){"CLUSTER", "SLOTS"}), -1);
  assert_int_equal(route(2, (const char *[]){"INFO", "server"}), -1);
  assert_int_equal(route(0, NULL), -1);
  /* binary keys go by their length */
  const char *av[] = {"GET", "foo\0zzz"};
  size_t lens[] = {3, 3};
  assert_int_equal(sl_redis_route(2, av, lens), foo);
}

static redisReply str(const char *s) {
  return (redisReply){.type = REDIS_REPLY_STRING, .str = (char *)s, .len = strlen(s)};
}
static redisReply num(long long v) {
  return (redisReply){.type = REDIS_REPLY_INTEGER, .integer = v};
}

static void test_redirect(void **state) {
  (void)state;
  sl__redis_redirect rd;
  redisReply e = {.type = REDIS_REPLY_ERROR, .str = "MOVED 3999 127.0.0.1:6381"};
  assert_int_equal(sl__redis_redirect_parse(&e, &rd), 1);
  assert_int_equal(rd.ask, 0);
  assert_int_equal(rd.slot, 3999);
  assert_string_equal(rd.host, "127.0.0.1");
  assert_int_equal(rd.port, 6381);
  e.str = "ASK 12 ::1:7000";
  assert_int_equal(sl__redis_redirect_parse(&e, &rd), 1);
  assert_int_equal(rd.ask, 1);
  assert_string_equal(rd.host, "::1");
  e.str = "MOVED 5 :7000"; /* an unknown endpoint: the node that answered */
  assert_int_equal(sl__redis_redirect_parse(&e, &rd), 1);
  assert_string_equal(rd.host, "");
  const char *bad[] = {"MOVED 16384 h:1",
                       "MOVED x h:1",
                       "MOVED 1 h",
                       "MOVED 1 h:0",
                       "ASK",
                       "TRYAGAIN Multiple keys request during rehashing of slot",
                       "CLUSTERDOWN The cluster is down",
                       "CROSSSLOT Keys in request don't hash"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    e.str = (char *)bad[i];
    assert_int_equal(sl__redis_redirect_parse(&e, &rd), 0);
  }
  redisReply s = str("MOVED 1 h:1"); /* a string, not an error */
  assert_int_equal(sl__redis_redirect_parse(&s, &rd), 0);
  assert_int_equal(sl__redis_redirect_parse(NULL, &rd), 0);
}

static void test_map(void **state) {
  (void)state;
  sl_redis_addr a;
  assert_int_equal(sl_redis_addr_parse("redis+cluster://127.0.0.1:7000", &a), 0);
  sl__redis_map m;
  assert_int_equal(sl__redis_map_init(&m, &a), 0);
  /* [[0, 8191, [127.0.0.1, 7000, id], [replica]], [8192, 16383, ["", 7001, id]]] */
  redisReply h0 = str("127.0.0.1"), p0 = num(7000), id0 = str("a"), h1 = str(""), p1 = num(7001),
             id1 = str("b"), rh = str("127.0.0.1"), rp = num(7003);
  redisReply *n0e[] = {&h0, &p0, &id0}, *n1e[] = {&h1, &p1, &id1}, *re[] = {&rh, &rp};
  redisReply n0 = {.type = REDIS_REPLY_ARRAY, .elements = 3, .element = n0e};
  redisReply n1 = {.type = REDIS_REPLY_ARRAY, .elements = 3, .element = n1e};
  redisReply rn = {.type = REDIS_REPLY_ARRAY, .elements = 2, .element = re};
  redisReply lo0 = num(0), hi0 = num(8191), lo1 = num(8192), hi1 = num(16383);
  redisReply *r0e[] = {&lo0, &hi0, &n0, &rn}, *r1e[] = {&lo1, &hi1, &n1};
  redisReply r0 = {.type = REDIS_REPLY_ARRAY, .elements = 4, .element = r0e};
  redisReply r1 = {.type = REDIS_REPLY_ARRAY, .elements = 3, .element = r1e};
  redisReply *top[] = {&r0, &r1};
  redisReply rep = {.type = REDIS_REPLY_ARRAY, .elements = 2, .element = top};
  assert_int_equal(sl__redis_map_apply(&m, &rep, "10.1.1.1"), 16384);
  assert_int_equal(m.covered, 16384);
  assert_int_equal(m.n, 2); /* the seed is node 0; replicas are not nodes */
  assert_int_equal(m.owner[0], 0);
  assert_int_equal(m.owner[8191], 0);
  assert_int_equal(m.owner[8192], 1);
  assert_string_equal(m.node[1].host, "10.1.1.1"); /* "" : the node that answered */
  assert_int_equal(sl__redis_map_primary(&m, 1), 1);
  /* half a map covers half; a bad one changes nothing */
  rep.elements = 1;
  assert_int_equal(sl__redis_map_apply(&m, &rep, "x"), 8192);
  assert_int_equal(m.owner[8192], -1);
  assert_int_equal(sl__redis_map_primary(&m, 1), 0);
  hi0 = num(16384);
  assert_int_equal(sl__redis_map_apply(&m, &rep, "x"), SL_EREDIS);
  assert_int_equal(m.covered, 8192);
  rep.elements = 0; /* a node that knows no slots */
  assert_int_equal(sl__redis_map_apply(&m, &rep, "x"), SL_EREDIS);
  redisReply err = {.type = REDIS_REPLY_ERROR,
                    .str = "ERR This instance has cluster support disabled"};
  assert_int_equal(sl__redis_map_apply(&m, &err, "x"), SL_EREDIS);
  assert_int_equal(m.owner[0], 0);
}

/* the start-up check: a cluster needs redis.buckets, and has only db 0 */
static void test_cluster_config(void **state) {
  (void)state;
  char err[512];
  setenv("SLUICE_REDIS_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001", 1);
  unsetenv("SLUICE_REDIS_BUCKETS");
  assert_int_equal(sl_common_secure_from_env(err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "redis.buckets must be set (4 or more per primary)"));
  setenv("SLUICE_REDIS_BUCKETS", "16", 1);
  assert_int_equal(sl_common_secure_from_env(err, sizeof err), 0);
  setenv("SLUICE_REDIS_URL", "redis+cluster://127.0.0.1:7000/2", 1);
  assert_int_equal(sl_common_secure_from_env(err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "only database 0"));
  setenv("SLUICE_REDIS_URL", "redis://127.0.0.1:7000/2", 1); /* one Redis: as before */
  unsetenv("SLUICE_REDIS_BUCKETS");
  assert_int_equal(sl_common_secure_from_env(err, sizeof err), 0);
  unsetenv("SLUICE_REDIS_URL");
  sl_redis_security_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cluster_url), cmocka_unit_test(test_cluster_redact_and_target),
      cmocka_unit_test(test_route),       cmocka_unit_test(test_redirect),
      cmocka_unit_test(test_map),         cmocka_unit_test(test_cluster_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
