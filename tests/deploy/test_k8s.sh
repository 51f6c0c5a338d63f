#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/deploy/test_k8s.sh - charts/sluice installed on a real Kubernetes
# cluster (tools/k8s/cluster: upstream v1.34 binaries, containerd, CNI bridge)
# with the image of deploy/Dockerfile, against the dev stack's Kafka, Redis and
# Versity Gateway listening on the cluster's own network (the node's bridge
# address), and the fake provider as the stt and grade stages' OpenAI endpoint.
# The dev stack is the production shape (K8S_STACK=nodes, the default): a
# three-node Kafka (topics with replication 3 and min.insync.replicas 2,
# the chart's topics.minInsyncReplicas) and a Redis Cluster of three
# primaries with one replica each (redis.url redis+cluster://<six seeds>,
# redis.buckets 16, the NetworkPolicy open to every seed's port);
# K8S_STACK=single runs it against one broker and one Redis instead.
# Everything goes through the cluster's Services (their ClusterIPs, routed by
# kube-proxy's iptables rules on this host).
#   1. `helm install --wait`: every Deployment becomes available; the topics
#      hook Job ran (it re-creates a topic deleted before the install) and
#      was removed on success;
#   2. one submission through the presign and results Services ends graded;
#   3. under a steady load (bench/pipeline_loadgen, open loop, 2 s provider
#      calls): `kubectl scale` of stt and grade to 3, a pod of each deleted
#      mid-work, then a `helm upgrade` that changes the image tag (every
#      Deployment rolls). Every uploaded answer ends done: 0 lost, 0 failed,
#      0 duplicated, no create refused; provider calls per question <=
#      K8S_MAX_CALLS (1.02); no container restarted, no liveness probe
#      failed, no pod lost readiness while serving (sampled every 2 s), every
#      rollout completed;
#   4. `sluicectl dlq replay` run as a Job in the cluster replays a
#      dead letter (a malformed message) and writes its audit record;
#   5. (K8S_KEDA=1, the default: KEDA built and run by tools/k8s/cluster)
#      grade on the chart's ScaledObject (lagThreshold 10, 1..3 replicas):
#      KEDA scales it down to 1 without lag, up to 3 under a burst, and back
#      to 1 after it, with every answer done once and <= K8S_MAX_CALLS calls.
#      The burst makes lag by construction: grade holds K8S_KEDA_IN_FLIGHT
#      (20) calls of 2 s, 10 answers/s a replica, and K8S_KEDA_RATE (7)
#      submissions/s bring about 21/s, so 3 replicas are wanted (printed).
#      Scale-up bound, 90 s: the backlog passes the threshold within seconds,
#      KEDA polls every 5 s (pollingInterval), the HPA syncs every 15 s and
#      may go from 1 to 3 in one step (its default scale-up policy: +4 pods
#      or +100% per 15 s, no stabilization), and a pod is ready within ~30 s.
#   6. (K8S_KEDA=1) a provider outage: grade scales on its actionable lag
#      (keda.actionableLag, asking the cluster's Prometheus: tools/k8s/
#      cluster prom_up), its provider (a fake provider of its own) is killed
#      for K8S_OUTAGE_SECONDS (60) under a load: the breaker opens and holds
#      the work, the lag in Kafka grows past what would ask for 3 replicas,
#      and KEDA keeps grade at 1 (more replicas would hold the same messages);
#      once the provider is back every answer ends done once.
#      K8S_OUTAGE_ACTIONABLE=0 runs it on the kafka triggers alone (the
#      chart's default excludePersistentLag), to see what they do;
#   7. (K8S_KEDA=1) scale to zero: stt and grade with minReplicaCount 0 go to
#      0 replicas when idle; the first answer after that wakes both (KEDA's
#      activation on lag >= 1) and ends done; its time from create to done is
#      printed beside a warm answer's (the trade-off docs/deploy.md records);
#      both go back to 0.
# The cluster, the dev stack (its own ports and folder) and the fake
# provider are started here and stopped at exit whatever happened; `tools/k8s/
# cluster down` restores the host (iptables, sysctls, mounts, links).
# Needs root, the image IMAGE (sluice:dev) saved in IMAGE_ARCHIVE
# ($SLUICE_CACHE/k8s/sluice-image.tar: `tools/image save FILE`), helm
# (tools/bootstrap) and BUILD's host tools (sluicectl, the fake provider,
# pipeline_loadgen). `make test-k8s` builds what is missing and runs this.
# Knobs: K8S_LOAD_SECONDS (150), K8S_RATE (submissions/s, 1), K8S_MAX_CALLS,
# K8S_STACK (nodes | single), K8S_OUTAGE_SECONDS (60). Each phase's time is
# printed ("phase N: ... s").
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$HERE/../.." && pwd -P)
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
BUILD=${BUILD:-$ROOT/build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
IMAGE=${IMAGE:-sluice:dev}
HELM=${HELM:-$CACHE/go/bin/helm}
[[ -x $HELM ]] || HELM=$(command -v helm || true)
SECS=${K8S_LOAD_SECONDS:-150}
RATE=${K8S_RATE:-1}
MAX_CALLS=${K8S_MAX_CALLS:-1.02}
KEDA=${K8S_KEDA:-1}
CLUSTER=$ROOT/tools/k8s/cluster
NS=sluice
REL=sluice
export DEVSTACK_DIR=$CACHE/k8s/devstack DEVSTACK_KAFKA_PORT=25092 DEVSTACK_REDIS_PORT=25379
export DEVSTACK_S3_PORT=25070 DEVSTACK_STT=pocketsphinx DEVSTACK_CORS_ORIGINS=http://127.0.0.1:25080
FAKE_PORT=25062       # the fake provider stt calls (transcriptions)
GRADE_FAKE_PORT=25063 # grade's own fake provider (chat): phase 6 stops it alone
CHAT_MS=2000          # its grading latency (the KEDA phase's numbers use it)
SLUICECTL=$BUILD/tools/sluicectl
STACK=${K8S_STACK:-nodes}
case $STACK in
# Kafka nodes on 25092/25095/25098 (controllers +1), Redis nodes 25379..25384
# (buses 25385..25390); the topics made by sluicectl with replication 3
nodes) export DEVSTACK_KAFKA_NODES=3 DEVSTACK_REDIS_CLUSTER=1 SLUICECTL ;;
single) ;;
*) echo "test_k8s: K8S_STACK is nodes or single, not $STACK" >&2; exit 2 ;;
esac
LOADGEN=$BUILD/bench/pipeline_loadgen
FAKEPROVIDER=$BUILD/tools/sluice-fakeprovider

pass=0 failures=0
log() { printf '[test_k8s] %s\n' "$*"; }
ok() { printf 'ok   %s\n' "$*"; pass=$((pass + 1)); }
bad() { printf 'FAIL %s\n' "$*"; failures=$((failures + 1)); }
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
jqe() { local doc=${*: -1}; jq -e "${@:1:$#-1}" <<<"$doc" >/dev/null 2>&1; }  # jqe [JQ-ARGS...] FILTER JSON
pn="" tp=0
phase() { # phase NAME: ends the phase under way (its time printed), starts NAME
  [[ -n $pn ]] && log "phase $pn: $((SECONDS - tp)) s"
  pn=$1 tp=$SECONDS
}

[[ $(id -u) == 0 ]] || { echo "test_k8s: needs root (a kubelet, iptables)"; exit 1; }
for t in "$SLUICECTL" "$LOADGEN" "$FAKEPROVIDER"; do
  [[ -x $t ]] || { echo "test_k8s: no $t (make build)"; exit 1; }
done
[[ -n $HELM && -x $HELM ]] || { echo "test_k8s: helm not found (tools/bootstrap)"; exit 1; }
ARCHIVE=${IMAGE_ARCHIVE:-$CACHE/k8s/sluice-image.tar}
[[ -r $ARCHIVE ]] || { echo "test_k8s: no $ARCHIVE (tools/image save $ARCHIVE)"; exit 1; }

WORK=$(mktemp -d)
fake="" gfake="" watch=""
cleanup() {
  local rc=$?
  set +e
  if ((rc != 0 || failures != 0)) && [[ -n ${KUBECONFIG:-} ]]; then
    kubectl -n "$NS" get pods -o wide >&2
    kubectl -n "$NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 30 >&2
  fi
  [[ -n $fake ]] && kill "$fake" 2>/dev/null
  [[ -n $gfake ]] && kill "$gfake" 2>/dev/null
  [[ -n $watch ]] && kill "$watch" 2>/dev/null
  "$CLUSTER" down >&2
  "$ROOT/tools/devstack" down --wipe >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- the cluster, the dev stack on its network, the image -----------------------
t0=$SECONDS
"$CLUSTER" up
eval "$("$CLUSTER" env)"
NODE_IP=$K8S_NODE_IP
export DEVSTACK_HOST=$NODE_IP
"$ROOT/tools/devstack" up >/dev/null
eval "$("$ROOT/tools/devstack" env)"
if [[ $STACK == nodes ]]; then
  # every node a seed: the chart's NetworkPolicy opens the seeds' ports, and
  # a replica that takes over serves from its own port
  seeds=()
  for i in 0 1 2 3 4 5; do seeds+=("$NODE_IP:$((DEVSTACK_REDIS_PORT + i))"); done
  SLUICE_REDIS_URL=redis+cluster://$(IFS=,; echo "${seeds[*]}")
  export SLUICE_REDIS_URL
fi
SOCK=$CACHE/k8s/cluster/containerd/containerd.sock
ctr --address "$SOCK" -n k8s.io images import "$ARCHIVE" >/dev/null
# the "new" image of the upgrade: the same bytes under another tag
ctr --address "$SOCK" -n k8s.io images tag "docker.io/library/$IMAGE" "docker.io/library/${IMAGE%%:*}:upgraded" >/dev/null
log "cluster, dev stack ($STACK: Kafka $SLUICE_KAFKA_BROKERS, Redis $SLUICE_REDIS_URL) and image ready in $((SECONDS - t0)) s"

# fake_stats: the fake providers' counters (stt's transcriptions, grade's
# chat); calls_between BEFORE AFTER ENDPOINT: the successful calls to ENDPOINT
# (transcriptions, chat) between two of them
fake_stats() {
  jq -n --argjson s "$(curl -fsS "http://$NODE_IP:$FAKE_PORT/stats")" \
    --argjson g "$(curl -fsS "http://$NODE_IP:$GRADE_FAKE_PORT/stats")" \
    '{by_endpoint: {transcriptions: $s.by_endpoint.transcriptions, chat: $g.by_endpoint.chat}}'
}
calls_between() {
  jq -n --argjson b "$1" --argjson a "$2" --arg e "$3" '($a.by_endpoint[$e]["200"] // 0) - ($b.by_endpoint[$e]["200"] // 0)'
}
# start_fake PORT: a fake provider on the node's address (2 s calls, +-200 ms)
start_fake() {
  "$FAKEPROVIDER" --set fakeprovider.listen="$NODE_IP:$1" --set admin.listen=127.0.0.1:$(($1 + 100)) \
    --set fakeprovider.stt_latency_ms=2000 --set fakeprovider.chat_latency_ms="$CHAT_MS" \
    --set fakeprovider.stt_jitter_ms=200 --set fakeprovider.chat_jitter_ms=200 \
    --set fakeprovider.failure_rate=0 >>"$WORK/fakeprovider-$1.log" 2>&1 &
  local i
  for ((i = 0; i < 40; i++)); do curl -fsS "http://$NODE_IP:$1/stats" >/dev/null 2>&1 && return 0; sleep 0.25; done
  bad "the fake provider on $1 did not start"
}
start_fake "$FAKE_PORT"
fake=$!
start_fake "$GRADE_FAKE_PORT"
gfake=$!

# A topic the hook Job must make: delete it first.
kafka_libs=$(ls -d "$CACHE"/kafka-*/libs | tail -n 1) # tools/bootstrap's Kafka jars
java -cp "$kafka_libs/*" org.apache.kafka.tools.TopicCommand \
  --bootstrap-server "$SLUICE_KAFKA_BROKERS" --delete --topic dlq.audit >/dev/null 2>&1 || true
for ((i = 0; i < 40; i++)); do
  kcat -b "$SLUICE_KAFKA_BROKERS" -L -t dlq.audit -J 2>/dev/null | jq -e '.topics[0].partitions | length == 0' >/dev/null && break
  sleep 0.5
done
check "dlq.audit deleted before the install" \
  bash -c '! kcat -b "$1" -L -t dlq.audit -J 2>/dev/null | jq -e ".topics[0].partitions | length > 0" >/dev/null' _ "$SLUICE_KAFKA_BROKERS"

# --- 1. helm install --------------------------------------------------------------
phase "1 (helm install)"
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create secret generic sluice-s3 --from-literal=access-key="$SLUICE_S3_ACCESS_KEY" \
  --from-literal=secret-key="$SLUICE_S3_SECRET_KEY" >/dev/null
small='{requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 512Mi}}'
replication=1 min_isr=1
[[ $STACK == nodes ]] && replication=3 min_isr=2
{
  cat <<EOF
image: {repository: ${IMAGE%%:*}, tag: ${IMAGE#*:}, pullPolicy: Never}
kafka: {brokers: "$SLUICE_KAFKA_BROKERS"}
redis: {url: "$SLUICE_REDIS_URL", buckets: ${SLUICE_REDIS_BUCKETS:-0}}
s3: {endpoint: "$SLUICE_S3_ENDPOINT", region: "$SLUICE_S3_REGION", bucket: "$SLUICE_S3_BUCKET", pathStyle: true}
topics: {partitions: 12, replication: $replication, minInsyncReplicas: $min_isr}
stt: {plugin: openai, openai: {base_url: "http://$NODE_IP:$FAKE_PORT", model: whisper-1}}
grade: {plugin: openai, openai: {base_url: "http://$NODE_IP:$GRADE_FAKE_PORT", model: gpt-4o-mini}}
stages:
EOF
  for s in presign ingest preflight stt grade materialize notify results erase; do
    conf='{}'
    # the load generator is one user at one address: no per-minute limit
    [[ $s == presign ]] && conf='{presign.rate_per_user: 0, presign.rate_per_address: 0}'
    printf '  %s: {replicas: 1, resources: %s, pdb: {enabled: false}, config: %s}\n' "$s" "$small" "$conf"
  done
} >"$WORK/values.yaml"
t1=$SECONDS
if "$HELM" install "$REL" "$ROOT/charts/sluice" -n "$NS" -f "$WORK/values.yaml" --wait --timeout 5m \
  >"$WORK/install.log" 2>&1; then
  ok "helm install --wait: every Deployment available ($((SECONDS - t1)) s)"
else
  bad "helm install: $(tail -n 5 "$WORK/install.log")"
  exit 1
fi
check "the topics hook Job re-created dlq.audit (12 partitions)" \
  bash -c 'kcat -b "$1" -L -t dlq.audit -J 2>/dev/null | jq -e ".topics[0].partitions | length == 12" >/dev/null' _ "$SLUICE_KAFKA_BROKERS"
if [[ $STACK == nodes ]]; then
  check "every topic has three replicas, all in sync (three brokers)" \
    bash -c 'kcat -b "$1" -m 10 -L -J 2>/dev/null | jq -e "[.topics[] | select(.topic | startswith(\"__\") | not) |
      .partitions[]] | length > 0 and all(.replicas | length == 3) and all(.isrs | length == 3)" >/dev/null' _ "$SLUICE_KAFKA_BROKERS"
fi
check "the hook Job succeeded and was deleted (hook-succeeded policy)" \
  bash -c '[[ -z $(kubectl -n "$1" get jobs -o name) ]] &&
    kubectl -n "$1" get events --field-selector involvedObject.kind=Job -o json |
    jq -e "any(.items[]; .reason == \"Completed\")" >/dev/null' _ "$NS"

svc_url() { echo "http://$(kubectl -n "$NS" get svc "$REL-$1" -o jsonpath='{.spec.clusterIP}'):$(kubectl -n "$NS" get svc "$REL-$1" -o jsonpath='{.spec.ports[0].port}')"; }
PRESIGN=$(svc_url presign)
RESULTS=$(svc_url results)
log "presign Service $PRESIGN, results Service $RESULTS"
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user test-k8s --label "make test-k8s")
export SLUICE_API_KEY

# --- 2. one submission through the Services ------------------------------------------
phase "2 (one submission)"
# one_answer TIMEOUT: a one-question submission created through the presign
# Service, uploaded, and polled every 0.25 s through the results Service until
# it ends or TIMEOUT s pass; sets sid, view (the last answer) and answer_ms
# (create to done as this script saw it)
one_answer() {
  local reply token i t
  t=$(date +%s%3N)
  reply=$(curl -fsS -X POST "$PRESIGN/v1/submissions" -H "Authorization: Bearer $SLUICE_API_KEY" \
    -H 'Content-Type: application/json' \
    -d "{\"questions\":[{\"content_type\":\"audio/wav\",\"size\":$size,\"prompt\":\"What do you do on weekends?\"}]}") || reply='{}'
  sid=$(jq -r '.submission_id // empty' <<<"$reply")
  token=$(jq -r '.results_token // empty' <<<"$reply")
  view='{}' answer_ms=-1
  [[ -n $sid ]] || return 0
  mapfile -t hdrs < <(jq -r '.questions[0].headers // {} | to_entries[] | select(.key != "Content-Length") | "-H\n\(.key): \(.value)"' <<<"$reply")
  curl -fsS -X PUT "${hdrs[@]}" --data-binary @"$WORK/a.wav" "$(jq -r '.questions[0].url' <<<"$reply")" >/dev/null ||
    bad "upload to the presigned URL"
  for ((i = 0; i < $1 * 4; i++)); do
    view=$(curl -fsS -H "Authorization: Bearer $token" "$RESULTS/v1/submissions/$sid" 2>/dev/null) || view='{}'
    jqe '.questions[0].state == "done" or .questions[0].state == "failed"' "$view" && break
    sleep 0.25
  done
  answer_ms=$(($(date +%s%3N) - t))
}
espeak-ng -s 140 -w "$WORK/a.wav" "On weekends I usually go hiking in the mountains with my friends."
size=$(stat -c %s "$WORK/a.wav")
one_answer 120
check "presign Service created a submission" test -n "$sid"
check "the results Service shows the answer graded" jqe '.questions[0].state == "done" and (.questions[0].grade != null)' "$view"

# --- 3. load: scale, delete pods, upgrade -------------------------------------------------
phase "3 (load: scale, delete, upgrade)"
before=$(fake_stats)
"$LOADGEN" --presign "$PRESIGN/v1/submissions" --audio "$WORK/a.wav" --redis "$SLUICE_REDIS_URL" \
  --rate "$RATE" --duration "$SECS" --mean-questions 3 --max-questions 6 --drain-timeout 300 --seed 7 \
  >"$WORK/summary.json" 2>"$WORK/loadgen.log" &
lg=$!
# every 2 s: each stage pod's readiness and whether it is being deleted
(while :; do
  kubectl -n "$NS" get pods -o json 2>/dev/null | jq -c '.items[] | select(.metadata.ownerReferences[0].kind == "ReplicaSet") | {pod: .metadata.name,
    ready: any(.status.conditions[]?; .type == "Ready" and .status == "True"),
    deleting: (.metadata.deletionTimestamp != null)}'
  sleep 2
done >"$WORK/readiness.jsonl") &
watch=$!
sleep 20
kubectl -n "$NS" scale deployment "$REL-stt" "$REL-grade" --replicas=3 >/dev/null
rs=0
kubectl -n "$NS" rollout status deployment "$REL-stt" --timeout=120s >/dev/null && rs=$((rs + 1))
kubectl -n "$NS" rollout status deployment "$REL-grade" --timeout=120s >/dev/null && rs=$((rs + 1))
check "kubectl scale: stt and grade run 3 ready replicas each under load" test "$rs" = 2
log "t=$((SECONDS - t1))s: stt and grade scaled to 3"
sleep 20
# in_flight POD: messages the stage process in POD holds (its admin /metrics)
in_flight() {
  kubectl -n "$NS" exec "$1" -- bash -c 'exec 3<>/dev/tcp/127.0.0.1/9180; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' 2>/dev/null |
    awk '/^sluice_in_flight[{ ]/ {s += $2} END {print s + 0}'
}
# the pod of each stage holding the most work (up to 10 looks for one holding any)
for s in stt grade; do
  best="" most=-1
  for ((try = 0; try < 10 && most <= 0; try++)); do
    for p in $(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$s" --field-selector=status.phase=Running -o name); do
      n=$(in_flight "${p#pod/}") || n=0
      ((n > most)) && { most=$n; best=${p#pod/}; }
    done
    ((most > 0)) || sleep 1
  done
  kubectl -n "$NS" delete pod "$best" --wait=false >/dev/null
  log "deleted pod $best with $most message(s) in flight"
  check "a $s pod was deleted mid-work ($most message(s) in flight)" test "$most" -gt 0
done
sleep 20
t2=$SECONDS
"$HELM" upgrade "$REL" "$ROOT/charts/sluice" -n "$NS" -f "$WORK/values.yaml" --set image.tag=upgraded \
  --set stages.stt.replicas=3 --set stages.grade.replicas=3 --wait --timeout 5m >"$WORK/upgrade.log" 2>&1 &&
  ok "helm upgrade to image tag 'upgraded' rolled every Deployment ($((SECONDS - t2)) s)" ||
  bad "helm upgrade: $(tail -n 5 "$WORK/upgrade.log")"
all_new=$(kubectl -n "$NS" get deployments -o json |
  jq '[.items[] | select(.spec.template.spec.containers[0].image | endswith(":upgraded")) |
       select(.status.updatedReplicas == .spec.replicas and .status.availableReplicas == .spec.replicas)] | length')
total=$(kubectl -n "$NS" get deployments -o name | wc -l)
check "every Deployment ($all_new of $total) runs the upgraded image, all replicas available" test "$all_new" = "$total"

rc=0
wait "$lg" || rc=$?
summary=$(cat "$WORK/summary.json" 2>/dev/null || echo '{}')
log "load: $summary"
check "the load generator finished (exit $rc)" test "$rc" = 0
check "answers were uploaded during all of it" jqe '.uploaded >= 100' "$summary"
check "every create accepted (presign rolled without refusing one)" \
  jqe '.create_errors == 0 and .accepted == .submissions' "$summary"
check "0 lost, 0 failed, 0 duplicated, every upload done" \
  jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded' "$summary"
after=$(fake_stats)
q=$(jq '.uploaded // 0' <<<"$summary")
for ep in transcriptions chat; do
  calls=$(calls_between "$before" "$after" "$ep")
  ratio=$(jq -n "if $q > 0 then $calls / $q else 99 end")
  check "$ep: $calls calls for $q questions ($ratio per question, <= $MAX_CALLS)" \
    awk -v r="$ratio" -v m="$MAX_CALLS" 'BEGIN { exit !(r <= m) }'
done
pods=$(kubectl -n "$NS" get pods -o json)
check "no container restarted" jqe '[.items[].status.containerStatuses[]?.restartCount] | add == 0' "$pods"
events=$(kubectl -n "$NS" get events -o json)
check "no liveness probe failed" \
  jqe '[.items[] | select(.reason == "Unhealthy" and (.message | test("Liveness")))] | length == 0' "$events"
kill "$watch" 2>/dev/null || true
wait "$watch" 2>/dev/null || true
# A serving pod that dropped out: seen ready, later not ready while nobody
# was stopping it. (A starting pod's probes may fail until it has joined its
# group or rebuilt the view: that is not ready yet, not a failure.)
dropped=$(jq -rs 'group_by(.pod)[] | . as $s | [range(1; length) | select($s[. - 1].ready and ($s[.].ready | not) and ($s[.].deleting | not))]
  | select(length > 0) | $s[0].pod' "$WORK/readiness.jsonl" | sort -u | tr '\n' ' ')
samples=$(wc -l <"$WORK/readiness.jsonl")
check "no pod lost readiness while serving (${dropped:-none}; $samples samples)" test -z "$dropped"
starting=$(jq '[.items[] | select(.reason == "Unhealthy" and (.message | test("Readiness")))] | length' <<<"$events")
log "readiness probe events (starting or stopping pods): $starting"

# --- 4. sluicectl dlq replay from a Job ------------------------------------------------
phase "4 (dlq replay Job)"
key="k8s-dlq-$$/1"
# dead letters of that submission (`dlq list --json`: one object per line)
dlq_count() { "$SLUICECTL" dlq list --submission "k8s-dlq-$$" --json 2>/dev/null | jq -s 'length' 2>/dev/null || echo 0; }
wait_dlq() { # wait_dlq N: up to 60 s for N dead letters; prints the count
  local n=0 i
  for ((i = 0; i < 60; i++)); do
    n=$(dlq_count)
    ((n >= $1)) && break
    sleep 1
  done
  echo "$n"
}
printf '%s\tnot a protobuf\n' "$key" | kcat -b "$SLUICE_KAFKA_BROKERS" -P -t grade.requests -K $'\t'
dl=$(wait_dlq 1)
check "a malformed grade request reached the dead-letter topic" test "$dl" -ge 1
cat >"$WORK/replay-job.yaml" <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: dlq-replay, namespace: $NS}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      enableServiceLinks: false
      securityContext: {runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001}
      containers:
        - name: replay
          image: ${IMAGE%%:*}:upgraded
          imagePullPolicy: Never
          command: [sluicectl, dlq, replay, --submission, "k8s-dlq-$$", --actor, k8s-job, --yes]
          # Redis too: a dead letter of an erased submission is refused,
          # which its data key in Redis says (redis.buckets names the key)
          env: [{name: SLUICE_KAFKA_BROKERS, value: "$SLUICE_KAFKA_BROKERS"},
                {name: SLUICE_REDIS_URL, value: "$SLUICE_REDIS_URL"},
                {name: SLUICE_REDIS_BUCKETS, value: "${SLUICE_REDIS_BUCKETS:-0}"}]
          securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
kubectl apply -f "$WORK/replay-job.yaml" >/dev/null
check "the dlq replay Job completed" kubectl -n "$NS" wait --for=condition=complete job/dlq-replay --timeout=120s
kubectl -n "$NS" logs job/dlq-replay >"$WORK/replay.log" 2>&1 || true
log "replay Job: $(tr '\n' ' ' <"$WORK/replay.log")"
audit=$("$SLUICECTL" dlq audit --json 2>/dev/null | jq -s -c . || echo '[]')
check "its audit record names the Job's actor and the dead letter" \
  jqe --arg k "$key" 'any(.[]; .actor == "k8s-job" and any(.entries[]; .key == $k))' "$audit"
dl=$(wait_dlq 2)
check "the replayed message was consumed again (still malformed: dead-lettered a second time)" test "$dl" -ge 2

# --- 5. KEDA scales grade on its lag ---------------------------------------------------
if [[ $KEDA == 1 ]]; then
  phase "5 (KEDA on lag)"
  replicas() { kubectl -n "$NS" get deployment "$REL-grade" -o jsonpath='{.status.readyReplicas}'; }
  peak=0
  wait_replicas() { # wait_replicas OP N SECONDS: until grade's ready replicas OP N
    local i r
    for ((i = 0; i < $3; i++)); do
      r=$(replicas)
      ((${r:-0} > peak)) && peak=${r:-0}
      ((${r:-0} $1 $2)) && return 0
      sleep 1
    done
    return 1
  }
  # Lag by construction (docs/deploy.md's sizing rule, replicas >= inflow x
  # provider latency / stage.max_in_flight): each grade replica holds
  # KEDA_IN_FLIGHT calls of CHAT_MS each, so it grades at most
  # KEDA_IN_FLIGHT / CHAT_MS answers a second; the burst brings KEDA_RATE
  # submissions/s of 3 questions on average, more than one replica can hold,
  # so its input backs up and KEDA must add replicas: ceil(inflow / per
  # replica), up to maxReplicaCount 3. (With the default 1,000 in flight one
  # replica held the whole burst: no lag, nothing to scale on; issue 47.)
  KEDA_IN_FLIGHT=${K8S_KEDA_IN_FLIGHT:-20} KEDA_RATE=${K8S_KEDA_RATE:-7}
  per_replica=$(awk -v m="$KEDA_IN_FLIGHT" -v l="$CHAT_MS" 'BEGIN { printf "%.1f", m / (l / 1000) }')
  inflow=$((KEDA_RATE * 3))
  want=$(awk -v i="$inflow" -v p="$per_replica" 'BEGIN { n = int(i / p); if (n < i / p) n++; print (n > 3 ? 3 : n) }')
  log "KEDA phase: grade holds $KEDA_IN_FLIGHT calls of $CHAT_MS ms: $per_replica answers/s a replica; the burst brings about $inflow/s: $want replicas wanted"
  ((want >= 3)) || bad "the KEDA phase's numbers ask for $want replicas, not 3 (K8S_KEDA_IN_FLIGHT, K8S_KEDA_RATE)"
  # KEDA's settings for a stage: 1..3 replicas, polls every 5 s, the HPA
  # scales down after 20 s (phases 5-7)
  keda_sets() { # keda_sets STAGE MIN
    printf -- '--set\nstages.%s.keda.%s\n' "$1" enabled=true "$1" "minReplicaCount=$2" "$1" maxReplicaCount=3 \
      "$1" pollingInterval=5 "$1" cooldownPeriod=30 "$1" scaleDownStabilizationSeconds=20
  }
  mapfile -t grade_keda < <(keda_sets grade 1)
  "$HELM" upgrade "$REL" "$ROOT/charts/sluice" -n "$NS" -f "$WORK/values.yaml" --set image.tag=upgraded \
    --set "stages.grade.config.stage\.max_in_flight=$KEDA_IN_FLIGHT" "${grade_keda[@]}" \
    --set stages.grade.keda.lagThreshold=10 --wait --timeout 5m >"$WORK/keda.log" 2>&1 ||
    bad "helm upgrade with grade on KEDA: $(tail -n 5 "$WORK/keda.log")"
  check "the chart's ScaledObject for grade is Ready (KEDA made its HPA)" \
    kubectl -n "$NS" wait --for=condition=Ready "scaledobject/$REL-grade" --timeout=90s
  check "KEDA scaled grade down to minReplicaCount 1 with no lag (from 3)" wait_replicas '==' 1 150
  peak=0
  before=$(fake_stats)
  t3=$SECONDS
  "$LOADGEN" --presign "$PRESIGN/v1/submissions" --audio "$WORK/a.wav" --redis "$SLUICE_REDIS_URL" \
    --rate "$KEDA_RATE" --duration 60 --mean-questions 3 --max-questions 6 --drain-timeout 300 --seed 8 \
    >"$WORK/keda-summary.json" 2>"$WORK/keda-loadgen.log" &
  lg=$!
  check "KEDA scaled grade up on its lag (3 replicas within 90 s of the load)" wait_replicas '>=' 3 90
  log "grade at $(replicas) replicas $((SECONDS - t3)) s into the load; the HPA saw $(kubectl -n "$NS" get hpa \
    "keda-hpa-$REL-grade" -o jsonpath='{.status.currentMetrics[0].external.current.averageValue}') lag per replica"
  rc=0
  wait "$lg" || rc=$?
  summary=$(cat "$WORK/keda-summary.json" 2>/dev/null || echo '{}')
  log "load under KEDA: $summary"
  check "under KEDA: every answer done once (0 lost, 0 failed, 0 duplicated, exit $rc)" \
    jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded and .uploaded > 300 and .create_errors == 0' "$summary"
  after=$(fake_stats)
  calls=$(calls_between "$before" "$after" chat)
  q=$(jq '.uploaded // 0' <<<"$summary")
  check "under KEDA: $calls grading calls for $q questions (<= $MAX_CALLS per question)" \
    awk -v c="$calls" -v q="$q" -v m="$MAX_CALLS" 'BEGIN { exit !(q > 0 && c / q <= m) }'
  t4=$SECONDS
  scaled_back() { ((peak >= 3)) && wait_replicas '==' 1 180; } # only meaningful after a scale-up
  check "KEDA scaled grade back down to 1 once the lag was gone (peak $peak replicas)" scaled_back
  log "grade back at 1 replica $((SECONDS - t4)) s after the load drained"
  kubectl -n "$NS" get events --field-selector involvedObject.kind=HorizontalPodAutoscaler \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | sed 's/^/[test_k8s] HPA: /'

  # --- 6. a provider outage: KEDA must not chase the lag it makes -------------------------
  # grade on its actionable lag (sluice_consumer_lag_actionable_messages
  # through the cluster's Prometheus; lagThreshold: actionable messages per
  # replica, its stage.max_in_flight): 0 while the breaker is not closed.
  # Its provider is killed (connections refused) for OUTAGE seconds while a
  # load arrives: the breaker opens and holds the work, Kafka's lag grows,
  # and more replicas would hold the same messages. Sampled every 2 s: the
  # replicas the HPA asked for, grade's lag and actionable lag, its breaker.
  phase "6 (provider outage)"
  PROM=${K8S_PROMETHEUS:?tools/k8s/cluster env names the cluster Prometheus}
  OUTAGE=${K8S_OUTAGE_SECONDS:-60}
  prom() { # prom QUERY: the first value of an instant query, 0 when none
    curl -fsS --data-urlencode "query=$1" "$PROM/api/v1/query" 2>/dev/null | jq -r '.data.result[0].value[1] // "0"' 2>/dev/null || echo 0
  }
  sel="namespace=\"$NS\",stage=\"grade\""
  asked() { kubectl -n "$NS" get deployment "$REL-grade" -o jsonpath='{.spec.replicas}'; }
  actionable=(--set stages.grade.keda.actionableLag=true --set "keda.prometheus.serverAddress=$PROM"
    --set "stages.grade.keda.lagThreshold=$KEDA_IN_FLIGHT")
  outage_sets=("${actionable[@]}")
  [[ ${K8S_OUTAGE_ACTIONABLE:-1} == 1 ]] || outage_sets=(--set "stages.grade.keda.lagThreshold=$KEDA_IN_FLIGHT")
  "$HELM" upgrade "$REL" "$ROOT/charts/sluice" -n "$NS" -f "$WORK/values.yaml" --set image.tag=upgraded \
    --set "stages.grade.config.stage\.max_in_flight=$KEDA_IN_FLIGHT" "${grade_keda[@]}" "${outage_sets[@]}" \
    --wait --timeout 5m >"$WORK/outage.log" 2>&1 || bad "helm upgrade with grade on actionable lag: $(tail -n 5 "$WORK/outage.log")"
  on="asking Prometheus for its actionable lag"
  [[ ${K8S_OUTAGE_ACTIONABLE:-1} == 1 ]] || on="on its kafka triggers alone (K8S_OUTAGE_ACTIONABLE=0)"
  check "grade's ScaledObject is Ready, $on" \
    bash -c 'kubectl -n "$1" wait --for=condition=Ready "scaledobject/$2-grade" --timeout=90s >/dev/null &&
      kubectl -n "$1" get scaledobject "$2-grade" -o json |
      jq -e --argjson p "$3" "any(.spec.triggers[]; .type == \"prometheus\") == (\$p == 1)" >/dev/null' _ "$NS" "$REL" "${K8S_OUTAGE_ACTIONABLE:-1}"
  wait_replicas '==' 1 120 || true
  for ((i = 0; i < 30; i++)); do [[ $(prom "count(sluice_breaker_state{$sel})") != 0 ]] && break; sleep 1; done
  check "Prometheus scrapes grade (its breaker closed before the outage)" \
    test "$(prom "count(sluice_breaker_state{$sel} == 0)")" -ge 1
  kill "$gfake" 2>/dev/null
  wait "$gfake" 2>/dev/null || true
  gfake=""
  t5=$SECONDS
  log "grade's provider stopped for $OUTAGE s; load: 3 submissions/s for $((OUTAGE / 2)) s"
  "$LOADGEN" --presign "$PRESIGN/v1/submissions" --audio "$WORK/a.wav" --redis "$SLUICE_REDIS_URL" \
    --rate 3 --duration $((OUTAGE / 2)) --mean-questions 3 --max-questions 6 --drain-timeout 400 --seed 9 \
    >"$WORK/outage-summary.json" 2>"$WORK/outage-loadgen.log" &
  lg=$!
  most=0 lag_max=0 act_max=0 open=0 samples=0
  while ((SECONDS - t5 < OUTAGE)); do
    r=$(asked)
    ((${r:-0} > most)) && most=${r:-0}
    l=$(prom "sum(sluice_consumer_lag_messages{$sel})")
    a=$(prom "sum(sluice_consumer_lag_actionable_messages{$sel})")
    b=$(prom "max(sluice_breaker_state{$sel})")
    ((${l%.*} > lag_max)) && lag_max=${l%.*}
    ((${a%.*} > act_max)) && act_max=${a%.*}
    ((${b%.*} > 0)) && open=$((open + 1))
    samples=$((samples + 1))
    sleep 2
  done
  start_fake "$GRADE_FAKE_PORT"
  gfake=$!
  t6=$SECONDS
  log "outage over: grade lag up to $lag_max (raw lag asks for $(((lag_max + KEDA_IN_FLIGHT - 1) / KEDA_IN_FLIGHT)) replicas), actionable up to $act_max, breaker not closed in $open of $samples samples"
  check "the outage opened grade's breaker, which held the work ($open of $samples samples not closed)" \
    test "$open" -ge $((samples / 2))
  check "the outage made lag that raw lag would scale on ($lag_max messages >= 3 x $KEDA_IN_FLIGHT)" \
    test "$lag_max" -ge $((3 * KEDA_IN_FLIGHT))
  check "no scale-out while the breaker held the work (grade asked for at most $most replica(s) in $OUTAGE s)" \
    test "$most" -le 1
  rc=0
  wait "$lg" || rc=$?
  summary=$(cat "$WORK/outage-summary.json" 2>/dev/null || echo '{}')
  log "load through the outage: $summary"
  log "after the provider came back: the last answer done $((SECONDS - t6)) s later, grade at $(asked) replica(s)"
  check "after the outage: every answer done once (0 lost, 0 failed, 0 duplicated, exit $rc)" \
    jqe '.lost == 0 and .failed == 0 and .duplicated == 0 and .done == .uploaded and .uploaded > 100 and .create_errors == 0' "$summary"
  calls=$(calls_between '{}' "$(fake_stats)" chat)
  q=$(jq '.uploaded // 0' <<<"$summary")
  check "after the outage: $calls grading calls for $q questions (<= $MAX_CALLS per question)" \
    awk -v c="$calls" -v q="$q" -v m="$MAX_CALLS" 'BEGIN { exit !(q > 0 && c / q <= m) }'

  # --- 7. scale to zero -------------------------------------------------------------------
  # stt and grade with minReplicaCount 0: KEDA takes them to 0 once no
  # trigger was active for cooldownPeriod (30 s), and back to 1 when a
  # kafka trigger sees lag >= 1 (activationLagThreshold 0) at its next poll.
  phase "7 (scale to zero)"
  mapfile -t zero < <(keda_sets stt 0; keda_sets grade 0)
  "$HELM" upgrade "$REL" "$ROOT/charts/sluice" -n "$NS" -f "$WORK/values.yaml" --set image.tag=upgraded \
    --set "stages.grade.config.stage\.max_in_flight=$KEDA_IN_FLIGHT" "${zero[@]}" "${actionable[@]}" \
    --set stages.stt.keda.actionableLag=true --wait --timeout 5m >"$WORK/zero.log" 2>&1 ||
    bad "helm upgrade with stt and grade scaling to zero: $(tail -n 5 "$WORK/zero.log")"
  # at_zero SECONDS: until stt and grade ask for 0 replicas and no pod of theirs is left
  at_zero() {
    local i
    for ((i = 0; i < $1; i++)); do
      [[ $(kubectl -n "$NS" get deployment "$REL-stt" "$REL-grade" -o jsonpath='{.items[*].spec.replicas}') == "0 0" &&
        -z $(kubectl -n "$NS" get pods -l 'app.kubernetes.io/component in (stt,grade)' -o name 2>/dev/null) ]] && return 0
      sleep 1
    done
    return 1
  }
  t7=$SECONDS
  check "idle, stt and grade scaled to zero (minReplicaCount 0)" at_zero 240
  log "stt and grade at 0 replicas $((SECONDS - t7)) s after the upgrade"
  one_answer 180
  cold_ms=$answer_ms
  check "the first answer after idle woke stt and grade and was graded ($cold_ms ms create to done)" \
    jqe '.questions[0].state == "done" and (.questions[0].grade != null)' "$view"
  one_answer 60
  warm_ms=$answer_ms
  check "the next answer, warm, was graded ($warm_ms ms create to done)" \
    jqe '.questions[0].state == "done" and (.questions[0].grade != null)' "$view"
  log "scale to zero: first answer after idle $cold_ms ms, warm $warm_ms ms ($(awk -v c="$cold_ms" -v w="$warm_ms" 'BEGIN { printf "%.1f", (w > 0 ? c / w : 0) }')x)"
  t8=$SECONDS
  check "idle again, stt and grade went back to zero" at_zero 240
  log "back at 0 replicas $((SECONDS - t8)) s after the last answer"
fi
phase ""

"$HELM" uninstall "$REL" -n "$NS" --wait --timeout 2m >/dev/null && ok "helm uninstall" || bad "helm uninstall"
log "$pass passed, $failures failed (total $((SECONDS - t0)) s)"
((failures == 0))
