//! Writing the children of a DynamoGraphDeployment: owner references, "apply only what differs",
//! ownership checks and the mutation events that follow a write.
//!
//! [`ensure`] is `kit::child`'s rule with this operator's names: the child is stamped with
//! `nvidia.com/last-applied-hash` (the digest of its body, as upstream stamps the children it
//! syncs), read through the [`Reader`] first, and applied (server-side, field manager
//! [`FIELD_MANAGER`]) only when the observed object lacks that digest or no longer holds every
//! field the desired one sets. An idle reconcile therefore writes nothing, a user's change to a
//! field we set is restored on the next pass, and a field this code stops setting changes the
//! digest, so the apply that removes it is sent. Fields the server or other managers add are
//! left alone.

use std::collections::BTreeMap;

use api::DynamoGraphDeployment;
use api::labels::LAST_APPLIED_HASH;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kit::child::{self as converge, Applier, EnsureError};
use kit::object::{key, resource, to_dynamic};
use kit::takeover::Predecessor;
use kit::{Event, Kind, Preconditions, Reader, Writer};
use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};

use crate::error::{Error, Result};

/// Field manager of every server-side apply the shared reconcilers do.
pub const FIELD_MANAGER: &str = "dynamo-operator/dgd";

/// How the shared reconcilers converge children.
const CHILDREN: Applier = Applier::succeeding(FIELD_MANAGER, LAST_APPLIED_HASH, UPSTREAM);

/// Upstream's operator, as the predecessor whose children every applier of this operator takes
/// over ([`kit::takeover`]): its children carry `nvidia.com/last-applied-generation`; its
/// bookkeeping (that annotation and its finalizer) is released, so the first apply removes it.
pub const UPSTREAM: Predecessor = Predecessor {
    manager: api::labels::UPSTREAM_FIELD_MANAGER,
    marker: api::labels::LAST_APPLIED_GENERATION,
    released: &[
        &[
            "f:metadata",
            "f:annotations",
            "f:nvidia.com/last-applied-generation",
        ],
        &["f:metadata", "f:finalizers", "v:\"nvidia.com/finalizer\""],
    ],
};

/// Label value of `app.kubernetes.io/managed-by` on objects this operator creates.
pub const MANAGED_BY: &str = api::labels::OPERATOR_NAME;

/// The controller owner reference of a DGD's children (garbage collection removes them with it).
pub fn owner_reference(dgd: &DynamoGraphDeployment) -> Result<OwnerReference> {
    let uid = dgd.uid().filter(|u| !u.is_empty()).ok_or_else(|| {
        Error::InvalidSpec(format!(
            "DynamoGraphDeployment {} has no uid",
            key_of_dgd(dgd)
        ))
    })?;
    Ok(OwnerReference {
        api_version: DynamoGraphDeployment::api_version(&()).into_owned(),
        kind: DynamoGraphDeployment::kind(&()).into_owned(),
        name: dgd.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// `namespace/name` of the DGD.
pub(crate) fn key_of_dgd(dgd: &DynamoGraphDeployment) -> String {
    key(dgd.namespace().as_deref(), &dgd.name_any())
}

/// Metadata of a child named `name` in the DGD's namespace, with `labels` and the controller
/// reference to the DGD.
pub(crate) fn owned_meta(
    dgd: &DynamoGraphDeployment,
    name: impl Into<String>,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta> {
    Ok(ObjectMeta {
        name: Some(name.into()),
        namespace: dgd.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner_reference(dgd)?]),
        ..Default::default()
    })
}

/// Who may control an existing child.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ownership<'a> {
    /// The child must be controlled by this DGD (uid); anything else is a conflict.
    ControlledBy(&'a DynamoGraphDeployment),
    /// A namespace-wide object shared by the graphs of a namespace: no owner check.
    Shared,
}

/// What [`ensure`] did.
pub(crate) use kit::child::Change as Ensured;

/// Converge the typed child `desired` (see the module docs).
pub(crate) async fn ensure<K: Kind>(
    reader: &dyn Reader,
    writer: &dyn Writer,
    desired: &K,
    ownership: Ownership<'_>,
) -> Result<Ensured> {
    let dynamic = to_dynamic(desired).map_err(Error::api(format!("convert {}", K::kind(&()))))?;
    ensure_dynamic(reader, writer, &resource::<K>(), &dynamic, ownership).await
}

/// Converge the dynamic child `desired` of kind `resource`.
pub(crate) async fn ensure_dynamic(
    reader: &dyn Reader,
    writer: &dyn Writer,
    resource: &ApiResource,
    desired: &DynamicObject,
    ownership: Ownership<'_>,
) -> Result<Ensured> {
    let what = format!(
        "{} {}",
        resource.kind,
        key(desired.namespace().as_deref(), &desired.name_any())
    );
    let uid;
    let ownership = match ownership {
        Ownership::ControlledBy(dgd) => {
            uid = dgd.uid().unwrap_or_default();
            converge::Ownership::Controlled(&uid)
        }
        Ownership::Shared => converge::Ownership::Shared,
    };
    match CHILDREN
        .ensure_dynamic(reader, writer, resource, desired, ownership)
        .await
    {
        Ok(ensured) => Ok(ensured.change),
        Err(EnsureError::Conflict(conflict)) => Err(Error::OwnershipConflict {
            owner: conflict.owner(),
            kind: conflict.kind,
            key: conflict.key,
        }),
        Err(EnsureError::Read(source)) => Err(Error::api(format!("get {what}"))(source)),
        Err(EnsureError::Apply(source)) => Err(Error::api(format!("apply {what}"))(source)),
        Err(EnsureError::Convert(source)) => Err(Error::api(format!("convert {what}"))(source)),
    }
}

/// Hand over to [`FIELD_MANAGER`] the fields upstream's operator wrote on `live` that `desired`
/// sets, before a caller that converges by its own rule applies `desired`
/// ([`kit::child::Applier::take_over`]); whether `managedFields` changed.
pub async fn take_over<K: Kind>(writer: &dyn Writer, desired: &K, live: &K) -> kit::Result<bool> {
    CHILDREN.take_over(writer, desired, live).await
}

/// Create `desired` unless an object of its name exists; never update it. Returns the object as
/// the server holds it and whether this call created it.
pub(crate) async fn create_once<K: Kind + Clone>(
    reader: &dyn Reader,
    writer: &dyn Writer,
    desired: &K,
) -> Result<(K, bool)> {
    use kit::{ReaderExt, WriterExt};
    let name = desired.name_any();
    let namespace = desired.namespace();
    let ns = namespace.as_deref();
    let what = format!("{} {}", K::kind(&()), key(ns, &name));
    if let Some(existing) = reader
        .get::<K>(ns, &name)
        .await
        .map_err(Error::api(format!("get {what}")))?
    {
        return Ok((existing, false));
    }
    match writer.create(desired).await {
        Ok(created) => Ok((created, true)),
        Err(e) if e.is_already_exists() => {
            // Created concurrently (or our cache lags): read it back, it is not ours to rewrite.
            let existing = reader
                .get::<K>(ns, &name)
                .await
                .map_err(Error::api(format!("get {what}")))?
                .unwrap_or_else(|| desired.clone());
            Ok((existing, false))
        }
        Err(e) => Err(Error::api(format!("create {what}"))(e)),
    }
}

/// Delete `object` (kind `K`) if it still has the uid we observed.
pub(crate) async fn delete_observed<K: Kind>(writer: &dyn Writer, object: &K) -> Result<()> {
    use kit::WriterExt;
    let name = object.name_any();
    let namespace = object.namespace();
    let preconditions = Preconditions {
        uid: object.uid(),
        resource_version: None,
    };
    writer
        .delete::<K>(namespace.as_deref(), &name, &preconditions, None)
        .await
        .map_err(Error::api(format!(
            "delete {} {}",
            K::kind(&()),
            key(namespace.as_deref(), &name)
        )))?;
    Ok(())
}

/// Delete the child `name` of kind `K` that `dgd` no longer needs, if it exists and `dgd`
/// controls it (an object someone else made under that name is left alone), with the uid it
/// was read with as precondition; queue the `<Kind>Deleted` event.
pub(crate) async fn prune<K: Kind>(
    reader: &dyn Reader,
    writer: &dyn Writer,
    dgd: &DynamoGraphDeployment,
    name: &str,
    events: &mut Vec<Event>,
) -> Result<()> {
    use kit::ReaderExt;
    let ns = dgd.namespace();
    let kind = K::kind(&());
    let observed: Option<K> =
        reader
            .get(ns.as_deref(), name)
            .await
            .map_err(Error::api(format!(
                "get {kind} {}",
                key(ns.as_deref(), name)
            )))?;
    let Some(observed) = observed.filter(|o| is_controlled_by(o.meta(), dgd)) else {
        return Ok(());
    };
    delete_observed(writer, &observed).await?;
    record_deleted(events, &kind, ns.as_deref(), name);
    Ok(())
}

/// [`prune`] for a kind watched by the graph's label: the graph's objects of kind `K` are
/// [`Listed`] by that label (served from the label-selected watch, where a `get` that misses
/// would go to the API server) and those named in `names` that `dgd` controls are deleted.
pub(crate) async fn prune_labelled<K: Kind>(
    reader: &dyn Reader,
    writer: &dyn Writer,
    dgd: &DynamoGraphDeployment,
    names: &[&str],
    events: &mut Vec<Event>,
) -> Result<()> {
    let kind = K::kind(&());
    let listed = Listed::<K>::of(reader, dgd)
        .await
        .map_err(Error::api(format!("list {kind}")))?;
    let ns = dgd.namespace();
    for observed in names
        .iter()
        .filter_map(|name| listed.rest().get(*name))
        .filter(|o| is_controlled_by(o.meta(), dgd))
    {
        delete_observed(writer, observed).await?;
        record_deleted(events, &kind, ns.as_deref(), &observed.name_any());
    }
    Ok(())
}

/// A graph's objects of kind `K`, listed by the graph's label (`nvidia.com/dynamo-graph-deployment-name`)
/// and taken by name as a step converges them; a name the list lacks is read by name (an object
/// whose labels drifted still holds its name). What no name took is left for pruning.
pub struct Listed<K> {
    namespace: Option<String>,
    objects: BTreeMap<String, K>,
}

impl<K: Kind> Listed<K> {
    /// The graph's labelled objects of kind `K` in its namespace.
    pub async fn of(reader: &dyn Reader, dgd: &DynamoGraphDeployment) -> kit::Result<Self> {
        use kit::ReaderExt;
        let namespace = dgd.namespace();
        let selector: kit::Selector = crate::naming::graph_labels(&dgd.name_any())
            .into_iter()
            .collect();
        let listed: Vec<K> = reader.list(namespace.as_deref(), &selector).await?;
        let objects = listed.into_iter().map(|o| (o.name_any(), o)).collect();
        Ok(Listed { namespace, objects })
    }

    /// The object `name`: taken from the list, else read by name.
    pub async fn take(&mut self, reader: &dyn Reader, name: &str) -> kit::Result<Option<K>> {
        use kit::ReaderExt;
        match self.objects.remove(name) {
            Some(o) => Ok(Some(o)),
            None => reader.get(self.namespace.as_deref(), name).await,
        }
    }

    /// The listed objects no name took, by name.
    pub fn rest(&self) -> &BTreeMap<String, K> {
        &self.objects
    }
}

/// Whether a read or write failed because the kind is not served (HTTP 404). An unserved API
/// group answers `404 page not found` without a Status body, which the capability error does
/// not classify as NotFound, so both forms count.
pub(crate) fn is_not_served(error: &kit::Error) -> bool {
    match error {
        kit::Error::NotFound(_) => true,
        kit::Error::Kube(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// Whether `object` has a controller owner reference to `dgd`.
pub(crate) fn is_controlled_by(object: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    dgd.uid()
        .is_some_and(|uid| converge::is_controlled_by(object, &uid))
}

/// The event reason of a mutation of `kind`: `<Kind>Created`, `<Kind>Updated`, `<Kind>Deleted`
/// (`PersistentVolumeClaim` is abbreviated `PVC`).
pub(crate) fn event_reason(kind: &str, verb: &str) -> String {
    let kind = match kind {
        "PersistentVolumeClaim" => "PVC",
        other => other,
    };
    format!("{kind}{verb}")
}

/// Queue the mutation event for `ensured` (nothing for [`Ensured::Unchanged`]) and log it.
pub(crate) fn record(
    events: &mut Vec<Event>,
    ensured: Ensured,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) {
    let verb = match ensured {
        Ensured::Created => "Created",
        Ensured::Updated => "Updated",
        Ensured::Unchanged => return,
    };
    let object = key(namespace, name);
    tracing::info!(kind, object = %object, action = verb, "child converged");
    events.push(
        Event::normal(&event_reason(kind, verb), format!("{verb} {kind} {object}"))
            .mutation(verb, kind, name),
    );
}

/// Queue the `<Kind>Deleted` event and log it.
pub(crate) fn record_deleted(
    events: &mut Vec<Event>,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) {
    let object = key(namespace, name);
    tracing::info!(kind, object = %object, action = "Deleted", "child removed");
    events.push(
        Event::normal(
            &event_reason(kind, "Deleted"),
            format!("Deleted {kind} {object}"),
        )
        .mutation("Deleted", kind, name),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_reasons() {
        assert_eq!(
            event_reason("PersistentVolumeClaim", "Created"),
            "PVCCreated"
        );
        assert_eq!(
            event_reason("ServiceAccount", "Updated"),
            "ServiceAccountUpdated"
        );
    }

    #[test]
    fn upstream_releases_its_own_bookkeeping() {
        let released: Vec<String> = UPSTREAM.released.iter().map(|p| p.join("/")).collect();
        assert_eq!(
            released,
            [
                format!(
                    "f:metadata/f:annotations/f:{}",
                    api::labels::LAST_APPLIED_GENERATION
                ),
                format!(
                    "f:metadata/f:finalizers/v:{}",
                    serde_json::Value::from(api::labels::UPSTREAM_FINALIZER)
                ),
            ]
        );
    }
}
