//! `experimental` of a component: the GPU memory service and failover here, the checkpoint in
//! `checkpoint`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;

use super::checkpoint::component_checkpoint;
use super::collector::{Collector, Seg};
use super::{Rule, UNSUPPORTED};
use crate::v1beta1::{DynamoComponentDeploymentSharedSpec, GpuMemoryServiceMode};

/// The rules of `c.experimental`, if set: the GPU memory service, failover and the checkpoint.
pub(super) fn experimental(
    c: &DynamoComponentDeploymentSharedSpec,
    containers: &[Container],
    framework: Option<crate::BackendFramework>,
    v: &mut Collector,
) {
    let Some(experimental) = &c.experimental else {
        return;
    };
    let gms = experimental.gpu_memory_service.as_ref();
    gpu_memory_service(c, containers, v);
    if let Some(failover) = &experimental.failover {
        failover_spec(c, failover, gms, framework, v);
    }
    if let Some(ckpt) = &experimental.checkpoint {
        component_checkpoint(ckpt, containers, gms.is_some(), v);
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
