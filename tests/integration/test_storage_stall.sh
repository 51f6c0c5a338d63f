#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A storage stall does not cap what ingest and preflight hold at once.
#   - ingest HEADs every uploaded object (ingest.verify_object = always) and
#     makes two Redis round trips, blocking, on its worker pool: its
#     concurrency is stage.workers, whose default for ingest is 32 (it was
#     the runtime's 4: in scenario B, 10x, a replica moved 22 events/s with
#     1,100 in hand);
#   - preflight's step host fetches an answer and stores its FLAC on its
#     event loop, and a worker only runs the plugin (before, each worker
#     fetched and stored with blocking requests: four replicas of four
#     workers moved ~47 answers/s with 18% of a core while 38,000 waited).
#
# ingest and preflight stopped (SIGSTOP), 8 answers uploaded (8 storage
# events in Kafka); the gateway stopped (SIGSTOP: the kernel still accepts
# connections, nobody answers):
#   - ingest resumed, with its default workers, has all 8 HEADs open to the
#     gateway at once (8 established connections from its pid, by `ss`);
#   - the gateway resumed until ingest passed the 8 on, stopped again, and
#     preflight resumed with stage.workers 1 has all 8 GETs open at once;
#   - once the gateway resumes, all 8 end done, each with a transcript and a
#     grade, transcribed once (the fake provider's /stats).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
N=8

GW_PID=$(cat "$DEVSTACK_DIR/versitygw.pid")
at_exit "kill -CONT $GW_PID 2>/dev/null; true" # whatever happens, the gateway runs again
fake_up 50 50 0
export STAGES_ARGS_preflight="--set stage.workers=1"
stages_up
INGEST_PID=$(cat "$STAGES_DIR/ingest.pid") PF_PID=$(cat "$STAGES_DIR/preflight.pid")
at_exit "kill -CONT $INGEST_PID $PF_PID 2>/dev/null; true"
PF=$(admin preflight)
INGEST=$(admin ingest)

# connections from pid $1 to the gateway's port, established
conns() {
  ss -Htnp state established "( dport = :$DEVSTACK_S3_PORT )" | grep -c "pid=$1," || true
}
events() {
  kcat -C -b "$SLUICE_KAFKA_BROKERS" -t storage-events -o beginning -e -q 2>/dev/null |
    grep -c 'ObjectCreated' || true
}

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
files=()
for _ in $(seq $N); do files+=("$work/a.wav"); done

before=$(events) # the stack's topics outlive a test
kill -STOP "$INGEST_PID" "$PF_PID"
log "ingest and preflight stopped (SIGSTOP)"
# well inside ctest's 600 s, so that a hang fails with the questions' states
SUBMIT_TIMEOUT=${STALL_SUBMIT_TIMEOUT:-300} "$ROOT/tools/submit" "${files[@]}" >"$work/out.json" \
  2>"$work/submit.log" &
submit=$!
at_exit "kill $submit 2>/dev/null; true"
wait_for 60 at_least $((before + N)) events ||
  fail "the gateway did not publish $N storage events ($(($(events) - before)))"

# stalled STAGE PID ADMIN WHAT: with the gateway stopped, STAGE (stopped,
# PID) resumed takes the N messages waiting for it and has N requests
# (WHAT) open to the gateway at once
stalled() {
  local stage=$1 pid=$2 url=$3 what=$4
  kill -STOP "$GW_PID"
  kill -CONT "$pid"
  log "gateway stopped; $stage resumed"
  wait_for 20 at_least $N metric sluice_in_flight "stage=\"$stage\"" "$url" ||
    fail "$stage did not take its $N messages ($(metric sluice_in_flight "stage=\"$stage\"" "$url") in flight)"
  wait_for 10 at_least $N conns "$pid" || true
  check "$stage has all $N $what open to the stalled gateway ($(conns "$pid"))" \
    at_least $N conns "$pid"
}

stalled ingest "$INGEST_PID" "$INGEST" HEADs # its default workers
kill -CONT "$GW_PID"
wait_for 60 at_least $N metric sluice_messages_total 'stage="ingest",outcome="done"' "$INGEST" ||
  fail "ingest did not pass the $N uploads on"
stalled preflight "$PF_PID" "$PF" GETs # 1 worker

kill -CONT "$GW_PID"
log "gateway resumed (SIGCONT)"
if ! wait "$submit"; then
  tail -n 5 "$work/submit.log" >&2
  for s in ingest preflight stt grade; do
    echo "--- $s (warnings and errors)" >&2
    grep -E '"level":"(warn|error)"' "$STAGES_DIR/$s.log" | tail -n 8 >&2
  done
  fail "the submission did not finish"
fi
out=$(cat "$work/out.json")
log "$(jq -c '[.questions[] | {no, state, stage, error: .error.class}]' <<<"$out")"
check "all $N answers done, with transcripts and grades" \
  jqe "[.questions[] | select(.state == \"done\" and (.transcript | length > 0) and .grade.score >= 0)]
       | length == $N" "$out"
stats=$(curl -fsS "http://$FAKE/stats")
log "provider calls: $(jq -c '.by_endpoint' <<<"$stats")"
check "each transcribed once ($N STT calls)" \
  test "$(jq '[.by_endpoint.transcriptions[]?] | add // 0' <<<"$stats")" = $N
finish
