//! The component pathway: a component's DynamoComponentDeployments (one per worker generation
//! during a rolling update) carry its replicas.
//!
//! - [`ComponentWorkloads::get`] lists the DCDs labelled with the graph and the component
//!   (`nvidia.com/dynamo-graph-deployment-name`, `nvidia.com/dynamo-component`) that the graph
//!   controls and that are not being deleted.
//! - [`ComponentWorkloads::ensure`] server-side applies `{spec: {replicas}}` and nothing else
//!   (`reconcilers::rollout::apply_replicas`, which the graph's rollout uses for old worker
//!   generations too), under [`crate::FIELD_MANAGER`], forced: the adapter takes the field from
//!   whoever set it.
//!   The body has no other field, so the DCD's every other field stays with the graph. A DCD
//!   deleted since it was read cannot be recreated by this apply (the API server rejects a DCD
//!   without `spec.name`): that answer, like NotFound, means the workload is gone.

use std::sync::Arc;

use api::labels;
use api::{DynamoComponentDeployment, DynamoGraphDeployment};
use kit::{Reader, ReaderExt, Selector, Writer};
use kube::ResourceExt;

use crate::workload::{Scaled, Workload};

/// Kind name of the component pathway's workloads.
pub const KIND: &str = "DynamoComponentDeployment";

/// The DCDs of components: read and scale.
pub struct ComponentWorkloads {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl ComponentWorkloads {
    /// Reads DCDs with `reader`, writes their replicas with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        ComponentWorkloads { reader, writer }
    }

    /// The DCDs of `component` that `dgd` controls, sorted by name.
    pub async fn get(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &str,
    ) -> Result<Vec<Workload>, kit::Error> {
        let selector = Selector::from_iter([
            (
                labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                dgd.name_any(),
            ),
            (labels::DYNAMO_COMPONENT.to_string(), component.to_string()),
        ]);
        let dcds: Vec<DynamoComponentDeployment> = self
            .reader
            .list(dgd.namespace().as_deref(), &selector)
            .await?;
        let uid = dgd.uid();
        let mut workloads: Vec<Workload> = dcds
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .filter(|d| {
                d.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
            })
            .map(workload)
            .collect();
        workloads.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(workloads)
    }

    /// Set `spec.replicas` of the DCD `workload` in `namespace` to `replicas`.
    pub async fn ensure(
        &self,
        namespace: Option<&str>,
        workload: &Workload,
        replicas: i32,
    ) -> Result<Scaled, kit::Error> {
        match reconcilers::rollout::apply_replicas(
            self.writer.as_ref(),
            namespace,
            &workload.name,
            replicas,
            crate::FIELD_MANAGER,
        )
        .await
        {
            Ok(applied) if applied.changed => Ok(Scaled::Changed),
            Ok(_) => Ok(Scaled::Unchanged),
            Err(e) if e.is_not_found() => Ok(Scaled::Gone),
            Err(e) => Err(e),
        }
    }
}

/// The adapter's view of one DCD.
pub fn workload(dcd: &DynamoComponentDeployment) -> Workload {
    let status = dcd.status.as_ref();
    let generation = dcd.metadata.generation.unwrap_or(0);
    Workload {
        kind: KIND,
        name: dcd.name_any(),
        replicas: dcd.spec.component.replicas,
        current: status
            .and_then(|s| s.component.as_ref())
            .map_or(0, |c| c.replicas),
        observed: status
            .and_then(|s| s.observed_generation)
            .is_some_and(|o| o >= generation),
    }
}
