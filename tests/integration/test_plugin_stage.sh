#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A third-party step placed in the pipeline by configuration only. The
# transcript filter tests/plugins/external/mask.c is built out of tree
# against the installed headers (cmake --install; cc, no Sluice library),
# and a pipeline description puts it between stt and grade: stt writes its
# transcripts to a new topic, `sluice stage mask` (the generic plugin-stage
# host) masks listed words and writes them on to grade.requests. Nothing
# else changes: no code, no rebuild. The whole flow runs through it (stt
# and grade on the fake provider, whose transcripts are known sentences):
# every answer ends graded, with the masked transcript, exactly once; the
# raw transcript stays on the new topic. A description whose messages lack
# the plugin's declared field is refused at start-up, naming it.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
BUILD_DIR=$(dirname "$(dirname "$SLUICE_BIN")")

# 1. the plugin, out of tree
cmake --install "$BUILD_DIR" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  fail "cmake --install: $(tail -3 "$work/install.log")"
mkdir -p "$work/plugins"
check "the ABI header is installed" test -f "$work/prefix/include/sluice/sl_plugin.h"
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -I"$work/prefix/include" \
  "$ROOT/tests/plugins/external/mask.c" -o "$work/plugins/step-mask.so" 2>"$work/cc.log"
check "the step plugin builds against the installed headers alone" test -f "$work/plugins/step-mask.so"
[[ -f $work/plugins/step-mask.so ]] || finish

# 2. the pipeline: mask between stt and grade, by description only
RAW=transcripts.raw
jq --arg raw "$RAW" '
  .topics += [{name: $raw, message: "sluice.v1.Transcript", about: "stt output, before masking"}]
  | .stages |= map(if .name == "stt" then .outputs |= map(if . == "grade.requests" then $raw else . end) else . end)
  | .stages += [{name: "mask", kind: "plugin", plugin: "mask", about: "masks listed words",
                 inputs: [$raw], outputs: ["grade.requests"], retry: true}]' \
  "$ROOT/pipeline.json" >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json
check "sluice pipeline accepts the description" sh -c "'$SLUICE_BIN' pipeline >/dev/null"
check "  ... and lists the mask stage" sh -c "'$SLUICE_BIN' pipeline | grep -q '^mask  *plugin'"
# every topic it needs (existing ones are left as they are)
"$SLUICECTL" topics ensure --partitions "${DEVSTACK_PARTITIONS:-12}" $("$SLUICE_BIN" pipeline --topics) >/dev/null ||
  fail "could not create the pipeline's topics"
export SLUICE_PLUGIN_PATH="$work/plugins:$BUILD_DIR/lib/sluice/plugins"
export SLUICE_STEP_MASK_WORDS=weekends,kimchi,apartment,summer
export SLUICE_RETRY_TIERS=1s,2s,4s
retry_topics 1s 2s 4s
"$SLUICECTL" topics ensure --partitions 4 mask.retry.1s mask.retry.2s mask.retry.4s >/dev/null
fake_up 50 50 0
stages_up
check "tools/stages started the mask stage" grep -q "plugin step/mask" "$STAGES_DIR/mask.log"

# 3. the whole flow through it
files=()
for i in 1 2 3 4; do
  espeak-ng -s 140 -w "$work/a$i.wav" "Answer $i: something about my week."
  files+=(--prompt "Question $i: tell me about yourself." "$work/a$i.wav")
done
out=$("$ROOT/tools/submit" "${files[@]}" 2>"$work/submit.log") ||
  { cat "$work/submit.log" >&2; fail "submission did not complete"; finish; }
sid=$(jq -r .submission_id <<<"$out")
check "4 questions, all graded" test "$(jq -r '[.summary.total, .summary.done, .summary.failed] | join(",")' <<<"$out")" = "4,4,0"
check "every graded transcript is masked" \
  jqe '[.questions[].transcript | test("\\*\\*\\*") and (test("weekends|kimchi|apartment|summer"; "i") | not)] | all' "$out"
trail=$("$SLUICECTL" submission "$sid" --json 2>"$work/trail.err")
check "the raw transcripts are on $RAW, unmasked" \
  jqe '[.events[] | select(.topic == "'"$RAW"'") | .message.text | test("weekends|kimchi|apartment|summer"; "i")] | length == 4 and all' "$trail"
check "grade read the masked ones from grade.requests" \
  jqe '[.events[] | select(.topic == "grade.requests") | .message.text | test("\\*\\*\\*")] | length == 4 and all' "$trail"
check "sluicectl status shows the mask stage" sh -c "'$SLUICECTL' status --json | jq -e '.stages | map(.stage) | index(\"mask\") != null' >/dev/null"
"$ROOT/tools/stages" down >/dev/null 2>&1 || true

# 4. a description the plugin does not fit: mask reading upload events
# (a valid description: stt.requests gets a second reader, grade.requests a
# second writer; only the plugin does not fit it)
jq '.stages += [{name: "mask", kind: "plugin", plugin: "mask", inputs: ["stt.requests"],
                 outputs: ["grade.requests"], retry: true}]' "$ROOT/pipeline.json" >"$work/bad.json"
rc=0
SLUICE_PIPELINE_FILE=$work/bad.json timeout 30 "$SLUICE_BIN" stage mask \
  --set admin.listen=127.0.0.1:0 >"$work/bad.log" 2>&1 || rc=$?
check "a plugin whose field the input lacks is refused at start-up (exit $rc)" test "$rc" -ne 0
check "  ... naming the plugin, the field and the message" \
  grep -q 'plugin step/mask reads \\"text\\": sluice.v1.UploadCompleted has no field \\"text\\"' "$work/bad.log"
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/mask.log" &&
  fail "sanitizer report in the mask stage's log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/mask.log")"
finish
