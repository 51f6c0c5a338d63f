#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis stops answering (SIGSTOP: the kernel still accepts connections, but
# no reply ever comes) while a stage works. The async Redis client's command
# deadline (redis.command_timeout_ms) answers the waiting idempotency lookup
# with "unavailable", and the runtime fails open:
#   1. an input that arrives while Redis is stopped is still called and its
#      output produced, one deadline after it arrived; the stage logs the
#      timeout and counts it as a Redis error
#   2. the next input does not wait another deadline: until a new connection
#      has answered, commands fail at once
#   3. after SIGCONT the client recovers: a new input is stored, and its
#      redelivery is answered from the idempotency store (no second call)
# sluice-harness in async mode against `sluice-fakeprovider`, so the provider
# call itself needs no Redis.
source "$(dirname "$0")/lib.sh"
[[ -x $HARNESS ]] || { fail "no harness binary at $HARNESS"; finish; }
B=$SLUICE_KAFKA_BROKERS
FP=http://127.0.0.1:$((BASE + 50))
RPID=$(cat "$DEVSTACK_DIR/redis.pid")
at_exit "kill -CONT $RPID 2>/dev/null; true" # whatever happens, Redis runs again
run=$(date +%s%N | tail -c 9)                  # keys unique to this run
DEADLINE=1500
export HARNESS_STAGE=hdeadline HARNESS_PROVIDER_URL=$FP
mkdir -p "$STAGES_DIR"
harness_topics 1 5s 30s 2m 10m

fpid=""
at_exit '[[ -n $fpid ]] && kill -TERM "$fpid" 2>/dev/null; true'
"$FAKEPROVIDER" --set fakeprovider.listen=127.0.0.1:$((BASE + 50)) \
  --set admin.listen=127.0.0.1:$((BASE + 51)) --set fakeprovider.chat_latency_ms=0 \
  --set fakeprovider.chat_jitter_ms=0 >>"$STAGES_DIR/fakeprovider.log" 2>&1 &
fpid=$!
wait_for 10 curl -fsS -o /dev/null "$FP/stats" 2>/dev/null || fail "fakeprovider not up"
SLUICE_REDIS_COMMAND_TIMEOUT_MS=$DEADLINE harness_up

calls() { curl -fsS "$FP/stats" | jq -r .total; }
redis_errors() {
  curl -fsS "$H_ADMIN/metrics" | awk '$1 == "sluice_redis_errors_total" {print $2; f=1} END {if (!f) print 0}'
}
send() { printf '%s\t{}\n' "$1" | kcat -P -b "$B" -t hdeadline.in -K $'\t'; }
# latency KEY: ms from the input's timestamp to its (first) output's, or
# "none" while there is no output
latency() {
  local tin tout
  tin=$(kcat -C -b "$B" -t hdeadline.in -o beginning -e -q -f '%k %T\n' 2>/dev/null | awk -v k="$1" '$1 == k && !n++ {print $2}')
  tout=$(kcat -C -b "$B" -t hdeadline.out -o beginning -e -q -f '%k %T\n' 2>/dev/null | awk -v k="$1" '$1 == k && !n++ {print $2}')
  if [[ -n $tin && -n $tout ]]; then echo $((tout - tin)); else echo none; fi
}
between() { [[ $1 =~ ^-?[0-9]+$ ]] && (($1 >= $2 && $1 <= $3)); } # between VALUE LOW HIGH

# 1 ---------------------------------------------------------------------
e0=$(redis_errors)
kill -STOP "$RPID"
log "redis stopped (SIGSTOP)"
k1="d1-$run/1"
send "$k1"
wait_count 10 1 harness_outputs "$k1" || true
check "output produced while Redis is stopped" test "$(harness_outputs "$k1")" = 1
l1=$(latency "$k1")
check "  ... one deadline after the input (latency ${l1} ms, deadline $DEADLINE)" \
  between "$l1" $((DEADLINE - 100)) $((DEADLINE + 2000))
check "  ... with one provider call ($(calls))" test "$(calls)" = 1
check "the stage logged the missed deadline" \
  grep -q "redis .*: no reply for $DEADLINE ms" "$STAGES_DIR/harness.log"
check "the timeout is counted as a Redis error ($e0 -> $(redis_errors))" \
  test "$(redis_errors)" -gt "$e0"

# 2 ---------------------------------------------------------------------
k2="d2-$run/1"
send "$k2"
wait_count 10 1 harness_outputs "$k2" || true
l2=$(latency "$k2")
check "the next input is not held for another deadline (latency ${l2} ms)" \
  between "$l2" 0 999

# 3 ---------------------------------------------------------------------
kill -CONT "$RPID"
log "redis running again (SIGCONT)"
wait_for 10 grep -q '"msg":"redis [^"]*: connected"' "$STAGES_DIR/harness.log" ||
  fail "the stage did not log its reconnection"
k3="d3-$run/1"
c0=$(calls)
send "$k3"
wait_count 10 1 harness_outputs "$k3" || true
check "after SIGCONT an input is handled ($(calls) calls)" \
  test "$(harness_outputs "$k3")" = 1 -a "$(calls)" = $((c0 + 1))
idem=$(redis-cli -u "$SLUICE_REDIS_URL" --scan --pattern "sl:idem:hdeadline:$k3:*" | wc -l)
check "  ... and its outputs stored ($idem key)" test "$idem" = 1
send "$k3"
wait_count 10 2 harness_outputs "$k3" || true
check "its redelivery is answered from the store: 2 outputs, no new call ($(calls))" \
  test "$(harness_outputs "$k3")" = 2 -a "$(calls)" = $((c0 + 1))

harness_down
kill -TERM "$fpid" 2>/dev/null && { wait "$fpid" 2>/dev/null || true; }
fpid=""
for f in "$STAGES_DIR/harness.log" "$STAGES_DIR/fakeprovider.log"; do
  grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$f" &&
    fail "sanitizer report in $f: $(grep -m3 -E 'ERROR|runtime error' "$f")"
done
finish
