#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `sluicectl submit` of large answers through presign's /s3/multipart:
#  - bad arguments exit 2 with a message and create nothing: --part-size
#    below 5 MiB or junk, --multipart-threshold junk, a (sparse) file that
#    would need more than 10000 parts;
#  - a 20 MiB WAV (espeak-ng speech padded with silence, 96 kHz stereo as in
#    test_multipart.sh) submitted with the default threshold (16 MiB) goes up
#    in 3 parts of 8 MiB (stderr says so; presign's multipart endpoints
#    answered create, batch, list and complete: 4 ok requests), the stored
#    object is byte-identical (signed GET, sha256), the progress bar reached
#    100%, and the question ends done with a transcript;
#  - resume: a 6 MiB WAV with --multipart-threshold 6000000 --part-size
#    5242880 (2 parts) and SLUICECTL_TEST_DROP_PART=1 (the first pass skips
#    part 1 as if its PUT was lost): the list shows the part missing, only it
#    is uploaded again, the upload completes, the object is byte-identical
#    and the question ends done.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
export PRESIGN_URL
MiB=$((1 << 20))
PRESIGN_ADMIN=$(admin presign)

ctl() { # ctl ARGS... : stdout in $work/out, stderr in $work/err, status in $RC
  RC=0
  "$SLUICECTL" "$@" >"$work/out" 2>"$work/err" || RC=$?
}
expect_usage() { # expect_usage WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  ctl "$@"
  check "usage: $what exits 2 ($RC)" test "$RC" = 2
  check "usage: $what says why ($(head -1 "$work/err"))" grep -q -- "$pat" "$work/err"
}
# wav SECONDS_OF_BYTES FILE: speech + silence, exactly $1 bytes (16-bit
# stereo 96 kHz: sox writes the plain 44-byte header)
wav() {
  local frames=$((($1 - 44) / 4))
  sox -V1 "$work/speech.wav" -r 96000 -c 2 -b 16 "$2" rate 96000 channels 2 pad 0 120 trim 0 "${frames}s"
}
stored_sha() { # stored_sha KEY -> sha256 of the object in storage (signed GET)
  curl -sS -o "$work/stored" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$SLUICE_S3_ENDPOINT/$SLUICE_S3_BUCKET/$1"
  sha256sum "$work/stored" | cut -d' ' -f1
  rm -f "$work/stored"
}
mp_ok() { metric sluice_multipart_requests_total 'outcome="ok"' "$PRESIGN_ADMIN"; }

stages_up
espeak-ng -s 140 -w "$work/speech.wav" "On weekends I usually go hiking in the mountains with my friends."
wav $((20 * MiB)) "$work/big.wav"
check "the big answer is exactly 20 MiB" test "$(stat -c %s "$work/big.wav")" = $((20 * MiB))
wav $((6 * MiB)) "$work/mid.wav"
check "the middle answer is exactly 6 MiB" test "$(stat -c %s "$work/mid.wav")" = $((6 * MiB))
truncate -s 60G "$work/huge.wav" # sparse: 12288 parts of 5 MiB

# 1 bad arguments ----------------------------------------------------------
accepted0=$(metric sluice_submissions_total 'outcome="accepted"' "$PRESIGN_ADMIN")
expect_usage "--part-size below 5 MiB" "--part-size wants bytes from 5242880" \
  submit --part-size 5242879 "$work/big.wav"
expect_usage "--part-size junk" "--part-size wants" submit --part-size 8MiB "$work/big.wav"
expect_usage "--part-size above 5 GiB" "--part-size wants" submit --part-size 5368709121 "$work/big.wav"
expect_usage "--multipart-threshold 0" "--multipart-threshold wants" \
  submit --multipart-threshold 0 "$work/big.wav"
expect_usage "a file needing more than 10000 parts" "more than 10000 parts" \
  submit --part-size 5242880 "$work/huge.wav"
check "usage errors created no submission" \
  test "$(metric sluice_submissions_total 'outcome="accepted"' "$PRESIGN_ADMIN")" = "$accepted0"
rm -f "$work/huge.wav"

# 2 a 20 MiB answer with the defaults ---------------------------------------
ok0=$(mp_ok)
ctl submit --json --prompt "What do you do on weekends?" "$work/big.wav"
check "submit of 20 MiB exits 0 ($RC)" test "$RC" = 0
((RC == 0)) || cat "$work/err" >&2
res=$(cat "$work/out")
check "the question ends done ($(jq -c '.questions[0] | {state, error}' <<<"$res" 2>/dev/null))" \
  jqe '.summary.total == 1 and .summary.done == 1 and .questions[0].state == "done"' "$res"
check "  transcribed ($(jq -r '.questions[0].transcript' <<<"$res" | head -c 60))" \
  jqe '.questions[0].transcript | length > 0' "$res"
check "stderr: multipart with 3 parts of 8 MiB" grep -q "q1 multipart: 3 part(s) of up to 8388608 bytes" "$work/err"
check "stderr: the upload completed" grep -q "q1: 3 part(s) stored, multipart upload complete" "$work/err"
check "stderr: no resume was needed" bash -c "! grep -q resuming '$work/err'"
check "the progress bar reached 100%" grep -q '\] 20971520/20971520 100%' "$work/err"
check "presign answered 4 multipart requests ok (create, batch, list, complete): $(($(mp_ok) - ok0))" \
  test "$(($(mp_ok) - ok0))" = 4
key=$(sed -n 's/.*q1 multipart: .* bytes to \(submissions\/[^ ]*\)$/\1/p' "$work/err")
sid=$(jq -r .submission_id <<<"$res")
check "the object key is one of the submission's ($key)" test -n "$key" -a "${key#submissions/"$sid"/}" != "$key"
check "the stored object is byte-identical (sha256)" \
  test "$(stored_sha "$key")" = "$(sha256sum "$work/big.wav" | cut -d' ' -f1)"

# 3 resume after a lost part --------------------------------------------------
ok0=$(mp_ok)
RC=0
SLUICECTL_TEST_DROP_PART=1 "$SLUICECTL" submit --json --multipart-threshold 6000000 \
  --part-size 5242880 "$work/mid.wav" >"$work/out" 2>"$work/err" || RC=$?
check "submit with a lost part exits 0 ($RC)" test "$RC" = 0
((RC == 0)) || cat "$work/err" >&2
res=$(cat "$work/out")
check "the question ends done" jqe '.summary.done == 1 and .questions[0].state == "done"' "$res"
check "stderr: 2 parts of 5 MiB" grep -q "q1 multipart: 2 part(s) of up to 5242880 bytes" "$work/err"
check "stderr: part 1 dropped on the first pass" grep -q "part 1: dropped" "$work/err"
check "stderr: resumed with only the missing part" grep -q "resuming: storage lacks 1 of 2 part(s) (first: 1)" "$work/err"
check "stderr: the upload completed" grep -q "q1: 2 part(s) stored, multipart upload complete" "$work/err"
check "presign answered 6 ok (create, batch, list, batch, list, complete): $(($(mp_ok) - ok0))" \
  test "$(($(mp_ok) - ok0))" = 6
key=$(sed -n 's/.*q1 multipart: .* bytes to \(submissions\/[^ ]*\)$/\1/p' "$work/err")
check "the stored object is byte-identical (sha256)" \
  test "$(stored_sha "$key")" = "$(sha256sum "$work/mid.wav" | cut -d' ' -f1)"
finish
