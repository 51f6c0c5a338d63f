#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/tools/check_stage_includes.sh — a stage folder includes only the
# stage library (stages/lib/), the runtime ("sluice/..."), generated headers
# of the build tree and its own headers; never another stage's. What two
# stages share belongs in stages/lib/, which in turn includes only itself and
# the runtime. Reads the #include "..." lines of stages/*/*.[ch] and prints
# every one that breaks this, then fails.
# Usage: check_stage_includes.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
stages=$root/stages
[ -d "$stages/lib" ] || { echo "check_stage_includes: no $stages/lib" >&2; exit 2; }

bad=0 checked=0
for dir in "$stages"/*/; do
  folder=$(basename "$dir")
  for f in "$dir"*.[ch]; do
    [ -e "$f" ] || continue
    while IFS= read -r hit; do
      line=${hit%%:*}
      inc=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"${hit#*:}")
      [ -n "$inc" ] || continue
      checked=$((checked + 1))
      why=
      case $inc in
        sluice/*) ;;                               # the runtime
        lib/*) [ -e "$stages/$inc" ] || why="no such library header" ;;
        *..*) why="reaches out of the folder" ;;
        */*) why="names another folder's header" ;;
        *)
          # its own header, or one generated in the build tree
          if [ ! -e "$dir$inc" ]; then
            for other in "$stages"/*/; do
              [ "$other" != "$dir" ] && [ -e "$other$inc" ] && why="another stage's header ($(basename "$other")/$inc)"
            done
          fi
          ;;
      esac
      # the library includes nothing of a stage's, not even by a lib/-less name
      if [ -z "$why" ] && [ "$folder" = lib ] && [[ $inc != sluice/* && $inc != lib/* ]] &&
        [ -e "$dir$inc" ]; then
        why="write it as lib/$inc"
      fi
      if [ -n "$why" ]; then
        echo "${f#"$root"/}:$line: #include \"$inc\": $why"
        bad=$((bad + 1))
      fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
  done
done
if [ "$bad" -gt 0 ]; then
  echo "check_stage_includes: $bad include(s) break the rule (shared code goes in stages/lib/)"
  exit 1
fi
echo "check_stage_includes: $checked includes of stages/*/ name only lib/, the runtime and their own folder"
