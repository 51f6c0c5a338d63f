#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A deferred copy read again after a rebalance is not called twice through
# the limiter (provider.tenant_schedule, runtime/include/sluice/sl_defer.h):
# sluice-harness (the real runtime) with the schedule on.
#   1. deferrals record their input's newest hop in Redis once Kafka has the
#      copy (sl:hop:... = "<origin>:<hop>"), and every input is still called
#      once with one output;
#   2. crafted copies in a retry tier, as a replica killed under a backlog
#      leaves them: a copy of an older hop than the one recorded for its
#      input is dropped uncalled and counted (sluice_deferred_twins_total);
#      a copy of the recorded hop or a newer one, or of another origin (the
#      same question sent again), is called.
# Fails without the twin check (a twin is called: a limiter token spent on a
# call the claim refuses, or, without a claim, the call made twice).
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
export HARNESS_STAGE=htwin SLUICE_RETRY_TIERS=1s,2s,30s
harness_topics 1 1s 2s 30s
export SLUICE_PROVIDER_RATE=20 SLUICE_PROVIDER_BURST=1 SLUICE_PROVIDER_TENANT_SCHEDULE=true
run=$$-$RANDOM

harness_up

# --- 1. the hops are recorded ---
for i in $(seq 1 120); do printf 'a-%s/%d\t{}\n' "$run" "$i"; done |
  kcat -P -b "$B" -t htwin.in -K $'\t' -H "sluice-tenant=ta-$run"
all_a() {
  local i
  for i in $(seq 1 120); do [[ $(harness_calls "a-$run/$i") -ge 1 ]] || return 1; done
}
check "the 120 inputs were called" wait_for 60 all_a
once_a() {
  local i not_once
  not_once=$(for i in $(seq 1 120); do echo "GET harness:calls:a-$run/$i"; done | RC | grep -vcx 1 || true)
  test "$not_once" = 0 && test "$(harness_out_keys "a-$run/" | wc -l)" = 120
}
check "every input called once, with one output" wait_for 20 once_a
deferred=$(metric sluice_messages_total 'stage="htwin",outcome="deferred"' "$H_ADMIN")
hops=$(RC --scan --pattern "sl:hop:*htwin:a-$run/*" | wc -l)
check "the surplus was deferred (${deferred:-0}) and its hops recorded ($hops inputs)" \
  test "${deferred:-0}" -gt 0 -a "$hops" -gt 0
v=$(RC GET "$(RC --scan --pattern "sl:hop:*htwin:a-$run/*" | head -1)")
record_ok() { [[ $v =~ ^0\.[0-9]+:[1-9][0-9]*$ ]]; }
check "a record is <origin>:<hop> ($v)" record_ok

# --- 2. twins ---
payload='{}'
digest=$(printf '%s' "$payload" | sha256sum | cut -c1-32)
hopkey() { printf 'sl:hop:htwin:%s:%s' "$1" "$digest"; }
# copy KEY HOP: a deferred copy of KEY in the 1 s tier, due now
copy() {
  printf '%s\t%s\n' "$1" "$payload" |
    kcat -P -b "$B" -t htwin.retry.1s -K $'\t' -H "sluice-tenant=tt-$run" \
      -H "sluice-error-class=deferred" -H "sluice-error-message=crafted" \
      -H "sluice-attempt=0" -H "sluice-not-before-ms=0" -H "sluice-delay-ms=0" \
      -H "sluice-origin-topic=htwin.in" -H "sluice-defer-due-ms=0" -H "sluice-defer-hop=$2"
}
old=t-$run/old new=t-$run/new same=t-$run/same other=t-$run/other
RC SET "$(hopkey "$old")" "0.7:2" PX 600000 >/dev/null
RC SET "$(hopkey "$new")" "0.8:1" PX 600000 >/dev/null
RC SET "$(hopkey "$same")" "0.9:3" PX 600000 >/dev/null
RC SET "$(hopkey "$other")" "0.9:5" PX 600000 >/dev/null
at_exit "RC DEL '$(hopkey "$old")' '$(hopkey "$new")' '$(hopkey "$same")' '$(hopkey "$other")' >/dev/null 2>&1; true"
before=$(metric sluice_deferred_twins_total 'stage="htwin"' "$H_ADMIN")
copy "$old" "0.7:1"     # hop 1 while hop 2 is recorded: a twin
copy "$new" "0.8:2"     # newer than recorded
copy "$same" "0.9:3"    # the recorded hop itself
copy "$other" "0.10:1"  # another origin: the question sent again
called3() { [[ $(harness_calls "$new") -ge 1 && $(harness_calls "$same") -ge 1 && $(harness_calls "$other") -ge 1 ]]; }
check "the newer, the recorded and the other origin's copies were called" wait_for 30 called3
twins() { [[ $(metric sluice_deferred_twins_total 'stage="htwin"' "$H_ADMIN") -ge $((${before:-0} + 1)) ]]; }
check "the twin was counted (sluice_deferred_twins_total)" wait_for 10 twins
sleep 2
check "the twin was not called ($(harness_calls "$old") calls)" test "$(harness_calls "$old")" = 0
check "the twin has no output" test "$(harness_outputs "$old")" = 0
check "the others have one output each" test "$(harness_outputs "$new")" = 1 -a \
  "$(harness_outputs "$same")" = 1 -a "$(harness_outputs "$other")" = 1

harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in harness.log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
