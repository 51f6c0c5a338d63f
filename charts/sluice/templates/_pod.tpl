{{/*
sluice.stageEnv (dict "root" $ "stage" NAME): the env vars of one stage's
container. Everything secret comes from a Secret (secretKeyRef), never inline.
*/}}
{{- define "sluice.secretEnvList" -}}
{{- range . }}
{{- if not (regexMatch "^SLUICE_[A-Z0-9_]+$" .name) }}
{{- fail (printf "secretEnv name %q: only SLUICE_* variables (the stages refuse other SLUICE_ names they do not know)" .name) }}
{{- end }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ required "secretEnv entries need secretName" .secretName }}
      key: {{ required "secretEnv entries need key" .key }}
{{- end }}
{{- end -}}

{{/* SASL and Redis AUTH credentials from their Secrets (kafka: stages and the
topics Job; redis: stages only) */}}
{{- define "sluice.kafkaAuthEnv" -}}
{{- $k := .kafka -}}
{{- if and (hasPrefix "sasl_" $k.securityProtocol) $k.sasl.existingSecret }}
- name: SLUICE_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $k.sasl.existingSecret }}
      key: {{ $k.sasl.usernameKey }}
- name: SLUICE_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $k.sasl.existingSecret }}
      key: {{ $k.sasl.passwordKey }}
{{- end }}
{{- end -}}

{{/* volumes and mounts of the CA bundles (sluice.tlsVolumes / sluice.tlsMounts
with (dict "v" .Values "kafkaOnly" BOOL)) */}}
{{- define "sluice.tlsSources" -}}
{{- $out := list -}}
{{- if and (has .v.kafka.securityProtocol (list "ssl" "sasl_ssl")) .v.kafka.tls.caSecret -}}
{{- $out = append $out (list "kafka" .v.kafka.tls.caSecret) -}}
{{- end -}}
{{- if not .kafkaOnly -}}
{{- if .v.redis.tls.caSecret }}{{ $out = append $out (list "redis" .v.redis.tls.caSecret) }}{{ end -}}
{{- if .v.s3.tls.caSecret }}{{ $out = append $out (list "s3" .v.s3.tls.caSecret) }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "sluice.tlsMounts" -}}
{{- range include "sluice.tlsSources" . | fromJsonArray }}
- name: tls-{{ index . 0 }}
  mountPath: /etc/sluice-tls/{{ index . 0 }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "sluice.tlsVolumes" -}}
{{- range include "sluice.tlsSources" . | fromJsonArray }}
- name: tls-{{ index . 0 }}
  secret:
    secretName: {{ index . 1 }}
{{- end }}
{{- end -}}

{{- define "sluice.stageEnv" -}}
{{- $root := .root -}}
{{- $stage := .stage -}}
{{- $v := $root.Values -}}
{{- $s := index $v.stages $stage -}}
{{- if $v.redis.existingSecret }}
- name: SLUICE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.redis.existingSecret }}
      key: {{ $v.redis.urlKey }}
{{- end }}
{{- include "sluice.kafkaAuthEnv" $v }}
{{- if $v.redis.auth.existingSecret }}
{{- if $v.redis.auth.usernameKey }}
- name: SLUICE_REDIS_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $v.redis.auth.existingSecret }}
      key: {{ $v.redis.auth.usernameKey }}
{{- end }}
- name: SLUICE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $v.redis.auth.existingSecret }}
      key: {{ $v.redis.auth.passwordKey }}
{{- end }}
{{- if and (include "sluice.usesStorage" (dict "root" $root "stage" $stage)) $v.s3.credentials.existingSecret }}
- name: SLUICE_S3_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.s3.credentials.existingSecret }}
      key: {{ $v.s3.credentials.accessKeyKey }}
- name: SLUICE_S3_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.s3.credentials.existingSecret }}
      key: {{ $v.s3.credentials.secretKeyKey }}
{{- end }}
{{- if has $stage (list "stt" "grade") }}
{{- $p := index $v $stage }}
{{- $settings := index $p $p.plugin | default dict }}
{{- range $k := keys $settings | sortAlpha }}
{{- $ref := index $settings $k }}
{{- if kindIs "map" $ref }}
- name: {{ printf "SLUICE_%s_%s_%s" $stage $p.plugin $k | upper | replace "." "_" | replace "-" "_" }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "%s.%s.%s.existingSecret is required" $stage $p.plugin $k) $ref.existingSecret }}
      key: {{ required (printf "%s.%s.%s.key is required" $stage $p.plugin $k) $ref.key }}
{{- end }}
{{- end }}
{{- end }}
{{- include "sluice.secretEnvList" $v.secretEnv }}
{{- include "sluice.secretEnvList" $s.secretEnv }}
{{- range $s.env }}
{{- if and (regexMatch "^SLUICE_" .name) (include "sluice.isSecretKey" (lower .name)) }}
{{- fail (printf "stages.%s.env %s looks like a credential: use secretEnv" $stage .name) }}
{{- end }}
- {{ toYaml . | nindent 2 | trim }}
{{- end }}
{{- end -}}
