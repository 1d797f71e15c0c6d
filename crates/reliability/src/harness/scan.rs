//! Panics and secret values in logs, Events and statuses.

use std::collections::BTreeSet;

use bench::cluster::dgd_resource;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

/// Log lines that show a panic, and every secret value found in `text`.
pub fn scan_text(text: &str, secrets: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let panics = text
        .lines()
        .filter(|l| l.contains("panicked at") || l.contains("stack backtrace"))
        .map(|l| l.chars().take(300).collect())
        .collect();
    let leaks = secrets
        .iter()
        .filter(|s| text.contains(s.as_str()))
        .map(|s| format!("{}…", &s[..s.len().min(8)]))
        .collect();
    (panics, leaks)
}

/// Every Event in the cluster (both APIs) as text, for the secret scan.
pub async fn events_text(client: &Client) -> anyhow::Result<String> {
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let new: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let mut text = serde_json::to_string(&core.list(&ListParams::default()).await?.items)?;
    text.push_str(&serde_json::to_string(
        &new.list(&ListParams::default()).await?.items,
    )?);
    Ok(text)
}

/// Status of every object the operator writes status to (graphs, components, checkpoints), as
/// text: a secret in a condition message would be a leak too.
pub async fn statuses_text(client: &Client) -> anyhow::Result<String> {
    let mut text = String::new();
    for ar in [
        dgd_resource("v1beta1"),
        ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        ApiResource::erase::<api::DynamoCheckpoint>(&()),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list(&ListParams::default()).await {
            for item in list.items {
                text.push_str(&item.data["status"].to_string());
            }
        }
    }
    Ok(text)
}
