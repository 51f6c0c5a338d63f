#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_whisper.sh - the default offline recognizer, end to end: the dev
# stack's local Whisper server (faster-whisper-server with Whisper base,
# DEVSTACK_STT=whisper, as `make demo` runs it) behind the stt stage's
# stt/openai plugin, a real OpenAI-compatible server that is not ours.
#   1. `tools/demo` itself on this lane: its three spoken answers (one as
#      WebM/Opus) come back done and graded with a word error rate <= 15%
#      (bench/stt/wer.sh against the text espeak-ng spoke), the silent one
#      stopped by preflight; the Whisper server answered the three.
#   2. plugin conformance of stt/openai against that server: WAV, FLAC,
#      Ogg/Vorbis and 48 kHz stereo transcribed; zero-length, corrupt,
#      truncated and over-long audio each fail for good with its own class,
#      before any request.
# The lane stacks of tools/test run no Whisper server (DEVSTACK_STT=
# pocketsphinx): this test starts one on its lane and stops it at the end.
CALLER_STT=${DEVSTACK_STT:-}
export DEVSTACK_STT=whisper
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
[[ $CALLER_STT == whisper ]] ||
  at_exit 'kill "$(cat "$DEVSTACK_DIR/whisper.pid")" 2>/dev/null; rm -f "$DEVSTACK_DIR/whisper.pid"'
WHISPER=${SLUICE_STT_OPENAI_BASE_URL:?devstack env did not point stt at the Whisper server}
check "devstack env: the stt stage uses stt/openai" test "${SLUICE_STT_PLUGIN:-}" = openai

TMP=$(mktemp -d)
at_exit "rm -rf '$TMP'"
jqok() { jq -e "$1" >/dev/null; } # jqok FILTER <<<"$JSON"
served() { grep -c 'POST /v1/audio/transcriptions HTTP/1.1"' "$DEVSTACK_DIR/whisper.log" || true; }

# ---- 1. the demo ----
before=$(served)
set +e
DEMO_KEEP=$TMP/demo "$ROOT/tools/demo" >"$TMP/demo.out" 2>&1
rc=$?
set -e
check "tools/demo succeeded (exit $rc): three graded, the silent one no_speech" test "$rc" -eq 0
[[ $rc -eq 0 ]] || log "demo output: $(tail -30 "$TMP/demo.out")"
check "the Whisper server transcribed the three spoken answers" test "$(($(served) - before))" -eq 3
if [[ -s $TMP/demo/result.json ]]; then
  jq -r '.questions[] | select(.no <= 3) | "\(.no)\t\(.transcript // "")"' \
    "$TMP/demo/result.json" >"$TMP/hyp.tsv"
  "$ROOT/bench/stt/wer.sh" "$TMP/demo/answers.tsv" "$TMP/hyp.tsv" >"$TMP/wer.txt"
  while IFS=$'\t' read -r id e w text; do log "answer $id: $e/$w word errors: $text"; done <"$TMP/wer.txt"
  WER=$(awk -F'\t' '$1 == "WER" {print $4}' "$TMP/wer.txt")
  check "demo answers: word error rate $WER% <= 15%" awk -v w="$WER" 'BEGIN {exit !(w <= 15)}'
  check "demo answers: each graded with a level" jqok \
    '[.questions[] | select(.no <= 3) | .state == "done" and (.grade.level | length) > 1] | all' \
    <"$TMP/demo/result.json"
  # preflight's pauses set against Whisper's segments (issue 45): each
  # answer's fluency evidence splits its pauses, and the sentence ends of
  # the demo's answers hold pauses between segments
  log "fluency evidence: $(jq -c '[.questions[] | select(.no <= 3) | .grade.criteria[]
    | select(.name == "fluency") | .comment | capture("(?<split>[0-9]+ between[^;]*)").split]' \
    "$TMP/demo/result.json")"
  check "demo answers: pauses split between and inside Whisper's segments" jqok \
    '[.questions[] | select(.no <= 3) | .grade.criteria[] | select(.name == "fluency") | .comment
      | test("[0-9]+ between the transcript.s [0-9]+ segments?, [0-9]+ inside")] | length == 3' \
    <"$TMP/demo/result.json"
  check "demo answers: some pause lies between two segments" jqok \
    '[.questions[] | select(.no <= 3) | .grade.criteria[] | select(.name == "fluency") | .comment
      | capture("(?<b>[0-9]+) between").b | tonumber] | add >= 1' <"$TMP/demo/result.json"
else
  fail "tools/demo left no result.json"
fi

# ---- 2. stt/openai against the real server ----
stt_inputs "$TMP"
run() { # run INPUT [args...] -> JSON in $OUT, exit status in $RC
  local input=$1
  shift
  set +e
  OUT=$("$SLUICE_BIN" plugin run stt openai --set "stt.openai.base_url=$WHISPER" "$@" "$input" 2>"$TMP/err")
  RC=$?
  set -e
}
for f in speech.wav speech.flac speech.ogg speech48k.wav; do
  run "$TMP/$f"
  check "stt/openai+whisper: $f transcribed (exit $RC)" test "$RC" -eq 0
  check "stt/openai+whisper: $f reads the speech, with its duration" jqok '.outcome == "done" and
    (.text | ascii_downcase | test("hiking") and test("friends") and test("mountains")) and
    .duration_s > 3 and .duration_s < 8 and .cost_units == .duration_s' <<<"$OUT"
done
before=$(served)
outcome() { # outcome EXIT CLASS : the last run failed for good so
  test "$RC" -eq "$1" && jqok ".outcome == \"failed\" and .error_class == \"$2\" and (.reason | length) > 5" <<<"$OUT"
}
run "$TMP/empty.wav"
check "stt/openai+whisper: zero-length audio -> failed empty_audio" outcome 4 empty_audio
run "$TMP/noise.wav"
check "stt/openai+whisper: corrupt audio -> failed undecodable_audio ($(jq -c '[.outcome, .error_class]' <<<"$OUT"))" outcome 4 undecodable_audio
run "$TMP/truncated.wav"
check "stt/openai+whisper: truncated audio -> failed audio_too_short ($(jq -c '[.outcome, .error_class]' <<<"$OUT"))" outcome 4 audio_too_short
run "$TMP/speech.flac" --set stt.openai.max_seconds=2
check "stt/openai+whisper: over-long audio -> failed audio_too_long ($(jq -c '[.outcome, .error_class]' <<<"$OUT"))" outcome 4 audio_too_long
check "stt/openai+whisper: none of the four reached the server" test "$(served)" -eq "$before"

finish
