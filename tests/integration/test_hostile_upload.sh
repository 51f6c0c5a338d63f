#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Crafted uploads are ordinary events: none crash-loops preflight, stalls its
# partitions or reaches the paid provider.
#
# preflight runs as the chart runs it: in a 512 MiB memory cgroup (cgroup v1
# memory controller), under a supervisor that restarts it 1 s after it
# exits (systemd's Restart=always, a pod's restartPolicy), counting exits.
# One submission mixes four spoken answers with the six files of
# tests/tools/hostile_media.py, each declared as audio:
#   png    a 16384x16384 RGB PNG as audio/webm (768 MiB of pixels)
#   wide   a FLAC at 655,350 Hz x 8 channels
#   aac    2 hours of AAC in MP4 (no decoder here)
#   ogg    a 1 KB Ogg Opus whose last page claims 10 hours
#   cut    a WebM cut inside its first cluster
#   zip    a ZIP archive as audio/webm
# and a second submission of two spoken answers follows it. Expected:
#   - each crafted file ends failed at preflight with its own class
#     (unsupported_format or undecodable_audio, the reason naming what was
#     refused), within 60 s of the upload;
#   - the provider was paid for the spoken answers only (0 calls for the
#     crafted ones), and every spoken answer in both submissions ends done;
#   - preflight exited at most 3 times in all (it should not exit at all),
#     decoded in its sluice-decode children, and its cgroup never reached
#     the limit (memory.failcnt).
# Before the sandbox and allow-list, the PNG was decoded by pngdec inside
# the stage (~800 MB: OOM-killed, redelivered, killed again), and the ZIP
# and the AAC went to the provider unchecked (pass_undecoded).
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
CGROOT=/sys/fs/cgroup/memory
CG=$CGROOT/sluice-hostile-$$
sup=""
stop_preflight() { # the supervisor first, then what runs in the cgroup, then the cgroup
  [[ -n $sup ]] && kill "$sup" 2>/dev/null && wait "$sup" 2>/dev/null
  local p t=0
  for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
  while [[ -s $CG/cgroup.procs ]] && ((t < 100)); do sleep 0.1; t=$((t + 1)); done
  for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  sleep 0.2
  [[ -d $CG ]] && rmdir "$CG"
}
at_exit stop_preflight
at_exit 'rm -rf "$work"'
[[ -w $CGROOT ]] || { fail "the cgroup v1 memory controller is not mounted writable at $CGROOT"; finish; }

fake_up 50 50 0
"$ROOT/tools/stages" up --replicas preflight=0 >/dev/null
PF_PORT=$("$ROOT/tools/stages" port preflight)

# preflight in its own memory cgroup, restarted whenever it exits
mkdir "$CG"
echo $((512 << 20)) >"$CG/memory.limit_in_bytes"
supervise() {
  while :; do
    (
      echo "$BASHPID" >"$CG/cgroup.procs"
      SLUICE_ADMIN_LISTEN=127.0.0.1:$PF_PORT exec "$SLUICE_BIN" stage preflight
    ) >>"$work/preflight.log" 2>&1 </dev/null &
    echo $! >"$work/preflight.pid"
    wait $! && rc=0 || rc=$?
    echo "exit $rc at $(date +%s)" >>"$work/exits"
    sleep 1
  done
}
supervise &
sup=$!
wait_for 30 admin_ready "$PF_PORT" ||
  { fail "preflight did not become ready in its cgroup"; tail -5 "$work/preflight.log" >&2; }

espeak-ng -s 140 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends."
gst-launch-1.0 -q filesrc "location=$work/speech.wav" ! wavparse ! audioconvert ! audioresample ! \
  opusenc ! webmmux ! filesink "location=$work/speech.webm" || fail "gst-launch-1.0 could not encode"
sox "$work/speech.wav" "$work/speech.flac"
SRC_WEBM=$work/speech.webm python3 "$ROOT/tests/tools/hostile_media.py" "$work/h" ||
  fail "hostile_media.py did not write the files"
# each as the type its name declares (tools/submit: from the extension)
cp "$work/h/png_huge.png" "$work/q02-png.webm"
cp "$work/h/flac_wide.flac" "$work/q04-wide.flac"
cp "$work/h/aac_2h.m4a" "$work/q05-aac.m4a"
cp "$work/h/ogg_10h.opus" "$work/q07-ogg.ogg"
cp "$work/h/mkv_cut.webm" "$work/q08-cut.webm"
cp "$work/h/zip.webm" "$work/q09-zip.webm"
for n in 01 03 06; do cp "$work/speech.webm" "$work/q$n-speech.webm"; done
cp "$work/speech.flac" "$work/q10-speech.flac"
log "sizes: $(cd "$work" && stat -c '%n %s' q*.* | tr '\n' ' ')"

t0=$(date +%s)
SUBMIT_TIMEOUT=180 "$ROOT/tools/submit" "$work"/q*.* >"$work/first.json" 2>"$work/submit1.log" ||
  { cat "$work/submit1.log" >&2; fail "the first submission did not finish"; }
t1=$(date +%s)
kids=$(pgrep -c -P "$(cat "$work/preflight.pid")" -x sluice-decode || true)
check "preflight decoded in its sluice-decode processes ($kids)" test "${kids:-0}" -ge 1
for n in 1 2; do cp "$work/speech.webm" "$work/after$n.webm"; done
SUBMIT_TIMEOUT=120 "$ROOT/tools/submit" "$work"/after*.webm >"$work/second.json" 2>"$work/submit2.log" ||
  { cat "$work/submit2.log" >&2; fail "the second submission did not finish"; }
out=$(cat "$work/first.json")
log "$(jq -c '[.questions[] | {no, state, stage, class: .error.class}]' <<<"$out")"
q() { jq -c ".questions[] | select(.no == $1)" <<<"$out"; }

for n in 1 3 6 10; do
  check "spoken answer q$n done among the crafted ones" \
    jqe '.state == "done" and (.transcript | length > 0)' "$(q "$n")"
done
expect() { # expect NO CLASS REASON_REGEX WHAT
  check "$4 fails at preflight as $2 ($(jq -c '[.error.class, .error.message]' <<<"$(q "$1")" | cut -c1-160))" \
    jqe ".state == \"failed\" and .stage == \"preflight\" and .error.class == \"$2\" and (.error.message | test(\"$3\"))" "$(q "$1")"
}
expect 2 unsupported_format 'image/png' "a 16384x16384 PNG as audio/webm"
expect 4 unsupported_format '655350 Hz' "a FLAC at 655,350 Hz x 8 channels"
expect 5 unsupported_format 'AAC|audio/mpeg' "2 hours of AAC in MP4"
expect 7 undecodable_audio 'cut short.*36000' "a 1 KB Ogg claiming 10 hours"
expect 8 undecodable_audio 'cut short' "a cut WebM"
expect 9 unsupported_format 'application/zip' "a ZIP as audio/webm"
check "the first submission ended within 60 s of its upload ($((t1 - t0)) s)" test $((t1 - t0)) -le 60
check "both answers of the submission after it done" \
  jqe '[.questions[] | select(.state == "done")] | length == 2' "$(cat "$work/second.json")"

stats=$(curl -fsS "http://$FAKE/stats")
log "provider calls: $(jq -c '.by_endpoint' <<<"$stats")"
check "6 paid transcriptions: the spoken answers only" \
  test "$(jq '[.by_endpoint.transcriptions[]?] | add // 0' <<<"$stats")" = 6
exits=$(grep -c exit "$work/exits" 2>/dev/null || true)
check "preflight exited at most 3 times (${exits:-0})" test "${exits:-0}" -le 3 ||
  grep -E '"level":"(error|fatal)"' "$work/preflight.log" | tail -5 >&2
failcnt=$(cat "$CG/memory.failcnt")
peak=$(($(cat "$CG/memory.max_usage_in_bytes") >> 20))
log "preflight's cgroup: peak $peak MiB of 512, limit hit $failcnt times"
check "preflight's cgroup never reached its limit" test "$failcnt" = 0
finish
