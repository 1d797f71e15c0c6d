//! Golden files: the PodCliqueSet rendered for the conformance manifests of the grove kind
//! (every graph with a multinode component, and `vllm-disagg` as a single-node graph rendered
//! on the grove pathway), kept in `tests/golden/<manifest>.yaml`.
//!
//! `UPDATE_GOLDEN=1 cargo test -p grove-program --test golden` rewrites them; review the diff
//! against upstream's rendering rules before committing it.

use std::path::Path;

use api::DynamoGraphDeployment;
use grove_program::grove_render::{self, Inputs, Settings, Workers};
use std::collections::{BTreeMap, BTreeSet};

/// Every DynamoGraphDeployment of the conformance folders, as v1beta1, with its file stem.
fn graphs() -> Vec<(String, DynamoGraphDeployment)> {
    let mut out = Vec::new();
    for version in ["v1beta1", "v1alpha1"] {
        for path in testkit::testdata::yaml_files(version) {
            let text = std::fs::read_to_string(&path).unwrap();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let value: serde_json::Value = serde_yaml::from_str(&text).unwrap();
            if value["kind"] != "DynamoGraphDeployment" {
                continue;
            }
            let dgd: DynamoGraphDeployment = if version == "v1alpha1" {
                let alpha: api::v1alpha1::DynamoGraphDeployment =
                    serde_json::from_value(value).unwrap();
                api::conversion::to_v1beta1(&alpha)
            } else {
                serde_json::from_value(value).unwrap()
            };
            out.push((stem, dgd));
        }
    }
    out
}

fn grove_kind(stem: &str, dgd: &DynamoGraphDeployment) -> bool {
    dgd.spec.has_multinode_component() || stem == "vllm-disagg"
}

/// The graph as the API server would hand it to the program: stored in namespace `dynamo`.
fn stored(mut dgd: DynamoGraphDeployment) -> DynamoGraphDeployment {
    dgd.metadata.namespace = Some("dynamo".into());
    dgd.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    dgd.metadata.generation = Some(1);
    dgd
}

fn render(dgd: &DynamoGraphDeployment) -> String {
    let workers = Workers {
        hash: reconcilers::rollout::worker_hash(dgd),
        changed: false,
    };
    let pcs = grove_render::render(&Inputs {
        dgd,
        existing: None,
        workers: &workers,
        restart: None,
        waiting_for_checkpoint: &BTreeSet::new(),
        checkpoints: &BTreeMap::new(),
        topology_domains: &[],
        pull_secrets: &Default::default(),
        settings: &Settings::default(),
    })
    .expect("conformance graphs render");
    serde_yaml::to_string(&pcs).unwrap()
}

#[test]
fn conformance_graphs_render_as_their_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for (stem, dgd) in graphs() {
        if !grove_kind(&stem, &dgd) {
            continue;
        }
        let dgd = stored(dgd);
        let rendered = render(&dgd);
        let path = dir.join(format!("{stem}.yaml"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &rendered).unwrap();
        } else {
            match std::fs::read_to_string(&path) {
                Ok(golden) if golden == rendered => {}
                Ok(_) => failures.push(format!(
                    "{}: differs from the rendering (UPDATE_GOLDEN=1 rewrites it; review the diff)",
                    path.display()
                )),
                Err(_) => failures.push(format!(
                    "{}: missing (UPDATE_GOLDEN=1 writes it)",
                    path.display()
                )),
            }
        }
        checked.push(stem);
    }
    assert!(
        [
            "sglang-disagg-multinode",
            "vllm-disagg-multinode",
            "vllm-disagg"
        ]
        .iter()
        .all(|s| checked.iter().any(|c| c == s)),
        "expected graphs not found: {checked:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn golden_files_parse_as_pod_clique_sets_and_match_grove_limits() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let pcs: api::grove::PodCliqueSet = serde_yaml::from_str(&text).unwrap();
        let name = pcs.metadata.name.clone().unwrap();
        for g in &pcs.spec.template.pod_clique_scaling_groups {
            for c in &g.clique_names {
                let combined = name.len() + g.name.len() + c.len();
                assert!(
                    combined <= grove_render::names::MAX_COMBINED_NAME_LENGTH,
                    "{}: {name}/{}/{c} is {combined} characters",
                    path.display(),
                    g.name
                );
            }
        }
    }
}
