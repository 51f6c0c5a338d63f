#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One answer's whole journey as a trace in a real Jaeger (tools/devstack
# with DEVSTACK_JAEGER=1; the stages export OTLP/HTTP to it), read back
# from Jaeger's query API and checked by trace_check.py:
#  - a submission of two questions: one trace per question (presign's 201
#    names it), with the spans of presign, ingest, preflight, stt, grade,
#    materialize and notify, each stage's span a child of the one before,
#    the provider calls children of stt's and grade's spans, ingest's HEAD
#    and stt's GET of the answer children of theirs;
#  - a question whose stt call failed (the fake provider answers 503 for
#    its first seconds) shows both attempts, the second a child of the
#    first (the retry copy carries the trace);
#  - a create sent with a traceparent lands in the client's trace: its root
#    is presign's span, a child of the client's span; a poll of results
#    sent with it is a span there too;
#  - a dead-lettered answer (bytes that are no audio: preflight refuses
#    them) replayed with `sluicectl dlq replay`: the replay's trace starts
#    with sluicectl's "dlq replay" span, which links to the dead letter's
#    trace, and preflight's span of the replayed message is its child;
#  - the checks can fail: with grade writing no trace context
#    (trace.propagate=false) trace_check.py finds the journey broken;
#  - log lines of a traced message carry its trace id.
export DEVSTACK_JAEGER=1
source "$(dirname "$0")/lib.sh"
at_exit '"$ROOT/tools/devstack" jaeger-stop >/dev/null 2>&1 || true'
[[ -n ${JAEGER_QUERY_URL:-} && -n ${SLUICE_TRACE_ENDPOINT:-} ]] ||
  { fail "the dev stack did not start Jaeger"; finish; }
JQ=$JAEGER_QUERY_URL
CHECK=$(dirname "$0")/trace_check.py
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export SLUICE_TRACE_FLUSH_MS=200 SLUICE_BREAKER_MIN_CALLS=100000

# the fake provider: every call 503 for its first OUTAGE_S seconds, then 0.2 s answers
OUTAGE_S=12
FAKE=127.0.0.1:$((BASE + 62))
mkdir -p "$STAGES_DIR"
"$FAKEPROVIDER" --set fakeprovider.listen="$FAKE" --set admin.listen=127.0.0.1:$((BASE + 162)) \
  --set fakeprovider.stt_latency_ms=200 --set fakeprovider.chat_latency_ms=200 \
  --set fakeprovider.stt_jitter_ms=0 --set fakeprovider.chat_jitter_ms=0 \
  --set fakeprovider.outage=0-$OUTAGE_S >"$STAGES_DIR/fakeprovider.log" 2>&1 &
fake=$!
fake_t0=$SECONDS
at_exit "kill $fake 2>/dev/null || true"
wait_for 20 curl -fs -o /dev/null "http://$FAKE/stats" || fail "fake provider did not start"
export SLUICE_STT_PLUGIN=openai SLUICE_GRADE_PLUGIN=openai
export SLUICE_STT_OPENAI_BASE_URL=http://$FAKE SLUICE_GRADE_OPENAI_BASE_URL=http://$FAKE
stages_up

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
espeak-ng -s 140 -w "$work/b.wav" "My favorite food is pizza because it is warm and delicious."
head -c 60000 /dev/urandom >"$work/noise.wav"

# done_state SID TOKEN N: the submission's N questions have ended (done or failed)
ended() { jqe "[.questions[] | select(.state == \"done\" or .state == \"failed\")] | length == $3" "$(view_of "$1" "$2")"; }
# trace ID FILE: Jaeger's answer for the trace, once it holds SPANS spans or more
trace_has() { curl -fsS "$JQ/api/traces/$1" -o "$2" 2>/dev/null && jqe ".data[0].spans | length >= $3" "$(cat "$2")"; }

# ---- the retried question: uploaded while the provider fails -----------------
new_submission "$work/a.wav" || fail "create R"
R_SID=$SID R_TOK=$TOKEN R_TRACE=$(jq -r '.questions[0].trace_id' <<<"$SUB_REPLY")
put_answer 0 "$work/a.wav" || fail "upload R"
check "the retried question's upload came while the provider failed ($((SECONDS - fake_t0)) s of $OUTAGE_S)" \
  test $((SECONDS - fake_t0)) -lt $((OUTAGE_S - 3))
check "presign's 201 names each question's trace (${R_TRACE})" grep -Eqx "[0-9a-f]{32}" <<<"$R_TRACE"

# ---- two questions, and one sent with the client's traceparent ------------------
sleep $((OUTAGE_S + 1 - (SECONDS - fake_t0) > 0 ? OUTAGE_S + 1 - (SECONDS - fake_t0) : 0))
new_submission "$work/a.wav" "$work/b.wav" || fail "create M"
M_SID=$SID M_TOK=$TOKEN M_REPLY=$SUB_REPLY
put_answer 0 "$work/a.wav" && put_answer 1 "$work/b.wav" || fail "upload M"
CT=$(openssl rand -hex 16) CS=$(openssl rand -hex 8)
C_REPLY=$(curl "${KEY_AUTH[@]}" -fsS -X POST "$PRESIGN_URL/v1/submissions" \
  -H 'Content-Type: application/json' -H "traceparent: 00-$CT-$CS-01" -H "tracestate: client=1" \
  -d "{\"questions\":[{\"content_type\":\"audio/wav\",\"size\":$(stat -c %s "$work/b.wav")}]}") ||
  fail "create C"
SUB_REPLY=$C_REPLY
C_SID=$(jq -r .submission_id <<<"$C_REPLY") C_TOK=$(jq -r .results_token <<<"$C_REPLY")
put_answer 0 "$work/b.wav" || fail "upload C"
check "the create sent with a traceparent is in the client's trace" \
  test "$(jq -r '.questions[0].trace_id' <<<"$C_REPLY")" = "$CT"

# ---- an answer that is no audio: dead-lettered by preflight ---------------------
new_submission "$work/noise.wav" || fail "create D"
D_SID=$SID D_TOK=$TOKEN D_TRACE=$(jq -r '.questions[0].trace_id' <<<"$SUB_REPLY")
put_answer 0 "$work/noise.wav" || fail "upload D"

wait_for 120 ended "$R_SID" "$R_TOK" 1 || fail "R did not end: $(view_of "$R_SID" "$R_TOK")"
wait_for 60 ended "$M_SID" "$M_TOK" 2 || fail "M did not end: $(view_of "$M_SID" "$M_TOK")"
wait_for 60 ended "$C_SID" "$C_TOK" 1 || fail "C did not end: $(view_of "$C_SID" "$C_TOK")"
wait_for 60 ended "$D_SID" "$D_TOK" 1 || fail "D did not end: $(view_of "$D_SID" "$D_TOK")"

# journey NAME TRACE ARGS...: trace_check.py on the trace, once it has settled
journey() {
  local name=$1 id=$2
  shift 2
  wait_for 30 trace_has "$id" "$work/$name.json" 10 || true
  sleep 1.5 # the last stages' spans (materialize, notify) come a flush later
  curl -fsS "$JQ/api/traces/$id" -o "$work/$name.json" || return 1
  python3 "$CHECK" "$work/$name.json" "$@" >"$work/$name.check" 2>&1
}
for i in 0 1; do
  id=$(jq -r ".questions[$i].trace_id" <<<"$M_REPLY")
  journey "m$i" "$id" || true
  check "question $((i + 1)): one trace through every stage ($(grep -c '^ok' "$work/m$i.check") ok; $(grep -m1 '^broken' "$work/m$i.check"))" \
    journey "m$i" "$id"
done
# storage_under FILE STAGE-SPAN OP: a span OP is a child of the named process span
storage_under() {
  jq -e --arg p "$2" --arg op "$3" '(.data[0].spans | map(select(.operationName == $p)) | map(.spanID)) as $ids
    | any(.data[0].spans[]; .operationName == $op
          and any(.references[]; .refType == "CHILD_OF" and (.spanID as $s | $ids | index($s) != null)))' \
    "$1" >/dev/null 2>&1
}
check "ingest's HEAD of the answer is a span under its own" \
  storage_under "$work/m0.json" "process storage-events" "storage HEAD"
check "stt's GET of the answer is a span under its own" \
  storage_under "$work/m0.json" "process stt.requests" "storage GET"
check "the two questions have traces of their own" \
  test "$(jq -r '[.questions[].trace_id] | unique | length' <<<"$M_REPLY")" = 2
check "the retried question shows both stt attempts ($(grep -m1 '^broken\|stt' "$work/r.check" 2>/dev/null))" \
  journey r "$R_TRACE" --attempts stt=2
retried=$(jq '[.data[0].spans[] | select(.operationName | startswith("process stt.")) | .tags[] | select(.key == "sluice.outcome") | .value] | sort | join(",")' "$work/r.json")
check "  ... the first said retry, the last done ($retried)" jqe 'test("retry") and test("done")' "$retried"
check "the client's trace holds the question, under the client's span" journey c "$CT" --client-span "$CS"
# the client polls within its trace: results' span of the request joins it
curl -fsS -H "Authorization: Bearer $C_TOK" -H "traceparent: 00-$CT-$(openssl rand -hex 8)-01" \
  "$RESULTS_URL/v1/submissions/$C_SID" >/dev/null || fail "poll C"
polled() { jqe 'any(.data[0].spans[]; .operationName == "HTTP GET" and any(.tags[]; .key == "http.response.status_code" and .value == 200))' \
  "$(curl -fsS "$JQ/api/traces/$CT")"; }
check "a poll sent with the client's traceparent is a span of results in the client's trace" wait_for 10 polled

# ---- the replay links to the dead letter's trace --------------------------------
wait_for 30 trace_has "$D_TRACE" "$work/d.json" 4 || true
check "the dead-lettered answer's trace ends in preflight's failed span" \
  jqe '[.data[0].spans[] | select(.operationName == "process preflight.requests") | .tags[] | select(.key == "sluice.outcome") | .value] | index("failed") != null' "$(cat "$work/d.json")"
"$SLUICECTL" dlq replay --submission "$D_SID" --yes >"$work/replay.out" 2>&1 || true # fails again: exit 1
replay_trace() { # the trace of sluicectl's "dlq replay" span that links to D's
  curl -fsS "$JQ/api/traces?service=sluicectl&operation=dlq%20replay&limit=50&lookback=1h" |
    jq -r --arg d "$D_TRACE" '.data[] | select(any(.spans[]; any(.references[]; .refType == "FOLLOWS_FROM" and .traceID == $d))) | .traceID' | head -n1
}
wait_for 30 test -n "$(replay_trace)" || true
RP=$(replay_trace)
check "sluicectl's replay span links to the dead letter's trace (${RP:-none})" test -n "$RP"
replayed_under() {
  curl -fsS "$JQ/api/traces/$RP" -o "$work/rp.json" &&
    jqe '(.data[0].spans | map(select(.operationName == "dlq replay")) | .[0].spanID) as $r
         | any(.data[0].spans[]; .operationName == "process preflight.requests"
               and any(.references[]; .refType == "CHILD_OF" and .spanID == $r))' "$(cat "$work/rp.json")"
}
check "  ... and preflight's span of the replayed message is its child" wait_for 20 replayed_under

# ---- trace ids in the log lines ---------------------------------------------------
id0=$(jq -r '.questions[0].trace_id' <<<"$M_REPLY")
for st in ingest stt grade; do
  check "$st's log lines about question 1 carry its trace id" \
    grep -q "\"trace_id\":\"$id0\"" "$STAGES_DIR/$st.log"
done

# ---- the checks can fail: grade passes no context on ----------------------------
"$ROOT/tools/stages" kill grade >/dev/null
STAGES_ARGS_grade="--set trace.propagate=false" stages_up
new_submission "$work/b.wav" || fail "create P"
P_REPLY=$SUB_REPLY
put_answer 0 "$work/b.wav" || fail "upload P"
wait_for 60 ended "$SID" "$TOKEN" 1 || fail "P did not end"
P_TRACE=$(jq -r '.questions[0].trace_id' <<<"$P_REPLY")
journey p "$P_TRACE" && fail "trace_check.py found a whole journey with grade's propagation off"
check "with grade's propagation off the journey is broken after grade ($(grep -m1 '^broken' "$work/p.check"))" \
  grep -q "^broken: no span of materialize is a child of grade's" "$work/p.check"
"$ROOT/tools/stages" kill grade >/dev/null
stages_up
finish
