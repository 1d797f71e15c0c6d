//! The operator's `/metrics` (controller-runtime names), scraped over plain HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;

/// How long the bench waits for an answer of the operator's HTTP endpoints.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Scrapes the operator's `/metrics`.
#[derive(Clone, Debug)]
pub struct Scraper {
    address: String,
}

impl Scraper {
    /// A scraper of the endpoint at `address` (`host:port`).
    pub fn new(address: &str) -> Self {
        Self {
            address: address.to_string(),
        }
    }

    pub fn scrape(&self) -> anyhow::Result<Metrics> {
        match http_get(&self.address, "/metrics", HTTP_TIMEOUT) {
            Some((200, body)) => Ok(Metrics::parse(&body)),
            Some((code, _)) => bail!("/metrics answered {code}"),
            None => bail!("/metrics at {} did not answer", self.address),
        }
    }
}

/// A plain HTTP/1.0 GET on loopback: status code and body (`None` when nothing answers within
/// `timeout`).
pub fn http_get(address: &str, path: &str, timeout: Duration) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let code = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// One scrape of the operator's metrics (controller-runtime names).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// `name{labels}` → value.
    samples: BTreeMap<String, f64>,
}

/// The controllers, by their metric label.
pub const DGD: &str = "dynamographdeployment";
pub const DCD: &str = "dynamocomponentdeployment";

impl Metrics {
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                Some((key.to_string(), value.parse().ok()?))
            })
            .collect();
        Self { samples }
    }

    /// The sum of every sample of `name` whose labels contain `label`.
    pub fn sum(&self, name: &str, label: &str) -> f64 {
        self.samples
            .iter()
            .filter(|(k, _)| {
                k.split_once('{')
                    .is_some_and(|(n, labels)| n == name && labels.contains(label))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// Reconciles of `controller`, every result.
    pub fn reconciles(&self, controller: &str) -> u64 {
        self.sum(
            "controller_runtime_reconcile_total",
            &format!("controller=\"{controller}\""),
        ) as u64
    }

    /// Reconcile errors of `controller`.
    pub fn errors(&self, controller: &str) -> u64 {
        self.sum(
            "controller_runtime_reconcile_errors_total",
            &format!("controller=\"{controller}\""),
        ) as u64
    }

    /// Trigger passes (queue adds) of `controller`.
    pub fn adds(&self, controller: &str) -> u64 {
        self.sum("workqueue_adds_total", &format!("name=\"{controller}\"")) as u64
    }

    /// Objects waiting in `controller`'s queue.
    pub fn depth(&self, controller: &str) -> u64 {
        self.sum("workqueue_depth", &format!("name=\"{controller}\"")) as u64
    }

    /// Reconciles running now in `controller`.
    pub fn active(&self, controller: &str) -> u64 {
        self.sum(
            "controller_runtime_active_workers",
            &format!("controller=\"{controller}\""),
        ) as u64
    }

    /// Work counters that move whenever anything happens (for quiescence).
    pub fn activity(&self) -> [u64; 4] {
        [
            self.reconciles(DGD),
            self.reconciles(DCD),
            self.adds(DGD),
            self.adds(DCD),
        ]
    }

    /// Nothing queued and nothing running.
    pub fn idle(&self) -> bool {
        self.depth(DGD) + self.depth(DCD) + self.active(DGD) + self.active(DCD) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_controller_runtime_metrics() {
        let m = Metrics::parse(
            "# HELP x\n\
             controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"success\"} 7\n\
             controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"error\"} 2\n\
             controller_runtime_reconcile_total{controller=\"dynamocomponentdeployment\",result=\"success\"} 5\n\
             workqueue_depth{name=\"dynamographdeployment\"} 3\n\
             workqueue_adds_total{name=\"dynamocomponentdeployment\"} 11\n\
             controller_runtime_active_workers{controller=\"dynamocomponentdeployment\"} 0\n",
        );
        assert_eq!(m.reconciles(DGD), 9);
        assert_eq!(m.reconciles(DCD), 5);
        assert_eq!(m.depth(DGD), 3);
        assert_eq!(m.adds(DCD), 11);
        assert!(!m.idle());
    }
}
