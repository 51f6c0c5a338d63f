/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_static.h — static files (a browser client) served by a stage's HTTP
 * server.
 *
 * The files are read once, at start-up, from one directory: every regular
 * file directly in it whose name is made of [A-Za-z0-9._-] and does not start
 * with a dot. Subdirectories, symbolic links, dotfiles and other names are
 * never served, and a request path is only ever compared with the names
 * loaded, so no request can reach a file outside that set ("/../x",
 * "/%2e%2e/x", "/a/b" are all 404). "/" is index.html, which must exist.
 * Content-Type comes from the file name's extension. Every reply carries an
 * ETag (the content's sha256) and Cache-Control: no-cache, so browsers
 * revalidate and get 304 when nothing changed. Changing the files needs a
 * restart.
 *
 * @locality immutable after sl_static_new(): lookups may run on any thread;
 * sl_static_serve() on the HTTP server's loop thread.
 */
#ifndef SLUICE_SL_STATIC_H
#define SLUICE_SL_STATIC_H

#include <stddef.h>

#include "sluice/sl_http.h"

#define SL_STATIC_MAX_FILES 64
#define SL_STATIC_MAX_FILE (4u << 20) /* bytes per file */

typedef struct sl_static sl_static;

typedef struct {
  const char *name; /* as on disk, e.g. "app.js" */
  const char *type; /* Content-Type */
  const char *etag; /* quoted, e.g. "\"3f…\"" */
  const char *body;
  size_t len;
} sl_static_file;

/* Loads the files of dir. Returns 0, SL_ENOTFOUND (dir unreadable, or no
 * index.html), SL_ETOOBIG (a file over SL_STATIC_MAX_FILE, or more than
 * SL_STATIC_MAX_FILES files), SL_ENOMEM, or -errno; err gets a sentence. */
int sl_static_new(sl_static **out, const char *dir, char *err, size_t errlen);

/* NULL-safe. */
void sl_static_free(sl_static *s);

/* The file a request path (without query) names, or NULL. */
const sl_static_file *sl_static_lookup(const sl_static *s, const char *path);

/* Number of files loaded. */
size_t sl_static_count(const sl_static *s);

/* Answers req when its path names a loaded file: GET -> 200 (or 304 when
 * If-None-Match matches the ETag), any other method -> 405. Returns 1 when
 * it answered, 0 when the path is not a file (the caller answers). s may be
 * NULL (serves nothing). */
int sl_static_serve(const sl_static *s, sl_http_req *req);

#endif
