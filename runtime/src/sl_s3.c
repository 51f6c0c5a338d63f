/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_s3.c — S3 settings, signed GET and HEAD, and the multipart-upload
 * calls (see sl_s3.h). GET, HEAD and PUT use a short-lived presigned URL,
 * so one signer code path serves clients and servers alike; they go out on
 * the calling thread's sl_s3_conn, one curl handle reset before each call
 * (curl_easy_reset keeps the handle's open connection). The multipart calls are
 * header-signed (the body's sha256 is signed) and go out through sl_httpc;
 * their XML replies are read with libxml2 (a tree, walked by element name:
 * namespaces and unknown elements are ignored, as S3 clients do), and the
 * CompleteMultipartUpload body is built with libxml2 so that client ETags
 * are escaped.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_s3.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_id.h"

#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define S(field) offsetof(sl_s3_conf, field)
const sl_conf_entry sl_s3_conf_table[] = {
    {"s3.endpoint", SL_CONF_STR, "http://127.0.0.1:7070", S(endpoint),
     "S3-compatible endpoint URL (scheme://host[:port])", 0},
    {"s3.region", SL_CONF_STR, "us-east-1", S(region), "signing region", 0},
    {"s3.bucket", SL_CONF_STR, "answers", S(bucket), "bucket holding the answers", 0},
    {"s3.access_key", SL_CONF_STR, "sluice-dev", S(access_key), "access key id", 1},
    {"s3.secret_key", SL_CONF_STR, "sluice-dev-secret-key", S(secret_key), "secret access key", 1},
    {"s3.path_style", SL_CONF_BOOL, "true", S(path_style),
     "path-style URLs (endpoint/bucket/key); false = virtual-hosted style", 0},
    {"s3.url_expiry_s", SL_CONF_INT, "900", S(url_expiry_s),
     "lifetime of presigned URLs in seconds", 0},
    {"s3.ca_file", SL_CONF_STR, "", S(ca_file),
     "PEM file of the CAs that verify an https s3.endpoint (empty: the system's CAs); "
     "used by every signed request",
     0},
    {"s3.derived_bucket", SL_CONF_STR, "", S(derived_bucket),
     "bucket of the objects the stages derive from answers (keys derived/..., e.g. preflight's "
     "16 kHz FLAC), written and read by the stages only; empty: s3.bucket. A bucket of their own "
     "sends no storage event for them and takes its own lifecycle rule (docs/deploy.md)",
     0},
    {"s3.derived_endpoint", SL_CONF_STR, "", S(derived_endpoint),
     "endpoint of s3.derived_bucket (same keys, region and CAs); empty: s3.endpoint. The dev stack "
     "points it at a second gateway without notifications on the same storage",
     0},
};
const size_t sl_s3_conf_table_len = sizeof sl_s3_conf_table / sizeof sl_s3_conf_table[0];

int sl_s3_target_init(sl_s3_target *t, const sl_s3_conf *c) {
  if (!t || !c || !c->endpoint) return SL_EINVAL;
  const char *sep = strstr(c->endpoint, "://");
  if (!sep || (size_t)(sep - c->endpoint) >= sizeof t->scheme) return SL_ECONFIG;
  memcpy(t->scheme, c->endpoint, (size_t)(sep - c->endpoint));
  t->scheme[sep - c->endpoint] = '\0';
  if (strcmp(t->scheme, "http") != 0 && strcmp(t->scheme, "https") != 0) return SL_ECONFIG;
  t->ca_file[0] = '\0';
  if (c->ca_file && *c->ca_file) {
    FILE *f = strcmp(t->scheme, "https") == 0 ? fopen(c->ca_file, "r") : NULL;
    if (!f || strlen(c->ca_file) >= sizeof t->ca_file) {
      if (f) fclose(f);
      return SL_ECONFIG;
    }
    fclose(f);
    snprintf(t->ca_file, sizeof t->ca_file, "%s", c->ca_file);
  }
  const char *host = sep + 3;
  size_t hl = strcspn(host, "/");
  if (hl == 0) return SL_ECONFIG;
  int n;
  if (c->path_style) {
    n = snprintf(t->host, sizeof t->host, "%.*s", (int)hl, host);
    if (n < 0 || (size_t)n >= sizeof t->host) return SL_ECONFIG;
    n = snprintf(t->path_prefix, sizeof t->path_prefix, "/%s", c->bucket);
  } else {
    n = snprintf(t->host, sizeof t->host, "%s.%.*s", c->bucket, (int)hl, host);
    if (n < 0 || (size_t)n >= sizeof t->host) return SL_ECONFIG;
    n = snprintf(t->path_prefix, sizeof t->path_prefix, "%s", "");
  }
  if (n < 0 || (size_t)n >= sizeof t->path_prefix) return SL_ECONFIG;
  return 0;
}

int sl_s3_is_derived(const char *key) {
  return key && strncmp(key, SL_S3_DERIVED_PREFIX, strlen(SL_S3_DERIVED_PREFIX)) == 0;
}

char *sl_s3_derived_bucket(const sl_s3_conf *c) {
  return c->derived_bucket && *c->derived_bucket ? c->derived_bucket : c->bucket;
}

int sl_s3_target_init_derived(sl_s3_target *t, const sl_s3_conf *c) {
  if (!t || !c) return SL_EINVAL;
  sl_s3_conf d = *c;
  if (c->derived_endpoint && *c->derived_endpoint) d.endpoint = c->derived_endpoint;
  d.bucket = sl_s3_derived_bucket(c);
  return sl_s3_target_init(t, &d);
}

int sl_s3_object_path(const sl_s3_target *t, const char *key, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/%s", t->path_prefix, key);
  return (n < 0 || (size_t)n >= len) ? SL_ETOOBIG : 0;
}

typedef struct {
  char *data;
  size_t len, cap, max;
  int too_big;
} sink;

/* Appends a chunk; the buffer grows geometrically (capped at max + 1), so a
 * 64 MiB object costs a few dozen reallocations, not one per 16 KiB chunk. */
static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
  sink *s = ud;
  size_t n = sz * nm;
  if (s->len + n > s->max) {
    s->too_big = 1;
    return 0;
  }
  if (s->len + n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 65536;
    while (cap < s->len + n + 1) cap *= 2;
    if (s->max < SIZE_MAX && cap > s->max + 1) cap = s->max + 1;
    char *nd = realloc(s->data, cap);
    if (!nd) return 0;
    s->data = nd;
    s->cap = cap;
  }
  memcpy(s->data + s->len, p, n);
  s->len += n;
  return n;
}

/* A presigned URL for METHOD on key (no signed headers). */
static int presign_url(sl_sigv4 *sig, const sl_s3_target *t, const char *method, const char *key,
                       unsigned expires_s, char *url, size_t len) {
  char path[1024];
  int rc = sl_s3_object_path(t, key, path, sizeof path);
  if (rc) return rc;
  return sl_sigv4_presign(sig, method, t->scheme, t->host, path, NULL, time(NULL), expires_s, NULL,
                          0, url, len);
}

int sl_s3_presign_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key, unsigned expires_s,
                      char *url, size_t len) {
  return presign_url(sig, t, "GET", key, expires_s, url, len);
}

int sl_s3_presign_put(sl_sigv4 *sig, const sl_s3_target *t, const char *key, unsigned expires_s,
                      char *url, size_t len) {
  return presign_url(sig, t, "PUT", key, expires_s, url, len);
}

struct sl_s3_conn {
  sl_sigv4 *sig;
  CURL *h;
};

int sl_s3_conn_new(sl_s3_conn **out, const sl_s3_conf *c) {
  if (!out || !c) return SL_EINVAL;
  sl_s3_conn *k = calloc(1, sizeof *k);
  if (!k) return SL_ENOMEM;
  int rc = sl_sigv4_new(&k->sig, c->access_key, c->secret_key, c->region, "s3");
  if (rc == 0 && !(k->h = curl_easy_init())) rc = SL_ENOMEM;
  if (rc) {
    sl_s3_conn_free(k);
    return rc;
  }
  *out = k;
  return 0;
}

void sl_s3_conn_free(sl_s3_conn *c) {
  if (!c) return;
  if (c->h) curl_easy_cleanup(c->h);
  sl_sigv4_free(c->sig);
  free(c);
}

/* The connection's handle with every option back at its default (and its
 * open connection kept). */
static CURL *fresh(sl_s3_conn *c) {
  curl_easy_reset(c->h);
  return c->h;
}

int sl_s3_get(sl_s3_conn *c, const sl_s3_target *t, const char *key, size_t max, void **data,
              size_t *len, long *status, char *err, size_t errlen) {
  char url[4096];
  if (!c || !t || !key || !data || !len) return SL_EINVAL;
  int rc = sl_s3_presign_get(c->sig, t, key, 300, url, sizeof url);
  if (rc) {
    snprintf(err, errlen, "signing GET %s: %s", key, sl_strerror(rc));
    return rc;
  }
  CURL *h = fresh(c);
  sink s = {NULL, 0, 0, max, 0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  if (t->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 20L);
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (status) *status = code;
  if (s.too_big) {
    free(s.data);
    snprintf(err, errlen, "object %s is larger than %zu bytes", key, max);
    return SL_ETOOBIG;
  }
  if (cc != CURLE_OK) {
    free(s.data);
    snprintf(err, errlen, "GET %s: %s", key, curl_easy_strerror(cc));
    return SL_EUNAVAIL;
  }
  if (code == 404) {
    free(s.data);
    snprintf(err, errlen, "object %s not found in storage", key);
    return SL_ENOTFOUND;
  }
  if (code != 200) {
    free(s.data);
    snprintf(err, errlen, "GET %s: HTTP %ld", key, code);
    return SL_ESTORAGE;
  }
  *data = s.data ? s.data : calloc(1, 1);
  *len = s.len;
  return 0;
}

static size_t discard(char *p, size_t sz, size_t nm, void *ud) {
  (void)p;
  (void)ud;
  return sz * nm;
}

int sl_s3_put(sl_s3_conn *c, const sl_s3_target *t, const char *key, const char *content_type,
              const void *data, size_t len, long *status, char *err, size_t errlen) {
  char url[4096], ct[160];
  if (status) *status = 0;
  if (!c || !t || !key || !content_type || (!data && len)) return SL_EINVAL;
  int rc = presign_url(c->sig, t, "PUT", key, 300, url, sizeof url);
  if (rc) {
    snprintf(err, errlen, "signing PUT %s: %s", key, sl_strerror(rc));
    return rc;
  }
  if ((size_t)snprintf(ct, sizeof ct, "Content-Type: %s", content_type) >= sizeof ct)
    return SL_EINVAL;
  struct curl_slist *hdrs = curl_slist_append(NULL, ct);
  struct curl_slist *h2 = hdrs ? curl_slist_append(hdrs, "Expect:") : NULL;
  if (!h2) {
    curl_slist_free_all(hdrs);
    return SL_ENOMEM;
  }
  CURL *h = fresh(c);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, data ? data : "");
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, h2);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  if (t->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL); /* the list goes now */
  curl_slist_free_all(h2);
  if (status) *status = code;
  if (cc != CURLE_OK) {
    snprintf(err, errlen, "PUT %s: %s", key, curl_easy_strerror(cc));
    return SL_EUNAVAIL;
  }
  if (code != 200) {
    snprintf(err, errlen, "PUT %s: HTTP %ld", key, code);
    return SL_ESTORAGE;
  }
  return 0;
}

/* Collects ETag (the only header curl does not expose by itself). */
static size_t on_head_header(char *p, size_t sz, size_t nm, void *ud) {
  sl_s3_head_info *info = ud;
  size_t n = sz * nm;
  if (n > 5 && strncasecmp(p, "etag:", 5) == 0) {
    size_t a = 5, b = n;
    while (a < b && (p[a] == ' ' || p[a] == '\t')) a++;
    while (b > a && (p[b - 1] == '\r' || p[b - 1] == '\n' || p[b - 1] == ' ')) b--;
    snprintf(info->etag, sizeof info->etag, "%.*s", (int)(b - a), p + a);
  }
  return n;
}

int sl_s3_head(sl_s3_conn *c, const sl_s3_target *t, const char *key, sl_s3_head_info *info,
               long *status, char *err, size_t errlen) {
  char url[4096];
  if (status) *status = 0;
  if (!c || !t || !key || !info) return SL_EINVAL;
  memset(info, 0, sizeof *info);
  info->size = -1;
  int rc = presign_url(c->sig, t, "HEAD", key, 300, url, sizeof url);
  if (rc) {
    snprintf(err, errlen, "signing HEAD %s: %s", key, sl_strerror(rc));
    return rc;
  }
  CURL *h = fresh(c);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_head_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, info);
  curl_easy_setopt(h, CURLOPT_FILETIME, 1L); /* Last-Modified, parsed by curl */
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
  if (t->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file); /* https storage */
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_off_t clen = -1, mtime = -1;
  char *ct = NULL;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (cc == CURLE_OK && code == 200) {
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
    curl_easy_getinfo(h, CURLINFO_FILETIME_T, &mtime);
    info->size = clen >= 0 ? (int64_t)clen : -1;
    info->last_modified_ms = mtime > 0 ? (int64_t)mtime * 1000 : 0;
    snprintf(info->content_type, sizeof info->content_type, "%s", ct ? ct : "");
  }
  if (status) *status = code;
  if (cc != CURLE_OK) {
    snprintf(err, errlen, "HEAD %s: %s", key, curl_easy_strerror(cc));
    return SL_EUNAVAIL;
  }
  if (code == 404) {
    snprintf(err, errlen, "object %s not found in storage", key);
    return SL_ENOTFOUND;
  }
  if (code != 200) {
    snprintf(err, errlen, "HEAD %s: HTTP %ld", key, code);
    return code >= 500 ? SL_EUNAVAIL : SL_ESTORAGE;
  }
  return 0;
}

/* ---- multipart uploads ----------------------------------------------- */

/* Child element of n named name (namespace ignored), or NULL. */
static xmlNodePtr child(xmlNodePtr n, const char *name) {
  for (xmlNodePtr c = n ? n->children : NULL; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && strcmp((const char *)c->name, name) == 0) return c;
  return NULL;
}

/* Text of n's child name into out (truncated to fit; "" when absent). */
static void child_text(xmlNodePtr n, const char *name, char *out, size_t len) {
  out[0] = '\0';
  xmlNodePtr c = child(n, name);
  if (!c) return;
  xmlChar *t = xmlNodeGetContent(c);
  if (t) snprintf(out, len, "%s", (const char *)t);
  xmlFree(t);
}

static int parse_list(xmlNodePtr root, sl_s3_result *r) {
  char v[64];
  child_text(root, "IsTruncated", v, sizeof v);
  r->truncated = strcmp(v, "true") == 0;
  child_text(root, "NextPartNumberMarker", v, sizeof v);
  r->next_marker = atoi(v);
  size_t n = 0;
  for (xmlNodePtr c = root->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && strcmp((const char *)c->name, "Part") == 0) n++;
  if (n > SL_S3_MAX_PART_NO) return SL_ETOOBIG;
  r->parts = calloc(n ? n : 1, sizeof *r->parts);
  if (!r->parts) return SL_ENOMEM;
  for (xmlNodePtr c = root->children; c; c = c->next) {
    if (c->type != XML_ELEMENT_NODE || strcmp((const char *)c->name, "Part") != 0) continue;
    sl_s3_part *p = &r->parts[r->nparts++];
    child_text(c, "PartNumber", v, sizeof v);
    p->number = atoi(v);
    child_text(c, "Size", v, sizeof v);
    p->size = strtoll(v, NULL, 10);
    child_text(c, "ETag", p->etag, sizeof p->etag);
    if (p->number < 1 || p->number > SL_S3_MAX_PART_NO || p->size < 0) return SL_EPARSE;
  }
  if (r->truncated && r->next_marker < 1) return SL_EPARSE;
  return 0;
}

int sl_s3_parse_reply(int op, long status, const char *body, size_t len, sl_s3_result *r) {
  r->status = status;
  if (status == 0) {
    snprintf(r->message, sizeof r->message, "no answer from storage");
    return r->rc = SL_EUNAVAIL;
  }
  xmlDocPtr doc = NULL;
  if (len > 0 && len < INT_MAX)
    doc = xmlReadMemory(body, (int)len, NULL, NULL,
                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
  const char *rname = root ? (const char *)root->name : "";
  int rc = 0;
  if (strcmp(rname, "Error") == 0 || status < 200 || status > 299) {
    /* CompleteMultipartUpload may answer 200 with an <Error> body */
    child_text(root, "Code", r->code, sizeof r->code);
    child_text(root, "Message", r->message, sizeof r->message);
    if (!r->message[0]) snprintf(r->message, sizeof r->message, "HTTP %ld", status);
    if (status == 404 || strcmp(r->code, "NoSuchUpload") == 0 || strcmp(r->code, "NoSuchKey") == 0)
      rc = SL_ENOTFOUND;
    else if (status >= 500 || strcmp(r->code, "SlowDown") == 0 ||
             strcmp(r->code, "InternalError") == 0)
      rc = SL_EUNAVAIL;
    else if (status == 400 || (status >= 200 && status <= 299))
      rc = SL_EINVAL;
    else
      rc = SL_ESTORAGE;
  } else if (op == SL_S3_OP_ABORT) {
    rc = 0; /* 204, no body */
  } else if (op == SL_S3_OP_CREATE && strcmp(rname, "InitiateMultipartUploadResult") == 0) {
    child_text(root, "UploadId", r->upload_id, sizeof r->upload_id);
    rc = r->upload_id[0] ? 0 : SL_EPARSE;
  } else if (op == SL_S3_OP_LIST && strcmp(rname, "ListPartsResult") == 0) {
    rc = parse_list(root, r);
  } else if (op == SL_S3_OP_COMPLETE && strcmp(rname, "CompleteMultipartUploadResult") == 0) {
    child_text(root, "ETag", r->etag, sizeof r->etag);
  } else {
    rc = SL_EPARSE;
  }
  if (rc == SL_EPARSE || rc == SL_ETOOBIG || rc == SL_ENOMEM) {
    snprintf(r->message, sizeof r->message, "unexpected storage reply (HTTP %ld, <%.40s>)", status,
             rname);
    rc = SL_ESTORAGE;
  }
  xmlFreeDoc(doc);
  return r->rc = rc;
}

typedef struct {
  int op;
  sl_s3_cb cb;
  void *ud;
} call;

static void on_reply(const sl_httpc_response *res, void *ud) {
  call *k = ud;
  sl_s3_result r;
  memset(&r, 0, sizeof r);
  sl_s3_parse_reply(k->op, res->status, res->body, res->body_len, &r);
  if (res->status == 0) snprintf(r.message, sizeof r.message, "storage: %s", res->error);
  k->cb(&r, k->ud);
  free(r.parts);
  free(k);
}

/* A header-signed request: sha256 of the body in x-amz-content-sha256. */
static int send_signed(const sl_s3_client *c, int op, const char *method, const char *key,
                       const char *query, const char *ctype, const char *body, size_t blen,
                       sl_s3_cb cb, void *ud) {
  if (!c || !c->sig || !c->target || !c->http || !key || !cb) return SL_EINVAL;
  char path[1100], epath[3400], equery[1800], url[5600], auth[1024], date[17], hash[65];
  char h_auth[1100], h_date[48], h_hash[96], h_ct[300];
  int rc = sl_s3_object_path(c->target, key, path, sizeof path);
  if (rc == 0) rc = sl_sigv4_encode_path(path, epath, sizeof epath);
  if (rc == 0) rc = sl_sigv4_encode_query(query, equery, sizeof equery);
  if (rc == 0) rc = sl_sha256_hex(body ? body : "", blen, hash);
  if (rc) return rc;
  sl_sigv4_header hdrs[] = {{"content-type", ctype}};
  rc = sl_sigv4_authorize(c->sig, method, c->target->host, path, query, hash, time(NULL), hdrs,
                          ctype ? 1 : 0, auth, sizeof auth, date);
  if (rc) return rc;
  int n = snprintf(url, sizeof url, "%s://%s%s%s%s", c->target->scheme, c->target->host, epath,
                   equery[0] ? "?" : "", equery);
  if (n < 0 || (size_t)n >= sizeof url) return SL_ETOOBIG;
  snprintf(h_auth, sizeof h_auth, "Authorization: %s", auth);
  snprintf(h_date, sizeof h_date, "x-amz-date: %s", date);
  snprintf(h_hash, sizeof h_hash, "x-amz-content-sha256: %s", hash);
  n = snprintf(h_ct, sizeof h_ct, "Content-Type: %s", ctype ? ctype : "");
  if (n < 0 || (size_t)n >= sizeof h_ct) return SL_ETOOBIG;
  /* without a signed type, send none (curl would add a form type to a POST) */
  const char *headers[] = {h_auth, h_date, h_hash, ctype ? h_ct : "Content-Type:", "Expect:", NULL};
  call *k = calloc(1, sizeof *k);
  if (!k) return SL_ENOMEM;
  k->op = op;
  k->cb = cb;
  k->ud = ud;
  sl_httpc_request q = {.method = method,
                        .url = url,
                        .headers = headers,
                        .body = strcmp(method, "POST") == 0 ? (body ? body : "") : NULL,
                        .body_len = blen,
                        .timeout_ms = 30000,
                        .max_response = 4u << 20,
                        .ca_file = c->target->ca_file};
  rc = sl_httpc_send(c->http, &q, on_reply, k);
  if (rc) free(k);
  return rc;
}

/* The upload id must fit in a query; S3 ids are opaque printable ASCII. */
static int valid_upload_id(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n > 500) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)id[i] <= 0x20 || (unsigned char)id[i] >= 0x7f || id[i] == '&') return 0;
  return 1;
}

int sl_s3_create_multipart(const sl_s3_client *c, const char *key, const char *content_type,
                           sl_s3_cb cb, void *ud) {
  if (!content_type || !content_type[0]) return SL_EINVAL;
  return send_signed(c, SL_S3_OP_CREATE, "POST", key, "uploads", content_type, "", 0, cb, ud);
}

int sl_s3_list_parts(const sl_s3_client *c, const char *key, const char *upload_id, int marker,
                     int max_parts, sl_s3_cb cb, void *ud) {
  if (!valid_upload_id(upload_id) || marker < 0 || max_parts < 1 || max_parts > 1000)
    return SL_EINVAL;
  char q[600];
  snprintf(q, sizeof q, "max-parts=%d&part-number-marker=%d&uploadId=%s", max_parts, marker,
           upload_id);
  return send_signed(c, SL_S3_OP_LIST, "GET", key, q, NULL, NULL, 0, cb, ud);
}

int sl_s3_complete_multipart(const sl_s3_client *c, const char *key, const char *upload_id,
                             const sl_s3_part *parts, size_t n, sl_s3_cb cb, void *ud) {
  if (!valid_upload_id(upload_id) || !parts || n == 0 || n > SL_S3_MAX_PART_NO) return SL_EINVAL;
  xmlDocPtr doc = xmlNewDoc(BAD_CAST "1.0");
  xmlNodePtr root = doc ? xmlNewNode(NULL, BAD_CAST "CompleteMultipartUpload") : NULL;
  if (!root) {
    xmlFreeDoc(doc);
    return SL_ENOMEM;
  }
  xmlDocSetRootElement(doc, root);
  xmlNewProp(root, BAD_CAST "xmlns", BAD_CAST "http://s3.amazonaws.com/doc/2006-03-01/");
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    char num[16];
    snprintf(num, sizeof num, "%d", parts[i].number);
    xmlNodePtr p = xmlNewChild(root, NULL, BAD_CAST "Part", NULL);
    /* xmlNewTextChild escapes the ETag (it comes from the client) */
    if (!p || !xmlNewTextChild(p, NULL, BAD_CAST "PartNumber", BAD_CAST num) ||
        !xmlNewTextChild(p, NULL, BAD_CAST "ETag", BAD_CAST parts[i].etag))
      rc = SL_ENOMEM;
  }
  xmlChar *xml = NULL;
  int xlen = 0;
  if (rc == 0) xmlDocDumpMemoryEnc(doc, &xml, &xlen, "UTF-8");
  xmlFreeDoc(doc);
  if (rc == 0 && (!xml || xlen <= 0)) rc = SL_ENOMEM;
  char q[600];
  snprintf(q, sizeof q, "uploadId=%s", upload_id);
  if (rc == 0)
    rc = send_signed(c, SL_S3_OP_COMPLETE, "POST", key, q, "application/xml", (const char *)xml,
                     (size_t)xlen, cb, ud);
  xmlFree(xml);
  return rc;
}

int sl_s3_abort_multipart(const sl_s3_client *c, const char *key, const char *upload_id,
                          sl_s3_cb cb, void *ud) {
  if (!valid_upload_id(upload_id)) return SL_EINVAL;
  char q[600];
  snprintf(q, sizeof q, "uploadId=%s", upload_id);
  return send_signed(c, SL_S3_OP_ABORT, "DELETE", key, q, NULL, NULL, 0, cb, ud);
}

int sl_s3_presign_part(sl_sigv4 *sig, const sl_s3_target *t, const char *key, const char *upload_id,
                       int part_no, time_t now, unsigned expires, char *url, size_t len) {
  if (!valid_upload_id(upload_id) || part_no < 1 || part_no > SL_S3_MAX_PART_NO) return SL_EINVAL;
  char path[1100], q[600];
  int rc = sl_s3_object_path(t, key, path, sizeof path);
  if (rc) return rc;
  snprintf(q, sizeof q, "partNumber=%d&uploadId=%s", part_no, upload_id);
  return sl_sigv4_presign(sig, "PUT", t->scheme, t->host, path, q, now, expires, NULL, 0, url, len);
}

/* ---- delete and list (blocking) ---------------------------------------- */

/* A status that is not success: SL_EUNAVAIL (5xx, none) or SL_ESTORAGE. */
static int status_fault(const char *what, long code, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: HTTP %ld", what, code);
  return code >= 500 || code == 0 ? SL_EUNAVAIL : SL_ESTORAGE;
}

int sl_s3_delete(sl_s3_conn *c, const sl_s3_target *t, const char *key, long *status, char *err,
                 size_t errlen) {
  char url[4096];
  if (status) *status = 0;
  if (!c || !t || !key) return SL_EINVAL;
  int rc = presign_url(c->sig, t, "DELETE", key, 300, url, sizeof url);
  if (rc) {
    snprintf(err, errlen, "signing DELETE %s: %s", key, sl_strerror(rc));
    return rc;
  }
  CURL *h = fresh(c);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  if (t->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (status) *status = code;
  if (cc != CURLE_OK) {
    snprintf(err, errlen, "DELETE %s: %s", key, curl_easy_strerror(cc));
    return SL_EUNAVAIL;
  }
  if (code == 200 || code == 204 || code == 404) return 0;
  return status_fault(key, code, err, errlen);
}

/* One page of a listing: its keys appended to *keys; *token set to the
 * next page's continuation token ("" on the last page). */
static int list_page(xmlNodePtr root, char ***keys, size_t *n, size_t max, char *token,
                     size_t tlen) {
  if (!root || strcmp((const char *)root->name, "ListBucketResult") != 0) return SL_EPARSE;
  for (xmlNodePtr e = root->children; e; e = e->next) {
    if (e->type != XML_ELEMENT_NODE || strcmp((const char *)e->name, "Contents") != 0) continue;
    char key[1200];
    child_text(e, "Key", key, sizeof key);
    if (!key[0]) continue;
    if (*n >= max) return SL_ETOOBIG;
    char **grown = realloc(*keys, (*n + 1) * sizeof **keys);
    if (!grown) return SL_ENOMEM;
    *keys = grown;
    if (!((*keys)[*n] = strdup(key))) return SL_ENOMEM;
    (*n)++;
  }
  char trunc[8];
  child_text(root, "IsTruncated", trunc, sizeof trunc);
  token[0] = '\0';
  if (strcmp(trunc, "true") == 0) child_text(root, "NextContinuationToken", token, tlen);
  return strcmp(trunc, "true") == 0 && !token[0] ? SL_EPARSE : 0;
}

int sl_s3_list(sl_s3_conn *c, const sl_s3_target *t, const char *prefix, size_t max, char ***keys,
               size_t *n, char *err, size_t errlen) {
  if (!c || !t || !prefix || !keys || !n) return SL_EINVAL;
  *keys = NULL;
  *n = 0;
  char token[1024] = "", query[2400], path[320], url[6000];
  snprintf(path, sizeof path, "%s/", t->path_prefix);
  int rc = 0;
  do {
    if (token[0])
      snprintf(query, sizeof query, "continuation-token=%s&list-type=2&prefix=%s", token, prefix);
    else
      snprintf(query, sizeof query, "list-type=2&prefix=%s", prefix);
    rc = sl_sigv4_presign(c->sig, "GET", t->scheme, t->host, path, query, time(NULL), 300, NULL, 0,
                          url, sizeof url);
    if (rc) {
      snprintf(err, errlen, "signing the listing of %s: %s", prefix, sl_strerror(rc));
      break;
    }
    CURL *h = fresh(c);
    sink s = {NULL, 0, 0, 4u << 20, 0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (t->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    CURLcode cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK) {
      snprintf(err, errlen, "listing %s: %s", prefix, curl_easy_strerror(cc));
      rc = SL_EUNAVAIL;
    } else if (code != 200 || s.too_big) {
      rc = s.too_big ? SL_ETOOBIG : status_fault("listing", code, err, errlen);
    } else {
      xmlDocPtr doc = xmlReadMemory(s.data ? s.data : "", (int)s.len, "list.xml", NULL,
                                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
      rc = list_page(doc ? xmlDocGetRootElement(doc) : NULL, keys, n, max, token, sizeof token);
      if (rc) snprintf(err, errlen, "listing %s: %s", prefix, sl_strerror(rc));
      xmlFreeDoc(doc);
    }
    free(s.data);
  } while (rc == 0 && token[0]);
  if (rc) {
    for (size_t i = 0; i < *n; i++) free((*keys)[i]);
    free(*keys);
    *keys = NULL;
    *n = 0;
  }
  return rc;
}
