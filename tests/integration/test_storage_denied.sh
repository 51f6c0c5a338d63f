#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One stt replica whose signatures storage refuses (403: a clock off by more
# than SigV4 allows, or credentials being rotated) must not fail answers for
# good: the object exists, the fault is the replica's. The answer is retried
# (class storage_denied) until a replica that signs correctly takes it.
#   1. stt runs with a wrong s3.secret_key (the real gateway answers 403);
#   2. an answer is uploaded: stt logs storage_denied retries, the answer is
#      not failed and no dead letter is written;
#   3. stt is restarted with the right key: the answer ends done.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export SLUICE_RETRY_TIERS=1s,2s
retry_topics 1s 2s
stages_up
"$ROOT/tools/stages" kill stt >/dev/null
SLUICE_S3_SECRET_KEY=not-the-secret "$ROOT/tools/stages" up >/dev/null # only stt was missing

espeak-ng -s 140 -w "$work/a.wav" "I usually go hiking on weekends with my friends."
new_submission "$work/a.wav"
sid=$SID
put_answer 0 "$work/a.wav"
view() { view_of "$SID" "$TOKEN"; }
denials() { grep "\"$sid\"" "$STAGES_DIR/stt.log" | grep -c "storage_denied" || true; }
denied_twice() { test "$(denials)" -ge 2; }

check "stt retries the refused GET as storage_denied" wait_for 60 denied_twice
check "  ... saying what to look at" grep -q "is its clock right" "$STAGES_DIR/stt.log"
state=$(view | jq -r '.questions[0].state')
check "the answer is not failed meanwhile (state $state)" test "$state" != failed
check "no dead letter for it" test -z "$("$SLUICECTL" dlq list --json --submission "$sid" 2>/dev/null)"

"$ROOT/tools/stages" kill stt >/dev/null
"$ROOT/tools/stages" up >/dev/null # the right key again
done_view() { view >"$work/view.json" && jq -e '.questions[0].state == "done"' "$work/view.json" >/dev/null; }
check "with a replica that signs correctly the answer ends done" wait_for 90 done_view
finish
