/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_claim.c — the Redis scripts of the input claim (see sl_claim.h).
 *
 * Each script is one atomic step on the Redis server, so a claim, the check
 * for stored outputs and the owner check of a release or renewal cannot
 * interleave with another replica's.
 */
#include "sluice/sl_claim.h"

const char sl_claim_take_lua[] =
    "local s = redis.call('GET', KEYS[2])\n"
    "if s then return {1, s} end\n"
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0, ''} end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {0, ''}\n"
    "end\n"
    "local t = redis.call('PTTL', KEYS[1])\n"
    "if t < 0 then t = 0 end\n"
    "return {2, tostring(t)}\n";

const char sl_claim_release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

const char sl_claim_renew_lua[] = "local n = 0\n"
                                  "for i, k in ipairs(KEYS) do\n"
                                  "  if redis.call('GET', k) == ARGV[i + 1] then\n"
                                  "    redis.call('PEXPIRE', k, ARGV[1])\n"
                                  "    n = n + 1\n"
                                  "  end\n"
                                  "end\n"
                                  "return n\n";

const char sl_claim_store_lua[] =
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])\n"
    "if redis.call('GET', KEYS[2]) == ARGV[3] then return redis.call('DEL', KEYS[2]) end\n"
    "return 0\n";
