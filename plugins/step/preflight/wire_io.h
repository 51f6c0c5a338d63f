/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_io.h — the decoding process's side of the wire of sandbox.h:
 * blocking reads and writes of whole structs on its stdin and stdout.
 * sluice-decode (decoder_main.c) and the stand-in the tests start in its
 * place (tests/tools/pf_liar.c) both speak it with these. (The parent's
 * side, with its deadline, is sandbox.c's own.)
 */
#ifndef SLUICE_PF_WIRE_IO_H
#define SLUICE_PF_WIRE_IO_H

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

/* all of n bytes, 0; 1 at a clean end of file before any; -1 otherwise */
static inline int sl_pf_wire_read(int fd, void *buf, size_t n) {
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, p + got, n - got);
    if (k == 0) return got == 0 ? 1 : -1;
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

/* all of n bytes: 0, or -1 */
static inline int sl_pf_wire_write(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

#endif
