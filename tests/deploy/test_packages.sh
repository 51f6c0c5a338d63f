#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/deploy/test_packages.sh BUILD_DIR - deploy/Dockerfile and tools/bootstrap
# install from one list, and what the image gets is enough (no Docker engine):
#   1. tools/bootstrap --print-apt: build, runtime and dev lists, disjoint, and
#      `all` is their union (what bootstrap installs);
#   2. the Dockerfile installs exactly `--print-apt build` in its build stage and
#      `--print-apt runtime` in its runtime stage, and names no package itself;
#   3. it builds with the Makefile's `make build` and installs with
#      `cmake --install ... --prefix /opt/sluice`, copied whole into the runtime
#      stage; it runs as a non-root numeric user;
#   4. `cmake --install BUILD_DIR` gives bin/sluice, bin/sluicectl and every built
#      plugin in lib/sluice/plugins, and the installed sluice finds its plugins
#      there (../lib/sluice/plugins) with nothing else on its path;
#   5. every library the installed binaries and plugins link (DT_NEEDED) belongs
#      to a package that installing runtime.txt brings in (dpkg's dependency
#      closure), and the PocketSphinx model the plugin defaults to comes from a
#      runtime.txt package.
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$HERE/../.." && pwd -P)
BUILD=$(realpath -m -- "${1:?usage: test_packages.sh BUILD_DIR}")
DOCKERFILE=$ROOT/deploy/Dockerfile
WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT

pass=0
fail=0
ok() { printf 'ok   %s\n' "$*"; pass=$((pass + 1)); }
bad() { printf 'FAIL %s\n' "$*"; fail=$((fail + 1)); }

# --- 1. the lists
for set in build runtime dev all; do
  "$ROOT/tools/bootstrap" --print-apt "$set" >"$WORK/$set.txt"
done
if [[ -s $WORK/build.txt && -s $WORK/runtime.txt && -s $WORK/dev.txt ]]; then
  ok "bootstrap lists: $(wc -l <"$WORK/build.txt") build, $(wc -l <"$WORK/runtime.txt") runtime, $(wc -l <"$WORK/dev.txt") dev packages"
else
  bad "an empty package list"
fi
dups=$(cat "$WORK/build.txt" "$WORK/runtime.txt" "$WORK/dev.txt" | sort | uniq -d)
[[ -z $dups ]] && ok "the lists are disjoint" || bad "packages in two lists: $dups"
if cmp -s <(sort "$WORK/all.txt") <(sort "$WORK/build.txt" "$WORK/runtime.txt" "$WORK/dev.txt"); then
  ok "--print-apt all (what bootstrap installs) is build + runtime + dev"
else
  bad "--print-apt all differs from build + runtime + dev"
fi
if "$ROOT/tools/bootstrap" --print-apt nonsense >/dev/null 2>&1; then
  bad "--print-apt nonsense accepted"
else
  ok "--print-apt with an unknown list is refused"
fi

# --- 2./3. the Dockerfile
# join continuation lines, drop comments: one instruction per line
sed -e 's/#.*$//' "$DOCKERFILE" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' |
  sed -e 's/[[:space:]]\+/ /g' -e 's/^ //' -e '/^$/d' >"$WORK/df"
mapfile -t froms < <(grep -n '^FROM ' "$WORK/df" | cut -d: -f1)
if [[ ${#froms[@]} -eq 2 ]] && grep -q '^FROM .* AS build$' "$WORK/df"; then
  ok "two stages: build and runtime"
else
  bad "want exactly two FROM (build, runtime), got: $(grep '^FROM' "$WORK/df" | tr '\n' ';')"
fi
build_stage=$(sed -n "${froms[0]},$((froms[1] - 1))p" "$WORK/df")
runtime_stage=$(sed -n "${froms[1]},\$p" "$WORK/df")
grep -q 'debian:12-slim' "$WORK/df" && ok "based on debian:12-slim" || bad "not based on debian:12-slim"
for pair in "build:$build_stage" "runtime:$runtime_stage"; do
  set=${pair%%:*}
  text=${pair#*:}
  # every apt-get install must read its packages from bootstrap's list for this stage
  n_inst=$(grep -o 'apt-get install' <<<"$text" | wc -l)
  want="bootstrap --print-apt $set > /tmp/$set-packages && xargs -a /tmp/$set-packages apt-get install -y -q --no-install-recommends &&"
  if [[ $n_inst -eq 1 ]] && grep -qF -- "$want" <<<"$text"; then
    ok "$set stage installs exactly \`tools/bootstrap --print-apt $set\`"
  else
    bad "$set stage: want one apt-get install fed by \`bootstrap --print-apt $set\` ($n_inst installs)"
  fi
done
if grep -qE 'apt-get install[^&]* [a-z0-9][a-z0-9.+-]*[0-9a-z]( |$)' <(grep -o 'apt-get install[^&]*' "$WORK/df" |
  sed 's/apt-get install -y -q --no-install-recommends//'); then
  bad "the Dockerfile names packages of its own: $(grep -o 'apt-get install[^&]*' "$WORK/df")"
else
  ok "the Dockerfile names no package itself"
fi
# the Makefile's build target, then cmake --install into /opt/sluice
if grep -qF 'RUN make build BUILD=build && cmake --install build --prefix /opt/sluice' <<<"$build_stage" &&
  grep -qE '^build:$' "$ROOT/Makefile"; then
  ok "builds with the Makefile's \`make build\` and installs with \`cmake --install\` into /opt/sluice"
else
  bad "build stage does not run \`make build BUILD=build && cmake --install build --prefix /opt/sluice\`"
fi
grep -qF 'COPY --from=build /opt/sluice /opt/sluice' <<<"$runtime_stage" &&
  ok "runtime stage copies /opt/sluice from the build stage" || bad "runtime stage lacks /opt/sluice"
user=$(grep '^USER ' <<<"$runtime_stage" | tail -n1 | cut -d' ' -f2)
if [[ $user =~ ^([1-9][0-9]*):([1-9][0-9]*)$ ]]; then
  ok "runs as numeric non-root user $user (runAsNonRoot can verify it)"
else
  bad "USER is \"$user\", want a numeric non-root uid:gid"
fi
entry=$(grep '^ENTRYPOINT ' <<<"$runtime_stage")
[[ $entry == 'ENTRYPOINT ["/opt/sluice/bin/sluice"]' ]] && ok "entrypoint /opt/sluice/bin/sluice" ||
  bad "entrypoint: $entry"

# --- 4. the install tree
PREFIX=$WORK/opt/sluice
if cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1; then
  ok "cmake --install $(basename "$BUILD") --prefix ..."
else
  bad "cmake --install failed: $(tail -n 5 "$WORK/install.log")"
fi
bins=$(cd "$PREFIX/bin" 2>/dev/null && ls | tr '\n' ' ')
[[ $bins == "sluice sluicectl " ]] && ok "bin/ holds sluice and sluicectl only" || bad "bin/ holds: $bins"
built=$(cd "$BUILD/lib/sluice/plugins" && ls *.so | sort | tr '\n' ' ')
inst=$(cd "$PREFIX/lib/sluice/plugins" 2>/dev/null && ls *.so | sort | tr '\n' ' ')
if [[ -n $built && $built == "$inst" ]]; then
  ok "every built plugin is installed in lib/sluice/plugins: $inst"
else
  bad "plugins built: $built; installed: $inst"
fi
list=$(env -u SLUICE_PLUGIN_PATH "$PREFIX/bin/sluice" plugin list 2>&1 || true)
if grep -qF "$PREFIX/bin/../lib/sluice/plugins/stt-pocketsphinx.so" <<<"$list" &&
  grep -qF "$PREFIX/bin/../lib/sluice/plugins/grade-rubric.so" <<<"$list"; then
  ok "the installed sluice finds its plugins at ../lib/sluice/plugins"
else
  bad "installed sluice plugin list:"$'\n'"$list"
fi
if "$PREFIX/bin/sluicectl" --help >/dev/null 2>&1; then
  ok "the installed sluicectl runs"
else
  bad "installed sluicectl --help failed"
fi

# --- 5. the runtime list covers what the binaries link
sanitized=0
grep -qE '^SLUICE_(ASAN|UBSAN):BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null && sanitized=1
mapfile -t runtime_pkgs <"$WORK/runtime.txt"
if python3 "$HERE/dpkg_closure.py" "${runtime_pkgs[@]}" >"$WORK/closure.txt" 2>"$WORK/err"; then
  uncovered=()
  nlibs=0
  ldconfig -p >"$WORK/ldcache"
  for f in "$PREFIX"/bin/* "$PREFIX"/lib/sluice/plugins/*.so; do
    while read -r soname; do
      path=$(awk -v s="$soname" '$1 == s && /x86-64|64bit/ {print $NF; exit}' "$WORK/ldcache")
      [[ -n $path ]] || path=$(awk -v s="$soname" '$1 == s {print $NF; exit}' "$WORK/ldcache")
      if [[ -z $path ]]; then
        uncovered+=("$(basename "$f"):$soname(not found)")
        continue
      fi
      # dpkg knows a file by the path its package ships (usrmerge: /lib or /usr/lib)
      pkg=$( (dpkg -S "$(realpath "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null ||
        dpkg -S "/usr$path" 2>/dev/null || true) | sed -n 1p | cut -d: -f1)
      nlibs=$((nlibs + 1))
      if grep -qxF -- "$pkg" "$WORK/closure.txt"; then
        continue
      elif [[ $sanitized == 1 && $pkg =~ ^lib(asan|ubsan)[0-9]+$ ]]; then
        continue # the sanitizer runtime of this build only; the image builds without
      fi
      uncovered+=("$(basename "$f"):$soname($pkg)")
    done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done
  if [[ ${#uncovered[@]} -eq 0 && $nlibs -gt 0 ]]; then
    ok "runtime.txt (with its dependencies: $(wc -l <"$WORK/closure.txt") packages) covers all $nlibs libraries the binaries and plugins link"
  else
    bad "libraries outside runtime.txt's closure: ${uncovered[*]}"
  fi
else
  bad "runtime.txt: $(<"$WORK/err") (run tools/bootstrap)"
fi
model=$( ("$PREFIX/bin/sluice" plugin doc 2>/dev/null || true) | sed -n 's/^| `stt.pocketsphinx.model_dir` | [^|]* | `\([^`]*\)`.*/\1/p')
owner=$( (dpkg -S "$model" 2>/dev/null || true) | cut -d: -f1 | tr ', ' '\n\n' | sed '/^$/d' | sed -n 1p)
if [[ -n $model && -n $owner ]] && grep -qxF -- "$owner" "$WORK/runtime.txt"; then
  ok "the pocketsphinx plugin's default model $model comes from runtime.txt's $owner"
else
  bad "model dir \"$model\" is owned by \"$owner\", which runtime.txt does not list"
fi

printf '%d passed, %d failed\n' "$pass" "$fail"
[[ $fail -eq 0 ]]
