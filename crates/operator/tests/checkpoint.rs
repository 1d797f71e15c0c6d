//! The operator binary runs the checkpoint controller: a DynamoCheckpoint from the conformance
//! examples gets its capture Job, and becomes Ready when the Job completes on a simulated node.

mod common;

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;

use common::{Operator, Spawn, eventually};

#[tokio::test]
async fn a_checkpoint_is_captured_through_the_operator() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let operator = Operator::spawn(cp, Spawn::default());
    let ns = cp.namespace().await;
    let object = common::manifest("checkpoint/qwen3-vllm.yaml");
    let name = object.metadata.name.clone().unwrap();
    let ar = ApiResource::erase::<api::DynamoCheckpoint>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &ar);
    raw.patch(
        &name,
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap();
    let checkpoints: Api<api::DynamoCheckpoint> = ns.api();
    let ready = || async {
        checkpoints
            .get_opt(&name)
            .await
            .unwrap()
            .and_then(|c| c.status)
            .and_then(|s| s.phase)
            == Some(api::checkpoint::DynamoCheckpointPhase::Ready)
    };
    let result = tokio::time::timeout(Duration::from_secs(120), async {
        while !ready().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        result.is_ok(),
        "checkpoint not Ready: {:#?}\n--- operator log (tail) ---\n{}",
        checkpoints
            .get_opt(&name)
            .await
            .unwrap()
            .and_then(|c| c.status),
        operator
            .log_text()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = ns.api();
    eventually("one capture Job", Duration::from_secs(5), || async {
        jobs.list(&Default::default()).await.unwrap().items.len() == 1
    })
    .await;
}
