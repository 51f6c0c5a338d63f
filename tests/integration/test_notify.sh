#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Signed webhooks: a submission's callback_url, the notify stage, on the real
# stack with a real receiver (tests/integration/notify_receiver.py, a test
# tool) on loopback, which the callback policy must allow explicitly:
#   - refused at create (422 callback_url_refused, with the reason): a host
#     not allowed, a metadata / private / loopback address not allowed, a
#     scheme other than http(s), user info, a non-string;
#   - a receiver that answers 200: one delivery per final question, signed
#     with the webhook secret of the API key that created the submission
#     (checked here with openssl, independently of Sluice), with the
#     delivery id "<sid>/<no>/<state>" and the question's view as body;
#   - a receiver that fails (503 twice): retried through the retry tiers
#     and delivered; every attempt has the same delivery id;
#   - a receiver that times out: retried and delivered, same id;
#   - a receiver that answers 410: not retried, dead-lettered by notify as
#     callback_gone (visible with sluicectl), the question itself untouched;
#     the submission's next question is then not sent (skipped);
#     `sluicectl dlq replay` sends it again (the receiver now answers 200);
#   - a redirect: not followed, dead-lettered as callback_redirect;
#   - notify.mode=submission: one submission.complete with every question;
#   - a URL the policy no longer allows when it is delivered is refused at
#     delivery (callback_refused), not sent.
source "$(dirname "$0")/lib.sh"
PY=${TEST_PYTHON:-python3}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

RECV=127.0.0.1:$((BASE + 63))
SECRET="nsec-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
export SLUICE_CALLBACK_ALLOWED_HOSTS="127.0.0.1,169.254.169.254,10.1.2.3,hooks.invalid"
export SLUICE_CALLBACK_ALLOWED_ADDRESSES=127.0.0.1
export SLUICE_CALLBACK_ALLOW_HTTP=true
export SLUICE_NOTIFY_SECRET=$SECRET SLUICE_NOTIFY_TIMEOUT_MS=1500
export SLUICE_RETRY_TIERS=1s,2s,4s
retry_topics 1s 2s 4s

# submissions are created with a key of this test's own, whose webhook
# signing secret signs their deliveries
"$SLUICECTL" apikey add --user test_notify --label test_notify --json >"$work/key.json" 2>/dev/null ||
  fail "apikey add failed"
KEY_AUTH=(-H "Authorization: Bearer $(jq -r .key "$work/key.json")")
KEY_SECRET=$(jq -r .webhook_secret "$work/key.json")
"$PY" "$ROOT/tests/integration/notify_receiver.py" "$RECV" "$work/received.jsonl" \
  >"$work/receiver.log" 2>&1 &
recv=$!
at_exit "kill $recv 2>/dev/null || true"
: >"$work/received.jsonl"
stages_up

# create URL [FILES...]: a submission of the answers with callback_url URL;
# prints the HTTP status, presign's reply in $work/create
create() {
  local url=$1 f qs=() n=0
  shift
  for f in "$@"; do
    n=$((n + 1))
    qs+=("{\"content_type\":\"audio/wav\",\"size\":$(stat -c %s "$f"),\"prompt\":\"Question $n?\"}")
  done
  curl -sS -o "$work/create" -w '%{http_code}' "${KEY_AUTH[@]}" -X POST \
    -H 'Content-Type: application/json' \
    -d "{\"callback_url\":$url,\"questions\":[$(IFS=,; echo "${qs[*]}")]}" \
    "$PRESIGN_URL/v1/submissions"
}
# submit PATH FILES...: a submission calling back http://$RECV/PATH/<sid>,
# answered with FILES; sets SUB_REPLY, SID, TOKEN
submit() {
  local path=$1
  shift
  # the sid is not known before the create: the path carries a nonce instead
  local nonce="n$RANDOM$RANDOM"
  local st
  st=$(create "\"http://$RECV/$path/$nonce\"" "$@")
  [[ $st == 201 ]] || { fail "create with callback $path: $st $(cat "$work/create")"; return 1; }
  SUB_REPLY=$(cat "$work/create")
  SID=$(jq -r .submission_id <<<"$SUB_REPLY")
  TOKEN=$(jq -r .results_token <<<"$SUB_REPLY")
  NONCE=$nonce
  local i=0
  for f in "$@"; do
    ((i < ${UPLOAD:-$#})) && put_answer "$i" "$f"
    i=$((i + 1))
  done
}
# received PATH_PREFIX: the receiver's log lines for that path (JSON lines)
received() { jq -c --arg p "$1" 'select(.path | startswith($p))' "$work/received.jsonl"; }
count() { received "$1" | grep -c . || true; }
# verified LINE: its X-Sluice-Signature has v2 = HMAC-SHA256(the webhook
# secret of the API key that created the submission, "<t>.<url>.<body>"),
# url the callback URL the receiver was given
verified() {
  local sig body t v2 want url
  sig=$(jq -r .signature <<<"$1")
  body=$(jq -r .body <<<"$1")
  url="http://$RECV$(jq -r .path <<<"$1")"
  t=$(tr ',' '\n' <<<"$sig" | sed -n 's/^t=//p')
  v2=$(tr ',' '\n' <<<"$sig" | sed -n 's/^v2=//p' | head -1)
  [[ -n $t && -n $v2 ]] || return 1
  want=$(printf '%s.%s.%s' "$t" "$url" "$body" | openssl dgst -sha256 -hmac "$KEY_SECRET" | sed 's/^.*= //')
  [[ $want == "$v2" ]] && (($(date +%s) - t < 300))
}
all_verified() {
  local l ok=0
  while IFS= read -r l; do verified "$l" || ok=1; done < <(received "$1")
  return $ok
}
dlq_notify() { "$SLUICECTL" dlq list --json --stage notify 2>/dev/null || true; }
# got PATH_PREFIX CONDITION / dead CONDITION: some received line / notify
# dead letter meets it (evaluated anew on every call, for wait_for)
got() { jqany "$2" "$(received "$1")"; }
dead() { jqany "$1" "$(dlq_notify)"; }
not_verified() { ! verified "$1"; }
# stop_notify: SIGTERM (a clean stop) and wait; start_notify: tools/stages up
# starts it again with the environment of the moment
stop_notify() {
  local pid
  pid=$(cat "$STAGES_DIR/notify.pid")
  kill -TERM "$pid"
  wait_for 30 bash -c "! kill -0 $pid 2>/dev/null" || fail "notify did not stop"
}
start_notify() { "$ROOT/tools/stages" up >/dev/null; }

espeak-ng -s 140 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends."
sox -n -r 16000 -c 1 -b 16 "$work/silence.wav" trim 0 1.5

# --- refused at create ---------------------------------------------------
refused() { # refused JSON-VALUE REGEX: 422 callback_url_refused, reason matching
  local st
  st=$(create "$1" "$work/silence.wav")
  [[ $st == 422 ]] && jq -e '.error.code == "callback_url_refused"' "$work/create" >/dev/null &&
    jq -r .error.message "$work/create" | grep -qE -- "$2"
}
check "a host not allowed is refused with the reason" \
  refused '"https://evil.example.com/hook"' 'not among the allowed hosts'
check "the metadata address is refused although its host is allowed" \
  refused '"http://169.254.169.254/latest/meta-data"' 'cloud metadata'
check "a private address is refused although its host is allowed" \
  refused '"http://10.1.2.3/hook"' 'private'
check "a scheme other than http(s) is refused" refused "\"ftp://127.0.0.1/x\"" 'http'
check "user info is refused" refused "\"http://u:p@$RECV/ok/x\"" 'user info'
check "a name that does not resolve is refused" refused '"http://hooks.invalid/x"' 'does not resolve'
check "a callback_url that is not a string is refused" refused '42' 'string'
check "nothing was sent for refused creates" test "$(count /)" -eq 0

# --- a receiver that answers 200 -----------------------------------------
submit ok "$work/speech.wav" "$work/silence.wav"
OK_SID=$SID OK_NONCE=$NONCE
wait_count 90 2 count "/ok/$OK_NONCE" || fail "two deliveries expected to /ok"
check "each final question delivered once" test "$(count "/ok/$OK_NONCE")" -eq 2
check "every delivery verifies with openssl (t=,v2= over \"<t>.<url>.<body>\", the key's secret)" all_verified "/ok/$OK_NONCE"
ok_lines=$(received "/ok/$OK_NONCE")
check "delivery ids are <sid>/<no>/<state>" jqany \
  ".delivery == \"$OK_SID/1/done\" and .event == \"question.final\"" "$ok_lines"
check "the failed question is delivered with its reason" jqany \
  "(.body | fromjson | .question.state == \"failed\" and (.question.error.class | length > 0)) and .delivery == \"$OK_SID/2/failed\"" "$ok_lines"
check "the body is the question's view" jqany \
  "(.body | fromjson | .submission_id == \"$OK_SID\" and .question.no == 1 and (.question.transcript | test(\"weekend\"; \"i\")))" "$ok_lines"
check "content type json" jqany '.content_type == "application/json"' "$ok_lines"
# a signature made with another secret does not verify (the check can fail)
forged=$(jq -c '.body |= sub("\"no\":"; "\"no\": ")' <<<"$(head -1 <<<"$ok_lines")")
check "the same check refuses a changed body" not_verified "$forged"

# --- a receiver that fails, then works -----------------------------------
submit flaky/2 "$work/silence.wav"
FL_SID=$SID
wait_for 60 got "/flaky/2/$NONCE" '.status == 200' ||
  fail "flaky receiver never got a delivery through"
fl=$(received "/flaky/2/$NONCE")
check "retried until delivered (503, 503, 200)" test "$(jq -s -c 'map(.status)' <<<"$fl")" = '[503,503,200]'
check "the delivery id is stable across retries" test "$(jq -r .delivery <<<"$fl" | sort -u)" = "$FL_SID/1/failed"
check "every attempt verifies" all_verified "/flaky/2/$NONCE"

# --- a receiver that times out, then works -------------------------------
submit slow/3000 "$work/silence.wav"
SL_SID=$SID
wait_count 60 2 count "/slow/3000/$NONCE" || fail "slow receiver: no second attempt"
sl=$(received "/slow/3000/$NONCE")
check "a timed-out delivery is retried" test "$(count "/slow/3000/$NONCE")" -eq 2
check "the same id after a timeout" test "$(jq -r .delivery <<<"$sl" | sort -u)" = "$SL_SID/1/failed"

# --- 410 Gone: stopped, dead-lettered, replayable -------------------------
UPLOAD=1 submit gone "$work/silence.wav" "$work/silence.wav" # the second answer comes later
GO_SID=$SID GO_NONCE=$NONCE
wait_for 60 dead ".subject == \"$GO_SID/1\" and .error_class == \"callback_gone\"" ||
  fail "no callback_gone dead letter for $GO_SID/1"
sleep 4 # longer than the first retry tiers: nothing more may arrive
check "410 is not retried" test "$(count "/gone/$GO_NONCE")" -eq 1
check "the dead letter says why" jqany \
  ".subject == \"$GO_SID/1\" and (.error_message | test(\"410\"))" "$(dlq_notify)"
check "the question itself stays failed by preflight, not by notify" jqe \
  '.questions[0].state == "failed" and .questions[0].error.class != "callback_gone"' "$(view_of "$GO_SID" "$TOKEN")"
skipped0=$(metric sluice_notify_deliveries_total 'outcome="skipped"' "$(admin notify)")
put_answer 1 "$work/silence.wav"
wait_for 60 at_least $((skipped0 + 1)) metric sluice_notify_deliveries_total 'outcome="skipped"' "$(admin notify)" ||
  fail "the question after a 410 was not skipped"
check "after a 410 the submission's next question is not sent" test "$(count "/gone/$GO_NONCE")" -eq 1
"$SLUICECTL" dlq replay --stage notify --submission "$GO_SID" --actor test-notify >/dev/null 2>&1 ||
  fail "dlq replay failed"
wait_for 30 at_least 2 count "/gone/$GO_NONCE" || fail "the replay did not re-send"
check "the replay is delivered with the same id" test \
  "$(received "/gone/$GO_NONCE" | jq -s -r 'map(.delivery) | unique | join(" ")')" = "$GO_SID/1/failed"

# --- a redirect is not followed ------------------------------------------
submit redirect "$work/silence.wav"
RD_SID=$SID
wait_for 60 dead ".subject == \"$RD_SID/1\" and .error_class == \"callback_redirect\"" ||
  fail "no callback_redirect dead letter"
check "the redirect target was never called" test "$(count /ok/redirected)" -eq 0

# --- delivered metric -----------------------------------------------------
check "deliveries are counted" at_least 5 metric sluice_notify_deliveries_total 'outcome="delivered"' "$(admin notify)"

# --- notify.mode=submission, and the policy checked again at delivery -------
stop_notify
export SLUICE_NOTIFY_MODE=submission
start_notify
submit ok "$work/silence.wav" "$work/silence.wav"
WH_SID=$SID
wait_count 60 1 count "/ok/$NONCE" || fail "no submission.complete delivery"
wh=$(received "/ok/$NONCE")
check "one id for the whole submission" test "$(jq -r .delivery <<<"$wh" | sort -u | wc -l)" -eq 1
check "submission.complete carries every question" jqany \
  ".event == \"submission.complete\" and (.body | fromjson | .summary.total == 2 and (.questions | length) == 2 and .submission_id == \"$WH_SID\")" "$wh"
check "it verifies" all_verified "/ok/$NONCE"

# the same URL, no longer allowed when notify delivers it (presign still
# allows it; notify restarts without loopback among its allowed addresses)
stop_notify
submit ok "$work/silence.wav"
PO_SID=$SID PO_NONCE=$NONCE
SLUICE_CALLBACK_ALLOWED_ADDRESSES= start_notify
wait_for 60 dead ".subject == \"$PO_SID/1\" and .error_class == \"callback_refused\" and (.error_message | test(\"loopback\"))" ||
  fail "a delivery to an address no longer allowed was not refused"
check "nothing was sent to it" test "$(count "/ok/$PO_NONCE")" -eq 0

finish
