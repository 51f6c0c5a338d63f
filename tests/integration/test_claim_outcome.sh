#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Claims across replicas (sl_claim.h): 1. a paid call that fails for good,
# met by a second replica; 2. claims Redis lost while their calls waited.
#
# One sluice-harness replica takes inputs whose provider call runs 12 s and
# then fails for good (HTTP 400: paid, dead-lettered). While the calls run
# a second replica starts: the rebalance moves some partitions to it, the
# first replica's revoke waits only 0.5 s (stage.revoke_wait_ms) and leaves
# the running calls' offsets uncommitted, so the second replica reads those
# inputs again and meets the first one's claims. When the calls end:
#   - the failed outcome is stored where the claim was, so the waiting
#     replica reads it and does not call (each input: 1 provider call, the
#     harness's own count in Redis); before this, the claim was simply
#     released and the waiting replica paid a second call;
#   - each input has exactly one dead letter;
#   - a replay of the dead letters (sluicectl dlq replay) is a new input and
#     calls again: the stored failure belongs to the run that wrote it.
source "$(dirname "$0")/lib.sh"
export HARNESS_STAGE=hclaim
harness_topics 4 1s
RC DEL harness:outage >/dev/null
run=$(date +%s%N | tail -c 9)
export SLUICE_RETRY_TIERS=1s SLUICE_STAGE_REVOKE_WAIT_MS=500 SLUICE_KAFKA_SESSION_TIMEOUT_MS=6000 SLUICE_STAGE_WORKERS=16

h1=$((BASE + 190)) h2=$((BASE + 191))
pids=()
at_exit 'for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null || true; done'
replica_up() { # replica_up ADMIN_PORT (the stage's settings from the environment)
  SLUICE_ADMIN_LISTEN=127.0.0.1:$1 "$HARNESS" >>"$STAGES_DIR/hclaim-$1.log" 2>&1 &
  pids+=($!)
  wait_for 30 sh -c "curl -fsS http://127.0.0.1:$1/readyz 2>/dev/null | grep -q 'ready pid=$!'" ||
    fail "harness on $1 not ready"
}
mkdir -p "$STAGES_DIR"
replica_up "$h1"

# 12 inputs over the 4 partitions: each call runs 12 s (all at once: 16 workers), then HTTP 400
N=12
harness_send $N '{"permanent":true,"sleep_ms":12000}'
sid=$SID keys=("${KEYS[@]}")
calls() { harness_calls "$1"; }
check "the first replica called for every input" wait_for 30 harness_all_called 1

# while the calls run: a second replica, and the rebalance
replica_up "$h2"
met() { grep -q 'another replica is calling' "$STAGES_DIR/hclaim-$h2.log"; }
check "the second replica met the first one's claims (the partitions moved while the calls ran)" \
  wait_for 30 met

dead_letters() { "$SLUICECTL" dlq list --json --stage hclaim --submission "$sid" 2>/dev/null | grep -c . || true; }
idle() { # idle [PORT...]: nothing in flight on the replicas (h1 h2), twice 1 s apart
  local i p ports=("$@")
  ((${#ports[@]})) || ports=("$h1" "$h2")
  for i in 1 2; do
    for p in "${ports[@]}"; do
      [[ $(metric sluice_in_flight 'stage="hclaim"' "http://127.0.0.1:$p") == 0 ]] || return 1
    done
    sleep 1
  done
}
check "every input was dead-lettered" wait_count 60 "$N" dead_letters
# settled: nothing in flight (a second call would have ended by now: 12 s)
check "both replicas are idle" wait_for 60 idle
total=0 twice=0
for k in "${keys[@]}"; do
  c=$(calls "$k")
  total=$((total + c))
  ((c > 1)) && twice=$((twice + 1))
done
waits=$(grep -c 'another replica is calling' "$STAGES_DIR/hclaim-$h2.log" || true)
log "provider calls: $total for $N inputs ($twice paid twice); the second replica waited on $waits claim(s)"
check "each input was paid once ($total calls for $N inputs, $twice paid twice)" test "$total" = "$N"
check "each input has exactly one dead letter ($(dead_letters) for $N)" test "$(dead_letters)" = "$N"
check "the waiting replica read the stored failure" \
  grep -q 'failed for good on another replica' "$STAGES_DIR/hclaim-$h2.log"

# a replay is a new input: it calls again (and fails again, 12 s)
"$SLUICECTL" dlq replay --stage hclaim --submission "$sid" --yes >"$STAGES_DIR/replay.log" 2>&1 ||
  fail "dlq replay failed: $(tail -1 "$STAGES_DIR/replay.log")"
check "a replay of the dead letters calls again for every input" wait_for 60 harness_all_called 2

replicas_down() {
  local p rc
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    check "harness $p stopped cleanly on SIGTERM (exit $rc)" test "$rc" = 0
  done
  pids=()
}
replicas_down

# ---- 2. claims Redis lost while the calls waited -----------------------
# The first replica (2 workers, a 3 s lease renewed every second) claims 10
# inputs of 12 s calls at once: 2 run, 8 wait for a worker, holding their
# claims. A second replica takes partitions over and waits on those claims.
# Then Redis loses the claim keys (deleted here, with the first replica
# stopped meanwhile; a failover to a replica that had not received them, or
# an eviction, does the same): the second replica claims and calls the
# inputs it holds, and the first one's next renewal finds those claims
# lost, so its workers must not call them when they get to them: they claim
# again and reuse the second replica's outputs. Only a call running at the
# loss may be paid twice.
h3=$((BASE + 192)) h4=$((BASE + 193))
export SLUICE_STAGE_CLAIM_LEASE_MS=3000
SLUICE_STAGE_WORKERS=2 replica_up "$h3"
harness_send 10 '{"sleep_ms":12000}'
sid2=$SID keys=("${KEYS[@]}")
claims() { RC --scan --pattern "sl:claim:*hclaim:$sid2/*" | wc -l; }
check "the first replica claimed every input" wait_for 30 at_least 10 claims
replica_up "$h4"
met2() { grep -q 'another replica is calling' "$STAGES_DIR/hclaim-$h4.log"; }
check "the second replica met the first one's claims" wait_for 30 met2
# The first replica is stopped (SIGSTOP) across the loss, so that the second
# one claims first and the first one's next renewal finds the claims held
# by another owner; without that, a renewal that came first would simply
# take them back (sl_claim_renew_lua), and nothing would be lost to see.
h3_pid=${pids[0]} h4_pid=${pids[1]}
kill -STOP "$h3_pid"
lost_at=$(date +%s%3N)
RC --scan --pattern "sl:claim:*hclaim:$sid2/*" | while read -r k; do RC DEL "$k" >/dev/null; done
# a claim's value is its owner, "<host>:<pid>:<random>:<seq>"
taken() {
  local k
  for k in $(RC --scan --pattern "sl:claim:*hclaim:$sid2/*"); do
    [[ $(RC GET "$k") == *":$h4_pid:"* ]] && return 0
  done
  return 1
}
check "the second replica claimed inputs once the claims were lost" wait_for 10 taken
kill -CONT "$h3_pid"
outs() { harness_out_keys "$sid2/" | sort -u | wc -l; }
check "every input ended done" wait_for 120 at_least 10 outs
check "both replicas are idle" wait_for 60 idle "$h3" "$h4"
twice=0 early=0
for k in "${keys[@]}"; do
  c=$(calls "$k")
  if ((c > 1)); then
    twice=$((twice + 1))
    first=$(RC LINDEX "harness:times:$k" 0)
    ((first < lost_at)) && [[ $(RC LINDEX "harness:times:$k" 1) -ge $lost_at ]] && early=$((early + 1))
  fi
done
lost=$(grep -c 'lost its claim' "$STAGES_DIR/hclaim-$h3.log" || true)
log "claims lost: $lost seen by the first replica; inputs paid twice: $twice ($early of them running when Redis lost the claims)"
check "the first replica's renewals found claims lost ($lost)" test "$lost" -ge 1
check "only a call running at the loss was paid twice ($twice twice, $early running then, at most 2 workers)" \
  test "$twice" = "$early" -a "$twice" -le 2
replicas_down
finish
