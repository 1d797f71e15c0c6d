//! The PodCliqueSet workload reconciler: [`resolve`](mod@crate::resolve) → [`grove_render::render`]
//! → server-side apply → scale → observe readiness.
//!
//! - **Apply.** The rendered PodCliqueSet is stamped with [`LAST_APPLIED_HASH`] (a digest of the
//!   body) and applied by server-side apply under [`FIELD_MANAGER`], forced, with a controller
//!   owner reference to the graph (garbage collection removes it with the graph). No request is
//!   sent when the live object carries the same digest and every field the body sets (drift of
//!   an owned field breaks that and is restored). A PodCliqueSet of that name controlled by
//!   another object is never taken over. Events `PodCliqueSetCreated` / `PodCliqueSetUpdated`
//!   follow only a write that changed the object.
//! - **Scale.** After creation, replicas change through the `scale` subresource of the
//!   PodClique (single-node) or PodCliqueScalingGroup (scaling-group component) Grove created,
//!   never through the PodCliqueSet template (rendering keeps the template's counts). A
//!   component is scaled when it sets `replicas` and has no `scalingAdapter` (an adapter's
//!   controller owns that count), or waits for its checkpoint (then 0), and its
//!   child's `spec.replicas` differs; a component group's PodCliqueScalingGroup is scaled to the
//!   group's `replicas` instead of its members' (upstream's Grove scaler, which leaves the
//!   members alone); skipped, as upstream, in the pass that wrote the
//!   PodCliqueSet (Grove has not synced its children yet). A child that does not exist yet is
//!   waited for, not an error: its readiness says `resource not found`, and the step asks to
//!   be requeued after [`WAIT_FOR_CHILDREN`]. Event `Scaled` per scale write that changed.
//! - **Services.** The component Services ([`grove_render::services`]) are applied the same
//!   way (`ServiceCreated` / `ServiceUpdated`); component Services this graph controls that are
//!   no longer wanted are deleted (`ServiceDeleted`). They do not count for readiness.
//! - **Observe.** Each component's child is read once and evaluated ([`crate::readiness`]);
//!   the members of a component group all report their group's PodCliqueScalingGroup.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::DynamoGraphDeployment;
use api::grove::{PodClique, PodCliqueScalingGroup, PodCliqueSet};
use api::labels;
use grove_render::names::{ComponentChild, component_child, pcs_name};
use grove_render::{Inputs, RenderError, RestartStamps, Settings, Workers};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Deleted, Event, Preconditions, Reader, ReaderExt, Writer, WriterExt};
use kube::{Resource, ResourceExt};
use reconcilers::checkpoints::CheckpointInfos;
use reconcilers::child::Listed;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::readiness::{self, Child, ComponentReadiness, Readiness};
use crate::resolve::{self, Resolver};

/// Annotation: digest of the PodCliqueSet body last applied.
pub use api::labels::LAST_APPLIED_HASH;
/// Field manager of the PodCliqueSet: the graph's.
pub use reconcilers::child::FIELD_MANAGER;
/// Failure reason of the workload step (upstream's default failure reason).
pub use reconcilers::error::REASON_FAILED_TO_RECONCILE_RESOURCES as REASON_WORKLOADS_FAILED;
/// Event: the PodCliqueSet was created.
pub const EVENT_PCS_CREATED: &str = "PodCliqueSetCreated";
/// Event: the PodCliqueSet was changed.
pub const EVENT_PCS_UPDATED: &str = "PodCliqueSetUpdated";
/// Event: a component Service was created.
pub const EVENT_SERVICE_CREATED: &str = "ServiceCreated";
/// Event: a component Service was changed back to its desired state.
pub const EVENT_SERVICE_UPDATED: &str = "ServiceUpdated";
/// Event: a component Service no longer wanted was deleted.
pub const EVENT_SERVICE_DELETED: &str = "ServiceDeleted";
/// Event: a PodClique or PodCliqueScalingGroup was scaled.
pub const EVENT_SCALED: &str = "Scaled";
/// How long to wait for Grove to create a child that needs scaling.
pub const WAIT_FOR_CHILDREN: Duration = Duration::from_secs(10);

/// Why the workload step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Resolution failed.
    #[error(transparent)]
    Resolve(#[from] resolve::Error),
    /// The graph cannot be rendered.
    #[error("render the PodCliqueSet: {0}")]
    Render(#[from] RenderError),
    /// The PodCliqueSet is controlled by another object.
    #[error("PodCliqueSet {name} {owner}; refusing to modify it")]
    OwnershipConflict {
        /// Its name.
        name: String,
        /// Who controls it, as a phrase.
        owner: String,
    },
    /// Applying the PodCliqueSet failed.
    #[error("apply PodCliqueSet {name}: {source}")]
    Apply {
        /// Its name.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// A component Service of that name is controlled by another object.
    #[error("Service {name} {owner}; refusing to modify it")]
    ServiceOwnershipConflict {
        /// Its name.
        name: String,
        /// Who controls it, as a phrase.
        owner: String,
    },
    /// Applying a component Service failed.
    #[error("apply Service {name}: {source}")]
    ApplyService {
        /// Its name.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// Deleting a component Service failed.
    #[error("delete Service {name}: {source}")]
    DeleteService {
        /// Its name.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// A read failed.
    #[error(transparent)]
    Read(#[from] kit::error::ReadFailed),
    /// Writing a workload's replicas failed.
    #[error(transparent)]
    Scale(#[from] kit::error::ScaleFailed),
}

impl Error {
    /// Only a change of the graph can fix it (an input rendering cannot use).
    pub fn awaits_change(&self) -> bool {
        match self {
            Error::Render(_) => true,
            Error::Resolve(e) => e.awaits_change(),
            Error::Apply { source, .. } => source.is_invalid(),
            _ => false,
        }
    }
}

/// What the workload step observed.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The PodCliqueSet's name.
    pub pcs_name: String,
    /// Readiness of the components.
    pub readiness: Readiness,
}

/// The PodCliqueSet workload reconciler.
pub struct PodCliqueSetWorkload {
    resolver: Resolver,
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    settings: Settings,
}

/// A component's Grove child and who sets its replicas.
struct Target<'a> {
    component: &'a api::DynamoComponentDeploymentSharedSpec,
    child: ComponentChild,
    /// The component group whose scaling group carries the component.
    group: Option<&'a api::v1beta1::ComponentGroupSpec>,
}

impl Target<'_> {
    /// The replicas this step gives the child: a group's `replicas`; a component's `replicas`
    /// unless a scaling adapter owns them; zero while the component waits for its checkpoint.
    fn desired(&self, waiting: &std::collections::BTreeSet<String>) -> Option<i32> {
        if let Some(group) = self.group {
            return Some(group.replicas);
        }
        let component = self.component;
        if waiting.contains(&component.name) {
            return Some(0);
        }
        // A scaling adapter owns the count (its controller scales the child).
        if component.scaling_adapter.is_some() {
            return None;
        }
        component.replicas
    }
}

impl PodCliqueSetWorkload {
    /// A workload reconciler reading with `reader`, writing with `writer`, rendering with
    /// `settings`.
    pub fn new(
        reader: Arc<dyn Reader>,
        writer: Arc<dyn Writer>,
        settings: Settings,
        discover_pull_secrets: bool,
    ) -> Self {
        PodCliqueSetWorkload {
            resolver: Resolver::new(reader.clone())
                .with_pull_secret_discovery(discover_pull_secrets),
            reader,
            writer,
            settings,
        }
    }

    /// Converge the PodCliqueSet of `dgd` and observe its readiness. Returns the readiness, the
    /// mutation events (also those of the writes made before a failure), and a requeue while
    /// Grove has not created a child that is to be scaled.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        workers: &Workers,
        restart: Option<&RestartStamps>,
        checkpoints: &CheckpointInfos,
    ) -> kit::Step<Report, Error> {
        let mut events = Vec::new();
        let result = self
            .converge(dgd, workers, restart, checkpoints, &mut events)
            .await;
        let waiting = matches!(result, Ok((_, true)));
        kit::Step::new(result.map(|(report, _)| report), events)
            .requeue(waiting.then_some(WAIT_FOR_CHILDREN))
    }

    /// As [`PodCliqueSetWorkload::reconcile`]; also says whether a child to be scaled is still
    /// missing.
    async fn converge(
        &self,
        dgd: &DynamoGraphDeployment,
        workers: &Workers,
        restart: Option<&RestartStamps>,
        checkpoints: &CheckpointInfos,
        events: &mut Vec<Event>,
    ) -> Result<(Report, bool), Error> {
        let name = pcs_name(&dgd.name_any(), &dgd.spec);
        let resolved = self.resolver.resolve(dgd, &name, checkpoints).await?;
        let mut desired = grove_render::render(&Inputs {
            dgd,
            existing: resolved.existing.as_ref(),
            workers,
            restart,
            waiting_for_checkpoint: &resolved.waiting_for_checkpoint,
            checkpoints: &resolved.checkpoints,
            topology_domains: &resolved.topology_domains,
            pull_secrets: &resolved.pull_secrets,
            settings: &self.settings,
        })?;
        stamp(&mut desired);
        let (pcs, written) = self
            .ensure(dgd, &desired, resolved.existing, events)
            .await?;
        self.services(dgd, &desired, events).await?;

        let targets: Vec<Target<'_>> = dgd
            .spec
            .components
            .iter()
            .map(|c| Target {
                component: c,
                child: component_child(&name, &dgd.spec, c),
                group: dgd.spec.component_group(&c.name),
            })
            .collect();
        let mut children = BTreeMap::new();
        for target in &targets {
            if !children.contains_key(&target.child.name) {
                let child = self.child(dgd, &target.child).await?;
                children.insert(target.child.name.clone(), child);
            }
        }
        let mut missing = false;
        if !written {
            missing = self
                .scale(
                    dgd,
                    &targets,
                    &mut children,
                    &resolved.waiting_for_checkpoint,
                    events,
                )
                .await?;
        }
        let evaluated: BTreeMap<String, ComponentReadiness> = targets
            .iter()
            .filter_map(|t| {
                let child = children.get(&t.child.name)?;
                Some((
                    t.component.name.clone(),
                    readiness::child(&t.child.name, child),
                ))
            })
            .collect();
        let report = Report {
            readiness: readiness::evaluate(dgd, Some(&pcs), &evaluated),
            pcs_name: name,
        };
        Ok((report, missing))
    }

    /// Apply `desired` unless `observed` already holds it; returns the object as it now is and
    /// whether this pass wrote it.
    async fn ensure(
        &self,
        dgd: &DynamoGraphDeployment,
        desired: &PodCliqueSet,
        observed: Option<PodCliqueSet>,
        events: &mut Vec<Event>,
    ) -> Result<(PodCliqueSet, bool), Error> {
        let name = desired.name_any();
        if let Some(observed) = &observed {
            if !controlled_by(&observed.metadata, dgd) {
                return Err(Error::OwnershipConflict {
                    name,
                    owner: owner_phrase(&observed.metadata),
                });
            }
            if matches(observed, desired) {
                return Ok((observed.clone(), false));
            }
            reconcilers::child::take_over(self.writer.as_ref(), desired, observed)
                .await
                .map_err(|source| Error::Apply {
                    name: name.clone(),
                    source,
                })?;
        }
        let applied = self
            .writer
            .apply(desired, Some(FIELD_MANAGER))
            .await
            .map_err(|source| Error::Apply {
                name: name.clone(),
                source,
            })?;
        let key = kit::object::key(desired.namespace().as_deref(), &name);
        if applied.changed {
            if observed.is_some() {
                tracing::info!(pcs = %key, "updated PodCliqueSet");
                events.push(
                    Event::normal(EVENT_PCS_UPDATED, format!("Updated PodCliqueSet {key}"))
                        .mutation("Updated", "PodCliqueSet", &name),
                );
            } else {
                tracing::info!(pcs = %key, "created PodCliqueSet");
                events.push(
                    Event::normal(EVENT_PCS_CREATED, format!("Created PodCliqueSet {key}"))
                        .mutation("Created", "PodCliqueSet", &name),
                );
            }
        }
        Ok((applied.object, applied.changed))
    }

    /// Converge the component Services ([`grove_render::services`]): apply the desired ones
    /// unless they already match, delete the ones this graph controls that are no longer
    /// desired (uid precondition).
    async fn services(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs: &PodCliqueSet,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let read = |name: &str| {
            let name = name.to_string();
            move |source| {
                Error::Read(kit::error::ReadFailed {
                    kind: "Service",
                    name,
                    source,
                })
            }
        };
        let mut live = Listed::<Service>::of(&*self.reader, dgd)
            .await
            .map_err(read(&format!("{}=*", labels::DYNAMO_GRAPH_DEPLOYMENT_NAME)))?;
        let mut desired = grove_render::services::services(dgd, pcs);
        let names: Vec<String> = desired.iter().map(|s| s.name_any()).collect();
        for service in &mut desired {
            stamp(service);
            let name = service.name_any();
            let observed = live.take(&*self.reader, &name).await.map_err(read(&name))?;
            self.ensure_service(dgd, service, observed, events).await?;
        }
        for (name, service) in live.rest() {
            let component_service = service.labels().contains_key(labels::DYNAMO_COMPONENT);
            if names.contains(name)
                || !component_service
                || !controlled_by(&service.metadata, dgd)
                || service.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            self.delete_service(dgd, service, events).await?;
        }
        Ok(())
    }

    /// Apply the desired component Service `service` unless `observed` already matches it; one
    /// the graph does not control is an ownership conflict.
    async fn ensure_service(
        &self,
        dgd: &DynamoGraphDeployment,
        service: &Service,
        observed: Option<Service>,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let name = service.name_any();
        if let Some(observed) = &observed {
            if !controlled_by(&observed.metadata, dgd) {
                return Err(Error::ServiceOwnershipConflict {
                    name,
                    owner: owner_phrase(&observed.metadata),
                });
            }
            if matches(observed, service) {
                return Ok(());
            }
            reconcilers::child::take_over(self.writer.as_ref(), service, observed)
                .await
                .map_err(|source| Error::ApplyService {
                    name: name.clone(),
                    source,
                })?;
        }
        let applied = self
            .writer
            .apply(service, Some(FIELD_MANAGER))
            .await
            .map_err(|source| Error::ApplyService {
                name: name.clone(),
                source,
            })?;
        if applied.changed {
            let key = kit::object::key(dgd.namespace().as_deref(), &name);
            let (reason, verb) = if observed.is_some() {
                (EVENT_SERVICE_UPDATED, "Updated")
            } else {
                (EVENT_SERVICE_CREATED, "Created")
            };
            tracing::info!(service = %key, "{verb} Service");
            events.push(
                Event::normal(reason, format!("{verb} Service {key}"))
                    .mutation(verb, "Service", &name),
            );
        }
        Ok(())
    }

    /// Delete a component Service no longer desired (uid precondition); one replaced by another
    /// object of that name since it was read is left alone.
    async fn delete_service(
        &self,
        dgd: &DynamoGraphDeployment,
        service: &Service,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let ns = dgd.namespace();
        let name = service.name_any();
        let preconditions = Preconditions {
            uid: service.metadata.uid.clone(),
            resource_version: None,
        };
        match self
            .writer
            .delete::<Service>(ns.as_deref(), &name, &preconditions, None)
            .await
        {
            Ok(Deleted::NotFound) => {}
            Ok(_) => {
                let key = kit::object::key(ns.as_deref(), &name);
                tracing::info!(service = %key, "deleted Service no longer wanted");
                events.push(
                    Event::normal(EVENT_SERVICE_DELETED, format!("Deleted Service {key}"))
                        .mutation("Deleted", "Service", &name),
                );
            }
            // Replaced by another object of that name since it was read: not ours.
            Err(e) if e.is_conflict() => {}
            Err(source) => {
                return Err(Error::DeleteService { name, source });
            }
        }
        Ok(())
    }

    async fn child(
        &self,
        dgd: &DynamoGraphDeployment,
        target: &ComponentChild,
    ) -> Result<Child, Error> {
        let ns = dgd.namespace();
        if target.scaling_group {
            let g: Option<PodCliqueScalingGroup> = self
                .reader
                .get(ns.as_deref(), &target.name)
                .await
                .map_err(|source| {
                    Error::Read(kit::error::ReadFailed {
                        kind: "PodCliqueScalingGroup",
                        name: target.name.clone(),
                        source,
                    })
                })?;
            Ok(Child::Group(g.map(Box::new)))
        } else {
            let c: Option<PodClique> =
                self.reader
                    .get(ns.as_deref(), &target.name)
                    .await
                    .map_err(|source| {
                        Error::Read(kit::error::ReadFailed {
                            kind: "PodClique",
                            name: target.name.clone(),
                            source,
                        })
                    })?;
            Ok(Child::Clique(c.map(Box::new)))
        }
    }

    async fn scale(
        &self,
        dgd: &DynamoGraphDeployment,
        targets: &[Target<'_>],
        children: &mut BTreeMap<String, Child>,
        waiting: &std::collections::BTreeSet<String>,
        events: &mut Vec<Event>,
    ) -> Result<bool, Error> {
        let ns = dgd.namespace();
        let mut missing = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for target in targets {
            // The members of a component group share one child, scaled once.
            if !seen.insert(target.child.name.as_str()) {
                continue;
            }
            let Some(desired) = target.desired(waiting) else {
                continue;
            };
            let name = &target.child.name;
            let current = match children.get(name) {
                Some(Child::Clique(Some(c))) => Some(c.spec.clique.replicas),
                Some(Child::Group(Some(g))) => Some(g.spec.replicas.unwrap_or(1)),
                _ => None,
            };
            let Some(current) = current else {
                missing.push(name.clone());
                continue;
            };
            if current == desired {
                continue;
            }
            let kind = if target.child.scaling_group {
                "PodCliqueScalingGroup"
            } else {
                "PodClique"
            };
            let result = if target.child.scaling_group {
                self.writer
                    .scale::<PodCliqueScalingGroup>(ns.as_deref(), name, desired)
                    .await
            } else {
                self.writer
                    .scale::<PodClique>(ns.as_deref(), name, desired)
                    .await
            };
            match result {
                Ok(applied) if applied.changed => {
                    // The child as the write left it: new replicas, a generation Grove has not
                    // observed yet, so readiness does not report the old pods as the new count.
                    match children.get_mut(name) {
                        Some(Child::Clique(Some(c))) => {
                            c.spec.clique.replicas = desired;
                            c.metadata.generation = Some(c.metadata.generation.unwrap_or(0) + 1);
                        }
                        Some(Child::Group(Some(g))) => {
                            g.spec.replicas = Some(desired);
                            g.metadata.generation = Some(g.metadata.generation.unwrap_or(0) + 1);
                        }
                        _ => {}
                    }
                    let key = kit::object::key(ns.as_deref(), name);
                    tracing::info!(child = %key, kind, from = current, to = desired, "scaled Grove child");
                    events.push(Event::normal(
                        EVENT_SCALED,
                        format!("Scaled {kind} {key} from {current} to {desired} replicas"),
                    ));
                }
                Ok(_) => {}
                // Deleted since it was read: Grove recreates it; wait for it.
                Err(e) if e.is_not_found() => missing.push(name.clone()),
                Err(source) => {
                    return Err(Error::Scale(kit::error::ScaleFailed {
                        kind,
                        name: name.clone(),
                        replicas: desired,
                        source,
                    }));
                }
            }
        }
        if !missing.is_empty() {
            tracing::debug!(dgd = %kit::object::key_of(dgd), ?missing, "waiting for Grove to create children before scaling them");
        }
        Ok(!missing.is_empty())
    }
}

fn owner_phrase(meta: &ObjectMeta) -> String {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("is controlled by {} {}", o.kind, o.name))
        .unwrap_or_else(|| "has no controller owner".to_string())
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    let uid = dgd.metadata.uid.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// Stamp `object` with the digest of its body ([`LAST_APPLIED_HASH`]).
pub fn stamp<K: Resource + Serialize>(object: &mut K) {
    if let Some(a) = object.meta_mut().annotations.as_mut() {
        a.remove(LAST_APPLIED_HASH);
    }
    let body = serde_json::to_vec(&*object).unwrap_or_default();
    let digest = hex::encode(Sha256::digest(&body));
    object
        .meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(LAST_APPLIED_HASH.into(), digest[..16].to_string());
}

/// Whether the live object carries the desired digest and every field the desired one sets
/// (status aside).
fn matches<K: Resource + Serialize>(observed: &K, desired: &K) -> bool {
    let digest = |k: &K| k.annotations().get(LAST_APPLIED_HASH).cloned();
    if digest(observed) != digest(desired) {
        return false;
    }
    match (
        serde_json::to_value(observed),
        serde_json::to_value(desired),
    ) {
        (Ok(mut o), Ok(mut d)) => {
            for v in [&mut o, &mut d] {
                if let Some(obj) = v.as_object_mut() {
                    obj.remove("status");
                }
            }
            contains(&o, &d)
        }
        _ => false,
    }
}

/// Whether `observed` holds every field `desired` sets, with the same value (objects field by
/// field, lists element by element with equal length, owner references as a set, numbers by
/// value).
pub fn contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (_, Value::Null) => true,
        (Value::Object(o), Value::Object(d)) => d.iter().all(|(k, dv)| match o.get(k) {
            Some(Value::Array(ov)) if k == "ownerReferences" => match dv {
                Value::Array(dv) => dv.iter().all(|x| ov.iter().any(|y| contains(y, x))),
                _ => false,
            },
            Some(ov) => contains(ov, dv),
            None => {
                dv.is_null()
                    || dv.as_array().is_some_and(Vec::is_empty)
                    || dv.as_object().is_some_and(serde_json::Map::is_empty)
            }
        }),
        (Value::Array(o), Value::Array(d)) => {
            o.len() == d.len() && o.iter().zip(d).all(|(ov, dv)| contains(ov, dv))
        }
        (Value::Number(o), Value::Number(d)) => o.as_f64() == d.as_f64(),
        (o, d) => o == d,
    }
}
