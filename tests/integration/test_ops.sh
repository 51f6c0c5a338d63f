#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Operations against the real pipeline: metrics, deploy/ files and the
# operator/support/client commands of sluicectl.
#  - usage errors of status / submission / submit exit 2 with a message and
#    create nothing; unreachable services exit 1;
#  - a known workload (2 submissions, 3 spoken answers) through
#    `sluicectl submit` (--json and table output) completes;
#  - every stage's /metrics then parses with the Prometheus client's parser,
#    histograms are consistent, and the counts match the workload exactly:
#    presign accepted 2, stt and grade finished 3 with 3 provider calls and 3
#    latency observations, materialize observed 3 accept-to-done latencies;
#  - deploy/prometheus/alerts.yaml and deploy/grafana/sluice.json query only
#    metrics those scrapes export and every alert has a runbook section
#    (tests/integration/check_metrics.py; shown to fail on a bad name);
#  - `sluicectl submission ID` shows the submission's messages on each topic
#    (5 states per question on results) and its Redis view;
#  - `sluicectl status` shows members, zero lag, closed breakers, all
#    endpoints up; with stt stopped a new question shows as stt lag with no
#    members and an oldest age, and `--watch --json` gives rates;
#  - after stt comes back the waiting question completes (accept-to-done
#    count 4).
source "$(dirname "$0")/lib.sh"
PY=${TEST_PYTHON:-python3}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ADMINS=$(for st in $("$ROOT/tools/stages" list); do printf '127.0.0.1:%d,' "$("$ROOT/tools/stages" port "$st")"; done)
export SLUICECTL_ADMIN=${ADMINS%,}
export PRESIGN_URL

ctl() { # ctl ARGS... : stdout in $work/out, stderr in $work/err, status in $RC
  RC=0
  "$SLUICECTL" "$@" >"$work/out" 2>"$work/err" || RC=$?
  cat "$work/err" >>"$work/all.err"
}
expect_usage() { # expect_usage WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  ctl "$@"
  check "usage: $what exits 2 ($RC)" test "$RC" = 2
  check "usage: $what says why" grep -q -- "$pat" "$work/err"
}

stages_up
espeak-ng -s 140 -w "$work/a1.wav" "On weekends I usually go hiking in the mountains with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favorite food is pizza because it is warm and delicious."
espeak-ng -s 140 -w "$work/a3.wav" "Last summer I traveled to the beach with my brother."
printf 'not audio' >"$work/notes.txt"

# 1 -------------------------------------------------------------------
accepted0=$(metric sluice_submissions_total 'outcome="accepted"' "$(admin presign)")
expect_usage "status takes no arguments" "takes no arguments" status extra
expect_usage "--interval without --watch" "only goes with --watch" status --interval 2
expect_usage "--interval 0" "1..3600" status --watch --interval 0
expect_usage "status --prompt" "does not apply" status --prompt x
expect_usage "submission without id" "wants ID" submission
expect_usage "submission with a non-UUID" "not a submission id" submission 42
expect_usage "submit without files" "wants FILE" submit
expect_usage "submit a missing file" "no such file" submit "$work/nope.wav"
expect_usage "submit an unknown type" "unknown audio type" submit "$work/notes.txt"
expect_usage "more prompts than files" "more --prompt options" submit --prompt a --prompt b "$work/a1.wav"
expect_usage "--wait junk" "--wait wants" submit --wait soon "$work/a1.wav"
expect_usage "unknown command" "unknown command" statuses
check "usage errors created no submission" test \
  "$(metric sluice_submissions_total 'outcome="accepted"' "$(admin presign)")" = "$accepted0"
ctl submit --presign http://127.0.0.1:1 "$work/a1.wav"
check "submit to an unreachable presign exits 1 ($RC)" test "$RC" = 1
check "... and names the failure" grep -q "creating the submission" "$work/err"
ctl status --brokers 127.0.0.1:1 --timeout 2
check "status with an unreachable Kafka exits 1 ($RC)" test "$RC" = 1

# 2 -------------------------------------------------------------------
ctl submit --json --prompt "What do you do on weekends?" "$work/a1.wav" \
  --prompt "What is your favorite food?" "$work/a2.wav"
check "submit --json exits 0 ($RC)" test "$RC" = 0
res=$(cat "$work/out")
check "submit --json prints the complete results (2 of 2 done)" \
  jqe '.summary.total == 2 and .summary.done == 2 and .poll.stop == true' "$res"
check "submit drew upload progress on stderr" grep -q '\] .*100%' "$work/err"
sid=$(jq -r .submission_id <<<"$res")
ctl submit --prompt "Tell me about a trip." "$work/a3.wav"
check "submit (table) exits 0 ($RC)" test "$RC" = 0
check "submit (table) summarises" grep -q "1 of 1 done, 0 failed" "$work/out"
check "submit (table) lists the question" grep -qE "^1 +done +[0-9]+ " "$work/out"

# 3 -------------------------------------------------------------------
# counts settle once every stage committed: wait for materialize's view
# materialize's count of questions done (evaluated again on every poll)
done_count() { metric sluice_accept_to_done_seconds_count 'outcome="done"' "$(admin materialize)"; }
wait_for 20 eval '[[ "$(done_count)" == 3 ]]' || true
for st in $("$ROOT/tools/stages" list); do curl -fsS "$(admin "$st")/metrics" >"$work/m-$st.txt"; done
m() { awk -v n="$1{$2}" '$1 == n {print $2; f=1} END {if (!f) print "absent"}' "$work/m-$3.txt"; }
check "presign accepted 2 submissions" test "$(($(m sluice_submissions_total 'outcome="accepted"' presign) - accepted0))" = 2
check "preflight passed 3 on" test "$(m sluice_messages_total 'stage="preflight",outcome="done"' preflight)" = 3
check "stt finished 3" test "$(m sluice_messages_total 'stage="stt",outcome="done"' stt)" = 3
check "stt called its provider 3 times, all ok" \
  test "$(m sluice_provider_calls_total 'stage="stt",provider="stt-pocketsphinx",result="ok"' stt)" = 3
check "stt observed 3 provider latencies" \
  test "$(m sluice_provider_call_seconds_count 'stage="stt",provider="stt-pocketsphinx"' stt)" = 3
check "stt: no transient failures" \
  test "$(m sluice_provider_calls_total 'stage="stt",provider="stt-pocketsphinx",result="transient_failure"' stt)" = 0
check "grade finished 3" test "$(m sluice_messages_total 'stage="grade",outcome="done"' grade)" = 3
check "grade observed 3 provider latencies" \
  test "$(m sluice_provider_call_seconds_count 'stage="grade",provider="grade-rubric"' grade)" = 3
check "materialize observed 3 accept-to-done latencies" \
  test "$(m sluice_accept_to_done_seconds_count 'outcome="done"' materialize)" = 3
check "accept-to-done sum is positive and under a minute per question" \
  awk -v s="$(m sluice_accept_to_done_seconds_sum 'outcome="done"' materialize)" 'BEGIN {exit !(s > 0 && s < 180)}'
check "no question failed" test "$(m sluice_accept_to_done_seconds_count 'outcome="failed"' materialize)" = 0
check "stt holds partitions" awk -v v="$(m sluice_assigned_partitions 'stage="stt"' stt)" 'BEGIN {exit !(v > 0)}'
check "stt exports consumer lag per partition" grep -q '^sluice_consumer_lag_messages{stage="stt",topic="stt.requests",partition="0"} ' "$work/m-stt.txt"
check "nothing dead-lettered" test "$(m sluice_messages_total 'stage="stt",outcome="dead_lettered"' stt)" = 0

rc=0
"$PY" "$ROOT/tests/integration/check_metrics.py" "$ROOT" "$work"/m-*.txt >"$work/check.log" 2>&1 || rc=$?
check "scrapes parse; alerts and dashboard query exported metrics ($(tail -1 "$work/check.log"))" test "$rc" = 0
((rc == 0)) || grep -v '^ok' "$work/check.log" >&2
# the checker can fail: an alert on a metric nobody exports
mkdir -p "$work/bad/deploy/prometheus" "$work/bad/deploy/grafana" "$work/bad/docs"
cp "$ROOT/docs/operations.md" "$work/bad/docs/"
cp "$ROOT/deploy/grafana/sluice.json" "$work/bad/deploy/grafana/"
sed 's/sluice_oldest_unprocessed_age_seconds/sluice_no_such_metric/' \
  "$ROOT/deploy/prometheus/alerts.yaml" >"$work/bad/deploy/prometheus/alerts.yaml"
rc=0
"$PY" "$ROOT/tests/integration/check_metrics.py" "$work/bad" "$work"/m-*.txt >"$work/bad.log" 2>&1 || rc=$?
check "the checker rejects an alert on an unexported metric" test "$rc" = 1
check "... naming it" grep -q "sluice_no_such_metric is not exported" "$work/bad.log"

# 4 -------------------------------------------------------------------
ctl submission "$sid" --json
check "submission ID exits 0 ($RC)" test "$RC" = 0
h=$(cat "$work/out")
check "history has the SubmissionCreated" jqe '[.events[] | select(.topic == "submissions")] | length == 1' "$h"
check "history has both uploads' storage events, and none for preflight's two FLACs (stored through the gateway without notifications)" \
  jqe '[.events[] | select(.topic == "storage-events") | .message | tostring | test("derived/")] | (length == 2) and (map(select(.)) | length == 0)' "$h"
check "history has 2 preflight requests" jqe '[.events[] | select(.topic == "preflight.requests")] | length == 2' "$h"
check "history has 2 stt requests and 2 grade requests" \
  jqe '([.events[] | select(.topic == "stt.requests")] | length) == 2 and ([.events[] | select(.topic == "grade.requests")] | length) == 2' "$h"
check "history has 5 states per question on results (queued, checking, transcribing, grading, done)" \
  jqe '[.events[] | select(.topic == "results")] | length == 10' "$h"
check "history is in time order" jqe '[.events[].timestamp_ms] | . == sort' "$h"
check "history decodes the final state" jqe '[.events[] | select(.topic == "results") | .message.state] | index("DONE") != null' "$h"
check "Redis view: both questions done" jqe '.redis.q1.state == "done" and .redis.q2.state == "done"' "$h"
check "Redis view leaves out the token digest" jqe '.redis | has("token") | not' "$h"
ctl submission "$sid"
check "submission ID (table) lists the topics" grep -q "grade.requests" "$work/out"
ctl submission 01900000-0000-7000-8000-000000000000
check "an unknown submission exits 1 ($RC)" test "$RC" = 1
check "... and says so" grep -q "nothing known about submission" "$work/err"

# 5 -------------------------------------------------------------------
wait_for 15 sh -c '"$SLUICECTL" status --json 2>/dev/null | jq -e "[.stages[].lag] | add == 0" >/dev/null' || true
ctl status --json
check "status --json exits 0 ($RC)" test "$RC" = 0
s=$(cat "$work/out")
check "status: every consuming stage has a member" jqe '[.stages[].members] | all(. >= 1)' "$s"
check "status: no lag after the workload" jqe '[.stages[].lag] | add == 0' "$s"
check "status: all 9 admin endpoints up and ready" jqe '[.processes[] | select(.up and .ready)] | length == 9' "$s"
check "status: endpoints name their process" jqe '[.processes[].stage] | sort == ["erase","grade","ingest","materialize","notify","preflight","presign","results","stt"]' "$s"
check "status: stt breaker closed" jqe '.stages[] | select(.stage == "stt") | .breakers[0] == {"provider":"stt-pocketsphinx","state":"closed"}' "$s"
check "status: rates measured" jqe '[.stages[].rate_in_per_s] | all(type == "number")' "$s"
check "status: providers listed" jqe '[.providers[].provider] | index("stt-pocketsphinx") != null' "$s"
ctl status
check "status (table) has the stage table" grep -qE "^stt +1 +Stable +0 " "$work/out"

# stt down: a new question waits at stt with nobody consuming
kill -TERM "$(cat "$STAGES_DIR/stt.pid")"
wait_for 30 sh -c "! kill -0 $(cat "$STAGES_DIR/stt.pid") 2>/dev/null"
ctl submit --wait 3 "$work/a1.wav"
check "submit gives up after --wait with exit 1 ($RC)" test "$RC" = 1
check "... saying so" grep -q "not complete after 3 s" "$work/err"
wait_for 20 sh -c '"$SLUICECTL" status --json 2>/dev/null | jq -e ".stages[] | select(.stage == \"stt\") | .members == 0 and .lag >= 1" >/dev/null' || true
ctl status --json
s=$(cat "$work/out")
check "status: stt has lag and no members" jqe '.stages[] | select(.stage == "stt") | .members == 0 and .lag == 1' "$s"
check "status: the waiting question has an age" jqe '.stages[] | select(.stage == "stt") | .oldest_waiting_s > 0' "$s"
check "status: stt's endpoint is down" jqe '[.processes[] | select(.up | not)] | length == 1' "$s"
timeout 5 "$SLUICECTL" status --watch --interval 1 --json >"$work/watch" 2>>"$work/all.err" || true
check "status --watch --json printed at least 2 snapshots" test "$(grep -c . "$work/watch")" -ge 2
check "status --watch: later snapshots have rates" \
  jqe '.stages[0].rate_out_per_s | type == "number"' "$(sed -n 2p "$work/watch")"
stages_up # starts stt again
wait_for 60 eval '[[ "$(done_count)" == 4 ]]' || true
check "the waiting question completed after stt came back" \
  test "$(metric sluice_accept_to_done_seconds_count 'outcome="done"' "$(admin materialize)")" = 4

if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work/all.err"; then
  fail "sanitizer report from sluicectl:"
  grep -E -A20 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work/all.err" | head -40 >&2
fi
finish
