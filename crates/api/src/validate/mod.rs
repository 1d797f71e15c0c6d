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
//!
//! The rules, by concern:
//! - `graph`: a graph's spec, and its restart order;
//! - `names`: component names and the single epp component;
//! - `groups`: component groups;
//! - `component`: one component (replicas, eppConfig, compilation cache, runtime version,
//!   topology inheritance), calling the concerns below;
//! - `containers`: the main container and the sidecars the spec names;
//! - `pod_metadata`: the labels and annotations the children carry (Kubernetes' rules);
//! - `multinode`: multinode components and their roles;
//! - `experimental`: the GPU memory service and failover;
//! - `checkpoint`: DynamoCheckpoints and a component's checkpoint;
//! - `grove_only`: fields only the Grove pathway renders;
//! - `violation`: what a failure reports ([`Rule`], [`Violation`], [`InvalidSpec`]);
//! - `collector`: field paths and the collection of violations.

mod checkpoint;
mod collector;
mod component;
mod containers;
mod experimental;
mod graph;
mod groups;
mod grove_only;
mod multinode;
mod names;
mod pod_metadata;
mod violation;

pub use violation::{InvalidSpec, Rule, Violation};

use crate::DynamoCheckpoint;
use crate::checkpoint::DynamoCheckpointSpec;
use crate::dcd::DynamoComponentDeployment;
use crate::labels;
use crate::scaling_adapter::DynamoGraphDeploymentScalingAdapter;
use crate::v1beta1::{
    DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment, DynamoGraphDeploymentSpec,
};
use checkpoint::checkpoint_spec;
use collector::{Collector, Seg};
use component::component;
use graph::graph_spec;

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

/// A v1alpha1 graph's enabled `spec.services.<name>.ingress` (v1beta1 cannot say it; the
/// conversion keeps it in an annotation), named by its v1alpha1 path: it must be on a frontend
/// component (only frontends are exposed) and say what to render, an Ingress
/// (`ingressControllerClassName`) or a VirtualService (`useVirtualService` with
/// `virtualServiceGateway`). Anything else would be accepted and render nothing.
fn alpha_ingresses(dgd: &DynamoGraphDeployment) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (name, ingress) in crate::conversion::preserved_alpha_ingresses(dgd) {
        if !ingress.enabled {
            continue;
        }
        let field = format!("spec.services.{name}.ingress");
        let frontend = dgd
            .spec
            .components
            .iter()
            .find(|c| c.name == name)
            .is_some_and(|c| c.r#type == Some(crate::ComponentType::Frontend));
        let message = if !frontend {
            "only a frontend component is exposed (an Ingress or VirtualService routes to the frontend's HTTP port)"
        } else if ingress.use_virtual_service && ingress.virtual_service_gateway.is_none() {
            "useVirtualService needs virtualServiceGateway"
        } else if ingress.ingress_controller_class_name.is_none() && !ingress.use_virtual_service {
            "enabled, but names neither ingressControllerClassName (an Ingress) nor useVirtualService with virtualServiceGateway (a VirtualService): nothing would be rendered"
        } else {
            continue;
        };
        violations.push(Violation {
            field,
            rule: Rule::Ingress,
            message: message.into(),
        });
    }
    violations
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
    // A v1alpha1 DCD's own `ingress`: routes are rendered from graphs only.
    if crate::conversion::children::preserved_alpha_dcd_ingress(dcd) {
        v.at(&[Seg::Key("ingress")]).push(
            Rule::Unsupported,
            format!(
                "{UNSUPPORTED} on a DynamoComponentDeployment (a graph's frontends get their Ingress or VirtualService from the graph)"
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
mod tests;
