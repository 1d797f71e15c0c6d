//! The operator as a separate process, and what `/proc` says about any process (resident
//! memory, CPU time).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::metrics::{HTTP_TIMEOUT, Metrics, Scraper, http_get};

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
        let metrics_address = format!("127.0.0.1:{}", testkit::process::free_port()?);
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
            let ready = http_get(&self.metrics_address, "/readyz", HTTP_TIMEOUT);
            if ready.is_some_and(|(code, _)| code == 200) {
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
        Scraper::new(&self.metrics_address)
    }

    /// SIGTERM, then wait (SIGKILL after 20 s).
    pub fn stop(&mut self) {
        if terminate(&mut self.child, Duration::from_secs(20)).is_none() {
            let _ = self.child.wait();
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM, as the kubelet sends, then wait up to `grace` for the exit: its status, or `None`
/// when the process did not end in time (it is then sent SIGKILL, not waited for).
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => {
                let _ = child.kill();
                return None;
            }
        }
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
    fn reads_own_usage() {
        let u = usage(std::process::id());
        assert!(u.rss_mib > 0.0 && u.peak_rss_mib >= u.rss_mib);
        assert!(u.cpu_seconds >= 0.0);
        assert!(machine_busy_seconds() >= u.cpu_seconds);
    }
}
