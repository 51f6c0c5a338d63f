#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An output Kafka refuses for good (here: larger than message.max.bytes) is
# not produced again forever while its partition stops committing: the input
# becomes a dead letter of class output_rejected (its payload cut to fit),
# the partition keeps moving, and a restarted stage does not see the input
# again (its offset was committed). sluice-harness with {"out_bytes": N}
# (the real runtime; the real producer refuses the 2 MB message). Then an
# output the outbox itself refuses ({"careless": true}): output_invalid.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
run=$(date +%s%N | tail -c 9)
export HARNESS_STAGE=hrej SLUICE_RETRY_TIERS=1s,2s SLUICE_STAGE_DRAIN_TIMEOUT_S=3
# one partition: the rejected input and the one after it share it
harness_topics 1 1s 2s

harness_up
sid=$(cat /proc/sys/kernel/random/uuid)
k1="$sid/1" k2="rej-$run/2"
printf '%s\t%s\n' "$k1" '{"out_bytes":2000000}' | kcat -P -b "$B" -t hrej.in -K $'\t'
printf '%s\t%s\n' "$k2" '{}' | kcat -P -b "$B" -t hrej.in -K $'\t'
wait_for 30 sh -c "'$SLUICECTL' dlq list --json --submission $sid 2>/dev/null | grep -q output_rejected" || true
dl=$("$SLUICECTL" dlq list --json --submission "$sid" 2>/dev/null || true)
check "the refused output became one dead letter of class output_rejected" \
  jqe '.error_class == "output_rejected" and .stage == "hrej" and .original.topic == "hrej.in"' "$dl"
check "  ... whose reason names Kafka's refusal" jqe '.error_message | test("too large|size"; "i")' "$dl"
wait_count 20 1 harness_outputs "$k2" || true
check "the message after it on the partition was processed" test "$(harness_outputs "$k2")" = 1
check "the rejected input was called once" test "$(harness_calls "$k1")" = 1
# committed past both: a restarted stage in the same group reads neither again
# (the harness stores outputs, so a redelivered input would not be called
# again; its log says "already processed" instead)
sleep 1
harness_down
mark=$(wc -l <"$STAGES_DIR/harness.log")
harness_up
sleep 8
seen=$(tail -n +$((mark + 1)) "$STAGES_DIR/harness.log" | grep -c "\"$sid\"" || true)
check "after a restart the rejected input is not redelivered ($seen log lines of it)" test "$seen" = 0
check "  ... and neither input was called again ($(harness_calls "$k1"), $(harness_calls "$k2") calls)" \
  test "$(harness_calls "$k1"),$(harness_calls "$k2")" = "1,1"

# An output that cannot even be added to the outbox (a topic name too long;
# the processor ignores the error) must not be dropped while its input is
# committed: the input becomes a dead letter of class output_invalid and
# the partition moves on.
sid3=$(cat /proc/sys/kernel/random/uuid)
k3="$sid3/1" k4="rej-$run/4"
printf '%s\t%s\n' "$k3" '{"careless":true}' | kcat -P -b "$B" -t hrej.in -K $'\t'
printf '%s\t%s\n' "$k4" '{}' | kcat -P -b "$B" -t hrej.in -K $'\t'
wait_for 30 sh -c "'$SLUICECTL' dlq list --json --submission $sid3 2>/dev/null | grep -q output_invalid" || true
dl=$("$SLUICECTL" dlq list --json --submission "$sid3" 2>/dev/null || true)
check "an output the outbox refused made the input a dead letter of class output_invalid" \
  jqe '.error_class == "output_invalid" and (.error_message | test("exceeds its limit"))' "$dl"
check "  ... and none of its outputs was written" test "$(harness_outputs "$k3")" = 0
wait_count 20 1 harness_outputs "$k4" || true
check "the message after it was processed" test "$(harness_outputs "$k4")" = 1
harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in the harness log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
