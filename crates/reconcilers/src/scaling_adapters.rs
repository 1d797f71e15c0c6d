//! One DynamoGraphDeploymentScalingAdapter per component that sets `scalingAdapter`.
//!
//! An adapter is named `<dgd>-<component, lowercased>`, labelled with the graph and component,
//! points at its component through `spec.dgdRef`, and is controlled by the graph (garbage
//! collection removes it with the graph). **Replicas have one owner**: `spec.replicas` is seeded
//! from the component's replicas (default 1) only when the adapter is created; afterwards the
//! adapter (and whoever scales it: HPA, KEDA, the Planner) owns it and this step never writes it.
//!
//! | observed | action | event |
//! | --- | --- | --- |
//! | component has `scalingAdapter`, no adapter | create, replicas seeded | `AdapterCreated` |
//! | adapter exists, labels / dgdRef / owner drifted | merge-patch those fields only | `AdapterUpdated` |
//! | adapter exists and matches | nothing (no request) | none |
//! | component dropped `scalingAdapter`, or left the graph | delete (uid precondition) | `AdapterDeleted` |
//! | ... and the component's `replicas` (default 1) differ from the deleted adapter's | (the graph's count applies from now on) | Warning `ReplicasHandedBack` |
//!
//! Adapters controlled by another object are never touched. Owned fields are compared before
//! writing rather than server-side applied: the seed is written by a create, and an apply by the
//! same manager would take the create's field ownership and change the object for nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::labels;
use api::scaling_adapter::DynamoGraphDeploymentComponentRef;
use api::{
    DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment,
    DynamoGraphDeploymentScalingAdapter, DynamoGraphDeploymentScalingAdapterSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kit::{Deleted, Event, Patch, Preconditions, Reader, Writer, WriterExt};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::child;
use crate::naming;

/// Failure reason of the scaling adapters step.
pub const REASON_SCALING_ADAPTERS_FAILED: &str = "failed_to_reconcile_scaling_adapters";
/// Event: an adapter was created.
pub const EVENT_ADAPTER_CREATED: &str = "AdapterCreated";
/// Event: an adapter's owned fields were restored.
pub const EVENT_ADAPTER_UPDATED: &str = "AdapterUpdated";
/// Event: an adapter was deleted.
pub const EVENT_ADAPTER_DELETED: &str = "AdapterDeleted";
/// Warning event: a component dropped `scalingAdapter` and its replicas jump from the adapter's
/// count to the graph's.
pub const EVENT_REPLICAS_HANDED_BACK: &str = "ReplicasHandedBack";

/// Why the scaling adapters step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading adapters failed.
    #[error("read DynamoGraphDeploymentScalingAdapters: {0}")]
    Read(#[source] kit::Error),
    /// Writing adapter `name` failed.
    #[error("write DynamoGraphDeploymentScalingAdapter {name}: {source}")]
    Write {
        /// The adapter.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// The graph has no uid yet (it was never stored).
    #[error("DynamoGraphDeployment {0} has no uid")]
    NoUid(String),
}

/// The scaling adapters step.
pub struct ScalingAdapters {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl ScalingAdapters {
    /// A scaling adapters step reading adapters with `reader` and writing them with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        ScalingAdapters { reader, writer }
    }

    /// Converge the adapters of `dgd`. Returns the mutation events, also those of the writes
    /// made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let owner = dgd
            .controller_owner_ref(&())
            .filter(|o| !o.uid.is_empty())
            .ok_or_else(|| Error::NoUid(dgd.name_any()))?;
        let mut existing =
            child::Listed::<DynamoGraphDeploymentScalingAdapter>::of(&*self.reader, dgd)
                .await
                .map_err(Error::Read)?;

        for component in &dgd.spec.components {
            let name = naming::component_base_name(&dgd.name_any(), &component.name);
            let current = existing
                .take(&*self.reader, &name)
                .await
                .map_err(Error::Read)?;
            match (component.scaling_adapter.is_some(), current) {
                (true, None) => self.create(dgd, component, &owner, events).await?,
                (true, Some(current)) => {
                    self.ensure(dgd, component, &owner, &current, events)
                        .await?
                }
                (false, Some(current)) => {
                    if self.delete(dgd, &current, events).await? {
                        handed_back(component, &current, events);
                    }
                }
                (false, None) => {}
            }
        }
        // Adapters of components that left the graph.
        for stale in existing.rest().values() {
            self.delete(dgd, stale, events).await?;
        }
        Ok(())
    }

    async fn create(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
        owner: &OwnerReference,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let adapter = render(dgd, component, owner);
        let name = adapter.name_any();
        match self.writer.create(&adapter).await {
            Ok(_) => {
                tracing::info!(adapter = %name, component = %component.name, "created scaling adapter");
                events.push(
                    Event::normal(
                        EVENT_ADAPTER_CREATED,
                        format!(
                            "Created scaling adapter {name} for component {}",
                            component.name
                        ),
                    )
                    .mutation(
                        "Created",
                        "DynamoGraphDeploymentScalingAdapter",
                        &name,
                    ),
                );
                Ok(())
            }
            // The cache lagged behind an earlier create; the next reconcile sees it.
            Err(e) if e.is_already_exists() => Ok(()),
            Err(source) => Err(Error::Write { name, source }),
        }
    }

    async fn ensure(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
        owner: &OwnerReference,
        current: &DynamoGraphDeploymentScalingAdapter,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let name = current.name_any();
        if !controlled_by(&current.metadata, dgd) && has_controller(&current.metadata) {
            tracing::warn!(adapter = %name, "scaling adapter is controlled by another object; not touched");
            return Ok(());
        }
        let want_labels = adapter_labels(dgd, component);
        let labels_drifted = want_labels
            .iter()
            .any(|(k, v)| current.labels().get(k) != Some(v));
        let want_ref = dgd_ref(dgd, component);
        let ref_drifted = current.spec.dgd_ref != want_ref;
        let owner_drifted = !controlled_by(&current.metadata, dgd);
        if !(labels_drifted || ref_drifted || owner_drifted) {
            return Ok(());
        }
        let mut patch = json!({"metadata": {}});
        if labels_drifted {
            patch["metadata"]["labels"] = json!(want_labels);
        }
        if owner_drifted {
            let mut refs: Vec<OwnerReference> = current
                .metadata
                .owner_references
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|o| o.uid != owner.uid)
                .collect();
            refs.push(owner.clone());
            patch["metadata"]["ownerReferences"] = json!(refs);
        }
        if ref_drifted {
            patch["spec"] = json!({"dgdRef": want_ref});
        }
        let applied = self
            .writer
            .patch::<DynamoGraphDeploymentScalingAdapter>(
                current.namespace().as_deref(),
                &name,
                &Patch::Merge(patch),
            )
            .await
            .map_err(|source| Error::Write {
                name: name.clone(),
                source,
            })?;
        if applied.changed {
            tracing::info!(adapter = %name, "restored scaling adapter fields");
            events.push(Event::normal(
                EVENT_ADAPTER_UPDATED,
                format!(
                    "Updated scaling adapter {name} for component {}",
                    component.name
                ),
            ));
        }
        Ok(())
    }

    async fn delete(
        &self,
        dgd: &DynamoGraphDeployment,
        adapter: &DynamoGraphDeploymentScalingAdapter,
        events: &mut Vec<Event>,
    ) -> Result<bool, Error> {
        if !controlled_by(&adapter.metadata, dgd) || adapter.metadata.deletion_timestamp.is_some() {
            return Ok(false);
        }
        let name = adapter.name_any();
        let preconditions = Preconditions {
            uid: adapter.metadata.uid.clone(),
            resource_version: None,
        };
        let deleted = self
            .writer
            .delete::<DynamoGraphDeploymentScalingAdapter>(
                adapter.namespace().as_deref(),
                &name,
                &preconditions,
                None,
            )
            .await;
        match deleted {
            Ok(Deleted::NotFound) => Ok(false),
            Ok(_) => {
                let component = adapter.spec.dgd_ref.component_name.clone();
                tracing::info!(adapter = %name, %component, "deleted scaling adapter");
                events.push(Event::normal(
                    EVENT_ADAPTER_DELETED,
                    format!("Deleted scaling adapter {name} for component {component}"),
                ));
                Ok(true)
            }
            // Replaced by a new object of the same name since it was read: not ours to delete.
            Err(e) if e.is_conflict() => Ok(false),
            Err(source) => Err(Error::Write { name, source }),
        }
    }
}

/// Warn when a component that dropped `scalingAdapter` changes count: from now on its
/// `replicas` (default 1) apply, and the deleted adapter held another count.
fn handed_back(
    component: &DynamoComponentDeploymentSharedSpec,
    adapter: &DynamoGraphDeploymentScalingAdapter,
    events: &mut Vec<Event>,
) {
    let graph = component.replicas.unwrap_or(1);
    let adapter_replicas = adapter.spec.replicas;
    if graph != adapter_replicas {
        tracing::warn!(component = %component.name, from = adapter_replicas, to = graph, "replicas handed back to the graph");
        events.push(Event::warning(
            EVENT_REPLICAS_HANDED_BACK,
            format!(
                "Component {} no longer has a scaling adapter: its replicas go from the adapter's {adapter_replicas} to the graph's {graph}",
                component.name
            ),
        ));
    }
}

fn adapter_labels(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            dgd.name_any(),
        ),
        (labels::DYNAMO_COMPONENT.to_string(), component.name.clone()),
    ])
}

fn dgd_ref(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> DynamoGraphDeploymentComponentRef {
    DynamoGraphDeploymentComponentRef {
        name: dgd.name_any(),
        component_name: component.name.clone(),
    }
}

/// The adapter a component gets on creation (replicas seeded from the component, default 1).
pub fn render(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    owner: &OwnerReference,
) -> DynamoGraphDeploymentScalingAdapter {
    DynamoGraphDeploymentScalingAdapter {
        metadata: ObjectMeta {
            name: Some(naming::component_base_name(
                &dgd.name_any(),
                &component.name,
            )),
            namespace: dgd.namespace(),
            labels: Some(adapter_labels(dgd, component)),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: DynamoGraphDeploymentScalingAdapterSpec {
            replicas: component.replicas.unwrap_or(1),
            dgd_ref: dgd_ref(dgd, component),
        },
        status: None,
    }
}

fn has_controller(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    let uid = dgd.metadata.uid.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::{ComponentType, DynamoGraphDeploymentStatus};
    use kit::Outcome;
    use kit::testing::{Double, Verb};

    fn graph(d: &Double, replicas: Option<i32>) -> DynamoGraphDeployment {
        let mut worker = component("VllmDecodeWorker", ComponentType::Worker);
        worker.scaling_adapter = Some(Default::default());
        worker.replicas = replicas;
        d.insert(dgd(
            "g",
            vec![component("Frontend", ComponentType::Frontend), worker],
        ))
    }

    async fn pass(
        d: &Double,
        g: &DynamoGraphDeployment,
    ) -> Result<Outcome<DynamoGraphDeploymentStatus>, Error> {
        let mut out = Outcome::new(DynamoGraphDeploymentStatus::default());
        let step = ScalingAdapters::new(d.reader(), d.writer())
            .reconcile(g)
            .await;
        out.take(step).map(|()| out)
    }

    fn adapter(d: &Double) -> Option<DynamoGraphDeploymentScalingAdapter> {
        d.object(Some("ns"), "g-vllmdecodeworker")
    }

    #[tokio::test]
    async fn creates_one_adapter_per_scalable_component_with_seeded_replicas() {
        let d = Double::new();
        let g = graph(&d, Some(3));
        let out = pass(&d, &g).await.unwrap();
        assert_eq!(reasons(&out.events), [EVENT_ADAPTER_CREATED]);
        let a = adapter(&d).unwrap();
        assert_eq!(a.spec.replicas, 3);
        assert_eq!(a.spec.dgd_ref.name, "g");
        assert_eq!(a.spec.dgd_ref.component_name, "VllmDecodeWorker");
        assert_eq!(a.labels()[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g");
        assert_eq!(a.labels()[labels::DYNAMO_COMPONENT], "VllmDecodeWorker");
        let owner = &a.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.controller, owner.uid.as_str()),
            (Some(true), g.metadata.uid.as_deref().unwrap())
        );
        assert_eq!(d.objects::<DynamoGraphDeploymentScalingAdapter>().len(), 1);
    }

    #[tokio::test]
    async fn replicas_default_to_one() {
        let d = Double::new();
        let g = graph(&d, None);
        pass(&d, &g).await.unwrap();
        assert_eq!(adapter(&d).unwrap().spec.replicas, 1);
    }

    #[tokio::test]
    async fn a_second_run_writes_nothing() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        pass(&d, &g).await.unwrap();
        d.clear_writes();
        let out = pass(&d, &g).await.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(out.events.is_empty());
    }

    #[tokio::test]
    async fn replicas_belong_to_the_adapter_after_creation() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        pass(&d, &g).await.unwrap();
        // An autoscaler scales the adapter; the graph still says 2.
        let mut a = adapter(&d).unwrap();
        a.spec.replicas = 7;
        d.insert(a);
        d.clear_writes();
        let out = pass(&d, &g).await.unwrap();
        assert!(d.writes().is_empty());
        assert!(out.events.is_empty());
        assert_eq!(adapter(&d).unwrap().spec.replicas, 7);
    }

    #[tokio::test]
    async fn drift_on_owned_fields_is_restored_and_replicas_kept() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        pass(&d, &g).await.unwrap();
        let mut a = adapter(&d).unwrap();
        a.spec.replicas = 5;
        a.spec.dgd_ref.component_name = "Other".into();
        a.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        a.metadata.owner_references = None;
        d.insert(a);
        d.clear_writes();
        let out = pass(&d, &g).await.unwrap();
        assert_eq!(reasons(&out.events), [EVENT_ADAPTER_UPDATED]);
        let a = adapter(&d).unwrap();
        assert_eq!(a.spec.replicas, 5);
        assert_eq!(a.spec.dgd_ref.component_name, "VllmDecodeWorker");
        assert_eq!(a.labels()[labels::DYNAMO_COMPONENT], "VllmDecodeWorker");
        assert_eq!(a.labels()["x"], "y");
        assert!(controlled_by(&a.metadata, &g));
        assert_eq!(d.changes().len(), 1);
    }

    #[tokio::test]
    async fn adapters_follow_the_opt_in_and_the_component_list() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        pass(&d, &g).await.unwrap();
        // Opt out: deleted.
        let mut opted_out = g.clone();
        opted_out.spec.components[1].scaling_adapter = None;
        let out = pass(&d, &opted_out).await.unwrap();
        assert_eq!(reasons(&out.events), [EVENT_ADAPTER_DELETED]);
        assert!(adapter(&d).is_none());
        // Nothing to delete: no event, no write.
        d.clear_writes();
        let out = pass(&d, &opted_out).await.unwrap();
        assert!(out.events.is_empty() && d.writes().is_empty());
        // Removed component: its adapter goes.
        pass(&d, &g).await.unwrap();
        let mut removed = g.clone();
        removed.spec.components.truncate(1);
        let out = pass(&d, &removed).await.unwrap();
        assert_eq!(reasons(&out.events), [EVENT_ADAPTER_DELETED]);
        assert!(adapter(&d).is_none());
    }

    #[tokio::test]
    async fn handing_replicas_back_at_another_count_warns() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        pass(&d, &g).await.unwrap();
        let mut a = adapter(&d).unwrap();
        a.spec.replicas = 5;
        d.insert(a);
        let mut opted_out = g.clone();
        opted_out.spec.components[1].scaling_adapter = None;
        let out = pass(&d, &opted_out).await.unwrap();
        assert_eq!(
            reasons(&out.events),
            [EVENT_ADAPTER_DELETED, EVENT_REPLICAS_HANDED_BACK]
        );
        assert!(
            out.events[1]
                .note
                .as_deref()
                .unwrap()
                .contains("from the adapter's 5 to the graph's 2")
        );
        // The user carried the count over: no warning.
        pass(&d, &g).await.unwrap();
        let mut a = adapter(&d).unwrap();
        a.spec.replicas = 5;
        d.insert(a);
        opted_out.spec.components[1].replicas = Some(5);
        let out = pass(&d, &opted_out).await.unwrap();
        assert_eq!(reasons(&out.events), [EVENT_ADAPTER_DELETED]);
    }

    #[tokio::test]
    async fn adapters_controlled_by_others_are_left_alone() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        let mut foreign = render(
            &g,
            &g.spec.components[1],
            &g.controller_owner_ref(&()).unwrap(),
        );
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        foreign.spec.dgd_ref.component_name = "x".into();
        d.insert(foreign);
        let out = pass(&d, &g).await.unwrap();
        assert!(out.events.is_empty());
        assert!(d.writes().is_empty());
        assert_eq!(adapter(&d).unwrap().spec.dgd_ref.component_name, "x");
    }

    #[tokio::test]
    async fn write_failures_are_the_steps_error() {
        let d = Double::new();
        let g = graph(&d, Some(2));
        d.fail_next(
            Verb::Create,
            "DynamoGraphDeploymentScalingAdapter",
            kit::Error::Forbidden("no".into()),
        );
        let err = pass(&d, &g).await.unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err}");
        d.fail_next(
            Verb::List,
            "DynamoGraphDeploymentScalingAdapter",
            kit::Error::Forbidden("no".into()),
        );
        assert!(matches!(pass(&d, &g).await.unwrap_err(), Error::Read(_)));
    }
}
