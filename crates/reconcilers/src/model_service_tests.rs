use std::collections::{BTreeMap, BTreeSet};

use api::common::ModelReference;
use api::labels::{
    DYNAMO_BASE_MODEL, DYNAMO_BASE_MODEL_HASH, MANAGED_BY, base_model_hash, model_service_name,
};
use api::{
    ComponentType, DynamoComponentDeployment, DynamoComponentDeploymentSpec, DynamoGraphDeployment,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kit::testing::{Double, Verb};
use kube::ResourceExt;

use super::*;
use crate::testutil::{component, dgd, reasons};

fn serving(name: &str, models: &[(&str, &str)]) -> DynamoGraphDeployment {
    let components = models
        .iter()
        .map(|(c, model)| {
            let mut c = component(c, ComponentType::Worker);
            c.model_ref = Some(ModelReference {
                name: (*model).into(),
                revision: None,
            });
            c
        })
        .collect();
    dgd(name, components)
}

/// `graph` after the double stored it (it has a uid then).
fn stored(double: &Double, graph: DynamoGraphDeployment) -> DynamoGraphDeployment {
    double.insert(graph)
}

/// One reconcile of `graph`'s model Services, as the Grove program runs it.
async fn reconcile(double: &Double, graph: &DynamoGraphDeployment) -> Vec<Event> {
    let step = ModelServices::new(double.reader(), double.writer());
    let owner = Owner::of(graph).unwrap();
    let desired = render(
        &owner,
        &models(&graph.spec.components),
        &graph.spec.annotations,
    );
    let mut events = Vec::new();
    step.ensure(&owner, &desired)
        .await
        .events_into(&mut events)
        .unwrap();
    events
}

fn owners(double: &Double, model: &str) -> Option<Vec<String>> {
    let service: Service = double.object(Some("ns"), &model_service_name(model))?;
    Some(
        service
            .owner_references()
            .iter()
            .map(|o| o.name.clone())
            .collect(),
    )
}

/// Port of upstream `TestModelServiceReconciliationCharacterization` (model_service_test.go):
/// a graph whose prefill and decode serve one model gets exactly one Service with upstream's
/// name, labels, annotations (the graph's `spec.annotations` included) and spec. The one
/// difference: its owner reference is not a controller reference (shared ownership).
#[tokio::test]
async fn characterization_one_service_per_model() {
    let double = Double::new();
    let mut graph = serving("graph", &[("prefill", "llama-3"), ("decode", "llama-3")]);
    graph.metadata.namespace = Some("inference".into());
    graph.metadata.uid = Some("graph-uid".into());
    graph
        .spec
        .annotations
        .insert("example.com/graph".into(), "true".into());
    let graph = stored(&double, graph);
    let events = reconcile(&double, &graph).await;
    assert_eq!(reasons(&events), ["ServiceCreated"]);

    let services = double.objects::<Service>();
    assert_eq!(services.len(), 1);
    let s = &services[0];
    let hash = base_model_hash("llama-3");
    let spec = s.spec.clone().unwrap();
    let port = &spec.ports.as_ref().unwrap()[0];
    let labels = s.labels();
    let annotations = s.annotations();
    let rows: [(&str, Option<String>, Option<String>); 11] = [
        (
            "name",
            Some(s.name_any()),
            Some(format!("dynamo-model-{hash}")),
        ),
        ("namespace", s.namespace(), Some("inference".into())),
        ("clusterIP", spec.cluster_ip.clone(), Some("None".into())),
        (
            "selector",
            Some(format!("{:?}", spec.selector)),
            Some(format!(
                "{:?}",
                Some(BTreeMap::from([(
                    DYNAMO_BASE_MODEL_HASH.to_string(),
                    hash.clone()
                )]))
            )),
        ),
        ("port name", port.name.clone(), Some("system".into())),
        (
            "port",
            Some(format!(
                "{} -> {:?} {:?}",
                port.port, port.target_port, port.protocol
            )),
            Some(format!(
                "9090 -> {:?} {:?}",
                Some(IntOrString::Int(9090)),
                Some("TCP")
            )),
        ),
        (
            "publishNotReadyAddresses",
            Some(format!("{:?}", spec.publish_not_ready_addresses)),
            Some("Some(false)".into()),
        ),
        (
            "hash label",
            labels.get(DYNAMO_BASE_MODEL_HASH).cloned(),
            Some(hash.clone()),
        ),
        (
            "managed-by",
            labels.get(MANAGED_BY).cloned(),
            Some("dynamo-operator".into()),
        ),
        (
            "base-model",
            annotations.get(DYNAMO_BASE_MODEL).cloned(),
            Some("llama-3".into()),
        ),
        (
            "graph annotation",
            annotations.get("example.com/graph").cloned(),
            Some("true".into()),
        ),
    ];
    for (field, got, want) in rows {
        assert_eq!(got, want, "{field}");
    }
    let refs = s.owner_references();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, "graph-uid");
    assert_eq!(
        refs[0].controller,
        Some(false),
        "upstream: true (first owner only)"
    );
}

#[tokio::test]
async fn a_second_reconcile_sends_nothing() {
    let double = Double::new();
    let graph = stored(&double, serving("a", &[("w", "m1"), ("x", "m2")]));
    reconcile(&double, &graph).await;
    assert_eq!(double.objects::<Service>().len(), 2);
    double.clear_writes();
    let events = reconcile(&double, &graph).await;
    assert!(events.is_empty());
    assert!(double.writes().is_empty(), "{:?}", double.writes());
}

#[tokio::test]
async fn two_owners_share_one_service_and_idle_reconciles_send_nothing() {
    let double = Double::new();
    let mut a = serving("a", &[("w", "m")]);
    a.spec.annotations.insert("team".into(), "a".into());
    let a = stored(&double, a);
    let mut b = serving("b", &[("w", "m")]);
    b.spec.annotations.insert("tier".into(), "gold".into());
    let b = stored(&double, b);
    reconcile(&double, &a).await;
    let events = reconcile(&double, &b).await;
    assert_eq!(reasons(&events), ["ServiceUpdated"], "b joins");
    assert_eq!(owners(&double, "m").unwrap(), ["a", "b"]);
    let s: Service = double.object(Some("ns"), &model_service_name("m")).unwrap();
    assert_eq!(s.annotations()["team"], "a");
    assert_eq!(s.annotations()["tier"], "gold");
    // Each owner's hash is its own: neither overwrites the other's, so neither re-applies.
    double.clear_writes();
    reconcile(&double, &a).await;
    reconcile(&double, &b).await;
    assert!(double.writes().is_empty(), "{:?}", double.writes());
}

#[tokio::test]
async fn removing_one_owner_keeps_the_service_for_the_other() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    let b = stored(&double, serving("b", &[("w", "m")]));
    reconcile(&double, &a).await;
    reconcile(&double, &b).await;
    let mut a_without = a.clone();
    a_without.spec.components[0].model_ref = None;
    let events = reconcile(&double, &a_without).await;
    assert!(events.is_empty(), "released, not deleted: {events:?}");
    let s: Service = double.object(Some("ns"), &model_service_name("m")).unwrap();
    assert_eq!(owners(&double, "m").unwrap(), ["b"]);
    // What both applied stays (b co-owns it).
    assert_eq!(s.labels()[MANAGED_BY], "dynamo-operator");
    assert!(s.spec.as_ref().unwrap().selector.is_some());
    assert!(
        !s.annotations()
            .contains_key(&hash_annotation(&a.uid().unwrap()))
    );
    // b stays converged.
    double.clear_writes();
    reconcile(&double, &b).await;
    assert!(double.writes().is_empty(), "{:?}", double.writes());
}

#[tokio::test]
async fn removing_the_last_owner_deletes_the_service() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    let b = stored(&double, serving("b", &[("w", "m")]));
    reconcile(&double, &a).await;
    reconcile(&double, &b).await;
    for graph in [&a, &b] {
        let mut without = graph.clone();
        without.spec.components.clear();
        let events = reconcile(&double, &without).await;
        let expected: &[&str] = if graph.name_any() == "a" {
            &[]
        } else {
            &["ServiceDeleted"]
        };
        assert_eq!(reasons(&events), expected);
    }
    assert!(double.objects::<Service>().is_empty());
}

#[tokio::test]
async fn a_model_ref_change_moves_ownership() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "old")]));
    let b = stored(&double, serving("b", &[("w", "old")]));
    reconcile(&double, &a).await;
    reconcile(&double, &b).await;
    // a moves to `new`: it creates that Service and leaves `old` to b.
    let mut a_new = a.clone();
    a_new.spec.components[0].model_ref = Some(ModelReference {
        name: "new".into(),
        revision: None,
    });
    let events = reconcile(&double, &a_new).await;
    assert_eq!(reasons(&events), ["ServiceCreated"]);
    assert_eq!(owners(&double, "old").unwrap(), ["b"]);
    assert_eq!(owners(&double, "new").unwrap(), ["a"]);
    // b follows: `old` has no owner left and is deleted, b joins `new`.
    let mut b_new = b.clone();
    b_new.spec.components[0].model_ref = a_new.spec.components[0].model_ref.clone();
    let events = reconcile(&double, &b_new).await;
    assert_eq!(reasons(&events), ["ServiceUpdated", "ServiceDeleted"]);
    assert_eq!(owners(&double, "old"), None);
    assert_eq!(owners(&double, "new").unwrap(), ["a", "b"]);
}

#[tokio::test]
async fn a_removed_graph_annotation_leaves_the_service() {
    let double = Double::new();
    let mut a = serving("a", &[("w", "m")]);
    a.spec.annotations.insert("team".into(), "a".into());
    let a = stored(&double, a);
    reconcile(&double, &a).await;
    let mut without = a.clone();
    without.spec.annotations.clear();
    reconcile(&double, &without).await;
    let s: Service = double.object(Some("ns"), &model_service_name("m")).unwrap();
    assert!(!s.annotations().contains_key("team"), "upstream keeps it");
    assert_eq!(s.annotations()[DYNAMO_BASE_MODEL], "m");
}

/// A Service an upstream operator created: controlled by another Dynamo object. It is shared, not
/// an ownership conflict (the row of upstream's post-1.5
/// `TestSyncResourceStillManagesAResourceOwnedByAnotherDynamoObject`), and giving it up removes
/// our reference even where another manager wrote that entry.
#[tokio::test]
async fn a_service_controlled_by_another_dynamo_object_is_shared() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    let upstream_ref = |name: &str, uid: &str, controller: bool| OwnerReference {
        api_version: "nvidia.com/v1beta1".into(),
        kind: "DynamoComponentDeployment".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(controller),
        block_owner_deletion: Some(true),
    };
    double.insert(Service {
        metadata: ObjectMeta {
            name: Some(model_service_name("m")),
            namespace: Some("ns".into()),
            labels: Some(BTreeMap::from([
                (DYNAMO_BASE_MODEL_HASH.to_string(), base_model_hash("m")),
                (MANAGED_BY.to_string(), "dynamo-operator".to_string()),
            ])),
            owner_references: Some(vec![upstream_ref("prefill-worker", "other", true)]),
            ..Default::default()
        },
        ..Default::default()
    });
    let events = reconcile(&double, &a).await;
    assert_eq!(reasons(&events), ["ServiceUpdated"]);
    assert_eq!(owners(&double, "m").unwrap(), ["prefill-worker", "a"]);

    // Our reference written by someone else (no manager of ours holds it): giving the Service
    // up still removes it.
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    let mut ours = Owner::of(&a).unwrap().reference;
    ours.controller = Some(true);
    double.insert(Service {
        metadata: ObjectMeta {
            name: Some(model_service_name("m")),
            namespace: Some("ns".into()),
            labels: Some(BTreeMap::from([
                (DYNAMO_BASE_MODEL_HASH.to_string(), base_model_hash("m")),
                (MANAGED_BY.to_string(), "dynamo-operator".to_string()),
            ])),
            owner_references: Some(vec![ours, upstream_ref("prefill-worker", "other", false)]),
            ..Default::default()
        },
        ..Default::default()
    });
    let mut without = a.clone();
    without.spec.components.clear();
    let events = reconcile(&double, &without).await;
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(owners(&double, "m").unwrap(), ["prefill-worker"]);
    assert!(
        double.changes().iter().any(|w| w.verb == Verb::Patch),
        "removed by the guarded JSON patch: {:?}",
        double.changes()
    );
}

#[tokio::test]
async fn a_conflicting_delete_falls_back_to_giving_up_our_part() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    reconcile(&double, &a).await;
    let mut without = a.clone();
    without.spec.components.clear();
    double.fail_next(
        Verb::Delete,
        "Service",
        kit::Error::Conflict("the object has been modified".into()),
    );
    // The conflicting delete falls back to giving up our part; then nobody owns it: deleted.
    let events = reconcile(&double, &without).await;
    assert_eq!(reasons(&events), ["ServiceDeleted"]);
    assert!(double.objects::<Service>().is_empty());
}

#[tokio::test]
async fn services_of_other_owners_and_other_services_are_left_alone() {
    let double = Double::new();
    let a = stored(&double, serving("a", &[("w", "m")]));
    let b = stored(&double, serving("b", &[("w", "n")]));
    reconcile(&double, &a).await;
    reconcile(&double, &b).await;
    let mut without = a.clone();
    without.spec.components.clear();
    reconcile(&double, &without).await;
    assert_eq!(owners(&double, "m"), None);
    assert_eq!(owners(&double, "n").unwrap(), ["b"]);
}

#[test]
fn models_are_distinct_and_non_empty() {
    let graph = serving("g", &[("a", "x"), ("b", "x"), ("c", ""), ("d", "y")]);
    assert_eq!(
        models(&graph.spec.components),
        BTreeSet::from(["x".to_string(), "y".to_string()])
    );
}

#[test]
fn a_dcd_owner_gets_no_graph_annotations() {
    let mut dcd = DynamoComponentDeployment::new(
        "g-worker",
        DynamoComponentDeploymentSpec {
            backend_framework: None,
            component: component("worker", ComponentType::Worker),
        },
    );
    dcd.metadata.namespace = Some("ns".into());
    dcd.metadata.uid = Some("dcd-uid".into());
    let owner = Owner::of(&dcd).unwrap();
    assert_eq!(owner.reference.kind, "DynamoComponentDeployment");
    assert_eq!(owner.reference.controller, Some(false));
    let services = render(
        &owner,
        &BTreeSet::from(["Qwen/Qwen3-0.6B".to_string()]),
        &BTreeMap::new(),
    );
    assert_eq!(services[0].name_any(), "dynamo-model-fb68f5a6");
    assert_eq!(
        services[0].annotations().keys().collect::<Vec<_>>(),
        [DYNAMO_BASE_MODEL]
    );
    assert_eq!(
        field_manager("dcd-uid"),
        "dynamo-operator/model-service/dcd-uid"
    );
    assert_eq!(
        hash_annotation("dcd-uid"),
        "nvidia.com/last-applied-hash-dcd-uid"
    );
    dcd.metadata.uid = None;
    assert!(Owner::of(&dcd).is_err());
}
