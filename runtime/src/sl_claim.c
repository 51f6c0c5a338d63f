/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_claim.c — the Redis scripts of the input claim (see sl_claim.h).
 *
 * Each script is one atomic step on the Redis server, so a claim, the check
 * for stored outputs and the owner check of a release or renewal cannot
 * interleave with another replica's.
 *
 * Redis Cluster: a script's keys must share a slot, and a cluster routes
 * it by its KEYS alone, so every key a script touches is in KEYS (none is
 * built inside a script) and a slot where a key is "none" holds a
 * placeholder of the batch's slot: "" on one Redis, the batch's bare tag
 * ("{3-17}") with redis.buckets. A real key always begins with "sl:".
 */
#include "sluice/sl_claim.h"

const char sl_claim_take_lua[] =
    "local n = #KEYS / 4\n"
    "local out = {}\n"
    "for i = 1, n do\n"
    "  local ck, sk, tk, dk = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]\n"
    "  local owner, tag = ARGV[i + 2], ARGV[n + i + 2]\n"
    "  local s = redis.call('GET', sk)\n"
    "  local code, v = 0, ''\n"
    "  if s then\n"
    "    code, v = 1, s\n"
    "  elseif not redis.call('SET', ck, owner, 'NX', 'PX', ARGV[1]) then\n"
    "    local c = redis.call('GET', ck)\n"
    "    if c == owner then\n"
    "      redis.call('PEXPIRE', ck, ARGV[1])\n"
    "    elseif string.sub(c, 1, 1) == '!' then\n"
    "      local m = '!' .. tag .. '|'\n"
    "      if string.sub(c, 1, #m) == m then\n"
    "        code, v = 3, string.sub(c, #m + 1)\n"
    "      else\n"
    "        redis.call('SET', ck, owner, 'PX', ARGV[1])\n"
    "      end\n"
    "    else\n"
    "      local t = redis.call('PTTL', ck)\n"
    "      if t < 0 then t = 0 end\n"
    "      code, v = 2, tostring(t)\n"
    "    end\n"
    "  end\n"
    "  if code == 0 and string.sub(tk, 1, 3) == 'sl:' then\n"
    "    local c = redis.call('INCR', tk)\n"
    "    if c == 1 then redis.call('EXPIRE', tk, ARGV[2]) end\n"
    "    v = tostring(c)\n"
    "  end\n"
    "  local d = ''\n"
    "  if string.sub(dk, 1, 3) == 'sl:' then d = redis.call('GET', dk) or '' end\n"
    "  out[3 * i - 2], out[3 * i - 1], out[3 * i] = code, v, d\n"
    "end\n"
    "return out\n";

const char sl_claim_release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

const char sl_claim_renew_lua[] = "local out = {}\n"
                                  "for i = 1, #KEYS / 2 do\n"
                                  "  local ck, owner = KEYS[2 * i - 1], ARGV[i + 1]\n"
                                  "  local v = redis.call('GET', ck)\n"
                                  "  if v == owner then\n"
                                  "    redis.call('PEXPIRE', ck, ARGV[1])\n"
                                  "    out[i] = 1\n"
                                  "  elseif not v and redis.call('EXISTS', KEYS[2 * i]) == 0 then\n"
                                  "    redis.call('SET', ck, owner, 'PX', ARGV[1])\n"
                                  "    out[i] = 2\n"
                                  "  else\n"
                                  "    out[i] = 0\n"
                                  "  end\n"
                                  "end\n"
                                  "return out\n";

const char sl_claim_end_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
                                "  return 1\n"
                                "end\n"
                                "return 0\n";

const char sl_claim_store_lua[] =
    "local out = {}\n"
    "for i = 1, #KEYS / 3 do\n"
    "  local owner, ck, tk = ARGV[2 * i + 1], KEYS[3 * i - 1], KEYS[3 * i]\n"
    "  redis.call('SET', KEYS[3 * i - 2], ARGV[2 * i], 'EX', ARGV[1])\n"
    "  if string.sub(tk, 1, 3) == 'sl:' then redis.call('DEL', tk) end\n"
    "  if owner == '' then\n"
    "    out[i] = -1\n"
    "  elseif redis.call('GET', ck) == owner then\n"
    "    out[i] = redis.call('DEL', ck)\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n";

const char sl_claim_starts_lua[] = "local n = tonumber(ARGV[2])\n"
                                   "for i = n + 1, #KEYS do redis.call('DEL', KEYS[i]) end\n"
                                   "local out = {}\n"
                                   "for i = 1, n do\n"
                                   "  local c = redis.call('INCR', KEYS[i])\n"
                                   "  if c == 1 then redis.call('EXPIRE', KEYS[i], ARGV[1]) end\n"
                                   "  out[i] = c\n"
                                   "end\n"
                                   "return out\n";

const char sl_claim_lookup_lua[] = "local s = redis.call('GET', KEYS[1])\n"
                                   "if s then return {1, s} end\n"
                                   "local c = redis.call('INCR', KEYS[2])\n"
                                   "if c == 1 then redis.call('EXPIRE', KEYS[2], ARGV[1]) end\n"
                                   "return {0, c}\n";
