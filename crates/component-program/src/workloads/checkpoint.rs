//! The resolved checkpoint on a component's DCD.

use api::DynamoComponentDeploymentSharedSpec;
use api::v1beta1::CheckpointStartupPolicy;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconcilers::checkpoints::CheckpointInfo;

/// The resolved checkpoint on a component's DCD, as upstream's graph controller hands it
/// down: once the checkpoint exists the DCD names it (`checkpointRef`, with the startup policy;
/// no `identity`, no `job`), so the DCD controller restores from exactly that one; a
/// `WaitForCheckpoint` component waits at zero replicas until it is Ready; an `Immediate`
/// component's pod template carries the restore-candidate annotations
/// (`pod_render::restore::metadata`).
pub(super) fn checkpoint_startup(
    spec: &mut DynamoComponentDeploymentSharedSpec,
    info: &CheckpointInfo,
) {
    if !info.enabled {
        return;
    }
    if let Some(name) = info
        .checkpoint_name
        .as_ref()
        .filter(|n| info.exists && !n.is_empty())
    {
        let checkpoint = spec
            .experimental
            .get_or_insert_with(Default::default)
            .checkpoint
            .get_or_insert_with(Default::default);
        checkpoint.enabled = true;
        checkpoint.checkpoint_ref = Some(name.clone());
        checkpoint.identity = None;
        checkpoint.job = None;
        checkpoint.startup_policy = Some(info.startup_policy);
    }
    if info.waits() {
        spec.replicas = Some(0);
        return;
    }
    if info.startup_policy == CheckpointStartupPolicy::Immediate {
        let pod = info.pod(spec);
        let meta = spec
            .pod_template
            .get_or_insert_with(PodTemplateSpec::default)
            .metadata
            .get_or_insert_with(ObjectMeta::default);
        let mut pod_labels = meta.labels.take().unwrap_or_default();
        let mut annotations = meta.annotations.take().unwrap_or_default();
        pod_render::restore::metadata(&mut pod_labels, &mut annotations, &pod);
        meta.labels = (!pod_labels.is_empty()).then_some(pod_labels);
        meta.annotations = (!annotations.is_empty()).then_some(annotations);
    }
}
