#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An async plugin may read its input until it completes the call (the ABI:
# "Everything is borrowed from the host until complete()"): the grade stage
# runs tests/plugins/lateread.c, which only starts an HTTP request in
# call() and reads the transcript in the request's callback, on the loop,
# after call() returned — through the input pointer and through
# host->in_str("text") — and writes both into the grade. Three answers at
# once (so other jobs run on the loop in between), transcribed by the fake
# provider: every grade must carry its own transcript, twice.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
fake_up 100 100 0
# the test plugins' directory on the path, so its setting is a known one
export SLUICE_PLUGIN_PATH="$TEST_PLUGIN_DIR:$(dirname "$(dirname "$SLUICE_BIN")")/lib/sluice/plugins"
export SLUICE_GRADE_PLUGIN=lateread SLUICE_GRADE_LATEREAD_URL=http://$FAKE/stats
stages_up

for i in 1 2 3; do
  espeak-ng -s 150 -w "$work/a$i.wav" "Answer $i: on weekends I usually go hiking with my friends."
done
out=$("$ROOT/tools/submit" "$work"/a{1,2,3}.wav 2>"$work/submit.log") ||
  { cat "$work/submit.log" >&2; fail "the submission did not finish"; finish; }
log "$(jq -c '[.questions[] | {no, state, t: .transcript, fb: .grade.feedback, by_name: .grade.engine}]' <<<"$out")"
check "3 questions done" test "$(jq '[.questions[] | select(.state == "done")] | length' <<<"$out")" = 3
check "each grade read its transcript through the input pointer after call() returned" \
  jqe '[.questions[] | (.transcript | length > 0) and .grade.feedback == .transcript] | all' "$out"
check "... and through host->in_str(\"text\")" \
  jqe '[.questions[] | .grade.engine == .transcript] | all' "$out"
finish
