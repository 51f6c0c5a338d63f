#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The tracing backend never holds the pipeline up. Every stage sends its
# spans to a real Jaeger (tools/devstack, DEVSTACK_JAEGER=1; every trace
# recorded) while pipeline_loadgen keeps a steady open-loop load (the fake
# provider answering in 0.3 s), three runs of the same rate and length:
#   A  Jaeger up (the anchor);
#   B  Jaeger SIGSTOPped for the whole run: it takes connections (the
#      kernel's backlog) and answers nothing, so each export waits out
#      trace.timeout_ms;
#   C  Jaeger killed: every export is refused.
# Checked for each run: every answer done exactly once (0 lost, 0 failed,
# 0 duplicated); B's and C's upload-to-done p95 within 2x A's + 2 s (the
# same throughput: an open loop at the same rate that kept up); the spans
# that could not go out were dropped and counted
# (sluice_trace_spans_dropped_total, summed over the stages), never
# waited for.
# Knobs: TRACE_LOAD_SECONDS (20 per run), TRACE_LOAD_RATE (submissions/s, 3).
export DEVSTACK_JAEGER=1
source "$(dirname "$0")/lib.sh"
at_exit '"$ROOT/tools/devstack" jaeger-stop >/dev/null 2>&1 || true'
[[ -n ${JAEGER_QUERY_URL:-} ]] || { fail "the dev stack did not start Jaeger"; finish; }
JPID=$(cat "$("$ROOT/tools/devstack" pidfiles jaeger)")
at_exit "kill -CONT $JPID 2>/dev/null || true"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
SECS=${TRACE_LOAD_SECONDS:-20}
RATE=${TRACE_LOAD_RATE:-3}
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }
fake_up 300 300 50
stages_up
espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."

# dropped: the spans every stage dropped so far (both reasons)
dropped() {
  local s n=0 v
  for s in $("$ROOT/tools/stages" list); do
    v=$(curl -fsS "$(admin "$s")/metrics" 2>/dev/null |
      awk '/^sluice_trace_spans_dropped_total\{/ {n += $2} END {print n + 0}')
    n=$((n + ${v:-0}))
  done
  echo "$n"
}
exported() {
  local s n=0 v
  for s in $("$ROOT/tools/stages" list); do
    v=$(metric sluice_trace_spans_exported_total '' "$(admin "$s")")
    n=$((n + ${v%.*}))
  done
  echo "$n"
}
load() { # load NAME SEED: one run; its summary in $work/NAME.json
  local rc=0
  "$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
    --redis "$SLUICE_REDIS_URL" --rate "$RATE" --duration "$SECS" \
    --mean-questions 3 --max-questions 6 --drain-timeout 120 --seed "$2" \
    >"$work/$1.json" 2>"$work/$1.log" || rc=$?
  log "$1: $(cat "$work/$1.json")"
  check "$1: every answer done once (exit $rc)" \
    jqe '.uploaded > 20 and .lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded' \
    "$(cat "$work/$1.json")"
}
p95() { jq .upload_to_done_p95_s "$work/$1.json"; }

load A 21
d_a=$(dropped) e_a=$(exported)
check "A: the stages exported spans to Jaeger ($e_a), dropped none ($d_a)" test "$e_a" -gt 100 -a "$d_a" = 0

kill -STOP "$JPID"
load B 22
d_b=$(dropped)
check "B (Jaeger frozen): p95 $(p95 B) s within 2x A's $(p95 A) s + 2 s" \
  awk -v b="$(p95 B)" -v a="$(p95 A)" 'BEGIN {exit !(b <= 2 * a + 2)}'
check "B: the spans that could not go out were dropped and counted ($((d_b - d_a)))" test $((d_b - d_a)) -gt 0
kill -KILL "$JPID"
kill -CONT "$JPID" 2>/dev/null || true

load C 23
d_c=$(dropped)
check "C (Jaeger gone): p95 $(p95 C) s within 2x A's $(p95 A) s + 2 s" \
  awk -v c="$(p95 C)" -v a="$(p95 A)" 'BEGIN {exit !(c <= 2 * a + 2)}'
check "C: refused exports counted as dropped ($((d_c - d_b)))" test $((d_c - d_b)) -gt 0
for s in ingest stt grade materialize; do
  check "$s logged the collector's outage once, not per batch ($(grep -c 'tracing: .* not taken' "$STAGES_DIR/$s.log"))" \
    test "$(grep -c 'tracing: .* not taken' "$STAGES_DIR/$s.log")" -le 2
done
finish
