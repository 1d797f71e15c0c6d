//! The pathway abstraction ([`Deployer`]) and the helpers the backend tests share.

use std::collections::BTreeMap;

use api::DynamoComponentDeploymentSharedSpec;
use api::common::MultinodeSpec;
use api::v1beta1::ComponentType;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::Infrastructure;

/// The component the upstream cases use: a worker named `name` (`test-service` in most),
/// multinode when `nodes` is more than 1.
pub(crate) fn component(name: &str, nodes: i32) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(ComponentType::Worker),
        multinode: (nodes > 1).then_some(MultinodeSpec { node_count: nodes }),
        ..Default::default()
    }
}

/// The rendering context of one pod.
#[derive(Clone, Copy)]
pub(crate) struct Pod<'a> {
    pub nodes: i32,
    pub role: Role,
    pub deployer: Deployer,
    pub backend: Backend,
    pub annotations: &'a [(&'a str, &'a str)],
    pub graph: Option<&'a str>,
    pub name: &'a str,
}

impl<'a> Pod<'a> {
    pub fn new(nodes: i32, role: Role, deployer: Deployer, backend: Backend) -> Self {
        Pod {
            nodes,
            role,
            deployer,
            backend,
            annotations: &[],
            graph: Some("test-dgd"),
            name: "test-service",
        }
    }

    pub fn named(mut self, name: &'a str) -> Self {
        self.name = name;
        self
    }

    pub fn annotated(mut self, annotations: &'a [(&'a str, &'a str)]) -> Self {
        self.annotations = annotations;
        self
    }

    /// `f` with the pod's input.
    pub fn with<R>(&self, f: impl FnOnce(&PodInput<'_>) -> R) -> R {
        let component = component(self.name, self.nodes);
        let annotations: BTreeMap<String, String> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let infrastructure = Infrastructure::default();
        f(&PodInput {
            graph: self.graph,
            namespace: "ns",
            component: &component,
            component_type: "worker",
            dynamo_namespace: "ns-test-dgd",
            worker_hash: None,
            annotations: &annotations,
            kube_discovery: true,
            backend: self.backend,
            graph_env: &[],
            kv_transfer: None,
            pull_secrets: &crate::PullSecrets::default(),
            infrastructure: &infrastructure,
            runtime_version: None,
            checkpoint: None,
            role: self.role,
            deployer: self.deployer,
        })
    }

    /// The engine container after the backend's container wiring.
    pub fn container(&self, mut c: Container) -> Container {
        self.with(|input| super::container(&mut c, input));
        c
    }

    /// The pod after the backend's pod wiring.
    pub fn pod(&self, mut spec: PodSpec) -> PodSpec {
        self.with(|input| super::pod(&mut spec, input));
        spec
    }
}

/// A container running `command` with `args`.
pub(crate) fn engine(command: &[&str], args: &[&str]) -> Container {
    Container {
        name: "main".into(),
        command: (!command.is_empty()).then(|| command.iter().map(|s| s.to_string()).collect()),
        args: (!args.is_empty()).then(|| args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

/// Resources asking for `gpus` GPUs (as limits; none when 0).
pub(crate) fn gpus(gpus: i64) -> Option<ResourceRequirements> {
    (gpus > 0).then(|| ResourceRequirements {
        limits: Some(BTreeMap::from([(
            "nvidia.com/gpu".to_string(),
            Quantity(gpus.to_string()),
        )])),
        ..Default::default()
    })
}

pub(crate) fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

const GROVE_LEADER: &str =
    "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)";

/// Upstream's `TestTRTLLMBackend_hostNamesList` (4 cases) and the pathways' leader address and
/// worker rank.
#[test]
fn host_names_per_pathway() {
    let cases: [(&str, Deployer, &str, i32, &[&str]); 4] = [
        (
            "Grove deployment with 3 nodes",
            Deployer::Grove,
            "test-service",
            3,
            &[
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-wkr-0.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-wkr-1.$(GROVE_HEADLESS_SERVICE)",
            ],
        ),
        (
            "LWS deployment with 2 nodes",
            Deployer::LeaderWorkerSet,
            "test-service",
            2,
            &[
                "$(LWS_LEADER_ADDRESS)",
                "$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-1\\./')",
            ],
        ),
        (
            "Grove deployment with 5 nodes",
            Deployer::Grove,
            "worker",
            5,
            &[
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-ldr-0.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-wkr-0.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-wkr-1.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-wkr-2.$(GROVE_HEADLESS_SERVICE)",
                "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-wkr-3.$(GROVE_HEADLESS_SERVICE)",
            ],
        ),
        (
            "LWS deployment with 4 nodes",
            Deployer::LeaderWorkerSet,
            "worker",
            4,
            &[
                "$(LWS_LEADER_ADDRESS)",
                "$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-1\\./')",
                "$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-2\\./')",
                "$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-3\\./')",
            ],
        ),
    ];
    for (name, deployer, component, nodes, want) in cases {
        assert_eq!(
            deployer.host_names(component, nodes),
            strings(want),
            "{name}"
        );
    }
    assert_eq!(
        Deployer::Grove.leader_address("Decode"),
        GROVE_LEADER.replace("test-service", "decode")
    );
    assert_eq!(
        Deployer::Grove.worker_rank(),
        ("$((GROVE_PCLQ_POD_INDEX + 1))", true)
    );
    assert_eq!(
        Deployer::LeaderWorkerSet.worker_rank(),
        ("$(LWS_WORKER_INDEX)", false)
    );
    assert!(Deployer::LeaderWorkerSet.waits_for_worker_dns());
    assert!(!Deployer::Grove.waits_for_worker_dns());
}

/// Upstream's `TestTRTLLMBackend_getGPUsPerNode` (7 cases, the GPUs of the engine container
/// here) and the GPU-like resource names.
#[test]
fn container_gpus_requests_first() {
    let resources = |requests: &[(&str, &str)], limits: &[(&str, &str)]| {
        let list = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Some(ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        })
    };
    let cases: [(&str, Option<ResourceRequirements>, i64); 10] = [
        ("No resources - default to 0", None, 0),
        ("Empty resources - default to 0", resources(&[], &[]), 0),
        (
            "GPU in requests",
            resources(&[("nvidia.com/gpu", "2")], &[]),
            2,
        ),
        (
            "GPU in limits",
            resources(&[], &[("nvidia.com/gpu", "4")]),
            4,
        ),
        (
            "GPU in both requests and limits - requests takes precedence",
            resources(&[("nvidia.com/gpu", "3")], &[("nvidia.com/gpu", "8")]),
            3,
        ),
        (
            "Invalid GPU value - default to 0",
            resources(&[("nvidia.com/gpu", "invalid")], &[]),
            0,
        ),
        (
            "Empty GPU string - default to 0",
            resources(&[("nvidia.com/gpu", "")], &[]),
            0,
        ),
        (
            "another vendor's GPU",
            resources(&[], &[("amd.com/gpu", "2")]),
            2,
        ),
        (
            "a MIG slice",
            resources(&[("nvidia.com/mig-1g.10gb", "1")], &[]),
            1,
        ),
        ("not a GPU", resources(&[("cpu", "8")], &[]), 0),
    ];
    for (name, resources, want) in cases {
        assert_eq!(container_gpus(resources.as_ref()), want, "{name}");
    }
}

/// Single-node components and components of no backend get no wiring (upstream's
/// `NoopBackend` and the single-node rows of every backend test).
#[test]
fn single_node_and_no_backend_are_left_alone() {
    for backend in [
        Backend::Sglang,
        Backend::Vllm,
        Backend::Trtllm,
        Backend::None,
    ] {
        let mut c = engine(
            &["python3", "-m", "dynamo.vllm"],
            &["--tensor-parallel-size", "8"],
        );
        c.resources = gpus(4);
        let pod = Pod::new(1, Role::Main, Deployer::Grove, backend);
        assert_eq!(pod.container(c.clone()), c, "{backend:?}");
        let spec = PodSpec {
            containers: vec![c.clone()],
            ..Default::default()
        };
        assert_eq!(pod.pod(spec.clone()), spec, "{backend:?}");
    }
    let c = engine(&["python3", "-m", "x"], &[]);
    let pod = Pod::new(2, Role::Worker, Deployer::Grove, Backend::None);
    assert_eq!(pod.container(c.clone()), c);
}
