/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_limiter.h — a provider rate limit shared by every replica of a stage,
 * kept in Redis.
 *
 * The limit is a GCRA (generic cell rate algorithm) bucket: `rate` tokens per
 * second, at most `burst` tokens at once. Its whole state is one number per
 * provider, the theoretical arrival time (TAT), and one Lua script checks and
 * updates it atomically with Redis's own clock (TIME), so replicas on
 * different hosts agree without synchronised clocks. A second key pauses the
 * provider for every replica (a 429 with Retry-After).
 *
 * Keys (one pair per provider):
 *   sl:limit:<provider>   the TAT, ms since the epoch on the Redis clock;
 *                         PX = until the bucket is full again, so an idle
 *                         limiter vanishes
 *   sl:pause:<provider>   exists while the provider is paused; PX = pause
 * <provider> is 1..SL_LIMITER_PROVIDER_MAX characters of [A-Za-z0-9._-].
 *
 * Limiter buckets (provider.limit_buckets = K > 1): one provider's limit is
 * split into K limits of rate/K and burst/K (at least 1) each, under
 * sl:limit:<provider>:<k>, and each replica takes from one of them (its
 * bucket, sl_limiter_replica_bucket): K keys share what one hot key took,
 * at the cost of each replica seeing only its bucket's 1/K of the rate (a
 * bucket whose replicas are idle is not lent to the others). The pause
 * stays one key per provider.
 *
 * Redis Cluster (redis.buckets > 0, sl_rkey.h): the names carry the
 * provider as hash tag, sl:limit:{<provider>} and sl:pause:{<provider>},
 * so that the take script's two keys share a slot; with K > 1 each bucket
 * is a tag of its own, sl:limit:{<provider>:<k>} (K slots, spread over the
 * primaries), and the take script does not read the pause (another slot):
 * the caller reads it first (sl_limiter_pause_in_take). With redis.buckets
 * = 0 the names are the plain ones above.
 *
 * ---- Script contract: sl_limiter_lua (take) ----------------------------
 *   EVAL sl_limiter_lua 2 <limit key> <pause key> <rate> <burst> <cost>
 *   (or EVALSHA sl_limiter_lua_sha1 with the same arguments)
 *   KEYS[1]  limit key, KEYS[2] pause key (build them with
 *            sl_limiter_prepare_take() or sl_limiter_keys()); the pause
 *            key may be left out (1 key: the caller read the pause)
 *   ARGV[1]  rate, tokens per second (number > 0; fractions allowed)
 *   ARGV[2]  burst, the most tokens at once (number >= 1)
 *   ARGV[3]  cost of this request in tokens (number > 0; e.g. audio seconds
 *            when the rate is in audio seconds per second)
 *   Reply    integer 0: go now (the tokens are taken);
 *            integer > 0: milliseconds to wait before trying again (nothing
 *            is taken); while the pause key exists this is its PTTL.
 *            Error reply "ERR sl_limiter: ..." for invalid arguments.
 *   A request that costs more than the burst can never fit in the bucket;
 *   rather than deadlocking it goes when the bucket is full (nothing else
 *   was taken for burst/rate seconds) and leaves the bucket in debt, so the
 *   requests after it wait until the excess is paid back. Long-run
 *   throughput therefore stays at `rate` tokens per second.
 *   A pause key without a TTL (never written by this module) is ignored.
 *
 * ---- Script contract: sl_limiter_pause_lua ------------------------------
 *   EVAL sl_limiter_pause_lua 1 <pause key> <ms>
 *   ARGV[1]  pause length in ms (integer >= 1)
 *   Sets the pause key to expire in ms unless it already expires later
 *   (a pause is extended, never shortened). Reply: integer, the pause left
 *   in ms after the call.
 *
 * Clock: the script calls TIME, which Redis >= 5 allows before writes
 * (effects replication; the only mode in Redis 7). If the Redis host's clock
 * steps backwards, callers wait up to the size of the step longer.
 *
 * Asynchronous callers (hiredis async): fill an sl_limiter_cmd with
 * sl_limiter_prepare_take(), send cmd.argc / cmd.argv (EVALSHA form), and
 * pass the reply to sl_limiter_parse_reply(); on SL_ENOTFOUND (NOSCRIPT:
 * Redis has not seen the script yet) call sl_limiter_use_eval(&cmd) and send
 * it again. hiredis copies argv when the command is issued, so the
 * sl_limiter_cmd may live on the stack.
 */
#ifndef SLUICE_SL_LIMITER_H
#define SLUICE_SL_LIMITER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/sl_redis.h"

#define SL_LIMITER_PROVIDER_MAX 64
#define SL_LIMITER_KEY_MAX 96 /* fits "sl:limit:{" + provider + ":<bucket>}" + NUL */
#define SL_LIMITER_MAX_BUCKETS 1024
#define SL_LIMITER_KEY_PREFIX "sl:limit:"
#define SL_LIMITER_PAUSE_PREFIX "sl:pause:"
#define SL_LIMITER_PAUSE_MAX_MS 3600000 /* longer pauses are clamped to one hour */

/* The take script (contract above) and the SHA-1 of its text (hex, for
 * EVALSHA; a unit test checks it matches). */
extern const char sl_limiter_lua[];
extern const char sl_limiter_lua_sha1[];
/* The pause script (contract above) and its SHA-1. */
extern const char sl_limiter_pause_lua[];
extern const char sl_limiter_pause_lua_sha1[];

/* Builds both keys of a provider into bounded buffers (each at least
 * SL_LIMITER_KEY_MAX bytes is always enough). Either output may be NULL.
 * Returns 0, SL_EINVAL (bad provider name) or SL_ETOOBIG (buffer too small). */
int sl_limiter_keys(const char *provider, char *limit_key, size_t limit_len, char *pause_key,
                    size_t pause_len);
/* The same for bucket `bucket` (0 .. buckets-1) of a limit split into
 * `buckets` (1 .. SL_LIMITER_MAX_BUCKETS; 1: sl_limiter_keys). The names
 * follow redis.buckets (sl_rkey_setup first). */
int sl_limiter_keys_of(const char *provider, int bucket, int buckets, char *limit_key,
                       size_t limit_len, char *pause_key, size_t pause_len);

/* 1 when the take script of a limit split into `buckets` reads the pause
 * itself (its keys share a slot, or there is no cluster); 0: the caller
 * reads the pause key (PTTL) before it takes. */
int sl_limiter_pause_in_take(int buckets);

/* This process's bucket of a limit split into `buckets`: a hash of its host
 * name and process id, modulo buckets (replicas have no index of their
 * own; provider.limit_bucket overrides it). */
int sl_limiter_replica_bucket(int buckets);

/* One bucket's share of a limit split into `buckets`: rate/buckets, and
 * burst/buckets but at least 1. */
void sl_limiter_share(double rate, double burst, int buckets, double *rate_k, double *burst_k);

/* A ready-to-send command: argv[0..argc) point into the struct itself (and
 * at the static script text), so do not copy the struct after preparing it;
 * it owns no heap memory. */
typedef struct {
  char limit_key[SL_LIMITER_KEY_MAX];
  char pause_key[SL_LIMITER_KEY_MAX];
  char arg[3][32];
  const char *script; /* sl_limiter_lua or sl_limiter_pause_lua */
  const char *argv[8];
  int argc;
} sl_limiter_cmd;

/* EVALSHA of the take script for one request. Returns 0 or SL_EINVAL (bad
 * provider; rate not > 0; burst not >= 1; cost not > 0; NaN/inf). */
int sl_limiter_prepare_take(sl_limiter_cmd *cmd, const char *provider, double rate, double burst,
                            double cost);
/* The same from bucket `bucket` of the limit split into `buckets`: rate
 * and burst are the provider's whole limit (the bucket takes its share,
 * sl_limiter_share). Without the pause key when !sl_limiter_pause_in_take. */
int sl_limiter_prepare_take_of(sl_limiter_cmd *cmd, const char *provider, int bucket, int buckets,
                               double rate, double burst, double cost);

/* EVALSHA of the pause script. ms is clamped to SL_LIMITER_PAUSE_MAX_MS.
 * Returns 0 or SL_EINVAL (bad provider, ms < 1). */
int sl_limiter_prepare_pause(sl_limiter_cmd *cmd, const char *provider, int64_t ms);

/* Switches a prepared command from EVALSHA to EVAL (sends the script text). */
void sl_limiter_use_eval(sl_limiter_cmd *cmd);

/* Reads a script's reply: *out (may be NULL) gets the integer (take: 0 or
 * ms to wait; pause: ms of pause left). Returns 0; SL_ENOTFOUND for a
 * NOSCRIPT error (resend with sl_limiter_use_eval); SL_EREDIS for a NULL
 * reply, any other error reply or an unexpected type (err says which; err may
 * be NULL). */
int sl_limiter_parse_reply(const redisReply *rep, int64_t *out, char *err, size_t errlen);

/* Synchronous helpers over sl_redis (tests, tools, blocking workers; the
 * calling thread owns r, as sl_redis requires).
 *
 * Asks for `cost` tokens of the provider's bucket. Returns 0 with *wait_ms = 0
 * (granted, tokens taken) or *wait_ms > 0 (not now: try again after that many
 * ms; nothing taken); SL_EINVAL for bad arguments; SL_EREDIS when Redis could
 * not be asked (err says why). Tries EVALSHA first, EVAL on NOSCRIPT. */
int sl_limiter_take(sl_redis *r, const char *provider, double rate, double burst, double cost,
                    int64_t *wait_ms, char *err, size_t errlen);
/* The same from bucket `bucket` of the limit split into `buckets` (reading
 * the pause first when the script does not: *wait_ms its PTTL). */
int sl_limiter_take_of(sl_redis *r, const char *provider, int bucket, int buckets, double rate,
                       double burst, double cost, int64_t *wait_ms, char *err, size_t errlen);

/* A 429 with Retry-After: pauses the provider for ms (clamped to
 * SL_LIMITER_PAUSE_MAX_MS) for every replica, extending but never shortening
 * a pause already in place. Returns 0, SL_EINVAL or SL_EREDIS. */
int sl_limiter_pause(sl_redis *r, const char *provider, int64_t ms, char *err, size_t errlen);

#endif
