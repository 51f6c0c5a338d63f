#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A fatal producer error (librdkafka can no longer keep its idempotence
# promise) must not commit an input whose outputs were not written. The
# fault comes from the real broker: the harness stage's producer runs with
# enable.gapless.guarantee=true and a client message.max.bytes above the
# broker's, so the broker refuses a 1.5 MB output for good and librdkafka
# raises a fatal error; the outputs of the inputs after it on the partition
# are then never written by that producer. The stage must commit none of
# them, replace the failed producer in process (sl_kafka_producer_renew:
# no exit, no restart) and write them through the new one: each ends with
# its output, the oversized one as a dead letter.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
export HARNESS_STAGE=hfat SLUICE_RETRY_TIERS=1s SLUICE_STAGE_DRAIN_TIMEOUT_S=5
harness_topics 1 1s   # one partition: the poisoned input and those after it share it

SLUICE_KAFKA_PRODUCER_PROPERTIES="enable.gapless.guarantee=true, message.max.bytes=3000000" \
  harness_up
sid=$(cat /proc/sys/kernel/random/uuid)
{
  printf '%s/1\t%s\n' "$sid" '{"out_bytes":1500000}'
  for q in 2 3 4 5 6 7 8 9; do printf '%s/%s\t%s\n' "$sid" "$q" '{"sleep_ms":300}'; done
} | kcat -P -b "$B" -t hfat.in -K $'\t'

# the stage renews its producer and goes on: every input after the poisoned
# one is produced again through the new producer (nothing was committed
# past its output), the oversized output becomes a dead letter
lost=0
for q in 2 3 4 5 6 7 8 9; do
  wait_count 30 1 harness_outputs "$sid/$q" || true
  [[ $(harness_outputs "$sid/$q") -ge 1 ]] || lost=$((lost + 1))
done
check "every input after the poisoned one has its output, without a restart ($lost lost)" \
  test "$lost" = 0
wait_for 30 sh -c "'$SLUICECTL' dlq list --json --submission $sid 2>/dev/null | grep -q output_rejected" || true
dl=$("$SLUICECTL" dlq list --json --submission "$sid" 2>/dev/null || true)
check "the oversized output became a dead letter (output_rejected), not a loss" \
  jqe '.error_class == "output_rejected" and .key == "'"$sid"'/1"' "$dl"
check "the harness still runs (it renewed its producer instead of exiting)" kill -0 "$hpid"
check "  ... it logged the fatal error" grep -q "kafka producer fatal error" "$STAGES_DIR/harness.log"
check "  ... and the renewal" grep -q "renewed after its fatal error" "$STAGES_DIR/harness.log"
renewals=$(metric sluice_kafka_producer_renewals_total "" "$H_ADMIN")
check "one renewal counted (sluice_kafka_producer_renewals_total $renewals)" test "${renewals:-0}" = 1
harness_down
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/harness.log" &&
  fail "sanitizer report in the harness log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/harness.log")"
finish
