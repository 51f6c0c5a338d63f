/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_conf.c — unit tests for the configuration loader (sl_conf).
 *
 * Each test binds a small table to a zeroed struct and loads it from
 * defaults, a temporary file (mkstemp), SLUICE_* environment variables
 * (setenv/unsetenv) and --set style overrides. The group setup removes every
 * SLUICE_* variable inherited from the caller so the environment is known;
 * each test unsets what it sets and resets the known-env predicate.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_err.h"

extern char **environ;

typedef struct {
  char *name;
  char *token; /* secret */
  int64_t count;
  double ratio;
  int flag;
  int64_t pin; /* secret, typed: parse errors must not echo it */
  char *multi;
} tconf;

#define O(f) offsetof(tconf, f)
static const sl_conf_entry table[] = {
    {"t.name", SL_CONF_STR, "dflt", O(name), "a name", 0},
    {"t.token", SL_CONF_STR, NULL, O(token), "a secret token", 1},
    {"t.count", SL_CONF_INT, "7", O(count), "a count", 0},
    {"t.ratio", SL_CONF_DOUBLE, "0.5", O(ratio), "a ratio", 0},
    {"t.flag", SL_CONF_BOOL, "false", O(flag), "a flag", 0},
    {"t.pin", SL_CONF_INT, "1234", O(pin), "a secret pin", 1},
    {"t.multi-part", SL_CONF_STR, "", O(multi), "dash in key", 0},
};
#define NTABLE (sizeof table / sizeof table[0])

typedef struct {
  char *url;
  int64_t port;
} oconf;

static const sl_conf_entry other_table[] = {
    {"o.url", SL_CONF_STR, "http://x", offsetof(oconf, url), "url", 0},
    {"o.port", SL_CONF_INT, NULL, offsetof(oconf, port), "port", 0},
};

#define SECRET "hunter2-s3cr3t"

/* ---- helpers ------------------------------------------------------------- */

static char g_files[8][64];
static int g_nfiles;

/* Writes text to a new temp file; the path stays valid until teardown. */
static const char *temp_file(const char *text) {
  assert_true(g_nfiles < 8);
  char *path = g_files[g_nfiles++];
  strcpy(path, "/tmp/sluice-test-conf-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = strlen(text);
  assert_int_equal(write(fd, text, n), (ssize_t)n);
  assert_int_equal(close(fd), 0);
  return path;
}

static void clear_sluice_env(void) {
  for (;;) {
    char name[256] = "";
    for (char **ep = environ; ep && *ep; ep++)
      if (strncmp(*ep, "SLUICE_", 7) == 0) {
        const char *eq = strchr(*ep, '=');
        size_t n = eq ? (size_t)(eq - *ep) : strlen(*ep);
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, *ep, n);
        name[n] = '\0';
        break;
      }
    if (!name[0]) return;
    unsetenv(name);
  }
}

static int group_setup(void **state) {
  (void)state;
  clear_sluice_env();
  return 0;
}

static int test_setup(void **state) {
  tconf *c = calloc(1, sizeof *c);
  if (!c) return -1;
  *state = c;
  g_nfiles = 0;
  return 0;
}

static int test_teardown(void **state) {
  tconf *c = *state;
  sl_conf_bind b = {table, NTABLE, c};
  sl_conf_release(&b, 1);
  free(c);
  for (int i = 0; i < g_nfiles; i++) unlink(g_files[i]);
  g_nfiles = 0;
  clear_sluice_env();
  sl_conf_set_known_env(NULL);
  return 0;
}

static int load(tconf *c, const char *file, const char *const *ov, size_t nov, char *err,
                size_t errlen) {
  sl_conf_bind b = {table, NTABLE, c};
  return sl_conf_load(&b, 1, file, ov, nov, err, errlen);
}

/* ---- precedence ---------------------------------------------------------- */

static void test_defaults(void **state) {
  tconf *c = *state;
  char err[256] = "junk";
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), 0);
  assert_string_equal(err, "");
  assert_string_equal(c->name, "dflt");
  assert_non_null(c->token);
  assert_string_equal(c->token, ""); /* NULL default = empty string */
  assert_int_equal(c->count, 7);
  assert_true(c->ratio == 0.5);
  assert_int_equal(c->flag, 0);
  assert_int_equal(c->pin, 1234);
  assert_string_equal(c->multi, "");
}

static void test_precedence(void **state) {
  tconf *c = *state;
  const char *f = temp_file("t.name = from-file\n"
                            "t.count = 10\n"
                            "t.ratio = 1.5\n"
                            "t.token = file-token\n");
  setenv("SLUICE_T_COUNT", "20", 1);
  setenv("SLUICE_T_RATIO", "2.5", 1);
  setenv("SLUICE_T_TOKEN", "env-token", 1);
  const char *ov[] = {"t.ratio=3.5", "t.flag = yes"};
  char err[256];
  assert_int_equal(load(c, f, ov, 2, err, sizeof err), 0);
  assert_string_equal(c->name, "from-file"); /* file > default */
  assert_int_equal(c->count, 20);            /* env > file */
  assert_string_equal(c->token, "env-token");
  assert_true(c->ratio == 3.5);   /* override > env > file */
  assert_int_equal(c->flag, 1);   /* override > default */
  assert_int_equal(c->pin, 1234); /* untouched default */

  /* the later of two overrides wins; an empty file path means no file */
  const char *ov2[] = {"t.count=1", "t.count=2"};
  assert_int_equal(load(c, "", ov2, 2, err, sizeof err), 0);
  assert_int_equal(c->count, 2);
  assert_string_equal(c->name, "dflt"); /* reloading starts from defaults */
}

static void test_two_binds(void **state) {
  tconf *c = *state;
  oconf o = {0};
  sl_conf_bind b[2] = {{table, NTABLE, c}, {other_table, 2, &o}};
  const char *f = temp_file("o.port = 8080\nt.count = 3\n");
  setenv("SLUICE_O_URL", "http://env", 1);
  const char *ov[] = {"t.name=ov"};
  char err[256];
  assert_int_equal(sl_conf_load(b, 2, f, ov, 1, err, sizeof err), 0);
  assert_int_equal(o.port, 8080);
  assert_string_equal(o.url, "http://env");
  assert_int_equal(c->count, 3);
  assert_string_equal(c->name, "ov");
  sl_conf_release(b, 2);
  assert_null(o.url);
  assert_null(c->name);
}

/* ---- unknown keys -------------------------------------------------------- */

static void test_unknown_key_in_file(void **state) {
  tconf *c = *state;
  const char *f = temp_file("# header\n\nt.name = ok\nt.bogus = 1\nt.count = 5\n");
  char err[512];
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), SL_EUNKNOWNKEY);
  char where[128];
  snprintf(where, sizeof where, "%s:4", f);
  assert_non_null(strstr(err, where));
  assert_non_null(strstr(err, "\"t.bogus\""));
  assert_int_equal(c->count, 7); /* stopped before line 5 */
}

static void test_unknown_key_in_override(void **state) {
  tconf *c = *state;
  const char *ov[] = {"t.count=9", "t.nope=1"};
  char err[256];
  assert_int_equal(load(c, NULL, ov, 2, err, sizeof err), SL_EUNKNOWNKEY);
  assert_non_null(strstr(err, "--set"));
  assert_non_null(strstr(err, "t.nope"));
  /* the key must match exactly, not as a prefix */
  const char *ov2[] = {"t.coun=1"};
  assert_int_equal(load(c, NULL, ov2, 1, err, sizeof err), SL_EUNKNOWNKEY);
  const char *ov3[] = {"t.counts=1"};
  assert_int_equal(load(c, NULL, ov3, 1, err, sizeof err), SL_EUNKNOWNKEY);
}

static const char *g_accepted;
static int g_known_calls;
static int known_pred(const char *env_name) {
  g_known_calls++;
  return g_accepted && strcmp(env_name, g_accepted) == 0;
}

static void test_unknown_env(void **state) {
  tconf *c = *state;
  char err[256];
  setenv("SLUICE_T_COUNTT", "3", 1); /* a typo of SLUICE_T_COUNT */
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), SL_EUNKNOWNKEY);
  assert_non_null(strstr(err, "SLUICE_T_COUNTT"));

  /* a predicate that does not know it: still rejected, and it was asked */
  g_accepted = "SLUICE_OTHER_THING";
  g_known_calls = 0;
  sl_conf_set_known_env(known_pred);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), SL_EUNKNOWNKEY);
  assert_true(g_known_calls >= 1);

  /* another component declares it: accepted, and not applied to us */
  g_accepted = "SLUICE_T_COUNTT";
  setenv("SLUICE_T_COUNT", "11", 1);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), 0);
  assert_int_equal(c->count, 11);

  /* variables without the SLUICE_ prefix are never checked */
  sl_conf_set_known_env(NULL);
  unsetenv("SLUICE_T_COUNTT");
  setenv("NOT_SLUICE_T_X", "1", 1);
  setenv("SLUICEX", "1", 1);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), 0);
  unsetenv("NOT_SLUICE_T_X");
  unsetenv("SLUICEX");
}

static void test_env_dash_mapping(void **state) {
  tconf *c = *state;
  char err[256];
  setenv("SLUICE_T_MULTI_PART", "dashed", 1);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), 0);
  assert_string_equal(c->multi, "dashed");
}

/* ---- strict parsing ------------------------------------------------------ */

typedef struct {
  const char *ov;
  const char *key;
} bad_case;

static void test_strict_values(void **state) {
  tconf *c = *state;
  static const bad_case bad[] = {
      {"t.count=12abc", "t.count"},
      {"t.count=", "t.count"},
      {"t.count=1.5", "t.count"},
      {"t.count=0x10", "t.count"},
      {"t.count=99999999999999999999", "t.count"},
      {"t.flag=maybe", "t.flag"},
      {"t.flag=TRUE", "t.flag"},
      {"t.flag=", "t.flag"},
      {"t.flag=2", "t.flag"},
      {"t.ratio=nan", "t.ratio"},
      {"t.ratio=inf", "t.ratio"},
      {"t.ratio=-infinity", "t.ratio"},
      {"t.ratio=1e999", "t.ratio"},
      {"t.ratio=1.5x", "t.ratio"},
      {"t.ratio=", "t.ratio"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[256] = "";
    const char *ov[] = {bad[i].ov};
    int rc = load(c, NULL, ov, 1, err, sizeof err);
    if (rc != SL_ECONFIG) fail_msg("%s: rc %d, err %s", bad[i].ov, rc, err);
    if (!strstr(err, bad[i].key)) fail_msg("%s: key missing in \"%s\"", bad[i].ov, err);
    assert_non_null(strstr(err, "--set"));
    /* the offending value is quoted for non-secret keys */
    const char *val = strchr(bad[i].ov, '=') + 1;
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", val);
    assert_non_null(strstr(err, quoted));
  }
}

static void test_accepted_values(void **state) {
  tconf *c = *state;
  char err[256];
  static const struct {
    const char *v;
    int want;
  } bools[] = {{"1", 1}, {"true", 1},  {"yes", 1}, {"on", 1},
               {"0", 0}, {"false", 0}, {"no", 0},  {"off", 0}};
  for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
    char ov0[32];
    snprintf(ov0, sizeof ov0, "t.flag=%s", bools[i].v);
    const char *ov[] = {bools[i].want ? "t.flag=off" : "t.flag=on", ov0};
    assert_int_equal(load(c, NULL, ov, 2, err, sizeof err), 0);
    assert_int_equal(c->flag, bools[i].want);
  }
  const char *ov[] = {"t.count=-42", "t.ratio=-1.25e2", "t.name=a=b", "t.token="};
  assert_int_equal(load(c, NULL, ov, 4, err, sizeof err), 0);
  assert_int_equal(c->count, -42);
  assert_true(c->ratio == -125.0);
  assert_string_equal(c->name, "a=b"); /* split at the first '=' */
  assert_string_equal(c->token, "");
  const char *ov2[] = {"t.count=9223372036854775807"};
  assert_int_equal(load(c, NULL, ov2, 1, err, sizeof err), 0);
  assert_int_equal(c->count, INT64_MAX);
}

static void test_strict_env_and_file_sources(void **state) {
  tconf *c = *state;
  char err[256];
  setenv("SLUICE_T_COUNT", "5x", 1);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "environment SLUICE_T_COUNT"));
  assert_non_null(strstr(err, "t.count"));
  unsetenv("SLUICE_T_COUNT");

  const char *f = temp_file("t.count = 4\n\nt.flag = perhaps\n");
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), SL_ECONFIG);
  char where[128];
  snprintf(where, sizeof where, "%s:3", f);
  assert_non_null(strstr(err, where));
  assert_non_null(strstr(err, "t.flag"));
  assert_non_null(strstr(err, "\"perhaps\""));
}

static void test_secret_never_in_errors(void **state) {
  tconf *c = *state;
  char err[512];
  /* bad value for a secret typed key: file, environment, override */
  const char *f = temp_file("t.pin = " SECRET "\n");
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "t.pin"));
  assert_null(strstr(err, SECRET));

  setenv("SLUICE_T_PIN", SECRET, 1);
  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "SLUICE_T_PIN"));
  assert_null(strstr(err, SECRET));
  unsetenv("SLUICE_T_PIN");

  const char *ov[] = {"t.pin=" SECRET};
  assert_int_equal(load(c, NULL, ov, 1, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "t.pin"));
  assert_null(strstr(err, SECRET));

  /* a secret line missing its '=' (e.g. "key: value" or "key value") */
  const char *f2 = temp_file("t.token: " SECRET "\n");
  assert_int_equal(load(c, f2, NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_null(strstr(err, SECRET));
  const char *f3 = temp_file("t.token " SECRET "\n");
  assert_int_equal(load(c, f3, NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_null(strstr(err, SECRET));
  const char *ov2[] = {"t.token " SECRET};
  assert_int_equal(load(c, NULL, ov2, 1, err, sizeof err), SL_ECONFIG);
  assert_null(strstr(err, SECRET));

  /* a mistyped secret key: the key is named, the value is not */
  const char *ov3[] = {"t.tokn=" SECRET};
  assert_int_equal(load(c, NULL, ov3, 1, err, sizeof err), SL_EUNKNOWNKEY);
  assert_non_null(strstr(err, "t.tokn"));
  assert_null(strstr(err, SECRET));

  /* help and docs never show a secret default */
  static const sl_conf_entry sec[] = {
      {"s.key", SL_CONF_STR, SECRET, 0, "secret with default", 1},
      {"s.open", SL_CONF_STR, "visible-default", 0, "open", 0},
  };
  char *buf = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&buf, &len);
  assert_non_null(mf);
  sl_conf_print_help(sec, 2, mf);
  sl_conf_print_markdown(sec, 2, mf);
  assert_int_equal(fclose(mf), 0);
  assert_null(strstr(buf, SECRET));
  assert_non_null(strstr(buf, "SLUICE_S_KEY"));
  assert_non_null(strstr(buf, "(secret)"));
  assert_non_null(strstr(buf, "visible-default"));
  free(buf);
}

/* ---- file syntax ----------------------------------------------------------- */

static void test_comments_and_blank_lines(void **state) {
  tconf *c = *state;
  const char *f = temp_file("# leading comment\n"
                            "\n"
                            "   \n"
                            "\t# indented comment = not a key\n"
                            "  t.name   =   spaced value  \n"
                            "#t.count = 99\n"
                            "t.count=8\r\n"
                            "t.flag = on"); /* no final newline */
  char err[256];
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), 0);
  assert_string_equal(c->name, "spaced value");
  assert_int_equal(c->count, 8);
  assert_int_equal(c->flag, 1);

  const char *empty = temp_file("");
  assert_int_equal(load(c, empty, NULL, 0, err, sizeof err), 0);
  assert_int_equal(c->count, 7);
}

static void test_line_without_equals(void **state) {
  tconf *c = *state;
  const char *f = temp_file("t.count = 3\njust some words\n");
  char err[256];
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), SL_ECONFIG);
  char where[128];
  snprintf(where, sizeof where, "%s:2", f);
  assert_non_null(strstr(err, where));
  assert_non_null(strstr(err, "key = value"));

  const char *ov[] = {"t.count"};
  assert_int_equal(load(c, NULL, ov, 1, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "--set"));
}

static void test_missing_file_and_bad_args(void **state) {
  tconf *c = *state;
  char err[256];
  assert_int_equal(load(c, "/nonexistent/sluice.conf", NULL, 0, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "/nonexistent/sluice.conf"));
  assert_non_null(strstr(err, "No such file"));

  sl_conf_bind b = {table, NTABLE, c};
  assert_int_equal(sl_conf_load(NULL, 1, NULL, NULL, 0, err, sizeof err), SL_EINVAL);
  assert_int_equal(sl_conf_load(&b, 1, NULL, NULL, 0, NULL, 0), SL_EINVAL);
  assert_int_equal(sl_conf_load(&b, 1, NULL, NULL, 0, err, 0), SL_EINVAL);

  /* a tiny error buffer truncates without overflowing */
  char small[12];
  memset(small, 'Z', sizeof small);
  const char *ov[] = {"t.nope=1"};
  assert_int_equal(sl_conf_load(&b, 1, NULL, ov, 1, small, 8), SL_EUNKNOWNKEY);
  assert_int_equal(strlen(small), 7);
  assert_int_equal(small[8], 'Z');
}

static void test_long_line(void **state) {
  tconf *c = *state;
  size_t n = 5000;
  char *text = malloc(n + 16);
  assert_non_null(text);
  strcpy(text, "t.name = ");
  memset(text + 9, 'v', n);
  strcpy(text + 9 + n, "\n");
  const char *f = temp_file(text);
  free(text);
  char err[256];
  assert_int_equal(load(c, f, NULL, 0, err, sizeof err), SL_ECONFIG);
  char where[128];
  snprintf(where, sizeof where, "%s:1", f);
  assert_non_null(strstr(err, where));
  assert_non_null(strstr(err, "longer"));
}

/* ---- release and env names ------------------------------------------------- */

static void test_release(void **state) {
  tconf *c = *state;
  char err[256];
  sl_conf_release(NULL, 0);
  sl_conf_release(NULL, 5);
  sl_conf_bind b = {table, NTABLE, c};
  sl_conf_release(&b, 1); /* before any load: fields are NULL */

  assert_int_equal(load(c, NULL, NULL, 0, err, sizeof err), 0);
  /* loading again replaces (and frees) the previous strings */
  const char *ov[] = {"t.name=second"};
  assert_int_equal(load(c, NULL, ov, 1, err, sizeof err), 0);
  assert_string_equal(c->name, "second");

  sl_conf_release(&b, 1);
  assert_null(c->name);
  assert_null(c->token);
  assert_null(c->multi);
  assert_int_equal(c->count, 7); /* non-strings untouched */
  sl_conf_release(&b, 1);        /* idempotent */
  assert_null(c->name);

  /* a failed load leaves the strings it stored releasable */
  const char *bad[] = {"t.name=x", "t.count=zz"};
  assert_int_equal(load(c, NULL, bad, 2, err, sizeof err), SL_ECONFIG);
  assert_string_equal(c->name, "x");
  sl_conf_release(&b, 1);
  assert_null(c->name);
}

static void test_env_name(void **state) {
  (void)state;
  char buf[64];
  assert_int_equal(sl_conf_env_name("kafka.brokers", buf, sizeof buf), 0);
  assert_string_equal(buf, "SLUICE_KAFKA_BROKERS");
  assert_int_equal(sl_conf_env_name("topic.stt_requests", buf, sizeof buf), 0);
  assert_string_equal(buf, "SLUICE_TOPIC_STT_REQUESTS");
  assert_int_equal(sl_conf_env_name("a-b.c9", buf, sizeof buf), 0);
  assert_string_equal(buf, "SLUICE_A_B_C9");
  assert_int_equal(sl_conf_env_name("", buf, sizeof buf), 0);
  assert_string_equal(buf, "SLUICE_");

  /* exact fit: 7 + 5 + NUL = 13 */
  char fit[13];
  assert_int_equal(sl_conf_env_name("ab.cd", fit, sizeof fit), 0);
  assert_string_equal(fit, "SLUICE_AB_CD");
  memset(fit, 'Z', sizeof fit);
  assert_int_equal(sl_conf_env_name("ab.cd", fit, 12), SL_EINVAL);
  assert_int_equal(fit[12], 'Z');
  assert_int_equal(sl_conf_env_name(NULL, buf, sizeof buf), SL_EINVAL);
  assert_int_equal(sl_conf_env_name("a", NULL, 10), SL_EINVAL);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)
  const struct CMUnitTest tests[] = {
      T(test_defaults),
      T(test_precedence),
      T(test_two_binds),
      T(test_unknown_key_in_file),
      T(test_unknown_key_in_override),
      T(test_unknown_env),
      T(test_env_dash_mapping),
      T(test_strict_values),
      T(test_accepted_values),
      T(test_strict_env_and_file_sources),
      T(test_secret_never_in_errors),
      T(test_comments_and_blank_lines),
      T(test_line_without_equals),
      T(test_missing_file_and_bad_args),
      T(test_long_line),
      T(test_release),
      T(test_env_name),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
