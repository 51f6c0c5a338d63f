#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis faults under load, with 3 replicas of every consuming stage: a
# steady load (pipeline_loadgen) over the fake provider while Redis is
#   t=8 s   emptied (FLUSHALL: what a restart without persistence leaves),
#   t=18 s  stopped for 20 s (SIGSTOP .. SIGCONT: a hung or blackholed Redis),
#   t=44 s  SIGKILLed and restarted from an RDB snapshot taken at t=3 s (an
#           older snapshot, a failover to a lagging replica: the view goes
#           back in time while its marker says it is complete).
# Asserts: every uploaded answer ends done exactly once (0 lost, 0 failed, 0
# duplicated); no unknown_submission or bad_message dead letters; the
# results API never answers 404 for a submission that exists (probes created
# before the snapshot, polled all along; one created after it may answer 404
# only until materialize notices the rollback, within a few seconds); every
# partition's lag is back to 0 within 2 minutes; and the view equals a fresh
# replay of the topics (the state of every question, before and after an
# emptied Redis is rebuilt).
#
# The load generator authenticates with an HS256 JWT: API keys live in Redis
# and would be flushed with it.
source "$(dirname "$0")/lib.sh"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ) # dead letters of earlier tests on this stack do not count
mkdir -p "$STAGES_DIR"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
redis_faults # RC, rpid, RDIR, redis_kill ...; Redis runs again whatever happens
LOADGEN=$(dirname "$(dirname "$SLUICE_BIN")")/bench/pipeline_loadgen
[[ -x $LOADGEN ]] || { fail "no $LOADGEN"; finish; }

export SLUICE_PRESIGN_RATE_PER_USER=0 SLUICE_PRESIGN_RATE_PER_ADDRESS=0
SLUICE_AUTH_JWT_HS256_SECRET=$(openssl rand -hex 32)
export SLUICE_AUTH_JWT_HS256_SECRET
SLUICE_API_KEY=$(jwt_hs256 "$SLUICE_AUTH_JWT_HS256_SECRET" redis-faults 3600)
export SLUICE_API_KEY # the load generator's bearer credential
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")

fake_up 500 500 200 # ms: stt, grading, jitter
export SLUICE_RETRY_TIERS=1s,2s,4s
retry_topics 1s 2s 4s
"$ROOT/tools/stages" up --replicas ingest=3,stt=3,grade=3,materialize=3 >/dev/null ||
  { fail "stages did not start"; finish; }

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."

# probes: submissions whose view is polled all along
probe() { # probe NAME [nowait]: a one-answer submission (graded, unless nowait); its sid and token in $work/NAME
  new_submission "$work/a.wav" && put_answer 0 "$work/a.wav" || return 1
  printf '%s %s\n' "$SID" "$TOKEN" >"$work/$1"
  [[ ${2:-} == nowait ]] && return 0
  # jqe, not jq -e: jq 1.6 passes -e on an empty body (a 404 under curl -f)
  wait_for 60 probe_complete "$SID" "$TOKEN"
}
probe_complete() { jqe '.summary.complete' "$(view_of "$1" "$2")"; }
check "a probe submission is graded before the faults" probe p1
poll() { # poll NAME: one line per request, "<unix ms> <http code>", until killed
  local sid token
  read -r sid token <"$work/$1"
  while :; do
    printf '%s %s\n' "$(date +%s%3N)" \
      "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $token" \
        "$RESULTS_URL/v1/submissions/$sid")" >>"$work/$1.codes"
    sleep 0.5
  done
}
poll p1 &
poller1=$!
at_exit "kill $poller1 2>/dev/null || true"

"$LOADGEN" --presign "$PRESIGN_URL/v1/submissions" --audio "$work/a.wav" \
  --redis "127.0.0.1:$DEVSTACK_REDIS_PORT" --rate 1 --duration 50 \
  --mean-questions 3 --max-questions 6 --drain-timeout 150 --seed 7 \
  >"$work/summary.json" 2>"$work/loadgen.log" &
lg=$!

sleep 3
redis_snapshot "$work/old.rdb"
log "t=3s: snapshot taken"
check "a probe is created after the snapshot" probe p2 nowait # lost with the rollback
poll p2 &
poller2=$!
at_exit "kill $poller2 2>/dev/null || true"
sleep 2
RC FLUSHALL >/dev/null
log "t=8s: FLUSHALL"
sleep 10
kill -STOP "$(rpid)"
log "t=18s: Redis stopped (SIGSTOP) for 20 s"
sleep 20
kill -CONT "$(rpid)"
log "t=38s: Redis continued"
sleep 6
redis_kill
redis_start_from "$work/old.rdb"
restarted_ms=$(date +%s%3N)
log "t=44s: Redis SIGKILLed and restarted from the t=3s snapshot"

rc=0
wait "$lg" || rc=$?
kill "$poller1" "$poller2" 2>/dev/null || true
summary=$(cat "$work/summary.json")
log "load: $summary"
check "the load generator finished (exit $rc)" test "$rc" = 0
check "answers were uploaded" jqe '.uploaded > 50' "$summary"
check "0 lost, 0 failed, 0 duplicated, every upload done" \
  jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded' "$summary"

for cls in unknown_submission bad_message; do
  "$SLUICECTL" dlq list --json --class "$cls" --since "$started" >"$work/dl.$cls" 2>/dev/null || true
  n=$(jq -s 'length' "$work/dl.$cls")
  check "no $cls dead letters ($n)" test "${n:-x}" = 0
  [[ ${n:-x} == 0 ]] || jq -c '{key, stage, error_message}' "$work/dl.$cls" | head -5 >&2
done
cp "$work"/p1.codes "$work"/p2.codes "$STAGES_DIR"/ 2>/dev/null || true # kept with the stage logs
echo "$restarted_ms" >"$STAGES_DIR/restarted_ms"
n404=$(awk '$2 == 404' "$work/p1.codes" | wc -l)
log "probe made before the snapshot: $(wc -l <"$work/p1.codes") polls, codes $(awk '{print $2}' "$work/p1.codes" | sort | uniq -c | tr -s ' \n' ' ')"
check "never 404 for a submission that existed all along ($n404)" test "$n404" = 0
late404=$(awk -v t=$((restarted_ms + 3000)) '$2 == 404 && $1 > t' "$work/p2.codes" | wc -l)
log "probe made after the snapshot: codes $(awk '{print $2}' "$work/p2.codes" | sort | uniq -c | tr -s ' \n' ' ')"
check "the submission the rollback lost answers 404 at most 3 s after the restart ($late404 later)" \
  test "$late404" = 0
read -r sid2 token2 <"$work/p2"
check "the submission the rollback lost is back" jqe '.summary.complete' "$(view_of "$sid2" "$token2")"

lagged() { "$SLUICECTL" status --json | jq -e '[.stages[].lag] | add == 0' >/dev/null; }
check "every partition's lag back to 0 within 2 minutes" wait_for 120 lagged

# the view against a fresh replay of the topics: every question's state,
# but for submissions an earlier test on this stack created with crypto.kek
# (a data key, or its erased sentinel, in Redis): their sealed statuses need
# a key this test's stages do not have, so the replay stops them at their
# last unsealed state (materialize dead-letters them key_unavailable)
: >"$work/sealed"
RC --scan --pattern 'sl:sub:*' | while read -r k; do
  s=${k#sl:sub:}
  if [[ $(RC EXISTS "sl:dk:$(printf %s "$s" | sha256sum | cut -c1-32)") == 1 ]]; then echo "$s"; fi
done >"$work/sealed"
log "submissions of earlier tests sealed with their key, left out: $(wc -l <"$work/sealed")"
states() { # question states of every submission, sorted: "<sid>/<no> <state>"
  RC --scan --pattern 'sl:sub:*' | grep -v -F -f "$work/sealed" | while read -r k; do
    RC HGETALL "$k" | paste - - | awk -v s="${k#sl:sub:}" -F'\t' \
      '$1 ~ /^q[0-9]+$/ {print s "/" substr($1, 2), $2}'
  done | jq -R -r 'split(" ") as $w | $w[0] + " " + ($w[1:] | join(" ") | fromjson | .state)' | sort
}
states >"$work/live"
RC FLUSHALL >/dev/null
check "an emptied view is rebuilt" wait_for 120 view_is_marked
states >"$work/replayed"
log "questions in the view: $(wc -l <"$work/live") live, $(wc -l <"$work/replayed") replayed"
check "the view equals a fresh replay of the topics" cmp -s "$work/live" "$work/replayed"
cmp -s "$work/live" "$work/replayed" || diff "$work/live" "$work/replayed" | head -20 >&2
finish
