/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.c — `sluicectl keys [ID]`: the Redis keys of the view under the
 * current settings (SLUICE_REDIS_BUCKETS, read like the stages read it), so
 * that an operator or a test reading Redis with redis-cli uses the names the
 * stages use. Built by the stages' own code (stages/lib/view.c); nothing is
 * connected to.
 *
 *   keys ID   the submission's hash and its bucket's keys, "NAME KEY" a line
 *   keys      every bucket's keys, "BUCKET NAME KEY" a line
 */
#include <stdio.h>
#include <string.h>

#include "lib/view.h"
#include "sluice/sl_rkey.h"
#include "sluicectl.h"

static const struct {
  const char *name, *family;
} families[] = {{"seq", SL__VIEW_SEQ},
                {"applied", SL__VIEW_APPLIED},
                {"marker", SL__VIEW_MARKER},
                {"changes", SL__VIEW_FEED},
                {"pending", SL__PENDING}};
#define NFAMILIES (sizeof families / sizeof families[0])

static int valid_sid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64) return 0;
  for (; *s; s++)
    if (*s <= ' ' || *s == '/' || *s == '{' || *s == '}' || (unsigned char)*s >= 127) return 0;
  return 1;
}

static void bucket_keys(int b, json_t *arr, const char *prefix) {
  for (size_t i = 0; i < NFAMILIES; i++) {
    char key[SL__VIEW_KEY_MAX];
    sl__view_key(key, sizeof key, families[i].family, b);
    if (arr)
      json_object_set_new(json_array_get(arr, json_array_size(arr) - 1), families[i].name,
                          json_string(key));
    else
      printf("%s%s %s\n", prefix, families[i].name, key);
  }
}

int sc_keys(const sc_opts *o) {
  const char *sid = o->nargs > 0 ? o->args[0] : NULL;
  if (sid && !valid_sid(sid)) {
    fprintf(stderr,
            "sluicectl: \"%s\" is not a submission id (1-64 printable characters, no '/', "
            "'{' or '}')\n(sluicectl --help for usage)\n",
            sid);
    return SC_EXIT_USAGE;
  }
  json_t *out = o->json ? json_array() : NULL;
  int first = 0, last = sl_rkey_buckets() - 1;
  if (sid) first = last = sl_rkey_bucket(sid, strlen(sid));
  for (int b = first; b <= last; b++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%d ", b);
    if (out) {
      json_array_append_new(out, json_pack("{s:i,s:i}", "bucket", b, "buckets",
                                           sl_rkey_bucketed() ? sl_rkey_buckets() : 0));
      if (sid) {
        char key[SL__VIEW_KEY_MAX];
        sl__view_sub_key(key, sizeof key, sid);
        json_object_set_new(json_array_get(out, 0), "submission", json_string(key));
      }
    } else if (sid) {
      char key[SL__VIEW_KEY_MAX];
      sl__view_sub_key(key, sizeof key, sid);
      printf("submission %s\nbucket %d\nbuckets %d\n", key, b,
             sl_rkey_bucketed() ? sl_rkey_buckets() : 0);
    }
    bucket_keys(b, out, sid ? "" : prefix);
  }
  if (out) {
    char *s = json_dumps(sid ? json_array_get(out, 0) : out, JSON_COMPACT);
    if (s) puts(s);
    free(s);
    json_decref(out);
  }
  return SC_EXIT_OK;
}
