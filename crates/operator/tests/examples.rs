//! Every upstream example graph of the test data reaches Ready through the operator binary on the
//! test control plane, given what a real cluster provides for it: the InferencePool CRD, DRA
//! device classes with devices published for every simulated node (the test plays the DRA
//! drivers' part), the `nvidia` RuntimeClass, GPU nodes labelled as GPU feature discovery labels
//! them, the snapshot agent's DaemonSet in every namespace (checkpoint restores find their
//! storage from it), and a bound volume for every PersistentVolumeClaim a manifest mounts. Manifests written
//! as templates get their placeholders filled, as their users would.
//!
//! Single-node graphs run on the component pathway (Deployments). The multinode ones
//! ([`MULTINODE`]) run twice, once on each pathway: LeaderWorkerSets, with the test playing the
//! LeaderWorkerSet controller (every group ready), and a Grove PodCliqueSet, with the test playing
//! Grove (`grove_program::simulate`). Each graph is pinned to its pathway with
//! `nvidia.com/enable-grove`, since the LeaderWorkerSet and Grove CRDs are both installed.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use testkit::ControlPlane;

use common::graphs::{self, Pathway};
use common::{Operator, Spawn};

/// Examples with a multinode component: they run on both pathways, the test playing the
/// LeaderWorkerSet controller and Grove.
const MULTINODE: &[&str] = &[
    "examples__backends__sglang__deploy__v1beta1__disagg-multinode.yaml",
    "examples__backends__trtllm__deploy__v1beta1__disagg-multinode.yaml",
    "examples__backends__vllm__deploy__v1beta1__disagg-multinode.yaml",
];

const READY_WITHIN: Duration = Duration::from_secs(180);

#[tokio::test]
async fn every_upstream_example_reaches_ready() {
    let cp = ControlPlane::shared().await;
    graphs::prepare(cp).await;
    let operator = Operator::spawn(cp, Spawn::default());

    let mut multinode = BTreeSet::new();
    let mut runs = Vec::new();
    for file in testkit::testdata::yaml_files("upstream-examples") {
        let name = graphs::file_name(&file);
        let pathways = if graphs::graph(&graphs::documents(&file, Pathway::Component))
            .spec
            .has_multinode_component()
        {
            multinode.insert(name.clone());
            vec![Pathway::Component, Pathway::Grove]
        } else {
            vec![Pathway::Component]
        };
        for pathway in pathways {
            runs.push(graphs::start(cp, &file, pathway).await);
        }
    }
    let expected: BTreeSet<String> = MULTINODE.iter().map(|s| s.to_string()).collect();
    assert_eq!(multinode, expected, "the multinode examples");

    let failed = graphs::wait_ready(cp, &runs, READY_WITHIN).await;
    assert!(
        failed.is_empty(),
        "not Ready within {READY_WITHIN:?}:\n{}\n--- operator log (tail) ---\n{}",
        failed.join("\n"),
        graphs::tail(&operator.log_text(), 40)
    );
}
