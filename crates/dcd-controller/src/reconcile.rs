//! The DCD reconciler: validate, converge the children, report status.

use std::fmt;
use std::sync::Arc;

use api::dcd::{CONDITION_AVAILABLE, CONDITION_DYNAMO_COMPONENT_READY};
use api::labels::DYNAMO_COMPONENT_POD;
use api::labels::LAST_APPLIED_HASH;
use api::validate::{InvalidSpec, REASON_INVALID_SPEC, validate_dcd};
use api::{DynamoComponentDeployment, DynamoComponentDeploymentStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::child::{Applier, Change, EnsureError, Ownership, is_controlled_by};
use kit::conditions::{self, Status};
use kit::object::{key, resource};
use kit::served::Served;
use kit::{
    Deleted, EventType, Failed, Outcome, Preconditions, ReaderExt, ReconcileStatus, Reconciled,
    Retry, Selector, WriterExt,
};
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use pod_render::{Infrastructure, PullSecrets};
use reconcilers::model_service::{self, ModelServices};
use reconcilers::pull_secrets::Discovery;

use crate::render::{
    Identity, Pods, Workload, applied_replicas, component_pod_account, engine_gpus, held_replicas,
    hold_replicas, leader_worker_set_resource, render_with, service_name,
};
use crate::status::{
    REASON_DEPLOYMENT_NOT_READY, REASON_DEPLOYMENT_READY, REASON_LEADER_WORKER_SET_NOT_READY,
    REASON_LEADER_WORKER_SET_READY, REASON_LEADER_WORKER_SET_UNAVAILABLE, deployment_component,
    deployment_ready, leader_worker_set_component, leader_worker_set_ready, readiness_conditions,
};

/// Field manager of everything this controller applies.
pub const FIELD_MANAGER: &str = "dynamo-operator/dcd";

/// How children are converged: server-side apply under [`FIELD_MANAGER`], stamped with
/// [`LAST_APPLIED_HASH`]; no request when the live child already holds the stamped body.
const CHILDREN: Applier = Applier::succeeding(
    FIELD_MANAGER,
    LAST_APPLIED_HASH,
    reconcilers::child::UPSTREAM,
);

/// `Available` reason when applying or reading the Deployment failed.
pub const REASON_DEPLOYMENT_SYNC_FAILED: &str = "DeploymentSyncFailed";
/// `Available` reason when applying or reading the LeaderWorkerSet failed.
pub const REASON_LEADER_WORKER_SET_SYNC_FAILED: &str = "LeaderWorkerSetSyncFailed";
/// `Available` reason when applying, reading or deleting the Service failed.
pub const REASON_SERVICE_SYNC_FAILED: &str = "ServiceSyncFailed";
/// `Available` reason when a child of the DCD's name is controlled by another object.
pub const REASON_OWNERSHIP_CONFLICT: &str = "OwnershipConflict";
/// `Available` reason when the component's checkpoint could not be resolved (the referenced
/// DynamoCheckpoint is missing, or a Ready one's storage cannot be found): nothing is touched.
pub const REASON_CHECKPOINT_UNRESOLVED: &str = "CheckpointUnresolved";
/// `Available` reason when removing upstream's finalizer from a DCD being deleted failed.
pub const REASON_RELEASE_FINALIZER_FAILED: &str = "ReleaseFinalizerFailed";

/// The kinds of children this controller writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    Deployment,
    LeaderWorkerSet,
    Service,
}

impl Child {
    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            Child::Deployment => "Deployment",
            Child::LeaderWorkerSet => "LeaderWorkerSet",
            Child::Service => "Service",
        }
    }

    /// The `Available` reason of a failure to converge this child.
    pub fn failure_reason(self) -> &'static str {
        match self {
            Child::Deployment => REASON_DEPLOYMENT_SYNC_FAILED,
            Child::LeaderWorkerSet => REASON_LEADER_WORKER_SET_SYNC_FAILED,
            Child::Service => REASON_SERVICE_SYNC_FAILED,
        }
    }
}

impl fmt::Display for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec breaks a validation rule; nothing was touched.
    #[error("invalid spec: {0}")]
    InvalidSpec(#[source] InvalidSpec),
    /// A child with the name this DCD uses is controlled by another object.
    #[error("{child} {name} is controlled by {owner}, not by this DynamoComponentDeployment")]
    OwnershipConflict {
        child: Child,
        name: String,
        owner: String,
    },
    /// Converging the headless model Service of `modelRef` failed.
    #[error("failed to reconcile the model Service: {0}")]
    ModelService(#[source] reconcilers::Error),
    /// The component's checkpoint could not be resolved.
    #[error("failed to resolve checkpoint: {0}")]
    Checkpoint(#[source] reconcilers::Error),
    /// Removing upstream's finalizer from a DCD being deleted failed.
    #[error("remove finalizer {finalizer}: {0}", finalizer = api::labels::UPSTREAM_FINALIZER)]
    ReleaseFinalizer(#[source] kit::Error),
    /// Reading, applying or deleting a child failed.
    #[error("{action} {child} {name}: {source}")]
    Sync {
        child: Child,
        action: &'static str,
        name: String,
        #[source]
        source: kit::Error,
    },
}

impl Error {
    /// The `Available` reason this error is reported with.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => REASON_INVALID_SPEC,
            Error::OwnershipConflict { .. } => REASON_OWNERSHIP_CONFLICT,
            Error::Sync { child, .. } => child.failure_reason(),
            Error::ModelService(_) => REASON_SERVICE_SYNC_FAILED,
            Error::Checkpoint(_) => REASON_CHECKPOINT_UNRESOLVED,
            Error::ReleaseFinalizer(_) => REASON_RELEASE_FINALIZER_FAILED,
        }
    }

    fn sync(child: Child, action: &'static str, name: &str) -> impl FnOnce(kit::Error) -> Error {
        let name = name.to_string();
        move |source| Error::Sync {
            child,
            action,
            name,
            source,
        }
    }

    fn ensure(child: Child, name: &str) -> impl FnOnce(EnsureError) -> Error {
        let name = name.to_string();
        move |error| {
            let (action, source) = match error {
                EnsureError::Conflict(conflict) => {
                    return Error::OwnershipConflict {
                        child,
                        name,
                        owner: conflict.controller.map_or_else(
                            || "no object".to_string(),
                            |o| format!("{} {}", o.kind, o.name),
                        ),
                    };
                }
                EnsureError::Read(source) => ("read", source),
                EnsureError::Apply(source) => ("apply", source),
                EnsureError::Convert(source) => ("convert", source),
            };
            Error::Sync {
                child,
                action,
                name,
                source,
            }
        }
    }
}

type StatusOf = DynamoComponentDeploymentStatus;

/// Reconciles one DynamoComponentDeployment: renders its Deployment (or LeaderWorkerSet) and
/// Service, converges them by server-side apply under [`FIELD_MANAGER`] with a controller owner
/// reference to the DCD, deletes a Service it owns but no longer wants, and returns the DCD
/// status. It never writes the status itself.
pub struct DcdReconciler {
    reader: Arc<dyn kit::Reader>,
    writer: Arc<dyn kit::Writer>,
    model_services: ModelServices,
    served: Served,
    infrastructure: Infrastructure,
    pull_secrets: Discovery,
    discovery: reconcilers::discovery::DiscoveryBackend,
}

impl DcdReconciler {
    /// A reconciler reading with `reader` and writing children with `writer`. Multinode
    /// components are reported `LeaderWorkerSetUnavailable` unless the set given to
    /// [`DcdReconciler::with_served`] says the cluster serves that API.
    pub fn new(reader: Arc<dyn kit::Reader>, writer: Arc<dyn kit::Writer>) -> Self {
        DcdReconciler {
            model_services: ModelServices::new(reader.clone(), writer.clone()),
            pull_secrets: Discovery::new(reader.clone(), false),
            reader,
            writer,
            served: Served::new(),
            infrastructure: Infrastructure::default(),
            discovery: Default::default(),
        }
    }

    /// The operator's discovery backend, for DCDs without the `nvidia.com/dynamo-discovery-backend`
    /// annotation (`kubernetes` unless set).
    pub fn with_discovery(mut self, discovery: reconcilers::discovery::DiscoveryBackend) -> Self {
        self.discovery = discovery;
        self
    }

    /// The operator's infrastructure endpoints, rendered as env into every pod.
    pub fn with_infrastructure(mut self, infrastructure: Infrastructure) -> Self {
        self.infrastructure = infrastructure;
        self
    }

    /// The optional kinds the cluster serves, as the operator keeps them current: while it
    /// serves `leaderworkerset.x-k8s.io/v1`, multinode components get a LeaderWorkerSet. Read at
    /// every reconcile.
    pub fn with_served(mut self, served: Served) -> Self {
        self.served = served;
        self
    }

    /// Discover the namespace's Docker config Secrets for image pull secrets
    /// ([`reconcilers::pull_secrets`]; off unless the operator is started with it).
    pub fn with_pull_secret_discovery(mut self, on: bool) -> Self {
        self.pull_secrets = Discovery::new(self.reader.clone(), on);
        self
    }

    /// Observe and converge `dcd`; the returned status is complete (conditions
    /// `Available` and `DynamoComponentReady`, `component`, `observedGeneration`).
    pub async fn reconcile(&self, dcd: &DynamoComponentDeployment) -> Reconciled<StatusOf, Error> {
        let generation = dcd.metadata.generation.unwrap_or(0);
        let previous = dcd.status.clone().unwrap_or_default();
        let mut out = Outcome::new(previous.clone());
        if dcd.metadata.deletion_timestamp.is_some() {
            // Garbage collection removes the children; nothing to converge. A DCD upstream's
            // operator finalized (the graph's first apply releases that finalizer, but not on a
            // DCD deleted before) would never go: its finalizer is removed.
            let released = kit::takeover::release_finalizer(
                self.writer.as_ref(),
                dcd,
                api::labels::UPSTREAM_FINALIZER,
            )
            .await;
            if let Err(error) = released {
                return Err(Box::new(fail(
                    out,
                    generation,
                    Error::ReleaseFinalizer(error),
                )));
            }
            return Ok(out);
        }
        let dcd_key = key(dcd.namespace().as_deref(), &dcd.name_any());
        if let Err(invalid) = validate_dcd(dcd) {
            tracing::info!(dcd = %dcd_key, error = %invalid, "invalid spec; nothing touched");
            let failed = fail(out, generation, Error::InvalidSpec(invalid)).await_change();
            return Err(Box::new(failed));
        }

        let identity = Identity::resolve(dcd, self.discovery);
        let account = match self.component_pod_account(dcd, &identity).await {
            Ok(account) => account,
            Err(error) => return Err(Box::new(fail(out, generation, error))),
        };
        let checkpoint = match reconcilers::checkpoints::resolve_component(
            self.reader.as_ref(),
            &dcd.namespace().unwrap_or_default(),
            &dcd.spec.component,
        )
        .await
        {
            Ok(info) => info.map(|i| i.pod(&dcd.spec.component)),
            Err(error) => {
                let awaits = error.awaits_change();
                let failed = fail(out, generation, Error::Checkpoint(error));
                return Err(Box::new(if awaits {
                    failed.await_change()
                } else {
                    failed
                }));
            }
        };
        let pull_secrets = match self.pull_secrets(dcd, &identity).await {
            Ok(pull_secrets) => pull_secrets,
            Err(error) => return Err(Box::new(fail(out, generation, error))),
        };
        let pods = Pods {
            infrastructure: &self.infrastructure,
            account: account.as_deref(),
            pull_secrets: &pull_secrets,
            checkpoint: checkpoint.as_ref(),
            discovery: self.discovery,
        };
        let mut rendered = render_with(dcd, &pods);
        if applied_replicas(dcd).is_none() && dcd.spec.component.scaling_adapter.is_some() {
            let live = match self.live_replicas(dcd, &rendered.workload).await {
                Ok(live) => live,
                Err(error) => return Err(Box::new(fail(out, generation, error))),
            };
            hold_replicas(&mut rendered.workload, held_replicas(dcd, live));
        }
        let step = match rendered.workload {
            Workload::Deployment(desired) => self
                .ensure_deployment(dcd, *desired, &identity, &mut out)
                .await
                .map(Some),
            Workload::LeaderWorkerSet(desired)
                if self.served.serves(&leader_worker_set_resource()) =>
            {
                self.ensure_leader_worker_set(dcd, *desired, &identity, &mut out)
                    .await
                    .map(Some)
            }
            Workload::LeaderWorkerSet(_) => Ok(None),
        };
        let readiness = match step {
            Ok(Some(readiness)) => readiness,
            Ok(None) => {
                tracing::info!(dcd = %dcd_key, "multinode component without the LeaderWorkerSet API; nothing touched");
                unavailable(&mut out, generation);
                transition_events(dcd, &previous, &mut out);
                return Ok(out);
            }
            Err(error) => return Err(Box::new(fail(out, generation, error))),
        };
        let mut readiness_now = readiness_conditions(
            readiness.ready,
            readiness.reason,
            readiness.message,
            generation,
        );
        if !readiness.ready {
            unavailable_since_creation(dcd, &previous, &mut readiness_now);
        }
        let [available, component_ready] = readiness_now;
        // What the workload step observed stays in the status even if the Service step fails.
        out.status.component = Some(readiness.component);
        conditions::set(&mut out.status.conditions, component_ready);
        if let Err(error) = self.ensure_service(dcd, rendered.service, &mut out).await {
            return Err(Box::new(fail(out, generation, error)));
        }
        if let Err(error) = self.ensure_model_services(dcd, &mut out).await {
            return Err(Box::new(fail(out, generation, error)));
        }
        out.status.observed_generation = Some(generation);
        if !readiness.ready {
            // The workload is still starting: a new component's first status may wait for it.
            out.settling();
        }
        conditions::set(&mut out.status.conditions, available);
        transition_events(dcd, &previous, &mut out);
        Ok(out)
    }

    /// The live workload's `spec.replicas`, for [`held_replicas`].
    async fn live_replicas(
        &self,
        dcd: &DynamoComponentDeployment,
        workload: &Workload,
    ) -> Result<Option<i32>, Error> {
        let (child, ar, name) = match workload {
            Workload::Deployment(d) => (Child::Deployment, resource::<Deployment>(), d.name_any()),
            Workload::LeaderWorkerSet(l) => (
                Child::LeaderWorkerSet,
                leader_worker_set_resource(),
                l.name_any(),
            ),
        };
        let live = self
            .reader
            .get_dynamic(&ar, dcd.namespace().as_deref(), &name)
            .await
            .map_err(Error::sync(child, "read", &name))?;
        Ok(live
            .and_then(|o| {
                o.data
                    .pointer("/spec/replicas")
                    .and_then(serde_json::Value::as_i64)
            })
            .and_then(|r| i32::try_from(r).ok()))
    }

    async fn ensure_deployment(
        &self,
        dcd: &DynamoComponentDeployment,
        desired: Deployment,
        identity: &Identity,
        out: &mut Outcome<StatusOf>,
    ) -> Result<Readiness, Error> {
        let name = desired.name_any();
        let uid = dcd.uid().unwrap_or_default();
        let ensured = CHILDREN
            .ensure(
                self.reader.as_ref(),
                self.writer.as_ref(),
                &desired,
                Ownership::Adopt(&uid),
            )
            .await
            .map_err(Error::ensure(Child::Deployment, &name))?;
        mutation_event(out, dcd, Child::Deployment, &name, ensured.change);
        let live = ensured.object;
        let ready = deployment_ready(&live);
        let (reason, message) = if ready {
            (REASON_DEPLOYMENT_READY, "Deployment is ready")
        } else {
            (REASON_DEPLOYMENT_NOT_READY, "Deployment is not ready")
        };
        Ok(Readiness {
            ready,
            reason,
            message,
            component: deployment_component(&live, identity, engine_gpus(dcd)),
        })
    }

    async fn ensure_leader_worker_set(
        &self,
        dcd: &DynamoComponentDeployment,
        desired: DynamicObject,
        identity: &Identity,
        out: &mut Outcome<StatusOf>,
    ) -> Result<Readiness, Error> {
        let name = desired.name_any();
        let uid = dcd.uid().unwrap_or_default();
        let ensured = CHILDREN
            .ensure_dynamic(
                self.reader.as_ref(),
                self.writer.as_ref(),
                &leader_worker_set_resource(),
                &desired,
                Ownership::Adopt(&uid),
            )
            .await
            .map_err(Error::ensure(Child::LeaderWorkerSet, &name))?;
        mutation_event(out, dcd, Child::LeaderWorkerSet, &name, ensured.change);
        let live = ensured.object;
        let ready = leader_worker_set_ready(&live);
        let (reason, message) = if ready {
            (REASON_LEADER_WORKER_SET_READY, "LeaderWorkerSet is ready")
        } else {
            (
                REASON_LEADER_WORKER_SET_NOT_READY,
                "LeaderWorkerSet is not ready",
            )
        };
        Ok(Readiness {
            ready,
            reason,
            message,
            component: leader_worker_set_component(&live, identity, engine_gpus(dcd)),
        })
    }

    /// Apply the wanted Service, or delete the one this DCD controls when none is wanted.
    async fn ensure_service(
        &self,
        dcd: &DynamoComponentDeployment,
        desired: Option<Service>,
        out: &mut Outcome<StatusOf>,
    ) -> Result<(), Error> {
        let name = service_name(dcd);
        let ns = dcd.namespace();
        let Some(desired) = desired else {
            let live: Option<Service> = self
                .reader
                .get(ns.as_deref(), &name)
                .await
                .map_err(Error::sync(Child::Service, "read", &name))?;
            let Some(live) = live else { return Ok(()) };
            let ours = dcd
                .metadata
                .uid
                .as_deref()
                .is_some_and(|uid| is_controlled_by(&live.metadata, uid));
            if !ours {
                return Ok(());
            }
            let preconditions = Preconditions {
                uid: live.metadata.uid.clone(),
                resource_version: None,
            };
            let deleted = self
                .writer
                .delete::<Service>(ns.as_deref(), &name, &preconditions, None)
                .await
                .map_err(Error::sync(Child::Service, "delete", &name))?;
            if !matches!(deleted, Deleted::NotFound) {
                tracing::info!(dcd = %key(ns.as_deref(), &dcd.name_any()), service = %name, "deleted the Service no longer wanted");
                out.event(
                    kit::Event::normal(
                        "ServiceDeleted",
                        format!("Deleted Service {name}: the component wants none"),
                    )
                    .mutation("Deleted", "Service", &name),
                );
            }
            return Ok(());
        };
        let uid = dcd.uid().unwrap_or_default();
        let ensured = CHILDREN
            .ensure(
                self.reader.as_ref(),
                self.writer.as_ref(),
                &desired,
                Ownership::Adopt(&uid),
            )
            .await
            .map_err(Error::ensure(Child::Service, &name))?;
        mutation_event(out, dcd, Child::Service, &name, ensured.change);
        Ok(())
    }
}

impl DcdReconciler {
    /// The namespace's ServiceAccount for pods nothing else names one for
    /// ([`crate::render::component_pod_account`]), read from the watch cache.
    async fn component_pod_account(
        &self,
        dcd: &DynamoComponentDeployment,
        identity: &Identity,
    ) -> Result<Option<String>, Error> {
        let selector = Selector::from_iter([(DYNAMO_COMPONENT_POD, "true")]);
        let workload = if identity.nodes > 1 {
            Child::LeaderWorkerSet
        } else {
            Child::Deployment
        };
        let labelled: Vec<ServiceAccount> = self
            .reader
            .list(dcd.namespace().as_deref(), &selector)
            .await
            .map_err(Error::sync(
                workload,
                "list the labelled ServiceAccounts for",
                &identity.name,
            ))?;
        Ok(component_pod_account(&labelled))
    }

    /// The namespace's discovered image pull secrets ([`reconcilers::pull_secrets`]), read
    /// from the watch cache; none with discovery off.
    async fn pull_secrets(
        &self,
        dcd: &DynamoComponentDeployment,
        identity: &Identity,
    ) -> Result<PullSecrets, Error> {
        let workload = if identity.nodes > 1 {
            Child::LeaderWorkerSet
        } else {
            Child::Deployment
        };
        self.pull_secrets
            .resolve(dcd.namespace().as_deref())
            .await
            .map_err(Error::sync(
                workload,
                "list the Docker config Secrets for",
                &identity.name,
            ))
    }

    /// The headless model Service of the DCD's `modelRef`, shared with every other DCD serving
    /// that model in the namespace (`reconcilers::model_service`); one it held for a model it no
    /// longer serves is given up.
    async fn ensure_model_services(
        &self,
        dcd: &DynamoComponentDeployment,
        out: &mut Outcome<StatusOf>,
    ) -> Result<(), Error> {
        let owner = model_service::Owner::of(dcd).map_err(Error::ModelService)?;
        let models = model_service::models([&dcd.spec.component]);
        let desired = model_service::render(&owner, &models, &Default::default());
        out.take(self.model_services.ensure(&owner, &desired).await)
            .map_err(Error::ModelService)
    }
}

/// What the workload step observed.
struct Readiness {
    ready: bool,
    /// The `Available` reason and message.
    reason: &'static str,
    message: &'static str,
    /// `status.component`.
    component: api::v1beta1::ComponentReplicaStatus,
}

/// `Created`/`Updated` events, only for writes that changed something.
fn mutation_event(
    out: &mut Outcome<StatusOf>,
    dcd: &DynamoComponentDeployment,
    child: Child,
    name: &str,
    change: Change,
) {
    let Some(verb) = change.verb() else {
        return;
    };
    tracing::info!(dcd = %key(dcd.namespace().as_deref(), &dcd.name_any()), kind = child.kind(), name, change = verb, "converged child");
    out.event(
        kit::Event::normal(&format!("{child}{verb}"), format!("{verb} {child} {name}")).mutation(
            verb,
            child.kind(),
            name,
        ),
    );
}

/// A multinode component on a cluster without the LeaderWorkerSet API.
fn unavailable(out: &mut Outcome<StatusOf>, generation: i64) {
    out.status.observed_generation = Some(generation);
    out.status.component = None;
    conditions::set(
        &mut out.status.conditions,
        conditions::new(
            CONDITION_AVAILABLE,
            Status::False,
            REASON_LEADER_WORKER_SET_UNAVAILABLE,
            "multinode components run as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), which this cluster does not serve",
            generation,
        ),
    );
    conditions::set(
        &mut out.status.conditions,
        conditions::new(
            CONDITION_DYNAMO_COMPONENT_READY,
            Status::False,
            crate::status::REASON_COMPONENT_NOT_READY,
            "DynamoComponent is not ready",
            generation,
        ),
    );
}

/// A component whose first status finds its workload still starting has been unavailable since
/// its creation: its conditions say so (`lastTransitionTime` = `creationTimestamp`), which is
/// how [`transition_events`] tells its first availability from a recovery.
fn unavailable_since_creation(
    dcd: &DynamoComponentDeployment,
    previous: &StatusOf,
    readiness: &mut [Condition; 2],
) {
    let first = conditions::find(&previous.conditions, CONDITION_AVAILABLE).is_none();
    if let (true, Some(created)) = (first, dcd.metadata.creation_timestamp.as_ref()) {
        for condition in readiness.iter_mut() {
            condition.last_transition_time = created.clone();
        }
    }
}

/// A status-transition event when `Available` changes status or reason, published after the
/// status is persisted. A component's first status is not a transition and is not announced
/// (its creation was; a component of a graph becoming available is announced by the graph's
/// `Ready`), except a multinode component the cluster cannot run (a Warning). For the same
/// reason a graph's component becoming available for the first time (its workload not ready
/// since its creation, [`unavailable_since_creation`]) is not announced; becoming available
/// again after a loss or a failure is.
fn transition_events(
    dcd: &DynamoComponentDeployment,
    previous: &StatusOf,
    out: &mut Outcome<StatusOf>,
) {
    let before = conditions::find(&previous.conditions, CONDITION_AVAILABLE);
    let Some(after) = conditions::find(&out.status.conditions, CONDITION_AVAILABLE) else {
        return;
    };
    let unavailable = after.reason == REASON_LEADER_WORKER_SET_UNAVAILABLE;
    let announce = match before {
        Some(b) => {
            (b.status != after.status || b.reason != after.reason)
                && !first_availability(dcd, b, after)
        }
        None => unavailable,
    };
    if announce {
        let type_ = if unavailable {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let (reason, note) = (after.reason.clone(), after.message.clone());
        out.event(kit::Event::new(type_, &reason, note));
    }
}

/// Whether `after` makes a graph's component available for the first time: `before` says its
/// workload has been starting since the component's creation.
fn first_availability(
    dcd: &DynamoComponentDeployment,
    before: &Condition,
    after: &Condition,
) -> bool {
    let starting = [
        REASON_DEPLOYMENT_NOT_READY,
        REASON_LEADER_WORKER_SET_NOT_READY,
    ];
    let of_graph = dcd
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == api::DynamoGraphDeployment::kind(&()));
    of_graph
        && after.status == Status::True.as_str()
        && before.status == Status::False.as_str()
        && starting.contains(&before.reason.as_str())
        && dcd.metadata.creation_timestamp.as_ref() == Some(&before.last_transition_time)
}

/// The failed attempt: `Available=False` with the error's reason and message (the type's
/// [`ReconcileStatus::set_failed`]) and a `Warning` event; retried with backoff unless the
/// caller says otherwise. Unlike [`Outcome::fail`] it adds no `Ready` condition: a DCD reports
/// through `Available`.
fn fail(mut out: Outcome<StatusOf>, generation: i64, error: Error) -> Failed<StatusOf, Error> {
    let reason = error.reason();
    let message = error.to_string();
    out.status.set_failed(generation, reason, &message);
    out.warning(reason, message);
    Failed {
        outcome: out,
        error,
        retry: Retry::Backoff,
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
