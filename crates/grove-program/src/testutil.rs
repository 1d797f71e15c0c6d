//! Fixtures of the unit tests: a graph in the double, and a stand-in for Grove that creates and
//! readies the children of the PodCliqueSet the program applied.

use std::collections::BTreeMap;

use api::grove::{
    PodClique, PodCliqueResourceSpec, PodCliqueScalingGroup, PodCliqueScalingGroupSpec,
    PodCliqueScalingGroupStatus, PodCliqueSet, PodCliqueStatus,
};
use api::labels;
use api::v1beta1::{ComponentType, DynamoComponentDeploymentSharedSpec};
use api::{DynamoGraphDeployment, DynamoGraphDeploymentSpec};
use grove_render::names::{component_child, pcs_name};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::testing::Double;

pub const NS: &str = "ns";
pub const NAME: &str = "g";

fn component(
    name: &str,
    type_: ComponentType,
    command: &[&str],
) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(type_),
        replicas: Some(1),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1".into()),
                    command: (!command.is_empty())
                        .then(|| command.iter().map(|s| s.to_string()).collect()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// A graph: a frontend and a single-node vLLM worker.
pub fn graph() -> DynamoGraphDeployment {
    let mut g = DynamoGraphDeployment::new(
        NAME,
        DynamoGraphDeploymentSpec {
            components: vec![
                component("Frontend", ComponentType::Frontend, &[]),
                component(
                    "VllmDecodeWorker",
                    ComponentType::Worker,
                    &["python3", "-m", "dynamo.vllm"],
                ),
            ],
            ..Default::default()
        },
    );
    g.metadata = ObjectMeta {
        name: Some(NAME.into()),
        namespace: Some(NS.into()),
        generation: Some(1),
        ..Default::default()
    };
    g
}

/// The graph as stored in the double.
pub fn stored(d: &Double) -> DynamoGraphDeployment {
    d.object(Some(NS), NAME).expect("the graph")
}

/// The PodCliqueSet as stored.
pub fn pcs(d: &Double) -> PodCliqueSet {
    let g = stored(d);
    d.object(Some(NS), &pcs_name(NAME, &g.spec))
        .expect("the PodCliqueSet")
}

/// Play Grove: observe the PodCliqueSet and create or update every component's PodClique /
/// PodCliqueScalingGroup with `ready` of its pods ready (`None`: all of them).
pub fn grove(d: &Double, ready: Option<i32>) {
    let g = stored(d);
    let mut set = pcs(d);
    let generation = set.metadata.generation.unwrap_or(1);
    let hash = format!("rev-{generation}");
    let status = set.status.get_or_insert_with(Default::default);
    status.observed_generation = Some(generation);
    status.current_generation_hash = Some(hash.clone());
    let set = d.insert(set);
    let pcs_name = set.metadata.name.clone().unwrap();
    let mut played = std::collections::BTreeSet::new();
    for c in &g.spec.components {
        let child = component_child(&pcs_name, &g.spec, c);
        if !played.insert(child.name.clone()) {
            continue;
        }
        let name = child.name;
        let lower = child.template;
        let owner = match g.spec.component_group(&c.name) {
            Some(group) => (labels::DYNAMO_COMPONENT_GROUP, group.name.clone()),
            None => (labels::DYNAMO_COMPONENT, c.name.clone()),
        };
        let meta = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([
                (
                    labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                    NAME.to_string(),
                ),
                (owner.0.to_string(), owner.1),
            ])),
            generation: Some(1),
            ..Default::default()
        };
        if child.scaling_group {
            let existing: Option<PodCliqueScalingGroup> = d.object(Some(NS), &name);
            let group = set
                .spec
                .template
                .pod_clique_scaling_groups
                .iter()
                .find(|p| p.name == lower)
                .unwrap();
            let desired = existing
                .as_ref()
                .and_then(|e| e.spec.replicas)
                .or(group.replicas)
                .unwrap_or(1);
            let up = ready.unwrap_or(desired).min(desired);
            d.insert(PodCliqueScalingGroup {
                metadata: existing.as_ref().map_or(meta, |e| e.metadata.clone()),
                spec: PodCliqueScalingGroupSpec {
                    replicas: Some(desired),
                    min_available: group.min_available,
                    clique_names: group.clique_names.clone(),
                },
                status: Some(PodCliqueScalingGroupStatus {
                    observed_generation: existing
                        .as_ref()
                        .and_then(|e| e.metadata.generation)
                        .or(Some(1)),
                    replicas: Some(desired),
                    scheduled_replicas: desired,
                    available_replicas: up,
                    updated_replicas: desired,
                    current_pod_clique_set_generation_hash: Some(hash.clone()),
                    ..Default::default()
                }),
            });
        } else {
            let existing: Option<PodClique> = d.object(Some(NS), &name);
            let clique = set
                .spec
                .template
                .cliques
                .iter()
                .find(|p| p.name == lower)
                .unwrap();
            let desired = existing
                .as_ref()
                .map_or(clique.spec.replicas, |e| e.spec.clique.replicas);
            let up = ready.unwrap_or(desired).min(desired);
            let mut spec = clique.spec.clone();
            spec.replicas = desired;
            d.insert(PodClique {
                metadata: existing.as_ref().map_or(meta, |e| e.metadata.clone()),
                spec: PodCliqueResourceSpec { clique: spec },
                status: Some(PodCliqueStatus {
                    observed_generation: existing
                        .as_ref()
                        .and_then(|e| e.metadata.generation)
                        .or(Some(1)),
                    replicas: Some(desired),
                    ready_replicas: up,
                    updated_replicas: desired,
                    scheduled_replicas: desired,
                    current_pod_clique_set_generation_hash: Some(hash.clone()),
                    ..Default::default()
                }),
            });
        }
    }
}
