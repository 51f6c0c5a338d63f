#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_security - who may do what (docs/security.md), against the real stack:
#  - creating a submission needs an API key or a JWT: none, garbage, unknown,
#    revoked, expired, not yet valid, wrongly signed, alg "none", an RS256
#    public key used as an HS256 secret, wrong issuer/audience -> 401 JSON;
#    valid HS256 and RS256 tokens and API keys -> 201;
#  - user B can neither read nor overwrite user A's submission: not with
#    B's key, B's JWT or B's results token (404), not by reusing A's
#    Idempotency-Key (B gets a new submission, never A's reply), not through
#    the multipart endpoints, not by PUTting to A's object key with B's URL;
#    A's view is unchanged afterwards;
#  - per-user and per-address rate limits answer 429 with Retry-After;
#  - a full flow (upload -> done, plus the webhook) with every secret
#    configured leaves none of them in any stage log (debug level).
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ADMIN_PRESIGN=$(admin presign)

# ---- JWT material: an HS256 secret and an RSA key pair ----------------------
HS_SECRET=$(openssl rand -hex 32)
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/rsa.pem" 2>/dev/null
openssl pkey -in "$work/rsa.pem" -pubout -out "$work/rsa.pub"
export SLUICE_AUTH_JWT_HS256_SECRET=$HS_SECRET
export SLUICE_AUTH_JWT_RS256_PUBLIC_KEY_FILE=$work/rsa.pub
export SLUICE_AUTH_JWT_ISSUER=https://login.example
export SLUICE_AUTH_JWT_AUDIENCE=sluice
export SLUICE_LOG_LEVEL=debug
WEBHOOK_SECRET=$(openssl rand -hex 24)
export SLUICE_WEBHOOK_SECRET=$WEBHOOK_SECRET
# jwt ALG CLAIMS-JSON [KEY-MODE] : KEY-MODE hs (default for HS256), rs, none,
# wrong (another secret), pubkey (the RS256 public key file as HMAC secret)
jwt() {
  local alg=$1 claims=$2 mode=${3:-} h p sig
  h=$(printf '{"alg":"%s","typ":"JWT"}' "$alg" | b64url)
  p=$(printf '%s' "$claims" | b64url)
  case ${mode:-$alg} in
    HS256|hs) sig=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -hmac "$HS_SECRET" -binary | b64url) ;;
    wrong) sig=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -hmac "not-the-secret-not-the-secret-00" -binary | b64url) ;;
    pubkey) sig=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -mac HMAC \
                 -macopt "hexkey:$(od -An -v -tx1 "$work/rsa.pub" | tr -d ' \n')" -binary | b64url) ;;
    RS256|rs) sig=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -sign "$work/rsa.pem" -binary | b64url) ;;
    none) sig="" ;;
  esac
  printf '%s.%s.%s' "$h" "$p" "$sig"
}
now=$(date +%s)
claims() { # claims SUB [EXTRA-JSON-FIELDS]
  printf '{"sub":"%s","iss":"https://login.example","aud":["other","sluice"],"iat":%d,"exp":%d%s}' \
    "$1" "$now" $((now + 600)) "${2:-}"
}

stages_up
wait_for 30 curl -fsS -o /dev/null "$ADMIN_PRESIGN/readyz" || fail "presign not ready"

KEY_A=$("$SLUICECTL" apikey add --user alice --label "test_security" 2>"$work/add.err")
KEY_B=$("$SLUICECTL" apikey add --user bob 2>/dev/null)
check "apikey add prints a key of the documented shape" grep -qE '^slk_[0-9a-f]{64}$' <<<"$KEY_A"
check "  and says on stderr it is shown only once" grep -q 'shown only now' "$work/add.err"
check "Redis keeps only the key's SHA-256, never the key" \
  test "$(redis-cli -p "$DEVSTACK_REDIS_PORT" --scan --pattern 'sl:apikey:*' | grep -c "${KEY_A#slk_}" || true)" = 0
check "apikey list shows alice" sh -c "'$SLUICECTL' apikey list | grep -q ' alice '"
check "apikey list does not show the key" sh -c "! '$SLUICECTL' apikey list --json | grep -q '$KEY_A'"

Q1='{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}'
# create BEARER [BODY] [EXTRA CURL ARGS...] -> status; body in $work/c.json
create() {
  local bearer=$1 body=${2:-$Q1}; shift 2 || shift $#
  local auth=()
  [[ -n $bearer ]] && auth=(-H "Authorization: Bearer $bearer")
  curl -sS -D "$work/c.h" -o "$work/c.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    "${auth[@]}" "$@" --data "$body" "$PRESIGN_URL/v1/submissions"
}
err_code() { jq -r .error.code "$work/c.json"; }
expect401() { # expect401 DESCRIPTION BEARER
  local code; code=$(create "$2")
  check "$1 -> 401 ($code $(err_code))" test "$code" = 401
  check "  ... with a JSON error and a message" jq -e '.error.code and (.error.message | length > 0)' "$work/c.json"
  check "  ... and WWW-Authenticate" grep -qi '^WWW-Authenticate: Bearer' "$work/c.h"
}

# ---- authentication ---------------------------------------------------------
expect401 "no credential" ""
expect401 "a garbage credential" "hello"
expect401 "a well-formed API key nobody issued" "slk_$(openssl rand -hex 32)"
KEY_REVOKED=$("$SLUICECTL" apikey add --user mallory 2>/dev/null)
check "a fresh key is accepted ($(create "$KEY_REVOKED"))" test "$(create "$KEY_REVOKED")" = 201
"$SLUICECTL" apikey revoke "$KEY_REVOKED" >/dev/null
expect401 "the same key after apikey revoke" "$KEY_REVOKED"
check "revoking it twice exits 1" sh -c "! '$SLUICECTL' apikey revoke '$KEY_REVOKED' 2>/dev/null"
expect401 "an expired JWT" "$(jwt HS256 "{\"sub\":\"alice\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":$((now - 3600))}")"
expect401 "a JWT not valid yet (nbf in an hour)" "$(jwt HS256 "$(claims alice ",\"nbf\":$((now + 3600))")")"
expect401 "a JWT without exp" "$(jwt HS256 '{"sub":"alice","iss":"https://login.example","aud":"sluice"}')"
expect401 "a JWT signed with another secret" "$(jwt HS256 "$(claims alice)" wrong)"
expect401 "a JWT with alg none" "$(jwt none "$(claims alice)")"
expect401 "an HS256 JWT keyed with the RS256 public key (alg confusion)" "$(jwt HS256 "$(claims alice)" pubkey)"
expect401 "a JWT from another issuer" "$(jwt HS256 "{\"sub\":\"alice\",\"iss\":\"https://evil.example\",\"aud\":\"sluice\",\"exp\":$((now + 600))}")"
expect401 "a JWT for another audience" "$(jwt HS256 "{\"sub\":\"alice\",\"iss\":\"https://login.example\",\"aud\":\"billing\",\"exp\":$((now + 600))}")"
expect401 "a JWT living longer than a day" "$(jwt HS256 "{\"sub\":\"alice\",\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"iat\":$now,\"exp\":$((now + 200000))}")"
expect401 "a JWT without a user" "$(jwt HS256 "{\"iss\":\"https://login.example\",\"aud\":\"sluice\",\"exp\":$((now + 600))}")"
JWT_A_HS=$(jwt HS256 "$(claims alice)")
JWT_A_RS=$(jwt RS256 "$(claims alice)")
JWT_B=$(jwt RS256 "$(claims bob)")
check "a valid HS256 JWT creates ($(create "$JWT_A_HS"))" test "$(create "$JWT_A_HS")" = 201
check "a valid RS256 JWT creates ($(create "$JWT_A_RS"))" test "$(create "$JWT_A_RS")" = 201
check "unauthenticated attempts are counted" \
  test "$(metric sluice_submissions_total 'outcome="unauthenticated"' "$ADMIN_PRESIGN")" -ge 14

# ---- ownership: alice's submission, bob's attempts -----------------------------
espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
size=$(stat -c %s "$work/a.wav")
QA="{\"questions\":[{\"no\":1,\"content_type\":\"audio/wav\",\"size\":$size,\"prompt\":\"What do you do on weekends?\"},{\"no\":2,\"content_type\":\"audio/wav\",\"size\":$size}]}"
IKEY="shared-key-$(date +%s%N)"
code=$(create "$KEY_A" "$QA" -H "Idempotency-Key: $IKEY")
check "alice creates a submission ($code)" test "$code" = 201
cp "$work/c.json" "$work/a.json"
SA=$(jq -r .submission_id "$work/a.json"); TA=$(jq -r .results_token "$work/a.json")
code=$(create "$KEY_B" "$QA")
SB=$(jq -r .submission_id "$work/c.json"); TB=$(jq -r .results_token "$work/c.json")
check "bob creates his own ($code)" test "$code" = 201
get() { curl -sS -o "$work/g.json" -w '%{http_code}' -H "Authorization: Bearer $2" "$RESULTS_URL/v1/submissions/$1"; }
wait_for 20 sh -c "test \"\$(curl -sS -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $TA' '$RESULTS_URL/v1/submissions/$SA')\" = 200" ||
  fail "alice's submission never became readable"
check "alice reads hers with her results token" test "$(get "$SA" "$TA")" = 200
check "alice reads hers with her API key" test "$(get "$SA" "$KEY_A")" = 200
check "alice reads hers with her JWT" test "$(get "$SA" "$JWT_A_RS")" = 200
check "bob's API key on alice's submission -> 404" test "$(get "$SA" "$KEY_B")" = 404
check "bob's JWT on alice's submission -> 404" test "$(get "$SA" "$JWT_B")" = 404
check "bob's results token on alice's submission -> 404" test "$(get "$SA" "$TB")" = 404
check "  ... the same 404 body as an unknown id" \
  test "$(jq -c .error "$work/g.json")" = "$(get 00000000-0000-7000-8000-000000000000 "$TB" >/dev/null; jq -c .error "$work/g.json")"
check "alice's token does not open bob's submission" test "$(get "$SB" "$TA")" = 404
check "an invalid JWT on the results API -> 401" test "$(get "$SA" "$(jwt HS256 "$(claims alice)" wrong)")" = 401
check "a revoked key on the results API -> 401" test "$(get "$SA" "$KEY_REVOKED")" = 401
check "alice's token with a changed character -> 404" test "$(get "$SA" "${TA%?}x")" = 404

code=$(create "$KEY_B" "$QA" -H "Idempotency-Key: $IKEY")
check "bob reusing alice's Idempotency-Key gets a new submission ($code)" test "$code" = 201
check "  ... not alice's (no replay of her reply)" sh -c "! grep -qi '^Idempotent-Replayed' '$work/c.h'"
check "  ... with another id" test "$(jq -r .submission_id "$work/c.json")" != "$SA"
check "  ... and her token nowhere in it" sh -c "! grep -q '$TA' '$work/c.json'"
code=$(create "$KEY_A" "$QA" -H "Idempotency-Key: $IKEY")
check "alice retrying with her key still gets hers ($code)" \
  test "$code" = 201 -a "$(jq -r .submission_id "$work/c.json")" = "$SA"

akey=$(jq -r '.questions[0].object_key' "$work/a.json")
mp() { curl -sS -o "$work/m.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $1" --data "{\"filename\":\"a.wav\",\"type\":\"audio/wav\",\"metadata\":{\"submission_id\":\"$SA\",\"question_no\":\"1\"}}" \
  "$PRESIGN_URL/s3/multipart"; }
check "bob's token cannot start a multipart upload on alice's question" test "$(mp "$TB")" = 404
check "bob's API key cannot either" test "$(mp "$KEY_B")" = 404
# bob's presigned URL, pointed at alice's object key: storage refuses it
burl=$(jq -r '.questions[0].url' "$work/c.json" 2>/dev/null || true)
code=$(create "$KEY_B" "$QA"); burl=$(jq -r '.questions[0].url' "$work/c.json"); bkey=$(jq -r '.questions[0].object_key' "$work/c.json")
forged=${burl/$bkey/$akey}
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: audio/wav' --data-binary "@$work/a.wav" "$forged")
check "bob's signed URL re-aimed at alice's key -> refused by storage ($code)" test "$code" = 403
get "$SA" "$TA" >/dev/null
check "alice's question 1 is still awaiting her upload" \
  jq -e '.questions[] | select(.no == 1) | .state == "awaiting_upload"' "$work/g.json"
check "alice's submission still belongs to alice" \
  test "$(redis-cli -p "$DEVSTACK_REDIS_PORT" hget "$(sub_key "$SA")" user)" = alice

# ---- the full flow, then no secret in any log ------------------------------------
url=$(jq -r '.questions[0].url' "$work/a.json")
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: audio/wav' --data-binary "@$work/a.wav" "$url")
check "alice uploads her answer ($code)" test "$code" = 200
# jqe, not jq -e: jq 1.6 passes -e on an empty body (a 404 under curl -f),
# so that wait could end before anything was graded
alice_done() { jqe '.questions[] | select(.no == 1) | .state == "done"' "$(view_of "$SA" "$TA")"; }
wait_for 120 alice_done || fail "alice's answer was not graded"

# the same upload's event once more through the webhook, with its shared secret
ev=$(jq -cn --arg k "$akey" --arg b "$SLUICE_S3_BUCKET" --argjson s "$size" \
  '{Records:[{eventName:"s3:ObjectCreated:Put",s3:{bucket:{name:$b},object:{key:$k,size:$s}}}]}')
hook() { curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $1" --data "$ev" "$PRESIGN_URL/v1/storage-events"; }
check "the webhook refuses a wrong secret" test "$(hook "not-$WEBHOOK_SECRET")" = 401
check "the webhook takes the event with its secret" test "$(hook "$WEBHOOK_SECRET")" = 202
check "  ... and refuses the replay" test "$(hook "$WEBHOOK_SECRET")" = 409
before=$(curl -fsS -H "Authorization: Bearer $TA" "$RESULTS_URL/v1/submissions/$SA" | jq -c '.questions[] | select(.no == 1)')
sleep 5
after=$(curl -fsS -H "Authorization: Bearer $TA" "$RESULTS_URL/v1/submissions/$SA" | jq -c '.questions[] | select(.no == 1)')
check "the repeated event changed nothing in alice's result" test "$before" = "$after"

# ---- rate limits ---------------------------------------------------------------
"$ROOT/tools/stages" down >/dev/null
export SLUICE_PRESIGN_RATE_PER_USER=3 SLUICE_PRESIGN_RATE_PER_ADDRESS=5
export SLUICE_PRESIGN_CLIENT_ADDRESS_HEADER=X-Forwarded-For
stages_up
wait_for 30 curl -fsS -o /dev/null "$ADMIN_PRESIGN/readyz" || fail "presign not ready after restart"
KEY_C=$("$SLUICECTL" apikey add --user carol 2>/dev/null)
KEY_D=$("$SLUICECTL" apikey add --user dave 2>/dev/null)
for k in sl:rl:u:carol sl:rl:u:dave sl:rl:u:erin sl:rl:a:203.0.113.7 sl:rl:a:203.0.113.8 \
  sl:rl:a:203.0.113.9; do # one key a DEL: a Redis Cluster refuses two slots
  redis-cli -p "$DEVSTACK_REDIS_PORT" del "$k" >/dev/null
done
xff=(-H "X-Forwarded-For: 198.51.100.1, 203.0.113.7")
codes=""
for i in 1 2 3 4; do codes+="$(create "$KEY_C" "$Q1" "${xff[@]}") "; done
check "carol: 3 per minute, the 4th is refused ($codes)" test "$codes" = "201 201 201 429 "
check "  ... 429 says rate_limited" test "$(err_code)" = rate_limited
check "  ... with Retry-After" grep -qiE '^Retry-After: [0-9]+' "$work/c.h"
codes=""
for i in 1 2 3; do codes+="$(create "$KEY_D" "$Q1" "${xff[@]}") "; done
check "dave from carol's address: the address allows 5 (3 used) ($codes)" test "$codes" = "201 201 429 "
check "dave from another address is served" test "$(create "$KEY_D" "$Q1" -H 'X-Forwarded-For: 203.0.113.8')" = 201
KEY_E=$("$SLUICECTL" apikey add --user erin 2>/dev/null)
check "only the proxy's last entry counts (a spoofed first entry does not help)" \
  test "$(create "$KEY_E" "$Q1" -H 'X-Forwarded-For: 10.9.9.9, 203.0.113.7')" = 429
check "refused requests use up nothing (erin, fresh, from another address)" \
  test "$(create "$KEY_E" "$Q1" -H 'X-Forwarded-For: 203.0.113.9')" = 201
check "rate-limited creates are counted" \
  test "$(metric sluice_submissions_total 'outcome="rate_limited"' "$ADMIN_PRESIGN")" = 3

# ---- secrets in logs -------------------------------------------------------------
"$ROOT/tools/stages" down >/dev/null
secrets=("$SLUICE_API_KEY" "$KEY_A" "$KEY_B" "$KEY_C" "$KEY_D" "$KEY_E" "$KEY_REVOKED" "$HS_SECRET"
         "$JWT_A_HS" "$JWT_A_RS" "$JWT_B" "$TA" "$TB" "$SLUICE_S3_SECRET_KEY" "$WEBHOOK_SECRET")
logs=("$STAGES_DIR"/*.log)
check "the stages wrote logs (${#logs[@]} files, debug level)" test "${#logs[@]}" -ge 6
leaks=0
for s in "${secrets[@]}"; do
  [[ ${#s} -ge 16 ]] || { fail "a secret under test is empty or short"; continue; }
  if grep -rlF -- "$s" "${logs[@]}" >/dev/null 2>&1; then
    fail "a secret (${s:0:6}...) appears in $(grep -rlF -- "$s" "${logs[@]}" | xargs -n1 basename | tr '\n' ' ')"
    leaks=$((leaks + 1))
  fi
done
check "no secret in any stage log (${#secrets[@]} secrets, $(cat "${logs[@]}" | wc -l) lines)" test "$leaks" = 0
finish
