//! The top level of the DGDSA controller: resolve, scale, report.

use std::sync::Arc;

use api::{
    DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment,
    DynamoGraphDeploymentScalingAdapter, DynamoGraphDeploymentScalingAdapterStatus,
};
use kit::conditions::{self, READY, Status};
use kit::object::key;
use kit::{OrFail, Outcome, Reader, ReaderExt, Reconciled, Writer};
use kube::ResourceExt;
use reconcilers::naming;

use crate::component::ComponentWorkloads;
use crate::grove::GroveWorkloads;
use crate::resolve::{Pathway, Resolution, resolve};
use crate::workload::{Scaled, Workload};
use crate::{
    EVENT_SCALED, REASON_READ_FAILED, REASON_SCALE_FAILED, REASON_SCALED, REASON_SCALING,
    REASON_WORKLOAD_NOT_FOUND,
};
use api::grove::PodCliqueSet;
use kit::served::Served;

type StatusOf = DynamoGraphDeploymentScalingAdapterStatus;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read failed.
    #[error(transparent)]
    Read(#[from] kit::error::ReadFailed),
    /// Writing a workload's replicas failed.
    #[error(transparent)]
    Scale(#[from] kit::error::ScaleFailed),
}

impl Error {
    /// The `Ready` reason this error is reported with.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Read(_) => REASON_READ_FAILED,
            Error::Scale(_) => REASON_SCALE_FAILED,
        }
    }
}

/// Reconciles one DynamoGraphDeploymentScalingAdapter: propagates `spec.replicas` to the
/// workloads of its component and returns the adapter's complete status. It never writes the
/// status itself.
pub struct ScalingAdapterReconciler {
    reader: Arc<dyn Reader>,
    components: ComponentWorkloads,
    grove: GroveWorkloads,
    /// Grove's workloads are scaled while this set serves PodCliqueSet.
    served: Served,
}

impl ScalingAdapterReconciler {
    /// A reconciler reading graphs and workloads with `reader` and writing replicas with
    /// `writer`. Graphs on the grove pathway wait with `WorkloadProviderUnavailable` unless the
    /// set given to [`ScalingAdapterReconciler::with_served`] serves Grove.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        ScalingAdapterReconciler {
            components: ComponentWorkloads::new(reader.clone(), writer.clone()),
            grove: GroveWorkloads::new(reader.clone(), writer),
            served: Served::new(),
            reader,
        }
    }

    /// The optional kinds the cluster serves, as the operator keeps them current: while it
    /// serves PodCliqueSet, the PodCliques and PodCliqueScalingGroups of graphs on the grove
    /// pathway are scaled too. Read at every reconcile.
    pub fn with_served(mut self, served: Served) -> Self {
        self.served = served;
        self
    }

    /// Whether Grove's workloads are scaled now.
    fn grove(&self) -> Option<&GroveWorkloads> {
        self.served
            .serves_kind::<PodCliqueSet>()
            .then_some(&self.grove)
    }

    /// Observe and converge `adapter`.
    pub async fn reconcile(
        &self,
        adapter: &DynamoGraphDeploymentScalingAdapter,
    ) -> Reconciled<StatusOf, Error> {
        let generation = adapter.metadata.generation.unwrap_or(0);
        let previous = adapter.status.clone().unwrap_or_default();
        let mut out = Outcome::new(previous);
        if adapter.metadata.deletion_timestamp.is_some() {
            return Ok(out);
        }
        let ns = adapter.namespace();
        let adapter_key = key(ns.as_deref(), &adapter.name_any());
        let target = &adapter.spec.dgd_ref;
        let desired = adapter.spec.replicas;
        out.status.observed_generation = Some(generation);
        out.status.selector = Some(naming::component_selector(
            &target.name,
            &target.component_name,
        ));

        let dgd: Option<DynamoGraphDeployment> = self
            .reader
            .get(ns.as_deref(), &target.name)
            .await
            .map_err(|source| {
                Error::Read(kit::error::ReadFailed {
                    kind: "DynamoGraphDeployment",
                    name: target.name.clone(),
                    source,
                })
            })
            .or_fail(&mut out, generation, REASON_READ_FAILED)?;
        let (pathway, component, waiting) =
            match resolve(adapter, dgd.as_ref(), self.grove().is_some()) {
                Resolution::Wait { reason, message } => {
                    tracing::debug!(adapter = %adapter_key, reason, %message, "waiting");
                    out.status.replicas = Some(0);
                    ready(&mut out, Status::False, reason, message, generation);
                    return Ok(out);
                }
                Resolution::Observe {
                    pathway,
                    component,
                    reason,
                    message,
                } => (pathway, component, Some((reason, message))),
                Resolution::Scale { pathway, component } => (pathway, component, None),
            };
        let dgd = dgd.as_ref().expect("resolved against a graph");
        let workloads = self.get(pathway, dgd, component).await.or_fail(
            &mut out,
            generation,
            REASON_READ_FAILED,
        )?;
        out.status.replicas = Some(current(&workloads));
        if let Some((reason, message)) = waiting {
            tracing::debug!(adapter = %adapter_key, reason, %message, "observing only");
            ready(&mut out, Status::False, reason, message, generation);
            return Ok(out);
        }
        if workloads.is_empty() {
            let message = workload_not_found(&component.name, &target.name);
            tracing::debug!(adapter = %adapter_key, %message, "waiting");
            ready(
                &mut out,
                Status::False,
                REASON_WORKLOAD_NOT_FOUND,
                message,
                generation,
            );
            return Ok(out);
        }

        let scaled = self
            .scale(pathway, ns.as_deref(), &adapter_key, workloads, desired)
            .await
            .or_fail(&mut out, generation, REASON_SCALE_FAILED)?;
        if let Some(from) = scaled.from {
            out.status.last_scale_time = Some(conditions::now());
            out.normal(
                EVENT_SCALED,
                format!(
                    "Scaled component {} from {from} to {desired} replicas",
                    component.name
                ),
            );
        }
        let current = current(&scaled.workloads);
        out.status.replicas = Some(current);
        let (status, reason, message) =
            scaled_condition(&component.name, &target.name, desired, current, &scaled);
        ready(&mut out, status, reason, message, generation);
        Ok(out)
    }

    /// Scale each of `workloads` that does not have `desired` replicas yet.
    async fn scale(
        &self,
        pathway: Pathway,
        ns: Option<&str>,
        adapter_key: &str,
        workloads: Vec<Workload>,
        desired: i32,
    ) -> Result<ScaledWorkloads, Error> {
        let mut wrote = false;
        let mut scaled_from: Option<i32> = None;
        let mut remaining = Vec::with_capacity(workloads.len());
        for workload in workloads {
            if workload.replicas == Some(desired) {
                remaining.push(workload);
                continue;
            }
            let result = self
                .ensure(pathway, ns, &workload, desired)
                .await
                .map_err(|source| {
                    Error::Scale(kit::error::ScaleFailed {
                        kind: workload.kind,
                        name: workload.name.clone(),
                        replicas: desired,
                        source,
                    })
                })?;
            match result {
                Scaled::Gone => {
                    tracing::debug!(adapter = %adapter_key, workload = %workload.name, "workload gone before it was scaled");
                }
                Scaled::Unchanged => remaining.push(workload),
                Scaled::Changed => {
                    wrote = true;
                    tracing::info!(
                        adapter = %adapter_key,
                        kind = workload.kind,
                        workload = %workload.name,
                        from = ?workload.replicas,
                        to = desired,
                        "scaled workload"
                    );
                    if let Some(from) = workload.replicas {
                        scaled_from.get_or_insert(from);
                    }
                    remaining.push(Workload {
                        replicas: Some(desired),
                        observed: false,
                        ..workload
                    });
                }
            }
        }
        Ok(ScaledWorkloads {
            workloads: remaining,
            wrote,
            from: scaled_from,
        })
    }

    async fn get(
        &self,
        pathway: Pathway,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
    ) -> Result<Vec<Workload>, Error> {
        let read = |source| {
            Error::Read(kit::error::ReadFailed {
                kind: match pathway {
                    Pathway::Component => crate::component::KIND,
                    Pathway::Grove => "Grove child",
                },
                name: component.name.clone(),
                source,
            })
        };
        match (pathway, self.grove()) {
            (Pathway::Grove, Some(grove)) => grove.get(dgd, component).await.map_err(read),
            _ => self
                .components
                .get(dgd, &component.name)
                .await
                .map_err(read),
        }
    }

    async fn ensure(
        &self,
        pathway: Pathway,
        namespace: Option<&str>,
        workload: &Workload,
        replicas: i32,
    ) -> Result<Scaled, kit::Error> {
        match (pathway, self.grove()) {
            (Pathway::Grove, Some(grove)) => grove.ensure(namespace, workload, replicas).await,
            _ => self.components.ensure(namespace, workload, replicas).await,
        }
    }
}

/// The component's current replicas: the largest count among its workloads (two worker
/// generations run side by side during a rolling update), 0 without workloads.
pub fn current(workloads: &[Workload]) -> i32 {
    workloads.iter().map(|w| w.current).max().unwrap_or(0)
}

/// What a pass of [`ScalingAdapterReconciler::scale`] left.
struct ScaledWorkloads {
    /// The workloads as they are now (those gone before they were scaled are left out).
    workloads: Vec<Workload>,
    /// A write changed a workload.
    wrote: bool,
    /// The replicas the first changed workload had, if it had a count.
    from: Option<i32>,
}

/// Message of `Ready=False` with [`REASON_WORKLOAD_NOT_FOUND`].
fn workload_not_found(component: &str, graph: &str) -> String {
    format!("waiting for the workload of component {component} of DynamoGraphDeployment {graph}")
}

/// The `Ready` condition after scaling `component` (of graph `graph`) to `desired`: waiting
/// while it has no workload, scaled once every workload settled at `desired` with no write in
/// this pass, else scaling (`current` replicas now).
fn scaled_condition(
    component: &str,
    graph: &str,
    desired: i32,
    current: i32,
    scaled: &ScaledWorkloads,
) -> (Status, &'static str, String) {
    if scaled.workloads.is_empty() {
        (
            Status::False,
            REASON_WORKLOAD_NOT_FOUND,
            workload_not_found(component, graph),
        )
    } else if !scaled.wrote && scaled.workloads.iter().all(|w| w.settled(desired)) {
        (
            Status::True,
            REASON_SCALED,
            format!("component {component} runs {desired} replicas"),
        )
    } else {
        (
            Status::False,
            REASON_SCALING,
            format!("scaling component {component} to {desired} replicas ({current} current)"),
        )
    }
}

fn ready(
    out: &mut Outcome<StatusOf>,
    status: Status,
    reason: &str,
    message: String,
    generation: i64,
) {
    conditions::set(
        &mut out.status.conditions,
        conditions::new(READY, status, reason, message, generation),
    );
}
