#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A tenant's cost budget runs out while its work is in flight
# (runtime/src/sl_stage_budget.h): sluice-harness (the real runtime) with a
# shared limit of 10 calls/s, each call costing 1 unit. Tenant X may spend
# 12 units a day (sluicectl tenant set --cost-per-day), tenant Y has no
# budget; both send 40 inputs at once, all accepted before the budget ran out.
#   - X's calls stop at its budget: at least 12 and at most 12 plus the
#     calls in flight when it crossed (the check is the last step before a
#     call, after the limiter, so the calls waiting there are not paid);
#   - every other input of X is dead-lettered with the class
#     tenant_budget_exhausted, uncalled: each of X's 40 inputs ends once,
#     called with an output or dead-lettered;
#   - Y is untouched: 40 calls, 40 outputs, no dead letter;
#   - the day's cost counter holds what X's calls cost;
#   - with the budget lifted, a replay of X's dead letters calls them.
source "$(dirname "$0")/lib.sh"
export HARNESS_STAGE=hbudget SLUICE_RETRY_TIERS=1s,2s,30s
harness_topics 2 1s 2s 30s
export SLUICE_PROVIDER_RATE=10 SLUICE_PROVIDER_BURST=1
run=$$-$RANDOM
tx=tx-$run ty=ty-$run budget=12 n=40
at_exit "RC DEL 'sl:tenant:$tx' >/dev/null 2>&1; true"
"$SLUICECTL" tenant set "$tx" --cost-per-day "$budget" >/dev/null || fail "tenant set failed"

# send TENANT SID: n inputs keyed SID/i carrying sluice-tenant: TENANT, each call 100 ms, 1 unit
send() {
  local i
  for i in $(seq 1 "$n"); do printf '%s/%d\t{"cost":1,"sleep_ms":100}\n' "$2" "$i"; done |
    kcat -P -b "$SLUICE_KAFKA_BROKERS" -t hbudget.in -K $'\t' -H "sluice-tenant=$1"
}
sx=$(cat /proc/sys/kernel/random/uuid) sy=$(cat /proc/sys/kernel/random/uuid)
harness_up
send "$tx" "$sx" &
sender=$!
send "$ty" "$sy"
wait "$sender" # (not every child: the harness is one)

# calls SID: provider calls made for SID's inputs (sum), and keys called
calls() {
  local i
  for i in $(seq 1 "$n"); do echo "GET harness:calls:$1/$i"; done | RC |
    awk '$1 ~ /^[0-9]+$/ {s += $1; k += ($1 > 0)} END {print s + 0, k + 0}'
}
dead() { # dead SID [CLASS]: dead letters of SID (of CLASS)
  "$SLUICECTL" dlq list --json --stage hbudget --submission "$1" 2>/dev/null |
    jq -r '.error_class' | { grep -c "${2:-.}" || true; }
}
x_ended() { # every input of X called or dead-lettered
  local c k
  read -r c k <<<"$(calls "$sx")"
  test $((k + $(dead "$sx"))) -ge "$n"
}
y_done() { test "$(harness_out_keys "$sy/" | sort -u | wc -l)" -ge "$n"; }
check "every input of X was called or dead-lettered" wait_for 60 x_ended
check "Y's $n inputs have their outputs" wait_for 60 y_done
sleep 2 # anything late would show now
read -r xc xk <<<"$(calls "$sx")"
read -r yc yk <<<"$(calls "$sy")"
xd=$(dead "$sx") xdb=$(dead "$sx" tenant_budget_exhausted) yd=$(dead "$sy")
xo=$(harness_out_keys "$sx/" | wc -l)
log "X: $xc calls ($xk inputs), $xo outputs, $xd dead letters ($xdb tenant_budget_exhausted); Y: $yc calls, $yd dead letters"
check "X's calls stopped at its budget of $budget units ($xc calls: >= $budget, <= $((budget + 4)))" \
  test "$xc" -ge "$budget" -a "$xc" -le $((budget + 4))
check "each called input of X was called once and has one output ($xc calls, $xk inputs, $xo outputs)" \
  test "$xc" = "$xk" -a "$xo" = "$xk"
check "the rest of X is dead-lettered as tenant_budget_exhausted ($xdb of $((n - xk)))" \
  test "$xdb" = $((n - xk)) -a "$xd" = "$xdb"
check "Y is untouched: $n calls, $n inputs called, no dead letter ($yc, $yk, $yd)" \
  test "$yc" = "$n" -a "$yk" = "$n" -a "$yd" = 0
spent=$("$SLUICECTL" tenant show "$tx" --json | jq -r '.cost_today')
check "the day's cost counter holds X's calls ($spent units for $xc calls)" \
  awk -v s="$spent" -v c="$xc" 'BEGIN {exit !(s + 0 == c + 0)}'

# the budget lifted: a replay of X's dead letters is called
"$SLUICECTL" tenant set "$tx" --cost-per-day none >/dev/null
sleep 3 # the gate reads the budgets of the tenants it saw every second
"$SLUICECTL" dlq replay --stage hbudget --submission "$sx" --yes >"$STAGES_DIR/replay.log" 2>&1 ||
  fail "dlq replay failed: $(tail -1 "$STAGES_DIR/replay.log")"
x_all() {
  local c k
  read -r c k <<<"$(calls "$sx")"
  test "$k" = "$n"
}
check "with the budget lifted, the replay called the rest of X" wait_for 60 x_all
harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in harness.log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
