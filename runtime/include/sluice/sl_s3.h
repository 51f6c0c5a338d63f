/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_s3.h — the object-storage settings shared by presign and stt, and the
 * few server-side calls Sluice makes: GET, HEAD or PUT an object (blocking,
 * for worker threads, each with a connection kept open: sl_s3_conn), and the
 * multipart-upload calls presign makes on behalf of
 * browser clients (CreateMultipartUpload, ListParts, CompleteMultipartUpload,
 * AbortMultipartUpload: asynchronous, on a libuv loop through sl_httpc, so
 * the HTTP server's loop never blocks on storage). Requests are signed with
 * sl_sigv4 (GET by a short presigned URL; the multipart calls with an
 * Authorization header over the sha256 of the body) and sent with libcurl;
 * bodies are read into bounded memory. S3's XML replies are parsed with
 * libxml2.
 *
 * Credentials come from the environment or a config file and are never
 * logged (the table marks them secret).
 */
#ifndef SLUICE_SL_S3_H
#define SLUICE_SL_S3_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sluice/sl_conf.h"
#include "sluice/sl_sigv4.h"

struct sl_httpc;

typedef struct {
  char *endpoint; /* http://127.0.0.1:7070 */
  char *region;
  char *bucket;
  char *access_key;
  char *secret_key;
  int path_style; /* 1: endpoint/bucket/key; 0: bucket.endpoint/key */
  int64_t url_expiry_s;
  char *ca_file; /* PEM CAs for an https endpoint ("" = the system's) */
  /* where the stages keep the objects they derive (keys derived/...): ""
   * means the endpoint and bucket above */
  char *derived_bucket;
  char *derived_endpoint;
} sl_s3_conf;

extern const sl_conf_entry sl_s3_conf_table[];
extern const size_t sl_s3_conf_table_len;

/* Pieces of the endpoint and the bucket's addressing style. */
typedef struct {
  char scheme[8];        /* "http" / "https" */
  char host[256];        /* host[:port] requests go to (bucket. prefix when virtual) */
  char path_prefix[300]; /* "/bucket" (path style) or "" (virtual host) */
  char ca_file[1024];    /* CURLOPT_CAINFO of every request to the endpoint ("" = default) */
} sl_s3_target;

/* Splits the endpoint; the scheme must be http or https, and s3.ca_file
 * (readable) goes only with https. Returns 0 or SL_ECONFIG. Certificate
 * verification is never turned off. */
int sl_s3_target_init(sl_s3_target *t, const sl_s3_conf *c);

/* The same for the derived objects' bucket: s3.derived_endpoint and
 * s3.derived_bucket, each falling back to s3.endpoint and s3.bucket. */
int sl_s3_target_init_derived(sl_s3_target *t, const sl_s3_conf *c);
/* Derived objects' keys start with this; the stages read and write them in
 * the derived target, and ingest drops storage events for them. */
#define SL_S3_DERIVED_PREFIX "derived/"
/* Whether key names a derived object (it starts with SL_S3_DERIVED_PREFIX). */
int sl_s3_is_derived(const char *key);
/* The derived objects' bucket: s3.derived_bucket, or s3.bucket when empty. */
char *sl_s3_derived_bucket(const sl_s3_conf *c);

/* Builds "<path_prefix>/<key>" into buf. */
int sl_s3_object_path(const sl_s3_target *t, const char *key, char *buf, size_t len);

/* A presigned GET URL for key, valid expires_s seconds (for fetching an
 * object with any HTTP client, e.g. sl_httpc on a loop). Not thread-safe
 * for the same sig. */
int sl_s3_presign_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key, unsigned expires_s,
                      char *url, size_t len);
/* The same for a PUT of key (no signed headers: the Content-Type sent with
 * it is the uploader's to choose). */
int sl_s3_presign_put(sl_sigv4 *sig, const sl_s3_target *t, const char *key, unsigned expires_s,
                      char *url, size_t len);
/* A worker thread's client for the blocking calls below: its signer and one
 * libcurl handle, whose connection to the endpoint stays open from one call
 * to the next (HTTP keep-alive: no TCP, or TLS, handshake per object).
 * Owned by one thread at a time (not thread-safe): a stage keeps one per
 * worker thread (sl_tls). */
typedef struct sl_s3_conn sl_s3_conn;
int sl_s3_conn_new(sl_s3_conn **out, const sl_s3_conf *c);
void sl_s3_conn_free(sl_s3_conn *c); /* NULL-safe */

/* GETs an object into a malloc'd buffer of at most max bytes.
 * Returns 0; SL_ENOTFOUND (404); SL_ETOOBIG; SL_ESTORAGE for other HTTP
 * statuses (*status set) or SL_EUNAVAIL for connection errors. */
int sl_s3_get(sl_s3_conn *c, const sl_s3_target *t, const char *key, size_t max, void **data,
              size_t *len, long *status, char *err, size_t errlen);

/* PUTs len bytes as the object key with the given Content-Type (blocking,
 * for worker threads; a presigned PUT). Overwrites: storing the same
 * bytes again is harmless, which is what makes it safe to repeat after a
 * crash. Returns 0; SL_ESTORAGE for an HTTP status other than 200 (*status
 * set) or SL_EUNAVAIL for connection errors, with the reason in err. */
int sl_s3_put(sl_s3_conn *c, const sl_s3_target *t, const char *key, const char *content_type,
              const void *data, size_t len, long *status, char *err, size_t errlen);

/* What a HEAD of an object says. */
typedef struct {
  int64_t size;             /* Content-Length, -1 when storage sent none */
  char content_type[128];   /* Content-Type as stored, "" when none */
  char etag[80];            /* ETag, quotes included, "" when none */
  int64_t last_modified_ms; /* Last-Modified (whole seconds), 0 when none */
} sl_s3_head_info;

/* HEADs an object (blocking, for worker threads; a presigned HEAD URL).
 * Returns 0 with *info filled; SL_ENOTFOUND (404); SL_EUNAVAIL for
 * connection errors, timeouts and 5xx; SL_ESTORAGE for any other status
 * (*status set when not NULL). */
int sl_s3_head(sl_s3_conn *c, const sl_s3_target *t, const char *key, sl_s3_head_info *info,
               long *status, char *err, size_t errlen);

/* DELETEs an object (blocking; a presigned DELETE). An object that is not
 * there is gone too: 0 for 204, 200 and 404. SL_EUNAVAIL for connection
 * errors, timeouts and 5xx; SL_ESTORAGE for any other status. */
int sl_s3_delete(sl_s3_conn *c, const sl_s3_target *t, const char *key, long *status, char *err,
                 size_t errlen);

/* Lists the keys that start with prefix (ListObjectsV2, blocking, at most
 * max of them, pages followed): *keys a malloc'd array of *n malloc'd
 * strings (free each, then the array). 0; SL_ETOOBIG when there are more
 * than max; SL_EUNAVAIL / SL_ESTORAGE as sl_s3_delete; SL_EPARSE for a
 * reply that is not a listing. */
int sl_s3_list(sl_s3_conn *c, const sl_s3_target *t, const char *prefix, size_t max, char ***keys,
               size_t *n, char *err, size_t errlen);

/* ---- multipart uploads (asynchronous) ------------------------------- */

#define SL_S3_MAX_PART_NO 10000 /* S3: part numbers are 1..10000 */

/* Where multipart calls go. All three are borrowed; the sl_httpc decides
 * the loop (@locality that loop's thread). */
typedef struct {
  sl_sigv4 *sig;
  const sl_s3_target *target;
  struct sl_httpc *http;
} sl_s3_client;

typedef struct {
  int number;
  int64_t size;  /* ListParts only */
  char etag[80]; /* as S3 gives it, quotes included */
} sl_s3_part;

enum { SL_S3_OP_CREATE = 1, SL_S3_OP_LIST, SL_S3_OP_COMPLETE, SL_S3_OP_ABORT };

/* The outcome of one multipart call; valid only during the callback.
 *   rc  0; SL_ENOTFOUND the upload (or key) does not exist (NoSuchUpload,
 *       NoSuchKey, 404); SL_EINVAL storage refused the request as the
 *       client's fault (400: InvalidPart, InvalidPartOrder, EntityTooSmall…);
 *       SL_EUNAVAIL no answer, or 5xx / SlowDown; SL_ESTORAGE anything else
 *       (403, an unreadable reply). */
typedef struct {
  int rc;
  long status;         /* HTTP status, 0 when there was no answer */
  char code[64];       /* S3 <Error><Code>, "" when none */
  char message[256];   /* for logs */
  char upload_id[512]; /* CREATE */
  sl_s3_part *parts;   /* LIST: this page, in storage order */
  size_t nparts;
  int truncated; /* LIST: another page follows from next_marker */
  int next_marker;
  char etag[80]; /* COMPLETE: the object's ETag */
} sl_s3_result;

typedef void (*sl_s3_cb)(const sl_s3_result *r, void *ud);

/* Each call returns 0 (cb runs exactly once, later, on the loop) or a
 * negative code (cb never runs). key is the raw object key. */
int sl_s3_create_multipart(const sl_s3_client *c, const char *key, const char *content_type,
                           sl_s3_cb cb, void *ud);
/* One page of at most max_parts (1..1000) parts after part number marker. */
int sl_s3_list_parts(const sl_s3_client *c, const char *key, const char *upload_id, int marker,
                     int max_parts, sl_s3_cb cb, void *ud);
/* parts: n (1..10000) numbers with their ETags, ascending. */
int sl_s3_complete_multipart(const sl_s3_client *c, const char *key, const char *upload_id,
                             const sl_s3_part *parts, size_t n, sl_s3_cb cb, void *ud);
int sl_s3_abort_multipart(const sl_s3_client *c, const char *key, const char *upload_id,
                          sl_s3_cb cb, void *ud);

/* A presigned UploadPart URL (PUT key?partNumber=N&uploadId=U); no headers
 * are signed, so a client sends the part with any Content-Length. Sync and
 * pure: no storage call. */
int sl_s3_presign_part(sl_sigv4 *sig, const sl_s3_target *t, const char *key, const char *upload_id,
                       int part_no, time_t now, unsigned expires, char *url, size_t len);

/* Reads a storage reply into r (which must be zeroed; free r->parts with
 * free()). Exposed for unit tests. Returns r->rc. */
int sl_s3_parse_reply(int op, long status, const char *body, size_t len, sl_s3_result *r);

#endif
