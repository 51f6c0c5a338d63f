#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# When Kafka cannot take the submission, presign answers 503 with Retry-After,
# within presign.kafka_timeout_ms, and nothing half-exists: no submission id
# is handed out. (A presign whose
# brokers are unreachable, with a short kafka_timeout_ms.)
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
port=$((BASE + 60))
SLUICE_KAFKA_BROKERS=127.0.0.1:1 SLUICE_PRESIGN_KAFKA_TIMEOUT_MS=1500 \
  SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$((BASE + 61)) \
  "$SLUICE_BIN" presign >>"$STAGES_DIR/presign-nokafka.log" 2>&1 &
pid=$!
at_exit "kill -TERM $pid 2>/dev/null; true"
wait_for 10 curl -fsS -o /dev/null "http://127.0.0.1:$((BASE + 61))/healthz" 2>/dev/null ||
  fail "presign did not start"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
# three creates a third of a second apart (librdkafka looks for timed-out
# messages once a second: whatever the phase, each must be answered in time)
curls=()
for i in 0 1 2; do
  ((i == 0)) || sleep 0.33
  curl "${KEY_AUTH[@]}" -sS -m 20 -D "$work/h$i" -o "$work/b$i" -w '%{http_code} %{time_total}\n' \
    -X POST -H 'Content-Type: application/json' \
    --data '{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}' \
    "http://127.0.0.1:$port/v1/submissions" >"$work/r$i" &
  curls+=($!)
done
wait "${curls[@]}"
cp "$work/h0" "$work/h"
cp "$work/b0" "$work/b"
codes=$(cut -d' ' -f1 "$work"/r? | sort -u | tr '\n' ' ')
slowest=$(cut -d' ' -f2 "$work"/r? | sort -n | tail -n 1)
check "Kafka unreachable -> 503 ($codes)" test "$codes" = "503 "
# within presign.kafka_timeout_ms (1.5 s), plus 0.25 s for a loaded machine
check "  ... within the configured 1.5 s (slowest ${slowest} s)" awk -v s="$slowest" 'BEGIN { exit !(s <= 1.75) }'
check "  ... with Retry-After" grep -qi '^Retry-After:' "$work/h"
check "  ... and an error body, no submission id" \
  jqe '.error.code == "unavailable" and (has("submission_id") | not)' "$(cat "$work/b")"
check "counted as unavailable, not accepted" test \
  "$(metric sluice_submissions_total 'outcome="unavailable"' "http://127.0.0.1:$((BASE + 61))"),$(metric sluice_submissions_total 'outcome="accepted"' "http://127.0.0.1:$((BASE + 61))")" = "3,0"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
check "presign stopped cleanly (exit $rc)" test "$rc" = 0
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/presign-nokafka.log" &&
  fail "sanitizer report: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/presign-nokafka.log")"
finish
