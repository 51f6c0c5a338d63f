/*
 * sl_s3.h — the object-storage settings shared by presign and stt, and the
 * few server-side calls Sluice makes (GET an answer). Requests are signed with
 * sl_sigv4 and sent with libcurl; bodies are read into bounded memory.
 *
 * Credentials come from the environment or a config file and are never
 * logged (the table marks them secret).
 */
#ifndef SLUICE_SL_S3_H
#define SLUICE_SL_S3_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_sigv4.h"

typedef struct {
  char *endpoint;   /* http://127.0.0.1:7070 */
  char *region;
  char *bucket;
  char *access_key;
  char *secret_key;
  int path_style;   /* 1: endpoint/bucket/key; 0: bucket.endpoint/key */
  int64_t url_expiry_s;
} sl_s3_conf;

extern const sl_conf_entry sl_s3_conf_table[];
extern const size_t sl_s3_conf_table_len;

/* Pieces of the endpoint and the bucket's addressing style. */
typedef struct {
  char scheme[8];     /* "http" / "https" */
  char host[256];     /* host[:port] requests go to (bucket. prefix when virtual) */
  char path_prefix[300]; /* "/bucket" (path style) or "" (virtual host) */
} sl_s3_target;

int sl_s3_target_init(sl_s3_target *t, const sl_s3_conf *c);

/* Builds "<path_prefix>/<key>" into buf. */
int sl_s3_object_path(const sl_s3_target *t, const char *key, char *buf, size_t len);

/* A presigned GET URL for key, valid expires_s seconds (for fetching an
 * object with any HTTP client, e.g. sl_httpc on a loop). Not thread-safe
 * for the same sig. */
int sl_s3_presign_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key,
                      unsigned expires_s, char *url, size_t len);
/* GETs an object into a malloc'd buffer of at most max bytes.
 * Returns 0; SL_ENOTFOUND (404); SL_ETOOBIG; SL_ESTORAGE for other HTTP
 * statuses (*status set) or SL_EUNAVAIL for connection errors. */
int sl_s3_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key, size_t max,
              void **data, size_t *len, long *status, char *err, size_t errlen);

#endif
