#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A poison input: one whose processing kills the process (here the test
# plugin tests/plugins/misbehave.c, which abort()s on a prompt containing
# "sluice-test-abort"; an OOM kill or a segfault does the same). The grade
# stage runs it under a restart loop, as systemd or Kubernetes would: each
# death is counted and the stage started again. Its input is a topic of one
# partition (a pipeline description of the test's own), so the normal
# answers submitted after the poison one queue behind it in the same
# partition. Every start of an input is counted in Redis before its work
# begins (stage.max_starts, 3 here): after at most 3 deaths the poison input
# is dead-lettered with class "poison" without being run again, its question
# ends failed, and every normal answer behind it ends done. Without the
# count the stage dies on it for ever and nothing behind it finishes.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
at_exit 'touch "$work/stop" 2>/dev/null; [[ -n ${watcher:-} ]] && wait "$watcher" 2>/dev/null; true'

# grade reads a topic of one partition of its own: stt writes there
POISON_TOPIC=grade.poison
jq --arg t "$POISON_TOPIC" '
  .topics |= map(select(.name != "grade.requests"))
  | .topics += [{name: $t, message: "sluice.v1.Transcript", about: "test_poison: one partition"}]
  | .stages |= map(if .name == "stt" then .outputs |= map(if . == "grade.requests" then $t else . end)
                   elif .name == "grade" then .inputs = [$t] else . end)' \
  "$ROOT/pipeline.json" >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json
"$SLUICECTL" topics ensure --partitions 1 "$POISON_TOPIC" >/dev/null ||
  fail "could not create $POISON_TOPIC"
# the others as the lane has them (ensure grows a topic with fewer partitions)
"$SLUICECTL" topics ensure --partitions "${DEVSTACK_PARTITIONS:-12}" \
  $("$SLUICE_BIN" pipeline --topics | grep -vx "$POISON_TOPIC") >/dev/null ||
  fail "could not create the pipeline's topics"
# what an earlier run left on grade.poison (lib.sh skipped the default
# pipeline's inputs only)
"$SKIP_BACKLOG" "$SLUICE_KAFKA_BROKERS" >&2 || fail "could not skip the backlog of $POISON_TOPIC"

fake_up 20 20 0
export SLUICE_PLUGIN_PATH="$TEST_PLUGIN_DIR:$(dirname "$(dirname "$SLUICE_BIN")")/lib/sluice/plugins"
export SLUICE_GRADE_PLUGIN=misbehave
# a dead process's partition moves on after 6 s (the broker's least), and
# its claim on the poison input ends after 2 s: a death costs seconds
export STAGES_ARGS_grade="--set kafka.session_timeout_ms=6000 --set stage.claim_lease_ms=2000"
stages_up
view_marked

# the restart loop: a grade process that died is counted and started again
GRADE_PIDFILE=$STAGES_DIR/grade.pid
: >"$work/deaths"
(
  while [[ ! -f $work/stop ]]; do
    pid=$(cat "$GRADE_PIDFILE" 2>/dev/null || true)
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null && [[ ! -f $work/stop ]]; then
      grep -qx "$pid" "$work/deaths" || echo "$pid" >>"$work/deaths" # each death once
      "$ROOT/tools/stages" scale grade 1 >>"$work/restarts.log" 2>&1 || true
    fi
    sleep 0.2
  done
) &
watcher=$!
deaths() { wc -l <"$work/deaths"; }

espeak-ng -s 150 -w "$work/poison.wav" "This answer kills the grader."
for i in 1 2 3 4; do
  espeak-ng -s 150 -w "$work/a$i.wav" "Answer $i: on weekends I usually go hiking with my friends."
done
export SUBMIT_TIMEOUT=120
"$ROOT/tools/submit" --prompt "Question 1 (sluice-test-abort)" "$work/poison.wav" \
  >"$work/poison.json" 2>"$work/poison.err" &
psub=$!
# the normal answers once the poison one has reached grade (its first death):
# they queue behind it in the partition
check "the poison input kills the grade process" wait_for 90 at_least 1 deaths
"$ROOT/tools/submit" "$work"/a{1,2,3,4}.wav >"$work/normal.json" 2>"$work/normal.err" &
nsub=$!
prc=0 nrc=0
wait "$psub" || prc=$?
wait "$nsub" || nrc=$?
touch "$work/stop"
wait "$watcher" 2>/dev/null || true
watcher=
log "grade deaths: $(deaths) (pids $(tr '\n' ' ' <"$work/deaths"))"
check "the poison submission finished (exit $prc: $(tail -1 "$work/poison.err" 2>/dev/null))" test "$prc" = 0
check "the normal submission finished (exit $nrc: $(tail -1 "$work/normal.err" 2>/dev/null))" test "$nrc" = 0
check "the grade process died at most 3 times ($(deaths))" test "$(deaths)" -le 3
poison=$(cat "$work/poison.json")
normal=$(cat "$work/normal.json")
log "poison: $(jq -c '[.questions[] | {no, state, error}]' <<<"$poison" 2>/dev/null)"
log "normal: $(jq -c '[.questions[] | {no, state}]' <<<"$normal" 2>/dev/null)"
check "the poison question ended failed" jqe '.questions[0].state == "failed"' "$poison"
check "every normal question behind it ended done" \
  jqe '[.questions[] | .state == "done"] | (length == 4 and all)' "$normal"
psid=$(jq -r '.submission_id // empty' <<<"$poison" 2>/dev/null || true)
if [[ -n $psid ]]; then
  dl=$("$SLUICECTL" dlq list --json --stage grade --class poison --submission "$psid" 2>"$work/dlq.err" || true)
  log "dlq: $dl"
  check "sluicectl dlq list shows it dead-lettered as poison" \
    jqany '.error_class == "poison" and .stage == "grade"' "$dl"
  check "  ... naming its start count" jqany '.error_message | test("started 3 times")' "$dl"
fi
check "the grade stage counted it as a dead letter" \
  at_least 1 metric sluice_messages_total 'stage="grade",outcome="dead_lettered"' "$(admin grade)"
# the normal answers were behind it in its partition; a death beside the
# poison input may charge them a start, but none of them reached its last
# chance (the start that runs alone): the poison input's own last chance
# ran alone, so the death that decided it was its own
nsid=$(jq -r '.submission_id // empty' <<<"$normal" 2>/dev/null || true)
kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "$POISON_TOPIC" -o beginning -e -q -f '%o %k\n' \
  >"$work/offsets" 2>/dev/null || true
poff=$(awk -v k="$psid/1" '$2 == k {print $1}' "$work/offsets" | head -n 1)
check "the 4 normal answers were written behind the poison one (offset ${poff:-?})" \
  test "$(awk -v s="$nsid/" -v p="${poff:-999999999}" 'index($2, s) == 1 && $1 > p' "$work/offsets" | wc -l)" = 4
alone() { grep 'running it alone' "$STAGES_DIR/grade.log" | grep -q "${1:-none}"; }
check "the poison input's last start ran alone" alone "${psid:-none}"
check "no normal answer had to run alone" eval '! alone "${nsid:-none}"'


# after a fix (here: grade with the rubric grader, which does not abort) a
# replay is a new offset, counted from 0: the question ends done
gpid=$(cat "$GRADE_PIDFILE")
kill -TERM "$gpid"
wait_for 30 sh -c "! kill -0 $gpid 2>/dev/null" || fail "grade did not stop on SIGTERM"
SLUICE_GRADE_PLUGIN=rubric "$ROOT/tools/stages" scale grade 1 >/dev/null || fail "grade did not start again"
"$SLUICECTL" dlq replay --stage grade --class poison --submission "$psid" --yes >"$work/replay.log" 2>&1 ||
  fail "sluicectl dlq replay: $(tail -3 "$work/replay.log")"
q1_done() { test "$("$SLUICECTL" submission "$psid" --json 2>/dev/null | jq -r '.redis.q1.state')" = done; }
check "after the fix, the replayed poison answer ends done" wait_for 60 q1_done
finish
