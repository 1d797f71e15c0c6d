//! A `Mirror` copies the data of a source ConfigMap into a ConfigMap of its own, named after the
//! mirror and owned by it. Written only on `kit`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::conditions::{self, READY, Status};
use kit::events::Reporter;
use kit::run::Runner;
use kit::{Event, OrFail, Outcome, ReaderExt, ReconcileStatus, Reconciled, WriterExt};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Field manager of everything this controller writes.
pub const MANAGER: &str = "mirror-controller";

/// Desired state: which ConfigMap (same namespace) to copy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kit.example.com",
    version = "v1",
    kind = "Mirror",
    namespaced,
    status = "MirrorStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct MirrorSpec {
    /// Name of the source ConfigMap.
    pub source: String,
}

/// Observed state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MirrorStatus {
    /// `mirrored`, `waiting` or `failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many keys were copied.
    #[serde(default)]
    pub keys: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ReconcileStatus for MirrorStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    fn set_failed(&mut self, generation: i64, _reason: &str, _message: &str) {
        self.state = "failed".into();
        self.observed_generation = Some(generation);
    }
}

/// The capabilities the mirror reconciler needs: it reads and writes ConfigMaps. It does not get
/// a status writer: the run loop persists the status it returns.
pub struct Ctx {
    pub reader: Arc<dyn kit::Reader>,
    pub writer: Arc<dyn kit::Writer>,
}

/// Name of the mirror's own ConfigMap.
pub fn target_name(mirror: &Mirror) -> String {
    format!("{}-mirror", mirror.name_any())
}

/// The ConfigMap a mirror wants, given the source's data.
pub fn render(mirror: &Mirror, source: &ConfigMap) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(target_name(mirror)),
            namespace: mirror.namespace(),
            owner_references: mirror.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some([("kit.example.com/mirror".to_string(), mirror.name_any())].into()),
            ..Default::default()
        },
        data: source.data.clone(),
        ..Default::default()
    }
}

/// Reconcile attempts so far (a metric).
pub static RECONCILES: AtomicU64 = AtomicU64::new(0);

/// One reconcile: resolve the source, ensure the copy, report status.
pub async fn reconcile(mirror: Arc<Mirror>, ctx: Arc<Ctx>) -> Reconciled<MirrorStatus, kit::Error> {
    RECONCILES.fetch_add(1, Ordering::Relaxed);
    let generation = mirror.metadata.generation.unwrap_or_default();
    let previous = mirror.status.clone().unwrap_or_default();
    let mut out = Outcome::new(MirrorStatus {
        observed_generation: Some(generation),
        conditions: previous.conditions.clone(),
        ..MirrorStatus::default()
    });
    let ns = mirror.namespace();
    let source: Option<ConfigMap> = ctx
        .reader
        .get(ns.as_deref(), &mirror.spec.source)
        .await
        .or_fail(&mut out, generation, "SourceReadFailed")?;
    let ready = match source {
        None => {
            out.status.state = "waiting".into();
            conditions::new(
                READY,
                Status::False,
                "SourceMissing",
                format!("ConfigMap {} not found", mirror.spec.source),
                generation,
            )
        }
        Some(source) => {
            let applied = ctx
                .writer
                .apply(&render(&mirror, &source), None)
                .await
                .or_fail(&mut out, generation, "ApplyFailed")?;
            if applied.changed {
                out.normal(
                    "Updated",
                    format!("updated ConfigMap {}", target_name(&mirror)),
                );
            }
            out.status.state = "mirrored".into();
            out.status.keys = source.data.as_ref().map_or(0, |d| d.len());
            conditions::new(READY, Status::True, "Mirrored", "", generation)
        }
    };
    conditions::set(&mut out.status.conditions, ready);
    // A status-transition event, published by the run loop once the status is persisted.
    for t in conditions::changed(&previous.conditions, &out.status.conditions) {
        let note = format!(
            "{} {} -> {}",
            t.type_,
            t.from.as_deref().unwrap_or("unset"),
            t.to.as_deref().unwrap_or("unset")
        );
        out.event(Event::normal(&t.reason, note));
    }
    Ok(out)
}

/// Which mirrors read the ConfigMap `cm` (as their source, or as their own copy).
pub fn mirrors_of(cm: &ConfigMap, mirrors: &[Arc<Mirror>]) -> Vec<ObjectRef<Mirror>> {
    mirrors
        .iter()
        .filter(|m| m.namespace() == cm.namespace())
        .filter(|m| m.spec.source == cm.name_any() || target_name(m) == cm.name_any())
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// Run the mirror controller in `namespace` (`None`: everywhere) until `shutdown` completes.
///
/// One watch per kind (Mirror, ConfigMap) feeds both the controller's triggers and every read.
pub async fn run(
    client: Client,
    namespace: Option<&str>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> kit::Result<()> {
    let api = |client: Client| match namespace {
        Some(ns) => (
            Api::<Mirror>::namespaced(client.clone(), ns),
            Api::<ConfigMap>::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let (mirror_api, configmap_api) = api(client.clone());
    let cache = Cache::new(client.clone());
    let mirrors = cache.watch(mirror_api, watcher::Config::default())?;
    cache.watch(configmap_api, watcher::Config::default())?;
    let mirror_store = mirrors.clone();
    let controller = Controller::for_shared_stream(cache.subscribe::<Mirror>()?, mirrors)
        .watches_shared_stream(cache.subscribe::<ConfigMap>()?, move |cm| {
            mirrors_of(&cm, &mirror_store.state())
        })
        .graceful_shutdown_on(shutdown);
    let ctx = Arc::new(Ctx {
        reader: Arc::new(cache.clone()),
        writer: Arc::new(KubeWriter::new(client.clone(), MANAGER).with_cache(cache.clone())),
    });
    let status = Arc::new(KubeStatusWriter::new(client.clone(), MANAGER).with_cache(cache.clone()));
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: MANAGER.into(),
            instance: None,
        },
    );
    let runner = Runner::new(controller, status, Arc::new(recorder));
    let watches = cache.run();
    tokio::select! {
        _ = watches => {}
        _ = runner.run(reconcile, ctx) => {}
    }
    Ok(())
}
