/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_file.c — a whole file read into memory, bounded (sl_file.h): the
 * buffer doubles from 64 KiB up to the bound, and one byte past it tells a
 * file that is too large.
 */
#include "sluice/sl_file.h"
#include "sluice/sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next capacity: doubled, at most max + 1 (one byte past the bound
 * tells a larger file) and room for the NUL. */
static size_t grown(size_t cap, size_t max) {
  size_t want = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
  return want > max + 1 ? max + 1 : want;
}

int sl_file_read(const char *path, size_t max, uint8_t **data, size_t *len) {
  if (!path || !data || !len || max >= SIZE_MAX - 1) return SL_EINVAL;
  *data = NULL;
  *len = 0;
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) return SL_EIO;
  size_t cap = max + 1 < (size_t)1 << 16 ? max + 1 : (size_t)1 << 16, n = 0;
  uint8_t *buf = malloc(cap + 1);
  int rc = buf ? 0 : SL_ENOMEM;
  while (rc == 0) {
    if (n == cap) {
      if (cap > max) {
        rc = SL_ETOOBIG;
        break;
      }
      size_t c = grown(cap, max);
      uint8_t *g = realloc(buf, c + 1);
      if (!g) {
        rc = SL_ENOMEM;
        break;
      }
      buf = g;
      cap = c;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) {
      if (ferror(f)) rc = SL_EIO;
      break;
    }
  }
  int e = errno;
  if (f != stdin) fclose(f);
  if (rc == 0 && n > max) rc = SL_ETOOBIG;
  if (rc) {
    free(buf);
    errno = rc == SL_ENOMEM ? ENOMEM : rc == SL_ETOOBIG ? EFBIG : e;
    return rc;
  }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return 0;
}
