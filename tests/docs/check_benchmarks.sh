#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/docs/check_benchmarks.sh — docs/benchmarks.md says what its raw
# results say: every "Sluice build: B. Raw results: `F`" line (written by
# bench/api/run and bench/poll/run) names the build type and the BENCH_LABEL
# that F, the JSON under bench/results/, recorded: "B" is its "build",
# followed by " (label)" when it has a non-empty "label". A report that
# printed something else (bench/api/run once wrote "RelWithDebInforamp",
# a loop variable's value, where the label belongs) fails here.
# Usage: check_benchmarks.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
doc=$root/docs/benchmarks.md
command -v jq >/dev/null || { echo "check_benchmarks: jq not found" >&2; exit 2; }
[ -f "$doc" ] || { echo "check_benchmarks: no $doc" >&2; exit 2; }

checked=0 bad=0
while IFS= read -r hit; do
  line=${hit%%:*}
  said=$(sed -n 's/.*Sluice build: \(.*\)\. Raw results: `[^`]*`.*/\1/p' <<<"${hit#*:}")
  file=$(sed -n 's/.*Sluice build: .*\. Raw results: `\([^`]*\)`.*/\1/p' <<<"${hit#*:}")
  if [ ! -f "$root/$file" ]; then
    echo "docs/benchmarks.md:$line: raw results $file do not exist" >&2
    bad=$((bad + 1))
    continue
  fi
  want=$(jq -r 'if .build == null then empty else
                  .build + (if (.label // "") == "" then "" else " (" + .label + ")" end) end' \
    "$root/$file")
  [ -n "$want" ] || continue # results from before the build was recorded
  checked=$((checked + 1))
  if [ "$said" != "$want" ]; then
    echo "docs/benchmarks.md:$line: says build \"$said\", $file recorded \"$want\"" >&2
    bad=$((bad + 1))
  fi
done < <(grep -n 'Sluice build: .*\. Raw results: `' "$doc")

[ "$checked" -gt 0 ] || { echo "check_benchmarks: no report line with a recorded build found" >&2; exit 1; }
[ "$bad" -eq 0 ] || { echo "check_benchmarks: $bad report line(s) disagree with their raw results" >&2; exit 1; }
echo "docs/benchmarks.md: $checked report lines agree with their raw results"
