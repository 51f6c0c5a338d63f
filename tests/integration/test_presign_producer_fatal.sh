#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# presign survives a fatal error of its producer: it answers the create 503,
# renews the producer in process (sl_kafka_producer_renew) and goes on
# accepting creates; it does not exit.
# The fault comes from the real broker, as in test_producer_fatal: presign
# writes its submissions to a topic of this test's own (a copy of
# pipeline.json naming it) whose max.message.bytes (1200) takes a
# one-question create but not a fifteen-question one, and its producer runs
# with enable.gapless.guarantee=true (kafka.producer_properties, which presign
# now honours as every stage does), so the broker's refusal of the large
# create is fatal to the producer. (On librdkafka 2.0.2 the same fatal error
# comes after a broker dies mid-request, #4438: test_kafka_nodes.)
# Checks: the large create is answered 503 with the error JSON; a
# one-question create right after is 201 and its submission is in the topic;
# presign still runs; the log says fatal and renewed;
# sluice_kafka_producer_renewals_total is 1; presign stops cleanly. (With
# presign stopping on the fatal error as before, the one-question create
# found no server: checked 2026-12-05 by disabling the renewal.)
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
port=$((BASE + 74))
admin_port=$((BASE + 75))
topic=presign-fatal.submissions # kept, as the lane's other topics (made with this size limit)
"$SLUICECTL" topics ensure --partitions 1 --config max.message.bytes=1200 "$topic" >/dev/null ||
  { fail "could not create $topic"; finish; }
jq --arg t "$topic" '(.topics[] | select(.name == "submissions") | .name) |= $t |
  (.stages[] | .inputs, .outputs) |= map(if . == "submissions" then $t else . end)' \
  "$ROOT/pipeline.json" >"$work/pipeline.json"
SLUICE_PIPELINE_FILE=$work/pipeline.json SLUICE_KAFKA_PRODUCER_PROPERTIES="enable.gapless.guarantee=true" \
  SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$admin_port \
  "$SLUICE_BIN" presign >>"$STAGES_DIR/presign-fatal.log" 2>&1 &
pid=$!
at_exit "kill -KILL $pid 2>/dev/null; true"
wait_for 30 admin_ready "$admin_port" || { fail "presign did not get ready"; finish; }

create() { # create N -> "<status>" with the body in $work/body
  local qs
  qs=$(jq -nc --argjson n "$1" '[range(1; $n + 1) | {no: ., content_type: "audio/wav", size: 1000,
    prompt: "Describe a place you would like to visit and explain why it matters to you."}]')
  curl "${KEY_AUTH[@]}" -sS -m 30 -o "$work/body" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' --data "{\"questions\":$qs}" "http://127.0.0.1:$port/v1/submissions" ||
    true # curl printed 000
}
code=$(create 15)
check "the fifteen-question create the broker refuses is answered 503 ($code)" test "$code" = 503
check "  ... with the error JSON" jqe '.error.code == "unavailable"' "$(cat "$work/body")"
wait_for 10 grep -q "renewed after its fatal error" "$STAGES_DIR/presign-fatal.log" || true
code=$(create 1)
check "a one-question create right after is accepted ($code)" test "$code" = 201
sid=$(jq -r '.submission_id // empty' "$work/body")
in_topic() { kcat -b "$SLUICE_KAFKA_BROKERS" -C -t "$topic" -o beginning -e -q -f '%k\n' 2>/dev/null | grep -qx "$1"; }
check "  ... and its submission is in the topic" wait_for 10 in_topic "$sid"
check "presign still runs after its producer's fatal error" kill -0 "$pid"
check "presign logged the fatal error" grep -q "kafka producer fatal error" "$STAGES_DIR/presign-fatal.log"
check "  ... and the renewal" grep -q "renewed after its fatal error" "$STAGES_DIR/presign-fatal.log"
renewals=$(metric sluice_kafka_producer_renewals_total "" "http://127.0.0.1:$admin_port")
check "one renewal counted (sluice_kafka_producer_renewals_total $renewals)" test "$renewals" = 1
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
check "presign stopped cleanly on SIGTERM (exit $code)" test "$code" = 0
grep -q '"msg":"stopped"' "$STAGES_DIR/presign-fatal.log" || fail "presign did not log a clean stop"
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR/presign-fatal.log" &&
  fail "sanitizer report in presign's log: $(grep -m3 -E 'ERROR|runtime error' "$STAGES_DIR/presign-fatal.log")"
finish
