#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The presigned URL signs content-length and content-type (and, when the
# client gives one, the sha256 checksum), so the storage
# itself refuses (403) an upload whose size or type differs from what the
# client declared — the audio never has to pass through Sluice to be checked.
source "$(dirname "$0")/lib.sh"
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
head -c 4000 /dev/urandom >"$work/declared"
head -c 4001 /dev/urandom >"$work/bigger"
head -c 3999 /dev/urandom >"$work/smaller"

reply=$(curl "${KEY_AUTH[@]}" -sS -X POST -H 'Content-Type: application/json' \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":4000}]}' "$PRESIGN_URL/v1/submissions")
url=$(jq -r '.questions[0].url' <<<"$reply")
key=$(jq -r '.questions[0].object_key' <<<"$reply")
check "the URL signs content-length and content-type" grep -q 'X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost' <<<"$url"
put() { curl -sS -o "$work/body" -w '%{http_code}' -X PUT -H "Content-Type: $1" --data-binary "@$2" "$url"; }
exists() { curl -sS -o /dev/null -w '%{http_code}' -I --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
  "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$key"; }

code=$(put audio/wav "$work/bigger"); check "one byte more than signed -> 403 ($code)" test "$code" = 403
code=$(put audio/wav "$work/smaller"); check "one byte less than signed -> 403 ($code)" test "$code" = 403
code=$(put audio/ogg "$work/declared"); check "another content type than signed -> 403 ($code)" test "$code" = 403
code=$(exists); check "nothing was stored by the refused uploads ($code)" test "$code" = 404
code=$(put audio/wav "$work/declared"); check "the declared size and type -> 200 ($code)" test "$code" = 200
code=$(exists); check "the accepted upload is stored ($code)" test "$code" = 200
# with the client's sha256 the checksum header is signed too: different bytes
# of the same size are refused by the storage
head -c 4000 /dev/urandom >"$work/other"
sum=$(sha256sum "$work/declared" | cut -d' ' -f1)
reply=$(curl "${KEY_AUTH[@]}" -sS -X POST -H 'Content-Type: application/json' \
  --data "{\"questions\":[{\"no\":1,\"content_type\":\"audio/wav\",\"size\":4000,\"sha256\":\"$sum\"}]}" \
  "$PRESIGN_URL/v1/submissions")
url=$(jq -r '.questions[0].url' <<<"$reply")
key=$(jq -r '.questions[0].object_key' <<<"$reply")
b64=$(jq -r '.questions[0].headers["x-amz-checksum-sha256"]' <<<"$reply")
check "the reply lists the checksum header to send" test "$b64" = "$(openssl dgst -sha256 -binary "$work/declared" | base64)"
check "the URL signs it" grep -q 'X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost%3Bx-amz-checksum-sha256' <<<"$url"
putsum() { curl -sS -o "$work/body" -w '%{http_code}' -X PUT -H 'Content-Type: audio/wav' \
  -H "x-amz-checksum-sha256: $b64" --data-binary "@$1" "$url"; }
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: audio/wav' --data-binary "@$work/declared" "$url")
check "without the checksum header -> 403 ($code)" test "$code" = 403
code=$(putsum "$work/other"); check "other bytes of the same size -> refused ($code)" test "$code" -ge 400 -a "$code" -lt 500
code=$(exists); check "nothing stored for them ($code)" test "$code" = 404
code=$(putsum "$work/declared"); check "the declared bytes -> 200 ($code)" test "$code" = 200
code=$(curl "${KEY_AUTH[@]}" -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":4000,"sha256":"xyz"}]}' "$PRESIGN_URL/v1/submissions")
check "a malformed sha256 -> 400 ($code)" test "$code" = 400
finish
