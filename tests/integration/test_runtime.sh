#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The stage runtime against real Kafka and Redis, through sluice-harness (the
# real runtime around a scripted provider; see tests/runtime/harness.c):
#   1. transient twice then success: done after exactly two retry hops, each
#      hop no earlier than its tier's delay
#   2. permanent failure: dead letter with the right fields, FAILED in the view
#   3. a replayed dead letter completes; replaying it again calls nothing
#   4. the time budget dead-letters a message that keeps failing
#   5. SIGKILL mid-work loses nothing; questions already done are not called again
#   6. under a full outage the breaker opens, calls drop to the probe rate and
#      the messages are held (not sent through the retry tiers) until it closes
#   7. with stage.per_key_order one key is never in flight twice, and an
#      input waiting for its key is answered from what the one before stored
#   8. while the provider is paused (a 429's shared pause key), new inputs
#      wait without a call, and an input whose outputs are stored is
#      answered at once (claims read the store, so a stage skips its own
#      lookup until the gate would hold a message: then it looks first)
source "$(dirname "$0")/lib.sh"
PAUSE_KEY=$(pause_key harness-provider)
[[ -x $HARNESS ]] || { fail "no harness binary at $HARNESS"; finish; }
B=$SLUICE_KAFKA_BROKERS
run=$(date +%s%N | tail -c 9)   # keys unique to this run
mkdir -p "$STAGES_DIR"
export SLUICE_RETRY_TIERS=1s,2s SLUICE_RETRY_BUDGET_S=6 SLUICE_BREAKER_MIN_CALLS=5 \
  SLUICE_BREAKER_WINDOW_MS=4000 SLUICE_BREAKER_PROBE_INTERVAL_MS=1000

"$SLUICECTL" topics ensure --partitions 4 harness.in harness.out harness.retry.1s harness.retry.2s \
  >/dev/null || fail "could not create the harness topics"
RC DEL harness:outage >/dev/null

outputs() { kcat -C -b "$B" -t harness.out -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$1\$" || true; }
distinct() { { kcat -C -b "$B" -t harness.out -o beginning -e -q -f '%k\n' 2>/dev/null || true; } |
  { grep "^$1" || true; } | sort -u | wc -l; }
calls() { local c; c=$(RC GET "harness:calls:$1"); echo "${c:-0}"; }

harness_up

# 1 --------------------------------------------------------------------
k1="t1-$run/1"
printf '%s\t%s\n' "$k1" '{"transient":2}' | kcat -P -b "$B" -t harness.in -K $'\t'
wait_count 30 1 outputs "$k1" || true
check "transient x2: output produced" test "$(outputs "$k1")" = 1
check "transient x2: exactly 3 provider calls" test "$(calls "$k1")" = 3
hops1=$(kcat -C -b "$B" -t harness.retry.1s -o beginning -e -q -f '%k\n' | grep -c "^$k1\$" || true)
hops2=$(kcat -C -b "$B" -t harness.retry.2s -o beginning -e -q -f '%k\n' | grep -c "^$k1\$" || true)
check "transient x2: one hop through 1s and one through 2s ($hops1, $hops2)" test "$hops1,$hops2" = "1,1"
hdrs=$(kcat -C -b "$B" -t harness.retry.2s -o beginning -e -q -f '%k %h\n' | grep "^$k1 ")
check "retry headers carry attempt, first failure, not-before, error" \
  grep -q "sluice-attempt=2.*sluice-first-failure-ms=.*sluice-not-before-ms=.*sluice-error-class=provider_unavailable" <<<"$hdrs"
mapfile -t t < <(RC LRANGE "harness:times:$k1" 0 -1)
check "hop 1 waited at least 1 s ($((t[1] - t[0])) ms)" test $((t[1] - t[0])) -ge 1000
check "hop 2 waited at least 2 s ($((t[2] - t[1])) ms)" test $((t[2] - t[1])) -ge 2000

# 2 + 3 -----------------------------------------------------------------
sid=$(cat /proc/sys/kernel/random/uuid)
k2="$sid/1"
printf '%s\t%s\n' "$k2" '{"permanent":true}' | kcat -P -b "$B" -t harness.in -K $'\t'
wait_for 20 sh -c "'$SLUICECTL' dlq list --json --submission $sid 2>/dev/null | grep -q provider_rejected" || true
dl=$("$SLUICECTL" dlq list --json --submission "$sid" 2>/dev/null)
check "permanent: one dead letter" test "$(grep -c . <<<"$dl")" = 1
check "dead letter names stage, class, attempts, origin and replay topic" jqe \
  '.stage == "harness" and .error_class == "provider_rejected" and .attempts == 1 and .original.topic == "harness.in"' "$dl"
check "permanent: one provider call, no retry" test "$(calls "$k2")" = 1
# the FAILED status reached the results topic; materialize shows it
stages_up
wait_for 20 sh -c "redis-cli -u '$SLUICE_REDIS_URL' HGET $(sub_key $sid) q1 | grep -q failed" || true
check "the question shows failed with the reason" jqe '.state == "failed" and .error.class == "provider_rejected"' \
  "$(RC HGET "$(sub_key "$sid")" q1)"
RC SET "harness:heal:$k2" 1 >/dev/null
"$SLUICECTL" dlq replay --submission "$sid" --rate 50 --actor test >/dev/null 2>&1 || fail "replay failed"
wait_count 20 1 outputs "$k2" || true
check "replayed dead letter completes" test "$(outputs "$k2")" = 1
check "replay: one more provider call (2)" test "$(calls "$k2")" = 2
"$SLUICECTL" dlq replay --submission "$sid" --rate 50 --actor test >/dev/null 2>&1 || fail "second replay failed"
wait_count 20 2 outputs "$k2" || true
check "second replay answered from the idempotency store: still 2 calls" test "$(calls "$k2")" = 2
check "idempotency hits counted" test "$(metric sluice_idempotency_hits_total 'stage="harness"' "$H_ADMIN")" -ge 1

# 4 --------------------------------------------------------------------
k4="t4-$run/1"
printf '%s\t%s\n' "$k4" '{"transient":1000}' | kcat -P -b "$B" -t harness.in -K $'\t'
wait_for 40 sh -c "'$SLUICECTL' dlq list --json --class budget_exhausted 2>/dev/null | grep -q '\"$k4\"'" || true
check "budget spent: dead-lettered as budget_exhausted" sh -c \
  "'$SLUICECTL' dlq list --json --class budget_exhausted 2>/dev/null | grep -q '\"key\":\"$k4\"'"
n4=$(calls "$k4")
check "budget: retried a few times, not forever ($n4 calls in 6 s)" test "$n4" -ge 3 -a "$n4" -le 6

# 5 --------------------------------------------------------------------
for i in $(seq 1 40); do printf 't5-%s/%d\t{"sleep_ms":200}\n' "$run" "$i"; done |
  kcat -P -b "$B" -t harness.in -K $'\t'
sleep 1.5
kill -KILL "$hpid"; wait "$hpid" 2>/dev/null || true
hpid=""
before=()
for i in $(seq 1 40); do [[ $(outputs "t5-$run/$i") -ge 1 ]] && before+=("$i"); done
log "killed the harness with ${#before[@]} of 40 done"
harness_up
wait_count 60 40 distinct "t5-$run/" || true
got=$(distinct "t5-$run/")
check "SIGKILL: all 40 questions completed" test "$got" = 40
again=0
for i in "${before[@]}"; do [[ $(calls "t5-$run/$i") == 1 ]] || again=$((again + 1)); done
check "SIGKILL: questions done before the kill were not called again ($again)" test "$again" = 0
extra=0
for i in $(seq 1 40); do extra=$((extra + $(calls "t5-$run/$i") - 1)); done
check "SIGKILL: repeated calls only for work in flight at the kill ($extra <= 40)" test "$extra" -le 40

# 6 --------------------------------------------------------------------
# a budget that outlasts the outage
harness_down
export SLUICE_RETRY_BUDGET_S=300
harness_up
RC SET harness:outage 1 >/dev/null
for i in $(seq 1 30); do printf 't6-%s/%d\t{}\n' "$run" "$i"; done | kcat -P -b "$B" -t harness.in -K $'\t'
wait_for 15 sh -c "curl -fsS $H_ADMIN/metrics | grep -q 'sluice_breaker_state{stage=\"harness\",provider=\"harness-provider\"} [12]'" ||
  fail "the breaker did not open"
c0=$(metric sluice_provider_calls_total 'stage="harness",provider="harness-provider",result="transient_failure"' "$H_ADMIN")
sleep 8
c1=$(metric sluice_provider_calls_total 'stage="harness",provider="harness-provider",result="transient_failure"' "$H_ADMIN")
check "breaker open: $((c1 - c0)) calls in 8 s (probe rate 1/s)" test $((c1 - c0)) -le 10
check "breaker open: messages held back" test \
  "$(metric sluice_breaker_rejections_total 'stage="harness",provider="harness-provider"' "$H_ADMIN")" -ge 10
held=$(metric sluice_breaker_held 'stage="harness",provider="harness-provider"' "$H_ADMIN")
check "breaker open: the held messages wait in memory, not in the retry tiers ($held held)" test "$held" -ge 10
RC DEL harness:outage >/dev/null
wait_count 40 30 distinct "t6-$run/" || true
got6=$(distinct "t6-$run/")
check "after the outage all 30 complete ($got6)" test "$got6" = 30

# 7 --------------------------------------------------------------------
# per-key ordering: with stage.per_key_order two messages with the same key
# are never in flight together; without it they overlap on the worker pool
harness_down
export SLUICE_STAGE_PER_KEY_ORDER=true
harness_up
for i in 1 2 3 4; do printf 't7-%s/1\t{"sleep_ms":300,"n":%d}\n' "$run" "$i"; done |
  kcat -P -b "$B" -t harness.in -K $'\t' -p 0
wait_count 20 4 calls "t7-$run/1" || true
wait_count 10 4 outputs "t7-$run/1" || true
mapfile -t t7 < <(RC LRANGE "harness:times:t7-$run/1" 0 -1)
gaps=$(for ((i = 1; i < ${#t7[@]}; i++)); do echo $((t7[i] - t7[i - 1])); done | sort -n | head -1)
check "per-key order: 4 calls for one key, each after the previous ended (min gap ${gaps:-none} ms >= 300)" \
  test "${#t7[@]}" = 4 -a "${gaps:-0}" -ge 300
# the same input twice: the second waits for the key, then finds what the
# first stored (the idempotency lookup happens after the key is handed on)
k7b="t7b-$run/1"
for i in 1 2; do printf '%s\t{"sleep_ms":800}\n' "$k7b"; done | kcat -P -b "$B" -t harness.in -K $'\t' -p 0
wait_count 20 2 outputs "$k7b" || true
check "per-key order: the same input twice, both answered ($(outputs "$k7b") outputs)" test "$(outputs "$k7b")" = 2
check "  ... with one provider call ($(calls "$k7b")): the second came from the store" test "$(calls "$k7b")" = 1
harness_down
unset SLUICE_STAGE_PER_KEY_ORDER
harness_up
for i in 1 2 3 4; do printf 't8-%s/1\t{"sleep_ms":300,"n":%d}\n' "$run" "$i"; done |
  kcat -P -b "$B" -t harness.in -K $'\t' -p 0
wait_count 20 4 calls "t8-$run/1" || true
mapfile -t t8 < <(RC LRANGE "harness:times:t8-$run/1" 0 -1)
span=$((t8[${#t8[@]} - 1] - t8[0]))
check "without it the same key runs concurrently (4 calls within ${span} ms < 300)" \
  test "${#t8[@]}" = 4 -a "$span" -lt 300

# 8 --------------------------------------------------------------------
k9="t9-$run/1" k9b="t9b-$run/1"
printf '%s\t{}\n' "$k9" | kcat -P -b "$B" -t harness.in -K $'\t'
wait_count 20 1 outputs "$k9" || true
check "pause: the first input answered ($(outputs "$k9") output, $(calls "$k9") call)" \
  test "$(outputs "$k9"),$(calls "$k9")" = 1,1
RC SET "$PAUSE_KEY" 1 PX 6000 >/dev/null # what a replica's 429 sets
at_exit 'redis-cli -u "$SLUICE_REDIS_URL" DEL "$PAUSE_KEY" >/dev/null 2>&1; true'
sleep 0.3 # the stage reads the pause key at most every 100 ms
t9=$(date +%s%N)
printf '%s\t{}\n%s\t{}\n' "$k9b" "$k9" | kcat -P -b "$B" -t harness.in -K $'\t'
wait_count 4 2 outputs "$k9" || true
ms9=$((($(date +%s%N) - t9) / 1000000))
check "pause: the stored input answered again within 4 s, paused or not ($(outputs "$k9") outputs, ${ms9} ms)" \
  test "$(outputs "$k9")" = 2
check "  ... from the store: still one call ($(calls "$k9"))" test "$(calls "$k9")" = 1
check "pause: the new input not called while paused ($(calls "$k9b") calls)" test "$(calls "$k9b")" = 0
wait_count 20 1 outputs "$k9b" || true
check "pause: the new input answered once the pause ended ($(outputs "$k9b") output)" \
  test "$(outputs "$k9b")" = 1

harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in the harness log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
