#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cost per answer: what every provider call cost (cost_units), retries
# included, reaches the view per question and per submission, the metric
# sluice_provider_cost_units_total{stage,plugin}, and sluicectl.
#   1. two answers through stt/openai and grade/openai against the fake
#      provider: each question's cost is its stt units (audio seconds sent:
#      the speech, its silence cut by preflight) plus
#      its grading tokens, the submission's is their sum and equals what the
#      stt and grade stages counted in the metric; sluicectl submission
#      prints it, sluicectl status lists it per stage and plugin;
#   2. the DONE status of question 1 produced to the results topic a second
#      time (a redelivery): the view's cost does not change (the status
#      carries a total that is set, not added);
#   3. sluice-harness (the real runtime) calls a "provider" that costs 1.25
#      units a call for an input keyed "<sid>/1": two transient failures
#      (two retry copies), then a permanent one: the retry copies carry the
#      running sum (sluice-cost-units 1.25, then 2.5), the FAILED status
#      carries 3.75 and the view shows it, and the metric counted 3.75.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export HARNESS_STAGE=hcost SLUICE_RETRY_TIERS=1s,2s
harness_topics 1 1s 2s
retry_topics 1s 2s

fake_up 50 50 0
stages_up
# the lane's stack is shared: what earlier tests left in the topics is called
# first (a fresh stage reads it at once); count from here
sleep 3
units() { local v; v=$(metric sluice_provider_cost_units_total "stage=\"$1\",plugin=\"openai\"" "$(admin "$1")"); echo "${v:-0}"; }
stt0=$(units stt) grade0=$(units grade)
espeak-ng -s 140 -w "$work/a1.wav" "I usually go hiking on weekends with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favourite food is kimchi stew."
new_submission "$work/a1.wav" "$work/a2.wav"
put_answer 0 "$work/a1.wav"
put_answer 1 "$work/a2.wav"
both_done() { view_of "$SID" "$TOKEN" | jq -e '[.questions[].state] == ["done","done"]' >/dev/null; }
check "both answers graded" wait_for 120 both_done

# --- 1. per question, per submission, the metric ---
v=$(view_of "$SID" "$TOKEN")
log "view cost: $(jq -c '{cost, q: [.questions[] | {no, duration_s, cost}]}' <<<"$v")"
check "each question's cost is its audio seconds plus its grading tokens (> duration_s + 1)" \
  jqe 'all(.questions[]; .cost > .duration_s + 1)' "$v"
check "the submission's cost is the sum of its questions'" \
  jqe '(.cost - ([.questions[].cost] | add) | fabs) < 0.001' "$v"
stt_units=$(awk -v a="$(units stt)" -v b="$stt0" 'BEGIN {printf "%.3f", a - b}')
grade_units=$(awk -v a="$(units grade)" -v b="$grade0" 'BEGIN {printf "%.3f", a - b}')
log "metric: stt $stt_units, grade $grade_units"
# preflight hands stt the speech with the silence around it cut
# (step.preflight.trim_silence): billed seconds are at most the answers' length
check "stt's metric is the audio seconds sent for both answers ($stt_units, at most their $(jq '[.questions[].duration_s] | add' <<<"$v") s, at least 80% of it)" \
  jqe "([.questions[].duration_s] | add) as \$d | $stt_units <= \$d + 0.01 and $stt_units >= 0.8 * \$d" "$v"
check "the submission's cost is what stt and grade counted ($stt_units + $grade_units)" \
  jqe "(.cost - ($stt_units + $grade_units) | fabs) < 0.01" "$v"
"$SLUICECTL" submission "$SID" >"$work/sub.txt" 2>"$work/sub.err"
total=$(jq -r '.cost * 1000 | round / 1000 | tostring' <<<"$v")
check "sluicectl submission prints the cost per question and the total ($(grep -F 'Provider cost' "$work/sub.txt"))" \
  grep -Eq "^Provider cost .* q1 [0-9.]+, q2 [0-9.]+, total $(printf '%.3f' "$total")\$" "$work/sub.txt"
"$SLUICECTL" status --admin "$(admin stt | sed 's|http://||'),$(admin grade | sed 's|http://||')" \
  >"$work/status.txt" 2>&1
check "sluicectl status lists the cost of stt/openai and grade/openai, with a per-minute column" \
  sh -c "grep -Eq '^stt +openai +[0-9.]+ +[0-9.]+\$' '$work/status.txt' &&
         grep -Eq '^grade +openai +[0-9.]+ +[0-9.]+\$' '$work/status.txt' &&
         grep -q 'UNITS/min' '$work/status.txt'"
stt_now=$(units stt)
"$SLUICECTL" status --json --admin "$(admin stt | sed 's|http://||')" >"$work/status.json" 2>/dev/null
check "sluicectl status --json: provider_cost of stt/openai is the metric ($stt_now)" \
  jqe "any(.provider_cost[]; .stage == \"stt\" and .plugin == \"openai\" and (.units - $stt_now | fabs) < 0.001)" \
  "$(cat "$work/status.json")"

# --- 2. a redelivered DONE status does not add its cost again ---
read -r p o < <(kcat -C -b "$B" -t results -o beginning -e -q -f '%p %o %k\n' 2>/dev/null |
  awk -v k="$SID/1" '$3 == k {p = $1; o = $2} END {print p, o}')
kcat -C -b "$B" -t results -p "$p" -o "$o" -c 1 -e -q -f '%s' >"$work/done.bin" 2>/dev/null
seq0=$(view_seq)
kcat -P -b "$B" -t results -p "$p" -k "$SID/1" "$work/done.bin"
applied() { test "$(view_seq)" -gt "$seq0"; }
check "the redelivered DONE status reached materialize's apply" wait_for 30 applied
v2=$(view_of "$SID" "$TOKEN")
check "the cost is unchanged after the redelivery ($(jq -c .cost <<<"$v") -> $(jq -c .cost <<<"$v2"))" \
  jqe "(.cost - $(jq .cost <<<"$v") | fabs) < 0.0001" "$v2"

# --- 3. retried attempts are summed (the runtime's retry header) ---
new_submission "$work/a1.wav"
harness_up
printf '%s\t%s\n' "$SID/1" '{"transient":2,"permanent":true,"cost":1.25}' |
  kcat -P -b "$B" -t hcost.in -K $'\t'
failed() { view_of "$SID" "$TOKEN" | jq -e '.questions[0].state == "failed"' >/dev/null; }
check "the input failed for good after two retries" wait_for 60 failed
v=$(view_of "$SID" "$TOKEN")
check "the FAILED question's cost is all three attempts' (3.75; view $(jq -c '.questions[0].cost' <<<"$v"))" \
  jqe '(.questions[0].cost - 3.75 | fabs) < 0.0001 and (.cost - 3.75 | fabs) < 0.0001' "$v"
hdrs=$(for t in hcost.retry.1s hcost.retry.2s; do
  kcat -C -b "$B" -t "$t" -o beginning -e -q -f '%k %h\n' 2>/dev/null; done |
  grep "^$SID/1 " | grep -o 'sluice-cost-units=[0-9.]*' | sort | tr '\n' ' ')
check "the retry copies carry the running sum ($hdrs)" \
  test "$hdrs" = "sluice-cost-units=1.25 sluice-cost-units=2.5 "
units=$(metric sluice_provider_cost_units_total 'stage="hcost",plugin="harness-provider"' "$H_ADMIN")
check "the harness counted 3.75 units ($units)" test "$units" = "3.750"
harness_down
finish
