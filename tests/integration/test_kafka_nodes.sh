#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Kafka faults on a three-node cluster, under load. A stack of its own in
# production's shape (tools/devstack with DEVSTACK_KAFKA_NODES=3 and
# DEVSTACK_REDIS_CLUSTER=1 on ports BASE+700..+724: brokers +700/+703/+706,
# their controllers +1; a Redis Cluster of three primaries with a replica
# each on +710..+715, buses +716..+721, 16 buckets; gateways +722 and +724),
# every topic with replication 3 and min.insync.replicas 2. A
# steady load (pipeline_loadgen, 2 submissions/s) over the fake provider
# while, one after the other,
#   1. the broker that leads the most partitions is SIGKILLed and restarted
#      ~15 s later (leaders move, then move back as it catches up);
#   2. the active controller (the metadata quorum's leader, a broker too in
#      this combined cluster) is SIGKILLed and restarted ~10 s later: a
#      controller failover;
#   3. another broker than the first is SIGSTOPped for 60 s, then continued.
# Each next fault waits until every partition has its three replicas in
# sync again. A supervisor restarts a stage that exits by itself (what
# Kubernetes does), and the exit fails the test.
# Asserts: every accepted question ends done exactly once (0 lost, 0
# duplicated, 0 failed), no stage exits, at most 1.02 provider calls per
# question (stt and grading each), creates refused (503) only during a
# fault and one accepted at least every 20 s all through each. Prints per
# fault (from it to 5 s after its end) the creates accepted and refused,
# presign's accept p99 and the longest gap between accepted creates.
source "$(dirname "$0")/lane.sh" # this test's lane (tools/test runs two)
BASE=${SLUICE_TEST_PORT_BASE:-18080}
_dir=${DEVSTACK_DIR:-${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}/build-san/test-stack}
export DEVSTACK_DIR=$_dir-kafka3 DEVSTACK_KAFKA_NODES=3 DEVSTACK_REDIS_CLUSTER=1
# 4 partitions a topic (one replica of each stage): a restarted broker
# recovers half as many logs as with the default 12 before it serves
export DEVSTACK_PARTITIONS=4
export DEVSTACK_KAFKA_PORT=$((BASE + 700)) # nodes +700, +703, +706; controllers +1
export DEVSTACK_REDIS_PORT=$((BASE + 710)) # six nodes +710..+715, their buses +716..+721
export DEVSTACK_S3_PORT=$((BASE + 722))    # the derived objects' gateway +724
ROOT0=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}
"$ROOT0/tools/devstack" down --wipe >/dev/null 2>&1 || true # a previous run's leftovers
t_stack=$SECONDS
source "$(dirname "$0")/lib.sh" # brings the three-node stack up (topics with sluicectl)
at_exit '"$ROOT/tools/devstack" down --wipe >/dev/null 2>&1 || true'
log "three-node stack up in $((SECONDS - t_stack)) s: $SLUICE_KAFKA_BROKERS"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }
KAFKA_HOME=${SLUICE_CACHE:-$HOME/.cache/sluice}/kafka-$(sed -n \
  's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$ROOT/tools/kafka/pom.xml" | head -n1)
mapfile -t KPIDF < <("$ROOT/tools/devstack" pidfiles kafka) # node n (broker id n+1): line n+1
check "three brokers in the bootstrap list and three pid files" \
  test "$(tr ',' '\n' <<<"$SLUICE_KAFKA_BROKERS" | wc -l)/${#KPIDF[@]}" = 3/3

# ---- the cluster, as its metadata says ----------------------------------------------
meta() { kcat -b "$SLUICE_KAFKA_BROKERS" -m 10 -L -J 2>/dev/null; }
# busiest_leader [EXCEPT]: the broker id leading the most partitions (not EXCEPT)
busiest_leader() {
  meta | jq -r --argjson x "${1:-0}" '[.topics[].partitions[].leader | select(. != $x and . > 0)] |
    group_by(.) | max_by(length) | .[0]'
}
# all_in_sync: every partition of every topic has its three replicas in sync
all_in_sync() {
  meta | jq -e '[.topics[].partitions[]] | length > 0 and all(.isrs | length == 3)' >/dev/null
}
# quorum_leader: the active controller's id (the metadata quorum's leader)
quorum_leader() {
  timeout 60 java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$KAFKA_HOME/libs/*" \
    -Dlog4j2.configurationFile="$DEVSTACK_DIR/kafka/tools-log4j2.properties" \
    org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$SLUICE_KAFKA_BROKERS" \
    describe --status 2>/dev/null | awk '$1 == "LeaderId:" {print $2}'
}
kpid() { cat "${KPIDF[$(($1 - 1))]}"; } # kpid BROKER_ID
topics_rf3() { # every topic of the stack with replication 3 and min.insync.replicas 2
  timeout 60 java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$KAFKA_HOME/libs/*" \
    -Dlog4j2.configurationFile="$DEVSTACK_DIR/kafka/tools-log4j2.properties" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$SLUICE_KAFKA_BROKERS" --describe \
    --exclude-internal 2>/dev/null | awk '/PartitionCount/ {n++; if ($0 ~ /ReplicationFactor: 3/ &&
      $0 ~ /min.insync.replicas=2/) ok++} END {print ok + 0 "/" n + 0}'
}
rf=$(topics_rf3)
check "every topic has replication 3 and min.insync.replicas 2 ($rf)" \
  test "${rf%/*}" = "${rf#*/}" -a "${rf#*/}" -gt 20

# ---- the pipeline under load --------------------------------------------------------
export SLUICE_PRESIGN_RATE_PER_USER=0 SLUICE_PRESIGN_RATE_PER_ADDRESS=0
SLUICE_AUTH_JWT_HS256_SECRET=$(openssl rand -hex 32)
export SLUICE_AUTH_JWT_HS256_SECRET
SLUICE_API_KEY=$(jwt_hs256 "$SLUICE_AUTH_JWT_HS256_SECRET" kafka-nodes 3600)
export SLUICE_API_KEY # the load generator's bearer credential
fake_up 500 500 200   # ms: stt, grading, jitter
export SLUICE_RETRY_TIERS=1s,2s,4s
retry_topics 1s 2s 4s
# a storage event the gateway could not send (its one bootstrap address is
# node 0) is found by ingest's sweep within seconds, not the production minute
export SLUICE_INGEST_SWEEP_INTERVAL_S=5 SLUICE_INGEST_SWEEP_GRACE_S=15
"$ROOT/tools/stages" up >/dev/null || { fail "stages did not start"; finish; }

# the supervisor: a stage gone is started again (every 2 s), its exit recorded
supervise() {
  set +e +o pipefail
  local f pid
  while :; do
    sleep 2
    for f in "$STAGES_DIR"/*.pid; do
      pid=$(cat "$f" 2>/dev/null) || continue
      kill -0 "$pid" 2>/dev/null && continue
      grep -qx "$pid" "$work/exited" 2>/dev/null && continue
      echo "$pid" >>"$work/exited"
      echo "$(date +%s%3N) $(basename "$f" .pid) $pid" >>"$work/exits"
      cp "$STAGES_DIR/$(basename "$f" .pid).log" "$work/exit-$pid.log" 2>/dev/null
      "$ROOT/tools/stages" up >/dev/null 2>&1
    done
  done
}
: >"$work/exits"
supervise &
sup=$!
at_exit "kill $sup 2>/dev/null || true"

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
LOAD_S=${KAFKA_NODES_LOAD_S:-230} # the faults take 150-200 s (a restart 20-60 s on a busy machine)
"$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
  --redis "$SLUICE_REDIS_URL" --rate 2 --duration "$LOAD_S" \
  --mean-questions 3 --max-questions 6 --drain-timeout 150 --seed 42 \
  --out "$work/questions.jsonl" >"$work/summary.json" 2>"$work/loadgen.log" &
lg=$!
at_exit "kill $lg 2>/dev/null || true"
t0=$SECONDS
now_ms() { date +%s%3N; }
lg_ms=$(now_ms)
: >"$work/faults" # name start_ms end_ms broker
# restart_broker: tools/devstack up starts the node that is not running
restart_broker() { "$ROOT/tools/devstack" up >>"$work/devstack.log" 2>&1 || fail "devstack up did not restart the broker"; }
resync() { # resync WHAT: waits until every replica is in sync again
  local t=$SECONDS
  wait_for 90 all_in_sync || fail "$1: partitions not back in sync within 90 s"
  log "t=$((SECONDS - t0))s: $1: all replicas in sync after $((SECONDS - t)) s"
}

sleep 15
# 1. the busiest leader, SIGKILLed, restarted ~15 s later
b1=$(busiest_leader)
[[ $b1 =~ ^[1-3]$ ]] || { fail "no leader found in the metadata ($b1)"; finish; }
s_ms=$(now_ms)
kill -KILL "$(kpid "$b1")"
log "t=$((SECONDS - t0))s: broker $b1 (leader of the most partitions) SIGKILLed"
sleep 15
restart_broker
e_ms=$(now_ms)
echo "kill-busiest-leader $s_ms $e_ms $b1" >>"$work/faults"
log "t=$((SECONDS - t0))s: broker $b1 restarted"
resync "after the kill of broker $b1"

# 2. the active controller, SIGKILLed, restarted ~10 s later
c=$(quorum_leader)
[[ $c =~ ^[1-3]$ ]] || { fail "no active controller found ($c)"; finish; }
s_ms=$(now_ms)
kill -KILL "$(kpid "$c")"
log "t=$((SECONDS - t0))s: the active controller, node $c, SIGKILLed"
sleep 3
c2=$(quorum_leader)
check "a new active controller ($c2, was $c)" test -n "$c2" -a "$c2" != "$c"
sleep 7
restart_broker
e_ms=$(now_ms)
echo "kill-active-controller $s_ms $e_ms $c" >>"$work/faults"
log "t=$((SECONDS - t0))s: node $c restarted"
resync "after the controller failover"

# 3. another broker than the first, SIGSTOPped for 60 s
b3=$(busiest_leader "$b1")
[[ $b3 =~ ^[1-3]$ ]] || { fail "no second broker found ($b3)"; finish; }
s_ms=$(now_ms)
kill -STOP "$(kpid "$b3")"
at_exit "kill -CONT $(kpid "$b3") 2>/dev/null || true"
log "t=$((SECONDS - t0))s: broker $b3 SIGSTOPped for 60 s"
sleep 60
kill -CONT "$(kpid "$b3")"
e_ms=$(now_ms)
echo "sigstop-60s $s_ms $e_ms $b3" >>"$work/faults"
log "t=$((SECONDS - t0))s: broker $b3 continued"
resync "after the SIGSTOP of broker $b3"
((SECONDS - t0 < LOAD_S)) || fail "the faults outlasted the load ($((SECONDS - t0)) s of $LOAD_S)"

rc=0
wait "$lg" || rc=$?
kill "$sup" 2>/dev/null || true
summary=$(cat "$work/summary.json")
load_done_once "$rc" "$summary" 300
check "no upload failed" jqe '.upload_errors == 0' "$summary"
# a create whose partition's leader is gone is answered 503 with Retry-After
# once presign.kafka_timeout_ms (5 s) has passed, until Kafka moves the
# leadership (the dead broker fenced after broker.session.timeout.ms, 9 s):
# only during a fault. Presign's refusals, second by second (unix seconds)
jq -R -r 'fromjson? | select(.msg // "" | startswith("submission not accepted")) | .ts[0:19] + "Z" | fromdateiso8601' \
  "$STAGES_DIR/presign.log" >"$work/refused" 2>/dev/null || true
outside=$(awk 'NR == FNR {s[NR] = $2; e[NR] = $3 + 5000; n = NR; next}
  {t = $1 * 1000; in_w = 0; for (i = 1; i <= n; i++) if (t >= s[i] - 1000 && t <= e[i]) in_w = 1; if (!in_w) c++}
  END {print c + 0}' "$work/faults" "$work/refused")
log "creates answered 201: $(jq -r '"\(.accepted) of \(.submissions), \(.create_errors) answered 503"' <<<"$summary")"
check "presign refused creates only during a fault ($outside refused outside)" test "$outside" = 0
stats=$(curl -fsS "http://$FAKE/stats")
paid=$(jq -n --argjson s "$stats" --argjson l "$summary" '
  {stt: (([$s.by_endpoint.transcriptions // {} | .[]] | add // 0) / ([$l.done, 1] | max)),
   grade: (([$s.by_endpoint.chat // {} | .[]] | add // 0) / ([$l.done, 1] | max))}')
log "provider calls per question: $(jq -c . <<<"$paid")"
check "at most 1.02 provider calls per question (stt and grading)" jqe '.stt <= 1.02 and .grade <= 1.02' "$paid"

# presign during each fault: creates scheduled from its start to 5 s after
# its end; the longest gap between two successful creates (or the window's
# edges) in that time, on the load's wall clock
printf '%-24s %6s %8s %8s %14s %14s\n' fault broker accepted refused "accept p99 ms" "longest gap s"
while read -r name s e b; do
  jq -r --argjson s "$s" --argjson e "$((e + 5000))" -s '
    [group_by(.submission)[] | .[0] | {at: (.start_unix_ms + .sched_s * 1000), ms: .accept_ms}] as $c |
    ($c | map(select(.at >= $s and .at <= $e))) as $w |
    ($w | map(.ms) | sort) as $l |
    ([$s] + ($c | map(.at + .ms) | map(select(. >= $s and . <= $e)) | sort) + [$e]) as $t |
    [($w | length), (if ($l | length) > 0 then $l[(($l | length) * 0.99 | floor)] else 0 end),
     ([range(1; $t | length) as $i | $t[$i] - $t[$i - 1]] | max / 1000)] | @tsv' \
    "$work/questions.jsonl" | while read -r n p99 gap; do
    r=$(awk -v s="$s" -v e="$((e + 5000))" '$1 * 1000 >= s - 1000 && $1 * 1000 <= e' "$work/refused" | wc -l)
    printf '%-24s %6s %8s %8s %14.1f %14.1f\n' "$name" "$b" "$n" "$r" "$p99" "$gap"
    echo "$name $n $p99 $gap" >>"$work/presign"
  done
done <"$work/faults"
log "overall accept p50/p95/p99: $(jq -r '"\(.accept_p50_ms) / \(.accept_p95_ms) / \(.accept_p99_ms) ms"' <<<"$summary")"
check "presign accepted creates all through every fault (longest gap <= 20 s)" \
  test "$(awk '$2 > 0 && $4 <= 20' "$work/presign" | wc -l)" = 3

# no stage exits by itself: not even after a fatal producer error (it would
# stop rather than commit what it could not write, and the supervisor would
# restart it; librdkafka 2.0.2 raised "sequence desynchronization" when a
# broker came back with more than one request in flight, sl_kafka.c)
while read -r ms stage pid; do
  why=$(grep -ho "kafka producer fatal error[^\"]*" "$work/exit-$pid.log" | head -1)
  fail "stage $stage (pid $pid) exited at t=$(((ms - lg_ms) / 1000))s: ${why:-see its log}"
  [[ -n $why ]] || tail -n 20 "$work/exit-$pid.log" >&2
done <"$work/exits"
log "stage exits: $(wc -l <"$work/exits"); test took $((SECONDS - t_stack)) s"
if ((FAILURES)); then # the stack is wiped at exit: keep its logs and this test's records
  keep=${TMPDIR:-/tmp}/test_kafka_nodes-$(date -u +%Y%m%dT%H%M%S)
  mkdir -p "$keep"
  cp -r "$DEVSTACK_DIR"/*.log "$STAGES_DIR" "$work"/{faults,exits,summary.json,devstack.log,loadgen.log} \
    "$work"/exit-*.log "$keep/" 2>/dev/null || true
  log "logs kept in $keep"
fi
finish
