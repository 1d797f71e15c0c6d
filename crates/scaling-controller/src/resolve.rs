//! `resolve`: what an adapter may do, from the adapter and its graph alone (pure, no I/O).

use api::labels;
use api::v1beta1::CheckpointStartupPolicy;
use api::{
    DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter,
};
use kube::ResourceExt;
use reconcilers::{naming, rollout};

use crate::{
    REASON_COMPONENT_NOT_FOUND, REASON_GRAPH_NOT_FOUND, REASON_ROLLING_UPDATE,
    REASON_SCALING_ADAPTER_DISABLED, REASON_WAITING_FOR_CHECKPOINT,
    REASON_WORKLOAD_PROVIDER_UNAVAILABLE,
};

/// How a graph runs its components.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pathway {
    /// One DynamoComponentDeployment per component (and worker generation).
    Component,
    /// One Grove PodCliqueSet; a component is a PodClique or a PodCliqueScalingGroup.
    Grove,
}

/// What the adapter may do.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution<'a> {
    /// Nothing to scale and nothing to observe: `Ready=False` with this reason and message.
    Wait {
        reason: &'static str,
        message: String,
    },
    /// The replicas belong to someone else for now: observe the workloads, write nothing,
    /// `Ready=False` with this reason and message.
    Observe {
        pathway: Pathway,
        component: &'a DynamoComponentDeploymentSharedSpec,
        reason: &'static str,
        message: String,
    },
    /// The adapter owns the component's replicas: scale its workloads.
    Scale {
        pathway: Pathway,
        component: &'a DynamoComponentDeploymentSharedSpec,
    },
}

/// Decide what `adapter` may do, given its graph (`None`: not found) and whether this
/// controller scales Grove workloads. The order of the checks is the order of the table in the
/// crate docs.
pub fn resolve<'a>(
    adapter: &DynamoGraphDeploymentScalingAdapter,
    dgd: Option<&'a DynamoGraphDeployment>,
    grove: bool,
) -> Resolution<'a> {
    let target = &adapter.spec.dgd_ref;
    let Some(dgd) = dgd.filter(|d| d.metadata.deletion_timestamp.is_none()) else {
        return Resolution::Wait {
            reason: REASON_GRAPH_NOT_FOUND,
            message: format!("DynamoGraphDeployment {} not found", target.name),
        };
    };
    let Some(component) = dgd
        .spec
        .components
        .iter()
        .find(|c| c.name == target.component_name)
    else {
        return Resolution::Wait {
            reason: REASON_COMPONENT_NOT_FOUND,
            message: format!(
                "DynamoGraphDeployment {} has no component {}",
                dgd.name_any(),
                target.component_name
            ),
        };
    };
    let pathway = match dgd
        .annotations()
        .get(labels::WORKLOAD_PROVIDER)
        .map(String::as_str)
    {
        None | Some(labels::PROVIDER_COMPONENT) => Pathway::Component,
        Some(labels::PROVIDER_GROVE) if grove => Pathway::Grove,
        Some(other) => {
            return Resolution::Wait {
                reason: REASON_WORKLOAD_PROVIDER_UNAVAILABLE,
                message: format!(
                    "DynamoGraphDeployment {} runs on workload provider {other:?}, which this operator does not scale",
                    dgd.name_any()
                ),
            };
        }
    };
    if component.scaling_adapter.is_none() {
        return Resolution::Observe {
            pathway,
            component,
            reason: REASON_SCALING_ADAPTER_DISABLED,
            message: format!(
                "component {} does not set scalingAdapter: the DynamoGraphDeployment owns its replicas",
                component.name
            ),
        };
    }
    if waits_for_checkpoint(dgd, component) {
        return Resolution::Observe {
            pathway,
            component,
            reason: REASON_WAITING_FOR_CHECKPOINT,
            message: format!(
                "component {} starts once its checkpoint is ready; the DynamoGraphDeployment holds it at zero replicas until then",
                component.name
            ),
        };
    }
    if pathway == Pathway::Component
        && naming::is_worker(component.r#type)
        && rollout::owns_worker_replicas(dgd)
    {
        return Resolution::Observe {
            pathway,
            component,
            reason: REASON_ROLLING_UPDATE,
            message: format!(
                "component {} is in a rolling update: the DynamoGraphDeployment steps its worker generations to the adapter's {} replicas until it completes",
                component.name, adapter.spec.replicas
            ),
        };
    }
    Resolution::Scale { pathway, component }
}

/// Whether the graph holds `component` at zero replicas until its checkpoint is ready: the
/// component asks for `startupPolicy: WaitForCheckpoint` and the graph's status does not report
/// its checkpoint ready (a graph that has not reported yet counts as not ready).
pub fn waits_for_checkpoint(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> bool {
    let waits = component
        .experimental
        .as_ref()
        .and_then(|e| e.checkpoint.as_ref())
        .is_some_and(|c| {
            c.enabled && c.startup_policy == Some(CheckpointStartupPolicy::WaitForCheckpoint)
        });
    waits
        && !dgd
            .status
            .as_ref()
            .and_then(|s| s.checkpoints.get(&component.name))
            .is_some_and(|c| c.ready)
}
