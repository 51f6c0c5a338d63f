#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/deploy/test_deb.sh BUILD_DIR - the Debian package (cmake/package.cmake,
# `make deb`) made from BUILD_DIR with cpack, then:
#   1. its files: sluice, sluicectl and every built plugin under /usr, the
#      template unit sluice@.service, /etc/sluice/sluice.env as a conffile, and
#      a Depends line naming every package of tools/packages/runtime.txt;
#   2. the unit: hardened (DynamicUser, ProtectSystem=strict, a restart
#      policy, /etc/sluice/<stage>.env); with the package's drop-ins, every
#      stage has MemoryMax, TasksMax and CPUQuota (preflight 512M), the
#      metadata addresses denied, and all but notify IPAddressDeny=any with
#      only localhost and the cluster ranges allowed; /etc/sluice/sluice.env
#      (secrets) is 0640 root:root; `systemd-analyze verify` of an instance
#      per stage of the pipeline says nothing, and `systemd-analyze security`
#      rates it below 3 (the "OK" band);
#   3. when a Docker daemon answers and the local Debian image (IMAGE_BASE,
#      default sluice-base:bookworm: `make image` makes it) is there: `apt-get
#      install ./sluice_*.deb` in a container of it, then every stage started by
#      the unit's own ExecStart line (systemd does not run in the container),
#      with its settings from /etc/sluice/sluice.env and /etc/sluice/<stage>.env,
#      as an unprivileged uid as DynamicUser would, reaches ready on the dev
#      stack (DEVSTACK_*) and stops cleanly on SIGTERM.
# Part 3 is skipped, with the reason, when Docker or the image is missing
# (`make test-deb` runs all of it); the exit status is then 0 if 1-2 pass.
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$HERE/../.." && pwd -P)
BUILD=$(realpath -m -- "${1:?usage: test_deb.sh BUILD_DIR}")
IMAGE_BASE=${IMAGE_BASE:-sluice-base:bookworm}
DOCKER=${DOCKER:-$(command -v docker || true)}
WORK=$(mktemp -d)
CONTAINER=sluice-deb-test-$$
cleanup() {
  [[ -z $DOCKER ]] || "$DOCKER" rm -f "$CONTAINER" >/dev/null 2>&1 || true
  rm -rf -- "$WORK"
}
trap cleanup EXIT

FAILURES=0
log() { printf '[test_deb] %s\n' "$*"; }
fail() { printf '[test_deb] FAIL: %s\n' "$*" >&2; FAILURES=$((FAILURES + 1)); }
check() {
  local what=$1; shift
  if "$@"; then log "ok: $what"; else fail "$what"; fi
}

# --- 1. the package
(cd "$WORK" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/out" >"$WORK/cpack.log" 2>&1) ||
  { fail "cpack: $(tail -n 5 "$WORK/cpack.log")"; exit 1; }
DEB=$(ls "$WORK"/out/sluice_*.deb)
log "package: $(basename "$DEB"), $(du -k "$DEB" | cut -f1) KiB"
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' >"$WORK/files"
dpkg-deb -x "$DEB" "$WORK/root"
for f in /usr/bin/sluice /usr/bin/sluicectl /usr/lib/systemd/system/sluice@.service /etc/sluice/sluice.env; do
  check "ships $f" grep -qx "$f" "$WORK/files"
done
built=$(cd "$BUILD/lib/sluice/plugins" && ls *.so | sort | tr '\n' ' ')
shipped=$(sed -n 's|^/usr/lib/sluice/plugins/\(.*\.so\)$|\1|p' "$WORK/files" | sort | tr '\n' ' ')
check "ships every built plugin in /usr/lib/sluice/plugins ($shipped)" test "$built" = "$shipped"
# the settings file holds the storage, Redis and JWT secrets: 0640 root:root
# (systemd reads EnvironmentFile= as root before it drops to the DynamicUser;
# the stage itself never opens it)
envmode=$(dpkg-deb -c "$DEB" | awk '$6 == "./etc/sluice/sluice.env" {print $1, $2}')
check "/etc/sluice/sluice.env is -rw-r----- root/root (got: ${envmode:-missing})" \
  test "$envmode" = "-rw-r----- root/root"
# an upgrade keeps the existing file (dpkg leaves a conffile alone): the
# postinst takes away what others may do with an earlier package's 0644 one
mkdir -p "$WORK/upgrade/etc/sluice"
install -m 0644 /dev/null "$WORK/upgrade/etc/sluice/sluice.env"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./postinst >"$WORK/postinst" 2>/dev/null || true
DPKG_ROOT=$WORK/upgrade sh "$WORK/postinst" configure 0.0.9 >/dev/null 2>&1 || true
check "postinst configure: an earlier 0644 sluice.env becomes 0640 (got: $(stat -c %a "$WORK/upgrade/etc/sluice/sluice.env"))" \
  test "$(stat -c %a "$WORK/upgrade/etc/sluice/sluice.env")" = 640
check "/etc/sluice/sluice.env is a conffile" \
  bash -c 'dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles | grep -qx /etc/sluice/sluice.env' _ "$DEB"
depends=$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/^ *//; s/ .*//' | sort -u)
missing=$(grep -E '^[a-z0-9]' "$ROOT/tools/packages/runtime.txt" | sort -u | comm -23 - <(echo "$depends"))
check "Depends names every runtime.txt package${missing:+ (missing: $missing)}" test -z "$missing"

# --- 2. the unit
UNIT=$WORK/root/usr/lib/systemd/system/sluice@.service
for want in 'DynamicUser=yes' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
  'NoNewPrivileges=yes' 'Restart=on-failure' \
  'EnvironmentFile=-/etc/sluice/%i.env' 'ExecStart=/usr/bin/sluice stage %i'; do
  check "unit: $want" grep -qxF -- "$want" "$UNIT"
done
stages=$("$WORK/root/usr/bin/sluice" pipeline --json | jq -r '.stages[].name')
# What a stage's instance gets from the template and the drop-ins the package
# installs (sluice@.service.d/ for every stage, sluice@<stage>.service.d/ for
# one), applied as systemd applies them: every drop-in in file-name order;
# for a list setting an empty assignment resets it, a value is appended.
effective() { # effective STAGE KEY
  local stage=$1 key=$2 f val= list=0
  [[ $key == IPAddress* ]] && list=1
  local files=("$UNIT")
  while read -r f; do files+=("$f"); done < <(
    for d in "$WORK/root/usr/lib/systemd/system/sluice@.service.d" \
      "$WORK/root/usr/lib/systemd/system/sluice@$stage.service.d"; do
      [[ -d $d ]] && find "$d" -name '*.conf' -printf '%f %p\n'
    done | sort | cut -d' ' -f2-)
  while IFS= read -r line; do
    local v=${line#*=}
    if ((list)); then
      if [[ -z $v ]]; then val=; else val="${val:+$val }$v"; fi
    else
      val=$v
    fi
  done < <(cat "${files[@]}" | grep -E "^$key=" || true)
  printf '%s\n' "$val"
}
for s in $stages; do
  for key in MemoryMax TasksMax CPUQuota; do
    v=$(effective "$s" "$key")
    check "sluice@$s: $key=$v" test -n "$v"
  done
  allow=" $(effective "$s" IPAddressAllow) "
  deny=" $(effective "$s" IPAddressDeny) "
  # the metadata services: never allowed, denied to every stage
  for md in 169.254.169.254 fd00:ec2::254; do
    check "sluice@$s: $md denied (IPAddressDeny=${deny# }, IPAddressAllow=${allow# })" \
      bash -c '[[ $1 != *" any "* && $1 != *" $3 "* && $1 != *" $3/"* ]] &&
        [[ $2 == *" any "* || $2 == *" $3 "* || $2 == *" $3/"* ]]' _ "$allow" "$deny" "$md"
  done
  case $s in
    notify) # callbacks go to the internet
      check "sluice@$s may reach beyond the cluster (IPAddressDeny=${deny# })" \
        test "${deny// any /}" = "$deny" ;;
    *) # no internet: localhost and the cluster ranges only
      check "sluice@$s: IPAddressDeny=any, IPAddressAllow=localhost and the cluster ranges (${allow# })" \
        bash -c '[[ $2 == *" any "* && $1 == *" localhost "* && $1 != *" any "* ]]' _ "$allow" "$deny" ;;
  esac
done
check "sluice@preflight: MemoryMax=512M, the chart's limit (decodes untrusted media)" \
  test "$(effective preflight MemoryMax)" = 512M
if command -v systemd-analyze >/dev/null; then
  # the unit as packaged, but its ExecStart on the extracted binary (verify
  # checks that the command exists)
  mkdir -p "$WORK/units"
  sed "s|^ExecStart=/usr/bin/sluice|ExecStart=$WORK/root/usr/bin/sluice|" "$UNIT" >"$WORK/units/sluice@.service"
  # and the package's drop-ins beside it (verify reads them from there)
  cp -r "$WORK/root/usr/lib/systemd/system/"sluice@*.service.d "$WORK/units/" 2>/dev/null || true
  for s in $stages; do
    out=$(systemd-analyze verify "$WORK/units/sluice@$s.service" 2>&1) && [[ -z $out ]] &&
      log "ok: systemd-analyze verify sluice@$s.service" || fail "systemd-analyze verify sluice@$s.service: $out"
  done
  exposure=$(systemd-analyze security --offline=yes "$WORK/units/sluice@stt.service" 2>/dev/null |
    sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  check "systemd-analyze security: exposure ${exposure:-?} < 3" \
    awk -v e="${exposure:-99}" 'BEGIN { exit !(e < 3) }'
else
  log "skip: systemd-analyze is not installed (apt-get install systemd)"
fi

# --- 3. installed in Debian, every stage started by the unit's command line
if [[ -z $DOCKER ]] || ! "$DOCKER" info >/dev/null 2>&1 ||
  ! "$DOCKER" image inspect "$IMAGE_BASE" >/dev/null 2>&1; then
  log "skip: installing in $IMAGE_BASE needs a Docker daemon and that image (make test-deb)"
  ((FAILURES == 0)) || exit 1
  log "all checks passed"
  exit 0
fi
part12_failures=$FAILURES
trap - EXIT
source "$ROOT/tests/integration/lib.sh" # the dev stack; its trap runs the exit hooks
FAILURES=$part12_failures
at_exit cleanup
cp "$DEB" "$WORK/sluice.deb"
chmod -R a+rX "$WORK"
"$DOCKER" run -d --name "$CONTAINER" --network host -v "$WORK:/work:ro" "$IMAGE_BASE" \
  sleep infinity >/dev/null
in_c() { "$DOCKER" exec -i "$CONTAINER" "$@"; } # -i: tee reads the host's pipe
t0=$SECONDS
if in_c bash -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -q &&
    apt-get install -y -q --no-install-recommends /work/sluice.deb' >"$WORK/apt.log" 2>&1; then
  log "ok: apt-get install ./$(basename "$DEB") in $IMAGE_BASE ($((SECONDS - t0)) s)"
else
  fail "apt-get install: $(tail -n 5 "$WORK/apt.log")"
  finish
fi
check "installed: sluice --version" in_c sluice --version
# /etc/sluice/sluice.env: the stack's settings; <stage>.env: the admin port
"$ROOT/tools/devstack" env | sed -n 's/^export //p' | tr -d "'\"" | in_c tee -a /etc/sluice/sluice.env >/dev/null
printf '%s\n' "SLUICE_PRESIGN_LISTEN=$SLUICE_PRESIGN_LISTEN" "SLUICE_RESULTS_LISTEN=$SLUICE_RESULTS_LISTEN" \
  "SLUICE_PRESIGN_RESULTS_BASE_URL=$SLUICE_PRESIGN_RESULTS_BASE_URL" | in_c tee -a /etc/sluice/sluice.env >/dev/null
exec_start=$(sed -n 's/^ExecStart=//p' "$UNIT")
i=0
declare -A port
for s in $stages; do
  port[$s]=$((BASE + 160 + i))
  i=$((i + 1))
  echo "SLUICE_ADMIN_LISTEN=127.0.0.1:${port[$s]}" | in_c tee "/etc/sluice/$s.env" >/dev/null
  cmd=${exec_start//%i/$s}
  # EnvironmentFile= lines are VAR=value: the shell reads them the same way here;
  # a uid of the DynamicUser range, no groups, no new privileges
  "$DOCKER" exec "$CONTAINER" bash -c "set -a; . /etc/sluice/sluice.env; . /etc/sluice/$s.env; set +a
    echo \$\$ >/tmp/$s.pid
    exec setpriv --reuid=61234 --regid=61234 --clear-groups --no-new-privs $cmd >/tmp/$s.log 2>&1" &
done
for s in $stages; do
  wait_for 60 admin_ready "${port[$s]}" && log "ok: $s ready from the package (${exec_start//%i/$s}, admin port ${port[$s]})" ||
    fail "$s not ready within 60 s: $(in_c tail -n 5 "/tmp/$s.log" 2>&1)"
done
for s in $stages; do
  pid=$(in_c cat "/tmp/$s.pid")
  in_c bash -c "kill -TERM $pid" || true # bash's kill: minbase has no procps
  stopped() { ! in_c bash -c "kill -0 $1" 2>/dev/null; }
  check "$s stops on SIGTERM" wait_for 30 stopped "$pid"
  check "$s logs a clean stop" in_c grep -q '"msg":"stopped"' "/tmp/$s.log"
done
wait
finish
