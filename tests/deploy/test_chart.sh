#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/deploy/test_chart.sh - charts/sluice without a cluster:
#   1. helm lint --strict with the defaults and with every option (values-all.yaml);
#   2. helm template of both, validated offline against the Kubernetes 1.37
#      schemas (kubernetes-validate --strict, bundled schemas) plus
#      check_chart.py (probes, grace period vs drain, secrets, topics Job,
#      KEDA groups, ServiceMonitor, PrometheusRule = files/alerts.yaml, ...),
#      and the NetworkPolicies (on by default): one per stage and one for the
#      topics Job, ingress only to the ports a stage serves, egress beyond the
#      cluster only for notify and stt/grade with a provider plugin, the
#      metadata addresses excepted from every 0.0.0.0/0 and ::/0 block;
#   3. each stage's replicas, resources, args and config come from its own keys;
#   4. bad values are refused with a clear message (too few partitions, HPA and
#      KEDA together, inlined credentials, keys the chart owns, schema errors);
#   5. the rendered sluice.conf files and env names are accepted by the real
#      `sluice` binary (each stage starts up to consuming/listening; stages
#      whose plugin is not built here are skipped, said so);
#   6. files/alerts.yaml equals deploy/prometheus/alerts.yaml when that exists.
# Needs helm (tools/bootstrap builds it) and Python for kubernetes-validate
# (a venv in DEPLOY_VENV from tests/deploy/requirements.txt, made once).
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$HERE/../.." && pwd -P)
CHART=$ROOT/charts/sluice
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
HELM=${HELM:-$CACHE/go/bin/helm}
[[ -x $HELM ]] || HELM=$(command -v helm || true)
[[ -n $HELM && -x $HELM ]] || { echo "FAIL: helm not found (run tools/bootstrap)"; exit 1; }
KUBE=1.37.0
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf -- "$WORK"
}
trap cleanup EXIT

pass=0
fail=0
ok() { printf 'ok   %s\n' "$*"; pass=$((pass + 1)); }
bad() { printf 'FAIL %s\n' "$*"; fail=$((fail + 1)); }

# --- the Python side: kubernetes-validate and PyYAML in a venv of their own
VENV=${DEPLOY_VENV:-$ROOT/build/deploy-venv}
REQ=$HERE/requirements.txt
if [[ ! -x $VENV/bin/python ]] || ! cmp -s "$REQ" "$VENV/requirements.txt"; then
  rm -rf -- "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQ"
  cp "$REQ" "$VENV/requirements.txt"
fi
PY=$VENV/bin/python
KV=$VENV/bin/kubernetes-validate

tmpl() { "$HELM" template sluice "$CHART" --namespace speaking --kube-version "$KUBE" "$@"; }

# --- 1. lint
for vals in "" "$HERE/values-all.yaml"; do
  name=${vals:+values-all.yaml}
  if out=$("$HELM" lint --strict "$CHART" --kube-version "$KUBE" ${vals:+-f "$vals"} 2>&1); then
    ok "helm lint --strict ${name:-defaults}"
  else
    bad "helm lint ${name:-defaults}:"$'\n'"$out"
  fi
done

# --- 2. render and validate
tmpl >"$WORK/default.yaml" 2>"$WORK/err" || { bad "helm template defaults: $(<"$WORK/err")"; exit 1; }
tmpl -f "$HERE/values-all.yaml" >"$WORK/all.yaml" 2>"$WORK/err" ||
  { bad "helm template values-all.yaml: $(<"$WORK/err")"; exit 1; }
for r in default all; do
  # --strict: unknown fields are errors; CRD kinds (no schema bundled) are
  # reported as WARN and checked by check_chart.py instead
  if out=$("$KV" --strict -k "$KUBE" "$WORK/$r.yaml" 2>&1) && ! grep -q '^ERROR' <<<"$out"; then
    n=$(grep -c '^INFO' <<<"$out" || true)
    ok "kubernetes-validate --strict ($r render): $n objects valid against Kubernetes $KUBE;" \
      "$(grep -c '^WARN' <<<"$out" || true) CRD objects left to check_chart.py"
  else
    bad "kubernetes-validate ($r render):"$'\n'"$(grep -v '^INFO' <<<"$out")"
  fi
done
if out=$("$PY" "$HERE/check_chart.py" common "$WORK/default.yaml" 2>&1); then ok "$out (defaults)"; else bad "$out"; fi
if out=$("$PY" "$HERE/check_chart.py" all "$WORK/all.yaml" "$CHART/files/alerts.yaml" 2>&1); then
  ok "$out (every option)"
else
  bad "$out"
fi

# --- 2b. NetworkPolicies: on by default, per stage, the metadata addresses
# denied wherever the world is allowed; beyond the cluster only the stages
# that call out (notify's callbacks; stt and grade with a provider plugin)
netpol() { # netpol "what" EXTERNAL [legacy] -- helm-args...
  local what=$1 ext=$2 legacy=
  shift 2
  [[ $1 == legacy ]] && { legacy=legacy; shift; }
  shift # --
  if tmpl "$@" >"$WORK/np.yaml" 2>"$WORK/err" &&
    out=$("$PY" "$HERE/check_chart.py" netpol "$WORK/np.yaml" "$ext" $legacy 2>&1); then
    ok "NetworkPolicies, $what: beyond the cluster only ${ext:-none} ($out)"
  else
    bad "NetworkPolicies, $what:"$'\n'"$(cat "$WORK/err") ${out:-}"
  fi
}
netpol "defaults" notify --
netpol "stt with a provider plugin" notify,stt -- --set stt.plugin=openai
netpol "grade with a provider plugin, ingest named external" notify,grade,ingest -- \
  --set grade.plugin=openai --set 'networkPolicy.egress.external.stages={ingest}'
netpol "every option" notify,stt,grade,materialize legacy -- -f "$HERE/values-all.yaml"

# --- 2c. tracing: with tracing.endpoint every stage's settings name the
# collector and the ratio, and every stage's NetworkPolicy lets it reach
# the collector's port; without it, neither
if tmpl --set tracing.endpoint=http://collector.obs:4318 --set tracing.sampleRatio=0.05 \
  >"$WORK/tr.yaml" 2>"$WORK/err"; then
  stages=$(grep -c '^kind: Deployment' "$WORK/tr.yaml")
  confs=$(grep -c '^ *trace.endpoint = http://collector.obs:4318$' "$WORK/tr.yaml")
  ratios=$(grep -c '^ *trace.sample_ratio = 0.05$' "$WORK/tr.yaml")
  pols=$(grep -c '^ *- port: 4318$' "$WORK/tr.yaml")
  none=$(tmpl | grep -c 'trace\.\|port: 4318' || true)
  if ((confs == stages && ratios == stages && pols == stages && none == 0)); then
    ok "tracing: $stages stages' settings name the collector and their policies its port; none without"
  else
    bad "tracing: $stages Deployments, $confs trace.endpoint, $ratios trace.sample_ratio, $pols policies with port 4318, $none without tracing.endpoint"
  fi
else
  bad "helm template with tracing: $(<"$WORK/err")"
fi
netpol "a legacy rule to every address (the metadata excepted)" notify legacy -- \
  --set 'networkPolicy.egress.rules[0].ports[0].port=8443'
netpol "a legacy rule to 0.0.0.0/0 and ::/0 (the metadata excepted)" notify legacy -- \
  --set 'networkPolicy.egress.rules[0].to[0].ipBlock.cidr=0.0.0.0/0' \
  --set 'networkPolicy.egress.rules[0].to[1].ipBlock.cidr=::/0'
if ! tmpl --set networkPolicy.enabled=false >"$WORK/np-off.yaml" 2>"$WORK/err"; then
  bad "networkPolicy.enabled=false: $(<"$WORK/err")"
elif grep -q '^kind: NetworkPolicy' "$WORK/np-off.yaml"; then
  bad "networkPolicy.enabled=false still renders NetworkPolicies"
else
  ok "networkPolicy.enabled=false renders none"
fi

# --- 3. per-stage values: stage i gets replicas i+1, its own resources, args, config
mapfile -t stages < <(jq -r '.stages[].name' "$ROOT/pipeline.json")
sets=()
for i in "${!stages[@]}"; do
  s=${stages[$i]}
  n=$((i + 1))
  sets+=(--set "stages.$s.replicas=$n"
    --set "stages.$s.resources.requests.cpu=$((n * 100))m"
    --set "stages.$s.resources.requests.memory=$((n * 64))Mi"
    --set "stages.$s.resources.limits.memory=$((n * 128))Mi"
    --set "stages.$s.args={--set,stage.workers=$((i + 2))}"
    --set "stages.$s.config.stage\.max_in_flight=$((n * 10))")
done
if tmpl "${sets[@]}" >"$WORK/per-stage.yaml" 2>"$WORK/err" &&
  out=$("$PY" "$HERE/check_chart.py" per-stage "$WORK/per-stage.yaml" 2>&1); then
  ok "each stage's replicas, resources, args and config come from its own keys ($out)"
else
  bad "per-stage values: $(cat "$WORK/err") ${out:-}"
fi

# --- 4. values the chart refuses, and why
refuse() { # refuse "what" "message substring" helm-args...
  local what=$1 want=$2
  shift 2
  if out=$(tmpl "$@" 2>&1); then
    bad "$what: rendered, should have been refused"
  elif grep -qF -- "$want" <<<"$out"; then
    ok "refused: $what ($(grep -F -- "$want" <<<"$out" | sed -n 1p | sed 's/^Error: //' | cut -c1-110)...)"
  else
    bad "$what: refused without \"$want\": $out"
  fi
}
refuse "more stt replicas than partitions" "input topics have only 12 partitions" \
  --set stages.stt.replicas=13
refuse "KEDA may scale stt past the partitions" "may run 20 replicas" \
  --set stages.stt.keda.enabled=true --set stages.stt.keda.maxReplicaCount=20
refuse "materialize HPA past the results topic's partitions" "only 4 partitions" \
  --set stages.materialize.hpa.enabled=true --set stages.materialize.hpa.maxReplicas=6 \
  --set topics.overrides.results.partitions=4
refuse "min.insync.replicas above the replication" "no write with acks=all could ever succeed" \
  --set topics.minInsyncReplicas=4
refuse "a Redis Cluster URL without redis.buckets" "set redis.buckets" \
  --set 'redis.url=redis+cluster://r0:6379\,r1:6380'
refuse "redis.buckets above 1024 (schema)" "maximum" \
  --set 'redis.url=redis+cluster://r0:6379' --set redis.buckets=2000
# a Redis Cluster: the URL and the buckets reach every stage, and the
# NetworkPolicies let the stages reach every seed's port
if tmpl --set 'redis.url=redis+cluster://r0:6379\,r1:6380' --set redis.buckets=16 \
  >"$WORK/rcluster.yaml" 2>"$WORK/err" &&
  [[ $(grep -c '^ *redis.url = redis+cluster://r0:6379,r1:6380$' "$WORK/rcluster.yaml") -ge 8 &&
    $(grep -c '^ *redis.buckets = 16$' "$WORK/rcluster.yaml") -ge 8 &&
    $(grep -c 'port: 6380$' "$WORK/rcluster.yaml") -ge 8 ]]; then
  ok "a Redis Cluster URL with redis.buckets 16: every stage's config has both, and egress to both seed ports"
else
  bad "a Redis Cluster render: $(cat "$WORK/err")"
fi
refuse "HPA and KEDA on one stage" "either hpa or keda" \
  --set stages.grade.hpa.enabled=true --set stages.grade.keda.enabled=true
refuse "KEDA on actionable lag without a Prometheus to ask" "set keda.prometheus.serverAddress" \
  --set stages.grade.keda.enabled=true --set stages.grade.keda.actionableLag=true
refuse "a Prometheus address that is not a URL (schema)" "does not match pattern" \
  --set keda.prometheus.serverAddress=prometheus:9090
refuse "an API key inlined in the plugin settings" "is a credential" \
  --set stt.plugin=openai --set stt.openai.api_key=sk-inline
refuse "a secret key inlined in a stage's config" "is a credential" \
  --set-string 'stages.presign.config.s3\.secret_key=abc'
refuse "a key the chart owns set again" "is set by the chart" \
  --set 'stages.results.config.admin\.listen=0.0.0.0:1'
refuse "a secretEnv name the stages would refuse (schema)" "does not match pattern '^SLUICE_" \
  --set 'secretEnv[0].name=KAFKA_PASSWORD' --set 'secretEnv[0].secretName=s' --set 'secretEnv[0].key=k'
# (values files: --set would split the JSON at its commas; JSON is YAML)
jq -n '{pipeline: "{\"stages\": [}"}' >"$WORK/pipeline-bad.yaml"
refuse "a pipeline description that is not JSON" "pipeline: not a JSON description" \
  -f "$WORK/pipeline-bad.yaml"
jq -n --arg p "$(jq -c '.stages += [{name: "mask", kind: "filter", inputs: [], outputs: []}]' \
  "$ROOT/pipeline.json")" '{pipeline: $p}' >"$WORK/pipeline-mask.yaml"
refuse "a pipeline stage without values" 'stage "mask" has no entry under stages' \
  -f "$WORK/pipeline-mask.yaml"
refuse "an unknown per-stage key (schema)" "additional properties 'replica' not allowed" \
  --set stages.ingest.replica=3
refuse "a multi-line config value" "single lines" \
  --set-string 'stages.presign.config.presign\.cors_origins=a
b'

# --- 5. the real binary accepts what the chart renders
SLUICE=$(realpath -m -- "${SLUICE_BIN:-$ROOT/build/stages/sluice}")
if [[ ! -x $SLUICE ]]; then
  bad "no sluice binary at $SLUICE (set SLUICE_BIN)"
else
  plugdir=$(dirname "$SLUICE")/../lib/sluice/plugins
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$WORK/tls-ca.key" -out "$WORK/tls-ca.pem" \
    -days 1 -subj "/CN=chart test CA" 2>/dev/null
  for r in default all; do
    dir=$WORK/conf-$r
    mkdir -p "$dir"
    "$PY" "$HERE/check_chart.py" conf "$WORK/$r.yaml" "$dir" >/dev/null
    mapfile -t rstages < <(jq -r '.stages[].name' "$dir/pipeline.json") # the render's pipeline
    for s in "${rstages[@]}"; do
      plugin=$(sed -n "s/^$s\.plugin = //p" "$dir/$s.conf")
      if [[ -n $plugin && ! -e $plugdir/$s-$plugin.so ]]; then
        printf 'skip %s render, %s: plugin %s-%s.so is not built in this tree\n' "$r" "$s" "$s" "$plugin"
        continue
      fi
      # ports the chart binds (0.0.0.0:...) moved to ephemeral loopback ones
      args=(--set admin.listen=127.0.0.1:0 --set log.level=info) # info: the start-up lines
      [[ $s == presign || $s == results ]] && args+=(--set "$s.listen=127.0.0.1:0")
      # the CA bundles the chart mounts (/etc/sluice-tls/...) moved to a local one
      sed -i "s|/etc/sluice-tls/[a-z0-9]*/[^ ]*|$WORK/tls-ca.pem|" "$dir/$s.conf"
      # and the pipeline description next to sluice.conf
      sed -i "s|/etc/sluice/pipeline.json|$dir/pipeline.json|" "$dir/$s.conf"
      scheme=redis
      grep -q '^redis.tls_ca_file' "$dir/$s.conf" && scheme=rediss
      envs=()
      while read -r v; do
        [[ -z $v ]] && continue
        [[ $v == SLUICE_REDIS_URL ]] && envs+=("$v=$scheme://127.0.0.1:1") || envs+=("$v=dummy")
      done <"$dir/$s.env"
      case $s in
        presign | results) want="listening on" ;;
        *) want="as group sluice-$s (" ;; # "consuming ... as group sluice-<stage> (<strategy>); ..."
      esac
      (cd "$dir" && exec env -u SLUICE_KAFKA_BROKERS -u SLUICE_REDIS_URL "${envs[@]}" \
        "$SLUICE" stage "$s" --config "$dir/$s.conf" "${args[@]}") >"$dir/$s.log" 2>&1 &
      pid=$!
      PIDS+=("$pid")
      started=0
      for _ in $(seq 1 300); do # until it says it started, or exits (at most 60 s)
        if grep -qF -- "$want" "$dir/$s.log"; then
          started=1
          break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
      done
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      if [[ $started == 1 ]]; then
        ok "sluice $s starts with the $r render's sluice.conf and env ($(wc -l <"$dir/$s.env") variables): \"$(grep -oF -- "$want" "$dir/$s.log" | sed -n 1p)\""
      else
        bad "sluice $s with the $r render's config did not start:"$'\n'"$(grep -v rdkafka "$dir/$s.log" | sed -n 1,5p)"
      fi
    done
  done
fi

# --- 6. the chart's copy of the alert rules
if [[ -f $ROOT/deploy/prometheus/alerts.yaml ]]; then
  if cmp -s "$ROOT/deploy/prometheus/alerts.yaml" "$CHART/files/alerts.yaml"; then
    ok "charts/sluice/files/alerts.yaml equals deploy/prometheus/alerts.yaml"
  else
    bad "charts/sluice/files/alerts.yaml differs from deploy/prometheus/alerts.yaml: copy it over"
  fi
else
  printf 'note deploy/prometheus/alerts.yaml is not in this tree: the chart ships its own copy\n'
fi

printf '%d passed, %d failed\n' "$pass" "$fail"
[[ $fail -eq 0 ]]
