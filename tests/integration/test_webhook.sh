#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The storage-event webhook (POST /v1/storage-events on presign) and ingest's
# checks of every event against what was signed, on the real stack.
#
# Here ingest reads its events from a topic only the webhook writes to
# (a pipeline whose storage-events topic is webhook.storage-events), so
# Versity Gateway's own events (still on storage-events) never reach it:
# an answer is processed only if its event came through the webhook.
#   - a real flow: presigned PUT, then the signed event -> the question ends
#     `done`; the same delivery again -> 409 and nothing produced twice;
#   - forged signature / wrong bearer / no auth -> 401, nothing produced;
#     stale timestamp -> 401; oversized -> 413; not an event -> 400;
#   - accepted but dead-lettered by ingest: an object never uploaded
#     (object_missing), an object stored with another type (type_mismatch)
#     or size (size_mismatch), an event whose size is not the declared one
#     (size_mismatch), another bucket (wrong_bucket);
#   - a Cloudflare R2 event notification (bearer auth) is normalised and
#     processed; with webhook.secret unset the route is 404;
#   - ingest.verify_object=when_needed still HEADs events without a size.
source "$(dirname "$0")/lib.sh"
PY=${TEST_PYTHON:-python3}
"$PY" -c 'import jsonschema, yaml' 2>/dev/null || { fail "python with jsonschema and PyYAML needed ($PY)"; finish; }
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
TOPIC=webhook.storage-events
"$SLUICECTL" topics ensure --partitions 4 "$TOPIC" >/dev/null || fail "could not create $TOPIC"
# the stages run a pipeline whose storage-events topic is this test's own
sed "s/\"storage-events\"/\"$TOPIC\"/g" "$ROOT/pipeline.json" >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json
SECRET="whsec-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
OLD_SECRET="whsec-old-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
export SLUICE_WEBHOOK_SECRET=$SECRET SLUICE_WEBHOOK_SECRET_PREVIOUS=$OLD_SECRET
stages_up
HOOK=$PRESIGN_URL/v1/storage-events
ADMIN_PRESIGN=$(admin presign)

# sign SECRET T BODY -> hex HMAC-SHA256 over "T.BODY" (what a sender computes)
sign() { printf '%s.%s' "$2" "$3" | openssl dgst -sha256 -hmac "$1" | sed 's/^.*= //'; }
# post BODY [curl args] -> status; reply in $work/out (the body goes through
# a file: a 300 KB argument would exceed the kernel's per-argument limit)
post() {
  printf '%s' "$1" >"$work/req"
  curl -sS -o "$work/out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -H 'Expect:' --data-binary "@$work/req" "${@:2}" "$HOOK"
}
# post_signed BODY [SECRET [T]] -> status
post_signed() {
  local t=${3:-$(date +%s)} s=${2:-$SECRET}
  post "$1" -H "X-Sluice-Signature: t=$t,v1=$(sign "$s" "$t" "$1")"
}
event() { # event BUCKET KEY SIZE -> AWS S3 event JSON (compact)
  jq -cn --arg b "$1" --arg k "$2" --argjson s "$3" --arg n "$RANDOM$RANDOM" \
    '{Records:[{eventVersion:"2.1",eventSource:"aws:s3",eventName:"s3:ObjectCreated:Put",
      s3:{bucket:{name:$b},object:{key:$k,size:$s,eTag:"e",sequencer:$n}}}]}'
}
# messages on the webhook topic that mention $1
produced() { kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "$TOPIC" -o beginning -e -q -f '%s\n' 2>/dev/null |
  grep -cF -- "$1" || true; }
submission() { # submission TYPE SIZE -> reply JSON of a one-question submission
  curl -sS -X POST -H 'Content-Type: application/json' "${KEY_AUTH[@]}" \
    --data "{\"questions\":[{\"no\":1,\"content_type\":\"$1\",\"size\":$2,\"prompt\":\"What do you do on weekends?\"}]}" \
    "$PRESIGN_URL/v1/submissions"
}
s3put() { # s3put KEY TYPE FILE: a raw PUT with the storage's own credentials
  curl -sS -o /dev/null -w '%{http_code}' -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    -H "Content-Type: $2" --data-binary "@$3" "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$1"
}
state() { curl -fsS -H "Authorization: Bearer $2" "$RESULTS_URL/v1/submissions/$1" | jq -r '.questions[0].state'; }
dlq() { "$SLUICECTL" dlq list --json --stage ingest 2>/dev/null || true; }
# dead_lettered SID CLASS: ingest dead-lettered question SID/1 with CLASS
dead_lettered() { dlq | jq -s -e --arg s "$1/1" --arg c "$2" \
  'any(.[]; .subject == $s and .error_class == $c and (.error_message | length > 10))' >/dev/null; }
# reason_has SID REGEX: its dead letter's reason matches
reason_has() { dlq | jq -r --arg s "$1/1" 'select(.subject == $s) | .error_message' | grep -qE -- "$2"; }

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
SIZE=$(stat -c %s "$work/a.wav")

# --- a real flow through the webhook ---------------------------------------
reply=$(submission audio/wav "$SIZE")
sid=$(jq -r .submission_id <<<"$reply"); token=$(jq -r .results_token <<<"$reply")
key=$(jq -r '.questions[0].object_key' <<<"$reply"); url=$(jq -r '.questions[0].url' <<<"$reply")
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: audio/wav' --data-binary "@$work/a.wav" "$url")
check "presigned upload stored ($code)" test "$code" = 200
sleep 3
check "Versity's own event does not reach ingest here (nothing processed after 3 s)" \
  test "$(metric sluice_messages_total 'stage="ingest",outcome="done"' "$ADMIN_INGEST")" = 0
body=$(event "$SLUICE_S3_BUCKET" "$key" "$SIZE")
t=$(date +%s)
sig="t=$t,v1=$(sign "$SECRET" "$t" "$body")"
code=$(post "$body" -H "X-Sluice-Signature: $sig")
check "signed event -> 202 ($code)" test "$code" = 202
check "  reply counts 1 record" jqe '.accepted == true and .records == 1' "$(cat "$work/out")"
# docs/openapi.yaml describes the reply and the event sent
valid() { "$PY" "$(dirname "$0")/openapi_check.py" "$ROOT/docs/openapi.yaml" "$@" >"$work/check.out" 2>&1 ||
  { cat "$work/check.out" >&2; return 1; }; }
cp "$work/out" "$work/accepted.json"; printf '%s' "$body" >"$work/aws-event.json"
check "  the reply matches StorageEventAccepted" valid StorageEventAccepted "$work/accepted.json"
check "  the event matches S3Event" valid S3Event "$work/aws-event.json"
check "  produced once, byte for byte" test "$(produced "$body")" = 1
code=$(post "$body" -H "X-Sluice-Signature: $sig")
check "the same delivery again -> 409 ($code)" test "$code" = 409
check "  code replayed" jqe '.error.code == "replayed"' "$(cat "$work/out")"
code=$(post "$body" -H "X-Sluice-Signature: $sig,v0=junk")
check "the same signature in a rewritten header -> 409 ($code)" test "$code" = 409
check "  still produced once" test "$(produced "$key")" = 1
wait_for 240 sh -c "curl -fsS -H 'Authorization: Bearer $token' '$RESULTS_URL/v1/submissions/$sid' |
  jq -e '.questions[0].state == \"done\" or .questions[0].state == \"failed\"' >/dev/null" || true
check "the question reached done through the webhook ($(state "$sid" "$token"))" test "$(state "$sid" "$token")" = done
check "stt transcribed it once" test "$(metric sluice_messages_total 'stage="stt",outcome="done"' "$(admin stt)")" = 1

# --- refused deliveries: nothing produced ------------------------------------
reply=$(submission audio/wav "$SIZE"); sid2=$(jq -r .submission_id <<<"$reply")
key2=$(jq -r '.questions[0].object_key' <<<"$reply")
body2=$(event "$SLUICE_S3_BUCKET" "$key2" "$SIZE")
t=$(date +%s)
code=$(post "$body2" -H "X-Sluice-Signature: t=$t,v1=$(sign "not-the-secret-at-all" "$t" "$body2")")
check "signature with another secret -> 401 ($code)" test "$code" = 401
check "  JSON error invalid_signature" jqe '.error.code == "invalid_signature"' "$(cat "$work/out")"
check "  matches Error" valid Error "$work/out"
code=$(post "$body2" -H "X-Sluice-Signature: t=$t,v1=$(sign "$SECRET" "$t" "$body")")
check "signature of another body -> 401 ($code)" test "$code" = 401
code=$(post "$body2" -H "X-Sluice-Signature: t=$((t + 1)),v1=$(sign "$SECRET" "$t" "$body2")")
check "signature with another timestamp -> 401 ($code)" test "$code" = 401
code=$(post "$body2" -H "X-Sluice-Signature: garbage")
check "malformed signature header -> 401 ($code)" test "$code" = 401
code=$(post "$body2"); check "no authentication -> 401 ($code)" test "$code" = 401
code=$(post "$body2" -H "Authorization: Bearer not-the-secret")
check "wrong bearer token -> 401 ($code)" test "$code" = 401
code=$(post_signed "$body2" "$SECRET" $((t - 301)))
check "stale timestamp (301 s old) -> 401 ($code)" test "$code" = 401
check "  JSON error stale_timestamp" jqe '.error.code == "stale_timestamp"' "$(cat "$work/out")"
code=$(post_signed "$body2" "$SECRET" $((t + 400)))
check "timestamp in the future -> 401 ($code)" test "$code" = 401
check "no refused delivery was produced" test "$(produced "$key2")" = 0
head -c 300000 /dev/zero | tr '\0' 'x' >"$work/big"
big="{\"Records\":[],\"pad\":\"$(cat "$work/big")\"}"
code=$(post_signed "$big"); check "a 300 KB body -> 413 ($code)" test "$code" = 413
check "  JSON error" jqe '.error.code == "body_too_large"' "$(cat "$work/out")"
code=$(post_signed 'this is not json'); check "not JSON -> 400 ($code)" test "$code" = 400
code=$(post_signed '{"hello":"world"}'); check "JSON but not an S3 event -> 400 ($code)" test "$code" = 400
check "  JSON error invalid_event" jqe '.error.code == "invalid_event"' "$(cat "$work/out")"
code=$(post_signed '{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}')
check "a record without a bucket -> 400 ($code)" test "$code" = 400
code=$(curl -sS -o /dev/null -w '%{http_code}' "$HOOK"); check "GET -> 405 ($code)" test "$code" = 405
check "presign counted the unauthorized deliveries" \
  test "$(metric sluice_webhook_events_total 'outcome="unauthorized"' "$ADMIN_PRESIGN")" -ge 8

# --- rotation: the previous secret still signs ------------------------------
code=$(post_signed "$body2" "$OLD_SECRET"); check "signed with webhook.secret_previous -> 202 ($code)" test "$code" = 202
# (the object was never uploaded: ingest dead-letters it below)

# --- accepted by the webhook, dead-lettered by ingest ------------------------
check_dlq() { # check_dlq SID CLASS WHAT
  wait_for 60 dead_lettered "$1" "$2" || true
  check "$3 -> dead letter $2" dead_lettered "$1" "$2"
}
check_dlq "$sid2" object_missing "an event for an object never uploaded"
check "  the reason names the object" reason_has "$sid2" "$key2.*does not exist"
# another type than declared, stored with the storage's own credentials
reply=$(submission audio/wav "$SIZE"); sid3=$(jq -r .submission_id <<<"$reply")
key3=$(jq -r '.questions[0].object_key' <<<"$reply")
check "object stored as audio/ogg" test "$(s3put "$key3" audio/ogg "$work/a.wav")" = 200
code=$(post_signed "$(event "$SLUICE_S3_BUCKET" "$key3" "$SIZE")"); check "its event -> 202 ($code)" test "$code" = 202
check_dlq "$sid3" type_mismatch "stored type differs from the declared one"
check "  the reason has both types" reason_has "$sid3" 'audio/ogg.*audio/wav'
# another size than declared; the event lies with the declared size
reply=$(submission audio/wav "$SIZE"); sid4=$(jq -r .submission_id <<<"$reply")
key4=$(jq -r '.questions[0].object_key' <<<"$reply")
head -c 1000 "$work/a.wav" >"$work/short.wav"
check "object stored with 1000 bytes" test "$(s3put "$key4" audio/wav "$work/short.wav")" = 200
code=$(post_signed "$(event "$SLUICE_S3_BUCKET" "$key4" "$SIZE")"); check "its event -> 202 ($code)" test "$code" = 202
check_dlq "$sid4" size_mismatch "stored size differs from the declared one"
check "  the reason has both sizes" reason_has "$sid4" "1000 bytes.*declared $SIZE"
# the event's own size differs from the declared one
reply=$(submission audio/wav "$SIZE"); sid5=$(jq -r .submission_id <<<"$reply")
key5=$(jq -r '.questions[0].object_key' <<<"$reply")
code=$(post_signed "$(event "$SLUICE_S3_BUCKET" "$key5" $((SIZE + 1)))"); check "event with size+1 -> 202 ($code)" test "$code" = 202
check_dlq "$sid5" size_mismatch "an event whose size is not the declared one"
check "  the reason has both sizes" reason_has "$sid5" "$((SIZE + 1)) bytes.*declared $SIZE"
# another bucket
reply=$(submission audio/wav "$SIZE"); sid6=$(jq -r .submission_id <<<"$reply")
key6=$(jq -r '.questions[0].object_key' <<<"$reply")
code=$(post_signed "$(event other-bucket "$key6" "$SIZE")"); check "event for another bucket -> 202 ($code)" test "$code" = 202
check_dlq "$sid6" wrong_bucket "an event for another bucket"

# --- Cloudflare R2 event notification, bearer auth ---------------------------
reply=$(submission audio/wav "$SIZE")
sid7=$(jq -r .submission_id <<<"$reply"); token7=$(jq -r .results_token <<<"$reply")
key7=$(jq -r '.questions[0].object_key' <<<"$reply"); url7=$(jq -r '.questions[0].url' <<<"$reply")
curl -sS -o /dev/null -X PUT -H 'Content-Type: audio/wav' --data-binary "@$work/a.wav" "$url7"
r2=$(jq -cn --arg b "$SLUICE_S3_BUCKET" --arg k "$key7" --argjson s "$SIZE" \
  '{account:"3f4b7e3dcab231cbfdaa90a6a28bd548",action:"PutObject",bucket:$b,
    object:{key:$k,size:$s,eTag:"c846ff7a18f28c2e262116d6e8719ef0"},eventTime:"2026-11-30T04:00:00.000Z"}')
printf '%s' "$r2" >"$work/r2-event.json"
check "the R2 event matches R2Event" valid R2Event "$work/r2-event.json"
code=$(post "$r2" -H "Authorization: Bearer $SECRET"); check "R2 event with the bearer secret -> 202 ($code)" test "$code" = 202
code=$(post "$r2" -H "Authorization: Bearer $SECRET"); check "  the same body again -> 409 ($code)" test "$code" = 409
check "  produced once" test "$(produced "$key7")" = 1
kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "$TOPIC" -o beginning -e -q 2>/dev/null | grep -F "$sid7" >"$work/r2.json" || true
check "  normalised to an AWS record" \
  jqe '.Records[0].eventName == "s3:ObjectCreated:Put" and .Records[0].s3.object.size > 0' "$(head -n1 "$work/r2.json")"
code=$(post '{"account":"a","action":"Frobnicate","bucket":"b","object":{"key":"k"}}' -H "Authorization: Bearer $SECRET")
check "R2 event with an unknown action -> 400 ($code)" test "$code" = 400
wait_for 240 sh -c "curl -fsS -H 'Authorization: Bearer $token7' '$RESULTS_URL/v1/submissions/$sid7' |
  jq -e '.questions[0].state == \"done\" or .questions[0].state == \"failed\"' >/dev/null" || true
check "the R2-notified question reached done ($(state "$sid7" "$token7"))" test "$(state "$sid7" "$token7")" = done

# --- off without a secret -----------------------------------------------------
# (the stages' logs are appended to: finish checks both runs for sanitizer reports)
stages_down || true
check "presign stopped cleanly with events answered" grep -q '"msg":"stopped"' "$STAGES_DIR/presign.log"
unset SLUICE_WEBHOOK_SECRET SLUICE_WEBHOOK_SECRET_PREVIOUS
rc=0; timeout 30 "$SLUICE_BIN" ingest --set ingest.verify_object=sometimes >"$work/bad-mode.log" 2>&1 || rc=$?
check "ingest refuses ingest.verify_object=sometimes (exit $rc)" test "$rc" -ne 0
check "  saying why" grep -q "verify_object must be always or when_needed" "$work/bad-mode.log"
export SLUICE_INGEST_VERIFY_OBJECT=when_needed
stages_up
code=$(post_signed "$body2"); check "no webhook.secret -> 404 ($code)" test "$code" = 404
check "  JSON error not_found" jqe '.error.code == "not_found"' "$(cat "$work/out")"
# ingest.verify_object=when_needed, events straight onto the topic (the Kafka
# path): an event without a size is still HEADed, one with a wrong size is
# refused without a HEAD
reply=$(submission audio/wav "$SIZE"); sid8=$(jq -r .submission_id <<<"$reply")
key8=$(jq -r '.questions[0].object_key' <<<"$reply")
event "$SLUICE_S3_BUCKET" "$key8" 0 | kcat -P -b "$SLUICE_KAFKA_BROKERS" -t "$TOPIC"
check_dlq "$sid8" object_missing "when_needed: an event with size 0 for an object never uploaded"
reply=$(submission audio/wav "$SIZE"); sid9=$(jq -r .submission_id <<<"$reply")
key9=$(jq -r '.questions[0].object_key' <<<"$reply")
event "$SLUICE_S3_BUCKET" "$key9" 7 | kcat -P -b "$SLUICE_KAFKA_BROKERS" -t "$TOPIC"
check_dlq "$sid9" size_mismatch "when_needed: an event whose size is not the declared one"
finish
