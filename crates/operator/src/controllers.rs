//! Controller wiring: one queue per controller, all fed by one shared cache (one watch per
//! kind), each watch filtered by its row of [`crate::triggers::TRIGGERS`].
//!
//! | controller | primary | owned kinds that feed it |
//! | --- | --- | --- |
//! | dynamographdeployment | DynamoGraphDeployment (the root) | DynamoComponentDeployment, DynamoGraphDeploymentScalingAdapter |
//! | dynamocomponentdeployment | DynamoComponentDeployment | Deployment, Service |
//!
//! Children the DGD reconcilers read once in a while (RBAC objects, PVCs, ConfigMaps, Secrets,
//! claim templates) are not watched: their reads fall back to live calls, which the cache counts
//! ([`kit::cache::Cache::live_reads`]).

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter};
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::Store;
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::events::Reporter;
use kit::run::Runner;
use kit::{EventSink, Reader, Reconciled, StatusWriter, Writer};

use crate::cli::RunArgs;
use crate::metrics::{ControllerMetrics, Metrics, ReconcileResult};
use crate::triggers::{self, ControllerName};

/// The field manager of the DGD controller (status and children).
pub const DGD_MANAGER: &str = "dynamo-operator/dgd";
/// The field manager of the DCD controller.
pub const DCD_MANAGER: &str = dcd_controller::FIELD_MANAGER;

/// What the controllers share.
struct Wiring<'a> {
    cache: &'a Cache,
    client: Client,
    args: &'a RunArgs,
    metrics: &'a Arc<Metrics>,
    events: Arc<dyn EventSink>,
    stop: CancellationToken,
}

impl Wiring<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.args.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Registers `K` in the cache (primary kinds honour `--selector`).
    fn watch<K>(&self, primary: bool) -> anyhow::Result<Store<K>>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let mut config = watcher::Config::default();
        if primary && let Some(selector) = &self.args.selector {
            config = config.labels(selector);
        }
        Ok(self.cache.watch::<K>(self.api::<K>(), config)?)
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

    fn config(&self, concurrency: u16) -> ControllerConfig {
        ControllerConfig::default()
            .concurrency(concurrency)
            .debounce(Duration::from_millis(100))
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
}

struct DcdContext {
    reconciler: dcd_controller::DcdReconciler,
    metrics: ControllerMetrics,
}

/// Registers the watches of every controller in `cache` and returns the controllers' futures
/// (they run until `stop` fires, then finish in-flight reconciles).
pub fn build(
    cache: &Cache,
    client: Client,
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<Vec<BoxFuture<'static, ()>>> {
    let reporter = Reporter {
        controller: "dynamo-operator".into(),
        instance: Some(args.identity()),
    };
    let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
    let wiring = Wiring {
        cache,
        client,
        args,
        metrics,
        events: Arc::new(recorder),
        stop,
    };
    Ok(vec![dgd_controller(&wiring)?, dcd_controller(&wiring)?])
}

fn dgd_controller(w: &Wiring<'_>) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Dgd;
    let metrics = w.metrics.controller(name.as_str(), w.args.dgd_concurrency);
    let store = w.watch::<DynamoGraphDeployment>(true)?;
    w.watch::<DynamoComponentDeployment>(false)?;
    w.watch::<DynamoGraphDeploymentScalingAdapter>(false)?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(DGD_MANAGER);
    let component = component_program::ComponentProgram::new(
        reader.clone(),
        writer.clone(),
        component_program::ComponentConfig::default(),
    );
    let root = root::Root::new(
        writer,
        Arc::new(component),
        Arc::new(root::GroveNotImplemented),
        root::ServedApis::new(false),
    );

    let controller =
        Controller::for_shared_stream(w.trigger::<DynamoGraphDeployment>(name, &metrics)?, store)
            .owns_shared_stream(w.trigger::<DynamoComponentDeployment>(name, &metrics)?)
            .owns_shared_stream(w.trigger::<DynamoGraphDeploymentScalingAdapter>(name, &metrics)?)
            .with_config(w.config(w.args.dgd_concurrency))
            .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(DgdContext { root, metrics });
    Ok(Runner::new(controller, status_writer, w.events.clone())
        .run(
            |dgd: Arc<DynamoGraphDeployment>, ctx: Arc<DgdContext>| async move {
                measured(&ctx.metrics, dgd.as_ref(), ctx.root.reconcile(dgd.clone())).await
            },
            ctx,
        )
        .boxed())
}

fn dcd_controller(w: &Wiring<'_>) -> anyhow::Result<BoxFuture<'static, ()>> {
    let name = ControllerName::Dcd;
    let metrics = w.metrics.controller(name.as_str(), w.args.dcd_concurrency);
    // The DCD kind is watched once, shared with the DGD controller.
    let store = w.watch::<DynamoComponentDeployment>(false)?;
    w.watch::<Deployment>(false)?;
    w.watch::<Service>(false)?;

    let reader: Arc<dyn Reader> = Arc::new(w.cache.clone());
    let (writer, status_writer) = w.writers(DCD_MANAGER);
    let reconciler = dcd_controller::DcdReconciler::new(reader, writer);

    let controller = Controller::for_shared_stream(
        w.trigger::<DynamoComponentDeployment>(name, &metrics)?,
        store,
    )
    .owns_shared_stream(w.trigger::<Deployment>(name, &metrics)?)
    .owns_shared_stream(w.trigger::<Service>(name, &metrics)?)
    .with_config(w.config(w.args.dcd_concurrency))
    .graceful_shutdown_on(w.stop.clone().cancelled_owned());
    let ctx = Arc::new(DcdContext {
        reconciler,
        metrics,
    });
    Ok(Runner::new(controller, status_writer, w.events.clone())
        .run(
            |dcd: Arc<DynamoComponentDeployment>, ctx: Arc<DcdContext>| async move {
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
