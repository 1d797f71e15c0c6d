//! Controller wiring: one queue per controller, all fed by one shared cache (one watch per
//! kind), each watch filtered by its row of [`crate::triggers::TRIGGERS`].
//!
//! | controller | primary | owned kinds that feed it |
//! | --- | --- | --- |
//! | dynamographdeployment | DynamoGraphDeployment (the root) | DynamoComponentDeployment, DynamoGraphDeploymentScalingAdapter, Service (Grove component Services and model Services, mapped to every owning graph), Docker config Secret (with image pull secret discovery, mapped to the namespace's graphs), the graphs waiting for an optional API that came or went ([`crate::optional_apis`]) |
//! | dynamocomponentdeployment | DynamoComponentDeployment | Deployment, LeaderWorkerSet (label-selected by `nvidia.com/dynamo-component`), Service (mapped to every owning DCD: the model Service has several), ServiceAccount (labelled `nvidia.com/dynamo-component-pod`, mapped to the namespace's DCDs), Docker config Secret (with image pull secret discovery, mapped to the namespace's DCDs), the multinode DCDs when the LeaderWorkerSet API came or went |
//! | dynamocheckpoint | DynamoCheckpoint | Job (label-selected), ConfigMap (the artifact record) |
//! | dynamographdeploymentscalingadapter | DynamoGraphDeploymentScalingAdapter | DynamoComponentDeployment, DynamoGraphDeployment (and PodClique, PodCliqueScalingGroup with Grove), mapped to the adapters naming their graph and component |
//!
//! The graph's other children (its PVCs and claim templates) are watched with the label
//! selector `nvidia.com/dynamo-graph-deployment-name`; Roles and RoleBindings are unselected
//! watches, so that a miss means absent and creating a graph's discovery RBAC or a namespace's
//! shared planner and EPP binding costs no read (ConfigMaps are one
//! unselected watch shared with the checkpoint controller; ServiceAccounts are one unselected
//! watch too, because the component controller reads the user's accounts labelled
//! `nvidia.com/dynamo-component-pod` from it and a kind has one watch with one selector), so
//! reads are served from the cache and drift triggers a reconcile of the owner. Worker pods are
//! watched with the selector `nvidia.com/dynamo-worker-hash` as a slim view (metadata, phase,
//! conditions: `reconcilers::rollout::pods::WorkerPod`), for the rollout. Secrets are
//! watched only with `--discover-image-pull-secrets`, and then only those of type
//! `kubernetes.io/dockerconfigjson` (field selector `type=`, so no other Secret is held in
//! memory): both the graph and the DCD controller list them from the cache for image pull
//! secrets (`reconcilers::pull_secrets`), a change re-renders the graphs and DCDs of the
//! namespace, and their reconciles wait for that watch's first list, so discovery never lists
//! Secrets live. Other Secrets are read by name (the MPI key); reads the cache cannot serve fall
//! back to live calls, which it counts ([`kit::cache::Cache::live_reads`]).
//!
//! A stored object of ours that does not decode (a newer CRD version's enum value, nesting beyond
//! `kit::object::MAX_DEPTH`) is skipped by the cache rather than failing its kind's list, and
//! gets `Ready=False UnreadableObject` with a Warning event (`kit::unreadable`).
//!
//! Optional kinds (LeaderWorkerSet, Grove's PodCliqueSet, PodClique and PodCliqueScalingGroup,
//! InferencePool, `resource.k8s.io/v1` ResourceClaimTemplate) are registered whether or not the cluster serves
//! them, each watched only while served ([`kit::cache::Cache::watch_while_served`]); the shared
//! [`kit::served::Served`] set comes from discovery at start-up and then follows the CRDs and
//! the DRA APIService ([`crate::optional_apis`]), so an API installed or removed while the
//! operator runs starts or stops its watches and re-queues what waits for it. The reconcilers
//! read the same set.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use api::grove::{PodClique, PodCliqueScalingGroup, PodCliqueSet};
use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter};
use dcd_controller::LeaderWorkerSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::Api;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::Store;
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::events::Reporter;
use kit::run::Runner;
use kit::served::Served;
use kit::{Cached, EventSink, Reader, Reconciled, StatusWriter, Writer};
use reconcilers::epp::InferencePool;
use reconcilers::ingress::{HttpRoute, VirtualService};
use reconcilers::rollout::pods::{POD_WATCH_LABEL, WorkerPod};

use crate::cli::RunArgs;
use crate::metrics::{ControllerMetrics, Metrics, ReconcileResult};
use crate::optional_apis;
use crate::triggers::{self, ControllerName};

/// The field manager of the DGD controller (status and children).
pub const DGD_MANAGER: &str = reconcilers::child::FIELD_MANAGER;
/// The field manager of the DCD controller.
pub const DCD_MANAGER: &str = dcd_controller::FIELD_MANAGER;
/// The field manager of the scaling adapter controller (DCD and Grove replicas, adapter status).
pub const DGDSA_MANAGER: &str = scaling_controller::FIELD_MANAGER;

/// The label every graph-owned child carries (the selector of their watches).
const GRAPH_LABEL: &str = api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME;

/// What the controllers share.
struct Wiring<'a> {
    cache: &'a Cache,
    client: Client,
    args: &'a RunArgs,
    metrics: &'a Arc<Metrics>,
    events: Arc<dyn EventSink>,
    stop: CancellationToken,
    served: Served,
}

impl Wiring<'_> {
    /// Registers optional kind `K` as [`Wiring::watch`] does, watched only while `served`
    /// serves it.
    fn watch_optional<K>(&self, scope: Scope) -> anyhow::Result<Store<K>>
    where
        K: Cached + Resource<Scope = NamespaceResourceScope>,
    {
        Ok(self.cache.watch_while_served::<K>(
            self.api::<K>(),
            self.watch_config(scope),
            &self.served,
        )?)
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.args.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Registers `K` in the cache: primary kinds honour `--selector`; `Scope::Graph` kinds are
    /// only the objects labelled with a graph name.
    fn watch<K>(&self, scope: Scope) -> anyhow::Result<Store<K>>
    where
        K: Cached + Resource<Scope = NamespaceResourceScope>,
    {
        Ok(self
            .cache
            .watch::<K>(self.api::<K>(), self.watch_config(scope))?)
    }

    /// The watch configuration of `scope`.
    fn watch_config(&self, scope: Scope) -> watcher::Config {
        let config = watcher::Config::default();
        match scope {
            Scope::Primary => match &self.args.selector {
                Some(selector) => config.labels(selector),
                None => config,
            },
            Scope::Graph => config.labels(GRAPH_LABEL),
            Scope::Labelled(label) => config.labels(label),
            Scope::Fields(fields) => config.fields(fields),
            Scope::All => config,
        }
    }

    /// A trigger stream of `K` for `controller`, filtered by the table.
    fn trigger<K>(
        &self,
        controller: ControllerName,
        metrics: &ControllerMetrics,
    ) -> anyhow::Result<impl futures::Stream<Item = Arc<K>> + Send + 'static>
    where
        K: Resource<DynamicType = ()> + Serialize + Clone + Debug + Send + Sync + 'static,
    {
        let store = self
            .cache
            .store::<K>()
            .ok_or_else(|| anyhow::anyhow!("{} is not watched", K::kind(&())))?;
        Ok(triggers::filter(
            controller,
            store,
            metrics.clone(),
            self.cache.subscribe::<K>()?,
        ))
    }

    fn writers(&self, manager: &str) -> (Arc<dyn Writer>, Arc<dyn StatusWriter>) {
        (
            Arc::new(KubeWriter::new(self.client.clone(), manager).with_cache(self.cache.clone())),
            Arc::new(
                KubeStatusWriter::new(self.client.clone(), manager).with_cache(self.cache.clone()),
            ),
        )
    }

    /// The run loop of `controller`: a primary found gone leaves the queue metrics too.
    fn runner<K>(
        &self,
        controller: Controller<K>,
        status_writer: Arc<dyn StatusWriter>,
        metrics: &ControllerMetrics,
    ) -> Runner<K>
    where
        K: Cached + kube::core::object::HasStatus,
        K::Status: Serialize + Send + Sync,
    {
        let metrics = metrics.clone();
        Runner::new(controller, status_writer, self.events.clone())
            .on_gone(move |key| metrics.dequeued(key))
    }

    fn config(&self, concurrency: u16) -> ControllerConfig {
        ControllerConfig::default()
            .concurrency(concurrency)
            .debounce(Duration::from_millis(100))
    }
}

/// The graph named by `object`'s graph label (same namespace): the mapper of `Label` rows.
fn graph_of<K: Resource>(
    object: Arc<K>,
) -> Option<kube::runtime::reflector::ObjectRef<DynamoGraphDeployment>> {
    let name = object.labels().get(GRAPH_LABEL)?.clone();
    let ns = object.namespace()?;
    Some(kube::runtime::reflector::ObjectRef::new(&name).within(&ns))
}

/// The primaries (kind `P`) `object` holds an owner reference to, controller or not: the
/// mapper of [`triggers::Enqueue::Owners`] rows, counting what it enqueues.
fn owners_of<K: Resource, P: Resource<DynamicType = ()>>(
    object: &K,
) -> Vec<kube::runtime::reflector::ObjectRef<P>> {
    let Some(ns) = object.namespace() else {
        return Vec::new();
    };
    let (api_version, kind) = (P::api_version(&()), P::kind(&()));
    object
        .owner_references()
        .iter()
        .filter(|o| o.api_version == api_version && o.kind == kind)
        .map(|o| kube::runtime::reflector::ObjectRef::new(&o.name).within(&ns))
        .collect()
}

fn owners_mapper<K: Resource, P: Resource<DynamicType = ()>>(
    metrics: ControllerMetrics,
) -> impl Fn(Arc<K>) -> Vec<kube::runtime::reflector::ObjectRef<P>> + Send + Sync + 'static {
    move |object: Arc<K>| counted(&metrics, owners_of::<K, P>(object.as_ref()))
}

/// Every primary in `primaries` of `object`'s namespace, none for an object with the graph
/// label: the mapper of [`triggers::Enqueue::Namespace`] rows, counting what it enqueues.
fn namespace_mapper<K: Resource, P: Resource<DynamicType = ()> + Clone + Send + Sync + 'static>(
    primaries: Store<P>,
    metrics: ControllerMetrics,
) -> impl Fn(Arc<K>) -> Vec<kube::runtime::reflector::ObjectRef<P>> + Send + Sync + 'static {
    move |object: Arc<K>| {
        if object.labels().contains_key(GRAPH_LABEL) {
            return Vec::new();
        }
        let ns = object.namespace();
        let refs = primaries
            .state()
            .iter()
            .filter(|p| p.namespace() == ns)
            .map(|p| kube::runtime::reflector::ObjectRef::from_obj(p.as_ref()))
            .collect();
        counted(&metrics, refs)
    }
}

/// The graph `object`'s graph label names, else every graph of its namespace: the mapper of
/// [`triggers::Enqueue::GraphElseNamespace`] rows, counting what it enqueues.
fn graph_else_namespace_mapper<K: Resource>(
    graphs: Store<DynamoGraphDeployment>,
    metrics: ControllerMetrics,
) -> impl Fn(Arc<K>) -> Vec<kube::runtime::reflector::ObjectRef<DynamoGraphDeployment>>
+ Send
+ Sync
+ 'static {
    let namespace = namespace_mapper::<K, DynamoGraphDeployment>(graphs, metrics.clone());
    move |object: Arc<K>| match graph_of(object.clone()) {
        Some(graph) => counted(&metrics, vec![graph]),
        None => namespace(object),
    }
}

/// Counts `refs` as enqueued in the controller's queue metrics.
fn counted<P: Resource<DynamicType = ()>>(
    metrics: &ControllerMetrics,
    refs: Vec<kube::runtime::reflector::ObjectRef<P>>,
) -> Vec<kube::runtime::reflector::ObjectRef<P>> {
    for r in &refs {
        metrics.enqueued(format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        ));
    }
    refs
}

/// Which objects of a kind are watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// A controller's primary kind (`--selector` applies).
    Primary,
    /// Only objects labelled with a graph name.
    Graph,
    /// Every object of the kind (in the watched namespace).
    All,
    /// Only objects carrying this label.
    Labelled(&'static str),
    /// Only objects matching this field selector.
    Fields(&'static str),
}

/// The Secrets image pull secret discovery reads: Docker config Secrets only.
const DOCKER_CONFIG_SECRETS: &str = "type=kubernetes.io/dockerconfigjson";

impl Wiring<'_> {
    /// With image pull secret discovery, the Docker config Secrets' store (registered once,
    /// shared by the graph and DCD controllers); `None` without.
    fn docker_config_secrets(&self) -> anyhow::Result<Option<Store<Secret>>> {
        if !self.args.discover_image_pull_secrets {
            return Ok(None);
        }
        Ok(Some(
            self.watch::<Secret>(Scope::Fields(DOCKER_CONFIG_SECRETS))?,
        ))
    }
}

/// Holds a reconcile until the Docker config Secrets' first list is in the cache (image pull
/// secret discovery reads them from there, never live); at once without discovery or after.
async fn secrets_synced(secrets: Option<&Store<Secret>>) {
    if let Some(store) = secrets {
        // An error means the cache is gone: the operator is stopping.
        let _ = store.wait_until_ready().await;
    }
}

/// Wraps a reconcile with the controller's metrics.
async fn measured<K, S, E, Fut>(
    metrics: &ControllerMetrics,
    object: &K,
    reconcile: Fut,
) -> Reconciled<S, E>
where
    K: Resource,
    Fut: std::future::Future<Output = Reconciled<S, E>>,
{
    let key = format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    );
    let timer = metrics.start(&key);
    let result = reconcile.await;
    timer.finish(match &result {
        Ok(outcome) if outcome.requeue.is_some() => ReconcileResult::RequeueAfter,
        Ok(_) => ReconcileResult::Success,
        Err(_) => ReconcileResult::Error,
    });
    result
}

struct DgdContext {
    root: root::Root,
    metrics: ControllerMetrics,
    secrets: Option<Store<Secret>>,
}

struct DcdContext {
    reconciler: dcd_controller::DcdReconciler,
    metrics: ControllerMetrics,
    secrets: Option<Store<Secret>>,
}

/// Registers the watches of every controller in `cache` and returns the controllers' futures
/// (they run until `stop` fires, then finish in-flight reconciles).
pub fn build(
    cache: &Cache,
    client: Client,
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    stop: CancellationToken,
    served: Served,
) -> anyhow::Result<Vec<BoxFuture<'static, ()>>> {
    let reporter = Reporter {
        controller: api::labels::OPERATOR_NAME.into(),
        instance: Some(args.identity()),
    };
    let publisher = kit::events::Publisher::new(client.clone(), reporter).with_cache(cache);
    let wiring = Wiring {
        cache,
        client,
        args,
        metrics,
        events: Arc::new(publisher),
        stop,
        served,
    };
    let (graph_queue, graphs_waiting) = futures::channel::mpsc::unbounded();
    let (dcd_queue, dcds_waiting) = futures::channel::mpsc::unbounded();
    let dgd_metrics = metrics.controller(ControllerName::Dgd.as_str(), args.dgd_concurrency);
    let dcd_metrics = metrics.controller(ControllerName::Dcd.as_str(), args.dcd_concurrency);
    let mut futures = vec![
        dgd_controller(&wiring, dgd_metrics.clone(), graphs_waiting)?,
        dcd_controller(&wiring, dcd_metrics.clone(), dcds_waiting)?,
        checkpoint_controller(&wiring)?,
        dgdsa_controller(&wiring)?,
    ];
    futures.extend(unreadable_reporters(&wiring)?);
    if let Some(ns) = &args.namespace {
        // Following the APIs watches their (cluster-scoped) CRDs.
        tracing::info!(
            namespace = %ns,
            "namespace-restricted: the optional APIs are those discovered at start (one installed later needs a restart)"
        );
        return Ok(futures);
    }
    let requeue = optional_apis::Requeue {
        graphs: store::<DynamoGraphDeployment>(cache)?,
        graph_queue,
        graph_metrics: dgd_metrics,
        dcds: store::<DynamoComponentDeployment>(cache)?,
        dcd_queue,
        dcd_metrics,
    };
    let follow = optional_apis::follow(
        wiring.client.clone(),
        wiring.served.clone(),
        requeue,
        wiring.args.api_policy(),
    );
    let stop = wiring.stop.clone();
    futures.push(
        async move {
            tokio::select! {
                _ = follow => {}
                _ = stop.cancelled() => {}
            }
        }
        .boxed(),
    );
    Ok(futures)
}

/// The store of a registered kind.
fn store<K: Resource<DynamicType = ()> + Clone + 'static>(
    cache: &Cache,
) -> anyhow::Result<Store<K>> {
    cache
        .store::<K>()
        .ok_or_else(|| anyhow::anyhow!("{} is not watched", K::kind(&())))
}

/// The field manager of `Ready=False UnreadableObject` (see [`kit::unreadable`]); the
/// controller's next status write takes the condition over.
pub const UNREADABLE_MANAGER: &str = "dynamo-operator/unreadable";

/// One reporter per kind of ours: a stored object the cache cannot decode (written through a
/// newer CRD version, or nested too deeply) gets `Ready=False UnreadableObject` and a Warning
/// event instead of silence. They run until `stop`, as the controllers do.
fn unreadable_reporters(w: &Wiring<'_>) -> anyhow::Result<Vec<BoxFuture<'static, ()>>> {
    let reporter =
        || kit::unreadable::Reporter::new(w.client.clone(), UNREADABLE_MANAGER, w.events.clone());
    let until_stop = |report: BoxFuture<'static, ()>| {
        let stop = w.stop.clone();
        async move {
            tokio::select! {
                _ = report => {}
                _ = stop.cancelled() => {}
            }
        }
        .boxed()
    };
    Ok(vec![
        until_stop(reporter().run::<DynamoGraphDeployment>(w.cache)?),
        until_stop(reporter().run::<DynamoComponentDeployment>(w.cache)?),
        until_stop(reporter().run::<api::DynamoCheckpoint>(w.cache)?),
        until_stop(reporter().run::<DynamoGraphDeploymentScalingAdapter>(w.cache)?),
    ])
}

/// Registers the kinds the graph controller reads (and is triggered by) besides the graphs.
fn watch_graph_children(w: &Wiring<'_>) -> anyhow::Result<()> {
    w.watch::<DynamoComponentDeployment>(Scope::All)?;
    w.watch::<DynamoGraphDeploymentScalingAdapter>(Scope::All)?;
    // Unselected: the DCD controller reads the namespace's labelled accounts from it too.
    w.watch::<ServiceAccount>(Scope::All)?;
    w.watch::<Service>(Scope::All)?;
    // Unselected: a miss is then known absent, so the discovery and planner RBAC a graph needs
    // is created without a read first (Roles and RoleBindings are small and few).
    w.watch::<Role>(Scope::All)?;
    w.watch::<RoleBinding>(Scope::All)?;
    // One ConfigMap watch for both controllers: graph children and checkpoint artifact
    // records carry different labels, and a watch has one selector.
    w.watch::<ConfigMap>(Scope::All)?;
    w.watch::<api::DynamoCheckpoint>(Scope::All)?;
    w.watch::<PersistentVolumeClaim>(Scope::Graph)?;
    w.watch::<Ingress>(Scope::Graph)?;
    w.watch::<WorkerPod>(Scope::Labelled(POD_WATCH_LABEL))?;
    // The snapshot agent: where restore pods find the checkpoint storage (both controllers).
    w.watch::<DaemonSet>(Scope::Labelled(api::snapshot::AGENT_SELECTOR))?;
    // Optional kinds: watched while served.
    w.watch_optional::<ResourceClaimTemplate>(Scope::Graph)?;
    w.watch_optional::<InferencePool>(Scope::Graph)?;
    w.watch_optional::<VirtualService>(Scope::Graph)?;
    w.watch_optional::<HttpRoute>(Scope::Graph)?;
    w.watch_optional::<PodCliqueSet>(Scope::All)?;
    w.watch_optional::<PodClique>(Scope::Graph)?;
    w.watch_optional::<PodCliqueScalingGroup>(Scope::Graph)?;
    Ok(())
}

fn dgd_controller(
    w: &Wiring<'_>,
    metrics: ControllerMetrics,
    waiting: futures::channel::mpsc::UnboundedReceiver<
        kube::runtime::reflector::ObjectRef<DynamoGraphDeployment>,
    >,
) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Dgd;
    let store = w.watch::<DynamoGraphDeployment>(Scope::Primary)?;
    watch_graph_children(w)?;
    let secrets = w.docker_config_secrets()?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(DGD_MANAGER);
    let root = root(reader, writer, w.served.clone(), w.args, secrets.is_some());

    // Every registered kind's trigger stream is consumed here (an unpolled subscriber would
    // stall its watch).
    let mut controller = Controller::for_shared_stream(
        w.trigger::<DynamoGraphDeployment>(name, &metrics)?,
        store.clone(),
    )
    .owns_shared_stream(w.trigger::<DynamoComponentDeployment>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<DynamoGraphDeploymentScalingAdapter>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<ServiceAccount>(name, &metrics)?)
    .watches_shared_stream(
        w.trigger::<Service>(name, &metrics)?,
        owners_mapper::<Service, DynamoGraphDeployment>(metrics.clone()),
    )
    .owns_shared_stream(w.trigger::<Role>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<RoleBinding>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<ConfigMap>(name, &metrics)?)
    .watches_shared_stream(
        w.trigger::<api::DynamoCheckpoint>(name, &metrics)?,
        graph_else_namespace_mapper::<api::DynamoCheckpoint>(store.clone(), metrics.clone()),
    )
    .watches_shared_stream(
        w.trigger::<DaemonSet>(name, &metrics)?,
        namespace_mapper::<DaemonSet, DynamoGraphDeployment>(store.clone(), metrics.clone()),
    )
    .owns_shared_stream(w.trigger::<PersistentVolumeClaim>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<ResourceClaimTemplate>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<InferencePool>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<Ingress>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<VirtualService>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<HttpRoute>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<PodCliqueSet>(name, &metrics)?)
    .watches_shared_stream(w.trigger::<PodClique>(name, &metrics)?, graph_of)
    .watches_shared_stream(
        w.trigger::<PodCliqueScalingGroup>(name, &metrics)?,
        graph_of,
    )
    .watches_shared_stream(w.trigger::<WorkerPod>(name, &metrics)?, graph_of);
    if secrets.is_some() {
        controller = controller.watches_shared_stream(
            w.trigger::<Secret>(name, &metrics)?,
            namespace_mapper::<Secret, DynamoGraphDeployment>(store, metrics.clone()),
        );
    }
    let controller = controller
        .reconcile_on(waiting)
        .with_config(w.config(w.args.dgd_concurrency))
        .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(DgdContext {
        root,
        metrics,
        secrets,
    });
    Ok(w.runner(controller, status_writer, &ctx.metrics)
        .run(
            |dgd: Arc<DynamoGraphDeployment>, ctx: Arc<DgdContext>| async move {
                secrets_synced(ctx.secrets.as_ref()).await;
                measured(&ctx.metrics, dgd.as_ref(), ctx.root.reconcile(dgd.clone())).await
            },
            ctx,
        )
        .boxed())
}

/// The composition root with both programs, as the DGD controller runs it (and `render`):
/// both read the optional kinds the cluster serves from `served` at every reconcile.
pub fn root(
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    served: Served,
    args: &RunArgs,
    discover_pull_secrets: bool,
) -> root::Root {
    let shared = args.shared_config();
    let mut component_config = component_program::ComponentConfig {
        served: served.clone(),
        rollout: reconcilers::rollout::Config {
            // The DGD controller watches them (`WorkerPod`).
            pods: true,
            ..Default::default()
        },
        ..Default::default()
    };
    component_config.shared = shared.clone();
    let component =
        component_program::ComponentProgram::new(reader.clone(), writer.clone(), component_config);
    let mut grove_config = grove_program::GroveConfig {
        discover_pull_secrets,
        ..Default::default()
    };
    grove_config.render.infrastructure = shared.infrastructure.clone();
    grove_config.render.termination_delay = Some(args.grove_termination_delay.clone());
    grove_config.shared = shared;
    let grove = grove_program::GroveProgram::new(reader.clone(), writer.clone(), grove_config);
    root::Root::new(reader, writer, Arc::new(component), Arc::new(grove), served)
}

/// The component reconciler with the run's settings, as the DCD controller runs it (and
/// `render`).
pub fn dcd_reconciler(
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    served: Served,
    args: &RunArgs,
    discover_pull_secrets: bool,
) -> dcd_controller::DcdReconciler {
    dcd_controller::DcdReconciler::new(reader, writer)
        .with_infrastructure(args.infrastructure())
        .with_discovery(args.discovery_backend.into())
        .with_served(served)
        .with_pull_secret_discovery(discover_pull_secrets)
}

fn dcd_controller(
    w: &Wiring<'_>,
    metrics: ControllerMetrics,
    waiting: futures::channel::mpsc::UnboundedReceiver<
        kube::runtime::reflector::ObjectRef<DynamoComponentDeployment>,
    >,
) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Dcd;
    // The DCD kind is watched once, shared with the DGD controller.
    let store = w.watch::<DynamoComponentDeployment>(Scope::All)?;
    w.watch::<Deployment>(Scope::All)?;
    w.watch::<Service>(Scope::All)?;
    w.watch::<ServiceAccount>(Scope::All)?;
    w.watch::<DaemonSet>(Scope::Labelled(api::snapshot::AGENT_SELECTOR))?;
    // Every LeaderWorkerSet the controller renders carries the component label.
    w.watch_optional::<LeaderWorkerSet>(Scope::Labelled(api::labels::DYNAMO_COMPONENT))?;
    let secrets = w.docker_config_secrets()?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(DCD_MANAGER);
    let reconciler = dcd_reconciler(reader, writer, w.served.clone(), w.args, secrets.is_some());

    let mut controller = Controller::for_shared_stream(
        w.trigger::<DynamoComponentDeployment>(name, &metrics)?,
        store.clone(),
    )
    .owns_shared_stream(w.trigger::<Deployment>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<LeaderWorkerSet>(name, &metrics)?)
    .watches_shared_stream(
        w.trigger::<Service>(name, &metrics)?,
        owners_mapper::<Service, DynamoComponentDeployment>(metrics.clone()),
    )
    .watches_shared_stream(
        w.trigger::<ServiceAccount>(name, &metrics)?,
        namespace_mapper::<ServiceAccount, DynamoComponentDeployment>(
            store.clone(),
            metrics.clone(),
        ),
    )
    .watches_shared_stream(
        w.trigger::<DaemonSet>(name, &metrics)?,
        namespace_mapper::<DaemonSet, DynamoComponentDeployment>(store.clone(), metrics.clone()),
    );
    if secrets.is_some() {
        controller = controller.watches_shared_stream(
            w.trigger::<Secret>(name, &metrics)?,
            namespace_mapper::<Secret, DynamoComponentDeployment>(store, metrics.clone()),
        );
    }
    let controller = controller
        .reconcile_on(waiting)
        .with_config(w.config(w.args.dcd_concurrency))
        .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(DcdContext {
        reconciler,
        metrics,
        secrets,
    });
    Ok(w.runner(controller, status_writer, &ctx.metrics)
        .first_status_grace(dcd_controller::FIRST_STATUS_GRACE)
        .run(
            |dcd: Arc<DynamoComponentDeployment>, ctx: Arc<DcdContext>| async move {
                secrets_synced(ctx.secrets.as_ref()).await;
                measured(
                    &ctx.metrics,
                    dcd.as_ref(),
                    ctx.reconciler.reconcile(dcd.as_ref()),
                )
                .await
            },
            ctx,
        )
        .boxed())
}

struct CheckpointContext {
    reconciler: checkpoint_controller::CheckpointReconciler,
    metrics: ControllerMetrics,
}

/// The checkpoint artifact record label (the checkpoint's name).
use checkpoint_controller::render::CHECKPOINT_NAME_LABEL as CHECKPOINT_LABEL;

/// The checkpoint named by `object`'s checkpoint label.
fn checkpoint_of<K: Resource>(
    object: Arc<K>,
) -> Option<kube::runtime::reflector::ObjectRef<api::DynamoCheckpoint>> {
    let name = object.labels().get(CHECKPOINT_LABEL)?.clone();
    let ns = object.namespace()?;
    Some(kube::runtime::reflector::ObjectRef::new(&name).within(&ns))
}

fn checkpoint_controller(w: &Wiring<'_>) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Checkpoint;
    let metrics = w
        .metrics
        .controller(name.as_str(), w.args.checkpoint_concurrency);
    let store = w.watch::<api::DynamoCheckpoint>(Scope::All)?;
    w.watch::<Job>(Scope::Labelled(CHECKPOINT_LABEL))?;
    w.watch::<ConfigMap>(Scope::All)?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(checkpoint_controller::FIELD_MANAGER);
    let reconciler = checkpoint_controller::CheckpointReconciler::new(reader, writer);
    let controller =
        Controller::for_shared_stream(w.trigger::<api::DynamoCheckpoint>(name, &metrics)?, store)
            .owns_shared_stream(w.trigger::<Job>(name, &metrics)?)
            .watches_shared_stream(w.trigger::<ConfigMap>(name, &metrics)?, checkpoint_of)
            .with_config(w.config(w.args.checkpoint_concurrency))
            .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(CheckpointContext {
        reconciler,
        metrics,
    });
    Ok(w.runner(controller, status_writer, &ctx.metrics)
        .run(
            |ckpt: Arc<api::DynamoCheckpoint>, ctx: Arc<CheckpointContext>| async move {
                measured(
                    &ctx.metrics,
                    ckpt.as_ref(),
                    ctx.reconciler.reconcile(ckpt.as_ref()),
                )
                .await
            },
            ctx,
        )
        .boxed())
}

struct DgdsaContext {
    reconciler: scaling_controller::ScalingAdapterReconciler,
    graphs: Store<DynamoGraphDeployment>,
    selective: bool,
    metrics: ControllerMetrics,
}

/// The adapters an object of a [`triggers::Enqueue::ScalingAdapters`] row enqueues: those in its
/// namespace whose `spec.dgdRef` names its graph (a graph itself, else its graph label) and, when
/// it carries the component label, that component.
fn adapters_of<K: Resource<DynamicType = ()>>(
    object: &K,
    adapters: &Store<DynamoGraphDeploymentScalingAdapter>,
) -> Vec<kube::runtime::reflector::ObjectRef<DynamoGraphDeploymentScalingAdapter>> {
    let graph = if K::kind(&()) == DynamoGraphDeployment::kind(&()) {
        Some(object.name_any())
    } else {
        object.labels().get(GRAPH_LABEL).cloned()
    };
    let (Some(graph), Some(ns)) = (graph, object.namespace()) else {
        return Vec::new();
    };
    let component = object.labels().get(api::labels::DYNAMO_COMPONENT);
    adapters
        .state()
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(ns.as_str()))
        .filter(|a| a.spec.dgd_ref.name == graph)
        .filter(|a| component.is_none_or(|c| &a.spec.dgd_ref.component_name == c))
        .map(|a| kube::runtime::reflector::ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// A mapper of a [`triggers::Enqueue::ScalingAdapters`] row that counts what it enqueues.
fn adapter_mapper<K: Resource<DynamicType = ()>>(
    adapters: Store<DynamoGraphDeploymentScalingAdapter>,
    metrics: ControllerMetrics,
) -> impl Fn(Arc<K>) -> Vec<kube::runtime::reflector::ObjectRef<DynamoGraphDeploymentScalingAdapter>>
+ Send
+ Sync
+ 'static {
    move |object: Arc<K>| {
        let refs = adapters_of(object.as_ref(), &adapters);
        for r in &refs {
            metrics.enqueued(format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name
            ));
        }
        refs
    }
}

fn dgdsa_controller(w: &Wiring<'_>) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Dgdsa;
    let metrics = w
        .metrics
        .controller(name.as_str(), w.args.dgdsa_concurrency);
    // Every kind is shared with the graph and DCD controllers' watches.
    let store = w.watch::<DynamoGraphDeploymentScalingAdapter>(Scope::All)?;
    w.watch::<DynamoComponentDeployment>(Scope::All)?;
    let graphs = w.watch::<DynamoGraphDeployment>(Scope::Primary)?;
    w.watch_optional::<PodClique>(Scope::Graph)?;
    w.watch_optional::<PodCliqueScalingGroup>(Scope::Graph)?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(DGDSA_MANAGER);
    let reconciler = scaling_controller::ScalingAdapterReconciler::new(reader, writer)
        .with_served(w.served.clone());

    let controller = Controller::for_shared_stream(
        w.trigger::<DynamoGraphDeploymentScalingAdapter>(name, &metrics)?,
        store.clone(),
    )
    .watches_shared_stream(
        w.trigger::<DynamoComponentDeployment>(name, &metrics)?,
        adapter_mapper::<DynamoComponentDeployment>(store.clone(), metrics.clone()),
    )
    .watches_shared_stream(
        w.trigger::<DynamoGraphDeployment>(name, &metrics)?,
        adapter_mapper::<DynamoGraphDeployment>(store.clone(), metrics.clone()),
    )
    .watches_shared_stream(
        w.trigger::<PodClique>(name, &metrics)?,
        adapter_mapper::<PodClique>(store.clone(), metrics.clone()),
    )
    .watches_shared_stream(
        w.trigger::<PodCliqueScalingGroup>(name, &metrics)?,
        adapter_mapper::<PodCliqueScalingGroup>(store.clone(), metrics.clone()),
    )
    .with_config(w.config(w.args.dgdsa_concurrency))
    .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(DgdsaContext {
        reconciler,
        graphs,
        selective: w.args.selector.is_some(),
        metrics,
    });
    Ok(w.runner(controller, status_writer, &ctx.metrics)
        .run(
            |adapter: Arc<DynamoGraphDeploymentScalingAdapter>, ctx: Arc<DgdsaContext>| async move {
                // With `--selector`, adapters of graphs this operator does not select belong to
                // another instance: left as they are.
                let graph = kube::runtime::reflector::ObjectRef::new(&adapter.spec.dgd_ref.name)
                    .within(&adapter.namespace().unwrap_or_default());
                if ctx.selective && ctx.graphs.get(&graph).is_none() {
                    ctx.metrics.dequeued(&kit::object::key_of(adapter.as_ref()));
                    return Ok(kit::Outcome::new(
                        adapter.status.clone().unwrap_or_default(),
                    ));
                }
                measured(
                    &ctx.metrics,
                    adapter.as_ref(),
                    ctx.reconciler.reconcile(adapter.as_ref()),
                )
                .await
            },
            ctx,
        )
        .boxed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn owner(kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "nvidia.com/v1beta1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    /// A shared model Service enqueues every owner of the controller's primary kind, controller
    /// or not; owners of other kinds are another controller's.
    #[test]
    fn owners_of_maps_every_owner_of_the_primary_kind() {
        let service = Service {
            metadata: ObjectMeta {
                name: Some("dynamo-model-fb68f5a6".into()),
                namespace: Some("ns".into()),
                owner_references: Some(vec![
                    owner("DynamoComponentDeployment", "a", false),
                    owner("DynamoGraphDeployment", "g", false),
                    owner("DynamoComponentDeployment", "b", true),
                ]),
                ..Default::default()
            },
            ..Default::default()
        };
        fn names<P: Resource<DynamicType = ()>>(
            refs: Vec<kube::runtime::reflector::ObjectRef<P>>,
        ) -> Vec<String> {
            refs.into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        }
        assert_eq!(
            names(owners_of::<Service, DynamoComponentDeployment>(&service)),
            ["ns/a", "ns/b"]
        );
        assert_eq!(
            names(owners_of::<Service, DynamoGraphDeployment>(&service)),
            ["ns/g"]
        );
    }
}
