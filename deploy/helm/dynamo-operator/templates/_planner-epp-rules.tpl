{{- /* The planner's and EPP's rules: ClusterRoles (cluster-wide) or Roles (restricted). */ -}}
{{- define "dynamo-operator.planner-rules" -}}
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeployments", "dynamographdeploymentscalingadapters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeploymentscalingadapters/scale"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["pods", "services", "endpoints"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- define "dynamo-operator.epp-rules" -}}
- apiGroups: [""]
  resources: ["pods", "services", "endpoints"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch"]
{{- end }}
