#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The runtime's two Redis clients (sl_redis, sl_aredis) against a real Redis
# Cluster: 3 primaries with a replica each, started by this test on the
# lane's Redis port + 20 .. +25 (cluster bus +26 .. +31; no Kafka, S3 or
# stages needed). With
# tests/tools/redis_cluster_probe it checks:
#   - sl_redis_check: passes on the cluster (also from a replica seed),
#     refuses a plain Redis named as a cluster;
#   - the single-node client (redis://one node) gets MOVED for most keys:
#     what every client did before cluster support, and what this test would
#     see from it;
#   - SET/GET of 2000 keys spread over all slots, with both clients: every
#     key is on the primary that owns its slot (each primary's own keys,
#     read without redirects, add up to 2000 and none is empty);
#   - SCAN with the sync client walks every primary;
#   - a subscriber (one link to one node) gets messages published on any
#     node, and sl_aredis_settled says when it has them all;
#   - a script (EVALSHA) on keys of every primary after SCRIPT FLUSH on all
#     of them: the NOSCRIPT fallback (EVAL) works per node;
#   - a slot migrated by hand (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE,
#     SETSLOT NODE) under clients that stay up: ASK followed while it
#     migrates, MOVED once it has moved, both counted in
#     sluice_redis_redirects_total;
#   - rediss+cluster:// with a password (a TLS-only cluster of 3 primaries on
#     + 32 .. +34): both clients, AUTH refused with a wrong password;
#   - a primary SIGSTOPped for 2.5 s: the async client's commands to the
#     other primaries are not held up (none fails, none over 500 ms);
#   - a primary SIGKILLed under a stream of commands from both clients:
#     once its replica is promoted (cluster-node-timeout 3000 ms) commands
#     succeed again without a new client; the failure window is printed; a
#     subscriber on that node comes back up on another one.
# Cost: about 35 s.
set -euo pipefail
ROOT=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
source "$ROOT/tests/integration/lane.sh"
TEST_NAME=test_redis_cluster
PROBE=${REDIS_CLUSTER_PROBE:-$ROOT/build-san/tests/redis_cluster_probe}
P0=$((${DEVSTACK_REDIS_PORT:-16379} + 20))
PORTS=($P0 $((P0 + 1)) $((P0 + 2)) $((P0 + 3)) $((P0 + 4)) $((P0 + 5)))
H=127.0.0.1
TLS_PORTS=()
FAILURES=0
log() { printf '[%s] %s\n' "$TEST_NAME" "$*"; }
fail() {
  printf '[%s] FAIL: %s\n' "$TEST_NAME" "$*" >&2
  FAILURES=$((FAILURES + 1))
}
[[ -x $PROBE ]] || {
  fail "no probe $PROBE (build the tests)"
  exit 1
}
command -v redis-server >/dev/null || {
  fail "redis-server not found"
  exit 1
}
work=$(mktemp -d)
cleanup() {
  local rc=$?
  set +e # a node already killed must not stop the clean-up of the others
  for p in "${PORTS[@]}" "${TLS_PORTS[@]}"; do
    [[ -f $work/$p/pid ]] && kill -9 "$(cat "$work/$p/pid")" 2>/dev/null
  done
  [[ -n ${probe_pid:-} ]] && kill "$probe_pid" 2>/dev/null
  [[ -n ${sub_pid:-} ]] && kill "$sub_pid" 2>/dev/null
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
RC() { redis-cli -h $H -p "$@"; }

for p in "${PORTS[@]}"; do
  if redis-cli -h $H -p "$p" ping >/dev/null 2>&1; then
    fail "port $p is in use"
    exit 1
  fi
  mkdir -p "$work/$p"
  redis-server --bind $H --port "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 3000 --cluster-port $((p + 6)) --appendonly no --save '' --dir "$work/$p" --daemonize yes \
    --pidfile "$work/$p/pid" --logfile "$work/$p/log" >/dev/null
done
up() { for p in "${PORTS[@]}"; do [[ $(RC "$p" ping 2>/dev/null) == PONG ]] || return 1; done; }
for _ in $(seq 50); do up && break; sleep 0.1; done
redis-cli --cluster create $(printf "$H:%s " "${PORTS[@]}") --cluster-replicas 1 --cluster-yes \
  >"$work/create.log" 2>&1 || {
  cat "$work/create.log" >&2
  fail "redis-cli --cluster create"
  exit 1
}
ok() {
  for p in "${PORTS[@]}"; do
    RC "$p" cluster info | grep -q 'cluster_state:ok' || return 1
    RC "$p" cluster info | grep -q 'cluster_slots_ok:16384' || return 1
  done
}
for _ in $(seq 100); do ok && break; sleep 0.2; done
ok || {
  fail "the cluster did not come up"
  exit 1
}
primaries() { for p in "${PORTS[@]}"; do RC "$p" role | head -1 | grep -qx master && echo "$p"; done; }
mapfile -t PRIM < <(primaries)
log "cluster up: primaries ${PRIM[*]}"
URL="redis+cluster://$H:${PORTS[0]},$H:${PORTS[1]},$H:${PORTS[2]}"

# 0. the start-up check: a seed maps every slot; a plain Redis is no cluster
out=$("$PROBE" "$URL" check - 2>&1) && log "ok: $out" || fail "check: $out"
out=$("$PROBE" "redis+cluster://$H:${PORTS[5]},$H:$((P0 + 40))" check - 2>&1) && log "ok: a replica seed: $out" ||
  fail "check (a replica and a closed port as seeds): $out"
mkdir -p "$work/plain"
redis-server --bind $H --port $((P0 + 12)) --appendonly no --save '' --dir "$work/plain" --daemonize yes \
  --pidfile "$work/plain/pid" --logfile "$work/plain/log" >/dev/null
for _ in $(seq 50); do [[ $(RC $((P0 + 12)) ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
out=$("$PROBE" "redis+cluster://$H:$((P0 + 12))" check - 2>&1) && fail "a plain Redis passed the check"
[[ $out == *"cluster support disabled"* ]] && log "ok: a plain Redis is refused ($out)" || fail "plain: $out"
kill -9 "$(cat "$work/plain/pid")"

# 1. today's single-node client on one node of the cluster: MOVED errors
out=$("$PROBE" "redis://$H:${PORTS[0]}" setget 200 2>&1) && fail "single-node client passed on a cluster"
if grep -q MOVED <<<"$out"; then log "ok: the single-node client gets MOVED"; else fail "no MOVED: $out"; fi

# 2. keys spread over all slots land on their slot's primary
out=$("$PROBE" "$URL" setget 2000 2>&1) || fail "setget: $out"
log "$(grep -E '^(sync|async) setget' <<<"$out" | tr '\n' ' ')"
total=0
for p in "${PRIM[@]}"; do
  n=$(RC "$p" --scan --pattern 'rcp:*' | wc -l)
  ((n > 0)) || fail "primary $p has none of the keys"
  total=$((total + n))
done
((total == 2000)) && log "ok: 2000 keys on their primaries (${#PRIM[@]} primaries)" ||
  fail "the primaries hold $total keys, not 2000"
for p in "${PRIM[@]}"; do # a sample of each primary's keys: served there, no redirect
  for k in $(RC "$p" --scan --pattern 'rcp:*' | head -20); do
    v=$(RC "$p" get "$k")
    [[ $v == setget-${k#rcp:} ]] || fail "$k on $p: $v"
  done
done

# SCAN walks every primary (the sync client's cursor names the primary)
out=$("$PROBE" "$URL" scan 'rcp:[0-9]*' 2>&1)
[[ $out == *"scan: 2000 keys"* ]] && log "ok: SCAN over the cluster found the 2000 keys" ||
  fail "SCAN: $out"

# 3. scripts: NOSCRIPT on every primary, then EVALSHA everywhere
for p in "${PRIM[@]}"; do RC "$p" script flush >/dev/null; done
out=$("$PROBE" "$URL" eval 300 2>&1) || fail "eval: $out"
sha=$(printf '%s' "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])" | sha1sum | cut -c1-40)
for p in "${PRIM[@]}"; do
  [[ $(RC "$p" script exists "$sha") == 1 ]] || fail "the script is not on primary $p"
done
log "ok: scripts ran on every primary after SCRIPT FLUSH ($(grep -E '^(sync|async) eval' <<<"$out" | tr '\n' ' '))"

# 3b. a subscriber on one node hears what is published on any (PUBLISH is
# broadcast over the cluster bus)
out=$("$PROBE" "$URL" sub rcp-channel 2>&1) || fail "sub: $out"
log "$(grep '^sub:' <<<"$out")"

# 4. a slot migrated under live clients: ASK, then MOVED
key=rcp:migrating
slot=$(RC "${PORTS[0]}" cluster keyslot $key)
id_of() { RC "$1" cluster myid; }
src=""
for p in "${PRIM[@]}"; do [[ $(RC "$p" set $key before-ask) == OK ]] && src=$p && break; done
[[ -n $src ]] || fail "no primary took $key"
for p in "${PRIM[@]}"; do [[ $p != "$src" ]] && dst=$p && break; done
export PROBE_SYNC=$work
"$PROBE" "$URL" steps $key >"$work/steps.log" 2>&1 &
probe_pid=$!
wait_file() { for _ in $(seq 300); do [[ -f $1 ]] && return 0; sleep 0.1; done; return 1; }
wait_file "$work/ready1" || fail "the probe did not start"
RC "$dst" cluster setslot "$slot" importing "$(id_of "$src")" >/dev/null
RC "$src" cluster setslot "$slot" migrating "$(id_of "$dst")" >/dev/null
RC "$src" migrate $H "$dst" "" 0 5000 keys $key >/dev/null
touch "$work/go1"
wait_file "$work/ready2" || fail "the probe did not finish round 2"
for p in "${PRIM[@]}"; do RC "$p" cluster setslot "$slot" node "$(id_of "$dst")" >/dev/null; done
touch "$work/go2"
wait "$probe_pid" || fail "steps: $(cat "$work/steps.log")"
probe_pid=""
r2=$(grep '^round 2' "$work/steps.log")
r3=$(grep '^round 3' "$work/steps.log")
[[ $r2 == *" moved=0 ask=2 "* ]] && log "ok: ASK followed by both clients ($r2)" ||
  fail "round 2 (migrating) should count ask=2: $(cat "$work/steps.log")"
[[ $r3 == *" moved=2 ask=2 "* ]] && log "ok: MOVED followed by both clients ($r3)" ||
  fail "round 3 (moved) should count moved=2: $(cat "$work/steps.log")"
[[ $(grep -c 'value=before-ask' "$work/steps.log") == 6 ]] || fail "values: $(cat "$work/steps.log")"

# 4b. rediss+cluster:// with a password: a TLS-only cluster of 3 primaries on
# the lane's Redis port + 32 .. +34 (bus +35 .. +37), a throwaway CA
tls=$work/tls
mkdir -p "$tls"
(
  cd "$tls"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=rcp-ca
  openssl req -new -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=$H
  printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' $H >ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 \
    -extfile ext
) >/dev/null 2>&1
TPORTS=($((P0 + 32)) $((P0 + 33)) $((P0 + 34)))
for p in "${TPORTS[@]}"; do
  mkdir -p "$work/$p"
  TLS_PORTS+=("$p") # stopped by the clean-up
  redis-server --bind $H --port 0 --tls-port "$p" --tls-cluster yes --tls-replication yes \
    --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.pem" \
    --tls-auth-clients no --requirepass tlspw --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-port $((p + 3)) --cluster-node-timeout 3000 --appendonly no --save '' --dir "$work/$p" \
    --daemonize yes --pidfile "$work/$p/pid" --logfile "$work/$p/log" >/dev/null
done
TRC() { redis-cli --tls --cacert "$tls/ca.pem" -a tlspw --no-auth-warning -h $H -p "$@"; }
for _ in $(seq 50); do [[ $(TRC "${TPORTS[2]}" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
TRC "${TPORTS[0]}" --cluster create $(printf "$H:%s " "${TPORTS[@]}") --cluster-replicas 0 \
  --cluster-yes >"$work/tls-create.log" 2>&1 || fail "TLS cluster create: $(tail -3 "$work/tls-create.log")"
for _ in $(seq 100); do TRC "${TPORTS[0]}" cluster info | grep -q cluster_state:ok && break; sleep 0.2; done
TURL="rediss+cluster://$H:${TPORTS[0]},$H:${TPORTS[1]}"
out=$(SLUICE_REDIS_PASSWORD=tlspw SLUICE_REDIS_TLS_CA_FILE=$tls/ca.pem "$PROBE" "$TURL" setget 300 2>&1) &&
  out2=$(SLUICE_REDIS_PASSWORD=tlspw SLUICE_REDIS_TLS_CA_FILE=$tls/ca.pem "$PROBE" "$TURL" eval 100 2>&1) &&
  log "ok: TLS + AUTH cluster: $(grep -E '^(sync|async) ' <<<"$out"$'\n'"$out2" | tr '\n' ' ')" ||
  fail "TLS cluster: $out ${out2:-}"
out=$(SLUICE_REDIS_PASSWORD=wrong SLUICE_REDIS_TLS_CA_FILE=$tls/ca.pem "$PROBE" "$TURL" check - 2>&1) &&
  fail "a wrong password passed the check"
[[ $out == *WRONGPASS* ]] && log "ok: a wrong password is refused" || fail "wrong password: $out"

# 4c. a primary SIGSTOPped for 2.5 s (under cluster-node-timeout: no
# failover): the async client's commands to the other primaries go on, none
# slower than 500 ms; those to the stopped one fail at their deadline (2 s)
stopped=${PRIM[1]}
"$PROBE" "$URL" isolate "$stopped" >"$work/isolate.log" 2>&1 &
probe_pid=$!
wait_line() { for _ in $(seq 100); do grep -q "$1" "$2" && return 0; sleep 0.1; done; return 1; }
wait_line 'isolate: started' "$work/isolate.log" || fail "isolate did not start"
sleep 1
kill -STOP "$(cat "$work/$stopped/pid")"
sleep 2.5
kill -CONT "$(cat "$work/$stopped/pid")"
wait "$probe_pid" && log "ok: $(grep 'isolate: stopped' "$work/isolate.log")" ||
  fail "a stopped primary held up the others: $(cat "$work/isolate.log")"
probe_pid=""
ok || sleep 2 # the cluster saw the pause; give it a moment

# 5. a primary SIGKILLed under a stream of commands
victim=${PRIM[0]}
"$PROBE" "$URL" stream 16 >"$work/stream.log" 2>&1 &
probe_pid=$!
"$PROBE" "$URL" subfail 16 >"$work/subfail.log" 2>&1 & # subscribed to the first seed: the victim
sub_pid=$!
replica=""
for p in "${PORTS[@]}"; do [[ $(RC "$p" role | sed -n 3p) == "$victim" ]] && replica=$p; done
sleep 3
kill -9 "$(cat "$work/$victim/pid")"
t0=$(date +%s%3N)
log "SIGKILLed primary $victim (replica $replica)"
for _ in $(seq 200); do [[ $(RC "$replica" role | head -1) == master ]] && break; sleep 0.05; done
log "the cluster promoted $replica $(($(date +%s%3N) - t0)) ms after the kill"
wait "$probe_pid" || fail "stream: $(cat "$work/stream.log")"
probe_pid=""
wait "$sub_pid" && log "ok: $(grep subfail: "$work/subfail.log")" ||
  fail "the subscriber did not come back: $(cat "$work/subfail.log")"
sub_pid=""
grep -E 'stream:' "$work/stream.log" | while read -r l; do log "$l"; done
[[ $(grep -c 'recovered$' "$work/stream.log") == 2 ]] || fail "a client did not recover"
grep -q 'NOT recovered' "$work/stream.log" && fail "$(cat "$work/stream.log")"

if ((FAILURES)); then
  log "$FAILURES check(s) failed"
  exit 1
fi
log "all checks passed"
