#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis fails again while materialize is rebuilding the view, and the rebuilt
# view still equals the topics.
#   1. Redis goes back in time mid-rebuild: the view is emptied (FLUSHALL),
#      and as soon as the rebuild has replayed a submission created after an
#      older snapshot, Redis is SIGKILLed and restarted from that snapshot.
#      The rebuild goes on into the restored Redis and ends; what it had
#      replayed before the restart is gone, so it must not mark the view
#      complete: the submission is back within a minute, not 404 for ever.
#   2. Redis refuses every connection for 15 s mid-rebuild (at maxclients,
#      after dropping the ones it had): the message being replayed is
#      applied once Redis answers again, not skipped, so every submission's
#      hash is what it was before the flush.
# Enough submissions (1,200, created after the one of part 1) that a rebuild
# takes a while: the faults land in its middle.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
# part 2 lowers Redis's maxclients: lifted again first of all, whatever happens
maxclients=$(redis-cli -p "$DEVSTACK_REDIS_PORT" CONFIG GET maxclients | sed -n 2p)
at_exit "exec 7>&- 2>/dev/null; redis-cli -p $DEVSTACK_REDIS_PORT CONFIG SET maxclients $maxclients >/dev/null 2>&1"
redis_faults # RC, rpid, RDIR, redis_kill ...; Redis runs again whatever happens
stages_up
# the reference is the topics: a view rebuilt from them (what earlier tests
# on this stack left unapplied is in it), then kept by the live stage
RC FLUSHALL >/dev/null
check "the view is rebuilt from the topics" wait_for 60 view_is_marked
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user "$TEST_NAME" --label "after the flush" 2>/dev/null)
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")

# the view, without what is not rebuilt from the topics (ingest's upload
# records u<no>:<etag>) and the write versions (v, v<no>), which a rebuild
# numbers anew: "<key> <field> <value>", sorted
view() {
  RC EVAL "local out = {}
    for _, k in ipairs(redis.call('KEYS', 'sl:sub:*')) do
      local h = redis.call('HGETALL', k)
      for i = 1, #h, 2 do out[#out + 1] = k .. ' ' .. h[i] .. ' ' .. h[i + 1] end
    end
    return out" 0 | awk '$2 !~ /^(v[0-9]*|u[0-9]+:.*)$/' | sort
}

redis_snapshot "$work/old.rdb"
head -c 1000 /dev/zero >"$work/a.wav"
new_submission "$work/a.wav" || fail "presign did not create the submission"
sid_x=$SID
log "submission $sid_x created after the snapshot"
# 1,200 more (one question each), 8 at a time
created=$(bulk_submissions 1200 "$work/bulk.codes")
[[ $created == 1200 ]] || log "answers: $(sort "$work/bulk.codes" | uniq -c | tr -s ' \n' ' ')"
check "1,200 submissions created ($created)" test "$created" = 1200
wait_for 120 stage_lag0 materialize || log "materialize lags after 120 s: $(stage_lagging materialize)"
check "materialize applied them all" stage_lag0 materialize
view >"$work/before"
check "the view holds them" test "$(cut -d' ' -f1 "$work/before" | sort -u | wc -l)" -gt 1200

# ---- 1. Redis restarted from the older snapshot while the view is rebuilt ----
said() { cat "$STAGES_DIR"/materialize*.log | grep -c 'rebuild: .* replayed' || true; }
said0=$(said)
RC FLUSHALL >/dev/null
redis_wait_key "$(sub_key "$sid_x")" || fail "the rebuild did not replay $sid_x"
redis_kill
said1=$(said)
log "the rebuild replayed $sid_x: Redis SIGKILLed"
check "the rebuild had not ended when Redis was killed ($said0 -> $said1 ended)" test "$said1" = "$said0"
redis_start_from "$work/old.rdb"
log "Redis restarted from the snapshot taken before $sid_x"
check "the rebuild ended in the restored Redis" wait_for 60 sh -c "test \$(cat '$STAGES_DIR'/materialize*.log | grep -c 'rebuild: .* replayed') -gt $said0"
back() { test "$(RC EXISTS "$(sub_key "$sid_x")")" = 1; }
check "the submission created after the snapshot is back" wait_for 60 back
check "the view is marked complete again" wait_for 60 view_is_marked
settled() { view_is_marked && test "$(RC EXISTS sl:lock:view-rebuild)" = 0; }
wait_for 60 settled || true
view >"$work/after1"
check "the view equals the one before the faults" cmp -s "$work/before" "$work/after1"
cmp -s "$work/before" "$work/after1" || { diff "$work/before" "$work/after1" || true; } | head -10 >&2

# ---- 2. Redis refuses every connection for 15 s while the view is rebuilt ----
# (at its maxclients, after dropping the connections it had: what a Redis
# that restarts, or a proxy in front of it, looks like to its clients). The
# limit is set and lifted on a connection of this test's own, the one left.
exec 7<>"/dev/tcp/127.0.0.1/$DEVSTACK_REDIS_PORT"
said0=$(said)
RC FLUSHALL >/dev/null
redis_wait_key sl:lock:view-rebuild || fail "no rebuild started"
sleep 0.3 # the rebuild is replaying
printf 'CONFIG SET maxclients 1\r\nCLIENT KILL TYPE normal SKIPME yes\r\n' >&7
read -r a <&7 && read -r b <&7
log "Redis refuses connections for 15 s mid-rebuild (${a%$'\r'}, ${b%$'\r'} dropped)"
sleep 15
printf 'CONFIG SET maxclients %s\r\n' "$maxclients" >&7
read -r a <&7
exec 7>&-
said1=$(said)
log "Redis accepts connections again (${a%$'\r'})"
check "the rebuild had not ended while Redis refused ($said0 -> $said1 ended)" test "$said1" = "$said0"
check "the view is marked complete again" wait_for 120 settled
view >"$work/after2"
check "the view equals the one before the faults" cmp -s "$work/before" "$work/after2"
cmp -s "$work/before" "$work/after2" || { diff "$work/before" "$work/after2" || true; } | head -10 >&2
finish
