/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_objkey.c — object keys: sl__url_decode (the key as an S3 event
 * carries it, URL-encoded) and sl__object_key_parse (our
 * "submissions/<uuid>/q<N>.<ext>" keys), stages/lib/s3event.c.
 *
 * Input: byte 0 picks the output buffer size for sl__url_decode (0..255,
 * so the bound is hit often), the rest is the key text (cut at the first
 * NUL, as a C string from JSON would be).
 *
 * Oracle (abort() on violation): decoding never writes past the buffer (a
 * guard region after it must stay intact; ASan catches the rest), succeeds
 * with a NUL-terminated result no longer than the input, fails with
 * SL_ETOOBIG only when the buffer is too small and SL_EPARSE only for an
 * encoded NUL; a parsed key gives a 36-character id of hex digits and
 * dashes at 8, 13, 18, 23 and a question number 1..9999, and the key is
 * exactly "submissions/" + id + "/q" + digits + "." + a non-empty
 * extension without '/'.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3event.h"
#include "sluice/sl_err.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_objkey: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);        \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static void check_parsed(const char *key, const char *sid, unsigned q) {
  CHECK(strlen(sid) == 36);
  for (int i = 0; i < 36; i++) {
    int dash = (i == 8 || i == 13 || i == 18 || i == 23);
    CHECK(dash ? sid[i] == '-' : isxdigit((unsigned char)sid[i]) != 0);
  }
  CHECK(q >= 1 && q <= 9999);
  CHECK(strncmp(key, "submissions/", 12) == 0 && memcmp(key + 12, sid, 36) == 0);
  CHECK(key[48] == '/' && key[49] == 'q');
  const char *d = key + 50;
  unsigned v = 0;
  while (isdigit((unsigned char)*d)) v = v * 10 + (unsigned)(*d++ - '0');
  CHECK(v == q && *d == '.' && d[1] != '\0' && !strchr(d, '/'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t outlen = data[0];
  char *in = malloc(size);
  if (!in) return 0;
  memcpy(in, data + 1, size - 1);
  in[size - 1] = '\0';
  size_t inlen = strlen(in);

  /* the decode buffer, with a guard region behind it */
  enum { GUARD = 16 };
  char *out = malloc(outlen + GUARD);
  if (!out) {
    free(in);
    return 0;
  }
  memset(out, 0x5a, outlen + GUARD);
  int rc = sl__url_decode(in, out, outlen);
  for (size_t i = outlen; i < outlen + GUARD; i++) CHECK(out[i] == 0x5a);
  CHECK(rc == 0 || rc == SL_ETOOBIG || rc == SL_EPARSE);
  if (rc == 0) {
    CHECK(memchr(out, '\0', outlen) != NULL);
    CHECK(strlen(out) <= inlen);
  }
  if (rc == SL_ETOOBIG && inlen + 1 <= outlen) CHECK(!"SL_ETOOBIG with room for the input");
  if (rc == SL_EPARSE) CHECK(strstr(in, "%00") != NULL);

  /* the key as sent, and as decoded when that worked */
  char sid[37];
  unsigned q = 0;
  if (sl__object_key_parse(in, sid, &q) == 0) check_parsed(in, sid, q);
  if (rc == 0 && sl__object_key_parse(out, sid, &q) == 0) check_parsed(out, sid, q);
  free(out);
  free(in);
  return 0;
}
