#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Polls decided by the submission's version (issue 19): results answers 304
# from the version materialize's apply script keeps, and never a stale one.
#   1. a submission of two answers: the ETag names the hash's version "v";
#      If-None-Match with it -> 304, also for the owner's API key; a wrong
#      token with the same ETag is still 404 (the short path checks the
#      credential too);
#   2. answer 1 uploaded and graded while a client polls with its last ETag
#      every 100 ms: the old ETag then gets 200 with the new state, the
#      states it saw never go back, and its last ETag gets 304;
#   3. a late FAILED for the graded question (lower rank: ignored by the
#      apply) leaves the version alone: still 304;
#   4. answer 2 uploaded while a client alternates a full GET and a poll:
#      once a full GET shows the change, the poll after it is 200 (the
#      version cache follows the change feed);
#   5. an ETag with another polling hint or another stage list -> 200.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export HARNESS_STAGE=hpollv
two_answers "$work"
# get [CURL ARGS...]: GET the view with $TOKEN; status code out, headers in
# $work/h, body in $work/b
get() {
  curl -sS -D "$work/h" -o "$work/b" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$@" \
    "$RESULTS_URL/v1/submissions/$SID"
}
etag_of() { awk 'tolower($1)=="etag:"{print $2}' "$work/h" | tr -d '\r'; }
seen() { test "$(get)" = 200; }
check "the view is there" wait_for 30 seen

code=$(get); e1=$(etag_of)
check "the ETag names a version ($e1)" grep -qE '^"[0-9]+-[0-9]+-[0-9a-f]{8}"$' <<<"$e1"
v=$(RC HGET "$(sub_key "$SID")" v)
check "  the hash's version ($v)" test "${e1:1:${#v}+1}" = "$v-"
rm -f "$work/b"
code=$(get -H "If-None-Match: $e1")
check "If-None-Match with it -> 304 ($code)" test "$code" = 304
check "  without a body" test ! -s "$work/b"
check "  with the same ETag and Retry-After" grep -qi "^Retry-After: 2" "$work/h"
code=$(curl -sS -o /dev/null -w '%{http_code}' "${KEY_AUTH[@]}" -H "If-None-Match: $e1" "$RESULTS_URL/v1/submissions/$SID")
check "the owner's API key with it -> 304 ($code)" test "$code" = 304
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer x$TOKEN" -H "If-None-Match: $e1" "$RESULTS_URL/v1/submissions/$SID")
check "a wrong token with it -> 404, not 304 ($code)" test "$code" = 404
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -H "If-None-Match: $e1" "$RESULTS_URL/v1/submissions/00000000-0000-7000-8000-000000000000")
check "another submission's id with it -> 404 ($code)" test "$code" = 404

# a client polling with its last ETag while answer 1 goes through the
# pipeline: one line per poll, "<code> <etag> <states>"
poller() {
  local e=$1 code
  : >"$work/polls"
  while :; do
    code=$(get -H "If-None-Match: $e")
    if [[ $code == 200 ]]; then
      e=$(etag_of)
      echo "200 $e $(jq -c '[.questions[].state]' "$work/b") $(jq '.stages as $st | .questions[0].state as $s | $st | index($s)' "$work/b")" >>"$work/polls"
    else
      echo "$code $e" >>"$work/polls"
    fi
    [[ -e $work/stop ]] && break
    sleep 0.1
  done
}
poller "$e1" &
ppid_=$!
at_exit "kill $ppid_ 2>/dev/null || true"
put_answer 0 "$work/a1.wav"
one_done() { view_of "$SID" "$TOKEN" | jq -e '.questions[0].state == "done"' >/dev/null; }
check "answer 1 graded" wait_for 90 one_done
sleep 0.5
touch "$work/stop"
wait "$ppid_"
log "polls: $(awk '{print $1}' "$work/polls" | sort | uniq -c | tr -s ' \n' ' '); states seen: $(awk '$1==200 {print $3}' "$work/polls" | uniq | tr '\n' ' ')"
last=$(awk '$1==200' "$work/polls" | tail -1)
check "the poller saw the change (200s: $(grep -c '^200' "$work/polls"))" grep -q '^200' "$work/polls"
check "  its last 200 shows question 1 done ($last)" grep -q '\["done","awaiting_upload"\]' <<<"$last"
check "  every poll after it was 304" \
  test "$(awk -v e="$(awk '{print $2}' <<<"$last")" 'f && $1 != 304 {n++} $1==200 && $2==e {f=1} END {print n+0}' "$work/polls")" = 0
# question 1's place in the stage list, poll after poll
back=$(awk '$1==200 {if ($4 == "null" || $4 < prev) b=1; prev=$4} END {print b+0}' "$work/polls")
check "  the states it saw never went back" test "$back" = 0
code=$(get -H "If-None-Match: $e1")
check "the first ETag now -> 200 ($code)" test "$code" = 200
e2=$(etag_of)
check "  with the new state and a new ETag ($e2)" test "$e2" != "$e1"
check "the new ETag -> 304" test "$(get -H "If-None-Match: $e2")" = 304

# a late FAILED for question 1 (the runtime's dead-letter hook, through
# sluice-harness): lower than done, so the apply ignores it
v2=$(RC HGET "$(sub_key "$SID")" v)
late_failed "$SID/1"
check "  question 1 is still done" jqe '.questions[0].state == "done"' "$(view_of "$SID" "$TOKEN")"
check "  the version did not move ($v2 -> $(RC HGET "$(sub_key "$SID")" v))" test "$(RC HGET "$(sub_key "$SID")" v)" = "$v2"
check "  the ETag still gets 304" test "$(get -H "If-None-Match: $e2")" = 304

# the 304 path's version cache is kept current by the change feed: once a
# full GET shows answer 2 moving, a poll made after it is never 304
put_answer 1 "$work/a2.wav"
stale=0 moved=0
for _ in $(seq 600); do
  st=$(view_of "$SID" "$TOKEN" | jq -r '.questions[1].state')
  code=$(get -H "If-None-Match: $e2")
  [[ $st != awaiting_upload && $code == 304 ]] && stale=$((stale + 1))
  [[ $code == 200 ]] && { moved=1; break; }
  sleep 0.05
done
check "answer 2 moved, and the old ETag got 200" test "$moved" = 1
check "  never a 304 after a full GET showed the change ($stale)" test "$stale" = 0

ver=${e2%%-*}
ver=${ver#\"}
code=$(get -H "If-None-Match: \"$ver-5-${e2##*-}")
check "the same version with another polling hint -> 200 ($code)" test "$code" = 200
code=$(get -H "If-None-Match: \"$ver-2-00000000\"")
check "the same version with another stage list -> 200 ($code)" test "$code" = 200
finish
