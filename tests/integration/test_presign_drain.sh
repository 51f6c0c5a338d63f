#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SIGTERM while requests wait for Kafka: presign stops taking requests, and
# every request already taken — a create, and a storage event on the
# webhook, which shares presign's producer and Redis — still gets its answer
# (here 503 with Retry-After, as Kafka cannot take it) before the process
# exits: not a dropped connection. (A presign whose brokers are unreachable,
# with a 4 s kafka_timeout_ms; the SIGTERM comes 0.7 s into the wait.)
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
port=$((BASE + 64))
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
SECRET="whsec-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
SLUICE_KAFKA_BROKERS=127.0.0.1:1 SLUICE_PRESIGN_KAFKA_TIMEOUT_MS=4000 SLUICE_WEBHOOK_SECRET=$SECRET \
  SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$((BASE + 65)) \
  "$SLUICE_BIN" presign >>"$STAGES_DIR/presign-drain.log" 2>&1 &
pid=$!
at_exit "kill -KILL $pid 2>/dev/null; true"
wait_for 10 curl -fsS -o /dev/null "http://127.0.0.1:$((BASE + 65))/healthz" 2>/dev/null ||
  fail "presign did not start"
curl "${KEY_AUTH[@]}" -sS -m 20 -D "$work/h" -o "$work/b" -w '%{http_code} %{time_total}\n' \
  -X POST -H 'Content-Type: application/json' \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}' \
  "http://127.0.0.1:$port/v1/submissions" >"$work/r" 2>"$work/curl.err" &
c=$!
event=$(jq -cn --arg b "$SLUICE_S3_BUCKET" --arg n "$RANDOM$RANDOM" \
  '{Records:[{eventVersion:"2.1",eventSource:"aws:s3",eventName:"s3:ObjectCreated:Put",
    s3:{bucket:{name:$b},object:{key:"submissions/x/q01.wav",size:10,eTag:"e",sequencer:$n}}}]}')
curl -sS -m 20 -D "$work/wh" -o "$work/wb" -w '%{http_code} %{time_total}\n' \
  -X POST -H "Authorization: Bearer $SECRET" -H 'Content-Type: application/json' \
  --data "$event" "http://127.0.0.1:$port/v1/storage-events" >"$work/wr" 2>"$work/wcurl.err" &
wc=$!
sleep 0.7
kill -TERM "$pid"
wait "$c" || true
wait "$wc" || true
code=0
wait "$pid" || code=$?
read -r status took <"$work/r" || true
check "the create taken before SIGTERM was answered ($status in ${took}s; $(cat "$work/curl.err"))" \
  test "$status" = 503
check "  ... with Retry-After and an error body" \
  sh -c "grep -qi '^Retry-After:' '$work/h' && jq -e '.error.code == \"unavailable\"' '$work/b' >/dev/null"
read -r wstatus wtook <"$work/wr" || true
check "the storage event taken before SIGTERM was answered ($wstatus in ${wtook}s; $(cat "$work/wcurl.err"))" \
  test "$wstatus" = 503
check "presign exited after answering (exit $code)" test "$code" -le 1
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/presign-drain.log" &&
  fail "sanitizer report in presign's log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/presign-drain.log")"
finish
