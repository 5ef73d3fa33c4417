{{/* The chart's name. */}}
{{- define "switchyard.name" -}}
{{- default "switchyard" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of every object: the release's name, or fullnameOverride. */}}
{{- define "switchyard.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ServiceAccount's name. */}}
{{- define "switchyard.serviceAccountName" -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* What selects the daemon's pods. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference: repository, then @digest or :tag (default appVersion). */}}
{{- define "switchyard.image" -}}
{{- $image := index . 0 -}}{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ default $root.Chart.AppVersion $image.tag }}
{{- end -}}
{{- end -}}

{{/*
The config the daemon runs, as JSON: `config:` with what the pod decides filled in where the
config is silent, `ha.mode` from `mode`, `state_dir` with persistence. Fails on a config
that contradicts the chart.
*/}}
{{- define "switchyard.config" -}}
{{- $config := deepCopy (.Values.config | default (.Files.Get "files/config.yaml" | fromYaml)) -}}
{{- $pod := dict "plugins_dir" "/plugins" "admin" (dict "listen" "127.0.0.1:9470" "probes_listen" "0.0.0.0:9471") "oci" (dict "cache_dir" "/var/cache/switchyard/oci") -}}
{{- if .Values.persistence.enabled -}}
{{- $_ := set $pod "state_dir" "/var/lib/switchyard" -}}
{{- end -}}
{{- $config = mergeOverwrite $pod $config -}}
{{- $ha := default dict $config.ha -}}
{{- if and $ha.mode (ne $ha.mode .Values.mode) -}}
{{- fail (printf "config.ha.mode is %s but mode is %s: set mode, the chart writes ha.mode" $ha.mode .Values.mode) -}}
{{- end -}}
{{- if ne .Values.mode "single" -}}
{{- $_ := set $ha "mode" .Values.mode -}}
{{- $_ := set $config "ha" $ha -}}
{{- end -}}
{{- if not $config.admin.probes_listen -}}
{{- fail "config.admin.probes_listen is null: the chart's probes and metrics Service need the probes listener" -}}
{{- end -}}
{{- if .Values.plugins.requireDigest -}}
{{- range $name, $handler := (default dict $config.handlers) -}}
{{- range $field := list "plugin" "shadow" -}}
{{- $ref := toString (get (default dict $handler) $field) -}}
{{- if and (hasPrefix "oci://" $ref) (not (contains "@sha256:" $ref)) -}}
{{- fail (printf "config.handlers.%s.%s: %s is not pinned by digest (oci://...@sha256:...); set plugins.requireDigest: false to allow tags" $name $field $ref) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $config -}}
{{- end -}}

{{/* The probes port: the port of admin.probes_listen. */}}
{{- define "switchyard.probesPort" -}}
{{- $config := include "switchyard.config" . | fromJson -}}
{{- splitList ":" (toString $config.admin.probes_listen) | last -}}
{{- end -}}

{{/* The workload's kind: a StatefulSet in sharded mode, else a Deployment. */}}
{{- define "switchyard.kind" -}}
{{- if eq .Values.mode "sharded" -}}StatefulSet{{- else -}}Deployment{{- end -}}
{{- end -}}
