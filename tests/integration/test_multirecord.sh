#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A storage event with several records (some storages batch them): one bad
# record must not dead-letter the good ones beside it. Ingest splits the
# event into single-record events, so each record is checked, retried or
# dead-lettered on its own.
#   1. an answer is uploaded and graded as usual (the gateway's own event);
#   2. an event of two records is published: a copy of that answer's record
#      and a record for an object that is no submission's;
#   3. the good record is queued again (a second UploadCompleted for the
#      question), byte-identical to the first, so stt answers it from its
#      idempotency store without transcribing again; only the bad record is
#      dead-lettered (its dead letter holds that record alone).
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
stages_up
run=$(date +%s%N | tail -c 9)
espeak-ng -s 140 -w "$work/a.wav" "I usually go hiking on weekends."
out=$("$ROOT/tools/submit" "$work/a.wav" 2>"$work/submit.log") ||
  { cat "$work/submit.log" >&2; fail "the answer was not graded"; finish; }
sid=$(jq -r .submission_id <<<"$out")
k1="$sid/1"
okey="submissions/$sid/q01.wav"
check "answer graded through the gateway's event" jqe '.summary.done == 1' "$out"

uploads() { kcat -C -b "$B" -t stt.requests -o beginning -e -q -f '%k\n' 2>/dev/null | grep -c "^$1\$" || true; }
check "one UploadCompleted so far" test "$(uploads "$k1")" = 1
rec=$(kcat -C -b "$B" -t storage-events -o beginning -e -q 2>/dev/null | first_line "\"$okey\"" |
  jq -c '.Records[0]')
check "found the gateway's record of the upload" test -n "$rec"
bogus=$(jq -c --arg k "other/not-ours-$run.wav" \
  '{eventName: "s3:ObjectCreated:Put", eventTime: "2026-12-01T00:00:00Z",
    s3: {bucket: {name: "answers"}, object: {key: $k, size: 10}}}' <<<'{}')
event=$(jq -c -n --argjson a "$rec" --argjson b "$bogus" '{Records: [$a, $b]}')
transcribed_before=$(grep -c "\"$sid\",\"question\":\"1\",\"msg\":\"transcribed" "$STAGES_DIR/stt.log" || true)
printf 'multi-%s\t%s\n' "$run" "$event" | kcat -P -b "$B" -t storage-events -K $'\t'

wait_count 30 2 uploads "$k1" || true
check "the good record was queued again (UploadCompleted x$(uploads "$k1"))" test "$(uploads "$k1")" = 2
dl_of_bogus() {
  "$SLUICECTL" dlq list --json --stage ingest 2>/dev/null | { grep -F "not-ours-$run.wav" || true; }
}
wait_for 30 sh -c "test -n \"\$('$SLUICECTL' dlq list --json --stage ingest 2>/dev/null | grep -F 'not-ours-$run.wav')\"" || true
dls=$(dl_of_bogus)
check "the bad record was dead-lettered once" test "$(grep -c . <<<"$dls")" = 1
check "  ... as unknown_object, alone (payload $(jq .payload_bytes <<<"$dls" 2>/dev/null) bytes, the good record is ${#rec})" \
  jqe ".error_class == \"unknown_object\" and .payload_bytes < ${#rec}" "$dls"
sleep 3 # stt has had time to see the second request
transcribed_after=$(grep -c "\"$sid\",\"question\":\"1\",\"msg\":\"transcribed" "$STAGES_DIR/stt.log" || true)
check "stt did not transcribe the re-queued answer again ($transcribed_before -> $transcribed_after)" \
  test "$transcribed_after" = "$transcribed_before"
check "stt answered it from its idempotency store" \
  grep -q "\"$sid\",\"question\":\"1\",\"msg\":\"already processed" "$STAGES_DIR/stt.log"
v=$(curl -fsS -H "Authorization: Bearer $SLUICE_API_KEY" "$RESULTS_URL/v1/submissions/$sid")
check "the question is still done" jqe '.questions[0].state == "done"' "$v"
finish
