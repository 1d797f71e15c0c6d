//! Image pull secrets discovered from the namespace's Docker registry credentials (upstream's
//! Docker secret index and its use in `GenerateBasePodSpec`).
//!
//! [`PullSecrets::index`] reads the Secrets of type `kubernetes.io/dockerconfigjson` (only that
//! type: `kubernetes.io/dockercfg` is not read) and files each under the host of every registry
//! in its `.dockerconfigjson` `auths` (`https://nvcr.io/v2/` → `nvcr.io`,
//! `my-registry.com:5005/team` → `my-registry.com:5005`); the names under a host are sorted and
//! deduplicated. A Secret whose `.dockerconfigjson` is missing or is not a JSON object with an
//! object `auths` is skipped and reported ([`Index::unreadable`]); upstream fails its whole
//! index refresh instead, so one broken Secret anywhere stops discovery for the cluster.
//!
//! [`apply`] (from [`crate::pod_spec`], after the user's sidecars and the `frontendSidecar`,
//! before the GPU memory service and failover) appends to the user's `imagePullSecrets` the
//! Secrets for the registry of every container's image, then every init container's, in that
//! order, each name once (the user's come first and are kept as written). The pod annotation
//! [`crate::DISABLE_IMAGE_PULL_SECRET_DISCOVERY`] `"true"` turns it off for the pod (the pod
//! template's annotations, with the graph's `spec.annotations` under them on the Grove pathway);
//! the user's own pull secrets stay.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{LocalObjectReference, PodSpec, Secret};
use serde_json::Value;

use crate::{DISABLE_IMAGE_PULL_SECRET_DISCOVERY, PodInput};

/// Secret type of Docker registry credentials (the only type discovery reads).
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The data key holding the Docker config.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// Image pull Secret names by registry host (sorted and deduplicated per host).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullSecrets {
    by_host: BTreeMap<String, Vec<String>>,
}

/// What [`PullSecrets::index`] made of a list of Secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    /// The pull secrets.
    pub pull_secrets: PullSecrets,
    /// Docker config Secrets that could not be read (skipped), by name.
    pub unreadable: Vec<String>,
}

impl PullSecrets {
    /// Index the Docker config Secrets among `secrets` (one namespace's).
    pub fn index(secrets: &[Secret]) -> Index {
        let mut by_host: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut unreadable = Vec::new();
        for secret in secrets {
            if secret.type_.as_deref() != Some(DOCKER_CONFIG_JSON) {
                continue;
            }
            let name = secret.metadata.name.clone().unwrap_or_default();
            let Some(registries) = registries(secret) else {
                unreadable.push(name);
                continue;
            };
            for registry in registries {
                by_host
                    .entry(host(&registry))
                    .or_default()
                    .insert(name.clone());
            }
        }
        unreadable.sort();
        Index {
            pull_secrets: by_host
                .into_iter()
                .map(|(host, names)| (host, names.into_iter().collect()))
                .collect(),
            unreadable,
        }
    }

    /// The Secret names for the registry of `image` ([`registry_host`]).
    pub fn for_image(&self, image: &str) -> &[String] {
        self.by_host
            .get(&registry_host(image))
            .map_or(&[], Vec::as_slice)
    }

    /// No Secret is known.
    pub fn is_empty(&self) -> bool {
        self.by_host.is_empty()
    }
}

impl FromIterator<(String, Vec<String>)> for PullSecrets {
    /// Pull secrets from `(registry host, names)` pairs (names sorted and deduplicated).
    fn from_iter<I: IntoIterator<Item = (String, Vec<String>)>>(iter: I) -> Self {
        let mut by_host: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (host, names) in iter {
            by_host.entry(host).or_default().extend(names);
        }
        PullSecrets {
            by_host: by_host
                .into_iter()
                .filter(|(_, names)| !names.is_empty())
                .map(|(host, names)| (host, names.into_iter().collect()))
                .collect(),
        }
    }
}

/// The registries (keys of `auths`) of a Docker config Secret; `None` when it cannot be read.
fn registries(secret: &Secret) -> Option<Vec<String>> {
    let data = secret.data.as_ref()?.get(DOCKER_CONFIG_JSON_KEY)?;
    let config: Value = serde_json::from_slice(&data.0).ok()?;
    if config.is_null() {
        return Some(Vec::new());
    }
    match config.as_object()?.get("auths") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(auths) => Some(auths.as_object()?.keys().cloned().collect()),
    }
}

/// The host of a registry key of `auths` (`https://nvcr.io/v2/` → `nvcr.io`).
fn host(registry: &str) -> String {
    let rest = registry
        .split_once("://")
        .map_or(registry, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The registry host of an image reference (`nvcr.io/nvidia/x:1` → `nvcr.io`; no registry
/// part → `docker.io`), as image pull secrets are keyed.
pub fn registry_host(image: &str) -> String {
    let image = image
        .split_once("://")
        .map_or(image, |(_, rest)| rest)
        .trim();
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

/// Append the discovered pull secrets of the pod's images to `spec` (see the module docs).
pub(crate) fn apply(spec: &mut PodSpec, input: &PodInput<'_>) {
    let disabled = input
        .annotations
        .get(DISABLE_IMAGE_PULL_SECRET_DISCOVERY)
        .map(String::as_str)
        == Some("true");
    if disabled || input.pull_secrets.is_empty() {
        return;
    }
    let discovered: Vec<&String> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.image.as_deref())
        .filter(|image| !image.is_empty())
        .flat_map(|image| input.pull_secrets.for_image(image))
        .collect();
    for name in discovered {
        let refs = spec.image_pull_secrets.get_or_insert_with(Vec::new);
        if !refs.iter().any(|r| &r.name == name) {
            refs.push(LocalObjectReference { name: name.clone() });
        }
    }
}
