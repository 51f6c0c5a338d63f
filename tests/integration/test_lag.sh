#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sluice_consumer_lag_messages is the group's lag as Kafka has it (committed
# offsets against high watermarks), also while the stage has paused
# fetching, and sluice_consumer_lag_actionable_messages leaves out what more
# replicas could not drain. With sluice-harness (the real runtime around a
# scripted provider) as a stage of its own, max_in_flight 4 (no prefetch):
#   - 4 messages whose calls take 40 s fill it and it pauses its partitions;
#     6 more on the input and 3 retry copies on its 1h tier, then 5 more:
#     the gauge, summed over partitions, equals what `sluicectl status`
#     reports for the group, per topic, each time (it keeps rising while
#     paused), and all of it is actionable (breaker closed, no limit);
#   - once the calls end it drains: main lag 0, the 3 retry copies wait
#     for their delay (lag 3 in both, actionable 0);
#   - a provider 429 pause (the shared Redis key) in effect: lag > 0,
#     actionable 0; and after it, actionable again;
#   - the provider failing (the harness's outage switch, HTTP 503) opens the
#     breaker, which holds the messages: lag > 0, actionable 0; the provider
#     back: lag 0;
#   - all that time the harness's two groups never rebalanced (the lag
#     readers, consumers with the groups' ids, never join them);
#   - a second replica joins: the two gauges, summed, equal sluicectl's
#     numbers while both have work waiting, and after it drained;
#   - Kafka is killed: the lag queries time out (logged) and the harness
#     keeps running (the Admin API's ListConsumerGroupOffsets aborted it
#     here when Kafka came back); Kafka back: the queries are answered and
#     the gauge follows 2 more retry copies; Kafka killed again: SIGTERM
#     stops the harness cleanly within 15 s.
source "$(dirname "$0")/lib.sh"
PAUSE_KEY=$(pause_key harness-provider)
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
run=$(date +%s%N | tail -c 7)
ST=hlag$run
export HARNESS_STAGE=$ST SLUICE_RETRY_TIERS=1s,1h
export SLUICE_STAGE_MAX_IN_FLIGHT=4 SLUICE_STAGE_PREFETCH=0 SLUICE_STAGE_WORKERS=4 SLUICE_STAGE_DRAIN_TIMEOUT_S=2
export SLUICE_STAGE_LAG_INTERVAL_MS=1000 SLUICE_STAGE_CLAIM_LEASE_MS=0
export SLUICE_BREAKER_MIN_CALLS=4 SLUICE_BREAKER_PROBE_INTERVAL_MS=10000
harness_topics 2 1s 1h
RC DEL "$PAUSE_KEY" >/dev/null
RC DEL harness:outage >/dev/null # one key a command: a cluster refuses two slots
at_exit 'redis-cli -u "$SLUICE_REDIS_URL" DEL "$PAUSE_KEY" >/dev/null 2>&1; redis-cli -u "$SLUICE_REDIS_URL" DEL harness:outage >/dev/null 2>&1; true'

# what `sluicectl status` knows of the harness: a pipeline with it as a stage
# (only sluicectl reads it; the harness runs with the built-in one)
jq -n --arg s "$ST" '{pipeline: "lag-test", version: 1,
  topics: [{name: "\($s).in", message: "json:harness"}],
  dead_letters: {topic: "dlq", audit: "dlq.audit"}, retry_tiers: ["1s", "1h"],
  stages: [{name: "src", kind: "presign", inputs: [], outputs: ["\($s).in"]},
           {name: $s, kind: "harness", inputs: ["\($s).in"], outputs: [], retry: true}]}' \
  >"$work/pipeline.json"

# status_lag TOPIC-RE: the group's lag on the topics matching TOPIC-RE, from sluicectl
status_lag() {
  SLUICE_PIPELINE_FILE=$work/pipeline.json "$SLUICECTL" status --json 2>>"$work/ctl.err" |
    jq --arg s "$ST" --arg t "$1" \
      '[.stages[] | select(.stage == $s) | .partitions[] | select(.topic | test($t)) | .lag] | add // 0'
}
# gauge_lag TOPIC-RE: the stage's sluice_consumer_lag_messages over those
# topics, summed over the replicas whose admin URLs are in $ADMINS
ADMINS=("$H_ADMIN")
gauge_lag() {
  local a
  for a in "${ADMINS[@]}"; do curl -fsS "$a/metrics"; done | awk -v s="$ST" -v t="$1" '
    $1 ~ /^sluice_consumer_lag_messages\{/ && index($1, "stage=\"" s "\"") {
      match($1, /topic="[^"]*"/); tp = substr($1, RSTART + 7, RLENGTH - 8)
      if (tp ~ t) sum += $2 }
    END { print sum + 0 }'
}
actionable() { metric sluice_consumer_lag_actionable_messages "stage=\"$ST\"" "$H_ADMIN"; }
actionable_is() { [[ $(actionable) == "$1" ]]; }
breaker_open() {
  [[ $(metric sluice_breaker_state "stage=\"$ST\",provider=\"harness-provider\"" "$H_ADMIN") != 0 ]]
}
MAIN="^$ST\\.in\$" RETRY="^$ST\\.retry\\."
# agree MAIN RETRY: gauge and sluicectl both say MAIN on the input, RETRY on the tiers
agree() {
  local gm gr sm sr
  gm=$(gauge_lag "$MAIN") gr=$(gauge_lag "$RETRY")
  sm=$(status_lag "$MAIN") sr=$(status_lag "$RETRY")
  echo "gauge $gm+$gr status $sm+$sr" >"$work/agree"
  [[ $gm == "$1" && $sm == "$1" && $gr == "$2" && $sr == "$2" ]]
}
# check_agree SECS MAIN RETRY DESCRIPTION: gauge and sluicectl agree, MAIN
# on the input and RETRY on the tiers, at some moment within SECS, read
# together (the message shows the last reading). The state moves on
# (a pause expires, a probe takes a message): never a second reading
check_agree() {
  local ok=no
  wait_for "$1" agree "$2" "$3" && ok=yes
  check "$4 ($(cat "$work/agree"))" test "$ok" = yes
}
main_agrees() { # records what it read in $work/main
  local g s
  g=$(gauge_lag "$MAIN") s=$(status_lag "$MAIN")
  echo "$g / $s" >"$work/main"
  [[ $g == "$s" ]]
}
in_flight() { metric sluice_in_flight "stage=\"$ST\"" "$H_ADMIN"; }
in_flight_is() { [[ $(in_flight) == "$1" ]]; }
produce() { # produce N PREFIX PAYLOAD : N keyed messages to the input
  local i
  for ((i = 1; i <= $1; i++)); do printf '%s-%s/%d\t%s\n' "$2" "$run" "$i" "$3"; done |
    kcat -P -b "$B" -t "$ST.in" -K $'\t'
}
retry_copies() { # retry_copies N PREFIX : N retry copies on the 1h tier, due in an hour
  local i now
  now=$(date +%s%3N)
  for ((i = 1; i <= $1; i++)); do
    printf '%s-%s/%d\t{}\n' "$2" "$run" "$i" |
      kcat -P -b "$B" -t "$ST.retry.1h" -K $'\t' -H sluice-attempt=1 -H "sluice-first-failure-ms=$now" \
        -H "sluice-not-before-ms=$((now + 3600000))" -H sluice-delay-ms=3600000 \
        -H "sluice-origin-topic=$ST.in" -H sluice-error-class=unavailable -H "sluice-error-message=test"
  done
}

harness_up

# ---- paused at max_in_flight --------------------------------------------------
produce 4 blk '{"sleep_ms":40000}'
wait_for 30 in_flight_is 4 ||
  fail "the harness did not take the 4 slow messages"
t_blk=$SECONDS
sleep 2 # paused now: nothing more is fetched
produce 6 a '{}'
retry_copies 3 r
check_agree 15 10 3 "paused: the gauge equals sluicectl status, input 10 and retry tier 3"
check "  ... and the stage is still paused (in flight $(in_flight))" in_flight_is 4
produce 5 b '{}'
check_agree 15 15 3 "paused, 5 more: the gauge keeps rising with sluicectl status, 15 + 3"
check "all of it is actionable: breaker closed, no limit ($(actionable))" wait_for 10 actionable_is 18
check "  ... still paused (the calls take 40 s; $((SECONDS - t_blk)) s so far)" test $((SECONDS - t_blk)) -lt 38

# ---- drained: only the retry copies wait, for their delay ---------------------
check_agree 60 0 3 "drained: input 0, the 3 retry copies still wait"
check "retry copies waiting for their delay are not actionable ($(actionable))" wait_for 10 actionable_is 0

# ---- a provider 429 pause in effect: more replicas would wait as well -------------
# (30 s: under a loaded CI machine a pause of 12 s, read within 10 s, ran out
# before the gauge, refreshed every second, and status were read together)
RC SET "$PAUSE_KEY" 1 PX 30000 >/dev/null
produce 3 p '{}'
check_agree 20 3 3 "during the provider's pause the gauge says 3 waiting"
check "  ... none of it actionable ($(actionable))" wait_for 5 actionable_is 0
check_agree 45 0 3 "after the pause they are done"

# ---- the breaker open: held messages are not actionable ------------------------
# (one probe per 10 s: the held messages stay on the input meanwhile)
RC SET harness:outage 1 >/dev/null
produce 12 o '{}'
wait_for 30 breaker_open || fail "the breaker did not open"
held() { # the gauge has seen the held messages; none of them actionable
  lag_main=$(gauge_lag "$MAIN") act=$(actionable)
  [[ $lag_main -gt 0 && $act == 0 ]]
}
wait_for 10 held || true
check "breaker open: lag on the input ($lag_main) ..." test "$lag_main" -gt 0
check "  ... none of it actionable ($act)" test "$act" = 0
check "  ... the breaker still open" breaker_open
# a probe every 10 s moves one held message on while the gauge is at most
# 1 s old: they must agree at some moment of those 10 s, read together
agreed=no
wait_for 10 main_agrees && agreed=yes
check "  ... and the gauge equals sluicectl status on the input ($(cat "$work/main"))" test "$agreed" = yes
RC DEL harness:outage >/dev/null
# the probes that failed sent their message on to the 1h tier: how many is timing
drained() { [[ $(gauge_lag "$MAIN") == 0 && $(status_lag "$MAIN") == 0 &&
  $(gauge_lag "$RETRY") == "$(status_lag "$RETRY")" ]]; }
wait_for 60 drained || true
check "the provider back: the input drained, retry tiers agree ($(gauge_lag "$RETRY") / $(status_lag "$RETRY"))" drained

# ---- the lag readers joined no group -------------------------------------------
# they are consumers with the stage's group ids that never subscribe: in all
# this time (a query a second) the harness's groups never rebalanced, so it
# was assigned its partitions once per group
assignments() { grep -c ': assigned [0-9]* partition' "$STAGES_DIR/harness.log"; }
queried() { grep -c "^sluice_consumer_lag_messages{" < <(curl -fsS "$H_ADMIN/metrics"); }
check "no rebalance in $((SECONDS - t_blk)) s of lag queries on $(queried) partitions: $(assignments) assignments, one per group" \
  test "$(assignments)" = 2

# ---- two replicas: their gauges add up to the group's lag -----------------------
H2=http://127.0.0.1:$((HARNESS_PORT + 1))
SLUICE_ADMIN_LISTEN=127.0.0.1:$((HARNESS_PORT + 1)) "$HARNESS" >>"$STAGES_DIR/harness-2.log" 2>&1 &
h2=$!
at_exit "kill -TERM $h2 2>/dev/null; true"
ADMINS=("$H_ADMIN" "$H2")
both_consume() {
  [[ $(metric sluice_assigned_partitions "stage=\"$ST\"" "$H_ADMIN") -gt 0 &&
    $(metric sluice_assigned_partitions "stage=\"$ST\"" "$H2") -gt 0 ]] 2>/dev/null
}
wait_for 60 both_consume || fail "the second replica got no partitions"
log "assigned partitions: $(metric sluice_assigned_partitions "stage=\"$ST\"" "$H_ADMIN") and $(metric sluice_assigned_partitions "stage=\"$ST\"" "$H2")"
produce 8 two '{"sleep_ms":30000}'
produce 6 c '{}'
t_two=$SECONDS
sums_agree() { # the sum over both replicas equals sluicectl, with work waiting
  local gm gr sm sr
  gm=$(gauge_lag "$MAIN") gr=$(gauge_lag "$RETRY") sm=$(status_lag "$MAIN") sr=$(status_lag "$RETRY")
  echo "gauges $gm+$gr status $sm+$sr" >"$work/agree"
  [[ $gm -gt 0 && $gm == "$sm" && $gr == "$sr" ]]
}
ok=no
wait_for 20 sums_agree && ok=yes # read together; the slow calls move on
check "two replicas: their gauges add up to sluicectl status ($(cat "$work/agree"))" test "$ok" = yes
check "  ... while the slow calls run ($((SECONDS - t_two)) s of 30)" test $((SECONDS - t_two)) -lt 28
check_agree 90 0 3 "two replicas drained: input 0, the 3 retry copies still wait"
kill -TERM "$h2"
rc2=0
wait "$h2" || rc2=$?
check "the second replica stopped cleanly on SIGTERM (exit $rc2)" test "$rc2" = 0

# ---- Kafka down: the lag queries time out, nothing aborts, SIGTERM stops it -------
# (with the Admin API, a ListConsumerGroupOffsets that timed out aborted every
# consumer of the process in librdkafka 2.0.2; the readers' queries must not)
at_exit '"$ROOT/tools/devstack" up >/dev/null 2>&1'
lag_fails() { grep -c 'consumer lag: .*keep their last values' "$STAGES_DIR/harness.log" || true; }
fails0=$(lag_fails)
kill -KILL "$(cat "$DEVSTACK_DIR/kafka.pid")"
t_down=$SECONDS
lag_failed() { [[ $(lag_fails) -gt $fails0 ]]; }
wait_for 30 lag_failed || true
check "Kafka down: the harness's lag query timed out ($((SECONDS - t_down)) s) ..." lag_failed
sleep 10 # probes that time out meanwhile
check "  ... and it still runs $((SECONDS - t_down)) s into the outage" kill -0 "$hpid"
"$ROOT/tools/devstack" up >/dev/null
t_up=$SECONDS
answers_again() { grep -q 'consumer lag: Kafka answers again' "$STAGES_DIR/harness.log"; }
wait_for 60 answers_again || true
check "Kafka back: the lag queries are answered again ($((SECONDS - t_up)) s) ..." answers_again
retry_copies 2 back
check_agree 30 0 5 "  ... and the gauge moves with sluicectl status again"
check "  ... the harness ran through the outage" kill -0 "$hpid"
# down again, for a stop while the queries time out
fails0=$(lag_fails)
kill -KILL "$(cat "$DEVSTACK_DIR/kafka.pid")"
wait_for 30 lag_failed || true
sleep 2
t_term=$(date +%s%N)
kill -TERM "$hpid"
wait_for 15 sh -c "! kill -0 $hpid 2>/dev/null" || true
term_ms=$((($(date +%s%N) - t_term) / 1000000))
check "  ... SIGTERM stopped it in $term_ms ms with Kafka down (at most 15 s)" sh -c "! kill -0 $hpid 2>/dev/null"
harness_down
check "  ... and it logged its clean stop" grep -q '"msg":"stopped"' "$STAGES_DIR/harness.log"
"$ROOT/tools/devstack" up >/dev/null

check "sluicectl reported no errors ($(head -c 300 "$work/ctl.err" 2>/dev/null))" test ! -s "$work/ctl.err"
finish
