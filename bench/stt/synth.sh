#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/stt/synth.sh OUTDIR [SENTENCES] - speak the fixed sentence set
# (bench/stt/sentences.tsv: voice, words per minute, text) with espeak-ng, one
# answer per line, stored as the pipeline hands audio to STT: 16 kHz mono FLAC
# (what step/preflight stores). Writes OUTDIR/NN.flac and OUTDIR/ref.tsv
# ("NN<TAB>text", the reference for bench/stt/wer.sh). Deterministic: the same
# espeak-ng gives the same audio, so only the text is committed.
set -euo pipefail
out=${1:?usage: bench/stt/synth.sh OUTDIR [SENTENCES]}
list=${2:-$(dirname "$0")/sentences.tsv}
mkdir -p "$out"
: >"$out/ref.tsv"
n=0
while IFS=$'\t' read -r voice wpm text; do
  [[ -z $voice || $voice == '#'* ]] && continue
  n=$((n + 1))
  id=$(printf '%02d' "$n")
  espeak-ng -v "$voice" -s "$wpm" -w "$out/$id.wav" "$text"
  sox -V1 "$out/$id.wav" -r 16000 -c 1 "$out/$id.flac"
  rm -f -- "$out/$id.wav"
  printf '%s\t%s\n' "$id" "$text" >>"$out/ref.tsv"
done <"$list"
((n > 0)) || { echo "synth: no sentences in $list" >&2; exit 1; }
