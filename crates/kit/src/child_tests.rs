use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use serde_json::json;

use super::*;
use crate::testing::{Double, Verb};

const APPLIER: Applier = Applier::new("test-manager", "example.com/last-applied-hash");
const HASH: &str = "example.com/last-applied-hash";
const OWNER: &str = "owner-uid";

fn owner(uid: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Parent".into(),
        name: format!("parent-{uid}"),
        uid: uid.into(),
        controller: Some(controller),
        block_owner_deletion: None,
    }
}

fn cm(data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("c".into()),
            namespace: Some("ns".into()),
            labels: Some(BTreeMap::from([("app".to_string(), "x".to_string())])),
            owner_references: Some(vec![owner(OWNER, true)]),
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

fn stored(d: &Double) -> ConfigMap {
    d.object(Some("ns"), "c").expect("stored ConfigMap")
}

async fn ensure(d: &Double, desired: &ConfigMap, ownership: Ownership<'_>) -> Ensured<ConfigMap> {
    APPLIER
        .ensure(d, d, desired, ownership)
        .await
        .expect("ensure")
}

// ---- covers ----

#[test]
fn extra_live_fields_are_covered_changed_or_missing_ones_are_not() {
    let desired = json!({"spec": {"a": 1, "m": {"x": "1"}, "l": [{"n": "a"}]}});
    assert!(covers(
        &json!({"spec": {"a": 1, "m": {"x": "1", "y": "2"}, "l": [{"n": "a", "d": 0}], "z": true}}),
        &desired
    ));
    assert!(!covers(
        &json!({"spec": {"a": 2, "m": {"x": "1"}, "l": [{"n": "a"}]}}),
        &desired
    ));
    assert!(!covers(
        &json!({"spec": {"a": 1, "l": [{"n": "a"}]}}),
        &desired
    ));
    assert!(!covers(
        &json!({"spec": {"a": 1, "m": {"x": "2"}, "l": [{"n": "a"}]}}),
        &desired
    ));
    assert!(!covers(&json!({}), &desired));
}

#[test]
fn lists_compare_element_by_element_with_equal_length() {
    let desired = json!({"spec": {"l": [{"n": "a"}, {"n": "b"}]}});
    assert!(covers(
        &json!({"spec": {"l": [{"n": "a"}, {"n": "b", "x": 1}]}}),
        &desired
    ));
    assert!(!covers(
        &json!({"spec": {"l": [{"n": "b"}, {"n": "a"}]}}),
        &desired
    ));
    assert!(!covers(
        &json!({"spec": {"l": [{"n": "a"}, {"n": "b"}, {"n": "c"}]}}),
        &desired
    ));
    assert!(!covers(&json!({"spec": {"l": [{"n": "a"}]}}), &desired));
    assert!(!covers(&json!({"spec": {"l": {"n": "a"}}}), &desired));
}

#[test]
fn empty_values_are_covered_by_absence_but_not_by_other_values() {
    let desired = json!({"spec": {"e": {}, "l": [], "n": null, "nested": {"e": {}}}});
    assert!(covers(&json!({"spec": {}}), &desired));
    assert!(covers(&json!({"spec": {"e": {"x": 1}, "l": []}}), &desired));
    assert!(!covers(&json!({"spec": {"l": [1]}}), &desired));
    // An empty string or zero is a value, not absence.
    assert!(!covers(&json!({"spec": {}}), &json!({"spec": {"s": ""}})));
    assert!(!covers(&json!({"spec": {}}), &json!({"spec": {"z": 0}})));
}

#[test]
fn numbers_compare_by_value_and_integers_exactly() {
    assert!(covers(&json!({"n": 1.0}), &json!({"n": 1})));
    assert!(covers(&json!({"n": 1}), &json!({"n": 1.0})));
    assert!(!covers(&json!({"n": 1}), &json!({"n": 2})));
    assert!(!covers(&json!({"n": "1"}), &json!({"n": 1})));
    // 2^53 + 1 and 2^53 are the same f64 but different integers.
    assert!(!covers(
        &json!({"n": 9_007_199_254_740_993_i64}),
        &json!({"n": 9_007_199_254_740_992_i64})
    ));
    assert!(covers(&json!({"n": u64::MAX}), &json!({"n": u64::MAX})));
}

#[test]
fn owner_references_and_finalizers_are_sets() {
    let live = json!({"metadata": {
        "ownerReferences": [{"uid": "other"}, {"uid": "mine", "controller": true}],
        "finalizers": ["theirs", "mine"]
    }});
    assert!(covers(
        &live,
        &json!({"metadata": {"ownerReferences": [{"uid": "mine", "controller": true}],
            "finalizers": ["mine"]}})
    ));
    assert!(!covers(
        &live,
        &json!({"metadata": {"ownerReferences": [{"uid": "third"}]}})
    ));
    assert!(!covers(
        &live,
        &json!({"metadata": {"ownerReferences": [{"uid": "mine", "controller": false}]}})
    ));
    assert!(!covers(
        &live,
        &json!({"metadata": {"finalizers": ["gone"]}})
    ));
    assert!(!covers(
        &json!({"metadata": {}}),
        &json!({"metadata": {"ownerReferences": [{"uid": "mine"}]}})
    ));
    // Elsewhere a list named like that is an ordinary list.
    assert!(!covers(
        &json!({"spec": {"finalizers": ["a", "b"]}}),
        &json!({"spec": {"finalizers": ["a"]}})
    ));
}

#[test]
fn identity_and_status_are_not_compared_at_the_top_level() {
    assert!(covers(
        &json!({"metadata": {"name": "a"}, "status": {"ready": false}}),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
            "status": {"ready": true}})
    ));
    assert!(!covers(
        &json!({"spec": {"status": "a"}}),
        &json!({"spec": {"status": "b"}})
    ));
    assert!(!covers(
        &json!({"metadata": {"name": "a"}}),
        &json!({"metadata": {"name": "b"}})
    ));
}

// ---- hash ----

#[test]
fn the_hash_is_stable_short_and_follows_the_body() {
    let a = APPLIER.hash(&cm(&[("k", "1")])).unwrap();
    assert_eq!(a, APPLIER.hash(&cm(&[("k", "1")])).unwrap());
    assert_ne!(a, APPLIER.hash(&cm(&[("k", "2")])).unwrap());
    assert_eq!(a.len(), 16);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    // Typed and dynamic forms of one object hash alike.
    assert_eq!(
        a,
        APPLIER
            .hash(&to_dynamic(&cm(&[("k", "1")])).unwrap())
            .unwrap()
    );
}

#[test]
fn stamping_is_idempotent_and_ignores_the_old_stamp() {
    let mut object = cm(&[("k", "1")]);
    let first = APPLIER.stamp(&mut object).unwrap();
    assert_eq!(object.metadata.annotations.as_ref().unwrap()[HASH], first);
    assert_eq!(APPLIER.stamp(&mut object).unwrap(), first);
    // An annotations map holding only the stamp counts as absent.
    let mut empty = cm(&[("k", "1")]);
    empty.metadata.annotations = Some(BTreeMap::new());
    assert_eq!(APPLIER.hash(&empty).unwrap(), first);
    // Other annotations are part of the body.
    let mut annotated = cm(&[("k", "1")]);
    annotated.metadata.annotations = Some(BTreeMap::from([("a".into(), "1".into())]));
    assert_ne!(APPLIER.stamp(&mut annotated).unwrap(), first);
}

#[test]
fn the_hash_is_sha256_of_the_sorted_compact_json() {
    // The digest of `{"a":1,"b":{"c":[true,"x"]}}`, independently of key order.
    let forward = json!({"a": 1, "b": {"c": [true, "x"]}});
    let hash = APPLIER.hash(&forward).unwrap();
    let digest = Sha256::digest(br#"{"a":1,"b":{"c":[true,"x"]}}"#);
    let expected: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hash, expected);
}

// ---- ensure ----

#[tokio::test]
async fn the_first_run_creates_the_second_writes_nothing() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    let created = ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    assert_eq!(created.change, Change::Created);
    assert_eq!(created.change.verb(), Some("Created"));
    let live = stored(&d);
    assert_eq!(live.data.as_ref().unwrap()["k"], "1");
    assert_eq!(
        live.metadata.annotations.as_ref().unwrap()[HASH],
        APPLIER.hash(&desired).unwrap()
    );
    assert_eq!(created.object.metadata.uid, live.metadata.uid);

    d.clear_writes();
    let again = ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert_eq!(again.change, Change::Unchanged);
    assert!(!again.change.changed());
    assert_eq!(
        again.object.metadata.resource_version,
        live.metadata.resource_version
    );
}

#[tokio::test]
async fn drift_of_an_owned_field_is_restored() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    let mut drifted = stored(&d);
    drifted.data = Some(BTreeMap::from([("k".to_string(), "hacked".to_string())]));
    d.insert(drifted);
    d.clear_writes();
    let restored = ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    assert_eq!(restored.change, Change::Updated);
    assert_eq!(stored(&d).data.unwrap()["k"], "1");
    assert_eq!(d.changes().len(), 1);
}

#[tokio::test]
async fn a_removed_hash_annotation_is_restored() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    let mut drifted = stored(&d);
    drifted.metadata.annotations = None;
    d.insert(drifted);
    let restored = ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    assert_eq!(restored.change, Change::Updated);
    assert!(stored(&d).metadata.annotations.unwrap().contains_key(HASH));
}

#[tokio::test]
async fn fields_others_add_do_not_trigger_a_write() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    let mut added = stored(&d);
    added
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("user".into(), "label".into());
    added
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("user".into(), "note".into());
    added
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .insert(0, owner("someone-else", false));
    added
        .data
        .as_mut()
        .unwrap()
        .insert("extra".into(), "v".into());
    d.insert(added);
    d.clear_writes();
    let again = ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    assert_eq!(again.change, Change::Unchanged);
    assert!(d.writes().is_empty(), "{:?}", d.writes());
}

#[tokio::test]
async fn a_field_no_longer_set_is_removed_by_the_apply_the_hash_forces() {
    let d = Double::new();
    ensure(
        &d,
        &cm(&[("k", "1"), ("old", "1")]),
        Ownership::Controlled(OWNER),
    )
    .await;
    // The live object still holds every field of the smaller body: only the hash differs.
    let smaller = cm(&[("k", "1")]);
    let updated = ensure(&d, &smaller, Ownership::Controlled(OWNER)).await;
    assert_eq!(updated.change, Change::Updated);
    let data = stored(&d).data.unwrap();
    assert!(!data.contains_key("old"), "{data:?}");
}

#[tokio::test]
async fn a_child_controlled_by_another_object_is_a_conflict_and_untouched() {
    let d = Double::new();
    let mut theirs = cm(&[("k", "theirs")]);
    theirs.metadata.owner_references = Some(vec![owner("other", true)]);
    d.insert(theirs);
    for ownership in [Ownership::Controlled(OWNER), Ownership::Adopt(OWNER)] {
        let err = APPLIER
            .ensure(&d, &d, &cm(&[("k", "1")]), ownership)
            .await
            .unwrap_err();
        let EnsureError::Conflict(conflict) = &err else {
            panic!("{err}")
        };
        assert_eq!(conflict.kind, "ConfigMap");
        assert_eq!(conflict.key, "ns/c");
        assert_eq!(conflict.controller.as_ref().unwrap().uid, "other");
        assert_eq!(
            err.to_string(),
            "ConfigMap ns/c is controlled by Parent parent-other"
        );
    }
    assert!(d.writes().is_empty());
    assert_eq!(stored(&d).data.unwrap()["k"], "theirs");
}

#[tokio::test]
async fn an_uncontrolled_child_is_a_conflict_unless_adopted() {
    let d = Double::new();
    let mut orphan = cm(&[("k", "orphan")]);
    orphan.metadata.owner_references = Some(vec![owner(OWNER, false)]);
    d.insert(orphan);
    let err = APPLIER
        .ensure(
            &d.clone(),
            &d.clone(),
            &cm(&[("k", "1")]),
            Ownership::Controlled(OWNER),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EnsureError::Conflict(c) if c.controller.is_none()),
        "{err}"
    );
    assert!(err.to_string().ends_with("has no controller owner"));
    assert!(d.writes().is_empty());

    let adopted = ensure(&d, &cm(&[("k", "1")]), Ownership::Adopt(OWNER)).await;
    assert_eq!(adopted.change, Change::Updated);
    assert!(is_controlled_by(&stored(&d).metadata, OWNER));
}

#[tokio::test]
async fn a_shared_child_is_written_whoever_controls_it() {
    let d = Double::new();
    let mut theirs = cm(&[("k", "theirs")]);
    theirs.metadata.owner_references = Some(vec![owner("other", true)]);
    d.insert(theirs);
    let mut desired = cm(&[("k", "1")]);
    desired.metadata.owner_references = None;
    let ensured = ensure(&d, &desired, Ownership::Shared).await;
    assert_eq!(ensured.change, Change::Updated);
    assert_eq!(stored(&d).data.unwrap()["k"], "1");
}

#[tokio::test]
async fn read_and_apply_failures_are_told_apart() {
    let d = Double::new();
    d.fail_next(Verb::Get, "ConfigMap", Error::Forbidden("no get".into()));
    let err = APPLIER
        .ensure(&d, &d, &cm(&[]), Ownership::Shared)
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnsureError::Read(Error::Forbidden(_))),
        "{err}"
    );
    assert!(d.writes().is_empty());

    d.fail_next(Verb::Apply, "ConfigMap", Error::Invalid("bad".into()));
    let err = APPLIER
        .ensure(&d, &d, &cm(&[]), Ownership::Shared)
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnsureError::Apply(Error::Invalid(_))),
        "{err}"
    );
    assert_eq!(err.to_string(), "apply: invalid: bad");
}

#[tokio::test]
async fn an_observed_child_is_not_read_again() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    let created = APPLIER
        .ensure_observed(&d, &desired, None, Ownership::Controlled(OWNER))
        .await
        .unwrap();
    assert_eq!(created.change, Change::Created);
    // Any read would fail now.
    d.fail_next(Verb::Get, "*", Error::Forbidden("no reads".into()));
    d.clear_writes();
    let live = stored(&d);
    let again = APPLIER
        .ensure_observed(&d, &desired, Some(&live), Ownership::Controlled(OWNER))
        .await
        .unwrap();
    assert_eq!(again.change, Change::Unchanged);
    assert!(d.writes().is_empty());
    assert_eq!(again.object, live);
}

#[tokio::test]
async fn a_stale_observation_costs_a_no_op_apply_and_reports_unchanged() {
    let d = Double::new();
    let desired = cm(&[("k", "1")]);
    ensure(&d, &desired, Ownership::Controlled(OWNER)).await;
    let mut stale = stored(&d);
    stale.data = Some(BTreeMap::from([("k".to_string(), "old".to_string())]));
    d.clear_writes();
    let ensured = APPLIER
        .ensure_observed(&d, &desired, Some(&stale), Ownership::Controlled(OWNER))
        .await
        .unwrap();
    assert_eq!(ensured.change, Change::Unchanged);
    assert_eq!(d.writes().len(), 1);
    assert!(d.changes().is_empty());
}

#[tokio::test]
async fn a_dynamic_child_converges_like_a_typed_one() {
    let d = Double::new();
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some("w".into()),
            namespace: Some("ns".into()),
            owner_references: Some(vec![owner(OWNER, true)]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector::default(),
            ..Default::default()
        }),
        status: None,
    };
    let dynamic = to_dynamic(&deployment).unwrap();
    let ar = resource::<Deployment>();
    let first = APPLIER
        .ensure_dynamic(&d, &d, &ar, &dynamic, Ownership::Controlled(OWNER))
        .await
        .unwrap();
    assert_eq!(first.change, Change::Created);
    d.clear_writes();
    // The typed form of the same body is covered by what the dynamic one wrote.
    let typed = APPLIER
        .ensure(&d, &d, &deployment, Ownership::Controlled(OWNER))
        .await
        .unwrap();
    assert_eq!(typed.change, Change::Unchanged);
    assert!(d.writes().is_empty());
    assert_eq!(typed.object.spec.unwrap().replicas, Some(2));
}
