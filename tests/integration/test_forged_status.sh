#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A status for a question the submission never declared (question 99: a
# forged or misrouted FAILED on the results topic) must not end a client's
# polling: results lists and counts only the declared questions.
#   1. a submission of two answers; only answer 1 is uploaded and graded;
#   2. a FAILED status for <sid>/99 reaches the results topic (the runtime's
#      own dead-letter hook, through sluice-harness dead-lettering an input
#      keyed <sid>/99);
#   3. the view still has two questions and is not complete.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export HARNESS_STAGE=hforge
harness_topics 1
stages_up

espeak-ng -s 140 -w "$work/a1.wav" "I usually go hiking on weekends with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favourite food is kimchi stew."
new_submission "$work/a1.wav" "$work/a2.wav"
put_answer 0 "$work/a1.wav"
one_done() { view_of "$SID" "$TOKEN" | jq -e '.questions[0].state == "done"' >/dev/null; }
check "answer 1 graded" wait_for 90 one_done

harness_up
printf '%s\t%s\n' "$SID/99" '{"permanent":true}' | kcat -P -b "$B" -t hforge.in -K $'\t'
forged() { redis-cli -p "$DEVSTACK_REDIS_PORT" HEXISTS "$(sub_key "$SID")" q99 | grep -qx 1; }
check "the FAILED status for question 99 reached the view's hash" wait_for 30 forged
harness_down
v=$(view_of "$SID" "$TOKEN")
check "the view lists only the two declared questions ($(jq -c '[.questions[].no]' <<<"$v"))" \
  jqe '[.questions[].no] == [1,2]' "$v"
check "and is not complete (summary $(jq -c .summary <<<"$v"))" \
  jqe '.summary == {"total":2,"done":1,"failed":0,"complete":false}' "$v"
check "so the client keeps polling" jqe '.poll.stop == false' "$v"
finish
