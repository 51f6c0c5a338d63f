#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bad input gets a clear error and changes nothing:
#  - presign answers 4xx with {"error":{"code","message"}} and writes nothing;
#  - results answers 401/404 without telling whether a submission exists;
#  - ingest dead-letters unparseable events, objects outside the submission
#    layout and uploads for unknown submissions, with the reason, and lives on.
source "$(dirname "$0")/lib.sh"
# an unknown submission is looked up again in place for 1 s, then retried
# through ingest.retry.5s, and dead-lettered once 3 s have passed
export SLUICE_INGEST_SUBMISSION_WAIT_S=3 SLUICE_INGEST_SUBMISSION_RECHECK_S=1
export SLUICE_PRESIGN_CORS_ORIGINS="https://app.example, https://other.example"
export SLUICE_RESULTS_CORS_ORIGINS="https://app.example"
# derived objects in a bucket of their own, on this gateway (which notifies
# for every bucket): ingest must drop their events, not dead-letter them
export SLUICE_S3_DERIVED_BUCKET=sluice-derived-test
stages_up
ADMIN_PRESIGN=$(admin presign)
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

# post BODY [CONTENT-TYPE] -> "<status> <error.code>"; checks the error body shape
post() {
  local body=$1 ct=${2:-application/json} code resp
  resp=$(curl "${KEY_AUTH[@]}" -sS -o "$work/resp" -w '%{http_code}' -X POST -H "Content-Type: $ct" \
    --data-binary "$body" "$PRESIGN_URL/v1/submissions")
  if ! jq -e '.error.code | type == "string"' "$work/resp" >/dev/null 2>&1 ||
    ! jq -e '.error.message | length > 0' "$work/resp" >/dev/null 2>&1; then
    echo "$resp no-json-error-body"
    return
  fi
  echo "$resp $(jq -r .error.code "$work/resp")"
}
q() { printf '{"no":%s,"content_type":"%s","size":%s}' "$1" "$2" "$3"; }
many=$(for i in $(seq 1 31); do q "$i" audio/wav 10; echo; done | paste -sd, -)

expect() { # expect "STATUS CODE" DESCRIPTION BODY [CT]
  local want=$1 what=$2; shift 2
  local got
  got=$(post "$@")
  check "$what -> $want (got $got)" test "$got" = "$want"
}
expect "400 invalid_json" "malformed JSON" '{"questions":[{"no":1,'
expect "400 invalid_body" "a JSON array body" '[1,2]'
expect "400 unknown_field" "unknown top-level field" "{\"questions\":[$(q 1 audio/wav 10)],\"x\":1}"
expect "400 invalid_field" "questions not an array" '{"questions":{}}'
expect "400 question_count" "zero questions" '{"questions":[]}'
expect "400 question_count" "31 questions (limit 30)" "{\"questions\":[$many]}"
expect "400 invalid_size" "size 0" "{\"questions\":[$(q 1 audio/wav 0)]}"
expect "400 invalid_size" "size above the limit" "{\"questions\":[$(q 1 audio/wav 104857601)]}"
expect "400 invalid_size" "size as a string" '{"questions":[{"no":1,"content_type":"audio/wav","size":"10"}]}'
expect "400 unsupported_content_type" "disallowed content type" "{\"questions\":[$(q 1 video/mp4 10)]}"
expect "400 invalid_field" "question number as a string" '{"questions":[{"no":"1","content_type":"audio/wav","size":10}]}'
expect "400 invalid_field" "repeated question number" "{\"questions\":[$(q 1 audio/wav 10),$(q 1 audio/wav 10)]}"
expect "400 unknown_field" "unknown question field" '{"questions":[{"no":1,"content_type":"audio/wav","size":10,"colour":"red"}]}'
expect "415 unsupported_media_type" "text/plain body" "{\"questions\":[$(q 1 audio/wav 10)]}" text/plain
head -c 1100000 /dev/zero | tr '\0' 'a' >"$work/big"
expect "413 body_too_large" "body over 1 MiB" "@$work/big"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$PRESIGN_URL/v1/submissions")
check "GET on the create endpoint -> 405 ($code)" test "$code" = 405
check "nothing was accepted" test "$(metric sluice_submissions_total 'outcome="accepted"' "$ADMIN_PRESIGN")" = 0
check "every bad request was counted as rejected" test "$(metric sluice_submissions_total 'outcome="rejected"' "$ADMIN_PRESIGN")" -ge 14

# CORS: preflights answered for allowed origins only; responses expose ETag
pre() { curl -sS -D - -o /dev/null -X OPTIONS -H "Origin: $2" -H 'Access-Control-Request-Method: POST' \
  -H 'Access-Control-Request-Headers: content-type,idempotency-key' "$1" | tr -d '\r'; }
pre "$PRESIGN_URL/v1/submissions" https://app.example >"$work/pre"
check "CORS preflight from an allowed origin -> 204" grep -q '^HTTP/1.1 204' "$work/pre"
check "  ... allows that origin" grep -q '^Access-Control-Allow-Origin: https://app.example' "$work/pre"
check "  ... and the Idempotency-Key header" grep -qi '^Access-Control-Allow-Headers:.*Idempotency-Key' "$work/pre"
h=$(pre "$PRESIGN_URL/v1/submissions" https://evil.example)
check "CORS preflight from another origin gets no allow header" sh -c '! grep -qi "^Access-Control-Allow-Origin"' <<<"$h"
curl -sS -D - -o /dev/null -H 'Origin: https://app.example' \
  "$RESULTS_URL/v1/submissions/00000000-0000-7000-8000-000000000000" | tr -d '\r' >"$work/cors"
check "results responses to an allowed origin carry Allow-Origin" \
  grep -q '^Access-Control-Allow-Origin: https://app.example' "$work/cors"
check "  ... and expose ETag" grep -q '^Access-Control-Expose-Headers: ETag' "$work/cors"

# Idempotency-Key: a retried create returns the same submission
ikey="retry-test-$(date +%s%N)"
ibody="{\"questions\":[$(q 1 audio/wav 100)]}"
icreate() { curl "${KEY_AUTH[@]}" -sS -D "$work/ih" -o "$work/ib" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Idempotency-Key: $1" --data "$2" "$PRESIGN_URL/v1/submissions"; }
c1=$(icreate "$ikey" "$ibody"); s1=$(jq -r .submission_id "$work/ib")
c2=$(icreate "$ikey" "$ibody"); s2=$(jq -r .submission_id "$work/ib")
check "Idempotency-Key: first create 201 ($c1), retry 201 ($c2)" test "$c1,$c2" = "201,201"
check "Idempotency-Key: the retry returns the same submission" test "$s1" = "$s2" -a -n "$s1"
check "Idempotency-Key: the retry says it was replayed" grep -qi '^Idempotent-Replayed: true' "$work/ih"
c3=$(icreate "$ikey" "{\"questions\":[$(q 1 audio/wav 200)]}")
check "Idempotency-Key reused with another body -> 422 ($c3)" test "$c3" = 422
check "  ... with code idempotency_key_reused" jqe '.error.code == "idempotency_key_reused"' "$(cat "$work/ib")"
c4=$(icreate "$(head -c 300 /dev/zero | tr '\0' k)" "$ibody")
check "an over-long Idempotency-Key -> 400 ($c4)" test "$c4" = 400
c5=$(icreate "other-$ikey" "$ibody"); s5=$(jq -r .submission_id "$work/ib")
check "another key creates another submission" test "$c5" = 201 -a "$s5" != "$s1"
check "one replay counted" test "$(metric sluice_submissions_total 'outcome="replayed"' "$ADMIN_PRESIGN")" = 1

# results: missing token 401; wrong token and unknown id give the same 404
reply=$(curl "${KEY_AUTH[@]}" -sS -X POST -H 'Content-Type: application/json' \
  --data "{\"questions\":[$(q 1 audio/wav 100)]}" "$PRESIGN_URL/v1/submissions")
sid=$(jq -r .submission_id <<<"$reply")
token=$(jq -r .results_token <<<"$reply")
wait_for 20 curl -fsS -o /dev/null -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid" ||
  fail "the valid submission never became visible"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$RESULTS_URL/v1/submissions/$sid")
check "results without a token -> 401 ($code)" test "$code" = 401
curl -sS -o "$work/wrong" -w '%{http_code}' -H "Authorization: Bearer nope" "$RESULTS_URL/v1/submissions/$sid" >"$work/wrong.code"
curl -sS -o "$work/unknown" -w '%{http_code}' -H "Authorization: Bearer nope" \
  "$RESULTS_URL/v1/submissions/00000000-0000-7000-8000-000000000000" >"$work/unknown.code"
check "wrong token -> 404" test "$(cat "$work/wrong.code")" = 404
check "unknown submission -> 404" test "$(cat "$work/unknown.code")" = 404
check "wrong token and unknown id are indistinguishable" cmp -s "$work/wrong" "$work/unknown"
curl -sS -D "$work/hdrs" -o "$work/view" -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid"
check "the submission shows awaiting_upload" jqe '.questions[0].state == "awaiting_upload"' "$(cat "$work/view")"
check "a fresh submission is polled every 2 s (Retry-After)" grep -qi '^Retry-After: 2' "$work/hdrs"
check "the body carries the polling policy" jqe '.poll.retry_after_s == 2 and .poll.stop == false' "$(cat "$work/view")"
check "replies are not cached" grep -qi '^Cache-Control: no-store' "$work/hdrs"
etag=$(awk 'tolower($1)=="etag:"{print $2}' "$work/hdrs" | tr -d '\r')
code=$(curl -sS -o "$work/304" -w '%{http_code}' -H "Authorization: Bearer $token" -H "If-None-Match: $etag" \
  "$RESULTS_URL/v1/submissions/$sid")
check "an unchanged view answers 304 to If-None-Match ($code)" test "$code" = 304
check "the 304 has no body" test ! -s "$work/304"

# ingest: three kinds of bad storage events
unknown_sid=$(cat /proc/sys/kernel/random/uuid) # a submission nobody created
before=$(metric sluice_messages_total 'stage="ingest",outcome="dead_lettered"' "$ADMIN_INGEST")
printf 'this is not json' | kcat -P -b "$SLUICE_KAFKA_BROKERS" -t storage-events
s3put() { curl -sS -o /dev/null -w '%{http_code}' -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
  --data-binary "hello" "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$1"; }
check "stray object uploaded" test "$(s3put junk/hello.wav)" = 200
check "object for an unknown submission uploaded" \
  test "$(s3put submissions/$unknown_sid/q01.wav)" = 200
# and two events that are not bad: a derived object (what preflight stores)
# in the answers' bucket and in s3.derived_bucket
mb=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
  "$SLUICE_S3_ENDPOINT/$SLUICE_S3_DERIVED_BUCKET")
check "derived objects' bucket there ($mb)" test "$mb" = 200 -o "$mb" = 409
check "a derived object stored in the answers' bucket" \
  test "$(s3put derived/submissions/$unknown_sid/q01.wav.16k.flac)" = 200
check "... and in the derived objects' bucket" \
  test "$(SLUICE_S3_BUCKET=$SLUICE_S3_DERIVED_BUCKET s3put derived/submissions/$unknown_sid/q01.wav.16k.flac)" = 200
dl() { echo $(($(metric sluice_messages_total 'stage="ingest",outcome="dead_lettered"' "$ADMIN_INGEST") - before)); }
wait_count 30 3 dl || true
wait_for 30 stage_lag0 ingest || log "ingest lags: $(stage_lagging ingest)"
check "ingest dead-lettered the 3 bad events, not the derived objects' ($(dl))" test "$(dl)" = 3
"$SLUICECTL" dlq list --json --stage ingest >"$work/dlq.json" 2>"$work/dlq.err" || fail "sluicectl dlq list failed: $(cat "$work/dlq.err")"
check "no dead letter for either derived object" \
  jq -s -e --arg k "derived/submissions/$unknown_sid/" '[.[] | select(tostring | contains($k))] | length == 0' \
  "$work/dlq.json"
for cls in bad_event unknown_object unknown_submission; do
  check "dead letter with class $cls and a reason" \
    jqany ".error_class == \"$cls\" and (.error_message | length > 10) and .replay_topic == \"storage-events\"" \
    "$(cat "$work/dlq.json")"
done
reruns=$(metric sluice_reruns_total 'stage="ingest"' "$ADMIN_INGEST" | cut -d. -f1)
check "unknown submission looked up again in place first ($reruns)" test "${reruns:-0}" -ge 5
check "unknown submission retried (it may be late) before it was dead-lettered" \
  jqany '.error_class == "unknown_submission" and .attempts >= 2 and (.original.topic | startswith("ingest.retry."))' "$(cat "$work/dlq.json")"
check "the dead letter names the question it is about" \
  jqany ".error_class == \"unknown_submission\" and .subject == \"$unknown_sid/1\"" "$(cat "$work/dlq.json")"
check "sluicectl finds it by submission" \
  test "$("$SLUICECTL" dlq list --json --submission $unknown_sid 2>/dev/null | grep -c unknown_submission)" = 1
check "ingest is still healthy" curl -fsS -o /dev/null "$ADMIN_INGEST/healthz"
code=$("$SLUICECTL" dlq frobnicate 2>/dev/null; echo $?)
check "sluicectl rejects an unknown command with exit 2" test "$code" = 2
finish
