#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A SIGKILL's collateral is not serialized (stage.max_starts).
#
# A sluice-harness replica runs 24 calls of 4 s at once and is SIGKILLed
# while they run; a new one is started at once. Each of the 24 inputs then
# has a start count left behind: it "started before without finishing".
# They are collateral of one death, not poison: they must run again at full
# concurrency, not one after another (which takes 24 x 4 s = 96 s). Only an
# input at its last chance (its start number stage.max_starts, 3) runs
# alone. Checks: every input ends with exactly one output after the restart,
# all of them within 40 s (the dead member's session, 6 s, the claims' lease, 2 s, and
# one round of calls), no input is called more than twice, and the
# restarted replica saw them as inputs that started before.
source "$(dirname "$0")/lib.sh"
export HARNESS_STAGE=hcrash
harness_topics 4 1s
RC DEL harness:outage >/dev/null
export SLUICE_RETRY_TIERS=1s SLUICE_KAFKA_SESSION_TIMEOUT_MS=6000 SLUICE_STAGE_WORKERS=32 \
  SLUICE_STAGE_CLAIM_LEASE_MS=2000
mkdir -p "$STAGES_DIR"
port=$((BASE + 194))
pid=
at_exit '[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null; true'
replica_up() {
  SLUICE_ADMIN_LISTEN=127.0.0.1:$port "$HARNESS" >>"$STAGES_DIR/hcrash-$1.log" 2>&1 &
  pid=$!
  wait_for 30 sh -c "curl -fsS http://127.0.0.1:$port/readyz 2>/dev/null | grep -q 'ready pid=$pid'" ||
    fail "harness $1 not ready"
}
replica_up first

N=24
harness_send $N '{"sleep_ms":4000}'
sid=$SID keys=("${KEYS[@]}")
calls() { harness_calls "$1"; }
check "the replica called for all $N inputs at once" wait_for 30 harness_all_called 1

kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
t0=$SECONDS
replica_up second
outs() { harness_out_keys "$sid/" | sort -u | wc -l; }
check "every input ended done after the restart" wait_for 150 at_least "$N" outs
took=$((SECONDS - t0))
twice=0 more=0
for k in "${keys[@]}"; do
  c=$(calls "$k")
  ((c == 2)) && twice=$((twice + 1))
  ((c > 2)) && more=$((more + 1))
done
suspects=$(grep -c 'before without finishing' "$STAGES_DIR/hcrash-second.log" || true)
log "after the SIGKILL: $N inputs done in ${took} s (serialized: $((N * 4)) s); $suspects seen as started before; $twice called twice, $more more often"
check "the restarted replica saw the inputs as started before ($suspects)" test "$suspects" -ge 1
check "the collateral ran at full concurrency: done within 40 s of the restart (${took} s)" \
  test "$took" -le 40
check "no input was called more than twice ($more)" test "$more" = 0
sleep 2
check "each input has exactly one output" test "$(harness_out_keys "$sid/" | wc -l)" = "$N"
kill -TERM "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
pid=
check "harness stopped cleanly on SIGTERM (exit $rc)" test "$rc" = 0
finish
