use super::*;
use api::backend::runs_module;

mod dynamo_sidecar;
mod failover;
mod gates;
mod gms;
mod pull_secrets;
mod restore;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn backend_detection_follows_upstream() {
    assert!(runs_module(
        &strings(&["python3", "-m", "dynamo.vllm"]),
        "dynamo.vllm"
    ));
    assert!(runs_module(
        &strings(&["/bin/sh", "-c", "python3.11 -u -m dynamo.sglang --x 1"]),
        "dynamo.sglang"
    ));
    assert!(!runs_module(
        &strings(&["sh", "-c", "python3 x.py | -m dynamo.vllm"]),
        "dynamo.vllm"
    ));
    assert!(!runs_module(&strings(&["dynamo.vllm"]), "dynamo.vllm"));
}

#[test]
fn merge_envs_by_name_user_wins_sorted() {
    let merged = merge_envs(
        vec![parts::env("B", "1"), parts::env("A", "1")],
        vec![parts::env("B", "2"), parts::env("C", "3")],
    );
    let got: Vec<(&str, Option<&str>)> = merged
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(got, [("A", Some("1")), ("B", Some("2")), ("C", Some("3"))]);
}

// --- the component's pod, case by case ---------------------------------------------------------

use api::common::EppConfig;
use api::v1beta1::{CompilationCacheConfig, DynamoComponentDeploymentSharedSpec};
use k8s_openapi::api::core::v1::{ConfigMapKeySelector, Container, PodTemplateSpec, VolumeMount};

fn component(t: ComponentType, containers: Vec<Container>) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: "C".into(),
        r#type: Some(t),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("img:1.5.0".into()),
        ..Default::default()
    }
}

fn render(component: &DynamoComponentDeploymentSharedSpec, backend: Backend) -> PodSpec {
    pod_spec(&input(component, backend))
}

/// The input of `component` in graph `dgd`, namespace `ns`, with Kubernetes discovery.
fn input(component: &DynamoComponentDeploymentSharedSpec, backend: Backend) -> PodInput<'_> {
    let annotations: &'static BTreeMap<String, String> = Box::leak(Box::default());
    let infrastructure: &'static Infrastructure = Box::leak(Box::default());
    let pull_secrets: &'static PullSecrets = Box::leak(Box::default());
    PodInput {
        graph: Some("dgd"),
        namespace: "ns",
        component,
        component_type: component
            .r#type
            .map(ComponentType::as_str)
            .unwrap_or_default(),
        dynamo_namespace: "ns-dgd",
        worker_hash: None,
        annotations,
        kube_discovery: true,
        backend,
        graph_env: &[],
        kv_transfer: None,
        pull_secrets,
        infrastructure,
        runtime_version: None,
        checkpoint: None,
        role: crate::Role::Main,
        deployer: crate::Deployer::LeaderWorkerSet,
    }
}

fn env_of(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .rev()
        .find(|e| e.name == name)
        .map(|e| e.value.clone().unwrap_or_default())
}

fn mount<'a>(c: &'a Container, name: &str) -> Option<&'a VolumeMount> {
    c.volume_mounts.iter().flatten().find(|m| m.name == name)
}

fn volume<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a k8s_openapi::api::core::v1::Volume> {
    spec.volumes.iter().flatten().find(|v| v.name == name)
}

fn epp(config: Option<EppConfig>) -> DynamoComponentDeploymentSharedSpec {
    let mut c = component(ComponentType::Epp, vec![container("main")]);
    c.epp_config = config;
    c
}

fn inline_config() -> EppConfig {
    EppConfig {
        config_map_ref: None,
        config: Some(serde_json::json!({"plugins": []})),
    }
}

/// Upstream's component_epp_test.go (native/legacy cache rows), component_namespace_test.go
/// (legacy args) and the EPP defaults: ports, probes, env, service account, grace period.
#[test]
fn epp_pods_follow_the_native_and_legacy_contracts() {
    // Native: HOME pinned, hf-cache emptyDir under it, no args, no command.
    let spec = render(&epp(None), Backend::None);
    let main = &spec.containers[0];
    assert_eq!(env_of(main, "HOME").as_deref(), Some(epp::NATIVE_HOME));
    assert_eq!(
        mount(main, "hf-cache").map(|m| m.mount_path.as_str()),
        Some(format!("{}/.cache", epp::NATIVE_HOME).as_str())
    );
    assert!(volume(&spec, "hf-cache").is_some_and(|v| v.empty_dir.is_some()));
    assert!(volume(&spec, "epp-config").is_none());
    assert_eq!(main.command, None);
    assert_eq!(main.args, None);

    // Legacy (inline config): the pool flags, the config volume, no hf-cache, no HOME.
    let spec = render(&epp(Some(inline_config())), Backend::None);
    let main = &spec.containers[0];
    assert_eq!(env_of(main, "HOME"), None);
    assert!(mount(main, "hf-cache").is_none());
    assert!(volume(&spec, "hf-cache").is_none());
    assert_eq!(main.command, None);
    assert_eq!(
        main.args.clone().unwrap_or_default(),
        [
            "--pool-name",
            "dgd-pool",
            "--pool-namespace",
            "ns",
            "--pool-group",
            "inference.networking.k8s.io",
            "-v",
            "4",
            "--zap-encoder",
            "json",
            "--grpc-port",
            "9002",
            "--grpc-health-port",
            "9003",
            "--config-file",
            "/etc/epp/epp-config-dynamo.yaml",
        ]
    );
    let config = mount(main, "epp-config").unwrap();
    assert_eq!(
        (config.mount_path.as_str(), config.read_only),
        ("/etc/epp", Some(true))
    );
    let source = volume(&spec, "epp-config")
        .and_then(|v| v.config_map.as_ref())
        .unwrap();
    assert_eq!(source.name, "dgd-epp-config");
    let items = source.items.clone().unwrap_or_default();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("epp-config-dynamo.yaml", "epp-config-dynamo.yaml")
    );

    // Legacy with configMapRef: the user's ConfigMap, its key mapped to the file.
    let reference = EppConfig {
        config_map_ref: Some(ConfigMapKeySelector {
            name: "mine".into(),
            key: "k.yaml".into(),
            optional: None,
        }),
        config: None,
    };
    let spec = render(&epp(Some(reference)), Backend::None);
    let source = volume(&spec, "epp-config")
        .and_then(|v| v.config_map.as_ref())
        .unwrap();
    let items = source.items.clone().unwrap_or_default();
    assert_eq!(
        (
            source.name.as_str(),
            items[0].key.as_str(),
            items[0].path.as_str()
        ),
        ("mine", "k.yaml", "epp-config-dynamo.yaml")
    );

    // Both: ports, gRPC probes, env, account, grace.
    for config in [None, Some(inline_config())] {
        let spec = render(&epp(config), Backend::None);
        let main = &spec.containers[0];
        let ports: Vec<(String, i32)> = main
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
            .collect();
        assert_eq!(
            ports,
            [
                ("grpc".to_string(), 9002),
                ("grpc-health".to_string(), 9003),
                ("metrics".to_string(), 9090)
            ]
        );
        for (probe, delay, failure) in [
            (&main.liveness_probe, Some(5), None),
            (&main.readiness_probe, Some(5), None),
            (&main.startup_probe, None, Some(180)),
        ] {
            let probe = probe.as_ref().unwrap();
            let grpc = probe.grpc.as_ref().unwrap();
            assert_eq!(grpc.port, 9003);
            assert_eq!(grpc.service.as_deref(), Some("inference-extension"));
            assert_eq!(probe.period_seconds, Some(10));
            assert_eq!(probe.initial_delay_seconds, delay);
            assert_eq!(probe.failure_threshold, failure);
        }
        for (name, value) in [
            ("USE_STREAMING", "true"),
            ("RUST_LOG", "info"),
            ("DYN_ENFORCE_DISAGG", "false"),
            ("DYN_NAMESPACE_PREFIX", "ns-dgd"),
            ("DYN_COMPONENT", "epp"),
        ] {
            assert_eq!(env_of(main, name).as_deref(), Some(value), "{name}");
        }
        assert!(!env_of(main, "RUST_LOG").unwrap().contains("debug"));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("epp-serviceaccount")
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(130));
    }
}

/// Upstream's backend_{vllm,sglang,trtllm}_test.go `UseAsCompilationCache` rows: vLLM mounts
/// the cache and points `VLLM_CACHE_ROOT` at it (last), SGLang and TRT-LLM mount it with no
/// env; no cache, no env.
#[test]
fn compilation_cache_per_backend() {
    let with_cache = |path: Option<&str>| {
        let mut c = component(ComponentType::Worker, vec![container("main")]);
        c.compilation_cache = Some(CompilationCacheConfig {
            pvc_name: "cache-pvc".into(),
            mount_path: path.map(str::to_string),
        });
        c
    };
    // (case, mountPath, backend, mounted at, VLLM_CACHE_ROOT)
    type Row = (
        &'static str,
        Option<&'static str>,
        Backend,
        Option<&'static str>,
        Option<&'static str>,
    );
    let cases: [Row; 7] = [
        (
            "vllm default path",
            None,
            Backend::Vllm,
            Some(api::backend::VLLM_COMPILATION_CACHE_PATH),
            Some(api::backend::VLLM_COMPILATION_CACHE_PATH),
        ),
        (
            "vllm empty path",
            Some(""),
            Backend::Vllm,
            Some(api::backend::VLLM_COMPILATION_CACHE_PATH),
            Some(api::backend::VLLM_COMPILATION_CACHE_PATH),
        ),
        (
            "vllm custom path",
            Some("/custom/cache/path"),
            Backend::Vllm,
            Some("/custom/cache/path"),
            Some("/custom/cache/path"),
        ),
        (
            "sglang",
            Some("/cache/sglang"),
            Backend::Sglang,
            Some("/cache/sglang"),
            None,
        ),
        (
            "trtllm",
            Some("/cache/trtllm"),
            Backend::Trtllm,
            Some("/cache/trtllm"),
            None,
        ),
        ("sglang without a path", None, Backend::Sglang, None, None),
        (
            "unknown backend without a path",
            None,
            Backend::None,
            None,
            None,
        ),
    ];
    for (name, path, backend, want_mount, want_env) in cases {
        let spec = render(&with_cache(path), backend);
        let main = &spec.containers[0];
        assert_eq!(
            mount(main, "cache-pvc").map(|m| m.mount_path.as_str()),
            want_mount,
            "{name}"
        );
        let claim = volume(&spec, "cache-pvc")
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|p| p.claim_name.as_str());
        assert_eq!(claim, want_mount.map(|_| "cache-pvc"), "{name}");
        assert_eq!(
            env_of(main, "VLLM_CACHE_ROOT").as_deref(),
            want_env,
            "{name}"
        );
        if want_env.is_some() {
            assert_eq!(
                main.env
                    .as_ref()
                    .and_then(|e| e.last())
                    .map(|e| e.name.as_str()),
                Some("VLLM_CACHE_ROOT"),
                "{name}: the cache root is the last env var"
            );
        }
    }
    // No cache: no env.
    let spec = render(
        &component(ComponentType::Worker, vec![container("main")]),
        Backend::Vllm,
    );
    assert_eq!(env_of(&spec.containers[0], "VLLM_CACHE_ROOT"), None);
}

/// Upstream's frontendSidecar rows: the named container keeps its name and place, gets the
/// frontend defaults under its own values, `CONTAINER_NAME` is its name in container discovery
/// mode, and it receives main's mounts (the cache, not `/dev/shm`); main is unchanged.
#[test]
fn frontend_sidecar_gets_the_frontend_defaults() {
    let mut user = container("frontend");
    user.env = Some(vec![parts::env("ETCD_ENDPOINTS", "mine")]);
    user.args = Some(vec![
        "-m".into(),
        "dynamo.frontend".into(),
        "--router-mode".into(),
        "kv".into(),
    ]);
    let mut c = component(ComponentType::Worker, vec![container("main"), user]);
    c.frontend_sidecar = Some("frontend".into());
    c.compilation_cache = Some(CompilationCacheConfig {
        pvc_name: "cache-pvc".into(),
        mount_path: None,
    });
    let annotations = BTreeMap::from([(
        labels::DYNAMO_KUBE_DISCOVERY_MODE.to_string(),
        "container".to_string(),
    )]);
    let infrastructure = Infrastructure {
        nats_address: Some("nats://nats:4222".into()),
        etcd_address: Some("http://etcd:2379".into()),
        ..Default::default()
    };
    let spec = pod_spec(&PodInput {
        graph: Some("dgd"),
        namespace: "ns",
        component: &c,
        component_type: "worker",
        dynamo_namespace: "ns-dgd",
        worker_hash: Some("abcd1234"),
        annotations: &annotations,
        kube_discovery: true,
        backend: Backend::Vllm,
        graph_env: &[],
        kv_transfer: None,
        pull_secrets: &PullSecrets::default(),
        infrastructure: &infrastructure,
        runtime_version: None,
        checkpoint: None,
        role: crate::Role::Main,
        deployer: crate::Deployer::LeaderWorkerSet,
    });
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["main", "frontend"]);
    let sidecar = &spec.containers[1];
    assert_eq!(sidecar.command.clone().unwrap_or_default(), ["python3"]);
    assert_eq!(
        sidecar.args.clone().unwrap_or_default(),
        ["-m", "dynamo.frontend", "--router-mode", "kv"],
        "the user's args win"
    );
    assert_eq!(
        sidecar
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
            .collect::<Vec<_>>(),
        [("http".to_string(), 8000)]
    );
    assert!(sidecar.liveness_probe.is_some() && sidecar.readiness_probe.is_some());
    for (name, value) in [
        ("DYN_COMPONENT", Some("frontend")),
        ("DYN_NAMESPACE_PREFIX", Some("ns-dgd")),
        ("DYN_HTTP_PORT", Some("8000")),
        ("CONTAINER_NAME", Some("frontend")),
        ("ETCD_ENDPOINTS", Some("mine")),
        ("NATS_SERVER", Some("nats://nats:4222")),
        ("MODEL_EXPRESS_URL", None),
        ("DYN_NAMESPACE_WORKER_SUFFIX", None),
        ("VLLM_CACHE_ROOT", None),
    ] {
        assert_eq!(env_of(sidecar, name).as_deref(), value, "{name}");
    }
    assert!(mount(sidecar, "cache-pvc").is_some(), "main's cache mount");
    assert!(mount(sidecar, "shared-memory").is_none(), "not /dev/shm");
    let main = &spec.containers[0];
    assert_eq!(env_of(main, "CONTAINER_NAME").as_deref(), Some("main"));
    assert_eq!(
        env_of(main, "ETCD_ENDPOINTS").as_deref(),
        Some("http://etcd:2379")
    );
    assert_eq!(env_of(main, "DYN_COMPONENT").as_deref(), Some("worker"));
}

/// Upstream's infrastructure env rows (graph_test.go): each setting only when set, on every
/// component type, a user value of the same name wins, the list stays sorted.
#[test]
fn infrastructure_env_on_every_component() {
    let infrastructure = Infrastructure {
        nats_address: Some("nats://n:4222".into()),
        etcd_address: Some(String::new()),
        model_express_url: Some("http://mx:8001".into()),
        prometheus_endpoint: Some("http://prom:9090".into()),
    };
    let annotations = BTreeMap::new();
    for t in [
        ComponentType::Frontend,
        ComponentType::Worker,
        ComponentType::Planner,
        ComponentType::Epp,
    ] {
        let mut main = container("main");
        main.env = Some(vec![parts::env("PROMETHEUS_ENDPOINT", "http://mine")]);
        let c = component(t, vec![main]);
        let spec = pod_spec(&PodInput {
            graph: Some("dgd"),
            namespace: "ns",
            component: &c,
            component_type: t.as_str(),
            dynamo_namespace: "ns-dgd",
            worker_hash: None,
            annotations: &annotations,
            kube_discovery: false,
            backend: Backend::None,
            graph_env: &[],
            kv_transfer: None,
            pull_secrets: &PullSecrets::default(),
            infrastructure: &infrastructure,
            runtime_version: None,
            checkpoint: None,
            role: crate::Role::Main,
            deployer: crate::Deployer::LeaderWorkerSet,
        });
        let main = &spec.containers[0];
        for (name, value) in [
            ("NATS_SERVER", Some("nats://n:4222")),
            ("ETCD_ENDPOINTS", None),
            ("MODEL_EXPRESS_URL", Some("http://mx:8001")),
            ("PROMETHEUS_ENDPOINT", Some("http://mine")),
        ] {
            assert_eq!(env_of(main, name).as_deref(), value, "{t:?} {name}");
        }
        let names: Vec<&str> = main.env.iter().flatten().map(|e| e.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "{t:?}");
    }
}

/// A KV-transfer-aware worker: the policy's domain, enforcement and weight as env, and its
/// topology as Downward API files: the `labelKey` label under the domain's name, else one file
/// per ClusterTopology domain.
#[test]
fn kv_transfer_wiring_follows_the_policy() {
    use api::common::KvTransferEnforcement;
    use api::v1beta1::KvTransferPolicy;
    let by_label = KvTransferPolicy {
        cluster_topology_name: None,
        label_key: Some("topology.kubernetes.io/zone".into()),
        domain: "zone".into(),
        enforcement: Some(KvTransferEnforcement::Preferred),
        preferred_weight: Some(0.5),
    };
    let by_topology = KvTransferPolicy {
        cluster_topology_name: Some("ct".into()),
        label_key: None,
        domain: "rack".into(),
        enforcement: None,
        preferred_weight: None,
    };
    // (policy, domains, enforcement, weight, files as (path, label))
    type Row<'a> = (
        &'a KvTransferPolicy,
        &'a [&'a str],
        &'a str,
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
    );
    let cases: [Row; 2] = [
        (
            &by_label,
            &["ignored"],
            "preferred",
            Some("0.5"),
            &[("zone", "topology.kubernetes.io/zone")],
        ),
        (
            &by_topology,
            &["zone", "rack"],
            "required",
            None,
            &[
                ("zone", "nvidia.com/dynamo-topology.zone"),
                ("rack", "nvidia.com/dynamo-topology.rack"),
            ],
        ),
    ];
    for (policy, domains, enforcement, weight, files) in cases {
        let mut spec = PodSpec::default();
        let mut main = container("main");
        let domains: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
        volumes::topology_wiring(&mut spec, &mut main, policy, &domains);
        let at = &policy.domain;
        assert_eq!(
            env_of(&main, "DYN_KV_TRANSFER_DOMAIN").as_deref(),
            Some(at.as_str())
        );
        assert_eq!(
            env_of(&main, "DYN_KV_TRANSFER_ENFORCEMENT").as_deref(),
            Some(enforcement),
            "{at}"
        );
        assert_eq!(
            env_of(&main, "DYN_KV_TRANSFER_PREFERRED_WEIGHT").as_deref(),
            weight,
            "{at}"
        );
        assert_eq!(
            mount(&main, volumes::TOPOLOGY_VOLUME).map(|m| m.mount_path.as_str()),
            Some(volumes::TOPOLOGY_MOUNT_PATH)
        );
        let items = volume(&spec, volumes::TOPOLOGY_VOLUME)
            .and_then(|v| v.downward_api.as_ref())
            .and_then(|d| d.items.clone())
            .unwrap_or_default();
        let got: Vec<(String, String)> = items
            .iter()
            .map(|i| {
                (
                    i.path.clone(),
                    i.field_ref.as_ref().unwrap().field_path.clone(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = files
            .iter()
            .map(|(p, l)| (p.to_string(), format!("metadata.labels['{l}']")))
            .collect();
        assert_eq!(got, want, "{at}");
    }
}
