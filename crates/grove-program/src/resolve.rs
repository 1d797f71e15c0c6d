//! Resolution: the only step of the workload reconciler that reads the cluster for rendering.
//! It returns exactly what [`grove_render::render`] needs beyond the graph:
//!
//! | input | read |
//! | --- | --- |
//! | the existing PodCliqueSet | `grove.io/v1alpha1` PodCliqueSet `<pcs>` in the graph's namespace |
//! | ClusterTopology domains | the ClusterTopologyBinding named by `spec.experimental.kvTransferPolicy.clusterTopologyName` (only then); it must exist and contain the policy's domain |
//! | image pull secrets | `kubernetes.io/dockerconfigjson` Secrets of the namespace, by registry host of their `auths` (a failed list is logged and means none, as upstream) |
//! | components waiting for a checkpoint | from the checkpoint infos the shared checkpoint step resolved: `WaitForCheckpoint` and not ready |
//! | each checkpointed component's checkpoint, as its pods know it | from the same infos (`reconcilers::checkpoints::pod_checkpoints`): the restore-candidate annotations of `Immediate` components, the restore of Ready `WaitForCheckpoint` ones with the storage the snapshot agent's DaemonSet mounts (`resolve_restores`; none: the step fails, retried) |

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::grove::{ClusterTopologyBinding, PodCliqueSet};
use grove_render::Checkpoint;
use k8s_openapi::api::core::v1::Secret;
use kit::{Reader, ReaderExt, Selector};
use kube::ResourceExt;
use reconcilers::checkpoints::{CheckpointInfos, pod_checkpoints, resolve_restores};
use serde_json::Value;

/// Secret type of Docker registry credentials.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

/// Why resolution failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The existing PodCliqueSet could not be read.
    #[error("get PodCliqueSet {name}: {source}")]
    PodCliqueSet {
        /// Its name.
        name: String,
        /// The read error.
        #[source]
        source: kit::Error,
    },
    /// The ClusterTopologyBinding could not be read.
    #[error("get ClusterTopologyBinding {name}: {source}")]
    Topology {
        /// Its name.
        name: String,
        /// The read error.
        #[source]
        source: kit::Error,
    },
    /// The restore of a Ready checkpoint could not be resolved (its storage).
    #[error("failed to resolve checkpoint restore: {0}")]
    Checkpoint(#[source] reconcilers::Error),
    /// The ClusterTopologyBinding does not exist (yet).
    #[error(
        "spec.experimental.kvTransferPolicy.clusterTopologyName {0:?} references a ClusterTopologyBinding that was not found"
    )]
    TopologyNotFound(String),
    /// The policy's domain is not a level of the ClusterTopologyBinding.
    #[error(
        "spec.experimental.kvTransferPolicy.domain {domain:?} does not exist in ClusterTopologyBinding {name:?}; available domains: {available:?}"
    )]
    UnknownDomain {
        /// The domain asked for.
        domain: String,
        /// The binding.
        name: String,
        /// Its domains.
        available: Vec<String>,
    },
}

impl Error {
    /// Only a change of the graph can fix it.
    pub fn awaits_change(&self) -> bool {
        matches!(self, Error::UnknownDomain { .. })
    }
}

/// What was resolved for rendering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// The PodCliqueSet as it exists.
    pub existing: Option<PodCliqueSet>,
    /// ClusterTopology domains for the KV transfer policy (empty when it names none).
    pub topology_domains: Vec<String>,
    /// Image pull secret names by registry host, sorted and deduplicated.
    pub pull_secrets: BTreeMap<String, Vec<String>>,
    /// Components waiting for a checkpoint.
    pub waiting_for_checkpoint: BTreeSet<String>,
    /// What each checkpointed component's pods know of its checkpoint.
    pub checkpoints: BTreeMap<String, Checkpoint>,
}

/// The resolver.
pub struct Resolver {
    reader: Arc<dyn Reader>,
    discover_pull_secrets: bool,
}

impl Resolver {
    /// A resolver reading with `reader`; image pull secrets are discovered only with
    /// [`Resolver::with_pull_secret_discovery`].
    pub fn new(reader: Arc<dyn Reader>) -> Self {
        Resolver {
            reader,
            discover_pull_secrets: false,
        }
    }

    /// Discover Docker registry Secrets of the namespace for image pull secrets (upstream's
    /// behaviour). It lists Secrets, which the least-privilege RBAC in `deploy/` does not grant,
    /// so it is off unless the operator is configured for it.
    pub fn with_pull_secret_discovery(mut self, on: bool) -> Self {
        self.discover_pull_secrets = on;
        self
    }

    /// Resolve the rendering inputs of `dgd`, whose PodCliqueSet is named `pcs_name`.
    pub async fn resolve(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs_name: &str,
        checkpoints: &CheckpointInfos,
    ) -> Result<Resolved, Error> {
        let ns = dgd.namespace();
        let existing = self
            .reader
            .get::<PodCliqueSet>(ns.as_deref(), pcs_name)
            .await
            .map_err(|source| Error::PodCliqueSet {
                name: pcs_name.to_string(),
                source,
            })?;
        Ok(Resolved {
            existing,
            topology_domains: self.topology_domains(dgd).await?,
            pull_secrets: self.pull_secrets(ns.as_deref()).await,
            waiting_for_checkpoint: waiting_for_checkpoint(checkpoints),
            checkpoints: self.pod_checkpoints(dgd, checkpoints).await?,
        })
    }

    /// What each checkpointed component's pods know of its checkpoint, the restore of Ready
    /// `WaitForCheckpoint` checkpoints resolved (the snapshot agent's storage).
    async fn pod_checkpoints(
        &self,
        dgd: &DynamoGraphDeployment,
        checkpoints: &CheckpointInfos,
    ) -> Result<BTreeMap<String, Checkpoint>, Error> {
        let mut infos = checkpoints.clone();
        resolve_restores(
            self.reader.as_ref(),
            &dgd.namespace().unwrap_or_default(),
            &mut infos,
        )
        .await
        .map_err(Error::Checkpoint)?;
        Ok(pod_checkpoints(dgd, &infos))
    }

    async fn topology_domains(&self, dgd: &DynamoGraphDeployment) -> Result<Vec<String>, Error> {
        let Some(policy) = dgd
            .spec
            .experimental
            .as_ref()
            .and_then(|e| e.kv_transfer_policy.as_ref())
        else {
            return Ok(Vec::new());
        };
        let Some(name) = policy
            .cluster_topology_name
            .as_deref()
            .filter(|n| !n.is_empty())
        else {
            return Ok(Vec::new());
        };
        let binding = self
            .reader
            .get::<ClusterTopologyBinding>(None, name)
            .await
            .map_err(|source| Error::Topology {
                name: name.to_string(),
                source,
            })?
            .ok_or_else(|| Error::TopologyNotFound(name.to_string()))?;
        let domains: Vec<String> = binding
            .spec
            .levels
            .iter()
            .map(|l| l.domain.clone())
            .collect();
        if !domains.contains(&policy.domain) {
            return Err(Error::UnknownDomain {
                domain: policy.domain.clone(),
                name: name.to_string(),
                available: domains,
            });
        }
        Ok(domains)
    }

    async fn pull_secrets(&self, namespace: Option<&str>) -> BTreeMap<String, Vec<String>> {
        if !self.discover_pull_secrets {
            return BTreeMap::new();
        }
        let secrets: Vec<Secret> = match self.reader.list(namespace, &Selector::default()).await {
            Ok(s) => s,
            Err(error) => {
                tracing::warn!(namespace = ?namespace, %error, "image pull secret discovery: listing Secrets failed; rendering without discovered pull secrets");
                return BTreeMap::new();
            }
        };
        pull_secrets(&secrets)
    }
}

/// Registry host → names of the Docker config Secrets with credentials for it.
pub fn pull_secrets(secrets: &[Secret]) -> BTreeMap<String, Vec<String>> {
    let mut by_host: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for secret in secrets {
        if secret.type_.as_deref() != Some(DOCKER_CONFIG_JSON) {
            continue;
        }
        let Some(data) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
        else {
            continue;
        };
        let Ok(config) = serde_json::from_slice::<Value>(&data.0) else {
            tracing::warn!(secret = %secret.name_any(), "image pull secret discovery: unreadable .dockerconfigjson; skipped");
            continue;
        };
        let Some(auths) = config.get("auths").and_then(Value::as_object) else {
            continue;
        };
        for registry in auths.keys() {
            by_host
                .entry(host(registry))
                .or_default()
                .insert(secret.name_any());
        }
    }
    by_host
        .into_iter()
        .map(|(host, names)| (host, names.into_iter().collect()))
        .collect()
}

/// The host of a registry key (`https://nvcr.io/v2/` → `nvcr.io`).
fn host(registry: &str) -> String {
    let rest = registry
        .split_once("://")
        .map_or(registry, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The components whose checkpoint startup policy is `WaitForCheckpoint` and whose checkpoint
/// is not ready.
pub fn waiting_for_checkpoint(checkpoints: &CheckpointInfos) -> BTreeSet<String> {
    checkpoints
        .iter()
        .filter(|(_, i)| i.waits())
        .map(|(name, _)| name.clone())
        .collect()
}
