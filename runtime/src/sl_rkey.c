/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_rkey.c — Redis key buckets and their hash tags (see sl_rkey.h).
 *
 * Bucket b's tag is "{b-s}" with the smallest s >= 0 whose slot falls in
 * [b * 16384 / N, (b + 1) * 16384 / N): about N tries per bucket, done
 * once at start-up (under 1 M CRCs of 8 bytes for the largest N).
 */
#include "sluice/sl_rkey.h"

#include "sluice/sl_err.h"
#include "sluice/sl_slot.h"

#include <stdio.h>
#include <string.h>

static int nbuckets;                                    /* 0: no tags */
static char tags[SL_RKEY_MAX_BUCKETS][SL_RKEY_TAG_MAX]; /* "{b-s}" */

int sl_rkey_setup(int buckets) {
  if (buckets < 0 || buckets > SL_RKEY_MAX_BUCKETS) return SL_EINVAL;
  memset(tags, 0, sizeof tags);
  for (int b = 0; b < buckets; b++) {
    long lo = (long)b * SL_SLOT_COUNT / buckets, hi = (long)(b + 1) * SL_SLOT_COUNT / buckets;
    for (int s = 0; s < 100000; s++) {
      char tag[SL_RKEY_TAG_MAX];
      int n = snprintf(tag, sizeof tag, "{%d-%d}", b, s); /* at most "{1023-99999}" */
      int slot = sl_slot_crc16(tag + 1, (size_t)n - 2) & (SL_SLOT_COUNT - 1);
      if (slot >= lo && slot < hi) {
        memcpy(tags[b], tag, (size_t)n + 1);
        break;
      }
    }
    if (!tags[b][0]) return SL_EINVAL; /* not reached: 100000 tries cover every range */
  }
  nbuckets = buckets;
  return 0;
}

int sl_rkey_bucketed(void) { return nbuckets > 0; }

int sl_rkey_buckets(void) { return nbuckets > 0 ? nbuckets : 1; }

int sl_rkey_bucket(const char *sid, size_t len) {
  if (nbuckets <= 1 || !sid) return 0;
  return (int)(sl_slot_crc16(sid, len) % (unsigned)nbuckets);
}

int sl_rkey_bucket_of_key(const char *key) {
  if (!key) return 0;
  const char *slash = strchr(key, '/');
  return sl_rkey_bucket(key, slash ? (size_t)(slash - key) : strlen(key));
}

const char *sl_rkey_tag(int bucket) {
  if (nbuckets <= 0 || bucket < 0 || bucket >= nbuckets) return "";
  return tags[bucket];
}

const char *sl_rkey_tag_of(const char *sid, size_t len) {
  return sl_rkey_tag(sl_rkey_bucket(sid, len));
}
