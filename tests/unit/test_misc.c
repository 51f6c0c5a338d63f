/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_misc.c — unit tests for the small runtime helpers: ids and digests
 * (sl_id), the metrics registry and its text rendering (sl_metrics), JSON
 * string escaping (sl_log), message-key parsing and the outbox (sl_stage),
 * and the error space (sl_err).
 *
 * The metrics registry is process-global and append-only, so every metrics
 * test uses names no other test in this file uses.
 */
#define _DEFAULT_SOURCE /* timegm */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_stage.h"

/* ---- sl_id --------------------------------------------------------------- */

static int is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

static void assert_uuid7_shape(const char *u) {
  assert_int_equal(strlen(u), 36);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      assert_int_equal(u[i], '-');
    else
      assert_true(is_lower_hex(u[i]));
  }
  assert_int_equal(u[14], '7');               /* version nibble */
  assert_true(strchr("89ab", u[19]) != NULL); /* variant bits 10 */
}

/* The first 48 bits (12 hex digits without the dash) are the timestamp. */
static uint64_t uuid7_ms(const char *u) {
  char hex[13];
  memcpy(hex, u, 8);
  memcpy(hex + 8, u + 9, 4);
  hex[12] = '\0';
  return strtoull(hex, NULL, 16);
}

static void test_uuid7_format_and_timestamp(void **state) {
  (void)state;
  char u[37];
  memset(u, 'X', sizeof u);
  assert_int_equal(sl_uuid7(0x0123456789abLL, u), 0);
  assert_uuid7_shape(u);
  assert_memory_equal(u, "01234567-89ab-7", 15);
  assert_int_equal(uuid7_ms(u), 0x0123456789abULL);

  int64_t now = 1767225600123LL; /* 2026-01-01T00:00:00.123Z */
  assert_int_equal(sl_uuid7(now, u), 0);
  assert_uuid7_shape(u);
  assert_int_equal(uuid7_ms(u), (uint64_t)now);

  assert_int_equal(sl_uuid7(0, u), 0);
  assert_memory_equal(u, "00000000-0000-7", 15);

  assert_int_equal(sl_uuid7(-1, u), SL_EINVAL);
  assert_int_equal(sl_uuid7(1, NULL), SL_EINVAL);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

static void test_uuid7_unique_and_monotonic(void **state) {
  (void)state;
  enum { N = 1000 };
  char(*ids)[37] = calloc(N, sizeof *ids);
  assert_non_null(ids);
  int64_t base = 1700000000000LL;
  for (int i = 0; i < N; i++) {
    assert_int_equal(sl_uuid7(base + i, ids[i]), 0);
    assert_uuid7_shape(ids[i]);
    assert_int_equal(uuid7_ms(ids[i]), (uint64_t)(base + i));
    /* increasing ms sorts increasing as text */
    if (i > 0) assert_true(strcmp(ids[i - 1], ids[i]) < 0);
  }
  /* 1000 ids for the same millisecond: the random part keeps them unique */
  char(*same)[37] = calloc(N, sizeof *same);
  assert_non_null(same);
  for (int i = 0; i < N; i++) assert_int_equal(sl_uuid7(base, same[i]), 0);
  qsort(same, N, sizeof *same, cmp_str);
  for (int i = 1; i < N; i++) assert_true(strcmp(same[i - 1], same[i]) != 0);
  free(same);
  free(ids);
}

static void test_random_hex(void **state) {
  (void)state;
  char a[65], b[65];
  memset(a, 'X', sizeof a);
  assert_int_equal(sl_random_hex(32, a, sizeof a), 0);
  assert_int_equal(strlen(a), 64);
  for (int i = 0; i < 64; i++) assert_true(is_lower_hex(a[i]));
  assert_int_equal(sl_random_hex(32, b, sizeof b), 0);
  assert_string_not_equal(a, b);

  char small[9];
  assert_int_equal(sl_random_hex(4, small, sizeof small), 0);
  assert_int_equal(strlen(small), 8);
  /* out too small by one, too many bytes, NULL */
  assert_int_equal(sl_random_hex(5, small, sizeof small), SL_EINVAL);
  char big[200];
  assert_int_equal(sl_random_hex(65, big, sizeof big), SL_EINVAL);
  assert_int_equal(sl_random_hex(4, NULL, 9), SL_EINVAL);
  assert_int_equal(sl_random_hex(0, small, sizeof small), 0);
  assert_string_equal(small, "");
}

/* a thread of its own hashes with its own context (freed when it ends) */
static void *sha256_in_thread(void *arg) {
  char *h = arg;
  for (int i = 0; i < 3; i++) sl_sha256_hex("abc", 3, h);
  return NULL;
}

static void test_sha256_hex(void **state) {
  (void)state;
  char h[65], th[2][65];
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, sha256_in_thread, th[i]), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_string_equal(th[i], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  assert_int_equal(sl_sha256_hex("abc", 3, h), 0);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_int_equal(sl_sha256_hex("", 0, h), 0);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert_int_equal(sl_sha256_hex(NULL, 0, h), 0);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  assert_int_equal(sl_sha256_hex(m, strlen(m), h), 0);
  assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  assert_int_equal(sl_sha256_hex(NULL, 3, h), SL_EINVAL);
  assert_int_equal(sl_sha256_hex("abc", 3, NULL), SL_EINVAL);
}

static void test_secure_equal(void **state) {
  (void)state;
  assert_int_equal(sl_secure_equal("token-abc", "token-abc"), 1);
  assert_int_equal(sl_secure_equal("token-abc", "token-abd"), 0);
  assert_int_equal(sl_secure_equal("Token-abc", "token-abc"), 0);
  assert_int_equal(sl_secure_equal("token-abc", "token-ab"), 0);
  assert_int_equal(sl_secure_equal("token-ab", "token-abc"), 0);
  assert_int_equal(sl_secure_equal("", ""), 1);
  assert_int_equal(sl_secure_equal("", "x"), 0);
}

/* ---- sl_metrics ---------------------------------------------------------- */

static void test_metrics_registration(void **state) {
  (void)state;
  sl_metric *a = sl_metrics_counter("sluice_treg_total", "k=\"1\"", "reg test");
  sl_metric *b = sl_metrics_counter("sluice_treg_total", "k=\"1\"", "reg test");
  sl_metric *c = sl_metrics_counter("sluice_treg_total", "k=\"2\"", "reg test");
  sl_metric *d = sl_metrics_counter("sluice_treg_total", NULL, "reg test");
  sl_metric *e = sl_metrics_counter("sluice_treg_total", "", "reg test");
  assert_non_null(a);
  assert_ptr_equal(a, b);
  assert_non_null(c);
  assert_ptr_not_equal(a, c);
  assert_non_null(d);
  assert_ptr_not_equal(a, d);
  assert_ptr_equal(d, e); /* NULL labels and "" are the same series */

  sl_metric_add(a, 3);
  sl_metric_add(b, 4);
  assert_int_equal(sl_metric_value(a), 7);
  assert_int_equal(sl_metric_value(c), 0);

  sl_metric *g = sl_metrics_gauge("sluice_treg_gauge", NULL, "gauge");
  assert_non_null(g);
  sl_metric_set(g, 10);
  sl_metric_gauge_add(g, -15);
  assert_int_equal((int64_t)sl_metric_value(g), -5);

  assert_null(sl_metrics_counter("treg_total", NULL, "no prefix"));
  assert_null(sl_metrics_counter("sluicex_total", NULL, "bad prefix"));
  assert_null(sl_metrics_gauge("", NULL, "empty"));
  assert_null(sl_metrics_counter(NULL, NULL, "null"));
  char longname[200];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  memcpy(longname, "sluice_", 7);
  assert_null(sl_metrics_counter(longname, NULL, "too long"));

  /* NULL metric handles are ignored, value 0 */
  sl_metric_add(NULL, 1);
  sl_metric_set(NULL, 1);
  sl_metric_gauge_add(NULL, 1);
  assert_int_equal(sl_metric_value(NULL), 0);
}

static size_t count_occurrences(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void test_metrics_render(void **state) {
  (void)state;
  /* interleave registrations: rendering must still group by name */
  sl_metric *r1 = sl_metrics_counter("sluice_trender_total", "outcome=\"done\"", "Rendered things");
  sl_metric *g = sl_metrics_gauge("sluice_trender_level", NULL, "Current level");
  sl_metric *r2 =
      sl_metrics_counter("sluice_trender_total", "outcome=\"failed\"", "Rendered things");
  assert_non_null(r1);
  assert_non_null(g);
  assert_non_null(r2);
  sl_metric_add(r1, 5);
  sl_metric_add(r2, 2);
  sl_metric_add(r2, 1);
  sl_metric_set(g, -3);

  char *out = NULL;
  size_t len = 0;
  assert_int_equal(sl_metrics_render(&out, &len), 0);
  assert_non_null(out);
  assert_int_equal(len, strlen(out));

  const char *want_total = "# HELP sluice_trender_total Rendered things\n"
                           "# TYPE sluice_trender_total counter\n"
                           "sluice_trender_total{outcome=\"done\"} 5\n"
                           "sluice_trender_total{outcome=\"failed\"} 3\n";
  const char *want_level = "# HELP sluice_trender_level Current level\n"
                           "# TYPE sluice_trender_level gauge\n"
                           "sluice_trender_level -3\n";
  const char *p = strstr(out, want_total);
  assert_non_null(p);
  /* the block starts at a line start and the gauge follows right after */
  assert_true(p == out || p[-1] == '\n');
  assert_ptr_equal(strstr(out, want_level), p + strlen(want_total));
  assert_int_equal(count_occurrences(out, "# HELP sluice_trender_total "), 1);
  assert_int_equal(count_occurrences(out, "# TYPE sluice_trender_total "), 1);
  assert_int_equal(count_occurrences(out, "# HELP sluice_trender_level "), 1);
  assert_int_equal(count_occurrences(out, "\nsluice_trender_total{"), 2);

  /* every line is a comment or "name[{labels}] value" and ends in \n */
  assert_int_equal(out[len - 1], '\n');
  for (char *line = out; *line;) {
    char *nl = strchr(line, '\n');
    assert_non_null(nl);
    if (line[0] != '#') {
      assert_memory_equal(line, "sluice_", 7);
      char *sp = memchr(line, ' ', (size_t)(nl - line));
      assert_non_null(sp);
      char *end = NULL;
      (void)strtoll(sp + 1, &end, 10);
      assert_ptr_equal(end, nl);
    }
    line = nl + 1;
  }
  free(out);

  /* values move in the next rendering */
  sl_metric_add(r1, 1);
  assert_int_equal(sl_metrics_render(&out, NULL), 0);
  assert_non_null(strstr(out, "sluice_trender_total{outcome=\"done\"} 6\n"));
  free(out);
  assert_int_equal(sl_metrics_render(NULL, NULL), SL_EINVAL);
}

/* Rendering is fully determined by the registration order: the series
 * registered here are the newest, so they form the exact tail of the output
 * (grouped by name, HELP/TYPE once per name). */
static void test_metrics_render_exact(void **state) {
  (void)state;
  sl_metric *a = sl_metrics_counter("sluice_texact_a_total", "x=\"1\"", "A help");
  sl_metric *b = sl_metrics_gauge("sluice_texact_b", NULL, "B help");
  sl_metric *a2 = sl_metrics_counter("sluice_texact_a_total", "x=\"2\"", "A help");
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(a2);
  sl_metric_add(a, 42);
  sl_metric_set(b, 7);
  char *out = NULL;
  assert_int_equal(sl_metrics_render(&out, NULL), 0);
  const char *want = "# HELP sluice_texact_a_total A help\n"
                     "# TYPE sluice_texact_a_total counter\n"
                     "sluice_texact_a_total{x=\"1\"} 42\n"
                     "sluice_texact_a_total{x=\"2\"} 0\n"
                     "# HELP sluice_texact_b B help\n"
                     "# TYPE sluice_texact_b gauge\n"
                     "sluice_texact_b 7\n";
  const char *p = strstr(out, "# HELP sluice_texact_a_total");
  assert_non_null(p);
  assert_true(strlen(p) >= strlen(want));
  /* the texact series are the last registered, so they end the output */
  assert_string_equal(p, want);
  free(out);
}

/* ---- sl_json_escape ------------------------------------------------------ */

static void test_json_escape(void **state) {
  (void)state;
  char buf[128];
  size_t p = 0;
  sl_json_escape(buf, sizeof buf, &p, "a\"b\\c");
  assert_string_equal(buf, "a\\\"b\\\\c");
  assert_int_equal(p, strlen(buf));

  p = 0;
  sl_json_escape(buf, sizeof buf, &p,
                 "l1\nl2\tx\r\x01\x1f\x7f"
                 "end");
  assert_string_equal(buf, "l1\\nl2\\tx\\u000d\\u0001\\u001f\x7f"
                           "end");
  assert_int_equal(p, strlen(buf));

  /* appends at *pos */
  memcpy(buf, "{\"k\":\"", 6);
  p = 6;
  sl_json_escape(buf, sizeof buf, &p, "v\"");
  assert_string_equal(buf, "{\"k\":\"v\\\"");
  assert_int_equal(p, 9);

  /* NULL and empty input leave the text unchanged but terminated */
  p = 3;
  memcpy(buf, "abcZ", 4);
  sl_json_escape(buf, sizeof buf, &p, NULL);
  assert_int_equal(p, 3);
  assert_string_equal(buf, "abc");
  sl_json_escape(buf, sizeof buf, &p, "");
  assert_int_equal(p, 3);
  assert_string_equal(buf, "abc");

  /* UTF-8 passes through untouched */
  p = 0;
  sl_json_escape(buf, sizeof buf, &p, "h\xc3\xa9llo \xf0\x9f\x8e\xa4 \xed\x9f\xbf");
  assert_string_equal(buf, "h\xc3\xa9llo \xf0\x9f\x8e\xa4 \xed\x9f\xbf");

  /* bytes that are not well-formed UTF-8 become \ufffd (fuzz_http found a
   * JSON parser error text quoting a cut sequence in an error body) */
  const char *bad[][2] = {
      {"a\xde"
       "b",
       "a\\ufffdb"},                                        /* lead byte, no continuation */
      {"\x80x", "\\ufffdx"},                                /* lone continuation */
      {"\xc0\xaf", "\\ufffd\\ufffd"},                       /* overlong '/' */
      {"\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd"},            /* a surrogate */
      {"\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* above U+10FFFF */
      {"\xe2\x82", "\\ufffd\\ufffd"},                       /* cut at the end of the string */
      {"\xff", "\\ufffd"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    p = 0;
    sl_json_escape(buf, sizeof buf, &p, bad[i][0]);
    assert_string_equal(buf, bad[i][1]);
  }
  /* a sequence that does not fit is left out whole, not cut */
  p = 0;
  sl_json_escape(buf, 9, &p, "ab\xf0\x9f\x8e\xa4");
  assert_string_equal(buf, "ab");
}

static void test_json_escape_truncation(void **state) {
  (void)state;
  /* for every bound, escaping a long hostile string stays inside the bound,
   * stays NUL-terminated and never cuts an escape sequence in half */
  const char *hostile = "\x01\"\\\n\x02\x03\"\"\\\\\x1f\x1f\x1f\x1f abcdefgh\x01\x01\x01";
  for (size_t len = 1; len < 64; len++) {
    char buf[96];
    memset(buf, 'Z', sizeof buf);
    size_t p = 0;
    sl_json_escape(buf, len, &p, hostile);
    assert_true(p < len);
    assert_int_equal(buf[p], '\0');
    for (size_t i = len; i < sizeof buf; i++) assert_int_equal(buf[i], 'Z');
    /* a well-formed prefix: every backslash starts a complete escape */
    for (size_t i = 0; i < p; i++) {
      if (buf[i] != '\\') {
        assert_true((unsigned char)buf[i] >= 0x20);
        continue;
      }
      assert_true(i + 1 < p);
      char e = buf[i + 1];
      if (e == 'u') {
        assert_true(i + 5 < p);
        assert_true(memcmp(buf + i + 2, "00", 2) == 0 || memcmp(buf + i + 2, "fffd", 4) == 0);
        assert_true(is_lower_hex(buf[i + 4]) && is_lower_hex(buf[i + 5]));
        i += 5;
      } else {
        assert_true(strchr("\"\\nt", e) != NULL);
        i += 1;
      }
    }
  }
  /* *pos already at/after the end: nothing is written anywhere */
  char buf[16];
  memset(buf, 'Z', sizeof buf);
  size_t p = 8;
  sl_json_escape(buf, 8, &p, "abc");
  assert_int_equal(p, 8);
  for (size_t i = 0; i < sizeof buf; i++) assert_int_equal(buf[i], 'Z');
}

/* ---- sl_key_parse -------------------------------------------------------- */

static int parse(const char *k, char sid[64], unsigned *q) {
  return sl_key_parse(k, strlen(k), sid, q);
}

static void test_key_parse(void **state) {
  (void)state;
  char sid[64];
  unsigned q = 0;
  assert_int_equal(parse("sid/3", sid, &q), 0);
  assert_string_equal(sid, "sid");
  assert_int_equal(q, 3);
  assert_int_equal(parse("0193a1b2-0000-7000-8000-000000000001/1234", sid, &q), 0);
  assert_string_equal(sid, "0193a1b2-0000-7000-8000-000000000001");
  assert_int_equal(q, 1234);
  assert_int_equal(parse("s/007", sid, &q), 0);
  assert_int_equal(q, 7);

  const char *bad[] = {"",          "sid",    "/3",     "sid/",   "sid/0",   "sid/x",
                       "sid/12345", "sid/3x", "sid/-3", "sid/ 3", "sid/3/4", "sid/0000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strcpy(sid, "untouched");
    q = 99;
    assert_int_equal(parse(bad[i], sid, &q), SL_EPARSE);
    assert_string_equal(sid, "untouched");
    assert_int_equal(q, 99);
  }
  assert_int_equal(sl_key_parse(NULL, 3, sid, &q), SL_EPARSE);

  /* len bounds the key: "sid/3" inside a longer buffer */
  assert_int_equal(sl_key_parse("sid/3garbage", 5, sid, &q), 0);
  assert_string_equal(sid, "sid");
  assert_int_equal(q, 3);
  assert_int_equal(sl_key_parse("sid/3", 4, sid, &q), SL_EPARSE);

  /* sid must fit in 64 bytes with its NUL */
  char k[80];
  memset(k, 'a', 63);
  strcpy(k + 63, "/2");
  assert_int_equal(parse(k, sid, &q), 0);
  assert_int_equal(strlen(sid), 63);
  memset(k, 'a', 64);
  strcpy(k + 64, "/2");
  assert_int_equal(parse(k, sid, &q), SL_EPARSE);
}

/* ---- sl_outbox ----------------------------------------------------------- */

static void test_outbox(void **state) {
  (void)state;
  sl_outbox ob = {.n = 0};
  char val[] = "hello";
  assert_int_equal(sl_outbox_add(&ob, "results", "sid/1", val, 5), 0);
  val[0] = 'J'; /* the outbox keeps its own copy */
  assert_int_equal(ob.n, 1);
  assert_ptr_not_equal(ob.items[0].value, val);
  assert_int_equal(ob.items[0].len, 5);
  assert_memory_equal(ob.items[0].value, "hello", 5);
  assert_string_equal(ob.items[0].topic, "results");
  assert_string_equal(ob.items[0].key, "sid/1");

  /* empty value */
  assert_int_equal(sl_outbox_add(&ob, "dlq", "k", NULL, 0), 0);
  assert_int_equal(ob.items[1].len, 0);
  assert_non_null(ob.items[1].value);

  /* key too long */
  char key[200];
  memset(key, 'k', sizeof key - 1);
  key[sizeof key - 1] = '\0';
  assert_int_equal(sl_outbox_add(&ob, "t", key, "x", 1), SL_ETOOBIG);
  key[128] = '\0'; /* 128 chars + NUL does not fit key[128] */
  assert_int_equal(sl_outbox_add(&ob, "t", key, "x", 1), SL_ETOOBIG);
  assert_int_equal(ob.n, 2);
  key[127] = '\0'; /* 127 chars + NUL fits exactly */
  assert_int_equal(sl_outbox_add(&ob, "t", key, "x", 1), 0);
  assert_string_equal(ob.items[2].key, key);
  assert_int_equal(ob.n, 3);

  /* fill to the limit */
  while (ob.n < SL_OUTBOX_MAX) {
    char v[16];
    int n = snprintf(v, sizeof v, "v%zu", ob.n);
    assert_int_equal(sl_outbox_add(&ob, "t", "sid/2", v, (size_t)n), 0);
  }
  assert_int_equal(ob.n, SL_OUTBOX_MAX);
  assert_memory_equal(ob.items[SL_OUTBOX_MAX - 1].value, "v31", 3);
  assert_int_equal(sl_outbox_add(&ob, "t", "sid/2", "over", 4), SL_ETOOBIG);
  assert_int_equal(ob.n, SL_OUTBOX_MAX);

  assert_int_equal(sl_outbox_add(NULL, "t", "k", "x", 1), SL_EINVAL);
  assert_int_equal(sl_outbox_add(&ob, NULL, "k", "x", 1), SL_EINVAL);

  sl_outbox_clear(&ob); /* LeakSanitizer checks the values are freed */
  assert_int_equal(ob.n, 0);
  sl_outbox_clear(&ob);
  sl_outbox_clear(NULL);
  /* usable again after clearing */
  assert_int_equal(sl_outbox_add(&ob, "t", "sid/3", "again", 5), 0);
  assert_int_equal(ob.n, 1);
  assert_memory_equal(ob.items[0].value, "again", 5);
  sl_outbox_clear(&ob);
}

/* ---- sl_err -------------------------------------------------------------- */

/* What stderr (a non-blocking pipe here) holds now: 0 bytes when empty. */
static size_t drain_pipe(int fd, char *buf, size_t len) {
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, len - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  return n;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* stderr into a new non-blocking pipe p (read p[0]); returns the old
 * stderr, for stderr_back */
static int stderr_to_pipe(int p[2]) {
  assert_int_equal(pipe(p), 0);
  assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  int saved = dup(STDERR_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(p[1], STDERR_FILENO) >= 0);
  return saved;
}

static void stderr_back(int saved, int p[2]) {
  assert_true(dup2(saved, STDERR_FILENO) >= 0);
  close(saved);
  close(p[0]);
  close(p[1]);
}

/* Batched logging (sl_log_batch): info lines wait, a warn line takes them
 * out first and in order, a flush or a line logged late enough writes
 * them, and switching batching off writes every line at once again. */
static void test_log_batch(void **state) {
  (void)state;
  int p[2], saved = stderr_to_pipe(p);
  static char buf[128 * 1024];
  assert_int_equal(sl_log_init("t", "info"), 0);

  sl_log(SL_LOG_INFO, NULL, "one");
  sl_log(SL_LOG_INFO, NULL, "two"); /* not batching yet: both out at once */
  drain_pipe(p[0], buf, sizeof buf);
  assert_non_null(strstr(buf, "\"msg\":\"two\""));

  sl_log_batch(1000);
  sl_log(SL_LOG_DEBUG, NULL, "hidden"); /* below the level: never */
  sl_log(SL_LOG_INFO, NULL, "first");
  sl_log(SL_LOG_INFO, NULL, "second");
  assert_int_equal(drain_pipe(p[0], buf, sizeof buf), 0); /* collected, not written */
  sl_log(SL_LOG_WARN, NULL, "third");
  drain_pipe(p[0], buf, sizeof buf);
  char *a = strstr(buf, "\"first\""), *b = strstr(buf, "\"second\""), *c = strstr(buf, "\"third\"");
  assert_true(a && b && c && a < b && b < c); /* all of them, in order */
  assert_null(strstr(buf, "hidden"));

  sl_log(SL_LOG_INFO, NULL, "fourth");
  assert_int_equal(drain_pipe(p[0], buf, sizeof buf), 0);
  sl_log_flush();
  drain_pipe(p[0], buf, sizeof buf);
  assert_non_null(strstr(buf, "\"fourth\""));
  sl_log_flush(); /* nothing collected: nothing written */
  assert_int_equal(drain_pipe(p[0], buf, sizeof buf), 0);

  sl_log_batch(50); /* a line logged 50 ms after the last write takes the batch out */
  sl_log(SL_LOG_INFO, NULL, "fifth");
  sleep_ms(80);
  sl_log(SL_LOG_INFO, NULL, "sixth");
  drain_pipe(p[0], buf, sizeof buf);
  a = strstr(buf, "\"fifth\"");
  b = strstr(buf, "\"sixth\"");
  assert_true(a && b && a < b);

  /* more than the batch holds (64 KiB): written as it fills, nothing lost */
  char big[1500];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  sl_log_batch(60000);
  size_t got = 0;
  for (int i = 0; i < 60; i++) {
    sl_log(SL_LOG_INFO, NULL, "%s", big);
    got += drain_pipe(p[0], buf, sizeof buf);
  }
  assert_true(got > 0); /* the batch filled and went out */
  sl_log_batch(0);      /* off: what is left goes out, then every line at once */
  got += drain_pipe(p[0], buf, sizeof buf);
  assert_true(got >= 60 * (sizeof big - 1));
  sl_log(SL_LOG_INFO, NULL, "seventh");
  drain_pipe(p[0], buf, sizeof buf);
  assert_non_null(strstr(buf, "\"seventh\""));

  stderr_back(saved, p);
}

/* One line's shape: the UTC time to the millisecond (the second is kept per
 * thread between lines: a line in the next second must not repeat it), the
 * level, the component, the submission and question of the key. */
static void test_log_line(void **state) {
  (void)state;
  int p[2], saved = stderr_to_pipe(p);
  static char buf[8192];
  assert_int_equal(sl_log_init("comp", "info"), 0);
  sl_log_batch(0);
  for (int round = 0; round < 2; round++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    sl_log(SL_LOG_WARN, "sub-1/7", "graded %d", 42);
    clock_gettime(CLOCK_REALTIME, &t1);
    drain_pipe(p[0], buf, sizeof buf);
    int Y, M, D, h, m, s, ms;
    char z;
    assert_int_equal(
        sscanf(buf, "{\"ts\":\"%4d-%2d-%2dT%2d:%2d:%2d.%3d%c\"", &Y, &M, &D, &h, &m, &s, &ms, &z),
        8);
    assert_int_equal(z, 'Z');
    assert_int_equal(buf[31], '"'); /* exactly three digits of milliseconds */
    struct tm tm = {
        .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = s};
    int64_t at = (int64_t)timegm(&tm) * 1000 + ms;
    assert_true(at >= (int64_t)t0.tv_sec * 1000 + t0.tv_nsec / 1000000);
    assert_true(at <= (int64_t)t1.tv_sec * 1000 + t1.tv_nsec / 1000000);
    assert_non_null(strstr(buf, "\"level\":\"warn\",\"component\":\"comp\","
                                "\"submission\":\"sub-1\",\"question\":\"7\","
                                "\"msg\":\"graded 42\"}\n"));
    if (round == 0) sleep_ms(1100); /* the next line is in another second */
  }
  /* a traced message's lines end with its trace id, after msg (readers that
   * grep '"question":"7","msg":"…' keep working); put back, none */
  char prev[33];
  sl_log_trace("4bf92f3577b34da6a3ce929d0e0e4736", prev);
  assert_string_equal(prev, "");
  sl_log(SL_LOG_WARN, "sub-1/7", "graded %d", 43);
  drain_pipe(p[0], buf, sizeof buf);
  assert_non_null(strstr(buf, "\"question\":\"7\",\"msg\":\"graded 43\","
                              "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"}\n"));
  sl_log_trace(prev, NULL);
  sl_log(SL_LOG_WARN, "sub-1/7", "graded %d", 44);
  drain_pipe(p[0], buf, sizeof buf);
  assert_null(strstr(buf, "trace_id"));
  stderr_back(saved, p);
}

static void test_err(void **state) {
  (void)state;
  assert_string_equal(sl_strerror(SL_EPARSE), "malformed input");
  assert_string_equal(sl_err_name(SL_EPARSE), "SL_EPARSE");
  assert_string_equal(sl_strerror(SL_EUNKNOWNKEY), "unknown configuration key");
  assert_string_equal(sl_err_name(SL_EUNKNOWNKEY), "SL_EUNKNOWNKEY");
  assert_string_equal(sl_err_name(SL_ESTATE), "SL_ESTATE");
  assert_int_equal(SL_EINVAL, -1000);
  assert_int_equal(SL_ESTATE, -1016);

  assert_string_equal(sl_strerror(-ENOENT), strerror(ENOENT));
  assert_string_equal(sl_strerror(-ENOENT), "No such file or directory");
  assert_string_equal(sl_err_name(-ENOENT), "ENOENT");
  assert_string_equal(sl_err_name(-ECONNREFUSED), "ECONNREFUSED");

  assert_string_equal(sl_strerror(0), "success");
  assert_string_equal(sl_err_name(0), "OK");
  assert_string_equal(sl_strerror(-5000), "unknown error");
  assert_string_equal(sl_err_name(-5000), "EUNKNOWN");
  assert_string_equal(sl_strerror(7), "unknown error");
  assert_string_equal(sl_err_name(7), "EUNKNOWN");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uuid7_format_and_timestamp),
      cmocka_unit_test(test_uuid7_unique_and_monotonic),
      cmocka_unit_test(test_random_hex),
      cmocka_unit_test(test_sha256_hex),
      cmocka_unit_test(test_secure_equal),
      cmocka_unit_test(test_metrics_registration),
      cmocka_unit_test(test_metrics_render),
      cmocka_unit_test(test_metrics_render_exact),
      cmocka_unit_test(test_json_escape),
      cmocka_unit_test(test_json_escape_truncation),
      cmocka_unit_test(test_key_parse),
      cmocka_unit_test(test_outbox),
      cmocka_unit_test(test_log_batch),
      cmocka_unit_test(test_log_line),
      cmocka_unit_test(test_err),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
