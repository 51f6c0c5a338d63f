#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Partitions that grow under load: stt's and grade's input topics (this
# run's own, 12 partitions each) are grown to 24 with `sluicectl topics
# ensure` while answers flow (pipeline_loadgen, open loop, the fake
# provider), then stt and grade are scaled from 2 to 6 replicas.
#
# Growing a topic moves keys: a question's next message may land on another
# partition, owned by another replica, than its earlier ones. Checked:
#  - every uploaded answer ends done exactly once (0 lost, 0 failed, 0
#    duplicated) and each of stt and grade pays at most GROWTH_MAX_CALLS
#    (1.02) provider calls per question (the fake provider's count);
#  - the view never goes backwards: a watcher reads every question's rank
#    (r<no>) of this run's submissions twice a second; no rank may drop;
#  - the new partitions carry traffic: how long after the growth the first
#    message lands on one (producers) and the stage's group commits on one
#    (consumers) is measured, and must be within kafka.metadata_refresh_ms
#    (SLUICE_KAFKA_METADATA_REFRESH_MS, 10 s) plus GROWTH_SLACK_S (50 s):
#    alone it takes 1-2 s, beside the other lane's test in CI 25-33 s (by
#    the messages' own timestamps); without the setting librdkafka waits
#    its default 5 minutes, five times the limit.
# The stack is its own, in production's shape (tools/devstack with
# DEVSTACK_KAFKA_NODES=3 and DEVSTACK_REDIS_CLUSTER=1 on ports
# BASE+780..+804: brokers +780/+783/+786, their controllers +1; a Redis
# Cluster of three primaries with a replica each on +790..+795, buses
# +796..+801, 16 buckets; gateways +802 and +804; topics with replication
# 3 and min.insync.replicas 2), so a grown topic's new partitions get their
# three replicas too.
# Knobs: GROWTH_SECONDS (90), GROWTH_RATE (submissions/s, 3).
source "$(dirname "$0")/lane.sh" # this test's lane (tools/test runs two)
BASE=${SLUICE_TEST_PORT_BASE:-18080}
_dir=${DEVSTACK_DIR:-${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}/build-san/test-stack}
export DEVSTACK_DIR=$_dir-growth DEVSTACK_KAFKA_NODES=3 DEVSTACK_REDIS_CLUSTER=1
export DEVSTACK_KAFKA_PORT=$((BASE + 780)) # nodes +780, +783, +786; controllers +1
export DEVSTACK_REDIS_PORT=$((BASE + 790)) # six nodes +790..+795, their buses +796..+801
export DEVSTACK_S3_PORT=$((BASE + 802))    # the derived objects' gateway +804
ROOT0=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}
"$ROOT0/tools/devstack" down --wipe >/dev/null 2>&1 || true # a previous run's leftovers
source "$(dirname "$0")/lib.sh" # brings the clustered stack up (topics with sluicectl)
at_exit '"$ROOT/tools/devstack" down --wipe >/dev/null 2>&1 || true'
mkdir -p "$STAGES_DIR"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
SECS=${GROWTH_SECONDS:-90}
RATE=${GROWTH_RATE:-3}
MAX_CALLS=${GROWTH_MAX_CALLS:-1.02}
REFRESH_MS=${SLUICE_KAFKA_METADATA_REFRESH_MS:-10000}
SLACK_S=${GROWTH_SLACK_S:-50}
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }

# this run's own input topics for stt and grade, 12 partitions each
run=$(date +%s%N | tail -c 9)
STT_IN=growth.stt.$run GRADE_IN=growth.grade.$run
jq --arg s "$STT_IN" --arg g "$GRADE_IN" '
  def rn: if . == "stt.requests" then $s elif . == "grade.requests" then $g else . end;
  .topics |= map(.name |= rn) | .stages |= map(.inputs |= map(rn) | .outputs |= map(rn))' \
  "$ROOT/pipeline.json" >"$work/pipeline.json"
export SLUICE_PIPELINE_FILE=$work/pipeline.json
"$SLUICECTL" topics ensure --partitions 12 --replication 3 --config min.insync.replicas=2 \
  "$STT_IN" "$GRADE_IN" >/dev/null ||
  { fail "could not create $STT_IN and $GRADE_IN"; finish; }

fake_up 1000 1000 200 # ms: stt, grading, jitter
export SLUICE_LOG_LEVEL=${SLUICE_LOG_LEVEL:-info}
"$ROOT/tools/stages" up --replicas stt=2,grade=2 >/dev/null || { fail "stages did not start"; finish; }

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
before=$(curl -fsS "http://$FAKE/stats")
start_ms=$(($(date +%s%N) / 1000000))

# The watcher: every question's rank in the view, for submissions accepted
# since the start, twice a second ("round key field rank" lines).
# shellcheck disable=SC2016
RANKS='local cur, out = "0", {}
repeat
  local r = redis.call("SCAN", cur, "MATCH", "sl:sub:*", "COUNT", 1000)
  cur = r[1]
  for _, k in ipairs(r[2]) do
    local acc = tonumber(redis.call("HGET", k, "accepted_at_ms") or "0") or 0
    if acc >= tonumber(ARGV[1]) then
      local h = redis.call("HGETALL", k)
      for i = 1, #h, 2 do
        if string.match(h[i], "^r%d+$") then out[#out + 1] = k .. " " .. h[i] .. " " .. h[i + 1] end
      end
    end
  end
until cur == "0"
return out'
# each primary scans its own keys (a script reads only its node's slots)
mapfile -t primaries < <(redis-cli -p "$DEVSTACK_REDIS_PORT" cluster nodes |
  awk '$3 ~ /master/ {split($2, a, "[:@]"); print a[2]}')
check "three Redis primaries to watch (${primaries[*]})" test "${#primaries[@]}" = 3
(
  round=0
  while [[ ! -e $work/stop ]]; do
    round=$((round + 1))
    for p in "${primaries[@]}"; do
      redis-cli -p "$p" EVAL "$RANKS" 0 "$start_ms" 2>/dev/null | sed "s/^/$round /" >>"$work/ranks"
    done
    sleep 0.5
  done
) &
watcher=$!
at_exit 'touch "$work/stop" 2>/dev/null; wait "$watcher" 2>/dev/null; true'

"$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
  --redis "$SLUICE_REDIS_URL" --rate "$RATE" --duration "$SECS" \
  --mean-questions 3 --max-questions 6 --drain-timeout 300 --seed 17 \
  >"$work/summary.json" 2>"$work/loadgen.log" &
lg=$!

# partitions 12..23 of topic $2 of stage $1 in a sluicectl status --json
# document (stdin): one with a commit (committed > 0)
status_json() { "$SLUICECTL" status --json 2>/dev/null; }
new_committed() { # STAGE TOPIC
  jq -e --arg s "$1" --arg t "$2" '[.stages[] | select(.stage == $s) | .partitions[]
      | select(.topic == $t and .partition >= 12) | .committed] | any(. > 0)' >/dev/null
}
# the first message on partitions 12..23 of topic $1: the earliest of
# their first messages' timestamps (ms, the producer's clock: this host's),
# or nothing while none has one
first_new_ms() {
  local p ts best=
  for p in $(seq 12 23); do
    ts=$(kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "$1" -p "$p" -o beginning -c 1 -e -q -f '%T\n' \
      2>/dev/null | head -1)
    [[ $ts =~ ^[0-9]+$ ]] && [[ -z $best || $ts -lt $best ]] && best=$ts
  done
  echo "$best"
}

sleep 25
grow_ms=$(($(date +%s%N) / 1000000))
"$SLUICECTL" topics ensure --partitions 24 "$STT_IN" "$GRADE_IN" >"$work/grow.out" 2>&1 ||
  fail "growing the topics: $(cat "$work/grow.out")"
check "both topics grew from 12 to 24 partitions ($(tr '\n' ' ' <"$work/grow.out"))" \
  test "$(grep -c '^grew .* from 12 to 24 partitions$' "$work/grow.out")" = 2
log "grew $STT_IN and $GRADE_IN to 24 partitions while answers flowed"
rf3() { kcat -b "$SLUICE_KAFKA_BROKERS" -m 10 -L -t "$1" -J 2>/dev/null |
  jq -e '.topics[0].partitions | length == 24 and all(.replicas | length == 3)' >/dev/null; }
check "every partition of both grown topics, the new ones too, has three replicas" \
  wait_for 10 bash -c "$(declare -f rf3); rf3 $STT_IN && rf3 $GRADE_IN"

# how long until the new partitions carry traffic. The producers' side from
# the messages' own timestamps (exact); the groups' side by polling
# sluicectl status, which under this load can take seconds a call (CI once
# measured 42.8 s for three probes at once, the time of one slow round): a
# commit first seen by a call happened after the previous call began, and
# that bound is what must be within the limit
limit_s=$((REFRESH_MS / 1000 + SLACK_S))
ms() { echo $(($(date +%s%N) / 1000000)); }
declare -A seen_lo=() seen_hi=()
prev=$grow_ms
while ((${#seen_hi[@]} < 2)); do
  start=$(ms)
  ((start - grow_ms > (limit_s + 30) * 1000)) && break
  js=$(status_json)
  end=$(ms)
  for s in "stt $STT_IN" "grade $GRADE_IN"; do
    [[ -n ${seen_hi[$s]:-} ]] && continue
    # shellcheck disable=SC2086
    new_committed $s <<<"$js" && seen_lo[$s]=$((prev - grow_ms)) seen_hi[$s]=$((end - grow_ms))
  done
  prev=$start
  sleep 0.5
done
sec() { echo "$(($1 / 1000)).$(($1 % 1000 / 100))"; }
for s in "stt $STT_IN" "grade $GRADE_IN"; do
  first=$(first_new_ms "${s#* }")
  if [[ -n $first ]]; then
    t=$((first > grow_ms ? first - grow_ms : 0))
    log "${s%% *}: the first message on a new partition $(sec "$t") s after the growth (its timestamp)"
    check "${s%% *}: the first message on a new partition within ${limit_s} s ($(sec "$t") s)" \
      test "$t" -le $((limit_s * 1000))
  else
    fail "${s%% *}: no message on a new partition of ${s#* }"
  fi
  if [[ -n ${seen_hi[$s]:-} ]]; then
    log "${s%% *}: the group's first commit on one between $(sec "${seen_lo[$s]}") and $(sec "${seen_hi[$s]}") s after the growth"
    check "${s%% *}: the group's first commit on one within ${limit_s} s (after $(sec "${seen_lo[$s]}") s)" \
      test "${seen_lo[$s]}" -le $((limit_s * 1000))
  else
    fail "${s%% *}: no commit on a new partition $((limit_s + 30)) s after the growth"
  fi
done

"$ROOT/tools/stages" scale stt 6 >>"$work/scale.log" 2>&1 || fail "scale stt 6"
"$ROOT/tools/stages" scale grade 6 >>"$work/scale.log" 2>&1 || fail "scale grade 6"
log "stt and grade scaled from 2 to 6 replicas"

rc=0
wait "$lg" || rc=$?
touch "$work/stop"
wait "$watcher" 2>/dev/null || true
summary=$(cat "$work/summary.json")
load_done_once "$rc" "$summary" 100

# the view never went backwards: per question, each rank read is >= the last
rounds=$(tail -n 1 "$work/ranks" 2>/dev/null | cut -d' ' -f1)
back=$(awk '{k = $2 " " $3; if ((k in last) && $4 + 0 < last[k]) { n++; if (n <= 5) print "  " k ": " last[k] " -> " $4 > "/dev/stderr" } last[k] = $4 + 0 } END { print n + 0 }' "$work/ranks")
seen=$(awk '{print $2 " " $3}' "$work/ranks" | sort -u | wc -l)
log "view watcher: ${rounds:-0} rounds, $seen questions seen, $back rank(s) went down"
check "the watcher saw the questions (${seen} >= 100, ${rounds:-0} rounds)" test "$seen" -ge 100
check "no question's state in the view ever went backwards ($back)" test "$back" = 0

after=$(curl -fsS "http://$FAKE/stats")
q=$(jq '.uploaded' <<<"$summary")
declare -A ep_stage=([transcriptions]=stt [chat]=grade)
for ep in transcriptions chat; do
  s=${ep_stage[$ep]}
  calls=$(provider_calls "$before" "$after" "$ep")
  ratio=$(jq -n "$calls / $q")
  log "$s: $calls provider calls for $q questions = $ratio per question"
  check "$s: between 1 and $MAX_CALLS calls per question ($calls for $q)" \
    jq -n -e "$calls >= $q and $calls <= $q * $MAX_CALLS" >/dev/null
done
stages_down || true
finish
