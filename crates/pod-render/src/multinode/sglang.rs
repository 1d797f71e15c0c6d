//! SGLang multinode: every pod runs the engine with
//! `--dist-init-addr <leader>:29500 --nnodes <n> --node-rank <rank>` (the leader's rank is
//! `0`, a worker's the pathway's, [`super::Deployer::worker_rank`]), injected as
//! [`super::shell::inject`] describes; worker pods have no probes.

use k8s_openapi::api::core::v1::Container;

use super::{Role, drop_probes, shell};
use crate::PodInput;

/// Port the ranks rendezvous on at the leader (`--dist-init-addr`).
pub const DIST_INIT_PORT: i32 = 29500;

/// The launch flags of a pod of `role` and whether they need a shell.
pub fn flags(input: &PodInput<'_>, nodes: i32) -> (String, bool) {
    let leader = input.deployer.leader_address(&input.component.name);
    let (rank, needs_shell) = match input.role {
        Role::Leader => ("0", false),
        Role::Worker | Role::Main => input.deployer.worker_rank(),
    };
    (
        format!("--dist-init-addr {leader}:{DIST_INIT_PORT} --nnodes {nodes} --node-rank {rank}"),
        needs_shell,
    )
}

pub(crate) fn container(main: &mut Container, input: &PodInput<'_>, nodes: i32) {
    if input.role == Role::Worker {
        drop_probes(main);
    }
    let (flags, needs_shell) = flags(input, nodes);
    shell::inject(main, &flags, needs_shell, "sglang");
}

#[cfg(test)]
#[path = "sglang_tests.rs"]
mod tests;
