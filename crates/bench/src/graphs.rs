//! The graphs the bench applies: the single-node v1beta1 conformance manifests, renamed, in a
//! fixed rotation that averages three components per graph.
//!
//! | position | manifest | components | pods | GPUs |
//! | --- | --- | --- | --- | --- |
//! | 0 | `vllm-agg` | 2 | 2 | 1 |
//! | 1 | `vllm-disagg` | 3 | 3 | 2 |
//! | 2 | `sglang-disagg-planner` | 4 | 6 | 4 |
//! | 3 | `vllm-disagg` | 3 | 3 | 2 |
//!
//! Per graph on average: 3 components, 3.5 pods, 2.25 GPUs. Multinode manifests are left out:
//! they need LeaderWorkerSet, which the test control plane does not serve.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

/// The rotation: manifest file (under `v1beta1/`) and the short tag of the graph names.
pub const MIX: [(&str, &str); 4] = [
    ("vllm-agg.yaml", "agg"),
    ("vllm-disagg.yaml", "disagg"),
    ("sglang-disagg-planner.yaml", "planner"),
    ("vllm-disagg.yaml", "disagg"),
];

/// One manifest of the rotation.
#[derive(Clone, Debug)]
pub struct Template {
    pub tag: &'static str,
    pub manifest: Value,
}

/// One graph to apply.
#[derive(Clone, Debug)]
pub struct Graph {
    pub name: String,
    pub manifest: Value,
    /// Replicas per component, in spec order (what churn toggles).
    pub replicas: Vec<i64>,
}

/// The test-data folder (`testdata/`, or `CONFORMANCE_DIR`).
pub fn conformance_dir() -> anyhow::Result<PathBuf> {
    let dir = testkit::testdata::dir();
    anyhow::ensure!(dir.is_dir(), "{} is not a folder", dir.display());
    Ok(dir)
}

/// Loads the rotation's manifests.
pub fn templates(dir: &Path) -> anyhow::Result<Vec<Template>> {
    MIX.iter()
        .map(|(file, tag)| {
            let path = dir.join("v1beta1").join(file);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let manifest: Value = serde_yaml::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            if manifest["spec"]["components"].as_array().is_none() {
                bail!("{} has no spec.components", path.display());
            }
            Ok(Template { tag, manifest })
        })
        .collect()
}

/// Graph `i` of the rotation: `g<i>-<tag>` in `namespace`.
pub fn graph(templates: &[Template], i: usize, namespace: &str) -> Graph {
    let t = &templates[i % templates.len()];
    let name = format!("g{i:04}-{}", t.tag);
    let mut manifest = t.manifest.clone();
    manifest["metadata"] = serde_json::json!({ "name": name, "namespace": namespace });
    let replicas = manifest["spec"]["components"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| c["replicas"].as_i64().unwrap_or(1))
                .collect()
        })
        .unwrap_or_default();
    Graph {
        name,
        manifest,
        replicas,
    }
}

/// GPUs the pods of `graph` request at `extra` replicas above the manifest (`limits`).
pub fn gpus(graph: &Graph, extra: i64) -> i64 {
    let components = graph.manifest["spec"]["components"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    components
        .iter()
        .zip(&graph.replicas)
        .map(|(c, replicas)| {
            let per_pod: i64 = c["podTemplate"]["spec"]["containers"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .filter_map(|ct| {
                            ct["resources"]["limits"]["nvidia.com/gpu"]
                                .as_str()
                                .and_then(|v| v.parse::<i64>().ok())
                        })
                        .sum()
                })
                .unwrap_or(0);
            per_pod * (replicas + extra)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rotation_averages_three_components() {
        let dir = conformance_dir().unwrap();
        let templates = templates(&dir).unwrap();
        let graphs: Vec<Graph> = (0..8).map(|i| graph(&templates, i, "ns")).collect();
        let components: usize = graphs.iter().map(|g| g.replicas.len()).sum();
        assert_eq!(components, 24);
        assert_eq!(graphs[2].name, "g0002-planner");
        assert_eq!(graphs[2].manifest["metadata"]["namespace"], "ns");
        let pods: i64 = graphs.iter().flat_map(|g| g.replicas.iter()).sum();
        assert_eq!(pods, 28);
        let gpus: i64 = graphs.iter().map(|g| gpus(g, 0)).sum();
        assert_eq!(gpus, 18);
    }
}
