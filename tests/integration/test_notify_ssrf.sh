#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Webhook SSRF holes (issue 40): notify connects only to the address it
# checked, for the host it checked.
#   - a trailing-dot callback URL (http://localhost.:PORT/...) is checked,
#     pinned and sent as ONE host: delivered to the pinned address with
#     "Host: localhost:PORT" (before: the pin named "localhost", curl asked
#     for "localhost." and resolved that itself, past the address policy);
#   - http_proxy / https_proxy / all_proxy in notify's environment are not
#     used (a proxy resolves the name itself: pin and policy bypassed): a
#     listener on the proxy port counts 0 connections while deliveries to
#     the checked address arrive;
#   - a submission created with an API key is signed with that key's
#     webhook secret (sluicectl apikey add prints it; rotate-secret), v2 over
#     "<t>.<url>.<body>", so one receiver's delivery does not verify at
#     another; others with notify.secret (v2, and v1 as before);
#   - notify.proxy, named explicitly, is used.
# The receiver is tests/integration/notify_receiver.py on loopback, which
# the policy allows explicitly (as in test_notify).
source "$(dirname "$0")/lib.sh"
PY=${TEST_PYTHON:-python3}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

RPORT=$((BASE + 64)) PPORT=$((BASE + 65))
RECV=127.0.0.1:$RPORT
SECRET="nsec-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
export SLUICE_CALLBACK_ALLOWED_HOSTS="127.0.0.1,localhost"
export SLUICE_CALLBACK_ALLOWED_ADDRESSES=127.0.0.1,::1
export SLUICE_CALLBACK_ALLOW_HTTP=true
export SLUICE_NOTIFY_SECRET=$SECRET SLUICE_NOTIFY_TIMEOUT_MS=1500
export SLUICE_RETRY_TIERS=1s,2s
retry_topics 1s 2s

: >"$work/received.jsonl"
"$PY" "$ROOT/tests/integration/notify_receiver.py" "$RECV" "$work/received.jsonl" \
  >"$work/receiver.log" 2>&1 &
at_exit "kill $! 2>/dev/null || true"
# where localhost also names ::1, the pin may be ::1: a receiver there too
if getent ahostsv6 localhost 2>/dev/null | grep -q '^::1 '; then
  "$PY" "$ROOT/tests/integration/notify_receiver.py" "[::1]:$RPORT" "$work/received.jsonl" \
    >"$work/receiver6.log" 2>&1 &
  at_exit "kill $! 2>/dev/null || true"
fi
# the "proxy": counts the connections it accepts (one line each: who
# connected, as ss(8) names the peer's process, and the first bytes it sent
# within a second), answers nothing
"$PY" -c '
import socket, subprocess, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    c, peer = s.accept()
    try:
        who = subprocess.run(["ss", "-tnpH", "state", "established", "( sport = :%d )" % peer[1]],
                             capture_output=True, text=True, timeout=5).stdout.strip().replace("\n", " | ")
    except (OSError, subprocess.SubprocessError):
        who = ""
    c.settimeout(1.0)
    try:
        first = c.recv(200)
    except OSError:
        first = b""
    with open(sys.argv[2], "a") as f:
        f.write("connection from port %d: %s; sent %r\n" % (peer[1], who or "?", first))
    c.close()
' "$PPORT" "$work/proxy.log" >"$work/proxy.err" 2>&1 &
at_exit "kill $! 2>/dev/null || true"
: >"$work/proxy.log"
wait_for 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PPORT 2>/dev/null" || fail "the proxy listener did not start"
wait_for 10 curl -s -o /dev/null -X POST "http://$RECV/ok/probe" || fail "the receiver did not start"
# the probe's connection is written down once the listener accepts it, which
# may be after the probe returned (the kernel completed the handshake): wait
# for its line before emptying the log, or it lands in the count (CI: 1, 2)
wait_for 10 grep -q . "$work/proxy.log" || fail "the proxy listener did not count its probe"
: >"$work/proxy.log"
stages_up

proxied() { grep -c . "$work/proxy.log" || true; }
received() { jq -c --arg p "$1" 'select(.path | startswith($p))' "$work/received.jsonl"; }
count() { received "$1" | grep -c . || true; }
stop_notify() {
  local pid
  pid=$(cat "$STAGES_DIR/notify.pid")
  kill -TERM "$pid"
  wait_for 30 bash -c "! kill -0 $pid 2>/dev/null" || fail "notify did not stop"
}
start_notify() { "$ROOT/tools/stages" up >/dev/null; }
# submit URL [API-KEY]: a submission of one silent answer (final at preflight)
# calling back URL, created with API-KEY (the test's key by default)
submit() {
  local st auth=("${KEY_AUTH[@]}")
  [[ -n ${2:-} ]] && auth=(-H "Authorization: Bearer $2")
  st=$(curl -sS -o "$work/create" -w '%{http_code}' "${auth[@]}" -X POST \
    -H 'Content-Type: application/json' \
    -d "{\"callback_url\":\"$1\",\"questions\":[{\"content_type\":\"audio/wav\",\"size\":$(stat -c %s "$work/silence.wav"),\"prompt\":\"Q?\"}]}" \
    "$PRESIGN_URL/v1/submissions")
  [[ $st == 201 ]] || { fail "create with callback $1: $st $(cat "$work/create")"; return 1; }
  SID=$(jq -r .submission_id "$work/create")
  SUB_REPLY=$(cat "$work/create")
  put_answer 0 "$work/silence.wav"
}
sox -n -r 16000 -c 1 -b 16 "$work/silence.wav" trim 0 1.5

# notify again, now with every proxy variable of the environment pointing at
# the listener (and no no_proxy exempting loopback)
# (started as tools/stages starts it, which cannot be given these: its own
# curl would take them)
stop_notify
aport=$("$ROOT/tools/stages" port notify)
P=http://127.0.0.1:$PPORT
env -u no_proxy -u NO_PROXY http_proxy=$P https_proxy=$P all_proxy=$P HTTPS_PROXY=$P ALL_PROXY=$P \
  SLUICE_ADMIN_LISTEN=127.0.0.1:$aport setsid "$SLUICE_BIN" stage notify \
  >>"$STAGES_DIR/notify.log" 2>&1 </dev/null &
echo $! >"$STAGES_DIR/notify.pid"
notify_ready() { [[ $(curl --noproxy '*' -fsS "http://127.0.0.1:$aport/readyz" 2>/dev/null) == ready* ]]; }
wait_for 60 notify_ready || fail "notify (with proxies in its environment) did not start"

n="n$RANDOM$RANDOM"
submit "http://localhost.:$RPORT/dot/$n"
DOT_SID=$SID
submit "http://127.0.0.1:$RPORT/plain/$n"
PLAIN_SID=$SID
wait_for 60 bash -c "test \"\$(jq -c --arg p /dot/$n 'select(.path | startswith(\$p))' '$work/received.jsonl' | grep -c .)\" -ge 1" ||
  fail "the trailing-dot callback was not delivered (to the pinned address)"
wait_for 30 bash -c "test \"\$(jq -c --arg p /plain/$n 'select(.path | startswith(\$p))' '$work/received.jsonl' | grep -c .)\" -ge 1" ||
  fail "the plain callback was not delivered directly"
check "the trailing-dot URL is sent for the host checked and pinned (Host: localhost:$RPORT)" \
  jqany ".host == \"localhost:$RPORT\" and .delivery == \"$DOT_SID/1/failed\"" "$(received "/dot/$n")"
check "no request names the trailing-dot host" test "$(received "/dot/$n" | jq -r .host | grep -c 'localhost\.' || true)" -eq 0
check "the plain callback arrived directly" jqany ".delivery == \"$PLAIN_SID/1/failed\"" "$(received "/plain/$n")"
log "connections to the proxy listener: $(proxied)"
[[ $(proxied) == 0 ]] || sed 's/^/  /' "$work/proxy.log" >&2
check "the proxy of the environment got 0 connections" test "$(proxied)" -eq 0

# --- per-API-key signing secrets -------------------------------------------
# sig_of LINE NAME: the NAME= values of its X-Sluice-Signature, one a line
sig_of() { jq -r .signature <<<"$1" | tr ',' '\n' | sed -n "s/^$2=//p"; }
# v2_ok LINE SECRET URL: some v2= of LINE is HMAC-SHA256(SECRET, "<t>.<URL>.<body>")
v2_ok() {
  local t body want
  t=$(sig_of "$1" t)
  body=$(jq -r .body <<<"$1")
  want=$(printf '%s.%s.%s' "$t" "$3" "$body" | openssl dgst -sha256 -hmac "$2" | sed 's/^.*= //')
  sig_of "$1" v2 | grep -qx "$want"
}
not_v2_ok() { ! v2_ok "$@"; }
"$SLUICECTL" apikey add --user ssrf-signer --label test_notify_ssrf --json >"$work/key.json" 2>/dev/null ||
  fail "apikey add failed"
K=$(jq -r .key "$work/key.json") KSEC=$(jq -r .webhook_secret "$work/key.json") KID=$(jq -r .id "$work/key.json")
check "apikey add prints a webhook signing secret" grep -q '^whsec_[0-9a-f]\{64\}$' <<<"$KSEC"
KURL="http://127.0.0.1:$RPORT/keyed/$n"
submit "$KURL" "$K"
KEYED_SID=$SID
wait_for 60 bash -c "test \"\$(jq -c --arg p /keyed/$n 'select(.path | startswith(\$p))' '$work/received.jsonl' | grep -c .)\" -ge 1" ||
  fail "the keyed submission's callback was not delivered"
kl=$(received "/keyed/$n" | head -1)
check "a key's submission is signed with the key's secret over t, URL and body (v2)" v2_ok "$kl" "$KSEC" "$KURL"
check "and names the key (X-Sluice-Key)" test "$(jq -r .key <<<"$kl")" = "$KID"
check "and carries no v1 (notify.secret does not sign it)" test -z "$(sig_of "$kl" v1)"
check "its signature does not verify with notify.secret" not_v2_ok "$kl" "$SECRET" "$KURL"
check "nor for another receiver's URL (receiver A cannot forge deliveries to B)" \
  not_v2_ok "$kl" "$KSEC" "http://127.0.0.1:$RPORT/other/$n"
# a key without a secret (issued before keys had one): notify.secret signs
L=$("$SLUICECTL" apikey add --user ssrf-legacy --label test_notify_ssrf 2>/dev/null)
redis-cli -p "$DEVSTACK_REDIS_PORT" HDEL "sl:apikey:$(printf '%s' "$L" | sha256sum | cut -d' ' -f1)" whsec >/dev/null
LURL="http://127.0.0.1:$RPORT/legacy/$n"
submit "$LURL" "$L"
wait_for 60 bash -c "test \"\$(jq -c --arg p /legacy/$n 'select(.path | startswith(\$p))' '$work/received.jsonl' | grep -c .)\" -ge 1" ||
  fail "the submission of a key without a secret was not delivered"
pl=$(received "/legacy/$n" | head -1)
check "a submission of a key without a secret is signed with notify.secret, v2 over the URL" \
  v2_ok "$pl" "$SECRET" "$LURL"
check "and v1 as before" test -n "$(sig_of "$pl" v1)"
check "and names no key" test "$(jq -r .key <<<"$pl")" = global
NSEC=$("$SLUICECTL" apikey rotate-secret "$KID" 2>/dev/null) || fail "rotate-secret failed"
new_secret() { grep -qx 'whsec_[0-9a-f]\{64\}' <<<"$NSEC" && [[ $NSEC != "$KSEC" ]]; }
check "rotate-secret prints a new secret" new_secret
KURL2="http://127.0.0.1:$RPORT/keyed2/$n"
submit "$KURL2" "$K"
wait_for 60 bash -c "test \"\$(jq -c --arg p /keyed2/$n 'select(.path | startswith(\$p))' '$work/received.jsonl' | grep -c .)\" -ge 1" ||
  fail "the keyed submission after the rotation was not delivered"
k2=$(received "/keyed2/$n" | head -1)
check "after a rotation deliveries verify with the new secret" v2_ok "$k2" "$NSEC" "$KURL2"
check "and with the previous one (both signed)" v2_ok "$k2" "$KSEC" "$KURL2"

# notify.proxy names a proxy: it is used (the listener is no proxy, so the
# delivery only fails and is retried)
stop_notify
SLUICE_NOTIFY_PROXY=http://127.0.0.1:$PPORT start_notify
submit "http://127.0.0.1:$RPORT/viaproxy/$n"
wait_for 30 at_least 1 proxied || fail "notify.proxy was not used"
check "a delivery through notify.proxy reached the proxy, not the receiver" test "$(count "/viaproxy/$n")" -eq 0
stop_notify
bad_proxy_refused() {
  ! SLUICE_NOTIFY_PROXY=ftp://x SLUICE_ADMIN_LISTEN=127.0.0.1:$((BASE + 99)) \
    timeout 30 "$SLUICE_BIN" notify >"$work/badproxy.log" 2>&1 &&
    grep -q 'notify.proxy must be' "$work/badproxy.log"
}
check "a notify.proxy that is not an http(s) URL is refused at start" bad_proxy_refused

finish
