//! The DynamoGraphDeployment composition root: select a program, invoke it once, return its
//! status and events for the run loop to persist and publish.
//!
//! # One reconcile
//! 0. A graph upstream's operator left with its finalizer (`nvidia.com/finalizer`) has it
//!    removed first (a JSON patch testing it is still there): nothing here would ever remove it,
//!    so the graph could not be deleted.
//! 1. A graph being deleted gets nothing: its children carry controller owner references, so
//!    garbage collection removes them (no finalizer is needed, none is added).
//! 2. **Select the program** ([`select`], the rule below). An unknown recorded provider or an
//!    unavailable Grove pathway ends here with `Ready=False` and no retry until the graph
//!    changes; so do workloads of both providers under one unrecorded graph.
//! 3. **Validate** with [`api::validate::validate_with`] for the selected provider. An invalid
//!    spec ends here: `Ready=False`, reason `InvalidSpec`, the message naming each field path,
//!    nothing written, no retry until the graph changes.
//! 4. **Record the provider** in the `nvidia.com/workload-provider` annotation when it is not
//!    recorded yet: a merge patch with the observed `resourceVersion` as precondition, before any
//!    other effect. A recorded provider never changes. A new graph (no workloads, no recorded
//!    worker generation) gets its first worker generation (`nvidia.com/current-worker-hash-v2`,
//!    the hash the programs' rollout would record) in the same patch: one metadata write per
//!    graph, not two.
//! 5. **Invoke the program** once. Its outcome (or partial outcome on failure) is returned
//!    unchanged: the run loop ([`kit::run::Runner`]) persists `outcome.status` (also on error),
//!    then publishes the queued events, then requeues or backs off. The root never writes
//!    status itself.
//!
//! # Program selection
//! As upstream 1.5.0: the PodCliqueSet API being served (Grove installed) makes Grove the
//! default, and a provider, once recorded, never changes. [`select`] decides, in this order:
//! 1. If the graph records a provider (`nvidia.com/workload-provider`), that provider is used:
//!    `component` or `grove` (any other value: `Ready=False`, reason
//!    `unsupported_workload_provider`).
//! 2. Else, a graph that already controls workloads (one left unrecorded by an older operator,
//!    or whose record was removed) keeps their pathway: DynamoComponentDeployments mean
//!    component, a PodCliqueSet means grove, both mean `Ready=False`, reason
//!    `failed_to_record_workload_provider`, and nothing is recorded until one family is gone.
//!    Only controller owner references count; the namespace's DCDs are read from the cache,
//!    its PodCliqueSets only while Grove is served.
//! 3. Else, if the annotation `nvidia.com/enable-grove` is `"false"` (any case): component.
//! 4. Else, if the PodCliqueSet API is served ([`kit::served::Served`]): grove.
//! 5. Else, if Grove is *asked for* (`nvidia.com/enable-grove: "true"`, any case, or
//!    `spec.providerOverride` targeting `grove.io/...`): `Ready=False`, reason
//!    `selected_workload_provider_unavailable`, no retry until the graph changes or Grove is
//!    installed (nothing is recorded, so the graph may still opt out with `enable-grove:
//!    "false"`). Upstream falls back to components here; this operator says why it waits.
//! 6. Otherwise: component.
//!
//! A graph recorded as `grove` whose API is no longer served also gets
//! `selected_workload_provider_unavailable`: it never falls back to the component pathway.
//! Whether PodCliqueSet is served is the operator's shared [`kit::served::Served`] set, kept
//! current from a watch of Grove's CRDs (installing Grove while the operator runs re-queues the
//! graphs waiting for it), never a live call per reconcile.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::grove::PodCliqueSet;
use api::labels;
use api::validate::{ValidationContext, validate_with};
use api::{
    DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentStatus, InvalidSpec,
    Provider,
};
use async_trait::async_trait;
use component_program::ComponentProgram;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::child::is_controlled_by;
use kit::served::Served;
use kit::{OrFail, Outcome, Patch, Reader, ReaderExt, Reconciled, Selector, Writer, WriterExt};
use kube::ResourceExt;
use serde_json::json;

/// Ready reason: the spec failed validation.
pub const REASON_INVALID_SPEC: &str = api::validate::REASON_INVALID_SPEC;
/// Ready reason: the recorded provider is not one this operator knows (upstream's value).
pub const REASON_UNSUPPORTED_PROVIDER: &str = "unsupported_workload_provider";
/// Ready reason: the selected provider's API is not served (upstream's value).
pub const REASON_PROVIDER_UNAVAILABLE: &str = "selected_workload_provider_unavailable";
/// Ready reason: recording the provider failed.
pub const REASON_RECORD_PROVIDER_FAILED: &str = "failed_to_record_workload_provider";
/// Ready reason: releasing upstream's finalizer failed (upstream's reason when handling its
/// finalizer fails).
pub const REASON_FINALIZER_FAILED: &str = "failed_to_handle_the_finalizer";

/// Why a reconcile did not complete.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec is invalid.
    #[error("{0}")]
    InvalidSpec(#[from] InvalidSpec),
    /// The recorded provider is unknown.
    #[error("annotation {annotation} has unsupported value {value:?} (expected component or grove)", annotation = labels::WORKLOAD_PROVIDER)]
    UnsupportedProvider {
        /// The recorded value.
        value: String,
    },
    /// The selected provider's API is not served.
    #[error("{0}")]
    ProviderUnavailable(String),
    /// Recording the provider failed.
    #[error("record the workload provider: {0}")]
    Record(#[source] kit::Error),
    /// Removing upstream's finalizer failed.
    #[error("remove finalizer {finalizer}: {0}", finalizer = labels::UPSTREAM_FINALIZER)]
    ReleaseFinalizer(#[source] kit::Error),
    /// Reading the workloads an unrecorded graph controls failed.
    #[error("list the workloads the graph controls: {0}")]
    Adopt(#[source] kit::Error),
    /// An unrecorded graph controls workloads of both providers.
    #[error(
        "DynamoGraphDeployment {0} controls DynamoComponentDeployments and PodCliqueSets (workloads of both providers); delete one family to let it record a provider"
    )]
    ConflictingProviders(String),
    /// The component program failed.
    #[error(transparent)]
    Component(#[from] component_program::Error),
    /// The grove program failed.
    #[error(transparent)]
    Grove(#[from] grove_program::Error),
}

/// A workload program: invoked once per reconcile, returns the complete desired status.
#[async_trait]
pub trait Program: Send + Sync {
    /// Reconcile `dgd` (its provider is recorded) and return its outcome.
    async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error>;
}

#[async_trait]
impl Program for ComponentProgram {
    async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        ComponentProgram::reconcile(self, dgd)
            .await
            .map_err(|failed| Box::new(failed.map_err(Error::Component)))
    }
}

#[async_trait]
impl Program for grove_program::GroveProgram {
    async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        grove_program::GroveProgram::reconcile(self, dgd)
            .await
            .map_err(|failed| Box::new(failed.map_err(Error::Grove)))
    }
}

/// The workloads an unrecorded graph already controls (controller owner references only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    /// At least one DynamoComponentDeployment of its namespace.
    pub components: bool,
    /// At least one PodCliqueSet of its namespace.
    pub pod_clique_sets: bool,
}

/// The outcome of program selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Run this provider's program; `recorded` says whether the graph already records it.
    Run {
        /// The provider.
        provider: Provider,
        /// The annotation already holds it.
        recorded: bool,
    },
    /// The recorded provider is unknown.
    Unsupported(String),
    /// Grove was selected but PodCliqueSet is not served.
    Unavailable,
    /// The unrecorded graph controls workloads of both providers.
    Conflict,
}

/// Select the program of `dgd` (the rule in the crate docs). `pod_clique_sets`: whether the
/// PodCliqueSet API is served; `owned`: what the graph already controls (read only when it
/// records no provider).
pub fn select(dgd: &DynamoGraphDeployment, pod_clique_sets: bool, owned: Owned) -> Selection {
    let annotations = dgd.metadata.annotations.as_ref();
    let grove = |recorded| {
        if pod_clique_sets {
            Selection::Run {
                provider: Provider::Grove,
                recorded,
            }
        } else {
            Selection::Unavailable
        }
    };
    let run = |provider| Selection::Run {
        provider,
        recorded: false,
    };
    if let Some(value) = annotations.and_then(|a| a.get(labels::WORKLOAD_PROVIDER)) {
        return match Provider::from_annotation(value) {
            Some(Provider::Grove) => grove(true),
            Some(provider) => Selection::Run {
                provider,
                recorded: true,
            },
            None => Selection::Unsupported(value.clone()),
        };
    }
    match (owned.components, owned.pod_clique_sets) {
        (true, true) => return Selection::Conflict,
        (false, true) => return grove(false),
        (true, false) => return run(Provider::Component),
        (false, false) => {}
    }
    let enable_grove = annotations
        .and_then(|a| a.get(labels::ENABLE_GROVE))
        .map(|v| v.to_ascii_lowercase());
    if enable_grove.as_deref() == Some("false") {
        return run(Provider::Component);
    }
    if pod_clique_sets {
        return run(Provider::Grove);
    }
    let override_targets_grove = dgd
        .spec
        .provider_override
        .as_ref()
        .is_some_and(|o| o.api_version.starts_with("grove.io/"));
    if enable_grove.as_deref() == Some("true") || override_targets_grove {
        return Selection::Unavailable;
    }
    run(Provider::Component)
}

fn provider_value(provider: Provider) -> &'static str {
    match provider {
        Provider::Component => labels::PROVIDER_COMPONENT,
        Provider::Grove => labels::PROVIDER_GROVE,
    }
}

/// The graph's current status with `observedGeneration` set: where every outcome starts.
fn seeded(dgd: &DynamoGraphDeployment) -> DynamoGraphDeploymentStatus {
    DynamoGraphDeploymentStatus {
        observed_generation: Some(dgd.metadata.generation.unwrap_or_default()),
        ..dgd.status.clone().unwrap_or_default()
    }
}

/// The composition root.
pub struct Root {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    component: Arc<dyn Program>,
    grove: Arc<dyn Program>,
    served: Served,
}

impl Root {
    /// A root reading what an unrecorded graph controls with `reader`, recording providers with
    /// `writer`, running `component` or `grove`, selecting with the operator's `served` set.
    pub fn new(
        reader: Arc<dyn Reader>,
        writer: Arc<dyn Writer>,
        component: Arc<dyn Program>,
        grove: Arc<dyn Program>,
        served: Served,
    ) -> Self {
        Root {
            reader,
            writer,
            component,
            grove,
            served,
        }
    }

    /// Whether the PodCliqueSet API is served.
    fn grove_served(&self) -> bool {
        self.served.serves_kind::<PodCliqueSet>()
    }

    /// The workloads `dgd` controls in its namespace (upstream's adoption of a legacy graph).
    async fn owned(&self, dgd: &DynamoGraphDeployment) -> Result<Owned, kit::Error> {
        let Some(uid) = dgd.metadata.uid.as_deref() else {
            return Ok(Owned::default());
        };
        let ns = dgd.namespace();
        let controlled = |meta: &ObjectMeta| is_controlled_by(meta, uid);
        let everything = Selector::default();
        // Every one in the namespace is scanned, shared with the cache rather than copied.
        let dcds: Vec<Arc<DynamoComponentDeployment>> =
            self.reader.list_shared(ns.as_deref(), &everything).await?;
        let pod_clique_sets: Vec<Arc<PodCliqueSet>> = if self.grove_served() {
            self.reader.list_shared(ns.as_deref(), &everything).await?
        } else {
            Vec::new()
        };
        Ok(Owned {
            components: dcds.iter().any(|d| controlled(&d.metadata)),
            pod_clique_sets: pod_clique_sets.iter().any(|p| controlled(&p.metadata)),
        })
    }

    /// Reconcile `dgd` once (see the crate docs).
    pub async fn reconcile(
        &self,
        dgd: Arc<DynamoGraphDeployment>,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let generation = dgd.metadata.generation.unwrap_or_default();
        let key = kit::object::key_of(dgd.as_ref());
        let dgd = match kit::takeover::release_finalizer(
            self.writer.as_ref(),
            dgd.as_ref(),
            labels::UPSTREAM_FINALIZER,
        )
        .await
        {
            Ok(Some(released)) => Arc::new(released),
            Ok(None) => dgd,
            Err(error) => {
                let error = Error::ReleaseFinalizer(error);
                let failed =
                    Outcome::new(seeded(&dgd)).fail(generation, REASON_FINALIZER_FAILED, error);
                return Err(failed.into());
            }
        };
        if dgd.metadata.deletion_timestamp.is_some() {
            tracing::debug!(dgd = %key, "being deleted; garbage collection removes the children");
            return Ok(Outcome::new(dgd.status.clone().unwrap_or_default()));
        }
        let mut out = Outcome::new(seeded(&dgd));
        let owned = if dgd.annotations().contains_key(labels::WORKLOAD_PROVIDER) {
            Owned::default()
        } else {
            self.owned(&dgd).await.map_err(Error::Adopt).or_fail(
                &mut out,
                generation,
                REASON_RECORD_PROVIDER_FAILED,
            )?
        };
        let (provider, recorded) = match select(&dgd, self.grove_served(), owned) {
            Selection::Run { provider, recorded } => (provider, recorded),
            Selection::Unsupported(value) => {
                let error = Error::UnsupportedProvider { value };
                return Err(out
                    .fail(generation, REASON_UNSUPPORTED_PROVIDER, error)
                    .await_change()
                    .into());
            }
            Selection::Unavailable => {
                let error = Error::ProviderUnavailable(
                    "the grove workload provider was selected, but the PodCliqueSet API (grove.io/v1alpha1) is not served; install Grove or set annotation nvidia.com/enable-grove: \"false\"".into(),
                );
                return Err(out
                    .fail(generation, REASON_PROVIDER_UNAVAILABLE, error)
                    .await_change()
                    .into());
            }
            Selection::Conflict => {
                let error = Error::ConflictingProviders(key.clone());
                return Err(out
                    .fail(generation, REASON_RECORD_PROVIDER_FAILED, error)
                    .await_change()
                    .into());
            }
        };
        let context = ValidationContext {
            provider: Some(provider),
        };
        if let Err(invalid) = validate_with(&dgd, &context) {
            tracing::info!(dgd = %key, error = %invalid, "invalid spec");
            return Err(out
                .fail(generation, REASON_INVALID_SPEC, Error::from(invalid))
                .await_change()
                .into());
        }
        let mut dgd = dgd;
        if !recorded {
            let value = provider_value(provider);
            let mut annotations = BTreeMap::from([(labels::WORKLOAD_PROVIDER, value.to_string())]);
            if let Some(hash) = first_worker_hash(&dgd, owned) {
                annotations.insert(labels::CURRENT_WORKER_HASH_V2, hash);
            }
            let patch = json!({"metadata": {
                "resourceVersion": dgd.metadata.resource_version,
                "annotations": annotations,
            }});
            self.writer
                .patch::<DynamoGraphDeployment>(
                    dgd.namespace().as_deref(),
                    &dgd.name_any(),
                    &Patch::Merge(patch),
                )
                .await
                .map_err(Error::Record)
                .or_fail(&mut out, generation, REASON_RECORD_PROVIDER_FAILED)?;
            tracing::info!(dgd = %key, provider = value, "recorded workload provider");
            let recorded = Arc::make_mut(&mut dgd);
            let stored = recorded
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            for (k, v) in annotations {
                stored.insert(k.to_string(), v);
            }
        }
        match provider {
            Provider::Component => self.component.reconcile(&dgd).await,
            Provider::Grove => self.grove.reconcile(&dgd).await,
        }
    }
}

/// The worker generation a new graph starts on, recorded with its provider in one patch: a
/// graph that controls no workloads and records no generation deploys its current worker hash
/// first (the programs' rollout record would write it next, as a second request). A graph that
/// already has workloads is left to its program, which recovers the generation from them.
fn first_worker_hash(dgd: &DynamoGraphDeployment, owned: Owned) -> Option<String> {
    let annotations = dgd.metadata.annotations.as_ref();
    let records = annotations.is_some_and(|a| {
        a.contains_key(labels::CURRENT_WORKER_HASH_V2)
            || a.contains_key(labels::CURRENT_WORKER_HASH)
    });
    (owned == Owned::default() && !records).then(|| api::worker_hash::worker_hash(dgd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::DgdState;
    use api::v1beta1::{MAIN_CONTAINER_NAME, ProviderOverride};
    use api::{ComponentType, DynamoComponentDeployment, DynamoComponentDeploymentSharedSpec};
    use component_program::{ComponentConfig, ComponentProgram};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kit::Retry;
    use kit::conditions::READY;
    use kit::conditions::find;
    use kit::run::{RunError, finish};
    use kit::testing::{Double, Verb};
    use std::collections::BTreeMap;

    fn component(name: &str, t: ComponentType) -> DynamoComponentDeploymentSharedSpec {
        DynamoComponentDeploymentSharedSpec {
            name: name.into(),
            r#type: Some(t),
            replicas: Some(1),
            pod_template: Some(PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: MAIN_CONTAINER_NAME.into(),
                        image: Some("runtime:1".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }

    fn graph(annotations: &[(&str, &str)]) -> DynamoGraphDeployment {
        DynamoGraphDeployment {
            metadata: ObjectMeta {
                name: Some("g".into()),
                namespace: Some("ns".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            spec: api::DynamoGraphDeploymentSpec {
                components: vec![
                    component("Frontend", ComponentType::Frontend),
                    component("Worker", ComponentType::Worker),
                ],
                ..Default::default()
            },
            status: None,
        }
    }

    /// The real grove program on the double.
    fn grove(d: &Double) -> Arc<dyn Program> {
        Arc::new(grove_program::GroveProgram::new(
            d.reader(),
            d.writer(),
            grove_program::GroveConfig::default(),
        ))
    }

    fn root(d: &Double, pod_clique_sets: bool) -> Root {
        let program = ComponentProgram::new(d.reader(), d.writer(), ComponentConfig::default());
        let served = if pod_clique_sets {
            Served::of([&kit::object::resource::<PodCliqueSet>()])
        } else {
            Served::new()
        };
        Root::new(d.reader(), d.writer(), Arc::new(program), grove(d), served)
    }

    fn stored(d: &Double) -> DynamoGraphDeployment {
        d.object(Some("ns"), "g").unwrap()
    }

    /// One pass of the run loop.
    async fn pass(d: &Double, root: &Root) -> Result<(), RunError<Error>> {
        let g = Arc::new(stored(d));
        let result = root.reconcile(g.clone()).await;
        finish(
            g.as_ref(),
            result,
            d.status_writer().as_ref(),
            d.event_sink().as_ref(),
        )
        .await
        .map(|_| ())
    }

    fn ready(d: &Double) -> (String, String, String) {
        let s = stored(d).status.unwrap();
        let c = find(&s.conditions, READY).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn retry(err: RunError<Error>) -> Retry {
        match err {
            RunError::Reconcile { retry, .. } => retry,
            RunError::Status(e) => panic!("status write failed: {e}"),
        }
    }

    #[test]
    fn selection_rule() {
        let run = |provider, recorded| Selection::Run { provider, recorded };
        let with_override = |mut g: DynamoGraphDeployment| {
            g.spec.provider_override = Some(ProviderOverride {
                api_version: "grove.io/v1alpha1".into(),
                target: Some("PodCliqueSet".into()),
                value: serde_json::json!({}),
            });
            g
        };
        let none = Owned::default();
        let dcds = Owned {
            components: true,
            pod_clique_sets: false,
        };
        let pcs = Owned {
            components: false,
            pod_clique_sets: true,
        };
        let both = Owned {
            components: true,
            pod_clique_sets: true,
        };
        // (what, graph, Grove served, owned workloads, selection). The rows marked "upstream"
        // are upstream's `TestEnsureWorkloadProvider` cases.
        let cases: Vec<(&str, DynamoGraphDeployment, bool, Owned, Selection)> = vec![
            (
                "upstream: a recorded component stays component with Grove served and a PodCliqueSet owned",
                graph(&[(labels::WORKLOAD_PROVIDER, "component")]),
                true,
                pcs,
                run(Provider::Component, true),
            ),
            (
                "upstream: nothing owned, Grove served: grove",
                graph(&[]),
                true,
                none,
                run(Provider::Grove, false),
            ),
            (
                "upstream: an explicit opt-out (any case) locks in component",
                graph(&[(labels::ENABLE_GROVE, "FALSE")]),
                true,
                none,
                run(Provider::Component, false),
            ),
            (
                "upstream: an owned DCD keeps component although Grove is served",
                graph(&[]),
                true,
                dcds,
                run(Provider::Component, false),
            ),
            (
                "upstream: an owned PodCliqueSet keeps grove despite the opt-out",
                graph(&[(labels::ENABLE_GROVE, "false")]),
                true,
                pcs,
                run(Provider::Grove, false),
            ),
            (
                "upstream: workloads of both providers fail closed",
                graph(&[]),
                true,
                both,
                Selection::Conflict,
            ),
            (
                "upstream: foreign workloads are ignored (nothing controlled), Grove served",
                graph(&[]),
                true,
                none,
                run(Provider::Grove, false),
            ),
            (
                "upstream: a cluster without the Grove API selects component",
                graph(&[]),
                false,
                none,
                run(Provider::Component, false),
            ),
            (
                "upstream: an unsupported recorded provider fails",
                graph(&[(labels::WORKLOAD_PROVIDER, "unknown")]),
                true,
                none,
                Selection::Unsupported("unknown".into()),
            ),
            (
                "recorded component wins over enable-grove true",
                graph(&[
                    (labels::WORKLOAD_PROVIDER, "component"),
                    (labels::ENABLE_GROVE, "true"),
                ]),
                true,
                none,
                run(Provider::Component, true),
            ),
            (
                "recorded grove, served, wins over the opt-out",
                graph(&[
                    (labels::WORKLOAD_PROVIDER, "grove"),
                    (labels::ENABLE_GROVE, "false"),
                ]),
                true,
                none,
                run(Provider::Grove, true),
            ),
            (
                "recorded grove, not served: no fallback",
                graph(&[(labels::WORKLOAD_PROVIDER, "grove")]),
                false,
                none,
                Selection::Unavailable,
            ),
            (
                "a recorded provider is not second-guessed by owned workloads",
                graph(&[(labels::WORKLOAD_PROVIDER, "grove")]),
                true,
                dcds,
                run(Provider::Grove, true),
            ),
            (
                "opt-out wins over an override",
                with_override(graph(&[(labels::ENABLE_GROVE, "false")])),
                true,
                none,
                run(Provider::Component, false),
            ),
            (
                "an annotation value other than false does not opt out",
                graph(&[(labels::ENABLE_GROVE, "maybe")]),
                true,
                none,
                run(Provider::Grove, false),
            ),
            (
                "enable-grove true, served",
                graph(&[(labels::ENABLE_GROVE, "true")]),
                true,
                none,
                run(Provider::Grove, false),
            ),
            (
                "enable-grove true (any case), not served: waits for Grove",
                graph(&[(labels::ENABLE_GROVE, "True")]),
                false,
                none,
                Selection::Unavailable,
            ),
            (
                "a grove provider override, not served: waits for Grove",
                with_override(graph(&[])),
                false,
                none,
                Selection::Unavailable,
            ),
            (
                "a grove provider override, served",
                with_override(graph(&[])),
                true,
                none,
                run(Provider::Grove, false),
            ),
            (
                "owned DCDs, Grove not served",
                graph(&[(labels::ENABLE_GROVE, "true")]),
                false,
                dcds,
                run(Provider::Component, false),
            ),
        ];
        for (what, g, served, owned, want) in cases {
            assert_eq!(select(&g, served, owned), want, "{what}");
        }
    }

    #[test]
    fn only_a_new_graph_gets_its_first_worker_generation_with_its_provider() {
        let hash = api::worker_hash::worker_hash(&graph(&[]));
        let dcds = Owned {
            components: true,
            pod_clique_sets: false,
        };
        // (annotations, owned, recorded with the provider)
        let cases = [
            (vec![], Owned::default(), Some(hash.clone())),
            // Workloads of an older operator: the program recovers their generation.
            (vec![], dcds, None),
            (
                vec![(labels::CURRENT_WORKER_HASH_V2, "0ld0ld00")],
                Owned::default(),
                None,
            ),
            (
                vec![(labels::CURRENT_WORKER_HASH, "0ld0ld00")],
                Owned::default(),
                None,
            ),
        ];
        for (annotations, owned, expected) in cases {
            assert_eq!(
                first_worker_hash(&graph(&annotations), owned),
                expected,
                "{annotations:?} {owned:?}"
            );
        }
    }

    #[tokio::test]
    async fn records_the_provider_first_and_then_runs_the_component_program() {
        let d = Double::new();
        d.insert(graph(&[]));
        let root = root(&d, false);
        pass(&d, &root).await.unwrap();
        let writes = d.writes();
        assert_eq!(
            (writes[0].verb, writes[0].kind.as_str()),
            (Verb::Patch, "DynamoGraphDeployment")
        );
        let g = stored(&d);
        assert_eq!(g.annotations()[labels::WORKLOAD_PROVIDER], "component");
        // A new graph's first worker generation is recorded in the same patch: one metadata
        // write per graph.
        assert_eq!(
            g.annotations()[labels::CURRENT_WORKER_HASH_V2],
            api::worker_hash::worker_hash(&g)
        );
        let patches = writes
            .iter()
            .filter(|w| w.verb == Verb::Patch && w.kind == "DynamoGraphDeployment")
            .count();
        assert_eq!(patches, 1, "{writes:?}");
        assert_eq!(g.status.as_ref().unwrap().observed_generation, Some(1));
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);
        assert_eq!(ready(&d).1, "some_resources_are_not_ready");
        // The record is not written again.
        d.clear_writes();
        pass(&d, &root).await.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
    }

    #[tokio::test]
    async fn an_invalid_spec_touches_nothing_and_waits_for_a_change() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.spec.components[1]
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .name = "sidecar".into();
        d.insert(g);
        let err = pass(&d, &root(&d, false)).await.unwrap_err();
        assert_eq!(retry(err), Retry::AwaitChange);
        let (status, reason, message) = ready(&d);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
        assert!(message.contains("spec.components[1]"), "{message}");
        let writes = d.writes();
        assert_eq!(writes.len(), 1, "only the status: {writes:?}");
        assert_eq!(writes[0].verb, Verb::ApplyStatus);
        assert!(
            !stored(&d)
                .annotations()
                .contains_key(labels::WORKLOAD_PROVIDER)
        );
        assert_eq!(stored(&d).status.unwrap().observed_generation, Some(1));
    }

    #[tokio::test]
    async fn grove_pathway_rules_apply_once_selected() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.spec.priority_class_name = Some("high".into());
        d.insert(g);
        pass(&d, &root(&d, false)).await.unwrap_err();
        let (_, reason, message) = ready(&d);
        assert_eq!(reason, "InvalidSpec");
        assert!(message.contains("spec.priorityClassName"), "{message}");
    }

    #[tokio::test]
    async fn grove_asked_for_but_not_served_is_not_ready_with_a_clear_reason() {
        let d = Double::new();
        d.insert(graph(&[(labels::ENABLE_GROVE, "true")]));
        let err = pass(&d, &root(&d, false)).await.unwrap_err();
        assert_eq!(retry(err), Retry::AwaitChange);
        let (status, reason, message) = ready(&d);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "selected_workload_provider_unavailable")
        );
        assert!(message.contains("PodCliqueSet"));
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
        assert!(
            !stored(&d)
                .annotations()
                .contains_key(labels::WORKLOAD_PROVIDER)
        );
    }

    #[tokio::test]
    async fn grove_selected_and_served_reaches_the_grove_program() {
        let d = Double::new();
        d.insert(graph(&[(labels::ENABLE_GROVE, "true")]));
        pass(&d, &root(&d, true)).await.unwrap();
        assert_eq!(stored(&d).annotations()[labels::WORKLOAD_PROVIDER], "grove");
        let sets = d.objects::<PodCliqueSet>();
        assert_eq!(
            sets.len(),
            1,
            "the grove program renders the graph's PodCliqueSet"
        );
        let uid = stored(&d).metadata.uid.unwrap();
        assert!(is_controlled_by(&sets[0].metadata, &uid));
        assert_eq!(
            ready(&d).0,
            "False",
            "not Ready until Grove reports the set available"
        );
        assert_eq!(stored(&d).status.unwrap().state, DgdState::Pending);
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
    }

    #[tokio::test]
    async fn an_unsupported_record_is_reported() {
        let d = Double::new();
        d.insert(graph(&[(labels::WORKLOAD_PROVIDER, "disaggregatedset")]));
        let err = pass(&d, &root(&d, true)).await.unwrap_err();
        assert_eq!(retry(err), Retry::AwaitChange);
        let (_, reason, message) = ready(&d);
        assert_eq!(reason, REASON_UNSUPPORTED_PROVIDER);
        assert!(message.contains("disaggregatedset"));
    }

    #[tokio::test]
    async fn a_failed_record_is_retried_before_anything_else() {
        let d = Double::new();
        d.insert(graph(&[]));
        d.fail_next(
            Verb::Patch,
            "DynamoGraphDeployment",
            kit::Error::Conflict("stale".into()),
        );
        let err = pass(&d, &root(&d, false)).await.unwrap_err();
        assert_eq!(retry(err), Retry::Backoff);
        assert_eq!(ready(&d).1, REASON_RECORD_PROVIDER_FAILED);
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
        pass(&d, &root(&d, false)).await.unwrap();
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);
    }

    #[tokio::test]
    async fn a_stale_observation_does_not_record_a_provider() {
        let d = Double::new();
        d.insert(graph(&[]));
        let stale = Arc::new(stored(&d));
        // Someone changes the graph after our observation.
        let mut newer = stored(&d);
        newer
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::ENABLE_GROVE.into(), "true".into());
        d.insert(newer);
        let result = root(&d, true).reconcile(stale).await;
        let failed = result.unwrap_err();
        assert!(matches!(failed.error, Error::Record(_)));
        assert!(
            !stored(&d)
                .annotations()
                .contains_key(labels::WORKLOAD_PROVIDER)
        );
    }

    #[tokio::test]
    async fn a_graph_being_deleted_gets_nothing() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        g.status = Some(DynamoGraphDeploymentStatus {
            state: DgdState::Successful,
            ..Default::default()
        });
        d.insert(g);
        delete_graph(&d).await;
        d.clear_writes();
        pass(&d, &root(&d, false)).await.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
    }

    #[tokio::test]
    async fn upstreams_finalizer_is_released_and_the_graph_reconciled() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.metadata.finalizers = Some(vec![
            "example.com/hold".into(),
            labels::UPSTREAM_FINALIZER.into(),
        ]);
        d.insert(g);
        pass(&d, &root(&d, false)).await.unwrap();
        assert_eq!(stored(&d).finalizers(), ["example.com/hold"]);
        assert_eq!(
            stored(&d).annotations()[labels::WORKLOAD_PROVIDER],
            "component",
            "the provider is recorded in the same pass, after the release"
        );
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);
    }

    /// A failed release is upstream's finalizer failure, retried; nothing else is touched.
    #[tokio::test]
    async fn a_failed_finalizer_release_says_so_and_touches_nothing() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.metadata.finalizers = Some(vec![labels::UPSTREAM_FINALIZER.into()]);
        d.insert(g);
        d.fail_next(
            Verb::Patch,
            "DynamoGraphDeployment",
            kit::Error::Unsupported("patch failed".into()),
        );
        let err = pass(&d, &root(&d, false)).await.unwrap_err();
        assert_eq!(retry(err), Retry::Backoff);
        assert_eq!(ready(&d).1, REASON_FINALIZER_FAILED);
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
        pass(&d, &root(&d, false)).await.unwrap();
        assert!(stored(&d).finalizers().is_empty());
    }

    #[tokio::test]
    async fn upstreams_finalizer_is_released_from_a_graph_being_deleted() {
        let d = Double::new();
        let mut g = graph(&[]);
        g.metadata.finalizers = Some(vec![labels::UPSTREAM_FINALIZER.into()]);
        d.insert(g);
        delete_graph(&d).await;
        // The status write after it may find the graph gone; the release is what matters.
        let _ = pass(&d, &root(&d, false)).await;
        assert!(
            d.objects::<DynamoGraphDeployment>().is_empty(),
            "the graph is gone"
        );
    }

    /// Starts the deletion of the stored graph.
    async fn delete_graph(d: &Double) {
        d.writer()
            .delete_dynamic(
                &kit::object::resource::<DynamoGraphDeployment>(),
                Some("ns"),
                "g",
                &Default::default(),
                None,
            )
            .await
            .unwrap();
    }

    /// A workload of the namespace: a DynamoComponentDeployment or a PodCliqueSet named `name`,
    /// controlled by the stored graph when `controlled`.
    fn workload(d: &Double, grove: bool, name: &str, controlled: bool) {
        let owner = stored(d);
        let metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            owner_references: controlled.then(|| {
                vec![OwnerReference {
                    api_version: "nvidia.com/v1beta1".into(),
                    kind: "DynamoGraphDeployment".into(),
                    name: "g".into(),
                    uid: owner.metadata.uid.clone().unwrap(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            ..Default::default()
        };
        if grove {
            d.insert(PodCliqueSet {
                metadata,
                ..Default::default()
            });
        } else {
            d.insert(DynamoComponentDeployment {
                metadata,
                ..Default::default()
            });
        }
    }

    /// Upstream's adoption of a graph an older operator left unrecorded: what the graph
    /// controls decides, whatever Grove's default would be; workloads it does not control are
    /// ignored.
    #[tokio::test]
    async fn an_unrecorded_graph_keeps_the_pathway_of_what_it_controls() {
        // (what, PodCliqueSets?, controlled?, Grove served, recorded provider)
        let cases = [
            (
                "a controlled DCD, Grove served",
                false,
                true,
                true,
                "component",
            ),
            ("a controlled PodCliqueSet", true, true, true, "grove"),
            (
                "a DCD it does not control, Grove served",
                false,
                false,
                true,
                "grove",
            ),
            (
                "a DCD it does not control, no Grove",
                false,
                false,
                false,
                "component",
            ),
        ];
        for (what, grove, controlled, served, want) in cases {
            let d = Double::new();
            d.insert(graph(&[]));
            workload(&d, grove, "legacy", controlled);
            pass(&d, &root(&d, served)).await.ok();
            assert_eq!(
                stored(&d)
                    .annotations()
                    .get(labels::WORKLOAD_PROVIDER)
                    .map(String::as_str),
                Some(want),
                "{what}"
            );
        }
    }

    #[tokio::test]
    async fn an_unrecorded_graph_controlling_both_families_records_nothing() {
        let d = Double::new();
        d.insert(graph(&[]));
        workload(&d, false, "legacy-dcd", true);
        workload(&d, true, "legacy-pcs", true);
        let err = pass(&d, &root(&d, true)).await.unwrap_err();
        assert_eq!(retry(err), Retry::AwaitChange);
        let (status, reason, message) = ready(&d);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", REASON_RECORD_PROVIDER_FAILED)
        );
        assert!(
            message.contains("controls DynamoComponentDeployments and PodCliqueSets"),
            "{message}"
        );
        assert!(
            !stored(&d)
                .annotations()
                .contains_key(labels::WORKLOAD_PROVIDER)
        );
        let writes = d.writes();
        assert_eq!(writes.len(), 1, "only the status: {writes:?}");
    }

    /// Upstream: "workload discovery failure does not freeze a provider".
    #[tokio::test]
    async fn a_failed_read_of_the_owned_workloads_records_nothing_and_retries() {
        let d = Double::new();
        d.insert(graph(&[]));
        d.fail_next(
            Verb::List,
            "PodCliqueSet",
            kit::Error::Unsupported("list failed".into()),
        );
        let err = pass(&d, &root(&d, true)).await.unwrap_err();
        assert_eq!(retry(err), Retry::Backoff);
        assert_eq!(ready(&d).1, REASON_RECORD_PROVIDER_FAILED);
        assert!(
            !stored(&d)
                .annotations()
                .contains_key(labels::WORKLOAD_PROVIDER)
        );
        pass(&d, &root(&d, true)).await.unwrap();
        assert_eq!(stored(&d).annotations()[labels::WORKLOAD_PROVIDER], "grove");
    }

    /// Grove installed later: the same graph, still unrecorded (it waited for Grove), selects
    /// Grove on the next reconcile; a graph that records its provider reads nothing.
    #[tokio::test]
    async fn the_served_set_is_read_at_every_reconcile() {
        let d = Double::new();
        d.insert(graph(&[(labels::ENABLE_GROVE, "true")]));
        let served = Served::new();
        let program = ComponentProgram::new(d.reader(), d.writer(), ComponentConfig::default());
        let root = Root::new(
            d.reader(),
            d.writer(),
            Arc::new(program),
            grove(&d),
            served.clone(),
        );
        pass(&d, &root).await.unwrap_err();
        assert_eq!(ready(&d).1, REASON_PROVIDER_UNAVAILABLE);
        served.set(&kit::object::resource::<PodCliqueSet>(), true);
        pass(&d, &root).await.unwrap();
        assert_eq!(stored(&d).annotations()[labels::WORKLOAD_PROVIDER], "grove");
        assert_eq!(d.objects::<PodCliqueSet>().len(), 1);
    }
}
