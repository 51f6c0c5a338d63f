/* SPDX-License-Identifier: Apache-2.0 */
/*
 * view.c — the view protocol's two reads (see view.h): whether the marker
 * is set, and whether the view went back in time.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/view.h"

#include <stdio.h>

#include "sluice/sl_err.h"
#include "sluice/sl_redis.h"

int sl__view_marker(sl_redis *r, char *err, size_t errlen) {
  const char *argv[] = {"EXISTS", SL__VIEW_MARKER};
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
