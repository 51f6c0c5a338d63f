/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request.c — validation of a create request (see request.h). jansson
 * parses (duplicate keys refused); this file knows the fields, their
 * ranges and the error codes the API documents (docs/openapi.yaml). No I/O.
 */
#include "request.h"

#include "lib/callback.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int refuse(int status, char *code, size_t codelen, const char *c, char *msg, size_t msglen,
                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int refuse(int status, char *code, size_t codelen, const char *c, char *msg, size_t msglen,
                  const char *fmt, ...) {
  snprintf(code, codelen, "%s", c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
  return status;
}

/* 64 hex digits -> the base64 form S3's x-amz-checksum-sha256 carries. */
static int sha256_b64(const char *hex, char out[48]) {
  unsigned char raw[32];
  if (strlen(hex) != 64) return -1;
  for (int i = 0; i < 32; i++) {
    unsigned v = 0;
    for (int k = 0; k < 2; k++) {
      char c = hex[2 * i + k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= (unsigned)(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= (unsigned)(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= (unsigned)(c - 'A' + 10);
      else
        return -1;
    }
    raw[i] = (unsigned char)v;
  }
  return EVP_EncodeBlock((unsigned char *)out, raw, 32) == 44 ? 0 : -1;
}

static int type_allowed(const sl__create_limits *lim, const char *ct) {
  for (size_t i = 0; i < lim->ntypes; i++)
    if (strcmp(lim->types[i], ct) == 0) return 1;
  return 0;
}

/* questions[i] (q) into *r (its strings point into q); seen: the numbers
 * taken so far. 0, or the HTTP status with code and msg set. */
static int parse_question(json_t *q, size_t i, const sl__create_limits *lim,
                          unsigned char seen[1000], sl__question_req *r, char *code, size_t cl,
                          char *msg, size_t ml) {
  const char *k;
  json_t *v;
  if (!json_is_object(q)) {
    return refuse(400, code, cl, "invalid_field", msg, ml, "questions[%zu] must be an object", i);
  }
  json_object_foreach(q, k, v) {
    if (strcmp(k, "no") && strcmp(k, "content_type") && strcmp(k, "size") && strcmp(k, "prompt") &&
        strcmp(k, "sha256")) {
      return refuse(400, code, cl, "unknown_field", msg, ml,
                    "questions[%zu]: unknown field \"%.64s\"", i, k);
    }
  }
  json_t *jno = json_object_get(q, "no"), *jct = json_object_get(q, "content_type"),
         *jsz = json_object_get(q, "size"), *jpr = json_object_get(q, "prompt"),
         *jsha = json_object_get(q, "sha256");
  json_int_t no = jno ? json_integer_value(jno) : (json_int_t)(i + 1);
  if ((jno && !json_is_integer(jno)) || no < 1 || no > 999) {
    return refuse(400, code, cl, "invalid_field", msg, ml,
                  "questions[%zu].no must be an integer 1..999", i);
  }
  if (seen[no]++) {
    return refuse(400, code, cl, "invalid_field", msg, ml, "questions[%zu].no %lld is repeated", i,
                  (long long)no);
  }
  if (!json_is_string(jct)) {
    return refuse(400, code, cl, "invalid_field", msg, ml,
                  "questions[%zu].content_type must be a string", i);
  }
  const char *ct = json_string_value(jct);
  if (!type_allowed(lim, ct)) {
    return refuse(400, code, cl, "unsupported_content_type", msg, ml,
                  "questions[%zu].content_type \"%.64s\" is not allowed (allowed: %s)", i, ct,
                  lim->types_text);
  }
  if (!json_is_integer(jsz) || json_integer_value(jsz) < 1 ||
      json_integer_value(jsz) > lim->max_size) {
    return refuse(400, code, cl, "invalid_size", msg, ml,
                  "questions[%zu].size must be an integer 1..%lld", i, (long long)lim->max_size);
  }
  if (jpr && (!json_is_string(jpr) || json_string_length(jpr) > (size_t)lim->max_prompt)) {
    return refuse(400, code, cl, "invalid_field", msg, ml,
                  "questions[%zu].prompt must be a string of at most %lld bytes", i,
                  (long long)lim->max_prompt);
  }
  /* optional sha256 (hex): signed as the S3 checksum header too, so
   * storage rejects bytes that differ from what the client declared */
  r->sha256_b64[0] = '\0';
  if (jsha && (!json_is_string(jsha) || sha256_b64(json_string_value(jsha), r->sha256_b64))) {
    return refuse(400, code, cl, "invalid_field", msg, ml,
                  "questions[%zu].sha256 must be 64 hex digits", i);
  }
  r->no = (unsigned)no;
  r->content_type = ct;
  r->size = json_integer_value(jsz);
  r->prompt = jpr ? json_string_value(jpr) : "";
  return 0;
}

int sl__create_parse(const char *ctype, const void *body, size_t len, const sl__create_limits *lim,
                     json_t **root, sl__question_req *out, size_t *n, char *code, size_t cl,
                     char *msg, size_t ml) {
  *root = NULL;
  *n = 0;
  if (ctype && strncmp(ctype, "application/json", 16) != 0)
    return refuse(415, code, cl, "unsupported_media_type", msg, ml,
                  "send the body as application/json");
  json_error_t jerr;
  json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!doc)
    return refuse(400, code, cl, "invalid_json", msg, ml, "body is not valid JSON: %s (line %d)",
                  jerr.text, jerr.line);
  int st = 0;
  const char *k;
  json_t *v, *qs;
  if (!json_is_object(doc)) {
    st = refuse(400, code, cl, "invalid_body", msg, ml, "body must be a JSON object");
    goto out;
  }
  json_object_foreach(doc, k, v) {
    if (strcmp(k, "questions") != 0 && strcmp(k, "callback_url") != 0) {
      st = refuse(400, code, cl, "unknown_field", msg, ml, "unknown field \"%.64s\"", k);
      goto out;
    }
  }
  /* its form and host are the callback policy's (stages/lib/callback.h) */
  v = json_object_get(doc, "callback_url");
  if (v && (!json_is_string(v) || json_string_length(v) < 1 ||
            json_string_length(v) > SL__CALLBACK_URL_MAX)) {
    st = refuse(422, code, cl, "callback_url_refused", msg, ml,
                "\"callback_url\" must be a string of 1 to %d bytes", SL__CALLBACK_URL_MAX);
    goto out;
  }
  qs = json_object_get(doc, "questions");
  if (!json_is_array(qs)) {
    st = refuse(400, code, cl, "invalid_field", msg, ml, "\"questions\" must be an array");
    goto out;
  }
  size_t nq = json_array_size(qs);
  if (nq == 0 || nq > (size_t)lim->max_questions) {
    st = refuse(400, code, cl, "question_count", msg, ml,
                "a submission has 1 to %lld questions, got %zu", (long long)lim->max_questions, nq);
    goto out;
  }
  unsigned char seen[1000] = {0};
  for (size_t i = 0; i < nq; i++) {
    st = parse_question(json_array_get(qs, i), i, lim, seen, &out[i], code, cl, msg, ml);
    if (st) goto out;
  }
  *n = nq;
out:
  if (st) {
    json_decref(doc);
    return st;
  }
  *root = doc;
  return 0;
}
