/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_fair.c — the fair take script and its keys (see sl_fair.h). The
 * arguments' checks and the GCRA step are the plain limiter's own text
 * (sl_limiter_lua.h), the step run as a local function so that its replies
 * become this script's.
 */
#include "sluice/sl_fair.h"
#include "sl_limiter_lua.h"
#include "sluice/sl_err.h"
#include "sluice/sl_limiter.h"

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

/* clang-format off */
const char sl_fair_take_lua[] =
    SL__LIMITER_ARGS_LUA
    "local n = tonumber(ARGV[4])\n"
    "if not n or n < 1 or n > " STR(SL_FAIR_CANDIDATES) " or #ARGV ~= 4 + 2 * n then\n"
    "  return redis.error_reply('ERR sl_fair: want n (1.." STR(SL_FAIR_CANDIDATES) ") tenants and their weights')\n"
    "end\n"
    "if KEYS[4] then\n"
    "  local paused = redis.call('PTTL', KEYS[4])\n"
    "  if paused > 0 then return {1, paused} end\n"
    "end\n"
    "local tt = redis.call('TIME')\n"
    "local clock = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)\n"
    /* tenants no replica named for a while are gone, usage and all */
    "local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. (clock - " STR(SL_FAIR_ACTIVE_MS) "), 'LIMIT', 0, 64)\n"
    "if #gone > 0 then\n"
    "  redis.call('ZREM', KEYS[3], unpack(gone))\n"
    "  redis.call('ZREM', KEYS[2], unpack(gone))\n"
    "end\n"
    "local low = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
    "local floor = tonumber(low[2]) or 0\n"
    /* the least used of those named; a newcomer joins at the floor (and
     * holds it down from now on: the others run ahead of it) */
    "local best, bu, bw\n"
    "for i = 1, n do\n"
    "  local id, w = ARGV[3 + 2 * i], tonumber(ARGV[4 + 2 * i])\n"
    "  if not w or w ~= w or w <= 0 or w == math.huge then w = 1 end\n"
    "  redis.call('ZADD', KEYS[3], clock, id)\n"
    "  local u = tonumber(redis.call('ZSCORE', KEYS[2], id))\n"
    "  if not u or u < floor then\n"
    "    u = floor\n"
    "    redis.call('ZADD', KEYS[2], string.format('%.17g', u), id)\n"
    "  end\n"
    "  if not best or u < bu then best, bu, bw = i, u, w end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[3], " STR(SL_FAIR_ACTIVE_MS) ")\n"
    "if bu > floor + " STR(SL_FAIR_SLACK) " then\n"
    "  return {2, math.max(1, math.ceil(1000 / rate))}\n"
    "end\n"
    "local function gcra()\n"
    SL__LIMITER_GCRA_LUA
    "end\n"
    "local wait = gcra()\n"
    "if wait > 0 then return {1, wait} end\n"
    "redis.call('ZADD', KEYS[2], string.format('%.17g', bu + cost / bw), ARGV[3 + 2 * best])\n"
    "redis.call('PEXPIRE', KEYS[2], " STR(SL_FAIR_ACTIVE_MS) ")\n"
    "return {0, best}\n";
/* clang-format on */

int sl_fair_keys(const char *limit_key, char usage[SL_FAIR_KEY_MAX], char seen[SL_FAIR_KEY_MAX]) {
  size_t p = strlen(SL_LIMITER_KEY_PREFIX);
  if (!limit_key || strncmp(limit_key, SL_LIMITER_KEY_PREFIX, p) != 0) return SL_EINVAL;
  int a = snprintf(usage, SL_FAIR_KEY_MAX, "sl:fair:u:%s", limit_key + p);
  int b = snprintf(seen, SL_FAIR_KEY_MAX, "sl:fair:s:%s", limit_key + p);
  if (a < 0 || b < 0 || a >= SL_FAIR_KEY_MAX || b >= SL_FAIR_KEY_MAX) return SL_ETOOBIG;
  return 0;
}
