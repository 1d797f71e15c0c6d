//! vLLM multinode. Which launch a component gets depends on its args and its engine
//! container's GPUs ([`super::container_gpus`]; `0` GPUs: no launch wiring):
//!
//! | launch | when | leader | worker |
//! | --- | --- | --- | --- |
//! | multiprocessing | TP × PP > GPUs and [`uses_multiprocessing`] | the engine with `--distributed-executor-backend mp --nnodes <n> --master-addr <leader> --master-port 29500 --node-rank 0` | the same with `--node-rank <rank> --headless`, behind the `wait-for-leader-mp` init container |
//! | Ray | TP × PP > GPUs otherwise | `/bin/sh -c "ray start --head --port=6379 && <engine> --distributed-executor-backend ray"` | `/bin/sh -c "ray start --address=<leader>:6379 --block"` |
//! | elastic EP | `--enable-elastic-ep` | a Ray head in the background, polled until it listens, then the engine | waits for the leader's `/live` on the system port, then joins the Ray cluster |
//! | data parallel | TP × PP × DP > GPUs | the engine with `--data-parallel-hybrid-lb [--data-parallel-size <total>] --data-parallel-size-local <GPUs / (TP × PP)> --data-parallel-start-rank 0 --data-parallel-address <leader> --data-parallel-rpc-port 13445` | the same with start rank `$(( <local> * <rank> ))` (a shell evaluates it) |
//!
//! TP, PP and DP are `--tensor-parallel-size`, `--pipeline-parallel-size` and
//! `--data-parallel-size` in the args (1 when absent); the total DP size is the flag's, else
//! `local × nodes` (and the flag is not repeated when given). With multiprocessing every pod
//! also gets `VLLM_NIXL_SIDE_CHANNEL_HOST` from `status.podIP`. Worker pods have no probes.
//!
//! The wait-for-leader init container (worker pods whose engine runs
//! `--distributed-executor-backend mp`, in a graph): `wait-for-leader-mp`, the engine's image,
//! `sh -c 'export LEADER_HOST="<leader, as ${VAR}>" LEADER_PORT="29500" && exec python3
//! /scripts/wait-for-leader.py'`, mounting the graph's ConfigMap `<graph>-wait-leader-script`
//! (volume `wait-leader-script`, read-only at `/scripts`).

use api::labels;
use api::runtime_version::RuntimeVersion;
use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, Container, PodSpec, Volume, VolumeMount};

use super::{Role, annotation, container_gpus, drop_probes, shell};
use crate::failover::VLLM_MASTER_PORT;
use crate::parts::field_env;
use crate::{PodInput, SYSTEM_PORT, cache};

/// Port of the Ray head on the leader.
pub const RAY_PORT: i32 = 6379;
/// Port of the data-parallel coordinator's RPC on the leader.
pub const DATA_PARALLEL_RPC_PORT: i32 = 13445;
/// Env telling vLLM which address to use for the NIXL side channel (multiprocessing).
pub const NIXL_SIDE_CHANNEL_HOST: &str = "VLLM_NIXL_SIDE_CHANNEL_HOST";
/// The init container that holds a multiprocessing worker until the leader listens.
pub const WAIT_FOR_LEADER_CONTAINER: &str = "wait-for-leader-mp";
/// Key of the wait-for-leader script in its ConfigMap.
pub const WAIT_LEADER_SCRIPT_KEY: &str = "wait-for-leader.py";
/// Name of the volume the script is mounted from.
pub const WAIT_LEADER_VOLUME: &str = "wait-leader-script";
/// Where the script is mounted.
pub const WAIT_LEADER_MOUNT_PATH: &str = "/scripts";
/// First operator version whose graphs launch with multiprocessing instead of Ray (upstream's
/// `VLLMMultiprocessing` origin gate).
pub const MULTIPROCESSING_MIN_ORIGIN: RuntimeVersion = RuntimeVersion::new(1, 0, 0);

const TENSOR_PARALLEL_SIZE: &str = "--tensor-parallel-size";
const PIPELINE_PARALLEL_SIZE: &str = "--pipeline-parallel-size";
const DATA_PARALLEL_SIZE: &str = "--data-parallel-size";
const DATA_PARALLEL_SIZE_LOCAL: &str = "--data-parallel-size-local";
const DISTRIBUTED_EXECUTOR_BACKEND: &str = "--distributed-executor-backend";
const ENABLE_ELASTIC_EP: &str = "--enable-elastic-ep";

/// The wait-for-leader ConfigMap of a graph: `<graph>-wait-leader-script`.
pub fn wait_leader_config_map(graph: &str) -> String {
    format!("{graph}-wait-leader-script")
}

/// How a multinode vLLM engine is launched (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// `--distributed-executor-backend mp` across the nodes.
    Multiprocessing,
    /// A Ray cluster across the nodes.
    Ray,
    /// Elastic expert parallelism over a Ray cluster.
    ElasticEp,
    /// One data-parallel group of engines per node.
    DataParallel,
    /// Nothing to wire.
    None,
}

/// The launch of an engine with these (blank-split) `args` on a container with `gpus` GPUs.
pub fn launch(args: &[String], gpus: i64, multiprocessing: bool) -> Launch {
    let world = world_size(args);
    if gpus != 0 && world > gpus {
        if multiprocessing {
            Launch::Multiprocessing
        } else {
            Launch::Ray
        }
    } else if has_flag(args, ENABLE_ELASTIC_EP) {
        Launch::ElasticEp
    } else if gpus != 0 && world * flag_value(args, DATA_PARALLEL_SIZE) > gpus {
        Launch::DataParallel
    } else {
        Launch::None
    }
}

/// Whether multinode vLLM launches with multiprocessing rather than Ray: the
/// `nvidia.com/vllm-distributed-executor-backend` annotation when it says `mp` or `ray` (any
/// case), else whether the graph was created by an operator of at least
/// [`MULTIPROCESSING_MIN_ORIGIN`] (`nvidia.com/dynamo-operator-origin-version`; absent or not a
/// version: Ray).
pub fn uses_multiprocessing(input: &PodInput<'_>) -> bool {
    match annotation(input, labels::VLLM_DISTRIBUTED_EXECUTOR_BACKEND)
        .map(str::to_lowercase)
        .as_deref()
    {
        Some("mp") => true,
        Some("ray") => false,
        _ => annotation(input, labels::DYNAMO_OPERATOR_ORIGIN_VERSION)
            .is_some_and(|v| origin_at_least(v, MULTIPROCESSING_MIN_ORIGIN)),
    }
}

/// Whether the origin version `value` (`1.2.3`, `v1.2`, `1`; a pre-release sorts before its
/// release) is at least `min`.
fn origin_at_least(value: &str, min: RuntimeVersion) -> bool {
    let value = value.trim();
    let value = value.strip_prefix(['v', 'V']).unwrap_or(value);
    let value = value.split_once('+').map_or(value, |(v, _)| v);
    let (core, pre) = match value.split_once('-') {
        Some((core, pre)) => (core, !pre.is_empty()),
        None => (value, false),
    };
    let parts: Vec<Option<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(Option::is_none) {
        return false;
    }
    let part = |i: usize| parts.get(i).copied().flatten().unwrap_or(0);
    let version = RuntimeVersion::new(part(0), part(1), part(2));
    version > min || (version == min && !pre)
}

pub(crate) fn container(main: &mut Container, input: &PodInput<'_>, nodes: i32) {
    let gpus = container_gpus(main.resources.as_ref());
    let multiprocessing = uses_multiprocessing(input);
    let args = shell::split(main.args.iter().flatten());
    let leader = input.deployer.leader_address(&input.component.name);
    match launch(&args, gpus, multiprocessing) {
        Launch::Multiprocessing => multiprocessing_flags(main, input, &leader, nodes),
        Launch::Ray => ray(main, input.role, &leader),
        Launch::ElasticEp => elastic_ep(main, input.role, &leader),
        Launch::DataParallel => data_parallel(main, input, &args, &leader, gpus, nodes),
        Launch::None => {}
    }
    if multiprocessing {
        let vars = main.env.get_or_insert_with(Vec::new);
        // Before the compilation cache's env, which upstream sets last.
        let at = match vars.last() {
            Some(last) if last.name == cache::VLLM_CACHE_ROOT => vars.len() - 1,
            _ => vars.len(),
        };
        vars.insert(at, field_env(NIXL_SIDE_CHANNEL_HOST, "status.podIP"));
    }
    if input.role == Role::Worker {
        drop_probes(main);
    }
}

fn multiprocessing_flags(main: &mut Container, input: &PodInput<'_>, leader: &str, nodes: i32) {
    let mut flags = format!(
        "{DISTRIBUTED_EXECUTOR_BACKEND} mp --nnodes {nodes} --master-addr {leader} --master-port {VLLM_MASTER_PORT}"
    );
    let mut needs_shell = false;
    match input.role {
        Role::Leader => flags.push_str(" --node-rank 0"),
        Role::Worker => {
            let (rank, shell) = input.deployer.worker_rank();
            needs_shell = shell;
            flags.push_str(&format!(" --node-rank {rank} --headless"));
        }
        Role::Main => {}
    }
    shell::inject(main, &flags, needs_shell, "vllm");
}

/// The engine's command line, each word quoted for `sh -c`.
fn engine_line(main: &Container) -> (String, String) {
    (
        shell::quote_all(main.command.iter().flatten()),
        shell::quote_all(main.args.iter().flatten()),
    )
}

fn ray(main: &mut Container, role: Role, leader: &str) {
    match role {
        Role::Leader => {
            let (command, args) = engine_line(main);
            main.args = Some(vec![format!(
                "ray start --head --port={RAY_PORT} && {command} {args} {DISTRIBUTED_EXECUTOR_BACKEND} ray"
            )]);
        }
        Role::Worker => {
            main.args = Some(vec![format!(
                "ray start --address={leader}:{RAY_PORT} --block"
            )]);
        }
        Role::Main => {}
    }
    main.command = Some(vec!["/bin/sh".into(), "-c".into()]);
}

fn elastic_ep(main: &mut Container, role: Role, leader: &str) {
    match role {
        Role::Leader => {
            let (command, args) = engine_line(main);
            main.args = Some(vec![format!(
                "ray start --head --port={RAY_PORT} --block & i=0; until python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',{RAY_PORT}),timeout=1); s.close()\" 2>/dev/null; do i=$((i+1)); [ \"$i\" -ge 150 ] && {{ echo \"ERROR: Ray head did not start within 300s\" >&2; exit 1; }}; sleep 2; done && {command} {args}"
            )]);
        }
        Role::Worker => {
            main.args = Some(vec![format!(
                "i=0; until python3 -c \"import urllib.request; urllib.request.urlopen('http://{leader}:{SYSTEM_PORT}/live', timeout=5)\" 2>/dev/null; do i=$((i+1)); [ \"$i\" -ge 720 ] && {{ echo \"ERROR: leader /live did not become ready within 3h\" >&2; exit 1; }}; echo 'waiting for leader dynamo.vllm /live to return 200...'; sleep 15; done && ray start --address={leader}:{RAY_PORT} --block"
            )]);
        }
        Role::Main => {}
    }
    main.command = Some(vec!["/bin/sh".into(), "-c".into()]);
}

fn data_parallel(
    main: &mut Container,
    input: &PodInput<'_>,
    args: &[String],
    leader: &str,
    gpus: i64,
    nodes: i32,
) {
    let local = gpus.checked_div(world_size(args)).unwrap_or(0);
    let mut total = flag_value(args, DATA_PARALLEL_SIZE);
    if total == 1 {
        total = local * i64::from(nodes);
    }
    let (start, needs_shell) = match input.role {
        Role::Leader => ("0".to_string(), false),
        Role::Worker => {
            let (rank, _) = input.deployer.worker_rank();
            (format!("$(( {local} * {rank} ))"), true)
        }
        Role::Main => {
            shell::inject(main, "", false, "vllm");
            return;
        }
    };
    let mut flags = vec!["--data-parallel-hybrid-lb".to_string()];
    if !has_flag(args, DATA_PARALLEL_SIZE) {
        flags.extend([DATA_PARALLEL_SIZE.to_string(), total.to_string()]);
    }
    flags.extend([
        DATA_PARALLEL_SIZE_LOCAL.to_string(),
        local.to_string(),
        "--data-parallel-start-rank".into(),
        start,
        "--data-parallel-address".into(),
        leader.to_string(),
        "--data-parallel-rpc-port".into(),
        DATA_PARALLEL_RPC_PORT.to_string(),
    ]);
    shell::inject(main, &flags.join(" "), needs_shell, "vllm");
}

/// TP × PP of the args.
fn world_size(args: &[String]) -> i64 {
    flag_value(args, TENSOR_PARALLEL_SIZE) * flag_value(args, PIPELINE_PARALLEL_SIZE)
}

fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// The integer after the first `flag` that is followed by one; 1 when none is.
fn flag_value(args: &[String], flag: &str) -> i64 {
    args.windows(2)
        .filter(|w| w[0] == flag)
        .find_map(|w| w[1].parse::<i64>().ok())
        .unwrap_or(1)
}

/// The wait-for-leader init container and its volume (see the module docs).
pub(crate) fn pod(spec: &mut PodSpec, input: &PodInput<'_>) {
    let Some(graph) = input.graph.filter(|g| !g.is_empty()) else {
        return;
    };
    let Some(main) = spec.containers.first() else {
        return;
    };
    if input.role != Role::Worker
        || !shell::command_line_has_arg(main, DISTRIBUTED_EXECUTOR_BACKEND, "mp")
    {
        return;
    }
    let leader = shell_variables(&input.deployer.leader_address(&input.component.name));
    let init = Container {
        name: WAIT_FOR_LEADER_CONTAINER.into(),
        image: main.image.clone(),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            format!(
                "export LEADER_HOST=\"{leader}\" LEADER_PORT=\"{VLLM_MASTER_PORT}\" && exec python3 {WAIT_LEADER_MOUNT_PATH}/{WAIT_LEADER_SCRIPT_KEY}"
            ),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: WAIT_LEADER_VOLUME.into(),
            mount_path: WAIT_LEADER_MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    };
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: WAIT_LEADER_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: wait_leader_config_map(graph),
            ..Default::default()
        }),
        ..Default::default()
    });
    spec.init_containers.get_or_insert_with(Vec::new).push(init);
}

/// `$(VAR)` references (the kubelet's syntax, which cannot see the env the pathway adds to
/// init containers after the operator's) as `${VAR}` for the shell.
fn shell_variables(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("$(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if name_len > 0 && after[name_len..].starts_with(')') {
            out.push_str(&format!("${{{}}}", &after[..name_len]));
            rest = &after[name_len + 1..];
        } else {
            out.push_str("$(");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "vllm_tests.rs"]
mod tests;
