use k8s_openapi::api::core::v1::Probe;

use super::*;
use crate::Backend;
use crate::multinode::Deployer;
use crate::multinode::tests::{Pod, engine, strings};

const GROVE_LEADER: &str =
    "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)";

/// How upstream's cases find the leader: the two pathways, and its two mock deployers (one
/// whose worker rank needs no shell, one whose rank does).
#[derive(Clone, Copy)]
enum By {
    Pathway(Deployer),
    /// Leader `leader.example.com`, worker rank `1`.
    Simple,
    /// Leader `$(LEADER_HOST)`, worker rank `$(WORKER_INDEX)` (needs a shell).
    Shell,
}

fn run(by: By, nodes: i32, role: Role, command: &[&str], args: &[&str]) -> Container {
    let c = engine(command, args);
    match by {
        By::Pathway(deployer) => Pod::new(nodes, role, deployer, Backend::Sglang).container(c),
        By::Simple | By::Shell => {
            let mut c = c;
            if nodes <= 1 {
                return c;
            }
            let (leader, rank, shell) = match by {
                By::Simple => ("leader.example.com", "1", false),
                _ => ("$(LEADER_HOST)", "$(WORKER_INDEX)", true),
            };
            let (rank, shell) = if role == Role::Leader {
                ("0", false)
            } else {
                (rank, shell)
            };
            let flags = format!(
                "--dist-init-addr {leader}:{DIST_INIT_PORT} --nnodes {nodes} --node-rank {rank}"
            );
            shell::inject(&mut c, &flags, shell, "sglang");
            c
        }
    }
}

/// Upstream's `TestSGLangBackend_PythonCommandInjection` (13 cases; the mock deployers' flags
/// are composed as upstream's SGLang backend composes them).
#[test]
fn python_command_injection() {
    use By::*;
    let lws = Pathway(Deployer::LeaderWorkerSet);
    type Row<'a> = (
        &'a str,
        i32,
        Role,
        By,
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
    );
    let cases: [Row<'_>; 13] = [
        (
            "single node python command no changes",
            1,
            Role::Main,
            Simple,
            &["python3"],
            &["-m", "dynamo.sglang"],
            &["python3"],
            &["-m", "dynamo.sglang"],
        ),
        (
            "python command simple deployer - direct append",
            2,
            Role::Worker,
            Simple,
            &["python3"],
            &["-m", "dynamo.sglang", "--model", "llama"],
            &["python3"],
            &[
                "-m",
                "dynamo.sglang",
                "--model",
                "llama",
                "--dist-init-addr",
                "leader.example.com:29500",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ],
        ),
        (
            "python command LWS worker - direct append (kubelet expansion)",
            2,
            Role::Worker,
            lws,
            &["python3"],
            &["-m", "dynamo.sglang", "--model", "llama"],
            &["python3"],
            &[
                "-m",
                "dynamo.sglang",
                "--model",
                "llama",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):29500",
                "--nnodes",
                "2",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
            ],
        ),
        (
            "python command LWS leader - direct append",
            2,
            Role::Leader,
            lws,
            &["python3"],
            &["-m", "dynamo.sglang"],
            &["python3"],
            &[
                "-m",
                "dynamo.sglang",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):29500",
                "--nnodes",
                "2",
                "--node-rank",
                "0",
            ],
        ),
        (
            "python command shell deployer - shell wrapping",
            2,
            Role::Worker,
            Shell,
            &["python3"],
            &["-m", "dynamo.sglang", "--model", "llama"],
            &["sh", "-c"],
            &[
                "exec python3 -m dynamo.sglang --model llama --dist-init-addr $(LEADER_HOST):29500 --nnodes 2 --node-rank $(WORKER_INDEX)",
            ],
        ),
        (
            "python command leader role - always simple",
            3,
            Role::Leader,
            Shell,
            &["python"],
            &["-m", "dynamo.sglang"],
            &["python"],
            &[
                "-m",
                "dynamo.sglang",
                "--dist-init-addr",
                "$(LEADER_HOST):29500",
                "--nnodes",
                "3",
                "--node-rank",
                "0",
            ],
        ),
        (
            "python3.11 variant supported",
            2,
            Role::Worker,
            Simple,
            &["python3.11"],
            &["-m", "dynamo.sglang"],
            &["python3.11"],
            &[
                "-m",
                "dynamo.sglang",
                "--dist-init-addr",
                "leader.example.com:29500",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ],
        ),
        (
            "absolute path python command supported",
            2,
            Role::Worker,
            Simple,
            &["/usr/bin/python3.8"],
            &["-m", "dynamo.sglang", "--model", "llama"],
            &["/usr/bin/python3.8"],
            &[
                "-m",
                "dynamo.sglang",
                "--model",
                "llama",
                "--dist-init-addr",
                "leader.example.com:29500",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ],
        ),
        (
            "pyenv shims python command supported",
            2,
            Role::Worker,
            Shell,
            &["/home/user/.pyenv/shims/python3.9"], // path inside the container
            &["-m", "dynamo.sglang"],
            &["sh", "-c"],
            &[
                "exec /home/user/.pyenv/shims/python3.9 -m dynamo.sglang --dist-init-addr $(LEADER_HOST):29500 --nnodes 2 --node-rank $(WORKER_INDEX)",
            ],
        ),
        (
            "python command with module in command array - simple deployer",
            2,
            Role::Worker,
            Simple,
            &["python3", "-m", "dynamo.sglang"],
            &["--model-path", "Qwen/Qwen3-0.6B", "--tp-size", "8"],
            &["python3", "-m", "dynamo.sglang"],
            &[
                "--model-path",
                "Qwen/Qwen3-0.6B",
                "--tp-size",
                "8",
                "--dist-init-addr",
                "leader.example.com:29500",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ],
        ),
        (
            "python command with module in command array - shell deployer",
            2,
            Role::Worker,
            Shell,
            &["python3", "-m", "dynamo.sglang"],
            &["--model-path", "Qwen/Qwen3-0.6B"],
            &["sh", "-c"],
            &[
                "exec python3 -m dynamo.sglang --model-path Qwen/Qwen3-0.6B --dist-init-addr $(LEADER_HOST):29500 --nnodes 2 --node-rank $(WORKER_INDEX)",
            ],
        ),
        (
            "python command with no args - shell deployer",
            2,
            Role::Worker,
            Shell,
            &["python3", "-m", "dynamo.sglang"],
            &[],
            &["sh", "-c"],
            &[
                "exec python3 -m dynamo.sglang --dist-init-addr $(LEADER_HOST):29500 --nnodes 2 --node-rank $(WORKER_INDEX)",
            ],
        ),
        (
            "non-python command multinode unchanged",
            2,
            Role::Worker,
            Shell,
            &["java"],
            &["-jar", "app.jar"],
            &["java"],
            &["-jar", "app.jar"],
        ),
    ];
    for (name, nodes, role, by, command, args, want_command, want_args) in cases {
        let c = run(by, nodes, role, command, args);
        assert_eq!(
            c.command.unwrap_or_default(),
            strings(want_command),
            "{name}"
        );
        assert_eq!(c.args.unwrap_or_default(), strings(want_args), "{name}");
    }
}

/// Upstream's `TestSGLangBackend_ShellCommandInjection` (9 cases): a shell line gets the flags
/// right after the module, before any shell operator; the command is kept.
#[test]
fn shell_command_injection() {
    let grove = Deployer::Grove;
    type Row<'a> = (&'a str, i32, Role, Deployer, &'a [&'a str], &'a [&'a str]);
    let cases: [Row<'_>; 9] = [
        (
            "single node shell command not modified",
            1,
            Role::Main,
            grove,
            &["python -m dynamo.sglang"],
            &["python -m dynamo.sglang"],
        ),
        (
            "multinode shell command with regex injection",
            2,
            Role::Leader,
            grove,
            &["python -m dynamo.sglang"],
            &[
                "python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0",
            ],
        ),
        (
            "multinode shell command with complex pipeline",
            2,
            Role::Leader,
            grove,
            &["echo blah | wc -l && python -m dynamo.sglang && ls -al"],
            &[
                "echo blah | wc -l && python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0 && ls -al",
            ],
        ),
        (
            "shell command worker with grove env vars",
            3,
            Role::Worker,
            grove,
            &["python -m dynamo.sglang"],
            &[
                "python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 3 --node-rank $((GROVE_PCLQ_POD_INDEX + 1))",
            ],
        ),
        (
            "shell command with LWS deployer",
            2,
            Role::Leader,
            Deployer::LeaderWorkerSet,
            &["python -m dynamo.sglang"],
            &[
                "python -m dynamo.sglang --dist-init-addr $(LWS_LEADER_ADDRESS):29500 --nnodes 2 --node-rank 0",
            ],
        ),
        (
            "shell command with pipes",
            2,
            Role::Leader,
            grove,
            &["python -m dynamo.sglang | tee /tmp/log"],
            &[
                "python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0 | tee /tmp/log",
            ],
        ),
        (
            "shell command multiple args individual processing",
            2,
            Role::Leader,
            grove,
            &["echo start", "python -m dynamo.sglang", "echo done"],
            &[
                "echo start",
                "python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0",
                "echo done",
            ],
        ),
        (
            "shell command no sglang modules unchanged",
            2,
            Role::Leader,
            grove,
            &["echo hello", "python -m some.other.module"],
            &["echo hello", "python -m some.other.module"],
        ),
        (
            "shell command stops after first python injection",
            2,
            Role::Leader,
            grove,
            &[
                "python -m dynamo.sglang",
                "python -m dynamo.sglang --other-flags",
            ],
            &[
                "python -m dynamo.sglang --dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0",
                "python -m dynamo.sglang --other-flags",
            ],
        ),
    ];
    for (name, nodes, role, deployer, args, want) in cases {
        let c =
            Pod::new(nodes, role, deployer, Backend::Sglang).container(engine(&["sh", "-c"], args));
        assert_eq!(c.args.unwrap_or_default(), strings(want), "{name}");
        assert_eq!(
            c.command.unwrap_or_default(),
            strings(&["sh", "-c"]),
            "{name}"
        );
    }
}

/// Upstream's `TestSGLangBackend_GetMultinodeFlags` (3 cases, its mock deployers replaced by
/// the pathway with the same shell need).
#[test]
fn multinode_flags() {
    let cases = [
        (
            "leader role never needs shell",
            2,
            Role::Leader,
            Deployer::Grove,
            format!("--dist-init-addr {GROVE_LEADER}:29500 --nnodes 2 --node-rank 0"),
            false,
        ),
        (
            "worker whose rank the kubelet expands",
            3,
            Role::Worker,
            Deployer::LeaderWorkerSet,
            "--dist-init-addr $(LWS_LEADER_ADDRESS):29500 --nnodes 3 --node-rank $(LWS_WORKER_INDEX)"
                .to_string(),
            false,
        ),
        (
            "worker whose rank a shell evaluates",
            2,
            Role::Worker,
            Deployer::Grove,
            format!(
                "--dist-init-addr {GROVE_LEADER}:29500 --nnodes 2 --node-rank $((GROVE_PCLQ_POD_INDEX + 1))"
            ),
            true,
        ),
    ];
    for (name, nodes, role, deployer, want, shell) in cases {
        let got = Pod::new(nodes, role, deployer, Backend::Sglang).with(|i| flags(i, nodes));
        assert_eq!(got, (want, shell), "{name}");
    }
}

/// Upstream's `TestSGLangBackend_ProbeRemoval` (4 cases).
#[test]
fn worker_probes_removed() {
    let cases = [
        ("single node does not remove probes", 1, Role::Main, false),
        (
            "multinode leader does not remove probes",
            2,
            Role::Leader,
            false,
        ),
        ("multinode worker removes probes", 2, Role::Worker, true),
        (
            "multinode main role does not remove probes",
            2,
            Role::Main,
            false,
        ),
    ];
    for (name, nodes, role, removed) in cases {
        let mut c = engine(&[], &["python -m dynamo.sglang"]);
        let probe = |delay| {
            Some(Probe {
                initial_delay_seconds: Some(delay),
                ..Default::default()
            })
        };
        c.liveness_probe = probe(30);
        c.readiness_probe = probe(10);
        c.startup_probe = probe(5);
        let c = Pod::new(nodes, role, Deployer::Grove, Backend::Sglang).container(c);
        for (kind, p) in [
            ("liveness", &c.liveness_probe),
            ("readiness", &c.readiness_probe),
            ("startup", &c.startup_probe),
        ] {
            assert_eq!(p.is_none(), removed, "{name}: {kind}");
        }
    }
}
