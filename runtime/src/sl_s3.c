/*
 * sl_s3.c — S3 settings and signed GET (see sl_s3.h). The GET uses a
 * short-lived presigned URL, so one signer code path serves clients and
 * servers alike.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_s3.h"
#include "sluice/sl_err.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S(field) offsetof(sl_s3_conf, field)
const sl_conf_entry sl_s3_conf_table[] = {
    {"s3.endpoint", SL_CONF_STR, "http://127.0.0.1:7070", S(endpoint),
     "S3-compatible endpoint URL (scheme://host[:port])", 0},
    {"s3.region", SL_CONF_STR, "us-east-1", S(region), "signing region", 0},
    {"s3.bucket", SL_CONF_STR, "answers", S(bucket), "bucket holding the answers", 0},
    {"s3.access_key", SL_CONF_STR, "sluice-dev", S(access_key), "access key id", 1},
    {"s3.secret_key", SL_CONF_STR, "sluice-dev-secret-key", S(secret_key),
     "secret access key", 1},
    {"s3.path_style", SL_CONF_BOOL, "true", S(path_style),
     "path-style URLs (endpoint/bucket/key); false = virtual-hosted style", 0},
    {"s3.url_expiry_s", SL_CONF_INT, "900", S(url_expiry_s),
     "lifetime of presigned URLs in seconds", 0},
};
const size_t sl_s3_conf_table_len = sizeof sl_s3_conf_table / sizeof sl_s3_conf_table[0];

int sl_s3_target_init(sl_s3_target *t, const sl_s3_conf *c) {
  if (!t || !c || !c->endpoint) return SL_EINVAL;
  const char *sep = strstr(c->endpoint, "://");
  if (!sep || (size_t)(sep - c->endpoint) >= sizeof t->scheme) return SL_ECONFIG;
  memcpy(t->scheme, c->endpoint, (size_t)(sep - c->endpoint));
  t->scheme[sep - c->endpoint] = '\0';
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

int sl_s3_object_path(const sl_s3_target *t, const char *key, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/%s", t->path_prefix, key);
  return (n < 0 || (size_t)n >= len) ? SL_ETOOBIG : 0;
}

typedef struct {
  char *data;
  size_t len, max;
  int too_big;
} sink;

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
  sink *s = ud;
  size_t n = sz * nm;
  if (s->len + n > s->max) {
    s->too_big = 1;
    return 0;
  }
  char *nd = realloc(s->data, s->len + n + 1);
  if (!nd) return 0;
  s->data = nd;
  memcpy(s->data + s->len, p, n);
  s->len += n;
  return n;
}

int sl_s3_presign_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key,
                      unsigned expires_s, char *url, size_t len) {
  char path[1024];
  int rc = sl_s3_object_path(t, key, path, sizeof path);
  if (rc) return rc;
  return sl_sigv4_presign(sig, "GET", t->scheme, t->host, path, NULL, time(NULL), expires_s,
                          NULL, 0, url, len);
}

int sl_s3_get(sl_sigv4 *sig, const sl_s3_target *t, const char *key, size_t max,
              void **data, size_t *len, long *status, char *err, size_t errlen) {
  char url[4096];
  int rc = sl_s3_presign_get(sig, t, key, 300, url, sizeof url);
  if (rc) {
    snprintf(err, errlen, "signing GET %s: %s", key, sl_strerror(rc));
    return rc;
  }
  CURL *h = curl_easy_init();
  if (!h) return SL_ENOMEM;
  sink s = {NULL, 0, max, 0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 20L);
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(h);
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
