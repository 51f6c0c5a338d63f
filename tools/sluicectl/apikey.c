/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apikey.c — `sluicectl apikey add|list|revoke`: the API keys presign and
 * results accept (stages/lib/auth.h).
 *
 * A key is "slk_" + 64 hex digits (256 random bits, sl_random_hex). It is
 * printed once, by add; Redis keeps only its SHA-256, as the hash
 * sl:apikey:<sha256 hex> {user, label, created_ms}. The key's id is the
 * first 12 hex digits of that digest: list shows ids, revoke takes the key
 * itself or an id (a unique prefix of at least 12 digits), and publishes
 * the deleted record's Redis key on SL__APIKEY_REVOKED_CHANNEL in the same
 * script, which is how presign's API-key cache learns of it at once.
 *
 * Redis is not where a key lives, only where it is looked up: add and
 * revoke first write the record (revoke: a tombstone) to the pipeline's
 * compacted API-key topic (sl_pipeline_apikeys), keyed by the digest, and
 * change Redis only once Kafka acknowledged it. presign rebuilds the store
 * from that topic after Redis lost it (stages/presign/keystore.h); writing
 * Kafka first means a rebuild replaying the topic can never bring back a
 * key whose revocation it did not see (the DEL comes after the tombstone).
 */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../../stages/lib/auth.h" /* SL__APIKEY_REVOKED_CHANNEL */
#include "sluicectl.h"
#include "sluice/sl_id.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_redis.h"

static int user_ok(const char *u) {
  size_t n = strlen(u);
  if (n == 0 || n > 128) return 0;
  for (size_t i = 0; i < n; i++)
    if (u[i] <= 0x20 || u[i] >= 0x7f) return 0;
  return 1;
}

/* Writes the record of digest h (json, or NULL: the tombstone of a
 * revocation) to the API-key topic and waits for Kafka's acknowledgement.
 * 0, or -1 with the reason printed. */
static int publish(const sc_opts *o, const char *h, const char *json) {
  const char *topic = sl_pipeline_apikeys(o->pipeline);
  sc_producer p;
  if (!topic || sc_producer_open(o, &p) != 0) {
    fprintf(stderr, "sluicectl: cannot reach Kafka to record the key\n");
    return -1;
  }
  sc_delivery d;
  int rc = sc_produce(&p, topic, h, strlen(h), json, json ? strlen(json) : 0, NULL, NULL, &d);
  if (rc == 0) sc_producer_wait(&p, o->timeout_ms, NULL);
  if (rc != 0 || !d.done || d.err) {
    fprintf(stderr, "sluicectl: recording the key on topic %s failed: %s\n", topic,
            d.done ? rd_kafka_err2str(d.err) : "no acknowledgement in time");
    rc = -1;
  }
  sc_producer_close(&p);
  return rc;
}

int sc_apikey_add(const sc_opts *o) {
  if (!o->user || !user_ok(o->user)) {
    fprintf(stderr, "sluicectl: apikey add needs --user ID (1..128 printable characters, no "
                    "spaces)\n");
    return SC_EXIT_USAGE;
  }
  if (o->label && strlen(o->label) > 200) {
    fprintf(stderr, "sluicectl: --label is at most 200 bytes\n");
    return SC_EXIT_USAGE;
  }
  char key[4 + 64 + 1], h[65], rkey[80], created[24], whsec[6 + 64 + 1];
  memcpy(key, "slk_", 4);
  memcpy(whsec, "whsec_", 6);
  if (sl_random_hex(32, key + 4, sizeof key - 4) != 0 ||
      sl_random_hex(32, whsec + 6, sizeof whsec - 6) != 0) {
    fprintf(stderr, "sluicectl: the random source failed\n");
    return SC_EXIT_FAIL;
  }
  sl_sha256_hex(key, strlen(key), h);
  sl__apikey_rkey_of(h, rkey);
  snprintf(created, sizeof created, "%lld", (long long)sl_now_ms());
  /* the key's record in Kafka first: what the store is rebuilt from */
  json_t *rec =
      json_pack("{s:s,s:s,s:I,s:s}", "user", o->user, "label", o->label ? o->label : "",
                "created_ms", (json_int_t)strtoll(created, NULL, 10), "webhook_secret", whsec);
  char *rec_s = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
  json_decref(rec);
  int pub = rec_s ? publish(o, h, rec_s) : -1;
  if (rec_s) OPENSSL_cleanse(rec_s, strlen(rec_s));
  free(rec_s);
  if (pub != 0) {
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(whsec, sizeof whsec);
    return SC_EXIT_FAIL;
  }
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) {
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(whsec, sizeof whsec);
    return SC_EXIT_FAIL;
  }
  char rerr[256] = "";
  const char *argv[] = {"HSET",       rkey,    "user",  o->user, "label", o->label ? o->label : "",
                        "created_ms", created, "whsec", whsec};
  redisReply *r = sl_redis_argv(c, 10, argv, NULL, rerr, sizeof rerr);
  int ok = r && r->type == REDIS_REPLY_INTEGER;
  if (!ok)
    fprintf(stderr, "sluicectl: storing the key failed: %s\n",
            r && r->type == REDIS_REPLY_ERROR ? r->str : rerr);
  freeReplyObject(r);
  sl_redis_free(c);
  if (!ok) {
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(whsec, sizeof whsec);
    return SC_EXIT_FAIL;
  }
  if (o->json) {
    char id[13];
    snprintf(id, sizeof id, "%.12s", h);
    json_t *j = json_pack("{s:s,s:s,s:s,s:s}", "key", key, "id", id, "user", o->user,
                          "webhook_secret", whsec);
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    printf("%s\n", t ? t : "{}");
    if (t) OPENSSL_cleanse(t, strlen(t));
    free(t);
    json_decref(j);
  } else {
    printf("%s\n", key);
    /* stdout stays the key alone: SLUICE_API_KEY=$(sluicectl apikey add ...) */
    fprintf(stderr, "sluicectl: webhook signing secret of this key (shown only now): %s\n", whsec);
  }
  fprintf(stderr, "sluicectl: API key %.12s for user %s created; it is shown only now\n", h,
          o->user);
  OPENSSL_cleanse(key, sizeof key);
  OPENSSL_cleanse(whsec, sizeof whsec);
  return SC_EXIT_OK;
}

/* Calls fn for every sl:apikey:* key whose digest starts with prefix. */
static int scan(sl_redis *c, const char *prefix, int (*fn)(sl_redis *, const char *, void *),
                void *arg) {
  char cursor[32] = "0", match[96];
  snprintf(match, sizeof match, "%s%s*", sl__apikey_prefix(), prefix);
  do {
    char rerr[256] = "";
    const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "500"};
    redisReply *r = sl_redis_argv(c, 6, argv, NULL, rerr, sizeof rerr);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      fprintf(stderr, "sluicectl: SCAN failed: %s\n",
              r && r->type == REDIS_REPLY_ERROR ? r->str : rerr);
      freeReplyObject(r);
      return SC_EXIT_FAIL;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    for (size_t i = 0; i < r->element[1]->elements; i++)
      if (fn(c, r->element[1]->element[i]->str, arg) != 0) {
        freeReplyObject(r);
        return SC_EXIT_FAIL;
      }
    freeReplyObject(r);
  } while (strcmp(cursor, "0") != 0);
  return SC_EXIT_OK;
}

static int list_one(sl_redis *c, const char *rkey, void *arg) {
  json_t *arr = arg;
  char rerr[256] = "";
  const char *argv[] = {"HMGET", rkey, "user", "label", "created_ms"};
  redisReply *r = sl_redis_argv(c, 5, argv, NULL, rerr, sizeof rerr);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
    freeReplyObject(r);
    return -1;
  }
  const char *f[3];
  for (int i = 0; i < 3; i++)
    f[i] = r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "";
  char id[13];
  snprintf(id, sizeof id, "%.12s", rkey + strlen(sl__apikey_prefix()));
  json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:I}", "id", id, "user", f[0], "label", f[1],
                                       "created_ms", (json_int_t)strtoll(f[2], NULL, 10)));
  freeReplyObject(r);
  return 0;
}

int sc_apikey_list(const sc_opts *o) {
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return SC_EXIT_FAIL;
  json_t *arr = json_array();
  int rc = scan(c, "", list_one, arr);
  sl_redis_free(c);
  if (rc == SC_EXIT_OK) {
    if (o->json) {
      char *s = json_dumps(arr, JSON_COMPACT);
      printf("%s\n", s ? s : "[]");
      free(s);
    } else {
      printf("%-12s  %-24s  %-20s  %s\n", "ID", "USER", "CREATED", "LABEL");
      size_t i;
      json_t *e;
      json_array_foreach(arr, i, e) {
        char t[40];
        sc_fmt_time_s(json_integer_value(json_object_get(e, "created_ms")), t);
        printf("%-12s  %-24s  %-20s  %s\n", json_string_value(json_object_get(e, "id")),
               json_string_value(json_object_get(e, "user")), t,
               json_string_value(json_object_get(e, "label")));
      }
    }
  }
  json_decref(arr);
  return rc;
}

typedef struct {
  char found[80];
  int n;
} match_t;

static int collect(sl_redis *c, const char *rkey, void *arg) {
  (void)c;
  match_t *m = arg;
  if (m->n++ == 0) snprintf(m->found, sizeof m->found, "%s", rkey);
  return 0;
}

/* 1 when the key store is marked complete (presign rebuilt it or it was
 * never lost). */
static int marked(sl_redis *c) {
  char rerr[256] = "";
  const char *argv[] = {"EXISTS", SL__APIKEY_MARKER};
  redisReply *r = sl_redis_argv(c, 2, argv, NULL, rerr, sizeof rerr);
  int yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return yes;
}

static const char revoke_lua[] = "if redis.call('DEL', KEYS[1]) == 0 then return 0 end\n"
                                 "redis.call('PUBLISH', ARGV[1], KEYS[1])\n"
                                 "return 1\n";

/* The digest prefix the key or id o->args[0] names: SC_EXIT_OK, or
 * SC_EXIT_USAGE (printed). */
static int prefix_of(const sc_opts *o, char prefix[65]);
/* The one record whose digest starts with prefix into found: SC_EXIT_OK or
 * SC_EXIT_FAIL (printed). */
static int find_one(sl_redis *c, const char *prefix, char found[80]);

/* `apikey rotate-secret KEY-OR-ID`: a new webhook signing secret for the
 * key, printed once; the old one stays valid beside it (deliveries carry a
 * signature with each) until the next rotation. Kafka first, as add. */
int sc_apikey_rotate_secret(const sc_opts *o) {
  char prefix[65], found[80], rerr[256] = "", whsec[6 + 64 + 1];
  if (prefix_of(o, prefix) != SC_EXIT_OK) return SC_EXIT_USAGE;
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return SC_EXIT_FAIL;
  int rc = find_one(c, prefix, found);
  redisReply *r = NULL;
  if (rc == SC_EXIT_OK) {
    const char *argv[] = {"HMGET", found, "user", "label", "created_ms", "whsec"};
    r = sl_redis_argv(c, 6, argv, NULL, rerr, sizeof rerr);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
      fprintf(stderr, "sluicectl: reading the key failed: %s\n", rerr[0] ? rerr : "no record");
      rc = SC_EXIT_FAIL;
    }
  }
  memcpy(whsec, "whsec_", 6);
  if (rc == SC_EXIT_OK && sl_random_hex(32, whsec + 6, sizeof whsec - 6) != 0) {
    fprintf(stderr, "sluicectl: the random source failed\n");
    rc = SC_EXIT_FAIL;
  }
  if (rc == SC_EXIT_OK) {
    const char *f[4];
    for (int i = 0; i < 4; i++)
      f[i] = r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "";
    json_t *rec = json_pack("{s:s,s:s,s:I,s:s,s:s}", "user", f[0], "label", f[1], "created_ms",
                            (json_int_t)strtoll(f[2], NULL, 10), "webhook_secret", whsec,
                            "webhook_secret_previous", f[3]);
    char *rec_s = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (!rec_s || publish(o, found + strlen(sl__apikey_prefix()), rec_s) != 0) rc = SC_EXIT_FAIL;
    if (rec_s) OPENSSL_cleanse(rec_s, strlen(rec_s));
    free(rec_s);
    if (rc == SC_EXIT_OK) {
      const char *argv[] = {"HSET", found, "whsec", whsec, "whsec_prev", f[3]};
      redisReply *w = sl_redis_argv(c, 6, argv, NULL, rerr, sizeof rerr);
      if (!w || w->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "sluicectl: storing the secret failed: %s\n",
                w && w->type == REDIS_REPLY_ERROR ? w->str : rerr);
        rc = SC_EXIT_FAIL;
      }
      freeReplyObject(w);
    }
  }
  freeReplyObject(r);
  sl_redis_free(c);
  if (rc == SC_EXIT_OK) {
    printf("%s\n", whsec);
    fprintf(stderr,
            "sluicectl: new webhook signing secret of key %.12s (shown only now); the previous "
            "one still signs beside it until the next rotation\n",
            found + strlen(sl__apikey_prefix()));
  }
  OPENSSL_cleanse(whsec, sizeof whsec);
  return rc;
}

static int prefix_of(const sc_opts *o, char prefix[65]) {
  const char *what = o->args[0];
  size_t n = strlen(what);
  if (n == 68 && strncmp(what, "slk_", 4) == 0) {
    sl_sha256_hex(what, n, prefix);
  } else {
    int ok = n >= 12 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
      ok = (what[i] >= '0' && what[i] <= '9') || (what[i] >= 'a' && what[i] <= 'f');
    if (!ok) {
      fprintf(stderr, "sluicectl: apikey wants the key (slk_...) or its id (12 to 64 hex "
                      "digits, as apikey list shows)\n");
      return SC_EXIT_USAGE;
    }
    snprintf(prefix, 65, "%s", what);
  }
  return SC_EXIT_OK;
}

static int find_one(sl_redis *c, const char *prefix, char found[80]) {
  match_t m = {.n = 0};
  int rc = scan(c, prefix, collect, &m);
  if (rc == SC_EXIT_OK && m.n != 1) {
    fprintf(stderr, "sluicectl: %s API key matches %s\n", m.n ? "more than one" : "no",
            m.n ? "that id; give more digits" : "that key or id");
    if (!m.n && !marked(c))
      fprintf(stderr,
              "sluicectl: the key store is being rebuilt after a Redis loss (%s is "
              "missing); retry in a moment\n",
              SL__APIKEY_MARKER);
    rc = SC_EXIT_FAIL;
  }
  snprintf(found, 80, "%s", m.found);
  return rc;
}

int sc_apikey_revoke(const sc_opts *o) {
  char prefix[65];
  if (prefix_of(o, prefix) != SC_EXIT_OK) return SC_EXIT_USAGE;
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return SC_EXIT_FAIL;
  match_t m = {.n = 0};
  int rc = find_one(c, prefix, m.found);
  /* the tombstone first: a rebuild must not bring the key back */
  if (rc == SC_EXIT_OK && publish(o, m.found + strlen(sl__apikey_prefix()), NULL) != 0)
    rc = SC_EXIT_FAIL;
  if (rc == SC_EXIT_OK) {
    char rerr[256] = "";
    /* deleted and announced at once: presign's cache drops the key when the
     * message arrives (stages/presign/keycache.h) */
    const char *argv[] = {"EVAL", revoke_lua, "1", m.found, SL__APIKEY_REVOKED_CHANNEL};
    redisReply *r = sl_redis_argv(c, 5, argv, NULL, rerr, sizeof rerr);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
      fprintf(stderr, "sluicectl: revoking failed: %s\n",
              r && r->type == REDIS_REPLY_ERROR ? r->str : rerr);
      rc = SC_EXIT_FAIL;
    } else {
      /* 0: the key was already gone: a rebuild of the store replayed the
       * tombstone written above (and told the caches), or another revoke
       * won: revoked all the same */
      printf("revoked %.12s\n", m.found + strlen(sl__apikey_prefix()));
    }
    freeReplyObject(r);
  }
  sl_redis_free(c);
  return rc;
}
