#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Results while Redis stops answering (issue 40): SIGSTOP the stack's
# redis-server (the kernel still accepts connections; no reply ever comes).
#   1. polls are answered 503 JSON within about 1.5 s each (the async
#      client's deadline, not a blocked loop), one after another;
#   2. /readyz of results turns red (503);
#   3. an open event stream keeps getting its heartbeats meanwhile, on time
#      (the loop never waits for Redis);
#   4. after SIGCONT polls are 200 again and /readyz is green.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
RPID=$(cat "$("$ROOT/tools/devstack" pidfiles redis)")
at_exit "kill -CONT $RPID 2>/dev/null; true" # whatever happens, Redis runs again
export SLUICE_RESULTS_HEARTBEAT_MS=300
ADMIN_RESULTS=$(admin results)

stages_up
view_marked
head -c 4000 /dev/urandom >"$work/a.wav" # never uploaded: only its size counts
new_submission "$work/a.wav"
# poll: "<status> <seconds>"
poll() {
  curl -sS -o "$work/body" -w '%{http_code} %{time_total}' --max-time 10 \
    -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID" || echo "000 10"
}
seen() { [[ $(poll) == 200* ]]; }
check "the submission is in the view" wait_for 30 seen
ready() { curl -sS -o /dev/null -w '%{http_code}' --max-time 3 "$ADMIN_RESULTS/readyz" 2>/dev/null; }
check "results ready" test "$(ready)" = 200

# the stream, each line with the time it arrived ("<epoch s> <line>")
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
curl -sSN -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID/events" \
  2>/dev/null > >(stamp >"$work/s1") &
sp=$!
at_exit "kill $sp 2>/dev/null || true"
beats() { awk '$2 == ":"' "$work/s1" | wc -l; }
# gap SINCE: the longest wait between heartbeats after SINCE (s), the last
# one up to now included
gap() {
  awk -v t0="$1" -v now="$EPOCHREALTIME" '$2 == ":" && $1 >= t0 {if (p && $1 - p > g) g = $1 - p; p = $1}
    END {if (p && now - p > g) g = now - p; printf "%.2f", g}' "$work/s1"
}
has_beats() { test "$(beats)" -ge 2; }
check "a stream with heartbeats" wait_for 10 has_beats

kill -STOP "$RPID"
t_stop=$EPOCHREALTIME
log "redis stopped (SIGSTOP)"
b0=$(beats)
slow=0
for i in 1 2 3 4; do
  r=$(poll)
  log "poll $i while Redis is stopped: $r $(head -c 120 "$work/body")"
  if [[ ${r%% *} != 503 ]] || ! jq -e '.error.code' "$work/body" >/dev/null 2>&1 ||
    awk -v t="${r#* }" 'BEGIN {exit !(t >= 1.5)}'; then
    slow=$((slow + 1))
  fi
done
check "four polls: each 503 JSON within 1.5 s ($slow not)" test "$slow" = 0
red() { test "$(ready)" = 503; }
check "/readyz turns red" wait_for 4 red
sleep 1
b1=$(beats)
g=$(gap "$t_stop")
check "the stream kept its heartbeats ($b0 -> $b1 while Redis was stopped)" test "$b1" -ge $((b0 + 5))
check "  every 300 ms, never more than 1 s apart (longest gap $g s)" awk -v g="$g" 'BEGIN {exit !(g < 1.0)}'
check "  and is still open" kill -0 "$sp"

kill -CONT "$RPID"
log "redis resumed (SIGCONT)"
check "polls are 200 again" wait_for 10 seen
green() { test "$(ready)" = 200; }
check "/readyz is green again" wait_for 10 green
finish
