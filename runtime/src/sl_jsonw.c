/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_jsonw.c — see sl_jsonw.h.
 */
#include "sluice/sl_jsonw.h"
#include "sluice/sl_log.h" /* sl_json_escape */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* room for `more` bytes and the NUL after them */
static int need(sl_jsonw *w, size_t more) {
  if (w->oom) return 0;
  if (w->n + more < w->cap) return 1;
  size_t cap = w->cap ? w->cap : (w->initial ? w->initial : 1024);
  while (cap <= w->n + more) cap *= 2;
  char *b = realloc(w->b, cap);
  if (!b) {
    w->oom = 1;
    return 0;
  }
  w->b = b;
  w->cap = cap;
  return 1;
}

size_t sl_fmt_ll(char out[21], long long v) {
  char t[20];
  size_t n = 0, k = 0;
  /* as unsigned: -LLONG_MIN does not fit a long long */
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do {
    t[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) out[k++] = '-';
  while (n) out[k++] = t[--n];
  out[k] = '\0';
  return k;
}

void sl_jsonw_raw(sl_jsonw *w, const char *s) {
  size_t l = strlen(s);
  if (!need(w, l)) return;
  memcpy(w->b + w->n, s, l + 1);
  w->n += l;
}

void sl_jsonw_str(sl_jsonw *w, const char *s) {
  if (!s) s = "";
  /* an escape is at most 6 bytes a byte (\u00XX, \ufffd); sl_json_escape
   * stops 7 bytes short of the end it is given */
  if (!need(w, 6 * strlen(s) + 10)) return;
  w->b[w->n++] = '"';
  sl_json_escape(w->b, w->cap, &w->n, s);
  w->b[w->n++] = '"';
  w->b[w->n] = '\0';
}

void sl_jsonw_int(sl_jsonw *w, long long v) {
  if (!need(w, 20)) return;
  w->n += sl_fmt_ll(w->b + w->n, v);
}

void sl_jsonw_real(sl_jsonw *w, double v) {
  if (!isfinite(v)) {
    sl_jsonw_raw(w, "null");
    return;
  }
  char t[40];
  int l = snprintf(t, sizeof t, "%.17g", v);
  if (l <= 0 || (size_t)l >= sizeof t - 2) return; /* cannot be: 17 digits and an exponent */
  if (!strpbrk(t, ".eE")) { /* reads as an integer: a real, as jansson writes it */
    memcpy(t + l, ".0", 3);
    l += 2;
  }
  sl_jsonw_raw(w, t);
}

void sl_jsonw_kstr(sl_jsonw *w, const char *key, const char *s) {
  sl_jsonw_raw(w, key);
  sl_jsonw_str(w, s);
}

void sl_jsonw_kint(sl_jsonw *w, const char *key, long long v) {
  sl_jsonw_raw(w, key);
  sl_jsonw_int(w, v);
}

void sl_jsonw_kreal(sl_jsonw *w, const char *key, double v) {
  sl_jsonw_raw(w, key);
  sl_jsonw_real(w, v);
}

char *sl_jsonw_take(sl_jsonw *w) {
  char *b = w->oom ? NULL : w->b;
  if (w->oom) free(w->b);
  w->b = NULL;
  w->n = w->cap = 0;
  w->oom = 0;
  return b;
}

void sl_jsonw_free(sl_jsonw *w) {
  if (!w) return;
  free(w->b);
  w->b = NULL;
  w->n = w->cap = 0;
  w->oom = 0;
}
