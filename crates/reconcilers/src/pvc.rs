//! Top-level PVCs of graphs written as v1alpha1 (`spec.pvcs`).
//!
//! v1beta1 has no `spec.pvcs`; a graph converted from v1alpha1 keeps them in the conversion's
//! preserved-spec annotation ([`api::conversion::preserved_alpha_pvcs`]). For each entry:
//! - no name: skipped (logged), as upstream;
//! - the PVC exists: left alone. PVCs are **never updated** (their spec is mostly immutable, and
//!   a user's resize must survive);
//! - absent and `create: true`: created with a controller reference to the graph (event
//!   `PVCCreated`): `accessModes: [volumeAccessMode]`, `resources.requests.storage: size`, and
//!   `storageClassName` when one is given;
//! - absent otherwise: an error, retried with backoff (the user may create it).
//!
//! A PVC whose entry left the spec is **not** deleted (the one exception to pruning: it holds
//! data, as upstream); garbage collection removes it with the graph.
//!
//! Upstream sets `storageClassName: ""` when no class is given, which disables dynamic
//! provisioning; here the field is left out so the cluster's default class applies.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::conversion::preserved_alpha_pvcs;
use api::v1alpha1::Pvc;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use kit::{Event, Reader, Writer};
use kube::ResourceExt;

use crate::child;
use crate::error::{Error, Result};
use crate::naming;

/// Creates the preserved v1alpha1 top-level PVCs.
pub struct PvcReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl PvcReconciler {
    /// A reconciler reading through `reader` and creating through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Self { reader, writer }
    }

    /// Create the missing creatable PVCs; fail on a missing one that may not be created.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let namespace = dgd.namespace();
        for pvc in preserved_alpha_pvcs(dgd) {
            if pvc.name.is_empty() {
                tracing::warn!(dgd = %child::key_of_dgd(dgd), "legacy top-level PVC has no name; skipped");
                continue;
            }
            let existing: Option<PersistentVolumeClaim> =
                kit::ReaderExt::get(&*self.reader, namespace.as_deref(), &pvc.name)
                    .await
                    .map_err(Error::api(format!(
                        "get PersistentVolumeClaim {}",
                        kit::object::key(namespace.as_deref(), &pvc.name)
                    )))?;
            if existing.is_some() {
                continue;
            }
            if pvc.create != Some(true) {
                return Err(Error::Missing(format!(
                    "legacy top-level PVC {:?} does not exist and create is not enabled",
                    pvc.name
                )));
            }
            let desired = render(dgd, &pvc)?;
            let (_, created) = child::create_once(&*self.reader, &*self.writer, &desired).await?;
            if created {
                child::record(
                    events,
                    child::Ensured::Created,
                    "PersistentVolumeClaim",
                    namespace.as_deref(),
                    &pvc.name,
                );
            }
        }
        Ok(())
    }
}

/// The PVC `pvc` describes, owned by the graph.
pub fn render(dgd: &DynamoGraphDeployment, pvc: &Pvc) -> Result<PersistentVolumeClaim> {
    let invalid = |what: &str| {
        Error::InvalidSpec(format!(
            "legacy top-level PVC {:?}: {what} is required when create is true",
            pvc.name
        ))
    };
    let size = pvc.size.clone().ok_or_else(|| invalid("size"))?;
    let access_mode = pvc
        .volume_access_mode
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("volumeAccessMode"))?;
    Ok(PersistentVolumeClaim {
        metadata: child::owned_meta(dgd, &pvc.name, naming::graph_labels(&dgd.name_any()))?,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![access_mode]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), size)])),
                ..Default::default()
            }),
            storage_class_name: pvc.storage_class.clone().filter(|s| !s.is_empty()),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{dgd, reasons};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kit::testing::{Double, Verb};

    fn alpha_pvc(name: &str, create: Option<bool>) -> Pvc {
        Pvc {
            create,
            name: name.into(),
            storage_class: Some("fast".into()),
            size: Some(Quantity("10Gi".into())),
            volume_access_mode: Some("ReadWriteMany".into()),
        }
    }

    /// A v1beta1 graph converted from a v1alpha1 one with `pvcs`.
    fn graph(d: &Double, pvcs: Vec<Pvc>) -> DynamoGraphDeployment {
        let beta = dgd("g", vec![]);
        let mut alpha = api::conversion::to_v1alpha1(&beta);
        alpha.spec.pvcs = pvcs;
        d.insert(api::conversion::to_v1beta1(&alpha))
    }

    #[tokio::test]
    async fn creates_once_and_never_updates() {
        let d = Double::new();
        let g = graph(
            &d,
            vec![alpha_pvc("models", Some(true)), alpha_pvc("", Some(true))],
        );
        let r = PvcReconciler::new(d.reader(), d.writer());
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["PVCCreated"]);
        let pvc: PersistentVolumeClaim = d.object(Some("ns"), "models").unwrap();
        let spec = pvc.spec.as_ref().unwrap();
        assert_eq!(
            spec.access_modes.as_deref(),
            Some(&["ReadWriteMany".to_string()][..])
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            pvc.metadata.owner_references.unwrap()[0].uid,
            g.metadata.uid.clone().unwrap()
        );

        d.clear_writes();
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty());
        assert!(events.is_empty());

        // The user resized it: still never rewritten.
        let mut resized: PersistentVolumeClaim = d.object(Some("ns"), "models").unwrap();
        resized.spec.as_mut().unwrap().resources = Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(
                "storage".into(),
                Quantity("20Gi".into()),
            )])),
            ..Default::default()
        });
        d.insert(resized);
        r.reconcile(&g).await.result.unwrap();
        assert!(d.writes().is_empty());
        let pvc: PersistentVolumeClaim = d.object(Some("ns"), "models").unwrap();
        let requests = pvc.spec.unwrap().resources.unwrap().requests.unwrap();
        assert_eq!(requests["storage"], Quantity("20Gi".into()));
    }

    #[tokio::test]
    async fn missing_pvc_that_may_not_be_created_fails() {
        let d = Double::new();
        let g = graph(&d, vec![alpha_pvc("data", None)]);
        let err = PvcReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(err.to_string().contains("\"data\" does not exist"), "{err}");
        assert!(!err.awaits_change());
        assert!(d.writes().is_empty());
    }

    #[tokio::test]
    async fn incomplete_entry_is_invalid_and_api_errors_surface() {
        let d = Double::new();
        let mut incomplete = alpha_pvc("data", Some(true));
        incomplete.size = None;
        let g = graph(&d, vec![incomplete]);
        let err = PvcReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(err.awaits_change(), "{err}");

        let g = graph(&d, vec![alpha_pvc("data", Some(true))]);
        d.fail_next(
            Verb::Create,
            "PersistentVolumeClaim",
            kit::Error::Forbidden("quota".into()),
        );
        let err = PvcReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("create PersistentVolumeClaim ns/data"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn graphs_without_preserved_pvcs_do_nothing() {
        let d = Double::new();
        let g = d.insert(dgd("g", vec![]));
        PvcReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap();
        assert!(d.writes().is_empty());
    }
}
