#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Event streams cannot starve results (issue 40, "Hostile input"):
#   1. one address (127.0.0.1) opens 1,100 event streams at once, each on a
#      fresh young UUIDv7 (results holds such a stream) with a bogus bearer
#      (tests/tools/sse_flood.py): at most results.max_streams_per_address
#      (32 by default) are open at any time, by the flooder's count and by
#      sluice_results_streams; the rest get 429 JSON; meanwhile a real
#      client on another address (127.0.0.2) polls its own submission and
#      every poll is 200 in under a second;
#   2. one (bogus) credential from two addresses: at most
#      results.max_streams_per_credential (32) streams, the rest 429
#      too_many_streams_for_credential;
#   3. behind a proxy (results.client_address_header = X-Forwarded-For) the
#      address cap counts the last address the proxy appended;
#   4. with results.stream_max_s = 2, an authenticated stream of a
#      submission that never completes ends by itself (the client's
#      EventSource reconnects), and the reconnect with Last-Event-ID is a
#      stream again that repeats nothing.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
FLOOD="python3 $ROOT/tests/tools/sse_flood.py"
CAP=32  # results.max_streams_per_address, its default
CAPC=32 # results.max_streams_per_credential, its default
RPORT=$((BASE + 1))
ADMIN_RESULTS=$(admin results)

stages_up
view_marked
head -c 4000 /dev/urandom >"$work/a.wav" # never uploaded: only its size counts
new_submission "$work/a.wav"
# poll: the real client, from another address: "<status> <seconds>"
poll() {
  curl -sS --interface 127.0.0.2 -o /dev/null -w '%{http_code} %{time_total}' --max-time 5 \
    -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID" || echo "000 5"
}
seen() { [[ $(poll) == 200* ]]; }
check "the real client's submission is in the view" wait_for 30 seen

# 1. the flood
$FLOOD --port "$RPORT" --bind 127.0.0.1 --n 1100 --hold 4 >"$work/flood.json" 2>"$work/flood.err" &
fp=$!
at_exit "kill $fp 2>/dev/null || true"
max_streams=0 slow=0 polls=0 worst=0
while kill -0 "$fp" 2>/dev/null; do
  n=$(metric sluice_results_streams '' "$ADMIN_RESULTS")
  ((n > max_streams)) && max_streams=$n
  r=$(poll)
  polls=$((polls + 1))
  worst=$(awk -v a="$worst" -v b="${r#* }" 'BEGIN {print (b > a) ? b : a}')
  if [[ ${r%% *} != 200 ]] || awk -v t="${r#* }" 'BEGIN {exit !(t >= 1.0)}'; then
    slow=$((slow + 1))
    log "poll during the flood: $r"
  fi
  sleep 0.2
done
wait "$fp" || true
log "flood: $(cat "$work/flood.json") $(head -c 300 "$work/flood.err")"
log "during it: $polls polls (slowest ${worst} s), sluice_results_streams at most $max_streams"
opened=$(jq -r '.status["200"] // 0' "$work/flood.json")
check "every one of the 1,100 got an answer" jqe '.unanswered == 0' "$(cat "$work/flood.json")"
check "streams open at once from the address <= $CAP (max_open $(jq -r .max_open "$work/flood.json"))" \
  jqe ".max_open <= $CAP and .max_open >= 1" "$(cat "$work/flood.json")"
check "sluice_results_streams never above $CAP ($max_streams)" test "$max_streams" -le "$CAP"
check "the rest refused with 429 (${opened} streams)" \
  jqe '.status["429"] >= 1000 and .codes.too_many_streams_from_address >= 1' "$(cat "$work/flood.json")"
check "the real client polled during the flood ($polls polls)" test "$polls" -ge 3
check "  every poll 200 in under a second ($slow not)" test "$slow" = 0

# 2. one credential from two addresses
drained() { test "$(metric sluice_results_streams '' "$ADMIN_RESULTS")" = 0; }
check "the flood's streams are gone" wait_for 10 drained
$FLOOD --port "$RPORT" --bind 127.0.0.3 --n 24 --hold 4 --token samebogus >"$work/c1.json" &
cp1=$!
at_exit "kill $cp1 2>/dev/null || true"
sleep 1.5
$FLOOD --port "$RPORT" --bind 127.0.0.4 --n 24 --hold 0.5 --token samebogus >"$work/c2.json"
wait "$cp1" || true
log "one credential: $(cat "$work/c1.json") $(cat "$work/c2.json")"
both=$(jq -s '[.[].status["200"] // 0] | add' "$work/c1.json" "$work/c2.json")
check "one credential from two addresses: $both streams (cap $CAPC)" test "$both" = "$CAPC"
check "  the rest 429 too_many_streams_for_credential" \
  jqe '.codes.too_many_streams_for_credential == 16' "$(cat "$work/c2.json")"

# 3. a stream's lifetime: results again with results.stream_max_s = 2
# (and behind a "proxy": results.client_address_header)
"$ROOT/tools/stages" kill results >/dev/null
export SLUICE_RESULTS_STREAM_MAX_S=2 SLUICE_RESULTS_HEARTBEAT_MS=500
export SLUICE_RESULTS_CLIENT_ADDRESS_HEADER=X-Forwarded-For
stages_up
# the first client's streams stay open (until stream_max_s) while the second's open
$FLOOD --port "$RPORT" --n $((CAP + 2)) --hold 1.2 --xff "10.9.8.7, 10.0.0.1" >"$work/x1.json" &
xp=$!
at_exit "kill $xp 2>/dev/null || true"
sleep 0.6
$FLOOD --port "$RPORT" --n 2 --hold 0.2 --xff 10.0.0.2 >"$work/x2.json"
wait "$xp" || true
log "behind a proxy: $(cat "$work/x1.json") $(cat "$work/x2.json")"
check "results.client_address_header: the cap counts the address the proxy appended" \
  jqe ".status[\"200\"] == $CAP and .codes.too_many_streams_from_address == 2" "$(cat "$work/x1.json")"
check "  and another client behind the same proxy is not refused" \
  jqe '.status["200"] == 2' "$(cat "$work/x2.json")"
EV=$RESULTS_URL/v1/submissions/$SID/events
t0=$(date +%s.%N)
rc=0
timeout 20 curl -sSN -H "Authorization: Bearer $TOKEN" "$EV" >"$work/s1" 2>/dev/null || rc=$?
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
check "an authenticated stream that never completes ends by itself (curl $rc after $took s)" \
  awk -v r="$rc" -v t="$took" 'BEGIN {exit !(r == 0 && t >= 1.5 && t < 10)}'
check "  after its question" test "$(grep -c '^event: question' "$work/s1")" = 1
last=$(awk '/^id: /{id=$2} END {print id}' "$work/s1")
code=$(timeout 20 curl -sSN -o "$work/s2" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  -H "Last-Event-ID: $last" "$EV" 2>/dev/null) || true
check "the reconnect with Last-Event-ID $last is a stream again ($code)" test "$code" = 200
check "  that repeats nothing and ends too" \
  sh -c "! grep -q '^event:' '$work/s2' && grep -q '^retry:' '$work/s2'"
finish
