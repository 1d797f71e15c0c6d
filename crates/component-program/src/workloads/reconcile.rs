//! [`Workloads::reconcile`]: observe the graph's DCDs, converge the desired ones, delete the
//! ones no longer wanted (keeping the generations a rolling update retains).

use std::collections::BTreeSet;
use std::sync::Arc;

use api::labels;
use api::{DynamoComponentDeployment, DynamoGraphDeployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::child::{Change, EnsureError, Ownership, is_controlled_by};
use kit::{Deleted, Event, Preconditions, Reader, Writer, WriterExt};
use kube::ResourceExt;
use reconcilers::checkpoints::CheckpointInfos;
use reconcilers::child::Listed;
use reconcilers::naming;
use reconcilers::restart::RestartStamps;
use reconcilers::rollout::WorkerGeneration;

use super::{
    CHILDREN, EVENT_DCD_CREATED, EVENT_DCD_DELETED, EVENT_DCD_UPDATED, Error, Readiness, Report,
    render,
};

/// The workloads step.
pub struct Workloads {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl Workloads {
    /// A workloads step reading DCDs with `reader` and writing them with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Workloads { reader, writer }
    }

    /// Converge the DCDs of `dgd` at worker `generation`, stamping `restart`, holding components
    /// that wait for a checkpoint at zero replicas. Returns the per-component status and
    /// readiness, and the mutation events (also those of the writes made before a failure).
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        generation: &WorkerGeneration,
        restart: Option<&RestartStamps>,
        checkpoints: &CheckpointInfos,
    ) -> kit::Step<Report, Error> {
        let mut events = Vec::new();
        let result = self
            .converge(dgd, generation, restart, checkpoints, &mut events)
            .await;
        kit::Step::new(result, events)
    }

    async fn converge(
        &self,
        dgd: &DynamoGraphDeployment,
        generation: &WorkerGeneration,
        restart: Option<&RestartStamps>,
        checkpoints: &CheckpointInfos,
        events: &mut Vec<Event>,
    ) -> Result<Report, Error> {
        let mut live = Listed::<DynamoComponentDeployment>::of(&*self.reader, dgd)
            .await
            .map_err(Error::List)?;
        let desired = render(dgd, generation, restart, checkpoints, live.rest())?;
        let desired_names: BTreeSet<String> = desired.iter().map(|d| d.name_any()).collect();

        let mut report = Report::default();
        let mut observed = Vec::with_capacity(desired.len());
        for dcd in &desired {
            observed.push(
                live.take(&*self.reader, &dcd.name_any())
                    .await
                    .map_err(Error::List)?,
            );
        }
        // The components do not depend on each other's answers: their applies are sent
        // together, and the events of every write that happened are kept, also when one failed.
        let ensured = futures::future::join_all(desired.iter().zip(observed).map(
            |(dcd, observed)| async move {
                let mut own = Vec::new();
                let current = self.ensure(dgd, dcd, observed, &mut own).await;
                (current, own)
            },
        ))
        .await;
        let mut currents = Vec::with_capacity(ensured.len());
        for (current, own) in ensured {
            events.extend(own);
            currents.push(current);
        }
        for (dcd, current) in desired.iter().zip(currents) {
            let name = dcd.name_any();
            let component = dcd.spec.component.name.clone();
            let current = current?;
            if let Some(status) = current.status.as_ref().and_then(|s| s.component.clone()) {
                report.components.insert(component.clone(), status);
            }
            report.readiness.push(Readiness {
                resource: name,
                component,
                not_ready: current.is_ready().err(),
            });
        }
        report.readiness.sort_by(|a, b| a.resource.cmp(&b.resource));

        for (name, dcd) in live.rest() {
            if desired_names.contains(name) || !controlled_by(&dcd.metadata, dgd) {
                continue;
            }
            if retained(dgd, generation, dcd) {
                let component = dcd.spec.component.name.clone();
                if let (Some(entry), Some(old)) = (
                    report.components.get_mut(&component),
                    dcd.status.as_ref().and_then(|s| s.component.as_ref()),
                ) {
                    for n in &old.component_names {
                        if !entry.component_names.contains(n) {
                            entry.component_names.push(n.clone());
                        }
                    }
                }
                continue;
            }
            self.delete(dcd, events).await?;
        }
        Ok(report)
    }

    /// Apply `desired` unless `observed` already matches; returns the DCD as it now is.
    async fn ensure(
        &self,
        dgd: &DynamoGraphDeployment,
        desired: &DynamoComponentDeployment,
        observed: Option<DynamoComponentDeployment>,
        events: &mut Vec<Event>,
    ) -> Result<DynamoComponentDeployment, Error> {
        let name = desired.name_any();
        let uid = dgd.metadata.uid.as_deref().unwrap_or_default();
        let ensured = CHILDREN
            .ensure_observed(
                self.writer.as_ref(),
                desired,
                observed.as_ref(),
                Ownership::Controlled(uid),
            )
            .await
            .map_err(|error| match error {
                EnsureError::Conflict(conflict) => Error::OwnershipConflict {
                    name: name.clone(),
                    owner: conflict.owner(),
                },
                EnsureError::Apply(source) => Error::Apply {
                    name: name.clone(),
                    source,
                },
                EnsureError::Read(source) => Error::List(source),
                EnsureError::Convert(source) => Error::Convert {
                    name: name.clone(),
                    source,
                },
            })?;
        let key = kit::object::key(desired.namespace().as_deref(), &name);
        match ensured.change {
            Change::Created => {
                tracing::info!(dcd = %key, "created DynamoComponentDeployment");
                events.push(
                    Event::normal(
                        EVENT_DCD_CREATED,
                        format!("Created DynamoComponentDeployment {key}"),
                    )
                    .mutation("Created", "DynamoComponentDeployment", &name),
                );
            }
            Change::Updated => {
                tracing::info!(dcd = %key, "restored DynamoComponentDeployment");
                events.push(
                    Event::normal(
                        EVENT_DCD_UPDATED,
                        format!("Updated DynamoComponentDeployment {key}"),
                    )
                    .mutation("Updated", "DynamoComponentDeployment", &name),
                );
            }
            Change::Unchanged => {}
        }
        Ok(ensured.object)
    }

    async fn delete(
        &self,
        dcd: &DynamoComponentDeployment,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        if dcd.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let name = dcd.name_any();
        let preconditions = Preconditions {
            uid: dcd.metadata.uid.clone(),
            resource_version: None,
        };
        match self
            .writer
            .delete::<DynamoComponentDeployment>(
                dcd.namespace().as_deref(),
                &name,
                &preconditions,
                None,
            )
            .await
        {
            Ok(Deleted::NotFound) => Ok(()),
            Ok(_) => {
                let key = kit::object::key(dcd.namespace().as_deref(), &name);
                tracing::info!(dcd = %key, "deleted DynamoComponentDeployment");
                events.push(Event::normal(
                    EVENT_DCD_DELETED,
                    format!("Deleted DynamoComponentDeployment {key}"),
                ));
                Ok(())
            }
            // Replaced by another object of that name since it was read: not ours.
            Err(e) if e.is_conflict() => Ok(()),
            Err(source) => Err(Error::Delete { name, source }),
        }
    }
}

/// Whether a non-desired DCD is a worker DCD of a generation the rollout keeps.
fn retained(
    dgd: &DynamoGraphDeployment,
    generation: &WorkerGeneration,
    dcd: &DynamoComponentDeployment,
) -> bool {
    let is_current_worker = dgd
        .spec
        .component(&dcd.spec.component.name)
        .is_some_and(|c| naming::is_worker(c.r#type));
    let hash = dcd.labels().get(labels::DYNAMO_WORKER_HASH);
    is_current_worker && hash.is_some_and(|h| generation.retained.contains(h))
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    dgd.metadata
        .uid
        .as_deref()
        .is_some_and(|uid| is_controlled_by(meta, uid))
}
