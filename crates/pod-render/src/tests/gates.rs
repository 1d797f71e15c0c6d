//! Runtime-version-gated defaults: upstream's `component_worker_test.go`,
//! `component_frontend_test.go` and `component_namespace_test.go` rows, through the whole pod.

use super::*;
use k8s_openapi::api::core::v1::{ExecAction, GRPCAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const V: fn(u64, u64, u64) -> RuntimeVersion = RuntimeVersion::new;

/// The pod of `component` on runtime `version`.
fn render_at(
    component: &DynamoComponentDeploymentSharedSpec,
    version: Option<RuntimeVersion>,
) -> PodSpec {
    pod_spec(&PodInput {
        runtime_version: version,
        role: crate::Role::Main,
        deployer: crate::Deployer::LeaderWorkerSet,
        ..input(component, Backend::None)
    })
}

/// `TestWorkerDefaultsCanaryHealthCheckVersionGate` (4 rows): the canary health checks and
/// three liveness failures from runtime 1.5.0, for every worker-class type.
#[test]
fn worker_canary_and_liveness_threshold_from_1_5() {
    let rows = [
        (None, "false", 1),
        (Some(V(1, 4, 9)), "false", 1),
        (Some(V(1, 5, 0)), "true", 3),
        (Some(V(2, 0, 0)), "true", 3),
    ];
    for t in [
        ComponentType::Worker,
        ComponentType::Prefill,
        ComponentType::Decode,
    ] {
        for (version, canary, failures) in rows {
            let spec = render_at(&component(t, vec![container("main")]), version);
            let main = &spec.containers[0];
            let what = format!("{t:?} at {version:?}");
            assert_eq!(
                env_of(main, "DYN_HEALTH_CHECK_ENABLED").as_deref(),
                Some(canary),
                "{what}"
            );
            let liveness = main.liveness_probe.as_ref().unwrap();
            assert_eq!(liveness.failure_threshold, Some(failures), "{what}");
            assert_eq!(liveness.period_seconds, Some(5), "{what}");
        }
    }
    // The planner shares the system probes but not the worker gates.
    let planner = component(ComponentType::Planner, vec![container("main")]);
    let spec = render_at(&planner, Some(V(2, 0, 0)));
    let liveness = spec.containers[0].liveness_probe.as_ref().unwrap();
    assert_eq!(liveness.failure_threshold, Some(1));
}

/// `TestFrontendDefaultsStartupProbeVersionGate` (4 rows): the frontend's startup probe from
/// runtime 1.6.0.
#[test]
fn frontend_startup_probe_from_1_6() {
    let want = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/live".into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(10),
        timeout_seconds: Some(1),
        failure_threshold: Some(30),
        ..Default::default()
    };
    let rows = [
        (None, false),
        (Some(V(1, 5, 9)), false),
        (Some(V(1, 6, 0)), true),
        (Some(V(2, 0, 0)), true),
    ];
    for (version, enabled) in rows {
        let frontend = component(ComponentType::Frontend, vec![container("main")]);
        let spec = render_at(&frontend, version);
        let got = spec.containers[0].startup_probe.as_ref();
        assert_eq!(got, enabled.then_some(&want), "{version:?}");
    }
}

/// `TestComponentNamespacePrefixRuntimeCompatibility` (4 versions × frontend and EPP = 8 rows)
/// and `TestLegacyEPPDoesNotEnableStrictNamespacePrefix` (1 row): strict prefix matching from
/// runtime 1.6.0, never for the legacy EPP; the prefix itself is unchanged.
#[test]
fn strict_namespace_prefix_from_1_6() {
    let rows = [
        (None, false),
        (Some(V(1, 5, 9)), false),
        (Some(V(1, 6, 0)), true),
        (Some(V(1, 7, 0)), true),
    ];
    for t in [ComponentType::Frontend, ComponentType::Epp] {
        for (version, strict) in rows {
            let spec = render_at(&component(t, vec![container("main")]), version);
            let main = &spec.containers[0];
            assert_eq!(
                env_of(main, "DYN_NAMESPACE_PREFIX").as_deref(),
                Some("ns-dgd")
            );
            assert_eq!(
                env_of(main, "DYN_NAMESPACE_PREFIX_STRICT").as_deref(),
                strict.then_some("true"),
                "{t:?} at {version:?}"
            );
        }
    }
    let legacy = epp(Some(inline_config()));
    let spec = render_at(&legacy, Some(V(1, 6, 0)));
    let main = &spec.containers[0];
    assert_eq!(
        env_of(main, "DYN_NAMESPACE_PREFIX").as_deref(),
        Some("ns-dgd")
    );
    assert_eq!(env_of(main, "DYN_NAMESPACE_PREFIX_STRICT"), None);
    assert!(main.args.iter().flatten().any(|a| a == "--pool-name"));
}

/// A worker with `main` at `worker_image` and the frontend sidecar `sidecar-frontend` at
/// `frontend_image` (with `env`), plus another container at 1.7.0, in container discovery.
fn worker_with_frontend(
    worker_image: &str,
    r#override: &str,
    frontend_image: &str,
    env: Vec<EnvVar>,
) -> DynamoComponentDeploymentSharedSpec {
    let image = |c: &str, i: &str| Container {
        image: Some(i.into()),
        ..container(c)
    };
    let frontend = Container {
        env: Some(env),
        ..image("sidecar-frontend", frontend_image)
    };
    let containers = vec![
        image("main", worker_image),
        frontend,
        image("other-sidecar", "frontend:1.7.0"),
    ];
    let mut c = component(ComponentType::Worker, containers);
    c.frontend_sidecar = Some("sidecar-frontend".into());
    c.runtime_version_override = (!r#override.is_empty()).then(|| r#override.to_string());
    c
}

/// `TestFrontendSidecarNamespacePrefixRuntimeCompatibility` (8 of its 10 rows; the two with a
/// runtime init container are in `dynamo_sidecar.rs`): the frontend sidecar's gates follow its
/// own image, not the worker's image or override; an explicit env value wins.
#[test]
fn frontend_sidecar_gates_follow_its_own_image() {
    let digest = "frontend@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let strict = |v: &str| vec![parts::env("DYN_NAMESPACE_PREFIX_STRICT", v)];
    /// Worker image, override, frontend image, frontend env, `DYN_NAMESPACE_PREFIX_STRICT`.
    type Row<'a> = (&'a str, &'a str, &'a str, Vec<EnvVar>, Option<&'a str>);
    let rows: [Row<'_>; 8] = [
        ("worker:1.5.0", "", "frontend:1.5.0", vec![], None),
        ("worker:1.5.0", "", "frontend:1.6.0", vec![], Some("true")),
        ("worker:1.6.0", "", "frontend:1.5.0", vec![], None),
        ("worker:1.6.0", "", "frontend:1.6.0", vec![], Some("true")),
        ("worker:custom", "1.6.0", "frontend:custom", vec![], None),
        ("worker:1.6.0", "", digest, vec![], None),
        (
            "worker:1.5.0",
            "",
            "frontend:custom",
            strict("true"),
            Some("true"),
        ),
        (
            "worker:1.5.0",
            "",
            "frontend:1.6.0",
            strict("false"),
            Some("false"),
        ),
    ];
    let annotations = BTreeMap::from([(
        labels::DYNAMO_KUBE_DISCOVERY_MODE.to_string(),
        "container".to_string(),
    )]);
    for (worker, r#override, frontend, env, want) in rows {
        let c = worker_with_frontend(worker, r#override, frontend, env);
        let spec = pod_spec(&PodInput {
            annotations: &annotations,
            runtime_version: RuntimeVersion::of_component(&c),
            role: crate::Role::Main,
            deployer: crate::Deployer::LeaderWorkerSet,
            ..input(&c, Backend::Vllm)
        });
        assert_eq!(spec.containers.len(), 3);
        let sidecar = &spec.containers[1];
        let what = format!("{worker} {override:?} {frontend}");
        assert_eq!(sidecar.name, "sidecar-frontend");
        assert_eq!(sidecar.image.as_deref(), Some(frontend), "{what}");
        assert_eq!(
            env_of(sidecar, "CONTAINER_NAME").as_deref(),
            Some("sidecar-frontend")
        );
        assert_eq!(
            env_of(sidecar, "DYN_NAMESPACE_PREFIX").as_deref(),
            Some("ns-dgd")
        );
        assert_eq!(
            env_of(sidecar, "DYN_NAMESPACE_PREFIX_STRICT").as_deref(),
            want,
            "{what}"
        );
        assert_eq!(
            env_of(&spec.containers[2], "DYN_NAMESPACE_PREFIX_STRICT"),
            None
        );
    }
}

/// `TestFrontendSidecarStartupProbeOverride` (4 of its 6 rows: a valid handler of each kind;
/// the two rows that upstream refuses at render time, a probe without a handler or with two,
/// are not ported): on runtime 1.6.0 the sidecar's own startup probe replaces the default
/// whole.
#[test]
fn frontend_sidecar_startup_probe_override_is_kept_whole() {
    let handlers = [
        Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        },
        Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/ready".into()),
                port: IntOrString::Int(8000),
                ..Default::default()
            }),
            ..Default::default()
        },
        Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(8000),
                host: None,
            }),
            ..Default::default()
        },
        Probe {
            grpc: Some(GRPCAction {
                port: 8000,
                service: None,
            }),
            ..Default::default()
        },
    ];
    for handler in handlers {
        let probe = Probe {
            period_seconds: Some(5),
            failure_threshold: Some(90),
            ..handler
        };
        let mut c = worker_with_frontend("worker:1.6.0", "1.6.0", "frontend:1.6.0", vec![]);
        let containers = &mut c
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers;
        containers[1].startup_probe = Some(probe.clone());
        containers.truncate(2);
        let spec = pod_spec(&PodInput {
            runtime_version: RuntimeVersion::of_component(&c),
            role: crate::Role::Main,
            deployer: crate::Deployer::LeaderWorkerSet,
            ..input(&c, Backend::Vllm)
        });
        assert_eq!(spec.containers.len(), 2);
        assert_eq!(spec.containers[1].name, "sidecar-frontend");
        assert_eq!(spec.containers[1].startup_probe.as_ref(), Some(&probe));
    }
}
