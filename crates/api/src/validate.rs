//! Validation that needs more than one field, or knowledge of the cluster: the third layer,
//! after the OpenAPI schema and the CEL rules the apiserver enforces.
//!
//! Reconcilers call [`validate()`] at the start of every reconcile. A failure is an
//! [`InvalidSpec`] listing every violation with its field path and rule; the caller sets
//! `Ready=False`, reason [`REASON_INVALID_SPEC`], with [`InvalidSpec`]'s message.
//!
//! The rules are exposed through [`garde::Validate`] (with [`ValidationContext`] as context), so
//! a `garde::Report` with exact paths is available too; [`InvalidSpec`] adds a stable rule code
//! per violation.

use crate::checkpoint::DynamoCheckpointSpec;
use crate::dcd::DynamoComponentDeployment;
use crate::labels;
use crate::metadata::{self, TOTAL_ANNOTATION_SIZE_LIMIT, quoted};
use crate::runtime_version::RuntimeVersion;
use crate::scaling_adapter::DynamoGraphDeploymentScalingAdapter;
use crate::v1beta1::{
    ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment,
    DynamoGraphDeploymentSpec, GpuMemoryServiceMode, MAIN_CONTAINER_NAME, ROLE_LEADER, ROLE_WORKER,
};
use crate::{DynamoCheckpoint, common::RestartStrategyType};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::fmt;

/// Condition reason reconcilers set (with `Ready=False`) when [`validate()`] fails.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

/// Message of [`Rule::GroveOnly`].
const GROVE_ONLY: &str = "is only supported on the Grove pathway";
/// Message of [`Rule::Unsupported`], followed by what is missing.
const UNSUPPORTED: &str = "is not supported by this operator version";

/// The workload pathway a DynamoGraphDeployment uses (the `nvidia.com/workload-provider`
/// record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// DynamoComponentDeployments (Deployments, LeaderWorkerSets).
    Component,
    /// One Grove PodCliqueSet.
    Grove,
}

impl Provider {
    /// Parses the `nvidia.com/workload-provider` annotation value.
    pub fn from_annotation(value: &str) -> Option<Self> {
        match value {
            labels::PROVIDER_COMPONENT => Some(Self::Component),
            labels::PROVIDER_GROVE => Some(Self::Grove),
            _ => None,
        }
    }
}

/// What validation knows beyond the object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationContext {
    /// The selected pathway; `None` when not decided yet (pathway-specific rules are skipped).
    pub provider: Option<Provider>,
}

impl ValidationContext {
    /// The context recorded on the object: the provider annotation, if any.
    pub fn of(dgd: &DynamoGraphDeployment) -> Self {
        let provider = dgd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::WORKLOAD_PROVIDER))
            .and_then(|v| Provider::from_annotation(v));
        Self { provider }
    }
}

/// The rule a violation breaks. [`Rule::code`] is stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Component names are unique, case-insensitively.
    DuplicateComponentName,
    /// At most one component has type epp.
    MultipleEpp,
    /// The pod template has a container named main.
    MainContainerRequired,
    /// The main container has an image.
    MainContainerImage,
    /// Positive replicas are at least minAvailable.
    ReplicasBelowMinAvailable,
    /// Fields that only the Grove pathway renders, on a graph (or a DynamoComponentDeployment)
    /// of the component pathway.
    GroveOnly,
    /// A field this operator version does not act on: refused rather than accepted and ignored.
    Unsupported,
    /// frontendSidecar names a container of the pod template.
    FrontendSidecarContainer,
    /// dynamoSidecar names a restartable init container, on a worker-class component without
    /// multinode, checkpoint, GMS or failover.
    DynamoSidecar,
    /// runtimeVersionOverride is a semantic version.
    RuntimeVersionOverride,
    /// multinode is only for worker, prefill and decode components.
    MultinodeComponentType,
    /// roles of a multinode component: one leader (1 replica), one worker (nodeCount-1).
    Roles,
    /// failover needs gpuMemoryService with the same mode, intra-pod, on vLLM.
    Failover,
    /// gpuMemoryService is intra-pod, on a main container with GPUs, in a pod of a graph.
    GpuMemoryService,
    /// Container names referenced by GMS and checkpoint settings exist, once each.
    ContainerReference,
    /// eppConfig only with type epp.
    EppConfigType,
    /// `compilationCache.mountPath` is set when the backend has no default cache path.
    CompilationCacheMountPath,
    /// A component topology constraint needs spec.topologyConstraint.
    TopologyInheritance,
    /// restart.strategy.order lists the components exactly once (sequential only).
    RestartOrder,
    /// Component groups: names unique and distinct from component names, replicas at least 1,
    /// members existing single-node components, each in one group (upstream's admission rules).
    ComponentGroupMembers,
    /// Exactly one of job and capture.
    CheckpointJob,
    /// A reference to a component of the graph resolves.
    UnknownComponent,
    /// Label keys the children carry are qualified names (Kubernetes' rule).
    LabelKey,
    /// Label values the children carry are valid label values (Kubernetes' rule).
    LabelValue,
    /// Annotation keys the children carry are qualified names (Kubernetes' rule).
    AnnotationKey,
    /// The annotations a child carries total at most 256 KiB (Kubernetes' rule).
    AnnotationsSize,
}

impl Rule {
    /// Stable identifier of the rule.
    pub fn code(self) -> &'static str {
        match self {
            Self::DuplicateComponentName => "duplicate-component-name",
            Self::MultipleEpp => "multiple-epp",
            Self::MainContainerRequired => "main-container-required",
            Self::MainContainerImage => "main-container-image",
            Self::ReplicasBelowMinAvailable => "replicas-below-min-available",
            Self::GroveOnly => "grove-only",
            Self::Unsupported => "unsupported",
            Self::FrontendSidecarContainer => "frontend-sidecar-container",
            Self::DynamoSidecar => "dynamo-sidecar",
            Self::RuntimeVersionOverride => "runtime-version-override",
            Self::MultinodeComponentType => "multinode-component-type",
            Self::Roles => "roles",
            Self::Failover => "failover",
            Self::GpuMemoryService => "gpu-memory-service",
            Self::ContainerReference => "container-reference",
            Self::EppConfigType => "epp-config-type",
            Self::CompilationCacheMountPath => "compilation-cache-mount-path",
            Self::TopologyInheritance => "topology-inheritance",
            Self::RestartOrder => "restart-order",
            Self::ComponentGroupMembers => "component-group-members",
            Self::CheckpointJob => "checkpoint-job",
            Self::UnknownComponent => "unknown-component",
            Self::LabelKey => "label-key",
            Self::LabelValue => "label-value",
            Self::AnnotationKey => "annotation-key",
            Self::AnnotationsSize => "annotations-size",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Path of the offending field from the object root, e.g. `spec.components[1].replicas`.
    pub field: String,
    /// The rule.
    pub rule: Rule,
    /// What is wrong, e.g. `must be ≥ minAvailable (2)`.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A spec that must not be acted on. Displays as `field: message; field: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec {
    /// Every violation, in field order.
    pub violations: Vec<Violation>,
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.violations.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

impl InvalidSpec {
    /// The reason for the Ready condition.
    pub fn reason(&self) -> &'static str {
        REASON_INVALID_SPEC
    }
}

/// Validates a DynamoGraphDeployment with the context recorded on it
/// ([`ValidationContext::of`]).
pub fn validate(dgd: &DynamoGraphDeployment) -> Result<(), InvalidSpec> {
    validate_with(dgd, &ValidationContext::of(dgd))
}

/// Validates a DynamoGraphDeployment with an explicit context.
pub fn validate_with(
    dgd: &DynamoGraphDeployment,
    ctx: &ValidationContext,
) -> Result<(), InvalidSpec> {
    let mut v = Collector::new("spec");
    graph_spec(&dgd.spec, ctx, &mut v);
    let mut violations = v.violations();
    violations.extend(alpha_ingresses(dgd));
    if violations.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec { violations })
    }
}

/// A v1alpha1 graph's enabled `spec.services.<name>.ingress`, which v1beta1 cannot say (the
/// conversion keeps it in an annotation) and no Ingress or VirtualService renders: refused,
/// named by its v1alpha1 path.
fn alpha_ingresses(dgd: &DynamoGraphDeployment) -> Vec<Violation> {
    crate::conversion::preserved_alpha_ingresses(dgd)
        .into_iter()
        .map(|name| Violation {
            field: format!("spec.services.{name}.ingress"),
            rule: Rule::Unsupported,
            message: format!("{UNSUPPORTED} (no Ingress or VirtualService is rendered)"),
        })
        .collect()
}

/// Validates a DynamoComponentDeployment (component pathway rules).
pub fn validate_dcd(dcd: &DynamoComponentDeployment) -> Result<(), InvalidSpec> {
    let ctx = ValidationContext {
        provider: Some(Provider::Component),
    };
    let mut v = Collector::new("spec");
    component(
        &dcd.spec.component,
        &ctx,
        None,
        dcd.spec.backend_framework,
        &mut v,
    );
    // The pods claim the graph's ResourceClaimTemplate; a standalone DCD has none.
    if dcd.spec.component.intra_pod_gms().is_some() && dcd.graph_name().is_none() {
        v.at(&[Seg::Key("experimental"), Seg::Key("gpuMemoryService")])
            .push(
                Rule::GpuMemoryService,
                format!(
                    "requires the DynamoComponentDeployment to belong to a DynamoGraphDeployment \
                     (label {} or an owner reference; the graph creates the GPU ResourceClaimTemplate)",
                    labels::DYNAMO_GRAPH_DEPLOYMENT_NAME
                ),
            );
    }
    v.finish()
}

/// Validates a DynamoGraphDeploymentScalingAdapter against its target graph: the component
/// must exist.
pub fn validate_scaling_adapter(
    adapter: &DynamoGraphDeploymentScalingAdapter,
    dgd: &DynamoGraphDeployment,
) -> Result<(), InvalidSpec> {
    let mut v = Collector::new("spec");
    let target = &adapter.spec.dgd_ref.component_name;
    if dgd.spec.component(target).is_none() {
        v.at(&[Seg::Key("dgdRef"), Seg::Key("componentName")]).push(
            Rule::UnknownComponent,
            format!(
                "component {target} not found in DynamoGraphDeployment {}",
                adapter.spec.dgd_ref.name
            ),
        );
    }
    v.finish()
}

/// Validates a DynamoCheckpoint.
pub fn validate_checkpoint(ckpt: &DynamoCheckpoint) -> Result<(), InvalidSpec> {
    let mut v = Collector::new("spec");
    checkpoint_spec(&ckpt.spec, &mut v);
    v.finish()
}

fn checkpoint_spec(spec: &DynamoCheckpointSpec, v: &mut Collector) {
    let (field, job) = match (&spec.job, &spec.capture) {
        (Some(job), None) => ("job", job),
        (None, Some(job)) => ("capture", job),
        (Some(_), Some(_)) => {
            v.at(&[Seg::Key("capture")])
                .push(Rule::CheckpointJob, "must not be set together with job");
            return;
        }
        (None, None) => {
            v.at(&[Seg::Key("job")])
                .push(Rule::CheckpointJob, "is required");
            return;
        }
    };
    pod_metadata(
        job.pod_template_spec.metadata.as_ref(),
        &[Seg::Key(field), Seg::Key("podTemplateSpec")],
        None,
        v,
    );
    let target = job
        .target_container_name
        .as_deref()
        .unwrap_or(MAIN_CONTAINER_NAME);
    if find_container(Some(&job.pod_template_spec), target).is_none() {
        v.at(&[Seg::Key(field), Seg::Key("targetContainerName")])
            .push(
                Rule::ContainerReference,
                format!("container {target} not found in podTemplateSpec.spec.containers"),
            );
    }
}

// --- the DGD rules -----------------------------------------------------------------------

fn graph_spec(spec: &DynamoGraphDeploymentSpec, ctx: &ValidationContext, v: &mut Collector) {
    // Labels and annotations every child carries (Kubernetes' rules; the apiserver would
    // refuse every child write instead).
    let annotations = [Seg::Key("annotations")];
    annotation_keys(&spec.annotations, &annotations, v);
    let size = metadata::annotations_size(&spec.annotations);
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        v.at(&annotations).push(
            Rule::AnnotationsSize,
            format!(
                "must total at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes (keys and values), has {size}"
            ),
        );
    }
    label_entries(&spec.labels, &[Seg::Key("labels")], v);

    // Names and epp count (also CEL; repeated so that objects built in code are checked).
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut epp: Option<usize> = None;
    for (i, c) in spec.components.iter().enumerate() {
        let key = c.name.to_ascii_lowercase();
        if let Some(first) = seen.get(&key) {
            v.at(&[Seg::Key("components"), Seg::Index(i), Seg::Key("name")])
                .push(
                    Rule::DuplicateComponentName,
                    format!(
                        "duplicates components[{first}].name ({}), case-insensitively",
                        spec.components[*first].name
                    ),
                );
        } else {
            seen.insert(key, i);
        }
        if c.r#type == Some(ComponentType::Epp) {
            if let Some(first) = epp {
                v.at(&[Seg::Key("components"), Seg::Index(i), Seg::Key("type")])
                    .push(
                        Rule::MultipleEpp,
                        format!(
                            "at most one component may have type epp (components[{first}] has it)"
                        ),
                    );
            } else {
                epp = Some(i);
            }
        }
    }

    for (i, c) in spec.components.iter().enumerate() {
        let mut at = v.nested(&[Seg::Key("components"), Seg::Index(i)]);
        component(c, ctx, Some(spec), spec.backend_framework, &mut at);
        v.absorb(at);
    }

    grove_only_graph(spec, ctx, v);

    if let Some(strategy) = spec.restart.as_ref().and_then(|r| r.strategy.as_ref()) {
        let order_path = [Seg::Key("restart"), Seg::Key("strategy"), Seg::Key("order")];
        if strategy.r#type == Some(RestartStrategyType::Parallel) {
            if !strategy.order.is_empty() {
                v.at(&order_path)
                    .push(Rule::RestartOrder, "must not be set for parallel restarts");
            }
        } else if !strategy.order.is_empty() {
            let mut listed: BTreeMap<&str, usize> = BTreeMap::new();
            for (k, name) in strategy.order.iter().enumerate() {
                let path = [order_path.as_slice(), &[Seg::Index(k)]].concat();
                if spec.component(name).is_none() {
                    v.at(&path)
                        .push(Rule::RestartOrder, format!("unknown component {name}"));
                } else if let Some(first) = listed.insert(name, k) {
                    v.at(&path).push(
                        Rule::RestartOrder,
                        format!("duplicates order[{first}] ({name})"),
                    );
                }
            }
            let missing: Vec<&str> = spec
                .components
                .iter()
                .map(|c| c.name.as_str())
                .filter(|n| !listed.contains_key(n))
                .collect();
            if !missing.is_empty() {
                v.at(&order_path).push(
                    Rule::RestartOrder,
                    format!(
                        "must list every component (missing: {})",
                        missing.join(", ")
                    ),
                );
            }
        }
    }

    component_groups(spec, v);
}

/// `spec.experimental.componentGroups` (upstream's admission rules): group names unique
/// (case-insensitively) and distinct from component names; members existing components, each
/// in one group, single-node, not scaled to zero, without their own topology constraint or
/// scaling adapter, and without a provider override when they would render a scaling group of
/// their own. A group's `scalingAdapter` is refused: no adapter is created for a group.
fn component_groups(spec: &DynamoGraphDeploymentSpec, v: &mut Collector) {
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut member_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (g, group) in spec.component_groups().iter().enumerate() {
        let at = |rest: &[Seg]| {
            [
                &[
                    Seg::Key("experimental"),
                    Seg::Key("componentGroups"),
                    Seg::Index(g),
                ][..],
                rest,
            ]
            .concat()
        };
        let name = at(&[Seg::Key("name")]);
        if let Some(first) = names.insert(group.name.to_ascii_lowercase(), g) {
            v.at(&name).push(
                Rule::ComponentGroupMembers,
                format!("duplicates componentGroups[{first}].name, case-insensitively"),
            );
        }
        if spec
            .components
            .iter()
            .any(|c| c.name.eq_ignore_ascii_case(&group.name))
        {
            v.at(&name).push(
                Rule::ComponentGroupMembers,
                "must not shadow a component name",
            );
        }
        if group.replicas < 1 {
            v.at(&at(&[Seg::Key("replicas")]))
                .push(Rule::ComponentGroupMembers, "must be at least 1");
        }
        if group.scaling_adapter.is_some() {
            v.at(&at(&[Seg::Key("scalingAdapter")])).push(
                Rule::Unsupported,
                format!("{UNSUPPORTED} (no scaling adapter is created for a component group)"),
            );
        }
        if group.components.is_empty() {
            v.at(&at(&[Seg::Key("components")])).push(
                Rule::ComponentGroupMembers,
                "must contain at least one component",
            );
        }
        for (k, member) in group.components.iter().enumerate() {
            let path = at(&[Seg::Key("components"), Seg::Index(k), Seg::Key("name")]);
            let Some(c) = spec.component(&member.name) else {
                v.at(&path).push(
                    Rule::ComponentGroupMembers,
                    format!("unknown component {}", member.name),
                );
                continue;
            };
            if let Some(other) = member_of.insert(&member.name, &group.name) {
                v.at(&path).push(
                    Rule::ComponentGroupMembers,
                    format!("is already a member of component group {other}"),
                );
            }
            for problem in group_member_problems(c) {
                v.at(&path).push(Rule::ComponentGroupMembers, problem);
            }
        }
    }
}

/// Why component `c` cannot be a member of a component group (upstream's messages).
fn group_member_problems(c: &DynamoComponentDeploymentSharedSpec) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if c.is_multinode() {
        problems.push("component groups do not support multinode components");
    }
    if c.replicas == Some(0) {
        problems.push("component groups do not support members with replicas set to 0");
    }
    if c.topology_constraint.is_some() {
        problems.push("component groups do not support component-level topology constraints");
    }
    if c.scaling_adapter.is_some() {
        problems.push(
            "component groups scale their members together; a member cannot have its own scalingAdapter",
        );
    }
    if c.uses_pcsg() && c.provider_override.is_some() {
        problems.push("component groups do not support providerOverride on PCSG-backed components");
    }
    problems
}

/// `framework`: the graph's (or the DCD's) `backendFramework`; with `graph` unknown, a backend
/// that cannot be determined is not held against the component.
fn component(
    c: &DynamoComponentDeploymentSharedSpec,
    ctx: &ValidationContext,
    graph: Option<&DynamoGraphDeploymentSpec>,
    framework: Option<crate::BackendFramework>,
    v: &mut Collector,
) {
    let pod = c.pod_template.as_ref();
    let containers = pod
        .and_then(|p| p.spec.as_ref())
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();

    // The pod template's labels and annotations go onto the children (and the pods), the
    // graph's annotations with them.
    pod_metadata(
        pod.and_then(|p| p.metadata.as_ref()),
        &[Seg::Key("podTemplate")],
        graph.map(|g| &g.annotations),
        v,
    );

    // The main container (upstream's admission rule for new components).
    match containers
        .iter()
        .position(|k| k.name == MAIN_CONTAINER_NAME)
    {
        None => v
            .at(&[
                Seg::Key("podTemplate"),
                Seg::Key("spec"),
                Seg::Key("containers"),
            ])
            .push(
                Rule::MainContainerRequired,
                "must include a container named main",
            ),
        Some(j) => {
            if containers[j].image.as_deref().is_none_or(str::is_empty) {
                v.at(&[
                    Seg::Key("podTemplate"),
                    Seg::Key("spec"),
                    Seg::Key("containers"),
                    Seg::Index(j),
                    Seg::Key("image"),
                ])
                .push(Rule::MainContainerImage, "must not be empty");
            }
        }
    }

    // minAvailable ≤ replicas (replicas 0 is scale-to-zero).
    if let Some(min) = c.min_available {
        let replicas = c.replicas.unwrap_or(1);
        if replicas != 0 && replicas < min {
            if c.replicas.is_some() {
                v.at(&[Seg::Key("replicas")]).push(
                    Rule::ReplicasBelowMinAvailable,
                    format!("must be ≥ minAvailable ({min})"),
                );
            } else {
                v.at(&[Seg::Key("minAvailable")]).push(
                    Rule::ReplicasBelowMinAvailable,
                    format!("must be ≤ replicas (1 when unset), got {min}"),
                );
            }
        }
    }
    grove_only_component(c, ctx, v);

    if c.epp_config.is_some() && c.r#type != Some(ComponentType::Epp) {
        v.at(&[Seg::Key("eppConfig")])
            .push(Rule::EppConfigType, "may only be set when type is epp");
    }

    if let Some(cache) = &c.compilation_cache
        && cache.mount_path.as_deref().is_none_or(str::is_empty)
        && c.r#type.is_none_or(ComponentType::is_worker)
    {
        // Only vLLM has a default path; a mismatch of backends is refused elsewhere.
        use crate::backend::Backend;
        let named = match Backend::detect(c, framework) {
            Ok(b) if b.compilation_cache_path().is_some() => None,
            Err(_) => None,
            Ok(Backend::None) => graph.is_some().then_some("unknown"),
            Ok(b) => b.framework().map(crate::BackendFramework::as_str),
        };
        if let Some(named) = named {
            v.at(&[Seg::Key("compilationCache"), Seg::Key("mountPath")]).push(
                Rule::CompilationCacheMountPath,
                format!(
                    "is required for backend framework {named} (no default available; only vllm has one)"
                ),
            );
        }
    }

    if let Some(name) = &c.frontend_sidecar
        && !containers.iter().any(|k| &k.name == name)
    {
        v.at(&[Seg::Key("frontendSidecar")]).push(
            Rule::FrontendSidecarContainer,
            format!("container {name} not found in podTemplate.spec.containers"),
        );
    }

    if let Some(value) = c
        .runtime_version_override
        .as_deref()
        .filter(|o| !o.is_empty())
        && let Err(e) = RuntimeVersion::parse(value)
    {
        v.at(&[Seg::Key("runtimeVersionOverride")])
            .push(Rule::RuntimeVersionOverride, e.to_string());
    }

    let worker_class = c.r#type.is_none_or(ComponentType::is_worker);
    if let Some(name) = &c.dynamo_sidecar {
        let path = [Seg::Key("dynamoSidecar")];
        let init = pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|inits| inits.iter().find(|k| &k.name == name));
        let experimental = c.experimental.as_ref();
        if !c.r#type.is_some_and(ComponentType::is_worker) {
            v.at(&path).push(
                Rule::DynamoSidecar,
                "is only supported for worker, prefill and decode components",
            );
        } else if init.is_none_or(|k| k.restart_policy.as_deref() != Some("Always")) {
            v.at(&path).push(
                Rule::DynamoSidecar,
                format!("must name an init container with restartPolicy Always (no such init container {name})"),
            );
        } else if c.multinode.is_some() {
            v.at(&path)
                .push(Rule::DynamoSidecar, "cannot be combined with multinode");
        } else if experimental.is_some_and(|e| e.checkpoint.as_ref().is_some_and(|k| k.enabled)) {
            v.at(&path).push(
                Rule::DynamoSidecar,
                "cannot be combined with experimental.checkpoint",
            );
        } else if experimental
            .is_some_and(|e| e.gpu_memory_service.is_some() || e.failover.is_some())
        {
            v.at(&path).push(
                Rule::DynamoSidecar,
                "cannot be combined with experimental.gpuMemoryService or failover",
            );
        }
    }

    if c.multinode.is_some() && !worker_class {
        v.at(&[Seg::Key("multinode")]).push(
            Rule::MultinodeComponentType,
            "is only supported for worker, prefill and decode components",
        );
    }

    if !c.roles.is_empty() {
        match &c.multinode {
            None => v
                .at(&[Seg::Key("roles")])
                .push(Rule::Roles, "requires multinode"),
            Some(m) => {
                let count = |n: &str| c.roles.iter().filter(|r| r.name == n).count();
                if count(ROLE_LEADER) != 1 || count(ROLE_WORKER) != 1 || c.roles.len() != 2 {
                    v.at(&[Seg::Key("roles")]).push(
                        Rule::Roles,
                        "must contain exactly one leader and one worker role",
                    );
                }
                for (k, role) in c.roles.iter().enumerate() {
                    let want = match role.name.as_str() {
                        ROLE_LEADER => 1,
                        ROLE_WORKER => m.node_count - 1,
                        _ => continue,
                    };
                    if let Some(got) = role.replicas
                        && got != want
                    {
                        v.at(&[Seg::Key("roles"), Seg::Index(k), Seg::Key("replicas")])
                            .push(
                                Rule::Roles,
                                format!("must be {want} for role {}", role.name),
                            );
                    }
                    if role.pod_template.is_some() {
                        v.at(&[Seg::Key("roles"), Seg::Index(k), Seg::Key("podTemplate")])
                            .push(
                                Rule::Unsupported,
                                format!("{UNSUPPORTED} (no component type renders a role's own pod template)"),
                            );
                    }
                }
            }
        }
    }

    if let Some(experimental) = &c.experimental {
        let exp = Seg::Key("experimental");
        let gms = experimental.gpu_memory_service.as_ref();
        gpu_memory_service(c, containers, v);
        if let Some(failover) = &experimental.failover {
            failover_spec(c, failover, gms, framework, v);
        }
        if let Some(ckpt) = &experimental.checkpoint {
            let target = ckpt
                .target_container_name
                .as_deref()
                .unwrap_or(MAIN_CONTAINER_NAME);
            if ckpt.enabled && !containers.iter().any(|c| c.name == target) {
                v.at(&[exp, Seg::Key("checkpoint"), Seg::Key("targetContainerName")])
                    .push(
                        Rule::ContainerReference,
                        format!("container {target} not found in podTemplate.spec.containers"),
                    );
            }
            if let Some(template) = ckpt.job.as_ref().and_then(|j| j.pod_template.as_ref()) {
                pod_metadata(
                    template.metadata.as_ref(),
                    &[
                        exp,
                        Seg::Key("checkpoint"),
                        Seg::Key("job"),
                        Seg::Key("podTemplate"),
                    ],
                    None,
                    v,
                );
            }
            if ckpt
                .job
                .as_ref()
                .is_some_and(|j| !j.gms_client_containers.is_empty())
            {
                let at = v.at(&[
                    exp,
                    Seg::Key("checkpoint"),
                    Seg::Key("job"),
                    Seg::Key("gmsClientContainers"),
                ]);
                if gms.is_none() {
                    at.push(
                        Rule::ContainerReference,
                        "requires experimental.gpuMemoryService",
                    );
                } else {
                    // The capture pod is the component's pod without the GPU memory service.
                    at.push(
                        Rule::Unsupported,
                        format!("{UNSUPPORTED} (the checkpoint capture pod gets no GPU memory service wiring)"),
                    );
                }
            }
        }
    }

    if let Some(graph) = graph
        && c.topology_constraint.is_some()
        && graph.topology_constraint.is_none()
    {
        v.at(&[Seg::Key("topologyConstraint")]).push(
            Rule::TopologyInheritance,
            "requires spec.topologyConstraint (the clusterTopologyName it inherits)",
        );
    }
}

/// Graph fields only the Grove pathway renders, refused on the component pathway (rather than
/// accepted and ignored): the PodCliqueSet override, priority class and topology constraint,
/// and the KV transfer policy (its pod wiring is rendered into cliques only).
fn grove_only_graph(spec: &DynamoGraphDeploymentSpec, ctx: &ValidationContext, v: &mut Collector) {
    if ctx.provider != Some(Provider::Component) {
        return;
    }
    let kv_transfer = spec
        .experimental
        .as_ref()
        .is_some_and(|e| e.kv_transfer_policy.is_some());
    let fields: [(&[Seg], bool); 5] = [
        (
            &[Seg::Key("providerOverride")],
            spec.provider_override.is_some(),
        ),
        (
            &[Seg::Key("priorityClassName")],
            spec.priority_class_name.is_some(),
        ),
        (
            &[Seg::Key("topologyConstraint")],
            spec.topology_constraint.is_some(),
        ),
        (
            &[Seg::Key("experimental"), Seg::Key("kvTransferPolicy")],
            kv_transfer,
        ),
        (
            &[Seg::Key("experimental"), Seg::Key("componentGroups")],
            !spec.component_groups().is_empty(),
        ),
    ];
    for (path, set) in fields {
        if set {
            v.at(path).push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
}

/// Component fields only the Grove pathway renders, refused on the component pathway (graphs
/// recorded as `component`, and every DynamoComponentDeployment): Grove provider overrides,
/// `minAvailable`, the topology constraint and a forced scaling group.
fn grove_only_component(
    c: &DynamoComponentDeploymentSharedSpec,
    ctx: &ValidationContext,
    v: &mut Collector,
) {
    if ctx.provider != Some(Provider::Component) {
        return;
    }
    let fields: [(&[Seg], bool); 4] = [
        (
            &[Seg::Key("providerOverride")],
            c.provider_override.is_some(),
        ),
        (&[Seg::Key("minAvailable")], c.min_available.is_some()),
        (
            &[Seg::Key("topologyConstraint")],
            c.topology_constraint.is_some(),
        ),
        (
            &[
                Seg::Key("experimental"),
                Seg::Key("grove"),
                Seg::Key("forceScalingGroup"),
            ],
            c.is_grove_scaling_group_forced(),
        ),
    ];
    for (path, set) in fields {
        if set {
            v.at(path).push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
    for (k, role) in c.roles.iter().enumerate() {
        if role.provider_override.is_some() {
            v.at(&[
                Seg::Key("roles"),
                Seg::Index(k),
                Seg::Key("providerOverride"),
            ])
            .push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
}

/// `experimental.gpuMemoryService`: intra-pod only (inter-pod is not supported), GPUs on `main`
/// (the claim template's count; a component without GPUs would reference a template nobody
/// creates), client containers that exist, once each.
fn gpu_memory_service(
    c: &DynamoComponentDeploymentSharedSpec,
    containers: &[Container],
    v: &mut Collector,
) {
    let Some(g) = c
        .experimental
        .as_ref()
        .and_then(|e| e.gpu_memory_service.as_ref())
    else {
        return;
    };
    let path = [Seg::Key("experimental"), Seg::Key("gpuMemoryService")];
    if g.mode == Some(GpuMemoryServiceMode::InterPod) {
        v.at(&[path.as_slice(), &[Seg::Key("mode")]].concat()).push(
            Rule::GpuMemoryService,
            "InterPod is not supported by this operator version (only IntraPod)",
        );
        return;
    }
    // As upstream (GPU memory service with snapshots is disabled there): the capture pod would
    // lose the memory service, and the restore would not find it.
    if c.experimental
        .as_ref()
        .and_then(|e| e.checkpoint.as_ref())
        .is_some_and(|k| k.enabled)
    {
        v.at(&path).push(
            Rule::Unsupported,
            format!("{UNSUPPORTED} together with experimental.checkpoint"),
        );
    }
    match crate::gpu::main_container_gpus(c) {
        Ok(0) => v.at(&path).push(
            Rule::GpuMemoryService,
            "requires GPUs on the main container (resources limits or requests of nvidia.com/gpu or another GPU resource)",
        ),
        Ok(_) => {}
        Err(e) => v.at(&path).push(Rule::GpuMemoryService, e),
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, name) in g.extra_client_containers.iter().enumerate() {
        let at = [
            path.as_slice(),
            &[Seg::Key("extraClientContainers"), Seg::Index(k)],
        ]
        .concat();
        if let Some(first) = seen.insert(name, k) {
            v.at(&at).push(
                Rule::ContainerReference,
                format!("duplicates extraClientContainers[{first}] ({name})"),
            );
        } else if !containers.iter().any(|c| &c.name == name) {
            v.at(&at).push(
                Rule::ContainerReference,
                format!("container {name} not found in podTemplate.spec.containers"),
            );
        }
    }
}

/// `experimental.failover`: gpuMemoryService in the same mode, intra-pod only, on vLLM (the
/// engines' settings are vLLM's; upstream 1.5 refuses other backends).
fn failover_spec(
    c: &DynamoComponentDeploymentSharedSpec,
    failover: &crate::v1beta1::FailoverSpec,
    gms: Option<&crate::v1beta1::GpuMemoryServiceSpec>,
    framework: Option<crate::BackendFramework>,
    v: &mut Collector,
) {
    let path = [Seg::Key("experimental"), Seg::Key("failover")];
    let mode_of = |m: Option<GpuMemoryServiceMode>| m.unwrap_or(GpuMemoryServiceMode::IntraPod);
    let mode = mode_of(failover.mode);
    let Some(g) = gms else {
        v.at(&path)
            .push(Rule::Failover, "requires experimental.gpuMemoryService");
        return;
    };
    if mode_of(g.mode) != mode {
        v.at(&[path.as_slice(), &[Seg::Key("mode")]].concat()).push(
            Rule::Failover,
            format!("must match gpuMemoryService.mode ({:?})", mode_of(g.mode)),
        );
        return;
    }
    if mode == GpuMemoryServiceMode::InterPod {
        v.at(&[path.as_slice(), &[Seg::Key("mode")]].concat()).push(
            Rule::Failover,
            "InterPod is not supported by this operator version (only IntraPod)",
        );
        return;
    }
    use crate::backend::Backend;
    let detected = match Backend::detect(c, framework) {
        Ok(Backend::Vllm) => return,
        Ok(b) => b
            .framework()
            .map_or("none", crate::BackendFramework::as_str)
            .to_string(),
        Err(e) => e,
    };
    v.at(&path).push(
        Rule::Failover,
        format!(
            "is only supported for vLLM workers by this operator version (detected: {detected})"
        ),
    );
}

/// The labels and annotations of a pod template at `template` (its `metadata`): keys and
/// values, and the total size of its annotations together with the `inherited` ones it does not
/// override (the graph's `spec.annotations`, unless they are too large on their own).
fn pod_metadata(
    meta: Option<&ObjectMeta>,
    template: &[Seg],
    inherited: Option<&BTreeMap<String, String>>,
    v: &mut Collector,
) {
    let empty = BTreeMap::new();
    let own = meta.and_then(|m| m.annotations.as_ref()).unwrap_or(&empty);
    let annotations = [template, &[Seg::Key("metadata"), Seg::Key("annotations")]].concat();
    annotation_keys(own, &annotations, v);
    let own_size = metadata::annotations_size(own);
    let inherited = inherited
        .filter(|i| metadata::annotations_size(*i) <= TOTAL_ANNOTATION_SIZE_LIMIT)
        .unwrap_or(&empty);
    let inherited_size =
        metadata::annotations_size(inherited.iter().filter(|(k, _)| !own.contains_key(*k)));
    let size = own_size + inherited_size;
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        let with = if own_size <= TOTAL_ANNOTATION_SIZE_LIMIT {
            "together with spec.annotations "
        } else {
            ""
        };
        v.at(&annotations).push(
            Rule::AnnotationsSize,
            format!(
                "{with}must total at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes (keys and values), \
                 has {size}"
            ),
        );
    }
    if let Some(labels) = meta.and_then(|m| m.labels.as_ref()) {
        let path = [template, &[Seg::Key("metadata"), Seg::Key("labels")]].concat();
        label_entries(labels, &path, v);
    }
}

/// Kubernetes' label rules on every entry of `labels` (at `path`).
fn label_entries(labels: &BTreeMap<String, String>, path: &[Seg], v: &mut Collector) {
    for (key, value) in labels {
        if let Some(problems) = metadata::label_key_problems(key) {
            v.at(path).push(
                Rule::LabelKey,
                format!("invalid label key {}: {problems}", quoted(key)),
            );
        }
        if let Some(problems) = metadata::label_value_problems(value) {
            v.at(path).push(
                Rule::LabelValue,
                format!(
                    "invalid value {} of label {}: {problems}",
                    quoted(value),
                    quoted(key)
                ),
            );
        }
    }
}

/// Kubernetes' annotation key rule on every key of `annotations` (at `path`).
fn annotation_keys(annotations: &BTreeMap<String, String>, path: &[Seg], v: &mut Collector) {
    for key in annotations.keys() {
        if let Some(problems) = metadata::annotation_key_problems(key) {
            v.at(path).push(
                Rule::AnnotationKey,
                format!("invalid annotation key {}: {problems}", quoted(key)),
            );
        }
    }
}

fn find_container<'a>(pod: Option<&'a PodTemplateSpec>, name: &str) -> Option<&'a Container> {
    pod?.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

// --- paths and collection ----------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

struct Entry {
    path: Vec<Seg>,
    rule: Rule,
    message: String,
}

struct Collector {
    root: &'static str,
    prefix: Vec<Seg>,
    entries: Vec<Entry>,
}

struct At<'a> {
    collector: &'a mut Collector,
    path: Vec<Seg>,
}

impl At<'_> {
    fn push(self, rule: Rule, message: impl Into<String>) {
        self.collector.entries.push(Entry {
            path: self.path,
            rule,
            message: message.into(),
        });
    }
}

impl Collector {
    fn new(root: &'static str) -> Self {
        Self {
            root,
            prefix: Vec::new(),
            entries: Vec::new(),
        }
    }

    fn at(&mut self, segs: &[Seg]) -> At<'_> {
        let path = [self.prefix.as_slice(), segs].concat();
        At {
            collector: self,
            path,
        }
    }

    fn nested(&self, segs: &[Seg]) -> Collector {
        Collector {
            root: self.root,
            prefix: [self.prefix.as_slice(), segs].concat(),
            entries: Vec::new(),
        }
    }

    fn absorb(&mut self, other: Collector) {
        self.entries.extend(other.entries);
    }

    fn violations(&self) -> Vec<Violation> {
        self.entries
            .iter()
            .map(|e| Violation {
                field: render(self.root, &e.path),
                rule: e.rule,
                message: e.message.clone(),
            })
            .collect()
    }

    fn finish(self) -> Result<(), InvalidSpec> {
        let violations = self.violations();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec { violations })
        }
    }

    fn into_report(self, parent: &mut dyn FnMut() -> garde::Path, report: &mut garde::Report) {
        for e in self.entries {
            let mut path = parent();
            for seg in &e.path {
                path = match seg {
                    Seg::Key(k) => path.join(*k),
                    Seg::Index(i) => path.join(*i),
                };
            }
            report.append(path, garde::Error::new(e.message));
        }
    }
}

fn render(root: &str, path: &[Seg]) -> String {
    let mut out = root.to_string();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

// --- garde ---------------------------------------------------------------------------------

impl garde::Validate for DynamoGraphDeploymentSpec {
    type Context = ValidationContext;

    fn validate_into(
        &self,
        ctx: &Self::Context,
        parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        let mut v = Collector::new("");
        graph_spec(self, ctx, &mut v);
        v.into_report(parent, report);
    }
}

impl garde::Validate for DynamoComponentDeploymentSharedSpec {
    type Context = ValidationContext;

    fn validate_into(
        &self,
        ctx: &Self::Context,
        parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        let mut v = Collector::new("");
        component(self, ctx, None, None, &mut v);
        v.into_report(parent, report);
    }
}

impl garde::Validate for DynamoCheckpointSpec {
    type Context = ();

    fn validate_into(
        &self,
        _: &(),
        parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        let mut v = Collector::new("");
        checkpoint_spec(self, &mut v);
        v.into_report(parent, report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1beta1::ComponentType;
    use garde::Validate as _;
    use k8s_openapi::api::core::v1::PodSpec;

    fn component(name: &str, ty: ComponentType) -> DynamoComponentDeploymentSharedSpec {
        DynamoComponentDeploymentSharedSpec {
            name: name.into(),
            r#type: Some(ty),
            pod_template: Some(PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: MAIN_CONTAINER_NAME.into(),
                        image: Some("img:1".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }

    fn dgd(components: Vec<DynamoComponentDeploymentSharedSpec>) -> DynamoGraphDeployment {
        DynamoGraphDeployment::new(
            "g",
            DynamoGraphDeploymentSpec {
                components,
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_valid_graph_passes() {
        let g = dgd(vec![
            component("Frontend", ComponentType::Frontend),
            component("worker", ComponentType::Worker),
        ]);
        assert_eq!(validate(&g), Ok(()));
    }

    #[test]
    fn replicas_below_min_available_names_the_field_and_rule() {
        let mut w = component("worker", ComponentType::Worker);
        w.replicas = Some(1);
        w.min_available = Some(2);
        let g = dgd(vec![component("Frontend", ComponentType::Frontend), w]);
        let err = validate(&g).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.components[1].replicas: must be ≥ minAvailable (2)"
        );
        assert_eq!(err.violations[0].rule, Rule::ReplicasBelowMinAvailable);
        assert_eq!(err.reason(), REASON_INVALID_SPEC);
    }

    #[test]
    fn scale_to_zero_is_allowed_below_min_available() {
        let mut w = component("worker", ComponentType::Worker);
        w.replicas = Some(0);
        w.min_available = Some(2);
        assert_eq!(validate(&dgd(vec![w])), Ok(()));
    }

    #[test]
    fn duplicate_names_and_second_epp_are_reported_at_the_later_entry() {
        let g = dgd(vec![
            component("epp", ComponentType::Epp),
            component("EPP", ComponentType::Epp),
        ]);
        let err = validate(&g).unwrap_err();
        let fields: Vec<_> = err
            .violations
            .iter()
            .map(|v| (v.field.as_str(), v.rule))
            .collect();
        assert_eq!(
            fields,
            [
                ("spec.components[1].name", Rule::DuplicateComponentName),
                ("spec.components[1].type", Rule::MultipleEpp),
            ]
        );
        assert!(
            err.to_string().contains("; "),
            "all violations are listed: {err}"
        );
    }

    /// Every field only the Grove pathway renders is refused, at its path, on a graph recorded as
    /// `component`, and accepted on Grove or before a provider is recorded.
    #[test]
    fn grove_only_fields_need_the_grove_pathway() {
        use crate::v1beta1::{
            ComponentRoleSpec, ExperimentalSpec, GroveSpec, KvTransferPolicy, ProviderOverride,
            SpecTopologyConstraint, TopologyConstraint,
        };
        let grove_override = |target: &str| ProviderOverride {
            api_version: "grove.io/v1alpha1".into(),
            target: Some(target.into()),
            value: serde_json::json!({"topologyConstraint": null}),
        };
        let mut w = component("worker", ComponentType::Worker);
        w.min_available = Some(1);
        w.provider_override = Some(grove_override("PodCliqueScalingGroupConfig"));
        w.topology_constraint = Some(TopologyConstraint {
            pack_domain: "rack".into(),
        });
        w.experimental = Some(ExperimentalSpec {
            grove: Some(GroveSpec {
                force_scaling_group: Some(true),
            }),
            ..Default::default()
        });
        w.multinode = Some(Default::default());
        w.roles = ["leader", "worker"]
            .map(|name| ComponentRoleSpec {
                name: name.into(),
                provider_override: Some(grove_override("PodCliqueTemplateSpec")),
                ..Default::default()
            })
            .to_vec();
        let mut g = dgd(vec![w, component("frontend", ComponentType::Frontend)]);
        g.spec.priority_class_name = Some("high".into());
        g.spec.provider_override = Some(grove_override("PodCliqueSet"));
        g.spec.topology_constraint = Some(SpecTopologyConstraint {
            cluster_topology_name: "ct".into(),
            pack_domain: Some("zone".into()),
        });
        g.spec.experimental = Some(crate::v1beta1::DynamoGraphDeploymentExperimentalSpec {
            kv_transfer_policy: Some(KvTransferPolicy {
                label_key: Some("topology.kubernetes.io/zone".into()),
                domain: "zone".into(),
                ..Default::default()
            }),
            component_groups: vec![crate::v1beta1::ComponentGroupSpec {
                name: "runtime".into(),
                replicas: 2,
                scaling_adapter: None,
                components: vec![crate::common::ComponentGroupComponentSpec {
                    name: "frontend".into(),
                }],
            }],
        });
        assert_eq!(validate(&g), Ok(()), "no provider recorded yet");
        let grove = ValidationContext {
            provider: Some(Provider::Grove),
        };
        assert_eq!(validate_with(&g, &grove), Ok(()));
        g.metadata.annotations = Some(
            [(
                labels::WORKLOAD_PROVIDER.to_string(),
                "component".to_string(),
            )]
            .into(),
        );
        let err = validate(&g).unwrap_err();
        let c = "spec.components[0]";
        let want: Vec<(String, Rule, &str)> = [
            format!("{c}.providerOverride"),
            format!("{c}.minAvailable"),
            format!("{c}.topologyConstraint"),
            format!("{c}.experimental.grove.forceScalingGroup"),
            format!("{c}.roles[0].providerOverride"),
            format!("{c}.roles[1].providerOverride"),
            "spec.providerOverride".into(),
            "spec.priorityClassName".into(),
            "spec.topologyConstraint".into(),
            "spec.experimental.kvTransferPolicy".into(),
            "spec.experimental.componentGroups".into(),
        ]
        .into_iter()
        .map(|f| (f, Rule::GroveOnly, GROVE_ONLY))
        .collect();
        let got: Vec<(String, Rule, &str)> = err
            .violations
            .iter()
            .map(|v| (v.field.clone(), v.rule, v.message.as_str()))
            .collect();
        assert_eq!(got, want);

        // A DynamoComponentDeployment is always on the component pathway.
        let dcd = crate::DynamoComponentDeployment::new(
            "d",
            crate::DynamoComponentDeploymentSpec {
                backend_framework: None,
                component: g.spec.components[0].clone(),
            },
        );
        let err = validate_dcd(&dcd).unwrap_err();
        let fields: Vec<&str> = err
            .violations
            .iter()
            .filter(|v| v.rule == Rule::GroveOnly)
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.providerOverride",
                "spec.minAvailable",
                "spec.topologyConstraint",
                "spec.experimental.grove.forceScalingGroup",
                "spec.roles[0].providerOverride",
                "spec.roles[1].providerOverride",
            ]
        );
    }

    /// `roles` restate the multinode layout: exactly a leader of 1 pod and a worker of
    /// nodeCount-1 pods; anything else is refused.
    #[test]
    fn roles_restate_the_multinode_layout() {
        use crate::v1beta1::ComponentRoleSpec;
        let role = |name: &str, replicas: Option<i32>| ComponentRoleSpec {
            name: name.into(),
            replicas,
            ..Default::default()
        };
        // (roles, multinode nodeCount, violations as (field, message))
        type Row = (
            Vec<ComponentRoleSpec>,
            Option<i32>,
            Vec<(&'static str, &'static str)>,
        );
        let cases: Vec<Row> = vec![
            (vec![], Some(3), vec![]),
            (
                vec![role("leader", Some(1)), role("worker", Some(2))],
                Some(3),
                vec![],
            ),
            (
                vec![role("leader", None), role("worker", None)],
                Some(3),
                vec![],
            ),
            (
                vec![role("leader", Some(2)), role("worker", Some(1))],
                Some(3),
                vec![
                    ("roles[0].replicas", "must be 1 for role leader"),
                    ("roles[1].replicas", "must be 2 for role worker"),
                ],
            ),
            (
                vec![role("leader", None)],
                Some(2),
                vec![(
                    "roles",
                    "must contain exactly one leader and one worker role",
                )],
            ),
            (
                vec![role("leader", None), role("worker", None)],
                None,
                vec![("roles", "requires multinode")],
            ),
        ];
        for (roles, nodes, want) in cases {
            let mut w = component("worker", ComponentType::Worker);
            w.multinode = nodes.map(|node_count| crate::common::MultinodeSpec { node_count });
            w.roles = roles;
            let got = violations(w);
            let want: Vec<(String, Rule, String)> = want
                .iter()
                .map(|(f, m)| {
                    (
                        format!("spec.components[0].{f}"),
                        Rule::Roles,
                        m.to_string(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{nodes:?}");
        }
    }

    /// Fields this operator version does not act on are refused on every pathway, naming the
    /// field and saying so.
    #[test]
    fn unsupported_fields_are_refused_on_every_pathway() {
        use crate::v1beta1::{
            ComponentCheckpointConfig, ComponentCheckpointJobConfig, ComponentGroupSpec,
            ComponentRoleSpec, DynamoGraphDeploymentExperimentalSpec,
        };
        let mut w = gms_worker(Some(None), None, &[], &[]);
        w.experimental.as_mut().unwrap().checkpoint = Some(ComponentCheckpointConfig {
            enabled: true,
            job: Some(ComponentCheckpointJobConfig {
                gms_client_containers: vec!["main".into()],
                pod_template: None,
            }),
            ..Default::default()
        });
        w.multinode = Some(Default::default());
        w.roles = ["leader", "worker"]
            .map(|name| ComponentRoleSpec {
                name: name.into(),
                pod_template: (name == "worker").then(PodTemplateSpec::default),
                ..Default::default()
            })
            .to_vec();
        let mut g = dgd(vec![w]);
        g.spec.backend_framework = Some(crate::BackendFramework::Vllm);
        g.spec.experimental = Some(DynamoGraphDeploymentExperimentalSpec {
            kv_transfer_policy: None,
            component_groups: vec![ComponentGroupSpec {
                name: "group".into(),
                replicas: 1,
                scaling_adapter: Some(Default::default()),
                components: vec![crate::common::ComponentGroupComponentSpec {
                    name: "worker".into(),
                }],
            }],
        });
        for provider in [None, Some(Provider::Grove), Some(Provider::Component)] {
            let err = validate_with(&g, &ValidationContext { provider }).unwrap_err();
            let got: Vec<(&str, Rule)> = err
                .violations
                .iter()
                .filter(|v| v.rule == Rule::Unsupported)
                .map(|v| (v.field.as_str(), v.rule))
                .collect();
            assert_eq!(
                got,
                [
                    ("spec.components[0].roles[1].podTemplate", Rule::Unsupported),
                    // With checkpoints, as upstream, which keeps it disabled.
                    (
                        "spec.components[0].experimental.gpuMemoryService",
                        Rule::Unsupported
                    ),
                    (
                        "spec.components[0].experimental.checkpoint.job.gmsClientContainers",
                        Rule::Unsupported
                    ),
                    (
                        "spec.experimental.componentGroups[0].scalingAdapter",
                        Rule::Unsupported
                    ),
                ],
                "{provider:?}"
            );
            for v in err
                .violations
                .iter()
                .filter(|v| v.rule == Rule::Unsupported)
            {
                assert!(v.message.starts_with(UNSUPPORTED), "{v}");
            }
        }
    }

    /// `spec.experimental.componentGroups`, upstream's admission rules (`validateDynamoGraph
    /// DeploymentExperimentalSpec`, `validateComponentGroupSpec`,
    /// `validateComponentGroupComponentSpec`): every violation names the group's or the
    /// member's field.
    #[test]
    fn component_group_rules_follow_upstream() {
        use crate::common::{ComponentGroupComponentSpec, MultinodeSpec};
        use crate::v1beta1::{
            ComponentGroupSpec, DynamoGraphDeploymentExperimentalSpec, TopologyConstraint,
        };
        let group = |name: &str, members: &[&str]| ComponentGroupSpec {
            name: name.into(),
            replicas: 2,
            scaling_adapter: None,
            components: members
                .iter()
                .map(|m| ComponentGroupComponentSpec {
                    name: m.to_string(),
                })
                .collect(),
        };
        let member = |edit: fn(&mut DynamoComponentDeploymentSharedSpec)| {
            let mut w = component("worker", ComponentType::Worker);
            edit(&mut w);
            w
        };
        let m = "spec.experimental.componentGroups[0].components[0].name";
        type Row = (
            &'static str,
            DynamoComponentDeploymentSharedSpec,
            Vec<ComponentGroupSpec>,
            Vec<(&'static str, &'static str)>,
        );
        let rows: Vec<Row> = vec![
            (
                "a single-node worker and the frontend scale together",
                member(|_| {}),
                vec![group("runtime", &["Frontend", "worker"])],
                vec![],
            ),
            (
                "an unknown member",
                member(|_| {}),
                vec![group("runtime", &["prefill"])],
                vec![(m, "unknown component prefill")],
            ),
            (
                "a member in two groups",
                member(|_| {}),
                vec![group("a", &["worker"]), group("b", &["worker"])],
                vec![(
                    "spec.experimental.componentGroups[1].components[0].name",
                    "is already a member of component group a",
                )],
            ),
            (
                "group names are unique case-insensitively",
                member(|_| {}),
                vec![
                    group("Runtime", &["worker"]),
                    group("runtime", &["Frontend"]),
                ],
                vec![(
                    "spec.experimental.componentGroups[1].name",
                    "duplicates componentGroups[0].name, case-insensitively",
                )],
            ),
            (
                "a group name must not shadow a component name",
                member(|_| {}),
                vec![group("WORKER", &["worker"])],
                vec![(
                    "spec.experimental.componentGroups[0].name",
                    "must not shadow a component name",
                )],
            ),
            (
                "a group without members",
                member(|_| {}),
                vec![group("runtime", &[])],
                vec![(
                    "spec.experimental.componentGroups[0].components",
                    "must contain at least one component",
                )],
            ),
            (
                "a multinode member",
                member(|w| w.multinode = Some(MultinodeSpec { node_count: 2 })),
                vec![group("runtime", &["worker"])],
                vec![(m, "component groups do not support multinode components")],
            ),
            (
                "a member at zero replicas",
                member(|w| w.replicas = Some(0)),
                vec![group("runtime", &["worker"])],
                vec![(
                    m,
                    "component groups do not support members with replicas set to 0",
                )],
            ),
            (
                "a member with its own topology constraint",
                member(|w| {
                    w.topology_constraint = Some(TopologyConstraint {
                        pack_domain: "rack".into(),
                    })
                }),
                vec![group("runtime", &["worker"])],
                vec![(
                    m,
                    "component groups do not support component-level topology constraints",
                )],
            ),
            (
                "a member with its own scaling adapter",
                member(|w| w.scaling_adapter = Some(Default::default())),
                vec![group("runtime", &["worker"])],
                vec![(
                    m,
                    "component groups scale their members together; a member cannot have its own scalingAdapter",
                )],
            ),
            (
                "a forced scaling-group member with a provider override",
                member(|w| {
                    w.experimental = Some(crate::v1beta1::ExperimentalSpec {
                        grove: Some(crate::v1beta1::GroveSpec {
                            force_scaling_group: Some(true),
                        }),
                        ..Default::default()
                    });
                    w.provider_override = Some(crate::v1beta1::ProviderOverride {
                        api_version: "grove.io/v1alpha1".into(),
                        target: None,
                        value: serde_json::json!({"topologyConstraint": null}),
                    });
                }),
                vec![group("runtime", &["worker"])],
                vec![(
                    m,
                    "component groups do not support providerOverride on PCSG-backed components",
                )],
            ),
            (
                "group replicas below one",
                member(|_| {}),
                vec![ComponentGroupSpec {
                    replicas: 0,
                    ..group("runtime", &["worker"])
                }],
                vec![(
                    "spec.experimental.componentGroups[0].replicas",
                    "must be at least 1",
                )],
            ),
        ];
        let grove = ValidationContext {
            provider: Some(Provider::Grove),
        };
        for (name, worker, groups, want) in rows {
            let mut g = dgd(vec![component("Frontend", ComponentType::Frontend), worker]);
            g.spec.experimental = Some(DynamoGraphDeploymentExperimentalSpec {
                kv_transfer_policy: None,
                component_groups: groups,
            });
            let result = validate_with(&g, &grove);
            if want.is_empty() {
                assert_eq!(result, Ok(()), "{name}");
            }
            let got: Vec<(String, Rule, String)> = result
                .err()
                .map(|e| e.violations)
                .unwrap_or_default()
                .into_iter()
                .filter(|v| v.rule == Rule::ComponentGroupMembers)
                .map(|v| (v.field, v.rule, v.message))
                .collect();
            let want: Vec<(String, Rule, String)> = want
                .into_iter()
                .map(|(f, msg)| (f.to_string(), Rule::ComponentGroupMembers, msg.to_string()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// Upstream: `compilationCache.mountPath is required for backend framework X (no default
    /// available)`; vLLM defaults it.
    #[test]
    fn compilation_cache_needs_a_path_unless_vllm() {
        use crate::BackendFramework as B;
        let cases = [
            (Some(B::Vllm), None, None),
            (Some(B::Vllm), Some(""), None),
            (Some(B::Sglang), None, Some("sglang")),
            (Some(B::Sglang), Some("/cache"), None),
            (Some(B::Trtllm), Some(""), Some("trtllm")),
            (None, None, Some("unknown")),
        ];
        for (framework, path, refused) in cases {
            let mut w = component("worker", ComponentType::Worker);
            w.compilation_cache = Some(crate::v1beta1::CompilationCacheConfig {
                pvc_name: "cache".into(),
                mount_path: path.map(str::to_string),
            });
            let mut g = dgd(vec![w]);
            g.spec.backend_framework = framework;
            match (validate(&g), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(named)) => {
                    let fields: Vec<_> = e.violations.iter().map(|v| v.field.as_str()).collect();
                    assert_eq!(fields, ["spec.components[0].compilationCache.mountPath"]);
                    assert!(e.to_string().contains(named), "{e}");
                }
                (got, want) => panic!("{framework:?} {path:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn an_enabled_v1alpha1_ingress_is_refused_by_its_v1alpha1_path() {
        let alpha = |enabled: bool| {
            let mut g: crate::v1alpha1::DynamoGraphDeployment =
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                    "metadata": {"name": "g"},
                    "spec": {"services": {"Frontend": {"componentType": "frontend",
                        "extraPodSpec": {"mainContainer": {"image": "frontend:1"}},
                        "ingress": {"enabled": enabled, "host": "g.example.com"}}}},
                }))
                .unwrap();
            g.metadata.namespace = Some("ns".into());
            crate::conversion::to_v1beta1(&g)
        };
        let err = validate(&alpha(true)).unwrap_err();
        let fields: Vec<_> = err.violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["spec.services.Frontend.ingress"]);
        assert_eq!(err.violations[0].rule, Rule::Unsupported);
        assert!(
            err.to_string()
                .contains("not supported by this operator version"),
            "{err}"
        );
        assert!(validate(&alpha(false)).is_ok());
    }

    /// `dynamoSidecar`: upstream's structural rules (worker-class type, a restartable init
    /// container of that name, no multinode, checkpoint, GMS or failover; the three rows of
    /// `TestGenerateBasePodSpecRejectsInvalidDynamoSidecar`: frontend, not restartable,
    /// multinode); a well-formed one passes.
    #[test]
    fn dynamo_sidecar_rules() {
        use crate::common::MultinodeSpec;
        use crate::v1beta1::{ExperimentalSpec, FailoverSpec};
        type Edit = fn(&mut DynamoComponentDeploymentSharedSpec);
        let init = |name: &str, policy: Option<&str>| Container {
            name: name.into(),
            image: Some("rt:1.6.0".into()),
            restart_policy: policy.map(str::to_string),
            ..Default::default()
        };
        let rows: [(&str, ComponentType, Container, Edit, Option<&str>); 8] = [
            (
                "valid",
                ComponentType::Worker,
                init("runtime", Some("Always")),
                |_| {},
                None,
            ),
            (
                "prefill",
                ComponentType::Prefill,
                init("runtime", Some("Always")),
                |_| {},
                None,
            ),
            (
                "frontend",
                ComponentType::Frontend,
                init("runtime", Some("Always")),
                |_| {},
                Some("only supported for worker"),
            ),
            (
                "untyped",
                ComponentType::Worker,
                init("runtime", Some("Always")),
                |c| c.r#type = None,
                Some("only supported for worker"),
            ),
            (
                "not restartable",
                ComponentType::Worker,
                init("runtime", None),
                |_| {},
                Some("restartPolicy Always"),
            ),
            (
                "missing",
                ComponentType::Worker,
                init("other", Some("Always")),
                |_| {},
                Some("no such init container runtime"),
            ),
            (
                "multinode",
                ComponentType::Worker,
                init("runtime", Some("Always")),
                |c| c.multinode = Some(MultinodeSpec { node_count: 2 }),
                Some("multinode"),
            ),
            (
                "failover",
                ComponentType::Worker,
                init("runtime", Some("Always")),
                |c| {
                    c.experimental = Some(ExperimentalSpec {
                        failover: Some(FailoverSpec::default()),
                        ..Default::default()
                    })
                },
                Some("gpuMemoryService or failover"),
            ),
        ];
        for (name, ty, container, edit, refused) in rows {
            let mut w = component("worker", ty);
            w.dynamo_sidecar = Some("runtime".into());
            let spec = w.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
            spec.init_containers = Some(vec![container]);
            edit(&mut w);
            let got: Vec<_> = violations(w)
                .into_iter()
                .filter(|(_, rule, _)| *rule == Rule::DynamoSidecar)
                .collect();
            match refused {
                None => assert!(got.is_empty(), "{name}: {got:?}"),
                Some(message) => {
                    assert_eq!(got.len(), 1, "{name}: {got:?}");
                    assert_eq!(got[0].0, "spec.components[0].dynamoSidecar", "{name}");
                    assert!(got[0].2.contains(message), "{name}: {}", got[0].2);
                }
            }
        }
    }

    /// `runtimeVersionOverride` must be a semantic version (upstream's `runtimeversion.Parse`).
    #[test]
    fn runtime_version_override_is_a_semantic_version() {
        for (value, ok) in [
            ("1.4.0", true),
            ("", true),
            ("1.6", false),
            ("v1.6.0", false),
        ] {
            let mut w = component("worker", ComponentType::Worker);
            w.runtime_version_override = Some(value.into());
            match validate(&dgd(vec![w])) {
                Ok(()) => assert!(ok, "{value:?} passed"),
                Err(e) => {
                    assert!(!ok, "{value:?}: {e}");
                    let fields: Vec<_> = fields_and_rules(&e);
                    assert_eq!(
                        fields,
                        [(
                            "spec.components[0].runtimeVersionOverride".to_string(),
                            Rule::RuntimeVersionOverride
                        )]
                    );
                    assert!(e.to_string().contains("semantic version"), "{e}");
                }
            }
        }
    }

    /// A vLLM worker with `nvidia.com/gpu: 2`, GMS (mode `gms`) and failover (mode `fo`; none
    /// when `None`), plus the `extra` containers and client names.
    fn gms_worker(
        gms: Option<Option<GpuMemoryServiceMode>>,
        failover: Option<Option<GpuMemoryServiceMode>>,
        extra: &[&str],
        clients: &[&str],
    ) -> DynamoComponentDeploymentSharedSpec {
        use crate::v1beta1::{ExperimentalSpec, FailoverSpec, GpuMemoryServiceSpec};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut w = component("worker", ComponentType::Worker);
        let spec = w.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
        let main = &mut spec.containers[0];
        main.command = Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()]);
        main.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some([("nvidia.com/gpu".to_string(), Quantity("2".into()))].into()),
            ..Default::default()
        });
        for name in extra {
            spec.containers.push(Container {
                name: name.to_string(),
                image: Some("img:1".into()),
                ..Default::default()
            });
        }
        w.experimental = Some(ExperimentalSpec {
            gpu_memory_service: gms.map(|mode| GpuMemoryServiceSpec {
                mode,
                extra_client_containers: clients.iter().map(|c| c.to_string()).collect(),
                ..Default::default()
            }),
            failover: failover.map(|mode| FailoverSpec {
                mode,
                num_shadows: None,
            }),
            ..Default::default()
        });
        w
    }

    fn violations(w: DynamoComponentDeploymentSharedSpec) -> Vec<(String, Rule, String)> {
        match validate(&dgd(vec![w])) {
            Ok(()) => Vec::new(),
            Err(e) => e
                .violations
                .into_iter()
                .map(|v| (v.field, v.rule, v.message))
                .collect(),
        }
    }

    /// The GPU memory service: intra-pod GMS with GPUs on main is fine; inter-pod is refused as
    /// unsupported (both pathways); main without GPUs is refused (its pods would claim a
    /// template nobody creates); client names must exist, once each (upstream's
    /// `gmsExtraClientContainersError`: duplicate names, missing containers,
    /// `TestComponentProgram_ReconcileRejectsInvalidLegacyGMSClient`).
    #[test]
    fn gpu_memory_service_rules() {
        use GpuMemoryServiceMode::{InterPod, IntraPod};
        let gms = "spec.components[0].experimental.gpuMemoryService";
        assert_eq!(violations(gms_worker(Some(None), None, &[], &[])), []);
        assert_eq!(
            violations(gms_worker(Some(Some(IntraPod)), None, &["s"], &["s"])),
            []
        );
        let rows: Vec<(DynamoComponentDeploymentSharedSpec, String, Rule, &str)> = vec![
            (
                gms_worker(Some(Some(InterPod)), None, &[], &[]),
                format!("{gms}.mode"),
                Rule::GpuMemoryService,
                "InterPod is not supported by this operator version (only IntraPod)",
            ),
            (
                {
                    let mut w = gms_worker(Some(None), None, &[], &[]);
                    w.main_container_mut().unwrap().resources = None;
                    w
                },
                gms.to_string(),
                Rule::GpuMemoryService,
                "requires GPUs on the main container (resources limits or requests of nvidia.com/gpu or another GPU resource)",
            ),
            (
                gms_worker(Some(None), None, &[], &["missing-client"]),
                format!("{gms}.extraClientContainers[0]"),
                Rule::ContainerReference,
                "container missing-client not found in podTemplate.spec.containers",
            ),
            (
                gms_worker(Some(None), None, &["s"], &["s", "s"]),
                format!("{gms}.extraClientContainers[1]"),
                Rule::ContainerReference,
                "duplicates extraClientContainers[0] (s)",
            ),
        ];
        for (w, field, rule, message) in rows {
            assert_eq!(
                violations(w),
                [(field.clone(), rule, message.to_string())],
                "{field}"
            );
        }
    }

    /// Failover: needs GMS in the same mode (upstream's webhook), intra-pod only (inter-pod is
    /// not supported), on vLLM (upstream 1.5's `TestBuildFailoverPod_RejectsNonVLLM`).
    #[test]
    fn failover_rules() {
        use GpuMemoryServiceMode::{InterPod, IntraPod};
        let fo = "spec.components[0].experimental.failover";
        assert_eq!(violations(gms_worker(Some(None), Some(None), &[], &[])), []);
        assert_eq!(
            violations(gms_worker(
                Some(Some(IntraPod)),
                Some(Some(IntraPod)),
                &[],
                &[]
            )),
            []
        );
        let sglang = {
            let mut w = gms_worker(Some(None), Some(None), &[], &[]);
            w.main_container_mut().unwrap().command =
                Some(vec!["python3".into(), "-m".into(), "dynamo.sglang".into()]);
            w
        };
        let unknown = {
            let mut w = gms_worker(Some(None), Some(None), &[], &[]);
            w.main_container_mut().unwrap().command = None;
            w
        };
        let rows: Vec<(DynamoComponentDeploymentSharedSpec, String, &str)> = vec![
            (
                gms_worker(None, Some(None), &[], &[]),
                fo.to_string(),
                "requires experimental.gpuMemoryService",
            ),
            (
                gms_worker(Some(None), Some(Some(InterPod)), &[], &[]),
                format!("{fo}.mode"),
                "must match gpuMemoryService.mode (IntraPod)",
            ),
            (
                sglang,
                fo.to_string(),
                "is only supported for vLLM workers by this operator version (detected: sglang)",
            ),
            (
                unknown,
                fo.to_string(),
                "is only supported for vLLM workers by this operator version (detected: none)",
            ),
        ];
        for (w, field, message) in rows {
            assert_eq!(
                violations(w),
                [(field.clone(), Rule::Failover, message.to_string())],
                "{field}"
            );
        }
        // Inter-pod failover with inter-pod GMS: both refused as unsupported.
        let fields: Vec<(String, Rule)> = violations(gms_worker(
            Some(Some(InterPod)),
            Some(Some(InterPod)),
            &[],
            &[],
        ))
        .into_iter()
        .map(|(f, r, _)| (f, r))
        .collect();
        assert_eq!(
            fields,
            [
                (
                    "spec.components[0].experimental.gpuMemoryService.mode".to_string(),
                    Rule::GpuMemoryService
                ),
                (format!("{fo}.mode"), Rule::Failover),
            ]
        );
        // The graph's backendFramework counts when the command names none.
        let mut w = gms_worker(Some(None), Some(None), &[], &[]);
        w.main_container_mut().unwrap().command = None;
        let mut g = dgd(vec![w]);
        g.spec.backend_framework = Some(crate::BackendFramework::Vllm);
        assert_eq!(validate(&g), Ok(()));
    }

    /// A standalone DCD with GMS is refused: no graph creates its claim template.
    #[test]
    fn gms_on_a_dcd_needs_its_graph() {
        let mut dcd = DynamoComponentDeployment::new(
            "w",
            crate::DynamoComponentDeploymentSpec {
                backend_framework: None,
                component: gms_worker(Some(None), None, &[], &[]),
            },
        );
        let err = validate_dcd(&dcd).unwrap_err();
        assert_eq!(err.violations.len(), 1, "{err}");
        assert_eq!(
            err.violations[0].field,
            "spec.experimental.gpuMemoryService"
        );
        assert_eq!(err.violations[0].rule, Rule::GpuMemoryService);
        dcd.metadata.labels = Some(
            [(
                labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                "g".to_string(),
            )]
            .into(),
        );
        assert_eq!(validate_dcd(&dcd), Ok(()));
    }

    #[test]
    fn garde_report_carries_the_same_paths() {
        let mut w = component("worker", ComponentType::Frontend);
        w.multinode = Some(Default::default());
        let spec = DynamoGraphDeploymentSpec {
            components: vec![w],
            ..Default::default()
        };
        let report = spec
            .validate_with(&ValidationContext::default())
            .unwrap_err();
        let (path, error) = report.iter().next().unwrap();
        assert_eq!(path.to_string(), "components[0].multinode");
        assert_eq!(
            error.message(),
            "is only supported for worker, prefill and decode components"
        );
    }

    #[test]
    fn restart_order_must_list_every_component_once() {
        let mut g = dgd(vec![
            component("a", ComponentType::Worker),
            component("b", ComponentType::Worker),
        ]);
        g.spec.restart = Some(crate::common::Restart {
            id: "1".into(),
            strategy: Some(crate::common::RestartStrategy {
                r#type: None,
                order: vec!["a".into(), "a".into()],
            }),
        });
        let err = validate(&g).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.restart.strategy.order[1]: duplicates order[0] (a); \
             spec.restart.strategy.order: must list every component (missing: b)"
        );
    }

    fn with_template_metadata(
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> DynamoComponentDeploymentSharedSpec {
        let mut c = component("Frontend", ComponentType::Frontend);
        let map = |entries: &[(&str, &str)]| {
            (!entries.is_empty()).then(|| {
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        c.pod_template.as_mut().unwrap().metadata = Some(ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        });
        c
    }

    fn fields_and_rules(err: &InvalidSpec) -> Vec<(String, Rule)> {
        err.violations
            .iter()
            .map(|v| (v.field.clone(), v.rule))
            .collect()
    }

    type Entries = &'static [(&'static str, &'static str)];
    /// What, graph labels, graph annotations, template labels, template annotations, and the
    /// expected (field, rule) list.
    type MetadataCase = (
        &'static str,
        Entries,
        Entries,
        Entries,
        Entries,
        &'static [(&'static str, Rule)],
    );

    /// What the children carry: graph labels and annotations, pod template labels and
    /// annotations.
    #[test]
    fn labels_and_annotations_the_children_carry_follow_kubernetes_rules() {
        let cases: &[MetadataCase] = &[
            (
                "valid everywhere",
                &[
                    ("example.com/team", "a-team"),
                    ("tier", ""),
                    ("A_b.c", "X_y.Z"),
                ],
                &[
                    ("example.com/note", "\u{0}\u{7}🚀 anything"),
                    ("Example.COM/Upper", ""),
                ],
                &[("app.kubernetes.io/name", "frontend")],
                &[("prometheus.io/scrape", "true")],
                &[],
            ),
            (
                "the reliability case: unicode in a graph label value",
                &[("example.com/team", "ünï cødé!")],
                &[("example.com/note", "\u{0}\u{7}🚀")],
                &[],
                &[],
                &[("spec.labels", Rule::LabelValue)],
            ),
            (
                "graph label key with a space, two slashes",
                &[("bad key", "v"), ("a/b/c", "v")],
                &[],
                &[],
                &[],
                &[
                    ("spec.labels", Rule::LabelKey),
                    ("spec.labels", Rule::LabelKey),
                ],
            ),
            (
                "both key and value of one label",
                &[("-x", "y-")],
                &[],
                &[],
                &[],
                &[
                    ("spec.labels", Rule::LabelKey),
                    ("spec.labels", Rule::LabelValue),
                ],
            ),
            (
                "graph annotation keys",
                &[],
                &[
                    ("🚀", "v"),
                    ("example.com/", "v"),
                    ("ok.example.com/fine", "v"),
                ],
                &[],
                &[],
                &[
                    ("spec.annotations", Rule::AnnotationKey),
                    ("spec.annotations", Rule::AnnotationKey),
                ],
            ),
            (
                "pod template labels and annotations",
                &[],
                &[],
                &[("example.com/x", "a\u{7}b"), ("UPPER.example.com/x", "v")],
                &[("with space", "v")],
                &[
                    (
                        "spec.components[0].podTemplate.metadata.annotations",
                        Rule::AnnotationKey,
                    ),
                    (
                        "spec.components[0].podTemplate.metadata.labels",
                        Rule::LabelKey,
                    ),
                    (
                        "spec.components[0].podTemplate.metadata.labels",
                        Rule::LabelValue,
                    ),
                ],
            ),
            (
                "a label value of 64 characters",
                &[(
                    "k",
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                )],
                &[],
                &[],
                &[],
                &[("spec.labels", Rule::LabelValue)],
            ),
        ];
        for (what, graph_labels, graph_annotations, labels, annotations, want) in cases {
            let mut g = dgd(vec![with_template_metadata(labels, annotations)]);
            let map = |e: &[(&str, &str)]| -> BTreeMap<String, String> {
                e.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            };
            g.spec.labels = map(graph_labels);
            g.spec.annotations = map(graph_annotations);
            let got = validate(&g)
                .err()
                .map(|e| fields_and_rules(&e))
                .unwrap_or_default();
            let want: Vec<(String, Rule)> = want.iter().map(|(f, r)| (f.to_string(), *r)).collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn the_message_names_the_label_and_the_rule() {
        let mut g = dgd(vec![component("Frontend", ComponentType::Frontend)]);
        g.spec.labels = [("example.com/team".to_string(), "ünï cødé!".to_string())].into();
        let err = validate(&g).unwrap_err();
        assert_eq!(err.reason(), REASON_INVALID_SPEC);
        assert_eq!(
            err.to_string(),
            "spec.labels: invalid value \"ünï cødé!\" of label \"example.com/team\": must be \
             empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an \
             alphanumeric"
        );
        g.spec.labels = [("a/b/c".to_string(), "\u{7}".to_string())].into();
        let err = validate(&g).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.labels: invalid label key \"a/b/c\": must be a name with an optional DNS \
             subdomain prefix and '/' (e.g. example.com/my-name), with at most one '/'; \
             spec.labels: invalid value \"\\u{7}\" of label \"a/b/c\": must be empty or consist \
             of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        );
    }

    #[test]
    fn annotations_total_at_most_256_kib_with_the_graphs_included() {
        let half = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2);
        let over = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let template_path = "spec.components[0].podTemplate.metadata.annotations";
        // (graph annotations, template annotations, expected (field, message start)).
        type Pairs<'a> = Vec<(&'a str, &'a str)>;
        let cases: Vec<(Pairs, Pairs, Pairs)> = vec![
            (vec![("a", &half)], vec![("b", "small")], vec![]),
            // Exactly at the limit (key "a" is one byte) is fine.
            (vec![("a", &over[1..])], vec![], vec![]),
            (
                vec![("a", &over)],
                vec![],
                vec![("spec.annotations", "must total")],
            ),
            (
                vec![("a", &half)],
                vec![("b", &half)],
                vec![(template_path, "together with spec.annotations must total")],
            ),
            // The template overrides the graph's value: only its own value counts.
            (vec![("a", &half)], vec![("a", &half)], vec![]),
            (
                vec![],
                vec![("a", &over)],
                vec![(template_path, "must total")],
            ),
            // Too large on both levels: each reported once, on its own.
            (
                vec![("a", &over)],
                vec![("b", &over)],
                vec![
                    ("spec.annotations", "must total"),
                    (template_path, "must total"),
                ],
            ),
        ];
        for (i, (graph, template, want)) in cases.into_iter().enumerate() {
            let mut g = dgd(vec![with_template_metadata(&[], &template)]);
            g.spec.annotations = graph
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let got: Vec<Violation> = validate(&g).err().map(|e| e.violations).unwrap_or_default();
            assert_eq!(got.len(), want.len(), "case {i}: {got:?}");
            for (v, (field, start)) in got.iter().zip(&want) {
                assert_eq!(
                    (v.field.as_str(), v.rule),
                    (*field, Rule::AnnotationsSize),
                    "case {i}"
                );
                assert!(v.message.starts_with(start), "case {i}: {}", v.message);
                assert!(v.message.contains("at most 262144 bytes"), "case {i}");
            }
        }
    }

    #[test]
    fn dcd_and_checkpoint_templates_are_checked_too() {
        let mut dcd = DynamoComponentDeployment::new("d", Default::default());
        dcd.spec.component = with_template_metadata(&[("example.com/x", "ünï")], &[]);
        let err = validate_dcd(&dcd).unwrap_err();
        assert_eq!(
            fields_and_rules(&err),
            [(
                "spec.podTemplate.metadata.labels".to_string(),
                Rule::LabelValue
            )]
        );

        let mut c = component("worker", ComponentType::Worker);
        c.experimental = Some(crate::v1beta1::ExperimentalSpec {
            checkpoint: Some(crate::v1beta1::ComponentCheckpointConfig {
                enabled: true,
                job: Some(crate::v1beta1::ComponentCheckpointJobConfig {
                    pod_template: Some(PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some([("bad key".to_string(), "v".to_string())].into()),
                            ..Default::default()
                        }),
                        spec: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = validate(&dgd(vec![c])).unwrap_err();
        assert_eq!(
            fields_and_rules(&err),
            [(
                "spec.components[0].experimental.checkpoint.job.podTemplate.metadata.labels"
                    .to_string(),
                Rule::LabelKey
            )]
        );

        let ckpt: DynamoCheckpoint = serde_json::from_value(serde_json::json!({
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoCheckpoint",
            "metadata": {"name": "c"},
            "spec": {
                "identity": {"model": "m", "backendFramework": "vllm"},
                "job": {"podTemplateSpec": {
                    "metadata": {"annotations": {"a/b/c": "v"}},
                    "spec": {"containers": [{"name": "main", "image": "img:1"}]},
                }},
            },
        }))
        .unwrap();
        let err = validate_checkpoint(&ckpt).unwrap_err();
        assert_eq!(
            fields_and_rules(&err),
            [(
                "spec.job.podTemplateSpec.metadata.annotations".to_string(),
                Rule::AnnotationKey
            )]
        );
    }
}
