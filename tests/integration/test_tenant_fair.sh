#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tenants share a provider-bound stage by weight (sl_fair.h,
# runtime/src/sl_stage_fair.h): sluice-harness (the real runtime) with a
# shared limit of 20 calls/s, burst 1, lines of 2 s (40 jobs) per tenant and retry
# tiers long enough for a deferral (1s, 2s, 30s: the last tier is the longest
# a deferral waits).
#   1. tenant A sends 300 inputs, tenant B 30 three seconds later: B's
#      calls do not wait for A's backlog (its last call within 8 s of its
#      send, before A's last one; in arrival order it would be ~12 s later);
#      A's surplus went through the retry tier as deferrals (metric), not as
#      retries; every input was called exactly once and has one output;
#   2. A and B send 200 each at once with equal weights, then B's weight is
#      set to 3 while both still wait (`sluicectl tenant set`, no restart):
#      B's share of the calls is ~50% before and ~75% after;
#   3. the per-tenant metrics count each tenant's calls; the slot interval
#      is A's measured one with the schedule, unset without it.
# ctest runs it twice: as is, and with SLUICE_PROVIDER_TENANT_SCHEDULE=true
# (integration.test_tenant_fair.schedule: deferrals by each line's
# schedule, sl_defer.h; the lines hold 2 s, 40 jobs, either way: 1.5 times
# the first tier is less).
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
export HARNESS_STAGE=hfair SLUICE_RETRY_TIERS=1s,2s,30s
harness_topics 2 1s 2s 30s
export SLUICE_PROVIDER_RATE=20 SLUICE_PROVIDER_BURST=1
run=$$-$RANDOM
ta=ta-$run tb=tb-$run
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
at_exit "RC DEL 'sl:tenant:$tb' >/dev/null 2>&1; true"

# send TENANT PREFIX N: N inputs keyed PREFIX/i carrying sluice-tenant: TENANT
send() {
  local i
  for i in $(seq 1 "$3"); do printf '%s/%d\t{}\n' "$2" "$i"; done |
    kcat -P -b "$B" -t hfair.in -K $'\t' -H "sluice-tenant=$1"
}
# calls PREFIX N: "ms" of each key's first call, sorted
calls() {
  local i
  for i in $(seq 1 "$2"); do echo "LINDEX harness:times:$1/$i 0"; done | RC | grep -E '^[0-9]+$' | sort -n
}
# all_called PREFIX N
all_called() { test "$(calls "$1" "$2" | wc -l)" -ge "$2"; }
# in_window FILE FROM TO: calls in [FROM, TO) ms
in_window() { awk -v a="$2" -v b="$3" '$1 >= a && $1 < b' "$1" | wc -l; }
ms() { date +%s%3N; }

harness_up

# --- 1. B does not wait for A's backlog ---
t0=$(ms)
send "$ta" "a1-$run" 300
sleep 3
tb0=$(ms)
send "$tb" "b1-$run" 30
check "B's 30 inputs called" wait_for 40 all_called "b1-$run" 30
check "A's 300 inputs called" wait_for 60 all_called "a1-$run" 300
calls "a1-$run" 300 >"$work/a1"
calls "b1-$run" 30 >"$work/b1"
b_last=$(tail -1 "$work/b1") a_last=$(tail -1 "$work/a1")
log "A from $t0: 300 calls by +$((a_last - t0)) ms; B from $tb0: 30 calls by +$((b_last - tb0)) ms"
check "B's last call within 8 s of its send (+$((b_last - tb0)) ms)" test $((b_last - tb0)) -le 8000
check "B finished before A ($b_last < $a_last)" test "$b_last" -lt "$a_last"
once() { # every key of PREFIX 1..N called exactly once, with one output
  local i not_once
  not_once=$(for i in $(seq 1 "$2"); do echo "GET harness:calls:$1/$i"; done | RC | grep -vcx 1 || true)
  test "$not_once" = 0 && test "$(harness_out_keys "$1/" | sort -u | wc -l)" = "$2" &&
    test "$(harness_out_keys "$1/" | wc -l)" = "$2"
}
both_once() { once "a1-$run" 300 && once "b1-$run" 30; }
check "every input of A and B was called once and has one output" wait_for 20 both_once
deferred=$(metric sluice_messages_total 'stage="hfair",outcome="deferred"' "$H_ADMIN")
retried=$(metric sluice_messages_total 'stage="hfair",outcome="retried"' "$H_ADMIN")
check "A's surplus was deferred ($deferred), nothing retried (${retried:-0})" \
  test "${deferred:-0}" -gt 0 -a "${retried:-0}" = 0

# --- 2. weights changed at run time ---
t0=$(ms)
send "$ta" "a2-$run" 200 &
sender=$!
send "$tb" "b2-$run" 200
wait "$sender" # (not every child: the harness is one)
sleep 5
"$SLUICECTL" tenant set "$tb" --weight 3 >/dev/null
tw=$(ms)
both_called() { all_called "a2-$run" 200 && all_called "b2-$run" 200; }
check "A's and B's 200 inputs called" wait_for 60 both_called
calls "a2-$run" 200 >"$work/a2"
calls "b2-$run" 200 >"$work/b2"
share() { # share FROM TO: B's calls of all in the window, in percent
  local a b
  a=$(in_window "$work/a2" "$1" "$2") b=$(in_window "$work/b2" "$1" "$2")
  echo "$((100 * b / (a + b > 0 ? a + b : 1))) $a $b"
}
read -r s1 a1 b1 <<<"$(share $((t0 + 1500)) $((tw - 500)))"
read -r s2 a2 b2 <<<"$(share $((tw + 3000)) $((tw + 9000)))"
log "equal weights: B $b1 of $((a1 + b1)) calls ($s1%); B weighted 3: B $b2 of $((a2 + b2)) ($s2%)"
check "with equal weights B's share is 50% +- 12 ($s1%)" test "$s1" -ge 38 -a "$s1" -le 62
check "with B's weight 3 its share is 75% +- 10 ($s2%)" test "$s2" -ge 65 -a "$s2" -le 85
check "both were still waiting in the second window ($a2 and $b2 calls)" test "$a2" -gt 5 -a "$b2" -gt 5

# --- 3. metrics ---
ca=$(metric sluice_tenant_calls_total "stage=\"hfair\",tenant=\"$ta\"" "$H_ADMIN")
cb=$(metric sluice_tenant_calls_total "stage=\"hfair\",tenant=\"$tb\"" "$H_ADMIN")
check "sluice_tenant_calls_total counts each tenant's calls (A $ca >= 500, B $cb >= 230)" \
  test "${ca:-0}" -ge 500 -a "${cb:-0}" -ge 230
# A's line's slot interval: measured with the schedule (A had 5-10 calls a
# second here: ~90-180 ms), never set without it
ia=$(metric sluice_tenant_slot_interval_ms "stage=\"hfair\",tenant=\"$ta\"" "$H_ADMIN")
if [[ ${SLUICE_PROVIDER_TENANT_SCHEDULE:-false} == true ]]; then
  check "sluice_tenant_slot_interval_ms is A's measured interval (${ia:-none} ms, 20-2000)" \
    test "${ia:-0}" -ge 20 -a "${ia:-0}" -le 2000
else
  check "sluice_tenant_slot_interval_ms is not set without the schedule (${ia:-none})" \
    test "${ia:-0}" = 0
fi
harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in harness.log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
