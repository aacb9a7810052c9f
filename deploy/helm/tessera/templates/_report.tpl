{{/*
The report CronJob's delivery and owners flags (docs/report.md, "Delivering the report" and
"Owners"), from report.delivery and report.owners: nothing when neither is set. Secrets are never
values: the SMTP password, the CA and the webhook URLs are keys of the Secret
report.delivery.secretName, mounted at /etc/tessera/delivery. Call with the root context.
*/}}
{{- define "tessera.reportDeliveryArgs" -}}
{{- $r := .Values.report }}
{{- $d := $r.delivery }}
{{- $m := $d.mail }}
{{- $secrets := "/etc/tessera/delivery" }}
{{- if or $m.to $d.webhooks }}
{{- if and (or $m.smtp.passwordKey $m.smtp.caKey $d.webhooks) (not $d.secretName) }}
{{- fail "report.delivery: smtp.passwordKey, smtp.caKey and webhooks name keys of report.delivery.secretName: set it" }}
{{- end }}
{{- range $m.to }}
- {{ printf "--mail-to=%s" . | quote }}
{{- end }}
{{- if $m.to }}
{{- if not (and $m.from $m.smtp.host) }}
{{- fail "report.delivery.mail.to needs mail.from and mail.smtp.host" }}
{{- end }}
- {{ printf "--mail-from=%s" $m.from | quote }}
- {{ printf "--smtp.host=%s" $m.smtp.host | quote }}
{{- with $m.smtp.port }}
- --smtp.port={{ . }}
{{- end }}
- --smtp.tls={{ $m.smtp.tls }}
{{- with $m.smtp.user }}
- {{ printf "--smtp.user=%s" . | quote }}
{{- end }}
{{- with $m.smtp.passwordKey }}
- --smtp.password-file={{ $secrets }}/{{ . }}
{{- end }}
{{- with $m.smtp.caKey }}
- --smtp.tls.ca-file={{ $secrets }}/{{ . }}
{{- end }}
{{- if $m.owners }}
- --mail-owners
{{- end }}
{{- end }}
{{- range $d.webhooks }}
- --webhook.url-file={{ $secrets }}/{{ .urlKey }}
{{- end }}
{{- if $d.webhooks }}
- --webhook.format={{ $d.webhookFormat }}
{{- end }}
{{- with $d.link }}
- {{ printf "--link=%s" . | quote }}
{{- end }}
- --sent-record=/var/lib/tessera/reports/tessera-sent.json
- --delivery.timeout={{ $d.timeout }}
- --delivery.retries={{ $d.retries }}
{{- end }}
{{- if or $r.owners.file $r.owners.configMap }}
- --owners=/etc/tessera/owners/owners.toml
{{- end }}
{{- if $r.owners.kubernetes }}
- --owners.kubernetes
{{- end }}
{{- end -}}
