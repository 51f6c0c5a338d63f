#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An upload that arrives while the Redis view is lost and not yet rebuilt is
# not failed as unknown_submission: ingest sees materialize's view marker
# missing and retries (class view_rebuilding) for as long as the rebuild
# takes, and its unknown_submission wait counts from the first failure.
#   1. a submission is created and recorded; materialize is stopped
#      (SIGSTOP: a stalled pod) and Redis emptied (FLUSHALL);
#   2. the answer is uploaded: ingest retries it as view_rebuilding well past
#      ingest.submission_wait_s (3 s here) with no dead letter;
#   3. meanwhile results answers 503 view_rebuilding (Retry-After), never
#      404 for the submission that exists;
#   4. materialize resumes (SIGCONT), rebuilds the view, and the answer ends
#      done.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export SLUICE_RETRY_TIERS=1s,4s SLUICE_INGEST_SUBMISSION_WAIT_S=3
retry_topics 1s 4s
stages_up

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
new_submission "$work/a.wav"
recorded() { view_of "$SID" "$TOKEN" | jq -e '.questions[0].state == "awaiting_upload"' >/dev/null; }
check "the submission is recorded" wait_for 30 recorded

mat=$(cat "$STAGES_DIR/materialize.pid")
at_exit "kill -CONT $mat 2>/dev/null"
kill -STOP "$mat"
redis-cli -p "$DEVSTACK_REDIS_PORT" FLUSHALL >/dev/null
code=$(curl -sS -o "$work/503.json" -D "$work/503.h" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  "$RESULTS_URL/v1/submissions/$SID")
check "while the view is rebuilt the client gets 503, not 404 ($code)" test "$code" = 503
check "  ... with Retry-After and the reason" \
  sh -c "grep -qi '^retry-after: ' '$work/503.h' && jq -e '.error.code == \"view_rebuilding\"' '$work/503.json' >/dev/null"
put_answer 0 "$work/a.wav"
t0=$SECONDS
waits() { grep -F "$SID" "$STAGES_DIR/ingest.log" | grep -c "view_rebuilding" || true; }
past_wait() { test "$(waits)" -ge 3 -a $((SECONDS - t0)) -ge 8; }
check "ingest retries the upload as view_rebuilding past the 3 s wait" wait_for 60 past_wait
check "  ... without dead-lettering it" \
  test -z "$("$SLUICECTL" dlq list --json --submission "$SID" 2>/dev/null)"

kill -CONT "$mat"
done_view() { view_of "$SID" "$TOKEN" >"$work/view.json" && jq -e '.questions[0].state == "done"' "$work/view.json" >/dev/null; }
check "once materialize rebuilt the view the answer ends done" wait_for 120 done_view
check "no unknown_submission dead letter for it" \
  test -z "$("$SLUICECTL" dlq list --json --submission "$SID" 2>/dev/null | grep unknown_submission)"
finish
