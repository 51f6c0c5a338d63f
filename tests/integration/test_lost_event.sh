#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An upload whose storage event was lost is still graded, once.
# Versity Gateway sends the bucket notification after answering the PUT and
# drops it when Kafka does not take it ("failed to send kafka event"), so an
# answer uploaded while the broker restarts has no event. Ingest's sweep
# finds the stored object of a question still awaiting its upload and writes
# the missing event.
#   1. a submission of two answers; Kafka is SIGKILLed; answer 1 is uploaded
#      (storage accepts it, the gateway logs the event it could not send);
#      Kafka is started again and answer 2 is uploaded as usual;
#   2. both answers end done, answer 1 through the sweep, each transcribed
#      exactly once;
#   3. a second, different event for answer 2 (another eventTime: what a
#      late storage event beside the sweep's looks like) queues an
#      UploadCompleted byte-identical to the first (ingest reuses the upload
#      time the first event recorded), answered from stt's idempotency
#      store: no second transcription.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
# whatever happens, Kafka is running again when this test ends
at_exit '"$ROOT/tools/devstack" up >/dev/null 2>&1'
export SLUICE_INGEST_SWEEP_INTERVAL_S=2 SLUICE_INGEST_SWEEP_GRACE_S=3
stages_up

espeak-ng -s 140 -w "$work/a1.wav" "I usually go hiking on weekends with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favourite food is kimchi stew."
new_submission "$work/a1.wav" "$work/a2.wav"
sid=$SID token=$TOKEN
view() { view_of "$SID" "$TOKEN"; }
check "the submission is recorded (awaiting its uploads)" \
  wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $token' '$RESULTS_URL/v1/submissions/$sid' | jq -e '.questions | length == 2' >/dev/null"

gw_log=$DEVSTACK_DIR/versitygw.log
lost0=$(grep -c "failed to send kafka event" "$gw_log" || true)
kill -KILL "$(cat "$DEVSTACK_DIR/kafka.pid")"
sleep 1
check "storage accepts answer 1 while Kafka is down" put_answer 0 "$work/a1.wav"
check "the gateway could not send its event" \
  wait_for 30 sh -c "test \$(grep -c 'failed to send kafka event' '$gw_log') -gt $lost0"
"$ROOT/tools/devstack" up >/dev/null
"$ROOT/tools/stages" up >/dev/null # whatever exited while Kafka was away comes back
check "answer 2 uploaded with Kafka back" put_answer 1 "$work/a2.wav"

both_done() { view >"$work/view.json" && jq -e '[.questions[].state] == ["done","done"]' "$work/view.json" >/dev/null; }
check "both answers end done" wait_for 150 both_done
jq -c '[.questions[] | {no, state, error}]' "$work/view.json" >&2
swept() { curl -fsS "$ADMIN_INGEST/metrics" | awk '$1 == "sluice_ingest_sweep_events_total" {print $2; f=1} END {if (!f) print 0}'; }
check "the sweep wrote answer 1's event ($(swept))" test "$(swept)" -ge 1
check "ingest logged what it swept" grep -q "\"$sid\",\"question\":\"1\",\"msg\":\"sweep: .* no event for it has been seen" "$STAGES_DIR/ingest.log"
transcribed() { grep -c "\"$sid\",\"question\":\"$1\",\"msg\":\"transcribed" "$STAGES_DIR/stt.log" || true; }
check "answer 1 transcribed once ($(transcribed 1))" test "$(transcribed 1)" = 1
check "answer 2 transcribed once ($(transcribed 2))" test "$(transcribed 2)" = 1

# 3. another event for answer 2, as a late storage event would be
okey2="submissions/$sid/q02.wav"
uploads() { kcat -C -b "$B" -t stt.requests -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$1\$" || true; }
rec=$(kcat -C -b "$B" -t storage-events -o beginning -e -q 2>/dev/null | first_line "\"$okey2\"" |
  jq -c '.Records[0] | .eventTime = "2026-01-01T00:00:00.000Z"')
check "found the gateway's record of answer 2" test -n "$rec"
printf 'late-%s\t{"Records":[%s]}\n' "$sid" "$rec" | kcat -P -b "$B" -t storage-events -K $'\t'
check "the late event was queued again" wait_count 30 2 uploads "$sid/2"
check "stt answered it from its idempotency store" \
  wait_for 30 grep -q "\"$sid\",\"question\":\"2\",\"msg\":\"already processed" "$STAGES_DIR/stt.log"
check "answer 2 still transcribed once ($(transcribed 2))" test "$(transcribed 2)" = 1
check "the sweep no longer looks for this submission" \
  test "$(redis-cli -p "$DEVSTACK_REDIS_PORT" ZRANGE "$("$SLUICECTL" keys "$sid" | awk '$1 == "pending" {print $2}')" 0 -1 | grep -c "^$sid/" || true)" = 0

finish
