#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server-sent events (issue 19): GET /v1/submissions/{id}/events.
#   1. credentials as for the GET: none -> 401 JSON, a wrong token -> 404
#      JSON, the token in ?access_token= (EventSource) -> a stream;
#   2. a stream opened before anything happens gets every question, then
#      one event per change in version order (ids strictly increasing) and
#      heartbeats;
#   3. a late FAILED for a graded question (ignored by the apply) sends
#      nothing;
#   4. a reconnect with the Last-Event-ID of an event from mid-way gets
#      exactly the questions changed since, in their current state; with
#      the newest id, nothing;
#   5. when the last question is done: a "complete" event, then the response
#      ends; a reconnect after the end gets 204 (EventSource stops);
#   6. a submission not in the view yet (materialize SIGSTOPped): a GET is
#      404 with Retry-After: 1, a stream is held open and gets its events
#      once materialize applies the create; one with a wrong token is then
#      closed without an event; an id of that age nobody created is held
#      until results.pending_s after its time, then closed; an old one is
#      a plain 404.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export HARNESS_STAGE=hsse
export SLUICE_RESULTS_HEARTBEAT_MS=1000
export SLUICE_RESULTS_PENDING_S=10
two_answers "$work"
EV=$RESULTS_URL/v1/submissions/$SID/events
seen() { test "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID")" = 200; }
check "the view is there" wait_for 30 seen

code=$(curl -sS -D "$work/h0" -o "$work/b0" -w '%{http_code}' "$EV")
check "no credential -> 401 ($code)" test "$code" = 401
check "  as JSON" jqe '.error.code == "unauthorized"' "$(cat "$work/b0")"
code=$(curl -sS -D "$work/h0" -o "$work/b0" -w '%{http_code}' -H "Authorization: Bearer 00$TOKEN" "$EV")
check "a wrong token -> 404 ($code)" test "$code" = 404
check "  as JSON" grep -qi '^Content-Type: application/json' "$work/h0"

# events FILE: one line per event, "<id> <event> <data>" (data: the rest of the line)
events() {
  awk '/^id: /{id=$2} /^event: /{ev=$2} /^data: /{sub(/^data: /, ""); print id, ev, $0}' "$1"
}
curl -sSN -D "$work/h1" -H "Authorization: Bearer $TOKEN" "$EV" >"$work/s1" 2>/dev/null &
s1=$!
at_exit "kill $s1 2>/dev/null || true"
two() { test "$(events "$work/s1" | wc -l)" -ge 2; }
check "a stream opened: every question at once" wait_for 10 two
check "  as text/event-stream" grep -qi '^Content-Type: text/event-stream' "$work/h1"
check "  states awaiting_upload" test "$(events "$work/s1" | cut -d' ' -f3- | jq -r .state | sort -u)" = awaiting_upload
hb() { test "$(grep -c '^:' "$work/s1")" -ge 2; }
check "heartbeats (results.heartbeat_ms = 1000)" wait_for 10 hb

put_answer 0 "$work/a1.wav"
q1done() { events "$work/s1" | awk '$2=="question"' | cut -d' ' -f3- | jq -e 'select(.no == 1 and .state == "done")' >/dev/null; }
check "answer 1's states arrive, up to done" wait_for 90 q1done
events "$work/s1" >"$work/e1"
log "events: $(awk '{print $1, $2}' "$work/e1" | tr '\n' ',')"
check "  ids strictly increasing" test "$(awk 'NR>1 && $1 <= prev {b=1} {prev=$1} END {print b+0}' "$work/e1")" = 0
check "  each id the question's version in the view" \
  test "$(tail -1 "$work/e1" | awk '{print $1}')" = "$(RC HGET "$(sub_key "$SID")" v1)"
check "  more than the start and the end of answer 1 ($(wc -l <"$work/e1") events)" test "$(wc -l <"$work/e1")" -ge 4

# a late FAILED for question 1: ignored by the apply, no event
n1=$(wc -l <"$work/e1")
late_failed "$SID/1"
sleep 1.5
check "  and sent no event ($(events "$work/s1" | wc -l) events, $n1 before)" test "$(events "$work/s1" | wc -l)" = "$n1"

# resume from mid-way: the id of answer 1's first change
mid=$(awk 'NR==3 {print $1}' "$work/e1")
timeout 3 curl -sSN -H "Authorization: Bearer $TOKEN" -H "Last-Event-ID: $mid" "$EV" >"$work/r1" 2>/dev/null || true
events "$work/r1" >"$work/er1"
log "resumed from $mid: $(cat "$work/er1")"
check "a resume from mid-way gets question 1 once, in its current state" \
  test "$(cut -d' ' -f3- "$work/er1" | jq -s -c '[.[] | [.no, .state]]')" = '[[1,"done"]]'
check "  and nothing it had (no question 2)" test "$(wc -l <"$work/er1")" = 1
last=$(tail -1 "$work/e1" | awk '{print $1}')
timeout 3 curl -sSN -H "Authorization: Bearer $TOKEN" -H "Last-Event-ID: $last" "$EV" >"$work/r2" 2>/dev/null || true
check "a resume from the newest id gets no event" test "$(events "$work/r2" | wc -l)" = 0
timeout 3 curl -sSN "$EV?access_token=$TOKEN" >"$work/r3" 2>/dev/null || true
check "the token as ?access_token= opens a stream (both questions)" test "$(events "$work/r3" | wc -l)" = 2

put_answer 1 "$work/a2.wav"
ended() { ! kill -0 "$s1" 2>/dev/null; }
check "when every question is final the response ends" wait_for 90 ended
events "$work/s1" >"$work/e2"
check "  after a complete event" test "$(tail -1 "$work/e2" | awk '{print $2}')" = complete
check "  with the summary" jqe '.summary == {"total":2,"done":2,"failed":0,"complete":true}' "$(tail -1 "$work/e2" | cut -d' ' -f3-)"
check "  question 2 done before it" jqe '.no == 2 and .state == "done"' "$(tail -2 "$work/e2" | head -1 | cut -d' ' -f3-)"
check "  ids strictly increasing" test "$(awk '$2=="question" {if (NR>1 && $1 <= prev) b=1; prev=$1} END {print b+0}' "$work/e2")" = 0
fin=$(tail -1 "$work/e2" | awk '{print $1}')
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -H "Last-Event-ID: $fin" "$EV")
check "a reconnect after the end -> 204 ($code)" test "$code" = 204
timeout 3 curl -sSN -H "Authorization: Bearer $TOKEN" "$EV" >"$work/r4" 2>/dev/null || true
check "a new stream of a complete submission: both questions and complete, then the end" \
  test "$(events "$work/r4" | awk '{print $2}' | tr '\n' ' ')" = "question question complete "

# 6. before the view has it: materialize stopped (SIGSTOP) across the create
mpid=$(cat "$STAGES_DIR/materialize.pid")
kill -STOP "$mpid"
at_exit "kill -CONT $mpid 2>/dev/null || true"
new_submission "$work/a1.wav"
code=$(curl -sS -D "$work/h5" -o "$work/b5" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  "$RESULTS_URL/v1/submissions/$SID")
check "a GET before the view has it -> 404 ($code)" test "$code" = 404
check "  with Retry-After: 1" grep -qi '^Retry-After: 1' "$work/h5"
curl -sSN -D "$work/h6" -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID/events" \
  >"$work/s6" 2>/dev/null &
s6=$!
at_exit "kill $s6 2>/dev/null || true"
curl -sSN -H "Authorization: Bearer 00$TOKEN" "$RESULTS_URL/v1/submissions/$SID/events" \
  >"$work/s7" 2>/dev/null &
s7=$!
at_exit "kill $s7 2>/dev/null || true"
sleep 2
check "a stream opened before the view has it is held open" \
  sh -c "kill -0 $s6 && grep -q '^HTTP/1.1 200' '$work/h6'"
check "  and one with a wrong token too, for now" kill -0 "$s7"
check "  both counted as held (sluice_results_streams_held)" \
  test "$(metric sluice_results_streams_held '' "$(admin results)")" = 2
kill -CONT "$mpid"
arrived() { test "$(events "$work/s6" | wc -l)" -ge 1; }
check "once materialize applies the create, the held stream gets the question" wait_for 8 arrived
check "  awaiting its upload" jqe '.no == 1 and .state == "awaiting_upload"' \
  "$(events "$work/s6" | head -1 | cut -d' ' -f3-)"
closed7() { ! kill -0 "$s7" 2>/dev/null; }
check "  and the wrong token's stream is closed" wait_for 5 closed7
check "    without an event" test "$(events "$work/s7" | wc -l)" = 0
check "  and none is held any more" test "$(metric sluice_results_streams_held '' "$(admin results)")" = 0
kill "$s6" 2>/dev/null || true
# ids nobody created: one whose time is 7 s ago (3 s of results.pending_s = 10
# left), one of a day ago
uuid7() { # uuid7 MS: a UUIDv7 of that unix time in ms
  local h
  h=$(printf '%012x' "$1")
  printf '%s-%s-7%s-8%s-%s\n' "${h:0:8}" "${h:8:4}" "$(openssl rand -hex 2 | cut -c1-3)" \
    "$(openssl rand -hex 2 | cut -c1-3)" "$(openssl rand -hex 6)"
}
now_ms=$(date +%s%3N)
young=$(uuid7 $((now_ms - 7000)))
old=$(uuid7 $((now_ms - 86400000)))
t0=$SECONDS
curl -sSN -D "$work/h8" -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$young/events" \
  >/dev/null 2>&1 &
s8=$!
at_exit "kill $s8 2>/dev/null || true"
closed8() { ! kill -0 "$s8" 2>/dev/null; }
wait_for 10 closed8 || true
check "an id of 7 s ago nobody created: held, closed once results.pending_s passed ($((SECONDS - t0)) s)" \
  sh -c "grep -q '^HTTP/1.1 200' '$work/h8' && test $((SECONDS - t0)) -ge 2 && ! kill -0 $s8 2>/dev/null"
code=$(curl -sS -D "$work/h9" -o "$work/b9" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  "$RESULTS_URL/v1/submissions/$young/events")
check "  and no longer counted as held" \
  test "$(metric sluice_results_streams_held '' "$(admin results)")" = 0
check "  then its stream is a 404 ($code)" test "$code" = 404
check "    without Retry-After" sh -c "! grep -qi '^Retry-After' '$work/h9'"
code=$(curl -sS -o "$work/b10" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  "$RESULTS_URL/v1/submissions/$old/events")
check "an id of a day ago nobody created: 404 at once ($code)" test "$code" = 404
check "  as JSON" jqe '.error.code == "not_found"' "$(cat "$work/b10")"

# streams held open while results stops: a clean stop (finish checks it).
# A stream is opened once the view is there, as web/app.js does: until
# materialize applies the create (behind under load) it is a 404, which
# ends an EventSource
new_submission "$work/a1.wav"
check "the new submission's view is there" wait_for 30 seen
for _ in 1 2 3; do
  curl -sSN -H "Authorization: Bearer $TOKEN" "$RESULTS_URL/v1/submissions/$SID/events" >/dev/null 2>&1 &
  at_exit "kill $! 2>/dev/null || true"
done
held() { curl -sS "$(admin results)/metrics" | grep -q '^sluice_results_streams 3$'; }
wait_for 10 held || true
check "three streams held (sluice_results_streams $(metric sluice_results_streams '' "$(admin results)"))" held
finish
