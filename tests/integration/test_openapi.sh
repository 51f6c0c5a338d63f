#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/openapi.yaml describes what the APIs really answer: real responses of
# presign and results (created, replayed, polled while awaiting upload and
# when done, and the error bodies) validate against its schemas.
source "$(dirname "$0")/lib.sh"
PY=${TEST_PYTHON:-python3}
SPEC=$ROOT/docs/openapi.yaml
"$PY" -c 'import jsonschema, yaml' 2>/dev/null || { fail "python with jsonschema and PyYAML needed ($PY)"; finish; }
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
post() { curl "${KEY_AUTH[@]}" -sS -o "$work/$1" -w '%{http_code}' -X POST -H 'Content-Type: application/json' "${@:3}" \
  --data "$2" "$PRESIGN_URL/v1/submissions"; }
valid() { # valid SCHEMA FILE...
  "$PY" "$(dirname "$0")/openapi_check.py" "$SPEC" "$@" >"$work/check.out" 2>&1 || {
    cat "$work/check.out" >&2; return 1; }
}

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
sum=$(sha256sum "$work/a.wav" | cut -d' ' -f1)
size=$(stat -c %s "$work/a.wav")
body="{\"questions\":[{\"no\":1,\"content_type\":\"audio/wav\",\"size\":$size,\"prompt\":\"What do you do on weekends?\",\"sha256\":\"$sum\"},{\"no\":2,\"content_type\":\"audio/ogg\",\"size\":10},{\"no\":3,\"content_type\":\"audio/ogg\",\"size\":10}]}"
check "create -> 201" test "$(post create.json "$body" -H "Idempotency-Key: oa-$$-$RANDOM")" = 201
check "the create reply matches CreateReply" valid CreateReply "$work/create.json"
sid=$(jq -r .submission_id "$work/create.json"); token=$(jq -r .results_token "$work/create.json")
wait_for 20 sh -c "curl -fsS -o '$work/awaiting.json' -H 'Authorization: Bearer $token' '$RESULTS_URL/v1/submissions/$sid'" ||
  fail "the view never appeared"
check "a view awaiting upload matches SubmissionView" valid SubmissionView "$work/awaiting.json"

# the multipart (Companion-style) endpoints: question 2 in one 10-byte part
MP=$PRESIGN_URL/s3/multipart
mp() { curl -sS -o "$work/$1" -w '%{http_code}' -H "Authorization: Bearer $token" "${@:2}"; }
check "multipart create -> 200" test "$(mp mp-create.json -X POST --data "{\"metadata\":{\"submission_id\":\"$sid\",\"question_no\":2}}" "$MP")" = 200
check "  matches MultipartCreateReply" valid MultipartCreateReply "$work/mp-create.json"
up=$(jq -r .uploadId "$work/mp-create.json" | jq -rR @uri); k=$(jq -r .key "$work/mp-create.json" | jq -rR @uri)
check "batch sign -> 200" test "$(mp mp-batch.json "$MP/$up/batch?key=$k&partNumbers=1,2")" = 200
check "  matches BatchSignReply" valid BatchSignReply "$work/mp-batch.json"
check "sign one part -> 200" test "$(mp mp-sign.json "$MP/$up/1?key=$k")" = 200
check "  matches SignPartReply" valid SignPartReply "$work/mp-sign.json"
head -c 10 /dev/urandom >"$work/part1"
curl -sS -o /dev/null -T "$work/part1" "$(jq -r .url "$work/mp-sign.json")"
check "list parts -> 200" test "$(mp mp-list.json "$MP/$up?key=$k")" = 200
check "  matches PartList (one part)" valid PartList "$work/mp-list.json"
check "  and lists the part" jqe 'length == 1 and .[0].Size == 10' "$(cat "$work/mp-list.json")"
mp mp-e400-1.json "$MP/$up/0?key=$k" >/dev/null
mp mp-e400-2.json "$MP/$up/1" >/dev/null
mp mp-e404-1.json "$MP/nope/1?key=$k" >/dev/null
curl -sS -o "$work/mp-e401.json" "$MP/$up/1?key=$k"
mp mp-e400-3.json -X POST --data '{"parts":[{"PartNumber":1,"ETag":"x"}]}' "$MP/$up/complete?key=$k" >/dev/null # storage refuses the ETag
check "complete -> 200" test "$(mp mp-complete.json -X POST --data "$(jq -c '{parts: map({PartNumber, ETag})}' "$work/mp-list.json")" "$MP/$up/complete?key=$k")" = 200
check "  matches CompleteReply" valid CompleteReply "$work/mp-complete.json"
check "multipart create for question 3 -> 200" test "$(mp mp-create3.json -X POST --data "{\"metadata\":{\"submission_id\":\"$sid\",\"question_no\":3}}" "$MP")" = 200
up3=$(jq -r .uploadId "$work/mp-create3.json" | jq -rR @uri); k3=$(jq -r .key "$work/mp-create3.json" | jq -rR @uri)
check "abort -> 200" test "$(mp mp-abort.json -X DELETE "$MP/$up3?key=$k3")" = 200
check "  matches AbortReply" valid AbortReply "$work/mp-abort.json"
check "multipart error bodies match Error (400, 401, 404)" valid Error "$work"/mp-e*.json

q=$(jq -c '.questions[0]' "$work/create.json")
hdrs=()
while IFS= read -r h; do hdrs+=(-H "$h"); done < <(jq -r '.headers | to_entries[] | "\(.key): \(.value)"' <<<"$q")
check "upload -> 200" test "$(curl -sS -o /dev/null -w '%{http_code}' -X PUT "${hdrs[@]}" \
  --data-binary "@$work/a.wav" "$(jq -r .url <<<"$q")")" = 200
wait_for 60 sh -c "curl -fsS -H 'Authorization: Bearer $token' '$RESULTS_URL/v1/submissions/$sid' |
  jq -e '.questions[0].state == \"done\"' >/dev/null" || fail "question 1 not done"
curl -fsS -o "$work/done.json" -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid"
check "a view with a graded question matches SubmissionView" valid SubmissionView "$work/done.json"

i=0
for b in '{"questions":[' '{"questions":[]}' '{"x":1}' \
  '{"questions":[{"no":1,"content_type":"video/mp4","size":1}]}'; do
  i=$((i + 1)); post "e400-$i.json" "$b" >/dev/null
done
curl -sS -o "$work/e401.json" "$RESULTS_URL/v1/submissions/$sid"
curl -sS -o "$work/e404.json" -H 'Authorization: Bearer nope' "$RESULTS_URL/v1/submissions/$sid"
# the event stream's refusals are the same JSON errors
curl -sS -o "$work/e401-events.json" "$RESULTS_URL/v1/submissions/$sid/events"
curl -sS -o "$work/e404-events.json" -H 'Authorization: Bearer nope' "$RESULTS_URL/v1/submissions/$sid/events"
check "the event stream's error bodies match Error (401, 404)" valid Error "$work/e401-events.json" \
  "$work/e404-events.json"
post e422.json '{"questions":[{"no":1,"content_type":"audio/wav","size":5}]}' -H "Idempotency-Key: oa-fixed-$sid" >/dev/null
post e422.json '{"questions":[{"no":1,"content_type":"audio/wav","size":6}]}' -H "Idempotency-Key: oa-fixed-$sid" >/dev/null
check "every error body matches Error (400, 401, 404, 422)" valid Error "$work"/e400-*.json \
  "$work/e401.json" "$work/e404.json" "$work/e422.json"
check "the 422 is the idempotency refusal" jqe '.error.code == "idempotency_key_reused"' "$(cat "$work/e422.json")"
# callbacks are off here (callback.allowed_hosts empty): a callback_url is refused
check "a refused callback_url -> 422" test "$(post e422cb.json '{"callback_url":"https://hooks.example.com/x","questions":[{"no":1,"content_type":"audio/wav","size":5}]}')" = 422
check "... whose body matches Error" valid Error "$work/e422cb.json"
check "... and says why" jqe '.error.code == "callback_url_refused" and (.error.message | test("not enabled"))' "$(cat "$work/e422cb.json")"
finish
