#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Async processing and the shared limit, with `sluice-fakeprovider` as the
# provider and sluice-harness in async mode (curl multi on the runtime loop):
#   1. one worker thread, 1 s provider latency, 200 messages: the provider
#      sees far more than one call at a time (in-flight work is bounded by
#      stage.max_in_flight, not by threads), each message is called once
#   2. two replicas sharing provider.rate=20/s: the provider receives 20/s
#      within 10%, and both replicas did part of the work
source "$(dirname "$0")/lib.sh"
HARNESS=${SLUICE_HARNESS:-$(dirname "$SLUICE_BIN")/../tests/sluice-harness}
[[ -x $HARNESS ]] || { fail "no harness binary at $HARNESS"; finish; }
B=$SLUICE_KAFKA_BROKERS
FP=http://127.0.0.1:$((BASE + 50))
run=$(date +%s%N | tail -c 9)
mkdir -p "$STAGES_DIR"
export HARNESS_STAGE=hasync # its own topics and consumer group
"$SLUICECTL" topics ensure --partitions 4 hasync.in hasync.out hasync.retry.5s \
  hasync.retry.30s hasync.retry.2m hasync.retry.10m >/dev/null || fail "could not create topics"

pids=()
at_exit 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; true'
fake_up() { # fake_up LATENCY_MS
  "$FAKEPROVIDER" --set fakeprovider.listen=127.0.0.1:$((BASE + 50)) \
    --set admin.listen=127.0.0.1:$((BASE + 51)) --set fakeprovider.chat_latency_ms="$1" \
    --set fakeprovider.chat_jitter_ms=0 >>"$STAGES_DIR/fakeprovider.log" 2>&1 &
  fpid=$!
  pids+=("$fpid")
  wait_for 10 curl -fsS -o /dev/null "$FP/stats" 2>/dev/null || fail "fakeprovider not up"
}
harness_up() { # harness_up ADMIN_PORT
  HARNESS_PROVIDER_URL=$FP SLUICE_ADMIN_LISTEN=127.0.0.1:$1 "$HARNESS" >>"$STAGES_DIR/harness-$1.log" 2>&1 &
  local p=$!
  pids+=("$p")
  wait_for 40 sh -c "curl -fsS http://127.0.0.1:$1/readyz 2>/dev/null | grep -q 'ready pid=$p'" ||
    fail "harness on $1 not ready"
}
stop_all() {
  local p rc
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    check "process $p stopped cleanly (exit $rc)" test "$rc" = 0
  done
  pids=()
}
distinct() { { kcat -C -b "$B" -t hasync.out -o beginning -e -q -f '%k\n' 2>/dev/null || true; } |
  { grep "^$1" || true; } | sort -u | wc -l; }
stat() { curl -fsS "$FP/stats" | jq -r "$1"; }

# 1 ---------------------------------------------------------------------
fake_up 1000
SLUICE_STAGE_WORKERS=1 SLUICE_STAGE_MAX_IN_FLIGHT=500 harness_up $((BASE + 190))
for i in $(seq 1 200); do printf 'a-%s/%d\t{}\n' "$run" "$i"; done | kcat -P -b "$B" -t hasync.in -K $'\t'
wait_count 60 200 distinct "a-$run/" || true
check "async: all 200 messages done" test "$(distinct "a-$run/")" = 200
peak=$(stat .peak_in_flight)
check "async: the provider saw $peak calls at once with one worker thread (>= 100)" test "$peak" -ge 100
done1=$(metric sluice_messages_total 'stage="hasync",outcome="done"' "http://127.0.0.1:$((BASE + 190))")
check "async: one provider call per message ($(stat .total) calls, $done1 done)" test "$(stat .total)" = "$done1"
stop_all

# 2 ---------------------------------------------------------------------
fake_up 50
export SLUICE_PROVIDER_RATE=20 SLUICE_PROVIDER_BURST=1
harness_up $((BASE + 190))
harness_up $((BASE + 191))
for i in $(seq 1 300); do printf 'r-%s/%d\t{}\n' "$run" "$i"; done | kcat -P -b "$B" -t hasync.in -K $'\t'
sleep 3
c0=$(stat .total); t0=$(date +%s%N)
sleep 10
c1=$(stat .total); t1=$(date +%s%N)
rate=$(awk -v c=$((c1 - c0)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.2f", c / (ns / 1e9) }')
log "two replicas, shared limit 20/s: the provider received $rate calls/s"
check "shared limit holds within 10% ($rate/s vs 20/s)" awk -v r="$rate" 'BEGIN { exit !(r >= 18 && r <= 22) }'
d1=$(metric sluice_messages_total 'stage="hasync",outcome="done"' "http://127.0.0.1:$((BASE + 190))")
d2=$(metric sluice_messages_total 'stage="hasync",outcome="done"' "http://127.0.0.1:$((BASE + 191))")
check "both replicas worked ($d1 and $d2 done)" test "$d1" -gt 20 -a "$d2" -gt 20
w=$(( $(metric sluice_limiter_waits_total 'stage="hasync",provider="harness-provider"' "http://127.0.0.1:$((BASE + 190))") + \
      $(metric sluice_limiter_waits_total 'stage="hasync",provider="harness-provider"' "http://127.0.0.1:$((BASE + 191))") ))
check "limiter waits were counted ($w)" test "$w" -gt 0
wait_count 30 300 distinct "r-$run/" || true
check "all 300 done at the shared rate" test "$(distinct "r-$run/")" = 300
stop_all
for f in "$STAGES_DIR"/harness-*.log "$STAGES_DIR"/fakeprovider.log; do
  grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$f" &&
    fail "sanitizer report in $f: $(grep -m3 -E 'ERROR|runtime error' "$f")"
done
finish
