/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_file.c — unit tests for sl_file_read: a file read whole with a NUL
 * after it, at its bound and one byte past it, an empty file, a file
 * larger than the first buffer, a missing one.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/sl_err.h"
#include "sluice/sl_file.h"

/* a temporary file of n bytes 'a'..'z' repeated; its path in path */
static void make(char *path, size_t n) {
  strcpy(path, "/tmp/sl_file_test.XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < n; i++) fputc('a' + (int)(i % 26), f);
  fclose(f);
}

static void test_reads_whole(void **state) {
  (void)state;
  char path[64];
  uint8_t *d = NULL;
  size_t n = 0;
  make(path, 200000); /* larger than the first 64 KiB buffer */
  assert_int_equal(sl_file_read(path, 1 << 20, &d, &n), 0);
  assert_int_equal(n, 200000);
  assert_int_equal(d[0], 'a');
  assert_int_equal(d[199999], 'a' + 199999 % 26);
  assert_int_equal(d[n], '\0');
  free(d);
  unlink(path);
}

static void test_bound(void **state) {
  (void)state;
  char path[64];
  uint8_t *d = (uint8_t *)"x";
  size_t n = 7;
  make(path, 100);
  assert_int_equal(sl_file_read(path, 100, &d, &n), 0); /* exactly the bound */
  assert_int_equal(n, 100);
  free(d);
  assert_int_equal(sl_file_read(path, 99, &d, &n), SL_ETOOBIG); /* one byte past it */
  assert_null(d);
  assert_int_equal(n, 0);
  assert_int_equal(errno, EFBIG);
  unlink(path);
  make(path, 0);
  assert_int_equal(sl_file_read(path, 0, &d, &n), 0); /* empty */
  assert_int_equal(n, 0);
  assert_int_equal(d[0], '\0');
  free(d);
  unlink(path);
}

static void test_missing(void **state) {
  (void)state;
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(sl_file_read("/nonexistent/sl_file_test", 10, &d, &n), SL_EIO);
  assert_int_equal(errno, ENOENT);
  assert_null(d);
  assert_int_equal(sl_file_read(NULL, 10, &d, &n), SL_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_whole),
      cmocka_unit_test(test_bound),
      cmocka_unit_test(test_missing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
