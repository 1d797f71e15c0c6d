//! The operator binary as processes running as the `dynamo-system/dynamo-operator`
//! ServiceAccount: started, killed, restarted and terminated like a pod.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use bench::metrics::{Metrics, http_get};
use testkit::process::free_port;

use super::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE};

/// Operators that did not exit within 30 s of SIGTERM (and were killed).
pub static SHUTDOWN_HANGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The last log lines of each of them.
pub static SHUTDOWN_HANG_LOGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How one operator process runs.
#[derive(Clone, Debug)]
pub struct OperatorSpec {
    /// `--identity` (the Lease holder name; kept across restarts, like a pod name).
    pub identity: String,
    /// The ServiceAccount whose token it uses.
    pub account: String,
    pub lease: String,
    pub lease_duration: u64,
    pub webhook: bool,
    pub extra: Vec<String>,
}

impl OperatorSpec {
    pub fn new(identity: &str) -> Self {
        OperatorSpec {
            identity: identity.into(),
            account: OPERATOR_ACCOUNT.into(),
            lease: "dynamo-operator-leader".into(),
            lease_duration: 8,
            webhook: true,
            extra: Vec::new(),
        }
    }
}

/// An operator process. Its log, metrics endpoint and webhook port stay the same across
/// restarts (a pod restarting in place).
pub struct Operator {
    child: Option<Child>,
    pub spec: OperatorSpec,
    kubeconfig: PathBuf,
    pub log: PathBuf,
    pub metrics: String,
    pub webhook_port: u16,
    binary: PathBuf,
    out: PathBuf,
    /// How many times it was started.
    pub starts: u32,
    expected_exit: bool,
}

impl Operator {
    /// Starts an operator process with `spec` and `kubeconfig`, logging under `out`.
    pub(super) fn start_new(
        spec: OperatorSpec,
        kubeconfig: PathBuf,
        binary: &Path,
        out: &Path,
    ) -> anyhow::Result<Self> {
        let mut operator = Operator {
            child: None,
            spec,
            kubeconfig,
            log: PathBuf::new(),
            metrics: format!("127.0.0.1:{}", free_port()?),
            webhook_port: free_port()?,
            binary: binary.to_path_buf(),
            out: out.to_path_buf(),
            starts: 0,
            expected_exit: true,
        };
        operator.start()?;
        Ok(operator)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        self.log = self.out.join(format!(
            "operator-{}-{}.log",
            self.spec.identity, self.starts
        ));
        let webhook = format!("127.0.0.1:{}", self.webhook_port);
        let child = Command::new(&self.binary)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--metrics-address={}", self.metrics))
            .arg(format!("--webhook={}", self.spec.webhook))
            .arg(format!("--webhook-address={webhook}"))
            .arg(format!("--webhook-url=https://{webhook}"))
            .arg(format!("--identity={}", self.spec.identity))
            .arg(format!("--lease-name={}", self.spec.lease))
            .arg(format!("--lease-namespace={OPERATOR_NAMESPACE}"))
            .arg(format!("--lease-duration={}", self.spec.lease_duration))
            .arg("--log=info")
            // As deploy/operator/deployment.yaml: the base RBAC grants no Secret list/watch.
            .arg("--discover-image-pull-secrets=false")
            .args(&self.spec.extra)
            .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log)?)
            .spawn()
            .context("starting dynamo-operator")?;
        self.child = Some(child);
        self.expected_exit = false;
        Ok(())
    }

    /// SIGKILL (a crash, an OOM kill, a node loss).
    pub fn kill(&mut self) {
        if let Some(child) = &mut self.child {
            self.expected_exit = true;
            let _ = child.kill();
            let _ = child.wait();
        }
        self.child = None;
    }

    /// Starts it again after [`Self::kill`] (or an exit), same identity and ports.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.start()
    }

    /// SIGTERM and wait, as the kubelet does: the exit status, or SIGKILL after 30 s (counted in
    /// [`SHUTDOWN_HANGS`], with the log tail in [`SHUTDOWN_HANG_LOGS`]).
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        self.expected_exit = true;
        let status = match bench::process::terminate(child, Duration::from_secs(30)) {
            Some(status) => Some(status),
            None => {
                SHUTDOWN_HANGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tail = self.log_tail(8);
                if let Ok(mut logs) = SHUTDOWN_HANG_LOGS.lock() {
                    logs.push(format!("{}:\n{tail}", self.log.display()));
                }
                self.child.as_mut().and_then(|c| c.wait().ok())
            }
        };
        self.child = None;
        status
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// An exit nobody asked for (a crash of the operator itself), if it happened.
    pub fn unexpected_exit(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) if !self.expected_exit => Some(status),
            _ => None,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        testkit::process::tail(&self.log, lines)
    }

    /// A handle on its metrics endpoint that borrows nothing.
    pub fn probe(&self) -> Probe {
        Probe {
            metrics: self.metrics.clone(),
        }
    }

    pub fn leading(&self) -> bool {
        self.probe().leading()
    }

    pub fn reconcile_errors(&self) -> f64 {
        self.probe().reconcile_errors()
    }
}

/// An operator's metrics endpoint.
#[derive(Clone, Debug)]
pub struct Probe {
    pub metrics: String,
}

impl Probe {
    /// The current `/metrics`, if the endpoint answers.
    fn scrape(&self) -> Option<Metrics> {
        http_get(&self.metrics, "/metrics", PROBE_TIMEOUT).map(|(_, body)| Metrics::parse(&body))
    }

    /// Whether it holds the Lease (per `leader_election_master_status`).
    pub fn leading(&self) -> bool {
        self.scrape()
            .is_some_and(|m| m.sum("leader_election_master_status", "") > 0.0)
    }

    /// Reconciles so far, all controllers.
    pub fn reconciles(&self) -> f64 {
        self.scrape()
            .map_or(0.0, |m| m.sum("controller_runtime_reconcile_total", ""))
    }

    /// Failed reconciles so far, all controllers.
    pub fn reconcile_errors(&self) -> f64 {
        self.scrape().map_or(0.0, |m| {
            m.sum("controller_runtime_reconcile_total", "result=\"error\"")
        })
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long the suite waits for an answer of an operator's metrics endpoint.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
