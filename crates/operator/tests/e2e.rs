//! The operator binary, as a process, converges real manifests on the real control plane.

mod common;

use std::time::Duration;

use api::DynamoGraphDeployment;
use kube::api::{Api, Patch, PatchParams};

use common::{Operator, Spawn, apply, eventually, manifest, metric};

fn is_ready(dgd: &DynamoGraphDeployment) -> bool {
    dgd.status
        .as_ref()
        .is_some_and(|s| kit::conditions::is_true(&s.conditions, kit::conditions::READY))
}

async fn wait_ready(dgds: &Api<DynamoGraphDeployment>, name: &str, operator: &Operator) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(dgd) = dgds.get_opt(name).await.unwrap()
            && is_ready(&dgd)
        {
            return;
        }
        if std::time::Instant::now() > deadline {
            let dgd = dgds.get_opt(name).await.unwrap();
            panic!(
                "{name} not Ready: {:#?}\n--- operator log (tail) ---\n{}",
                dgd.and_then(|d| d.status),
                operator
                    .log_text()
                    .lines()
                    .rev()
                    .take(60)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn converges_a_graph_then_idles_without_writes() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let operator = Operator::spawn(cp, Spawn::default());
    let ns = cp.namespace().await;
    let object = manifest("v1beta1/vllm-agg.yaml");
    let name = object.metadata.name.clone().unwrap();
    apply(cp.client(), ns.name(), &object).await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    wait_ready(&dgds, &name, &operator).await;

    // The other tests of this binary run operators too (and may have made the graph Ready
    // first): this one reconciles it once its own queue gets to it.
    let reconciled = || {
        let text = operator.metrics_text().unwrap_or_default();
        metric(
            &text,
            "controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"success\"}",
        )
        .unwrap_or(0.0)
            >= 1.0
    };
    eventually(
        "this operator reconciled a graph",
        Duration::from_secs(60),
        || async { reconciled() },
    )
    .await;
    eventually("/readyz", Duration::from_secs(5), || async {
        operator.ready()
    })
    .await;

    // Converged: an annotation no trigger looks at causes no work and no write.
    let audit = cp.audit();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mark = audit.mark();
    let touch =
        serde_json::json!({ "metadata": { "annotations": { "example.com/ignored": "1" } } });
    dgds.patch(&name, &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: Vec<_> = audit
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == "dynamo-operator" && e.is_write() && e.namespace == ns.name())
        .collect();
    assert!(
        writes.is_empty(),
        "writes after an ignored change: {writes:#?}"
    );
}

#[tokio::test]
async fn standby_takes_over_when_the_leader_is_killed() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let lease = format!("failover-{}", std::process::id());
    let spawn = || {
        Operator::spawn(
            cp,
            Spawn {
                lease: Some(lease.clone()),
                ..Spawn::default()
            },
        )
    };
    let mut a = spawn();
    let mut b = spawn();
    let leader_metric = format!("leader_election_master_status{{name=\"{lease}\"}}");
    let leads =
        |op: &Operator| op.metrics_text().and_then(|t| metric(&t, &leader_metric)) == Some(1.0);
    eventually("one replica leads", Duration::from_secs(30), || async {
        leads(&a) || leads(&b)
    })
    .await;
    // Started together, both replicas raced for the unheld Lease: one holds it, the other stays
    // a standby (sampled for 4 s, about one renewal of the 6 s Lease).
    for _ in 0..20 {
        assert!(!(leads(&a) && leads(&b)), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (leader, standby) = if leads(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    let ns = cp.namespace().await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    let first = manifest("v1beta1/vllm-agg.yaml");
    apply(cp.client(), ns.name(), &first).await;
    wait_ready(&dgds, first.metadata.name.as_deref().unwrap(), leader).await;

    // SIGKILL: no chance to release the Lease; the standby waits out the lease duration (6 s).
    leader.kill();
    let killed = std::time::Instant::now();
    eventually("the standby leads", Duration::from_secs(30), || async {
        leads(standby)
    })
    .await;
    let takeover = killed.elapsed();
    eprintln!("failover: standby leading {takeover:.1?} after SIGKILL of the leader");

    let mut second = manifest("v1beta1/vllm-disagg.yaml");
    second.metadata.name = Some("after-failover".into());
    apply(cp.client(), ns.name(), &second).await;
    wait_ready(&dgds, "after-failover", standby).await;
    let text = standby.metrics_text().unwrap();
    assert!(
        metric(&text, "controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"success\"}")
            .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    // Graceful stop releases the Lease and exits 0.
    assert!(standby.terminate().success(), "SIGTERM exit");
}

#[tokio::test]
async fn deleted_children_come_back() {
    use k8s_openapi::api::apps::v1::Deployment;
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let operator = Operator::spawn(cp, Spawn::default());
    let ns = cp.namespace().await;
    let object = manifest("v1beta1/vllm-agg.yaml");
    let name = object.metadata.name.clone().unwrap();
    apply(cp.client(), ns.name(), &object).await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    wait_ready(&dgds, &name, &operator).await;

    // A Deployment (child of a DCD) and a DCD (child of the graph), deleted by hand.
    let deployments: Api<Deployment> = ns.api();
    let dcds: Api<api::DynamoComponentDeployment> = ns.api();
    let frontend = "vllm-agg-frontend";
    let old_deployment = deployments.get(frontend).await.unwrap().metadata.uid;
    let old_dcd = dcds.get(frontend).await.unwrap().metadata.uid;
    deployments
        .delete(frontend, &Default::default())
        .await
        .unwrap();
    eventually(
        "the Deployment is recreated",
        Duration::from_secs(30),
        || async {
            deployments
                .get_opt(frontend)
                .await
                .unwrap()
                .is_some_and(|d| d.metadata.uid != old_deployment)
        },
    )
    .await;
    dcds.delete(frontend, &Default::default()).await.unwrap();
    eventually("the DCD is recreated", Duration::from_secs(30), || async {
        dcds.get_opt(frontend)
            .await
            .unwrap()
            .is_some_and(|d| d.metadata.uid != old_dcd)
    })
    .await;
    wait_ready(&dgds, &name, &operator).await;
}
