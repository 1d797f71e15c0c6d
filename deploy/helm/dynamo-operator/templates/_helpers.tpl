{{- define "dynamo-operator.labels" -}}
app.kubernetes.io/name: dynamo-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "dynamo-operator.config" -}}
apiVersion: operator.config.dynamo.nvidia.com/v1alpha1
kind: OperatorConfiguration
server:
  metrics:
    bindAddress: {{ .Values.metrics.bindAddress }}
    port: {{ .Values.metrics.port }}
  webhook:
    port: {{ .Values.webhook.port }}
    {{- if .Values.webhook.certSecret }}
    certDir: /etc/dynamo-operator/webhook
    {{- end }}
leaderElection:
  enabled: {{ .Values.leaderElection.enabled }}
{{- with .Values.watchNamespace }}
namespace:
  restricted: {{ . }}
{{- end }}
{{- with .Values.grove.terminationDelay }}
orchestrators:
  grove:
    terminationDelay: {{ . | quote }}
{{- end }}
{{- $infrastructure := dict }}
{{- range $key, $value := .Values.infrastructure }}
{{- if $value }}{{ $_ := set $infrastructure $key $value }}{{ end }}
{{- end }}
{{- with $infrastructure }}
infrastructure:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $ingress := dict }}
{{- range $key, $value := .Values.ingress }}
{{- if $value }}{{ $_ := set $ingress $key $value }}{{ end }}
{{- end }}
{{- with $ingress }}
ingress:
  {{- toYaml . | nindent 2 }}
{{- end }}
rbac:
  plannerClusterRoleName: dynamo-operator-planner
  eppClusterRoleName: dynamo-operator-epp
{{- with .Values.mpi.sshSecretNamespace }}
mpi:
  sshSecretNamespace: {{ . }}
{{- end }}
checkpoint:
  enabled: {{ .Values.checkpoint.enabled }}
{{- end -}}
