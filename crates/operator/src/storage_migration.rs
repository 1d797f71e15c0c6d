//! Storage-version migration of the CRDs served in two versions (graphs, DCDs, scaling
//! adapters): objects an earlier operator stored as v1alpha1 are stored again as v1beta1, then
//! the CRD's `status.storedVersions` is set to v1beta1 alone, so that a later release can stop
//! serving v1alpha1 without losing them.
//!
//! A CRD whose `storedVersions` is already its storage version alone costs one read. Otherwise
//! every object of the kind is listed (in pages) and written again with an empty merge patch:
//! the apiserver encodes it in the storage version, which differs from the bytes it holds, so
//! it is rewritten (no field changes, no new `generation`). Reading an object stored as
//! v1alpha1 goes through the conversion webhook, so the migration runs once the webhook serves;
//! it retries until it does. Idempotent: concurrent replicas, or a restart halfway, only repeat
//! writes that change nothing.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

/// How many objects one list page holds.
const PAGE: u32 = 500;
/// How long the migration retries while the conversion webhook does not answer yet.
const RETRY_FOR: Duration = Duration::from_secs(300);

/// Migrates every CRD served in two versions, retrying while reads fail (the webhook starting).
pub async fn run(client: Client) {
    let names: Vec<String> = api::crds::converted_crds(&Default::default())
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    let mut wait = Duration::from_millis(500);
    loop {
        match migrate_all(client.clone(), &names).await {
            Ok(()) => return,
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = format!("{error:#}"), "storage migration: retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "storage migration failed; objects stay readable through the conversion webhook, and the next start tries again"
                );
                return;
            }
        }
    }
}

/// One pass over the CRDs `names` (those served in two versions).
pub async fn migrate_all(client: Client, names: &[String]) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let Some(live) = crds.get_opt(name).await? else {
            continue;
        };
        migrate(&crds, &client, &live)
            .await
            .with_context(|| format!("migrating the stored objects of {name}"))?;
    }
    Ok(())
}

/// Stores every object of `crd` in its storage version, then records that version alone.
async fn migrate(
    crds: &Api<CustomResourceDefinition>,
    client: &Client,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<()> {
    let storage = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .context("the CRD has no storage version")?;
    let stored = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored.iter().all(|v| *v == storage) {
        return Ok(());
    }
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: storage.clone(),
        api_version: format!("{}/{storage}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut params = ListParams::default().limit(PAGE);
    let mut rewritten = 0usize;
    let empty = serde_json::json!({});
    loop {
        let page = all.list_metadata(&params).await?;
        for object in &page.items {
            let ns = object.namespace().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            match api
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&empty),
                )
                .await
            {
                Ok(_) => rewritten += 1,
                // Deleted since the list: nothing left to migrate.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let status = serde_json::json!({ "status": { "storedVersions": [storage] } });
    crds.patch_status(
        &crd.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await?;
    tracing::info!(crd = %crd.name_any(), from = ?stored, to = %storage, objects = rewritten, "stored objects migrated");
    Ok(())
}
