use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};

use super::*;
use crate::Backend;
use crate::multinode::Deployer;
use crate::multinode::tests::{Pod, engine, gpus, strings};
use crate::parts::env;

const GROVE_LEADER: &str =
    "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)";
const ORIGIN_1_0: (&str, &str) = ("nvidia.com/dynamo-operator-origin-version", "1.0.0");
const BACKEND_MP: (&str, &str) = ("nvidia.com/vllm-distributed-executor-backend", "mp");
const BACKEND_RAY: (&str, &str) = ("nvidia.com/vllm-distributed-executor-backend", "ray");

/// The engine container after the vLLM wiring of a pod of `role` in a replica of `nodes`
/// nodes, its engine having `gpu_count` GPUs.
fn update(
    nodes: i32,
    role: Role,
    deployer: Deployer,
    annotations: &[(&str, &str)],
    mut c: Container,
    gpu_count: i64,
) -> Container {
    c.resources = gpus(gpu_count);
    Pod::new(nodes, role, deployer, Backend::Vllm)
        .annotated(annotations)
        .container(c)
}

/// What a case expects of the args.
enum Args<'a> {
    Unchanged,
    Exactly(&'a [&'a str]),
    One(String),
}

fn check(name: &str, before: &Container, after: &Container, want: &Args<'_>) {
    match want {
        Args::Unchanged => assert_eq!(after.args, before.args, "{name}"),
        Args::Exactly(args) => assert_eq!(
            after.args.clone().unwrap_or_default(),
            strings(args),
            "{name}"
        ),
        Args::One(line) => assert_eq!(
            after.args.clone().unwrap_or_default(),
            vec![line.clone()],
            "{name}"
        ),
    }
}

fn ray_leader(engine_line: &str) -> String {
    format!("ray start --head --port=6379 && {engine_line} --distributed-executor-backend ray")
}

/// Upstream's `TestVLLMBackend_UpdateContainer` (the 11 cases of the revision followed; its
/// single-node elastic-EP and DRA GPU-count cases belong to later revisions).
#[test]
fn update_container() {
    let grove = Deployer::Grove;
    let lws = Deployer::LeaderWorkerSet;
    let py_vllm = ["python3", "-m", "dynamo.vllm"];
    type Row<'a> = (
        &'a str,
        i32,
        Role,
        Deployer,
        &'a [(&'a str, &'a str)],
        Container,
        i64,
        Args<'a>,
        bool,
    );
    let cases: Vec<Row<'_>> = vec![
        (
            "single node does not modify args",
            1,
            Role::Main,
            grove,
            &[],
            engine(&["python3"], &["-m", "dynamo.vllm"]),
            0,
            Args::Unchanged,
            false,
        ),
        (
            "multinode leader uses ray (no annotations = legacy)",
            3,
            Role::Leader,
            grove,
            &[],
            engine(
                &py_vllm,
                &["--model", "test", "--tensor-parallel-size", "8"],
            ),
            4,
            Args::One(ray_leader(
                "python3 -m dynamo.vllm --model test --tensor-parallel-size 8",
            )),
            true,
        ),
        (
            "multinode leader uses ray with JSON args (no annotations = legacy)",
            3,
            Role::Leader,
            grove,
            &[],
            engine(
                &py_vllm,
                &[
                    "--model",
                    "test",
                    "--tensor-parallel-size",
                    "8",
                    "--kv-transfer-config",
                    r#"{"kv_connector": "NixlConnector", "kv_role": "kv_both"}"#,
                ],
            ),
            4,
            Args::One(ray_leader(
                r#"python3 -m dynamo.vllm --model test --tensor-parallel-size 8 --kv-transfer-config "{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}""#,
            )),
            true,
        ),
        (
            "multinode worker uses ray (no annotations = legacy)",
            3,
            Role::Worker,
            grove,
            &[],
            engine(
                &["python3"],
                &[
                    "-m",
                    "dynamo.vllm",
                    "--model",
                    "test",
                    "--tensor-parallel-size",
                    "8",
                ],
            ),
            4,
            Args::One(format!("ray start --address={GROVE_LEADER}:6379 --block")),
            true,
        ),
        (
            "multinode worker with LWS deployment type (no annotations = legacy ray)",
            2,
            Role::Worker,
            lws,
            &[],
            engine(
                &[],
                &[
                    "python3",
                    "-m",
                    "dynamo.vllm",
                    "--tensor-parallel-size",
                    "8",
                ],
            ),
            4,
            Args::One("ray start --address=$(LWS_LEADER_ADDRESS):6379 --block".into()),
            true,
        ),
        (
            "multinode leader with no initial args",
            2,
            Role::Leader,
            grove,
            &[],
            engine(&[], &[]),
            0,
            Args::Unchanged,
            false,
        ),
        (
            "multinode main role (non-leader/worker) does not modify args",
            3,
            Role::Main,
            grove,
            &[],
            engine(&[], &["python3", "-m", "dynamo.frontend"]),
            0,
            Args::Unchanged,
            false,
        ),
        (
            "multinode leader uses mp (origin version >= threshold)",
            2,
            Role::Leader,
            grove,
            &[ORIGIN_1_0],
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--tensor-parallel-size",
                "16",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "2",
                "--master-addr",
                GROVE_LEADER,
                "--master-port",
                "29500",
                "--node-rank",
                "0",
            ]),
            true,
        ),
        (
            "multinode worker uses mp (origin version >= threshold) Grove",
            2,
            Role::Worker,
            grove,
            &[ORIGIN_1_0],
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            Args::One(format!(
                "exec python3 -m dynamo.vllm --tensor-parallel-size 16 --distributed-executor-backend mp --nnodes 2 --master-addr {GROVE_LEADER} --master-port 29500 --node-rank $((GROVE_PCLQ_POD_INDEX + 1)) --headless"
            )),
            true,
        ),
        (
            "multinode leader uses ray (explicit override despite new version)",
            2,
            Role::Leader,
            grove,
            &[ORIGIN_1_0, BACKEND_RAY],
            engine(
                &py_vllm,
                &["--model", "test", "--tensor-parallel-size", "8"],
            ),
            4,
            Args::One(ray_leader(
                "python3 -m dynamo.vllm --model test --tensor-parallel-size 8",
            )),
            true,
        ),
        (
            "multinode leader uses mp (explicit override on legacy DGD)",
            2,
            Role::Leader,
            grove,
            &[BACKEND_MP],
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--tensor-parallel-size",
                "16",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "2",
                "--master-addr",
                GROVE_LEADER,
                "--master-port",
                "29500",
                "--node-rank",
                "0",
            ]),
            true,
        ),
    ];
    for (name, nodes, role, deployer, annotations, before, gpu_count, want, probes_gone) in cases {
        let after = update(
            nodes,
            role,
            deployer,
            annotations,
            before.clone(),
            gpu_count,
        );
        check(name, &before, &after, &want);
        if probes_gone {
            assert!(
                after.liveness_probe.is_none()
                    && after.readiness_probe.is_none()
                    && after.startup_probe.is_none(),
                "{name}"
            );
        }
        for var in ["POD_IP", "VLLM_DP_MASTER_IP"] {
            assert!(
                !after.env.iter().flatten().any(|e| e.name == var),
                "{name}: {var}"
            );
        }
    }
}

/// Upstream's `TestVLLMBackend_ShellCommandInjection` (5 cases): a shell line gets the flags
/// right after the module, the command is kept.
#[test]
fn shell_command_injection() {
    let dp = |leader: &str| {
        format!(
            "python3 -m dynamo.vllm --data-parallel-hybrid-lb --data-parallel-size-local 4 --data-parallel-start-rank 0 --data-parallel-address {leader} --data-parallel-rpc-port 13445 --data-parallel-size 8"
        )
    };
    let cases: [(&str, i32, Role, Deployer, &str, i64, String); 5] = [
        (
            "single node shell command not modified",
            1,
            Role::Main,
            Deployer::Grove,
            "python3 -m dynamo.vllm",
            0,
            "python3 -m dynamo.vllm".into(),
        ),
        (
            "multinode shell command with regex injection",
            2,
            Role::Leader,
            Deployer::Grove,
            "python3 -m dynamo.vllm --data-parallel-size 8",
            4,
            dp(GROVE_LEADER),
        ),
        (
            "multinode shell command with complex pipeline",
            2,
            Role::Leader,
            Deployer::Grove,
            "echo blah | wc -l && python3 -m dynamo.vllm --data-parallel-size 8 && ls -al",
            4,
            format!("echo blah | wc -l && {} && ls -al", dp(GROVE_LEADER)),
        ),
        (
            "shell command with LWS deployer",
            2,
            Role::Leader,
            Deployer::LeaderWorkerSet,
            "python3 -m dynamo.vllm --data-parallel-size 8",
            4,
            dp("$(LWS_LEADER_ADDRESS)"),
        ),
        (
            "shell command with pipes",
            2,
            Role::Leader,
            Deployer::Grove,
            "python3 -m dynamo.vllm --data-parallel-size 8 | tee /tmp/log",
            4,
            format!("{} | tee /tmp/log", dp(GROVE_LEADER)),
        ),
    ];
    for (name, nodes, role, deployer, line, gpu_count, want) in cases {
        let after = update(
            nodes,
            role,
            deployer,
            &[],
            engine(&["sh", "-c"], &[line]),
            gpu_count,
        );
        assert_eq!(after.args, Some(vec![want]), "{name}");
        assert_eq!(after.command, Some(strings(&["sh", "-c"])), "{name}");
    }
}

/// Upstream's `TestUpdateVLLMMultinodeArgs` (17 cases of 18: the single-pod elastic-EP case
/// belongs to a later revision); 2 nodes.
#[test]
fn multinode_args() {
    let grove = Deployer::Grove;
    let lws = Deployer::LeaderWorkerSet;
    let elastic_args = [
        "--model",
        "test",
        "--data-parallel-size",
        "4",
        "--data-parallel-backend",
        "ray",
        "--enable-elastic-ep",
    ];
    let py_vllm = ["python3", "-m", "dynamo.vllm"];
    let ray_head = |engine_line: &str| {
        format!(
            "ray start --head --port=6379 --block & i=0; until python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',6379),timeout=1); s.close()\" 2>/dev/null; do i=$((i+1)); [ \"$i\" -ge 150 ] && {{ echo \"ERROR: Ray head did not start within 300s\" >&2; exit 1; }}; sleep 2; done && {engine_line}"
        )
    };
    let health_gate = |leader: &str| {
        format!(
            "i=0; until python3 -c \"import urllib.request; urllib.request.urlopen('http://{leader}:9090/live', timeout=5)\" 2>/dev/null; do i=$((i+1)); [ \"$i\" -ge 720 ] && {{ echo \"ERROR: leader /live did not become ready within 3h\" >&2; exit 1; }}; echo 'waiting for leader dynamo.vllm /live to return 200...'; sleep 15; done && ray start --address={leader}:6379 --block"
        )
    };
    type Row<'a> = (
        &'a str,
        Role,
        Deployer,
        Container,
        i64,
        &'a [(&'a str, &'a str)],
        Args<'a>,
    );
    let cases: Vec<Row<'_>> = vec![
        (
            "leader uses ray (nil annotations = legacy)",
            Role::Leader,
            grove,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            &[],
            Args::One(ray_leader(
                "python3 -m dynamo.vllm --tensor-parallel-size 16",
            )),
        ),
        (
            "leader uses mp (origin version >= threshold)",
            Role::Leader,
            grove,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            &[ORIGIN_1_0],
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--tensor-parallel-size",
                "16",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "2",
                "--master-addr",
                GROVE_LEADER,
                "--master-port",
                "29500",
                "--node-rank",
                "0",
            ]),
        ),
        (
            "worker uses mp (origin version >= threshold) Grove",
            Role::Worker,
            grove,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            &[ORIGIN_1_0],
            Args::One(format!(
                "exec python3 -m dynamo.vllm --tensor-parallel-size 16 --distributed-executor-backend mp --nnodes 2 --master-addr {GROVE_LEADER} --master-port 29500 --node-rank $((GROVE_PCLQ_POD_INDEX + 1)) --headless"
            )),
        ),
        (
            "worker uses mp (origin version >= threshold) LWS",
            Role::Worker,
            lws,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            &[ORIGIN_1_0],
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--tensor-parallel-size",
                "16",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "2",
                "--master-addr",
                "$(LWS_LEADER_ADDRESS)",
                "--master-port",
                "29500",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--headless",
            ]),
        ),
        (
            "leader uses mp (origin version >= threshold) LWS",
            Role::Leader,
            lws,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
            ),
            8,
            &[ORIGIN_1_0],
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--tensor-parallel-size",
                "16",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "2",
                "--master-addr",
                "$(LWS_LEADER_ADDRESS)",
                "--master-port",
                "29500",
                "--node-rank",
                "0",
            ]),
        ),
        (
            "leader with data parallel launch LWS",
            Role::Leader,
            lws,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--data-parallel-size", "16"],
            ),
            8,
            &[],
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--data-parallel-size",
                "16",
                "--data-parallel-hybrid-lb",
                "--data-parallel-size-local",
                "8",
                "--data-parallel-start-rank",
                "0",
                "--data-parallel-address",
                "$(LWS_LEADER_ADDRESS)",
                "--data-parallel-rpc-port",
                "13445",
            ]),
        ),
        (
            "leader prepends distributed data parallel flags (annotations don't affect DP path)",
            Role::Leader,
            grove,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--data-parallel-size", "16"],
            ),
            8,
            &[],
            Args::Exactly(&[
                "-m",
                "dynamo.vllm",
                "--data-parallel-size",
                "16",
                "--data-parallel-hybrid-lb",
                "--data-parallel-size-local",
                "8",
                "--data-parallel-start-rank",
                "0",
                "--data-parallel-address",
                GROVE_LEADER,
                "--data-parallel-rpc-port",
                "13445",
            ]),
        ),
        (
            "leader with empty args does not modify",
            Role::Leader,
            grove,
            engine(&[], &[]),
            0,
            &[],
            Args::Unchanged,
        ),
        (
            "worker with ray distributed launch Grove (nil annotations)",
            Role::Worker,
            grove,
            engine(
                &[],
                &[
                    "python3",
                    "-m",
                    "dynamo.vllm",
                    "--tensor-parallel-size",
                    "16",
                ],
            ),
            8,
            &[],
            Args::One(format!("ray start --address={GROVE_LEADER}:6379 --block")),
        ),
        (
            "worker with data parallel launch Grove",
            Role::Worker,
            grove,
            engine(
                &["python3"],
                &["-m", "dynamo.vllm", "--data-parallel-size", "16"],
            ),
            8,
            &[],
            Args::One(format!(
                "exec python3 -m dynamo.vllm --data-parallel-size 16 --data-parallel-hybrid-lb --data-parallel-size-local 8 --data-parallel-start-rank $(( 8 * $((GROVE_PCLQ_POD_INDEX + 1)) )) --data-parallel-address {GROVE_LEADER} --data-parallel-rpc-port 13445"
            )),
        ),
        (
            "worker with data parallel launch Grove, tp > 1",
            Role::Worker,
            grove,
            engine(
                &["python3"],
                &[
                    "-m",
                    "dynamo.vllm",
                    "--data-parallel-size",
                    "8",
                    "--tensor-parallel-size",
                    "2",
                ],
            ),
            8,
            &[],
            Args::One(format!(
                "exec python3 -m dynamo.vllm --data-parallel-size 8 --tensor-parallel-size 2 --data-parallel-hybrid-lb --data-parallel-size-local 4 --data-parallel-start-rank $(( 4 * $((GROVE_PCLQ_POD_INDEX + 1)) )) --data-parallel-address {GROVE_LEADER} --data-parallel-rpc-port 13445"
            )),
        ),
        (
            "worker with ray distributed launch LWS (nil annotations)",
            Role::Worker,
            lws,
            engine(
                &[],
                &[
                    "python3",
                    "-m",
                    "dynamo.vllm",
                    "--tensor-parallel-size",
                    "16",
                ],
            ),
            8,
            &[],
            Args::One("ray start --address=$(LWS_LEADER_ADDRESS):6379 --block".into()),
        ),
        (
            "main role does not modify args",
            Role::Main,
            grove,
            engine(&[], &["python3", "-m", "dynamo.frontend"]),
            0,
            &[],
            Args::Unchanged,
        ),
        (
            "elastic EP leader Grove: ray head start + vllm serve",
            Role::Leader,
            grove,
            engine(&py_vllm, &elastic_args),
            2,
            &[],
            Args::One(ray_head(
                "python3 -m dynamo.vllm --model test --data-parallel-size 4 --data-parallel-backend ray --enable-elastic-ep",
            )),
        ),
        (
            "elastic EP worker Grove: health-gate then ray join",
            Role::Worker,
            grove,
            engine(&py_vllm, &elastic_args),
            2,
            &[],
            Args::One(health_gate(GROVE_LEADER)),
        ),
        (
            "elastic EP leader Grove: user-specified --data-parallel-size-local preserved",
            Role::Leader,
            grove,
            engine(
                &py_vllm,
                &[
                    "--model",
                    "test",
                    "--data-parallel-size",
                    "4",
                    "--data-parallel-backend",
                    "ray",
                    "--enable-elastic-ep",
                    "--data-parallel-size-local",
                    "2",
                ],
            ),
            2,
            &[],
            Args::One(ray_head(
                "python3 -m dynamo.vllm --model test --data-parallel-size 4 --data-parallel-backend ray --enable-elastic-ep --data-parallel-size-local 2",
            )),
        ),
        (
            "elastic EP worker LWS: health-gate then ray join",
            Role::Worker,
            lws,
            engine(&py_vllm, &elastic_args),
            2,
            &[],
            Args::One(health_gate("$(LWS_LEADER_ADDRESS)")),
        ),
    ];
    for (name, role, deployer, before, gpu_count, annotations, want) in cases {
        let after = update(2, role, deployer, annotations, before.clone(), gpu_count);
        check(name, &before, &after, &want);
    }
}

fn mp_pod(image: &str) -> PodSpec {
    PodSpec {
        containers: vec![Container {
            image: Some(image.into()),
            ..engine(
                &["python3"],
                &[
                    "-m",
                    "dynamo.vllm",
                    "--tensor-parallel-size",
                    "16",
                    "--distributed-executor-backend",
                    "mp",
                ],
            )
        }],
        ..Default::default()
    }
}

/// Upstream's `TestVLLMBackend_UpdatePodSpec` (9 cases): multiprocessing workers wait for the
/// leader in the `wait-for-leader-mp` init container on the graph's ConfigMap.
#[test]
fn wait_for_leader_init_container() {
    let grove_host =
        "${GROVE_PCSG_NAME}-${GROVE_PCSG_INDEX}-test-service-ldr-0.${GROVE_HEADLESS_SERVICE}";
    let with_image = |image: &str, c: Container| PodSpec {
        containers: vec![Container {
            image: Some(image.into()),
            ..c
        }],
        ..Default::default()
    };
    let mut with_init = mp_pod("vllm:latest");
    with_init.init_containers = Some(vec![Container {
        name: "existing-init".into(),
        image: Some("busybox".into()),
        ..Default::default()
    }]);
    type Row<'a> = (
        &'a str,
        i32,
        Role,
        Deployer,
        &'a [(&'a str, &'a str)],
        PodSpec,
        Option<(&'a str, &'a str)>,
    );
    let cases: Vec<Row<'_>> = vec![
        (
            "mp worker with Grove deployer injects init container",
            2,
            Role::Worker,
            Deployer::Grove,
            &[],
            mp_pod("vllm:latest"),
            Some(("vllm:latest", grove_host)),
        ),
        (
            "mp worker with LWS deployer injects init container",
            2,
            Role::Worker,
            Deployer::LeaderWorkerSet,
            &[],
            mp_pod("vllm:v2"),
            Some(("vllm:v2", "${LWS_LEADER_ADDRESS}")),
        ),
        (
            "mp worker with executor flag in command injects init container",
            2,
            Role::Worker,
            Deployer::Grove,
            &[],
            with_image(
                "vllm:command",
                engine(
                    &[
                        "python3",
                        "-m",
                        "dynamo.vllm",
                        "--tensor-parallel-size",
                        "16",
                        "--distributed-executor-backend",
                        "mp",
                    ],
                    &[],
                ),
            ),
            Some(("vllm:command", grove_host)),
        ),
        (
            "mp worker with shell-form command injects init container",
            2,
            Role::Worker,
            Deployer::Grove,
            &[],
            with_image(
                "vllm:shell-command",
                engine(
                    &[
                        "sh",
                        "-c",
                        "exec python3 -m dynamo.vllm --tensor-parallel-size 16 --distributed-executor-backend    mp",
                    ],
                    &[],
                ),
            ),
            Some(("vllm:shell-command", grove_host)),
        ),
        (
            "mp leader does not inject init container",
            2,
            Role::Leader,
            Deployer::Grove,
            &[],
            mp_pod("vllm:latest"),
            None,
        ),
        (
            "data parallel worker with mp origin does not inject init container",
            2,
            Role::Worker,
            Deployer::LeaderWorkerSet,
            &[ORIGIN_1_0],
            with_image(
                "vllm:dp",
                engine(
                    &["python3"],
                    &[
                        "-m",
                        "dynamo.vllm",
                        "--tensor-parallel-size",
                        "1",
                        "--data-parallel-size",
                        "16",
                        "--data-parallel-hybrid-lb",
                        "--data-parallel-size-local",
                        "8",
                    ],
                ),
            ),
            None,
        ),
        (
            "non-mp worker command does not inject init container",
            2,
            Role::Worker,
            Deployer::Grove,
            &[],
            with_image(
                "vllm:latest",
                engine(
                    &["/bin/sh", "-c"],
                    &["ray start --address=leader:6379 --block"],
                ),
            ),
            None,
        ),
        (
            "single node does not inject init container",
            1,
            Role::Main,
            Deployer::Grove,
            &[ORIGIN_1_0],
            with_image("vllm:latest", engine(&[], &[])),
            None,
        ),
        (
            "mp worker preserves existing init containers",
            2,
            Role::Worker,
            Deployer::Grove,
            &[],
            with_init,
            Some(("vllm:latest", grove_host)),
        ),
    ];
    for (name, nodes, role, deployer, annotations, before, want) in cases {
        let after = Pod::new(nodes, role, deployer, Backend::Vllm)
            .annotated(annotations)
            .pod(before.clone());
        let inits = |s: &PodSpec| s.init_containers.clone().unwrap_or_default();
        let volumes = |s: &PodSpec| s.volumes.clone().unwrap_or_default();
        let Some((image, host)) = want else {
            assert_eq!(after, before, "{name}");
            continue;
        };
        assert_eq!(inits(&after).len(), inits(&before).len() + 1, "{name}");
        assert_eq!(volumes(&after).len(), volumes(&before).len() + 1, "{name}");
        let init = inits(&after).pop().unwrap();
        assert_eq!(init.name, "wait-for-leader-mp", "{name}");
        assert_eq!(init.image.as_deref(), Some(image), "{name}");
        assert_eq!(
            init.command,
            Some(strings(&[
                "sh",
                "-c",
                &format!(
                    "export LEADER_HOST=\"{host}\" LEADER_PORT=\"29500\" && exec python3 /scripts/wait-for-leader.py"
                )
            ])),
            "{name}"
        );
        assert!(init.env.is_none(), "{name}");
        let mounts = init.volume_mounts.unwrap();
        assert_eq!(mounts.len(), 1, "{name}");
        assert_eq!(
            (
                mounts[0].name.as_str(),
                mounts[0].mount_path.as_str(),
                mounts[0].read_only
            ),
            ("wait-leader-script", "/scripts", Some(true)),
            "{name}"
        );
        let volume = volumes(&after).pop().unwrap();
        assert_eq!(volume.name, "wait-leader-script", "{name}");
        assert_eq!(
            volume.config_map.unwrap().name,
            "test-dgd-wait-leader-script",
            "{name}"
        );
    }
    // Without a graph there is no ConfigMap to mount.
    let mut pod = Pod::new(2, Role::Worker, Deployer::Grove, Backend::Vllm);
    pod.graph = None;
    assert_eq!(pod.pod(mp_pod("vllm:latest")), mp_pod("vllm:latest"));
}

/// Upstream's `TestGetWaitLeaderConfigMapName` (1 case).
#[test]
fn wait_leader_config_map_name() {
    assert_eq!(wait_leader_config_map("foo"), "foo-wait-leader-script");
}

/// Upstream's `TestShouldUseMpBackend` (8 cases), and the origin version's forms.
#[test]
fn multiprocessing_or_ray() {
    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let cases: [Row<'_>; 8] = [
        (
            "nil annotations = legacy = ray (delegates to feature gate)",
            &[],
            false,
        ),
        (
            "empty annotations = legacy = ray (delegates to feature gate)",
            &[],
            false,
        ),
        (
            "explicit override mp takes priority over version",
            &[
                ("nvidia.com/dynamo-operator-origin-version", "0.1.0"),
                BACKEND_MP,
            ],
            true,
        ),
        (
            "explicit override ray takes priority over version",
            &[ORIGIN_1_0, BACKEND_RAY],
            false,
        ),
        (
            "explicit override mp (no origin version)",
            &[BACKEND_MP],
            true,
        ),
        (
            "explicit override with invalid value falls through to feature gate",
            &[
                ORIGIN_1_0,
                ("nvidia.com/vllm-distributed-executor-backend", "invalid"),
            ],
            true,
        ),
        (
            "explicit override case insensitive MP",
            &[("nvidia.com/vllm-distributed-executor-backend", "MP")],
            true,
        ),
        (
            "explicit override case insensitive Ray",
            &[
                ORIGIN_1_0,
                ("nvidia.com/vllm-distributed-executor-backend", "RAY"),
            ],
            false,
        ),
    ];
    for (name, annotations, want) in cases {
        let got = Pod::new(2, Role::Leader, Deployer::Grove, Backend::Vllm)
            .annotated(annotations)
            .with(uses_multiprocessing);
        assert_eq!(got, want, "{name}");
    }
    let min = MULTIPROCESSING_MIN_ORIGIN;
    for (origin, want) in [
        ("1.0.0", true),
        ("v1.5.0", true),
        ("1", true),
        ("1.2", true),
        ("0.9.9", false),
        ("1.0.0-rc1", false),
        ("1.0.1-rc1", true),
        ("1.0.0+build", true),
        ("", false),
        ("main", false),
        ("1.x", false),
    ] {
        assert_eq!(origin_at_least(origin, min), want, "{origin:?}");
    }
}

/// Multiprocessing pods get the NIXL side channel address of their own pod, before the
/// compilation cache's env (upstream sets that last); Ray pods do not.
#[test]
fn nixl_side_channel_host_with_multiprocessing() {
    let names = |c: &Container| {
        c.env
            .iter()
            .flatten()
            .map(|e| e.name.clone())
            .collect::<Vec<_>>()
    };
    let mut before = engine(
        &["python3"],
        &["-m", "dynamo.vllm", "--tensor-parallel-size", "16"],
    );
    before.env = Some(vec![
        env("A", "1"),
        env(crate::cache::VLLM_CACHE_ROOT, "/cache"),
    ]);
    for role in [Role::Leader, Role::Worker] {
        let after = update(2, role, Deployer::Grove, &[ORIGIN_1_0], before.clone(), 8);
        assert_eq!(
            names(&after),
            ["A", NIXL_SIDE_CHANNEL_HOST, "VLLM_CACHE_ROOT"],
            "{role:?}"
        );
        let host: &EnvVar = &after.env.as_ref().unwrap()[1];
        assert_eq!(
            host.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str()),
            Some("status.podIP")
        );
        let ray = update(2, role, Deployer::Grove, &[], before.clone(), 8);
        assert_eq!(names(&ray), ["A", "VLLM_CACHE_ROOT"], "{role:?}");
    }
}
