{{/*
The prefix of every object's name: the release name, or fullnameOverride.
deploy/ is rendered with the release name "cdi".
*/}}
{{- define "cdi.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* The mode, checked. */}}
{{- define "cdi.mode" -}}
{{- if not (has .Values.mode (list "dra" "device-plugin")) -}}
{{- fail (printf "mode %q: the modes are dra and device-plugin" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/* The name of the DaemonSet (and, in the dra mode, its service account). */}}
{{- define "cdi.agent" -}}
{{- include "cdi.fullname" . }}-{{ if eq (include "cdi.mode" .) "dra" }}dra{{ else }}device-plugin{{ end }}
{{- end -}}

{{/* The labels that select the DaemonSet's pods. */}}
{{- define "cdi.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "cdi.mode" . }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "cdi.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image. */}}
{{- define "cdi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The config file of a type: <type>.d/<configName>.conf. The argument is a
list: the type's name, its values.
*/}}
{{- define "cdi.configPath" -}}
{{- $name := index . 0 -}}
{{- $t := index . 1 -}}
{{- if ne (toString $t.config.type) $name -}}
{{- fail (printf "types.%s.config.type is %q: a type's config must name its own type" $name (toString $t.config.type)) -}}
{{- end -}}
{{- $file := default $t.config.plugin $t.configName -}}
{{- if not $file -}}
{{- fail (printf "types.%s: the config names no plugin, and configName is empty" $name) -}}
{{- end -}}
{{ $name }}.d/{{ $file }}.conf
{{- end -}}

{{/* The update strategy: the values', or the mode's default. */}}
{{- define "cdi.updateStrategy" -}}
{{- if .Values.updateStrategy -}}
{{ toYaml .Values.updateStrategy }}
{{- else if and (eq (include "cdi.mode" .) "dra") .Values.dra.podUID -}}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: 0
  maxSurge: 1
{{- else -}}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: 1
  maxSurge: 0
{{- end -}}
{{- end -}}
