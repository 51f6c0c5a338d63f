/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_static.c — static files read once into memory and served by name.
 *
 * Why preload: the client is a handful of small files, so holding them in
 * memory costs little, keeps file I/O off the loop, and makes path traversal
 * impossible by construction: a request path is compared with the loaded
 * names (one flat directory, safe characters only), never joined to a
 * directory and opened. Files are opened with O_NOFOLLOW and checked to be
 * regular after opening, so a symbolic link placed in the directory is not
 * followed either.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_static.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"

#define MAX_NAME 128

typedef struct {
  sl_static_file f;
  char name[MAX_NAME + 1];
  char etag[36]; /* quoted 32 hex digits */
  char *data;
} entry;

struct sl_static {
  entry files[SL_STATIC_MAX_FILES];
  size_t n;
};

static const char *type_for(const char *name) {
  static const char *map[][2] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".webmanifest", "application/manifest+json"},
      {".txt", "text/plain; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".wav", "audio/wav"},
  };
  const char *dot = strrchr(name, '.');
  if (dot)
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
      if (strcmp(dot, map[i][0]) == 0) return map[i][1];
  return "application/octet-stream";
}

/* [A-Za-z0-9._-], not starting with a dot, at most MAX_NAME bytes */
static int servable_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > MAX_NAME || s[0] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

/* Reads dir/name into e when it is a regular file. 1 loaded, 0 skipped (not
 * a regular file, or a symbolic link), or a negative code. */
static int load_one(int dfd, const char *name, entry *e, char *err, size_t errlen) {
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return 0; /* a symbolic link */
    int rc = -errno;
    snprintf(err, errlen, "%s: %s", name, strerror(errno));
    return rc;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return 0;
  }
  if (st.st_size > (off_t)SL_STATIC_MAX_FILE) {
    close(fd);
    snprintf(err, errlen, "%s: %lld bytes, more than the %u allowed per file", name,
             (long long)st.st_size, SL_STATIC_MAX_FILE);
    return SL_ETOOBIG;
  }
  size_t len = (size_t)st.st_size, got = 0;
  char *data = malloc(len ? len : 1);
  if (!data) {
    close(fd);
    return SL_ENOMEM;
  }
  while (got < len) {
    ssize_t r = read(fd, data + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* shrank while being read: serve what was there */
    got += (size_t)r;
  }
  close(fd);
  char hex[65];
  sl_sha256_hex(data, got, hex);
  snprintf(e->name, sizeof e->name, "%s", name);
  snprintf(e->etag, sizeof e->etag, "\"%.32s\"", hex);
  e->data = data;
  e->f = (sl_static_file){
      .name = e->name, .type = type_for(name), .etag = e->etag, .body = data, .len = got};
  return 1;
}

int sl_static_new(sl_static **out, const char *dir, char *err, size_t errlen) {
  char dummy[8];
  if (!err || !errlen) err = dummy, errlen = sizeof dummy;
  err[0] = 0;
  if (!out || !dir || !dir[0]) return SL_EINVAL;
  *out = NULL;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return SL_ENOTFOUND;
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return SL_ENOTFOUND;
  }
  sl_static *s = calloc(1, sizeof *s);
  int rc = s ? 0 : SL_ENOMEM;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (!servable_name(de->d_name)) continue;
    if (s->n == SL_STATIC_MAX_FILES) {
      snprintf(err, errlen, "%s: more than %d files", dir, SL_STATIC_MAX_FILES);
      rc = SL_ETOOBIG;
      break;
    }
    int r = load_one(dirfd(d), de->d_name, &s->files[s->n], err, errlen);
    if (r < 0) rc = r;
    if (r == 1) s->n++;
  }
  closedir(d);
  if (rc == 0 && !sl_static_lookup(s, "/")) {
    snprintf(err, errlen, "%s: no index.html", dir);
    rc = SL_ENOTFOUND;
  }
  if (rc) {
    sl_static_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

void sl_static_free(sl_static *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) free(s->files[i].data);
  free(s);
}

size_t sl_static_count(const sl_static *s) { return s ? s->n : 0; }

const sl_static_file *sl_static_lookup(const sl_static *s, const char *path) {
  if (!s || !path || path[0] != '/') return NULL;
  const char *name = path[1] ? path + 1 : "index.html";
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->files[i].name, name) == 0) return &s->files[i].f;
  return NULL;
}

/* If-None-Match: "*" or a list of (possibly weak) tags containing ours */
static int etag_matches(const char *inm, const char *etag) {
  if (!inm) return 0;
  if (strcmp(inm, "*") == 0) return 1;
  return strstr(inm, etag) != NULL;
}

int sl_static_serve(const sl_static *s, sl_http_req *req) {
  const sl_static_file *f = sl_static_lookup(s, sl_http_req_path(req));
  if (!f) return 0;
  if (strcmp(sl_http_req_method(req), "GET") != 0) {
    sl_http_respond_error(req, 405, "method_not_allowed", "use GET", "Allow: GET\r\n");
    return 1;
  }
  char headers[256];
  snprintf(headers, sizeof headers,
           "ETag: %s\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
           "Referrer-Policy: no-referrer\r\n",
           f->etag);
  if (etag_matches(sl_http_req_header(req, "If-None-Match"), f->etag))
    sl_http_respond(req, 304, NULL, headers, NULL, 0);
  else
    sl_http_respond(req, 200, f->type, headers, f->body, f->len);
  return 1;
}
