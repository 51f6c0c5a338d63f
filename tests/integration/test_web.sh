#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The browser client's plumbing, over real HTTP: presign serves web/ at "/"
# with the right content types, an ETag and 304 on revalidation; nothing
# outside the loaded files is reachable (traversal attempts, encoded dots,
# dotfiles, subdirectories, symbolic links are the same JSON 404); only GET.
# A presign pointed at a directory without index.html refuses to start.
# The page's origin may call results cross-origin (preflight with
# Authorization and If-None-Match), and the storage answers a CORS preflight
# against a real presigned PUT URL for that origin only, exposing ETag
# (devstack's bucket CORS).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
# a served directory with traps in it: a copy of web/, a dotfile, a
# subdirectory and a symbolic link to a file outside
mkdir -p "$work/www/sub"
cp "$ROOT"/web/* "$work/www/"
echo 'TOKEN=secret' >"$work/www/.env"
echo inner >"$work/www/sub/inner.txt"
echo outside >"$work/secret.txt"
ln -s "$work/secret.txt" "$work/www/link.txt"
export SLUICE_PRESIGN_STATIC_DIR=$work/www
ORIGIN=$PRESIGN_URL
export SLUICE_RESULTS_CORS_ORIGINS=$ORIGIN
# --- a directory without index.html: presign refuses to start -------------------
mkdir -p "$work/empty"
out=$(SLUICE_PRESIGN_STATIC_DIR=$work/empty SLUICE_PRESIGN_LISTEN=127.0.0.1:$((BASE + 9)) \
  SLUICE_ADMIN_LISTEN=127.0.0.1:$((BASE + 109)) timeout 30 "$SLUICE_BIN" presign 2>&1) && rc=0 || rc=$?
check "presign with a static_dir lacking index.html exits 1 ($rc)" test "$rc" = 1
check "  saying why" grep -q 'presign.static_dir: .*no index.html' <<<"$out"

stages_up

# --- the page -------------------------------------------------------------
get() { rm -f "$work/b"; curl -sS --path-as-is -D "$work/h" -o "$work/b" -w '%{http_code}' "$@"; }
hdr() { tr -d '\r' <"$work/h" | sed -n "s/^$1: //Ip" | head -1; }
code=$(get "$PRESIGN_URL/"); check "GET / -> 200 ($code)" test "$code" = 200
check "  is web/index.html" cmp -s "$work/b" "$ROOT/web/index.html"
check "  as text/html ($(hdr Content-Type))" test "$(hdr Content-Type)" = "text/html; charset=utf-8"
etag=$(hdr ETag)
check "  with a quoted ETag ($etag)" grep -qE '^"[0-9a-f]{32}"$' <<<"$etag"
check "  the content's sha256" test "$etag" = "\"$(sha256sum "$ROOT/web/index.html" | cut -c1-32)\""
check "  Cache-Control: no-cache" test "$(hdr Cache-Control)" = no-cache
check "  X-Content-Type-Options: nosniff" test "$(hdr X-Content-Type-Options)" = nosniff
code=$(get -H "If-None-Match: $etag" "$PRESIGN_URL/"); check "revalidation with its ETag -> 304 ($code)" test "$code" = 304
check "  with no body" test ! -s "$work/b"
code=$(get -H 'If-None-Match: "0000"' "$PRESIGN_URL/index.html"); check "another ETag -> 200 ($code)" test "$code" = 200
code=$(get "$PRESIGN_URL/app.js"); check "GET /app.js -> 200 ($code)" test "$code" = 200
check "  as text/javascript" test "$(hdr Content-Type)" = "text/javascript; charset=utf-8"
check "  is web/app.js" cmp -s "$work/b" "$ROOT/web/app.js"
code=$(get "$PRESIGN_URL/style.css?v=2"); check "GET /style.css?v=2 -> 200 ($code)" test "$code" = 200
check "  as text/css" test "$(hdr Content-Type)" = "text/css; charset=utf-8"
code=$(get -X POST --data x "$PRESIGN_URL/"); check "POST / -> 405 ($code)" test "$code" = 405
check "  Allow: GET" test "$(hdr Allow)" = GET

# --- nothing else ---------------------------------------------------------
for p in /../secret.txt /..%2fsecret.txt /%2e%2e/secret.txt /%2E%2E/%2E%2E/etc/passwd \
  /../../../../etc/passwd //etc/passwd /.env /sub/inner.txt /sub /link.txt /./app.js \
  /app.js/ /index.html/../app.js /APP.JS '/app.js%00' /.. /nope.html; do
  code=$(get "$PRESIGN_URL$p")
  if [[ $code != 404 ]] || ! jq -e '.error.code == "not_found"' "$work/b" >/dev/null 2>&1 ||
     grep -q 'secret\|inner\|outside\|root:' "$work/b"; then
    fail "GET $p -> $code $(head -c 120 "$work/b")"
  else
    log "ok: GET $p -> 404 not_found"
  fi
done
check "the API still answers next to the page" \
  test "$(curl "${KEY_AUTH[@]}" -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    "$PRESIGN_URL/v1/submissions" --data '{}')" = 400

# --- results, cross-origin from the page ------------------------------------
curl -sS -D - -o /dev/null -X OPTIONS -H "Origin: $ORIGIN" -H 'Access-Control-Request-Method: GET' \
  -H 'Access-Control-Request-Headers: authorization,if-none-match' \
  "$RESULTS_URL/v1/submissions/00000000-0000-7000-8000-000000000000" | tr -d '\r' >"$work/pre"
check "results preflight from the page's origin -> 204" grep -q '^HTTP/1.1 204' "$work/pre"
check "  allows the origin" grep -q "^Access-Control-Allow-Origin: $ORIGIN\$" "$work/pre"
check "  once (browsers refuse a repeated Allow-Origin)" test "$(grep -ci '^Access-Control-Allow-Origin' "$work/pre")" = 1
check "  and If-None-Match" grep -qi '^Access-Control-Allow-Headers:.*If-None-Match' "$work/pre"

# --- storage CORS for the page's origin (tools/devstack) ----------------------
reply=$(curl "${KEY_AUTH[@]}" -sS -X POST -H 'Content-Type: application/json' \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}' "$PRESIGN_URL/v1/submissions")
url=$(jq -r '.questions[0].url' <<<"$reply")
s3pre() { curl -sS -D - -o /dev/null -X OPTIONS -H "Origin: $1" -H 'Access-Control-Request-Method: PUT' \
  -H 'Access-Control-Request-Headers: content-type' "$2" | tr -d '\r'; }
s3pre "$ORIGIN" "$url" >"$work/s3pre"
check "storage preflight for a presigned PUT from the page's origin -> 200 ($(head -1 "$work/s3pre"))" \
  grep -qE '^HTTP/1.1 20[04]' "$work/s3pre"
check "  allows the origin" grep -q "^Access-Control-Allow-Origin: $ORIGIN\$" "$work/s3pre"
check "  allows PUT" grep -qi '^Access-Control-Allow-Methods:.*PUT' "$work/s3pre"
check "  and exposes ETag (for multipart parts)" grep -qi '^Access-Control-Expose-Headers:.*ETag' "$work/s3pre"
s3pre https://evil.example "$url" >"$work/s3evil"
check "storage preflight from another origin is not allowed" \
  sh -c '! grep -qi "^Access-Control-Allow-Origin: https://evil.example" "$0"' "$work/s3evil"
# a real cross-origin PUT (as the browser sends it after the preflight)
head -c 100 /dev/zero >"$work/ans"
curl -sS -D "$work/puth" -o /dev/null -X PUT -H "Origin: $ORIGIN" -H 'Content-Type: audio/wav' \
  --data-binary @"$work/ans" "$url"
check "the PUT itself carries Access-Control-Allow-Origin" \
  grep -qi "^Access-Control-Allow-Origin: $ORIGIN" <(tr -d '\r' <"$work/puth")
finish

