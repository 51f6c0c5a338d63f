/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c — sluicectl's HTTP and Redis plumbing: libcurl GET/POST/PUT with
 * bounded bodies and the headers the client cares about (ETag,
 * Retry-After), a parser for the stages' Prometheus text (what `status`
 * scrapes), the admin endpoint list, and a Redis connection (sl_redis:
 * AUTH and TLS from the environment) from a redis[s]:// URL. Uploads read the file through a small
 * callback (libcurl's own buffer), so a part of any size is never held in memory.
 *
 * Every request has a timeout; nothing here waits unbounded.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>

#include "sluice/sl_redis.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "sluicectl.h"

#define SC_HTTP_BODY_MAX (8u << 20)

int sc_add_admins(sc_opts *o, const char *list) {
  const char *p = list;
  while (*p) {
    size_t n = strcspn(p, ", ");
    if (n > 0) {
      if (o->nadmins == SC_MAX_ADMINS) return -1;
      const char *s = p;
      if (n > 7 && strncmp(s, "http://", 7) == 0) {
        s += 7;
        n -= 7;
      }
      while (n > 0 && s[n - 1] == '/') n--;
      snprintf(o->admins[o->nadmins], sizeof o->admins[0], "%.*s", (int)n, s);
      o->nadmins++;
    }
    p += strcspn(p, ", ");
    p += strspn(p, ", ");
  }
  return 0;
}

/* ---- libcurl ---- */

static int curl_ready;

static CURL *easy(const char *url, long timeout_ms, sc_http_reply *r) {
  if (!curl_ready) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return NULL;
    curl_ready = 1;
  }
  memset(r, 0, sizeof *r);
  r->retry_after_s = -1;
  CURL *c = curl_easy_init();
  if (!c) return NULL;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sluicectl");
  sc_http_trust(c, url);
  return c;
}

void sc_http_trust(void *curl, const char *url) {
  const char *ca = getenv("SLUICE_S3_CA_FILE"), *ep = getenv("SLUICE_S3_ENDPOINT");
  if (!ca || !*ca || !ep || !*ep || !url) return;
  size_t n = strlen(ep);
  while (n && ep[n - 1] == '/') n--;
  if (strncmp(url, ep, n) == 0 && (url[n] == '/' || url[n] == '?' || url[n] == '\0'))
    curl_easy_setopt((CURL *)curl, CURLOPT_CAINFO, ca);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  sc_http_reply *r = ud;
  size_t n = size * nmemb;
  if (r->len + n > SC_HTTP_BODY_MAX) return 0; /* aborts the transfer */
  char *b = realloc(r->body, r->len + n + 1);
  if (!b) return 0;
  memcpy(b + r->len, data, n);
  r->body = b;
  r->len += n;
  b[r->len] = '\0';
  return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud) {
  sc_http_reply *r = ud;
  size_t n = size * nmemb;
  char line[256];
  size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
  memcpy(line, data, l);
  line[l] = '\0';
  while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == '\n')) line[--l] = '\0';
  if (strncasecmp(line, "etag:", 5) == 0) {
    const char *v = line + 5;
    while (*v == ' ') v++;
    snprintf(r->etag, sizeof r->etag, "%.*s", (int)sizeof r->etag - 1, v); /* longer: no 304s */
  } else if (strncasecmp(line, "retry-after:", 12) == 0) {
    char *end;
    long v = strtol(line + 12, &end, 10);
    if (end != line + 12 && v >= 0) r->retry_after_s = v;
  }
  return n;
}

static int perform(CURL *c, struct curl_slist *hl, sc_http_reply *r) {
  if (hl) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  CURLcode e = curl_easy_perform(c);
  if (e == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  else
    snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(e));
  if (!r->body) r->body = calloc(1, 1);
  curl_slist_free_all(hl);
  curl_easy_cleanup(c);
  return e == CURLE_OK && r->body ? 0 : -1;
}

static struct curl_slist *headers_of(const char *const *h) {
  struct curl_slist *l = NULL;
  for (size_t i = 0; h && h[i]; i++) {
    struct curl_slist *n = curl_slist_append(l, h[i]);
    if (!n) break;
    l = n;
  }
  return l;
}

void sc_http_reply_free(sc_http_reply *r) {
  if (!r) return;
  free(r->body);
  r->body = NULL;
}

int sc_http_get(const char *url, const char *const *headers, long timeout_ms, sc_http_reply *r) {
  CURL *c = easy(url, timeout_ms, r);
  if (!c) {
    snprintf(r->error, sizeof r->error, "libcurl could not start");
    return -1;
  }
  return perform(c, headers_of(headers), r);
}

int sc_http_post_json(const char *url, const char *body, long timeout_ms, sc_http_reply *r) {
  CURL *c = easy(url, timeout_ms, r);
  if (!c) {
    snprintf(r->error, sizeof r->error, "libcurl could not start");
    return -1;
  }
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  const char *h[] = {"Content-Type: application/json", NULL};
  return perform(c, headers_of(h), r);
}

typedef struct {
  sc_progress bar;
} put_state;

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
  (void)dltotal;
  (void)dlnow;
  (void)ultotal;
  put_state *s = ud;
  sc_progress_update(&s->bar, (size_t)ulnow);
  return 0;
}

int sc_http_put_file(const char *url, const char *path, const char *const *headers, long timeout_ms,
                     sc_http_reply *r) {
  FILE *f = fopen(path, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0) {
    memset(r, 0, sizeof *r);
    snprintf(r->error, sizeof r->error, "cannot read %s", path);
    if (f) fclose(f);
    return -1;
  }
  CURL *c = easy(url, timeout_ms, r);
  if (!c) {
    fclose(f);
    snprintf(r->error, sizeof r->error, "libcurl could not start");
    return -1;
  }
  put_state ps;
  sc_progress_init(&ps.bar, (size_t)st.st_size);
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(c, CURLOPT_READDATA, f);
  curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &ps);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  /* no "Expect: 100-continue" round trip */
  struct curl_slist *hl = headers_of(headers);
  struct curl_slist *n = curl_slist_append(hl, "Expect:");
  if (n) hl = n;
  int rc = perform(c, hl, r);
  if (rc == 0 && r->status / 100 == 2) sc_progress_update(&ps.bar, (size_t)st.st_size);
  sc_progress_end(&ps.bar);
  fclose(f);
  return rc;
}

int sc_http_send(const char *method, const char *url, const char *const *headers, const char *body,
                 long timeout_ms, sc_http_reply *r) {
  CURL *c = easy(url, timeout_ms, r);
  if (!c) {
    snprintf(r->error, sizeof r->error, "libcurl could not start");
    return -1;
  }
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  struct curl_slist *hl = headers_of(headers);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    struct curl_slist *n = curl_slist_append(hl, "Content-Type: application/json");
    if (n) hl = n;
  }
  return perform(c, hl, r);
}

/* one part of a file: len bytes from off, rewindable */
typedef struct {
  FILE *f;
  int64_t off, len, sent;
  sc_progress *bar;
  size_t base;
} range_state;

static size_t on_range_read(char *buf, size_t size, size_t nmemb, void *ud) {
  range_state *s = ud;
  size_t want = size * nmemb;
  if ((int64_t)want > s->len - s->sent) want = (size_t)(s->len - s->sent);
  if (want == 0) return 0;
  size_t got = fread(buf, 1, want, s->f);
  if (got == 0) return CURL_READFUNC_ABORT; /* the file shrank or broke */
  s->sent += (int64_t)got;
  return got;
}

static int on_range_seek(void *ud, curl_off_t offset, int origin) {
  range_state *s = ud;
  if (origin != SEEK_SET || offset < 0 || offset > s->len) return CURL_SEEKFUNC_CANTSEEK;
  if (fseeko(s->f, (off_t)(s->off + offset), SEEK_SET) != 0) return CURL_SEEKFUNC_FAIL;
  s->sent = offset;
  return CURL_SEEKFUNC_OK;
}

static int on_range_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                             curl_off_t ulnow) {
  (void)dltotal;
  (void)dlnow;
  (void)ultotal;
  range_state *s = ud;
  if (s->bar) sc_progress_update(s->bar, s->base + (size_t)ulnow);
  return 0;
}

int sc_http_put_range(const char *url, FILE *f, int64_t off, int64_t len, sc_progress *bar,
                      size_t base, long timeout_ms, sc_http_reply *r) {
  if (fseeko(f, (off_t)off, SEEK_SET) != 0) {
    memset(r, 0, sizeof *r);
    snprintf(r->error, sizeof r->error, "cannot seek to byte %lld of the file", (long long)off);
    return -1;
  }
  CURL *c = easy(url, timeout_ms, r);
  if (!c) {
    snprintf(r->error, sizeof r->error, "libcurl could not start");
    return -1;
  }
  range_state s = {f, off, len, 0, bar, base};
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, on_range_read);
  curl_easy_setopt(c, CURLOPT_READDATA, &s);
  curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_range_seek);
  curl_easy_setopt(c, CURLOPT_SEEKDATA, &s);
  curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_range_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  struct curl_slist *hl = curl_slist_append(NULL, "Expect:"); /* no 100-continue round trip */
  return perform(c, hl, r);
}

/* ---- Prometheus text ---- */

void sc_samples_free(sc_samples *s) {
  if (!s) return;
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

int sc_metrics_parse(const char *text, sc_samples *out) {
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len > 0 && p[0] != '#') {
      sc_sample s;
      memset(&s, 0, sizeof s);
      size_t i = 0;
      while (i < len && (isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == ':')) i++;
      if (i == 0 || i >= sizeof s.name) return -1;
      memcpy(s.name, p, i);
      if (i < len && p[i] == '{') {
        const char *close = NULL;
        int inq = 0;
        for (size_t k = i + 1; k < len && !close; k++) {
          if (p[k] == '\\' && inq)
            k++;
          else if (p[k] == '"')
            inq = !inq;
          else if (p[k] == '}' && !inq)
            close = p + k;
        }
        if (!close || (size_t)(close - p - i - 1) >= sizeof s.labels) return -1;
        memcpy(s.labels, p + i + 1, (size_t)(close - p - i - 1));
        i = (size_t)(close - p) + 1;
      }
      while (i < len && p[i] == ' ') i++;
      char num[64];
      size_t k = 0;
      while (i < len && p[i] != ' ' && k < sizeof num - 1) num[k++] = p[i++];
      num[k] = '\0';
      char *end;
      s.value = strtod(num, &end);
      if (k == 0 || *end) return -1;
      if (out->n == out->cap) {
        size_t nc = out->cap ? out->cap * 2 : 64;
        sc_sample *v = realloc(out->v, nc * sizeof *v);
        if (!v) return -1;
        out->v = v;
        out->cap = nc;
      }
      out->v[out->n++] = s;
    }
    if (!nl) break;
    p = nl + 1;
  }
  return 0;
}

int sc_label(const char *labels, const char *name, char *out, size_t n) {
  size_t nl = strlen(name);
  const char *p = labels;
  while (*p) {
    while (*p == ',' || *p == ' ') p++;
    const char *eq = strchr(p, '=');
    if (!eq || eq[1] != '"') return -1;
    const char *v = eq + 2, *e = v;
    while (*e && *e != '"') e += (*e == '\\' && e[1]) ? 2 : 1;
    if ((size_t)(eq - p) == nl && strncmp(p, name, nl) == 0) {
      snprintf(out, n, "%.*s", (int)(e - v), v);
      return 0;
    }
    if (!*e) return -1;
    p = e + 1;
  }
  return -1;
}

/* ---- Redis ---- */

sl_redis *sc_redis_connect(const char *url) {
  sl_redis *c = NULL;
  char err[768];
  if (sl_redis_new(&c, url) != 0) {
    fprintf(stderr,
            "sluicectl: Redis URL \"%s\": expected redis[s]://[user:password@]host:port[/db]\n",
            sc_redis_shown(url));
    return NULL;
  }
  const char *ping[] = {"PING"};
  size_t plen[] = {4};
  redisReply *r = sl_redis_argv(c, 1, ping, plen, err, sizeof err);
  if (!r || r->type == REDIS_REPLY_ERROR) {
    if (r) snprintf(err, sizeof err, "%s", r->str);
    fprintf(stderr, "sluicectl: cannot connect to Redis at %s: %s\n", sc_redis_shown(url), err);
    freeReplyObject(r);
    sl_redis_free(c);
    return NULL;
  }
  freeReplyObject(r);
  return c;
}

redisReply *sc_redis(sl_redis *c, int argc, ...) {
  const char *argv[8];
  size_t lens[8];
  va_list ap;
  va_start(ap, argc);
  for (int i = 0; i < argc && i < 8; i++) {
    argv[i] = va_arg(ap, const char *);
    lens[i] = strlen(argv[i]);
  }
  va_end(ap);
  char err[512];
  return sl_redis_argv(c, argc < 8 ? argc : 8, argv, lens, err, sizeof err);
}

const char *sc_redis_shown(const char *url) {
  static char buf[600];
  sl_redis_redact(url, buf, sizeof buf);
  return buf;
}
