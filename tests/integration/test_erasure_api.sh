#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Erasure through the API and by retention (issue 46, docs/privacy.md), with
# crypto.kek set and the fake provider as STT and grader.
#
# The owner's DELETE /v1/submissions/{id}: refused without a credential
# (401), with the results token (403 owner_required) and with another
# user's API key (404); with the owner's API key 202 "erasing", then the
# state the client follows (GET .../erasure) reaches "erased" (the erase
# stage carried it out): the GET answers 404, storage has neither the
# original nor the derived FLAC, the erasures topic records the owner as
# its actor, and a second DELETE answers 200 "erased" and asks for nothing
# more.
#
# Retention, for one tenant only (erase.retention_tenants: audio 20 s,
# results 35 s; the sweeper runs every second): its submission is graded,
# then its uploaded answer goes (HEAD 404) while its results stay
# readable, then the submission itself is erased (GET 404, the erasure
# recorded with reason "retention"); another tenant's submission, created
# at the same time, keeps its answer and its results.
source "$(dirname "$0")/lib.sh"
export SLUICE_CRYPTO_KEK=${SLUICE_CRYPTO_KEK-$(openssl rand -hex 32)}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ret_user=$TEST_NAME-ret
other_user=$TEST_NAME-other
export SLUICE_ERASE_SWEEP_INTERVAL_S=1
export SLUICE_ERASE_RETENTION_TENANTS="{\"$ret_user\": {\"audio_s\": 20, \"results_s\": 35}}"
fake_up 50 50 0
"$ROOT/tools/stages" up >/dev/null
other_key=$("$SLUICECTL" apikey add --user "$other_user" --label "integration test" 2>/dev/null)
ret_key=$("$SLUICECTL" apikey add --user "$ret_user" --label "integration test" 2>/dev/null)
DB=${SLUICE_S3_DERIVED_BUCKET:-$SLUICE_S3_BUCKET}
espeak-ng -s 150 -w "$work/a.wav" "My favourite season is autumn because the air is cool."
is_done() { jqe '.questions[0].state == "done"' "$(view_of "$1" "$2")"; }
# erase_call METHOD SID [CREDENTIAL] [PATH_SUFFIX]: the status, the body in $work/body
erase_call() {
  local auth=()
  [[ -n ${3-} ]] && auth=(-H "Authorization: Bearer $3")
  curl -sS -o "$work/body" -D "$work/headers" -w '%{http_code}' -X "$1" "${auth[@]}" \
    "$RESULTS_URL/v1/submissions/$2${4-}"
}

# ---- the owner's DELETE ----
new_submission "$work/a.wav" || { fail "no submission"; finish; }
put_answer 0 "$work/a.wav"
sid=$SID token=$TOKEN
wait_for 120 is_done "$sid" "$SLUICE_API_KEY" || true
check "the answer is graded" is_done "$sid" "$SLUICE_API_KEY"
orig=submissions/$sid/q01.wav
derived=derived/$orig.16k.flac
check "its original is in storage" test "$(head_of "$SLUICE_S3_BUCKET" "$orig")" = 200
check "its derived FLAC is in storage" test "$(head_of "$DB" "$derived")" = 200

code=$(erase_call DELETE "$sid")
check "DELETE without a credential: 401 with an error body ($code)" \
  eval 'test "$code" = 401 && jqe ".error.code and .error.message" "$(cat "$work/body")"'
code=$(erase_call DELETE "$sid" "$token")
check "DELETE with the results token: 403 owner_required ($code)" \
  eval 'test "$code" = 403 && jqe ".error.code == \"owner_required\"" "$(cat "$work/body")"'
code=$(erase_call DELETE "$sid" "$other_key")
check "DELETE with another user's API key: 404 ($code)" test "$code" = 404
check "and nothing was erased: its GET still answers" is_done "$sid" "$SLUICE_API_KEY"
code=$(erase_call DELETE "$sid" "$SLUICE_API_KEY")
log "DELETE: $code $(cat "$work/body")"
check "the owner's DELETE: 202 erasing ($code)" \
  eval 'test "$code" = 202 && jqe ".erasure.state == \"erasing\" and .submission_id == \"$sid\"" "$(cat "$work/body")"'
check "with the state's Location" grep -qi "^Location: /v1/submissions/$sid/erasure" "$work/headers"
erased() { [[ $(erase_call GET "$sid" "$SLUICE_API_KEY" /erasure) == 200 ]] &&
  jqe '.erasure.state == "erased"' "$(cat "$work/body")"; }
wait_for 60 erased || log "erasure state: $(cat "$work/body")"
check "the state it follows reaches erased" erased
code=$(curl -sS -o /dev/null -w '%{http_code}' "${KEY_AUTH[@]}" "$RESULTS_URL/v1/submissions/$sid")
check "its GET answers 404 ($code)" test "$code" = 404
check "storage HEAD of the original answers 404" test "$(head_of "$SLUICE_S3_BUCKET" "$orig")" = 404
check "storage HEAD of the derived FLAC answers 404" test "$(head_of "$DB" "$derived")" = 404
left=$(RC --scan --pattern "*$sid*" | head -5 || true)
check "a SCAN of Redis finds no key naming it (${left:-none})" test -z "$left"
audits=$("$SLUICECTL" erasures --json 2>/dev/null)
check "the erasures topic records it, the owner its actor" \
  jqany "(.submissionId // .submission_id) == \"$sid\" and .actor == \"$TEST_NAME\" and .reason == \"request\"" "$audits"
code=$(erase_call DELETE "$sid" "$SLUICE_API_KEY")
check "a second DELETE answers 200 erased ($code)" \
  eval 'test "$code" = 200 && jqe ".erasure.state == \"erased\"" "$(cat "$work/body")"'
n=$(jq -s "[.[] | select((.submissionId // .submission_id) == \"$sid\")] | length" <<<"$("$SLUICECTL" erasures --json 2>/dev/null)")
check "and asks for nothing more: one erasure recorded ($n)" test "$n" = 1
code=$(erase_call GET "$sid" "$other_key" /erasure)
check "another user cannot read its erasure state: 404 ($code)" test "$code" = 404
code=$(erase_call DELETE 0190aaaa-0000-7000-8000-000000000000 "$SLUICE_API_KEY")
check "DELETE of an unknown id: 404 ($code)" test "$code" = 404

# ---- retention, for one tenant ----
KEY_AUTH=(-H "Authorization: Bearer $ret_key")
new_submission "$work/a.wav" || { fail "no retention submission"; finish; }
put_answer 0 "$work/a.wav"
rsid=$SID
KEY_AUTH=(-H "Authorization: Bearer $other_key")
new_submission "$work/a.wav" || { fail "no other submission"; finish; }
put_answer 0 "$work/a.wav"
osid=$SID
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")
wait_for 60 is_done "$rsid" "$ret_key" || true
wait_for 30 is_done "$osid" "$other_key" || true
check "the retained tenant's answer is graded" is_done "$rsid" "$ret_key"
check "the other tenant's too" is_done "$osid" "$other_key"
audio_gone() { test "$(head_of "$SLUICE_S3_BUCKET" "submissions/$rsid/q01.wav")" = 404; }
wait_for 45 audio_gone || true
check "after its audio retention its uploaded answer is gone" audio_gone
check "while its results stay readable" is_done "$rsid" "$ret_key"
view_gone() {
  test "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ret_key" \
    "$RESULTS_URL/v1/submissions/$rsid")" = 404
}
wait_for 45 view_gone || true
check "after its results retention the submission is erased (GET 404)" view_gone
audits=$("$SLUICECTL" erasures --json 2>/dev/null)
check "the erasures topic records the audio's retention" \
  jqany "(.submissionId // .submission_id) == \"$rsid\" and .reason == \"retention:audio\"" "$audits"
check "and the submission's, by retention" \
  jqany "(.submissionId // .submission_id) == \"$rsid\" and .reason == \"retention\" and (.keyDestroyed // .key_destroyed)" "$audits"
check "the other tenant keeps its results" is_done "$osid" "$other_key"
check "and its uploaded answer" test "$(head_of "$SLUICE_S3_BUCKET" "submissions/$osid/q01.wav")" = 200
requested() { at_least 2 metric sluice_retention_erasures_requested_total '' "$(admin erase)"; }
check "the sweeper counted its two requests" requested

finish
