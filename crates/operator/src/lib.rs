//! The dynamo-operator binary's parts: CLI, watch caches and controller wiring (the event→action
//! map in [`triggers`]), leader election, metrics and health endpoints, graceful shutdown.
//!
//! Life of the process:
//! 1. Serve `/healthz`, `/readyz`, `/metrics` (ready at once while standing by).
//! 2. With leader election on, wait until this replica holds the Lease (a standby keeps waiting;
//!    two replicas never reconcile at once).
//! 3. Ask discovery which optional APIs are served ([`optional_apis`]), register one watch per
//!    kind in a shared [`kit::cache::Cache`] (optional kinds watched while served), build every
//!    controller on it ([`controllers`]) and the follower of the optional APIs' CRDs, start the
//!    watches; ready once every cache of a served kind has synced.
//! 4. Run until SIGTERM/SIGINT (stop taking work, finish in-flight reconciles, release the Lease,
//!    exit 0) or until the Lease is lost (stop at once, exit non-zero so the pod restarts as a
//!    standby).
//!
//! A signal is honoured at every step: each start-up wait (leader election, API discovery) is
//! raced with it; before the caches synced the controllers (held until then, nothing in flight)
//! stop at once; after, in-flight reconciles get `--shutdown-timeout`, then the Lease release
//! and the webhook what is left of it, at least a second; what has not finished is cancelled.
//! A controller that never finishes, for instance while the apiserver does not answer,
//! therefore never keeps a stopping replica alive.

pub mod admin;
pub mod cli;
pub mod config;
pub mod controllers;
pub mod metrics;
pub mod optional_apis;
pub mod render;
pub mod restore_webhook;
pub mod storage_migration;
pub mod telemetry;
pub mod triggers;
pub mod webhook;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::metrics::Metrics;

/// How the operator stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Asked to stop (signal); in-flight work finished and the Lease was released.
    Shutdown,
    /// Leadership was lost; the process must exit and restart as a standby.
    LostLease,
}

/// A kube client from `--kubeconfig`, or the environment (in-cluster or `$KUBECONFIG`).
pub async fn client(args: &RunArgs) -> anyhow::Result<Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// Stops on SIGTERM or SIGINT. The handlers are installed before this returns (call it first,
/// inside the runtime), so a signal that comes during start-up is not lost.
pub fn shutdown_on_signals() -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let trigger = token.clone();
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        trigger.cancel();
    });
    token
}

/// Runs the operator until `shutdown` fires or leadership is lost.
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> anyhow::Result<Exit> {
    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    let health = admin::Health::new(metrics.clone());
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(admin::serve(
        args.metrics_address,
        health.clone(),
        admin_stop.clone(),
    ));

    // The webhooks run on every replica, leader or not.
    let webhook_task = if args.webhook {
        Some(tokio::spawn(start_webhook(
            args.clone(),
            client.clone(),
            admin_stop.clone(),
        )))
    } else {
        None
    };

    let mut tasks = Tasks {
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        lease: None,
        admin_stop,
        admin_task,
        webhook_task,
    };

    // Leadership first: a standby builds nothing.
    if args.leader_elect {
        health.set_ready(true);
        match lead(&args, &client, &shutdown).await? {
            Leadership::Leading(lease) => {
                metrics.set_leader(&args.lease_name, true);
                tasks.lease = Some(lease);
            }
            Leadership::Stopped(lease) => {
                tasks.lease = lease;
                tasks.stop(None).await;
                return Ok(Exit::Shutdown);
            }
        }
    }
    health.set_ready(false);

    let cache = kit::cache::Cache::new(client.clone());
    let stop = CancellationToken::new();
    let Some(served) = until(
        &shutdown,
        optional_apis::discover(&client, &args.api_policy()),
    )
    .await
    else {
        tasks.stop(None).await;
        return Ok(Exit::Shutdown);
    };
    let served = served?;
    let controllers = controllers::build(
        &cache,
        client.clone(),
        &args,
        &metrics,
        stop.clone(),
        served,
    )?;
    let watches = tokio::spawn(cache.run());
    ready_once_synced(&cache, &health);
    let running = tokio::spawn(futures::future::join_all(controllers));

    let exit = wait_for_exit(&mut tasks.lease, &shutdown).await;
    match exit {
        Exit::Shutdown if !cache.unready_kinds().is_empty() => {
            // Before the caches synced no reconcile has started (each controller is held until
            // its store is ready), so there is nothing to finish; waiting for the held
            // controllers would only wait for the sync.
            tracing::info!("caches not synced yet: nothing in flight, stopping at once");
            running.abort();
            tasks.stop(None).await;
        }
        Exit::Shutdown => {
            // Stop taking work; in-flight reconciles finish (graceful shutdown of each
            // controller), then the Lease is released; all within the shutdown timeout.
            stop.cancel();
            tasks.stop(Some(running)).await;
        }
        Exit::LostLease => {
            tracing::error!("lost leadership: stopping at once");
            metrics.set_leader(&args.lease_name, false);
            running.abort();
            tasks.stop(None).await;
        }
    }
    watches.abort();
    Ok(exit)
}

/// Leadership (with leader election on, once the lease manager runs) and the lease manager's
/// task.
type Lease = (
    tokio::sync::watch::Receiver<bool>,
    JoinHandle<LeaseTaskOutput>,
);

/// How waiting for leadership ended.
enum Leadership {
    /// This replica holds the Lease.
    Leading(Lease),
    /// `shutdown` fired first; the lease manager, if it already ran, is handed back so that
    /// stopping releases the Lease.
    Stopped(Option<Lease>),
}

/// Wait until this replica holds the Lease (a standby keeps waiting), or until `shutdown`.
async fn lead(
    args: &RunArgs,
    client: &Client,
    shutdown: &CancellationToken,
) -> anyhow::Result<Leadership> {
    let identity = args.identity();
    let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(args.lease_namespace())
        .with_identity(&identity)
        .with_duration(args.lease_duration)
        .with_grace(args.lease_duration.div_ceil(3).max(1))
        .with_create_mode(LeaseCreateMode::AutoCreate)
        .with_field_manager(lease_field_manager(&identity))
        .build();
    let Some(manager) = until(shutdown, manager).await else {
        return Ok(Leadership::Stopped(None));
    };
    let (mut leader, leader_task) = manager.context("leader election")?.watch().await;
    tracing::info!(%identity, lease = %args.lease_name, "waiting for leadership");
    loop {
        if *leader.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = leader.changed() => { changed.context("leader election stopped")?; }
            _ = shutdown.cancelled() => {
                return Ok(Leadership::Stopped(Some((leader, leader_task))));
            }
        }
    }
    tracing::info!(%identity, "leading");
    Ok(Leadership::Leading((leader, leader_task)))
}

/// The Lease's field manager: one per replica. Taking an unheld Lease is a server-side apply of
/// `holderIdentity` without force, exclusive only between different managers: under one shared
/// name, replicas starting together would both take it and both lead.
fn lease_field_manager(identity: &str) -> String {
    // A field manager is at most 128 characters.
    format!("{}-{identity}", api::labels::OPERATOR_NAME)
        .chars()
        .take(128)
        .collect()
}

/// Report ready once every cache of a served kind has synced (the kinds still unsynced after
/// 10 s are logged).
fn ready_once_synced(cache: &kit::cache::Cache, health: &Arc<admin::Health>) {
    let cache = cache.clone();
    let health = health.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        if tokio::time::timeout(std::time::Duration::from_secs(10), cache.wait_until_ready())
            .await
            .is_err()
        {
            tracing::warn!(kinds = ?cache.unready_kinds(), "caches not synced after 10 s");
            cache.wait_until_ready().await;
        }
        tracing::info!(elapsed = ?started.elapsed(), "caches synced");
        health.set_ready(true);
    });
}

/// Run until `shutdown` fires, or until the Lease (`lease`, with leader election on) is lost.
async fn wait_for_exit(lease: &mut Option<Lease>, shutdown: &CancellationToken) -> Exit {
    match lease {
        Some((leader, _)) => {
            tokio::select! {
                _ = shutdown.cancelled() => Exit::Shutdown,
                _ = async { while leader.changed().await.is_ok() { if !*leader.borrow() { break; } } } => Exit::LostLease,
            }
        }
        None => {
            shutdown.cancelled().await;
            Exit::Shutdown
        }
    }
}

/// What the Lease release, the admin endpoints and the webhook get at least, after the
/// controllers' part of the shutdown timeout.
const RELEASE_GRACE: Duration = Duration::from_secs(1);

/// `future`'s output, or `None` once `shutdown` fires first.
async fn until<T>(shutdown: &CancellationToken, future: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        output = future => Some(output),
        _ = shutdown.cancelled() => None,
    }
}

/// The operator's background tasks besides the controllers, and how long stopping may take.
struct Tasks {
    shutdown_timeout: Duration,
    /// Leadership (with leader election on, once the lease manager runs) and its task.
    lease: Option<Lease>,
    admin_stop: CancellationToken,
    admin_task: JoinHandle<std::io::Result<()>>,
    webhook_task: Option<JoinHandle<()>>,
}

impl Tasks {
    /// The end of the process, bounded by `--shutdown-timeout`: the controllers' graceful
    /// shutdown (if they run), the Lease release, then the admin endpoints and the webhook.
    /// What has not finished by the deadline is cancelled, and said so in the log.
    async fn stop(self, controllers: Option<JoinHandle<Vec<()>>>) {
        let mut deadline = Instant::now() + self.shutdown_timeout;
        if let Some(controllers) = controllers {
            join_by("controllers (in-flight reconciles)", controllers, deadline).await;
        }
        // Releasing the Lease lets a standby take over at once rather than after the lease
        // duration: it gets a moment even when the controllers used up the timeout.
        deadline = deadline.max(Instant::now() + RELEASE_GRACE);
        if let Some((leader, task)) = self.lease {
            // Dropping the receiver asks the lease manager to release the Lease.
            drop(leader);
            join_by("lease release", task, deadline).await;
        }
        self.admin_stop.cancel();
        join_by("admin endpoints", self.admin_task, deadline).await;
        if let Some(webhook) = self.webhook_task {
            join_by("webhooks", webhook, deadline).await;
        }
    }
}

/// What the lease manager's task returns.
type LeaseTaskOutput = kube_lease_manager::Result<kube_lease_manager::LeaseManager>;

/// Waits for `task` until `deadline`, then cancels it.
async fn join_by<T>(what: &str, task: JoinHandle<T>, deadline: Instant) {
    let abort = task.abort_handle();
    if tokio::time::timeout_at(deadline, task).await.is_err() {
        abort.abort();
        tracing::warn!(
            part = what,
            "not finished within the shutdown timeout: cancelled"
        );
    }
}

/// Certificates, CRD conversion config, the checkpoint restore webhook's reads and
/// configuration, then the webhook server until `stop`.
async fn start_webhook(args: RunArgs, client: Client, stop: CancellationToken) {
    let endpoint = match &args.webhook_url {
        Some(url) => webhook::Endpoint::Url(url.clone()),
        None => webhook::Endpoint::Service {
            namespace: args.own_namespace(),
            name: args.webhook_service.clone(),
            port: args.webhook_service_port,
        },
    };
    let result = async {
        let tls = match &args.webhook_cert_dir {
            Some(dir) => webhook::tls_from_dir(dir)?,
            None => {
                webhook::tls_from_secret(
                    client.clone(),
                    &args.own_namespace(),
                    &args.webhook_secret,
                    &endpoint,
                )
                .await?
            }
        };
        // Namespace-restricted: nothing cluster-scoped (the CRDs' conversion, their storage
        // migration and the restore webhook's configuration are the cluster admin's).
        let cluster_wide = args.namespace.is_none();
        if !cluster_wide && (args.manage_crd_conversion || args.checkpoint_restore_webhook) {
            tracing::info!(
                "namespace-restricted: the CRDs' conversion and the checkpoint restore webhook's configuration are left to the install"
            );
        }
        if args.manage_crd_conversion && cluster_wide {
            webhook::ensure_crd_conversion(client.clone(), &endpoint, &tls.ca_bundle).await?;
            // Objects stored as v1alpha1 are read through the webhook served below.
            tokio::spawn(storage_migration::run(client.clone()));
        }
        let restorer = if args.checkpoint_restore_webhook && cluster_wide {
            Some(start_restore_webhook(&args, &client, &endpoint, &tls.ca_bundle, &stop).await?)
        } else {
            None
        };
        webhook::serve(args.webhook_address, &tls, webhook::router(restorer), stop).await
    }
    .await;
    if let Err(error) = result {
        // Without the webhooks only v1alpha1 requests fail (v1beta1 keeps working) and
        // Immediate checkpoint components' pods start cold.
        tracing::error!(
            error = format!("{error:#}"),
            "webhooks unavailable; v1alpha1 DynamoGraphDeployments cannot be served"
        );
    }
}

/// The checkpoint restore webhook's reads, and its configuration pointing at `endpoint` (a
/// failure to apply it is logged: the webhook still answers whoever calls it).
async fn start_restore_webhook(
    args: &RunArgs,
    client: &Client,
    endpoint: &webhook::Endpoint,
    ca_bundle: &str,
    stop: &CancellationToken,
) -> anyhow::Result<Arc<restore_webhook::Restorer>> {
    let namespace = args.namespace.as_deref();
    let reader = restore_webhook::reader(client.clone(), namespace, stop.clone())?;
    let desired = restore_webhook::configuration(
        endpoint,
        ca_bundle,
        namespace,
        args.checkpoint_restore_failure_policy,
    );
    if let Err(error) = restore_webhook::ensure_configuration(client.clone(), &desired).await {
        tracing::error!(
            error = format!("{error:#}"),
            "checkpoint restore webhook not configured; Immediate checkpoint components' pods start cold"
        );
    }
    Ok(Arc::new(restore_webhook::Restorer::new(
        reader,
        args.namespace.clone(),
    )))
}
