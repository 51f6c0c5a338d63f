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
 * (For Redis Cluster both keys would need one hash slot, e.g. a {provider}
 * hash tag; Sluice runs one Redis, so the names stay plain.)
 *
 * ---- Script contract: sl_limiter_lua (take) ----------------------------
 *   EVAL sl_limiter_lua 2 <limit key> <pause key> <rate> <burst> <cost>
 *   (or EVALSHA sl_limiter_lua_sha1 with the same arguments)
 *   KEYS[1]  limit key, KEYS[2] pause key (build them with
 *            sl_limiter_prepare_take() or sl_limiter_keys())
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
#define SL_LIMITER_KEY_MAX 80 /* fits "sl:limit:" + provider + NUL */
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

/* A 429 with Retry-After: pauses the provider for ms (clamped to
 * SL_LIMITER_PAUSE_MAX_MS) for every replica, extending but never shortening
 * a pause already in place. Returns 0, SL_EINVAL or SL_EREDIS. */
int sl_limiter_pause(sl_redis *r, const char *provider, int64_t ms, char *err, size_t errlen);

#endif
