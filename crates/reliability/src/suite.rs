//! The state the scenarios share, and the checks after every scenario.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{self, Env, Fingerprint, Operator, OperatorSpec};
use crate::report::{Report, Totals};

/// The state the scenarios share.
pub struct Suite {
    pub env: Env,
    pub quick: bool,
    /// The operator most scenarios use (one replica, leader election on).
    pub main: Option<Operator>,
    /// The graph templates by name (from `crates/reliability/corpus/graphs`).
    pub templates: BTreeMap<String, Value>,
    /// Each template's subtree as the operator produced it undisturbed (`reference`).
    pub references: BTreeMap<String, Fingerprint>,
    /// Namespaces whose graphs must all be Ready and correct at the end.
    pub namespaces: Vec<String>,
    pub totals: Totals,
    panics_seen: usize,
    log_bytes: u64,
    /// Bytes of Events and statuses scanned for secrets so far.
    pub scanned_bytes: u64,
}

impl Suite {
    /// The suite on `env`, with the graph templates of the corpus under `root`.
    pub fn new(env: Env, quick: bool, root: &Path) -> anyhow::Result<Self> {
        Ok(Suite {
            env,
            quick,
            main: None,
            templates: load_templates(root)?,
            references: BTreeMap::new(),
            namespaces: Vec::new(),
            totals: Totals::default(),
            panics_seen: 0,
            log_bytes: 0,
            scanned_bytes: 0,
        })
    }

    /// The main operator, started if it is not running.
    pub async fn main_operator(&mut self) -> anyhow::Result<&mut Operator> {
        if self.main.is_none() {
            let operator = self
                .env
                .operator(OperatorSpec::new("dynamo-operator-0"))
                .await?;
            self.main = Some(operator);
        }
        Ok(self.main.as_mut().expect("started"))
    }

    /// Waits until the main operator leads (and so reconciles).
    pub async fn main_leading(&mut self) -> anyhow::Result<Duration> {
        let probe = self.main_operator().await?.probe();
        harness::wait_for("the operator to lead", Duration::from_secs(60), || async {
            probe.leading()
        })
        .await
    }

    /// Looks for every Secret value known so far in the Events and statuses of the cluster.
    async fn scan_for_secrets(&mut self, report: &mut Report) -> anyhow::Result<()> {
        self.env.remember_operator_secrets().await?;
        let admin = self.env.admin();
        let text = harness::events_text(&admin).await? + &harness::statuses_text(&admin).await?;
        let (_, found) = harness::scan_text(&text, &self.env.secrets);
        for f in &found {
            report.fail(format!("secret value {f} found in an Event or a status"));
        }
        self.totals.secret_leaks += found.len() as u64;
        self.scanned_bytes += text.len() as u64;
        Ok(())
    }

    pub fn templates(&self) -> Vec<(String, Value)> {
        self.templates
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Checks after every scenario: the main operator did not exit on its own, no log shows a
    /// panic, and no Event or status holds a Secret's value (Events go with their namespace, so
    /// they are looked at before the next scenario).
    pub async fn after(&mut self, report: &mut Report) {
        if let Err(e) = self.scan_for_secrets(report).await {
            report.flag(format!("the secret scan could not run: {e:#}"));
        }
        if let Some(operator) = self.main.as_mut()
            && let Some(status) = operator.unexpected_exit()
        {
            self.totals.unexpected_exits += 1;
            report.fail(format!(
                "the operator exited on its own ({status}); last log lines:\n{}",
                operator.log_tail(30)
            ));
            let _ = operator.restart();
            self.env.track(operator);
        }
        // Graceful shutdown: SIGTERM must end the process (the kubelet kills it after 30 s).
        let hangs = harness::SHUTDOWN_HANG_LOGS
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        for hang in hangs {
            self.totals.shutdown_hangs += 1;
            report.flag(format!(
                "an operator did not exit within 30 s of SIGTERM (killed); its last log lines: {hang}"
            ));
        }
        // Log volume: a flood is a figure worth a flag.
        let bytes: u64 = self
            .env
            .logs
            .iter()
            .filter_map(|l| std::fs::metadata(l).ok())
            .map(|m| m.len())
            .sum();
        let written = bytes.saturating_sub(self.log_bytes);
        self.log_bytes = bytes;
        report.figure(
            "operator log written",
            format!("{:.1} MB", written as f64 / 1e6),
        );
        if written > 20_000_000 {
            report.flag(format!(
                "the operator wrote {:.0} MB of log in this scenario",
                written as f64 / 1e6
            ));
        }
        let mut panics = Vec::new();
        for log in &self.env.logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let (found, _) = harness::scan_text(&text, &Default::default());
            panics.extend(found.into_iter().map(|l| format!("{}: {l}", log.display())));
        }
        if panics.len() > self.panics_seen {
            for p in &panics[self.panics_seen..] {
                report.fail(format!("panic: {p}"));
            }
            self.totals.panics += (panics.len() - self.panics_seen) as u64;
            self.panics_seen = panics.len();
        }
    }
}

fn load_templates(root: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let dir = root.join(crate::CORPUS).join("graphs");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            out.insert(name, harness::yaml_value(&path)?);
        }
    }
    Ok(out)
}
