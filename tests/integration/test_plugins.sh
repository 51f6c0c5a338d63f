#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_plugins.sh - plugin conformance: every built plugin is dlopen'ed, its
# ABI checked (`sluice plugin list` refuses anything else), and run through
# the same host path the stages use (`sluice plugin run`) on real inputs:
#   stt plugins   espeak-ng speech as WAV, FLAC and Ogg/Vorbis (48 kHz stereo
#                 too), then corrupt, truncated, zero-length and over-long audio;
#   grade plugins fixed transcripts (levels, criteria, determinism) and bad
#                 transcript files;
#   step plugins  that read the uploaded object (step/preflight): the same
#                 audio, measured and stored as 16 kHz FLAC (--object-out);
#                 noise, empty, silent, over-long and JSON input refused;
#   HTTP plugins  against `sluice-fakeprovider` (when such plugins are built),
#                 then against a misbehaving one: outage, 429, truncated
#                 bodies, no answer within the timeout, a reply trickling
#                 past it (tests/tools/trickle_server.c), nothing listening,
#                 unreadable, empty, truncated and over-long audio (failed
#                 before any request; a provider's 400 is in the unit test),
#                 schema-violating replies
#                 (regenerations, then failed), no json_schema support.
# Then the stages themselves: an unknown plugin, a plugin built for another
# ABI and an unknown plugin setting stop `sluice stt|grade` at start-up with
# a clear message.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

TMP=$(mktemp -d)
at_exit "rm -rf '$TMP'"
TEST_PLUGIN_DIR=${TEST_PLUGIN_DIR:-$(dirname "$(dirname "$SLUICE_BIN")")/tests/plugins}

# ---- inventory ----
mapfile -t PLUGINS < <("$SLUICE_BIN" plugin list | awk '{print $1 "/" $2 "/" $4}')
check "plugins found (${PLUGINS[*]})" test "${#PLUGINS[@]}" -ge 2
jqok() { jq -e "$1" >/dev/null; } # jqok FILTER <<<"$JSON"

# ---- inputs ----
stt_inputs "$TMP"
sox -n -r 16000 -c 1 "$TMP/long.wav" trim 0 5 # 5 s of silence vs a 2 s limit below

cat >"$TMP/t-good.json" <<'EOF'
{"transcript": "on weekends i usually go hiking with my friends in the mountains and then we cook dinner together and talk about the week it is my favourite way to relax because the air is fresh and the views are beautiful", "duration_s": 18.5, "prompt": "What do you do on weekends?"}
EOF
cat >"$TMP/t-empty.json" <<'EOF'
{"transcript": "", "duration_s": 3.0}
EOF
echo '{"transcript": 42}' >"$TMP/t-badtype.json"
echo '{"transcript": "unterminated' >"$TMP/t-notjson.json"

FAKE_PID=
start_fake() { # an OpenAI-compatible fake for the HTTP plugins
  [[ -n $FAKE_PID ]] && return 0
  "$FAKEPROVIDER" --set fakeprovider.listen=127.0.0.1:$((BASE + 50)) \
    --set admin.listen=127.0.0.1:$((BASE + 150)) \
    --set fakeprovider.stt_latency_ms=50 --set fakeprovider.chat_latency_ms=50 \
    >"$TMP/fake.log" 2>&1 &
  FAKE_PID=$!
  at_exit "kill $FAKE_PID 2>/dev/null || true"
  wait_for 20 curl -fsS -o /dev/null "http://127.0.0.1:$((BASE + 50))/stats" ||
    fail "fake provider did not start: $(tail -3 "$TMP/fake.log")"
}

run() { # run KIND NAME INPUT [args...] -> JSON in $OUT, exit status in $RC
  local kind=$1 name=$2 input=$3
  shift 3
  set +e
  OUT=$("$SLUICE_BIN" plugin run "$kind" "$name" "$@" "$input" 2>"$TMP/err")
  RC=$?
  set -e
}

for p in "${PLUGINS[@]}"; do
  IFS=/ read -r kind name mode <<<"$p"
  args=()
  if [[ $name != pocketsphinx && $name != rubric ]]; then
    # an HTTP plugin: point it at the fake provider
    start_fake
    args=(--set "$kind.$name.base_url=http://127.0.0.1:$((BASE + 50))")
  fi
  if [[ $kind == step ]]; then
    # a step reading the uploaded object (preflight) runs on an audio file
    for f in speech.wav speech.flac speech.ogg speech48k.wav; do
      run step "$name" "$TMP/$f" --object-out "$TMP/$f.out"
      check "$p: $f passes (exit 0)" test "$RC" -eq 0
      check "$p: $f measured and normalised" jqok '.outcome == "done" and .fields.duration_s > 3 and
        .fields.duration_s < 8 and .fields.speech_s > 1 and .object.suffix == ".16k.flac" and .object.bytes > 10000' <<<"$OUT"
      check "$p: $f: the timing of its speech (speaking time within the audio, runs = pauses + 1)" \
        jqok '.fields.speaking_s > 1 and .fields.speaking_s <= .fields.duration_s and
        .fields.speech_s <= .fields.speaking_s + 0.02 and .fields.runs == .fields.pauses + 1 and
        .fields.run_mean_s > 0 and .fields.pause_longest_s >= .fields.pause_mean_s and
        .fields.audio_s >= .fields.speech_s and .fields.audio_s <= .fields.duration_s' <<<"$OUT"
      check "$p: $f stored as 16 kHz mono FLAC" test "$(soxi -r "$TMP/$f.out" 2>/dev/null)/$(soxi -c "$TMP/$f.out" 2>/dev/null)" = 16000/1
    done
    for f in noise.wav:undecodable_audio empty.wav:undecodable_audio long.wav:no_speech; do
      run step "$name" "$TMP/${f%%:*}"
      check "$p: ${f%%:*} fails for good (exit 4)" test "$RC" -eq 4
      check "$p: ${f%%:*} is ${f##*:} with a reason" jqok ".outcome == \"failed\" and .error_class == \"${f##*:}\" and (.reason | length) > 5" <<<"$OUT"
    done
    run step "$name" "$TMP/speech.wav" --set "step.$name.max_seconds=2"
    check "$p: over-long audio is too_long" jqok '.outcome == "failed" and .error_class == "too_long"' <<<"$OUT"
    if [[ $name == preflight ]]; then
      run step "$name" "$TMP/speech.wav" --set "step.$name.flac_level=9"
      check "$p: flac_level 9 is refused at start (exit 1, no outcome)" test "$RC" -eq 1
      check "$p: ... that names the range" grep -q 'flac_level must be 0..8' "$TMP/err"
      run step "$name" "$TMP/speech.wav" --set "step.$name.flac_level=0"
      b0=$(jq -r .object.bytes <<<"$OUT")
      run step "$name" "$TMP/speech.wav" --set "step.$name.flac_level=8"
      b8=$(jq -r .object.bytes <<<"$OUT")
      check "$p: flac_level 8 stores fewer bytes than 0 ($b8 < $b0)" test "$b8" -lt "$b0"
    fi
    run step "$name" "$TMP/t-good.json"
    check "$p: a JSON file is not audio (exit 4)" test "$RC" -eq 4
  elif [[ $kind == stt ]]; then
    for f in speech.wav speech.flac speech.ogg speech48k.wav; do
      run stt "$name" "$TMP/$f" "${args[@]}"
      check "$p: $f transcribed (exit 0)" test "$RC" -eq 0
      check "$p: $f outcome done with text and duration" \
        jqok '.outcome == "done" and (.text | length) > 0 and .duration_s > 3 and .duration_s < 8' <<<"$OUT"
      check "$p: $f words have ordered timings" \
        jqok '[.words[] | .end_s >= .start_s] | all' <<<"$OUT"
    done
    if [[ $name == pocketsphinx ]]; then
      run stt "$name" "$TMP/speech.wav"
      check "$p: recognises a topic word" jqok '.text | test("friends|hiking|mountains|weekends")' <<<"$OUT"
      check "$p: reports cost units = audio seconds" jqok '.cost_units == .duration_s' <<<"$OUT"
      for f in noise.wav:undecodable_audio empty.wav:undecodable_audio truncated.wav:audio_too_short; do
        run stt "$name" "$TMP/${f%%:*}"
        check "$p: ${f%%:*} fails for good (exit 4)" test "$RC" -eq 4
        check "$p: ${f%%:*} is ${f##*:} with a reason" jqok ".outcome == \"failed\" and .error_class == \"${f##*:}\" and (.reason | length) > 5" <<<"$OUT"
      done
      run stt "$name" "$TMP/long.wav" --set stt.pocketsphinx.max_seconds=2
      check "$p: over-long audio fails for good" jqok '.outcome == "failed" and .error_class == "audio_too_long"' <<<"$OUT"
      run stt "$name" "$TMP/speech.wav" --set stt.pocketsphinx.model_dir=/nonexistent
      check "$p: bad model dir refused at create (exit 1)" test "$RC" -eq 1
      check "$p: bad model dir named in the error" grep -q nonexistent "$TMP/err"
    fi
  else
    run grade "$name" "$TMP/t-good.json" "${args[@]}"
    check "$p: graded (exit 0)" test "$RC" -eq 0
    check "$p: score, OPIc level, feedback, criteria" jqok '
      .outcome == "done" and .score >= 0 and .score <= 100 and
      (.level | IN("NL","NM","NH","IL","IM1","IM2","IM3","IH","AL")) and
      (.feedback | length) > 10 and (.criteria | length) >= 1' <<<"$OUT"
    first=$OUT
    run grade "$name" "$TMP/t-good.json" "${args[@]}"
    check "$p: same transcript, same grade" test "$(jq -c '{score,level}' <<<"$first")" = "$(jq -c '{score,level}' <<<"$OUT")"
    run grade "$name" "$TMP/t-empty.json" "${args[@]}"
    check "$p: empty transcript handled (exit $RC)" test "$RC" -eq 0 -o "$RC" -eq 4
    for f in t-badtype.json t-notjson.json; do
      run grade "$name" "$TMP/$f"
      check "$p: $f is a usage error (exit 2)" test "$RC" -eq 2
      check "$p: $f error on stderr" test -s "$TMP/err"
    done
    if [[ $name == rubric ]]; then
      run grade rubric "$TMP/t-empty.json"
      check "$p: no speech -> NL with a reason" jqok '.outcome == "done" and .level == "NL" and .score == 0' <<<"$OUT"
    fi
  fi
done

# ---- the HTTP plugins against a misbehaving provider ----
# Each case starts its own fake provider (ports BASE+52..) and checks the
# outcome class, and where it matters what the provider saw (/stats).
fake_case() { # fake_case PORT ARGS... : a fake provider for one case
  local port=$1
  shift
  "$FAKEPROVIDER" --set fakeprovider.listen=127.0.0.1:$port \
    --set admin.listen=127.0.0.1:$((port + 100)) --set fakeprovider.stt_latency_ms=20 \
    --set fakeprovider.chat_latency_ms=20 --set fakeprovider.stt_jitter_ms=0 \
    --set fakeprovider.chat_jitter_ms=0 "$@" >>"$TMP/fake-$port.log" 2>&1 &
  local pid=$!
  at_exit "kill $pid 2>/dev/null || true"
  wait_for 20 curl -fsS -o /dev/null "http://127.0.0.1:$port/stats" ||
    fail "fake provider on $port did not start: $(tail -3 "$TMP/fake-$port.log")"
}
outcome() { # outcome EXIT OUTCOME CLASS : the last run ended so
  test "$RC" -eq "$1" && jqok ".outcome == \"$2\" and .error_class == \"$3\" and (.reason | length) > 5" <<<"$OUT"
}
if printf '%s\n' "${PLUGINS[@]}" | grep -q '^stt/openai/'; then
  P=$((BASE + 52)) U=http://127.0.0.1:$((BASE + 52))
  fake_case $P --set fakeprovider.outage=0-600
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=$U
  check "stt/openai: provider outage (503) -> retry provider_unavailable" outcome 3 retry provider_unavailable
  P=$((BASE + 53)) U=http://127.0.0.1:$((BASE + 53))
  fake_case $P --set fakeprovider.quota_rps=0.01
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=$U
  throttled() { outcome 3 retry provider_throttled && jqok '.throttled and .retry_after_ms >= 1000' <<<"$OUT"; }
  check "stt/openai: 429 -> retry, throttled, with the Retry-After delay" throttled
  P=$((BASE + 54)) U=http://127.0.0.1:$((BASE + 54))
  fake_case $P --set fakeprovider.truncate_rate=1
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=$U
  check "stt/openai: truncated body -> retry provider_bad_reply" outcome 3 retry provider_bad_reply
  run grade openai "$TMP/t-good.json" --set grade.openai.base_url=$U
  check "grade/openai: truncated body -> retry provider_bad_reply" outcome 3 retry provider_bad_reply
  P=$((BASE + 55)) U=http://127.0.0.1:$((BASE + 55))
  fake_case $P --set fakeprovider.stt_latency_ms=5000
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=$U --set stt.openai.timeout_ms=700
  check "stt/openai: no answer within timeout_ms -> retry provider_timeout" outcome 3 retry provider_timeout
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=http://127.0.0.1:$((BASE + 59))
  check "stt/openai: nothing listening -> retry provider_unreachable" outcome 3 retry provider_unreachable
  # a provider that answers 200 at once and then trickles its body, one byte
  # every 200 ms: the whole-transfer timeout must end it
  TRICKLE_SERVER=${TRICKLE_SERVER:-$(dirname "$(dirname "$SLUICE_BIN")")/tests/trickle_server}
  "$TRICKLE_SERVER" $((BASE + 51)) 200 2>>"$TMP/trickle.log" &
  trickle=$!
  at_exit "kill $trickle 2>/dev/null || true"
  wait_for 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$((BASE + 51))" 2>/dev/null || fail "trickle server did not start"
  t0=$SECONDS
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=http://127.0.0.1:$((BASE + 51)) \
    --set stt.openai.timeout_ms=1500
  check "stt/openai: a reply trickling past timeout_ms -> retry provider_timeout" outcome 3 retry provider_timeout
  check "stt/openai: ... and it did not hang ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 10
  run grade openai "$TMP/t-good.json" --set grade.openai.base_url=http://127.0.0.1:$((BASE + 51)) \
    --set grade.openai.timeout_ms=1500
  check "grade/openai: a reply trickling past timeout_ms -> retry provider_timeout" outcome 3 retry provider_timeout
  kill $trickle 2>/dev/null || true
  P=$((BASE + 56)) U=http://127.0.0.1:$((BASE + 56))
  fake_case $P
  run stt openai "$TMP/noise.wav" --set stt.openai.base_url=$U
  check "stt/openai: bytes of no audio format -> failed undecodable_audio, no request" outcome 4 failed undecodable_audio
  run stt openai "$TMP/empty.wav" --set stt.openai.base_url=$U
  check "stt/openai: zero-length audio -> failed empty_audio, no request" outcome 4 failed empty_audio
  run stt openai "$TMP/truncated.wav" --set stt.openai.base_url=$U
  check "stt/openai: truncated audio -> failed audio_too_short, no request" outcome 4 failed audio_too_short
  run stt openai "$TMP/long.wav" --set stt.openai.base_url=$U --set stt.openai.max_seconds=2
  check "stt/openai: over-long audio -> failed audio_too_long, no request" outcome 4 failed audio_too_long
  run stt openai "$TMP/speech.wav" --set stt.openai.base_url=$U --set stt.openai.response_format=json
  check "stt/openai: plain json mode -> text and the WAV's duration" \
    jqok '.outcome == "done" and (.text | length) > 0 and .duration_s > 3 and (.words | length) == 0' <<<"$OUT"
  check "stt/openai: the provider saw only the one 200 (no request for the four above)" \
    jqok '.by_endpoint.transcriptions == {"200":1}' <<<"$(curl -fsS "$U/stats")"
fi
if printf '%s\n' "${PLUGINS[@]}" | grep -q '^grade/openai/'; then
  P=$((BASE + 57)) U=http://127.0.0.1:$((BASE + 57))
  fake_case $P --set fakeprovider.bad_reply_rate=1
  run grade openai "$TMP/t-good.json" --set grade.openai.base_url=$U --set grade.openai.max_regenerations=2
  check "grade/openai: every reply violates the schema -> failed invalid_grade" outcome 4 failed invalid_grade
  check "grade/openai: the last reply attached (raw_reply) and the attempts named" \
    jqok '(.raw_reply | length) > 0 and (.reason | test("after 3 attempts")) and .cost_units > 0' <<<"$OUT"
  check "grade/openai: 1 request + 2 regenerations reached the provider" \
    jqok '.by_endpoint.chat["200"] == 3 and .bad_replies == 3' <<<"$(curl -fsS "$U/stats")"
  P=$((BASE + 58)) U=http://127.0.0.1:$((BASE + 58))
  fake_case $P --set fakeprovider.json_schema=false
  run grade openai "$TMP/t-good.json" --set grade.openai.base_url=$U
  check "grade/openai: a server without json_schema -> JSON mode, graded" \
    jqok '.outcome == "done" and (.level | length) > 1 and .cost_units > 0' <<<"$OUT"
  check "grade/openai: one 400 (json_schema refused), then one 200" \
    jqok '.by_endpoint.chat == {"200":1,"400":1}' <<<"$(curl -fsS "$U/stats")"
  run grade openai "$TMP/t-good.json" --set grade.openai.base_url=http://127.0.0.1:$((BASE + 52))
  check "grade/openai: provider outage (503) -> retry provider_unavailable" outcome 3 retry provider_unavailable
fi

for f in "$TMP"/fake-*.log; do
  [[ -f $f ]] || continue
  if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$f"; then
    fail "sanitizer report in $f: $(grep -m3 -E 'ERROR|runtime error' "$f")"
  fi
done

# ---- refusals, in `plugin run` and in the stages ----
run stt "$TEST_PLUGIN_DIR/stt-badabi.so" "$TMP/speech.wav"
check "plugin run: other ABI refused (exit 1)" test "$RC" -eq 1
check "plugin run: other ABI named" grep -q "ABI 99" "$TMP/err"
run grade nosuch "$TMP/t-good.json"
check "plugin run: unknown plugin (exit 1)" test "$RC" -eq 1
run grade rubric "$TMP/t-good.json" --set grade.rubric.nope=1
check "plugin run: unknown plugin setting (exit 2)" test "$RC" -eq 2

stage_refuses() { # stage_refuses DESC PATTERN ARGS... : start-up fails with PATTERN on stderr
  local desc=$1 pat=$2
  shift 2
  set +e
  timeout 20 "$SLUICE_BIN" "$@" --set admin.listen=127.0.0.1:$((BASE + 160)) >"$TMP/stage.out" 2>&1
  local rc=$?
  set -e
  check "$desc: exits non-zero ($rc)" test "$rc" -ne 0 -a "$rc" -ne 124
  check "$desc: says why" grep -q "$pat" "$TMP/stage.out"
}
stage_refuses "stt --plugin nosuch" 'no stt plugin \\"nosuch\\"' stt --plugin nosuch
stage_refuses "stt --plugin <other ABI>" "ABI 99" stt --plugin "$TEST_PLUGIN_DIR/stt-badabi.so"
stage_refuses "grade with an unknown plugin key" "grade.rubric.colour" grade --set grade.rubric.colour=red
stage_refuses "stt with a bad model dir" "nonexistent" stt --set stt.pocketsphinx.model_dir=/nonexistent
# one shell serves every stage: a setting of a plugin this stage does not
# load is accepted, a variable no plugin declares is a typo and refused
set +e
SLUICE_STT_POCKETSPHINX_MAX_SECONDS=30 timeout 10 "$SLUICE_BIN" grade --plugin nosuch >"$TMP/stage.out" 2>&1
set -e
check "another kind's plugin setting accepted" grep -q 'no grade plugin' "$TMP/stage.out"
set +e
SLUICE_GRADE_RUBRIC_COLOUR=red timeout 10 "$SLUICE_BIN" grade >"$TMP/stage.out" 2>&1
set -e
check "unknown SLUICE_GRADE_* variable refused" grep -q "SLUICE_GRADE_RUBRIC_COLOUR" "$TMP/stage.out"

finish
