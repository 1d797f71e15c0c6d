//! Resolution: the only step of the workload reconciler that reads the cluster for rendering.
//! It returns exactly what [`grove_render::render`] needs beyond the graph:
//!
//! | input | read |
//! | --- | --- |
//! | the existing PodCliqueSet | `grove.io/v1alpha1` PodCliqueSet `<pcs>` in the graph's namespace |
//! | ClusterTopology domains | the ClusterTopologyBinding named by `spec.experimental.kvTransferPolicy.clusterTopologyName` (only then); it must exist and contain the policy's domain |
//! | image pull secrets | the namespace's Docker config Secrets, only with discovery on ([`reconcilers::pull_secrets`]; a failed list fails the step rather than render the pods without them) |
//! | components waiting for a checkpoint | from the checkpoint infos the shared checkpoint step resolved: `WaitForCheckpoint` and not ready |
//! | each checkpointed component's checkpoint, as its pods know it | from the same infos (`reconcilers::checkpoints::pod_checkpoints`): the restore-candidate annotations of `Immediate` components, the restore of Ready `WaitForCheckpoint` ones with the storage the snapshot agent's DaemonSet mounts (`resolve_restores`; none: the step fails, retried) |

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::grove::{ClusterTopologyBinding, PodCliqueSet};
use grove_render::Checkpoint;
use grove_render::pod::PullSecrets;
use kit::{Reader, ReaderExt};
use kube::ResourceExt;
use reconcilers::checkpoints::{CheckpointInfos, pod_checkpoints, resolve_restores};
use reconcilers::pull_secrets::Discovery;

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
    /// The namespace's Secrets could not be listed for image pull secret discovery.
    #[error("list the Docker config Secrets for image pull secrets: {0}")]
    PullSecrets(#[source] kit::Error),
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
    /// The namespace's image pull secrets by registry host (empty with discovery off).
    pub pull_secrets: PullSecrets,
    /// Components waiting for a checkpoint.
    pub waiting_for_checkpoint: BTreeSet<String>,
    /// What each checkpointed component's pods know of its checkpoint.
    pub checkpoints: BTreeMap<String, Checkpoint>,
}

/// The resolver.
pub struct Resolver {
    reader: Arc<dyn Reader>,
    pull_secrets: Discovery,
}

impl Resolver {
    /// A resolver reading with `reader`; image pull secrets are discovered only with
    /// [`Resolver::with_pull_secret_discovery`].
    pub fn new(reader: Arc<dyn Reader>) -> Self {
        Resolver {
            pull_secrets: Discovery::new(reader.clone(), false),
            reader,
        }
    }

    /// Discover the namespace's Docker config Secrets for image pull secrets (upstream's
    /// behaviour; see [`reconcilers::pull_secrets`] for what it needs).
    pub fn with_pull_secret_discovery(mut self, on: bool) -> Self {
        self.pull_secrets = Discovery::new(self.reader.clone(), on);
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
            pull_secrets: self
                .pull_secrets
                .resolve(ns.as_deref())
                .await
                .map_err(Error::PullSecrets)?,
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
