//! The operator as a separate process, its `/metrics`, and what `/proc` says about any process
//! (resident memory, CPU time).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The user name of the operator's client certificate: what the audit log attributes to it.
pub const OPERATOR_USER: &str = "dynamo-operator";

/// One `dynamo-operator` process; killed when dropped.
pub struct Operator {
    child: Child,
    metrics_address: String,
    log: PathBuf,
    /// The flags it runs with (for the report).
    pub args: Vec<String>,
}

impl Operator {
    /// Starts `binary` with `kubeconfig`, logging to `log`: no leader election (no Lease
    /// renewals among the counted writes), no conversion webhook (the bench applies v1beta1),
    /// then `extra` flags.
    pub fn spawn(
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let metrics_address = format!("127.0.0.1:{port}");
        let mut args = vec![
            format!("--metrics-address={metrics_address}"),
            "--leader-elect=false".to_string(),
            "--webhook=false".to_string(),
            "--log=info".to_string(),
        ];
        args.extend(extra.iter().cloned());
        let child = Command::new(binary)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            child,
            metrics_address,
            log: log.to_path_buf(),
            args,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200 (caches synced).
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the operator exited ({status}); see {}", self.log.display());
            }
            if http_get(&self.metrics_address, "/readyz").is_some_and(|(code, _)| code == 200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the operator was not ready after {timeout:?}; see {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails when the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the operator exited ({status}); see {}", self.log.display());
        }
        Ok(())
    }

    /// The current `/metrics`.
    pub fn metrics(&self) -> anyhow::Result<Metrics> {
        self.scraper().scrape()
    }

    /// A handle that scrapes `/metrics` from another task.
    pub fn scraper(&self) -> Scraper {
        Scraper {
            address: self.metrics_address.clone(),
        }
    }

    /// SIGTERM, then wait (SIGKILL after 20 s).
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Scrapes the operator's `/metrics`.
#[derive(Clone, Debug)]
pub struct Scraper {
    address: String,
}

impl Scraper {
    pub fn scrape(&self) -> anyhow::Result<Metrics> {
        match http_get(&self.address, "/metrics") {
            Some((200, body)) => Ok(Metrics::parse(&body)),
            Some((code, _)) => bail!("/metrics answered {code}"),
            None => bail!("/metrics at {} did not answer", self.address),
        }
    }
}

/// A plain HTTP/1.0 GET on loopback: status code and body.
fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
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
    fn sum(&self, name: &str, label: &str) -> f64 {
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

/// Memory and CPU of one process, from `/proc`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    /// Resident set size now (MiB).
    pub rss_mib: f64,
    /// Peak resident set size so far (MiB).
    pub peak_rss_mib: f64,
    /// User + system CPU time so far (seconds).
    pub cpu_seconds: f64,
}

/// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`; zeros when the process is gone.
pub fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Usage {
        rss_mib: kib("VmRSS:") / 1024.0,
        peak_rss_mib: kib("VmHWM:") / 1024.0,
        cpu_seconds: cpu_seconds(pid),
    }
}

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name (field 2) may contain spaces; fields after it are plain.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(14) + ticks(15)) / clock_ticks()
}

/// CPU seconds the whole machine spent busy (every CPU, since boot), from `/proc/stat`.
pub fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...; busy is everything but idle and iowait.
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    (total - idle) / clock_ticks()
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux in practice).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
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

    #[test]
    fn reads_own_usage() {
        let u = usage(std::process::id());
        assert!(u.rss_mib > 0.0 && u.peak_rss_mib >= u.rss_mib);
        assert!(u.cpu_seconds >= 0.0);
        assert!(machine_busy_seconds() >= u.cpu_seconds);
    }
}
