#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Erasure in flight (issue 46, docs/privacy.md), with crypto.kek set and the
# fake provider as STT and grader: grade is not running, so an answer waits
# in grade.requests once stt has transcribed it (the view says grading).
# The submission is then erased, and grade started again: it finds the
# erased sentinel where the data key was and drops the answer, so the
# provider gets no grading call for it, nothing is dead-lettered, and the
# drop is counted (sluice_erased_dropped_total). A second submission,
# waiting beside it, is graded as usual. Late copies of two of the erased
# submission's statuses (one with nothing sealed, one sealed, whose data
# key materialize remembers), redelivered to materialize, are dropped too
# and bring no Redis key of it back.
# TEST_GRADE_SYNC=1 (ctest's .sync run): grade with the rubric plugin, SYNC,
# which runs by way of process() with the data key its claim read
# (sl_stage_opts.data_key; before, a keyed SYNC plugin went by way of
# start): no provider call at all, and its runs counted where process() ran.
source "$(dirname "$0")/lib.sh"
SYNC=${TEST_GRADE_SYNC:-}
export SLUICE_CRYPTO_KEK=${SLUICE_CRYPTO_KEK-$(openssl rand -hex 32)}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
fake_up 100 100 0
"$ROOT/tools/stages" up --replicas grade=0 >/dev/null # grade is started after the erasure

espeak-ng -s 150 -w "$work/a.wav" "On weekends I usually go hiking with my friends."
new_submission "$work/a.wav" || { fail "no submission"; finish; }
put_answer 0 "$work/a.wav"
erased_sid=$SID
new_submission "$work/a.wav" || { fail "no second submission"; finish; }
put_answer 0 "$work/a.wav"
kept_sid=$SID
grading() { jqe '.questions[0].state == "grading"' "$(view_of "$1" "$SLUICE_API_KEY")"; }
wait_for 120 grading "$erased_sid" || true
wait_for 60 grading "$kept_sid" || true
check "the first answer waits between stt and grade" grading "$erased_sid"
check "the second one too" grading "$kept_sid"

stats0=$(curl -fsS "http://$FAKE/stats")
rc=0
"$SLUICECTL" submission delete "$erased_sid" --actor inflight-test >"$work/delete.out" 2>&1 || rc=$?
check "sluicectl submission delete succeeds (exit $rc)" test "$rc" = 0
if [[ -n $SYNC ]]; then
  SLUICE_GRADE_PLUGIN=rubric "$ROOT/tools/stages" scale grade 1 >/dev/null
else
  "$ROOT/tools/stages" scale grade 1 >/dev/null
fi

done_view() { jqe '.questions[0].state == "done"' "$(view_of "$kept_sid" "$SLUICE_API_KEY")"; }
wait_for 120 done_view || true
check "the second submission is graded" done_view
dropped() { at_least 1 metric sluice_erased_dropped_total '' "$(admin grade)"; }
wait_for 30 dropped || true
check "grade dropped the erased submission's answer (sluice_erased_dropped_total)" dropped
sleep 2 # anything later would be a call the provider should not have had
stats1=$(curl -fsS "http://$FAKE/stats")
calls=$(provider_calls "$stats0" "$stats1" chat)
if [[ -n $SYNC ]]; then
  check "no grading call: the rubric grades ($calls)" test "$calls" = 0
  runs=$(curl -fsS "$(admin grade)/metrics" | awk '/^sluice_process_runs_total\{/ {n += $2} END {print n + 0}')
  check "grade ran the rubric by way of process(), its data key read with its claim ($runs runs)" \
    test "$runs" -ge 1
  kept=$(view_of "$kept_sid" "$SLUICE_API_KEY")
  check "the second submission's grade is the rubric's, its feedback opened by materialize" \
    jqe '.questions[0].grade.engine == "rubric" and (.questions[0].grade.feedback | length > 0)' "$kept"
  # what grade wrote for it to the results topic (its statuses name the
  # stage "grade", its length 5 before it): sealed with the key its claim
  # read, the magic of sealed bytes in each and its feedback in none
  fb=$(jq -r '.questions[0].grade.feedback' <<<"$kept")
  kcat -C -b "$SLUICE_KAFKA_BROKERS" -t results -o beginning -e -q -J 2>/dev/null |
    jq -c --arg k "$kept_sid/" 'select((.key // "") | startswith($k)) | select(.payload | contains("\u0005grade"))' \
      >"$work/results.jsonl" || true
  n=$(wc -l <"$work/results.jsonl")
  n_sealed=$(jq -s --arg fb "$fb" '[.[] | select((.payload | contains("SLS1")) and (.payload | contains($fb) | not))] | length' "$work/results.jsonl")
  check "grade sealed what it wrote ($n_sealed of its $n record(s) sealed, the feedback in none)" \
    test "$n" -ge 1 -a "$n_sealed" = "$n"
else
  check "one grading call after the erasure, the second submission's ($calls)" test "$calls" = 1
fi
# Late copies of two statuses materialize applied before the erasure (a
# redelivery): the question's first (nothing sealed in it: materialize
# needs no key, and its apply checks only that the submission has one)
# and its last (stt's, its transcript sealed: materialize still remembers
# the submission's data key). Only the apply script's check of the key in
# Redis (apply_lua.h, KEYS[8]) keeps either from writing the erased view
# again.
B=$SLUICE_KAFKA_BROKERS
kcat -C -b "$B" -t results -o beginning -e -q -f '%p %o %k\n' 2>/dev/null |
  awk -v k="$erased_sid/1" '$3 == k' >"$work/statuses.txt" || true
late=0
for pick in 1 '$'; do
  read -r p o _ < <(sed -n "${pick}p" "$work/statuses.txt")
  [[ -n ${o:-} ]] || continue
  kcat -C -b "$B" -t results -p "$p" -o "$o" -c 1 -e -q -f '%s' >"$work/late.bin" 2>/dev/null
  kcat -P -b "$B" -t results -p "$p" -k "$erased_sid/1" "$work/late.bin"
  late=$((late + 1))
done
check "two earlier statuses of the erased submission sent again ($late)" test "$late" = 2
mat_dropped() { at_least 2 metric sluice_erased_dropped_total '' "$(admin materialize)"; }
check "materialize dropped both (sluice_erased_dropped_total)" wait_for 30 mat_dropped
left=$(RC --scan --pattern "*$erased_sid*" | head -5 || true)
check "and wrote nothing of them to Redis (${left:-no key names it})" test -z "$left"

dl=$("$SLUICECTL" dlq list --submission "$erased_sid" --json 2>/dev/null | jq -s length)
check "nothing dead-lettered for the erased submission ($dl)" test "$dl" = 0
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SLUICE_API_KEY" \
  "$RESULTS_URL/v1/submissions/$erased_sid")
check "its GET answers 404 ($code)" test "$code" = 404

finish
