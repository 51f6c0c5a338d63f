#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end with the HTTP plugins: the stt and grade stages run stt/openai
# and grade/openai (async, on the stage's loop) against `sluice-
# fakeprovider`, which speaks OpenAI's API and fails 30% of its calls with
# 503. Every answer must still end graded exactly once, with the model's
# criteria and cost units in the view, after more provider calls than
# questions (the retries) — and the async STT path fetches the audio itself
# through a presigned GET.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
FAKE=127.0.0.1:$((BASE + 60))
"$FAKEPROVIDER" --set fakeprovider.listen=$FAKE --set admin.listen=127.0.0.1:$((BASE + 160)) \
  --set fakeprovider.stt_latency_ms=300 --set fakeprovider.chat_latency_ms=300 \
  --set fakeprovider.failure_rate=0.3 --set fakeprovider.seed=7 >"$work/fake.log" 2>&1 &
fake=$!
at_exit "kill $fake 2>/dev/null || true"
wait_for 20 curl -fs -o /dev/null "http://$FAKE/stats" || fail "fake provider did not start"

export SLUICE_STT_PLUGIN=openai SLUICE_GRADE_PLUGIN=openai
export SLUICE_STT_OPENAI_BASE_URL=http://$FAKE SLUICE_GRADE_OPENAI_BASE_URL=http://$FAKE
export SLUICE_RETRY_TIERS=1s,2s,4s SLUICE_BREAKER_MIN_CALLS=1000
retry_topics 1s 2s 4s
stages_up

files=()
for i in 1 2 3 4 5; do
  espeak-ng -s 140 -w "$work/a$i.wav" "Answer number $i: on weekends I go hiking with my friends."
  files+=(--prompt "Question $i: what do you do on weekends?" "$work/a$i.wav")
done
out=$("$ROOT/tools/submit" "${files[@]}" 2>"$work/submit.log") ||
  { cat "$work/submit.log" >&2; fail "submission did not complete"; finish; }

check "5 questions, all done" test "$(jq -r '[.summary.total, .summary.done, .summary.failed] | join(",")' <<<"$out")" = "5,5,0"
check "transcripts from the provider" jqe '[.questions[].transcript | length > 0] | all' "$out"
check "grades from the model, with criteria" jqe '[.questions[].grade | (.engine | test("openai")) and (.criteria | length) >= 1 and .score >= 0 and .score <= 100] | all' "$out"
check "OPIc levels" jqe '[.questions[].grade.level | test("^(NL|NM|NH|IL|IM[123]|IH|AL)$")] | all' "$out"

stats=$(curl -fsS "http://$FAKE/stats")
log "provider stats: $(jq -c '.by_endpoint' <<<"$stats")"
stt_ok=$(jq '.by_endpoint.transcriptions."200" // 0' <<<"$stats")
chat_ok=$(jq '.by_endpoint.chat."200" // 0' <<<"$stats")
failures=$(jq '[.by_endpoint[] | ."503" // 0] | add' <<<"$stats")
# (>=: work an earlier test left on the shared topics may be served too)
check "every question transcribed successfully ($stt_ok)" test "$stt_ok" -ge 5
check "every question graded successfully ($chat_ok)" test "$chat_ok" -ge 5
check "the 503s were retried ($failures failed calls)" test "$failures" -ge 1
check "stt is async on the loop" grep -q 'plugin stt/openai.*async' "$STAGES_DIR/stt.log"
check "grade is async on the loop" grep -q 'plugin grade/openai.*async' "$STAGES_DIR/grade.log"
kill "$fake" 2>/dev/null || true
finish
