#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The stage runtime's Redis keys on a Redis Cluster (docs/architecture.md,
# "Redis: shard by submission"): one sluice-harness replica on a one-node
# cluster that owns every slot (lib.sh, TEST_REDIS_CLUSTER1), with
# redis.buckets 8. Such a node refuses a script whose keys are in two slots
# (CROSSSLOT), as every primary of a real cluster does.
#
# 48 inputs of 24 submissions (so the inputs of one turn of the loop are of
# several buckets) go through every batched script at once: the claims
# (sl_claim_take_lua with the start counts), their renewals (a call runs
# 1.2 s, the lease is 1.5 s: renewed every 0.5 s), the stores (with the
# claims' release and the counts' deletion), and the shared limiter split
# into 2 buckets (provider.limit_buckets: the pause read on its own).
# A pause (a 429's) still holds the calls with the limiter split in two.
# Each input must be called once and answered once, with no start left
# uncounted (a refused script fails open: it would count as uncounted) and
# no CROSSSLOT in Redis's own error counts; the keys carry their
# submission's tag (one slot per input's keys) and none is left behind.
export TEST_REDIS_CLUSTER1=1
source "$(dirname "$0")/lib.sh"
export HARNESS_STAGE=hbatch
harness_topics 2 1s
export SLUICE_RETRY_TIERS=1s SLUICE_STAGE_WORKERS=16 SLUICE_STAGE_CLAIM_LEASE_MS=1500 \
  SLUICE_PROVIDER_RATE=200 SLUICE_PROVIDER_BURST=20 SLUICE_PROVIDER_LIMIT_BUCKETS=2
harness_up

keys=()
for s in $(seq 1 24); do
  sid=$(cat /proc/sys/kernel/random/uuid)
  keys+=("$sid/1" "$sid/2")
done
for k in "${keys[@]}"; do printf '%s\t%s\n' "$k" '{"sleep_ms":1200}'; done |
  kcat -P -b "$SLUICE_KAFKA_BROKERS" -t hbatch.in -K $'\t'
KEYS=("${keys[@]}")
answered() {
  local out k
  out=$(harness_out_keys "")
  for k in "${keys[@]}"; do grep -qxF "$k" <<<"$out" || return 1; done
}
check "every input answered" wait_for 90 answered

out=$(harness_out_keys "")
twice=0 calls_off=0
for k in "${keys[@]}"; do
  [[ $(grep -cxF "$k" <<<"$out") == 1 ]] || twice=$((twice + 1))
  [[ $(harness_calls "$k") == 1 ]] || calls_off=$((calls_off + 1))
done
check "each input answered once ($twice not)" test "$twice" = 0
check "each input called the provider once ($calls_off not)" test "$calls_off" = 0
unc=$(metric sluice_starts_uncounted_total 'stage="hbatch"' "$H_ADMIN")
check "no start ran uncounted (a refused script fails open) ($unc)" test "$unc" = 0
lost=$(metric sluice_claims_lost_total 'stage="hbatch"' "$H_ADMIN")
check "no claim found lost by its renewals ($lost)" test "$lost" = 0
cross=$(RC INFO errorstats | tr -d '\r' | grep -c CROSSSLOT || true)
check "Redis refused no script or command for crossing slots ($(RC INFO errorstats | tr -d '\r' | grep -E 'errorstat' | tr '\n' ' '))" \
  test "$cross" = 0
check "no CROSSSLOT in the stage's log" sh -c "! grep -q CROSSSLOT '$STAGES_DIR/harness.log'"

# the stored outputs carry their submission's tag, and one tag is one slot
idem=$(RC --scan --pattern 'sl:idem:{*}hbatch:*')
check "48 stored outputs, each key tagged ($(wc -l <<<"$idem"))" test "$(grep -c . <<<"$idem")" = 48
tags=$(sed -n 's/^sl:idem:\({[^}]*}\).*/\1/p' <<<"$idem" | sort -u | wc -l)
check "the inputs were of several buckets ($tags tags)" test "$tags" -ge 4
same=1
for s in $(printf '%s\n' "${keys[@]}" | cut -d/ -f1 | sort -u | head -6); do
  n=$({ grep -F "$s/" <<<"$idem" || true; } | sed 's/^sl:idem:\({[^}]*}\).*/\1/' | sort -u | wc -l)
  [[ $n == 1 ]] || same=0
done
check "the keys of one submission share one tag" test "$same" = 1
left=$(RC --scan --pattern 'sl:claim:*hbatch:*' | grep -c . || true)
check "no claim left behind ($left)" test "$left" = 0
left=$(RC --scan --pattern 'sl:starts:*hbatch*' | grep -c . || true)
check "no start count left behind ($left)" test "$left" = 0
check "the limiter took from one of 2 buckets" grep -q 'limiter bucket [01] of 2' "$STAGES_DIR/harness.log"

# with 2 limiter buckets on a cluster the take script does not read the
# pause (another slot): the gate reads it first, so a 429's pause (set here
# as a replica's would) still holds the calls
RC SET "$(pause_key harness-provider)" 1 PX 3000 >/dev/null
t0=$(date +%s%3N)
sid=$(cat /proc/sys/kernel/random/uuid)
keys=("$sid/1" "$sid/2")
for k in "${keys[@]}"; do printf '%s\t%s\n' "$k" '{}'; done |
  kcat -P -b "$SLUICE_KAFKA_BROKERS" -t hbatch.in -K $'\t'
check "the inputs sent during the pause are answered" wait_for 30 answered
held=$(($(date +%s%3N) - t0))
check "  ... after the pause (${held} ms, the pause 3000)" test "$held" -ge 2500
harness_down
finish
