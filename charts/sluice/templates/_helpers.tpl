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
The stages in pipeline order, and per stage: the HTTP API port (0: none),
whether it consumes Kafka, and the values keys of its input topics.
*/}}
{{- define "sluice.stageInfo" -}}
presign: {http: 8080, consumer: false, inputs: []}
ingest: {http: 0, consumer: true, inputs: [storageEvents]}
stt: {http: 0, consumer: true, inputs: [sttRequests]}
grade: {http: 0, consumer: true, inputs: [gradeRequests]}
materialize: {http: 0, consumer: true, inputs: [submissions, results]}
results: {http: 8081, consumer: false, inputs: []}
{{- end -}}

{{- define "sluice.stageOrder" -}}
[presign, ingest, stt, grade, materialize, results]
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
