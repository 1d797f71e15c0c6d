//! The steps both programs end with, once the graph's `Ready` condition is known:
//! - **release**: when the graph is Ready at its current spec, every component runs pods that no
//!   longer use what the graph stopped asking for, so it goes (today the discovery
//!   ServiceAccount, Role and RoleBinding after Kubernetes discovery was turned off;
//!   [`DiscoveryReconciler::release`]);
//! - **scaling adapters**: one DGDSA per component with `scalingAdapter`, skipped while a
//!   component waits for its checkpoint (as upstream: adapters wait until the checkpointed
//!   components can start).

use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::DynamoGraphDeploymentScalingAdapter;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kit::{Reader, Scoped, Writer};

use crate::discovery::{DiscoveryBackend, DiscoveryReconciler};
use crate::error::REASON_FAILED_TO_RECONCILE_RESOURCES;
use crate::scaling_adapters::{self, REASON_SCALING_ADAPTERS_FAILED, ScalingAdapters};

/// Why the last steps failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Deleting what the graph stopped using failed.
    #[error("{0}")]
    Release(#[source] crate::Error),
    /// The scaling adapters step failed.
    #[error("failed to reconcile the scaling adapters: {0}")]
    ScalingAdapters(#[from] scaling_adapters::Error),
}

impl Error {
    /// The `Ready` reason of the failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Release(_) => REASON_FAILED_TO_RECONCILE_RESOURCES,
            Error::ScalingAdapters(_) => REASON_SCALING_ADAPTERS_FAILED,
        }
    }
}

/// The release and scaling adapters steps.
pub struct Finish {
    discovery: DiscoveryReconciler,
    scaling_adapters: ScalingAdapters,
}

impl Finish {
    /// The last steps reading with `reader`, each writing through `writer` scoped to its kinds,
    /// with the operator's default discovery backend.
    pub fn new(
        reader: Arc<dyn Reader>,
        writer: Arc<dyn Writer>,
        discovery: DiscoveryBackend,
    ) -> Self {
        let w = || Scoped::new(writer.clone());
        Finish {
            discovery: DiscoveryReconciler::new(
                reader.clone(),
                w().allow::<ServiceAccount>()
                    .allow::<Role>()
                    .allow::<RoleBinding>()
                    .build(),
                discovery,
            ),
            scaling_adapters: ScalingAdapters::new(
                reader,
                w().allow::<DynamoGraphDeploymentScalingAdapter>().build(),
            ),
        }
    }

    /// Release when the graph is `ready`, then converge the scaling adapters unless a component
    /// is `waiting` for its checkpoint.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        ready: bool,
        waiting: bool,
    ) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        if ready {
            let released = self.discovery.release(dgd).await;
            if let Err(e) = released.events_into(&mut events) {
                return kit::Step::new(Err(Error::Release(e)), events);
            }
        }
        if waiting {
            return kit::Step::new(Ok(()), events);
        }
        let adapted = self.scaling_adapters.reconcile(dgd).await;
        let result = adapted.events_into(&mut events).map_err(Error::from);
        kit::Step::new(result, events)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use api::ComponentType;
    use api::labels::DYNAMO_DISCOVERY_BACKEND;
    use kit::testing::Double;

    use super::*;
    use crate::testutil::{component, dgd, reasons};

    /// A graph whose worker has a scaling adapter, that made its discovery objects with
    /// Kubernetes discovery on and has just turned it off.
    async fn graph_turned_off(d: &Double) -> DynamoGraphDeployment {
        let mut worker = component("VllmDecodeWorker", ComponentType::Worker);
        worker.scaling_adapter = Some(Default::default());
        let mut g = d.insert(dgd("g", vec![worker]));
        DiscoveryReconciler::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes)
            .reconcile(&g)
            .await
            .result
            .unwrap();
        g.metadata.annotations = Some(BTreeMap::from([(
            DYNAMO_DISCOVERY_BACKEND.to_string(),
            "etcd".to_string(),
        )]));
        d.insert(g)
    }

    fn account(d: &Double) -> Option<ServiceAccount> {
        d.object(Some("ns"), "g-k8s-service-discovery")
    }

    #[tokio::test]
    async fn release_waits_for_ready_and_adapters_for_checkpoints() {
        let d = Double::new();
        let g = graph_turned_off(&d).await;
        let finish = Finish::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        // (ready, waiting) → events, whether the account is still there.
        let table: [(bool, bool, &[&str], bool); 3] = [
            (false, true, &[], true),
            (
                false,
                false,
                &[scaling_adapters::EVENT_ADAPTER_CREATED],
                true,
            ),
            (
                true,
                false,
                &["RoleBindingDeleted", "RoleDeleted", "ServiceAccountDeleted"],
                false,
            ),
        ];
        for (ready, waiting, expected, kept) in table {
            let mut events = Vec::new();
            finish
                .reconcile(&g, ready, waiting)
                .await
                .events_into(&mut events)
                .unwrap();
            assert_eq!(
                reasons(&events),
                expected,
                "ready={ready} waiting={waiting}"
            );
            assert_eq!(
                account(&d).is_some(),
                kept,
                "ready={ready} waiting={waiting}"
            );
        }
    }

    #[tokio::test]
    async fn a_failed_release_names_its_reason() {
        let d = Double::new();
        let g = graph_turned_off(&d).await;
        d.fail_next(
            kit::testing::Verb::Delete,
            "RoleBinding",
            kit::Error::Forbidden("rbac".into()),
        );
        let finish = Finish::new(d.reader(), d.writer(), DiscoveryBackend::Kubernetes);
        let error = finish.reconcile(&g, true, false).await.result.unwrap_err();
        assert_eq!(error.reason(), REASON_FAILED_TO_RECONCILE_RESOURCES);
        assert!(account(&d).is_some());
    }
}
