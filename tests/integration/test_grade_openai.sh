#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grade/openai stores only grades that match its schema (issue 45). The
# stages run stt/openai and grade/openai against the fake provider, which
# answers each question's grade as a marker in its prompt asks
# (tools/fakeprovider/fakeprovider.c): four answers of the same recording,
#   q1 no marker                  a valid grade at once
#   q2 [fake-grade:invalid-once]  an invalid reply, then a valid one
#   q3 [fake-grade:invalid]       invalid every time
#   q4 [fake-grade:truncated]     cut at the token limit every time
# Checked: q1 and q2 done with the model's criteria, among them fluency
# whose comment is the timing evidence the prompt carried (preflight's
# pauses, in rubric v2's words); q3 and q4 failed as invalid_grade with no
# grade in the view, after exactly one regeneration each (7 chat calls in
# all, by the fake provider's count); sluicectl submission names the class.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

fake_up 100 100 0
stages_up

# one recording with two clear pauses
espeak-ng -s 150 -w "$work/p1.wav" "On weekends I usually go hiking with my friends."
espeak-ng -s 150 -w "$work/p2.wav" "We take the train to the mountains early in the morning."
espeak-ng -s 150 -w "$work/p3.wav" "In the evening we cook dinner together and talk."
sox -n -r "$(soxi -r "$work/p1.wav")" -b 16 -c 1 "$work/s.wav" trim 0 0.8
sox "$work/p1.wav" "$work/s.wav" "$work/p2.wav" "$work/s.wav" "$work/p3.wav" "$work/a.wav"
q="What do you do on weekends?"
stats0=$(curl -fsS "http://$FAKE/stats")
out=$(SUBMIT_TIMEOUT=240 "$ROOT/tools/submit" --prompt "$q" "$work/a.wav" \
  --prompt "[fake-grade:invalid-once] $q" "$work/a.wav" \
  --prompt "[fake-grade:invalid] $q" "$work/a.wav" \
  --prompt "[fake-grade:truncated] $q" "$work/a.wav" 2>"$work/submit.log") ||
  { tail -5 "$work/submit.log" >&2; fail "the submission did not complete"; finish; }
log "$(jq -c '[.questions[] | {no, state, error: .error.class, criteria: [.grade.criteria[]?.name]}]' <<<"$out")"

check "q1 and q2 done with the model's grade" \
  jqe '[.questions[] | select(.no <= 2) | select(.state == "done" and (.grade.engine | test("openai"))
        and (.grade.criteria | length) >= 3)] | length == 2' "$out"
check "their fluency criterion cites the timing the prompt carried" \
  jqe '[.questions[] | select(.no <= 2) | .grade.criteria[] | select(.name == "fluency")
        | .comment | test("words per minute over [0-9.]+ s of speaking; [0-9]+ silent pause")]
       | length == 2' "$out"
check "q3 and q4 failed as invalid_grade" \
  jqe '[.questions[] | select(.no >= 3) | select(.state == "failed" and .error.class == "invalid_grade")]
       | length == 2' "$out"
check "no grade stored for them" \
  jqe '[.questions[] | select(.no >= 3) | select(.grade == null)] | length == 2' "$out"
check "the truncated one's reason names the token limit" \
  jqe '.questions[] | select(.no == 4) | .error.message | test("token limit")' "$out"

stats=$(curl -fsS "http://$FAKE/stats")
delta() { echo $(($(jq "$1 // 0" <<<"$stats") - $(jq "$1 // 0" <<<"$stats0"))); }
chat=$(delta '.by_endpoint.chat."200"') bad=$(delta .bad_replies) cut=$(delta .truncated)
log "chat calls $chat, invalid replies $bad, truncated $cut"
check "one regeneration per invalid reply, no more: 1 + 2 + 2 + 2 = 7 chat calls ($chat)" \
  test "$chat" = 7
check "3 invalid replies (q2 once, q3 twice) and 2 truncated (q4) ($bad, $cut)" \
  test "$bad,$cut" = 3,2

sid=$(jq -r .submission_id <<<"$out")
"$SLUICECTL" submission "$sid" >"$work/sub.txt" 2>&1 || true
check "sluicectl submission names the failure class" grep -q invalid_grade "$work/sub.txt"
check "the grade stage logged the regenerations" \
  test "$(grep -c 'grade/openai: invalid reply' "$STAGES_DIR/grade.log")" -ge 3
finish
