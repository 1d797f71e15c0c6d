//! Checkpoints: a DynamoCheckpoint's spec, and a component's `experimental.checkpoint`.

use k8s_openapi::api::core::v1::Container;

use super::collector::{Collector, Seg};
use super::containers::find_container;
use super::pod_metadata::pod_metadata;
use super::{Rule, UNSUPPORTED};
use crate::checkpoint::DynamoCheckpointSpec;
use crate::v1beta1::{ComponentCheckpointConfig, MAIN_CONTAINER_NAME};

/// A DynamoCheckpoint: exactly one of `job` and `capture`, its pod template's metadata, and
/// the target container in that pod template.
pub(super) fn checkpoint_spec(spec: &DynamoCheckpointSpec, v: &mut Collector) {
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

/// A component's `experimental.checkpoint`: an enabled checkpoint's target container exists
/// (`containers`), the capture Job's pod template metadata, and no GMS client containers (they
/// need the component's GPU memory service, `has_gms`, which the capture pod does not get).
pub(super) fn component_checkpoint(
    ckpt: &ComponentCheckpointConfig,
    containers: &[Container],
    has_gms: bool,
    v: &mut Collector,
) {
    let exp = Seg::Key("experimental");
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
        if !has_gms {
            at.push(
                Rule::ContainerReference,
                "requires experimental.gpuMemoryService",
            );
        } else {
            // The capture pod is the component's pod without the GPU memory service.
            at.push(
                Rule::Unsupported,
                format!(
                    "{UNSUPPORTED} (the checkpoint capture pod gets no GPU memory service wiring)"
                ),
            );
        }
    }
}
