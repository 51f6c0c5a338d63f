/* SPDX-License-Identifier: Apache-2.0 */
/*
 * view.c — the view protocol's keys and its two reads (see view.h):
 * whether the marker is set, and whether the view went back in time.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/view.h"

#include <stdio.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"

#define SUB_PREFIX "sl:sub:"

/* a, b and c one after the other into dst, cut to fit cap (as snprintf
 * would), without printf: materialize builds keys on every apply, where
 * printf was a tenth of its CPU (bench/cost) */
void sl__view_join3(char *dst, size_t cap, const char *a, const char *b, const char *c) {
  size_t at = 0;
  const char *part[] = {a, b, c};
  if (cap == 0) return;
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(part[i]);
    if (l > cap - 1 - at) l = cap - 1 - at;
    memcpy(dst + at, part[i], l);
    at += l;
  }
  dst[at] = '\0';
}

void sl__view_key(char *dst, size_t cap, const char *family, int bucket) {
  sl__view_join3(dst, cap, family, sl_rkey_tag(bucket), "");
}

void sl__view_writer_key(char *dst, size_t cap, int bucket, const char *writer) {
  sl__view_join3(dst, cap, SL__VIEW_WRITER, sl_rkey_tag(bucket), ":");
  size_t at = strlen(dst);
  if (at < cap) sl__view_join3(dst + at, cap - at, writer, "", "");
}

void sl__view_sub_key(char *dst, size_t cap, const char *sid) {
  sl__view_join3(dst, cap, SUB_PREFIX, sl_rkey_tag_of(sid, strlen(sid)), sid);
}

const char *sl__view_sub_sid(const char *key) {
  if (strncmp(key, SUB_PREFIX, sizeof SUB_PREFIX - 1) != 0) return NULL;
  key += sizeof SUB_PREFIX - 1;
  if (key[0] == '{') { /* a bucket's tag */
    const char *close = strchr(key, '}');
    if (!close) return NULL;
    key = close + 1;
  }
  return key[0] ? key : NULL;
}

int sl__view_marker(sl_redis *r, int bucket, char *err, size_t errlen) {
  char key[SL__VIEW_KEY_MAX];
  sl__view_key(key, sizeof key, SL__VIEW_MARKER, bucket);
  const char *argv[] = {"EXISTS", key};
  redisReply *rep = sl_redis_argv(r, 2, argv, NULL, err, errlen);
  int rc = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer == 1 : SL_EREDIS;
  if (rep && rep->type == REDIS_REPLY_ERROR) snprintf(err, errlen, "redis: %s", rep->str);
  if (rep) freeReplyObject(rep);
  return rc;
}

int sl__view_went_back(sl__view_seen *seen, long long marker, long long seq) {
  if (marker < seen->marker || (marker == seen->marker && seq < seen->seq)) return 1;
  seen->marker = marker;
  seen->seq = seq;
  return 0;
}
