#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An upload that reaches ingest a moment before materialize has recorded its
# submission waits for it in place, not a whole retry tier.
# Presign writes a submission to Kafka and materialize records it in Redis;
# a client that uploads at once (or a materialize that fetches in batches)
# can put the storage event in front of that record. Ingest then looks the
# submission up again every 100 ms for ingest.submission_recheck_s (its
# offset stays uncommitted), instead of a copy to ingest.retry.5s that waits
# five seconds (what the batched-fetch runs of bench scenario K showed: p95
# of accept to done 5 s longer).
#   1. materialize is SIGSTOPped; a submission of one answer is created and
#      the answer uploaded; ingest cannot find the submission;
#   2. 1.5 s later materialize is SIGCONTed;
#   3. the UploadCompleted reaches stt.requests once, less than 4 s after
#      the upload, no copy of it went to ingest's retry tiers, and ingest
#      counts its runs in place (sluice_reruns_total).
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
stages_up
mpid=$(cat "$STAGES_DIR/materialize.pid")
# whatever happens, materialize is not left stopped
at_exit "kill -CONT $mpid 2>/dev/null || true"
espeak-ng -s 140 -w "$work/a.wav" "I usually go hiking on weekends."

kill -STOP "$mpid"
log "materialize stopped (SIGSTOP)"
new_submission "$work/a.wav" || fail "presign did not accept the submission"
k="$SID/1"
t_up=$(date +%s%3N)
check "the answer is uploaded" put_answer 0 "$work/a.wav"
sleep 1.5
kill -CONT "$mpid"
log "materialize continued (SIGCONT)"

queued() { kcat -C -b "$B" -t stt.requests -o beginning -e -q -f '%k %T\n' 2>/dev/null | awk -v k="$k" '$1 == k'; }
check "its UploadCompleted reaches stt.requests" wait_count 30 1 sh -c "$(declare -f queued); k='$k' B='$B'; queued | wc -l"
q=$(queued)
nq=$(grep -c . <<<"$q" || true)
check "exactly one UploadCompleted ($nq)" test "$nq" = 1
t_q=$(awk 'NR == 1 {print $2}' <<<"$q")
log "upload to stt.requests: $((t_q - t_up)) ms"
check "queued less than 4 s after the upload ($((t_q - t_up)) ms)" test $((t_q - t_up)) -lt 4000
copies=0
for t in $("$SLUICE_BIN" pipeline --json | jq -r '.stages[] | select(.name == "ingest") | .retry_topics[]'); do
  # storage events have no key: a copy names the object in its value
  n=$(kcat -C -b "$B" -t "$t" -o beginning -e -q 2>/dev/null | grep -cF "\"submissions/$SID/" || true)
  copies=$((copies + n))
done
check "no copy of it on ingest's retry tiers ($copies)" test "$copies" = 0
reruns=$(metric sluice_reruns_total 'stage="ingest"' "$ADMIN_INGEST")
check "ingest ran it again in place ($reruns)" test "${reruns%.*}" -ge 1
finish
