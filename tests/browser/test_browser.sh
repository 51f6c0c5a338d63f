#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end tests of the browser client (web/) in real headless Chromium:
# Debian's chromium driven by playwright-core (pinned in package.json,
# installed with npm ci into the build directory), Node's test runner
# (e2e.test.mjs), against the real stack and all six stages. Screenshots are
# kept in <build>/browser-artifacts. Also checks that the answer uploaded
# after the reload is byte-identical in storage.
source "$(dirname "$0")/../integration/lib.sh"
HERE=$ROOT/tests/browser
BUILD_DIR=$(dirname "$(dirname "$SLUICE_BIN")")
PW_DIR=$BUILD_DIR/browser-node
ART_DIR=$BUILD_DIR/browser-artifacts
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[[ -x $CHROMIUM ]] || { fail "no Chromium at $CHROMIUM (tools/bootstrap installs Debian's chromium)"; exit 1; }
command -v node >/dev/null && (($(node -p 'process.versions.node.split(".")[0]') >= 20)) ||
  { fail "Node >= 20 is needed by the pinned playwright-core (have $(node -v 2>/dev/null || echo none))"; exit 1; }

# playwright-core, exactly as locked, in the build directory (not globally)
if [[ ! -d $PW_DIR/node_modules/playwright-core ]] || ! cmp -s "$HERE/package-lock.json" "$PW_DIR/package-lock.json"; then
  rm -rf "$PW_DIR"; mkdir -p "$PW_DIR"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$PW_DIR/"
  (cd "$PW_DIR" && npm ci --no-audit --no-fund --loglevel=error) || { fail "npm ci of playwright-core failed"; exit 1; }
fi

work=$(mktemp -d)
at_exit 'rm -rf "$work"'
rm -rf "$ART_DIR"; mkdir -p "$ART_DIR"
# the fake microphone's voice; a large answer (11 MiB: 96 kHz stereo speech
# padded with silence, ~30 s) that goes up in three multipart parts
espeak-ng -s 150 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends and family."
frames=$(((11 * 1048576 - 44) / 4))
sox -V1 "$work/speech.wav" -r 96000 -c 2 -b 16 "$work/big.wav" rate 96000 channels 2 pad 0 40 trim 0 "${frames}s"
check "the large answer is 11 MiB" test "$(stat -c %s "$work/big.wav")" = $((11 * 1048576))

export SLUICE_RESULTS_CORS_ORIGINS=$PRESIGN_URL # the page's origin
stages_up
t0=$SECONDS
PAGE_URL=$PRESIGN_URL/ RESULTS_URL=$RESULTS_URL ART_DIR=$ART_DIR SPEECH_WAV=$work/speech.wav \
  BIG_WAV=$work/big.wav OUT_DIR=$work PW_DIR=$PW_DIR CHROMIUM=$CHROMIUM STAGES_TOOL=$ROOT/tools/stages \
  node --test --test-concurrency=1 --test-reporter=spec "$HERE/e2e.test.mjs" 2>&1 | tee "$work/node.log"
rc=${PIPESTATUS[0]}
check "the browser tests passed (node --test exit $rc, $((SECONDS - t0)) s)" test "$rc" = 0
if [[ -s $work/resumed-key ]]; then
  key=$(cat "$work/resumed-key")
  curl -sS -o "$work/stored" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$key"
  check "the resumed answer is byte-identical in storage" cmp -s "$work/stored" "$work/big.wav"
else
  fail "the resume test did not get as far as the upload"
fi
check "screenshots kept in $ART_DIR ($(ls "$ART_DIR" | wc -l))" test "$(ls "$ART_DIR"/*.png 2>/dev/null | wc -l)" -ge 7
finish
