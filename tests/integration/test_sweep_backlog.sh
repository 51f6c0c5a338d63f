#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Ingest's sweep writes an event only for an upload whose event was lost,
# not for one whose event is only waiting behind a backlog (issue 18: under
# load the sweep added work exactly when the pipeline was behind). Sweep
# every 2 s with a 3 s grace; two ingest replicas; a session timeout of 60 s
# so that a stopped replica keeps its partitions.
#   1. materialize behind: with materialize SIGSTOPped, 4 answers are
#      uploaded and ingest handles their events (preflight.requests gets
#      them), but nothing records it in the view: the questions still wait
#      in the sweep's set. 10 s later the sweep has written no event (ingest
#      recorded each upload under u<no>:<etag> in the submission's hash).
#   2. ingest behind: with the second ingest replica SIGSTOPped (it keeps
#      its partitions), 8 answers are uploaded; the events on its partitions
#      wait, unconsumed. 12 s later at least one question still waits for
#      ingest and the sweep has written no event (the oldest event ingest's
#      group has not consumed bounds what the sweep may call lost).
#   3. both resumed: all 12 answers end done, each transcribed once; the
#      sweep still wrote nothing.
# test_lost_event checks the other side: an event that was really lost is
# still written by the sweep.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export SLUICE_INGEST_SWEEP_INTERVAL_S=2 SLUICE_INGEST_SWEEP_GRACE_S=3
export SLUICE_KAFKA_SESSION_TIMEOUT_MS=60000
fake_up 100 100 0
"$ROOT/tools/stages" up --replicas ingest=2 >/dev/null || { fail "stages did not start"; finish; }
pid_of() { cat "$STAGES_DIR/$1.pid"; }
at_exit "kill -CONT $(pid_of materialize) $(pid_of ingest.2) 2>/dev/null || true"
I1=$(admin ingest 1) I2=$(admin ingest 2)
both_assigned() {
  [[ $(metric sluice_assigned_partitions 'stage="ingest"' "$I1") -gt 0 &&
    $(metric sluice_assigned_partitions 'stage="ingest"' "$I2") -gt 0 ]] 2>/dev/null
}
check "both ingest replicas have partitions" wait_for 60 both_assigned

# events the sweep wrote, as both replicas logged them
swept() { cat "$STAGES_DIR"/ingest*.log | grep -c 'no event for it has been seen' || true; }
swept0=$(swept)
espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking with my friends."
awaiting() { # awaiting SID TOKEN -> questions still awaiting their upload
  view_of "$1" "$2" | jq '[.questions[] | select(.state == "awaiting_upload")] | length'
}
recorded() { view_of "$1" "$2" | jq -e ".questions | length == $3" >/dev/null 2>&1; }
handed_on() { # handed_on SID -> preflight.requests messages of SID
  kcat -C -b "$B" -t preflight.requests -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$1/" || true
}

# 1. materialize behind
new_submission "$work/a.wav" "$work/a.wav" "$work/a.wav" "$work/a.wav"
s1=$SID t1=$TOKEN
check "submission 1 recorded" wait_for 30 recorded "$s1" "$t1" 4
kill -STOP "$(pid_of materialize)"
for i in 0 1 2 3; do put_answer $i "$work/a.wav" || fail "upload $i of submission 1"; done
check "ingest handled the 4 events" wait_for 30 at_least 4 handed_on "$s1"
sleep 10 # > grace + 2 sweep rounds
check "materialize stopped: the 4 questions still wait in the view ($(awaiting "$s1" "$t1"))" \
  test "$(awaiting "$s1" "$t1")" = 4
check "the sweep wrote no event while materialize was behind ($(($(swept) - swept0)))" \
  test "$(($(swept) - swept0))" = 0
kill -CONT "$(pid_of materialize)"
none_awaiting() { test "$(awaiting "$1" "$2")" = 0; }
check "submission 1 moves on once materialize is back" wait_for 60 none_awaiting "$s1" "$t1"

# 2. ingest behind
new_submission "$work/a.wav" "$work/a.wav" "$work/a.wav" "$work/a.wav" \
  "$work/a.wav" "$work/a.wav" "$work/a.wav" "$work/a.wav"
s2=$SID t2=$TOKEN
check "submission 2 recorded" wait_for 30 recorded "$s2" "$t2" 8
swept1=$(swept)
kill -STOP "$(pid_of ingest.2)"
for i in 0 1 2 3 4 5 6 7; do put_answer $i "$work/a.wav" || fail "upload $i of submission 2"; done
sleep 12 # > grace + 2 sweep rounds; < the 60 s session timeout
w=$(awaiting "$s2" "$t2")
check "ingest.2 stopped: some of the 8 events wait unconsumed ($w questions awaiting)" test "$w" -ge 1
check "the sweep wrote no event while ingest was behind ($(($(swept) - swept1)))" \
  test "$(($(swept) - swept1))" = 0
kill -CONT "$(pid_of ingest.2)"

# 3. everything ends done, once
done_all() { view_of "$1" "$2" | jq -e '[.questions[].state] | all(. == "done")' >/dev/null 2>&1; }
check "submission 1 ends done" wait_for 90 done_all "$s1" "$t1"
check "submission 2 ends done" wait_for 90 done_all "$s2" "$t2"
calls=$(curl -fsS "http://$FAKE/stats" | jq '[.by_endpoint.transcriptions // {} | .[]] | add // 0')
check "each of the 12 answers transcribed once ($calls STT calls)" test "$calls" = 12
check "the sweep never wrote an event ($(($(swept) - swept0)))" test "$(($(swept) - swept0))" = 0
finish
