//! The DynamoWorkerMetadata CRD is upstream's: workers of any Dynamo release apply their
//! discovery metadata to it, so everything they rely on (group, version, names, scope, the
//! schema of what they write) must be equal to the CRD upstream ships.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

fn upstream() -> CustomResourceDefinition {
    let text = testkit::testdata::read("upstream-crds/nvidia.com_dynamoworkermetadatas.yaml");
    serde_yaml::from_str(&text).expect("upstream's CRD parses")
}

fn ours() -> CustomResourceDefinition {
    api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "DynamoWorkerMetadata")
        .expect("the operator installs the DynamoWorkerMetadata CRD")
}

/// The schema with descriptions removed (wording is ours).
fn structure(crd: &CustomResourceDefinition, version: &str) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("description");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let v = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap();
    let mut schema = serde_json::to_value(&v.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    strip(&mut schema);
    schema
}

#[test]
fn names_scope_and_versions_equal_upstreams() {
    let (ours, upstream) = (ours(), upstream());
    assert_eq!(ours.metadata.name, upstream.metadata.name);
    assert_eq!(ours.spec.group, upstream.spec.group);
    assert_eq!(ours.spec.scope, upstream.spec.scope);
    assert_eq!(ours.spec.names.kind, upstream.spec.names.kind);
    assert_eq!(ours.spec.names.plural, upstream.spec.names.plural);
    assert_eq!(ours.spec.names.singular, upstream.spec.names.singular);
    // The apiserver defaults listKind to `<kind>List`, which upstream spells out.
    let list_kind = ours
        .spec
        .names
        .list_kind
        .clone()
        .unwrap_or(format!("{}List", ours.spec.names.kind));
    assert_eq!(Some(list_kind), upstream.spec.names.list_kind);
    assert_eq!(ours.spec.names.short_names, upstream.spec.names.short_names);
    let versions = |c: &CustomResourceDefinition| {
        c.spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect::<Vec<_>>()
    };
    assert_eq!(versions(&ours), versions(&upstream));
    assert_eq!(versions(&ours), [("v1alpha1".to_string(), true, true)]);
    let columns = |c: &CustomResourceDefinition| {
        c.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(columns(&ours), columns(&upstream));
    // Workers only ever write the main resource: no status or scale subresource.
    assert!(ours.spec.versions[0].subresources.is_none());
}

#[test]
fn the_schema_is_upstreams_and_keeps_what_workers_write() {
    let spec =
        |c: &CustomResourceDefinition| structure(c, "v1alpha1")["properties"]["spec"].clone();
    assert_eq!(spec(&ours()), spec(&upstream()));
    assert_eq!(
        spec(&ours()),
        json!({
            "type": "object",
            "required": ["data"],
            "properties": {"data": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        })
    );
    // What a worker applies decodes into our type and encodes back unchanged.
    let applied = json!({
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoWorkerMetadata",
        "metadata": {"name": "vllm-agg-worker-0-main", "namespace": "dynamo"},
        "spec": {"data": {
            "endpoints": {"dynamo/backend/generate": {
                "type": "Endpoint", "namespace": "dynamo", "component": "backend",
                "endpoint": "generate", "instance_id": 7, "transport": {"Nats": "nats://nats:4222"},
            }},
            "model_cards": {},
        }},
    });
    let typed: api::worker_metadata::DynamoWorkerMetadata =
        serde_json::from_value(applied.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), applied);
}
