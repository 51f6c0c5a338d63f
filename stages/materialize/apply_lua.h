/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply_lua.h — materialize's monotonic apply, one Lua script run by Redis
 * for every question state (stages/materialize/materialize.c). A header of
 * its own so that bench/cost/evalsha_loop.c measures the very script the
 * stage runs.
 */
#ifndef SLUICE_MATERIALIZE_APPLY_LUA_H
#define SLUICE_MATERIALIZE_APPLY_LUA_H

/* KEYS[1] hash, KEYS[2] the set of questions awaiting their upload (see
 * stages/ingest/sweep.h), KEYS[3] the view's write sequence, KEYS[4] the
 * view marker, KEYS[5] the offsets applied per input partition, KEYS[6] the
 * change feed (a Redis stream), KEYS[7] the writer's count; ARGV: qno,
 * rank, json, ttl, "<sid>/<qno>", accepted_at_ms, "<topic>:<partition>",
 * offset (the message's; -1: none), then the ranks today of what an older
 * materialize stored as 2..6 (queued, transcribing, grading, failed, done),
 * then the feed's length (about; 0: no feed). The highest offset applied per partition
 * is what a starting materialize compares with its group's committed
 * offsets (behind_committed()).
 * A question is in the set exactly while its stored rank is 1: it enters
 * when awaiting_upload is written and leaves when a later state replaces it
 * (no ZREM for the statuses after that).
 * A write also stores the sequence as the question's version v<no> and the
 * submission's version v, in the same HSET as the state: both change in one
 * atomic step with the data, and only when the view changed (an ignored
 * redelivery leaves them), so results decides a 304 from v alone and a
 * client resuming a stream asks for the questions with v<no> above what it
 * saw (stages/results/results.c). The sequence is written with %d: Lua's
 * tostring keeps 14 digits, and a rebuilt view's sequence starts at its
 * marker × 1000 (materialize.c, watch()).
 * A write also appends {k: KEYS[1], v: version} to the change feed, which
 * results reads to push server-sent events: only a change is announced.
 * KEYS[7] is the writing thread's own counter in the bucket (lib/view.h,
 * SL__VIEW_WRITER): every apply increments it too and renews its TTL (the
 * hash's, ARGV[4]). The shared sequence alone cannot show a loss that
 * others' applies refill: one apply lost, and the next (anyone's) returns
 * the very value the lost one did; the writer's own count can only be
 * refilled by the writer itself, so an answer not above the last it saw
 * means Redis lost its writes (own_went_back()).
 * With KEYS[8], the submission's data key (sl_dkey.h), and ARGV[15], the
 * wrapped key materialize found (a GET, or its memo) or "" (the status has
 * nothing sealed: any key will do): nothing is written and {-1} returned
 * unless Redis still holds that very key (any key but the sentinel
 * "erased"), so that no apply follows an erasure's sentinel (or a Redis
 * that lost the key).
 * Returns {1 if written else 0, the sequence after this apply, the marker
 * (nil while the view is missing), the writer's count}: see went_back(). */
static const char apply_lua[] =
    "if KEYS[8] then\n"
    "  local k = redis.call('GET', KEYS[8])\n"
    "  if not k or (ARGV[15] == '' and k == 'erased') or (ARGV[15] ~= '' and k ~= ARGV[15]) then\n"
    "    return {-1}\n"
    "  end\n"
    "end\n"
    "local seq = redis.call('INCR', KEYS[3])\n"
    "local own = redis.call('INCR', KEYS[7])\n"
    "redis.call('EXPIRE', KEYS[7], ARGV[4])\n"
    "if ARGV[8] ~= '-1' and tonumber(ARGV[8]) > tonumber(redis.call('HGET', KEYS[5], ARGV[7]) or "
    "'-1') then\n"
    "  redis.call('HSET', KEYS[5], ARGV[7], ARGV[8])\n"
    "end\n"
    "local mk = redis.call('GET', KEYS[4])\n"
    "local r = tonumber(redis.call('HGET', KEYS[1], 'r'..ARGV[1]) or '0')\n"
    "if r >= 2 and r <= 6 then r = tonumber(ARGV[7 + r]) end\n"
    "if r == 1 and tonumber(ARGV[2]) > 1 then redis.call('ZREM', KEYS[2], ARGV[5]) end\n"
    "if tonumber(ARGV[2]) <= r then return {0, seq, mk, own} end\n"
    "local v = string.format('%d', seq)\n"
    "redis.call('HSET', KEYS[1], 'r'..ARGV[1], ARGV[2], 'q'..ARGV[1], ARGV[3], 'v'..ARGV[1], v, "
    "'v', v)\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[4])\n"
    "if ARGV[14] ~= '0' then\n"
    "  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[14], '*', 'k', KEYS[1], 'v', v)\n"
    "end\n"
    "if tonumber(ARGV[2]) == 1 then redis.call('ZADD', KEYS[2], 'NX', ARGV[6], ARGV[5]) end\n"
    "return {1, seq, mk, own}\n";

#endif
