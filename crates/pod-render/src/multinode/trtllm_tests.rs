use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, Probe, Volume, VolumeMount};

use super::*;
use crate::Backend;
use crate::multinode::Deployer;
use crate::multinode::tests::{Pod, engine, strings};

/// Resources asking for `n` GPUs as requests (`requests`) or limits.
fn gpus(n: i64, requests: bool) -> Option<k8s_openapi::api::core::v1::ResourceRequirements> {
    let list = Some(std::collections::BTreeMap::from([(
        "nvidia.com/gpu".to_string(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(n.to_string()),
    )]));
    Some(k8s_openapi::api::core::v1::ResourceRequirements {
        requests: if requests { list.clone() } else { None },
        limits: if requests { None } else { list },
        ..Default::default()
    })
}

const INSTALL_KEY: &str = r"ls -la /ssh-pk/ && cp /ssh-pk/private.key $HOME/.ssh/id_rsa && cp /ssh-pk/private.key.pub $HOME/.ssh/id_rsa.pub && cp /ssh-pk/private.key.pub $HOME/.ssh/authorized_keys && chmod 600 $HOME/.ssh/id_rsa $HOME/.ssh/authorized_keys && chmod 644 $HOME/.ssh/id_rsa.pub && printf 'Host *\nIdentityFile '$HOME'/.ssh/id_rsa\nStrictHostKeyChecking no\nPort 2222\n' > $HOME/.ssh/config";
const LWS_DNS_WAIT_1: &str = r#"TIMEOUT=300; START_TIME=$(date +%s); for worker in $(echo "$LWS_LEADER_ADDRESS" | sed 's/\./-1\./'); do echo "Waiting for DNS: $worker"; until getent hosts $worker >/dev/null 2>&1; do CURRENT_TIME=$(date +%s); if [ $((CURRENT_TIME - START_TIME)) -gt $TIMEOUT ]; then echo "ERROR: Timeout waiting for DNS: $worker"; exit 1; fi; echo "DNS not ready for $worker, retrying..."; sleep 2; done; echo "✓ DNS resolved: $worker"; done; echo "All workers DNS ready""#;
const MPIRUN: &str =
    r#"mpirun $([ "$(id -u)" = "0" ] && echo --allow-run-as-root) --oversubscribe"#;
const RSH: &str = r#"--mca pml ob1 --mca plm_rsh_args "-p 2222 -o StrictHostKeyChecking=no -i $HOME/.ssh/id_rsa""#;
const FORWARDED: &str = "-x CUDA_VISIBLE_DEVICES -x HF_DATASETS_CACHE -x HF_ENDPOINT -x HF_HOME -x HF_TOKEN -x HOME -x HUGGING_FACE_HUB_TOKEN -x LD_LIBRARY_PATH -x MODEL_PATH -x NCCL_DEBUG -x NCCL_IB_DISABLE -x NCCL_P2P_DISABLE -x PATH -x PYTHONPATH -x TENSORRT_LLM_CACHE_DIR -x TOKENIZERS_PARALLELISM -x TRANSFORMERS_CACHE -x TRTLLM_USE_UCX_KVCACHE -x USER";
const FORWARDED_WITH_FQDN: &str = "-x CUDA_VISIBLE_DEVICES -x HF_DATASETS_CACHE -x HF_ENDPOINT -x HF_HOME -x HF_TOKEN -x HOME -x HUGGING_FACE_HUB_TOKEN -x LD_LIBRARY_PATH -x MODEL_PATH -x NCCL_DEBUG -x NCCL_IB_DISABLE -x NCCL_P2P_DISABLE -x OMPI_MCA_orte_keep_fqdn_hostnames -x PATH -x PYTHONPATH -x TENSORRT_LLM_CACHE_DIR -x TOKENIZERS_PARALLELISM -x TRANSFORMERS_CACHE -x TRTLLM_USE_UCX_KVCACHE -x USER";
const WORKER: &str = r"mkdir -p $HOME/.ssh $HOME/.ssh/host_keys $HOME/.ssh/run && ls -la /ssh-pk/ && cp /ssh-pk/private.key $HOME/.ssh/id_rsa && cp /ssh-pk/private.key.pub $HOME/.ssh/id_rsa.pub && cp /ssh-pk/private.key.pub $HOME/.ssh/authorized_keys && chmod 600 $HOME/.ssh/id_rsa $HOME/.ssh/authorized_keys && chmod 644 $HOME/.ssh/id_rsa.pub && printf 'Host *\nIdentityFile '$HOME'/.ssh/id_rsa\nStrictHostKeyChecking no\nPort 2222\n' > $HOME/.ssh/config && ssh-keygen -t rsa -f $HOME/.ssh/host_keys/ssh_host_rsa_key -N '' && ssh-keygen -t ecdsa -f $HOME/.ssh/host_keys/ssh_host_ecdsa_key -N '' && ssh-keygen -t ed25519 -f $HOME/.ssh/host_keys/ssh_host_ed25519_key -N '' && printf 'Port 2222\nHostKey '$HOME'/.ssh/host_keys/ssh_host_rsa_key\nHostKey '$HOME'/.ssh/host_keys/ssh_host_ecdsa_key\nHostKey '$HOME'/.ssh/host_keys/ssh_host_ed25519_key\nPidFile '$HOME'/.ssh/run/sshd.pid\nStrictModes no\nPermitRootLogin yes\nPasswordAuthentication no\nPubkeyAuthentication yes\nAuthorizedKeysFile '$HOME'/.ssh/authorized_keys\n' > $HOME/.ssh/sshd_config && /usr/sbin/sshd -D -f $HOME/.ssh/sshd_config";

fn grove_hosts(service: &str, nodes: i32) -> String {
    (0..nodes)
        .map(|i| {
            let (role, index) = if i == 0 { ("ldr", 0) } else { ("wkr", i - 1) };
            format!("$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{service}-{role}-{index}.$(GROVE_HEADLESS_SERVICE)")
        })
        .collect::<Vec<_>>()
        .join(",")
}

const LWS_HOSTS_2: &str =
    r#"$(LWS_LEADER_ADDRESS),$(echo "$LWS_LEADER_ADDRESS" | sed 's/\./-1\./')"#;

/// The leader's line: key install, the LWS DNS wait, `mpirun` with `ranks` over `hosts`.
fn leader_line(dns: bool, ranks: i64, hosts: &str, forwarded: &str, engine: &str) -> String {
    let dns = if dns {
        format!(" && {LWS_DNS_WAIT_1}")
    } else {
        String::new()
    };
    format!(
        "mkdir -p $HOME/.ssh && {INSTALL_KEY}{dns} && {MPIRUN} -n {ranks} -H {hosts} {RSH} {forwarded} bash -c 'trtllm-llmapi-launch {engine}'"
    )
}

fn ssh_mount() -> VolumeMount {
    VolumeMount {
        name: "mpi-run-ssh-secret".into(),
        mount_path: "/ssh-pk".into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// Upstream's `TestTRTLLMBackend_UpdateContainer` (4 cases).
#[test]
fn update_container() {
    let fqdn = vec![EnvVar {
        name: "OMPI_MCA_orte_keep_fqdn_hostnames".into(),
        value: Some("1".into()),
        value_from: None,
    }];
    let ssh_ready = Probe {
        tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
            port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2222),
            host: None,
        }),
        initial_delay_seconds: Some(20),
        period_seconds: Some(20),
        timeout_seconds: Some(5),
        failure_threshold: Some(10),
        ..Default::default()
    };
    type Row<'a> = (
        &'a str,
        i32,
        Role,
        Deployer,
        Option<k8s_openapi::api::core::v1::ResourceRequirements>,
        Option<String>,
        bool,
    );
    let cases: Vec<Row<'_>> = vec![
        (
            "Single node - no changes",
            1,
            Role::Main,
            Deployer::Grove,
            None,
            None,
            false,
        ),
        (
            "Multinode leader with GPU resources",
            3,
            Role::Leader,
            Deployer::Grove,
            gpus(2, true),
            Some(leader_line(
                false,
                6,
                &grove_hosts("test-service", 3),
                FORWARDED_WITH_FQDN,
                "python3 --model test",
            )),
            false,
        ),
        (
            "Multinode worker",
            3,
            Role::Worker,
            Deployer::Grove,
            None,
            Some(WORKER.into()),
            true,
        ),
        (
            "Multinode leader with LWS deployment",
            2,
            Role::Leader,
            Deployer::LeaderWorkerSet,
            gpus(1, false),
            Some(leader_line(
                true,
                2,
                LWS_HOSTS_2,
                FORWARDED_WITH_FQDN,
                "python3 --model test",
            )),
            false,
        ),
    ];
    for (name, nodes, role, deployer, resources, line, worker) in cases {
        let before = Container {
            args: Some(strings(&["python3", "--model", "test"])),
            liveness_probe: Some(Probe::default()),
            readiness_probe: Some(Probe::default()),
            startup_probe: Some(Probe::default()),
            resources,
            ..Default::default()
        };
        let after = Pod::new(nodes, role, deployer, Backend::Trtllm).container(before.clone());
        let Some(line) = line else {
            assert_eq!(after, before, "{name}");
            continue;
        };
        assert_eq!(after.volume_mounts, Some(vec![ssh_mount()]), "{name}");
        assert_eq!(after.command, Some(strings(&["/bin/sh", "-c"])), "{name}");
        assert_eq!(after.args, Some(vec![line]), "{name}");
        assert_eq!(after.env, Some(fqdn.clone()), "{name}");
        assert_eq!(after.liveness_probe.is_none(), worker, "{name}");
        assert_eq!(after.startup_probe.is_none(), worker, "{name}");
        let readiness = if worker {
            Some(ssh_ready.clone())
        } else {
            Some(Probe::default())
        };
        assert_eq!(after.readiness_probe, readiness, "{name}");
    }
}

/// Upstream's `TestTRTLLMBackend_UpdatePodSpec` (4 cases).
#[test]
fn update_pod_spec() {
    let existing = Volume {
        name: "existing-volume".into(),
        ..Default::default()
    };
    type Row = (&'static str, i32, Role, Deployer, Vec<Volume>, usize);
    let cases: [Row; 4] = [
        (
            "Single node - no SSH volume added",
            1,
            Role::Main,
            Deployer::Grove,
            vec![],
            0,
        ),
        (
            "Multinode leader - SSH volume added",
            3,
            Role::Leader,
            Deployer::Grove,
            vec![],
            1,
        ),
        (
            "Multinode worker - SSH volume added",
            2,
            Role::Worker,
            Deployer::LeaderWorkerSet,
            vec![],
            1,
        ),
        (
            "Multinode with existing volumes",
            2,
            Role::Leader,
            Deployer::Grove,
            vec![existing],
            2,
        ),
    ];
    for (name, nodes, role, deployer, volumes, count) in cases {
        let multinode = nodes > 1;
        let spec = PodSpec {
            volumes: Some(volumes),
            containers: vec![engine(&[], &[])],
            ..Default::default()
        };
        let after = Pod::new(nodes, role, deployer, Backend::Trtllm).pod(spec);
        let volumes = after.volumes.unwrap_or_default();
        assert_eq!(volumes.len(), count, "{name}");
        let ssh = volumes.iter().find(|v| v.name == "mpi-run-ssh-secret");
        assert_eq!(ssh.is_some(), multinode, "{name}");
        if let Some(secret) = ssh.and_then(|v| v.secret.as_ref()) {
            assert_eq!(
                secret.secret_name.as_deref(),
                Some("mpi-run-ssh-secret"),
                "{name}"
            );
            assert_eq!(secret.default_mode, Some(0o644), "{name}");
        }
    }
}

/// Upstream's `TestTRTLLMBackend_addSSHVolumeMount` (2 cases): the key goes after the
/// container's own mounts.
#[test]
fn ssh_mount_after_the_containers_own() {
    let own = VolumeMount {
        name: "existing-mount".into(),
        mount_path: "/existing".into(),
        ..Default::default()
    };
    for (name, before, want) in [
        (
            "Add SSH volume mount to empty container",
            vec![],
            vec![ssh_mount()],
        ),
        (
            "Add SSH volume mount to container with existing mounts",
            vec![own.clone()],
            vec![own, ssh_mount()],
        ),
    ] {
        let c = Container {
            volume_mounts: Some(before),
            ..engine(&["python3"], &[])
        };
        let after = Pod::new(2, Role::Worker, Deployer::Grove, Backend::Trtllm).container(c);
        assert_eq!(after.volume_mounts, Some(want), "{name}");
    }
}

/// Upstream's `TestTRTLLMBackend_setupLeaderContainer` (8 cases) and
/// `TestShellQuoteForBashC_InLeaderCommand` (1 case).
#[test]
fn leader_command() {
    type Row<'a> = (
        &'a str,
        i32,
        Deployer,
        &'a str,
        Option<k8s_openapi::api::core::v1::ResourceRequirements>,
        &'a [&'a str],
        &'a [&'a str],
        Vec<EnvVar>,
        String,
    );
    let custom = vec![
        EnvVar {
            name: "CUDA_VISIBLE_DEVICES".into(),
            value: Some("0,1".into()),
            value_from: None,
        },
        EnvVar {
            name: "CUSTOM_VAR".into(),
            value: Some("test_value".into()),
            value_from: None,
        },
        EnvVar {
            name: "PATH".into(),
            value: Some("/custom/path".into()),
            value_from: None,
        },
    ];
    let with_custom =
        FORWARDED.replace("-x HF_DATASETS_CACHE", "-x CUSTOM_VAR -x HF_DATASETS_CACHE");
    let json_args = [
        "--model-path",
        "deepseek-ai/DeepSeek-R1",
        "--override-engine-args",
        r#"{"load_format": "DUMMY", "tensor_parallel_size": 8}"#,
    ];
    let cases: Vec<Row<'_>> = vec![
        (
            "Leader with args and GPU resources",
            3,
            Deployer::Grove,
            "test-service",
            gpus(2, true),
            &[],
            &["python3", "--model", "test"],
            vec![],
            leader_line(
                false,
                6,
                &grove_hosts("test-service", 3),
                FORWARDED,
                "python3 --model test",
            ),
        ),
        (
            "Leader with command and no GPU resources",
            2,
            Deployer::LeaderWorkerSet,
            "worker",
            None,
            &["python", "-m", "worker"],
            &[],
            vec![],
            leader_line(true, 0, LWS_HOSTS_2, FORWARDED, "python -m worker"),
        ),
        (
            "Leader with both command and args (shell command - args take precedence)",
            2,
            Deployer::Grove,
            "test",
            gpus(1, false),
            &["sh", "-c"],
            &["launch", "--config", "test.yaml"],
            vec![],
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                FORWARDED,
                "launch --config test.yaml",
            ),
        ),
        (
            "Leader with python command and args (combined)",
            2,
            Deployer::Grove,
            "test",
            gpus(1, false),
            &["python3"],
            &["-m", "dynamo.trtllm", "--model-path", "test"],
            vec![],
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                FORWARDED,
                "python3 -m dynamo.trtllm --model-path test",
            ),
        ),
        (
            "Leader with python module command and separate args",
            2,
            Deployer::Grove,
            "test",
            gpus(1, false),
            &["python3", "-m", "dynamo.trtllm"],
            &[
                "--model-path",
                "Qwen/Qwen3-0.6B",
                "--served-model-name",
                "Qwen/Qwen3-0.6B",
                "--disaggregation-mode",
                "prefill",
            ],
            vec![],
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                FORWARDED,
                "python3 -m dynamo.trtllm --model-path Qwen/Qwen3-0.6B --served-model-name Qwen/Qwen3-0.6B --disaggregation-mode prefill",
            ),
        ),
        (
            "Leader with absolute path python command",
            2,
            Deployer::Grove,
            "test",
            gpus(1, false),
            &["/usr/bin/python3.8"],
            &["-m", "dynamo.trtllm", "--model-path", "test"],
            vec![],
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                FORWARDED,
                "/usr/bin/python3.8 -m dynamo.trtllm --model-path test",
            ),
        ),
        (
            "Leader with all environment variables forwarded",
            2,
            Deployer::Grove,
            "test",
            gpus(1, true),
            &[],
            &["serve", "--model", "test"],
            vec![],
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                FORWARDED,
                "serve --model test",
            ),
        ),
        (
            "Leader with overlapping environment variables (deduplication test)",
            2,
            Deployer::Grove,
            "test",
            gpus(1, true),
            &[],
            &["serve", "--model", "test"],
            custom,
            leader_line(
                false,
                2,
                &grove_hosts("test", 2),
                &with_custom,
                "serve --model test",
            ),
        ),
        (
            "JSON in a leader's args survives the outer bash -c '...'",
            2,
            Deployer::Grove,
            "dec",
            gpus(4, true),
            &["python3", "-m", "dynamo.trtllm"],
            &json_args,
            vec![],
            leader_line(
                false,
                8,
                &grove_hosts("dec", 2),
                FORWARDED,
                r#"python3 -m dynamo.trtllm --model-path deepseek-ai/DeepSeek-R1 --override-engine-args "{\"load_format\": \"DUMMY\", \"tensor_parallel_size\": 8}""#,
            ),
        ),
    ];
    for (name, nodes, deployer, service, resources, command, args, env, want) in cases {
        let mut c = engine(command, args);
        c.resources = resources;
        c.env = (!env.is_empty()).then_some(env);
        Pod::new(nodes, Role::Leader, deployer, Backend::Trtllm)
            .named(service)
            .with(|input| leader(&mut c, input, nodes));
        assert_eq!(c.command, Some(strings(&["/bin/sh", "-c"])), "{name}");
        assert_eq!(c.args, Some(vec![want]), "{name}");
    }
}

/// Upstream's `TestTRTLLMBackend_setupWorkerContainer` (2 cases): whatever the engine's
/// command line, a worker runs `sshd`.
#[test]
fn worker_command() {
    for (name, command, args) in [
        (
            "Worker setup with initial args",
            &[][..],
            &["some", "args"][..],
        ),
        (
            "Worker setup with initial command",
            &["original", "command"][..],
            &[][..],
        ),
    ] {
        let mut c = engine(command, args);
        worker(&mut c);
        assert_eq!(c.command, Some(strings(&["/bin/sh", "-c"])), "{name}");
        assert_eq!(c.args, Some(vec![WORKER.to_string()]), "{name}");
    }
}
