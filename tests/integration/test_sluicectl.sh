#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sluicectl against the test stack's Kafka, without the stages:
#  - topics ensure creates missing topics, reports existing ones, grows those with
#    fewer partitions than asked and refuses to shrink; topics list;
#  - dead letters written with the test/support command `dlq inject` (two of
#    stage stt, one grade; different classes, keys and submissions) into a
#    DLQ topic of this run only, so other tests' dead letters never count;
#  - dlq list with each filter (stage, class, submission, --since, --until,
#    --limit) and dlq show (fields, payload, decoded view, unknown position);
#  - dlq replay --dry-run produces nothing to stt.requests but is audited;
#  - dlq replay --stage stt --rate 5 puts exactly the two dead letters on
#    stt.requests: original key, byte-identical payload, only the
#    sluice-replay-id header; the audit names them and the actor;
#  - a dead letter without replay_topic is skipped with the reason (exit 1);
#  - more than 100 replays need --yes; --rate paces them; progress on stderr;
#  - usage errors exit 2; an unreachable broker exits 1 within 15 s.
# sluicectl's stderr is checked for sanitizer reports too.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
run=$(date +%s%N | tail -c 9)
# a pipeline whose dead-letter topics and stt/grade inputs are this test's
# own: replays land where no stage of a later test reads them
DLQ=sluicectl-test.dlq.$run DLQ_AUDIT=sluicectl-test.audit.$run
STT=sluicectl-test.stt.$run GRADE=sluicectl-test.grade.$run
sed -e "s/\"stt.requests\"/\"$STT\"/g" -e "s/\"grade.requests\"/\"$GRADE\"/g" "$ROOT/pipeline.json" |
  jq --arg d "$DLQ" --arg a "$DLQ_AUDIT" '.dead_letters = {topic: $d, audit: $a}' >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json
BULK=sluicectl-test.bulk.$run
NEW=sluicectl-test.new.$run

# ctl ARGS... : runs sluicectl; stdout in $work/out, stderr in $work/err
# (all stderr also collected in $work/all.err), exit status in $RC
ctl() {
  RC=0
  "$SLUICECTL" "$@" >"$work/out" 2>"$work/err" || RC=$?
  cat "$work/err" >>"$work/all.err"
}
out() { cat "$work/out"; }
lines() { grep -c . "$work/out" || true; }
ms_now() { date +%s%3N; }
# hw_sum TOPIC: sum of the high watermarks of all partitions
hw_sum() {
  local n p args=() sum=0
  n=$(kcat -b "$B" -L -t "$1" -J 2>/dev/null | jq '.topics[0].partitions | length')
  for ((p = 0; p < n; p++)); do args+=(-t "$1:$p:-1"); done
  for o in $(kcat -b "$B" -Q "${args[@]}" 2>/dev/null | awk '{print $NF}'); do sum=$((sum + o)); done
  echo "$sum"
}

# protobuf by hand (fields < 16, lengths < 128): pbs FIELD STRING, pbv FIELD VARINT<128
# (the printf formats are built on purpose: they are the bytes)
# shellcheck disable=SC2059
pbs() { printf "\\x$(printf %02x $(($1 << 3 | 2)))\\x$(printf %02x ${#2})%s" "$2"; }
# shellcheck disable=SC2059
pbv() { printf "\\x$(printf %02x $(($1 << 3)))\\x$(printf %02x "$2")"; }
sid=$(cat /proc/sys/kernel/random/uuid)
sid2=$(cat /proc/sys/kernel/random/uuid)
sid3=$(cat /proc/sys/kernel/random/uuid)
# UploadCompleted (stt.requests): submission_id, question_no, bucket, object_key, size
{ pbs 1 "$sid"; pbv 2 1; pbs 3 answers; pbs 4 "submissions/$sid/q01.wav"; pbv 5 100; } >"$work/up1.bin"
{ pbs 1 "$sid"; pbv 2 2; pbs 3 answers; pbs 4 "submissions/$sid/q02.wav"; pbv 5 120; } >"$work/up2.bin"
# Transcript (grade.requests): upload (message), text, duration_s 1.5 (double)
{ pbs 1 "$sid2"; pbv 2 1; } >"$work/up3.bin"
# shellcheck disable=SC2059
{ printf '\x0a'; printf "\\x$(printf %02x "$(stat -c %s "$work/up3.bin")")"; cat "$work/up3.bin"
  pbs 2 "hello world"; printf '\x19\x00\x00\x00\x00\x00\x00\xf8\x3f'; } >"$work/tr.bin"

# --- topics ensure / list ---------------------------------------------------------
ctl topics ensure --partitions 4 "$DLQ" "$DLQ_AUDIT" "$STT" "$GRADE"
check "topics ensure creates this run's DLQ, audit, stt and grade topics (rc $RC)" test "$RC" = 0
check "topics ensure says created" test "$(grep -c '^created ' "$work/out")" = 4
t0=$(ms_now)
ctl topics ensure --partitions 2 --config retention.ms=3600000 "$NEW"
t1=$(ms_now)
check "topics ensure: a new topic is created ($(out | tr '\n' ' '))" grep -qx "created $NEW" "$work/out"
check "topics ensure exits 0 (rc $RC) and is fast ($((t1 - t0)) ms)" test "$RC" = 0 -a $((t1 - t0)) -lt 5000
ctl topics ensure --partitions 4 "$DLQ" "$STT"
check "topics ensure: existing topics with as many partitions are reported as existing (rc $RC)" \
  test "$RC:$(grep -c '^exists ' "$work/out")" = "0:2"
# growing: an existing topic with fewer partitions gets the ones missing
# (CreatePartitions); one with more is refused, and keeps its partitions
ctl topics ensure --partitions 5 "$NEW"
check "topics ensure grows $NEW from 2 to 5 partitions (rc $RC: $(out))" \
  test "$RC:$(out)" = "0:grew $NEW from 2 to 5 partitions"
ctl topics ensure --partitions 3 "$NEW"
check "topics ensure refuses to shrink $NEW to 3: exit 1 (rc $RC)" test "$RC" = 1
check "  ... saying why ($(out))" grep -qx "failed $NEW: it has 5 partitions, more than the 3 asked for; .*" "$work/out"
# (every broker's metadata has the new partitions a moment after the answer)
listed_5() { "$SLUICECTL" topics list --json | grep -qx "{\"topic\":\"$NEW\",\"partitions\":5}"; }
check "topics list shows $NEW with its 5 partitions" wait_for 10 listed_5
ctl topics ensure "$NEW"
check "topics ensure again: exists (rc $RC)" test "$RC:$(out)" = "0:exists $NEW"
ctl topics ensure --replication 3 "sluicectl-test.rf3.$run"
check "topics ensure: an impossible replication factor fails with exit 1 (rc $RC)" \
  test "$RC" = 1 -a "$(grep -c '^failed ' "$work/out")" = 1
ctl topics list
check "topics list (table) shows stt.requests" grep -qE '^stt\.requests +[0-9]+$' "$work/out"

# --- dead letters ------------------------------------------------------------------
ctl dlq inject --stage stt --class undecodable_audio --key "$sid/1" --replay-topic $STT \
  --payload-file "$work/up1.bin" --attempts 1 --message "libsndfile: unknown format"
check "inject 1 (rc $RC)" test "$RC" = 0
pos1=$(out)
ctl dlq inject --stage stt --class fetch_failed --key "$sid/2" --replay-topic $STT \
  --payload-file "$work/up2.bin" --attempts 4
check "inject 2 (rc $RC)" test "$RC" = 0
ctl dlq inject --stage grade --class budget_exhausted --key "$sid2/1" \
  --replay-topic $GRADE --payload-file "$work/tr.bin"
check "inject 3 (rc $RC)" test "$RC" = 0
pos3=$(out)
check "inject prints the position PARTITION:OFFSET ($pos1, $pos3)" \
  grep -qE '^[0-9]+:[0-9]+$' <<<"$pos1"$'\n'"$pos3"

# --- list with filters ---------------------------------------------------------------
count() { ctl dlq list --json "$@"; [[ $RC == 0 ]] || echo "rc=$RC"; lines; }
check "list: all 3" test "$(count)" = 3
check "list --stage stt: 2" test "$(count --stage stt)" = 2
check "list --stage grade: 1" test "$(count --stage grade)" = 1
check "list --class fetch_failed: 1" test "$(count --class fetch_failed)" = 1
check "list --class fetch_failed is $sid/2" jqe ".key == \"$sid/2\" and .attempts == 4" "$(out)"
check "list --submission $sid: 2" test "$(count --submission "$sid")" = 2
check "list --submission $sid2: 1" test "$(count --submission "$sid2")" = 1
check "list --submission of nothing: 0" test "$(count --submission "$sid3")" = 0
check "list --stage stt --class undecodable_audio: 1" \
  test "$(count --stage stt --class undecodable_audio)" = 1
check "list --since 1h: 3" test "$(count --since 1h)" = 3
check "list --until 1h: 0 (they failed just now)" test "$(count --until 1h)" = 0
check "list --since 2h --until in a minute (RFC3339): 3" \
  test "$(count --since 2h --until "$(date -u -d '+1 min' +%Y-%m-%dT%H:%M:%SZ)")" = 3
check "list --limit 2: 2" test "$(count --limit 2)" = 2
check "list --json carries replay_topic" jqe '.replay_topic == "'"$STT"'"' \
  "$(count --class undecodable_audio >/dev/null; out)"
ctl dlq list --stage stt
check "list (table): header and 2 rows" test "$(lines)" = 3
check "list (table) names the class and reason" grep -q 'undecodable_audio.*libsndfile: unknown format' "$work/out"
check "list reports the count on stderr" grep -q '^2 of 3 dead letters shown' "$work/err"

# --- show ------------------------------------------------------------------------------
ctl dlq show "$pos1" --json
show=$(out)
check "show --json (rc $RC)" test "$RC" = 0
check "show: the dead letter's fields" jqe "
  .stage == \"stt\" and .error_class == \"undecodable_audio\" and .key == \"$sid/1\" and
  .error_message == \"libsndfile: unknown format\" and .attempts == 1 and
  .replay_topic == \"$STT\" and .original.topic == \"$STT\" and
  (.first_failure_ms | type == \"number\") and (.last_failure | endswith(\"Z\")) and
  .dlq_partition == ${pos1%%:*} and .dlq_offset == ${pos1##*:}" "$show"
check "show: payload size and base64" jqe \
  ".payload_bytes == $(stat -c %s "$work/up1.bin") and .payload_base64 == \"$(base64 -w0 <"$work/up1.bin")\"" "$show"
check "show: decoded as UploadCompleted" jqe \
  ".payload_type == \"sluice.v1.UploadCompleted\" and .decoded.submission_id == \"$sid\" and
   .decoded.question_no == 1 and .decoded.object_key == \"submissions/$sid/q01.wav\" and .decoded.size == 100" "$show"
ctl dlq show "$pos3" --json
check "show: a grade dead letter decodes as Transcript" jqe \
  ".payload_type == \"sluice.v1.Transcript\" and .decoded.text == \"hello world\" and
   .decoded.duration_s == 1.5 and .decoded.upload.submission_id == \"$sid2\"" "$(out)"
ctl dlq show "$pos1"
check "show (text): fields and decoded view" sh -c \
  "grep -q '^error class *undecodable_audio' '$work/out' && grep -q '^decoded (sluice.v1.UploadCompleted)' '$work/out' && grep -q '\"object_key\": \"submissions/$sid/q01.wav\"' '$work/out'"
ctl dlq show 0:999999
check "show of an unknown position: exit 1 with a message (rc $RC)" \
  test "$RC" = 1 -a -s "$work/err" -a ! -s "$work/out"
ctl dlq show 99:0
check "show of a partition that does not exist: exit 1 (rc $RC)" test "$RC" = 1

# --- replay --dry-run ----------------------------------------------------------------------
hw0=$(hw_sum $STT)
ctl dlq replay --stage stt --dry-run --actor dry-tester
dry_id=$(sed -n 's/.*; audit \([0-9a-f-]*\)$/\1/p' "$work/out")
check "dry run exits 0 (rc $RC)" test "$RC" = 0
check "dry run lists the 2 would-be replays" test "$(grep -c '^would replay ' "$work/out")" = 2
check "dry run summary ($(tail -1 "$work/out"))" grep -q '^dry run: would replay 2, skipped 0; audit ' "$work/out"
check "dry run produced nothing to $STT ($hw0 -> $(hw_sum $STT))" \
  test "$(hw_sum $STT)" = "$hw0"
ctl dlq audit --json
check "the dry run is audited: dry_run true, 2 entries, the actor" jqe \
  "select(.id == \"$dry_id\") | .dry_run == true and (.entries | length) == 2 and .actor == \"dry-tester\"" "$(out)"
check "audit ids are UUIDv7" grep -qE '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' <<<"$dry_id"

# --- replay ------------------------------------------------------------------------------------
t0=$(ms_now)
ctl dlq replay --stage stt --rate 5 --actor ops-test
t1=$(ms_now)
rid=$(sed -n 's/.*; audit \([0-9a-f-]*\)$/\1/p' "$work/out")
check "replay exits 0 (rc $RC; $(out))" test "$RC" = 0
check "replay summary: replayed 2, skipped 0" grep -q '^replayed 2, skipped 0; audit ' "$work/out"
check "replay at 5/s took at least 0.2 s ($((t1 - t0)) ms)" test $((t1 - t0)) -ge 200
kcat -C -b "$B" -t $STT -o beginning -e -q -f '%p %o %k %h\n' >"$work/stt" 2>/dev/null
grep " sluice-replay-id=$rid\$" "$work/stt" >"$work/replayed" || true
check "exactly 2 messages on $STT carry this replay id" test "$(grep -c . "$work/replayed")" = 2
check "they have the original keys" test "$(awk '{print $3}' "$work/replayed" | sort | tr '\n' ' ')" = \
  "$(printf '%s\n' "$sid/1" "$sid/2" | sort | tr '\n' ' ')"
check "their only header is sluice-replay-id (no retry headers)" \
  test "$(awk '{print $4}' "$work/replayed" | sort -u)" = "sluice-replay-id=$rid"
while read -r p o k _; do
  kcat -C -b "$B" -t $STT -p "$p" -o "$o" -c 1 -e -q -f '%s' >"$work/got" 2>/dev/null
  want=$work/up${k##*/}.bin
  check "replayed payload of $k is byte-identical" cmp -s "$work/got" "$want"
done <"$work/replayed"
check "the grade dead letter was not replayed" test "$(kcat -C -b "$B" -t $GRADE -o beginning -e -q \
  -f '%h\n' 2>/dev/null | grep -c "sluice-replay-id=$rid" || true)" = 0
ctl dlq audit --json
check "the replay is audited: 2 entries to $STT, actor, host, filters" jqe \
  "select(.id == \"$rid\") | .dry_run == false and (.entries | length) == 2 and .actor == \"ops-test\" and
   .host == \"$(hostname)\" and ([.entries[].target_topic] | unique) == [\"$STT\"] and
   ([.entries[].key] | sort) == ([\"$sid/1\", \"$sid/2\"] | sort) and (.filters | contains(\"stage=stt\"))" "$(out)"
ctl dlq audit
check "audit (table) lists both runs" test "$(grep -cE "($dry_id|$rid)" "$work/out")" = 2

# --- no replay topic; old dead letters -----------------------------------------------------------
ctl dlq inject --stage ingest --class unmapped_key --key "$sid3/1" --payload-file "$work/up1.bin" --failed-at 3h
check "inject an old dead letter without replay_topic (rc $RC)" test "$RC" = 0
check "list --until 1h: only the old one" test "$(count --until 1h)" = 1
check "list --since 1h: still 3" test "$(count --since 1h)" = 3
ctl dlq replay --stage ingest --actor ops-test
check "replay of a dead letter without replay_topic: exit 1, skipped with the reason ($(out))" \
  sh -c "test $RC = 1 && grep -q '^replayed 0, skipped 1 (no replay_topic' '$work/out'"

# --- more than 100: --yes, --rate, progress ----------------------------------------------------------
ctl topics ensure --partitions 2 "$BULK"
ctl dlq inject --stage bulk --class c --key "bulk-$run/1" --replay-topic "$BULK" \
  --payload-file "$work/up2.bin" --count 101
check "inject --count 101 (rc $RC)" test "$RC:$(lines)" = "0:101"
ctl dlq replay --stage bulk --actor ops-test
check "101 replays without --yes are refused with exit 2 (rc $RC)" test "$RC" = 2
check "the refusal asks for --yes" grep -q -- '--yes' "$work/err"
check "nothing was produced" test "$(hw_sum "$BULK")" = 0
ctl dlq replay --stage bulk --dry-run
check "a dry run needs no --yes (rc $RC)" test "$RC" = 0
t0=$(ms_now)
ctl dlq replay --stage bulk --actor ops-test --yes --rate 50
t1=$(ms_now)
check "101 replays with --yes (rc $RC; $(out))" grep -q '^replayed 101, skipped 0' "$work/out"
check "all 101 are on $BULK" test "$(hw_sum "$BULK")" = 101
check "--rate 50 paces 101 replays: 1.9 s .. 10 s ($((t1 - t0)) ms)" \
  test $((t1 - t0)) -ge 1900 -a $((t1 - t0)) -le 10000
check "progress on stderr, a line per 10% when not a TTY ($(grep -c '101/101 100%' "$work/err"))" \
  sh -c "n=\$(grep -cE '^\[[#.]{20}\] [0-9]+/101 +[0-9]+%  eta ' '$work/err'); test \$n -ge 5 -a \$n -le 10 && grep -q '101/101 100%' '$work/err'"
ctl dlq replay --stage bulk --dry-run --audit-topic dlq.audit --actor ops-test --limit 3
aid=$(sed -n 's/.*; audit \([0-9a-f-]*\)$/\1/p' "$work/out")
ctl dlq audit --json --audit-topic dlq.audit
check "--audit-topic: the record is on dlq.audit with --limit honoured" jqe \
  "select(.id == \"$aid\") | (.entries | length) == 3 and (.filters | contains(\"limit=3\"))" "$(out)"

# --- usage errors, unreachable broker ----------------------------------------------------------------
for args in "dlq" "dlq frobnicate" "nope list" "dlq list --bogus" "dlq list --stage" \
  "dlq list --since yesterday" "dlq list --until 2026-02-30T00:00:00Z" "dlq list --limit 0" \
  "dlq show" "dlq show 12" "dlq show a:b" "dlq show 1:2 3:4" "dlq replay --rate 0" \
  "dlq list --rate 5" "dlq list extra" "topics ensure" "topics ensure --partitions x t" \
  "topics ensure --config nokv t" "topics ensure bad/name"; do
  # shellcheck disable=SC2086
  ctl $args
  check "usage error exits 2: sluicectl $args (rc $RC)" test "$RC" = 2 -a -s "$work/err"
done
t0=$(ms_now)
RC=0
timeout 30 "$SLUICECTL" dlq list --brokers 127.0.0.1:1 >/dev/null 2>"$work/err" || RC=$?
t1=$(ms_now)
cat "$work/err" >>"$work/all.err"
check "unreachable broker: exit 1 within 15 s (rc $RC, $((t1 - t0)) ms)" \
  test "$RC" = 1 -a $((t1 - t0)) -lt 15000
check "unreachable broker: the message names it" grep -q '127.0.0.1:1' "$work/err"
RC=0
timeout 30 "$SLUICECTL" topics ensure --timeout 3 --brokers 127.0.0.1:1 x >/dev/null 2>>"$work/all.err" || RC=$?
check "topics ensure --timeout 3, unreachable broker: exit 1 (rc $RC)" test "$RC" = 1

if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work/all.err"; then
  fail "sanitizer report from sluicectl:"
  grep -E -A20 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work/all.err" | head -60 >&2
fi
finish
