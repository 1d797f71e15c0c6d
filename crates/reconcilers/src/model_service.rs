//! The headless model Service of `modelRef`: one Service per base model name and namespace,
//! shared by every graph (Grove pathway) or DynamoComponentDeployment (component pathway) that
//! serves the model. Both pathways call the one renderer ([`render`]) and the one step
//! ([`ModelServices::ensure`]).
//!
//! # What is rendered (upstream's `generateHeadlessServiceForModel`)
//! `dynamo-model-<hash>` ([`api::labels::model_service_name`]; `<hash>` is
//! [`api::labels::base_model_hash`], 8 hex digits of SHA-256 of the model name; `revision` is not
//! used) in the owner's namespace. Labels `nvidia.com/dynamo-base-model-hash: <hash>` and
//! `nvidia.com/managed-by: dynamo-operator`; annotations: a graph owner's `spec.annotations`,
//! then `nvidia.com/dynamo-base-model: <name>`; `clusterIP: None`, selector only the hash label
//! (so the endpoints are the ready pods of every graph serving the model in the namespace),
//! `publishNotReadyAddresses: false`, one port `system` 9090 → 9090 TCP. Components of one owner
//! serving the same model get one Service.
//!
//! # Ownership: shared, not first-come (where this differs from upstream)
//! Upstream sets a *controller* reference to the first owner that creates the Service and never
//! adds the others, so deleting that first graph (or the DCD of an old worker generation)
//! garbage-collects the Service from under the graphs still serving the model, until one of them
//! happens to reconcile again; and a Service is never deleted when `modelRef` goes away.
//!
//! Here every owner holds its own **non-controller** owner reference, so Kubernetes garbage
//! collection deletes the Service only when the last owner is gone (and removes a deleted owner's
//! reference while others remain). Each owner applies with a field manager of its own
//! ([`field_manager`]: `dynamo-operator/model-service/<owner uid>`) and stamps a hash annotation
//! of its own ([`hash_annotation`]: `nvidia.com/last-applied-hash-<owner uid>`): server-side
//! apply merges `ownerReferences` by uid, so each owner's apply sets only its own entry, and the
//! equal labels and spec several owners apply are co-owned without conflict; an idle reconcile of
//! any owner sends nothing (the `kit::child` rule, against its own hash). A live Service of that
//! name controlled by another object (an upstream operator's controller reference) is not an
//! ownership conflict: the child is shared.
//!
//! When an owner no longer serves a model (its `modelRef` removed or changed) it releases the
//! Service: when it holds the only owner reference, the Service is deleted (uid and
//! resourceVersion preconditions, so a concurrent new owner is never deleted away); otherwise it
//! applies an empty configuration under its manager, which gives up exactly what it alone held
//! (its owner reference, its hash, annotations only it applied), and removes its owner reference
//! by a guarded JSON patch if another manager held that entry too (a Service an upstream
//! operator created). A graph removing an annotation from `spec.annotations` removes it from the
//! Service (upstream only ever adds). Two graphs giving one annotation key different values: the
//! last to reconcile wins, as upstream (each such reconcile then writes once).
//!
//! Garbage collection of a deleted owner leaves that owner's field manager entry in the Service's
//! `managedFields` (the collector patches only `ownerReferences`): a few hundred bytes per owner
//! that was deleted while the Service lived on, gone when the Service is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::labels::{
    DYNAMO_BASE_MODEL, DYNAMO_BASE_MODEL_HASH, LAST_APPLIED_HASH, MANAGED_BY,
    MANAGED_BY_DYNAMO_OPERATOR, base_model_hash, model_service_name,
};
use api::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kit::child::{Applier, EnsureError, Ownership};
use kit::object::key;
use kit::{Deleted, Event, Patch, Preconditions, Reader, ReaderExt, Selector, Writer, WriterExt};
use kube::core::Expression;
use kube::{Resource, ResourceExt};
use pod_render::{SYSTEM_PORT, SYSTEM_PORT_NAME};

use crate::child::{record, record_deleted};
use crate::error::{Error, Result};

/// Prefix of the field manager of each owner ([`field_manager`]).
pub const FIELD_MANAGER_PREFIX: &str = "dynamo-operator/model-service/";

/// The field manager an owner (by uid) applies model Services with.
pub fn field_manager(uid: &str) -> String {
    format!("{FIELD_MANAGER_PREFIX}{uid}")
}

/// The annotation an owner (by uid) stamps the hash of its applied body in:
/// `nvidia.com/last-applied-hash-<uid>` (one per owner, so owners never overwrite each other's).
pub fn hash_annotation(uid: &str) -> String {
    format!("{LAST_APPLIED_HASH}-{uid}")
}

/// An object that serves base models: a graph (Grove pathway) or a DCD (component pathway).
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    /// Its namespace (the model Services' namespace).
    pub namespace: String,
    /// The non-controller owner reference it holds on its model Services.
    pub reference: OwnerReference,
}

impl Owner {
    /// `object` as an owner; it must have a namespace and a uid.
    pub fn of<K: Resource<DynamicType = ()>>(object: &K) -> Result<Owner> {
        let what = format!(
            "{} {}",
            K::kind(&()),
            key(object.namespace().as_deref(), &object.name_any())
        );
        let uid = object
            .uid()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| Error::InvalidSpec(format!("{what} has no uid")))?;
        let namespace = object
            .namespace()
            .ok_or_else(|| Error::InvalidSpec(format!("{what} has no namespace")))?;
        Ok(Owner {
            namespace,
            reference: OwnerReference {
                api_version: K::api_version(&()).into_owned(),
                kind: K::kind(&()).into_owned(),
                name: object.name_any(),
                uid,
                controller: Some(false),
                block_owner_deletion: None,
            },
        })
    }

    fn uid(&self) -> &str {
        &self.reference.uid
    }

    fn applier(&self) -> Applier {
        Applier::owned(field_manager(self.uid()), hash_annotation(self.uid()))
    }
}

/// The distinct non-empty `modelRef` names of `components`, sorted.
pub fn models<'a>(
    components: impl IntoIterator<Item = &'a DynamoComponentDeploymentSharedSpec>,
) -> BTreeSet<String> {
    components
        .into_iter()
        .filter_map(|c| c.model_ref.as_ref())
        .filter(|m| !m.name.is_empty())
        .map(|m| m.name.clone())
        .collect()
}

/// The model Services `owner` wants: one per name in `models`, sorted by model name, with
/// `annotations` (a graph owner's `spec.annotations`; none for a DCD) under the base-model
/// annotation. Pure.
pub fn render(
    owner: &Owner,
    models: &BTreeSet<String>,
    annotations: &BTreeMap<String, String>,
) -> Vec<Service> {
    models
        .iter()
        .map(|model| service(owner, model, annotations))
        .collect()
}

fn service(owner: &Owner, model: &str, annotations: &BTreeMap<String, String>) -> Service {
    let hash = base_model_hash(model);
    let mut annotations = annotations.clone();
    annotations.insert(DYNAMO_BASE_MODEL.into(), model.into());
    Service {
        metadata: ObjectMeta {
            name: Some(model_service_name(model)),
            namespace: Some(owner.namespace.clone()),
            labels: Some(BTreeMap::from([
                (DYNAMO_BASE_MODEL_HASH.to_string(), hash.clone()),
                (
                    MANAGED_BY.to_string(),
                    MANAGED_BY_DYNAMO_OPERATOR.to_string(),
                ),
            ])),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(BTreeMap::from([(DYNAMO_BASE_MODEL_HASH.to_string(), hash)])),
            publish_not_ready_addresses: Some(false),
            ports: Some(vec![ServicePort {
                name: Some(SYSTEM_PORT_NAME.into()),
                port: SYSTEM_PORT,
                target_port: Some(IntOrString::Int(SYSTEM_PORT)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Whether `service` is a model Service (its name is the one its hash label names).
fn is_model_service(service: &Service) -> bool {
    service
        .labels()
        .get(DYNAMO_BASE_MODEL_HASH)
        .is_some_and(|hash| {
            service.name_any() == format!("{}{hash}", api::labels::MODEL_SERVICE_PREFIX)
        })
}

/// Converges the model Services of one owner (see the module docs).
pub struct ModelServices {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl ModelServices {
    /// A step reading through `reader` (the watch cache) and writing through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        ModelServices { reader, writer }
    }

    /// The graph's share of the model Services of its components' `modelRef`s, with its
    /// `spec.annotations` ([`render`], then [`ModelServices::ensure`]).
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        match Owner::of(dgd) {
            Ok(owner) => {
                let models = models(&dgd.spec.components);
                let desired = render(&owner, &models, &dgd.spec.annotations);
                self.ensure(&owner, &desired).await
            }
            Err(error) => kit::Step::new(Err(error), Vec::new()),
        }
    }

    /// Apply `desired` (from [`render`]) as `owner`'s part of each Service, then release the
    /// model Services `owner` still holds an owner reference on but no longer wants. Returns
    /// the mutation events (`ServiceCreated`, `ServiceUpdated`, `ServiceDeleted`), also those of
    /// the writes made before a failure.
    pub async fn ensure(&self, owner: &Owner, desired: &[Service]) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(owner, desired, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(
        &self,
        owner: &Owner,
        desired: &[Service],
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let applier = owner.applier();
        for service in desired {
            let name = service.name_any();
            let what = format!("Service {}", key(Some(&owner.namespace), &name));
            let ensured = applier
                .ensure(
                    self.reader.as_ref(),
                    self.writer.as_ref(),
                    service,
                    Ownership::Shared,
                )
                .await
                .map_err(|e| ensure_error(&what, e))?;
            record(
                events,
                ensured.change,
                "Service",
                Some(&owner.namespace),
                &name,
            );
        }
        let wanted: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
        for held in self.held(owner).await? {
            if !wanted.contains(&held.name_any()) {
                self.release(owner, &held, events).await?;
            }
        }
        Ok(())
    }

    /// The model Services of the namespace that carry `owner`'s reference.
    async fn held(&self, owner: &Owner) -> Result<Vec<Service>> {
        let selector = Selector::from_iter([
            Expression::Equal(MANAGED_BY.into(), MANAGED_BY_DYNAMO_OPERATOR.into()),
            Expression::Exists(DYNAMO_BASE_MODEL_HASH.into()),
        ]);
        let services: Vec<Service> = self
            .reader
            .list(Some(&owner.namespace), &selector)
            .await
            .map_err(Error::api(format!(
                "list model Services in {}",
                owner.namespace
            )))?;
        Ok(services
            .into_iter()
            .filter(is_model_service)
            .filter(|s| s.owner_references().iter().any(|o| o.uid == owner.uid()))
            .collect())
    }

    /// Give up `owner`'s part of `live`: delete it when `owner` is its last owner, else remove
    /// what only `owner` held.
    async fn release(&self, owner: &Owner, live: &Service, events: &mut Vec<Event>) -> Result<()> {
        let ns = Some(owner.namespace.as_str());
        let name = live.name_any();
        let last = live.owner_references().iter().all(|o| o.uid == owner.uid());
        if last && self.delete(live, events).await? {
            return Ok(());
        }
        let what = format!("Service {}", key(ns, &name));
        let empty = Service {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(owner.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut after = self
            .writer
            .apply(&empty, Some(&field_manager(owner.uid())))
            .await
            .map_err(Error::api(format!("release {what}")))?
            .object;
        if let Some(index) = after
            .owner_references()
            .iter()
            .position(|o| o.uid == owner.uid())
        {
            // Another manager held our entry too (a Service an upstream operator created).
            let ops = serde_json::from_value(serde_json::json!([
                {"op": "test", "path": format!("/metadata/ownerReferences/{index}/uid"), "value": owner.uid()},
                {"op": "remove", "path": format!("/metadata/ownerReferences/{index}")},
            ]))
            .expect("a JSON patch");
            after = self
                .writer
                .patch::<Service>(ns, &name, &Patch::Json(ops))
                .await
                .map_err(Error::api(format!("remove the owner reference of {what}")))?
                .object;
        }
        tracing::info!(service = %key(ns, &name), owner = %owner.reference.name, "released the model Service");
        if after.owner_references().is_empty() {
            self.delete(&after, events).await?;
        }
        Ok(())
    }

    /// Delete `observed` if it is still that object at that revision; `false` when it changed
    /// meanwhile (a new owner may have joined), so it is kept.
    async fn delete(&self, observed: &Service, events: &mut Vec<Event>) -> Result<bool> {
        let ns = observed.namespace();
        let name = observed.name_any();
        let preconditions = Preconditions {
            uid: observed.uid(),
            resource_version: observed.resource_version(),
        };
        match self
            .writer
            .delete::<Service>(ns.as_deref(), &name, &preconditions, None)
            .await
        {
            Ok(Deleted::NotFound) => Ok(true),
            Ok(_) => {
                record_deleted(events, "Service", ns.as_deref(), &name);
                Ok(true)
            }
            Err(e) if e.is_conflict() => {
                tracing::info!(service = %key(ns.as_deref(), &name), "model Service changed since it was read; not deleted");
                Ok(false)
            }
            Err(e) => Err(Error::api(format!(
                "delete Service {}",
                key(ns.as_deref(), &name)
            ))(e)),
        }
    }
}

fn ensure_error(what: &str, error: EnsureError) -> Error {
    let (verb, source) = match error {
        EnsureError::Read(source) => ("get", source),
        EnsureError::Apply(source) => ("apply", source),
        EnsureError::Convert(source) => ("convert", source),
        EnsureError::Conflict(conflict) => {
            // `Ownership::Shared` never refuses; kept total.
            return Error::OwnershipConflict {
                owner: conflict.owner(),
                kind: conflict.kind,
                key: conflict.key,
            };
        }
    };
    Error::api(format!("{verb} {what}"))(source)
}

#[cfg(test)]
#[path = "model_service_tests.rs"]
mod tests;
