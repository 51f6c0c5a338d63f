#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Erasure on request (issue 46, docs/privacy.md), with crypto.kek set: an
# answer is spoken, transcribed and graded; its transcript must then be in
# no Kafka log segment (read from the broker's log directory: sealed by the
# submission's data key, where without crypto.kek it lies in grade.requests
# and results in plain text, so this check fails there). Redis is flushed
# meanwhile: the data keys come back from their topic, and a second
# submission's view is rebuilt readable. `sluicectl submission delete` then
# erases the first: its GET answers 404, storage HEADs of its original and
# derived FLAC answer 404, a SCAN of Redis finds no key naming it, replaying
# its dead letter is refused as erased, and the erasures topic holds the
# record; the second submission is untouched. A second FLUSHALL, with
# presign down, rebuilds the view from Kafka without bringing the erased
# submission back, before and after the key store is rebuilt.
source "$(dirname "$0")/lib.sh"
export SLUICE_CRYPTO_KEK=${SLUICE_CRYPTO_KEK-$(openssl rand -hex 32)}
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
KDATA=$DEVSTACK_DIR/kafka/data
[[ -d $KDATA ]] || { fail "no Kafka log directory at $KDATA"; finish; }

# a sentence of its own for this run, so that no earlier test wrote its text
words=(river garden yellow window happy music morning pencil orange summer
  doctor kitchen travel winter coffee school animal forest market bridge)
sentence=""
for i in 1 2 3 4 5 6 7 8; do sentence+="${words[RANDOM % ${#words[@]}]} "; done
espeak-ng -s 140 -w "$work/a1.wav" "I think the $sentence is very nice."
espeak-ng -s 140 -w "$work/b1.wav" "My favorite food is pizza because it is warm and delicious."

submit() { # FILE: the finished submission's JSON
  "$ROOT/tools/submit" --prompt "Tell me something." "$1" 2>>"$work/submit.log"
}
out=$(submit "$work/a1.wav") || { cat "$work/submit.log" >&2; fail "submission A did not complete"; finish; }
other=$(submit "$work/b1.wav") || { cat "$work/submit.log" >&2; fail "submission B did not complete"; finish; }
sid=$(jq -r .submission_id <<<"$out")
osid=$(jq -r .submission_id <<<"$other")
token=$SLUICE_API_KEY # the owner's credential reads them (results.c)
otoken=$SLUICE_API_KEY
text=$(jq -r '.questions[0].transcript // ""' <<<"$out")
log "A $sid: \"$text\"; B $osid"
check "A is done with a transcript of some length" test "${#text}" -ge 12
check "B is done" jqe '.summary.done == 1' "$other"

# the transcript in Kafka's own files: grade.requests, results, every topic
in_segments() { { grep -rlaF -- "$1" "$KDATA" 2>/dev/null || true; } | sed "s|$KDATA/||" | head -5; }
found=$(in_segments "$text")
check "A's transcript is in no Kafka log segment (found in: ${found:-none})" test -z "$found"

# Redis loses everything: the keys come back from the data-key topic, and
# the views are rebuilt from Kafka with the transcripts opened again
RC FLUSHALL >/dev/null
b_readable() { jqe '.questions[0].transcript | length > 10' "$(view_of "$osid" "$otoken")"; }
wait_for 90 b_readable || log "B after the flush: $(view_of "$osid" "$otoken")"
check "after FLUSHALL, B's view is rebuilt with its transcript (its key came back from Kafka)" \
  b_readable
dk_rebuilt() { at_least 1 metric sluice_datakey_store_rebuilds_total '' "$(admin presign)"; }
wait_for 30 dk_rebuilt || true
check "the data-key store was rebuilt (presign's count)" dk_rebuilt

# the objects it had, in both buckets
DB=${SLUICE_S3_DERIVED_BUCKET:-$SLUICE_S3_BUCKET}
orig=submissions/$sid/q01.wav
derived=derived/$orig.16k.flac
check "A's original is in storage before" test "$(head_of "$SLUICE_S3_BUCKET" "$orig")" = 200
check "A's derived FLAC is in storage before" test "$(head_of "$DB" "$derived")" = 200

# a dead letter of it (what a failed grading leaves), to be replayed after
head -c 64 /dev/urandom >"$work/dl.bin"
"$SLUICECTL" dlq inject --stage grade --class provider_error --key "$sid/1" \
  --replay-topic grade.requests --payload-file "$work/dl.bin" >/dev/null 2>&1
check "a dead letter of A is there" jqany ".subject_key == \"$sid/1\" or .key == \"$sid/1\"" \
  "$("$SLUICECTL" dlq list --submission "$sid" --json 2>/dev/null)"

rc=0
erase=$("$SLUICECTL" submission delete "$sid" --actor erasure-test --json 2>"$work/delete.err") || rc=$?

cat "$work/delete.err" >&2
log "delete: $erase"
check "sluicectl submission delete succeeds" test "$rc" = 0
check "it reports the key destroyed and both objects deleted" \
  jqe '.state == "erased" and .key_destroyed and .objects >= 2 and .redis_keys >= 1' "$erase"
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid")
check "its GET answers 404 ($code)" test "$code" = 404
check "storage HEAD of the original answers 404" test "$(head_of "$SLUICE_S3_BUCKET" "$orig")" = 404
check "storage HEAD of the derived FLAC answers 404" test "$(head_of "$DB" "$derived")" = 404
left=$(RC --scan --pattern "*$sid*" | head -5 || true)
check "a SCAN of Redis finds no key naming it (${left:-none})" test -z "$left"
check "the erasures topic records it, with its actor" \
  jqany "(.submissionId // .submission_id) == \"$sid\" and .actor == \"erasure-test\"" \
  "$("$SLUICECTL" erasures --json 2>/dev/null)"
rrc=0
replay=$("$SLUICECTL" dlq replay --submission "$sid" --actor erasure-test 2>&1) || rrc=$?
log "replay: $replay"
check "replaying its dead letter is refused as erased (exit $rrc)" \
  bash -c "[[ $rrc != 0 ]] && grep -q 'replayed 0, skipped 1 (erased' <<<'$replay'"
check "B is untouched" b_readable
# Redis loses everything again, this time with presign (which rebuilds the
# key store) down: the view is rebuilt from Kafka, where A's create and
# statuses still are, and must not bring A back while its sentinel is gone
"$ROOT/tools/stages" kill presign >/dev/null
RC FLUSHALL >/dev/null
names_a() { [[ -n $(RC --scan --pattern "*$sid*" | head -1 || true) ]]; }
WAIT_FOR_POLL_S=0.2 wait_for 10 names_a || true
left=$(RC --scan --pattern "*$sid*" | head -5 || true)
check "the view rebuilt without the key store brings no key of the erased submission back (${left:-none})" \
  test -z "$left"
"$ROOT/tools/stages" up >/dev/null # presign again: the store, then the view, complete
marked() { [[ $(RC EXISTS sl:view:epoch) == 1 && $(RC EXISTS sl:dk:epoch) == 1 ]]; }
rebuilt() { marked && b_readable; }
wait_for 90 rebuilt || true
check "then the key store and the view are rebuilt, B readable" rebuilt
WAIT_FOR_POLL_S=0.2 wait_for 5 names_a || true
left=$(RC --scan --pattern "*$sid*" | head -5 || true)
check "and still no key names the erased submission (${left:-none})" test -z "$left"
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid")
check "its GET still answers 404 ($code)" test "$code" = 404
again=$("$SLUICECTL" submission delete "$sid" --json 2>/dev/null || true)
check "deleting it again succeeds (nothing left to erase)" jqe '.state == "erased" and .objects == 0' "$again"

finish
