# SPDX-License-Identifier: Apache-2.0
# tests/integration/lib.sh - shared set-up for integration tests (sourced).
# Talks to the stack tools/test started (DEVSTACK_* ports) or starts one on
# the same test ports when a test is run on its own. Stages run from
# $SLUICE_BIN with their logs in $STAGES_DIR; every test ends with
# `finish`, which stops the stages and fails on any sanitizer report.
set -euo pipefail
ROOT=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
source "$ROOT/tests/integration/lane.sh"
source "$ROOT/tools/lib/common.sh" # wait_for SECONDS COMMAND..., b64url, jwt_hs256
export PATH=/usr/local/go/bin:$PATH
export DEVSTACK_DIR=${DEVSTACK_DIR:-$ROOT/build-san/test-stack}
export DEVSTACK_KAFKA_PORT=${DEVSTACK_KAFKA_PORT:-19092}
export DEVSTACK_REDIS_PORT=${DEVSTACK_REDIS_PORT:-16379}
export DEVSTACK_S3_PORT=${DEVSTACK_S3_PORT:-17070}
# no Whisper server unless the test asks for one (test_whisper): as tools/test
export DEVSTACK_STT=${DEVSTACK_STT:-pocketsphinx}
BASE=${SLUICE_TEST_PORT_BASE:-18080}
export DEVSTACK_CORS_ORIGINS=${DEVSTACK_CORS_ORIGINS:-http://127.0.0.1:$BASE}
export SLUICE_BIN=${SLUICE_BIN:-$ROOT/build-san/stages/sluice}
export SLUICECTL=${SLUICECTL:-$(dirname "$(dirname "$SLUICE_BIN")")/tools/sluicectl}
# the test double for paid providers (tools/fakeprovider)
export FAKEPROVIDER=${FAKEPROVIDER:-$(dirname "$(dirname "$SLUICE_BIN")")/tools/sluice-fakeprovider}
export TEST_PLUGIN_DIR=${TEST_PLUGIN_DIR:-$(dirname "$(dirname "$SLUICE_BIN")")/tests/plugins}
TEST_NAME=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
export STAGES_DIR=$DEVSTACK_DIR/stages-$TEST_NAME
export STAGES_ADMIN_PORT_BASE=$((BASE + 100))
export SLUICE_PRESIGN_LISTEN=127.0.0.1:$BASE
export SLUICE_RESULTS_LISTEN=127.0.0.1:$((BASE + 1))
export SLUICE_PRESIGN_RESULTS_BASE_URL=http://127.0.0.1:$((BASE + 1))
export PRESIGN_URL=http://127.0.0.1:$BASE
RESULTS_URL=http://127.0.0.1:$((BASE + 1))
# admin STAGE [R]: the admin URL tools/stages gives replica R of STAGE
admin() { echo "http://127.0.0.1:$("$ROOT/tools/stages" port "$@")"; }
ADMIN_INGEST=$(admin ingest)
FAILURES=0

# TEST_REDIS_CLUSTER1 (not SLUICE_*: a stage refuses a SLUICE_ variable it
# does not know) runs a test against Redis in cluster mode on one node that
# owns every slot, in one of two ways:
#  - TEST_REDIS_CLUSTER1=lane: the lane's own Redis (tools/devstack
#    DEVSTACK_REDIS_CLUSTER1), for tests that stop and restart it;
#  - TEST_REDIS_CLUSTER1=1: a node of the test's own on BASE+199 (cluster1_up
#    below), the lane's Redis left as it is.
# Such a node
# it refuses with CROSSSLOT a script or command whose keys lie in different
# slots, as a Redis Cluster does, while every client still talks to it as to
# one Redis; and the stages run with redis.buckets (SLUICE_REDIS_BUCKETS, 8
# unless set). The lane's Redis is restarted in that mode, and in its own
# again when the test ends (its data goes: the lane is this test's alone).
# redis_mode: restarts the lane's Redis when it runs in the other mode than
# DEVSTACK_REDIS_CLUSTER1 asks (tools/devstack up starts it again).
redis_mode() {
  local want=${DEVSTACK_REDIS_CLUSTER1:-0} have pid
  have=$(redis-cli -c -p "$DEVSTACK_REDIS_PORT" info cluster 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_enabled://p')
  [[ -n $have && $have != "$want" ]] || return 0
  pid=$(cat "$DEVSTACK_DIR/redis.pid")
  kill -TERM "$pid"
  wait_for 20 sh -c "! kill -0 $pid 2>/dev/null"
}
EXIT_LAST=()
if [[ ${TEST_REDIS_CLUSTER1:-} == lane ]]; then
  export DEVSTACK_REDIS_CLUSTER1=1 SLUICE_REDIS_BUCKETS=${SLUICE_REDIS_BUCKETS:-8}
  redis_mode
  EXIT_LAST+=('DEVSTACK_REDIS_CLUSTER1=0 redis_mode; DEVSTACK_REDIS_CLUSTER1=0 "$ROOT/tools/devstack" up >/dev/null 2>&1')
fi

"$ROOT/tools/devstack" up >/dev/null
eval "$("$ROOT/tools/devstack" env)"

# TEST_REDIS_CLUSTER1=1: the test's Redis is a one-node cluster on BASE+199
# (tests/integration/test_cluster1_*), SLUICE_REDIS_BUCKETS 8 unless set
cluster1_up() {
  local port=$((BASE + 199)) dir=$DEVSTACK_DIR/cluster1-$TEST_NAME
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir" && mkdir -p "$dir"
  trap 'redis-cli -p '"$port"' shutdown nosave >/dev/null 2>&1' EXIT
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$dir/nodes.conf" --save '' --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize yes >/dev/null
  wait_for 10 sh -c "redis-cli -p $port ping 2>/dev/null | grep -q PONG" ||
    { echo "cluster1: redis-server on $port did not start" >&2; exit 1; }
  redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
  wait_for 10 sh -c "redis-cli -p $port cluster info | grep -q cluster_state:ok" ||
    { echo "cluster1: no cluster_state:ok on $port" >&2; exit 1; }
  export SLUICE_REDIS_URL=redis://127.0.0.1:$port DEVSTACK_REDIS_PORT=$port
  export SLUICE_REDIS_BUCKETS=${SLUICE_REDIS_BUCKETS:-8}
  CLUSTER1_PORT=$port CLUSTER1_DIR=$dir
  trap 'redis-cli -p "$CLUSTER1_PORT" shutdown nosave >/dev/null 2>&1; rm -rf "$CLUSTER1_DIR"' EXIT
}
if [[ ${TEST_REDIS_CLUSTER1:-} == 1 ]]; then
  cluster1_up
  printf '[%s] on a one-node Redis Cluster (port %s), redis.buckets %s\n' "$TEST_NAME" \
    "$CLUSTER1_PORT" "$SLUICE_REDIS_BUCKETS"
fi
"$ROOT/tools/stages" down >/dev/null 2>&1 || true # leftovers of an interrupted run
rm -rf "$STAGES_DIR"
# what an earlier test on this stack left on the stages' inputs (a request
# queued when it stopped) is not this test's: its stages would pay for it
SKIP_BACKLOG=${SKIP_BACKLOG:-$(dirname "$(dirname "$SLUICE_BIN")")/tests/skip_backlog}
"$SKIP_BACKLOG" "$SLUICE_KAFKA_BROKERS" >&2 ||
  printf '[%s] warning: the backlog of earlier tests was not skipped\n' "$TEST_NAME" >&2

# Creating submissions needs an API key: one per test run, for user
# "$TEST_NAME". KEY_AUTH is the curl header that presents it. The per-user
# and per-address limits are raised here so that tests creating many
# submissions are not throttled; test_security checks the defaults.
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user "$TEST_NAME" --label "integration test" 2>/dev/null)
export SLUICE_API_KEY
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")
export SLUICE_PRESIGN_RATE_PER_USER=${SLUICE_PRESIGN_RATE_PER_USER:-100000}
export SLUICE_PRESIGN_RATE_PER_ADDRESS=${SLUICE_PRESIGN_RATE_PER_ADDRESS:-100000}

# Whatever happens, stop what this test started. Tests add their own
# clean-up with at_exit instead of replacing the trap.
EXIT_HOOKS=('"$ROOT/tools/stages" down >/dev/null 2>&1 || true')
[[ -n ${CLUSTER1_PORT:-} ]] &&
  EXIT_HOOKS+=('redis-cli -p "$CLUSTER1_PORT" shutdown nosave >/dev/null 2>&1; rm -rf "$CLUSTER1_DIR"')
at_exit() { EXIT_HOOKS+=("$1"); }
run_exit_hooks() { # keeps the test's exit status; hooks may fail harmlessly
  local rc=$? h
  set +e
  for h in "${EXIT_HOOKS[@]}" "${EXIT_LAST[@]}"; do eval "$h"; done
  exit $rc
}
trap run_exit_hooks EXIT

log() { printf '[%s] %s\n' "$TEST_NAME" "$*"; }
# pause_key PROVIDER: the provider's pause key as the runtime names it (with
# SLUICE_REDIS_BUCKETS, the Redis Cluster form; tools/limiter-probe asks
# sl_limiter_keys)
LIMITER_PROBE=${LIMITER_PROBE:-$(dirname "$(dirname "$SLUICE_BIN")")/tools/limiter_probe}
pause_key() { "$LIMITER_PROBE" --provider "$1" --print-keys | sed -n 2p; }
# the API-key store's names (stages/lib/auth.h: the tag {ak} with
# SLUICE_REDIS_BUCKETS): apikey_record DIGEST, APIKEY_MARKER
APIKEY_TAG=$([[ ${SLUICE_REDIS_BUCKETS:-0} -gt 0 ]] && echo '{ak}' || true)
APIKEY_MARKER=sl:apikeys:${APIKEY_TAG}epoch
apikey_record() { printf 'sl:apikey:%s%s' "$APIKEY_TAG" "$1"; }
# RC ARGS... : redis-cli on the stack's Redis
# (on a Redis Cluster, redis+cluster://host:port,...: -c on the first seed,
# following the redirects)
RC() {
  if [[ $SLUICE_REDIS_URL == redis+cluster://* ]]; then
    local seed=${SLUICE_REDIS_URL#redis+cluster://}
    seed=${seed%%,*}
    redis-cli -c -h "${seed%:*}" -p "${seed##*:}" "$@"
  else
    redis-cli -u "$SLUICE_REDIS_URL" "$@"
  fi
}
fail() { printf '[%s] FAIL: %s\n' "$TEST_NAME" "$*" >&2; FAILURES=$((FAILURES + 1)); }
check() { # check DESCRIPTION COMMAND... : records a failure instead of exiting
  local what=$1; shift
  if "$@"; then log "ok: $what"; else fail "$what"; fi
}

# metric NAME LABELS ADMIN_URL -> value (0 when absent); LABELS '' for a
# metric without labels
metric() {
  local n=$1
  [[ -n $2 ]] && n="$1{$2}"
  curl -fsS "$3/metrics" | awk -v n="$n" '$1 == n {print $2; f=1} END {if (!f) print 0}'
}

# admin_ready PORT: the admin server on 127.0.0.1:PORT answers /readyz "ready ..."
admin_ready() { [[ $(curl -fsS "http://127.0.0.1:$1/readyz" 2>/dev/null) == ready* ]]; }


# at_least N COMMAND... : COMMAND prints a number >= N. For wait_for, which
# runs its command again each time: `wait_for 9 test "$(f)" -ge 1` would
# test the one number $(f) printed before the wait began
at_least() {
  local n=$1 v; shift
  v=$("$@") && [[ $v =~ ^[0-9]+$ ]] && ((v >= n))
}
# wait_count SECONDS N COMMAND... : waits until COMMAND prints a number >= N,
# then SETTLE_S (2) seconds more, so that an extra one (a duplicate output, a
# repeated call) arriving late is there when the test counts exactly
wait_count() {
  local t=$1 n=$2; shift 2
  wait_for "$t" at_least "$n" "$@" || return 1
  sleep "${SETTLE_S:-2}"
}

stages_up() { "$ROOT/tools/stages" up >/dev/null; }

# fake_up STT_MS CHAT_MS JITTER_MS : the fake provider (no failures) on
# BASE+62 (admin +162) as the stt and grade stages' OpenAI endpoint, before
# the stages start; FAKE is its address, fake its pid (stopped at exit)
fake_up() {
  FAKE=127.0.0.1:$((BASE + 62))
  mkdir -p "$STAGES_DIR"
  "$FAKEPROVIDER" --set fakeprovider.listen="$FAKE" \
    --set admin.listen=127.0.0.1:$((BASE + 162)) \
    --set fakeprovider.stt_latency_ms="$1" --set fakeprovider.stt_jitter_ms="$3" \
    --set fakeprovider.chat_latency_ms="$2" --set fakeprovider.chat_jitter_ms="$3" \
    --set fakeprovider.failure_rate=0 >"$STAGES_DIR/fakeprovider.log" 2>&1 &
  fake=$!
  at_exit "kill $fake 2>/dev/null || true"
  wait_for 20 curl -fs -o /dev/null "http://$FAKE/stats" || fail "fake provider did not start"
  export SLUICE_STT_PLUGIN=openai SLUICE_GRADE_PLUGIN=openai
  export SLUICE_STT_OPENAI_BASE_URL=http://$FAKE SLUICE_GRADE_OPENAI_BASE_URL=http://$FAKE
}

# load_done_once RC SUMMARY MIN: the checks of a load test's end: the load
# generator (pipeline_loadgen) exited RC, uploaded more than MIN answers,
# and every one ended done exactly once (its SUMMARY JSON)
load_done_once() {
  log "load: $2"
  check "the load generator finished (exit $1)" test "$1" = 0
  check "answers were uploaded (more than $3)" jqe ".uploaded > $3" "$2"
  check "0 lost, 0 failed, 0 duplicated, every upload done" \
    jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded' "$2"
}
# provider_calls BEFORE AFTER ENDPOINT: the fake provider's answered calls
# (200) on ENDPOINT (transcriptions: stt; chat: grade) between two of its
# /stats answers
provider_calls() {
  jq -n --argjson b "$1" --argjson a "$2" --arg e "$3" \
    '($a.by_endpoint[$e]["200"] // 0) - ($b.by_endpoint[$e]["200"] // 0)'
}

# new_submission FILE... : creates a submission of one audio/wav answer per
# file (prompt "Question <n>?"); sets SUB_REPLY (presign's answer), SID and TOKEN
new_submission() {
  local f qs=() n=0
  for f in "$@"; do
    n=$((n + 1))
    qs+=("{\"content_type\":\"audio/wav\",\"size\":$(stat -c %s "$f"),\"prompt\":\"Question $n?\"}")
  done
  SUB_REPLY=$(IFS=,; curl "${KEY_AUTH[@]}" -fsS -X POST "$PRESIGN_URL/v1/submissions" \
    -H 'Content-Type: application/json' -d "{\"questions\":[${qs[*]}]}") || return 1
  SID=$(jq -r .submission_id <<<"$SUB_REPLY")
  TOKEN=$(jq -r .results_token <<<"$SUB_REPLY")
}

# put_answer INDEX FILE : uploads FILE with the presigned PUT of question
# INDEX (0-based) of $SUB_REPLY and its signed headers
put_answer() {
  local -a hdrs
  mapfile -t hdrs < <(jq -r ".questions[$1].headers | to_entries[] | select(.key != \"Content-Length\") | \"-H\\n\(.key): \(.value)\"" <<<"$SUB_REPLY")
  curl -fsS -X PUT "${hdrs[@]}" --data-binary @"$2" "$(jq -r ".questions[$1].url" <<<"$SUB_REPLY")" >/dev/null
}

# stt_inputs DIR : the STT conformance inputs (test_plugins, test_whisper):
# espeak-ng speech as speech.wav, .flac, .ogg and 48 kHz stereo speech48k.wav,
# noise.wav (random bytes behind no audio header), empty.wav, and
# truncated.wav (the speech's first 2000 bytes: a WAV header and 45 ms)
stt_inputs() {
  espeak-ng -w "$1/speech.wav" "On weekends I usually go hiking with my friends in the mountains" 2>/dev/null
  sox "$1/speech.wav" "$1/speech.flac"
  sox "$1/speech.wav" "$1/speech.ogg"
  sox "$1/speech.wav" -r 48000 -c 2 "$1/speech48k.wav"
  { printf 'noise:'; head -c 4000 /dev/urandom; } >"$1/noise.wav"
  : >"$1/empty.wav"
  head -c 2000 "$1/speech.wav" >"$1/truncated.wav"
}

# view_of SID TOKEN : the results view of a submission
view_of() { curl -sS -H "Authorization: Bearer $2" "$RESULTS_URL/v1/submissions/$1"; }
# head_of BUCKET KEY : the HTTP status of a storage HEAD of an object
head_of() {
  curl -sS -o /dev/null -w '%{http_code}' -I --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$SLUICE_S3_ACCESS_KEY:$SLUICE_S3_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$SLUICE_S3_ENDPOINT/$1/$2"
}

# redis_wait_key KEY [SECONDS]: returns as soon as KEY exists in the stack's
# Redis (one redis-cli asks every millisecond: a fault can land within a few
# ms of a step of the stages), or fails after SECONDS (60)
redis_wait_key() {
  timeout "${2:-60}" redis-cli -c -p "$DEVSTACK_REDIS_PORT" -r 100000000 -i 0.001 EXISTS "$1" | grep -m1 -qx 1
  return "${PIPESTATUS[1]}"
}

# The view's Redis keys under the stages' settings (SLUICE_REDIS_BUCKETS),
# from `sluicectl keys`: sub_key SID, the hash of submission SID;
# view_keys NAME, every bucket's key NAME (seq, applied, marker, changes,
# pending), one a line.
sub_key() { "$SLUICECTL" keys "$1" | awk '$1 == "submission" {print $2}'; }
view_keys() { "$SLUICECTL" keys | awk -v n="$1" '$2 == n {print $3}'; }
# view_seq [PORT]: the view's write sequence, summed over the buckets (it
# grows with every apply); with PORT, over the buckets that Redis Cluster
# node holds (asked without -c: another node's bucket answers MOVED, 0)
view_seq() {
  local k v s=0 at=(-c -p "$DEVSTACK_REDIS_PORT")
  [[ -n ${1:-} ]] && at=(-p "$1")
  for k in $(view_keys seq); do
    v=$(redis-cli "${at[@]}" GET "$k" 2>/dev/null)
    [[ $v =~ ^[0-9]+$ ]] && s=$((s + v))
  done
  echo "$s"
}
# view_is_marked: materialize's view marker is set in every bucket (the
# view is complete); view_marked (below) is the check that waits for it.
# One key a command: a cluster refuses EXISTS of keys in several slots.
view_is_marked() {
  local k
  for k in $(view_keys marker); do
    test "$(redis-cli -c -p "$DEVSTACK_REDIS_PORT" EXISTS "$k")" = 1 || return 1
  done
}

# stage_lag0 STAGE: STAGE's groups have no lag (sluicectl status)
stage_lag0() {
  "$SLUICECTL" status --json | jq -e --arg s "$1" '[.stages[] | select(.stage == $s) | .lag] | add == 0' >/dev/null
}
# stage_lagging STAGE: one line on what STAGE still lags on (group state,
# members, each partition with lag: topic[partition] committed/high), for
# the log of a test whose wait for stage_lag0 ran out
stage_lagging() {
  "$SLUICECTL" status --json 2>&1 | jq -r --arg s "$1" '.stages[] | select(.stage == $s) |
    "\(.group) \(.group_state) members=\(.members) lag=\(.lag) retry_backlog=\(.retry_backlog): " +
    ([.partitions[] | select(.lag > 0) | "\(.topic)[\(.partition)] \(.committed)/\(.high)"] | join(" "))' 2>&1 |
    tr '\n' ';'
}

# bulk_submissions N CODES: creates N one-question submissions (audio/wav,
# 1,000 bytes, never uploaded), 8 at a time, with the test's API key; one
# HTTP status per request in the file CODES; prints how many were created
bulk_submissions() {
  local body
  body=$(mktemp)
  printf '{"questions":[{"content_type":"audio/wav","size":1000,"prompt":"Question?"}]}' >"$body"
  seq 1 "$1" | xargs -P 8 -I{} curl -sS -o /dev/null -w '%{http_code}\n' --retry 5 "${KEY_AUTH[@]}" \
    -H 'Content-Type: application/json' --data-binary @"$body" "$PRESIGN_URL/v1/submissions" \
    >"$2" 2>/dev/null || true
  rm -f "$body"
  grep -c '^201$' "$2" || true
}

# redis_faults: for a test that stops, kills or restores the stack's Redis.
# Defines rpid (its pid) and RDIR (its directory, where
# a dump.rdb is loaded from at start), and makes sure that whatever happens
# Redis runs again and no stale snapshot is left for the next start of this
# stack to load.
redis_faults() {
  RDIR=$DEVSTACK_DIR/redis
  rpid() { cat "$DEVSTACK_DIR/redis.pid"; }
  at_exit 'kill -CONT "$(rpid)" 2>/dev/null; "$ROOT/tools/devstack" up >/dev/null 2>&1; rm -f "$RDIR/dump.rdb"'
}
# after redis_faults: redis_snapshot FILE saves an RDB snapshot to FILE;
# redis_kill SIGKILLs Redis and waits for it to be gone; redis_start_from
# FILE starts it again on that snapshot (and leaves none behind)
redis_snapshot() { RC SAVE >/dev/null && cp "$RDIR/dump.rdb" "$1"; }
redis_kill() {
  local pid
  pid=$(rpid)
  kill -KILL "$pid"
  wait_for 10 sh -c "! kill -0 $pid 2>/dev/null" || fail "redis did not die"
}
redis_start_from() {
  cp "$1" "$RDIR/dump.rdb"
  "$ROOT/tools/devstack" up >/dev/null
  rm -f "$RDIR/dump.rdb"
}

# retry_topics TIER...: creates <stage>.retry.<tier> for every consuming
# stage, for tests that run the stages with their own SLUICE_RETRY_TIERS (a
# stage whose retry topic is missing dead-letters what it would retry, as
# output_rejected)
retry_topics() {
  local s t names=()
  for s in $("$SLUICE_BIN" pipeline --json | jq -r '.stages[] | select(.retry) | .name'); do
    for t in "$@"; do names+=("$s.retry.$t"); done
  done
  "$SLUICECTL" topics ensure --partitions 4 "${names[@]}" >/dev/null ||
    fail "could not create the retry topics ${names[*]}"
}

# Stops every stage with SIGTERM (tools/stages down); a stage still running
# 30 s later fails the test, named, with the end of its log.
stages_down() {
  local out n
  out=$("$ROOT/tools/stages" down 2>&1) && return 0
  fail "a stage did not stop on SIGTERM within 30 s"
  for n in $(sed -nE 's/^\[stages\] ([^ ]+) did not stop.*/\1/p' <<<"$out"); do
    log "$n did not stop; the end of its log:"
    tail -n 15 "$STAGES_DIR/$n.log" >&2
  done
  return 1
}

finish() {
  stages_down || true
  for s in $("$SLUICE_BIN" pipeline --json | jq -r '.stages[].name'); do
    [[ -f $STAGES_DIR/$s.log ]] || continue # not started by this test
    grep -q '"msg":"stopped"' "$STAGES_DIR/$s.log" ||
      fail "$s did not log a clean stop"
  done
  if grep -lE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR"/*.log \
      >/dev/null 2>&1; then
    fail "sanitizer report in stage logs:"
    grep -hE -A20 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$STAGES_DIR"/*.log | head -60 >&2
  fi
  # a job moved in a way sl_jobstate forbids (the runtime logs it and goes on)
  if grep -l "defect: a job moved" "$STAGES_DIR"/*.log >/dev/null 2>&1; then
    fail "a forbidden job transition in stage logs:"
    grep -h "defect: a job moved" "$STAGES_DIR"/*.log | head -10 >&2
  fi
  if [[ -n ${TEST_REDIS_CLUSTER1:-} ]]; then # the stages fail open: Redis's own count tells
    local cross
    cross=$(redis-cli -c -p "$DEVSTACK_REDIS_PORT" INFO errorstats | tr -d '\r' | grep CROSSSLOT || true)
    [[ -z $cross ]] || fail "the cluster refused commands whose keys crossed slots: $cross"
  fi
  if ((FAILURES)); then
    log "$FAILURES check(s) failed; stage logs in $STAGES_DIR"
    exit 1
  fi
  log "all checks passed"
}

# sluice-harness (tests/runtime/harness.c): the real stage runtime around a
# scripted provider, as stage $HARNESS_STAGE (default "harness"), one process
# at a time: harness_up starts it on admin port HARNESS_PORT (default BASE +
# 190) and waits until it is ready; harness_down stops it with SIGTERM and
# checks that it exited cleanly. Its log: $STAGES_DIR/harness.log.
HARNESS=${SLUICE_HARNESS:-$(dirname "$SLUICE_BIN")/../tests/sluice-harness}
HARNESS_PORT=${HARNESS_PORT:-$((BASE + 190))}
H_ADMIN=http://127.0.0.1:$HARNESS_PORT
hpid=""
at_exit '[[ -n $hpid ]] && kill -TERM "$hpid" 2>/dev/null; true'
harness_up() {
  mkdir -p "$STAGES_DIR"
  SLUICE_ADMIN_LISTEN=127.0.0.1:$HARNESS_PORT "$HARNESS" >>"$STAGES_DIR/harness.log" 2>&1 &
  hpid=$!
  wait_for 30 sh -c "curl -fsS $H_ADMIN/readyz 2>/dev/null | grep -q 'ready pid=$hpid'" ||
    fail "harness not ready"
}
# harness_topics PARTITIONS TIER...: the harness binary must exist; creates
# $HARNESS_STAGE.in, .out and .retry.<tier> (a test's own topics)
harness_topics() {
  [[ -x $HARNESS ]] || { fail "no harness binary at $HARNESS"; finish; }
  local st=${HARNESS_STAGE:-harness} p=$1 t names=()
  shift
  names=("$st.in" "$st.out")
  for t in "$@"; do names+=("$st.retry.$t"); done
  "$SLUICECTL" topics ensure --partitions "$p" "${names[@]}" >/dev/null ||
    fail "could not create the harness topics"
}
# harness_outputs KEY: how many outputs KEY has on $HARNESS_STAGE.out;
# harness_calls KEY: how many provider calls the harness made for KEY
harness_outputs() {
  kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "${HARNESS_STAGE:-harness}.out" -o beginning -e -q \
    -f '%k\n' 2>/dev/null | grep -c "^$1\$" || true
}
harness_calls() { local c; c=$(RC GET "harness:calls:$1"); echo "${c:-0}"; }
# harness_send N PAYLOAD: N inputs keyed "<a new submission id>/<i>", each
# with PAYLOAD, on $HARNESS_STAGE.in; sets SID and KEYS (the keys, in order)
harness_send() {
  local i k
  SID=$(cat /proc/sys/kernel/random/uuid)
  KEYS=()
  for i in $(seq 1 "$1"); do KEYS+=("$SID/$i"); done
  for k in "${KEYS[@]}"; do printf '%s\t%s\n' "$k" "$2"; done |
    kcat -P -b "$SLUICE_KAFKA_BROKERS" -t "${HARNESS_STAGE:-harness}.in" -K $'\t'
}
# harness_out_keys PREFIX: the keys of the outputs on $HARNESS_STAGE.out
# that begin with PREFIX, one line per output (one read of the topic)
harness_out_keys() {
  { kcat -C -b "$SLUICE_KAFKA_BROKERS" -t "${HARNESS_STAGE:-harness}.out" -o beginning -e -q \
    -f '%k\n' 2>/dev/null || true; } | { grep -F "$1" || true; }
}
# harness_all_called N: every key of KEYS has had at least N provider calls
harness_all_called() {
  local k
  for k in "${KEYS[@]}"; do [[ $(harness_calls "$k") -ge $1 ]] || return 1; done
}
harness_down() {
  kill -TERM "$hpid" 2>/dev/null || true
  local rc=0
  wait "$hpid" || rc=$?
  hpid=""
  check "harness stopped cleanly on SIGTERM (exit $rc)" test "$rc" = 0
}

# view_marked: waits until materialize has set the view marker (on a new
# Redis it first rebuilds the empty view, and meanwhile an unknown id is 503
# view_rebuilding, not 404)
view_marked() {
  check "the view marker is set" wait_for 60 view_is_marked
}

# two_answers DIR: the stages with the fake provider (100 ms; and the
# harness topics, for late_failed), the view ready, and a new submission of
# two spoken answers, DIR/a1.wav and DIR/a2.wav, none uploaded (SID, TOKEN)
two_answers() {
  harness_topics 1
  fake_up 100 100 0
  stages_up
  view_marked
  espeak-ng -s 140 -w "$1/a1.wav" "I usually go hiking on weekends with my friends."
  espeak-ng -s 140 -w "$1/a2.wav" "My favourite food is kimchi stew."
  new_submission "$1/a1.wav" "$1/a2.wav"
}

# late_failed KEY: a FAILED status for KEY ("<sid>/<no>") reaches the view
# through sluice-harness dead-lettering an input keyed KEY (the runtime's
# own dead-letter hook; harness_topics first); returns once materialize has
# applied it (the view's write sequence moved)
late_failed() {
  local seq0
  seq0=$(view_seq)
  harness_up
  printf '%s\t%s\n' "$1" '{"permanent":true}' |
    kcat -P -b "$SLUICE_KAFKA_BROKERS" -t "${HARNESS_STAGE:-harness}.in" -K $'\t'
  applied() { test "$(view_seq)" -gt "$seq0"; }
  check "the late FAILED for $1 reached the apply" wait_for 30 applied
  harness_down
}

# jqe FILTER JSON : true when the jq filter yields true (quietly)
# (jq 1.6 exits 0 with -e when its input holds no JSON value at all, so an
# empty answer would pass any check: it is false here)
jqe() { [[ -n ${2//[[:space:]]/} ]] && jq -e "$1" <<<"$2" >/dev/null 2>&1; }

# jqany CONDITION JSON_LINES : true when the condition holds for some line
jqany() { jq -s -e "any(.[]; $1)" <<<"$2" >/dev/null 2>&1; }

# first_line STRING : the first line of its input that contains STRING (a
# fixed string). It reads its input to the end: a filter that stops at the
# match (grep -q, head -n 1, awk's exit) leaves a writer with more to say
# (kcat on a topic that earlier tests filled) to die of SIGPIPE, which
# pipefail turns into the pipeline's failure (status 141).
first_line() { awk -v s="$1" 'index($0, s) && !n++'; }
