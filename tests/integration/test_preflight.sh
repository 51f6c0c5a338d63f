#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The preflight stage between ingest and stt (pipeline.json, step/preflight):
# answers recorded as browsers and phones record them go through unconverted,
# and the ones nobody should pay for fail at once, before any paid call.
#
# Seven answers in one submission, uploaded with tools/submit (the content
# type from the extension): the same espeak-ng sentence as WebM/Opus,
# Ogg/Opus and MP3 (GStreamer's encoders) and FLAC (sox); 3 s of digital
# silence; a text file declared as audio/webm; and 16 s of speech with
# step.preflight.max_seconds=12. stt and grade call the fake provider, whose
# /stats counts every paid call.
#   - the four recordings end done, with transcripts and grades;
#   - silence fails as no_speech, the text file as undecodable_audio, the
#     long one as too_long, each from stage preflight with the reason;
#   - the provider was called 4 times for transcription and 4 for grading:
#     none for the three rejected answers;
#   - each passed answer went to stt with audio_key naming the 16 kHz FLAC
#     preflight stored under derived/ (which stt then fetched) through the
#     derived objects' endpoint (s3.derived_endpoint: the dev stack's gateway
#     without notifications), so storage sent no event for them, and ingest
#     dead-lettered nothing;
#   - the view lists the pipeline's stages, preflight's "checking" among them.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

fake_up 50 50 0
export SLUICE_STEP_PREFLIGHT_MAX_SECONDS=12
stages_up

espeak-ng -s 140 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends."
enc() { # enc ENCODER [MUXER] OUT
  local chain=(filesrc "location=$work/speech.wav" ! wavparse ! audioconvert ! audioresample ! "$1" !)
  [[ $# == 3 ]] && chain+=("$2" !)
  gst-launch-1.0 -q "${chain[@]}" filesink "location=$work/${!#}"
}
enc opusenc webmmux a1.webm && enc opusenc oggmux a2.ogg && enc lamemp3enc a3.mp3 ||
  fail "gst-launch-1.0 could not encode the recordings"
sox "$work/speech.wav" "$work/a4.flac"
sox -n -r 16000 -c 1 -b 16 "$work/a5.wav" trim 0 3
printf 'This is a text file, not a recording.\n%.0s' {1..40} >"$work/a6.webm"
sox "$work/speech.wav" "$work/speech.wav" "$work/speech.wav" "$work/speech.wav" "$work/a7.wav"
log "sizes: $(cd "$work" && stat -c '%n %s' a*.* | tr '\n' ' ')"

out=$("$ROOT/tools/submit" "$work"/a{1,2,3,4}.* "$work/a5.wav" "$work/a6.webm" "$work/a7.wav" \
  2>"$work/submit.log") || { cat "$work/submit.log" >&2; fail "the submission did not finish"; finish; }
log "$(jq -c '[.questions[] | {no, state, stage, error: .error.class}]' <<<"$out")"
q() { jq -c ".questions[] | select(.no == $1)" <<<"$out"; }

for n in 1 2 3 4; do
  check "q$n (a${n}) done with a transcript and a grade" \
    jqe '.state == "done" and (.transcript | length > 0) and .grade.score >= 0' "$(q $n)"
done
check "silence fails as no_speech, from preflight" \
  jqe '.state == "failed" and .error.class == "no_speech" and .stage == "preflight"' "$(q 5)"
check "a text file fails as undecodable_audio" \
  jqe '.state == "failed" and .error.class == "undecodable_audio" and (.error.message | test("not a recording"))' "$(q 6)"
check "16 s over a 12 s limit fails as too_long" \
  jqe '.state == "failed" and .error.class == "too_long" and (.error.message | test("12 s"))' "$(q 7)"
check "the view lists the pipeline's stages in order" \
  jqe '.stages == ["awaiting_upload","queued","checking","transcribing","grading","done"]' "$out"

stats=$(curl -fsS "http://$FAKE/stats")
log "provider calls: $(jq -c '.by_endpoint' <<<"$stats")"
check "4 paid transcriptions, none for the rejected three" \
  test "$(jq '[.by_endpoint.transcriptions[]?] | add // 0' <<<"$stats")" = 4
check "4 paid gradings" test "$(jq '[.by_endpoint.chat[]?] | add // 0' <<<"$stats")" = 4

sid=$(jq -r .submission_id <<<"$out")
kcat -C -b "$SLUICE_KAFKA_BROKERS" -t stt.requests -o beginning -e -q -f '%s\n' 2>/dev/null |
  tr -c '[:print:]\n' '\n' | grep -o "derived/submissions/$sid/q[0-9]*\.[a-z0-9]*\.16k\.flac" |
  sort -u >"$work/derived"
check "each passed answer went to stt with its 16 kHz FLAC (audio_key)" \
  test "$(tr '\n' ' ' <"$work/derived")" = \
  "derived/submissions/$sid/q01.webm.16k.flac derived/submissions/$sid/q02.ogg.16k.flac derived/submissions/$sid/q03.mp3.16k.flac derived/submissions/$sid/q04.flac.16k.flac "
n=$(kcat -C -b "$SLUICE_KAFKA_BROKERS" -t storage-events -o beginning -e -q 2>/dev/null |
  grep -c "derived/submissions/$sid/" || true)
check "storage sent no event for the derived FLACs ($n)" test "$n" = 0
check "ingest dead-lettered nothing" \
  test "$(metric sluice_messages_total 'stage="ingest",outcome="dead_lettered"' "$ADMIN_INGEST")" = 0
check "preflight counted the three it rejected" \
  test "$(curl -fsS "$(admin preflight)/metrics" | awk '$1 ~ /^sluice_preflight_rejected_total/ {s += $2} END {print s + 0}')" = 3
finish
