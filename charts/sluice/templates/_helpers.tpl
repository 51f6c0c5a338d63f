{{/*
_helpers.tpl - names, labels and the pieces every stage's objects share.
The stages and what the chart knows about each: sluice.stageInfo.
*/}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
{{- end -}}

{{/* Selector labels of every pod of the release. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of one stage: (dict "root" $ "stage" "stt") */}}
{{- define "sluice.stageSelectorLabels" -}}
{{ include "sluice.selectorLabels" .root }}
app.kubernetes.io/component: {{ .stage }}
{{- end -}}

{{- define "sluice.stageLabels" -}}
{{ include "sluice.labels" .root }}
app.kubernetes.io/component: {{ .stage }}
{{- end -}}

{{/* The name of a stage's objects: <fullname>-<stage> */}}
{{- define "sluice.stageName" -}}
{{- printf "%s-%s" (include "sluice.fullname" .root) .stage | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The pipeline description (docs/pipeline.md): .Values.pipeline (JSON text) or
the chart's pipeline.json, a copy of the repository's (a test keeps them
equal). Stages, topics and retry tiers all come from it.
*/}}
{{- define "sluice.pipelineJson" -}}
{{- if .Values.pipeline -}}{{ .Values.pipeline }}{{- else -}}{{ .Files.Get "pipeline.json" }}{{- end -}}
{{- end -}}

{{/* The description as an object; a clear failure when it is not JSON or lacks a part. */}}
{{- define "sluice.pipeline" -}}
{{- $p := include "sluice.pipelineJson" . | fromJson -}}
{{- if hasKey $p "Error" -}}
{{- fail (printf "pipeline: not a JSON description (%s)" $p.Error) -}}
{{- end -}}
{{- range $k := list "topics" "stages" "retry_tiers" "dead_letters" -}}
{{- if not (hasKey $p $k) -}}
{{- fail (printf "pipeline: the description has no %q (see docs/pipeline.md)" $k) -}}
{{- end -}}
{{- end -}}
{{- range $s := $p.stages -}}
{{- if not (hasKey $.Values.stages $s.name) -}}
{{- fail (printf "pipeline: stage %q has no entry under stages in the values (replicas, resources, ...)" $s.name) -}}
{{- end -}}
{{- end -}}
{{- toJson $p -}}
{{- end -}}

{{/*
The stages in pipeline order, and per stage: the HTTP API port (0: none),
whether it consumes Kafka, its kind and its input topics.
*/}}
{{- define "sluice.stageInfo" -}}
{{- $p := include "sluice.pipeline" . | fromJson -}}
{{- range $s := $p.stages }}
{{ $s.name }}: {http: {{ ternary 8080 (ternary 8081 0 (eq $s.kind "results")) (eq $s.kind "presign") }}, consumer: {{ gt (len $s.inputs) 0 }}, retry: {{ $s.retry | default false }}, kind: {{ $s.kind | quote }}, inputs: {{ $s.inputs | toJson }}}
{{- end }}
{{- end -}}

{{/* "true" when the stage (dict "root" $ "stage" NAME) touches storage, by
     its kind: presign signs URLs, ingest HEADs the upload, a plugin step
     (preflight) and stt fetch it. Those get the s3.* settings and keys. */}}
{{- define "sluice.usesStorage" -}}
{{- $info := include "sluice.stageInfo" .root | fromYaml -}}
{{- if has (index $info .stage).kind (list "presign" "ingest" "plugin" "stt" "erase") }}true{{ end -}}
{{- end -}}

{{- define "sluice.stageOrder" -}}
{{- $p := include "sluice.pipeline" . | fromJson -}}
{{- $names := list -}}
{{- range $s := $p.stages }}{{ $names = append $names $s.name }}{{ end -}}
{{- toJson $names -}}
{{- end -}}

{{/* One value as a config-file value: whole numbers without an exponent
     (Helm reads every YAML number as a float64), no line breaks. */}}
{{- define "sluice.confValue" -}}
{{- $v := . -}}
{{- if kindIs "float64" $v -}}
{{- if eq (float64 (int64 $v)) $v -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if kindIs "slice" $v -}}
{{- join "," $v -}}
{{- else -}}
{{- $s := toString $v -}}
{{- if or (contains "\n" $s) (contains "\r" $s) -}}
{{- fail (printf "configuration values are single lines; this one is not: %q" $s) -}}
{{- end -}}
{{- $s -}}
{{- end -}}
{{- end -}}

{{/* The consumer group a stage's processes join (runtime/src/sl_stage.c: "sluice-<stage>"). */}}
{{- define "sluice.consumerGroup" -}}
sluice-{{ . }}
{{- end -}}

{{/* The consumer group of a stage's retry tiers (runtime/src/sl_stage_group.c: "sluice-<stage>-retry"). */}}
{{- define "sluice.retryGroup" -}}
sluice-{{ . }}-retry
{{- end -}}

{{/* Partitions of one topic: (dict "root" $ "topic" "results") -> number */}}
{{- define "sluice.topicPartitions" -}}
{{- $t := .root.Values.topics -}}
{{- $o := index ($t.overrides | default dict) .topic | default dict -}}
{{- int64 (default $t.partitions $o.partitions) -}}
{{- end -}}

{{/* Partitions of the retry topics */}}
{{- define "sluice.retryPartitions" -}}
{{- $t := .Values.topics -}}
{{- int64 (default $t.partitions $t.retry.partitions) -}}
{{- end -}}

{{/* A stage's drain bound in seconds: (dict "root" $ "stage" "stt") */}}
{{- define "sluice.drainSeconds" -}}
{{- $s := index .root.Values.stages .stage -}}
{{- int64 (default .root.Values.drain.timeoutSeconds $s.drainTimeoutSeconds) -}}
{{- end -}}

{{/* A list of words as one shell command line, each word single-quoted. */}}
{{- define "sluice.shellWords" -}}
{{- $q := list -}}
{{- range . -}}
{{- $q = append $q (printf "'%s'" (replace "'" "'\\''" (toString .))) -}}
{{- end -}}
{{- join " " $q -}}
{{- end -}}

{{/* NetworkPolicyPeers as a JSON list, each ipBlock of 0.0.0.0/0 or ::/0
     given the metadata addresses of its family as `except` (dict "peers"
     LIST "md" networkPolicy.egress.metadataAddresses). */}}
{{- define "sluice.npPeers" -}}
{{- $out := list -}}
{{- range $p := .peers -}}
{{- $q := $p -}}
{{- if and (kindIs "map" $p) (hasKey $p "ipBlock") -}}
{{- $cidr := toString $p.ipBlock.cidr -}}
{{- if or (eq $cidr "0.0.0.0/0") (eq $cidr "::/0") -}}
{{- $ex := list -}}
{{- range $e := (default (list) $p.ipBlock.except) }}{{ $ex = append $ex $e }}{{ end -}}
{{- range $m := $.md -}}
{{- if and (eq (contains ":" $m) (contains ":" $cidr)) (not (has $m $ex)) }}{{ $ex = append $ex $m }}{{ end -}}
{{- end -}}
{{- $q = dict "ipBlock" (dict "cidr" $cidr) -}}
{{- if $ex }}{{ $_ := set $q.ipBlock "except" $ex }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out = append $out $q -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Ports as NetworkPolicyPorts (JSON list): (dict "ports" LIST "protocols" LIST) */}}
{{- define "sluice.npPorts" -}}
{{- $out := list -}}
{{- range $p := .ports -}}
{{- range $proto := $.protocols }}{{ $out = append $out (dict "port" (int $p) "protocol" $proto) }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* A pod's egress rules (YAML list): DNS; Kafka, Redis and storage on
     their ports (those given; none: not reached) towards egress.cluster or
     the service's own `to`; beyond the cluster (and to egress.cluster on any
     port) when external; then
     egress.rules, a rule without `to` made one to 0.0.0.0/0 and ::/0. Every
     0.0.0.0/0 and ::/0 block excepts the metadata addresses (sluice.npPeers).
     (dict "np" networkPolicy "md" LIST "anywhere" PEERS "kafkaPorts" LIST
     "redisPorts" LIST "storagePorts" LIST "external" BOOL) */}}
{{- define "sluice.npEgress" -}}
{{- $eg := .np.egress -}}
{{- $md := .md -}}
{{- $anywhere := .anywhere -}}
{{- $rules := list -}}
{{- /* DNS by default: any address but the metadata ones, and any pod (a CNI
     such as Cilium matches no pod, kube-dns included, by an ipBlock) */ -}}
{{- $dnsTo := include "sluice.npPeers" (dict "peers" (default (append $anywhere (dict "namespaceSelector" dict)) $eg.dns.to) "md" $md) | fromJsonArray -}}
{{- $dnsPorts := include "sluice.npPorts" (dict "ports" $eg.dns.ports "protocols" (list "UDP" "TCP")) | fromJsonArray -}}
{{- $rules = append $rules (dict "to" $dnsTo "ports" $dnsPorts) -}}
{{- range $svc := list (list "kafka" .kafkaPorts) (list "redis" .redisPorts) (list "storage" .storagePorts) (list "tracing" (default (list) .tracePorts)) -}}
{{- $ports := index $svc 1 -}}
{{- if $ports -}}
{{- $to := default $eg.cluster (index $eg (index $svc 0)).to -}}
{{- $rules = append $rules (dict
      "to" (include "sluice.npPeers" (dict "peers" $to "md" $md) | fromJsonArray)
      "ports" (include "sluice.npPorts" (dict "ports" (uniq $ports) "protocols" (list "TCP")) | fromJsonArray)) -}}
{{- end -}}
{{- end -}}
{{- if .external -}}
{{- /* the cluster too: a provider or receiver inside it (Cilium matches no pod by an ipBlock) */ -}}
{{- $to := concat (list) $eg.cluster -}}
{{- range $c := $eg.external.cidrs }}{{ $to = append $to (dict "ipBlock" (dict "cidr" $c)) }}{{ end -}}
{{- $r := dict "to" (include "sluice.npPeers" (dict "peers" $to "md" $md) | fromJsonArray) -}}
{{- if $eg.external.ports -}}
{{- $_ := set $r "ports" (include "sluice.npPorts" (dict "ports" $eg.external.ports "protocols" (list "TCP")) | fromJsonArray) -}}
{{- end -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- range $r := $eg.rules -}}
{{- $q := deepCopy $r -}}
{{- $_ := set $q "to" (include "sluice.npPeers" (dict "peers" (default $anywhere $r.to) "md" $md) | fromJsonArray) -}}
{{- $rules = append $rules $q -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
