/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c — small helpers of sluicectl that do not talk to Kafka: time
 * parsing and formatting, UUIDv7, base64, text escaping, protobuf -> JSON,
 * the progress bar and the token bucket.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluicectl.h"
#include "sluice/sl_pbfield.h"

double sc_mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- time ---------------------------------------------------------------- */

static int is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int month_days(int y, int m) {
  static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : d[m - 1];
}

/* n decimal digits at *p into *out; advances *p */
static int digits(const char **p, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)(*p)[i])) return -1;
    v = v * 10 + ((*p)[i] - '0');
  }
  *p += n;
  *out = v;
  return 0;
}

static int expect_char(const char **p, const char *any) {
  if (!**p || !strchr(any, **p)) return -1;
  (*p)++;
  return 0;
}

static int parse_rfc3339(const char *s, int64_t *out_ms) {
  const char *p = s;
  int Y, M, D, h, m, sec;
  if (digits(&p, 4, &Y) || expect_char(&p, "-") || digits(&p, 2, &M) || expect_char(&p, "-") ||
      digits(&p, 2, &D) || expect_char(&p, "Tt") || digits(&p, 2, &h) || expect_char(&p, ":") ||
      digits(&p, 2, &m) || expect_char(&p, ":") || digits(&p, 2, &sec))
    return -1;
  if (Y < 1970 || M < 1 || M > 12 || D < 1 || D > month_days(Y, M) || h > 23 || m > 59 || sec > 60)
    return -1;
  int ms = 0;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return -1;
    int scale = 100;
    while (isdigit((unsigned char)*p)) {
      ms += (*p - '0') * scale;
      scale /= 10;
      p++;
    }
  }
  int offset_min = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int sign = *p == '-' ? -1 : 1, oh, om;
    p++;
    if (digits(&p, 2, &oh) || expect_char(&p, ":") || digits(&p, 2, &om) || oh > 23 || om > 59)
      return -1;
    offset_min = sign * (oh * 60 + om);
  } else {
    return -1;
  }
  if (*p) return -1;
  int64_t days = 0;
  for (int y = 1970; y < Y; y++) days += is_leap(y) ? 366 : 365;
  for (int mo = 1; mo < M; mo++) days += month_days(Y, mo);
  days += D - 1;
  int64_t secs = days * 86400 + h * 3600 + m * 60 + sec - (int64_t)offset_min * 60;
  *out_ms = secs * 1000 + ms;
  return 0;
}

static int parse_ago(const char *s, int64_t now_ms, int64_t *out_ms) {
  const char *p = s;
  int64_t v = 0;
  if (!isdigit((unsigned char)*p)) return -1;
  while (isdigit((unsigned char)*p)) {
    v = v * 10 + (*p - '0');
    if (v > 1000000000000LL) return -1;
    p++;
  }
  int64_t unit;
  if (strcmp(p, "ms") == 0)
    unit = 1;
  else if (strcmp(p, "s") == 0)
    unit = 1000;
  else if (strcmp(p, "m") == 0)
    unit = 60 * 1000;
  else if (strcmp(p, "h") == 0)
    unit = 3600 * 1000;
  else if (strcmp(p, "d") == 0)
    unit = 86400 * 1000;
  else if (strcmp(p, "w") == 0)
    unit = 7 * 86400 * 1000;
  else
    return -1;
  if (v > INT64_MAX / unit) return -1;
  *out_ms = now_ms - v * unit;
  return 0;
}

int sc_parse_time(const char *s, int64_t now_ms, int64_t *out_ms) {
  if (!s || !*s) return -1;
  if (strlen(s) > 4 && s[4] == '-') return parse_rfc3339(s, out_ms);
  return parse_ago(s, now_ms, out_ms);
}

int sc_parse_long(const char *s, long min, long max, long *out) {
  if (!s || !*s || !isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max) return -1;
  *out = v;
  return 0;
}

static void fmt(int64_t ms, char out[40], int with_ms) {
  int64_t s = ms / 1000, r = ms % 1000;
  if (r < 0) {
    r += 1000;
    s--;
  }
  time_t t = (time_t)s;
  struct tm tm;
  if (!gmtime_r(&t, &tm)) {
    snprintf(out, 40, "%lld", (long long)ms);
    return;
  }
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  if (with_ms)
    snprintf(out, 40, "%s.%03dZ", base, (int)r);
  else
    snprintf(out, 40, "%sZ", base);
}
void sc_fmt_time(int64_t ms, char out[40]) { fmt(ms, out, 1); }
void sc_fmt_time_s(int64_t ms, char out[40]) { fmt(ms, out, 0); }

/* ---- ids and encodings ----------------------------------------------------- */

char *sc_base64(const void *data, size_t len) {
  if (len > (size_t)INT_MAX / 2) return NULL;
  char *out = malloc(4 * ((len + 2) / 3) + 1);
  if (!out) return NULL;
  EVP_EncodeBlock((unsigned char *)out, data ? data : (const void *)"", (int)len);
  return out;
}

int sc_utf8_valid(const void *data, size_t len) {
  const uint8_t *s = data;
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (len - i <= n) return 0;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += n + 1;
  }
  return 1;
}

void sc_fput_escaped(FILE *f, const void *data, size_t len, size_t max) {
  const uint8_t *s = data;
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n; i++) {
    if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
      fputc(s[i], f);
    else if (s[i] == '\\')
      fputs("\\\\", f);
    else
      fprintf(f, "\\x%02x", s[i]);
  }
  if (n < len) fputs("...", f);
}

void sc_escape(char *out, size_t n, const void *data, size_t len) {
  const uint8_t *s = data;
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < len; i++) {
    char one[8];
    if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
      snprintf(one, sizeof one, "%c", s[i]);
    else if (s[i] == '\\')
      snprintf(one, sizeof one, "\\\\");
    else
      snprintf(one, sizeof one, "\\x%02x", s[i]);
    size_t k = strlen(one);
    if (used + k + 4 > n && (i + 1 < len || used + k + 1 > n)) {
      snprintf(out + used, n - used, "%s", n - used > 3 ? "..." : "");
      return;
    }
    memcpy(out + used, one, k + 1);
    used += k;
  }
}

json_t *sc_json_text(const void *data, size_t len) {
  if (!sc_utf8_valid(data, len)) return json_null();
  json_t *j = json_stringn(data ? data : "", len);
  return j ? j : json_null();
}

/* ---- protobuf -> JSON ------------------------------------------------------- */

static json_t *pb_value(const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return json_integer(v);
  }
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return json_integer((json_int_t)v);
  }
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return json_integer((json_int_t)v);
  }
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    if (v <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v);
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
  }
  case PROTOBUF_C_TYPE_FLOAT: {
    float v;
    memcpy(&v, p, sizeof v);
    return isfinite(v) ? json_real(v) : json_null();
  }
  case PROTOBUF_C_TYPE_DOUBLE: {
    double v;
    memcpy(&v, p, sizeof v);
    return isfinite(v) ? json_real(v) : json_null();
  }
  case PROTOBUF_C_TYPE_BOOL: {
    protobuf_c_boolean v;
    memcpy(&v, p, sizeof v);
    return json_boolean(v);
  }
  case PROTOBUF_C_TYPE_ENUM: {
    int v;
    memcpy(&v, p, sizeof v);
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
    return ev ? json_string(ev->name) : json_integer(v);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s;
    memcpy(&s, p, sizeof s);
    return s ? sc_json_text(s, strlen(s)) : json_null();
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    char *enc = sc_base64(b->data, b->len);
    json_t *j = enc ? json_string(enc) : json_null();
    free(enc);
    return j;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *m;
    memcpy(&m, p, sizeof m);
    return m ? sc_pb_to_json(m) : json_null();
  }
  }
  return json_null();
}

/* The message's fields by its descriptor; which fields are set and where
 * their values are is sl_pbfield's (the runtime's protobuf walker). */
json_t *sc_pb_to_json(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_t *o = json_object();
  if (!o) return NULL;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    size_t n = sl_pbfield_n_values(m, f);
    json_t *v;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      v = json_array();
      for (size_t k = 0; v && k < n; k++)
        json_array_append_new(v, pb_value(f, sl_pbfield_value(m, f, k)));
    } else {
      if (n == 0) continue;
      v = pb_value(f, sl_pbfield_value(m, f, 0));
    }
    json_object_set_new(o, f->name, v ? v : json_null());
  }
  return o;
}

/* ---- progress bar -------------------------------------------------------------- */

void sc_progress_init(sc_progress *p, size_t total) {
  memset(p, 0, sizeof *p);
  p->tty = isatty(STDERR_FILENO);
  p->total = total;
  p->last_done = (size_t)-1;
  p->start = sc_mono_s();
}

static void progress_draw(sc_progress *p, size_t done) {
  enum { W = 20 };
  char bar[W + 1];
  size_t filled = p->total ? done * W / p->total : W;
  for (size_t i = 0; i < W; i++) bar[i] = i < filled ? '#' : '.';
  bar[W] = '\0';
  unsigned pct = p->total ? (unsigned)(done * 100 / p->total) : 100;
  double now = sc_mono_s(), elapsed = now - p->start;
  char eta[32];
  size_t left = p->total > done ? p->total - done : 0;
  if (left == 0)
    snprintf(eta, sizeof eta, "0s");
  else if (done == 0)
    snprintf(eta, sizeof eta, "?");
  else
    snprintf(eta, sizeof eta, "%.0fs", ceil(elapsed / (double)done * (double)left));
  fprintf(stderr, "%s[%s] %zu/%zu %3u%%  eta %s%s", p->tty ? "\r" : "", bar, done, p->total, pct,
          eta, p->tty ? "    " : "\n");
  fflush(stderr);
  p->last_draw = now;
  p->last_done = done;
  p->drawn = 1;
}

void sc_progress_update(sc_progress *p, size_t done) {
  if (p->total == 0) return;
  if (p->tty) {
    if (done != p->last_done && (done == p->total || sc_mono_s() - p->last_draw >= 0.1))
      progress_draw(p, done);
    return;
  }
  int decile = (int)(done * 10 / p->total);
  if (decile > p->last_decile) {
    p->last_decile = decile;
    progress_draw(p, done);
  }
}

void sc_progress_end(sc_progress *p) {
  if (p->tty && p->drawn) fputc('\n', stderr);
}

/* ---- token bucket ------------------------------------------------------------------ */

void sc_bucket_init(sc_bucket *b, double rate) {
  b->rate = rate;
  /* room for ~10 ms worth of tokens (at least one), so high rates do not
   * need sub-millisecond sleeps; it starts full */
  b->burst = rate / 100 > 1 ? rate / 100 : 1;
  b->tokens = b->burst;
  b->last = sc_mono_s();
}

int sc_bucket_take(sc_bucket *b) {
  double now = sc_mono_s();
  b->tokens += (now - b->last) * b->rate;
  if (b->tokens > b->burst) b->tokens = b->burst;
  b->last = now;
  if (b->tokens >= 1) {
    b->tokens -= 1;
    return 0;
  }
  int ms = (int)ceil((1 - b->tokens) / b->rate * 1000);
  return ms < 1 ? 1 : ms;
}
