#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A large answer, resumable: a 64 MiB WAV (espeak-ng speech padded with
# silence, 96 kHz stereo so that it is ~3 min of audio) goes up through the
# Companion-style multipart endpoints of presign in 8 parts of 8 MiB, as an
# Uppy @uppy/aws-s3 client would send them: create, batch-sign, 3 parts,
# "interrupted" (a complete now is refused: the parts do not add up to the
# declared size), resumed by listing the stored parts and uploading only the
# 5 missing ones (each URL signed alone), completed. The stored object is
# byte-identical (signed GET, sha256) and the question flows through ingest,
# stt and grade to `done`. Also every 4xx: no token, wrong token, unknown
# upload id, part numbers 0 and 10001, a key that is not the question's,
# malformed bodies, and abort.
source "$(dirname "$0")/lib.sh"
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
MiB=$((1 << 20))
SIZE=$((64 * MiB))

# --- the audio: speech + silence, exactly 64 MiB -------------------------
espeak-ng -s 140 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends."
hdr=44 # sox writes the plain 44-byte header for 16-bit stereo PCM
frames=$(((SIZE - hdr) / 4))
sox -V1 "$work/speech.wav" -r 96000 -c 2 -b 16 "$work/big.wav" rate 96000 channels 2 pad 0 200 trim 0 "${frames}s"
check "the answer is exactly 64 MiB ($(stat -c %s "$work/big.wav") bytes)" test "$(stat -c %s "$work/big.wav")" = $SIZE
split -b $((8 * MiB)) -d -a 1 "$work/big.wav" "$work/part."
check "8 parts of 8 MiB" test "$(ls "$work"/part.* | wc -l)" = 8
sum=$(sha256sum "$work/big.wav" | cut -d' ' -f1)

reply=$(curl "${KEY_AUTH[@]}" -sS -X POST -H 'Content-Type: application/json' \
  --data "{\"questions\":[{\"no\":1,\"content_type\":\"audio/wav\",\"size\":$SIZE,\"prompt\":\"What do you do on weekends?\"},{\"no\":2,\"content_type\":\"audio/wav\",\"size\":100}]}" \
  "$PRESIGN_URL/v1/submissions")
sid=$(jq -r .submission_id <<<"$reply"); token=$(jq -r .results_token <<<"$reply")
key=$(jq -r '.questions[0].object_key' <<<"$reply"); key2=$(jq -r '.questions[1].object_key' <<<"$reply")
ekey=$(jq -rn --arg k "$key" '$k|@uri')
AUTH=(-H "Authorization: Bearer $token")
MP=$PRESIGN_URL/s3/multipart

# call METHOD URL [curl args...] -> body in $work/out, status on stdout
call() { curl -sS -o "$work/out" -w '%{http_code}' -X "$1" "$2" "${@:3}"; }
create_body="{\"filename\":\"answer.wav\",\"type\":\"audio/x-wav\",\"metadata\":{\"submission_id\":\"$sid\",\"question_no\":1}}"
create() { call POST "$MP" -H 'Content-Type: application/json' --data "$create_body" "$@"; }

# --- who may create -----------------------------------------------------
code=$(create); check "create without a token -> 401 ($code)" test "$code" = 401
check "  with a JSON error body" jqe '.error.code == "unauthorized"' "$(cat "$work/out")"
code=$(create -H 'Authorization: Bearer wrong'); check "create with a wrong token -> 404 ($code)" test "$code" = 404
code=$(call POST "$MP" "${AUTH[@]}" -H 'Content-Type: application/json' \
  --data "{\"metadata\":{\"submission_id\":\"$sid\",\"question_no\":7}}")
check "create for a question the submission lacks -> 404 ($code)" test "$code" = 404
code=$(call POST "$MP" "${AUTH[@]}" --data '{"metadata":{"submission_id":"nope","question_no":1}}')
check "create with a malformed submission id -> 400 ($code)" test "$code" = 400
code=$(call POST "$MP" "${AUTH[@]}" --data '[1,2')
check "create with malformed JSON -> 400 ($code)" test "$code" = 400

# the submission becomes visible to the endpoints once materialize has it
# (an unknown upload id then is upload_not_found, no longer not_found)
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $token' '$MP/probe?key=$ekey' |
  jq -e '.error.code == \"upload_not_found\"' >/dev/null" ||
  fail "the submission never became visible to the multipart endpoints"

code=$(create "${AUTH[@]}"); check "create -> 200 ($code)" test "$code" = 200
created=$(cat "$work/out")
upload=$(jq -r .uploadId <<<"$created")
eup=$(jq -rn --arg k "$upload" '$k|@uri')
check "create answers the question's own key" test "$(jq -r .key <<<"$created")" = "$key"
check "  and the bucket" test "$(jq -r .bucket <<<"$created")" = "$SLUICE_S3_BUCKET"

# --- 4xx on the upload ---------------------------------------------------
code=$(call GET "$MP/$eup/0?key=$ekey" "${AUTH[@]}"); check "part number 0 -> 400 ($code)" test "$code" = 400
code=$(call GET "$MP/$eup/10001?key=$ekey" "${AUTH[@]}"); check "part number 10001 -> 400 ($code)" test "$code" = 400
check "  with a JSON error body" jqe '.error.code == "invalid_part_number"' "$(cat "$work/out")"
code=$(call GET "$MP/$eup/batch?key=$ekey&partNumbers=1,10001" "${AUTH[@]}"); check "a batch with 10001 -> 400 ($code)" test "$code" = 400
code=$(call GET "$MP/$eup/batch?key=$ekey&partNumbers=0" "${AUTH[@]}"); check "a batch with 0 -> 400 ($code)" test "$code" = 400
code=$(call GET "$MP/unknown-upload-id/1?key=$ekey" "${AUTH[@]}"); check "sign for an unknown upload id -> 404 ($code)" test "$code" = 404
check "  with a JSON error body" jqe '.error.code == "upload_not_found"' "$(cat "$work/out")"
code=$(call GET "$MP/unknown-upload-id?key=$ekey" "${AUTH[@]}"); check "list an unknown upload id -> 404 ($code)" test "$code" = 404
code=$(call POST "$MP/unknown-upload-id/complete?key=$ekey" "${AUTH[@]}" --data '{"parts":[{"PartNumber":1,"ETag":"x"}]}')
check "complete an unknown upload id -> 404 ($code)" test "$code" = 404
code=$(call GET "$MP/$eup/1?key=$ekey" -H 'Authorization: Bearer wrong'); check "sign with a wrong token -> 404 ($code)" test "$code" = 404
code=$(call GET "$MP/$eup/1?key=$ekey"); check "sign without a token -> 401 ($code)" test "$code" = 401
code=$(call GET "$MP/$eup/1" "${AUTH[@]}"); check "sign without a key -> 400 ($code)" test "$code" = 400
code=$(call GET "$MP/$eup/1?key=$(jq -rn --arg k "$key2" '$k|@uri')" "${AUTH[@]}")
check "sign with another question's key -> 404 ($code)" test "$code" = 404
code=$(call PUT "$MP/$eup/1?key=$ekey" "${AUTH[@]}"); check "PUT on a part route -> 405 ($code)" test "$code" = 405

# --- 3 parts, then the connection "drops" -------------------------------
code=$(call GET "$MP/$eup/batch?key=$ekey&partNumbers=1,2,3,4,5,6,7,8" "${AUTH[@]}")
check "batch-sign 8 parts -> 200 ($code)" test "$code" = 200
batch=$(cat "$work/out")
check "  8 URLs, keyed by part number" jqe '.presignedUrls | keys == ["1","2","3","4","5","6","7","8"]' "$batch"
put_part() { # put_part N URL
  curl -sS -o /dev/null -w '%{http_code}' -T "$work/part.$(($1 - 1))" "$2"
}
for n in 1 2 3; do
  code=$(put_part $n "$(jq -r ".presignedUrls[\"$n\"]" <<<"$batch")")
  check "part $n stored ($code)" test "$code" = 200
done

code=$(call GET "$MP/$eup?key=$ekey" "${AUTH[@]}"); check "list parts -> 200 ($code)" test "$code" = 200
listed=$(cat "$work/out")
check "3 parts listed with number, ETag and size" \
  jqe 'map(.PartNumber) == [1,2,3] and all(.[]; .Size == 8388608 and (.ETag | length > 2))' "$listed"
parts=$(jq -c '{parts: map({PartNumber, ETag})}' <<<"$listed")
code=$(call POST "$MP/$eup/complete?key=$ekey" "${AUTH[@]}" -H 'Content-Type: application/json' --data "$parts")
check "complete with 24 MiB of 64 MiB declared -> 409 ($code)" test "$code" = 409
check "  size_mismatch" jqe '.error.code == "size_mismatch"' "$(cat "$work/out")"
code=$(call POST "$MP/$eup/complete?key=$ekey" "${AUTH[@]}" --data '{"parts":[{"PartNumber":4,"ETag":"\"x\""}]}')
check "complete naming a part never stored -> 400 ($code)" test "$code" = 400
code=$(call POST "$MP/$eup/complete?key=$ekey" "${AUTH[@]}" --data '{"parts":[{"PartNumber":2,"ETag":"a"},{"PartNumber":1,"ETag":"b"}]}')
check "complete with parts out of order -> 400 ($code)" test "$code" = 400
code=$(call POST "$MP/$eup/complete?key=$ekey" "${AUTH[@]}" --data '{"parts":"all"}')
check "complete with parts not an array -> 400 ($code)" test "$code" = 400

# --- resume: list, upload only what is missing, each URL signed anew ----
have=$(jq -r 'map(.PartNumber) | join(" ")' <<<"$listed")
uploaded=0
for n in 1 2 3 4 5 6 7 8; do
  [[ " $have " == *" $n "* ]] && continue
  code=$(call GET "$MP/$eup/$n?key=$ekey" "${AUTH[@]}")
  [[ $code == 200 ]] || { fail "sign part $n -> $code"; continue; }
  jqe '.expires > 0 and (.url | test("partNumber='"$n"'&"))' "$(cat "$work/out")" || fail "sign part $n: reply $(cat "$work/out")"
  code=$(put_part $n "$(jq -r .url "$work/out")")
  [[ $code == 200 ]] && uploaded=$((uploaded + 1)) || fail "part $n -> $code"
done
check "resume uploaded only the 5 missing parts ($uploaded)" test $uploaded = 5
call GET "$MP/$eup?key=$ekey" "${AUTH[@]}" >/dev/null
listed=$(cat "$work/out")
check "8 parts listed, 64 MiB in all" jqe "map(.PartNumber) == [1,2,3,4,5,6,7,8] and (map(.Size) | add) == $SIZE" "$listed"
parts=$(jq -c '{parts: map({PartNumber, ETag})}' <<<"$listed")
code=$(call POST "$MP/$eup/complete?key=$ekey" "${AUTH[@]}" -H 'Content-Type: application/json' --data "$parts")
check "complete -> 200 ($code)" test "$code" = 200
check "  with the object's location" jqe '.location | endswith("'"$key"'")' "$(cat "$work/out")"

# --- byte-identical in storage -------------------------------------------
curl -sS -o "$work/stored" --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
  "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$key"
check "the stored object is byte-identical (sha256)" test "$(sha256sum "$work/stored" | cut -d' ' -f1)" = "$sum"
rm -f "$work/stored"

# --- through the pipeline ------------------------------------------------
view() { curl -fsS "${AUTH[@]}" "$RESULTS_URL/v1/submissions/$sid"; }
wait_for 300 sh -c "curl -fsS -H 'Authorization: Bearer $token' '$RESULTS_URL/v1/submissions/$sid' |
  jq -e '.questions[0].state == \"done\" or .questions[0].state == \"failed\"' >/dev/null" ||
  fail "question 1 never finished: $(view)"
out=$(view)
check "the large answer is done ($(jq -c '.questions[0] | {state, error}' <<<"$out"))" jqe '.questions[0].state == "done"' "$out"
check "  transcribed ($(jq -r '.questions[0].transcript' <<<"$out" | head -c 80))" jqe '.questions[0].transcript | length > 0' "$out"
check "  with the audio's length (~175 s)" jqe '.questions[0].duration_s > 170 and .questions[0].duration_s < 180' "$out"
check "ingest passed on all 64 MiB (the event may say 0)" grep -qF "upload of $key complete ($SIZE bytes" "$STAGES_DIR/ingest.log"
code=$(create "${AUTH[@]}"); check "a second create for the answered question -> 409 ($code)" test "$code" = 409

# --- abort ----------------------------------------------------------------
key2e=$(jq -rn --arg k "$key2" '$k|@uri')
code=$(call POST "$MP" "${AUTH[@]}" --data "{\"metadata\":{\"submission_id\":\"$sid\",\"question_no\":\"2\"}}")
check "create for question 2 (question_no as a string, as Uppy metadata) -> 200 ($code)" test "$code" = 200
up2=$(jq -r .uploadId "$work/out" | jq -rR '@uri')
code=$(call DELETE "$MP/$up2?key=$key2e" "${AUTH[@]}"); check "abort -> 200 ($code)" test "$code" = 200
check "  with {}" test "$(cat "$work/out")" = "{}"
code=$(call GET "$MP/$up2?key=$key2e" "${AUTH[@]}"); check "the aborted upload is gone -> 404 ($code)" test "$code" = 404
code=$(call GET "$PRESIGN_URL/v1/s3/multipart/$up2/1?key=$key2e" "${AUTH[@]}")
check "the /v1 alias answers the same 404 ($code)" test "$code" = 404
finish
