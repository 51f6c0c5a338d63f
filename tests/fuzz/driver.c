/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.c — replays fuzz inputs without libFuzzer: main() runs the target's
 * LLVMFuzzerTestOneInput (after LLVMFuzzerInitialize, when the target has
 * one) over every regular file in the directories (or files) named on the
 * command line, in name order so a failure is reproducible. Linked with each
 * tests/fuzz/fuzz_*.c in the gcc ASan+UBSan build (build-san) for the ctest
 * replay of the committed corpus and regressions; a sanitizer report or a
 * target's abort() fails the test. A missing directory counts as empty
 * (regressions/<target> may not exist yet), but finding no input at all
 * fails.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define MAX_INPUT (1u << 20) /* libFuzzer's default -max_len is far below this */

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  uint8_t *buf = malloc(MAX_INPUT);
  size_t n = buf ? fread(buf, 1, MAX_INPUT, f) : 0;
  int err = !buf || ferror(f) || !feof(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "driver: %s: unreadable or over %u bytes\n", path, MAX_INPUT);
    free(buf);
    return -1;
  }
  /* an exact-size copy, so ASan sees reads past the end of the input */
  uint8_t *in = malloc(n ? n : 1);
  if (!in) {
    free(buf);
    return -1;
  }
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir (not recursive). Returns files run or -1. */
static long run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
    if (!names[n]) break;
    sprintf(names[n], "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  long ran = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(names[i]) != 0)
        ran = -1;
      else if (ran >= 0)
        ran++;
    }
    free(names[i]);
  }
  free(names);
  return ran;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long total = 0;
  int bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    long r;
    if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode))
      r = run_file(argv[i]) == 0 ? 1 : -1;
    else
      r = run_dir(argv[i]);
    if (r < 0) {
      fprintf(stderr, "driver: %s: could not read every input\n", argv[i]);
      bad = 1;
    } else {
      printf("%s: %ld inputs\n", argv[i], r);
      total += r;
    }
  }
  if (total == 0) {
    fprintf(stderr, "driver: no inputs found (the corpus must not be empty)\n");
    return 1;
  }
  if (!bad) printf("%ld inputs replayed, no crash\n", total);
  return bad;
}
