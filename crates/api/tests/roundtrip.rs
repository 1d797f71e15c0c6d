//! Property tests: random valid specs survive serialize → deserialize unchanged (JSON and
//! YAML), and conversion round trips (hub → spoke → hub, spoke → hub → spoke) are lossless.

use api::common::{
    BackendFramework, ModelReference, MultinodeSpec, Restart, RestartStrategy, RestartStrategyType,
};
use api::{v1alpha1 as a, v1beta1 as b};
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretEnvSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4})?"
}

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map("[a-z]{1,5}(\\.io/[a-z]{1,5})?", "[a-z0-9]{0,6}", 0..3)
}

fn quantity() -> impl Strategy<Value = Quantity> {
    prop_oneof![Just("0"), Just("1"), Just("8Gi"), Just("500m"), Just("2")]
        .prop_map(|q| Quantity(q.into()))
}

fn env() -> impl Strategy<Value = Vec<EnvVar>> {
    vec(("[A-Z_]{1,8}", option::of("[a-z0-9 ]{0,8}")), 0..3).prop_map(|v| {
        v.into_iter()
            .map(|(name, value)| EnvVar {
                name,
                value,
                value_from: None,
            })
            .collect()
    })
}

fn container(name: String) -> impl Strategy<Value = Container> {
    (
        option::of("[a-z]{1,8}\\.io/[a-z]{1,8}:[0-9]\\.[0-9]"),
        option::of(vec("[a-z-]{1,8}", 1..4)),
        env(),
        option::of("[a-z-]{1,8}"),
        option::of(btree_map(
            prop_oneof![Just("cpu".to_string()), Just("nvidia.com/gpu".to_string())],
            quantity(),
            1..3,
        )),
    )
        .prop_map(move |(image, args, env, secret, limits)| Container {
            name: name.clone(),
            image,
            args,
            env: (!env.is_empty()).then_some(env),
            env_from: secret.map(|s| {
                vec![EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: s,
                        optional: None,
                    }),
                    ..Default::default()
                }]
            }),
            resources: limits.map(|l| ResourceRequirements {
                limits: Some(l),
                ..Default::default()
            }),
            ..Default::default()
        })
}

fn pod_template() -> impl Strategy<Value = PodTemplateSpec> {
    (
        container("main".into()),
        option::of(container("sidecar".into())),
        label_map(),
        option::of("[a-z]{1,8}"),
    )
        .prop_map(|(main, sidecar, labels, sa)| PodTemplateSpec {
            metadata: (!labels.is_empty()).then(|| ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: std::iter::once(main).chain(sidecar).collect(),
                service_account_name: sa,
                ..Default::default()
            }),
        })
}

fn component_type() -> impl Strategy<Value = Option<b::ComponentType>> {
    use b::ComponentType as T;
    option::of(prop_oneof![
        Just(T::Frontend),
        Just(T::Worker),
        Just(T::Prefill),
        Just(T::Decode),
        Just(T::Planner),
        Just(T::Epp),
    ])
}

fn experimental() -> impl Strategy<Value = Option<b::ExperimentalSpec>> {
    use b::GpuMemoryServiceMode as M;
    option::of((
        option::of(option::of(prop_oneof![
            Just(M::IntraPod),
            Just(M::InterPod)
        ])),
        any::<bool>(),
        option::of(any::<bool>()),
        option::of((any::<bool>(), option::of("[a-z]{1,6}"))),
    ))
    .prop_map(|e| {
        e.map(|(gms, failover, grove, ckpt)| b::ExperimentalSpec {
            gpu_memory_service: gms.map(|mode| b::GpuMemoryServiceSpec {
                mode,
                ..Default::default()
            }),
            failover: (failover && gms.is_some()).then(|| b::FailoverSpec {
                mode: gms.flatten(),
                num_shadows: Some(1),
            }),
            grove: grove.map(|f| b::GroveSpec {
                force_scaling_group: Some(f),
            }),
            checkpoint: ckpt.map(|(enabled, checkpoint_ref)| b::ComponentCheckpointConfig {
                enabled,
                checkpoint_ref,
                ..Default::default()
            }),
        })
    })
}

fn component(name: String) -> impl Strategy<Value = b::DynamoComponentDeploymentSharedSpec> {
    (
        (
            component_type(),
            option::of(0..10i32),
            option::of(1..3i32),
            option::of(2..5i32),
            any::<bool>(),
        ),
        (
            option::of(pod_template()),
            option::of(quantity()),
            option::of(name_strategy_model()),
            any::<bool>(),
        ),
        (
            option::of("[a-z]{1,6}"),
            option::of("[0-9]\\.[0-9]\\.[0-9]"),
            option::of("[a-z]{1,6}"),
            experimental(),
        ),
    )
        .prop_map(
            move |(
                (ty, replicas, min_available, nodes, global),
                (pod, shm, model, adapter),
                (cache, version, pack, experimental),
            )| {
                b::DynamoComponentDeploymentSharedSpec {
                    name: name.clone(),
                    r#type: ty,
                    replicas,
                    min_available,
                    multinode: nodes.map(|node_count| MultinodeSpec { node_count }),
                    global_dynamo_namespace: global,
                    pod_template: pod,
                    shared_memory_size: shm,
                    model_ref: model,
                    scaling_adapter: adapter.then_some(b::ScalingAdapter {}),
                    compilation_cache: cache.map(|pvc_name| b::CompilationCacheConfig {
                        pvc_name,
                        mount_path: None,
                    }),
                    runtime_version_override: version,
                    topology_constraint: pack
                        .map(|pack_domain| b::TopologyConstraint { pack_domain }),
                    experimental,
                    ..Default::default()
                }
            },
        )
}

fn name_strategy_model() -> impl Strategy<Value = ModelReference> {
    ("[a-z]{1,8}", option::of("[a-z0-9]{1,4}"))
        .prop_map(|(name, revision)| ModelReference { name, revision })
}

fn dgd_spec() -> impl Strategy<Value = b::DynamoGraphDeploymentSpec> {
    let components = proptest::collection::btree_set(name(), 1..5)
        .prop_flat_map(|names| names.into_iter().map(component).collect::<Vec<_>>())
        .prop_shuffle();
    (
        components,
        label_map(),
        label_map(),
        env(),
        option::of(prop_oneof![
            Just(BackendFramework::Vllm),
            Just(BackendFramework::Sglang),
            Just(BackendFramework::Trtllm)
        ]),
        option::of((
            "[a-z0-9]{1,6}",
            option::of(prop_oneof![
                Just(RestartStrategyType::Sequential),
                Just(RestartStrategyType::Parallel)
            ]),
        )),
        option::of(("[a-z]{1,6}", option::of("[a-z]{1,6}"))),
    )
        .prop_map(
            |(components, annotations, labels, env, backend, restart, topology)| {
                b::DynamoGraphDeploymentSpec {
                    components,
                    annotations,
                    labels,
                    env,
                    backend_framework: backend,
                    restart: restart.map(|(id, t)| Restart {
                        id,
                        strategy: t.map(|t| RestartStrategy {
                            r#type: Some(t),
                            order: Vec::new(),
                        }),
                    }),
                    topology_constraint: topology.map(|(cluster_topology_name, pack_domain)| {
                        b::SpecTopologyConstraint {
                            cluster_topology_name,
                            pack_domain,
                        }
                    }),
                    ..Default::default()
                }
            },
        )
}

fn dgd() -> impl Strategy<Value = b::DynamoGraphDeployment> {
    (name(), dgd_spec()).prop_map(|(n, spec)| {
        let mut d = b::DynamoGraphDeployment::new(&n, spec);
        d.metadata.namespace = Some("ns".into());
        d
    })
}

fn alpha_service() -> impl Strategy<Value = a::DynamoComponentDeploymentSharedSpec> {
    (
        option::of(prop_oneof![
            Just("frontend"),
            Just("worker"),
            Just("planner"),
            Just("main")
        ]),
        option::of(prop_oneof![Just("prefill"), Just("decode")]),
        option::of(0..5i32),
        env(),
        option::of("[a-z-]{1,8}"),
        option::of(("[0-9]", option::of("[0-9]Gi"))),
        option::of(container(String::new())),
        any::<bool>(),
        option::of("[a-z]{1,6}"),
    )
        .prop_map(
            |(ty, sub, replicas, envs, secret, gpu, main, adapter, service_name)| {
                a::DynamoComponentDeploymentSharedSpec {
                    component_type: ty.map(str::to_string),
                    sub_component_type: sub.map(str::to_string),
                    replicas,
                    envs,
                    env_from_secret: secret,
                    resources: gpu.map(|(gpu, mem)| a::Resources {
                        limits: Some(a::ResourceItem {
                            gpu: Some(gpu),
                            ..Default::default()
                        }),
                        requests: mem.map(|m| a::ResourceItem {
                            custom: [("ephemeral-storage".to_string(), m)].into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    extra_pod_spec: main.map(|m| a::ExtraPodSpec {
                        pod_spec: None,
                        main_container: Some(m),
                    }),
                    scaling_adapter: adapter.then_some(a::ScalingAdapter { enabled: true }),
                    service_name,
                    ..Default::default()
                }
            },
        )
}

fn alpha_dgd() -> impl Strategy<Value = a::DynamoGraphDeployment> {
    (name(), btree_map(name(), alpha_service(), 1..4), env()).prop_map(|(n, services, envs)| {
        a::DynamoGraphDeployment::new(
            &n,
            a::DynamoGraphDeploymentSpec {
                services,
                envs,
                ..Default::default()
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn v1beta1_json_round_trip(dgd in dgd()) {
        let json = serde_json::to_string(&dgd).unwrap();
        let back: b::DynamoGraphDeployment = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, dgd);
    }

    #[test]
    fn v1beta1_yaml_round_trip(dgd in dgd()) {
        let yaml = serde_yaml::to_string(&dgd).unwrap();
        let back: b::DynamoGraphDeployment = serde_yaml::from_str(&yaml).unwrap();
        prop_assert_eq!(back, dgd);
    }

    #[test]
    fn v1alpha1_json_round_trip(dgd in alpha_dgd()) {
        let json = serde_json::to_string(&dgd).unwrap();
        let back: a::DynamoGraphDeployment = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, dgd);
    }

    #[test]
    fn hub_spoke_hub_is_lossless(dgd in dgd()) {
        let spoke = api::conversion::to_v1alpha1(&dgd);
        // Through the wire, as the webhook does.
        let spoke: a::DynamoGraphDeployment = serde_json::from_value(serde_json::to_value(&spoke).unwrap()).unwrap();
        prop_assert_eq!(api::conversion::to_v1beta1(&spoke), dgd);
    }

    #[test]
    fn spoke_hub_spoke_is_lossless(dgd in alpha_dgd()) {
        let hub = api::conversion::to_v1alpha1(&api::conversion::to_v1beta1(&dgd));
        prop_assert_eq!(hub, dgd);
    }
}
