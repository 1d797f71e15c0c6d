//! The dynamo-operator binary's parts: CLI, watch caches and controller wiring (the event→action
//! map in [`triggers`]), leader election, metrics and health endpoints, graceful shutdown.
//!
//! Life of the process:
//! 1. Serve `/healthz`, `/readyz`, `/metrics` (ready at once while standing by).
//! 2. With leader election on, wait until this replica holds the Lease (a standby keeps waiting;
//!    two replicas never reconcile at once).
//! 3. Register one watch per kind in a shared [`kit::cache::Cache`], build every controller on
//!    it ([`controllers`]), start the watches; ready once every cache has synced.
//! 4. Run until SIGTERM/SIGINT (stop taking work, finish in-flight reconciles, release the Lease,
//!    exit 0) or until the Lease is lost (stop at once, exit non-zero so the pod restarts as a
//!    standby).

pub mod admin;
pub mod cli;
pub mod controllers;
pub mod metrics;
pub mod telemetry;
pub mod triggers;
pub mod webhook;

use std::sync::Arc;

use anyhow::Context;
use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
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

/// Stops on SIGTERM or SIGINT.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
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

    // The conversion webhook runs on every replica, leader or not.
    let webhook_task = if args.webhook {
        Some(tokio::spawn(start_webhook(
            args.clone(),
            client.clone(),
            admin_stop.clone(),
        )))
    } else {
        None
    };

    // Leadership first: a standby builds nothing.
    let mut lease = None;
    if args.leader_elect {
        health.set_ready(true);
        let identity = args.identity();
        let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
            .with_namespace(args.lease_namespace())
            .with_identity(&identity)
            .with_duration(args.lease_duration)
            .with_grace(args.lease_duration.div_ceil(3).max(1))
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_field_manager("dynamo-operator")
            .build()
            .await
            .context("leader election")?;
        let (mut leader, task) = manager.watch().await;
        tracing::info!(%identity, lease = %args.lease_name, "waiting for leadership");
        loop {
            if *leader.borrow_and_update() {
                break;
            }
            tokio::select! {
                changed = leader.changed() => { changed.context("leader election stopped")?; }
                _ = shutdown.cancelled() => {
                    drop(leader);
                    let _ = task.await;
                    admin_stop.cancel();
                    let _ = admin_task.await;
                    if let Some(webhook) = webhook_task {
                        let _ = webhook.await;
                    }
                    return Ok(Exit::Shutdown);
                }
            }
        }
        tracing::info!(%identity, "leading");
        metrics.set_leader(&args.lease_name, true);
        lease = Some((leader, task));
    }
    health.set_ready(false);

    let cache = kit::cache::Cache::new(client.clone());
    let stop = CancellationToken::new();
    let served = controllers::Served::discover(&client).await?;
    let controllers = controllers::build(
        &cache,
        client.clone(),
        &args,
        &metrics,
        stop.clone(),
        served,
    )?;
    let watches = tokio::spawn(cache.run());
    {
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
    let running = tokio::spawn(futures::future::join_all(controllers));

    let exit = match &mut lease {
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
    };
    match exit {
        Exit::Shutdown => {
            // Stop taking work; in-flight reconciles finish (graceful shutdown of each
            // controller), then the Lease is released.
            stop.cancel();
            let _ = running.await;
        }
        Exit::LostLease => {
            tracing::error!("lost leadership: stopping at once");
            metrics.set_leader(&args.lease_name, false);
            running.abort();
        }
    }
    watches.abort();
    if let Some((leader, task)) = lease {
        drop(leader);
        let _ = task.await;
    }
    admin_stop.cancel();
    let _ = admin_task.await;
    if let Some(webhook) = webhook_task {
        let _ = webhook.await;
    }
    Ok(exit)
}

/// Certificates, CRD conversion config, then the webhook server until `stop`.
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
        if args.manage_crd_conversion {
            webhook::ensure_crd_conversion(client.clone(), &endpoint, &tls.ca_bundle).await?;
        }
        webhook::serve(args.webhook_address, &tls, stop).await
    }
    .await;
    if let Err(error) = result {
        // Without the webhook only v1alpha1 requests fail; v1beta1 keeps working.
        tracing::error!(
            error = format!("{error:#}"),
            "conversion webhook unavailable; v1alpha1 DynamoGraphDeployments cannot be served"
        );
    }
}
