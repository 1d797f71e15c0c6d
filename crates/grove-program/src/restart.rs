//! Restarts on the grove pathway: the state machine of [`reconcilers::restart`] (sequential or
//! parallel, `status.restart`), with Grove's progress. Grove has no managed rolling updates, so
//! a restart is never superseded here.
//!
//! A component in progress has finished restarting when all hold:
//! - its clique in the existing PodCliqueSet carries `nvidia.com/restartAt` = the restart id
//!   (upstream only checks readiness, which old pods satisfy before the stamp is even written);
//! - Grove observed the PodCliqueSet's latest generation;
//! - its PodClique (or PodCliqueScalingGroup) is ready ([`crate::readiness`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use api::common::RestartStatus;
use api::grove::{PodClique, PodCliqueScalingGroup, PodCliqueSet};
use api::labels;
use api::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use grove_render::RestartStamps;
use grove_render::compat::clique_of;
use grove_render::names::component_child;
use kit::{Reader, ReaderExt};
use kube::ResourceExt;
use reconcilers::restart::{in_progress, next_status, stamps};

use crate::readiness;

/// Why the restart step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read failed.
    #[error(transparent)]
    Read(#[from] kit::error::ReadFailed),
}

/// What the restart step decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// The next `status.restart`.
    pub status: Option<RestartStatus>,
    /// What rendering stamps.
    pub stamps: Option<RestartStamps>,
}

/// The restart step. Reads the PodCliqueSet and the children of components being restarted.
pub struct GroveRestart {
    reader: Arc<dyn Reader>,
}

impl GroveRestart {
    /// A restart step reading with `reader`.
    pub fn new(reader: Arc<dyn Reader>) -> Self {
        GroveRestart { reader }
    }

    /// The next restart status of `dgd` (its `status.restart` is the previous one), whose
    /// PodCliqueSet is `pcs_name`.
    pub async fn resolve(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs_name: &str,
    ) -> Result<Resolved, Error> {
        let previous = dgd.status.as_ref().and_then(|s| s.restart.as_ref());
        let mut finished = BTreeSet::new();
        if let Some((id, in_progress)) = in_progress(dgd) {
            let ns = dgd.namespace();
            let pcs: Option<PodCliqueSet> = self
                .reader
                .get(ns.as_deref(), pcs_name)
                .await
                .map_err(|source| {
                    Error::Read(kit::error::ReadFailed {
                        kind: "PodCliqueSet",
                        name: pcs_name.to_string(),
                        source,
                    })
                })?;
            for component in in_progress {
                let Some(spec) = dgd.spec.component(component) else {
                    // A component that left the graph has nothing left to restart.
                    finished.insert(component.clone());
                    continue;
                };
                if self
                    .restarted(dgd, pcs.as_ref(), pcs_name, spec, id)
                    .await?
                {
                    finished.insert(component.clone());
                }
            }
        }
        let status = next_status(dgd, previous, false, &finished);
        let stamps = stamps(dgd, status.as_ref()).map(|s| RestartStamps {
            value: s.value,
            components: s.components,
        });
        Ok(Resolved { status, stamps })
    }

    async fn restarted(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs: Option<&PodCliqueSet>,
        pcs_name: &str,
        component: &DynamoComponentDeploymentSharedSpec,
        id: &str,
    ) -> Result<bool, Error> {
        let Some(pcs) = pcs else {
            return Ok(false);
        };
        let stamped = clique_of(pcs, &component.name)
            .and_then(|c| c.annotations.get(labels::RESTART_AT))
            .is_some_and(|v| v == id);
        let observed = pcs
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .is_some_and(|o| o >= pcs.metadata.generation.unwrap_or_default());
        if !stamped || !observed {
            return Ok(false);
        }
        let ns = dgd.namespace();
        let child = component_child(pcs_name, &dgd.spec, component);
        let name = child.name;
        let ready = if child.scaling_group {
            let g: Option<PodCliqueScalingGroup> = self
                .reader
                .get(ns.as_deref(), &name)
                .await
                .map_err(|source| {
                    Error::Read(kit::error::ReadFailed {
                        kind: "PodCliqueScalingGroup",
                        name: name.clone(),
                        source,
                    })
                })?;
            readiness::group(&name, g.as_ref()).ready
        } else {
            let c: Option<PodClique> =
                self.reader
                    .get(ns.as_deref(), &name)
                    .await
                    .map_err(|source| {
                        Error::Read(kit::error::ReadFailed {
                            kind: "PodClique",
                            name: name.clone(),
                            source,
                        })
                    })?;
            readiness::clique(&name, c.as_ref()).ready
        };
        Ok(ready)
    }
}
