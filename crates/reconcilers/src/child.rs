//! Writing the children of a DynamoGraphDeployment: owner references, "apply only what differs",
//! ownership checks and the mutation events that follow a write.
//!
//! [`ensure`] reads the child through the [`Reader`] first and applies (server-side, field
//! manager [`FIELD_MANAGER`]) only when the observed object does not already hold every field
//! the desired one sets. An idle reconcile therefore writes nothing, and a user's change to a
//! field we set is restored on the next pass. Fields the server or other managers add are left
//! alone. The price: a field this code stops setting stays on existing children until another
//! difference triggers an apply (server-side apply then removes it).

use std::collections::BTreeMap;

use api::DynamoGraphDeployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kit::object::{key, resource, to_dynamic};
use kit::{Event, Kind, Preconditions, Reader, Writer};
use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::error::{Error, Result};

/// Field manager of every server-side apply the shared reconcilers do.
pub const FIELD_MANAGER: &str = "dynamo-operator/dgd";

/// Label value of `app.kubernetes.io/managed-by` on objects this operator creates.
pub const MANAGED_BY: &str = "dynamo-operator";

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// The child did not exist and was created.
    Created,
    /// The child existed and a field we set was changed back.
    Updated,
    /// The child already matched: nothing was written.
    Unchanged,
}

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
    let name = desired.name_any();
    let namespace = desired.namespace();
    let ns = namespace.as_deref();
    let what = format!("{} {}", resource.kind, key(ns, &name));
    let observed = reader
        .get_dynamic(resource, ns, &name)
        .await
        .map_err(Error::api(format!("get {what}")))?;
    if let Some(observed) = &observed {
        if let Ownership::ControlledBy(dgd) = ownership {
            check_controller(&resource.kind, observed, dgd)?;
        }
        let observed = serde_json::to_value(observed).unwrap_or(Value::Null);
        let desired = serde_json::to_value(desired).unwrap_or(Value::Null);
        if contains(&observed, &desired) {
            return Ok(Ensured::Unchanged);
        }
    }
    let applied = writer
        .apply_dynamic(resource, desired, Some(FIELD_MANAGER))
        .await
        .map_err(Error::api(format!("apply {what}")))?;
    Ok(match (applied.changed, observed.is_some()) {
        (false, _) => Ensured::Unchanged,
        (true, false) => Ensured::Created,
        (true, true) => Ensured::Updated,
    })
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
    let uid = dgd.uid();
    controller_of(object).is_some_and(|o| Some(&o.uid) == uid.as_ref())
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

fn check_controller(
    kind: &str,
    observed: &DynamicObject,
    dgd: &DynamoGraphDeployment,
) -> Result<()> {
    if is_controlled_by(&observed.metadata, dgd) {
        return Ok(());
    }
    let owner = match controller_of(&observed.metadata) {
        Some(o) => format!("is controlled by {} {}", o.kind, o.name),
        None => "has no controller owner".to_string(),
    };
    Err(Error::OwnershipConflict {
        kind: kind.to_string(),
        key: key(observed.metadata.namespace.as_deref(), &observed.name_any()),
        owner,
    })
}

/// Whether `observed` holds every field `desired` sets, with the same value. Objects compare
/// field by field (extra observed fields are fine), lists element by element with equal length,
/// `metadata.ownerReferences` as a set (others may add their own references).
pub(crate) fn contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (_, Value::Null) => true,
        (Value::Object(o), Value::Object(d)) => d.iter().all(|(k, dv)| match o.get(k) {
            Some(ov) if k == "ownerReferences" => set_contains(ov, dv),
            Some(ov) => contains(ov, dv),
            None => dv.is_null(),
        }),
        (Value::Array(o), Value::Array(d)) => {
            o.len() == d.len() && o.iter().zip(d).all(|(ov, dv)| contains(ov, dv))
        }
        (Value::Number(o), Value::Number(d)) => o.as_f64() == d.as_f64(),
        (o, d) => o == d,
    }
}

fn set_contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (Value::Array(o), Value::Array(d)) => {
            d.iter().all(|dv| o.iter().any(|ov| contains(ov, dv)))
        }
        _ => contains(observed, desired),
    }
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
    events.push(Event::normal(
        &event_reason(kind, verb),
        format!("{verb} {kind} {object}"),
    ));
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
    events.push(Event::normal(
        &event_reason(kind, "Deleted"),
        format!("Deleted {kind} {object}"),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn contains_compares_what_desired_sets() {
        let observed = json!({
            "metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "y": "2"},
                "ownerReferences": [{"uid": "other"}, {"uid": "dgd", "controller": true}]},
            "rules": [{"verbs": ["get"], "apiGroups": [""]}],
            "n": 1
        });
        assert!(contains(
            &observed,
            &json!({"metadata": {"name": "a", "labels": {"x": "1"},
                "ownerReferences": [{"uid": "dgd", "controller": true}]},
                "rules": [{"verbs": ["get"]}], "n": 1.0})
        ));
        assert!(!contains(
            &observed,
            &json!({"metadata": {"labels": {"x": "2"}}})
        ));
        assert!(!contains(
            &observed,
            &json!({"rules": [{"verbs": ["get"]}, {}]})
        ));
        assert!(!contains(&observed, &json!({"missing": "v"})));
        assert!(!contains(
            &observed,
            &json!({"metadata": {"ownerReferences": [{"uid": "third"}]}})
        ));
    }

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
}
