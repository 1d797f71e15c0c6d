//! `dynamoSidecar`: upstream's `component_dynamo_sidecar_test.go` (`TestNativeSidecarRendering`,
//! the revision with the `dynamoSidecar` field) and the two runtime-init-container rows of
//! `TestFrontendSidecarNamespacePrefixRuntimeCompatibility`, through the whole pod.

use super::*;
use api::common::KvTransferEnforcement;
use api::v1beta1::KvTransferPolicy;
use k8s_openapi::api::core::v1::{ExecAction, Probe, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn named(name: &str, image: &str, env: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        env: (!env.is_empty()).then(|| env.iter().map(|(k, v)| parts::env(k, v)).collect()),
        ..Default::default()
    }
}

/// Upstream's fixture: a vLLM engine as `main`, a frontend sidecar, a plain init container and
/// the runtime init container, with a compilation cache, in container discovery mode.
fn native_sidecar_worker(t: ComponentType) -> DynamoComponentDeploymentSharedSpec {
    let engine = Container {
        command: Some(strings(&["vllm-rs"])),
        args: Some(strings(&["serve", "model"])),
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "nvidia.com/gpu".to_string(),
                Quantity("1".into()),
            )])),
            ..Default::default()
        }),
        ..named("main", "vllm/vllm-openai:latest", &[("GLOBAL", "engine")])
    };
    let frontend = named(
        "frontend",
        "frontend:1.5.0",
        &[("ETCD_ENDPOINTS", "frontend-etcd:2379")],
    );
    let runtime = Container {
        restart_policy: Some("Always".into()),
        startup_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(strings(&["true"])),
            }),
            ..Default::default()
        }),
        ..named(
            "runtime",
            "runtime:1.5.0",
            &[
                ("GLOBAL", "runtime"),
                ("NATS_TLS_CA_CERT_PATH", "/runtime/ca.crt"),
                ("DYN_KV_TRANSFER_ENFORCEMENT", "preferred"),
            ],
        )
    };
    let mut c = component(t, vec![engine, frontend]);
    c.name = "worker".into();
    c.dynamo_sidecar = Some("runtime".into());
    c.frontend_sidecar = Some("frontend".into());
    c.compilation_cache = Some(CompilationCacheConfig {
        pvc_name: "cache".into(),
        mount_path: Some("/cache".into()),
    });
    let spec = c.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.init_containers = Some(vec![named("setup", "setup:latest", &[]), runtime]);
    c
}

/// `TestNativeSidecarRendering` (3 rows: worker, prefill, decode).
#[test]
fn the_runtime_runs_in_the_sidecar_and_main_is_the_engine() {
    let graph_env = [
        parts::env("GLOBAL", "default"),
        parts::env("SHARED", "value"),
    ];
    let policy = KvTransferPolicy {
        label_key: Some("topology.example/zone".into()),
        domain: "zone".into(),
        enforcement: Some(KvTransferEnforcement::Required),
        ..Default::default()
    };
    let annotations = BTreeMap::from([(
        labels::DYNAMO_KUBE_DISCOVERY_MODE.to_string(),
        "container".to_string(),
    )]);
    let infrastructure = Infrastructure {
        nats_address: Some("nats://nats:4222".into()),
        etcd_address: Some("http://etcd:2379".into()),
        ..Default::default()
    };
    for t in [
        ComponentType::Worker,
        ComponentType::Prefill,
        ComponentType::Decode,
    ] {
        let mut c = native_sidecar_worker(t);
        let original = c.clone();
        let spec = pod_spec(&PodInput {
            worker_hash: Some("abc123"),
            annotations: &annotations,
            graph_env: &graph_env,
            kv_transfer: Some((&policy, &[])),
            infrastructure: &infrastructure,
            runtime_version: RuntimeVersion::of_component(&c),
            role: crate::Role::Main,
            deployer: crate::Deployer::LeaderWorkerSet,
            ..input(&c, Backend::Vllm)
        });
        let inits = spec.init_containers.as_deref().unwrap();
        let user_inits = original
            .pod_template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap();
        assert_eq!(inits[0], user_inits.init_containers.as_ref().unwrap()[0]);

        // The runtime sidecar.
        let runtime = &inits[1];
        assert_eq!(runtime.name, "runtime");
        assert_eq!(runtime.command, None);
        assert_eq!(runtime.restart_policy.as_deref(), Some("Always"));
        let startup = runtime.startup_probe.as_ref().unwrap();
        assert!(
            startup.http_get.is_none(),
            "the user's startup probe replaces the default"
        );
        assert_eq!(
            startup.exec.as_ref().unwrap().command,
            Some(strings(&["true"]))
        );
        let readiness = runtime.readiness_probe.as_ref().unwrap();
        assert_eq!(
            readiness.http_get.as_ref().unwrap().path.as_deref(),
            Some("/health")
        );
        let liveness = runtime.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (
                liveness.period_seconds,
                liveness.timeout_seconds,
                liveness.failure_threshold
            ),
            (Some(5), Some(4), Some(3))
        );
        let ports: Vec<_> = runtime
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.as_deref(), p.container_port))
            .collect();
        assert_eq!(ports, [(Some("system"), 9090)]);
        for (name, value) in [
            ("CONTAINER_NAME", Some("runtime")),
            ("NATS_SERVER", Some("nats://nats:4222")),
            ("ETCD_ENDPOINTS", Some("http://etcd:2379")),
            ("NATS_TLS_CA_CERT_PATH", Some("/runtime/ca.crt")),
            ("DYN_COMPONENT", Some(t.as_str())),
            ("DYN_NAMESPACE", Some("ns-dgd")),
            ("DYN_SYSTEM_ENABLED", Some("true")),
            ("DYN_SYSTEM_PORT", Some("9090")),
            ("GLOBAL", Some("runtime")),
            ("SHARED", Some("value")),
            ("DYN_NAMESPACE_WORKER_SUFFIX", Some("abc123")),
            ("DYN_KV_TRANSFER_ENFORCEMENT", Some("required")),
            ("DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS", None),
            ("DYN_HEALTH_CHECK_ENABLED", None),
            ("NIXL_TELEMETRY_ENABLE", None),
            ("DYN_FORWARDPASS_METRIC_PORT", None),
        ] {
            assert_eq!(
                env_of(runtime, name).as_deref(),
                value,
                "{t:?} runtime {name}"
            );
        }
        assert!(mount(runtime, volumes::TOPOLOGY_VOLUME).is_some());
        assert_eq!(runtime.resources, None);

        // The engine: launch and resources intact, only the graph's env and its mounts added.
        let main = &spec.containers[0];
        let engine = original.main_container().unwrap();
        assert_eq!(main.command, engine.command);
        assert_eq!(main.args, engine.args);
        assert_eq!(main.resources, engine.resources);
        assert_eq!(
            (
                &main.startup_probe,
                &main.liveness_probe,
                &main.readiness_probe
            ),
            (&None, &None, &None)
        );
        assert!(main.ports.as_ref().is_none_or(Vec::is_empty));
        for (name, value) in [
            ("GLOBAL", Some("engine")),
            ("SHARED", Some("value")),
            ("DYN_NAMESPACE", None),
            ("NATS_SERVER", None),
            ("ETCD_ENDPOINTS", None),
            ("CONTAINER_NAME", None),
            ("DYN_KV_TRANSFER_ENFORCEMENT", None),
        ] {
            assert_eq!(env_of(main, name).as_deref(), value, "{t:?} main {name}");
        }
        assert!(mount(main, volumes::TOPOLOGY_VOLUME).is_none());
        assert!(mount(main, "cache").is_some() && mount(main, "shared-memory").is_some());

        // The frontend sidecar keeps its defaults.
        let frontend = &spec.containers[1];
        assert_eq!(frontend.name, "frontend");
        assert!(frontend.readiness_probe.is_some());
        assert_eq!(
            env_of(frontend, "CONTAINER_NAME").as_deref(),
            Some("frontend")
        );
        assert_eq!(
            env_of(frontend, "NATS_SERVER").as_deref(),
            Some("nats://nats:4222")
        );
        assert_eq!(
            env_of(frontend, "ETCD_ENDPOINTS").as_deref(),
            Some("frontend-etcd:2379")
        );

        // The runtime version is the sidecar image's, whatever the engine's tag.
        assert_eq!(
            RuntimeVersion::of_component(&c),
            Some(RuntimeVersion::new(1, 5, 0))
        );
        let spec = c.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
        spec.init_containers.as_mut().unwrap()[1].image = Some("runtime:1.6.0".into());
        assert_eq!(
            RuntimeVersion::of_component(&c),
            Some(RuntimeVersion::new(1, 6, 0))
        );
    }
}

/// `TestFrontendSidecarNamespacePrefixRuntimeCompatibility`'s two rows with a runtime init
/// container: the frontend sidecar's strict prefix follows its own image, not the runtime's.
#[test]
fn the_frontend_sidecar_ignores_the_runtime_sidecar_version() {
    let annotations = BTreeMap::from([(
        labels::DYNAMO_KUBE_DISCOVERY_MODE.to_string(),
        "container".to_string(),
    )]);
    for (runtime, frontend, want) in [
        ("runtime:1.5.0", "frontend:1.6.0", Some("true")),
        ("runtime:1.6.0", "frontend:1.5.0", None),
    ] {
        let mut c = component(
            ComponentType::Worker,
            vec![
                named("main", "engine:custom", &[]),
                named("sidecar-frontend", frontend, &[]),
                named("other-sidecar", "frontend:1.7.0", &[]),
            ],
        );
        c.frontend_sidecar = Some("sidecar-frontend".into());
        c.dynamo_sidecar = Some("runtime".into());
        let spec = c.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
        spec.init_containers = Some(vec![Container {
            restart_policy: Some("Always".into()),
            ..named("runtime", runtime, &[])
        }]);
        let spec = pod_spec(&PodInput {
            annotations: &annotations,
            runtime_version: RuntimeVersion::of_component(&c),
            role: crate::Role::Main,
            deployer: crate::Deployer::LeaderWorkerSet,
            ..input(&c, Backend::Vllm)
        });
        assert_eq!(spec.containers.len(), 3);
        let sidecar = &spec.containers[1];
        assert_eq!(sidecar.image.as_deref(), Some(frontend));
        assert_eq!(
            env_of(sidecar, "DYN_NAMESPACE_PREFIX_STRICT").as_deref(),
            want,
            "{runtime} {frontend}"
        );
        assert_eq!(
            env_of(&spec.containers[2], "DYN_NAMESPACE_PREFIX_STRICT"),
            None
        );
    }
}
