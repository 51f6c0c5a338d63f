/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/erase.c — one submission erased everywhere (see erase.h): key,
 * objects, Redis keys, audit record, blocking, each step repeatable.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/erase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/view.h"
#include "sluice.pb-c.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_stage.h" /* sl_now_ms */

#define LIST_MAX 4096 /* objects of one submission: questions x (original, derived) */
#define SCAN_COUNT "1000"

static redisReply *cmd(const sl__eraser *e, int argc, const char **argv, char *err, size_t errlen) {
  redisReply *r = sl_redis_argv(e->redis, argc, argv, NULL, err, errlen);
  if (r && r->type == REDIS_REPLY_ERROR) {
    snprintf(err, errlen, "redis: %s", r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

/* 1. the tombstone, then the sentinel */
static int destroy_key(const sl__eraser *e, const char *sid, char *err, size_t errlen) {
  int rc = e->produce(e->produce_ud, e->datakeys_topic, sid, NULL, 0, err, errlen);
  if (rc) return rc;
  char buf[SL_DKEY_RKEY_MAX + 32];
  const char *argv[6];
  if (sl_dkey_erase_argv(sid, buf, argv) != 0) return SL_EINVAL;
  redisReply *r = cmd(e, 5, argv, err, errlen);
  freeReplyObject(r);
  return r ? 0 : SL_EREDIS;
}

/* 2. everything listed under prefix in t, deleted */
static int delete_listed(const sl__eraser *e, const sl_s3_target *t, const char *prefix,
                         unsigned *n, char *err, size_t errlen) {
  char **keys = NULL;
  size_t nk = 0;
  int rc = sl_s3_list(e->s3, t, prefix, LIST_MAX, &keys, &nk, err, errlen);
  for (size_t i = 0; i < nk; i++) {
    if (rc == 0) rc = sl_s3_delete(e->s3, t, keys[i], NULL, err, errlen);
    if (rc == 0) (*n)++;
    free(keys[i]);
  }
  free(keys);
  return rc;
}

static int delete_objects(const sl__eraser *e, const char *sid, unsigned parts, sl__erased *out,
                          char *err, size_t errlen) {
  char prefix[160];
  int rc = 0;
  snprintf(prefix, sizeof prefix, "submissions/%s/", sid);
  if (!parts || (parts & SL__ERASE_AUDIO))
    rc = delete_listed(e, e->bucket, prefix, &out->objects, err, errlen);
  snprintf(prefix, sizeof prefix, SL_S3_DERIVED_PREFIX "submissions/%s/", sid);
  if (rc == 0 && (!parts || (parts & SL__ERASE_DERIVED)))
    rc = delete_listed(e, e->derived, prefix, &out->objects, err, errlen);
  return rc;
}

int sl__erasure_rkey(const char *sid, char out[SL__ERASURE_RKEY_MAX]) {
  char dk[SL_DKEY_RKEY_MAX];
  if (sl_dkey_rkey(sid, dk) != 0) return SL_EINVAL;
  snprintf(out, SL__ERASURE_RKEY_MAX, "sl:erasure:%s", dk + sizeof "sl:dk:" - 1);
  return 0;
}

/* The state record: state and the fields after it (name, value pairs, NULL
 * ended), kept crypto.erased_ttl_s; "erasing" never replaces "erased". */
static const char record_lua[] = SL__ERASURE_RECORD_LUA;

static int record(const sl__eraser *e, const char *sid, const char *state, const char *const *kv,
                  char *err, size_t errlen) {
  char rkey[SL__ERASURE_RKEY_MAX], ttl[24];
  if (sl__erasure_rkey(sid, rkey) != 0) return SL_EINVAL;
  snprintf(ttl, sizeof ttl, "%lld", (long long)sl_dkey_erased_ttl_s());
  const char *argv[16] = {"EVAL", record_lua, "1", rkey, ttl, state};
  int argc = 6;
  for (; kv && kv[argc - 6] && argc < 16; argc++) argv[argc] = kv[argc - 6];
  redisReply *r = cmd(e, argc, argv, err, errlen);
  freeReplyObject(r);
  return r ? 0 : SL_EREDIS;
}

/* DEL of one key: 1 when it was there */
static int del(const sl__eraser *e, const char *key, char *err, size_t errlen) {
  const char *argv[] = {"DEL", key};
  redisReply *r = cmd(e, 2, argv, err, errlen);
  int n = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
  freeReplyObject(r);
  return n;
}

/* Every key SCAN finds for pattern for which keep(value) says so (NULL:
 * all of them), deleted; -1 on a Redis error. */
static long scan_delete(const sl__eraser *e, const char *pattern, const char *needle, char *err,
                        size_t errlen) {
  char cursor[32] = "0";
  long n = 0;
  do {
    const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
    redisReply *r = cmd(e, 6, argv, err, errlen);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      freeReplyObject(r);
      return -1;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str ? r->element[0]->str : "0");
    const redisReply *ks = r->element[1];
    for (size_t i = 0; i < ks->elements; i++) {
      const char *k = ks->element[i]->str;
      if (needle) { /* only a key whose value names it */
        const char *get[] = {"GET", k};
        redisReply *v = cmd(e, 2, get, err, errlen);
        int names = v && v->type == REDIS_REPLY_STRING && strstr(v->str, needle);
        freeReplyObject(v);
        if (!names) continue;
      }
      int d = del(e, k, err, errlen);
      if (d < 0) {
        freeReplyObject(r);
        return -1;
      }
      n += d;
    }
    freeReplyObject(r);
  } while (strcmp(cursor, "0") != 0);
  return n;
}

/* its members of the bucket's pending set (ZSCAN: scored by time) */
static long pending_delete(const sl__eraser *e, const char *pending, const char *sid, char *err,
                           size_t errlen) {
  char cursor[32] = "0", pattern[96];
  snprintf(pattern, sizeof pattern, "%s/*", sid);
  long n = 0;
  do {
    const char *argv[] = {"ZSCAN", pending, cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
    redisReply *r = cmd(e, 7, argv, err, errlen);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      freeReplyObject(r);
      return -1;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str ? r->element[0]->str : "0");
    const redisReply *ms = r->element[1]; /* member, score, member, score ... */
    for (size_t i = 0; i + 1 < ms->elements; i += 2) {
      const char *zrem[] = {"ZREM", pending, ms->element[i]->str};
      redisReply *z = cmd(e, 3, zrem, err, errlen);
      n += z && z->type == REDIS_REPLY_INTEGER ? z->integer : 0;
      freeReplyObject(z);
    }
    freeReplyObject(r);
  } while (strcmp(cursor, "0") != 0);
  return n;
}

/* its entries of the bucket's change feed (capped: read whole) */
static long feed_delete(const sl__eraser *e, const char *feed, const char *hkey, char *err,
                        size_t errlen) {
  const char *argv[] = {"XRANGE", feed, "-", "+"};
  redisReply *r = cmd(e, 4, argv, err, errlen);
  if (!r) return -1;
  long n = 0;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    const redisReply *en = r->element[i]; /* [id, [field, value, ...]] */
    if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
    const redisReply *fv = en->element[1];
    int ours = 0;
    for (size_t j = 0; j + 1 < fv->elements; j += 2)
      ours |= strcmp(fv->element[j]->str, "k") == 0 && strcmp(fv->element[j + 1]->str, hkey) == 0;
    if (!ours) continue;
    const char *xdel[] = {"XDEL", feed, en->element[0]->str};
    redisReply *x = cmd(e, 3, xdel, err, errlen);
    n += x && x->type == REDIS_REPLY_INTEGER ? x->integer : 0;
    freeReplyObject(x);
  }
  freeReplyObject(r);
  return n;
}

/* 3. the Redis keys; the tenant and the owner read from the view before it
 * goes (the owner into the state record, to follow it by) */
static int delete_redis(const sl__eraser *e, const char *sid, sl__erased *out, char *tenant,
                        size_t tlen, char *err, size_t errlen) {
  char hkey[SL__VIEW_KEY_MAX], pending[SL__VIEW_KEY_MAX], feed[SL__VIEW_KEY_MAX], pat[128];
  int bucket = sl_rkey_bucket(sid, strlen(sid));
  sl__view_sub_key(hkey, sizeof hkey, sid);
  sl__view_key(pending, sizeof pending, SL__PENDING, bucket);
  sl__view_key(feed, sizeof feed, SL__VIEW_FEED, bucket);
  const char *hget[] = {"HMGET", hkey, "tenant", "user"};
  redisReply *t = cmd(e, 4, hget, err, errlen);
  if (t && t->type == REDIS_REPLY_ARRAY && t->elements == 2) {
    if (t->element[0]->type == REDIS_REPLY_STRING) snprintf(tenant, tlen, "%s", t->element[0]->str);
    if (t->element[1]->type == REDIS_REPLY_STRING) {
      const char *kv[] = {"user", t->element[1]->str, NULL};
      if (record(e, sid, "erasing", kv, err, errlen) != 0) {
        freeReplyObject(t);
        return SL_EREDIS;
      }
    }
  }
  freeReplyObject(t);
  long p = pending_delete(e, pending, sid, err, errlen);
  long f = p < 0 ? -1 : feed_delete(e, feed, hkey, err, errlen);
  snprintf(pat, sizeof pat, "sl:*%s*", sid); /* the view and every key that names it */
  long k = f < 0 ? -1 : scan_delete(e, pat, NULL, err, errlen);
  char needle[80];
  snprintf(needle, sizeof needle, "\"%s\"", sid); /* presign's record of a create answers with it */
  long pk = k < 0 ? -1 : scan_delete(e, "sl:idem:presign:*", needle, err, errlen);
  if (pk < 0) return SL_EREDIS;
  out->redis_keys += (unsigned)(k + pk);
  out->feed_entries += (unsigned)f;
  return 0;
}

/* 4. the audit record */
static int audit(const sl__eraser *e, const char *sid, const char *actor, const char *reason,
                 const char *tenant, sl__erased *out, char *err, size_t errlen) {
  Sluice__V1__ErasureAudit a = SLUICE__V1__ERASURE_AUDIT__INIT;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int64_t now = sl_now_ms();
  sl_uuid7(now, out->audit_id);
  a.id = out->audit_id;
  a.submission_id = (char *)sid;
  a.actor = (char *)actor;
  a.host = host;
  a.at_ms = now;
  a.reason = (char *)reason;
  a.key_destroyed = out->key_destroyed;
  a.objects_deleted = out->objects;
  a.redis_keys_deleted = out->redis_keys;
  a.feed_entries_deleted = out->feed_entries;
  a.tenant = (char *)tenant;
  size_t n = sluice__v1__erasure_audit__get_packed_size(&a);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return SL_ENOMEM;
  sluice__v1__erasure_audit__pack(&a, buf);
  int rc = e->produce(e->produce_ud, e->audit_topic, sid, buf, n, err, errlen);
  free(buf);
  return rc;
}

/* A retention of parts: their objects, and the record of it. */
static int erase_parts(const sl__eraser *e, const char *sid, unsigned parts, const char *actor,
                       sl__erased *out, char *err, size_t errlen) {
  char why[512] = "";
  int rc = delete_objects(e, sid, parts, out, why, sizeof why);
  const char *reason = parts == SL__ERASE_AUDIO     ? "retention:audio"
                       : parts == SL__ERASE_DERIVED ? "retention:derived"
                                                    : "retention:objects";
  if (rc == 0) rc = audit(e, sid, actor, reason, "", out, why, sizeof why);
  if (rc) {
    snprintf(err, errlen, "%s: %s", reason, why[0] ? why : sl_strerror(rc));
    return rc;
  }
  sl_log(SL_LOG_INFO, sid, "%s: %u object(s) deleted", reason, out->objects);
  return 0;
}

int sl__erase(const sl__eraser *e, const char *sid, unsigned parts, const char *actor,
              const char *reason, sl__erased *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char rkey[SL_DKEY_RKEY_MAX], tenant[128] = "";
  if (!e || !sid || sl_dkey_rkey(sid, rkey) != 0 || !actor || !reason ||
      (parts & ~(SL__ERASE_AUDIO | SL__ERASE_DERIVED))) {
    snprintf(err, errlen, "not a submission id");
    return SL_EINVAL;
  }
  if (parts) return erase_parts(e, sid, parts, actor, out, err, errlen);
  char why[512] = "";
  int rc = record(e, sid, "erasing", NULL, why, sizeof why);
  if (rc == 0) rc = destroy_key(e, sid, why, sizeof why);
  if (rc) {
    snprintf(err, errlen, "destroying its data key: %s", why[0] ? why : sl_strerror(rc));
    return rc;
  }
  out->key_destroyed = 1;
  if ((rc = delete_objects(e, sid, 0, out, why, sizeof why)) != 0) {
    snprintf(err, errlen, "deleting its objects: %s", why[0] ? why : sl_strerror(rc));
    return rc;
  }
  if ((rc = delete_redis(e, sid, out, tenant, sizeof tenant, why, sizeof why)) != 0) {
    snprintf(err, errlen, "deleting its Redis keys: %s", why[0] ? why : sl_strerror(rc));
    return rc;
  }
  if ((rc = audit(e, sid, actor, reason, tenant, out, why, sizeof why)) != 0) {
    snprintf(err, errlen, "recording the erasure: %s", why[0] ? why : sl_strerror(rc));
    return rc;
  }
  char at[24], objects[16];
  snprintf(at, sizeof at, "%lld", (long long)sl_now_ms());
  snprintf(objects, sizeof objects, "%u", out->objects);
  const char *kv[] = {"erased_at_ms", at, "objects", objects, "audit_id", out->audit_id, NULL};
  if ((rc = record(e, sid, "erased", kv, why, sizeof why)) != 0) {
    snprintf(err, errlen, "recording its state: %s", why[0] ? why : sl_strerror(rc));
    return rc;
  }
  sl_log(SL_LOG_INFO, sid, "erased by %s (%s): key destroyed, %u object(s), %u Redis key(s)", actor,
         reason, out->objects, out->redis_keys);
  return 0;
}
