{{/*
The prefix of every object's name: the release name, or fullnameOverride.
deploy/ is rendered with the release name "cdi".
*/}}
{{- define "cdi.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/*
The mode, checked: the dra mode needs Kubernetes 1.35 or later (the
device-plugin mode runs on any release).
*/}}
{{- define "cdi.mode" -}}
{{- if not (has .Values.mode (list "dra" "device-plugin")) -}}
{{- fail (printf "mode %q: the modes are dra and device-plugin" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "dra") (semverCompare "<1.35.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "mode dra needs Kubernetes 1.35 or later, and this cluster is %s: use mode device-plugin" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/*
The metrics port: metrics.port, or by mode 9470 (dra) and 9471
(device-plugin), so that both modes may run on one node.
*/}}
{{- define "cdi.metricsPort" -}}
{{- if .Values.metrics.port -}}
{{ .Values.metrics.port }}
{{- else if eq (include "cdi.mode" .) "dra" -}}
9470
{{- else -}}
9471
{{- end -}}
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

{{/*
The update strategy: the values', or the mode's default. A new pod can
start beside the old one (a surge) only in the dra mode with --pod-uid,
and only on the pod network: on the host's network the new pod could not
listen on the old one's metrics and probe port.
*/}}
{{- define "cdi.updateStrategy" -}}
{{- $surge := and (eq (include "cdi.mode" .) "dra") .Values.dra.podUID (not .Values.hostNetwork) -}}
{{- if .Values.updateStrategy -}}
{{- $ru := .Values.updateStrategy.rollingUpdate | default dict -}}
{{- if and .Values.hostNetwork (not (has (toString ($ru.maxSurge | default 0)) (list "0" "0%"))) -}}
{{- fail "updateStrategy.rollingUpdate.maxSurge: with hostNetwork=true a surge pod cannot listen on the port of the pod it replaces; use the pod network (hostNetwork=false) for a surge" -}}
{{- end -}}
{{ toYaml .Values.updateStrategy }}
{{- else if $surge -}}
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

{{/*
A probe's port: on the host's network 127.0.0.1 and the number, else the
pod port by name. The argument is a list: hostNetwork, the port, its name.
*/}}
{{- define "cdi.probePort" -}}
{{- if index . 0 -}}
host: 127.0.0.1
port: {{ index . 1 }}
{{- else -}}
port: {{ index . 2 }}
{{- end -}}
{{- end -}}

{{/*
Whether a type is on: its values have no enabled, or enabled true.
*/}}
{{- define "cdi.enabled" -}}
{{- if or (not (hasKey . "enabled")) .enabled -}}true{{- end -}}
{{- end -}}

{{/*
"true" when an enabled type's config is the sriov plugin's: it writes to
sysfs (sriov_numvfs, driver_override, a driver's unbind, drivers_probe).
*/}}
{{- define "cdi.sriov" -}}
{{- range $_, $t := .Values.types -}}
{{- if and (include "cdi.enabled" $t) (eq (toString $t.config.plugin) "sriov") -}}true{{- end -}}
{{- end -}}
{{- end -}}
