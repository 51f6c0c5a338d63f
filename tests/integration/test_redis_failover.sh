#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A Redis Cluster primary SIGKILLed under load. A stack of its own
# (tools/devstack with DEVSTACK_KAFKA_NODES=3 and DEVSTACK_REDIS_CLUSTER=1
# on ports BASE+740..+764: brokers +740/+743/+746 with their controllers
# +1, the six Redis nodes +750..+755 with their cluster bus +756..+761,
# gateways +762 and +764): three brokers (replication 3, min.insync 2) and
# three Redis primaries with a replica each (cluster-node-timeout 3 s),
# redis.buckets 16. A steady load (pipeline_loadgen, 2 submissions/s) over
# the fake provider while the primary holding the most keys is SIGKILLed;
# its replica, cut off (SIGSTOP) for at least 3 s before and until the
# victim has taken view writes it missed, takes over (asynchronous
# replication: writes Redis had acknowledged are gone), and the node is started again ~20 s later
# (it rejoins as a replica).
# Then the owner's DELETE of one graded submission: erased, no primary keeps
# a key naming it (an erasure in a cluster walks every primary).
# Asserts: every accepted question ends done exactly once (0 lost, 0
# failed, 0 duplicated); at most 1.02 provider calls per question (stt and
# grading each); a poller reading 12 submissions of its own through the
# results API all along never gets a 404 (503 while their slots have no
# primary, or while their bucket is rebuilt, is fine); the replica became
# a primary. Prints how many view buckets were found lost and how many
# question states the rebuild wrote back (sluice_view_repaired_total).
source "$(dirname "$0")/lane.sh" # this test's lane (tools/test runs two)
BASE=${SLUICE_TEST_PORT_BASE:-18080}
_dir=${DEVSTACK_DIR:-${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}/build-san/test-stack}
export DEVSTACK_DIR=$_dir-rcluster DEVSTACK_KAFKA_NODES=3 DEVSTACK_REDIS_CLUSTER=1
export DEVSTACK_PARTITIONS=4
export DEVSTACK_KAFKA_PORT=$((BASE + 740)) # nodes +740, +743, +746; controllers +1
export DEVSTACK_REDIS_PORT=$((BASE + 750)) # nodes +750..+755, cluster bus +756..+761
export DEVSTACK_S3_PORT=$((BASE + 762))    # the derived objects' gateway +764
ROOT0=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}
"$ROOT0/tools/devstack" down --wipe >/dev/null 2>&1 || true # a previous run's leftovers
t_stack=$SECONDS
source "$(dirname "$0")/lib.sh" # brings the clustered stack up
at_exit '"$ROOT/tools/devstack" down --wipe >/dev/null 2>&1 || true'
log "stack up in $((SECONDS - t_stack)) s: Kafka $SLUICE_KAFKA_BROKERS, Redis $SLUICE_REDIS_URL, redis.buckets $SLUICE_REDIS_BUCKETS"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }
[[ $SLUICE_REDIS_URL == redis+cluster://* ]] || { fail "not a cluster: $SLUICE_REDIS_URL"; finish; }
rport() { echo $((DEVSTACK_REDIS_PORT + $1)); } # node i's port
role() { redis-cli -p "$(rport "$1")" role 2>/dev/null | head -n 1; }

fake_up 500 500 200 # ms: stt, grading, jitter
export SLUICE_RETRY_TIERS=1s,2s,4s
retry_topics 1s 2s 4s
"$ROOT/tools/stages" up >/dev/null || { fail "stages did not start"; finish; }
check "the view's markers are set" wait_for 60 view_is_marked

# the poller's own submissions: 12, spread over the buckets, read by their
# results token twice a second each, every status code kept
espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
: >"$work/mine"
for i in $(seq 12); do
  new_submission "$work/a.wav" || { fail "create $i"; continue; }
  put_answer 0 "$work/a.wav" || fail "upload $i"
  echo "$SID $TOKEN" >>"$work/mine"
done
(
  while [[ ! -e $work/stop ]]; do
    while read -r sid tok; do
      curl -s -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $tok" \
        "$RESULTS_URL/v1/submissions/$sid" >>"$work/codes" || echo 000 >>"$work/codes"
    done <"$work/mine"
    sleep 0.5
  done
) &
poller=$!
at_exit 'touch "$work/stop" 2>/dev/null; wait "$poller" 2>/dev/null; true'

before=$(curl -fsS "http://$FAKE/stats")
rep0=$(metric sluice_view_repaired_total "" "$(admin materialize)" 2>/dev/null || echo 0)
"$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
  --redis "$SLUICE_REDIS_URL" --rate 2 --duration 80 \
  --mean-questions 3 --max-questions 6 --drain-timeout 150 --seed 23 \
  --out "$work/questions.jsonl" >"$work/summary.json" 2>"$work/loadgen.log" &
lg=$!
at_exit "kill $lg 2>/dev/null || true"

sleep 25
# the primary holding the most keys, and its replica
victim=-1 most=-1
for i in 0 1 2 3 4 5; do
  [[ $(role "$i") == master ]] || continue
  n=$(redis-cli -p "$(rport "$i")" dbsize)
  ((n > most)) && { most=$n victim=$i; }
done
((victim >= 0)) || { fail "no primary found"; finish; }
vid=$(redis-cli -p "$(rport "$victim")" cluster myid)
replica=-1
for i in 0 1 2 3 4 5; do
  redis-cli -p "$(rport "$i")" cluster nodes | grep -q "myself,slave $vid" && replica=$i
done
rpid=$(cat "$DEVSTACK_DIR/redis-$replica/redis.pid")
kill -STOP "$rpid"
at_exit "kill -CONT $rpid 2>/dev/null || true"
# (a stopped process's socket still takes what was sent: the link goes too)
redis-cli -p "$(rport "$victim")" client kill type replica >/dev/null
t_cut=$SECONDS
# the view's writes in the victim's own buckets
victim_seq() { view_seq "$(rport "$victim")"; }
seq_a=$(view_seq) vseq_a=$(victim_seq)
sleep 3
# the fault is a loss only if the victim took writes its replica missed:
# wait (up to 20 s more) until its own buckets have (a quiet moment of the
# load, or a slow machine, can leave them unwritten for 3 s)
cut_more() { [[ $(victim_seq) != "$vseq_a" ]]; }
wait_for 20 cut_more || fail "no view write reached primary $(rport "$victim") in 23 s after its replica was cut off"
log "SIGKILL of primary $(rport "$victim") ($most keys); its replica $(rport "$replica") cut off for the last $((SECONDS - t_cut)) s (view sequence $seq_a -> $(view_seq), in its own buckets $vseq_a -> $(victim_seq))"
kill -KILL "$(cat "$DEVSTACK_DIR/redis-$victim/redis.pid")"
kill -CONT "$rpid"
k_ms=$(date +%s%3N)
promoted() { [[ $(role "$replica") == master ]]; }
if wait_for 30 promoted; then
  log "replica $(rport "$replica") is a primary $(($(date +%s%3N) - k_ms)) ms after the kill"
else
  fail "the replica $(rport "$replica") did not take over within 30 s"
fi
sleep 20
"$ROOT/tools/devstack" up >>"$work/devstack.log" 2>&1 || fail "devstack up did not restart the node"
rejoined() { [[ $(role "$victim") == slave ]]; }
check "the killed node rejoined as a replica" wait_for 60 rejoined

rc=0
wait "$lg" || rc=$?
touch "$work/stop"
wait "$poller" 2>/dev/null || true
summary=$(cat "$work/summary.json")
load_done_once "$rc" "$summary" 100
# a question the client never saw end: what the view says of it and what
# the stages logged about it (the stack and its logs are wiped at exit;
# CI's output is all that is left of them)
jq -r 'select(.state == "lost") | "\(.submission) \(.no)"' "$work/questions.jsonl" 2>/dev/null |
  head -n 3 | while read -r sid no; do
    log "not seen ending: $sid/$no; sluicectl submission says:"
    "$SLUICECTL" submission "$sid" </dev/null 2>&1 | head -n 20 >&2 || true
    # every line naming the submission (its record has no question field;
    # ingest's lines name it in the object key)
    grep -H "$sid" "$STAGES_DIR"/*.log 2>/dev/null | sed "s|^$STAGES_DIR/||" |
      cut -c1-300 | tail -n 25 >&2 || true
  done || true
lost_n=$(jq -s 'map(select(.state == "lost")) | length' "$work/questions.jsonl" 2>/dev/null || echo 0)
if [[ $lost_n != 0 ]]; then # where the stages stood: a job held, a rebuild not done
  for s in ingest materialize; do
    curl -fsS "$(admin "$s")/metrics" 2>/dev/null |
      grep -E '^sluice_(inflight|in_flight|messages_total|reruns_total|view_rollbacks|view_rebuilds)' |
      sed "s/^/  $s: /" >&2 || true
  done
  grep -h 'Redis went back\|Redis lost writes\|lost bucket' "$STAGES_DIR"/materialize*.log 2>/dev/null |
    cut -c1-300 | tail -n 8 >&2 || true
fi

codes=$(sort "$work/codes" | uniq -c | awk '{printf "%s x %s, ", $2, $1}')
log "the poller's answers: ${codes%, }"
n404=$(grep -c '^404$' "$work/codes" || true)
check "the poller saw its submissions all along ($(wc -l <"$work/codes") reads)" \
  test "$(grep -c '^200$' "$work/codes" || true)" -gt 100
check "no 404 for an existing submission ($n404)" test "$n404" = 0

rep1=$(metric sluice_view_repaired_total "" "$(admin materialize)" 2>/dev/null || echo 0)
rb1=$(metric sluice_view_rollbacks_total "" "$(admin materialize)" 2>/dev/null || echo 0)
check "materialize noticed the view went back (sluice_view_rollbacks_total $rb1)" test "${rb1%.*}" -ge 1
check "  ... and wrote lost question states back ($rep0 -> $rep1)" test "${rep1%.*}" -gt "${rep0%.*}"
lost=$(grep -ho '[0-9]* of [0-9]* lost bucket(s)[^"]*' "$STAGES_DIR"/materialize*.log | tail -n 3 | tr '\n' ';')
log "view: $((${rep1%.*} - ${rep0%.*})) question state(s) written back by rebuilds (sluice_view_repaired_total); ${lost:-no bucket found lost}"
grep -h '"msg":"rebuild' "$STAGES_DIR"/materialize*.log | tail -n 4 | jq -c '{msg}' 2>/dev/null >&2 || true

after=$(curl -fsS "http://$FAKE/stats")
q=$(jq '.uploaded + 12' <<<"$summary")
declare -A ep_stage=([transcriptions]=stt [chat]=grade)
for ep in transcriptions chat; do
  s=${ep_stage[$ep]}
  calls=$(provider_calls "$before" "$after" "$ep")
  log "$s: $calls provider calls for about $q questions"
  check "$s: at most 1.02 calls per question ($calls for $q)" jq -n -e "$calls <= $q * 1.02" >/dev/null
done

# Erasure in a Redis Cluster (issue 46): the owner's DELETE of one of the
# poller's graded submissions; the erase stage finds its keys on whichever
# primary holds them (the sync client's SCAN walks every primary), and no
# primary keeps a key naming it.
read -r esid _ <"$work/mine"
code=$(curl -sS -o "$work/ebody" -w '%{http_code}' -X DELETE -H "Authorization: Bearer $SLUICE_API_KEY" \
  "$RESULTS_URL/v1/submissions/$esid" 2>/dev/null || true)
check "the owner's DELETE of a graded submission: 202 ($code)" test "$code" = 202
erasure_state() {
  curl -sS -H "Authorization: Bearer $SLUICE_API_KEY" "$RESULTS_URL/v1/submissions/$esid/erasure" 2>/dev/null |
    jq -r '.erasure.state // "none"' 2>/dev/null || echo none
}
erased() { [[ $(erasure_state) == erased ]]; }
wait_for 60 erased || grep -h "$esid" "$STAGES_DIR"/erase*.log 2>/dev/null | cut -c1-300 | tail -n 3 >&2 || true
check "its erasure in a cluster of 3 primaries reaches erased ($(erasure_state))" erased
left=""
for i in 0 1 2 3 4 5; do
  [[ $(role "$i") == master ]] || continue
  left+=$(redis-cli -p "$(rport "$i")" --scan --pattern "*$esid*" | head -n 3 | tr '\n' ' ')
done
check "no primary keeps a key naming it (${left:-none})" test -z "$left"
finish
