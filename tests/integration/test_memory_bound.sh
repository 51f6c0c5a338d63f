#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# stage.max_bytes_in_flight bounds what stt holds, not only how many
# messages: 24 answers of 1.5 MB (4 submissions of 6) wait in stt.requests
# while the fake provider takes 3 s per transcription, and stt may hold
# 5 MiB. Sampling stt's sluice_in_flight_bytes and the provider's own count
# of calls in flight every 0.2 s:
#   - the bytes in flight never pass the limit by more than one answer, and
#     the provider never has more calls at once than fit (3 answers under
#     the limit, plus the one that crosses it) — without the byte limit all
#     24 go out at once (stage.max_in_flight is 1000);
#   - fetching paused at the byte limit (sluice_fetch_pauses_total) and
#     messages waited in Kafka (never all 24 in flight);
#   - every answer still ends done, transcribed exactly once (one Transcript
#     per question on grade.requests), and the gauge is back to 0 after;
#   - one answer larger than the limit (6.4 MB) still runs, alone, and
#     those queued behind it follow (no deadlock).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
LIMIT=$((5 << 20))
fake_up 3000 0 0 # ms: stt, grading, jitter
# ingest writes stt.requests directly: stt fetches the uploaded WAV itself
jq '.topics |= map(select(.name != "preflight.requests")) | .stages |= map(select(.name != "preflight"))
    | .stages |= map(if .name == "ingest" then .outputs = ["stt.requests", "results"] else . end)' \
  "$ROOT/pipeline.json" >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json SLUICE_STAGE_MAX_BYTES_IN_FLIGHT=$LIMIT
stages_up
STT=$(admin stt)

sox -n -r 16000 -c 1 -b 16 "$work/a.wav" synth 47 sine 300 # 1.5 MB
sox -n -r 16000 -c 1 -b 16 "$work/big.wav" synth 200 sine 300 # 6.4 MB: over the limit
ANSWER=$(stat -c %s "$work/a.wav")
BIG=$(stat -c %s "$work/big.wav")
log "answers of $ANSWER bytes (and one of $BIG), stt.max_bytes_in_flight $LIMIT"

# the sampler: stt's bytes and messages in flight, the provider's calls in flight
sample() {
  set +e +o pipefail
  while :; do
    m=$(curl -fsS --max-time 1 "$STT/metrics" 2>/dev/null)
    b=$(awk '$1 == "sluice_in_flight_bytes{stage=\"stt\"}" {print $2}' <<<"$m")
    n=$(awk '$1 == "sluice_in_flight{stage=\"stt\"}" {print $2}' <<<"$m")
    p=$(curl -fsS --max-time 1 "http://$FAKE/stats" 2>/dev/null | jq '.in_flight // 0')
    echo "${b:-0} ${n:-0} ${p:-0}"
    sleep 0.2
  done
}
sample >"$work/samples" &
sampler=$!
at_exit "kill $sampler 2>/dev/null || true"

# phase 1: 24 answers of 1.5 MB at once
files=()
for _ in 1 2 3 4 5 6; do files+=("$work/a.wav"); done
pids=()
for s in 1 2 3 4; do
  "$ROOT/tools/submit" "${files[@]}" >"$work/out-$s.json" 2>"$work/submit-$s.log" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a submission did not complete: $(tail -2 "$work/submit-"*.log)"; done
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null || true

read -r maxb maxn maxp < <(awk '{ if ($1 > b) b = $1; if ($2 > n) n = $2; if ($3 > p) p = $3 }
  END { printf "%d %d %d\n", b, n, p }' "$work/samples")
fits=$((LIMIT / ANSWER + 1))
log "$(wc -l <"$work/samples") samples: at most $maxb bytes and $maxn messages in flight in stt, $maxp calls at the provider"
check "bytes in flight never passed the limit by more than one answer ($maxb <= $LIMIT + $ANSWER + 4096)" \
  test "$maxb" -le $((LIMIT + ANSWER + 4096))
check "the gauge saw the answers (max $maxb > $((LIMIT / 2)))" test "$maxb" -gt $((LIMIT / 2))
check "the provider never had more than $fits calls at once ($maxp)" test "$maxp" -le "$fits"
check "messages waited in Kafka: never all 24 in flight ($maxn)" test "$maxn" -lt 24
pauses=$(metric sluice_fetch_pauses_total 'stage="stt",limit="bytes"' "$STT")
check "fetching paused at the byte limit ($pauses times)" test "${pauses%.*}" -ge 1
for s in 1 2 3 4; do
  check "submission $s: 6 questions, all done" \
    jqe '.summary.total == 6 and .summary.done == 6 and .summary.failed == 0' "$(cat "$work/out-$s.json")"
done
sids=$(for s in 1 2 3 4; do jq -r .submission_id "$work/out-$s.json"; done)
transcripts() { # Transcripts on grade.requests for this test's submissions, by key
  kcat -C -b "$SLUICE_KAFKA_BROKERS" -t grade.requests -o beginning -e -q -f '%k\n' 2>/dev/null |
    grep -F "$sids" || true
}
check "one Transcript per question (24 keys, none twice)" \
  test "$(transcripts | sort | uniq -c | awk '$1 == 1' | wc -l)" = 24 -a "$(transcripts | wc -l)" = 24
wait_for 10 test "$(metric sluice_in_flight_bytes 'stage="stt"' "$STT")" = 0 ||
  fail "stt still counts $(metric sluice_in_flight_bytes 'stage="stt"' "$STT") bytes in flight with nothing to do"

# phase 2: an answer larger than the limit, with two ordinary ones behind it
"$ROOT/tools/submit" "$work/big.wav" "$work/a.wav" "$work/a.wav" >"$work/out-big.json" \
  2>"$work/submit-big.log" || fail "the submission with the large answer did not complete: $(tail -2 "$work/submit-big.log")"
check "the answer larger than the limit and those behind it done" \
  jqe '.summary.total == 3 and .summary.done == 3' "$(cat "$work/out-big.json")"
kill "$fake" 2>/dev/null || true
finish
