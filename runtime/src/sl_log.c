/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_log.c — see sl_log.h. The level is an atomic so it can be changed at run
 * time from any thread (e.g. an admin endpoint) without locks.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_log.h"
#include "sluice/sl_err.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *component = "sluice";
static atomic_int min_level = SL_LOG_INFO;
static const char *names[] = {"debug", "info", "warn", "error"};

int sl_log_set_level(const char *level) {
  for (int i = 0; i < 4; i++)
    if (level && strcmp(level, names[i]) == 0) {
      atomic_store(&min_level, i);
      return 0;
    }
  return SL_EINVAL;
}

int sl_log_init(const char *comp, const char *level) {
  if (comp) component = comp;
  return sl_log_set_level(level ? level : "info");
}

int sl_log_enabled(sl_log_level lvl) { return (int)lvl >= atomic_load(&min_level); }

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s) {
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else
    return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return n;
}

void sl_json_escape(char *buf, size_t len, size_t *pos, const char *s) {
  static const char hex[] = "0123456789abcdef";
  size_t p = *pos;
  for (; s && *s && p + 7 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[p++] = '\\';
      buf[p++] = (char)c;
    } else if (c == '\n') {
      buf[p++] = '\\', buf[p++] = 'n';
    } else if (c == '\t') {
      buf[p++] = '\\', buf[p++] = 't';
    } else if (c < 0x20) {
      memcpy(buf + p, "\\u00", 4);
      p += 4;
      buf[p++] = hex[c >> 4];
      buf[p++] = hex[c & 15];
    } else if (c < 0x80) {
      buf[p++] = (char)c;
    } else {
      /* only whole, well-formed UTF-8 goes out (JSON must be UTF-8, and a
       * cut sequence would be as bad as a wrong one): else U+FFFD */
      size_t n = utf8_len((const unsigned char *)s);
      if (n == 0) {
        memcpy(buf + p, "\\ufffd", 6);
        p += 6;
      } else if (p + n + 1 < len) {
        memcpy(buf + p, s, n);
        p += n;
        s += n - 1;
      } else {
        break;
      }
    }
  }
  if (p < len) buf[p] = '\0';
  *pos = p;
}

static void append(char *buf, size_t len, size_t *pos, const char *s) {
  size_t n = strlen(s);
  if (*pos + n >= len) n = *pos < len - 1 ? len - 1 - *pos : 0;
  memcpy(buf + *pos, s, n);
  *pos += n;
  buf[*pos] = '\0';
}

static void emit(sl_log_level lvl, const char *line, size_t n);

/* "YYYY-MM-DDTHH:MM:SS" of the second t, kept per thread for as long as
 * lines name the same second: gmtime_r and a print of seven numbers for
 * every line were a tenth of a busy stage's CPU (bench/cost). */
static const char *utc_second(time_t t) {
  static _Thread_local time_t at = (time_t)-1;
  static _Thread_local char s[80]; /* room for any int the compiler can imagine */
  if (t != at) {
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    at = t;
  }
  return s;
}

static _Thread_local char trace_id[33];

void sl_log_trace(const char *id, char *prev) {
  if (prev) memcpy(prev, trace_id, sizeof trace_id);
  size_t n = id ? strnlen(id, 32) : 0;
  memcpy(trace_id, id ? id : "", n);
  trace_id[n] = '\0';
}

void sl_log(sl_log_level lvl, const char *key, const char *fmt, ...) {
  if (!sl_log_enabled(lvl)) return;
  char line[4096], msg[2048];
  size_t p = 0;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  unsigned ms = (unsigned)(tv.tv_usec / 1000);
  char frac[6] = {
      '.', (char)('0' + ms / 100), (char)('0' + ms / 10 % 10), (char)('0' + ms % 10), 'Z', '\0'};
  append(line, sizeof line, &p, "{\"ts\":\"");
  append(line, sizeof line, &p, utc_second(tv.tv_sec));
  append(line, sizeof line, &p, frac);
  append(line, sizeof line, &p, "\",\"level\":\"");
  append(line, sizeof line, &p, names[lvl]);
  append(line, sizeof line, &p, "\",\"component\":\"");
  sl_json_escape(line, sizeof line, &p, component);
  append(line, sizeof line, &p, "\"");
  if (key && *key) {
    char sid[128];
    const char *slash = strchr(key, '/');
    size_t n = slash ? (size_t)(slash - key) : strlen(key);
    if (n >= sizeof sid) n = sizeof sid - 1;
    memcpy(sid, key, n);
    sid[n] = '\0';
    append(line, sizeof line, &p, ",\"submission\":\"");
    sl_json_escape(line, sizeof line, &p, sid);
    append(line, sizeof line, &p, "\"");
    if (slash) {
      append(line, sizeof line, &p, ",\"question\":\"");
      sl_json_escape(line, sizeof line, &p, slash + 1);
      append(line, sizeof line, &p, "\"");
    }
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  append(line, sizeof line, &p, ",\"msg\":\"");
  sl_json_escape(line, sizeof line, &p, msg);
  if (trace_id[0]) { /* after msg: lines keep their shape for readers that grep them */
    append(line, sizeof line, &p, "\",\"trace_id\":\"");
    sl_json_escape(line, sizeof line, &p, trace_id);
  }
  if (p + 3 >= sizeof line) p = sizeof line - 4;
  memcpy(line + p, "\"}\n", 3);
  p += 3;
  emit(lvl, line, p);
}

/* ---- batching ---------------------------------------------------------- */

/* Lines waiting to be written (only while batching), in the order they were
 * logged; one write(2) takes them all. */
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
static char batch[64 * 1024];
static size_t batch_len;
static atomic_int flush_ms; /* 0: every line at once */
static int64_t last_flush_ms;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* stderr gone: nothing else to tell */
    b += w;
    n -= (size_t)w;
  }
}

/* with batch_mu held */
static void flush_locked(int64_t now) {
  write_all(batch, batch_len);
  batch_len = 0;
  last_flush_ms = now;
}

static void emit(sl_log_level lvl, const char *line, size_t n) {
  int ms = atomic_load(&flush_ms);
  if (ms <= 0) {
    write_all(line, n);
    return;
  }
  pthread_mutex_lock(&batch_mu);
  int64_t now = mono_ms();
  if (batch_len + n > sizeof batch) flush_locked(now);
  memcpy(batch + batch_len, line, n); /* n < sizeof line < sizeof batch */
  batch_len += n;
  if (lvl >= SL_LOG_WARN || now - last_flush_ms >= ms) flush_locked(now);
  pthread_mutex_unlock(&batch_mu);
}

void sl_log_flush(void) {
  pthread_mutex_lock(&batch_mu);
  if (batch_len) flush_locked(mono_ms());
  pthread_mutex_unlock(&batch_mu);
}

static void flush_at_exit(void) { sl_log_flush(); }
static void register_exit(void) { atexit(flush_at_exit); }

void sl_log_batch(int ms) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_exit);
  pthread_mutex_lock(&batch_mu);
  if (batch_len) flush_locked(mono_ms());
  last_flush_ms = mono_ms(); /* the first batch starts now */
  atomic_store(&flush_ms, ms > 0 ? ms : 0);
  pthread_mutex_unlock(&batch_mu);
}
