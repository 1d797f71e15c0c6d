//! What a failed validation reports: the [`Rule`] each [`Violation`] breaks, and the
//! [`InvalidSpec`] that lists them.

use std::fmt;

use super::REASON_INVALID_SPEC;

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
    /// A v1alpha1 service's enabled `ingress` is on a frontend component and says what to
    /// render: `ingressControllerClassName` (an Ingress), or `useVirtualService` with
    /// `virtualServiceGateway` (an Istio VirtualService).
    Ingress,
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
            Self::Ingress => "ingress",
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
