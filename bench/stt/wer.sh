#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/stt/wer.sh REF HYP - word error rate of transcripts against references.
# REF and HYP hold "id<TAB>text" lines; lines are paired by id (an id missing
# from HYP counts as an empty transcript). Words are compared after
# normalisation: lower case, hyphens as spaces, every character but a-z, 0-9
# and blanks dropped (so "Don't," = "dont"). Per line: substitutions +
# deletions + insertions of a word-level Levenshtein alignment.
# Prints "id<TAB>errors<TAB>words<TAB>hypothesis" per line, then
# "WER<TAB>errors<TAB>words<TAB>percent" (one decimal) last.
set -euo pipefail
ref=${1:?usage: bench/stt/wer.sh REF HYP}
hyp=${2:?usage: bench/stt/wer.sh REF HYP}
awk -F'\t' '
function norm(s) {
  s = tolower(s); gsub(/-/, " ", s); gsub(/[^a-z0-9 ]/, "", s)
  gsub(/ +/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s)
  return s
}
function edits(r, h,    nr, nh, rw, hw, i, j, d, sub_) {
  nr = (r == "") ? 0 : split(r, rw, " ")
  nh = (h == "") ? 0 : split(h, hw, " ")
  for (j = 0; j <= nh; j++) d[0, j] = j
  for (i = 1; i <= nr; i++) {
    d[i, 0] = i
    for (j = 1; j <= nh; j++) {
      sub_ = d[i - 1, j - 1] + (rw[i] != hw[j])
      d[i, j] = sub_
      if (d[i - 1, j] + 1 < d[i, j]) d[i, j] = d[i - 1, j] + 1
      if (d[i, j - 1] + 1 < d[i, j]) d[i, j] = d[i, j - 1] + 1
    }
  }
  words = nr
  return d[nr, nh]
}
FNR == NR { hyps[$1] = $2; next }
{
  e = edits(norm($2), norm(hyps[$1]))
  E += e; W += words
  printf "%s\t%d\t%d\t%s\n", $1, e, words, hyps[$1]
}
END {
  if (W == 0) { print "wer: no reference words" > "/dev/stderr"; exit 1 }
  printf "WER\t%d\t%d\t%.1f\n", E, W, 100 * E / W
}' "$hyp" "$ref"
