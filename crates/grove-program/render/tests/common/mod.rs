//! Fixtures of the renderer tests: graphs, inputs, and lookups into the rendered object.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use api::grove::{PodCliqueScalingGroupConfig, PodCliqueSet, PodCliqueTemplateSpec};
use api::v1beta1::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use grove_render::{Inputs, RenderError, RestartStamps, Settings, Workers};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A component of `type_` with a `main` container running `command`.
pub fn component(
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
                    image: Some("nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1".into()),
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

/// A stored graph `g` in namespace `ns`: a frontend, a multinode decode worker and a prefill
/// worker, all SGLang.
pub fn graph() -> DynamoGraphDeployment {
    let mut decode = component(
        "decode",
        ComponentType::Decode,
        &["python3", "-m", "dynamo.sglang"],
    );
    decode.multinode = Some(api::common::MultinodeSpec { node_count: 2 });
    let mut g = DynamoGraphDeployment::new(
        "g",
        api::DynamoGraphDeploymentSpec {
            components: vec![
                component("Frontend", ComponentType::Frontend, &[]),
                decode,
                component(
                    "prefill",
                    ComponentType::Prefill,
                    &["python3", "-m", "dynamo.sglang"],
                ),
            ],
            env: vec![EnvVar {
                name: "GRAPH".into(),
                value: Some("1".into()),
                value_from: None,
            }],
            ..Default::default()
        },
    );
    g.metadata = ObjectMeta {
        name: Some("g".into()),
        namespace: Some("ns".into()),
        uid: Some("uid-g".into()),
        generation: Some(1),
        ..Default::default()
    };
    g
}

/// Everything rendering reads besides the graph, with neutral values.
pub struct Fixture {
    pub workers: Workers,
    pub restart: Option<RestartStamps>,
    pub waiting: BTreeSet<String>,
    pub checkpoints: BTreeMap<String, grove_render::Checkpoint>,
    pub domains: Vec<String>,
    pub pull_secrets: grove_render::pod::PullSecrets,
    pub settings: Settings,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture {
            workers: Workers {
                hash: "abcd1234".into(),
                changed: false,
            },
            restart: None,
            waiting: BTreeSet::new(),
            checkpoints: BTreeMap::new(),
            domains: Vec::new(),
            pull_secrets: Default::default(),
            settings: Settings::default(),
        }
    }
}

impl Fixture {
    /// Render `dgd` given `existing`.
    pub fn render(
        &self,
        dgd: &DynamoGraphDeployment,
        existing: Option<&PodCliqueSet>,
    ) -> Result<PodCliqueSet, RenderError> {
        grove_render::render(&Inputs {
            dgd,
            existing,
            workers: &self.workers,
            restart: self.restart.as_ref(),
            waiting_for_checkpoint: &self.waiting,
            checkpoints: &self.checkpoints,
            topology_domains: &self.domains,
            pull_secrets: &self.pull_secrets,
            settings: &self.settings,
        })
    }
}

/// Render `dgd` with neutral inputs and no existing object.
pub fn fresh(dgd: &DynamoGraphDeployment) -> PodCliqueSet {
    Fixture::default().render(dgd, None).expect("renders")
}

pub fn clique<'a>(pcs: &'a PodCliqueSet, name: &str) -> &'a PodCliqueTemplateSpec {
    pcs.spec
        .template
        .cliques
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no clique {name}"))
}

pub fn clique_mut<'a>(pcs: &'a mut PodCliqueSet, name: &str) -> &'a mut PodCliqueTemplateSpec {
    pcs.spec
        .template
        .cliques
        .iter_mut()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no clique {name}"))
}

pub fn group<'a>(pcs: &'a PodCliqueSet, name: &str) -> &'a PodCliqueScalingGroupConfig {
    pcs.spec
        .template
        .pod_clique_scaling_groups
        .iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no scaling group {name}"))
}

pub fn main_env(c: &PodCliqueTemplateSpec, name: &str) -> Option<String> {
    c.spec.pod_spec.containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

pub fn clique_names(pcs: &PodCliqueSet) -> Vec<&str> {
    pcs.spec
        .template
        .cliques
        .iter()
        .map(|c| c.name.as_str())
        .collect()
}
