#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A provider's Retry-After is honoured up to provider.max_retry_after_ms.
# A 429 that says "Retry-After: 86400" (a day) must neither pause every
# replica of the stage for a day (the shared pause key) nor park the retry
# copy for a day at the head of its retry-tier partition, where every
# message behind it would wait too. With the cap at 4 s (sluice-harness, the
# real runtime around a scripted provider):
#   - the shared pause lasts at most 4 s;
#   - the throttled message succeeds on its second call within seconds;
#   - a message behind it on the same retry-tier partition is not held.
# And a retry copy written by a replica whose clock runs 9 minutes ahead
# (its sluice-not-before-ms 9 minutes in the future, the 1 s delay it chose
# in sluice-delay-ms) is handled about 1 s after it is read, not in 9
# minutes, with the default cap (10 min) in force.
source "$(dirname "$0")/lib.sh"
PAUSE_KEY=$(pause_key harness-provider)
B=$SLUICE_KAFKA_BROKERS
run=$(date +%s%N | tail -c 9)
export HARNESS_STAGE=hra SLUICE_RETRY_TIERS=1s,2s SLUICE_PROVIDER_MAX_RETRY_AFTER_MS=4000
# one partition per topic: both retry copies share the 2s tier's partition
harness_topics 1 1s 2s
RC DEL "$PAUSE_KEY" >/dev/null
at_exit 'redis-cli -u "$SLUICE_REDIS_URL" DEL "$PAUSE_KEY" >/dev/null 2>&1; true'

harness_up


k1="ra-$run/1" k2="ra-$run/2"
t0=$(date +%s%N)
printf '%s\t%s\n' "$k1" '{"transient":1,"retry_after_ms":86400000,"throttle":true}' |
  kcat -P -b "$B" -t hra.in -K $'\t'
wait_for 20 sh -c "test \"\$(redis-cli -u '$SLUICE_REDIS_URL' PTTL $PAUSE_KEY)\" -gt 0" ||
  fail "no pause was set after the 429"
pttl=$(RC PTTL "$PAUSE_KEY")
check "the shared pause is capped at 4 s ($pttl ms left)" test "$pttl" -le 4000
# behind it on the 2s tier: a 503 that asks for 1.5 s (the first tier that
# covers it is 2s)
printf '%s\t%s\n' "$k2" '{"transient":1,"retry_after_ms":1500}' | kcat -P -b "$B" -t hra.in -K $'\t'
wait_for 30 sh -c "test \$(kcat -C -b '$B' -t hra.out -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c '^$k1\$') -ge 1" || true
t1=$(date +%s%N)
check "the throttled message succeeded on its second call" test "$(harness_outputs "$k1"),$(harness_calls "$k1")" = "1,2"
check "  ... within 20 s, not a day ($(((t1 - t0) / 1000000)) ms)" test $(((t1 - t0) / 1000000)) -le 20000
wait_count 30 1 harness_outputs "$k2" || true
check "the message behind it on the same tier partition was not held" test "$(harness_outputs "$k2"),$(harness_calls "$k2")" = "1,2"
hdr=$(kcat -C -b "$B" -t hra.retry.2s -o beginning -e -q -f '%k %h\n' 2>/dev/null | first_line "$k1 ")
nb=$(sed -nE 's/.*sluice-not-before-ms=([0-9]+).*/\1/p' <<<"$hdr")
check "the retry copy is due within the cap (not-before - produced: $((nb - t0 / 1000000)) ms)" \
  test $((nb - t0 / 1000000)) -le 6000
harness_down

# ---- a retry copy from a replica whose clock is 9 minutes ahead ----
export HARNESS_STAGE=hrc
unset SLUICE_PROVIDER_MAX_RETRY_AFTER_MS # the default cap: 10 minutes
harness_topics 1 1s 2s
harness_up
k3="rc-$run/1"
now=$(date +%s%3N)
printf '%s\t%s\n' "$k3" '{}' |
  kcat -P -b "$B" -t hrc.retry.1s -K $'\t' -H sluice-attempt=1 -H "sluice-first-failure-ms=$now" \
    -H "sluice-not-before-ms=$((now + 540000))" -H sluice-delay-ms=1000 -H sluice-origin-topic=hrc.in \
    -H sluice-error-class=unavailable -H "sluice-error-message=clock ahead"
wait_count 20 1 harness_outputs "$k3" || true
t3=$(date +%s%3N)
check "a copy whose sender's clock is 9 min ahead is handled after the delay it chose ($((t3 - now)) ms)" \
  test "$(harness_outputs "$k3")" = 1 -a $((t3 - now)) -le 15000
harness_down
finish
