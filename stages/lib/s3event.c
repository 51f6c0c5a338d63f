/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3event.c — S3 bucket notification reading (see s3event.h). jansson parses
 * the JSON; this file only knows which fields matter and how our object keys
 * look. No I/O and no global state: safe from any thread.
 */
#include "lib/s3event.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sluice/sl_err.h"

int sl__object_key_parse(const char *key, char sid[37], unsigned *qno) {
  static const char pre[] = "submissions/";
  if (strncmp(key, pre, sizeof pre - 1) != 0) return SL_EPARSE;
  const char *p = key + sizeof pre - 1;
  for (int i = 0; i < 36; i++) {
    char c = p[i];
    int dash = (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash ? c != '-' : !isxdigit((unsigned char)c)) return SL_EPARSE;
  }
  if (p[36] != '/' || p[37] != 'q') return SL_EPARSE;
  const char *d = p + 38;
  unsigned q = 0;
  int nd = 0;
  while (isdigit((unsigned char)*d) && nd < 4) q = q * 10 + (unsigned)(*d++ - '0'), nd++;
  if (nd == 0 || q == 0 || *d != '.' || d[1] == '\0' || strchr(d, '/')) return SL_EPARSE;
  memcpy(sid, p, 36);
  sid[36] = '\0';
  *qno = q;
  return 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

int sl__url_decode(const char *in, char *out, size_t len) {
  size_t o = 0;
  if (len == 0) return SL_ETOOBIG;
  for (const char *p = in; *p; p++) {
    if (o + 1 >= len) return SL_ETOOBIG;
    if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
      char c = (char)(hexval(p[1]) * 16 + hexval(p[2]));
      if (c == '\0') return SL_EPARSE;
      out[o++] = c;
      p += 2;
    } else {
      out[o++] = *p == '+' ? ' ' : *p;
    }
  }
  out[o] = '\0';
  return 0;
}

int sl__s3event_load(const void *buf, size_t len, json_t **root, json_t **records, char *why,
                     size_t whylen) {
  json_error_t jerr;
  *root = NULL;
  *records = NULL;
  json_t *doc = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!doc || !json_is_object(doc)) {
    snprintf(why, whylen, "storage event is not a JSON object: %s", doc ? "wrong type" : jerr.text);
    json_decref(doc);
    return SL_EPARSE;
  }
  const char *ev = json_string_value(json_object_get(doc, "Event"));
  if (ev && strcmp(ev, "s3:TestEvent") == 0) {
    *root = doc;
    return 0;
  }
  json_t *recs = json_object_get(doc, "Records");
  if (!json_is_array(recs) || json_array_size(recs) == 0) {
    snprintf(why, whylen, "storage event has no Records array");
    json_decref(doc);
    return SL_EPARSE;
  }
  *root = doc;
  *records = recs;
  return 0;
}

int sl__s3event_record(json_t *r, sl__s3rec *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  out->size = -1;
  json_t *s3 = json_object_get(r, "s3");
  json_t *obj = json_object_get(s3, "object");
  out->event_name = json_string_value(json_object_get(r, "eventName"));
  out->bucket = json_string_value(json_object_get(json_object_get(s3, "bucket"), "name"));
  out->raw_key = json_string_value(json_object_get(obj, "key"));
  if (!out->event_name || !out->bucket || !out->raw_key) {
    snprintf(why, whylen, "record lacks eventName, s3.bucket.name or s3.object.key");
    return SL_EPARSE;
  }
  out->created = strncmp(out->event_name, "s3:ObjectCreated:", 17) == 0;
  json_t *size = json_object_get(obj, "size");
  if (json_is_integer(size) && json_integer_value(size) > 0) out->size = json_integer_value(size);
  out->etag = json_string_value(json_object_get(obj, "eTag"));
  int rc = sl__url_decode(out->raw_key, out->key, sizeof out->key);
  if (rc) {
    snprintf(why, whylen, "object key \"%.200s\" cannot be decoded (%s)", out->raw_key,
             rc == SL_ETOOBIG ? "too long" : "encoded NUL");
    return SL_EPARSE;
  }
  out->ours = sl__object_key_parse(out->key, out->sid, &out->qno) == 0;
  return 0;
}

void sl__etag_bare(const char *in, char *out, size_t len) {
  size_t a = 0, b = in ? strlen(in) : 0;
  if (b >= 2 && in[0] == '"' && in[b - 1] == '"') a = 1, b--;
  snprintf(out, len, "%.*s", (int)(b - a), in ? in + a : "");
}

void sl__upload_field(unsigned qno, const char *etag, char *out, size_t len) {
  snprintf(out, len, "u%u:%s", qno, etag ? etag : "");
}
