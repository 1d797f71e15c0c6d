//! The in-memory double behaves like the API server where reconcilers can tell.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kit::testing::{Double, Verb};
use kit::{Deleted, Error, Patch, Preconditions, ReaderExt, Selector, StatusWriterExt, WriterExt};
use kube::ResourceExt;
use serde_json::json;

const NS: Option<&str> = Some("ns");

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector::default(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn rv<K: kube::Resource>(o: &K) -> u64 {
    o.meta().resource_version.as_ref().unwrap().parse().unwrap()
}

#[tokio::test]
async fn create_sets_server_fields_and_rejects_duplicates() {
    let d = Double::new();
    let w = d.writer();
    let created = w.create(&cm("a", &[("k", "v")])).await.unwrap();
    assert!(created.uid().is_some());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert!(rv(&created) > 0);
    let err = w.create(&cm("a", &[])).await.unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    let got: ConfigMap = d.reader().get(NS, "a").await.unwrap().unwrap();
    assert_eq!(got, created);
}

#[tokio::test]
async fn missing_objects() {
    let d = Double::new();
    assert!(
        d.reader()
            .get::<ConfigMap>(NS, "nope")
            .await
            .unwrap()
            .is_none()
    );
    let err = d
        .writer()
        .patch::<ConfigMap>(NS, "nope", &Patch::Merge(json!({"data": {"a": "b"}})))
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    let err = d
        .status_writer()
        .apply_status(&deployment("nope", 1), &DeploymentStatus::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    let deleted = d
        .writer()
        .delete::<ConfigMap>(NS, "nope", &Preconditions::default(), None)
        .await
        .unwrap();
    assert_eq!(deleted, Deleted::NotFound);
    assert!(d.writes().is_empty());
}

#[tokio::test]
async fn apply_twice_is_a_no_op_and_is_recorded_as_such() {
    let d = Double::new();
    let w = d.writer();
    let first = w.apply(&cm("a", &[("k", "v")]), None).await.unwrap();
    assert!(first.changed);
    let second = w.apply(&cm("a", &[("k", "v")]), None).await.unwrap();
    assert!(!second.changed);
    assert_eq!(rv(&first.object), rv(&second.object));
    let writes = d.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(
        (writes[0].verb, writes[0].changed, writes[1].changed),
        (Verb::Apply, true, false)
    );
    assert_eq!(d.changes().len(), 1);
    d.clear_writes();
    assert!(d.writes().is_empty());
}

#[tokio::test]
async fn resource_version_is_cluster_wide_and_monotonic() {
    let d = Double::new();
    let w = d.writer();
    let a = w.apply(&cm("a", &[("k", "1")]), None).await.unwrap().object;
    let b = w.apply(&cm("b", &[("k", "1")]), None).await.unwrap().object;
    let a2 = w.apply(&cm("a", &[("k", "2")]), None).await.unwrap().object;
    assert!(rv(&a) < rv(&b) && rv(&b) < rv(&a2));
}

#[tokio::test]
async fn generation_tracks_spec_not_metadata() {
    let d = Double::new();
    let w = d.writer();
    let v1 = w.apply(&deployment("d", 1), None).await.unwrap().object;
    let mut labelled = deployment("d", 1);
    labelled.labels_mut().insert("x".into(), "y".into());
    let v2 = w.apply(&labelled, None).await.unwrap();
    assert!(v2.changed);
    assert_eq!(v2.object.metadata.generation, v1.metadata.generation);
    let mut scaled = labelled.clone();
    scaled.spec.as_mut().unwrap().replicas = Some(3);
    let v3 = w.apply(&scaled, None).await.unwrap().object;
    assert_eq!(v3.metadata.generation, Some(2));
}

#[tokio::test]
async fn apply_removes_fields_the_manager_stopped_applying_but_keeps_others() {
    let d = Double::new();
    // Someone else created the object with a key of their own.
    d.insert(cm("a", &[("theirs", "1")]));
    let w = d.writer();
    w.apply(&cm("a", &[("ours", "1"), ("old", "1")]), Some("me"))
        .await
        .unwrap();
    let applied = w
        .apply(&cm("a", &[("ours", "1")]), Some("me"))
        .await
        .unwrap();
    assert!(applied.changed);
    let data = applied.object.data.unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ours", "theirs"]
    );
}

/// A ConfigMap applied by one of several owners: its own owner reference, shared data.
fn owned_by(owner: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut c = cm("shared", data);
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.into(),
        uid: format!("uid-{owner}"),
        controller: Some(false),
        ..Default::default()
    }]);
    c
}

fn owner_names(c: &ConfigMap) -> Vec<String> {
    c.owner_references()
        .iter()
        .map(|o| o.name.clone())
        .collect()
}

#[tokio::test]
async fn managers_share_owner_references_by_uid_and_co_own_equal_fields() {
    let d = Double::new();
    let w = d.writer();
    w.apply(&owned_by("a", &[("k", "v"), ("a-only", "1")]), Some("m-a"))
        .await
        .unwrap();
    let both = w
        .apply(&owned_by("b", &[("k", "v")]), Some("m-b"))
        .await
        .unwrap()
        .object;
    assert_eq!(owner_names(&both), ["a", "b"], "list map keyed by uid");
    // Applying the same configuration again changes nothing.
    let again = w
        .apply(&owned_by("b", &[("k", "v")]), Some("m-b"))
        .await
        .unwrap();
    assert!(!again.changed);

    // `a` gives up: an empty configuration removes what only it held.
    let released = w.apply(&cm("shared", &[]), Some("m-a")).await.unwrap();
    assert!(released.changed);
    let c = released.object;
    assert_eq!(owner_names(&c), ["b"]);
    let data = c.data.unwrap();
    assert_eq!(
        data.get("k").map(String::as_str),
        Some("v"),
        "co-owned by b"
    );
    assert!(!data.contains_key("a-only"), "only a held it");

    // `b` gives up too: nothing of theirs is left.
    let c = w
        .apply(&cm("shared", &[]), Some("m-b"))
        .await
        .unwrap()
        .object;
    assert!(c.owner_references().is_empty());
    assert!(c.data.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_field_another_manager_applied_differently_is_not_kept_for_it() {
    let d = Double::new();
    let w = d.writer();
    w.apply(&cm("a", &[("k", "1")]), Some("one")).await.unwrap();
    w.apply(&cm("a", &[("k", "2")]), Some("two")).await.unwrap();
    // `two` forced its value; `one`'s record holds another value, so `two` alone owns it.
    let c = w.apply(&cm("a", &[]), Some("two")).await.unwrap().object;
    assert!(c.data.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn stale_resource_version_conflicts() {
    let d = Double::new();
    let w = d.writer();
    let created = w.create(&cm("a", &[("k", "1")])).await.unwrap();
    w.apply(&cm("a", &[("k", "2")]), None).await.unwrap();
    let mut stale = cm("a", &[("k", "3")]);
    stale.metadata.resource_version = created.metadata.resource_version.clone();
    assert!(w.apply(&stale, None).await.unwrap_err().is_conflict());
    let patch = Patch::Merge(json!({
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "data": {"k": "4"},
    }));
    assert!(
        w.patch::<ConfigMap>(NS, "a", &patch)
            .await
            .unwrap_err()
            .is_conflict()
    );
}

#[tokio::test]
async fn json_patch_test_failure_is_rejected() {
    let d = Double::new();
    let w = d.writer();
    w.create(&cm("a", &[("k", "1")])).await.unwrap();
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "other"},
        {"op": "replace", "path": "/data/k", "value": "2"},
    ]))
    .unwrap();
    let err = w
        .patch::<ConfigMap>(NS, "a", &Patch::Json(ops))
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err}");
    let unchanged: ConfigMap = d.object(NS, "a").unwrap();
    assert_eq!(unchanged.data.unwrap()["k"], "1");
}

#[tokio::test]
async fn delete_with_finalizers_waits_for_them() {
    let d = Double::new();
    let w = d.writer();
    let mut obj = cm("a", &[]);
    obj.finalizers_mut().push("example.com/cleanup".into());
    w.create(&obj).await.unwrap();
    let Deleted::Pending(pending) = w
        .delete::<ConfigMap>(NS, "a", &Preconditions::default(), None)
        .await
        .unwrap()
    else {
        panic!("expected pending deletion")
    };
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(d.object::<ConfigMap>(NS, "a").is_some());
    // A second delete changes nothing.
    assert!(matches!(
        w.delete::<ConfigMap>(NS, "a", &Preconditions::default(), None)
            .await
            .unwrap(),
        Deleted::Pending(_)
    ));
    // No new finalizers while deleting.
    let add = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup", "x/y"]}}));
    assert!(
        w.patch::<ConfigMap>(NS, "a", &add)
            .await
            .unwrap_err()
            .is_invalid()
    );
    // Removing the last finalizer removes the object.
    let remove = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let removed = w.patch::<ConfigMap>(NS, "a", &remove).await.unwrap();
    assert!(removed.changed);
    assert!(d.object::<ConfigMap>(NS, "a").is_none());
}

#[tokio::test]
async fn delete_preconditions() {
    let d = Double::new();
    let w = d.writer();
    let created = w.create(&cm("a", &[])).await.unwrap();
    let wrong_uid = Preconditions {
        uid: Some("someone-else".into()),
        resource_version: None,
    };
    assert!(
        w.delete::<ConfigMap>(NS, "a", &wrong_uid, None)
            .await
            .unwrap_err()
            .is_conflict()
    );
    let wrong_rv = Preconditions {
        uid: None,
        resource_version: Some("999999".into()),
    };
    assert!(
        w.delete::<ConfigMap>(NS, "a", &wrong_rv, None)
            .await
            .unwrap_err()
            .is_conflict()
    );
    let right = Preconditions {
        uid: created.uid(),
        resource_version: created.resource_version(),
    };
    assert_eq!(
        w.delete::<ConfigMap>(NS, "a", &right, None).await.unwrap(),
        Deleted::Gone
    );
}

#[tokio::test]
async fn owner_references_are_kept_without_garbage_collection() {
    let d = Double::new();
    let w = d.writer();
    let owner = w.create(&cm("owner", &[])).await.unwrap();
    let mut child = cm("child", &[]);
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.uid().unwrap(),
        controller: Some(true),
        ..Default::default()
    }]);
    w.create(&child).await.unwrap();
    w.delete::<ConfigMap>(NS, "owner", &Preconditions::default(), None)
        .await
        .unwrap();
    let child: ConfigMap = d.object(NS, "child").expect("no garbage collection");
    assert_eq!(child.owner_references()[0].name, "owner");
}

#[tokio::test]
async fn list_filters_by_namespace_and_labels() {
    let d = Double::new();
    let labelled = |name: &str, ns: &str, app: &str| {
        let mut c = cm(name, &[]);
        c.metadata.namespace = Some(ns.into());
        c.metadata.labels = Some(BTreeMap::from([("app".to_string(), app.to_string())]));
        c
    };
    d.insert(labelled("b", "ns", "x"));
    d.insert(labelled("a", "ns", "x"));
    d.insert(labelled("c", "ns", "y"));
    d.insert(labelled("d", "other", "x"));
    let r = d.reader();
    let app_x: Selector = [("app", "x")].into_iter().collect();
    let names = |v: Vec<ConfigMap>| v.iter().map(|c| c.name_any()).collect::<Vec<_>>();
    assert_eq!(names(r.list(NS, &app_x).await.unwrap()), ["a", "b"]);
    assert_eq!(names(r.list(None, &app_x).await.unwrap()), ["a", "b", "d"]);
    assert_eq!(
        names(r.list(NS, &Selector::default()).await.unwrap()),
        ["a", "b", "c"]
    );
    assert!(r.list::<Deployment>(NS, &app_x).await.unwrap().is_empty());
}

#[tokio::test]
async fn status_is_written_only_through_the_status_writer() {
    let d = Double::new();
    let w = d.writer();
    let mut with_status = deployment("d", 1);
    with_status.status = Some(DeploymentStatus {
        replicas: Some(9),
        ..Default::default()
    });
    let created = w.apply(&with_status, None).await.unwrap().object;
    assert!(
        created.status.is_none(),
        "status in an apply body is ignored"
    );
    let status = DeploymentStatus {
        ready_replicas: Some(1),
        ..Default::default()
    };
    let s = d.status_writer();
    let first = s.apply_status(&created, &status).await.unwrap();
    assert!(first.changed);
    assert_eq!(
        first.object.status.as_ref().unwrap().ready_replicas,
        Some(1)
    );
    assert_eq!(
        first.object.metadata.generation,
        created.metadata.generation
    );
    let again = s.apply_status(&created, &status).await.unwrap();
    assert!(!again.changed);
    // A field the status writer stops setting is removed.
    let cleared = s
        .apply_status(&created, &DeploymentStatus::default())
        .await
        .unwrap();
    assert!(cleared.changed);
    assert_eq!(cleared.object.status.unwrap().ready_replicas, None);
}

#[tokio::test]
async fn injected_failures_fire_once_per_injection() {
    let d = Double::new();
    d.fail_next(Verb::Apply, "ConfigMap", Error::Conflict("injected".into()));
    d.fail_next(Verb::Get, "*", Error::Forbidden("injected".into()));
    let w = d.writer();
    // Other kinds are not affected.
    w.apply(&deployment("d", 1), None).await.unwrap();
    assert!(
        w.apply(&cm("a", &[]), None)
            .await
            .unwrap_err()
            .is_conflict()
    );
    w.apply(&cm("a", &[]), None).await.unwrap();
    assert!(
        d.reader()
            .get::<Deployment>(NS, "d")
            .await
            .unwrap_err()
            .is_forbidden()
    );
    assert!(
        d.reader()
            .get::<Deployment>(NS, "d")
            .await
            .unwrap()
            .is_some()
    );
    // The failed write is not recorded.
    assert_eq!(d.writes().len(), 2);
}

#[tokio::test]
async fn events_are_recorded() {
    let d = Double::new();
    let obj = d.insert(cm("a", &[]));
    d.event_sink()
        .publish(
            &kit::Event::normal("Mirrored", "copied 1 key"),
            &kit::capability::reference(&obj),
        )
        .await
        .unwrap();
    assert_eq!(d.event_reasons(), ["Mirrored"]);
    assert_eq!(d.events()[0].regarding.name.as_deref(), Some("a"));
}
