#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A storage event that reaches ingest late, for a submission materialize has
# not recorded yet, still gets ingest.submission_wait_s to find it, counted
# from ingest's first look (its first failure), not from the upload.
# Seen in test_kafka_nodes on a Redis Cluster stack: a broker SIGSTOPped for
# 60 s held materialize's submissions (recorded 73 s after the accept) and
# the gateway's events (delivered ~70 s after the upload, with the upload's
# timestamp); ingest's first look found the event already older than the
# 60 s wait and dead-lettered 45 answers as unknown_submission at once.
# Here with the real parts, the two delays made by stopping stages: ingest
# and materialize not started (tools/stages up --replicas ingest=0,...); a submission
# created and its answer uploaded (the gateway's event waits in
# storage-events, stamped with the upload's time); after more than the wait
# (6 s here) ingest is started, materialize 2 s later.
# Checks: the answer ends done; no dead letter for the submission; ingest
# logged the wait ("not recorded yet"), not unknown_submission.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export SLUICE_INGEST_SUBMISSION_WAIT_S=6 SLUICE_INGEST_SUBMISSION_RECHECK_S=1
export SLUICE_RETRY_TIERS=1s,2s
retry_topics 1s 2s
# every stage but ingest and materialize (0: left to this test)
"$ROOT/tools/stages" up --replicas ingest=0,materialize=0 >/dev/null || { fail "stages did not start"; finish; }

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
new_submission "$work/a.wav" || { fail "create"; finish; }
put_answer 0 "$work/a.wav" || fail "upload"
uploaded=$SECONDS
sleep 8 # the event is older than ingest.submission_wait_s (6 s) when ingest first sees it
"$ROOT/tools/stages" up --replicas materialize=0 >/dev/null || fail "could not start ingest"
sleep 2 # ingest looks, and waits
"$ROOT/tools/stages" up >/dev/null || fail "could not start materialize"
log "ingest started $((SECONDS - uploaded - 2)) s after the upload, materialize 2 s after it"

done_q() { jqe '.questions[0].state == "done"' "$(view_of "$SID" "$TOKEN")"; }
check "the late answer ends done" wait_for 90 done_q
dl=$("$SLUICECTL" dlq list --json --submission "$SID" 2>/dev/null || true)
check "no dead letter for the submission ($(jq -r '.error_class' <<<"$dl" 2>/dev/null | sort | uniq -c | tr '\n' ' '))" \
  test -z "$dl"
check "ingest waited for the submission (not recorded yet)" \
  grep -q "not recorded yet" "$STAGES_DIR/ingest.log"
check "  ... and did not call it unknown" bash -c "! grep -q 'which does not exist' '$STAGES_DIR/ingest.log'"
finish
