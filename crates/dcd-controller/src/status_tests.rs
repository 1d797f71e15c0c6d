//! Readiness tables.

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
use kube::api::ApiResource;
use serde_json::json;

use super::*;

fn deployment(replicas: Option<i32>, generation: i64, status: DeploymentStatus) -> Deployment {
    let mut d = Deployment {
        spec: Some(DeploymentSpec {
            replicas,
            ..Default::default()
        }),
        status: Some(status),
        ..Default::default()
    };
    d.metadata.generation = Some(generation);
    d
}

fn status(
    observed: i64,
    replicas: i32,
    updated: i32,
    available: i32,
    cond: Option<&str>,
) -> DeploymentStatus {
    DeploymentStatus {
        observed_generation: Some(observed),
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        available_replicas: Some(available),
        ready_replicas: Some(available),
        conditions: cond.map(|s| {
            vec![DeploymentCondition {
                type_: "Available".into(),
                status: s.into(),
                ..Default::default()
            }]
        }),
        ..Default::default()
    }
}

#[test]
fn deployment_readiness_follows_upstream() {
    let cases = [
        (
            "all good",
            deployment(Some(2), 3, status(3, 2, 2, 2, Some("True"))),
            true,
        ),
        (
            "newer observed generation",
            deployment(Some(2), 3, status(4, 2, 2, 2, Some("True"))),
            true,
        ),
        (
            "spec not observed yet",
            deployment(Some(2), 3, status(2, 2, 2, 2, Some("True"))),
            false,
        ),
        (
            "not all updated",
            deployment(Some(2), 1, status(1, 2, 1, 2, Some("True"))),
            false,
        ),
        (
            "not all available",
            deployment(Some(2), 1, status(1, 2, 2, 1, Some("True"))),
            false,
        ),
        (
            "surge pods left",
            deployment(Some(2), 1, status(1, 3, 2, 2, Some("True"))),
            false,
        ),
        (
            "Available condition False",
            deployment(Some(2), 1, status(1, 2, 2, 2, Some("False"))),
            false,
        ),
        (
            "no Available condition",
            deployment(Some(2), 1, status(1, 2, 2, 2, None)),
            false,
        ),
        (
            "replicas default to 1",
            deployment(None, 1, status(1, 1, 1, 1, Some("True"))),
            true,
        ),
        (
            "default 1 not met",
            deployment(None, 1, status(1, 0, 0, 0, Some("True"))),
            false,
        ),
        (
            "zero desired is ready",
            deployment(Some(0), 5, DeploymentStatus::default()),
            true,
        ),
        (
            "no status",
            {
                let mut d = deployment(Some(1), 1, DeploymentStatus::default());
                d.status = None;
                d
            },
            false,
        ),
        (
            "paused",
            {
                let mut d = deployment(Some(2), 1, status(1, 2, 2, 2, Some("True")));
                d.spec.as_mut().unwrap().paused = Some(true);
                d
            },
            false,
        ),
        (
            "paused at zero",
            {
                let mut d = deployment(Some(0), 1, DeploymentStatus::default());
                d.spec.as_mut().unwrap().paused = Some(true);
                d
            },
            false,
        ),
    ];
    for (what, d, ready) in cases {
        assert_eq!(deployment_ready(&d), ready, "{what}");
    }
}

fn lws(data: serde_json::Value) -> DynamicObject {
    let resource = ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    };
    DynamicObject::new("x", &resource).data(data)
}

#[test]
fn leader_worker_set_readiness_follows_upstream() {
    let available = |s: &str| json!([{"type": "Available", "status": s}]);
    let cases = [
        (
            "ready",
            json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 2, "conditions": available("True")}}),
            true,
        ),
        (
            "more ready",
            json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 3, "conditions": available("True")}}),
            true,
        ),
        (
            "too few ready",
            json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 1, "conditions": available("True")}}),
            false,
        ),
        (
            "not available",
            json!({"spec": {"replicas": 1}, "status": {"readyReplicas": 1, "conditions": available("False")}}),
            false,
        ),
        (
            "no condition",
            json!({"spec": {"replicas": 1}, "status": {"readyReplicas": 1}}),
            false,
        ),
        (
            "default 1",
            json!({"spec": {}, "status": {"readyReplicas": 1, "conditions": available("True")}}),
            true,
        ),
        ("zero desired", json!({"spec": {"replicas": 0}}), true),
        (
            "the first Available condition decides",
            json!({"spec": {"replicas": 1}, "status": {"readyReplicas": 1, "conditions": [
                {"type": "Available", "status": "False"}, {"type": "Available", "status": "True"}]}}),
            false,
        ),
        (
            "other conditions do not count",
            json!({"spec": {"replicas": 1}, "status": {"readyReplicas": 1, "conditions": [
                {"type": "Progressing", "status": "True"}]}}),
            false,
        ),
        ("no status", json!({"spec": {"replicas": 1}}), false),
    ];
    for (what, data, ready) in cases {
        assert_eq!(leader_worker_set_ready(&lws(data)), ready, "{what}");
    }
}

#[test]
fn readiness_conditions_name_the_component_reason() {
    let [available, component] =
        readiness_conditions(true, REASON_DEPLOYMENT_READY, "Deployment is ready", 4);
    assert_eq!(
        (
            available.type_.as_str(),
            available.status.as_str(),
            available.reason.as_str(),
            available.observed_generation
        ),
        ("Available", "True", "DeploymentReady", Some(4))
    );
    assert_eq!(
        (
            component.type_.as_str(),
            component.status.as_str(),
            component.reason.as_str(),
            component.message.as_str()
        ),
        (
            "DynamoComponentReady",
            "True",
            "ComponentReady",
            "DynamoComponent is ready"
        )
    );
    let [available, component] = readiness_conditions(
        false,
        REASON_DEPLOYMENT_NOT_READY,
        "Deployment is not ready",
        1,
    );
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("False", "DeploymentNotReady")
    );
    assert_eq!(
        (component.status.as_str(), component.reason.as_str()),
        ("False", "ComponentNotReady")
    );
}
