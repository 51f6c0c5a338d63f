#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Progress is data (pipeline.json's progress labels, ranked by stage order),
# and a view written before that stays monotonic: an older materialize
# stored ranks 2 queued, 3 transcribing, 4 grading, 5 failed, 6 done, which
# the apply script translates to today's ranks of those labels.
#
# A submission of two answers is created; before they are uploaded, its view
# in Redis is rewritten as an older materialize would have left it:
#   q1 done (rank 6, transcript "LEGACY-DONE"), q2 grading (rank 4).
# Then both are uploaded and the pipeline runs them to the end:
#   - q1 stays exactly as stored: today's statuses (queued 20 ... done) are
#     not newer than a legacy done (without the translation, every one of
#     them outranks 6 and the final done replaces the stored one);
#   - q2 moves on to done, and never back to queued, checking or
#     transcribing (all below a legacy grading) on the way;
#   - a status naming a label no stage has is dead-lettered as
#     unknown_progress, not applied (sent with kcat as protobuf bytes).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
fake_up 400 400 0
stages_up

espeak-ng -s 140 -w "$work/a1.wav" "On weekends I usually go hiking in the mountains."
espeak-ng -s 140 -w "$work/a2.wav" "My favourite food is pizza because it is warm."
new_submission "$work/a1.wav" "$work/a2.wav" || fail "could not create the submission"
wait_for 20 eval '[[ $(view_of "$SID" "$TOKEN" | jq -r ".questions | length") == 2 ]]' ||
  fail "the view of $SID did not appear"

R() { redis-cli -u "$SLUICE_REDIS_URL" "$@"; }
R HSET "sl:sub:$SID" r1 6 q1 '{"no":1,"state":"done","updated_at_ms":1,"stage":"grade","transcript":"LEGACY-DONE","duration_s":1}' \
  r2 4 q2 '{"no":2,"state":"grading","updated_at_ms":1,"stage":"stt","transcript":"LEGACY-GRADING"}' >/dev/null
put_answer 0 "$work/a1.wav" && put_answer 1 "$work/a2.wav" || fail "uploads failed"

seen=() last=
end=$((SECONDS + 60))
while ((SECONDS < end)); do
  s=$(view_of "$SID" "$TOKEN" | jq -r '.questions[] | select(.no == 2) | .state')
  [[ $last == "$s" ]] || seen+=("$s")
  last=$s
  [[ $s == done ]] && break
  sleep 0.1
done
log "q2 went through: ${seen[*]}"
check "q2 ends done" test "$last" = done
check "q2 never went back below grading" test "$(printf '%s\n' "${seen[@]}" | grep -cvE '^(grading|done)$')" = 0

# every status of q1 applied (or refused) before looking at it: its final
# status is in the results topic, and materialize has no lag left
# (one line per message: the payload's own bytes may hold newlines; grep
# reads to the end, not -q: on a lane whose results topic earlier tests
# filled, an early exit SIGPIPEs kcat and pipefail fails the match)
graded() {
  kcat -C -b "$SLUICE_KAFKA_BROKERS" -t results -o beginning -e -q -f '%k %s<<END>>\n' 2>/dev/null |
    tr -c '[:print:]' ' ' | sed 's/<<END>>/\n/g' | grep "^ *$SID/1 .*grade" >/dev/null
}
wait_for 60 graded ||
  fail "q1 was never graded by today's pipeline"
wait_for 30 eval '[[ $("$SLUICECTL" status --json 2>/dev/null | jq "[.stages[] | select(.stage == \"materialize\") | .lag] | add") == 0 ]]' ||
  fail "materialize did not catch up"
check "q1 keeps the done an older materialize stored" \
  jqe '.questions[] | select(.no == 1) | .state == "done" and .transcript == "LEGACY-DONE"' "$(view_of "$SID" "$TOKEN")"
check "nothing was written over q1 (its stored rank is still the legacy 6)" test "$(R HGET "sl:sub:$SID" r1)" = 6

# a status whose label no stage has: QuestionStatus{submission_id, question_no
# 2, state QUEUED, stage "x", progress "moderating"} as protobuf bytes
pb_str() { printf '%b' "\\x$(printf %02x "$1")\\x$(printf %02x "${#2}")"; printf '%s' "$2"; }
{ pb_str 10 "$SID"; printf '\x10\x02\x18\x02'; pb_str 42 x; pb_str 98 moderating; } >"$work/status.pb"
dl0=$(metric sluice_messages_total 'stage="materialize",outcome="dead_lettered"' "$(admin materialize)")
kcat -P -b "$SLUICE_KAFKA_BROKERS" -t results -k "$SID/2" "$work/status.pb"
wait_for 30 eval '(( $(metric sluice_messages_total "stage=\"materialize\",outcome=\"dead_lettered\"" "$(admin materialize)") > dl0 ))' ||
  fail "the status with an unknown label was not dead-lettered"
check "the unknown label changed nothing" \
  jqe '.questions[] | select(.no == 2) | .state == "done"' "$(view_of "$SID" "$TOKEN")"
check "materialize names it unknown_progress" grep -q '(unknown_progress)' "$STAGES_DIR/materialize.log"
finish
