//! Planner and EPP service accounts, bound to operator-configured ClusterRoles.
//!
//! Only in cluster-wide mode (a namespace-restricted install ships these accounts itself, as
//! upstream's Helm chart does). For a graph with a `planner` component the namespace gets the
//! ServiceAccount `planner-serviceaccount` and the RoleBinding `planner-serviceaccount-binding`
//! to the planner ClusterRole; for a graph with an `epp` component, `epp-serviceaccount` and
//! `epp-serviceaccount-binding` to the EPP ClusterRole. The ClusterRole must exist.
//!
//! These objects are **per namespace**, shared by every graph there, so unlike the other
//! children they carry no owner reference to one graph (garbage collection would delete them
//! from under the other graphs); they are labelled `app.kubernetes.io/managed-by:
//! dynamo-operator` as upstream labels them. A RoleBinding whose `roleRef` differs (the
//! configured ClusterRole changed) is deleted and recreated, `roleRef` being immutable.
//!
//! Upstream binds the planner account in every cluster-wide namespace with a graph; here only
//! when the graph has a planner, the only pods that use it.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::labels::{EPP_SERVICE_ACCOUNT, PLANNER_SERVICE_ACCOUNT};
use api::{ComponentType, DynamoGraphDeployment};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Event, Reader, ReaderExt, Writer};
use kube::ResourceExt;

use crate::child::{self, Ensured, MANAGED_BY, Ownership};
use crate::error::{Error, Result};

/// Operator settings the RBAC step needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacConfig {
    /// The operator watches every namespace (`false`: restricted to one; nothing to do).
    pub cluster_wide: bool,
    /// ClusterRole bound to `planner-serviceaccount`.
    pub planner_cluster_role: Option<String>,
    /// ClusterRole bound to `epp-serviceaccount`.
    pub epp_cluster_role: Option<String>,
}

/// Ensures the planner and EPP service accounts and their RoleBindings.
pub struct RbacReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    config: RbacConfig,
}

impl RbacReconciler {
    /// A reconciler reading through `reader` and writing through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: RbacConfig) -> Self {
        Self {
            reader,
            writer,
            config,
        }
    }

    /// Ensure the accounts the graph's planner and EPP components need.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        if !self.config.cluster_wide {
            return Ok(());
        }
        let namespace = dgd.namespace().unwrap_or_default();
        let has = |t: ComponentType| dgd.spec.components.iter().any(|c| c.r#type == Some(t));
        if has(ComponentType::Planner) {
            let role = self.config.planner_cluster_role.as_deref().ok_or_else(|| {
                Error::Config("planner ClusterRole name is required in cluster-wide mode".into())
            })?;
            self.ensure(&namespace, PLANNER_SERVICE_ACCOUNT, role, events)
                .await?;
        }
        if has(ComponentType::Epp) {
            let role = self.config.epp_cluster_role.as_deref().ok_or_else(|| {
                Error::Config(
                    "EPP ClusterRole name is required in cluster-wide mode when an EPP component is present"
                        .into(),
                )
            })?;
            self.ensure(&namespace, EPP_SERVICE_ACCOUNT, role, events)
                .await?;
        }
        Ok(())
    }

    /// One ServiceAccount plus its RoleBinding to `cluster_role`. The ClusterRole is read (it
    /// is not watched) only when the binding to it is missing or names another role: a reconcile
    /// that finds the binding in place reads nothing from the API server.
    async fn ensure(
        &self,
        namespace: &str,
        account: &str,
        cluster_role: &str,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let (sa, rb) = render(namespace, account, cluster_role);
        let rb_name = rb.name_any();
        let observed: Option<RoleBinding> = self
            .reader
            .get(Some(namespace), &rb_name)
            .await
            .map_err(Error::api(format!("get RoleBinding {namespace}/{rb_name}")))?;
        if observed.as_ref().is_none_or(|o| o.role_ref != rb.role_ref) {
            let role: Option<ClusterRole> = self
                .reader
                .get(None, cluster_role)
                .await
                .map_err(Error::api(format!("get ClusterRole {cluster_role}")))?;
            if role.is_none() {
                return Err(Error::Missing(format!(
                    "cluster role {cluster_role:?} does not exist: ensure it is created before deploying components"
                )));
            }
        }
        let ensured = child::ensure(&*self.reader, &*self.writer, &sa, Ownership::Shared).await?;
        child::record(events, ensured, "ServiceAccount", Some(namespace), account);

        let mut recreated = false;
        if let Some(observed) = observed.filter(|o| o.role_ref != rb.role_ref) {
            tracing::info!(
                role_binding = %format!("{namespace}/{rb_name}"),
                from = %observed.role_ref.name,
                to = %cluster_role,
                "roleRef changed; recreating RoleBinding"
            );
            child::delete_observed(&*self.writer, &observed).await?;
            recreated = true;
        }
        let ensured = child::ensure(&*self.reader, &*self.writer, &rb, Ownership::Shared).await?;
        let ensured = match ensured {
            Ensured::Created if recreated => Ensured::Updated,
            other => other,
        };
        child::record(events, ensured, "RoleBinding", Some(namespace), &rb_name);
        Ok(())
    }
}

/// The ServiceAccount `account` and the RoleBinding `<account>-binding` to `cluster_role`.
pub fn render(namespace: &str, account: &str, cluster_role: &str) -> (ServiceAccount, RoleBinding) {
    let labels = BTreeMap::from([
        (
            api::labels::APP_MANAGED_BY.to_string(),
            MANAGED_BY.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "rbac".to_string(),
        ),
        (api::labels::APP_NAME.to_string(), account.to_string()),
    ]);
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(labels.clone()),
        ..Default::default()
    };
    let sa = ServiceAccount {
        metadata: meta(account.to_string()),
        ..Default::default()
    };
    let rb = RoleBinding {
        metadata: meta(format!("{account}-binding")),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: cluster_role.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.to_string(),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        }]),
    };
    (sa, rb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use kit::testing::{Double, Verb};

    fn config() -> RbacConfig {
        RbacConfig {
            cluster_wide: true,
            planner_cluster_role: Some("planner-role".into()),
            epp_cluster_role: Some("epp-role".into()),
        }
    }

    fn cluster_role(d: &Double, name: &str) {
        d.insert(ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        });
    }

    fn graph(d: &Double) -> DynamoGraphDeployment {
        d.insert(dgd(
            "g",
            vec![
                component("Planner", ComponentType::Planner),
                component("Epp", ComponentType::Epp),
            ],
        ))
    }

    fn reconciler(d: &Double, config: RbacConfig) -> RbacReconciler {
        RbacReconciler::new(d.reader(), d.writer(), config)
    }

    #[tokio::test]
    async fn creates_accounts_then_writes_nothing() {
        let d = Double::new();
        cluster_role(&d, "planner-role");
        cluster_role(&d, "epp-role");
        let g = graph(&d);
        let r = reconciler(&d, config());
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        let rb: RoleBinding = d
            .object(Some("ns"), "planner-serviceaccount-binding")
            .unwrap();
        assert_eq!(rb.role_ref.name, "planner-role");
        assert!(rb.metadata.owner_references.is_none());
        assert!(
            d.object::<ServiceAccount>(Some("ns"), "epp-serviceaccount")
                .is_some()
        );
        assert_eq!(
            reasons(&events),
            [
                "ServiceAccountCreated",
                "RoleBindingCreated",
                "ServiceAccountCreated",
                "RoleBindingCreated"
            ]
        );

        d.clear_writes();
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn drift_and_role_change_are_restored() {
        let d = Double::new();
        cluster_role(&d, "planner-role");
        cluster_role(&d, "other-role");
        let g = d.insert(dgd("g", vec![component("P", ComponentType::Planner)]));
        reconciler(&d, config()).reconcile(&g).await.result.unwrap();
        // A user edits the subjects.
        let mut rb: RoleBinding = d
            .object(Some("ns"), "planner-serviceaccount-binding")
            .unwrap();
        rb.subjects = Some(vec![]);
        d.insert(rb);
        let mut events = Vec::new();
        reconciler(&d, config())
            .reconcile(&g)
            .await
            .events_into(&mut events)
            .unwrap();
        assert_eq!(reasons(&events), ["RoleBindingUpdated"]);
        let rb: RoleBinding = d
            .object(Some("ns"), "planner-serviceaccount-binding")
            .unwrap();
        assert_eq!(rb.subjects.unwrap()[0].name, "planner-serviceaccount");

        // The operator is reconfigured with another ClusterRole: the binding is recreated.
        let mut other = config();
        other.planner_cluster_role = Some("other-role".into());
        d.clear_writes();
        reconciler(&d, other).reconcile(&g).await.result.unwrap();
        let verbs: Vec<Verb> = d.writes().iter().map(|w| w.verb).collect();
        assert_eq!(verbs, [Verb::Delete, Verb::Apply]);
        let rb: RoleBinding = d
            .object(Some("ns"), "planner-serviceaccount-binding")
            .unwrap();
        assert_eq!(rb.role_ref.name, "other-role");
    }

    /// With the binding in place the ClusterRole is not read (a failing read goes unnoticed);
    /// a binding that must be made reads it.
    #[tokio::test]
    async fn the_cluster_role_is_read_only_to_bind_it() {
        let d = Double::new();
        let g = graph(&d);
        cluster_role(&d, "planner-role");
        cluster_role(&d, "epp-role");
        reconciler(&d, config()).reconcile(&g).await.result.unwrap();
        let unreadable = || kit::Error::Forbidden("get clusterroles".into());
        d.fail_next(Verb::Get, "ClusterRole", unreadable());
        reconciler(&d, config()).reconcile(&g).await.result.unwrap();

        let mut other = config();
        other.planner_cluster_role = Some("epp-role".into());
        d.fail_next(Verb::Get, "ClusterRole", unreadable());
        let err = reconciler(&d, other)
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(
            err.to_string().contains("get ClusterRole epp-role"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn only_cluster_wide_and_only_with_the_components() {
        let d = Double::new();
        let g = graph(&d);
        let mut restricted = config();
        restricted.cluster_wide = false;
        reconciler(&d, restricted)
            .reconcile(&g)
            .await
            .result
            .unwrap();
        let plain = d.insert(dgd("plain", vec![component("W", ComponentType::Worker)]));
        reconciler(&d, config())
            .reconcile(&plain)
            .await
            .result
            .unwrap();
        assert!(d.writes().is_empty());
    }

    #[tokio::test]
    async fn missing_configuration_or_cluster_role_fails() {
        let d = Double::new();
        let g = graph(&d);
        let mut unset = config();
        unset.planner_cluster_role = None;
        let err = reconciler(&d, unset)
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        assert!(err.awaits_change());

        let err = reconciler(&d, config())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(
            err.to_string().contains("\"planner-role\" does not exist"),
            "{err}"
        );
        assert!(!err.awaits_change());
        assert!(d.writes().is_empty());

        cluster_role(&d, "planner-role");
        cluster_role(&d, "epp-role");
        d.fail_next(
            Verb::Apply,
            "RoleBinding",
            kit::Error::Forbidden("no".into()),
        );
        let err = reconciler(&d, config())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("apply RoleBinding ns/planner-serviceaccount-binding"),
            "{err}"
        );
    }
}
