#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The results view survives losing Redis: a submission is graded, Redis is
# emptied (FLUSHALL, what a restart without persistence leaves), and
# materialize notices the missing view marker and replays the topics, so the
# client polling with its token sees the same graded answer again — without
# any stage being restarted. Of two materialize replicas only one replays the
# topics (a Redis lock); the other waits for the view marker.
#
# Then Redis goes back in time: it is SIGKILLed and restarted from a snapshot
# taken before a second submission was graded. The snapshot holds the view
# marker, so "the marker is missing" cannot notice; materialize sees the
# view's write sequence lower than it saw and rebuilds, so the second
# submission comes back instead of answering 404 for ever.
#
# Last, the same while materialize is down too (a whole node restarted):
# the new processes have seen nothing to compare with, but Kafka has — at
# start materialize finds Redis behind its group's committed offsets, and a
# third submission comes back. Then exactly one apply is lost and the next
# one refills the sequence (the view's sequence alone cannot tell): the
# writer's own count does, and the fourth submission comes back and is
# graded. But a partition whose last message was a dead
# letter (not a QuestionStatus) is not "behind": a materialize restarted
# after one must not rebuild anything.
source "$(dirname "$0")/lib.sh"
# two materialize replicas: only one of them may replay the topics
"$ROOT/tools/stages" up --replicas materialize=2 >/dev/null
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ADMIN_MAT=$(admin materialize)

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
new_submission "$work/a.wav"
sid=$SID token=$TOKEN
put_answer 0 "$work/a.wav"

view() { view_of "$sid" "$token"; }
done_view() { view >"$work/view.json" && jq -e '.questions[0].state == "done"' "$work/view.json" >/dev/null; }
check "graded before Redis is lost" wait_for 90 done_view
before=$(jq -c '.questions[0] | {state, transcript, grade}' "$work/view.json")

ADMIN_MAT2=$(admin materialize 2)
rebuilds() { # over both replicas
  { curl -fsS "$ADMIN_MAT/metrics"; curl -fsS "$ADMIN_MAT2/metrics"; } |
    awk '$1 == "sluice_view_rebuilds_total" {s += $2} END {print s + 0}'
}
rebuilds0=$(rebuilds)
said() { cat "$STAGES_DIR"/materialize*.log | grep -c 'rebuilding the view from the topics' || true; }
said0=$(said)
# materialize held (SIGSTOP) for the flush and one read: a rebuild cannot
# have finished before the read (on a quiet stack it takes milliseconds, and
# a CI run once read 200 here)
mpids=$(cat "$STAGES_DIR"/materialize*.pid)
kill -STOP $mpids
at_exit "kill -CONT $mpids 2>/dev/null || true"
redis-cli -p "$DEVSTACK_REDIS_PORT" FLUSHALL >/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid")
kill -CONT $mpids
check "right after the flush the view is being rebuilt (503, not 404: $code)" test "$code" = 503
check "the view comes back without restarting anything" wait_for 60 done_view
after=$(jq -c '.questions[0] | {state, transcript, grade}' "$work/view.json")
check "the rebuilt view is the one the client saw before" test "$before" = "$after"
check "materialize counted a rebuild" test "$(rebuilds)" -gt "$rebuilds0"
sleep 2 # a second replica that would rebuild too has seen the marker gone by now
check "one of the two replicas rebuilt, the other waited ($(($(said) - said0)) rebuilds)" \
  test $(($(said) - said0)) = 1
check "materialize logged why it rebuilt" sh -c "cat '$STAGES_DIR'/materialize*.log | grep -q 'rebuilding the view from the topics'"

# ---- Redis restarted from an older snapshot ----
RDIR=$DEVSTACK_DIR/redis
at_exit '"$ROOT/tools/devstack" up >/dev/null 2>&1; rm -f "$RDIR/dump.rdb"' # Redis runs again, no stale snapshot
# restart_from RDB: Redis SIGKILLed and started again from the snapshot RDB
restart_from() {
  local pid
  pid=$(cat "$DEVSTACK_DIR/redis.pid")
  kill -KILL "$pid"
  wait_for 10 sh -c "! kill -0 $pid 2>/dev/null" || fail "redis did not die"
  cp "$1" "$RDIR/dump.rdb"
  "$ROOT/tools/devstack" up >/dev/null # Redis loads the older snapshot
  rm -f "$RDIR/dump.rdb"
}
# the flush took the test's API key with it: a new one, before the snapshot
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user "$TEST_NAME" --label "after the flush" 2>/dev/null)
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")
redis-cli -p "$DEVSTACK_REDIS_PORT" SAVE >/dev/null
cp "$RDIR/dump.rdb" "$work/old.rdb"
espeak-ng -s 140 -w "$work/b.wav" "My favourite season is autumn because the air is cool and clear."
new_submission "$work/b.wav"
sid_b=$SID token_b=$TOKEN
put_answer 0 "$work/b.wav"
done_b() { view_of "$sid_b" "$token_b" >"$work/b.json" && jq -e '.questions[0].state == "done"' "$work/b.json" >/dev/null; }
check "the second submission is graded" wait_for 90 done_b
rollbacks() {
  { curl -fsS "$ADMIN_MAT/metrics"; curl -fsS "$ADMIN_MAT2/metrics"; } |
    awk '$1 == "sluice_view_rollbacks_total" {s += $2} END {print s + 0}'
}
rollbacks0=$(rollbacks)
restart_from "$work/old.rdb"
log "redis restarted from the snapshot taken before the second submission"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token_b" "$RESULTS_URL/v1/submissions/$sid_b")
log "right after the restart the second submission answers $code"
check "the second submission comes back after the rollback" wait_for 60 done_b
check "materialize counted the rollback ($rollbacks0 -> $(rollbacks))" test "$(rollbacks)" -gt "$rollbacks0"
check "the first submission is still graded" done_view
check "materialize logged why it rebuilt again" sh -c "cat '$STAGES_DIR'/materialize*.log | grep -q 'Redis went back in time'"

# ---- the same with materialize down: a fresh process notices it at start ----
wait_for 60 view_is_marked || fail "the view was not marked complete again"
redis-cli -p "$DEVSTACK_REDIS_PORT" SAVE >/dev/null
cp "$RDIR/dump.rdb" "$work/old2.rdb"
# presign reconnects to the restarted Redis within 500 ms (test_aredis), and
# until then answers 503 with Retry-After, which a client retries: so does
# this one (a CI run got the 503 here when the reconnect took 2.5 s)
wait_for 5 new_submission "$work/b.wav" || fail "presign did not create after Redis came back"
sid_c=$SID token_c=$TOKEN
put_answer 0 "$work/b.wav"
done_c() { view_of "$sid_c" "$token_c" >"$work/c.json" && jq -e '.questions[0].state == "done"' "$work/c.json" >/dev/null; }
check "the third submission is graded" wait_for 90 done_c
"$ROOT/tools/stages" kill materialize 2 >/dev/null
"$ROOT/tools/stages" kill materialize 1 >/dev/null
restart_from "$work/old2.rdb"
"$ROOT/tools/stages" up --replicas materialize=2 >/dev/null
log "redis restarted from an older snapshot while materialize was down; materialize started again"
check "the third submission comes back" wait_for 60 done_c
check "materialize said Redis is behind the committed offsets" \
  sh -c "cat '$STAGES_DIR'/materialize*.log | grep -q 'Redis is behind the group'"

# ---- exactly one apply lost, and the sequence catches up ----
# A CI run of test_redis_failover lost a one-question submission this way:
# its record and its one apply (one increment of the sequence) reached the
# primary moments before it died, the replica that took over had neither,
# and the next apply returned the very sequence the lost one had: nobody
# saw it go down, the view stayed "complete" without the submission, and its
# upload waited for a submission that never came. Here: Redis is killed
# within milliseconds of the apply (before a watcher tick reads it) and
# restarted from a snapshot taken just before; then another submission's
# apply brings the sequence back to where it was.
wait_for 60 view_is_marked || fail "the view was not marked complete again"
sleep 1 # every replica's watcher has read the sequence as it is now
redis-cli -p "$DEVSTACK_REDIS_PORT" SAVE >/dev/null
cp "$RDIR/dump.rdb" "$work/old3.rdb"
rollbacks0=$(rollbacks)
wait_for 5 new_submission "$work/b.wav" || fail "the submission to lose was not created"
sid_d=$SID token_d=$TOKEN reply_d=$SUB_REPLY
redis_wait_key "$(sub_key "$sid_d")" 10 || fail "submission $sid_d was never recorded"
restart_from "$work/old3.rdb"
wait_for 5 new_submission "$work/b.wav" || fail "presign did not create after Redis came back"
log "redis restarted from the snapshot taken just before submission $sid_d was recorded"
put_answer 0 "$work/b.wav" # the second one's upload: its apply takes the lost sequence
redis_wait_key "$(sub_key "$SID")" 10 || fail "the submission after the restart was not recorded"
SUB_REPLY=$reply_d put_answer 0 "$work/b.wav"
done_d() { view_of "$sid_d" "$token_d" >"$work/d.json" && jq -e '.questions[0].state == "done"' "$work/d.json" >/dev/null; }
check "the submission whose one apply was lost comes back and is graded" wait_for 60 done_d
check "materialize counted that rollback ($rollbacks0 -> $(rollbacks))" test "$(rollbacks)" -gt "$rollbacks0"


# ---- a dead letter last on a partition is no reason to rebuild ----
wait_for 60 view_is_marked || fail "the view was not marked complete again"
bad="not-a-status-$(date +%s%N)"
printf 'not-a-key\t%s\n' "$bad" | kcat -P -b "$SLUICE_KAFKA_BROKERS" -t results -K $'\t' -p 0
wait_for 30 sh -c "'$SLUICECTL' dlq list --json --class bad_message --since 2m 2>/dev/null | grep -q '\"stage\":\"materialize\"'" ||
  fail "the malformed status was not dead-lettered"
sleep 1 # its offset committed (every 200 ms)
"$ROOT/tools/stages" kill materialize 2 >/dev/null
"$ROOT/tools/stages" kill materialize 1 >/dev/null
behind0=$(cat "$STAGES_DIR"/materialize*.log | grep -c 'Redis is behind the group' || true)
"$ROOT/tools/stages" up --replicas materialize=2 >/dev/null
sleep 3
behind1=$(cat "$STAGES_DIR"/materialize*.log | grep -c 'Redis is behind the group' || true)
check "a restart after a dead letter rebuilds nothing ($((behind1 - behind0)) 'behind' reports)" \
  test "$behind1" = "$behind0"

finish
