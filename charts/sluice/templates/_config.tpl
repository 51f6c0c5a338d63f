{{/*
sluice.stageConf (dict "root" $ "stage" NAME): the settings file of one stage.
Keys the chart owns (listen addresses, topics, brokers, ...) may not be set
again in `config`; secret keys may never be set there (use a Secret).
*/}}
{{- define "sluice.ownedKeys" -}}
[kafka.brokers, kafka.security_protocol, kafka.sasl_mechanism, kafka.ssl_ca_file,
 kafka.ssl_verify_hostname, redis.tls_ca_file, s3.ca_file, redis.url, admin.listen, presign.listen, results.listen, retry.tiers,
 retry.budget_s, stage.drain_timeout_s, log.level, stt.plugin, grade.plugin,
 pipeline.file, s3.endpoint, s3.region, s3.bucket, s3.path_style,
 s3.url_expiry_s]
{{- end -}}

{{/* secret settings: never in a values file, always from a Secret */}}
{{- define "sluice.isSecretKey" -}}
{{- if or (hasSuffix "api_key" .) (hasSuffix "secret_key" .) (hasSuffix "access_key" .) (hasSuffix "password" .) (hasSuffix "token" .) (hasSuffix "secret" .) -}}true{{- end -}}
{{- end -}}

{{- define "sluice.userConf" -}}
{{- $owned := include "sluice.ownedKeys" . | fromYamlArray -}}
{{- range $k := keys .conf | sortAlpha }}
{{- if has $k $owned }}
{{- fail (printf "%s: %q is set by the chart (see values.yaml); remove it from config" $.where $k) }}
{{- end }}
{{- if include "sluice.isSecretKey" $k }}
{{- fail (printf "%s: %q is a credential: put it in a Secret and use secretEnv, never in config" $.where $k) }}
{{- end }}
{{ $k }} = {{ include "sluice.confValue" (index $.conf $k) }}
{{- end }}
{{- end -}}

{{/* the chosen plugin's settings: plain ones into the file */}}
{{- define "sluice.pluginConf" -}}
{{- $kind := .kind -}}
{{- $p := index .root.Values $kind -}}
{{- $settings := index $p $p.plugin | default dict -}}
{{- range $k := keys $settings | sortAlpha }}
{{- $v := index $settings $k }}
{{- if not (kindIs "map" $v) }}
{{- if include "sluice.isSecretKey" $k }}
{{- fail (printf "%s.%s.%s is a credential: give it as {existingSecret, key}" $kind $p.plugin $k) }}
{{- end }}
{{ $kind }}.{{ $p.plugin }}.{{ $k }} = {{ include "sluice.confValue" $v }}
{{- end }}
{{- end }}
{{- end -}}

{{/* kafka.security_protocol & co. (the stages' file; the topics Job gets env) */}}
{{- define "sluice.kafkaSecurityConf" -}}
{{- $k := .kafka }}
kafka.security_protocol = {{ $k.securityProtocol }}
{{- if hasPrefix "sasl_" $k.securityProtocol }}
{{- if not $k.sasl.existingSecret }}
{{- fail (printf "kafka.securityProtocol=%s needs kafka.sasl.existingSecret (user name and password)" $k.securityProtocol) }}
{{- end }}
kafka.sasl_mechanism = {{ $k.sasl.mechanism }}
{{- end }}
{{- if has $k.securityProtocol (list "ssl" "sasl_ssl") }}
kafka.ssl_verify_hostname = {{ $k.tls.verifyHostname }}
{{- if $k.tls.caSecret }}
kafka.ssl_ca_file = /etc/sluice-tls/kafka/{{ $k.tls.caKey }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "sluice.stageConf" -}}
{{- $root := .root -}}
{{- $stage := .stage -}}
{{- $v := $root.Values -}}
{{- $s := index $v.stages $stage -}}
# sluice {{ $stage }} - rendered by the Helm chart (release {{ $root.Release.Name }})
kafka.brokers = {{ required "kafka.brokers is required" $v.kafka.brokers }}
{{- include "sluice.kafkaSecurityConf" $v }}
{{- if $v.redis.tls.caSecret }}
redis.tls_ca_file = /etc/sluice-tls/redis/{{ $v.redis.tls.caKey }}
{{- end }}
{{- if not $v.redis.existingSecret }}
redis.url = {{ required "redis.url is required" $v.redis.url }}
{{- if and (regexMatch "^rediss?\\+cluster://" $v.redis.url) (not (int $v.redis.buckets)) }}
{{- fail "redis.url names a Redis Cluster: set redis.buckets (4 or more per primary, 16 for three) so that every script's keys share a slot" }}
{{- end }}
{{- end }}
{{- if int $v.redis.buckets }}
redis.buckets = {{ int $v.redis.buckets }}
{{- end }}
pipeline.file = /etc/sluice/pipeline.json
log.level = {{ $v.logLevel }}
{{- if $v.tracing.endpoint }}
trace.endpoint = {{ $v.tracing.endpoint }}
trace.sample_ratio = {{ include "sluice.confValue" $v.tracing.sampleRatio }}
{{- end }}
admin.listen = 0.0.0.0:{{ $v.adminPort }}
stage.drain_timeout_s = {{ include "sluice.drainSeconds" . }}
retry.budget_s = {{ include "sluice.confValue" $v.retry.budgetSeconds }}
{{- if eq $stage "presign" }}
presign.listen = 0.0.0.0:8080
{{- if and $v.ingress.enabled (not (hasKey $s.config "presign.results_base_url")) }}
presign.results_base_url = {{ ternary "https" "http" (gt (len $v.ingress.tls) 0) }}://{{ $v.ingress.host }}
{{- end }}
{{- end }}
{{- if eq $stage "results" }}
results.listen = 0.0.0.0:8081
{{- end }}
{{- /* behind the ingress every client's TCP peer is the controller: the
     per-address limits count the address it appends, and the per-peer
     connection cap is off (docs/deploy.md) */}}
{{- if and $v.ingress.enabled (has $stage (list "presign" "results")) }}
{{- if not (hasKey $s.config (printf "%s.client_address_header" $stage)) }}
{{ $stage }}.client_address_header = X-Forwarded-For
{{- end }}
{{- if not (hasKey $s.config "http.max_connections_per_address") }}
http.max_connections_per_address = 0
{{- end }}
{{- end }}
{{- if include "sluice.usesStorage" (dict "root" $root "stage" $stage) }}
s3.endpoint = {{ required "s3.endpoint is required" $v.s3.endpoint }}
s3.region = {{ $v.s3.region }}
s3.bucket = {{ required "s3.bucket is required" $v.s3.bucket }}
s3.path_style = {{ $v.s3.pathStyle }}
{{- with $v.s3.derivedBucket }}
s3.derived_bucket = {{ . }}
{{- end }}
{{- with $v.s3.derivedEndpoint }}
s3.derived_endpoint = {{ . }}
{{- end }}
s3.url_expiry_s = {{ include "sluice.confValue" $v.s3.urlExpirySeconds }}
{{- if $v.s3.tls.caSecret }}
s3.ca_file = /etc/sluice-tls/s3/{{ $v.s3.tls.caKey }}
{{- end }}
{{- end }}
{{- if has $stage (list "stt" "grade") }}
{{ $stage }}.plugin = {{ (index $v $stage).plugin }}
{{- include "sluice.pluginConf" (dict "root" $root "kind" $stage) }}
{{- end }}
{{- include "sluice.userConf" (dict "conf" ($v.common.config | default dict) "where" "common.config") }}
{{- include "sluice.userConf" (dict "conf" ($s.config | default dict) "where" (printf "stages.%s.config" $stage)) }}
{{- end -}}
