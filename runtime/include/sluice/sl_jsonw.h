/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_jsonw.h — JSON text written as it is built, into a buffer that grows.
 *
 * For documents a hot path writes once per request or message, where
 * jansson's pack and dumps (a tree of allocated nodes and hash tables, then
 * its serialization) cost more than the work around them: presign's 201
 * body (~180 us of a ~500 us create) and materialize's question view (42%
 * of its CPU per apply). The caller writes the punctuation and keys itself
 * (sl_jsonw_raw); strings go through sl_json_escape (valid UTF-8 out, bytes
 * that are not well-formed as \ufffd); numbers as jansson prints them: an
 * integer as is, a real with 17 significant digits and ".0" added when it
 * would read as an integer, so a reader gets the same values. A real that
 * is not finite (JSON has no NaN) is written as null.
 *
 * A failed allocation sets oom and makes every later call a no-op: check it
 * once at the end (sl_jsonw_take returns NULL then). Bounded by memory
 * only: callers write documents whose size their inputs bound.
 * @locality one thread per writer; no shared state.
 */
#ifndef SLUICE_SL_JSONW_H
#define SLUICE_SL_JSONW_H

#include <stddef.h>

typedef struct {
  char *b;        /* NUL-terminated text so far (NULL before the first write) */
  size_t n, cap;  /* its length, and the buffer's size */
  int oom;        /* an allocation failed: the text is incomplete */
  size_t initial; /* first allocation (0: 1024) */
} sl_jsonw;

/* The decimal digits of v (a '-' first when negative) into out, NUL-
 * terminated; returns their count. Without printf: callers that format
 * integers per message (JSON numbers, Redis arguments) use it. */
size_t sl_fmt_ll(char out[21], long long v);

/* s as it is: punctuation, keys with their quotes, literals. */
void sl_jsonw_raw(sl_jsonw *w, const char *s);
/* s as a JSON string, quoted and escaped (NULL: ""). */
void sl_jsonw_str(sl_jsonw *w, const char *s);
void sl_jsonw_int(sl_jsonw *w, long long v);
void sl_jsonw_real(sl_jsonw *w, double v);
/* A member: key (the raw text before the value, e.g. ",\"score\":") then the
 * value, as the calls above write it. */
void sl_jsonw_kstr(sl_jsonw *w, const char *key, const char *s);
void sl_jsonw_kint(sl_jsonw *w, const char *key, long long v);
void sl_jsonw_kreal(sl_jsonw *w, const char *key, double v);
/* The text, now the caller's (free()); NULL after an allocation failed or
 * when nothing was written. The writer is empty again either way. */
char *sl_jsonw_take(sl_jsonw *w);
/* Frees what the writer holds (for an abandoned document). NULL-safe. */
void sl_jsonw_free(sl_jsonw *w);

#endif
