#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Scale-out under a rebalance storm: a steady load (pipeline_loadgen, open
# loop) over the fake provider (3 s calls) while stt and grade are scaled
# between 2 and 4 replicas every 20 s and one replica (stt and grade in
# turn) is SIGKILLed every 30 s; ingest and materialize run 3 replicas.
# Every uploaded answer ends done exactly once (0 lost, 0 failed, 0
# duplicated), each of stt and grade pays at most SCALEOUT_MAX_CALLS (1.02)
# provider calls per question (the fake provider's own count), and every
# partition's lag is back to 0 within 2 minutes of the load.
#
# What a SIGKILL costs: the calls the killed replica had running are paid
# again by the partition's next owner, once their claims' lease
# (stage.claim_lease_ms) has expired. Everything else — partitions moving on
# scale-up and scale-down, revokes while calls run — must cost nothing.
# Knobs: SCALEOUT_SECONDS (120), SCALEOUT_RATE (submissions/s, 3),
# SCALEOUT_MAX_CALLS (1.02).
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
SECS=${SCALEOUT_SECONDS:-120}
RATE=${SCALEOUT_RATE:-3}
MAX_CALLS=${SCALEOUT_MAX_CALLS:-1.02}
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }

fake_up 3000 3000 300 # ms: stt, grading, jitter
export SLUICE_LOG_LEVEL=${SLUICE_LOG_LEVEL:-info}
"$ROOT/tools/stages" up --replicas ingest=3,stt=3,grade=3,materialize=3 >/dev/null ||
  { fail "stages did not start"; finish; }

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
before=$(curl -fsS "http://$FAKE/stats")

"$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
  --redis "127.0.0.1:$DEVSTACK_REDIS_PORT" --rate "$RATE" --duration "$SECS" \
  --mean-questions 3 --max-questions 6 --drain-timeout 300 --seed 11 \
  >"$work/summary.json" 2>"$work/loadgen.log" &
lg=$!

# the storm: every 10 s; scale at 20 s, 40 s, ...; a SIGKILL at 30 s, 60 s, ...
# by the wall clock from the load's start: a scale waits for replicas to
# drain, and on a busy machine (CI) a sleep of 10 s after each step fell so
# far behind that the load ended before the third SIGKILL was due
sizes=(4 2 3 4 2 3 4 2 3)
kill_turn=(stt grade)
t=0 scales=0 kills=0 storm0=$SECONDS
declare -A crash_cost=([stt]=0 [grade]=0)
while kill -0 "$lg" 2>/dev/null && ((t + 10 <= SECS)); do
  t=$((t + 10))
  ahead=$((storm0 + t - SECONDS))
  ((ahead > 0)) && sleep "$ahead"
  if ((t % 20 == 0)); then
    n=${sizes[$((scales % ${#sizes[@]}))]}
    scales=$((scales + 1))
    "$ROOT/tools/stages" scale stt "$n" >>"$work/storm.log" 2>&1 || fail "scale stt $n"
    "$ROOT/tools/stages" scale grade "$n" >>"$work/storm.log" 2>&1 || fail "scale grade $n"
    log "t=${t}s: stt and grade scaled to $n"
  fi
  if ((t % 30 == 0)); then
    s=${kill_turn[$((kills % 2))]}
    kills=$((kills + 1))
    # the highest-numbered replica; what it has in flight is what its
    # death may cost (read just before the kill)
    line=$("$ROOT/tools/stages" status | grep -E "^\[stages\] $s(\.[0-9]+)? up" | tail -n 1)
    victim=$(sed -E 's/^\[stages\] ([^ ]+) up.*/\1/' <<<"$line")
    admin=$(sed -E 's/.*admin (http[^)]+)\).*/\1/' <<<"$line")
    inflight=$(metric sluice_in_flight "stage=\"$s\"" "$admin" 2>/dev/null || echo 0)
    r=${victim#"$s"}; r=${r#.}; r=${r:-1}
    "$ROOT/tools/stages" kill "$s" "$r" >>"$work/storm.log" 2>&1 || fail "kill $victim"
    crash_cost[$s]=$((${crash_cost[$s]:-0} + ${inflight%.*}))
    log "t=${t}s: $victim SIGKILLed with $inflight message(s) in flight"
  fi
done
# back to a steady 3 replicas (the killed ones restart) for the drain
"$ROOT/tools/stages" scale stt 3 >>"$work/storm.log" 2>&1 || fail "scale stt 3"
"$ROOT/tools/stages" scale grade 3 >>"$work/storm.log" 2>&1 || fail "scale grade 3"
rc=0
wait "$lg" || rc=$?
summary=$(cat "$work/summary.json")
log "load: $summary"
log "storm: $scales scale events, $kills SIGKILLs"
check "the load generator finished (exit $rc)" test "$rc" = 0
check "answers were uploaded" jqe '.uploaded > 100' "$summary"
check "0 lost, 0 failed, 0 duplicated, every upload done" \
  jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded' "$summary"
check "the storm happened (>= 4 scale events, >= 3 SIGKILLs)" test "$scales" -ge 4 -a "$kills" -ge 3

# Provider calls. A call a live replica completes is logged with its key
# ("transcribed", "graded by"): no key may be completed twice. Calls beyond
# one per question are allowed only up to what the SIGKILLed replicas had
# in flight (their running calls die with them and are paid again), plus
# MAX_CALLS - 1 of the questions for anything else.
after=$(curl -fsS "http://$FAKE/stats")
q=$(jq '.uploaded' <<<"$summary")
declare -A ep_stage=([transcriptions]=stt [chat]=grade) ep_done=([transcriptions]='transcribed' [chat]='graded by')
for ep in transcriptions chat; do
  s=${ep_stage[$ep]}
  calls=$(jq -n --argjson b "$before" --argjson a "$after" --arg e "$ep" \
    '($a.by_endpoint[$e]["200"] // 0) - ($b.by_endpoint[$e]["200"] // 0)')
  ratio=$(jq -n "$calls / $q")
  twice=$(cat "$STAGES_DIR/$s".*log 2>/dev/null | grep "\"msg\":\"${ep_done[$ep]}" |
    jq -r '.submission + "/" + .question' | sort | uniq -d | wc -l)
  allowed=$(jq -n "$q * $MAX_CALLS + ${crash_cost[$s]}")
  log "$s: $calls provider calls for $q questions = $ratio per question; SIGKILLs cost up to ${crash_cost[$s]}; completed twice: $twice"
  check "$s: no question's provider call completed twice ($twice)" test "$twice" = 0
  check "$s: calls <= $MAX_CALLS per question + what the SIGKILLs had in flight ($calls <= $allowed)" \
    jq -n -e "$calls >= $q and $calls <= $allowed" >/dev/null
done
waits=$(cat "$STAGES_DIR"/stt*.log "$STAGES_DIR"/grade*.log | grep -c 'another replica is calling' || true)
log "claims met (a replica waited for another's call instead of calling): $waits"

lagged() { "$SLUICECTL" status --json | jq -e '[.stages[].lag] | add == 0' >/dev/null; }
check "every partition's lag back to 0 within 2 minutes" wait_for 120 lagged
stages_down || true
kill "$fake" 2>/dev/null || true
finish
