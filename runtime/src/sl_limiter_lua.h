/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_limiter_lua.h — the parts of the limiter's take script that the fair
 * take script (sl_fair.c) runs too, as Lua text: the arguments' checks and
 * the GCRA step (sl_limiter.c's design comment). Internal to the runtime.
 */
#ifndef SLUICE_SL_LIMITER_LUA_H
#define SLUICE_SL_LIMITER_LUA_H

/* rate, burst and cost from ARGV[1..3], checked (an error reply when not
 * numbers in range) */
#define SL__LIMITER_ARGS_LUA                                                                       \
  "local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"            \
  "if not rate or rate ~= rate or rate <= 0 or rate == math.huge then\n"                           \
  "  return redis.error_reply('ERR sl_limiter: rate must be a number > 0')\n"                      \
  "end\n"                                                                                          \
  "if not burst or burst ~= burst or burst < 1 or burst == math.huge then\n"                       \
  "  return redis.error_reply('ERR sl_limiter: burst must be a number >= 1')\n"                    \
  "end\n"                                                                                          \
  "if not cost or cost ~= cost or cost <= 0 or cost == math.huge then\n"                           \
  "  return redis.error_reply('ERR sl_limiter: cost must be a number > 0')\n"                      \
  "end\n"

/* the GCRA step on KEYS[1]: returns 0 (the tokens are taken) or the ms to
 * wait (nothing taken) */
#define SL__LIMITER_GCRA_LUA                                                                       \
  "local t = redis.call('TIME')\n"                                                                 \
  "local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000\n"                                    \
  "local interval = 1000 / rate\n"                                                                 \
  "local tat = tonumber(redis.call('GET', KEYS[1])) or now\n"                                      \
  "if tat < now then tat = now end\n"                                                              \
  "local fit = cost\n"                                                                             \
  "if fit > burst then fit = burst end\n"                                                          \
  "local wait = tat + interval * (fit - burst) - now\n"                                            \
  "if wait > 0 then\n"                                                                             \
  "  return math.max(1, math.min(math.ceil(wait), 1e15))\n"                                        \
  "end\n"                                                                                          \
  "tat = tat + interval * cost\n"                                                                  \
  "local ttl = math.max(1, math.min(math.ceil(tat - now), 1e15))\n"                                \
  "redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', string.format('%.0f', ttl))\n"     \
  "return 0\n"

#endif
