#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A stage stops on SIGTERM even when one of its groups is handed partitions
# while the other is closing. A stage closes its two consumers one after
# the other (inputs, then retry tiers). If the retry group gets an
# assignment while the input group's close waits for a join, that
# assignment must be served before the retry group's close begins: served
# inside rd_kafka_consumer_close, an incremental assign can leave
# librdkafka before 2.5 (Debian 12: 2.0.2) waiting forever
# (confluentinc/librdkafka#4527), and the stage never exits.
#
# Three materialize replicas (r1 r2 r3) and a fourth member of the input
# group only (kcat, cooperative-sticky), SIGSTOPped so that the input
# group's joins wait for it. r3 SIGKILLed and r1 SIGTERMed: both groups
# rebalance, the input group's join waits for kcat, the retry group's for
# r3's session (6 s) to end and then hands r1's and r3's partitions to r2.
# r2 is SIGTERMed at 3 s, inside that window: its input group's close
# waits for the join while the retry group's assignment arrives.
# Checks: r2 exits within 30 s, logged a clean stop, and no assignment was
# served inside a close (the stage warns when one is). Then kcat exits on
# SIGTERM and the group is left without members: the lane's next test runs
# materialize in this group, and a member left over held partitions of
# `submissions` there (a CI run's next test never saw its submission). kcat
# never commits (enable.auto.commit=false): it must not move the group's
# offsets past messages materialize did not apply.
source "$(dirname "$0")/lib.sh"
export SLUICE_KAFKA_SESSION_TIMEOUT_MS=6000
"$ROOT/tools/stages" up --replicas materialize=3 >/dev/null || { fail "stages did not start"; finish; }
pid_of() { cat "$STAGES_DIR/$1.pid"; }
r1=$(pid_of materialize) r2=$(pid_of materialize.2) r3=$(pid_of materialize.3)
kcat -b "$SLUICE_KAFKA_BROKERS" -G sluice-materialize -X partition.assignment.strategy=cooperative-sticky \
  -X session.timeout.ms=30000 -X enable.auto.commit=false -o end -q results submissions >/dev/null 2>"$STAGES_DIR/kcat.log" &
kc=$!
at_exit "kill -CONT $kc 2>/dev/null; kill $kc 2>/dev/null || true"
# kcat's join settles: every replica has logged the rebalance it caused
joined() { (($(grep -c 'sluice-materialize: assigned' "$STAGES_DIR/materialize.2.log") >= 2)); }
wait_for 30 joined || log "kcat's join was not seen in materialize.2's log"
sleep 3
kill -STOP "$kc"
kill -KILL "$r3"
kill -TERM "$r1"
sleep 3
t0=$SECONDS
kill -TERM "$r2"
gone() { ! kill -0 "$r2" 2>/dev/null; }
check "r2 exited within 30 s of SIGTERM" wait_for 30 gone
log "r2 took $((SECONDS - t0)) s to stop"
kill -CONT "$kc"
kill -KILL "$r2" 2>/dev/null || true
grep -q '"msg":"stopped"' "$STAGES_DIR/materialize.2.log" || fail "r2 did not log a clean stop"
served=$(grep -c 'was served while the consumer closed' "$STAGES_DIR/materialize.2.log" || true)
check "no assignment was served inside a consumer close ($served)" test "$served" = 0
grep -E 'assigned|revok|closing|stopped' "$STAGES_DIR/materialize.2.log" | tail -n 8 |
  jq -r '"  " + .ts + " " + .msg' >&2 || true
# kcat leaves the group on SIGTERM, and the group is left empty: a member
# still there would hold partitions of the lane's next test's materialize
kill -TERM "$kc" 2>/dev/null || true
t0=$SECONDS
kc_gone() { ! kill -0 "$kc" 2>/dev/null; }
check "kcat exited on SIGTERM" wait_for 20 kc_gone
log "kcat took $((SECONDS - t0)) s to exit"
kill -KILL "$kc" 2>/dev/null || true
# r1 and r2 stopped, r3's session (6 s) over, kcat gone: no member is left
mat_members() {
  "$SLUICECTL" status --json | jq -r '[.stages[] | select(.group == "sluice-materialize") | .members] | add // 0'
}
no_members() { [[ $(mat_members) == 0 ]]; }
check "the input group sluice-materialize is left without members" wait_for 40 no_members
finish
