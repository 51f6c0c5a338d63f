/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_limiter.c — see sl_limiter.h.
 *
 * GCRA in one Lua script. With T = 1000 / rate ms per token and a tolerance
 * of burst * T, a request of `cost` tokens may go at
 *     allow_at = TAT + T * min(cost, burst) - T * burst
 * where TAT = max(stored TAT, now). If now >= allow_at it goes and the stored
 * TAT becomes TAT + T * cost; otherwise the reply is ceil(allow_at - now) ms
 * and nothing changes. From an empty bucket that lets `burst` unit requests
 * through at once and then one every T ms. min(cost, burst) is what lets a
 * request larger than the whole bucket through once the bucket is full
 * (allow_at = TAT, i.e. TAT <= now) instead of never.
 *
 * The stored TAT expires when the bucket would be full again (PX = TAT - now),
 * which loses nothing: a missing key reads as TAT = now, a full bucket.
 *
 * Everything here except sl_limiter_take/pause is pure (no I/O) and is what
 * an asynchronous caller uses too. The scripts' SHA-1 constants must match
 * their text; test_limiter checks that.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_limiter.h"
#include "sl_limiter_lua.h"
#include "sluice/sl_err.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_slot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* clang-format off */
const char sl_limiter_lua[] =
    SL__LIMITER_ARGS_LUA
    "if KEYS[2] then\n"
    "  local paused = redis.call('PTTL', KEYS[2])\n"
    "  if paused > 0 then return paused end\n"
    "end\n"
    SL__LIMITER_GCRA_LUA;

const char sl_limiter_lua_sha1[] = "42171b606957cf032d2544ecbc7bead18bfdd751";

const char sl_limiter_pause_lua[] =
    "local ms = tonumber(ARGV[1])\n"
    "if not ms or ms ~= ms or ms < 1 or ms == math.huge then\n"
    "  return redis.error_reply('ERR sl_limiter: pause must be a number >= 1 (ms)')\n"
    "end\n"
    "ms = math.min(math.floor(ms), 1e15)\n"
    "local left = redis.call('PTTL', KEYS[1])\n"
    "if left >= ms then return left end\n"
    "redis.call('SET', KEYS[1], '1', 'PX', string.format('%.0f', ms))\n"
    "return ms\n";

const char sl_limiter_pause_lua_sha1[] = "957e009a17af1365b84eef31fabb8a303c5f8c17";
/* clang-format on */

static int provider_ok(const char *p) {
  if (!p) return 0;
  size_t n = strlen(p);
  if (n == 0 || n > SL_LIMITER_PROVIDER_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

/* prefix, then provider and ":<bucket>" (bucket >= 0), in braces when the
 * keyspace is bucketed (redis.buckets > 0: a Redis Cluster) */
static int key_(char *out, size_t len, const char *prefix, const char *provider, int bucket) {
  if (!out) return 0;
  const char *o = sl_rkey_bucketed() ? "{" : "", *c = sl_rkey_bucketed() ? "}" : "";
  char b[16] = "";
  if (bucket >= 0) snprintf(b, sizeof b, ":%d", bucket);
  int n = snprintf(out, len, "%s%s%s%s%s", prefix, o, provider, b, c);
  if (n < 0 || (size_t)n >= len) {
    if (len) out[0] = '\0';
    return SL_ETOOBIG;
  }
  return 0;
}

int sl_limiter_keys_of(const char *provider, int bucket, int buckets, char *limit_key,
                       size_t limit_len, char *pause_key, size_t pause_len) {
  if (!provider_ok(provider) || buckets < 1 || buckets > SL_LIMITER_MAX_BUCKETS || bucket < 0 ||
      bucket >= buckets)
    return SL_EINVAL;
  int rc = key_(limit_key, limit_len, SL_LIMITER_KEY_PREFIX, provider, buckets > 1 ? bucket : -1);
  if (rc == 0) rc = key_(pause_key, pause_len, SL_LIMITER_PAUSE_PREFIX, provider, -1);
  return rc;
}

int sl_limiter_keys(const char *provider, char *limit_key, size_t limit_len, char *pause_key,
                    size_t pause_len) {
  return sl_limiter_keys_of(provider, 0, 1, limit_key, limit_len, pause_key, pause_len);
}

int sl_limiter_pause_in_take(int buckets) { return buckets <= 1 || !sl_rkey_bucketed(); }

int sl_limiter_replica_bucket(int buckets) {
  if (buckets <= 1) return 0;
  char id[96] = "";
  if (gethostname(id, 64) != 0) id[0] = '\0';
  id[64] = '\0';
  size_t n = strlen(id);
  snprintf(id + n, sizeof id - n, ":%ld", (long)getpid());
  return (int)(sl_slot_crc16(id, strlen(id)) % (unsigned)buckets);
}

static int fmt_num(char *buf, size_t len, double v) {
  int n = snprintf(buf, len, "%.17g", v);
  return n < 0 || (size_t)n >= len ? SL_ETOOBIG : 0;
}

void sl_limiter_share(double rate, double burst, int buckets, double *rate_k, double *burst_k) {
  if (buckets < 1) buckets = 1;
  *rate_k = rate / buckets;
  *burst_k = burst / buckets >= 1 ? burst / buckets : 1;
}

int sl_limiter_prepare_take_of(sl_limiter_cmd *cmd, const char *provider, int bucket, int buckets,
                               double rate, double burst, double cost) {
  if (!cmd) return SL_EINVAL;
  memset(cmd, 0, sizeof *cmd);
  if (!isfinite(rate) || rate <= 0 || !isfinite(burst) || burst < 1 || !isfinite(cost) || cost <= 0)
    return SL_EINVAL;
  int rc = sl_limiter_keys_of(provider, bucket, buckets, cmd->limit_key, sizeof cmd->limit_key,
                              cmd->pause_key, sizeof cmd->pause_key);
  if (rc) return rc;
  sl_limiter_share(rate, burst, buckets, &rate, &burst);
  if (fmt_num(cmd->arg[0], sizeof cmd->arg[0], rate) ||
      fmt_num(cmd->arg[1], sizeof cmd->arg[1], burst) ||
      fmt_num(cmd->arg[2], sizeof cmd->arg[2], cost))
    return SL_EINVAL;
  int with_pause = sl_limiter_pause_in_take(buckets), a = 0;
  cmd->script = sl_limiter_lua;
  cmd->argv[a++] = "EVALSHA";
  cmd->argv[a++] = sl_limiter_lua_sha1;
  cmd->argv[a++] = with_pause ? "2" : "1";
  cmd->argv[a++] = cmd->limit_key;
  if (with_pause) cmd->argv[a++] = cmd->pause_key;
  cmd->argv[a++] = cmd->arg[0];
  cmd->argv[a++] = cmd->arg[1];
  cmd->argv[a++] = cmd->arg[2];
  cmd->argc = a;
  return 0;
}

int sl_limiter_prepare_take(sl_limiter_cmd *cmd, const char *provider, double rate, double burst,
                            double cost) {
  return sl_limiter_prepare_take_of(cmd, provider, 0, 1, rate, burst, cost);
}

int sl_limiter_prepare_pause(sl_limiter_cmd *cmd, const char *provider, int64_t ms) {
  if (!cmd) return SL_EINVAL;
  memset(cmd, 0, sizeof *cmd);
  if (ms < 1) return SL_EINVAL;
  if (ms > SL_LIMITER_PAUSE_MAX_MS) ms = SL_LIMITER_PAUSE_MAX_MS;
  int rc = sl_limiter_keys(provider, NULL, 0, cmd->pause_key, sizeof cmd->pause_key);
  if (rc) return rc;
  snprintf(cmd->arg[0], sizeof cmd->arg[0], "%lld", (long long)ms);
  cmd->script = sl_limiter_pause_lua;
  cmd->argv[0] = "EVALSHA";
  cmd->argv[1] = sl_limiter_pause_lua_sha1;
  cmd->argv[2] = "1";
  cmd->argv[3] = cmd->pause_key;
  cmd->argv[4] = cmd->arg[0];
  cmd->argc = 5;
  return 0;
}

void sl_limiter_use_eval(sl_limiter_cmd *cmd) {
  if (!cmd || !cmd->script) return;
  cmd->argv[0] = "EVAL";
  cmd->argv[1] = cmd->script;
}

int sl_limiter_parse_reply(const redisReply *rep, int64_t *out, char *err, size_t errlen) {
  char dummy[8];
  if (!err) {
    err = dummy;
    errlen = sizeof dummy;
  }
  if (out) *out = 0;
  if (!rep) {
    snprintf(err, errlen, "sl_limiter: no reply from redis");
    return SL_EREDIS;
  }
  if (rep->type == REDIS_REPLY_ERROR) {
    const char *s = rep->str ? rep->str : "";
    if (strncmp(s, "NOSCRIPT", 8) == 0) {
      snprintf(err, errlen, "sl_limiter: script not loaded");
      return SL_ENOTFOUND;
    }
    snprintf(err, errlen, "sl_limiter: %.*s", (int)(rep->len < 200 ? rep->len : 200), s);
    return SL_EREDIS;
  }
  if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0) {
    snprintf(err, errlen, "sl_limiter: unexpected reply (type %d)", rep->type);
    return SL_EREDIS;
  }
  if (out) *out = (int64_t)rep->integer;
  return 0;
}

/* Sends cmd (EVALSHA, then EVAL if Redis does not know the script). */
static int run(sl_redis *r, sl_limiter_cmd *cmd, int64_t *out, char *err, size_t errlen) {
  for (int attempt = 0; attempt < 2; attempt++) {
    redisReply *rep = sl_redis_argv(r, cmd->argc, cmd->argv, NULL, err, errlen);
    if (!rep) return SL_EREDIS;
    int rc = sl_limiter_parse_reply(rep, out, err, errlen);
    freeReplyObject(rep);
    if (rc != SL_ENOTFOUND) return rc;
    sl_limiter_use_eval(cmd);
  }
  snprintf(err, errlen, "sl_limiter: redis refused to load the script");
  return SL_EREDIS;
}

/* The pause's PTTL when it is not read by the take script (> 0: paused). */
static int paused(sl_redis *r, const sl_limiter_cmd *cmd, int64_t *ms, char *err, size_t errlen) {
  const char *argv[] = {"PTTL", cmd->pause_key};
  redisReply *rep = sl_redis_argv(r, 2, argv, NULL, err, errlen);
  if (!rep) return SL_EREDIS;
  int rc = rep->type == REDIS_REPLY_INTEGER ? 0 : SL_EREDIS;
  if (rc) snprintf(err, errlen, "sl_limiter: unexpected PTTL reply (type %d)", rep->type);
  *ms = rc == 0 && rep->integer > 0 ? rep->integer : 0;
  freeReplyObject(rep);
  return rc;
}

int sl_limiter_take_of(sl_redis *r, const char *provider, int bucket, int buckets, double rate,
                       double burst, double cost, int64_t *wait_ms, char *err, size_t errlen) {
  char dummy[256];
  if (!err || errlen == 0) {
    err = dummy;
    errlen = sizeof dummy;
  }
  err[0] = '\0';
  int64_t w = 0;
  if (!wait_ms) wait_ms = &w;
  *wait_ms = 0;
  sl_limiter_cmd cmd;
  int rc = sl_limiter_prepare_take_of(&cmd, provider, bucket, buckets, rate, burst, cost);
  if (!r || rc) {
    snprintf(err, errlen, "sl_limiter: invalid arguments");
    return SL_EINVAL;
  }
  if (!sl_limiter_pause_in_take(buckets) &&
      ((rc = paused(r, &cmd, wait_ms, err, errlen)) != 0 || *wait_ms > 0))
    return rc;
  return run(r, &cmd, wait_ms, err, errlen);
}

int sl_limiter_take(sl_redis *r, const char *provider, double rate, double burst, double cost,
                    int64_t *wait_ms, char *err, size_t errlen) {
  return sl_limiter_take_of(r, provider, 0, 1, rate, burst, cost, wait_ms, err, errlen);
}

int sl_limiter_pause(sl_redis *r, const char *provider, int64_t ms, char *err, size_t errlen) {
  char dummy[256];
  if (!err || errlen == 0) {
    err = dummy;
    errlen = sizeof dummy;
  }
  err[0] = '\0';
  sl_limiter_cmd cmd;
  int rc = sl_limiter_prepare_pause(&cmd, provider, ms);
  if (!r || rc) {
    snprintf(err, errlen, "sl_limiter: invalid arguments");
    return SL_EINVAL;
  }
  return run(r, &cmd, NULL, err, errlen);
}
