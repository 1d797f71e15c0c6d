{{- /* The operator's rules, one list for the ClusterRole (cluster-wide) and the Roles
(namespace-restricted): generated from deploy/rbac/clusterrole.yaml (a test keeps them equal).
Least privilege: exactly the verbs and resources its controllers use, no wildcards. Bound by a
RoleBinding, the rules on cluster-scoped kinds grant nothing: a restricted operator makes no
cluster-scoped request. */ -}}
{{- define "dynamo-operator.rules" -}}
# The graph: watched, provider record annotation, status.
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeployments/status"]
  verbs: ["patch"]
# Children the operator creates and owns.
- apiGroups: ["nvidia.com"]
  resources: ["dynamocomponentdeployments", "dynamographdeploymentscalingadapters", "dynamocheckpoints"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["nvidia.com"]
  resources: ["dynamocomponentdeployments/status", "dynamographdeploymentscalingadapters/status", "dynamocheckpoints/status"]
  verbs: ["patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Graph-owned children, watched with the graph-name label selector (the discovery account is
# deleted when the graph turns Kubernetes discovery off).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Graph ConfigMaps and checkpoint artifact records (a lost artifact's record is replaced).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create"]
# MPI SSH keys (created once, never rewritten) and the webhook CA.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The planner and EPP service accounts are bound to these ClusterRoles; the operator checks
# they exist and may bind them, nothing more.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["get"]
  resourceNames: ["dynamo-operator-planner", "dynamo-operator-epp"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["bind"]
  resourceNames: ["dynamo-operator-planner", "dynamo-operator-epp"]
# What the Kubernetes-discovery Role grants to a graph's pods (RBAC lets the operator grant
# only what it holds itself); pods are also watched (worker pods, label-selected) for the
# worker rollout.
- apiGroups: [""]
  resources: ["endpoints", "pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["nvidia.com"]
  resources: ["dynamoworkermetadatas"]
  verbs: ["create", "get", "list", "watch", "update", "patch", "delete"]
# GPU memory service claim templates.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaimtemplates"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["resource.k8s.io"]
  resources: ["deviceclasses"]
  verbs: ["get"]
# Multinode components on the component pathway: one LeaderWorkerSet per multinode DCD,
# applied server-side and watched with the component label selector.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Endpoint picker.
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Frontends exposed outside the cluster: Ingresses, Istio VirtualServices, Gateway API
# HTTPRoutes (label-selected watches; the latter two while their CRDs are served).
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.istio.io"]
  resources: ["virtualservices"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Checkpoint capture Jobs.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The snapshot agent's DaemonSet: the checkpoint storage restore pods mount (a label-selected
# watch of the controllers and of the checkpoint restore webhook).
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["list", "watch"]
# The grove pathway: one PodCliqueSet per graph; Grove's children are read, and scaled only
# through their scale subresource; the topology binding is read by name.
- apiGroups: ["grove.io"]
  resources: ["podcliquesets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["grove.io"]
  resources: ["podcliques", "podcliquescalinggroups"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["grove.io"]
  resources: ["podcliques/scale", "podcliquescalinggroups/scale"]
  verbs: ["get", "patch"]
- apiGroups: ["grove.io"]
  resources: ["clustertopologybindings"]
  verbs: ["get"]
# Leader election.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "patch", "update"]
# Events (events.k8s.io/v1 through the Recorder).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# The optional APIs, followed while running: their CRDs and the built-in DRA API's APIService,
# each watched by name (an API installed or removed while the operator runs).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
  resourceNames: ["leaderworkersets.leaderworkerset.x-k8s.io", "podcliquesets.grove.io", "podcliques.grove.io", "podcliquescalinggroups.grove.io", "inferencepools.inference.networking.k8s.io", "virtualservices.networking.istio.io", "httproutes.gateway.networking.k8s.io"]
- apiGroups: ["apiregistration.k8s.io"]
  resources: ["apiservices"]
  verbs: ["list", "watch"]
  resourceNames: ["v1.resource.k8s.io"]
# The conversion webhook's CA bundle in the CRDs served in v1alpha1 and v1beta1.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "patch"]
  resourceNames: ["dynamographdeployments.nvidia.com", "dynamocomponentdeployments.nvidia.com", "dynamographdeploymentscalingadapters.nvidia.com"]
# Their status.storedVersions, once objects stored as v1alpha1 are stored again as v1beta1.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions/status"]
  verbs: ["patch"]
  resourceNames: ["dynamographdeployments.nvidia.com", "dynamocomponentdeployments.nvidia.com", "dynamographdeploymentscalingadapters.nvidia.com"]
# The checkpoint restore webhook's configuration, applied server-side by name (an apply that
# creates is authorized as a create of that name).
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["mutatingwebhookconfigurations"]
  verbs: ["get", "create", "patch"]
  resourceNames: ["dynamo-operator-checkpoint-restore"]
{{- end }}
