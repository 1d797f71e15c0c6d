//! The DynamoGraphDeployment composition root: select a program, invoke it once, return its
//! status and events for the run loop to persist and publish.
//!
//! # One reconcile
//! 1. A graph being deleted gets nothing: its children carry controller owner references, so
//!    garbage collection removes them (no finalizer is needed, none is added).
//! 2. **Select the program** ([`select`], the rule below). An unknown recorded provider or an
//!    unavailable Grove pathway ends here with `Ready=False` and no retry until the graph
//!    changes.
//! 3. **Validate** with [`api::validate::validate_with`] for the selected provider. An invalid
//!    spec ends here: `Ready=False`, reason `InvalidSpec`, the message naming each field path,
//!    nothing written, no retry until the graph changes.
//! 4. **Record the provider** in the `nvidia.com/workload-provider` annotation when it is not
//!    recorded yet: a merge patch with the observed `resourceVersion` as precondition, before any
//!    other effect. A recorded provider never changes.
//! 5. **Invoke the program** once. Its outcome (or partial outcome on failure) is returned
//!    unchanged: the run loop ([`kit::run::Runner`]) persists `outcome.status` (also on error),
//!    then publishes the queued events, then requeues or backs off. The root never writes
//!    status itself.
//!
//! # Program selection
//! 1. If the graph records a provider (`nvidia.com/workload-provider`), that provider is used:
//!    `component` or `grove` (any other value: `Ready=False`, reason
//!    `unsupported_workload_provider`).
//! 2. Else, if the annotation `nvidia.com/enable-grove` is `"false"`: component.
//! 3. Else, Grove is *asked for* when `nvidia.com/enable-grove` is `"true"` or
//!    `spec.providerOverride` targets Grove (`apiVersion: grove.io/...`). Then: grove if the
//!    PodCliqueSet API is served ([`ServedApis`]), else `Ready=False`, reason
//!    `selected_workload_provider_unavailable` (nothing is recorded, so the graph may still opt
//!    out with `enable-grove: "false"`).
//! 4. Otherwise: component.
//!
//! A graph recorded as `grove` whose API is no longer served also gets
//! `selected_workload_provider_unavailable`: it never falls back to the component pathway.
//! Whether PodCliqueSet is served is a discovery snapshot the operator provides and refreshes
//! ([`ServedApis::set_pod_clique_sets`]), never a live call per reconcile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use api::labels;
use api::validate::{ValidationContext, validate_with};
use api::{DgdState, DynamoGraphDeployment, DynamoGraphDeploymentStatus, InvalidSpec, Provider};
use async_trait::async_trait;
use component_program::ComponentProgram;
use kit::conditions::{self, READY, Status};
use kit::{OrFail, Outcome, Patch, Reconciled, Writer, WriterExt};
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
/// Ready reason of grove-selected graphs until the grove program exists.
pub const REASON_GROVE_NOT_IMPLEMENTED: &str = "GroveProgramNotImplemented";

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
    /// The component program failed.
    #[error(transparent)]
    Component(#[from] component_program::Error),
    /// Another program failed.
    #[error(transparent)]
    Program(Box<dyn std::error::Error + Send + Sync>),
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

/// The grove program's place until it exists: `Ready=False`, reason
/// `GroveProgramNotImplemented`, state pending, nothing written.
pub struct GroveNotImplemented;

#[async_trait]
impl Program for GroveNotImplemented {
    async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let generation = dgd.metadata.generation.unwrap_or_default();
        let mut out = Outcome::new(seeded(dgd));
        out.status.state = DgdState::Pending;
        conditions::set(
            &mut out.status.conditions,
            conditions::new(
                READY,
                Status::False,
                REASON_GROVE_NOT_IMPLEMENTED,
                "the grove workload program is not available in this operator version",
                generation,
            ),
        );
        Ok(out)
    }
}

/// Which optional APIs the cluster serves, as the operator last discovered them.
#[derive(Debug, Default)]
pub struct ServedApis {
    pod_clique_sets: AtomicBool,
}

impl ServedApis {
    /// A snapshot: whether `grove.io/v1alpha1` PodCliqueSet is served.
    pub fn new(pod_clique_sets: bool) -> Arc<Self> {
        Arc::new(ServedApis {
            pod_clique_sets: AtomicBool::new(pod_clique_sets),
        })
    }

    /// Whether PodCliqueSet is served.
    pub fn pod_clique_sets(&self) -> bool {
        self.pod_clique_sets.load(Ordering::Relaxed)
    }

    /// Refresh after discovery.
    pub fn set_pod_clique_sets(&self, served: bool) {
        self.pod_clique_sets.store(served, Ordering::Relaxed);
    }
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
}

/// Select the program of `dgd` (the rule in the crate docs). `pod_clique_sets`: whether the
/// PodCliqueSet API is served.
pub fn select(dgd: &DynamoGraphDeployment, pod_clique_sets: bool) -> Selection {
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
    let enable_grove = annotations
        .and_then(|a| a.get(labels::ENABLE_GROVE))
        .map(String::as_str);
    let component = Selection::Run {
        provider: Provider::Component,
        recorded: false,
    };
    if enable_grove == Some("false") {
        return component;
    }
    let override_targets_grove = dgd
        .spec
        .provider_override
        .as_ref()
        .is_some_and(|o| o.api_version.starts_with("grove.io/"));
    if enable_grove == Some("true") || override_targets_grove {
        return grove(false);
    }
    component
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
    writer: Arc<dyn Writer>,
    component: Arc<dyn Program>,
    grove: Arc<dyn Program>,
    apis: Arc<ServedApis>,
}

impl Root {
    /// A root recording providers with `writer`, running `component` or `grove`, selecting with
    /// the discovery snapshot `apis`.
    pub fn new(
        writer: Arc<dyn Writer>,
        component: Arc<dyn Program>,
        grove: Arc<dyn Program>,
        apis: Arc<ServedApis>,
    ) -> Self {
        Root {
            writer,
            component,
            grove,
            apis,
        }
    }

    /// Reconcile `dgd` once (see the crate docs).
    pub async fn reconcile(
        &self,
        dgd: Arc<DynamoGraphDeployment>,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let generation = dgd.metadata.generation.unwrap_or_default();
        let key = kit::object::key_of(dgd.as_ref());
        if dgd.metadata.deletion_timestamp.is_some() {
            tracing::debug!(dgd = %key, "being deleted; garbage collection removes the children");
            return Ok(Outcome::new(dgd.status.clone().unwrap_or_default()));
        }
        let mut out = Outcome::new(seeded(&dgd));
        let (provider, recorded) = match select(&dgd, self.apis.pod_clique_sets()) {
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
            let patch = json!({"metadata": {
                "resourceVersion": dgd.metadata.resource_version,
                "annotations": {labels::WORKLOAD_PROVIDER: value},
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
            recorded
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(labels::WORKLOAD_PROVIDER.to_string(), value.to_string());
        }
        match provider {
            Provider::Component => self.component.reconcile(&dgd).await,
            Provider::Grove => self.grove.reconcile(&dgd).await,
        }
    }
}
