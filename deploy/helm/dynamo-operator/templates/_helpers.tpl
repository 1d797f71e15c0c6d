{{- define "dynamo-operator.labels" -}}
app.kubernetes.io/name: dynamo-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
