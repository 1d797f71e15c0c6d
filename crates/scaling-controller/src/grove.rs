//! The grove pathway: Grove creates a PodClique (single-node component) or a
//! PodCliqueScalingGroup (scaling-group component: multinode, inter-pod GPU memory service, or
//! forced) named `<pcs>-0-<component, lowercased>` in replica 0 of the graph's PodCliqueSet; a
//! member of a component group is carried by the group's PodCliqueScalingGroup
//! `<pcs>-0-<group, lowercased>` ([`grove_render::names::component_child`]).
//! Its replicas change only through its `/scale` subresource, never through the PodCliqueSet
//! template (Grove would roll the whole set).
//!
//! - [`target`] names the child (pure).
//! - [`GroveWorkloads::get`] reads it; a child Grove has not created yet is no workload (the
//!   adapter waits with `WorkloadNotFound`, it does not error: upstream's pain point of scale
//!   calls hitting `podcliques ... not found` right after the PodCliqueSet was written).
//! - [`GroveWorkloads::ensure`] patches `<kind>/<name>/scale` to the replicas; NotFound means
//!   the child is gone.
//!
//! This module is what the DGDSA controller calls on graphs whose provider record says `grove`
//! ([`crate::ScalingAdapterReconciler::with_served`] while Grove is served); the grove program must then leave the
//! replicas of components with `scalingAdapter` alone.

use std::sync::Arc;

use api::grove::{PodClique, PodCliqueScalingGroup};
use api::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use grove_render::names::{component_child, pcs_name};
use kit::{Reader, ReaderExt, Writer, WriterExt};
use kube::ResourceExt;

use crate::workload::{Scaled, Workload};

/// Kind of a single-node component's Grove child.
pub const POD_CLIQUE: &str = "PodClique";
/// Kind of a scaling-group component's Grove child.
pub const POD_CLIQUE_SCALING_GROUP: &str = "PodCliqueScalingGroup";

/// The kind and name of the Grove child that carries `component`'s replicas.
pub fn target(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> (&'static str, String) {
    let pcs = pcs_name(&dgd.name_any(), &dgd.spec);
    let child = component_child(&pcs, &dgd.spec, component);
    if child.scaling_group {
        (POD_CLIQUE_SCALING_GROUP, child.name)
    } else {
        (POD_CLIQUE, child.name)
    }
}

/// The Grove children of components: read and scale.
pub struct GroveWorkloads {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl GroveWorkloads {
    /// Reads Grove children with `reader`, scales them with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        GroveWorkloads { reader, writer }
    }

    /// The Grove child of `component`, if Grove has created it (zero or one workload).
    pub async fn get(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
    ) -> Result<Vec<Workload>, kit::Error> {
        let ns = dgd.namespace();
        let (kind, name) = target(dgd, component);
        let workload = if kind == POD_CLIQUE_SCALING_GROUP {
            self.reader
                .get::<PodCliqueScalingGroup>(ns.as_deref(), &name)
                .await?
                .filter(|g| g.metadata.deletion_timestamp.is_none())
                .map(|g| {
                    let status = g.status.unwrap_or_default();
                    Workload {
                        kind,
                        name: name.clone(),
                        replicas: Some(g.spec.replicas.unwrap_or(1)),
                        current: status.replicas.unwrap_or(0),
                        observed: status
                            .observed_generation
                            .is_some_and(|o| o >= g.metadata.generation.unwrap_or(0)),
                    }
                })
        } else {
            self.reader
                .get::<PodClique>(ns.as_deref(), &name)
                .await?
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(|c| {
                    let status = c.status.unwrap_or_default();
                    Workload {
                        kind,
                        name: name.clone(),
                        replicas: Some(c.spec.clique.replicas),
                        current: status.replicas.unwrap_or(0),
                        observed: status
                            .observed_generation
                            .is_some_and(|o| o >= c.metadata.generation.unwrap_or(0)),
                    }
                })
        };
        Ok(workload.into_iter().collect())
    }

    /// Scale the Grove child `workload` in `namespace` to `replicas` through its `/scale`
    /// subresource.
    pub async fn ensure(
        &self,
        namespace: Option<&str>,
        workload: &Workload,
        replicas: i32,
    ) -> Result<Scaled, kit::Error> {
        let result = if workload.kind == POD_CLIQUE_SCALING_GROUP {
            self.writer
                .scale::<PodCliqueScalingGroup>(namespace, &workload.name, replicas)
                .await
        } else {
            self.writer
                .scale::<PodClique>(namespace, &workload.name, replicas)
                .await
        };
        match result {
            Ok(applied) if applied.changed => Ok(Scaled::Changed),
            Ok(_) => Ok(Scaled::Unchanged),
            Err(e) if e.is_not_found() => Ok(Scaled::Gone),
            Err(e) => Err(e),
        }
    }
}
