{{/*
The release's object names: <release> when it contains "tessera", else <release>-tessera; each
object appends its part (-exporter, -notify, ...). Names depend on the release only, never on
other values, so that `helm upgrade` with changed values replaces the same objects.
*/}}
{{- define "tessera.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every namespaced object. */}}
{{- define "tessera.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/* The images' tag: image.tag, else the chart's appVersion. */}}
{{- define "tessera.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* <registry>/<name>:<tag>; call with (list . "tessera-exporter"). */}}
{{- define "tessera.image" -}}
{{- $root := index . 0 -}}
{{- printf "%s/%s:%s" ($root.Values.image.registry | trimSuffix "/") (index . 1) (include "tessera.tag" $root) -}}
{{- end -}}

{{/* Labels of every object of the release (uninstall and upgrade find them by these). */}}
{{- define "tessera.commonLabels" -}}
app.kubernetes.io/part-of: tessera
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "tessera.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component; call with (list . "tessera-exporter"). */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* All labels of a component's objects; call with (list . "tessera-exporter" "exporter"). */}}
{{- define "tessera.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
{{- if gt (len .) 2 }}
app.kubernetes.io/component: {{ index . 2 }}
{{- end }}
{{ include "tessera.commonLabels" $root }}
{{- end -}}

{{/* Whether to render Prometheus Operator objects: the API is served, or forced. */}}
{{- define "tessera.prometheusOperator" -}}
{{- if or .Values.prometheusOperator.forceApi (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
true
{{- end -}}
{{- end -}}
