#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/deploy/test_image.sh - the built image (IMAGE, default sluice:dev) run
# as it runs in Kubernetes: read-only root filesystem, a tmpfs on /tmp, no
# capabilities, no new privileges, as its own non-root user.
#   1. its user is numeric and non-root, and it cannot write outside /tmp;
#   2. `sluice --version` names the version, a git revision and the plugin ABI
#      of runtime/include/sluice/sl_plugin.h;
#   3. every command and every stage of the pipeline answers --help, and
#      sluicectl runs;
#   4. the plugins load: `sluice plugin list` lists every plugin the image
#      holds, from /opt/sluice/lib/sluice/plugins, and grade/rubric grades;
#   5. every stage of the pipeline, each in its own container on the host's
#      network, reaches ready against the dev stack (DEVSTACK_*, started by
#      lib.sh when it is not up) and stops cleanly on SIGTERM (docker stop).
# Skipped (exit 77) when Docker is not installed, its daemon does not answer or
# the image is not built: `make test-image` builds it, starts the daemon and
# runs this test (docs/deploy.md, "The image").
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
IMAGE=${IMAGE:-sluice:dev}
DOCKER=${DOCKER:-$(command -v docker || true)}
skip() { echo "SKIP test_image: $* (make test-image builds the image and runs this test)"; exit 77; }
[[ -n $DOCKER && -x $DOCKER ]] || skip "Docker is not installed"
"$DOCKER" info >/dev/null 2>&1 || skip "the Docker daemon does not answer"
"$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1 || skip "no image $IMAGE"

source "$HERE/../integration/lib.sh"
NAME=sluice-image-test-$$
RUN=("$DOCKER" run --rm --read-only --tmpfs /tmp --cap-drop ALL
  --security-opt no-new-privileges --network host)
containers=()
at_exit 'for c in "${containers[@]}"; do "$DOCKER" rm -f "$c" >/dev/null 2>&1; done'

# --- 1. user and read-only root
user=$("$DOCKER" image inspect -f '{{.Config.User}}' "$IMAGE")
check "image user $user is numeric and not root" \
  bash -c '[[ $1 =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]]' _ "$user"
check "runs as uid ${user%%:*}" \
  test "$("${RUN[@]}" --entrypoint id "$IMAGE" -u)" = "${user%%:*}"
check "cannot write to the root filesystem" \
  bash -c '! "$@" --entrypoint touch "$IMAGE" /opt/sluice/x 2>/dev/null' _ "${RUN[@]}"
check "can write to /tmp" "${RUN[@]}" --entrypoint touch "$IMAGE" /tmp/x

# --- 2. --version
ver=$("${RUN[@]}" "$IMAGE" --version)
abi=$(sed -n 's/^#define SL_PLUGIN_ABI_VERSION \([0-9]*\)u.*/\1/p' "$ROOT/runtime/include/sluice/sl_plugin.h")
want_ver=$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
log "--version: $(tr '\n' ' ' <<<"$ver")"
check "--version names version $want_ver" grep -qx "sluice $want_ver" <<<"$ver"
check "--version names a git revision" grep -qE '^git revision [0-9a-f]{7,}' <<<"$ver"
check "--version names plugin ABI $abi" grep -qx "plugin ABI $abi" <<<"$ver"

# --- 3. --help everywhere
stages=$("${RUN[@]}" "$IMAGE" pipeline --json | jq -r '.stages[].name')
# the commands `sluice --help` lists (all but `stage`, which needs a name)
commands=$("${RUN[@]}" "$IMAGE" --help | awk '/^commands:/ {on = 1; next} on && $1 !~ /^-/ {print $1}' |
  grep -vx stage)
for c in $commands; do
  check "sluice $c --help" bash -c '"$@" >/dev/null' _ "${RUN[@]}" "$IMAGE" "$c" --help
done
for s in $stages; do
  check "sluice stage $s --help" bash -c '"$@" >/dev/null' _ "${RUN[@]}" "$IMAGE" stage "$s" --help
done
check "sluicectl --help" bash -c '"$@" >/dev/null' _ "${RUN[@]}" --entrypoint sluicectl "$IMAGE" --help

# --- 4. plugins
list=$("${RUN[@]}" "$IMAGE" plugin list)
files=$("${RUN[@]}" --entrypoint ls "$IMAGE" /opt/sluice/lib/sluice/plugins | grep -c '\.so$')
log "plugins: $(awk '{print $1 "/" $2}' <<<"$list" | tr '\n' ' ')"
check "plugin list shows all $files plugins of the image" test "$(grep -c . <<<"$list")" -eq "$files"
check "every plugin loads from /opt/sluice/lib/sluice/plugins" \
  bash -c '! grep -v /opt/sluice/bin/../lib/sluice/plugins/ <<<"$1"' _ "$list"
for p in "stt pocketsphinx" "stt openai" "grade rubric" "grade openai" "step preflight"; do
  check "plugin $p listed" grep -qE "^${p% *} +${p#* } " <<<"$list"
done
work=$(mktemp -d)
at_exit "rm -rf -- '$work'"
echo '{"transcript": "plants make sugar from light", "duration_s": 10}' >"$work/t.json"
chmod -R a+rX "$work"
check "grade/rubric grades a transcript in the image" bash -c \
  '"$@" | jq -e ".plugin == \"grade/rubric\" and .outcome == \"done\" and (.score | type) == \"number\"" >/dev/null' \
  _ "${RUN[@]}" -v "$work:/in:ro" "$IMAGE" plugin run grade rubric /in/t.json

# --- 5. every stage ready against the dev stack, stopped by SIGTERM
"$ROOT/tools/devstack" env | sed -n 's/^export //p' | tr -d "'\"" >"$work/env"
{
  echo "SLUICE_PRESIGN_LISTEN=$SLUICE_PRESIGN_LISTEN"
  echo "SLUICE_RESULTS_LISTEN=$SLUICE_RESULTS_LISTEN"
  echo "SLUICE_PRESIGN_RESULTS_BASE_URL=$SLUICE_PRESIGN_RESULTS_BASE_URL"
} >>"$work/env"
i=0
declare -A port
for s in $stages; do
  port[$s]=$((BASE + 170 + i))
  i=$((i + 1))
  c=$NAME-$s
  containers+=("$c")
  "$DOCKER" run -d --name "$c" --read-only --tmpfs /tmp --cap-drop ALL \
    --security-opt no-new-privileges --network host --env-file "$work/env" \
    -e SLUICE_ADMIN_LISTEN="127.0.0.1:${port[$s]}" "$IMAGE" stage "$s" >/dev/null
done
for s in $stages; do
  wait_for 60 admin_ready "${port[$s]}" && log "ok: $s ready in the image (admin port ${port[$s]})" ||
    fail "$s not ready within 60 s: $("$DOCKER" logs --tail 5 "$NAME-$s" 2>&1)"
done
for s in $stages; do
  "$DOCKER" stop -t 30 "$NAME-$s" >/dev/null
  rc=$("$DOCKER" inspect -f '{{.State.ExitCode}}' "$NAME-$s")
  check "$s exits 0 on SIGTERM (exit $rc)" test "$rc" = 0
  check "$s logs a clean stop" bash -c '"$@" 2>&1 | grep -q "\"msg\":\"stopped\""' _ \
    "$DOCKER" logs "$NAME-$s"
done
finish
