#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# API keys survive a Redis loss (issue 40; stages/presign/keystore.h):
#   keys issued with sluicectl (one of them revoked), then Redis FLUSHALLed
#   while clients keep using the keys, without pause, on presign (create)
#   and results (a read):
#   - no request with a valid key is answered 401 in between: each gets
#     201 (created), 404 or 503 view_rebuilding (a read that passed
#     authentication: the view was flushed too) or 503 auth_unavailable
#     with Retry-After;
#   - once presign rebuilt the store from the API-key topic, every valid
#     key works again, and the revoked key is still refused (401).
# presign's API-key cache is off here (presign.apikey_cache_ms 0): it would
# answer for the keys for its TTL and hide the store (test_apikey_cache
# covers it). Before the rebuild existed, every key was 401 after the flush.
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
port=$((BASE + 70)) padmin=$((BASE + 71)) rport=$((BASE + 72)) radmin=$((BASE + 73))
body='{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}'
pids=()
at_exit 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; true'

SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$padmin \
  SLUICE_PRESIGN_APIKEY_CACHE_MS=0 \
  "$SLUICE_BIN" presign >>"$STAGES_DIR/presign.log" 2>&1 &
pids+=($!)
SLUICE_RESULTS_LISTEN=127.0.0.1:$rport SLUICE_ADMIN_LISTEN=127.0.0.1:$radmin \
  "$SLUICE_BIN" results >>"$STAGES_DIR/results.log" 2>&1 &
pids+=($!)
wait_for 40 admin_ready "$padmin" || fail "presign did not get ready"
wait_for 40 admin_ready "$radmin" || fail "results did not get ready"

# create KEY -> "STATUS CODE RETRY-AFTER" of a create with KEY
create() {
  local st f=$work/r.$BASHPID
  st=$(curl -sS -m 10 -D "$f.h" -o "$f.b" -w '%{http_code}' \
    -H "Authorization: Bearer $1" -X POST -H 'Content-Type: application/json' --data "$body" \
    "http://127.0.0.1:$port/v1/submissions" 2>/dev/null) || st=000
  echo "$st $(jq -r '.error.code // "-"' "$f.b" 2>/dev/null || echo -) $(tr -d '\r' <"$f.h" 2>/dev/null | sed -n 's/^[Rr]etry-[Aa]fter: //p' | head -1)"
}
# read KEY -> the same for a read of a submission that does not exist
read_one() {
  local st f=$work/r.$BASHPID
  st=$(curl -sS -m 10 -D "$f.h" -o "$f.b" -w '%{http_code}' \
    -H "Authorization: Bearer $1" "http://127.0.0.1:$rport/v1/submissions/no-such-submission" \
    2>/dev/null) || st=000
  echo "$st $(jq -r '.error.code // "-"' "$f.b" 2>/dev/null || echo -) $(tr -d '\r' <"$f.h" 2>/dev/null | sed -n 's/^[Rr]etry-[Aa]fter: //p' | head -1)"
}
newkey() { "$SLUICECTL" apikey add --user "$1" --label test_apikey_rebuild 2>/dev/null; }
status_of() { cut -d' ' -f1 <<<"$1"; }

KA=$(newkey rebuild-a) KB=$(newkey rebuild-b) KC=$(newkey rebuild-c)
[[ $KA == slk_* && $KB == slk_* && $KC == slk_* ]] || fail "sluicectl apikey add failed"
"$SLUICECTL" apikey revoke "$KC" >/dev/null || fail "revoking key C failed"
check "key A creates before the loss" test "$(status_of "$(create "$KA")")" = 201
check "key B creates before the loss" test "$(status_of "$(create "$KB")")" = 201
check "revoked key C is refused before the loss" test "$(status_of "$(create "$KC")")" = 401

# clients keep going through the loss: one line per request, "WHO STATUS CODE RETRY-AFTER"
poll() {
  while [[ ! -e $work/stop ]]; do
    echo "A-create $(create "$KA")"
    echo "B-create $(create "$KB")"
    echo "A-read $(read_one "$KA")"
    sleep 0.05
  done >>"$work/polls"
}
: >"$work/polls"
poll &
poller=$!
sleep 1
n0=$(wc -l <"$work/polls")
redis-cli -p "$DEVSTACK_REDIS_PORT" FLUSHALL >/dev/null
log "Redis flushed after $n0 requests"
# served again: a 201 for both keys among the requests after the flush
served_again() {
  tail -n +"$((n0 + 1))" "$work/polls" | grep -q '^A-create 201' &&
    tail -n +"$((n0 + 1))" "$work/polls" | grep -q '^B-create 201' &&
    tail -n +"$((n0 + 1))" "$work/polls" | grep -qE '^A-read (404|503 view_rebuilding)'
}
marked() { test "$(redis-cli -p "$DEVSTACK_REDIS_PORT" EXISTS "$APIKEY_MARKER")" = 1; }
wait_for 40 marked || fail "the API-key store was not rebuilt (marked) within 40 s of the loss"
wait_for 20 served_again || fail "the keys were not served again after the rebuild"
sleep 0.5
touch "$work/stop"
wait "$poller" || true
after=$(tail -n +"$((n0 + 1))" "$work/polls")
log "after the flush: $(grep -c . <<<"$after") requests; $(grep -c ' 503 auth_unavailable' <<<"$after" || true) answered 503 auth_unavailable; first 401: $(grep -m1 ' 401 ' <<<"$after" || echo none)"
check "no request with a valid key was answered 401 through the loss" \
  test "$(grep -c ' 401 ' <<<"$after" || true)" -eq 0
check "every answer was served (201/404) or 503 auth_unavailable with Retry-After" \
  test "$(grep -cvE '^A-create 201 |^B-create 201 |^A-read (404|503 view_rebuilding) |^[AB]-(create|read) 503 auth_unavailable [0-9]+$' <<<"$after" || true)" -eq 0
check "key A creates after the rebuild" test "$(status_of "$(create "$KA")")" = 201
check "key B creates after the rebuild" test "$(status_of "$(create "$KB")")" = 201
check "revoked key C is still refused after the rebuild (401)" test "$(status_of "$(create "$KC")")" = 401
check "a key never issued is refused (401) once the store is complete" \
  test "$(status_of "$(create "slk_$(openssl rand -hex 32)")")" = 401
check "the rebuild is counted" at_least 1 metric sluice_apikey_store_rebuilds_total '' "http://127.0.0.1:$padmin"

for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" || fail "a stage did not exit cleanly"; done
pids=()
finish
