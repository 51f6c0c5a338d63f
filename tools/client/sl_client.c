/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_client.c — see sl_client.h. JSON with jansson.
 */
#define _POSIX_C_SOURCE 200809L
#include "sl_client.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

char *sl_client_create_body(const sl_client_question *q, size_t n) {
  json_t *qs = json_array();
  for (size_t i = 0; qs && i < n; i++) {
    json_t *j =
        json_pack("{s:i,s:s,s:I}", "no", q[i].no ? q[i].no : (int)i + 1, "content_type",
                  q[i].content_type ? q[i].content_type : "", "size", (json_int_t)q[i].size);
    if (j && q[i].prompt && q[i].prompt[0])
      json_object_set_new(j, "prompt", json_string(q[i].prompt));
    if (!j || json_array_append_new(qs, j) != 0) {
      json_decref(qs);
      return NULL;
    }
  }
  json_t *b = qs ? json_pack("{s:o}", "questions", qs) : NULL;
  char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
  json_decref(b);
  return s;
}

static char *dup_str(json_t *v) {
  const char *s = json_string_value(v);
  return s ? strdup(s) : NULL;
}

void sl_client_created_free(sl_client_created *c) {
  if (!c) return;
  for (size_t i = 0; c->uploads && i < c->n; i++) {
    sl_client_upload *u = &c->uploads[i];
    free(u->url);
    free(u->object_key);
    for (size_t h = 0; u->headers && u->headers[h]; h++) free(u->headers[h]);
    free(u->headers);
  }
  free(c->uploads);
  free(c->submission_id);
  free(c->results_token);
  free(c->results_url);
  memset(c, 0, sizeof *c);
}

static int fail(sl_client_created *out, char *err, size_t errlen, const char *msg) {
  snprintf(err, errlen, "%s", msg);
  sl_client_created_free(out);
  return -1;
}

int sl_client_created_parse(const char *body, size_t len, size_t want, sl_client_created *out,
                            char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *j = json_loadb(body ? body : "", body ? len : 0, 0, &je);
  if (!json_is_object(j)) {
    json_decref(j);
    return fail(out, err, errlen, "the reply is not a JSON object");
  }
  out->submission_id = dup_str(json_object_get(j, "submission_id"));
  out->results_token = dup_str(json_object_get(j, "results_token"));
  out->results_url = dup_str(json_object_get(j, "results_url"));
  json_t *qs = json_object_get(j, "questions");
  if (!out->submission_id || !out->results_token || !out->results_url || !json_is_array(qs)) {
    json_decref(j);
    return fail(out, err, errlen,
                "the reply lacks submission_id, results_token, results_url or questions");
  }
  if (json_array_size(qs) != want) {
    json_decref(j);
    return fail(out, err, errlen, "the reply does not hold one upload per question asked for");
  }
  out->uploads = calloc(want ? want : 1, sizeof *out->uploads);
  if (!out->uploads) {
    json_decref(j);
    return fail(out, err, errlen, "out of memory");
  }
  out->n = want;
  for (size_t i = 0; i < want; i++) {
    json_t *q = json_array_get(qs, i), *h = json_object_get(q, "headers");
    sl_client_upload *u = &out->uploads[i];
    u->no = (int)json_integer_value(json_object_get(q, "no"));
    u->url = dup_str(json_object_get(q, "url"));
    u->object_key = dup_str(json_object_get(q, "object_key"));
    u->headers = calloc(json_object_size(h) + 1, sizeof *u->headers);
    if (!u->url || !u->object_key || !u->headers || u->no < 1 || !json_is_object(h)) {
      json_decref(j);
      return fail(out, err, errlen, "an upload in the reply lacks no, url, object_key or headers");
    }
    size_t nh = 0;
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
      if (!json_is_string(v)) {
        json_decref(j);
        return fail(out, err, errlen, "an upload header in the reply is not a string");
      }
      if (strcasecmp(k, "Content-Length") == 0) continue; /* the HTTP client's */
      size_t n = strlen(k) + 2 + strlen(json_string_value(v)) + 1;
      char *line = malloc(n);
      if (!line) {
        json_decref(j);
        return fail(out, err, errlen, "out of memory");
      }
      snprintf(line, n, "%s: %s", k, json_string_value(v));
      u->headers[nh++] = line;
    }
  }
  json_decref(j);
  return 0;
}

const char *sl_client_content_type(const char *path) {
  const char *dot = path ? strrchr(path, '.') : NULL;
  if (!dot || strchr(dot, '/')) return NULL;
  static const struct {
    const char *ext, *type;
  } map[] = {{"wav", "audio/wav"},  {"flac", "audio/flac"}, {"ogg", "audio/ogg"},
             {"oga", "audio/ogg"},  {"opus", "audio/ogg"},  {"webm", "audio/webm"},
             {"mp3", "audio/mpeg"}, {"m4a", "audio/mp4"},   {"mp4", "audio/mp4"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcasecmp(dot + 1, map[i].ext) == 0) return map[i].type;
  return NULL;
}
