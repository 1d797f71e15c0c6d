//! Graphs from templates, applied, waited for and deleted.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::TEMPLATE_LABEL;

pub fn yaml_value(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    Ok(serde_yaml::from_str(&text)?)
}

pub use bench::cluster::dgds;

/// A graph from a template: name, namespace and the template label set.
pub fn graph(template_name: &str, template: &Value, ns: &str, name: &str) -> Value {
    let mut g = template.clone();
    g["metadata"] = json!({
        "name": name,
        "namespace": ns,
        "labels": {TEMPLATE_LABEL: template_name},
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        g["metadata"]["annotations"] = annotations.clone();
    }
    g
}

/// Server-side applies a graph (or any namespaced object of the Dynamo group) as `kubectl`. A
/// graph that does not choose its pathway (no `nvidia.com/enable-grove`, no recorded provider, no
/// provider override) is pinned to the component pathway: the suite installs Grove's CRDs for the
/// inputs that ask for Grove, where the operator would otherwise select Grove for every graph,
/// and nothing here plays Grove's controller.
pub async fn apply(client: &Client, object: &Value) -> Result<DynamicObject, kube::Error> {
    let object = &pinned(object.clone());
    let version = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split('/').nth(1))
        .unwrap_or("v1beta1");
    let kind = object["kind"].as_str().unwrap_or("DynamoGraphDeployment");
    let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(api::GROUP, version, kind));
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.patch(
        name,
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(object),
    )
    .await
}

/// `object`, pinned to the component pathway when it is a graph that does not choose its
/// pathway (see [`apply`]).
pub fn pinned(mut object: Value) -> Value {
    if chooses_no_pathway(&object) {
        object["metadata"]["annotations"][api::labels::ENABLE_GROVE] = json!("false");
    }
    object
}

/// Whether `object` is a graph that leaves its pathway to the operator's default.
fn chooses_no_pathway(object: &Value) -> bool {
    let annotations = &object["metadata"]["annotations"];
    object["kind"] == "DynamoGraphDeployment"
        && annotations.get(api::labels::ENABLE_GROVE).is_none()
        && annotations.get(api::labels::WORKLOAD_PROVIDER).is_none()
        && object["spec"].get("providerOverride").is_none()
}

/// The Ready condition of a graph as (status, reason, message), if it reports one for its
/// current generation.
pub fn ready_condition(dgd: &DynamicObject) -> Option<(String, String, String)> {
    let generation = dgd.metadata.generation.unwrap_or(0);
    let status = dgd.data.get("status")?;
    let observed = status.get("observedGeneration").and_then(Value::as_i64);
    let condition = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let condition_generation = condition
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .or(observed)?;
    if condition_generation < generation {
        return None;
    }
    let s = |k: &str| condition[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

pub fn is_ready(dgd: &DynamicObject) -> bool {
    ready_condition(dgd).is_some_and(|(s, _, _)| s == "True")
}

/// Every graph of `ns` (v1beta1).
pub async fn graphs(client: &Client, ns: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let api = dgds(client, ns);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Waits until every graph of `namespaces` is Ready; the ones that are not on timeout.
pub async fn wait_all_ready(
    client: &Client,
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<(Duration, Vec<String>)> {
    let started = Instant::now();
    loop {
        let mut unready = Vec::new();
        for ns in namespaces {
            match graphs(client, ns).await {
                Ok(list) => unready.extend(
                    list.iter()
                        .filter(|d| d.metadata.deletion_timestamp.is_none() && !is_ready(d))
                        .map(|d| {
                            let why = ready_condition(d)
                                .map(|(s, r, m)| format!("Ready={s} {r}: {m}"))
                                .unwrap_or_else(|| "no Ready condition yet".into());
                            format!("{ns}/{} ({why})", d.name_any())
                        }),
                ),
                Err(e) => unready.push(format!("{ns}: {e}")),
            }
        }
        if unready.is_empty() || started.elapsed() > timeout {
            return Ok((started.elapsed(), unready));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn delete_graph(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let api = dgds(client, ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the namespaces the suite created (best effort, not waited for).
pub async fn delete_namespace(client: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
}
