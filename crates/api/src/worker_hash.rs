//! The worker hash: which generation of worker pods a graph's spec asks for.
//!
//! Worker DCDs, their Deployments and Services carry it in their names and in the
//! `nvidia.com/dynamo-worker-hash` label, so it must equal the upstream operator's value for the
//! same graph, byte for byte: a different value renames (and so rolls) every worker of a graph
//! moved from that operator. It is upstream's v2 hash: the first 8 hex digits of SHA-256 over
//! Go's `json.Marshal` of a versioned input, whose bytes [`crate::gojson`] reproduces (Go field
//! order, Go zero values, canonical quantities):
//! - `version` `dgd-worker-rollout-v2`, `backendFramework`, the graph's `env`;
//! - `workers`, by component name, for each worker-class component (`worker`, `prefill`,
//!   `decode`): its `globalDynamoNamespace`, `podTemplate` (absent when empty), `multinode`,
//!   `sharedMemorySize`, `frontendSidecar`, `compilationCache` and `experimental`. The type,
//!   replicas, the scaling adapter, `modelRef`, `eppConfig` and topology constraints do not
//!   count.
//!
//! The value for upstream's golden input is a test row here (`2bc34b39`). Later upstream
//! revisions add the component type to the input and fold the graph's `labels`, `annotations`
//! and `env` into the pod template instead; graphs that set none of those and have no EPP
//! component hash the same under both. `runtimeVersionOverride`, `dynamoSidecar` and the
//! resolved runtime version ([`crate::runtime_version`]) are not inputs: upstream revisions
//! that gate defaults on the runtime version also hash the resolved version when it is 1.5.0 or
//! later, which is not reproduced here (graphs whose runtime is older or unknown, as every
//! test-data graph, hash the same either way).

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};

/// Version tag of the hash input.
const INPUT_VERSION: &str = "dgd-worker-rollout-v2";

/// The worker hash of `dgd` (8 lowercase hex digits).
pub fn worker_hash(dgd: &DynamoGraphDeployment) -> String {
    let spec = &dgd.spec;
    let workers: serde_json::Map<String, Value> = spec
        .components
        .iter()
        .filter(|c| c.r#type.is_some_and(ComponentType::is_worker))
        .map(|c| (c.name.clone(), component_input(c)))
        .collect();
    let input = json!({
        "version": INPUT_VERSION,
        "backendFramework": spec.backend_framework.map(|b| b.as_str()),
        "env": spec.env,
        "workers": workers,
    });
    let bytes = crate::gojson::encode("struct:DgdWorkerHashInput", &input);
    hex::encode(Sha256::digest(bytes.as_bytes()))[..8].to_string()
}

fn component_input(c: &DynamoComponentDeploymentSharedSpec) -> Value {
    json!({
        "globalDynamoNamespace": c.global_dynamo_namespace,
        "podTemplate": c.pod_template.as_ref().filter(|t| !is_zero(t)),
        "multinode": c.multinode,
        "sharedMemorySize": c.shared_memory_size,
        "frontendSidecar": c.frontend_sidecar,
        "compilationCache": c.compilation_cache,
        "experimental": c.experimental,
    })
}

/// Whether Go sees the zero `PodTemplateSpec` (`podTemplate: {}`, `{spec: {}}`, ...).
fn is_zero(t: &PodTemplateSpec) -> bool {
    let empty_map = |m: &Option<std::collections::BTreeMap<String, String>>| {
        m.as_ref().is_none_or(|m| m.is_empty())
    };
    t.spec.as_ref().is_none_or(|s| s == &PodSpec::default())
        && t.metadata.as_ref().is_none_or(|m| {
            empty_map(&m.labels)
                && empty_map(&m.annotations)
                && m == &ObjectMeta {
                    labels: m.labels.clone(),
                    annotations: m.annotations.clone(),
                    ..Default::default()
                }
        })
}

#[cfg(test)]
mod tests;
