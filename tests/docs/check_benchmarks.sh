#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/docs/check_benchmarks.sh — the benchmark docs say what their raw
# results say, and name every one of them:
#   1. docs/benchmarks.md (the current figures) has one table per area, and
#      every row of them gives an anchor, a ratio column, a command in
#      backticks and a date; every raw results file it names exists;
#   2. every "Sluice build: B. Raw results: `F`" line of the journal
#      (docs/benchmarks-history.md, written by bench/api/run, bench/poll/run
#      and bench/presign/run) names the build type and the BENCH_LABEL that F,
#      the JSON under bench/results/, recorded: "B" is its "build", followed
#      by " (label)" when it has a non-empty "label". A report that printed
#      something else (bench/api/run once wrote "RelWithDebInforamp", a loop
#      variable's value, where the label belongs) fails here;
#   3. every bench/results/*.json is named in one of the two files (a result
#      that backs no figure is removed, not kept unexplained).
# Usage: check_benchmarks.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
doc=$root/docs/benchmarks.md
journal=$root/docs/benchmarks-history.md
command -v jq >/dev/null || { echo "check_benchmarks: jq not found" >&2; exit 2; }
for f in "$doc" "$journal"; do [ -f "$f" ] || { echo "check_benchmarks: no $f" >&2; exit 2; }; done

bad=0

# ---- 1. the current tables ------------------------------------------------------
# each table's header names its columns; every row fills "command" with a
# command in backticks and "date" with a date (or "as above")
report=$(awk -F'|' '
  function trim(x) { gsub(/^ +| +$/, "", x); return x }
  /^\| *(figure|stage) *\|/ {
    tables++; cmd = 0; dat = 0
    for (i = 2; i < NF; i++) {
      h = trim($i)
      if (h ~ /^command/) cmd = i
      if (h ~ /^date/) dat = i
    }
    if (!cmd || !dat || $0 !~ /\| *anchor/ || $0 !~ /\| *ratio/) {
      print FILENAME ":" NR ": a table without anchor, ratio, command and date columns"; bad++
    }
    next
  }
  /^\|---/ { next }
  /^\|/ && tables {
    rows++
    c = trim($cmd); d = trim($dat)
    if (c != "as above" && c !~ /`[^`]+`/) { print FILENAME ":" NR ": no command"; bad++ }
    if (d != "as above" && d !~ /20[0-9][0-9]-[01][0-9]-[0-3][0-9]/) { print FILENAME ":" NR ": no date"; bad++ }
  }
  END { printf "%d %d %d\n", tables, rows, bad }' "$doc")
summary=$(tail -n 1 <<<"$report")
grep -v '^[0-9]* [0-9]* [0-9]*$' <<<"$report" >&2 || true
read -r tables rows nbad <<<"$summary"
bad=$((bad + nbad))
[ "$tables" -gt 0 ] && [ "$rows" -gt 0 ] ||
  { echo "check_benchmarks: no current table in docs/benchmarks.md" >&2; bad=$((bad + 1)); }
while IFS= read -r file; do
  [ -f "$root/$file" ] || { echo "docs/benchmarks.md: raw results $file do not exist" >&2; bad=$((bad + 1)); }
done < <(grep -o 'bench/results/[A-Za-z0-9._-]*\.json' "$doc" | sort -u)

# ---- 2. the journal's build lines -----------------------------------------------
checked=0
while IFS= read -r hit; do
  line=${hit%%:*}
  said=$(sed -n 's/.*Sluice build: \(.*\)\. Raw results: `[^`]*`.*/\1/p' <<<"${hit#*:}")
  file=$(sed -n 's/.*Sluice build: .*\. Raw results: `\([^`]*\)`.*/\1/p' <<<"${hit#*:}")
  if [ ! -f "$root/$file" ]; then
    echo "docs/benchmarks-history.md:$line: raw results $file do not exist" >&2
    bad=$((bad + 1))
    continue
  fi
  want=$(jq -r 'if .build == null then empty else
                  .build + (if (.label // "") == "" then "" else " (" + .label + ")" end) end' \
    "$root/$file")
  [ -n "$want" ] || continue # results from before the build was recorded
  checked=$((checked + 1))
  if [ "$said" != "$want" ]; then
    echo "docs/benchmarks-history.md:$line: says build \"$said\", $file recorded \"$want\"" >&2
    bad=$((bad + 1))
  fi
done < <(grep -n 'Sluice build: .*\. Raw results: `' "$journal")
[ "$checked" -gt 0 ] ||
  { echo "check_benchmarks: no report line with a recorded build found" >&2; bad=$((bad + 1)); }

# ---- 3. every raw result named ----------------------------------------------------
named=0
for f in "$root"/bench/results/*.json; do
  b=${f##*/}
  if grep -qF "$b" "$doc" "$journal"; then
    named=$((named + 1))
  else
    echo "bench/results/$b: named in neither docs/benchmarks.md nor docs/benchmarks-history.md" >&2
    bad=$((bad + 1))
  fi
done

[ "$bad" -eq 0 ] || { echo "check_benchmarks: $bad problem(s)" >&2; exit 1; }
echo "docs/benchmarks.md: $tables current tables, $rows rows; the journal: $checked report lines agree" \
  "with their raw results; $named raw results, each named"
