//! TensorRT-LLM multinode: `mpirun` on the leader starts one rank per GPU of every node over
//! SSH, with the MPI SSH key Secret ([`MPI_SSH_SECRET`], created by the operator per namespace)
//! on every pod:
//! - the pod: volume `mpi-run-ssh-secret` from the Secret (mode `0644`);
//! - the engine container: the Secret read-only at `/ssh-pk`, `OMPI_MCA_orte_keep_fqdn_hostnames=1`
//!   appended to its env;
//! - the leader: `/bin/sh -c` that installs the key pair under `$HOME/.ssh` (SSH config on port
//!   2222), on the LeaderWorkerSet waits (300 s at most) until every worker's name resolves,
//!   then runs `mpirun` (`--allow-run-as-root` when it runs as root) with
//!   `-n <nodes × GPUs per node> -H <all pods>`, `-x` for the container's env and the common
//!   CUDA/NCCL/Hugging Face variables, over `bash -c 'trtllm-llmapi-launch <engine>'`; its
//!   probes are kept;
//! - the workers: `/bin/sh -c` that installs the key pair, generates host keys and runs
//!   `sshd` on port 2222 in the foreground; no liveness or startup probe, ready when the SSH
//!   port accepts connections (TCP 2222, 20 s delay and period, 5 s timeout, 10 failures).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, PodSpec, Probe, SecretVolumeSource, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Role, container_gpus, shell};
use crate::PodInput;
use crate::parts::env;

/// The MPI SSH key Secret (and the pod volume mounting it).
pub const MPI_SSH_SECRET: &str = "mpi-run-ssh-secret";
/// Key of the private key in the Secret.
pub const PRIVATE_KEY: &str = "private.key";
/// Key of the public key (`authorized_keys` line) in the Secret.
pub const PUBLIC_KEY: &str = "private.key.pub";
/// Where the Secret is mounted.
pub const SSH_KEY_MOUNT_PATH: &str = "/ssh-pk";
/// The port `sshd` listens on in worker pods.
pub const SSH_PORT: i32 = 2222;
/// Mode of the Secret's files.
pub const SSH_KEY_MODE: i32 = 0o644;

/// Variables `mpirun` forwards to every rank besides the container's own.
const FORWARDED_ENV: [&str; 19] = [
    "CUDA_VISIBLE_DEVICES",
    "MODEL_PATH",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_ENDPOINT",
    "TOKENIZERS_PARALLELISM",
    "NCCL_DEBUG",
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "TENSORRT_LLM_CACHE_DIR",
    "HF_HOME",
    "TRANSFORMERS_CACHE",
    "HF_DATASETS_CACHE",
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "HOME",
    "USER",
    "TRTLLM_USE_UCX_KVCACHE",
];

pub(crate) fn container(main: &mut Container, input: &PodInput<'_>, nodes: i32) {
    if input.role == Role::Worker {
        main.liveness_probe = None;
        main.startup_probe = None;
        main.readiness_probe = Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(SSH_PORT),
                host: None,
            }),
            initial_delay_seconds: Some(20),
            period_seconds: Some(20),
            timeout_seconds: Some(5),
            failure_threshold: Some(10),
            ..Default::default()
        });
    }
    main.volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: MPI_SSH_SECRET.into(),
            mount_path: SSH_KEY_MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        });
    main.env
        .get_or_insert_with(Vec::new)
        .push(env("OMPI_MCA_orte_keep_fqdn_hostnames", "1"));
    match input.role {
        Role::Leader => leader(main, input, nodes),
        Role::Worker => worker(main),
        Role::Main => {}
    }
}

/// The Secret's volume.
pub(crate) fn pod(spec: &mut PodSpec) {
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: MPI_SSH_SECRET.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(MPI_SSH_SECRET.into()),
            default_mode: Some(SSH_KEY_MODE),
            ..Default::default()
        }),
        ..Default::default()
    });
}

/// The commands that install the key pair under `$HOME/.ssh` (`$HOME`, not `~`: the image may
/// set `HOME` while the shell runs as root).
fn install_key(directories: &str) -> Vec<String> {
    vec![
        format!("mkdir -p {directories}"),
        format!("ls -la {SSH_KEY_MOUNT_PATH}/"),
        format!("cp {SSH_KEY_MOUNT_PATH}/{PRIVATE_KEY} $HOME/.ssh/id_rsa"),
        format!("cp {SSH_KEY_MOUNT_PATH}/{PUBLIC_KEY} $HOME/.ssh/id_rsa.pub"),
        format!("cp {SSH_KEY_MOUNT_PATH}/{PUBLIC_KEY} $HOME/.ssh/authorized_keys"),
        "chmod 600 $HOME/.ssh/id_rsa $HOME/.ssh/authorized_keys".into(),
        "chmod 644 $HOME/.ssh/id_rsa.pub".into(),
        format!(
            "printf 'Host *\\nIdentityFile '$HOME'/.ssh/id_rsa\\nStrictHostKeyChecking no\\nPort {SSH_PORT}\\n' > $HOME/.ssh/config"
        ),
    ]
}

/// The engine as one shell line: a Python command and its args quoted word by word, else the
/// args as written (a shell line), else the command.
fn engine_line(main: &Container) -> String {
    let command = main.command.as_deref().unwrap_or_default();
    let args = main.args.as_deref().unwrap_or_default();
    if command.first().is_some_and(|c| shell::is_python(c)) {
        shell::quote_all(command.iter().chain(args))
    } else if !args.is_empty() {
        args.join(" ")
    } else {
        command.join(" ")
    }
}

fn leader(main: &mut Container, input: &PodInput<'_>, nodes: i32) {
    let hosts = input.deployer.host_names(&input.component.name, nodes);
    let ranks = i64::from(nodes) * container_gpus(main.resources.as_ref());
    let forwarded: BTreeSet<&str> = FORWARDED_ENV
        .into_iter()
        .chain(main.env.iter().flatten().map(|e| e.name.as_str()))
        .collect();
    let forwarded: Vec<String> = forwarded.iter().map(|n| format!("-x {n}")).collect();
    let mpirun = format!(
        "mpirun $([ \"$(id -u)\" = \"0\" ] && echo --allow-run-as-root) --oversubscribe -n {ranks} -H {} --mca pml ob1 --mca plm_rsh_args \"-p {SSH_PORT} -o StrictHostKeyChecking=no -i $HOME/.ssh/id_rsa\" {} bash -c 'trtllm-llmapi-launch {}'",
        hosts.join(","),
        forwarded.join(" "),
        engine_line(main),
    );
    let mut commands = install_key("$HOME/.ssh");
    if input.deployer.waits_for_worker_dns() {
        commands.push(format!(
            "TIMEOUT=300; START_TIME=$(date +%s); for worker in {}; do echo \"Waiting for DNS: $worker\"; until getent hosts $worker >/dev/null 2>&1; do CURRENT_TIME=$(date +%s); if [ $((CURRENT_TIME - START_TIME)) -gt $TIMEOUT ]; then echo \"ERROR: Timeout waiting for DNS: $worker\"; exit 1; fi; echo \"DNS not ready for $worker, retrying...\"; sleep 2; done; echo \"\u{2713} DNS resolved: $worker\"; done; echo \"All workers DNS ready\"",
            hosts[1..].join(" ")
        ));
    }
    commands.push(mpirun);
    main.command = Some(vec!["/bin/sh".into(), "-c".into()]);
    main.args = Some(vec![commands.join(" && ")]);
}

fn worker(main: &mut Container) {
    let mut commands = install_key("$HOME/.ssh $HOME/.ssh/host_keys $HOME/.ssh/run");
    for kind in ["rsa", "ecdsa", "ed25519"] {
        commands.push(format!(
            "ssh-keygen -t {kind} -f $HOME/.ssh/host_keys/ssh_host_{kind}_key -N ''"
        ));
    }
    commands.push(format!(
        "printf 'Port {SSH_PORT}\\nHostKey '$HOME'/.ssh/host_keys/ssh_host_rsa_key\\nHostKey '$HOME'/.ssh/host_keys/ssh_host_ecdsa_key\\nHostKey '$HOME'/.ssh/host_keys/ssh_host_ed25519_key\\nPidFile '$HOME'/.ssh/run/sshd.pid\\nStrictModes no\\nPermitRootLogin yes\\nPasswordAuthentication no\\nPubkeyAuthentication yes\\nAuthorizedKeysFile '$HOME'/.ssh/authorized_keys\\n' > $HOME/.ssh/sshd_config"
    ));
    commands.push("/usr/sbin/sshd -D -f $HOME/.ssh/sshd_config".into());
    main.command = Some(vec!["/bin/sh".into(), "-c".into()]);
    main.args = Some(vec![commands.join(" && ")]);
}

#[cfg(test)]
#[path = "trtllm_tests.rs"]
mod tests;
