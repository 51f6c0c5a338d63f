#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A client trickling its request slower than presign.request_timeout_ms is
# answered 408 (JSON error) and disconnected, however steadily it trickles;
# meanwhile the server keeps serving everyone else. (Idle keep-alive
# connections are closed quietly: tests/unit/test_http.c.)
source "$(dirname "$0")/lib.sh"
export SLUICE_PRESIGN_REQUEST_TIMEOUT_MS=1500
stages_up
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
host=${PRESIGN_URL#http://}
exec 3<>"/dev/tcp/${host%:*}/${host#*:}" # the slow client: one byte every 0.2 s
start=$SECONDS
(
  printf 'POST /v1/submissions HTTP/1.1\r\nHost: x\r\n'
  for i in $(seq 1 60); do printf 'X'; sleep 0.2; done
) >&3 2>/dev/null &
trickler=$!
at_exit "kill $trickler 2>/dev/null || true"
# others are served while it trickles
ok=0
for i in 1 2 3 4 5; do
  code=$(curl "${KEY_AUTH[@]}" -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data '{"questions":[{"no":1,"content_type":"audio/wav","size":10}]}' "$PRESIGN_URL/v1/submissions")
  [[ $code == 201 ]] && ok=$((ok + 1))
  sleep 0.1
done
check "5 other clients created submissions meanwhile ($ok)" test $ok = 5
timeout 10 cat <&3 >"$work/slow.out" || true
took=$((SECONDS - start))
exec 3>&-
check "the slow client got 408" grep -q '^HTTP/1.1 408' "$work/slow.out"
check "  with a JSON error" grep -q '"code":"request_timeout"' "$work/slow.out"
check "  and Connection: close" grep -qi '^Connection: close' "$work/slow.out"
check "  after about the timeout, not after its 12 s of trickling (${took}s)" test "$took" -lt 8
code=$(curl -sS -o /dev/null -w '%{http_code}' "$PRESIGN_URL/nope")
check "the server still answers (404 $code)" test "$code" = 404
finish
