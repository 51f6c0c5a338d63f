#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A storage stall does not take preflight's worker threads: the step host
# fetches an answer and stores its FLAC on its event loop, and a worker only
# runs the plugin. Before, each worker fetched and stored with blocking
# requests, so a replica had at most stage.workers answers in hand, however
# many stage.max_in_flight allowed; in scenario B (bench/pipeline, 10x) four
# replicas of four workers moved ~47 answers/s with 18% of a core while
# 38,000 waited.
#
# With stage.workers 1: preflight stopped (SIGSTOP), 6 answers uploaded and
# turned into preflight requests by ingest; then the gateway stopped
# (SIGSTOP: the kernel still accepts connections, nobody answers) and
# preflight resumed.
#   - preflight takes all 6 and has all 6 GETs open to the gateway at once
#     (6 established connections from its pid, by `ss`), not 1;
#   - once the gateway resumes, all 6 end done, each with a transcript and a
#     grade, transcribed once (the fake provider's /stats).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

GW_PID=$(cat "$DEVSTACK_DIR/versitygw.pid")
at_exit "kill -CONT $GW_PID 2>/dev/null; true" # whatever happens, the gateway runs again
fake_up 50 50 0
export SLUICE_STAGE_WORKERS=1
stages_up
PF_PID=$(cat "$STAGES_DIR/preflight.pid")
at_exit "kill -CONT $PF_PID 2>/dev/null; true"
PF=$(admin preflight)
INGEST=$(admin ingest)

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."

kill -STOP "$PF_PID"
log "preflight stopped (SIGSTOP)"
"$ROOT/tools/submit" "$work/a.wav" "$work/a.wav" "$work/a.wav" "$work/a.wav" "$work/a.wav" \
  "$work/a.wav" >"$work/out.json" 2>"$work/submit.log" &
submit=$!
at_exit "kill $submit 2>/dev/null; true"
wait_for 60 at_least 6 metric sluice_messages_total 'stage="ingest",outcome="done"' "$INGEST" ||
  fail "ingest did not pass the 6 uploads on"
kill -STOP "$GW_PID"
log "gateway stopped (SIGSTOP); preflight resumed (SIGCONT)"
kill -CONT "$PF_PID"

# connections from preflight's pid to the gateway's port, established
gets() {
  ss -Htnp state established "( dport = :$DEVSTACK_S3_PORT )" | grep -c "pid=$PF_PID," || true
}
wait_for 20 at_least 6 metric sluice_in_flight 'stage="preflight"' "$PF" ||
  fail "preflight did not take the 6 answers ($(metric sluice_in_flight 'stage="preflight"' "$PF") in flight)"
wait_for 10 at_least 6 gets || true
check "with 1 worker, preflight has all 6 GETs open to the stalled gateway ($(gets))" \
  at_least 6 gets

kill -CONT "$GW_PID"
log "gateway resumed (SIGCONT)"
if ! wait "$submit"; then
  cat "$work/submit.log" >&2
  fail "the submission did not finish"
fi
out=$(cat "$work/out.json")
log "$(jq -c '[.questions[] | {no, state, stage, error: .error.class}]' <<<"$out")"
check "all 6 answers done, with transcripts and grades" \
  jqe '[.questions[] | select(.state == "done" and (.transcript | length > 0) and .grade.score >= 0)]
       | length == 6' "$out"
stats=$(curl -fsS "http://$FAKE/stats")
log "provider calls: $(jq -c '.by_endpoint' <<<"$stats")"
check "each transcribed once (6 STT calls)" \
  test "$(jq '[.by_endpoint.transcriptions[]?] | add // 0' <<<"$stats")" = 6
finish
