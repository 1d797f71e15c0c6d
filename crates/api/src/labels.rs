//! Well-known `nvidia.com/...` labels, annotations, names and values that upstream Dynamo reads
//! or writes. Their values are part of the compatibility contract.

/// Annotation (user): `"false"` opts a DGD out of the Grove pathway.
pub const ENABLE_GROVE: &str = "nvidia.com/enable-grove";
/// Annotation (controller): immutable provider record, [`PROVIDER_COMPONENT`] or
/// [`PROVIDER_GROVE`], written before any other effect.
pub const WORKLOAD_PROVIDER: &str = "nvidia.com/workload-provider";
/// Value of [`WORKLOAD_PROVIDER`] for the component (DCD) pathway.
pub const PROVIDER_COMPONENT: &str = "component";
/// Value of [`WORKLOAD_PROVIDER`] for the Grove (PodCliqueSet) pathway.
pub const PROVIDER_GROVE: &str = "grove";

/// Annotation (controller): active worker generation, v1 (alpha-compatible) hash.
pub const CURRENT_WORKER_HASH: &str = "nvidia.com/current-worker-hash";
/// Annotation (controller): active worker generation, v2 hash.
pub const CURRENT_WORKER_HASH_V2: &str = "nvidia.com/current-worker-hash-v2";
/// Label (controller): worker generation on worker DCDs and pods.
pub const DYNAMO_WORKER_HASH: &str = "nvidia.com/dynamo-worker-hash";
/// Sentinel value of [`DYNAMO_WORKER_HASH`] on pre-hash workers.
pub const WORKER_HASH_LEGACY: &str = "legacy";
/// Annotation (controller, pod template): restart trigger timestamp.
pub const RESTART_AT: &str = "nvidia.com/restartAt";
/// Annotation (controller, on every child it applies): hash of the body last applied.
pub const LAST_APPLIED_HASH: &str = "nvidia.com/last-applied-hash";

/// Annotation (upstream's controller, on every child it syncs): the generation it last wrote.
/// Upstream writes it beside [`LAST_APPLIED_HASH`]; this operator never does, so a child that
/// carries it was last written by upstream's operator (see `docs/migration.md`).
pub const LAST_APPLIED_GENERATION: &str = "nvidia.com/last-applied-generation";
/// The field manager of upstream's operator: its binary, `manager`, writing with create and
/// update requests (`managedFields[].operation: Update`).
pub const UPSTREAM_FIELD_MANAGER: &str = "manager";
/// The finalizer upstream's controllers put on graphs, DCDs and checkpoints. This operator uses
/// none; it removes this one from what it adopts.
pub const UPSTREAM_FINALIZER: &str = "nvidia.com/finalizer";

/// Label: name of the owning DynamoGraphDeployment.
pub const DYNAMO_GRAPH_DEPLOYMENT_NAME: &str = "nvidia.com/dynamo-graph-deployment-name";
/// Label: component name.
pub const DYNAMO_COMPONENT: &str = "nvidia.com/dynamo-component";
/// Label (controller, Grove cliques): the `spec.experimental.componentGroups` entry the
/// component belongs to (its name as written).
pub const DYNAMO_COMPONENT_GROUP: &str = "nvidia.com/dynamo-component-group";
/// Label: component type (frontend, worker, prefill, decode, planner, epp).
pub const DYNAMO_COMPONENT_TYPE: &str = "nvidia.com/dynamo-component-type";
/// Label: v1alpha1 sub-component type (prefill, decode); see
/// [`crate::ComponentType::sub_component_type`].
pub const DYNAMO_SUB_COMPONENT_TYPE: &str = "nvidia.com/dynamo-sub-component-type";
/// Label (controller): component class, [`COMPONENT_CLASS_WORKER`] on the worker-class
/// components (worker, prefill, decode) of a graph with an EPP component.
pub const DYNAMO_COMPONENT_CLASS: &str = "nvidia.com/dynamo-component-class";
/// Value of [`DYNAMO_COMPONENT_CLASS`] for worker-class components.
pub const COMPONENT_CLASS_WORKER: &str = "worker";
/// Label: pod selector of a component.
pub const SELECTOR: &str = "nvidia.com/selector";
/// Label: Dynamo runtime namespace.
pub const DYNAMO_NAMESPACE: &str = "nvidia.com/dynamo-namespace";
/// Label: engine group of Grove PodCliques.
pub const DYNAMO_ENGINE_GROUP: &str = "nvidia.com/dynamo-engine-group";

/// Annotation (user): `Recreate` selects the recreate rollout strategy.
pub const DEPLOYMENT_STRATEGY: &str = "nvidia.com/deployment-strategy";
/// Value of [`DEPLOYMENT_STRATEGY`] for recreate rollouts.
pub const DEPLOYMENT_STRATEGY_RECREATE: &str = "Recreate";
/// Annotation (user): max surge of managed rolling updates.
pub const DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE: &str =
    "nvidia.com/deployment-rolling-update-max-surge";
/// Annotation (user): max unavailable of managed rolling updates.
pub const DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE: &str =
    "nvidia.com/deployment-rolling-update-max-unavailable";

/// Annotation (user): Kubernetes discovery backend on/off.
pub const DYNAMO_DISCOVERY_BACKEND: &str = "nvidia.com/dynamo-discovery-backend";
/// Annotation (user): Kubernetes discovery mode (e.g. `container`).
pub const DYNAMO_KUBE_DISCOVERY_MODE: &str = "nvidia.com/dynamo-kube-discovery-mode";
/// Annotation (user): KAI scheduler queue.
pub const KAI_SCHEDULER_QUEUE: &str = "nvidia.com/kai-scheduler-queue";
/// Annotation (user): vLLM distributed executor backend (`mp`, `ray`).
pub const VLLM_DISTRIBUTED_EXECUTOR_BACKEND: &str = "nvidia.com/vllm-distributed-executor-backend";
/// Annotation (user): enable metrics scraping.
pub const ENABLE_METRICS: &str = "nvidia.com/enable-metrics";
/// Label (controller, pods): metrics scraping enabled (`"true"` unless
/// [`ENABLE_METRICS`] is `"false"`).
pub const METRICS_ENABLED: &str = "nvidia.com/metrics-enabled";
/// Label (controller, pods and Services): Kubernetes discovery enabled, `"true"` (beside
/// [`DYNAMO_DISCOVERY_BACKEND`] `kubernetes` as a label).
pub const DYNAMO_DISCOVERY_ENABLED: &str = "nvidia.com/dynamo-discovery-enabled";
/// Annotation (controller, pods): node label key the topology controller copies to pods.
pub const TOPOLOGY_LABEL_KEY: &str = "nvidia.com/topology-label-key";
/// Annotation (controller, pods): the Grove ClusterTopology the topology controller reads.
pub const TOPOLOGY_CLUSTER_TOPOLOGY_NAME: &str = "nvidia.com/topology-cluster-topology-name";
/// Annotation (controller, EPP pods on the component pathway): Istio sidecar injection,
/// `"false"` unless the component's pod template sets it.
pub const ISTIO_SIDECAR_INJECT: &str = "sidecar.istio.io/inject";
/// Annotation (defaulting webhook): operator version that admitted the object.
pub const DYNAMO_OPERATOR_ORIGIN_VERSION: &str = "nvidia.com/dynamo-operator-origin-version";
/// The graph's metadata annotations both pathways copy onto every pod template (component) or
/// clique (Grove) that does not set them.
pub const PROPAGATED_ANNOTATIONS: [&str; 5] = [
    ENABLE_METRICS,
    DYNAMO_DISCOVERY_BACKEND,
    DYNAMO_KUBE_DISCOVERY_MODE,
    DYNAMO_OPERATOR_ORIGIN_VERSION,
    VLLM_DISTRIBUTED_EXECUTOR_BACKEND,
];

/// Label/annotation (controller): automatic checkpoint marker.
pub const DYNAMO_AUTO_CHECKPOINT: &str = "nvidia.com/dynamo-auto-checkpoint";
/// Annotation (controller): deletion policy of an automatic checkpoint.
pub const CHECKPOINT_DELETION_POLICY: &str = "nvidia.com/dynamo-checkpoint-deletion-policy";
/// Annotation (controller): restore-candidate metadata.
pub const CHECKPOINT_RESTORE_CANDIDATE: &str = "nvidia.com/dynamo-checkpoint-restore-candidate";
/// Annotation (controller): checkpoint name.
pub const CHECKPOINT_NAME: &str = "nvidia.com/dynamo-checkpoint-name";
/// Annotation (controller): checkpoint startup policy.
pub const CHECKPOINT_STARTUP_POLICY: &str = "nvidia.com/dynamo-checkpoint-startup-policy";

/// Env (operator default on the `main` container of worker, prefill and decode components):
/// base port of the forward-pass metrics publisher, [`FORWARDPASS_METRIC_BASE_PORT`].
pub const ENV_FORWARDPASS_METRIC_PORT: &str = "DYN_FORWARDPASS_METRIC_PORT";
/// Base port of the forward-pass metrics publisher (each engine rank adds its index). Only the
/// env var carries it: no container port is declared for it.
pub const FORWARDPASS_METRIC_BASE_PORT: i32 = 20380;

/// ServiceAccount of planner pods.
pub const PLANNER_SERVICE_ACCOUNT: &str = "planner-serviceaccount";
/// ServiceAccount of EPP pods.
pub const EPP_SERVICE_ACCOUNT: &str = "epp-serviceaccount";
/// Dynamo namespace of components with `globalDynamoNamespace`.
pub const GLOBAL_DYNAMO_NAMESPACE: &str = "dynamo";

/// Label (controller): on the pods of a component with `modelRef`, [`base_model_hash`] of the
/// base model's name; the headless model Service selects it.
pub const DYNAMO_BASE_MODEL_HASH: &str = "nvidia.com/dynamo-base-model-hash";
/// Annotation (controller): on the pods of a component with `modelRef`, the base model's name
/// as written (the label carries only its hash).
pub const DYNAMO_BASE_MODEL: &str = "nvidia.com/dynamo-base-model";

/// Label (controller): on every headless model Service, [`MANAGED_BY_DYNAMO_OPERATOR`] (as upstream
/// labels them; the `app.kubernetes.io/managed-by` label of other children is a different key).
pub const MANAGED_BY: &str = "nvidia.com/managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGED_BY_DYNAMO_OPERATOR: &str = OPERATOR_NAME;
/// The operator's name: its own field manager, event reporter, `app.kubernetes.io/name` of the
/// objects it makes for itself, and the managed-by label values of its children.
pub const OPERATOR_NAME: &str = "dynamo-operator";
/// Label (Kubernetes recommended): the application's name.
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// Label (Kubernetes recommended): the tool that manages the object ([`OPERATOR_NAME`] on ours).
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Prefix of the headless model Service's name: `dynamo-model-<`[`base_model_hash`]`>`.
pub const MODEL_SERVICE_PREFIX: &str = "dynamo-model-";
/// Label (user, ServiceAccounts): `"true"` marks the account pods of the component pathway run as
/// when nothing else names one.
pub const DYNAMO_COMPONENT_POD: &str = "nvidia.com/dynamo-component-pod";

/// The name of the headless model Service of the base model `name`:
/// `dynamo-model-<8 hex digits>` (upstream's `GenerateServiceName`; the name depends on the model
/// name only, so every graph of a namespace serving the model finds the same Service).
pub fn model_service_name(name: &str) -> String {
    format!("{MODEL_SERVICE_PREFIX}{}", base_model_hash(name))
}

/// The label value identifying a base model: the first 8 hex digits of SHA-256 of its name (a
/// valid label value whatever the name's length and characters), as upstream computes it.
pub fn base_model_hash(name: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(name.as_bytes()))[..8].to_string()
}

/// The base model of a component with a non-empty `modelRef`: its label and annotation.
pub fn base_model(model_ref: Option<&crate::common::ModelReference>) -> Option<(String, String)> {
    let model = model_ref.filter(|m| !m.name.is_empty())?;
    Some((base_model_hash(&model.name), model.name.clone()))
}

/// The Dynamo runtime namespace of a component: `{namespace}-{dgd name, dots replaced by '-'}`,
/// or [`GLOBAL_DYNAMO_NAMESPACE`].
pub fn dynamo_namespace(global: bool, k8s_namespace: &str, dgd_name: &str) -> String {
    if global {
        GLOBAL_DYNAMO_NAMESPACE.to_string()
    } else {
        format!("{k8s_namespace}-{}", dgd_name.replace('.', "-"))
    }
}
