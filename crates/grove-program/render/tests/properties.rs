//! Property tests of the renderer over random graphs: it never panics, is deterministic, does
//! not change its inputs, and keeps the existing order of cliques and scaling groups.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use api::common::MultinodeSpec;
use api::grove::PodCliqueSet;
use api::v1beta1::{
    ComponentType, ExperimentalSpec, GroveSpec, SpecTopologyConstraint,
    TopologyConstraint as ComponentTc,
};
use api::{BackendFramework, DynamoGraphDeployment};
use common::{Fixture, component, graph};
use grove_render::{RestartStamps, Workers};
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;

const TYPES: [ComponentType; 6] = [
    ComponentType::Frontend,
    ComponentType::Worker,
    ComponentType::Prefill,
    ComponentType::Decode,
    ComponentType::Planner,
    ComponentType::Epp,
];

#[derive(Clone, Debug)]
struct ComponentSeed {
    type_: usize,
    backend: usize,
    replicas: Option<i32>,
    nodes: Option<i32>,
    forced: bool,
    min_available: Option<i32>,
    pack: Option<String>,
    shm: Option<String>,
    env: Vec<(String, String)>,
}

fn component_seed() -> impl Strategy<Value = ComponentSeed> {
    (
        0..TYPES.len(),
        0..4usize,
        proptest::option::of(-1..6i32),
        proptest::option::of(0..5i32),
        any::<bool>(),
        proptest::option::of(0..4i32),
        proptest::option::of("[a-z]{1,6}"),
        proptest::option::of(prop_oneof![
            Just("0".to_string()),
            Just("16Gi".to_string()),
            "[0-9a-z]{0,4}"
        ]),
        proptest::collection::vec(("[A-Z_]{1,6}", "[ -~]{0,8}"), 0..3),
    )
        .prop_map(
            |(type_, backend, replicas, nodes, forced, min_available, pack, shm, env)| {
                ComponentSeed {
                    type_,
                    backend,
                    replicas,
                    nodes,
                    forced,
                    min_available,
                    pack,
                    shm,
                    env,
                }
            },
        )
}

#[derive(Clone, Debug)]
struct GraphSeed {
    name: String,
    components: Vec<(String, ComponentSeed)>,
    backend: Option<usize>,
    topology: Option<(String, Option<String>)>,
    restart: Option<(String, Vec<usize>)>,
    waiting: Vec<usize>,
    changed: bool,
    labels: Vec<(String, String)>,
}

fn graph_seed() -> impl Strategy<Value = GraphSeed> {
    (
        "[a-z][a-z0-9-]{0,50}",
        proptest::collection::btree_map("[A-Za-z][A-Za-z0-9]{0,20}", component_seed(), 1..6),
        proptest::option::of(0..3usize),
        proptest::option::of(("[a-z]{1,5}", proptest::option::of("[a-z]{1,5}"))),
        proptest::option::of(("[a-z0-9]{1,6}", proptest::collection::vec(0..6usize, 0..4))),
        proptest::collection::vec(0..6usize, 0..3),
        any::<bool>(),
        proptest::collection::vec(("[a-z]{1,5}", "[a-z]{0,5}"), 0..3),
    )
        .prop_map(
            |(name, components, backend, topology, restart, waiting, changed, labels)| {
                // Names unique case-insensitively, as admission guarantees.
                let mut seen = BTreeSet::new();
                let components = components
                    .into_iter()
                    .filter(|(n, _)| seen.insert(n.to_lowercase()))
                    .collect();
                GraphSeed {
                    name,
                    components,
                    backend,
                    topology,
                    restart,
                    waiting,
                    changed,
                    labels,
                }
            },
        )
}

fn build(seed: &GraphSeed) -> (DynamoGraphDeployment, Fixture) {
    let mut dgd = graph();
    dgd.metadata.name = Some(seed.name.clone());
    dgd.spec.components.clear();
    dgd.spec.backend_framework = seed.backend.map(|b| {
        [
            BackendFramework::Sglang,
            BackendFramework::Vllm,
            BackendFramework::Trtllm,
        ][b]
    });
    dgd.spec.labels = seed.labels.iter().cloned().collect();
    dgd.spec.topology_constraint =
        seed.topology
            .as_ref()
            .map(|(ct, pack)| SpecTopologyConstraint {
                cluster_topology_name: ct.clone(),
                pack_domain: pack.clone(),
            });
    for (name, c) in &seed.components {
        let command: &[&str] = match c.backend {
            0 => &[],
            1 => &["python3", "-m", "dynamo.sglang"],
            2 => &["python3", "-m", "dynamo.vllm"],
            _ => &["sh", "-c", "python3 -m dynamo.trtllm"],
        };
        let mut spec = component(name, TYPES[c.type_], command);
        spec.replicas = c.replicas;
        spec.multinode = c.nodes.map(|node_count| MultinodeSpec { node_count });
        spec.min_available = c.min_available;
        if c.forced {
            spec.experimental = Some(ExperimentalSpec {
                grove: Some(GroveSpec {
                    force_scaling_group: Some(true),
                }),
                ..Default::default()
            });
        }
        spec.topology_constraint = c
            .pack
            .clone()
            .map(|pack_domain| ComponentTc { pack_domain });
        spec.shared_memory_size = c.shm.clone().map(Quantity);
        if let Some(main) = spec
            .pod_template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .map(|s| &mut s.containers[0])
        {
            main.env = Some(
                c.env
                    .iter()
                    .map(|(n, v)| EnvVar {
                        name: n.clone(),
                        value: Some(v.clone()),
                        value_from: None,
                    })
                    .collect(),
            );
        }
        dgd.spec.components.push(spec);
    }
    let names: Vec<String> = seed.components.iter().map(|(n, _)| n.clone()).collect();
    let pick = |i: &usize| names.get(*i % names.len().max(1)).cloned();
    let fixture = Fixture {
        workers: Workers {
            hash: "0badf00d".into(),
            changed: seed.changed,
        },
        restart: seed.restart.as_ref().map(|(value, who)| RestartStamps {
            value: value.clone(),
            components: who.iter().filter_map(pick).collect(),
        }),
        waiting: seed.waiting.iter().filter_map(pick).collect(),
        checkpoints: BTreeMap::new(),
        domains: Vec::new(),
        pull_secrets: Default::default(),
        settings: Default::default(),
    };
    (dgd, fixture)
}

/// The relative order of `names` as they appear in `list`.
fn order_of<'a>(list: &'a [String], among: &BTreeSet<&str>) -> Vec<&'a str> {
    list.iter()
        .map(String::as_str)
        .filter(|n| among.contains(n))
        .collect()
}

fn clique_names(pcs: &PodCliqueSet) -> Vec<String> {
    pcs.spec
        .template
        .cliques
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

fn group_names(pcs: &PodCliqueSet) -> Vec<String> {
    pcs.spec
        .template
        .pod_clique_scaling_groups
        .iter()
        .map(|g| g.name.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, .. ProptestConfig::default() })]

    #[test]
    fn render_is_total_deterministic_and_pure(seed in graph_seed()) {
        let (dgd, fixture) = build(&seed);
        let before = dgd.clone();
        let first = fixture.render(&dgd, None);
        let second = fixture.render(&dgd, None);
        prop_assert_eq!(&dgd, &before);
        prop_assert_eq!(&first, &second);
        if let Ok(pcs) = &first {
            // Every component is rendered: one clique per role.
            prop_assert!(pcs.spec.template.cliques.len() >= dgd.spec.components.len());
            let again = fixture.render(&dgd, Some(pcs));
            prop_assert_eq!(again.as_ref().ok(), Some(pcs), "re-rendering over itself is a fixed point");
        }
    }

    #[test]
    fn the_existing_order_is_preserved(seed in graph_seed(), other in graph_seed(), shuffle in any::<u64>()) {
        let (dgd, fixture) = build(&seed);
        // An existing object: another graph's rendering under this graph's name, merged with
        // this graph's cliques, in a shuffled order.
        let Ok(mut existing) = fixture.render(&dgd, None) else { return Ok(()); };
        let (other_dgd, _) = build(&other);
        if let Ok(other_pcs) = fixture.render(&other_dgd, None) {
            let t = &mut existing.spec.template;
            for c in other_pcs.spec.template.cliques {
                if t.cliques.iter().all(|e| e.name != c.name) {
                    t.cliques.push(c);
                }
            }
            for g in other_pcs.spec.template.pod_clique_scaling_groups {
                if t.pod_clique_scaling_groups.iter().all(|e| e.name != g.name) {
                    t.pod_clique_scaling_groups.push(g);
                }
            }
        }
        let mut state = shuffle | 1;
        let mut next = || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
        let len = existing.spec.template.cliques.len();
        for i in (1..len).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            existing.spec.template.cliques.swap(i, j);
        }
        existing.spec.template.pod_clique_scaling_groups.reverse();
        let before = existing.clone();
        let rendered = fixture.render(&dgd, Some(&existing));
        prop_assert_eq!(&existing, &before);
        let rendered = rendered.expect("renders over an existing object");
        for (old, new) in [
            (clique_names(&existing), clique_names(&rendered)),
            (group_names(&existing), group_names(&rendered)),
        ] {
            let common: BTreeSet<&str> = new.iter().map(String::as_str).filter(|n| old.iter().any(|o| o == n)).collect();
            prop_assert_eq!(order_of(&old, &common), order_of(&new, &common));
            // The common entries come first.
            let k = common.len();
            prop_assert!(new.iter().take(k).all(|n| common.contains(n.as_str())));
        }
        prop_assert_eq!(&rendered, &fixture.render(&dgd, Some(&existing)).unwrap());
    }
}

#[test]
fn most_random_graphs_render() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = graph_seed();
    let total = 200;
    let ok = (0..total)
        .filter(|_| {
            let seed = strategy.new_tree(&mut runner).unwrap().current();
            let (dgd, fixture) = build(&seed);
            fixture.render(&dgd, None).is_ok()
        })
        .count();
    // Mismatched explicit backends are errors by design; the rest must render.
    assert!(ok * 2 > total, "only {ok}/{total} random graphs rendered");
}
