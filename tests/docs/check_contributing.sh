#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/docs/check_contributing.sh — CONTRIBUTING.md's "Writing a stage" says
# what the tree does: every repository path it names exists (a <name>
# placeholder is filled with a stage that has one: notify), every sl__ and
# SL__ symbol it names is defined or used under stages/, every test it names
# is registered in ctest, each command of its code block runs (build/ is the
# build tree given), and its claim holds: each stage listed in stages/main.c
# is one descriptor defined once under stages/<stage>/.
# Usage: check_contributing.sh REPO_ROOT SLUICE_BIN
set -euo pipefail
root=${1:?usage: check_contributing.sh REPO_ROOT SLUICE_BIN}
sluice=${2:?usage: check_contributing.sh REPO_ROOT SLUICE_BIN}
doc=$root/CONTRIBUTING.md
section=$(sed -n '/^## Writing a stage/,/^## /p' "$doc" | sed '$d')
[ -n "$section" ] || { echo "check_contributing: no \"Writing a stage\" in $doc" >&2; exit 2; }

bad=0 checked=0
fail() {
  echo "check_contributing: $*"
  bad=$((bad + 1))
}

# paths (in backticks, or Markdown links), with <name> as a real stage
paths=$( (grep -o '`[^` ]*/[^` ]*`' <<<"$section" | tr -d '`'
  grep -o '](\([^)#]*\)' <<<"$section" | sed 's/^](//') | sort -u)
for p in $paths; do
  case $p in
    build/* | sluice/* | */...*) continue ;; # the build tree, the runtime's include prefix
  esac
  f=${p//<name>/notify}
  checked=$((checked + 1))
  [ -e "$root/$f" ] || fail "names $p, but $f does not exist"
done

# symbols
for s in $(grep -o '\bS\?[sS][lL]__[A-Za-z_<>]*' <<<"$section" | sort -u); do
  s=${s//<name>/notify}
  checked=$((checked + 1))
  grep -rqw -- "$s" "$root/stages" || fail "names $s, which nothing under stages/ defines"
done

# tests
registered=$(grep -rho 'add_test(NAME [^ )]*' "$root/tests/CMakeLists.txt" | sed 's/add_test(NAME //')
for t in $(grep -o '`docs\.[a-z_]*`' <<<"$section" | tr -d '`' | sort -u); do
  grep -qx -- "$t" <<<"$registered" || fail "names the test $t, which ctest does not register"
done

# the commands of its code block
while IFS= read -r line; do
  cmd=${line%%#*}
  cmd=${cmd%%>*} # run it; writing the generated file is the docs.* tests' job
  [ -n "${cmd// /}" ] || continue
  cmd=${cmd/build\/stages\/sluice/$sluice}
  checked=$((checked + 1))
  if ! (cd "$root" && eval "$cmd") >/dev/null 2>&1; then
    fail "command \"${line}\" fails"
  fi
done < <(sed -n '/^```/,/^```/p' <<<"$section" | sed '/^```/d')

# one descriptor and one line: each stage main.c lists is defined once
listed=$(sed -n 's/^ *X(\(sl__[a-z_]*\)).*/\1/p' "$root/stages/main.c")
[ -n "$listed" ] || fail "stages/main.c lists no descriptors (X(sl__..._stage))"
for d in $listed; do
  n=$(grep -l "^const sl__stage_desc $d = {" "$root"/stages/*/*.c | wc -l)
  [ "$n" -eq 1 ] || fail "$d (listed in stages/main.c) is defined $n times under stages/*/"
done

if [ "$bad" -gt 0 ]; then
  echo "check_contributing: $bad claim(s) of \"Writing a stage\" do not hold"
  exit 1
fi
echo "check_contributing: the $checked files, symbols and commands \"Writing a stage\" names exist and run; the $(wc -w <<<"$listed") descriptors of stages/main.c are defined once each"
