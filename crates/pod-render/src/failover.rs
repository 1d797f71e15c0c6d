//! Intra-pod failover (`experimental.failover`, mode unset or `IntraPod`), as upstream 1.5
//! renders it (`buildFailoverPod`, `buildEngineContainer`, `applyVLLMOverrides`; the revision
//! that supports vLLM only), applied after the GPU memory service ([`crate::gms`]), so both
//! engines inherit main's claim, socket mount and `GMS_SOCKET_DIR`:
//! - `main` (the first container) is replaced by [`ENGINE_COUNT`] clones `engine-0`
//!   (active) and `engine-1` (standby); the other containers follow them in order. There is no
//!   second `gms-server`: both engines use the pod's one;
//! - engine `i` has the single port `system-<i>` (9090 + i; main's other ports, `nixl`
//!   included, are dropped), its HTTP startup, liveness and readiness probes on that port, and
//!   env without `DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS`, `DYN_HEALTH_CHECK_ENABLED` and with
//!   `ENGINE_ID=<i>`, `CONTAINER_NAME=engine-<i>`,
//!   `FAILOVER_LOCK_PATH=/gms-intrapod-control/failover.lock`,
//!   `DYN_SYSTEM_STARTING_HEALTH_STATUS=notready`, `DYN_SYSTEM_PORT=<9090 + i>`,
//!   `DYN_SYSTEM_ENABLED=true` (these replace entries of the same name);
//! - vLLM: `DYN_VLLM_GMS_SHADOW_MODE=true`, `VLLM_NIXL_SIDE_CHANNEL_PORT=<5600 + i>`, `NNODES`
//!   when multinode; engine-1's `--master-port N` becomes N + 100 (found as an argument pair,
//!   or inside a shell line of the args, then of the command), and without one it gets
//!   `--master-port 29600` appended to its args.
//!
//! Validation refuses failover for other backends (upstream's 1.5-era revision fails them), in
//! inter-pod mode (not supported) and with `dynamoSidecar`. Later upstream revisions add more
//! engine env (primary engine id, lock-before-init, per-engine forward-pass metrics port,
//! discovery debounce) and SGLang/TensorRT-LLM support; they are not in 1.5.0 and not rendered.

use api::v1beta1::DynamoComponentDeploymentSharedSpec;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::parts::{env, port};
use crate::{Backend, PodInput, SYSTEM_PORT, gms};

/// Engine containers of an intra-pod failover pod (one active, one standby, whatever
/// `numShadows` says).
pub const ENGINE_COUNT: usize = 2;
/// The failover lock the engines elect the active one with, in the GMS socket directory.
pub const LOCK_FILE: &str = "failover.lock";
/// First port of vLLM's NIXL side channel (engine `i` gets this + i).
pub const VLLM_NIXL_SIDE_CHANNEL_BASE_PORT: i32 = 5600;
/// vLLM's default `--master-port` (torch.distributed store).
pub const VLLM_MASTER_PORT: i32 = 29500;
/// How far apart the engines' `--master-port`s are.
pub const VLLM_MASTER_PORT_STRIDE: i32 = 100;

const MASTER_PORT_FLAG: &str = "--master-port";
/// Env of main the engines do not inherit (they get their own values or none).
const REMOVED_ENV: [&str; 5] = [
    "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS",
    "DYN_SYSTEM_PORT",
    "DYN_SYSTEM_ENABLED",
    "DYN_HEALTH_CHECK_ENABLED",
    "CONTAINER_NAME",
];

/// The name of engine container `i`: `engine-<i>`.
pub fn engine_name(i: usize) -> String {
    format!("engine-{i}")
}

/// The engine container names of an intra-pod failover pod: `engine-0`, `engine-1`.
pub fn engine_names() -> Vec<String> {
    (0..ENGINE_COUNT).map(engine_name).collect()
}

/// How many leading containers of the component's rendered pod run its engine: the engines
/// with intra-pod failover, else `main` alone.
pub fn engine_containers(component: &DynamoComponentDeploymentSharedSpec) -> usize {
    if component.is_intra_pod_failover() {
        ENGINE_COUNT
    } else {
        1
    }
}

/// Replace `main` by the engines (see the module docs); nothing without intra-pod failover.
pub(crate) fn apply(spec: &mut PodSpec, input: &PodInput<'_>) {
    if !input.component.is_intra_pod_failover() || spec.containers.is_empty() {
        return;
    }
    let main = spec.containers.remove(0);
    let nodes = input.component.number_of_nodes();
    let engines: Vec<Container> = (0..ENGINE_COUNT)
        .map(|i| {
            let mut engine = engine(&main, i);
            if input.backend == Backend::Vllm {
                vllm(&mut engine, i, nodes);
            }
            engine
        })
        .collect();
    spec.containers.splice(0..0, engines);
}

/// Engine `i`: main's clone with its own name, port, probes and env.
fn engine(main: &Container, i: usize) -> Container {
    let mut engine = main.clone();
    engine.name = engine_name(i);
    let offset = i32::try_from(i).unwrap_or_default();
    let port_name = format!("{}-{i}", crate::SYSTEM_PORT_NAME);
    let system_port = SYSTEM_PORT + offset;
    engine.ports = Some(vec![port(&port_name, system_port)]);
    let vars = engine.env.get_or_insert_with(Vec::new);
    vars.retain(|e| !REMOVED_ENV.contains(&e.name.as_str()));
    set_env(
        vars,
        [
            env("ENGINE_ID", &i.to_string()),
            env("CONTAINER_NAME", &engine_name(i)),
            env(
                "FAILOVER_LOCK_PATH",
                &format!("{}/{LOCK_FILE}", gms::SOCKET_DIR),
            ),
            env("DYN_SYSTEM_STARTING_HEALTH_STATUS", "notready"),
            env("DYN_SYSTEM_PORT", &system_port.to_string()),
            env("DYN_SYSTEM_ENABLED", "true"),
        ],
    );
    for probe in [
        &mut engine.startup_probe,
        &mut engine.liveness_probe,
        &mut engine.readiness_probe,
    ] {
        retarget(probe.as_mut(), &port_name);
    }
    engine
}

/// An HTTP probe now asks `port`.
fn retarget(probe: Option<&mut Probe>, port: &str) {
    if let Some(get) = probe.and_then(|p| p.http_get.as_mut()) {
        get.port = IntOrString::String(port.into());
    }
}

/// Each var of `set` replaces the entries of its name and goes to the end, in order.
fn set_env(vars: &mut Vec<EnvVar>, set: impl IntoIterator<Item = EnvVar>) {
    for var in set {
        vars.retain(|e| e.name != var.name);
        vars.push(var);
    }
}

/// vLLM's per-engine settings (upstream's `applyVLLMOverrides`).
fn vllm(engine: &mut Container, i: usize, nodes: i32) {
    let offset = i32::try_from(i).unwrap_or_default();
    let vars = engine.env.get_or_insert_with(Vec::new);
    set_env(
        vars,
        [
            env("DYN_VLLM_GMS_SHADOW_MODE", "true"),
            env(
                "VLLM_NIXL_SIDE_CHANNEL_PORT",
                &(VLLM_NIXL_SIDE_CHANNEL_BASE_PORT + offset).to_string(),
            ),
        ],
    );
    if i > 0 {
        let shift = offset * VLLM_MASTER_PORT_STRIDE;
        if has_master_port(engine) {
            stagger_master_port(engine, shift);
        } else {
            engine.args.get_or_insert_with(Vec::new).extend([
                MASTER_PORT_FLAG.to_string(),
                (VLLM_MASTER_PORT + shift).to_string(),
            ]);
        }
    }
    if nodes > 1 {
        set_env(
            engine.env.get_or_insert_with(Vec::new),
            [env("NNODES", &nodes.to_string())],
        );
    }
}

/// `--master-port` is an argument, or part of a shell line of the args or the command.
fn has_master_port(c: &Container) -> bool {
    let spaced = format!("{MASTER_PORT_FLAG} ");
    c.args
        .iter()
        .flatten()
        .any(|a| a == MASTER_PORT_FLAG || a.contains(&spaced))
        || c.command.iter().flatten().any(|a| a.contains(&spaced))
}

/// Adds `shift` to the first `--master-port N`: an argument pair, else inside an argument,
/// else inside a command word. A value that is not a number is left alone.
fn stagger_master_port(c: &mut Container, shift: i32) {
    if let Some(args) = c.args.as_mut() {
        if let Some(k) = (0..args.len().saturating_sub(1))
            .find(|&k| args[k] == MASTER_PORT_FLAG && args[k + 1].parse::<i32>().is_ok())
        {
            let port: i32 = args[k + 1].parse().unwrap_or_default();
            args[k + 1] = (port + shift).to_string();
            return;
        }
        if shift_in_line(args, shift) {
            return;
        }
    }
    if let Some(command) = c.command.as_mut() {
        shift_in_line(command, shift);
    }
}

/// Shifts the first `--master-port <digits>` inside one of `words`; whether one was found.
fn shift_in_line(words: &mut [String], shift: i32) -> bool {
    let spaced = format!("{MASTER_PORT_FLAG} ");
    for word in words.iter_mut() {
        let Some(at) = word.find(&spaced) else {
            continue;
        };
        let start = at + spaced.len();
        let digits: String = word[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(port) = digits.parse::<i32>() else {
            continue;
        };
        word.replace_range(start..start + digits.len(), &(port + shift).to_string());
        return true;
    }
    false
}
