//! What every reliability scenario stands on: the control plane with `deploy/` installed, the
//! operator binary as processes running as the `dynamo-system/dynamo-operator` ServiceAccount,
//! the apiserver's audit log with timestamps and credentials, and the inventory that finds
//! lost, duplicated, wrong and orphaned objects.

mod audit;
mod env;
mod fingerprint;
mod graphs;
mod inventory;
mod operator;
mod scan;

use std::time::{Duration, Instant};

use anyhow::bail;

pub use self::audit::*;
pub use self::env::*;
pub use self::fingerprint::*;
pub use self::graphs::*;
pub use self::inventory::*;
pub use self::operator::*;
pub use self::scan::*;

/// Polls `check` every 200 ms until it holds (Ok with the time it took) or `timeout` passes.
pub async fn wait_for<F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
