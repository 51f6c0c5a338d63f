#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Ingest's sweep does not re-drive answers while the view is being rebuilt.
# A rebuild replays `submissions` before `results`: until it reaches the
# statuses, every question of the view looks as if it still awaited its
# upload, and the emptied Redis has lost ingest's records of the uploads it
# saw (u<no>:<etag>) and the stages' idempotency stores. A sweep round in that
# window found the graded answer's object in storage, "of which ingest knows
# nothing", and wrote a storage event for it: the answer went through preflight
# and the paid providers a second time.
#   1. an answer is graded (the fake provider: 1 transcription, 1 grading);
#      1,200 more submissions follow it, so that the rebuild's submissions
#      phase outlasts a look at Redis;
#   2. Redis is emptied; as soon as the rebuild has replayed the graded
#      submission, materialize is SIGSTOPped (a rebuild half done) for 6 s,
#      with the sweep looking every second;
#   3. after the rebuild: no event was written for it, one request reached
#      preflight, and the provider was called once for each step.
# Then the same for a view that went back in time with its marker: Redis
# restarted from a snapshot taken while a second answer awaited its upload,
# after that answer was graded, with materialize stopped (SIGSTOP, 6 s) so
# that nothing notices; the sweep, which read the view since, must not take
# the answer for unuploaded.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
fake_up 200 200 0
export SLUICE_INGEST_SWEEP_INTERVAL_S=1 SLUICE_INGEST_SWEEP_GRACE_S=1
stages_up
mpid=$(cat "$STAGES_DIR/materialize.pid")
at_exit "kill -CONT $mpid 2>/dev/null || true" # never left stopped

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
new_submission "$work/a.wav"
sid=$SID token=$TOKEN
put_answer 0 "$work/a.wav"
graded() { view_of "$sid" "$token" | jq -e '.questions[0].state == "done"' >/dev/null; }
check "the answer is graded" wait_for 60 graded
calls() { curl -fsS "http://$FAKE/stats" | jq -c '[.by_endpoint.transcriptions."200" // 0, .by_endpoint.chat."200" // 0]'; }
check "the provider was called once for each step ($(calls))" test "$(calls)" = "[1,1]"

check "1,200 more submissions created" test "$(bulk_submissions 1200 "$work/bulk.codes")" = 1200
# (not an assertion of this test: a rebuild replays them from the topic
# whether or not the live consumer has; what still lags is logged)
wait_for 120 stage_lag0 materialize || log "materialize still lags after 120 s: $(stage_lagging materialize)"
found() { metric sluice_ingest_sweep_events_total "" "$ADMIN_INGEST"; }
found0=$(found)

RC FLUSHALL >/dev/null
redis_wait_key "$(sub_key "$sid")" || fail "the rebuild did not replay $sid"
kill -STOP "$mpid"
state=$(RC HGET "$(sub_key "$sid")" r1)
log "the rebuild replayed $sid (rank $state): materialize stopped (SIGSTOP) for 6 s"
check "the rebuild was between its phases (the question looks unuploaded: rank $state)" test "$state" = 1
sleep 6
kill -CONT "$mpid"
check "the view is rebuilt" wait_for 60 view_is_marked
check "the answer is graded in the rebuilt view" wait_for 30 graded
sleep 5 # what the sweep wrote, ingest would have sent on by now

check "the sweep wrote no event ($found0 -> $(found))" test "$(found)" = "$found0"
n=$(kcat -C -b "$B" -t preflight.requests -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$sid/1\$" || true)
check "one request reached preflight ($n)" test "$n" = 1
check "the provider was still called once for each step ($(calls))" test "$(calls)" = "[1,1]"

# ---- Redis restored from an older snapshot while materialize is down ----
# (a whole node restarted: the view goes back in time with its marker, and
# no materialize runs to notice). An answer awaiting its upload in the
# snapshot is graded after it; restored, it looks unuploaded again.
redis_faults # RC, rpid, RDIR, redis_kill ...; Redis runs again whatever happens
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user "$TEST_NAME" --label "after the flush" 2>/dev/null)
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")
new_submission "$work/a.wav" || fail "presign did not create the second submission"
sid2=$SID token2=$TOKEN
recorded() { test "$(RC HGET "$(sub_key "$sid2")" r1)" = 1; }
check "the second submission is recorded" wait_for 30 recorded
redis_snapshot "$work/old.rdb"
put_answer 0 "$work/a.wav"
graded2() { view_of "$sid2" "$token2" | jq -e '.questions[0].state == "done"' >/dev/null; }
check "the second answer is graded after the snapshot" wait_for 60 graded2
check "the provider was called once more for each step ($(calls))" test "$(calls)" = "[2,2]"
sleep 3 # the sweep has read the view since
found0=$(found)
kill -STOP "$mpid"
redis_kill
redis_start_from "$work/old.rdb"
log "Redis restarted from the snapshot taken before the upload; materialize stopped (SIGSTOP) for 6 s"
sleep 6
kill -CONT "$mpid"
check "materialize noticed and rebuilt: the second answer is graded in the view" wait_for 60 graded2
sleep 5
check "the sweep wrote no event ($found0 -> $(found))" test "$(found)" = "$found0"
n=$(kcat -C -b "$B" -t preflight.requests -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$sid2/1\$" || true)
check "one request reached preflight ($n)" test "$n" = 1
check "the provider was still called once more for each step ($(calls))" test "$(calls)" = "[2,2]"
finish
