//! The renderer, table-driven: every compatibility rule with an input that triggers it and one
//! that does not, and the rendering defaults.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use api::grove::{CliqueStartupType, PodCliqueSet, TopologyConstraint, TopologyPack};
use api::labels;
use api::v1beta1::{ComponentType, SpecTopologyConstraint, TopologyConstraint as ComponentTc};
use common::*;
use grove_render::{RenderError, RestartStamps};

/// One row: a description, the graph and fixture, the existing object, and what to check.
struct Case {
    name: &'static str,
    triggers: bool,
    setup: fn(&mut api::DynamoGraphDeployment, &mut Fixture) -> Option<PodCliqueSet>,
    check: fn(&PodCliqueSet),
}

fn run(rule: &str, cases: &[Case]) {
    assert!(
        cases.iter().any(|c| c.triggers),
        "{rule}: no triggering case"
    );
    assert!(
        cases.iter().any(|c| !c.triggers),
        "{rule}: no non-triggering case"
    );
    for case in cases {
        let mut dgd = graph();
        let mut fixture = Fixture::default();
        let existing = (case.setup)(&mut dgd, &mut fixture);
        let before = (dgd.clone(), existing.clone());
        let pcs = fixture
            .render(&dgd, existing.as_ref())
            .unwrap_or_else(|e| panic!("{rule} / {}: {e}", case.name));
        assert_eq!(
            before,
            (dgd.clone(), existing.clone()),
            "{rule} / {}: inputs changed",
            case.name
        );
        let again = fixture.render(&dgd, existing.as_ref()).unwrap();
        assert_eq!(pcs, again, "{rule} / {}: not deterministic", case.name);
        (case.check)(&pcs);
    }
}

fn rendered() -> PodCliqueSet {
    fresh(&graph())
}

#[test]
fn legacy_worker_selector() {
    run(
        "legacy worker selector",
        &[
            Case {
                name: "existing prefill clique selects as worker: keeps rendering as worker",
                triggers: true,
                setup: |_, _| {
                    let mut existing = rendered();
                    let c = clique_mut(&mut existing, "prefill");
                    c.labels
                        .insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
                    c.labels.remove(labels::DYNAMO_SUB_COMPONENT_TYPE);
                    Some(existing)
                },
                check: |pcs| {
                    let c = clique(pcs, "prefill");
                    assert_eq!(c.labels[labels::DYNAMO_COMPONENT_TYPE], "worker");
                    assert_eq!(c.labels[labels::DYNAMO_SUB_COMPONENT_TYPE], "prefill");
                    assert_eq!(main_env(c, "DYN_COMPONENT").as_deref(), Some("worker"));
                },
            },
            Case {
                name: "existing worker selector with the same sub-type also triggers",
                triggers: true,
                setup: |_, _| {
                    let mut existing = rendered();
                    let c = clique_mut(&mut existing, "decode-ldr");
                    c.labels
                        .insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
                    c.labels
                        .insert(labels::DYNAMO_SUB_COMPONENT_TYPE.into(), "decode".into());
                    Some(existing)
                },
                check: |pcs| {
                    for name in ["decode-ldr", "decode-wkr"] {
                        assert_eq!(
                            clique(pcs, name).labels[labels::DYNAMO_COMPONENT_TYPE],
                            "worker"
                        );
                    }
                },
            },
            Case {
                name: "existing clique with its own type: no change",
                triggers: false,
                setup: |_, _| Some(rendered()),
                check: |pcs| {
                    let c = clique(pcs, "prefill");
                    assert_eq!(c.labels[labels::DYNAMO_COMPONENT_TYPE], "prefill");
                    assert_eq!(c.labels[labels::DYNAMO_SUB_COMPONENT_TYPE], "prefill");
                    assert_eq!(main_env(c, "DYN_COMPONENT").as_deref(), Some("prefill"));
                },
            },
            Case {
                name: "worker selector with another sub-type: no change",
                triggers: false,
                setup: |_, _| {
                    let mut existing = rendered();
                    let c = clique_mut(&mut existing, "prefill");
                    c.labels
                        .insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
                    c.labels
                        .insert(labels::DYNAMO_SUB_COMPONENT_TYPE.into(), "decode".into());
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        clique(pcs, "prefill").labels[labels::DYNAMO_COMPONENT_TYPE],
                        "prefill"
                    );
                },
            },
            Case {
                name: "no existing object: no change",
                triggers: false,
                setup: |_, _| None,
                check: |pcs| {
                    assert_eq!(
                        clique(pcs, "prefill").labels[labels::DYNAMO_COMPONENT_TYPE],
                        "prefill"
                    );
                },
            },
        ],
    );
}

/// Adds an EPP component to the graph.
fn with_epp(dgd: &mut api::DynamoGraphDeployment) {
    dgd.spec
        .components
        .push(component("Epp", ComponentType::Epp, &[]));
}

/// What a worker's pods carry (upstream `graph.go` `generateLabels` and `component_worker.go`):
/// the sub-component-type label of prefill/decode (their v1alpha1 sub-type, over a pod template
/// label of that name; from the pod template under the legacy worker rule), the
/// component-class label `worker` on worker-class cliques of a graph with an EPP component
/// (never without one, also under the legacy rule: upstream's non-EPP worker identity cases),
/// and `DYN_FORWARDPASS_METRIC_PORT` on every worker-class main container.
#[test]
fn worker_identity_labels_and_forward_pass_port() {
    /// (clique, component type, sub-component type, component class, FPM port)
    type Want = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );
    struct Row {
        name: &'static str,
        setup: fn(&mut api::DynamoGraphDeployment) -> Option<PodCliqueSet>,
        want: &'static [Want],
    }
    let rows = [
        Row {
            name: "no EPP component",
            setup: |_| None,
            want: &[
                ("frontend", "frontend", None, None, None),
                ("decode-ldr", "decode", Some("decode"), None, Some("20380")),
                ("decode-wkr", "decode", Some("decode"), None, Some("20380")),
                ("prefill", "prefill", Some("prefill"), None, Some("20380")),
            ],
        },
        Row {
            name: "with an EPP component",
            setup: |g| {
                with_epp(g);
                None
            },
            want: &[
                ("frontend", "frontend", None, None, None),
                (
                    "decode-ldr",
                    "decode",
                    Some("decode"),
                    Some("worker"),
                    Some("20380"),
                ),
                (
                    "decode-wkr",
                    "decode",
                    Some("decode"),
                    Some("worker"),
                    Some("20380"),
                ),
                (
                    "prefill",
                    "prefill",
                    Some("prefill"),
                    Some("worker"),
                    Some("20380"),
                ),
                ("epp", "epp", None, None, None),
            ],
        },
        Row {
            name: "an aggregated worker has no sub-type, and the class with an EPP component",
            setup: |g| {
                g.spec.components[2].r#type = Some(ComponentType::Worker);
                with_epp(g);
                None
            },
            want: &[("prefill", "worker", None, Some("worker"), Some("20380"))],
        },
        Row {
            name: "the type wins over a pod template sub-type label",
            setup: |g| {
                let meta = g.spec.components[2]
                    .pod_template
                    .as_mut()
                    .unwrap()
                    .metadata
                    .get_or_insert_with(Default::default);
                meta.labels = Some(BTreeMap::from([(
                    labels::DYNAMO_SUB_COMPONENT_TYPE.to_string(),
                    "decode".to_string(),
                )]));
                None
            },
            want: &[("prefill", "prefill", Some("prefill"), None, Some("20380"))],
        },
        Row {
            name: "legacy worker selectors without an EPP component: no class",
            setup: |_| {
                let mut existing = rendered();
                for name in ["prefill", "decode-ldr", "decode-wkr"] {
                    let c = clique_mut(&mut existing, name);
                    c.labels
                        .insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
                    c.labels.remove(labels::DYNAMO_SUB_COMPONENT_TYPE);
                }
                Some(existing)
            },
            want: &[
                ("decode-ldr", "worker", Some("decode"), None, Some("20380")),
                ("decode-wkr", "worker", Some("decode"), None, Some("20380")),
                ("prefill", "worker", Some("prefill"), None, Some("20380")),
            ],
        },
    ];
    for row in rows {
        let mut dgd = graph();
        let existing = (row.setup)(&mut dgd);
        let pcs = Fixture::default()
            .render(&dgd, existing.as_ref())
            .unwrap_or_else(|e| panic!("{}: {e}", row.name));
        for (name, type_, sub, class, fpm) in row.want {
            let at = format!("{}: {name}", row.name);
            let c = clique(&pcs, name);
            let get = |k: &str| c.labels.get(k).map(String::as_str);
            assert_eq!(get(labels::DYNAMO_COMPONENT_TYPE), Some(*type_), "{at}");
            assert_eq!(get(labels::DYNAMO_SUB_COMPONENT_TYPE), *sub, "{at}");
            assert_eq!(get(labels::DYNAMO_COMPONENT_CLASS), *class, "{at}");
            assert_eq!(
                main_env(c, labels::ENV_FORWARDPASS_METRIC_PORT).as_deref(),
                *fpm,
                "{at}"
            );
            assert!(
                !c.spec.pod_spec.containers[0]
                    .ports
                    .iter()
                    .flatten()
                    .any(|p| p.container_port == labels::FORWARDPASS_METRIC_BASE_PORT),
                "{at}: no container port"
            );
        }
    }
    // A user value of the forward-pass port wins.
    let mut dgd = graph();
    dgd.spec.components[2]
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: labels::ENV_FORWARDPASS_METRIC_PORT.into(),
        value: Some("23456".into()),
        value_from: None,
    }]);
    assert_eq!(
        main_env(
            clique(&fresh(&dgd), "prefill"),
            labels::ENV_FORWARDPASS_METRIC_PORT
        )
        .as_deref(),
        Some("23456")
    );
}

#[test]
fn restart_annotations_are_kept() {
    run(
        "restart annotations",
        &[
            Case {
                name: "existing clique stamped, no restart asked: the stamp stays",
                triggers: true,
                setup: |_, _| {
                    let mut existing = rendered();
                    clique_mut(&mut existing, "frontend")
                        .annotations
                        .insert(labels::RESTART_AT.into(), "r1".into());
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        clique(pcs, "frontend").annotations[labels::RESTART_AT],
                        "r1"
                    );
                    assert!(
                        !clique(pcs, "prefill")
                            .annotations
                            .contains_key(labels::RESTART_AT)
                    );
                },
            },
            Case {
                name: "a restart stamps the component: the new value wins",
                triggers: false,
                setup: |_, f| {
                    f.restart = Some(RestartStamps {
                        value: "r2".into(),
                        components: BTreeSet::from(["Frontend".to_string()]),
                    });
                    let mut existing = rendered();
                    clique_mut(&mut existing, "frontend")
                        .annotations
                        .insert(labels::RESTART_AT.into(), "r1".into());
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        clique(pcs, "frontend").annotations[labels::RESTART_AT],
                        "r2"
                    );
                },
            },
            Case {
                name: "nothing stamped: no annotation",
                triggers: false,
                setup: |_, _| Some(rendered()),
                check: |pcs| {
                    assert!(
                        pcs.spec
                            .template
                            .cliques
                            .iter()
                            .all(|c| !c.annotations.contains_key(labels::RESTART_AT))
                    );
                },
            },
        ],
    );
}

fn topology_graph(dgd: &mut api::DynamoGraphDeployment) {
    dgd.spec.topology_constraint = Some(SpecTopologyConstraint {
        cluster_topology_name: "ct".into(),
        pack_domain: Some("zone".into()),
    });
    dgd.spec.components[1].topology_constraint = Some(ComponentTc {
        pack_domain: "rack".into(),
    });
}

fn legacy_tc(domain: &str) -> Option<TopologyConstraint> {
    Some(TopologyConstraint {
        topology_name: None,
        pack: None,
        pack_domain: Some(domain.into()),
    })
}

#[test]
fn topology_constraint_upgrade() {
    run(
        "topology constraint upgrade",
        &[
            Case {
                name: "pre-alpha.9 packDomain without topologyName: kept next to the new name",
                triggers: true,
                setup: |dgd, _| {
                    topology_graph(dgd);
                    let mut existing = rendered();
                    existing.spec.template.topology_constraint = legacy_tc("zone");
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        pcs.spec.template.topology_constraint,
                        Some(TopologyConstraint {
                            topology_name: Some("ct".into()),
                            pack: None,
                            pack_domain: Some("zone".into()),
                        })
                    );
                    // The scaling group inherits the name: no explicit name, nothing to repair.
                    assert_eq!(
                        group(pcs, "decode")
                            .topology_constraint
                            .as_ref()
                            .unwrap()
                            .pack,
                        Some(TopologyPack {
                            required: Some("rack".into()),
                            preferred: None
                        })
                    );
                },
            },
            Case {
                name: "already migrated: the modern shape",
                triggers: false,
                setup: |dgd, _| {
                    topology_graph(dgd);
                    let mut existing = rendered();
                    existing.spec.template.topology_constraint = Some(TopologyConstraint {
                        topology_name: Some("ct".into()),
                        pack: None,
                        pack_domain: Some("zone".into()),
                    });
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        pcs.spec.template.topology_constraint,
                        Some(TopologyConstraint {
                            topology_name: Some("ct".into()),
                            pack: Some(TopologyPack {
                                required: Some("zone".into()),
                                preferred: None
                            }),
                            pack_domain: None,
                        })
                    );
                },
            },
            Case {
                name: "no existing object: the modern shape",
                triggers: false,
                setup: |dgd, _| {
                    topology_graph(dgd);
                    None
                },
                check: |pcs| {
                    let tc = pcs.spec.template.topology_constraint.as_ref().unwrap();
                    assert_eq!(tc.pack_domain, None);
                    assert_eq!(tc.pack.as_ref().unwrap().required.as_deref(), Some("zone"));
                },
            },
        ],
    );
}

#[test]
fn clique_and_scaling_group_order_is_preserved() {
    run(
        "order",
        &[
            Case {
                name: "existing order differs from spec order: existing order wins, new last",
                triggers: true,
                setup: |dgd, _| {
                    let mut existing = rendered();
                    existing.spec.template.cliques.reverse();
                    existing
                        .spec
                        .template
                        .cliques
                        .retain(|c| c.name != "decode-wkr");
                    let mut planner = component("Planner", ComponentType::Planner, &[]);
                    planner.multinode = None;
                    dgd.spec.components.push(planner);
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(
                        clique_names(pcs),
                        ["prefill", "decode-ldr", "frontend", "decode-wkr", "planner"]
                    );
                },
            },
            Case {
                name: "no existing object: spec order",
                triggers: false,
                setup: |_, _| None,
                check: |pcs| {
                    assert_eq!(
                        clique_names(pcs),
                        ["frontend", "decode-ldr", "decode-wkr", "prefill"]
                    );
                },
            },
        ],
    );
    // Scaling groups too.
    let mut dgd = graph();
    dgd.spec.components[2].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
    let mut existing = fresh(&dgd);
    existing.spec.template.pod_clique_scaling_groups.reverse();
    let pcs = Fixture::default().render(&dgd, Some(&existing)).unwrap();
    let names: Vec<&str> = pcs
        .spec
        .template
        .pod_clique_scaling_groups
        .iter()
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(names, ["prefill", "decode"]);
    assert_eq!(
        fresh(&dgd)
            .spec
            .template
            .pod_clique_scaling_groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>(),
        ["decode", "prefill"]
    );
}

#[test]
fn replica_counts_are_preserved() {
    run(
        "replicas",
        &[
            Case {
                name: "existing clique and group scaled (adapter, planner, kubectl scale): kept",
                triggers: true,
                setup: |dgd, _| {
                    dgd.spec.components[0].replicas = Some(1);
                    dgd.spec.components[1].replicas = Some(1);
                    let mut existing = rendered();
                    clique_mut(&mut existing, "frontend").spec.replicas = 3;
                    existing.spec.template.pod_clique_scaling_groups[0].replicas = Some(4);
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(clique(pcs, "frontend").spec.replicas, 3);
                    assert_eq!(group(pcs, "decode").replicas, Some(4));
                    // Cliques inside a scaling group keep their per-replica pod counts.
                    assert_eq!(clique(pcs, "decode-wkr").spec.replicas, 1);
                },
            },
            Case {
                name: "waiting for a checkpoint: held at zero despite the existing count",
                triggers: false,
                setup: |_, f| {
                    f.waiting = BTreeSet::from(["Frontend".to_string(), "decode".to_string()]);
                    let mut existing = rendered();
                    clique_mut(&mut existing, "frontend").spec.replicas = 3;
                    Some(existing)
                },
                check: |pcs| {
                    assert_eq!(clique(pcs, "frontend").spec.replicas, 0);
                    assert_eq!(group(pcs, "decode").replicas, Some(0));
                },
            },
            Case {
                name: "no existing object: the spec's replicas",
                triggers: false,
                setup: |dgd, _| {
                    dgd.spec.components[0].replicas = Some(2);
                    None
                },
                check: |pcs| {
                    assert_eq!(clique(pcs, "frontend").spec.replicas, 2);
                    assert_eq!(group(pcs, "decode").replicas, Some(1));
                },
            },
        ],
    );
}

#[test]
fn worker_hash_labels() {
    run(
        "worker hash labels",
        &[
            Case {
                name: "no existing object: workers labelled",
                triggers: true,
                setup: |_, _| None,
                check: |pcs| {
                    let c = clique(pcs, "prefill");
                    assert_eq!(c.labels[labels::DYNAMO_WORKER_HASH], "abcd1234");
                    assert_eq!(
                        main_env(c, "DYN_NAMESPACE_WORKER_SUFFIX").as_deref(),
                        Some("abcd1234")
                    );
                    assert!(
                        !clique(pcs, "frontend")
                            .labels
                            .contains_key(labels::DYNAMO_WORKER_HASH)
                    );
                },
            },
            Case {
                name: "existing unlabelled workers, spec changed: labelled from now on",
                triggers: true,
                setup: |_, f| {
                    f.workers.changed = true;
                    Some(unlabelled())
                },
                check: |pcs| {
                    assert_eq!(
                        clique(pcs, "prefill").labels[labels::DYNAMO_WORKER_HASH],
                        "abcd1234"
                    );
                },
            },
            Case {
                name: "existing unlabelled workers, unchanged spec: stay unlabelled",
                triggers: false,
                setup: |_, _| Some(unlabelled()),
                check: |pcs| {
                    let c = clique(pcs, "prefill");
                    assert!(!c.labels.contains_key(labels::DYNAMO_WORKER_HASH));
                    assert_eq!(main_env(c, "DYN_NAMESPACE_WORKER_SUFFIX"), None);
                },
            },
        ],
    );
}

fn unlabelled() -> PodCliqueSet {
    let mut existing = rendered();
    for c in &mut existing.spec.template.cliques {
        c.labels.remove(labels::DYNAMO_WORKER_HASH);
    }
    existing
}

#[test]
fn template_defaults_follow_upstream() {
    let pcs = rendered();
    assert_eq!(pcs.metadata.name.as_deref(), Some("g"));
    assert_eq!(pcs.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(
        pcs.metadata.labels.as_ref().unwrap()[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME],
        "g"
    );
    let owner = &pcs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("DynamoGraphDeployment", "uid-g", Some(true))
    );
    assert_eq!(pcs.spec.replicas, Some(1));
    let t = &pcs.spec.template;
    assert_eq!(
        t.clique_startup_type,
        Some(CliqueStartupType::CliqueStartupTypeAnyOrder)
    );
    assert!(
        t.headless_service_config
            .as_ref()
            .unwrap()
            .publish_not_ready_addresses
    );
    assert_eq!(t.termination_delay.as_deref(), Some("15m"));
    assert_eq!(t.topology_constraint, None);
    assert_eq!(
        clique_names(&pcs),
        ["frontend", "decode-ldr", "decode-wkr", "prefill"]
    );
    let g = group(&pcs, "decode");
    assert_eq!(g.clique_names, ["decode-ldr", "decode-wkr"]);
    assert_eq!((g.replicas, g.min_available), (Some(1), Some(1)));
    let ldr = clique(&pcs, "decode-ldr");
    let wkr = clique(&pcs, "decode-wkr");
    assert_eq!((ldr.spec.replicas, ldr.spec.min_available), (1, Some(1)));
    assert_eq!((wkr.spec.replicas, wkr.spec.min_available), (1, Some(1)));
    assert_eq!(ldr.spec.role_name, "decode-ldr");
    let f = clique(&pcs, "frontend");
    assert_eq!(f.labels[labels::SELECTOR], "g-frontend");
    assert_eq!(f.labels[labels::DYNAMO_NAMESPACE], "ns-g");
    assert_eq!(
        f.annotations[labels::DYNAMO_DISCOVERY_BACKEND],
        "kubernetes"
    );
    assert_eq!(main_env(f, "GRAPH").as_deref(), Some("1"));
    assert_eq!(
        f.spec.pod_spec.service_account_name.as_deref(),
        Some("g-k8s-service-discovery")
    );
    // SGLang multinode: leader rank 0 in args, workers through the shell, without probes.
    let leader = &ldr.spec.pod_spec.containers[0];
    assert!(leader.args.as_ref().unwrap().join(" ").ends_with(
        "--dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-decode-ldr-0.$(GROVE_HEADLESS_SERVICE):29500 --nnodes 2 --node-rank 0"
    ));
    assert!(leader.readiness_probe.is_some());
    let worker = &wkr.spec.pod_spec.containers[0];
    assert_eq!(
        worker.command.as_deref(),
        Some(&["sh".to_string(), "-c".to_string()][..])
    );
    assert!(
        worker.args.as_ref().unwrap()[0]
            .starts_with("exec python3 -m dynamo.sglang --dist-init-addr")
    );
    assert!(
        worker.args.as_ref().unwrap()[0].ends_with("--node-rank $((GROVE_PCLQ_POD_INDEX + 1))")
    );
    assert!(worker.readiness_probe.is_none() && worker.liveness_probe.is_none());
}

#[test]
fn checkpoint_gating_holds_replicas_at_zero() {
    let fixture = Fixture {
        waiting: BTreeSet::from(["prefill".to_string()]),
        ..Default::default()
    };
    let pcs = fixture.render(&graph(), None).unwrap();
    assert_eq!(clique(&pcs, "prefill").spec.replicas, 0);
    assert_eq!(clique(&pcs, "frontend").spec.replicas, 1);
}

/// The checkpoint of a component reaches its clique on the Grove pathway as on the component
/// pathway (one renderer): a Ready `WaitForCheckpoint` checkpoint restore-shapes the clique's
/// pod and labels it a restore target; an `Immediate` one names itself on the clique.
#[test]
fn checkpoint_restore_reaches_the_clique() {
    use api::v1beta1::CheckpointStartupPolicy;
    use grove_render::Checkpoint;
    use pod_render::restore::{Restore, Storage};
    let restoring = Checkpoint {
        name: Some("ckpt".into()),
        startup_policy: CheckpointStartupPolicy::WaitForCheckpoint,
        targets: vec!["main".into()],
        restore: Some(Restore {
            checkpoint_id: "abc".into(),
            artifact_version: "1".into(),
            storage: Storage {
                pvc_name: "snapshot-pvc".into(),
                base_path: "/checkpoints".into(),
            },
        }),
    };
    let candidate = Checkpoint {
        startup_policy: CheckpointStartupPolicy::Immediate,
        restore: None,
        ..restoring.clone()
    };
    let fixture = Fixture {
        checkpoints: BTreeMap::from([
            ("prefill".to_string(), restoring),
            ("Frontend".to_string(), candidate),
        ]),
        ..Default::default()
    };
    let pcs = fixture.render(&graph(), None).unwrap();
    let prefill = clique(&pcs, "prefill");
    assert_eq!(
        prefill.labels["nvidia.com/snapshot-is-restore-target"],
        "true"
    );
    assert_eq!(prefill.labels["nvidia.com/snapshot-checkpoint-id"], "abc");
    assert_eq!(
        prefill.annotations["nvidia.com/snapshot-target-containers"],
        "main"
    );
    let main = &prefill.spec.pod_spec.containers[0];
    assert_eq!(
        main.command,
        Some(vec!["sleep".to_string(), "infinity".to_string()])
    );
    assert!(main.args.is_none());
    let frontend = clique(&pcs, "frontend");
    assert_eq!(
        frontend.annotations["nvidia.com/dynamo-checkpoint-restore-candidate"],
        "true"
    );
    assert!(
        !frontend
            .labels
            .contains_key("nvidia.com/snapshot-is-restore-target")
    );
    assert_ne!(
        frontend.spec.pod_spec.containers[0].command,
        Some(vec!["sleep".to_string(), "infinity".to_string()])
    );
}

#[test]
fn update_strategy_annotation() {
    let mut dgd = graph();
    dgd.metadata.annotations = Some(BTreeMap::from([(
        grove_render::GROVE_UPDATE_STRATEGY.to_string(),
        "OnDelete".to_string(),
    )]));
    let pcs = fresh(&dgd);
    assert_eq!(
        pcs.spec.update_strategy.unwrap().r#type,
        Some(api::grove::UpdateStrategyType::OnDelete)
    );
    dgd.metadata.annotations = Some(BTreeMap::from([(
        grove_render::GROVE_UPDATE_STRATEGY.to_string(),
        "Sometimes".to_string(),
    )]));
    assert!(matches!(
        Fixture::default().render(&dgd, None),
        Err(RenderError::Annotation { .. })
    ));
    assert_eq!(rendered().spec.update_strategy, None);
}

#[test]
fn provider_override_replaces_the_topology_constraint() {
    let mut dgd = graph();
    dgd.spec.provider_override = Some(api::v1beta1::ProviderOverride {
        api_version: "grove.io/v1alpha1".into(),
        target: Some("PodCliqueSet".into()),
        value: serde_json::json!({"spec": {"template": {"topologyConstraint": {
            "topologyName": "ct", "pack": {"preferred": "zone"}}}}}),
    });
    dgd.spec.components[2].provider_override = Some(api::v1beta1::ProviderOverride {
        api_version: "grove.io/v1alpha1".into(),
        target: Some("PodCliqueTemplateSpec".into()),
        value: serde_json::json!({"topologyConstraint": {"pack": {"required": "rack"}}}),
    });
    let pcs = fresh(&dgd);
    assert_eq!(
        pcs.spec
            .template
            .topology_constraint
            .as_ref()
            .unwrap()
            .pack
            .as_ref()
            .unwrap()
            .preferred
            .as_deref(),
        Some("zone")
    );
    assert_eq!(
        clique(&pcs, "prefill")
            .topology_constraint
            .as_ref()
            .unwrap()
            .pack
            .as_ref()
            .unwrap()
            .required
            .as_deref(),
        Some("rack")
    );
    assert!(grove_render::has_topology_overrides(&dgd));
    assert!(!grove_render::has_topology_overrides(&graph()));
    // A malformed fragment is a render error, not a panic.
    dgd.spec.components[2]
        .provider_override
        .as_mut()
        .unwrap()
        .value = serde_json::json!({"topologyConstraint": {"pack": 7}});
    assert!(matches!(
        Fixture::default().render(&dgd, None),
        Err(RenderError::ProviderOverride { .. })
    ));
}

#[test]
fn unsupported_and_unrenderable_inputs_are_errors() {
    let mut dgd = graph();
    dgd.metadata.uid = None;
    assert_eq!(
        Fixture::default().render(&dgd, None),
        Err(RenderError::NoUid)
    );
    let mut dgd = graph();
    dgd.spec.backend_framework = Some(api::BackendFramework::Vllm);
    assert!(matches!(
        Fixture::default().render(&dgd, None),
        Err(RenderError::Backend { .. })
    ));
    let mut dgd = graph();
    dgd.spec.components[0].experimental = Some(api::v1beta1::ExperimentalSpec {
        gpu_memory_service: Some(api::v1beta1::GpuMemoryServiceSpec {
            mode: Some(api::v1beta1::GpuMemoryServiceMode::InterPod),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(matches!(
        Fixture::default().render(&dgd, None),
        Err(RenderError::Unsupported(_))
    ));
}

#[test]
fn image_pull_secrets_and_kv_transfer_wiring() {
    let fixture = Fixture {
        pull_secrets: [("nvcr.io".to_string(), vec!["ngc".to_string()])]
            .into_iter()
            .collect(),
        domains: vec!["zone".into(), "rack".into()],
        ..Default::default()
    };
    let mut dgd = graph();
    dgd.spec.experimental = Some(api::v1beta1::DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: Some(api::v1beta1::KvTransferPolicy {
            cluster_topology_name: Some("ct".into()),
            label_key: None,
            domain: "rack".into(),
            enforcement: None,
            preferred_weight: None,
        }),
        component_groups: vec![],
    });
    let pcs = fixture.render(&dgd, None).unwrap();
    let prefill = clique(&pcs, "prefill");
    let spec = &prefill.spec.pod_spec;
    assert_eq!(spec.image_pull_secrets.as_ref().unwrap()[0].name, "ngc");
    assert_eq!(
        main_env(prefill, "DYN_KV_TRANSFER_DOMAIN").as_deref(),
        Some("rack")
    );
    assert_eq!(
        main_env(prefill, "DYN_KV_TRANSFER_ENFORCEMENT").as_deref(),
        Some("required")
    );
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "topology-labels")
        .unwrap();
    let items = volume
        .downward_api
        .as_ref()
        .unwrap()
        .items
        .as_ref()
        .unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[1].field_ref.as_ref().unwrap().field_path,
        "metadata.labels['nvidia.com/dynamo-topology.rack']"
    );
    assert_eq!(
        prefill.annotations[api::labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME],
        "ct"
    );
    // Not on the frontend.
    assert_eq!(
        main_env(clique(&pcs, "frontend"), "DYN_KV_TRANSFER_DOMAIN"),
        None
    );
    // Discovery is turned off by the pods' annotations: graph-wide through `spec.annotations`
    // (they are under every pod template's); the graph's own metadata annotation is not
    // propagated to the pods, so it does not.
    let off = BTreeMap::from([(
        grove_render::pod::DISABLE_IMAGE_PULL_SECRET_DISCOVERY.to_string(),
        "true".to_string(),
    )]);
    dgd.metadata.annotations = Some(off.clone());
    let pcs = fixture.render(&dgd, None).unwrap();
    assert_eq!(
        clique(&pcs, "prefill")
            .spec
            .pod_spec
            .image_pull_secrets
            .as_ref()
            .unwrap()[0]
            .name,
        "ngc"
    );
    dgd.spec.annotations = off;
    let pcs = fixture.render(&dgd, None).unwrap();
    assert_eq!(
        clique(&pcs, "prefill").spec.pod_spec.image_pull_secrets,
        None
    );
}

#[test]
fn services_follow_the_rendered_cliques() {
    // The legacy worker rule reaches the Service selector.
    let mut existing = rendered();
    clique_mut(&mut existing, "prefill")
        .labels
        .insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
    let dgd = graph();
    let pcs = Fixture::default().render(&dgd, Some(&existing)).unwrap();
    let services = grove_render::services::services(&dgd, &pcs);
    let names: Vec<String> = services
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["g-frontend", "g-decode", "g-prefill"]);
    let prefill = services[2].spec.as_ref().unwrap();
    assert_eq!(
        prefill.selector.as_ref().unwrap()[labels::DYNAMO_COMPONENT_TYPE],
        "worker"
    );
    assert_eq!(prefill.ports.as_ref().unwrap()[0].port, 9090);
    // Service labels as upstream's: the graph's and the pod template's labels (the legacy rule
    // adds the sub-component type there), the discovery labels, and ours (graph, component); no
    // component-type, component-class or Dynamo namespace label.
    for (service, sub) in [(&services[1], None), (&services[2], Some("prefill"))] {
        let l = service.metadata.labels.as_ref().unwrap();
        let at = service.metadata.name.clone().unwrap();
        assert_eq!(
            l.get(labels::DYNAMO_SUB_COMPONENT_TYPE).map(String::as_str),
            sub,
            "{at}"
        );
        for key in [
            labels::DYNAMO_COMPONENT_TYPE,
            labels::DYNAMO_COMPONENT_CLASS,
            labels::DYNAMO_NAMESPACE,
            labels::DYNAMO_WORKER_HASH,
        ] {
            assert!(!l.contains_key(key), "{at}: {key}");
        }
        assert_eq!(l[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g", "{at}");
        assert_eq!(l["nvidia.com/dynamo-discovery-enabled"], "true", "{at}");
    }
    assert_eq!(
        services[1].metadata.labels.as_ref().unwrap()[labels::DYNAMO_COMPONENT],
        "decode"
    );
    let mut labelled = graph();
    labelled.spec.labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
    with_epp(&mut labelled);
    labelled.spec.components[2]
        .pod_template
        .as_mut()
        .unwrap()
        .metadata = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        labels: Some(BTreeMap::from([("tier".to_string(), "gpu".to_string())])),
        ..Default::default()
    });
    let pcs = fresh(&labelled);
    let services = grove_render::services::services(&labelled, &pcs);
    let prefill = services[2].metadata.labels.as_ref().unwrap();
    assert_eq!(prefill["team"], "a");
    assert_eq!(prefill["tier"], "gpu");
    assert!(!prefill.contains_key(labels::DYNAMO_COMPONENT_CLASS));
    assert!(!prefill.contains_key(labels::DYNAMO_SUB_COMPONENT_TYPE));
    // Without Kubernetes discovery only the frontend has one.
    let mut etcd = graph();
    etcd.metadata.annotations = Some(BTreeMap::from([(
        labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
        "etcd".to_string(),
    )]));
    let pcs = fresh(&etcd);
    let services = grove_render::services::services(&etcd, &pcs);
    assert_eq!(services.len(), 1);
    assert_eq!(
        services[0].spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
        8000
    );
}

/// A component with `modelRef` gets the base model's hash label and name annotation on its
/// cliques (both cliques of a multinode component); others get neither, nor does an empty name.
#[test]
fn base_model_label_and_annotation() {
    /// (component, its model name, (clique, expected hash label) pairs)
    type Row = (
        &'static str,
        Option<&'static str>,
        &'static [(&'static str, Option<&'static str>)],
    );
    let rows: [Row; 3] = [
        (
            "decode",
            Some("Qwen/Qwen3-0.6B"),
            &[
                ("decode-ldr", Some("fb68f5a6")),
                ("decode-wkr", Some("fb68f5a6")),
                ("prefill", None),
                ("frontend", None),
            ],
        ),
        (
            "prefill",
            Some("llama-3-70b-instruct-v1"),
            &[("prefill", Some("c21c2fb2"))],
        ),
        ("prefill", Some(""), &[("prefill", None)]),
    ];
    for (component, model, want) in rows {
        let mut dgd = graph();
        let c = dgd
            .spec
            .components
            .iter_mut()
            .find(|c| c.name == component)
            .unwrap();
        c.model_ref = model.map(|name| api::common::ModelReference {
            name: name.into(),
            revision: None,
        });
        let pcs = fresh(&dgd);
        for (clique_name, hash) in want {
            let at = format!("{component} {model:?}: {clique_name}");
            let c = clique(&pcs, clique_name);
            let label = c
                .labels
                .get(labels::DYNAMO_BASE_MODEL_HASH)
                .map(String::as_str);
            assert_eq!(label, *hash, "{at}");
            let annotation = c
                .annotations
                .get(labels::DYNAMO_BASE_MODEL)
                .map(String::as_str);
            let expected = if clique_name.starts_with(component) {
                model
            } else {
                None
            };
            assert_eq!(annotation, expected.filter(|_| hash.is_some()), "{at}");
        }
    }
}

/// Intra-pod GMS and failover on the Grove pathway: the clique pods are the component's pod
/// (claim, `gms-server`, engines), and the multinode wiring reaches both engines (vLLM
/// workers lose their probes on `engine-0` and `engine-1`).
#[test]
fn gms_and_failover_reach_every_engine_of_a_clique() {
    use api::v1beta1::{ExperimentalSpec, FailoverSpec, GpuMemoryServiceSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut dgd = graph();
    let decode = &mut dgd.spec.components[1];
    let main = &mut decode
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    main.command = Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()]);
    main.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some([("nvidia.com/gpu".to_string(), Quantity("4".into()))].into()),
        ..Default::default()
    });
    decode.experimental = Some(ExperimentalSpec {
        gpu_memory_service: Some(GpuMemoryServiceSpec::default()),
        failover: Some(FailoverSpec::default()),
        ..Default::default()
    });
    let pcs = fresh(&dgd);
    for name in ["decode-ldr", "decode-wkr"] {
        let spec = &clique(&pcs, name).spec.pod_spec;
        let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["engine-0", "engine-1"], "{name}");
        assert_eq!(
            spec.resource_claims.as_ref().unwrap()[0]
                .resource_claim_template_name
                .as_deref(),
            Some("g-decode-gpu")
        );
        assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "gms-server");
        for engine in &spec.containers {
            let nnodes = engine.env.iter().flatten().find(|e| e.name == "NNODES");
            assert_eq!(nnodes.and_then(|e| e.value.as_deref()), Some("2"));
            let probed = engine.readiness_probe.is_some();
            assert_eq!(probed, name == "decode-ldr", "{name} {}", engine.name);
        }
    }
}

/// Clique pods nothing names a ServiceAccount for keep none, as upstream's Grove pathway (the
/// kubelet runs them as `default`; writing `default` would change the PodCliqueSet of a graph
/// adopted from upstream and roll its pods). Named accounts stay: Kubernetes discovery's, the
/// planner's, the user's.
#[test]
fn unnamed_service_account_stays_unnamed() {
    let mut etcd = graph();
    etcd.metadata.annotations = Some(BTreeMap::from([(
        labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
        "etcd".to_string(),
    )]));
    let pcs = fresh(&etcd);
    for name in ["frontend", "prefill", "decode-ldr", "decode-wkr"] {
        assert_eq!(
            clique(&pcs, name).spec.pod_spec.service_account_name,
            None,
            "{name}"
        );
    }
    let pcs = fresh(&graph());
    assert_eq!(
        clique(&pcs, "frontend")
            .spec
            .pod_spec
            .service_account_name
            .as_deref(),
        Some("g-k8s-service-discovery")
    );
}

/// The graph's `annotations`, `labels`, `priorityClassName` and a topology without a pack
/// domain, a component's `minAvailable`, `globalDynamoNamespace`, `topologyConstraint` and
/// `experimental.grove.forceScalingGroup`, and a role's `providerOverride` reach the
/// PodCliqueSet.
#[test]
fn graph_metadata_and_grove_options_reach_the_pod_clique_set() {
    use api::v1beta1::{ComponentRoleSpec, ExperimentalSpec, GroveSpec, ProviderOverride};
    let mut dgd = graph();
    dgd.spec.annotations = BTreeMap::from([("example.com/owner".into(), "team-a".into())]);
    dgd.spec.labels = BTreeMap::from([("team".into(), "a".into())]);
    dgd.spec.priority_class_name = Some("high".into());
    let prefill = &mut dgd.spec.components[2];
    prefill.replicas = Some(3);
    prefill.min_available = Some(2);
    prefill.global_dynamo_namespace = true;
    prefill.topology_constraint = Some(ComponentTc {
        pack_domain: "rack".into(),
    });
    // The topology without a graph-wide pack domain: components name it themselves.
    dgd.spec.topology_constraint = Some(SpecTopologyConstraint {
        cluster_topology_name: "ct".into(),
        pack_domain: None,
    });
    dgd.spec.components[0].experimental = Some(ExperimentalSpec {
        grove: Some(GroveSpec {
            force_scaling_group: Some(true),
        }),
        ..Default::default()
    });
    dgd.spec.components[1].roles = ["leader", "worker"]
        .map(|name| ComponentRoleSpec {
            name: name.into(),
            provider_override: (name == "leader").then(|| ProviderOverride {
                api_version: "grove.io/v1alpha1".into(),
                target: Some("PodCliqueTemplateSpec".into()),
                value: serde_json::json!({"topologyConstraint": {"pack": {"required": "host"}}}),
            }),
            ..Default::default()
        })
        .to_vec();
    let pcs = fresh(&dgd);

    let meta = &pcs.metadata;
    assert_eq!(
        meta.annotations.as_ref().unwrap()["example.com/owner"],
        "team-a"
    );
    assert_eq!(meta.labels.as_ref().unwrap()["team"], "a");
    let frontend = clique(&pcs, "frontend");
    assert_eq!(frontend.annotations["example.com/owner"], "team-a");
    assert_eq!(frontend.labels["team"], "a");
    assert_eq!(
        pcs.spec.template.priority_class_name.as_deref(),
        Some("high")
    );

    let prefill = clique(&pcs, "prefill");
    assert_eq!(
        (prefill.spec.replicas, prefill.spec.min_available),
        (3, Some(2))
    );
    assert_eq!(
        prefill.labels[labels::DYNAMO_NAMESPACE],
        labels::GLOBAL_DYNAMO_NAMESPACE
    );
    assert_eq!(frontend.labels[labels::DYNAMO_NAMESPACE], "ns-g");
    assert_eq!(pcs.spec.template.topology_constraint, None);
    assert_eq!(
        prefill.topology_constraint,
        Some(TopologyConstraint {
            topology_name: Some("ct".into()),
            pack: Some(TopologyPack {
                required: Some("rack".into()),
                preferred: None
            }),
            pack_domain: None,
        })
    );

    // Forced: a scaling group of one single-pod clique.
    let g = group(&pcs, "frontend");
    assert_eq!(g.clique_names, ["frontend"]);
    assert_eq!(frontend.spec.replicas, 1);
    assert!(
        rendered()
            .spec
            .template
            .pod_clique_scaling_groups
            .iter()
            .all(|g| g.name != "frontend")
    );

    let leader = clique(&pcs, "decode-ldr")
        .topology_constraint
        .as_ref()
        .unwrap();
    assert_eq!(
        leader.pack.as_ref().unwrap().required.as_deref(),
        Some("host")
    );
    assert_eq!(clique(&pcs, "decode-wkr").topology_constraint, None);
}

/// Upstream's `GenerateGrovePodCliqueSet` multinode cases (`graph_test.go`: the SGLang graph
/// whose worker runs `/bin/sh -c "python3 -m dynamo.sglang --custom-flag custom-value"` and the
/// vLLM graph whose worker runs `python3 -m dynamo.vllm` with TP 4 on 2 GPUs, 3 nodes each;
/// 4 clique rows): the leader and worker cliques' engine command lines.
#[test]
fn multinode_cliques_carry_the_launch_wiring() {
    let gpus = |c: &mut api::DynamoComponentDeploymentSharedSpec| {
        let main = &mut c
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0];
        main.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "nvidia.com/gpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            )])),
            ..Default::default()
        });
    };
    let leader_addr =
        "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-worker-ldr-0.$(GROVE_HEADLESS_SERVICE)";
    type Row = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        [(&'static str, Vec<String>, Vec<String>); 2],
    );
    let sh_c = vec!["/bin/sh".to_string(), "-c".into()];
    let rows: [Row; 2] = [
        (
            "test_generate_grove_pod_gang_set_multinode sglang",
            &["/bin/sh", "-c"],
            &["python3 -m dynamo.sglang --custom-flag custom-value"],
            [
                (
                    "worker-ldr",
                    sh_c.clone(),
                    vec![format!("python3 -m dynamo.sglang --dist-init-addr {leader_addr}:29500 --nnodes 3 --node-rank 0 --custom-flag custom-value")],
                ),
                (
                    "worker-wkr",
                    sh_c.clone(),
                    vec![format!("python3 -m dynamo.sglang --dist-init-addr {leader_addr}:29500 --nnodes 3 --node-rank $((GROVE_PCLQ_POD_INDEX + 1)) --custom-flag custom-value")],
                ),
            ],
        ),
        (
            "test_generate_grove_pod_gang_set_multinode vllm",
            &["python3", "-m", "dynamo.vllm"],
            &["--custom-flag", "custom-value", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "1"],
            [
                (
                    "worker-ldr",
                    sh_c.clone(),
                    vec!["ray start --head --port=6379 && python3 -m dynamo.vllm --custom-flag custom-value --tensor-parallel-size 4 --pipeline-parallel-size 1 --distributed-executor-backend ray".to_string()],
                ),
                (
                    "worker-wkr",
                    sh_c.clone(),
                    vec![format!("ray start --address={leader_addr}:6379 --block")],
                ),
            ],
        ),
    ];
    for (name, command, args, cliques) in rows {
        let mut dgd = graph();
        let mut worker = component("worker", ComponentType::Worker, command);
        worker.multinode = Some(api::common::MultinodeSpec { node_count: 3 });
        worker.replicas = Some(5);
        let main = &mut worker
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0];
        main.args = Some(args.iter().map(|s| s.to_string()).collect());
        gpus(&mut worker);
        dgd.spec.components = vec![worker];
        let pcs = fresh(&dgd);
        assert_eq!(
            group(&pcs, "worker").clique_names,
            ["worker-ldr", "worker-wkr"],
            "{name}"
        );
        assert_eq!(group(&pcs, "worker").replicas, Some(5), "{name}");
        for (clique_name, command, args) in cliques {
            let c = clique(&pcs, clique_name);
            let main = &c.spec.pod_spec.containers[0];
            assert_eq!(
                main.command.as_ref(),
                Some(&command),
                "{name}: {clique_name}"
            );
            assert_eq!(main.args.as_ref(), Some(&args), "{name}: {clique_name}");
            let worker = clique_name.ends_with("wkr");
            assert_eq!(
                main.readiness_probe.is_none(),
                worker,
                "{name}: {clique_name}"
            );
        }
    }
}

/// Component group `Runtime` of the frontend and the prefill worker, `replicas` 3.
fn with_group(dgd: &mut api::DynamoGraphDeployment) {
    dgd.spec.experimental = Some(api::v1beta1::DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: None,
        component_groups: vec![api::v1beta1::ComponentGroupSpec {
            name: "Runtime".into(),
            replicas: 3,
            scaling_adapter: None,
            components: ["prefill", "Frontend"]
                .map(|name| api::common::ComponentGroupComponentSpec { name: name.into() })
                .to_vec(),
        }],
    });
}

/// `spec.experimental.componentGroups` (upstream's `GenerateGrovePodCliqueSet` with
/// `groveScalingGroupForComponentGroup` and `applyComponentGroupLabel`): one scaling group per
/// component group, after the components' own, named after the group (lowercased), holding its
/// members' cliques sorted by name, with the group's replicas and `minAvailable: 1`; members
/// render no scaling group of their own and their cliques carry the group label.
#[test]
fn component_groups_render_one_scaling_group() {
    type Row = (
        &'static str,
        fn(&mut api::DynamoGraphDeployment, &mut Fixture) -> Option<PodCliqueSet>,
        fn(&PodCliqueSet),
    );
    let rows: Vec<Row> = vec![
        (
            "no componentGroups: no group scaling group, no group label",
            |_, _| None,
            |pcs| {
                let names: Vec<&str> = pcs
                    .spec
                    .template
                    .pod_clique_scaling_groups
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect();
                assert_eq!(names, ["decode"]);
                assert!(
                    pcs.spec
                        .template
                        .cliques
                        .iter()
                        .all(|c| !c.labels.contains_key(labels::DYNAMO_COMPONENT_GROUP))
                );
            },
        ),
        (
            "frontend and prefill scale together in group Runtime",
            |dgd, _| {
                with_group(dgd);
                dgd.spec.components[2].replicas = Some(2);
                dgd.spec.components[2].min_available = Some(2);
                dgd.spec.topology_constraint = Some(SpecTopologyConstraint {
                    cluster_topology_name: "ct".into(),
                    pack_domain: Some("zone".into()),
                });
                None
            },
            |pcs| {
                let names: Vec<&str> = pcs
                    .spec
                    .template
                    .pod_clique_scaling_groups
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect();
                assert_eq!(names, ["decode", "runtime"]);
                let g = group(pcs, "runtime");
                assert_eq!(g.clique_names, ["frontend", "prefill"]);
                assert_eq!(g.replicas, Some(3));
                assert_eq!(g.min_available, Some(1));
                assert_eq!(g.topology_constraint, None);
                assert!(g.annotations.is_empty());
                // A member's clique keeps its own pod count and minAvailable per group replica.
                let prefill = clique(pcs, "prefill");
                assert_eq!(prefill.spec.replicas, 2);
                assert_eq!(prefill.spec.min_available, Some(2));
                for c in ["frontend", "prefill"] {
                    assert_eq!(
                        clique(pcs, c).labels[labels::DYNAMO_COMPONENT_GROUP],
                        "Runtime",
                        "{c}"
                    );
                }
                assert!(
                    !clique(pcs, "decode-ldr")
                        .labels
                        .contains_key(labels::DYNAMO_COMPONENT_GROUP)
                );
            },
        ),
        (
            "a forced scaling-group member: single-pod clique, no scaling group of its own",
            |dgd, _| {
                with_group(dgd);
                dgd.spec.components[2].replicas = Some(4);
                dgd.spec.components[2].experimental = Some(api::v1beta1::ExperimentalSpec {
                    grove: Some(api::v1beta1::GroveSpec {
                        force_scaling_group: Some(true),
                    }),
                    ..Default::default()
                });
                None
            },
            |pcs| {
                assert_eq!(pcs.spec.template.pod_clique_scaling_groups.len(), 2);
                let prefill = clique(pcs, "prefill");
                assert_eq!(prefill.spec.replicas, 1);
                assert_eq!(prefill.spec.min_available, Some(1));
                assert_eq!(group(pcs, "runtime").clique_names, ["frontend", "prefill"]);
            },
        ),
        (
            "the group label is the operator's: a pod template label of that key loses",
            |dgd, _| {
                with_group(dgd);
                let meta = dgd.spec.components[0]
                    .pod_template
                    .as_mut()
                    .unwrap()
                    .metadata
                    .get_or_insert_with(Default::default);
                meta.labels = Some(BTreeMap::from([(
                    labels::DYNAMO_COMPONENT_GROUP.to_string(),
                    "mine".to_string(),
                )]));
                None
            },
            |pcs| {
                assert_eq!(
                    clique(pcs, "frontend").labels[labels::DYNAMO_COMPONENT_GROUP],
                    "Runtime"
                );
            },
        ),
        (
            "after creation the group's replicas change through /scale: the existing count is kept",
            |dgd, _| {
                with_group(dgd);
                let mut existing = fresh(dgd);
                existing
                    .spec
                    .template
                    .pod_clique_scaling_groups
                    .iter_mut()
                    .find(|g| g.name == "runtime")
                    .unwrap()
                    .replicas = Some(5);
                Some(existing)
            },
            |pcs| assert_eq!(group(pcs, "runtime").replicas, Some(5)),
        ),
    ];
    for (name, setup, check) in rows {
        let mut dgd = graph();
        let mut fixture = Fixture::default();
        let existing = setup(&mut dgd, &mut fixture);
        let pcs = fixture
            .render(&dgd, existing.as_ref())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            pcs,
            fixture.render(&dgd, existing.as_ref()).unwrap(),
            "{name}"
        );
        check(&pcs);
    }
}
