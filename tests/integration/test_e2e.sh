#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end against the real stack: spoken answers (WAV, FLAC, Ogg/Vorbis
# from espeak-ng + sox) go presign -> storage PUT -> storage event -> ingest
# -> stt (PocketSphinx) -> grade -> materialize -> results; every question
# must end `done` with a non-empty transcript and a grade.
source "$(dirname "$0")/lib.sh"
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

espeak-ng -s 140 -w "$work/a1.wav" "On weekends I usually go hiking in the mountains with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favorite food is pizza because it is warm and delicious."
espeak-ng -s 140 -w "$work/a3.wav" "Last summer I traveled to the beach with my brother and we swam every day."
sox "$work/a2.wav" "$work/a2.flac"
sox "$work/a3.wav" "$work/a3.ogg"

out=$("$ROOT/tools/submit" --prompt "What do you do on weekends?" "$work/a1.wav" \
  --prompt "What is your favorite food?" "$work/a2.flac" \
  --prompt "Tell me about a trip you took." "$work/a3.ogg" 2>"$work/submit.log") ||
  { cat "$work/submit.log" >&2; fail "submission did not complete"; finish; }

check "a complete submission tells the client to stop polling" jqe '.poll.stop == true and .poll.retry_after_s == 0' "$out"
check "3 questions, all done" test "$(jq -r '[.summary.total, .summary.done, .summary.failed] | join(",")' <<<"$out")" = "3,3,0"
for q in 1 2 3; do
  check "q$q has a non-empty transcript" test -n "$(jq -r ".questions[$((q - 1))].transcript // empty" <<<"$out")"
  Q=".questions[$((q - 1))]"
  check "q$q has a score 0..100" jqe "$Q.grade.score | type == \"number\" and . >= 0 and . <= 100" "$out"
  check "q$q has a level" jqe "$Q.grade.level | test(\"^(NL|NM|NH|IL|IM[123]|IH|AL)$\")" "$out"
  check "q$q has feedback" jqe "$Q.grade.feedback | length > 20" "$out"
  check "q$q audio duration recognised (2-10 s)" jqe "$Q.duration_s > 2 and $Q.duration_s < 10" "$out"
  # preflight's timing reached the grader: fluency said over the speaking time (rubric v2)
  check "q$q: each criterion shows its evidence, fluency over the speaking time preflight measured" \
    jqe "($Q.grade.criteria | length) == 5 and all($Q.grade.criteria[]; (.comment | length) > 5) and
      ($Q.grade.criteria[] | select(.name == \"fluency\") | .comment |
        test(\"words per minute over [0-9.]+ s of speaking\"))" "$out"
done
log "q1 criteria: $(jq -c '.questions[0].grade.criteria' <<<"$out")"
"$SLUICECTL" submission "$(jq -r .submission_id <<<"$out")" >"$work/sub.txt" 2>&1 || true
check "sluicectl submission lists each question's grade with its criteria and their evidence" \
  bash -c "grep -q '^Grades:' '$work/sub.txt' && test \$(grep -Ec '^  q[123] (NL|NM|NH|IL|IM[123]|IH|AL) [0-9.]+ [(]rubric[)]' '$work/sub.txt') -eq 3 &&
    test \$(grep -Ec '^     fluency .* words per minute over [0-9.]+ s of speaking' '$work/sub.txt') -eq 3"
sed -n '/^Grades:/,$p' "$work/sub.txt" | head -8 >&2
# synthetic speech is recognised roughly: ask for one topic word per answer
topics=("weekends hiking mountains friends" "favorite food pizza delicious" "summer beach brother swam")
for q in 1 2 3; do
  text=$(jq -r ".questions[$((q - 1))].transcript" <<<"$out")
  log "q$q transcript: $text"
  hit=""
  for w in ${topics[$((q - 1))]}; do grep -qiw "$w" <<<"$text" && hit=$w; done
  check "q$q transcript has a topic word (${hit:-none})" test -n "$hit"
done

# the stages counted what they did
check "stt processed 3 messages" test "$(metric sluice_messages_total 'stage="stt",outcome="done"' "$(admin stt)")" -ge 3
check "grade processed 3 messages" test "$(metric sluice_messages_total 'stage="grade",outcome="done"' "$(admin grade)")" -ge 3
check "presign accepted 1 submission" test "$(metric sluice_submissions_total 'outcome="accepted"' "$(admin presign)")" -ge 1
check "/healthz answers ok" curl -fsS -o /dev/null "$(admin stt)/healthz"

finish
