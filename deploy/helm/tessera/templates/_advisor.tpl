{{/*
The pod spec fields the advisor's CronJobs share: scheduling from advisor.*, pull secrets, no
service-account token, non-root. Call with the root context.
*/}}
{{- define "tessera.advisorPod" -}}
automountServiceAccountToken: false
{{ include "tessera.advisorScheduling" . }}
{{- end -}}

{{/*
The advisor pods' scheduling, pull secrets and restart policy, without the service-account lines
(the report's pod has a token when it reads the namespaces' owners). Call with the root context.
*/}}
{{- define "tessera.advisorScheduling" -}}
restartPolicy: Never
{{- with .Values.advisor.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.advisor.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.advisor.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The advisor container's image lines. */}}
{{- define "tessera.advisorImage" -}}
image: {{ include "tessera.image" (list . "tessera") }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}
