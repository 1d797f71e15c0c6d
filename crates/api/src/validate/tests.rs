use super::*;
use crate::metadata::TOTAL_ANNOTATION_SIZE_LIMIT;
use crate::v1beta1::{ComponentType, GpuMemoryServiceMode, MAIN_CONTAINER_NAME};
use garde::Validate as _;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

fn component(name: &str, ty: ComponentType) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(ty),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: MAIN_CONTAINER_NAME.into(),
                    image: Some("img:1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

fn dgd(components: Vec<DynamoComponentDeploymentSharedSpec>) -> DynamoGraphDeployment {
    DynamoGraphDeployment::new(
        "g",
        DynamoGraphDeploymentSpec {
            components,
            ..Default::default()
        },
    )
}

#[test]
fn a_valid_graph_passes() {
    let g = dgd(vec![
        component("Frontend", ComponentType::Frontend),
        component("worker", ComponentType::Worker),
    ]);
    assert_eq!(validate(&g), Ok(()));
}

#[test]
fn replicas_below_min_available_names_the_field_and_rule() {
    let mut w = component("worker", ComponentType::Worker);
    w.replicas = Some(1);
    w.min_available = Some(2);
    let g = dgd(vec![component("Frontend", ComponentType::Frontend), w]);
    let err = validate(&g).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.components[1].replicas: must be ≥ minAvailable (2)"
    );
    assert_eq!(err.violations[0].rule, Rule::ReplicasBelowMinAvailable);
    assert_eq!(err.reason(), REASON_INVALID_SPEC);
}

#[test]
fn scale_to_zero_is_allowed_below_min_available() {
    let mut w = component("worker", ComponentType::Worker);
    w.replicas = Some(0);
    w.min_available = Some(2);
    assert_eq!(validate(&dgd(vec![w])), Ok(()));
}

#[test]
fn duplicate_names_and_second_epp_are_reported_at_the_later_entry() {
    let g = dgd(vec![
        component("epp", ComponentType::Epp),
        component("EPP", ComponentType::Epp),
    ]);
    let err = validate(&g).unwrap_err();
    let fields: Vec<_> = err
        .violations
        .iter()
        .map(|v| (v.field.as_str(), v.rule))
        .collect();
    assert_eq!(
        fields,
        [
            ("spec.components[1].name", Rule::DuplicateComponentName),
            ("spec.components[1].type", Rule::MultipleEpp),
        ]
    );
    assert!(
        err.to_string().contains("; "),
        "all violations are listed: {err}"
    );
}

/// Every field only the Grove pathway renders is refused, at its path, on a graph recorded as
/// `component`, and accepted on Grove or before a provider is recorded.
#[test]
fn grove_only_fields_need_the_grove_pathway() {
    use crate::v1beta1::{
        ComponentRoleSpec, ExperimentalSpec, GroveSpec, KvTransferPolicy, ProviderOverride,
        SpecTopologyConstraint, TopologyConstraint,
    };
    let grove_override = |target: &str| ProviderOverride {
        api_version: "grove.io/v1alpha1".into(),
        target: Some(target.into()),
        value: serde_json::json!({"topologyConstraint": null}),
    };
    let mut w = component("worker", ComponentType::Worker);
    w.min_available = Some(1);
    w.provider_override = Some(grove_override("PodCliqueScalingGroupConfig"));
    w.topology_constraint = Some(TopologyConstraint {
        pack_domain: "rack".into(),
    });
    w.experimental = Some(ExperimentalSpec {
        grove: Some(GroveSpec {
            force_scaling_group: Some(true),
        }),
        ..Default::default()
    });
    w.multinode = Some(Default::default());
    w.roles = ["leader", "worker"]
        .map(|name| ComponentRoleSpec {
            name: name.into(),
            provider_override: Some(grove_override("PodCliqueTemplateSpec")),
            ..Default::default()
        })
        .to_vec();
    let mut g = dgd(vec![w, component("frontend", ComponentType::Frontend)]);
    g.spec.priority_class_name = Some("high".into());
    g.spec.provider_override = Some(grove_override("PodCliqueSet"));
    g.spec.topology_constraint = Some(SpecTopologyConstraint {
        cluster_topology_name: "ct".into(),
        pack_domain: Some("zone".into()),
    });
    g.spec.experimental = Some(crate::v1beta1::DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: Some(KvTransferPolicy {
            label_key: Some("topology.kubernetes.io/zone".into()),
            domain: "zone".into(),
            ..Default::default()
        }),
        component_groups: vec![crate::v1beta1::ComponentGroupSpec {
            name: "runtime".into(),
            replicas: 2,
            scaling_adapter: None,
            components: vec![crate::common::ComponentGroupComponentSpec {
                name: "frontend".into(),
            }],
        }],
    });
    assert_eq!(validate(&g), Ok(()), "no provider recorded yet");
    let grove = ValidationContext {
        provider: Some(Provider::Grove),
    };
    assert_eq!(validate_with(&g, &grove), Ok(()));
    g.metadata.annotations = Some(
        [(
            labels::WORKLOAD_PROVIDER.to_string(),
            "component".to_string(),
        )]
        .into(),
    );
    let err = validate(&g).unwrap_err();
    let c = "spec.components[0]";
    let want: Vec<(String, Rule, &str)> = [
        format!("{c}.providerOverride"),
        format!("{c}.minAvailable"),
        format!("{c}.topologyConstraint"),
        format!("{c}.experimental.grove.forceScalingGroup"),
        format!("{c}.roles[0].providerOverride"),
        format!("{c}.roles[1].providerOverride"),
        "spec.providerOverride".into(),
        "spec.priorityClassName".into(),
        "spec.topologyConstraint".into(),
        "spec.experimental.kvTransferPolicy".into(),
        "spec.experimental.componentGroups".into(),
    ]
    .into_iter()
    .map(|f| (f, Rule::GroveOnly, GROVE_ONLY))
    .collect();
    let got: Vec<(String, Rule, &str)> = err
        .violations
        .iter()
        .map(|v| (v.field.clone(), v.rule, v.message.as_str()))
        .collect();
    assert_eq!(got, want);

    // A DynamoComponentDeployment is always on the component pathway.
    let dcd = crate::DynamoComponentDeployment::new(
        "d",
        crate::DynamoComponentDeploymentSpec {
            backend_framework: None,
            component: g.spec.components[0].clone(),
        },
    );
    let err = validate_dcd(&dcd).unwrap_err();
    let fields: Vec<&str> = err
        .violations
        .iter()
        .filter(|v| v.rule == Rule::GroveOnly)
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.providerOverride",
            "spec.minAvailable",
            "spec.topologyConstraint",
            "spec.experimental.grove.forceScalingGroup",
            "spec.roles[0].providerOverride",
            "spec.roles[1].providerOverride",
        ]
    );
}

/// `roles` restate the multinode layout: exactly a leader of 1 pod and a worker of
/// nodeCount-1 pods; anything else is refused.
#[test]
fn roles_restate_the_multinode_layout() {
    use crate::v1beta1::ComponentRoleSpec;
    let role = |name: &str, replicas: Option<i32>| ComponentRoleSpec {
        name: name.into(),
        replicas,
        ..Default::default()
    };
    // (roles, multinode nodeCount, violations as (field, message))
    type Row = (
        Vec<ComponentRoleSpec>,
        Option<i32>,
        Vec<(&'static str, &'static str)>,
    );
    let cases: Vec<Row> = vec![
        (vec![], Some(3), vec![]),
        (
            vec![role("leader", Some(1)), role("worker", Some(2))],
            Some(3),
            vec![],
        ),
        (
            vec![role("leader", None), role("worker", None)],
            Some(3),
            vec![],
        ),
        (
            vec![role("leader", Some(2)), role("worker", Some(1))],
            Some(3),
            vec![
                ("roles[0].replicas", "must be 1 for role leader"),
                ("roles[1].replicas", "must be 2 for role worker"),
            ],
        ),
        (
            vec![role("leader", None)],
            Some(2),
            vec![(
                "roles",
                "must contain exactly one leader and one worker role",
            )],
        ),
        (
            vec![role("leader", None), role("worker", None)],
            None,
            vec![("roles", "requires multinode")],
        ),
    ];
    for (roles, nodes, want) in cases {
        let mut w = component("worker", ComponentType::Worker);
        w.multinode = nodes.map(|node_count| crate::common::MultinodeSpec { node_count });
        w.roles = roles;
        let got = violations(w);
        let want: Vec<(String, Rule, String)> = want
            .iter()
            .map(|(f, m)| {
                (
                    format!("spec.components[0].{f}"),
                    Rule::Roles,
                    m.to_string(),
                )
            })
            .collect();
        assert_eq!(got, want, "{nodes:?}");
    }
}

/// Fields this operator version does not act on are refused on every pathway, naming the
/// field and saying so.
#[test]
fn unsupported_fields_are_refused_on_every_pathway() {
    use crate::v1beta1::{
        ComponentCheckpointConfig, ComponentCheckpointJobConfig, ComponentGroupSpec,
        ComponentRoleSpec, DynamoGraphDeploymentExperimentalSpec,
    };
    let mut w = gms_worker(Some(None), None, &[], &[]);
    w.experimental.as_mut().unwrap().checkpoint = Some(ComponentCheckpointConfig {
        enabled: true,
        job: Some(ComponentCheckpointJobConfig {
            gms_client_containers: vec!["main".into()],
            pod_template: None,
        }),
        ..Default::default()
    });
    w.multinode = Some(Default::default());
    w.roles = ["leader", "worker"]
        .map(|name| ComponentRoleSpec {
            name: name.into(),
            pod_template: (name == "worker").then(PodTemplateSpec::default),
            ..Default::default()
        })
        .to_vec();
    let mut g = dgd(vec![w]);
    g.spec.backend_framework = Some(crate::BackendFramework::Vllm);
    g.spec.experimental = Some(DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: None,
        component_groups: vec![ComponentGroupSpec {
            name: "group".into(),
            replicas: 1,
            scaling_adapter: Some(Default::default()),
            components: vec![crate::common::ComponentGroupComponentSpec {
                name: "worker".into(),
            }],
        }],
    });
    for provider in [None, Some(Provider::Grove), Some(Provider::Component)] {
        let err = validate_with(&g, &ValidationContext { provider }).unwrap_err();
        let got: Vec<(&str, Rule)> = err
            .violations
            .iter()
            .filter(|v| v.rule == Rule::Unsupported)
            .map(|v| (v.field.as_str(), v.rule))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.components[0].roles[1].podTemplate", Rule::Unsupported),
                // With checkpoints, as upstream, which keeps it disabled.
                (
                    "spec.components[0].experimental.gpuMemoryService",
                    Rule::Unsupported
                ),
                (
                    "spec.components[0].experimental.checkpoint.job.gmsClientContainers",
                    Rule::Unsupported
                ),
                (
                    "spec.experimental.componentGroups[0].scalingAdapter",
                    Rule::Unsupported
                ),
            ],
            "{provider:?}"
        );
        for v in err
            .violations
            .iter()
            .filter(|v| v.rule == Rule::Unsupported)
        {
            assert!(v.message.starts_with(UNSUPPORTED), "{v}");
        }
    }
}

/// `spec.experimental.componentGroups`, upstream's admission rules (`validateDynamoGraph
/// DeploymentExperimentalSpec`, `validateComponentGroupSpec`,
/// `validateComponentGroupComponentSpec`): every violation names the group's or the
/// member's field.
#[test]
fn component_group_rules_follow_upstream() {
    use crate::common::{ComponentGroupComponentSpec, MultinodeSpec};
    use crate::v1beta1::{
        ComponentGroupSpec, DynamoGraphDeploymentExperimentalSpec, TopologyConstraint,
    };
    let group = |name: &str, members: &[&str]| ComponentGroupSpec {
        name: name.into(),
        replicas: 2,
        scaling_adapter: None,
        components: members
            .iter()
            .map(|m| ComponentGroupComponentSpec {
                name: m.to_string(),
            })
            .collect(),
    };
    let member = |edit: fn(&mut DynamoComponentDeploymentSharedSpec)| {
        let mut w = component("worker", ComponentType::Worker);
        edit(&mut w);
        w
    };
    let m = "spec.experimental.componentGroups[0].components[0].name";
    type Row = (
        &'static str,
        DynamoComponentDeploymentSharedSpec,
        Vec<ComponentGroupSpec>,
        Vec<(&'static str, &'static str)>,
    );
    let rows: Vec<Row> = vec![
        (
            "a single-node worker and the frontend scale together",
            member(|_| {}),
            vec![group("runtime", &["Frontend", "worker"])],
            vec![],
        ),
        (
            "an unknown member",
            member(|_| {}),
            vec![group("runtime", &["prefill"])],
            vec![(m, "unknown component prefill")],
        ),
        (
            "a member in two groups",
            member(|_| {}),
            vec![group("a", &["worker"]), group("b", &["worker"])],
            vec![(
                "spec.experimental.componentGroups[1].components[0].name",
                "is already a member of component group a",
            )],
        ),
        (
            "group names are unique case-insensitively",
            member(|_| {}),
            vec![
                group("Runtime", &["worker"]),
                group("runtime", &["Frontend"]),
            ],
            vec![(
                "spec.experimental.componentGroups[1].name",
                "duplicates componentGroups[0].name, case-insensitively",
            )],
        ),
        (
            "a group name must not shadow a component name",
            member(|_| {}),
            vec![group("WORKER", &["worker"])],
            vec![(
                "spec.experimental.componentGroups[0].name",
                "must not shadow a component name",
            )],
        ),
        (
            "a group without members",
            member(|_| {}),
            vec![group("runtime", &[])],
            vec![(
                "spec.experimental.componentGroups[0].components",
                "must contain at least one component",
            )],
        ),
        (
            "a multinode member",
            member(|w| w.multinode = Some(MultinodeSpec { node_count: 2 })),
            vec![group("runtime", &["worker"])],
            vec![(m, "component groups do not support multinode components")],
        ),
        (
            "a member at zero replicas",
            member(|w| w.replicas = Some(0)),
            vec![group("runtime", &["worker"])],
            vec![(
                m,
                "component groups do not support members with replicas set to 0",
            )],
        ),
        (
            "a member with its own topology constraint",
            member(|w| {
                w.topology_constraint = Some(TopologyConstraint {
                    pack_domain: "rack".into(),
                })
            }),
            vec![group("runtime", &["worker"])],
            vec![(
                m,
                "component groups do not support component-level topology constraints",
            )],
        ),
        (
            "a member with its own scaling adapter",
            member(|w| w.scaling_adapter = Some(Default::default())),
            vec![group("runtime", &["worker"])],
            vec![(
                m,
                "component groups scale their members together; a member cannot have its own scalingAdapter",
            )],
        ),
        (
            "a forced scaling-group member with a provider override",
            member(|w| {
                w.experimental = Some(crate::v1beta1::ExperimentalSpec {
                    grove: Some(crate::v1beta1::GroveSpec {
                        force_scaling_group: Some(true),
                    }),
                    ..Default::default()
                });
                w.provider_override = Some(crate::v1beta1::ProviderOverride {
                    api_version: "grove.io/v1alpha1".into(),
                    target: None,
                    value: serde_json::json!({"topologyConstraint": null}),
                });
            }),
            vec![group("runtime", &["worker"])],
            vec![(
                m,
                "component groups do not support providerOverride on PCSG-backed components",
            )],
        ),
        (
            "group replicas below one",
            member(|_| {}),
            vec![ComponentGroupSpec {
                replicas: 0,
                ..group("runtime", &["worker"])
            }],
            vec![(
                "spec.experimental.componentGroups[0].replicas",
                "must be at least 1",
            )],
        ),
    ];
    let grove = ValidationContext {
        provider: Some(Provider::Grove),
    };
    for (name, worker, groups, want) in rows {
        let mut g = dgd(vec![component("Frontend", ComponentType::Frontend), worker]);
        g.spec.experimental = Some(DynamoGraphDeploymentExperimentalSpec {
            kv_transfer_policy: None,
            component_groups: groups,
        });
        let result = validate_with(&g, &grove);
        if want.is_empty() {
            assert_eq!(result, Ok(()), "{name}");
        }
        let got: Vec<(String, Rule, String)> = result
            .err()
            .map(|e| e.violations)
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.rule == Rule::ComponentGroupMembers)
            .map(|v| (v.field, v.rule, v.message))
            .collect();
        let want: Vec<(String, Rule, String)> = want
            .into_iter()
            .map(|(f, msg)| (f.to_string(), Rule::ComponentGroupMembers, msg.to_string()))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

/// Upstream: `compilationCache.mountPath is required for backend framework X (no default
/// available)`; vLLM defaults it.
#[test]
fn compilation_cache_needs_a_path_unless_vllm() {
    use crate::BackendFramework as B;
    let cases = [
        (Some(B::Vllm), None, None),
        (Some(B::Vllm), Some(""), None),
        (Some(B::Sglang), None, Some("sglang")),
        (Some(B::Sglang), Some("/cache"), None),
        (Some(B::Trtllm), Some(""), Some("trtllm")),
        (None, None, Some("unknown")),
    ];
    for (framework, path, refused) in cases {
        let mut w = component("worker", ComponentType::Worker);
        w.compilation_cache = Some(crate::v1beta1::CompilationCacheConfig {
            pvc_name: "cache".into(),
            mount_path: path.map(str::to_string),
        });
        let mut g = dgd(vec![w]);
        g.spec.backend_framework = framework;
        match (validate(&g), refused) {
            (Ok(()), None) => {}
            (Err(e), Some(named)) => {
                let fields: Vec<_> = e.violations.iter().map(|v| v.field.as_str()).collect();
                assert_eq!(fields, ["spec.components[0].compilationCache.mountPath"]);
                assert!(e.to_string().contains(named), "{e}");
            }
            (got, want) => panic!("{framework:?} {path:?}: got {got:?}, want {want:?}"),
        }
    }
}

/// A v1alpha1 service's `ingress`: enabled on a frontend with an Ingress class or a
/// VirtualService gateway passes; on another component type, or saying nothing to render, it is
/// refused by its v1alpha1 path; disabled, anything goes.
#[test]
fn v1alpha1_ingress_rules() {
    let alpha = |component_type: &str, ingress: serde_json::Value| {
        let mut g: crate::v1alpha1::DynamoGraphDeployment =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                "metadata": {"name": "g"},
                "spec": {"services": {"Frontend": {"componentType": component_type,
                    "extraPodSpec": {"mainContainer": {"image": "frontend:1"}},
                    "ingress": ingress}}},
            }))
            .unwrap();
        g.metadata.namespace = Some("ns".into());
        crate::conversion::to_v1beta1(&g)
    };
    use serde_json::json;
    let rows = [
        (
            "frontend",
            json!({"enabled": true, "host": "g", "ingressControllerClassName": "nginx"}),
            None,
        ),
        (
            "frontend",
            json!({"enabled": true, "useVirtualService": true, "virtualServiceGateway": "istio-system/gw"}),
            None,
        ),
        ("frontend", json!({"enabled": false, "host": "g"}), None),
        (
            "worker",
            json!({"enabled": false, "ingressControllerClassName": "nginx"}),
            None,
        ),
        (
            "worker",
            json!({"enabled": true, "ingressControllerClassName": "nginx"}),
            Some("only a frontend component"),
        ),
        (
            "frontend",
            json!({"enabled": true, "host": "g.example.com"}),
            Some("nothing would be rendered"),
        ),
        (
            "frontend",
            json!({"enabled": true, "useVirtualService": true}),
            Some("needs virtualServiceGateway"),
        ),
    ];
    for (component_type, ingress, refused) in rows {
        let result = validate(&alpha(component_type, ingress.clone()));
        match refused {
            None => assert!(result.is_ok(), "{component_type} {ingress}: {result:?}"),
            Some(message) => {
                let err = result.unwrap_err();
                let v = &err.violations[..];
                assert_eq!(v.len(), 1, "{err}");
                assert_eq!(v[0].field, "spec.services.Frontend.ingress");
                assert_eq!(v[0].rule, Rule::Ingress);
                assert!(v[0].message.contains(message), "{ingress}: {err}");
            }
        }
    }
}

/// `dynamoSidecar`: upstream's structural rules (worker-class type, a restartable init
/// container of that name, no multinode, checkpoint, GMS or failover; the three rows of
/// `TestGenerateBasePodSpecRejectsInvalidDynamoSidecar`: frontend, not restartable,
/// multinode); a well-formed one passes.
#[test]
fn dynamo_sidecar_rules() {
    use crate::common::MultinodeSpec;
    use crate::v1beta1::{ExperimentalSpec, FailoverSpec};
    type Edit = fn(&mut DynamoComponentDeploymentSharedSpec);
    let init = |name: &str, policy: Option<&str>| Container {
        name: name.into(),
        image: Some("rt:1.6.0".into()),
        restart_policy: policy.map(str::to_string),
        ..Default::default()
    };
    let rows: [(&str, ComponentType, Container, Edit, Option<&str>); 8] = [
        (
            "valid",
            ComponentType::Worker,
            init("runtime", Some("Always")),
            |_| {},
            None,
        ),
        (
            "prefill",
            ComponentType::Prefill,
            init("runtime", Some("Always")),
            |_| {},
            None,
        ),
        (
            "frontend",
            ComponentType::Frontend,
            init("runtime", Some("Always")),
            |_| {},
            Some("only supported for worker"),
        ),
        (
            "untyped",
            ComponentType::Worker,
            init("runtime", Some("Always")),
            |c| c.r#type = None,
            Some("only supported for worker"),
        ),
        (
            "not restartable",
            ComponentType::Worker,
            init("runtime", None),
            |_| {},
            Some("restartPolicy Always"),
        ),
        (
            "missing",
            ComponentType::Worker,
            init("other", Some("Always")),
            |_| {},
            Some("no such init container runtime"),
        ),
        (
            "multinode",
            ComponentType::Worker,
            init("runtime", Some("Always")),
            |c| c.multinode = Some(MultinodeSpec { node_count: 2 }),
            Some("multinode"),
        ),
        (
            "failover",
            ComponentType::Worker,
            init("runtime", Some("Always")),
            |c| {
                c.experimental = Some(ExperimentalSpec {
                    failover: Some(FailoverSpec::default()),
                    ..Default::default()
                })
            },
            Some("gpuMemoryService or failover"),
        ),
    ];
    for (name, ty, container, edit, refused) in rows {
        let mut w = component("worker", ty);
        w.dynamo_sidecar = Some("runtime".into());
        let spec = w.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
        spec.init_containers = Some(vec![container]);
        edit(&mut w);
        let got: Vec<_> = violations(w)
            .into_iter()
            .filter(|(_, rule, _)| *rule == Rule::DynamoSidecar)
            .collect();
        match refused {
            None => assert!(got.is_empty(), "{name}: {got:?}"),
            Some(message) => {
                assert_eq!(got.len(), 1, "{name}: {got:?}");
                assert_eq!(got[0].0, "spec.components[0].dynamoSidecar", "{name}");
                assert!(got[0].2.contains(message), "{name}: {}", got[0].2);
            }
        }
    }
}

/// `runtimeVersionOverride` must be a semantic version (upstream's `runtimeversion.Parse`).
#[test]
fn runtime_version_override_is_a_semantic_version() {
    for (value, ok) in [
        ("1.4.0", true),
        ("", true),
        ("1.6", false),
        ("v1.6.0", false),
    ] {
        let mut w = component("worker", ComponentType::Worker);
        w.runtime_version_override = Some(value.into());
        match validate(&dgd(vec![w])) {
            Ok(()) => assert!(ok, "{value:?} passed"),
            Err(e) => {
                assert!(!ok, "{value:?}: {e}");
                let fields: Vec<_> = fields_and_rules(&e);
                assert_eq!(
                    fields,
                    [(
                        "spec.components[0].runtimeVersionOverride".to_string(),
                        Rule::RuntimeVersionOverride
                    )]
                );
                assert!(e.to_string().contains("semantic version"), "{e}");
            }
        }
    }
}

/// A vLLM worker with `nvidia.com/gpu: 2`, GMS (mode `gms`) and failover (mode `fo`; none
/// when `None`), plus the `extra` containers and client names.
fn gms_worker(
    gms: Option<Option<GpuMemoryServiceMode>>,
    failover: Option<Option<GpuMemoryServiceMode>>,
    extra: &[&str],
    clients: &[&str],
) -> DynamoComponentDeploymentSharedSpec {
    use crate::v1beta1::{ExperimentalSpec, FailoverSpec, GpuMemoryServiceSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut w = component("worker", ComponentType::Worker);
    let spec = w.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
    let main = &mut spec.containers[0];
    main.command = Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()]);
    main.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some([("nvidia.com/gpu".to_string(), Quantity("2".into()))].into()),
        ..Default::default()
    });
    for name in extra {
        spec.containers.push(Container {
            name: name.to_string(),
            image: Some("img:1".into()),
            ..Default::default()
        });
    }
    w.experimental = Some(ExperimentalSpec {
        gpu_memory_service: gms.map(|mode| GpuMemoryServiceSpec {
            mode,
            extra_client_containers: clients.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }),
        failover: failover.map(|mode| FailoverSpec {
            mode,
            num_shadows: None,
        }),
        ..Default::default()
    });
    w
}

fn violations(w: DynamoComponentDeploymentSharedSpec) -> Vec<(String, Rule, String)> {
    match validate(&dgd(vec![w])) {
        Ok(()) => Vec::new(),
        Err(e) => e
            .violations
            .into_iter()
            .map(|v| (v.field, v.rule, v.message))
            .collect(),
    }
}

/// The GPU memory service: intra-pod GMS with GPUs on main is fine; inter-pod is refused as
/// unsupported (both pathways); main without GPUs is refused (its pods would claim a
/// template nobody creates); client names must exist, once each (upstream's
/// `gmsExtraClientContainersError`: duplicate names, missing containers,
/// `TestComponentProgram_ReconcileRejectsInvalidLegacyGMSClient`).
#[test]
fn gpu_memory_service_rules() {
    use GpuMemoryServiceMode::{InterPod, IntraPod};
    let gms = "spec.components[0].experimental.gpuMemoryService";
    assert_eq!(violations(gms_worker(Some(None), None, &[], &[])), []);
    assert_eq!(
        violations(gms_worker(Some(Some(IntraPod)), None, &["s"], &["s"])),
        []
    );
    let rows: Vec<(DynamoComponentDeploymentSharedSpec, String, Rule, &str)> = vec![
        (
            gms_worker(Some(Some(InterPod)), None, &[], &[]),
            format!("{gms}.mode"),
            Rule::GpuMemoryService,
            "InterPod is not supported by this operator version (only IntraPod)",
        ),
        (
            {
                let mut w = gms_worker(Some(None), None, &[], &[]);
                w.main_container_mut().unwrap().resources = None;
                w
            },
            gms.to_string(),
            Rule::GpuMemoryService,
            "requires GPUs on the main container (resources limits or requests of nvidia.com/gpu or another GPU resource)",
        ),
        (
            gms_worker(Some(None), None, &[], &["missing-client"]),
            format!("{gms}.extraClientContainers[0]"),
            Rule::ContainerReference,
            "container missing-client not found in podTemplate.spec.containers",
        ),
        (
            gms_worker(Some(None), None, &["s"], &["s", "s"]),
            format!("{gms}.extraClientContainers[1]"),
            Rule::ContainerReference,
            "duplicates extraClientContainers[0] (s)",
        ),
    ];
    for (w, field, rule, message) in rows {
        assert_eq!(
            violations(w),
            [(field.clone(), rule, message.to_string())],
            "{field}"
        );
    }
}

/// Failover: needs GMS in the same mode (upstream's webhook), intra-pod only (inter-pod is
/// not supported), on vLLM (upstream 1.5's `TestBuildFailoverPod_RejectsNonVLLM`).
#[test]
fn failover_rules() {
    use GpuMemoryServiceMode::{InterPod, IntraPod};
    let fo = "spec.components[0].experimental.failover";
    assert_eq!(violations(gms_worker(Some(None), Some(None), &[], &[])), []);
    assert_eq!(
        violations(gms_worker(
            Some(Some(IntraPod)),
            Some(Some(IntraPod)),
            &[],
            &[]
        )),
        []
    );
    let sglang = {
        let mut w = gms_worker(Some(None), Some(None), &[], &[]);
        w.main_container_mut().unwrap().command =
            Some(vec!["python3".into(), "-m".into(), "dynamo.sglang".into()]);
        w
    };
    let unknown = {
        let mut w = gms_worker(Some(None), Some(None), &[], &[]);
        w.main_container_mut().unwrap().command = None;
        w
    };
    let rows: Vec<(DynamoComponentDeploymentSharedSpec, String, &str)> = vec![
        (
            gms_worker(None, Some(None), &[], &[]),
            fo.to_string(),
            "requires experimental.gpuMemoryService",
        ),
        (
            gms_worker(Some(None), Some(Some(InterPod)), &[], &[]),
            format!("{fo}.mode"),
            "must match gpuMemoryService.mode (IntraPod)",
        ),
        (
            sglang,
            fo.to_string(),
            "is only supported for vLLM workers by this operator version (detected: sglang)",
        ),
        (
            unknown,
            fo.to_string(),
            "is only supported for vLLM workers by this operator version (detected: none)",
        ),
    ];
    for (w, field, message) in rows {
        assert_eq!(
            violations(w),
            [(field.clone(), Rule::Failover, message.to_string())],
            "{field}"
        );
    }
    // Inter-pod failover with inter-pod GMS: both refused as unsupported.
    let fields: Vec<(String, Rule)> = violations(gms_worker(
        Some(Some(InterPod)),
        Some(Some(InterPod)),
        &[],
        &[],
    ))
    .into_iter()
    .map(|(f, r, _)| (f, r))
    .collect();
    assert_eq!(
        fields,
        [
            (
                "spec.components[0].experimental.gpuMemoryService.mode".to_string(),
                Rule::GpuMemoryService
            ),
            (format!("{fo}.mode"), Rule::Failover),
        ]
    );
    // The graph's backendFramework counts when the command names none.
    let mut w = gms_worker(Some(None), Some(None), &[], &[]);
    w.main_container_mut().unwrap().command = None;
    let mut g = dgd(vec![w]);
    g.spec.backend_framework = Some(crate::BackendFramework::Vllm);
    assert_eq!(validate(&g), Ok(()));
}

/// A standalone DCD with GMS is refused: no graph creates its claim template.
#[test]
fn gms_on_a_dcd_needs_its_graph() {
    let mut dcd = DynamoComponentDeployment::new(
        "w",
        crate::DynamoComponentDeploymentSpec {
            backend_framework: None,
            component: gms_worker(Some(None), None, &[], &[]),
        },
    );
    let err = validate_dcd(&dcd).unwrap_err();
    assert_eq!(err.violations.len(), 1, "{err}");
    assert_eq!(
        err.violations[0].field,
        "spec.experimental.gpuMemoryService"
    );
    assert_eq!(err.violations[0].rule, Rule::GpuMemoryService);
    dcd.metadata.labels = Some(
        [(
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            "g".to_string(),
        )]
        .into(),
    );
    assert_eq!(validate_dcd(&dcd), Ok(()));
}

/// A v1alpha1 DynamoComponentDeployment's enabled `ingress` is refused (routes come from
/// graphs); disabled, it passes.
#[test]
fn a_v1alpha1_dcds_ingress_is_refused() {
    let alpha = |enabled: bool| {
        let dcd: crate::v1alpha1::dcd::DynamoComponentDeployment =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
                "metadata": {"name": "f", "namespace": "ns"},
                "spec": {"componentType": "frontend",
                    "extraPodSpec": {"mainContainer": {"image": "frontend:1"}},
                    "ingress": {"enabled": enabled, "ingressControllerClassName": "nginx"}},
            }))
            .unwrap();
        crate::conversion::children::dcd_to_v1beta1(&dcd)
    };
    let err = validate_dcd(&alpha(true)).unwrap_err();
    assert_eq!(err.violations.len(), 1, "{err}");
    assert_eq!(err.violations[0].field, "spec.ingress");
    assert_eq!(err.violations[0].rule, Rule::Unsupported);
    assert_eq!(validate_dcd(&alpha(false)), Ok(()));
}

#[test]
fn garde_report_carries_the_same_paths() {
    let mut w = component("worker", ComponentType::Frontend);
    w.multinode = Some(Default::default());
    let spec = DynamoGraphDeploymentSpec {
        components: vec![w],
        ..Default::default()
    };
    let report = spec
        .validate_with(&ValidationContext::default())
        .unwrap_err();
    let (path, error) = report.iter().next().unwrap();
    assert_eq!(path.to_string(), "components[0].multinode");
    assert_eq!(
        error.message(),
        "is only supported for worker, prefill and decode components"
    );
}

#[test]
fn restart_order_must_list_every_component_once() {
    let mut g = dgd(vec![
        component("a", ComponentType::Worker),
        component("b", ComponentType::Worker),
    ]);
    g.spec.restart = Some(crate::common::Restart {
        id: "1".into(),
        strategy: Some(crate::common::RestartStrategy {
            r#type: None,
            order: vec!["a".into(), "a".into()],
        }),
    });
    let err = validate(&g).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.restart.strategy.order[1]: duplicates order[0] (a); \
         spec.restart.strategy.order: must list every component (missing: b)"
    );
}

fn with_template_metadata(
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> DynamoComponentDeploymentSharedSpec {
    let mut c = component("Frontend", ComponentType::Frontend);
    let map = |entries: &[(&str, &str)]| {
        (!entries.is_empty()).then(|| {
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        })
    };
    c.pod_template.as_mut().unwrap().metadata = Some(ObjectMeta {
        labels: map(labels),
        annotations: map(annotations),
        ..Default::default()
    });
    c
}

fn fields_and_rules(err: &InvalidSpec) -> Vec<(String, Rule)> {
    err.violations
        .iter()
        .map(|v| (v.field.clone(), v.rule))
        .collect()
}

type Entries = &'static [(&'static str, &'static str)];
/// What, graph labels, graph annotations, template labels, template annotations, and the
/// expected (field, rule) list.
type MetadataCase = (
    &'static str,
    Entries,
    Entries,
    Entries,
    Entries,
    &'static [(&'static str, Rule)],
);

/// What the children carry: graph labels and annotations, pod template labels and
/// annotations.
#[test]
fn labels_and_annotations_the_children_carry_follow_kubernetes_rules() {
    let cases: &[MetadataCase] = &[
        (
            "valid everywhere",
            &[
                ("example.com/team", "a-team"),
                ("tier", ""),
                ("A_b.c", "X_y.Z"),
            ],
            &[
                ("example.com/note", "\u{0}\u{7}🚀 anything"),
                ("Example.COM/Upper", ""),
            ],
            &[("app.kubernetes.io/name", "frontend")],
            &[("prometheus.io/scrape", "true")],
            &[],
        ),
        (
            "the reliability case: unicode in a graph label value",
            &[("example.com/team", "ünï cødé!")],
            &[("example.com/note", "\u{0}\u{7}🚀")],
            &[],
            &[],
            &[("spec.labels", Rule::LabelValue)],
        ),
        (
            "graph label key with a space, two slashes",
            &[("bad key", "v"), ("a/b/c", "v")],
            &[],
            &[],
            &[],
            &[
                ("spec.labels", Rule::LabelKey),
                ("spec.labels", Rule::LabelKey),
            ],
        ),
        (
            "both key and value of one label",
            &[("-x", "y-")],
            &[],
            &[],
            &[],
            &[
                ("spec.labels", Rule::LabelKey),
                ("spec.labels", Rule::LabelValue),
            ],
        ),
        (
            "graph annotation keys",
            &[],
            &[
                ("🚀", "v"),
                ("example.com/", "v"),
                ("ok.example.com/fine", "v"),
            ],
            &[],
            &[],
            &[
                ("spec.annotations", Rule::AnnotationKey),
                ("spec.annotations", Rule::AnnotationKey),
            ],
        ),
        (
            "pod template labels and annotations",
            &[],
            &[],
            &[("example.com/x", "a\u{7}b"), ("UPPER.example.com/x", "v")],
            &[("with space", "v")],
            &[
                (
                    "spec.components[0].podTemplate.metadata.annotations",
                    Rule::AnnotationKey,
                ),
                (
                    "spec.components[0].podTemplate.metadata.labels",
                    Rule::LabelKey,
                ),
                (
                    "spec.components[0].podTemplate.metadata.labels",
                    Rule::LabelValue,
                ),
            ],
        ),
        (
            "a label value of 64 characters",
            &[(
                "k",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            )],
            &[],
            &[],
            &[],
            &[("spec.labels", Rule::LabelValue)],
        ),
    ];
    for (what, graph_labels, graph_annotations, labels, annotations, want) in cases {
        let mut g = dgd(vec![with_template_metadata(labels, annotations)]);
        let map = |e: &[(&str, &str)]| -> BTreeMap<String, String> {
            e.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        g.spec.labels = map(graph_labels);
        g.spec.annotations = map(graph_annotations);
        let got = validate(&g)
            .err()
            .map(|e| fields_and_rules(&e))
            .unwrap_or_default();
        let want: Vec<(String, Rule)> = want.iter().map(|(f, r)| (f.to_string(), *r)).collect();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn the_message_names_the_label_and_the_rule() {
    let mut g = dgd(vec![component("Frontend", ComponentType::Frontend)]);
    g.spec.labels = [("example.com/team".to_string(), "ünï cødé!".to_string())].into();
    let err = validate(&g).unwrap_err();
    assert_eq!(err.reason(), REASON_INVALID_SPEC);
    assert_eq!(
        err.to_string(),
        "spec.labels: invalid value \"ünï cødé!\" of label \"example.com/team\": must be \
         empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an \
         alphanumeric"
    );
    g.spec.labels = [("a/b/c".to_string(), "\u{7}".to_string())].into();
    let err = validate(&g).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.labels: invalid label key \"a/b/c\": must be a name with an optional DNS \
         subdomain prefix and '/' (e.g. example.com/my-name), with at most one '/'; \
         spec.labels: invalid value \"\\u{7}\" of label \"a/b/c\": must be empty or consist \
         of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    );
}

#[test]
fn annotations_total_at_most_256_kib_with_the_graphs_included() {
    let half = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2);
    let over = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
    let template_path = "spec.components[0].podTemplate.metadata.annotations";
    // (graph annotations, template annotations, expected (field, message start)).
    type Pairs<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(Pairs, Pairs, Pairs)> = vec![
        (vec![("a", &half)], vec![("b", "small")], vec![]),
        // Exactly at the limit (key "a" is one byte) is fine.
        (vec![("a", &over[1..])], vec![], vec![]),
        (
            vec![("a", &over)],
            vec![],
            vec![("spec.annotations", "must total")],
        ),
        (
            vec![("a", &half)],
            vec![("b", &half)],
            vec![(template_path, "together with spec.annotations must total")],
        ),
        // The template overrides the graph's value: only its own value counts.
        (vec![("a", &half)], vec![("a", &half)], vec![]),
        (
            vec![],
            vec![("a", &over)],
            vec![(template_path, "must total")],
        ),
        // Too large on both levels: each reported once, on its own.
        (
            vec![("a", &over)],
            vec![("b", &over)],
            vec![
                ("spec.annotations", "must total"),
                (template_path, "must total"),
            ],
        ),
    ];
    for (i, (graph, template, want)) in cases.into_iter().enumerate() {
        let mut g = dgd(vec![with_template_metadata(&[], &template)]);
        g.spec.annotations = graph
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let got: Vec<Violation> = validate(&g).err().map(|e| e.violations).unwrap_or_default();
        assert_eq!(got.len(), want.len(), "case {i}: {got:?}");
        for (v, (field, start)) in got.iter().zip(&want) {
            assert_eq!(
                (v.field.as_str(), v.rule),
                (*field, Rule::AnnotationsSize),
                "case {i}"
            );
            assert!(v.message.starts_with(start), "case {i}: {}", v.message);
            assert!(v.message.contains("at most 262144 bytes"), "case {i}");
        }
    }
}

#[test]
fn dcd_and_checkpoint_templates_are_checked_too() {
    let mut dcd = DynamoComponentDeployment::new("d", Default::default());
    dcd.spec.component = with_template_metadata(&[("example.com/x", "ünï")], &[]);
    let err = validate_dcd(&dcd).unwrap_err();
    assert_eq!(
        fields_and_rules(&err),
        [(
            "spec.podTemplate.metadata.labels".to_string(),
            Rule::LabelValue
        )]
    );

    let mut c = component("worker", ComponentType::Worker);
    c.experimental = Some(crate::v1beta1::ExperimentalSpec {
        checkpoint: Some(crate::v1beta1::ComponentCheckpointConfig {
            enabled: true,
            job: Some(crate::v1beta1::ComponentCheckpointJobConfig {
                pod_template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("bad key".to_string(), "v".to_string())].into()),
                        ..Default::default()
                    }),
                    spec: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let err = validate(&dgd(vec![c])).unwrap_err();
    assert_eq!(
        fields_and_rules(&err),
        [(
            "spec.components[0].experimental.checkpoint.job.podTemplate.metadata.labels"
                .to_string(),
            Rule::LabelKey
        )]
    );

    let ckpt: DynamoCheckpoint = serde_json::from_value(serde_json::json!({
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoCheckpoint",
        "metadata": {"name": "c"},
        "spec": {
            "identity": {"model": "m", "backendFramework": "vllm"},
            "job": {"podTemplateSpec": {
                "metadata": {"annotations": {"a/b/c": "v"}},
                "spec": {"containers": [{"name": "main", "image": "img:1"}]},
            }},
        },
    }))
    .unwrap();
    let err = validate_checkpoint(&ckpt).unwrap_err();
    assert_eq!(
        fields_and_rules(&err),
        [(
            "spec.job.podTemplateSpec.metadata.annotations".to_string(),
            Rule::AnnotationKey
        )]
    );
}
