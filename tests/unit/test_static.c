/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_static.c — unit tests for sl_static: what a static directory serves
 * and, above all, what it never serves (paths outside the loaded names,
 * dotfiles, subdirectories, symbolic links), content types, ETags, and the
 * load errors (missing directory, no index.html, a file over the limit).
 *
 * Each test builds its directory under a fresh mkdtemp() tree:
 *   <tmp>/secret.txt        outside the served directory
 *   <tmp>/www/index.html, app.js, style.css, data.json, blob.bin
 *   <tmp>/www/.env          a dotfile
 *   <tmp>/www/sub/inner.txt a subdirectory
 *   <tmp>/www/link.txt  ->  ../secret.txt (a symbolic link)
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_static.h"

typedef struct {
  char root[64];
  char www[96];
} tree;

static void put(const char *dir, const char *name, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  tree *t = calloc(1, sizeof *t);
  snprintf(t->root, sizeof t->root, "/tmp/sl-static-XXXXXX");
  if (!mkdtemp(t->root)) return -1;
  snprintf(t->www, sizeof t->www, "%s/www", t->root);
  mkdir(t->www, 0700);
  put(t->root, "secret.txt", "top secret");
  put(t->www, "index.html", "<!doctype html><title>x</title>");
  put(t->www, "app.js", "console.log(1);");
  put(t->www, "style.css", "body{}");
  put(t->www, "data.json", "{}");
  put(t->www, "blob.bin", "\x01\x02");
  put(t->www, ".env", "TOKEN=1");
  char p[256], q[256];
  snprintf(p, sizeof p, "%s/sub", t->www);
  mkdir(p, 0700);
  put(p, "inner.txt", "inner");
  snprintf(p, sizeof p, "%s/link.txt", t->www);
  snprintf(q, sizeof q, "%s/secret.txt", t->root);
  if (symlink(q, p) != 0) return -1;
  *state = t;
  return 0;
}

static int teardown(void **state) {
  tree *t = *state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->root);
  int rc = system(cmd);
  free(t);
  return rc == 0 ? 0 : -1;
}

static void test_serves_the_flat_directory(void **state) {
  tree *t = *state;
  sl_static *s = NULL;
  char err[256];
  assert_int_equal(sl_static_new(&s, t->www, err, sizeof err), 0);
  assert_int_equal(sl_static_count(s), 5); /* not .env, sub/, link.txt */
  const sl_static_file *f = sl_static_lookup(s, "/");
  assert_non_null(f);
  assert_string_equal(f->name, "index.html");
  assert_string_equal(f->type, "text/html; charset=utf-8");
  assert_int_equal(f->len, strlen("<!doctype html><title>x</title>"));
  assert_memory_equal(f->body, "<!doctype html>", 15);
  assert_ptr_equal(sl_static_lookup(s, "/index.html"), f);
  assert_string_equal(sl_static_lookup(s, "/app.js")->type, "text/javascript; charset=utf-8");
  assert_string_equal(sl_static_lookup(s, "/style.css")->type, "text/css; charset=utf-8");
  assert_string_equal(sl_static_lookup(s, "/data.json")->type, "application/json");
  assert_string_equal(sl_static_lookup(s, "/blob.bin")->type, "application/octet-stream");
  sl_static_free(s);
}

static void test_etag_is_the_content_digest(void **state) {
  tree *t = *state;
  sl_static *s = NULL;
  assert_int_equal(sl_static_new(&s, t->www, NULL, 0), 0);
  const sl_static_file *f = sl_static_lookup(s, "/app.js");
  char hex[65], want[40];
  sl_sha256_hex("console.log(1);", 15, hex);
  snprintf(want, sizeof want, "\"%.32s\"", hex);
  assert_string_equal(f->etag, want);
  assert_string_not_equal(sl_static_lookup(s, "/style.css")->etag, f->etag);
  sl_static_free(s);
}

static void test_never_outside_the_names(void **state) {
  tree *t = *state;
  sl_static *s = NULL;
  assert_int_equal(sl_static_new(&s, t->www, NULL, 0), 0);
  static const char *bad[] = {"/../secret.txt",
                              "/..%2fsecret.txt",
                              "/%2e%2e/secret.txt",
                              "//secret.txt",
                              "/secret.txt",
                              "/.env",
                              "/sub/inner.txt",
                              "/sub",
                              "/link.txt",
                              "/./app.js",
                              "/app.js/",
                              "/APP.JS",
                              "app.js",
                              "",
                              "/index.html/../app.js",
                              "/%61pp.js",
                              "/app.js%00",
                              "/..",
                              "/.",
                              "/\\..\\secret.txt"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (sl_static_lookup(s, bad[i])) fail_msg("served %s", bad[i]);
  assert_null(sl_static_lookup(s, NULL));
  assert_null(sl_static_lookup(NULL, "/"));
  sl_static_free(s);
}

static void test_load_errors(void **state) {
  tree *t = *state;
  sl_static *s = (sl_static *)1;
  char err[256], p[256];
  assert_int_equal(sl_static_new(&s, "/nonexistent/sl-static", err, sizeof err), SL_ENOTFOUND);
  assert_null(s);
  assert_non_null(strstr(err, "/nonexistent/sl-static"));
  /* a directory without index.html */
  snprintf(p, sizeof p, "%s/sub", t->www);
  assert_int_equal(sl_static_new(&s, p, err, sizeof err), SL_ENOTFOUND);
  assert_non_null(strstr(err, "no index.html"));
  /* a file over the limit is refused, not truncated */
  snprintf(p, sizeof p, "%s/www/big.wav", t->root);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), (off_t)SL_STATIC_MAX_FILE + 1), 0);
  fclose(f);
  assert_int_equal(sl_static_new(&s, t->www, err, sizeof err), SL_ETOOBIG);
  assert_non_null(strstr(err, "big.wav"));
  assert_int_equal(sl_static_new(NULL, t->www, NULL, 0), SL_EINVAL);
  assert_int_equal(sl_static_new(&s, "", NULL, 0), SL_EINVAL);
  sl_static_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_serves_the_flat_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_etag_is_the_content_digest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_never_outside_the_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
