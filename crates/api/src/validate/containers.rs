//! The containers the spec requires or names: `main` with an image, the frontend sidecar and
//! the Dynamo runtime sidecar.

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

use super::Rule;
use super::collector::{Collector, Seg};
use crate::v1beta1::{ComponentType, DynamoComponentDeploymentSharedSpec, MAIN_CONTAINER_NAME};

/// The main container (upstream's admission rule for new components).
pub(super) fn main_container(containers: &[Container], v: &mut Collector) {
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
}

/// `frontendSidecar` names a container of the pod template.
pub(super) fn frontend_sidecar(
    c: &DynamoComponentDeploymentSharedSpec,
    containers: &[Container],
    v: &mut Collector,
) {
    if let Some(name) = &c.frontend_sidecar
        && !containers.iter().any(|k| &k.name == name)
    {
        v.at(&[Seg::Key("frontendSidecar")]).push(
            Rule::FrontendSidecarContainer,
            format!("container {name} not found in podTemplate.spec.containers"),
        );
    }
}

/// `dynamoSidecar` names a restartable init container, on a worker-class component without
/// multinode, checkpoint, GPU memory service or failover.
pub(super) fn dynamo_sidecar(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    let Some(name) = &c.dynamo_sidecar else {
        return;
    };
    let path = [Seg::Key("dynamoSidecar")];
    let init = c
        .pod_template
        .as_ref()
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
    } else if experimental.is_some_and(|e| e.gpu_memory_service.is_some() || e.failover.is_some()) {
        v.at(&path).push(
            Rule::DynamoSidecar,
            "cannot be combined with experimental.gpuMemoryService or failover",
        );
    }
}

/// The container `name` of `pod`'s containers.
pub(super) fn find_container<'a>(
    pod: Option<&'a PodTemplateSpec>,
    name: &str,
) -> Option<&'a Container> {
    pod?.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}
