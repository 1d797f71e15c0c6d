//! The launch wiring of a multinode component (`multinode.nodeCount` > 1): the leader pod and
//! the worker pods of each replica run one engine together. Written once for both pathways;
//! what differs between them is how a pod finds its leader, its rank and its peers
//! ([`Deployer`], upstream's per-pathway "multinode deployer"):
//!
//! | | LeaderWorkerSet (component pathway) | Grove |
//! | --- | --- | --- |
//! | leader address | `$(LWS_LEADER_ADDRESS)` | `$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-<component>-ldr-0.$(GROVE_HEADLESS_SERVICE)` |
//! | worker rank | `$(LWS_WORKER_INDEX)` (the kubelet expands it) | `$((GROVE_PCLQ_POD_INDEX + 1))` (a shell must evaluate it) |
//! | worker `i` (1-based) address | `$(echo "$LWS_LEADER_ADDRESS" \| sed 's/\./-i\./')` | `...-<component>-wkr-<i-1>.$(GROVE_HEADLESS_SERVICE)` |
//! | leader waits for workers' DNS | yes | no (the leader clique starts after the workers) |
//!
//! The node count is written as the number itself on both pathways; the leader's rank is `0`.
//! What each backend does with them ([`container`] on the engine container before `/dev/shm`
//! is mounted, [`pod`] on the finished pod before the sidecars, the GPU memory service and
//! failover, as upstream's `UpdateContainer` / `UpdatePodSpec`):
//! - SGLang ([`sglang`]): `--dist-init-addr <leader>:29500 --nnodes <n> --node-rank <rank>`;
//!   worker pods lose their probes;
//! - vLLM ([`vllm`]): Ray (leader `ray start --head` before the engine, workers `ray start
//!   --address`), multiprocessing (`--distributed-executor-backend mp` with `--master-addr`,
//!   workers `--headless` behind the `wait-for-leader-mp` init container), data parallel
//!   (`--data-parallel-*`) or elastic EP; worker pods lose their probes;
//! - TensorRT-LLM ([`trtllm`]): the MPI SSH key Secret mounted at `/ssh-pk`, the leader runs
//!   `mpirun` over every node, the workers run `sshd`; worker pods are ready when SSH is.
//!
//! Components of other backends (and non-workers) get none of it.

pub mod sglang;
pub mod shell;
pub mod trtllm;
pub mod vllm;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::{Backend, PodInput};

/// Suffix of the leader clique of a multinode component on the Grove pathway.
pub const ROLE_SUFFIX_LEADER: &str = "ldr";
/// Suffix of the worker clique of a multinode component on the Grove pathway.
pub const ROLE_SUFFIX_WORKER: &str = "wkr";

/// What a pod of a component does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The pods of a single-node component.
    #[default]
    Main,
    /// The leader pod of a multinode replica.
    Leader,
    /// The worker pods of a multinode replica.
    Worker,
}

/// How the pods of a multinode replica find each other (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deployer {
    /// A LeaderWorkerSet (the component pathway).
    #[default]
    LeaderWorkerSet,
    /// A Grove PodCliqueScalingGroup.
    Grove,
}

impl Deployer {
    /// The leader's address, in the kubelet's `$(VAR)` syntax.
    pub fn leader_address(self, component: &str) -> String {
        match self {
            Deployer::LeaderWorkerSet => "$(LWS_LEADER_ADDRESS)".into(),
            Deployer::Grove => grove_address(component, ROLE_SUFFIX_LEADER, 0),
        }
    }

    /// A worker pod's rank and whether only a shell can evaluate it.
    pub fn worker_rank(self) -> (&'static str, bool) {
        match self {
            Deployer::LeaderWorkerSet => ("$(LWS_WORKER_INDEX)", false),
            Deployer::Grove => ("$((GROVE_PCLQ_POD_INDEX + 1))", true),
        }
    }

    /// Whether the leader must wait for its workers' names to resolve before it reaches them
    /// (the LeaderWorkerSet starts every pod at once).
    pub fn waits_for_worker_dns(self) -> bool {
        self == Deployer::LeaderWorkerSet
    }

    /// The addresses of all `nodes` pods of a replica, the leader first. The LeaderWorkerSet's
    /// workers are derived from the leader's address by a shell command substitution, so the
    /// list is for a shell line.
    pub fn host_names(self, component: &str, nodes: i32) -> Vec<String> {
        let workers = (1..nodes.max(1)).map(|i| match self {
            Deployer::LeaderWorkerSet => {
                format!("$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-{i}\\./')")
            }
            Deployer::Grove => grove_address(component, ROLE_SUFFIX_WORKER, i - 1),
        });
        std::iter::once(self.leader_address(component))
            .chain(workers)
            .collect()
    }
}

/// A pod of a Grove clique of `component`: `<scaling group>-<index>-<component>-<role>-<i>`
/// under the PodCliqueSet's headless Service.
fn grove_address(component: &str, role: &str, index: i32) -> String {
    format!(
        "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{}-{role}-{index}.$(GROVE_HEADLESS_SERVICE)",
        component.to_lowercase()
    )
}

/// The backend's wiring of the engine container (see the module docs); nothing for a
/// single-node component.
pub(crate) fn container(main: &mut Container, input: &PodInput<'_>) {
    let nodes = input.component.number_of_nodes();
    if nodes <= 1 {
        return;
    }
    match input.backend {
        Backend::Sglang => sglang::container(main, input, nodes),
        Backend::Vllm => vllm::container(main, input, nodes),
        Backend::Trtllm => trtllm::container(main, input, nodes),
        Backend::None => {}
    }
}

/// The backend's wiring of the pod: the vLLM wait-for-leader init container, the MPI SSH key
/// volume.
pub(crate) fn pod(spec: &mut PodSpec, input: &PodInput<'_>) {
    let nodes = input.component.number_of_nodes();
    if nodes <= 1 {
        return;
    }
    match input.backend {
        Backend::Vllm => vllm::pod(spec, input),
        Backend::Trtllm => trtllm::pod(spec),
        Backend::Sglang | Backend::None => {}
    }
}

/// A pod-template annotation of the component: the pathway's (propagated graph annotations
/// included), else the component's own.
pub(crate) fn annotation<'a>(input: &PodInput<'a>, key: &str) -> Option<&'a str> {
    input.annotations.get(key).map(String::as_str).or_else(|| {
        input
            .component
            .pod_template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(key))
            .map(String::as_str)
    })
}

/// GPUs of one engine container, as upstream counts them for launch flags: its requests, else
/// its limits; `nvidia.com/gpu`, else the first GPU-like resource (`gpu`, `*/gpu`,
/// `*.com/gpu*`, `mig-*`); 0 when none.
pub fn container_gpus(resources: Option<&ResourceRequirements>) -> i64 {
    let of = |list: Option<&BTreeMap<String, Quantity>>| -> Option<i64> {
        let list = list?;
        let quantity = list
            .get("nvidia.com/gpu")
            .or_else(|| list.iter().find(|(k, _)| is_gpu(k)).map(|(_, q)| q))?;
        Some(quantity_value(quantity))
    };
    let Some(resources) = resources else {
        return 0;
    };
    of(resources.requests.as_ref())
        .or_else(|| of(resources.limits.as_ref()))
        .unwrap_or(0)
}

fn is_gpu(name: &str) -> bool {
    let name = name.to_lowercase();
    name == "gpu"
        || name == "nvidia/gpu"
        || name.ends_with("/gpu")
        || name.contains(".com/gpu")
        || name.starts_with("mig-")
        || name.contains("/mig-")
}

/// The integer value of a count quantity (`4`, `4.0`); 0 when it is not a number.
fn quantity_value(q: &Quantity) -> i64 {
    let text = q.0.trim();
    text.parse::<i64>()
        .ok()
        .or_else(|| text.parse::<f64>().ok().map(|f| f.ceil() as i64))
        .unwrap_or(0)
}

/// Remove the engine's liveness, readiness and startup probes (multinode worker pods).
pub(crate) fn drop_probes(main: &mut Container) {
    main.liveness_probe = None;
    main.readiness_probe = None;
    main.startup_probe = None;
}

#[cfg(test)]
#[path = "multinode_tests.rs"]
mod tests;
