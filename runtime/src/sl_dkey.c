/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_dkey.c — submissions' data keys: wrapping by the key-encryption key,
 * their Redis names, what a lookup answered, and the mirror's apply (see
 * sl_dkey.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_dkey.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

#define AAD_PREFIX "sluice-dk-v1"

static uint8_t kek[SL_SEAL_KEY_LEN];
static int enabled;
static unsigned kek_gen = 1; /* a new KEK makes the memo's keys stale (memo_entry) */
static int64_t erased_ttl_s = 2592000;

/* a record applies unless an erasure left its sentinel */
static const char apply_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[2] then return 0 end\n"
                                "redis.call('SET', KEYS[1], ARGV[1])\n"
                                "return 1\n";
static sl_redis_script apply_s;

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int sl_dkey_setup(const char *kek_hex, int64_t ttl_s) {
  if (ttl_s <= 0) return SL_EINVAL;
  if (!kek_hex || !*kek_hex) {
    enabled = 0;
    erased_ttl_s = ttl_s;
    return 0;
  }
  if (strlen(kek_hex) != 2 * SL_SEAL_KEY_LEN) return SL_EINVAL;
  uint8_t k[SL_SEAL_KEY_LEN];
  for (int i = 0; i < SL_SEAL_KEY_LEN; i++) {
    int hi = hexval(kek_hex[2 * i]), lo = hexval(kek_hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      OPENSSL_cleanse(k, sizeof k);
      return SL_EINVAL;
    }
    k[i] = (uint8_t)(hi << 4 | lo);
  }
  memcpy(kek, k, sizeof kek);
  OPENSSL_cleanse(k, sizeof k);
  enabled = 1;
  kek_gen++;
  erased_ttl_s = ttl_s;
  sl_redis_script_init(&apply_s, apply_lua);
  return 0;
}

int sl_dkey_enabled(void) { return enabled; }
int64_t sl_dkey_erased_ttl_s(void) { return erased_ttl_s; }

static int sid_ok(const char *sid, size_t n) {
  return n > 0 && n <= SL_DKEY_SID_MAX && !memchr(sid, '/', n) && !memchr(sid, '\0', n);
}

/* What the process worked out last for recent submissions, so that a
 * submission's other messages skip it: the Redis key's name (a SHA-256)
 * and the unwrap of the very bytes Redis answered (an AES-GCM open). Only
 * a memo: a lookup still goes to Redis and its answer decides (a sentinel
 * or nothing wipes the entry's key), or the step that writes checks the
 * key Redis holds (sl_dkey_cached); an entry is wiped when another
 * submission takes its place. MEMO entries in sets of MEMO_WAYS, the set
 * chosen by the id's CRC16, the least recently used of a full set taken
 * over (a stage's backlog interleaves thousands of submissions: 64 slots
 * per thread, before, found their keys a second time too rarely to
 * matter, bench/cost); about 200 bytes each, made at the first use;
 * MEMO_LOCKS mutexes, each guarding every MEMO_LOCKS-th set. */
#define MEMO 4096
#define MEMO_WAYS 4
#define MEMO_SETS (MEMO / MEMO_WAYS)
#define MEMO_LOCKS 64
typedef struct {
  char sid[SL_DKEY_SID_MAX + 1];
  char digest[33];  /* the name's part after the tag, "" until worked out */
  unsigned have_dk; /* the KEK's generation its dk was unwrapped with; 0: none */
  unsigned used;    /* its set's tick when it was last found or taken */
  uint8_t wrapped[SL_DKEY_WRAPPED_LEN];
  uint8_t dk[SL_SEAL_KEY_LEN];
} memo_entry;
static memo_entry *memo;    /* NULL: none (out of memory): worked out every time */
static unsigned *memo_tick; /* per set, under its lock */
static pthread_mutex_t memo_mu[MEMO_LOCKS];
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;

static void memo_init(void) {
  for (int i = 0; i < MEMO_LOCKS; i++) pthread_mutex_init(&memo_mu[i], NULL);
  memo = calloc(MEMO, sizeof *memo);
  memo_tick = calloc(MEMO_SETS, sizeof *memo_tick);
  if (!memo_tick) {
    free(memo);
    memo = NULL;
  }
}

/* sid's set (n its length) locked, and its entry for sid, else the one to
 * take over for it (an empty one, or the least recently used); NULL: no
 * memo. The caller compares the entry's sid. */
static memo_entry *memo_lock(const char *sid, size_t n) {
  pthread_once(&memo_once, memo_init);
  if (!memo) return NULL;
  unsigned set = sl_slot_crc16(sid, n) % MEMO_SETS;
  pthread_mutex_lock(&memo_mu[set % MEMO_LOCKS]);
  memo_entry *ways = &memo[set * MEMO_WAYS], *victim = &ways[0];
  for (int i = 0; i < MEMO_WAYS; i++) {
    if (strcmp(ways[i].sid, sid) == 0) {
      ways[i].used = ++memo_tick[set];
      return &ways[i];
    }
    if (!victim->sid[0]) continue; /* an empty one is kept */
    if (!ways[i].sid[0] || memo_tick[set] - ways[i].used > memo_tick[set] - victim->used)
      victim = &ways[i]; /* empty, or older (ages, as the tick wraps) */
  }
  return victim;
}

static void memo_unlock(const memo_entry *e) {
  if (e) pthread_mutex_unlock(&memo_mu[(size_t)(e - memo) / MEMO_WAYS % MEMO_LOCKS]);
}

/* Forgets e's key (its name stays). */
static void memo_wipe_key(memo_entry *e) {
  e->have_dk = 0;
  OPENSSL_cleanse(e->wrapped, sizeof e->wrapped);
  OPENSSL_cleanse(e->dk, sizeof e->dk);
}

/* sid's entry, locked and taken over for it when another held it */
static memo_entry *memo_of(const char *sid, size_t n) {
  memo_entry *e = memo_lock(sid, n);
  if (e && strcmp(e->sid, sid) != 0) {
    size_t set = (size_t)(e - memo) / MEMO_WAYS;
    OPENSSL_cleanse(e, sizeof *e);
    memcpy(e->sid, sid, n + 1);
    e->used = ++memo_tick[set];
  }
  return e;
}

int sl_dkey_rkey(const char *sid, char out[SL_DKEY_RKEY_MAX]) {
  size_t n = sid ? strlen(sid) : 0;
  if (!sid || !sid_ok(sid, n)) return SL_EINVAL;
  const char *tag = sl_rkey_tag_of(sid, n); /* redis.buckets: "" or "{b-n}" */
  size_t t = strlen(tag);
  if (6 + t + 32 >= SL_DKEY_RKEY_MAX) return SL_EINVAL;
  char hex[65];
  memo_entry *e = memo_of(sid, n);
  if (e && e->digest[0]) {
    memcpy(hex, e->digest, 33);
  } else {
    if (sl_sha256_hex(sid, n, hex) != 0) {
      memo_unlock(e);
      return SL_EINVAL;
    }
    hex[32] = '\0'; /* 128 bits name it well enough */
    if (e) memcpy(e->digest, hex, 33);
  }
  memo_unlock(e);
  memcpy(out, "sl:dk:", 6);
  memcpy(out + 6, tag, t);
  memcpy(out + 6 + t, hex, 33);
  return 0;
}

/* "sluice-dk-v1\0<sid>" into aad: its length */
static size_t aad_of(const char *sid, char aad[sizeof AAD_PREFIX + SL_DKEY_SID_MAX + 1]) {
  size_t n = strlen(sid);
  memcpy(aad, AAD_PREFIX, sizeof AAD_PREFIX); /* its NUL included */
  memcpy(aad + sizeof AAD_PREFIX, sid, n);
  return sizeof AAD_PREFIX + n;
}

int sl_dkey_new(const char *sid, uint8_t dk[SL_SEAL_KEY_LEN],
                uint8_t wrapped[SL_DKEY_WRAPPED_LEN]) {
  if (!enabled) return SL_ESTATE;
  if (!sid || !sid_ok(sid, strlen(sid))) return SL_EINVAL;
  int rc = sl_seal_key_new(dk);
  char aad[sizeof AAD_PREFIX + SL_DKEY_SID_MAX + 1];
  size_t n = 0;
  if (rc == 0)
    rc = sl_seal(kek, aad, aad_of(sid, aad), dk, SL_SEAL_KEY_LEN, wrapped, SL_DKEY_WRAPPED_LEN, &n);
  if (rc == 0 && n != SL_DKEY_WRAPPED_LEN) rc = SL_ECRYPTO;
  if (rc) OPENSSL_cleanse(dk, SL_SEAL_KEY_LEN);
  return rc;
}

int sl_dkey_from_reply(const redisReply *r, const char *sid, uint8_t dk[SL_SEAL_KEY_LEN]) {
  if (!enabled) return SL_ESTATE;
  if (!sid || !sid_ok(sid, strlen(sid))) return SL_EINVAL;
  if (!r || r->type == REDIS_REPLY_ERROR) return SL_EREDIS;
  if (r->type == REDIS_REPLY_NIL) return SL_ENOTFOUND;
  if (r->type != REDIS_REPLY_STRING) return SL_EREDIS;
  return sl_dkey_open(r->str, r->len, sid, dk);
}

int sl_dkey_open(const char *v, size_t len, const char *sid, uint8_t dk[SL_SEAL_KEY_LEN]) {
  if (!enabled) return SL_ESTATE;
  if (!sid || !sid_ok(sid, strlen(sid))) return SL_EINVAL;
  size_t n = strlen(sid);
  memo_entry *e = memo_of(sid, n);
  if (!v || !len || (len == sizeof SL_DKEY_ERASED - 1 && memcmp(v, SL_DKEY_ERASED, len) == 0)) {
    if (e) memo_wipe_key(e);
    memo_unlock(e);
    return v && len ? SL_EERASED : SL_ENOTFOUND;
  }
  if (e && e->have_dk == kek_gen && len == SL_DKEY_WRAPPED_LEN && memcmp(e->wrapped, v, len) == 0) {
    memcpy(dk, e->dk, SL_SEAL_KEY_LEN); /* the same bytes as last time: the same key */
    memo_unlock(e);
    return 0;
  }
  memo_unlock(e); /* the unwrap outside the lock */
  e = NULL;
  char aad[sizeof AAD_PREFIX + SL_DKEY_SID_MAX + 1];
  size_t got = 0;
  int rc =
      sl_seal_open(kek, aad, aad_of(sid, aad), (const uint8_t *)v, len, dk, SL_SEAL_KEY_LEN, &got);
  if (rc == SL_EPARSE || rc == SL_ETOOBIG || (rc == 0 && got != SL_SEAL_KEY_LEN)) rc = SL_EAUTH;
  if (rc) {
    OPENSSL_cleanse(dk, SL_SEAL_KEY_LEN);
    return rc;
  }
  if (len == SL_DKEY_WRAPPED_LEN && (e = memo_of(sid, n))) {
    memcpy(e->wrapped, v, len);
    memcpy(e->dk, dk, SL_SEAL_KEY_LEN);
    e->have_dk = kek_gen;
  }
  memo_unlock(e);
  return 0;
}

int sl_dkey_cached(const char *sid, uint8_t wrapped[SL_DKEY_WRAPPED_LEN],
                   uint8_t dk[SL_SEAL_KEY_LEN]) {
  if (!enabled) return SL_ESTATE;
  size_t n = sid ? strlen(sid) : 0;
  if (!sid || !sid_ok(sid, n)) return SL_EINVAL;
  const memo_entry *e = memo_lock(sid, n);
  int rc = e && e->have_dk == kek_gen && strcmp(e->sid, sid) == 0 ? 0 : SL_ENOTFOUND;
  if (rc == 0) {
    memcpy(wrapped, e->wrapped, SL_DKEY_WRAPPED_LEN);
    memcpy(dk, e->dk, SL_SEAL_KEY_LEN);
  }
  memo_unlock(e);
  return rc;
}

void sl_dkey_forget(const char *sid) {
  size_t n = sid ? strlen(sid) : 0;
  if (!sid || !sid_ok(sid, n)) return;
  memo_entry *e = memo_lock(sid, n);
  if (e && strcmp(e->sid, sid) == 0) memo_wipe_key(e);
  memo_unlock(e);
}

const char *sl_dkey_marker(void) { return sl_rkey_bucketed() ? "sl:dk:{dk}epoch" : "sl:dk:epoch"; }
const char *sl_dkey_lock(void) {
  return sl_rkey_bucketed() ? "sl:lock:{dk}datakey-rebuild" : "sl:lock:datakey-rebuild";
}

int sl_dkey_erase_argv(const char *sid, char buf[SL_DKEY_RKEY_MAX + 32], const char *argv[6]) {
  if (sl_dkey_rkey(sid, buf) != 0) return SL_EINVAL;
  char *ttl = buf + strlen(buf) + 1;
  snprintf(ttl, 24, "%lld", (long long)erased_ttl_s);
  argv[0] = "SET";
  argv[1] = buf;
  argv[2] = SL_DKEY_ERASED;
  argv[3] = "EX";
  argv[4] = ttl;
  argv[5] = NULL;
  return 0;
}

int sl_dkey_apply(void *ud, sl_redis *r, const rd_kafka_message_t *m) {
  (void)ud;
  char sid[SL_DKEY_SID_MAX + 1], buf[SL_DKEY_RKEY_MAX + 32], err[256];
  if (!m->key || !sid_ok(m->key, m->key_len) || (m->payload && m->len != SL_DKEY_WRAPPED_LEN)) {
    sl_log(SL_LOG_WARN, NULL, "data-key store: %s [%d] at %lld is not a data key: skipped",
           rd_kafka_topic_name(m->rkt), (int)m->partition, (long long)m->offset);
    return 0;
  }
  memcpy(sid, m->key, m->key_len);
  sid[m->key_len] = '\0';
  redisReply *rep;
  if (!m->payload) { /* erased */
    const char *argv[6];
    sl_dkey_erase_argv(sid, buf, argv);
    rep = sl_redis_argv(r, 5, argv, NULL, err, sizeof err);
  } else {
    sl_dkey_rkey(sid, buf);
    const char *argv[] = {buf, m->payload, SL_DKEY_ERASED};
    size_t lens[] = {strlen(buf), m->len, sizeof SL_DKEY_ERASED - 1};
    rep = sl_redis_eval(r, &apply_s, 1, 3, argv, lens, err, sizeof err);
  }
  int rc = rep && rep->type != REDIS_REPLY_ERROR ? 0 : SL_EREDIS;
  freeReplyObject(rep);
  return rc;
}

void sl_dkey_count_erased_drop(void) {
  static _Atomic(sl_metric *) dropped;
  sl_metric *m = atomic_load(&dropped);
  if (!m) { /* registered once; a race registers the same counter twice */
    m = sl_metrics_counter("sluice_erased_dropped_total", NULL,
                           "inputs dropped because their submission was erased");
    atomic_store(&dropped, m);
  }
  sl_metric_add(m, 1);
}
