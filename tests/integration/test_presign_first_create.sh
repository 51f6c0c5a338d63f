#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The first creates after presign starts are answered as fast as the later
# ones: its producer knows the submissions topic before the first message.
# (librdkafka 2.0 learns a topic from its first message and asks for the
# topic's leaders only on its one-second timer: every fresh presign, a new
# replica too, held its first creates up to 1 s.) Three fresh starts; the
# create is sent as soon as /readyz answers, where the wait was 0.7-1 s.
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
port=$((BASE + 66))
admin_port=$((BASE + 67))
body='{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}'
times=()
for round in 1 2 3; do
  SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$admin_port \
    "$SLUICE_BIN" presign >>"$STAGES_DIR/presign-first.log" 2>&1 &
  pid=$!
  at_exit "kill -KILL $pid 2>/dev/null; true"
  ready=
  for _ in $(seq 200); do # every 50 ms: the create must come right after start
    if curl -fsS -o /dev/null "http://127.0.0.1:$admin_port/readyz" 2>/dev/null; then
      ready=1
      break
    fi
    sleep 0.05
  done
  [[ -n $ready ]] || { fail "presign did not get ready (round $round)"; break; }
  read -r code took < <(curl "${KEY_AUTH[@]}" -sS -m 20 -o /dev/null -w '%{http_code} %{time_total}\n' \
    -X POST -H 'Content-Type: application/json' --data "$body" \
    "http://127.0.0.1:$port/v1/submissions" || echo "000 99")
  check "round $round: the first create after start is accepted ($code)" test "$code" = 201
  times+=("$took")
  kill -TERM "$pid"
  wait "$pid" || true
done
slowest=$(printf '%s\n' "${times[@]}" | sort -n | tail -n 1)
# a create takes milliseconds; 0.4 s leaves room for a loaded machine and
# sanitizers, well below the 0.7-1 s of a producer that learns the topic late
check "the first create after each start took at most 0.4 s (${times[*]} s)" \
  awk -v s="$slowest" 'BEGIN { exit !(s <= 0.4) }'
grep -q '"msg":"stopped"' "$STAGES_DIR/presign-first.log" || fail "presign did not log a clean stop"
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/presign-first.log" &&
  fail "sanitizer report in presign's log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/presign-first.log")"
finish
