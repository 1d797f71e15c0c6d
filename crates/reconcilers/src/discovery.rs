//! RBAC for Kubernetes discovery: a ServiceAccount, Role and RoleBinding named from the graph.
//!
//! Kubernetes discovery is on when the graph's annotation `nvidia.com/dynamo-discovery-backend`
//! says `kubernetes`, or, without the annotation, when the operator's default backend is
//! Kubernetes (the default, as upstream). The objects, owned by the graph:
//! - ServiceAccount `<dgd>-k8s-service-discovery`;
//! - Role `<dgd>-k8s-service-discovery-role`: get/list/watch `endpoints` and `pods`, get/list/watch
//!   `discovery.k8s.io` `endpointslices`, and create/get/list/watch/update/patch/delete
//!   `nvidia.com` `dynamoworkermetadatas` (the CRD the operator ships, `api::worker_metadata`;
//!   each worker applies its own, owned by its Pod);
//! - RoleBinding `<dgd>-k8s-service-discovery-binding` of the Role to the ServiceAccount.
//!
//! The ServiceAccount also runs checkpoint capture pods. Turning discovery off renders pods that
//! name no account; the three objects the graph controls are deleted by [`DiscoveryReconciler::release`]
//! (RoleBinding first), which the programs call once the graph is Ready again, that is once
//! every component runs pods of the new spec: deleting the account earlier would revoke the
//! tokens of the pods still serving (upstream leaves the objects until the graph goes).

use std::collections::BTreeMap;
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::labels::DYNAMO_DISCOVERY_BACKEND;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kit::{Event, Reader, Writer};
use kube::ResourceExt;

use crate::child::{self, MANAGED_BY, Ownership};
use crate::error::{Error, Result};
use crate::naming;

/// Where Dynamo components discover each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiscoveryBackend {
    /// Kubernetes objects (EndpointSlices, DynamoWorkerMetadata); upstream's default.
    #[default]
    Kubernetes,
    /// An etcd cluster.
    Etcd,
}

impl DiscoveryBackend {
    /// The wire value (`kubernetes`, `etcd`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kubernetes => "kubernetes",
            Self::Etcd => "etcd",
        }
    }
}

/// Whether the graph uses Kubernetes discovery: its annotation, else `default`.
pub fn kubernetes_discovery_enabled(
    default: DiscoveryBackend,
    dgd: &DynamoGraphDeployment,
) -> bool {
    match dgd.annotations().get(DYNAMO_DISCOVERY_BACKEND) {
        Some(value) => value == DiscoveryBackend::Kubernetes.as_str(),
        None => default == DiscoveryBackend::Kubernetes,
    }
}

/// Ensures the discovery ServiceAccount, Role and RoleBinding of a graph.
pub struct DiscoveryReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    default_backend: DiscoveryBackend,
}

impl DiscoveryReconciler {
    /// A reconciler with the operator's default backend.
    pub fn new(
        reader: Arc<dyn Reader>,
        writer: Arc<dyn Writer>,
        default_backend: DiscoveryBackend,
    ) -> Self {
        Self {
            reader,
            writer,
            default_backend,
        }
    }

    /// Ensure the three objects when Kubernetes discovery is on.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        if !kubernetes_discovery_enabled(self.default_backend, dgd) {
            return Ok(());
        }
        let (sa, role, rb) = render(dgd)?;
        let ns = dgd.namespace();
        let ns = ns.as_deref();
        let owned = Ownership::ControlledBy(dgd);
        let e = child::ensure(&*self.reader, &*self.writer, &sa, owned).await?;
        child::record(events, e, "ServiceAccount", ns, &sa.name_any());
        let e = child::ensure(&*self.reader, &*self.writer, &role, owned).await?;
        child::record(events, e, "Role", ns, &role.name_any());
        let e = child::ensure(&*self.reader, &*self.writer, &rb, owned).await?;
        child::record(events, e, "RoleBinding", ns, &rb.name_any());
        Ok(())
    }

    /// When Kubernetes discovery is off, delete the RoleBinding, Role and ServiceAccount the
    /// graph controls (read from the graph-labelled watches: no request when there is nothing to
    /// delete). Call it once no pod of the graph runs with the account any more (the graph is
    /// Ready at its current spec).
    pub async fn release(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = if kubernetes_discovery_enabled(self.default_backend, dgd) {
            Ok(())
        } else {
            self.prune(dgd, &mut events).await
        };
        kit::Step::new(result, events)
    }

    async fn prune(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let (account, role, binding) = names(dgd);
        let (r, w) = (&*self.reader, &*self.writer);
        child::prune_labelled::<RoleBinding>(r, w, dgd, &[&binding], events).await?;
        child::prune_labelled::<Role>(r, w, dgd, &[&role], events).await?;
        child::prune_labelled::<ServiceAccount>(r, w, dgd, &[&account], events).await
    }
}

/// The names of the ServiceAccount, Role and RoleBinding of `dgd`.
fn names(dgd: &DynamoGraphDeployment) -> (String, String, String) {
    let account = naming::discovery_service_account(&dgd.name_any());
    let role = format!("{account}-role");
    let binding = format!("{account}-binding");
    (account, role, binding)
}

/// The discovery ServiceAccount, Role and RoleBinding of `dgd`.
pub fn render(dgd: &DynamoGraphDeployment) -> Result<(ServiceAccount, Role, RoleBinding)> {
    let (account, role_name, binding) = names(dgd);
    let mut labels = naming::graph_labels(&dgd.name_any());
    labels.extend(BTreeMap::from([
        (
            api::labels::APP_MANAGED_BY.to_string(),
            MANAGED_BY.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "rbac".to_string(),
        ),
        (api::labels::APP_NAME.to_string(), account.clone()),
    ]));
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    let read = ["get", "list", "watch"];
    let sa = ServiceAccount {
        metadata: child::owned_meta(dgd, &account, labels.clone())?,
        ..Default::default()
    };
    let role = Role {
        metadata: child::owned_meta(dgd, &role_name, labels.clone())?,
        rules: Some(vec![
            rule("", &["endpoints"], &read),
            rule("", &["pods"], &read),
            rule("discovery.k8s.io", &["endpointslices"], &read),
            rule(
                "nvidia.com",
                &["dynamoworkermetadatas"],
                &[
                    "create", "get", "list", "watch", "update", "patch", "delete",
                ],
            ),
        ]),
    };
    let rb = RoleBinding {
        metadata: child::owned_meta(dgd, binding, labels)?,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: role_name,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account,
            namespace: dgd.namespace(),
            ..Default::default()
        }]),
    };
    Ok((sa, role, rb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::testutil::{dgd, reasons};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::testing::{Double, Verb};

    fn graph(d: &Double, backend: Option<&str>) -> DynamoGraphDeployment {
        let mut g = dgd("g", vec![]);
        if let Some(b) = backend {
            g.metadata.annotations = Some(BTreeMap::from([(
                DYNAMO_DISCOVERY_BACKEND.to_string(),
                b.to_string(),
            )]));
        }
        d.insert(g)
    }

    #[tokio::test]
    async fn creates_the_three_objects_then_writes_nothing() {
        let d = Double::new();
        let g = graph(&d, None);
        let r = DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(
            reasons(&events),
            ["ServiceAccountCreated", "RoleCreated", "RoleBindingCreated"]
        );
        let rb: RoleBinding = d
            .object(Some("ns"), "g-k8s-service-discovery-binding")
            .unwrap();
        assert_eq!(rb.role_ref.name, "g-k8s-service-discovery-role");
        assert!(child::is_controlled_by(&rb.metadata, &g));
        d.clear_writes();
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn drift_on_rules_is_restored() {
        let d = Double::new();
        let g = graph(&d, None);
        let r = DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        r.reconcile(&g).await.result.unwrap();
        let mut role: Role = d
            .object(Some("ns"), "g-k8s-service-discovery-role")
            .unwrap();
        role.rules = Some(vec![]);
        d.insert(role);
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["RoleUpdated"]);
        let role: Role = d
            .object(Some("ns"), "g-k8s-service-discovery-role")
            .unwrap();
        assert_eq!(role.rules.unwrap().len(), 4);
    }

    #[tokio::test]
    async fn annotation_overrides_the_default() {
        let d = Double::new();
        let off = graph(&d, Some("etcd"));
        DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes)
            .reconcile(&off)
            .await
            .result
            .unwrap();
        assert!(d.writes().is_empty());
        let on = graph(&d, Some("kubernetes"));
        DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Etcd)
            .reconcile(&on)
            .await
            .result
            .unwrap();
        assert_eq!(d.writes().len(), 3);
    }

    #[tokio::test]
    async fn turning_discovery_off_releases_what_the_graph_controls() {
        let d = Double::new();
        let mut g = graph(&d, None);
        let r = DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        r.reconcile(&g).await.result.unwrap();
        // A graph-labelled account of the same name family that the graph does not control.
        let mut foreign: ServiceAccount = d.object(Some("ns"), "g-k8s-service-discovery").unwrap();
        foreign.metadata.name = Some("g-k8s-service-discovery-binding".into());
        foreign.metadata.owner_references = None;
        foreign.metadata.uid = None;
        foreign.metadata.resource_version = None;
        d.insert(foreign);
        g.metadata.annotations = Some(BTreeMap::from([(
            DYNAMO_DISCOVERY_BACKEND.to_string(),
            "etcd".to_string(),
        )]));
        let g = d.insert(g);
        d.clear_writes();
        r.reconcile(&g).await.result.unwrap();
        assert!(
            d.writes().is_empty(),
            "nothing goes before the graph is ready again"
        );
        let mut events = Vec::new();
        r.release(&g).await.events_into(&mut events).unwrap();
        assert_eq!(
            reasons(&events),
            ["RoleBindingDeleted", "RoleDeleted", "ServiceAccountDeleted"]
        );
        assert!(
            d.writes().iter().all(|w| w.verb == Verb::Delete),
            "{:?}",
            d.writes()
        );
        let (account, role, binding) = names(&g);
        assert!(d.object::<ServiceAccount>(Some("ns"), &account).is_none());
        assert!(d.object::<Role>(Some("ns"), &role).is_none());
        assert!(d.object::<RoleBinding>(Some("ns"), &binding).is_none());
        assert!(
            d.object::<ServiceAccount>(Some("ns"), &binding).is_some(),
            "an object the graph does not control is kept"
        );
        d.clear_writes();
        let mut events = Vec::new();
        r.release(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty() && events.is_empty());
    }

    #[tokio::test]
    async fn foreign_objects_are_not_taken_over_and_failures_surface() {
        let d = Double::new();
        let g = graph(&d, None);
        d.insert(ServiceAccount {
            metadata: ObjectMeta {
                name: Some("g-k8s-service-discovery".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let r = DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(err.is_ownership_conflict(), "{err}");
        assert!(d.writes().is_empty());

        let d = Double::new();
        let g = graph(&d, None);
        d.fail_next(Verb::Apply, "Role", kit::Error::Forbidden("rbac".into()));
        let r = DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(matches!(err, Error::Api { .. }), "{err}");
        assert_eq!(d.writes().len(), 1, "only the ServiceAccount was written");
    }
}
