//! What every reliability scenario stands on: the control plane with `deploy/` installed, the
//! operator binary as processes running as the `dynamo-system/dynamo-operator` ServiceAccount,
//! the apiserver's audit log with timestamps and credentials, and the inventory that finds
//! lost, duplicated, wrong and orphaned objects.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bench::metrics::{Metrics, http_get};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testkit::ControlPlane;
use testkit::audit::unix_micros;
use testkit::process::free_port;

pub use bench::cluster::{server_side_apply, yaml_documents};

/// The ServiceAccount the operator runs as (deploy/operator/serviceaccount.yaml).
pub const OPERATOR_NAMESPACE: &str = "dynamo-system";
pub const OPERATOR_ACCOUNT: &str = "dynamo-operator";
/// Its user name in the audit log.
pub fn account_user(account: &str) -> String {
    format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{account}")
}
/// Label on every namespace the suite creates.
pub const SUITE_LABEL: &str = "reliability.dynamo/suite";
/// Label on every graph the suite applies: which template it was made from.
pub const TEMPLATE_LABEL: &str = "reliability.dynamo/template";
/// The Secret every graph references (`envFrom`), with a value that must never be logged.
pub const TOKEN_SECRET: &str = "hf-token-secret";

/// The files of `deploy/` an administrator installs before the operator.
pub const DEPLOY_FILES: &[&str] = &[
    "operator/namespace.yaml",
    "operator/serviceaccount.yaml",
    "rbac/clusterrole.yaml",
    "rbac/clusterrolebinding.yaml",
    "rbac/planner-epp-clusterroles.yaml",
];

/// A small deterministic generator (xorshift64*): every random choice of a run follows from
/// the seed printed at its start.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `lo..hi` (`lo` when empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }
}

/// Optional APIs and features present in this run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// The operator runs a DynamoCheckpoint controller (its event→action map lists one).
    pub checkpoints: bool,
    /// Grove's CRDs are installed (from the test data).
    pub grove: bool,
}

/// The run: control plane, binary, repository paths, random source, secrets to look for.
pub struct Env {
    pub cp: ControlPlane,
    pub binary: PathBuf,
    pub root: PathBuf,
    pub out: PathBuf,
    pub rng: Rng,
    pub features: Features,
    /// Values that must never appear in logs or events (plain and base64).
    pub secrets: BTreeSet<String>,
    /// Every operator log of the run (scanned after each scenario).
    pub logs: Vec<PathBuf>,
    slot: u32,
}

impl Env {
    pub fn new(cp: ControlPlane, binary: PathBuf, root: PathBuf, out: PathBuf, seed: u64) -> Self {
        Env {
            cp,
            binary,
            root,
            out,
            rng: Rng::new(seed),
            features: Features::default(),
            secrets: BTreeSet::new(),
            logs: Vec::new(),
            slot: 0,
        }
    }

    pub fn admin(&self) -> Client {
        self.cp.client()
    }

    /// Installs the CRDs, `deploy/`'s namespace, ServiceAccount and RBAC, and the cluster
    /// fixtures graphs may refer to (GPU DeviceClass, InferencePool CRD, Grove's CRDs from the
    /// test data).
    pub async fn install(&mut self) -> anyhow::Result<()> {
        self.cp.install_crds(&api::crds()).await?;
        let admin = self.admin();
        let mut objects = Vec::new();
        for file in DEPLOY_FILES {
            objects.extend(yaml_documents(&self.root.join("deploy").join(file))?);
        }
        server_side_apply(&admin, &objects).await?;
        let fixtures = vec![
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                   "metadata": {"name": "gpu.nvidia.com"}, "spec": {}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "inferencepools.inference.networking.k8s.io",
                             "annotations": {"api-approved.kubernetes.io": "unapproved, test fixture"}},
                "spec": {"group": "inference.networking.k8s.io", "scope": "Namespaced",
                    "names": {"plural": "inferencepools", "singular": "inferencepool",
                              "kind": "InferencePool", "listKind": "InferencePoolList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        ];
        let fixtures: Vec<DynamicObject> = fixtures
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()?;
        server_side_apply(&admin, &fixtures).await?;
        let grove = testkit::testdata::yaml_files("grove-crds");
        if !grove.is_empty() {
            self.cp.install_crd_files(&grove).await?;
            self.features.grove = true;
        }
        let triggers = Command::new(&self.binary).arg("triggers").output()?;
        self.features.checkpoints = String::from_utf8_lossy(&triggers.stdout)
            .lines()
            .any(|l| l.starts_with("| dynamocheckpoint |"));
        Ok(())
    }

    /// A fresh namespace with the token Secret graphs reference (its value is remembered as a
    /// secret to look for).
    pub async fn namespace(&mut self, prefix: &str) -> anyhow::Result<String> {
        let name = format!("{prefix}-{:06x}", self.rng.next() & 0xff_ffff);
        let admin = self.admin();
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {SUITE_LABEL: "true"}}
        }))?;
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        let token = format!("hf_reliability_{:016x}", self.rng.next());
        self.remember_secret(&token);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": TOKEN_SECRET},
            "stringData": {"HF_TOKEN": token},
        }))?;
        Api::<Secret>::namespaced(admin.clone(), &name)
            .create(&PostParams::default(), &secret)
            .await?;
        let sas = Api::<ServiceAccount>::namespaced(admin, &name);
        wait_for(
            "default ServiceAccount",
            Duration::from_secs(30),
            || async { sas.get_opt("default").await.ok().flatten().is_some() },
        )
        .await?;
        Ok(name)
    }

    pub fn remember_secret(&mut self, value: &str) {
        use base64::Engine;
        self.secrets.insert(value.to_string());
        self.secrets
            .insert(base64::engine::general_purpose::STANDARD.encode(value));
    }

    /// Remembers the data of the Secrets the operator created (webhook CA, SSH keys): a
    /// distinctive middle part of every value.
    pub async fn remember_operator_secrets(&mut self) -> anyhow::Result<()> {
        let secrets = Api::<Secret>::all(self.admin())
            .list(&ListParams::default())
            .await?;
        for secret in secrets {
            let ours = secret.managed_fields().iter().any(|m| {
                m.manager
                    .as_deref()
                    .is_some_and(|m| m.starts_with("dynamo-operator"))
            }) || secret.metadata.name.as_deref() == Some("dynamo-operator-webhook-ca");
            if !ours {
                continue;
            }
            for value in secret.data.unwrap_or_default().values() {
                let text = String::from_utf8_lossy(&value.0).to_string();
                // PEM bodies and keys: a run of 40 characters from the middle, which no log
                // line can contain by chance.
                let body: String = text
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<Vec<_>>()
                    .join("");
                if body.len() >= 80 {
                    let mid = body.len() / 2;
                    self.secrets.insert(body[mid - 20..mid + 20].to_string());
                }
            }
        }
        Ok(())
    }

    /// A token of a ServiceAccount in the operator's namespace, as a kubeconfig file.
    pub async fn account_kubeconfig(&self, account: &str, file: &str) -> anyhow::Result<PathBuf> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin(), OPERATOR_NAMESPACE);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(4 * 3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .context("TokenRequest without a token")?;
        let path = self.out.join(file);
        std::fs::write(&path, self.cp.token_kubeconfig(account, &token))?;
        Ok(path)
    }

    /// Starts an operator process (see [`OperatorSpec`]).
    pub async fn operator(&mut self, spec: OperatorSpec) -> anyhow::Result<Operator> {
        self.slot += 1;
        let kubeconfig = self
            .account_kubeconfig(
                &spec.account,
                &format!("{}-{}.kubeconfig", spec.identity, self.slot),
            )
            .await?;
        let operator = Operator {
            child: None,
            spec,
            kubeconfig,
            log: PathBuf::new(),
            metrics: format!("127.0.0.1:{}", free_port()?),
            webhook_port: free_port()?,
            binary: self.binary.clone(),
            out: self.out.clone(),
            starts: 0,
            expected_exit: true,
        };
        let mut operator = operator;
        operator.start()?;
        self.adopt(&operator);
        self.logs.push(operator.log.clone());
        Ok(operator)
    }

    /// Hands the operator's process to the control plane's reaper: it ends with the run, even
    /// when this process is killed.
    fn adopt(&self, operator: &Operator) {
        if let Some(pid) = operator.child.as_ref().map(Child::id) {
            self.cp.adopt(pid);
        }
    }

    /// Registers a restarted operator: its new log, its new process.
    pub fn track(&mut self, operator: &Operator) {
        self.adopt(operator);
        if !self.logs.contains(&operator.log) {
            self.logs.push(operator.log.clone());
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Manifests

pub fn yaml_value(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    Ok(serde_yaml::from_str(&text)?)
}

pub use bench::cluster::{dgd_resource, dgds};

/// A graph from a template: name, namespace and the template label set.
pub fn graph(template_name: &str, template: &Value, ns: &str, name: &str) -> Value {
    let mut g = template.clone();
    g["metadata"] = json!({
        "name": name,
        "namespace": ns,
        "labels": {TEMPLATE_LABEL: template_name},
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        g["metadata"]["annotations"] = annotations.clone();
    }
    g
}

/// Server-side applies a graph (or any namespaced object of the Dynamo group) as `kubectl`. A
/// graph that does not choose its pathway (no `nvidia.com/enable-grove`, no recorded provider, no
/// provider override) is pinned to the component pathway: the suite installs Grove's CRDs for the
/// inputs that ask for Grove, where the operator would otherwise select Grove for every graph,
/// and nothing here plays Grove's controller.
pub async fn apply(client: &Client, object: &Value) -> Result<DynamicObject, kube::Error> {
    let object = &pinned(object.clone());
    let version = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split('/').nth(1))
        .unwrap_or("v1beta1");
    let kind = object["kind"].as_str().unwrap_or("DynamoGraphDeployment");
    let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(api::GROUP, version, kind));
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.patch(
        name,
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(object),
    )
    .await
}

/// `object`, pinned to the component pathway when it is a graph that does not choose its
/// pathway (see [`apply`]).
pub fn pinned(mut object: Value) -> Value {
    if chooses_no_pathway(&object) {
        object["metadata"]["annotations"][api::labels::ENABLE_GROVE] = json!("false");
    }
    object
}

/// Whether `object` is a graph that leaves its pathway to the operator's default.
fn chooses_no_pathway(object: &Value) -> bool {
    let annotations = &object["metadata"]["annotations"];
    object["kind"] == "DynamoGraphDeployment"
        && annotations.get(api::labels::ENABLE_GROVE).is_none()
        && annotations.get(api::labels::WORKLOAD_PROVIDER).is_none()
        && object["spec"].get("providerOverride").is_none()
}

/// The Ready condition of a graph as (status, reason, message), if it reports one for its
/// current generation.
pub fn ready_condition(dgd: &DynamicObject) -> Option<(String, String, String)> {
    let generation = dgd.metadata.generation.unwrap_or(0);
    let status = dgd.data.get("status")?;
    let observed = status.get("observedGeneration").and_then(Value::as_i64);
    let condition = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let condition_generation = condition
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .or(observed)?;
    if condition_generation < generation {
        return None;
    }
    let s = |k: &str| condition[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

pub fn is_ready(dgd: &DynamicObject) -> bool {
    ready_condition(dgd).is_some_and(|(s, _, _)| s == "True")
}

/// Every graph of `ns` (v1beta1).
pub async fn graphs(client: &Client, ns: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let api = dgds(client, ns);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Waits until every graph of `namespaces` is Ready; the ones that are not on timeout.
pub async fn wait_all_ready(
    client: &Client,
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<(Duration, Vec<String>)> {
    let started = Instant::now();
    loop {
        let mut unready = Vec::new();
        for ns in namespaces {
            match graphs(client, ns).await {
                Ok(list) => unready.extend(
                    list.iter()
                        .filter(|d| d.metadata.deletion_timestamp.is_none() && !is_ready(d))
                        .map(|d| {
                            let why = ready_condition(d)
                                .map(|(s, r, m)| format!("Ready={s} {r}: {m}"))
                                .unwrap_or_else(|| "no Ready condition yet".into());
                            format!("{ns}/{} ({why})", d.name_any())
                        }),
                ),
                Err(e) => unready.push(format!("{ns}: {e}")),
            }
        }
        if unready.is_empty() || started.elapsed() > timeout {
            return Ok((started.elapsed(), unready));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn delete_graph(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let api = dgds(client, ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Audit log (parsed here with timestamps and credentials; testkit's reader guarantees
// completeness up to the call)

/// One audited request.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Microseconds since the Unix epoch (stage timestamp: when the response completed).
    pub at: i64,
    /// When the request was received.
    pub received: i64,
    pub verb: String,
    pub user: String,
    /// The credential's id (a ServiceAccount token's JTI): tells two replicas with the same
    /// account apart.
    pub credential: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
    pub message: String,
}

impl Entry {
    pub fn is_write(&self) -> bool {
        testkit::audit::is_write(&self.verb)
    }
    /// A write that created the object (plain create, or server-side apply creating it).
    pub fn created(&self) -> bool {
        testkit::audit::created(&self.verb, self.code)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

pub fn audit_mark(cp: &ControlPlane) -> Mark {
    Mark(
        std::fs::metadata(cp.audit().path())
            .map(|m| m.len())
            .unwrap_or(0),
    )
}

/// Every request since `mark`, up to now.
pub async fn audit_since(cp: &ControlPlane, mark: Mark) -> Vec<Entry> {
    let audit = cp.audit();
    // The sentinel wait: whatever completed before this call is in the log afterwards.
    let _ = audit.since(&testkit_mark(&audit)).await;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(audit.path()) {
        use std::io::{Read, Seek, SeekFrom};
        let _ = f.seek(SeekFrom::Start(mark.0));
        let _ = f.read_to_string(&mut text);
    }
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete.lines().filter_map(parse_entry).collect()
}

fn testkit_mark(audit: &testkit::Audit) -> testkit::AuditMark {
    audit.mark()
}

fn parse_entry(line: &str) -> Option<Entry> {
    let v: Value = serde_json::from_str(line).ok()?;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let r = &v["objectRef"];
    let credential = v["user"]["extra"]["authentication.kubernetes.io/credential-id"]
        .get(0)
        .map(s)
        .unwrap_or_default();
    Some(Entry {
        at: unix_micros(v["stageTimestamp"].as_str()?)?,
        received: unix_micros(v["requestReceivedTimestamp"].as_str().unwrap_or_default())
            .unwrap_or(0),
        verb: s(&v["verb"]),
        user: s(&v["user"]["username"]),
        credential,
        group: s(&r["apiGroup"]),
        resource: s(&r["resource"]),
        subresource: s(&r["subresource"]),
        namespace: s(&r["namespace"]),
        name: s(&r["name"]),
        code: v["responseStatus"]["code"].as_i64().unwrap_or(0) as i32,
        message: s(&v["responseStatus"]["message"]),
    })
}

pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Writes of `user` to objects in `namespaces` (not Leases, not Events).
pub fn writes_in<'a>(
    entries: &'a [Entry],
    user: &'a str,
    namespaces: &'a [String],
) -> impl Iterator<Item = &'a Entry> + 'a {
    entries.iter().filter(move |e| {
        e.user == user
            && e.is_write()
            && namespaces.contains(&e.namespace)
            && e.resource != "events"
            && e.resource != "leases"
    })
}

// ---------------------------------------------------------------------------------------------
// Inventory: what the operator owns, and what is wrong with it

/// A kind the inventory lists.
#[derive(Clone)]
pub struct Kind {
    pub kind: &'static str,
    pub ar: ApiResource,
}

/// The kinds graphs and checkpoints produce (and the graphs themselves).
pub fn inventory_kinds(features: Features) -> Vec<Kind> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    let mut kinds = vec![
        Kind {
            kind: "DynamoGraphDeployment",
            ar: dgd_resource("v1beta1"),
        },
        Kind {
            kind: "DynamoComponentDeployment",
            ar: ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        },
        Kind {
            kind: "DynamoGraphDeploymentScalingAdapter",
            ar: ApiResource::erase::<api::DynamoGraphDeploymentScalingAdapter>(&()),
        },
        Kind {
            kind: "DynamoCheckpoint",
            ar: ApiResource::erase::<api::DynamoCheckpoint>(&()),
        },
        Kind {
            kind: "Deployment",
            ar: ApiResource::erase::<Deployment>(&()),
        },
        Kind {
            kind: "Service",
            ar: ApiResource::erase::<Service>(&()),
        },
        Kind {
            kind: "ServiceAccount",
            ar: ApiResource::erase::<ServiceAccount>(&()),
        },
        Kind {
            kind: "Role",
            ar: ApiResource::erase::<Role>(&()),
        },
        Kind {
            kind: "RoleBinding",
            ar: ApiResource::erase::<RoleBinding>(&()),
        },
        Kind {
            kind: "ConfigMap",
            ar: ApiResource::erase::<ConfigMap>(&()),
        },
        Kind {
            kind: "PersistentVolumeClaim",
            ar: ApiResource::erase::<PersistentVolumeClaim>(&()),
        },
        Kind {
            kind: "Secret",
            ar: ApiResource::erase::<Secret>(&()),
        },
        Kind {
            kind: "Job",
            ar: ApiResource::erase::<Job>(&()),
        },
        Kind {
            kind: "ResourceClaimTemplate",
            ar: ApiResource::erase::<ResourceClaimTemplate>(&()),
        },
        Kind {
            kind: "InferencePool",
            ar: reconcilers::epp::inference_pool_resource(),
        },
    ];
    if features.grove {
        kinds.push(Kind {
            kind: "PodCliqueSet",
            ar: ApiResource::erase::<api::grove::PodCliqueSet>(&()),
        });
    }
    kinds
}

/// One listed object.
#[derive(Clone, Debug)]
pub struct Obj {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The controller owner reference: (kind, name, uid).
    pub owner: Option<(String, String, String)>,
    pub labels: BTreeMap<String, String>,
    pub managers: Vec<String>,
    pub deleting: bool,
    /// The object, without Secret data.
    pub value: Value,
}

/// Every object of the inventory kinds in some namespaces, at one moment.
pub struct Snapshot {
    pub objects: Vec<Obj>,
}

impl Snapshot {
    pub async fn take(
        client: &Client,
        kinds: &[Kind],
        namespaces: &[String],
    ) -> anyhow::Result<Snapshot> {
        let mut objects = Vec::new();
        for ns in namespaces {
            for kind in kinds {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.ar);
                let list = if kind.kind == "Secret" {
                    api.list_metadata(&ListParams::default()).await.map(|l| {
                        l.items
                            .into_iter()
                            .map(|m| DynamicObject {
                                types: None,
                                metadata: m.metadata,
                                data: Value::Null,
                            })
                            .collect::<Vec<_>>()
                    })
                } else {
                    api.list(&ListParams::default()).await.map(|l| l.items)
                };
                let items = match list {
                    Ok(items) => items,
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(e.into()),
                };
                for item in items {
                    let owner = item
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .find(|o| o.controller == Some(true))
                        .map(|o| (o.kind.clone(), o.name.clone(), o.uid.clone()));
                    let managers = item
                        .metadata
                        .managed_fields
                        .iter()
                        .flatten()
                        .filter_map(|m| m.manager.clone())
                        .collect();
                    objects.push(Obj {
                        kind: kind.kind,
                        namespace: ns.clone(),
                        name: item.name_any(),
                        uid: item.metadata.uid.clone().unwrap_or_default(),
                        owner,
                        labels: item.metadata.labels.clone().unwrap_or_default(),
                        managers,
                        deleting: item.metadata.deletion_timestamp.is_some(),
                        value: serde_json::to_value(&item)?,
                    });
                }
            }
        }
        Ok(Snapshot { objects })
    }

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Obj> + 'a {
        self.objects.iter().filter(move |o| o.kind == kind)
    }

    /// The controller owners of `uid`, nearest first.
    pub fn ancestors(&self, uid: &str) -> Vec<String> {
        let by_uid: HashMap<&str, &Obj> =
            self.objects.iter().map(|o| (o.uid.as_str(), o)).collect();
        let mut out = Vec::new();
        let mut at = by_uid.get(uid).copied();
        while let Some(o) = at {
            let Some((_, _, owner)) = &o.owner else { break };
            if out.contains(owner) {
                break;
            }
            out.push(owner.clone());
            at = by_uid.get(owner.as_str()).copied();
        }
        out
    }

    /// Objects whose controller-owner chain leads to `uid` (children, grandchildren, ...).
    pub fn descendants(&self, uid: &str) -> Vec<&Obj> {
        let mut by_owner: HashMap<&str, Vec<&Obj>> = HashMap::new();
        for o in &self.objects {
            if let Some((_, _, owner)) = &o.owner {
                by_owner.entry(owner.as_str()).or_default().push(o);
            }
        }
        let mut out = Vec::new();
        let mut todo = vec![uid];
        while let Some(u) = todo.pop() {
            for child in by_owner.get(u).into_iter().flatten() {
                out.push(*child);
                todo.push(child.uid.as_str());
            }
        }
        out
    }

    /// Objects whose controller owner is one of our kinds but no longer exists, and objects
    /// written by the operator that no graph, component or checkpoint owns although their kind
    /// is always owned.
    pub fn orphans(&self) -> Vec<String> {
        let live: BTreeSet<&str> = self.objects.iter().map(|o| o.uid.as_str()).collect();
        let ours = [
            "DynamoGraphDeployment",
            "DynamoComponentDeployment",
            "DynamoCheckpoint",
            "DynamoGraphDeploymentScalingAdapter",
        ];
        self.objects
            .iter()
            .filter(|o| !o.deleting)
            .filter_map(|o| match &o.owner {
                Some((kind, name, uid))
                    if ours.contains(&kind.as_str()) && !live.contains(uid.as_str()) =>
                {
                    Some(format!(
                        "{} {}/{} (owner {kind} {name} {uid} is gone)",
                        o.kind, o.namespace, o.name
                    ))
                }
                None if ALWAYS_OWNED.contains(&o.kind)
                    && o.managers.iter().any(|m| m.starts_with("dynamo-operator")) =>
                {
                    Some(format!(
                        "{} {}/{} (written by the operator, owned by nothing)",
                        o.kind, o.namespace, o.name
                    ))
                }
                _ => None,
            })
            .collect()
    }
}

/// Kinds the operator only ever creates with a controller owner.
const ALWAYS_OWNED: &[&str] = &[
    "DynamoComponentDeployment",
    "DynamoGraphDeploymentScalingAdapter",
    "Deployment",
    "Service",
    "Job",
    "ResourceClaimTemplate",
    "InferencePool",
    "PodCliqueSet",
];

/// What a graph's subtree must look like: per child key (`Kind/name` with the graph's name
/// replaced by `<dgd>`), the canonical object.
pub type Fingerprint = BTreeMap<String, Vec<String>>;

/// The fingerprint of the graph `dgd` in `snapshot`.
pub fn fingerprint(snapshot: &Snapshot, dgd: &Obj) -> Fingerprint {
    let mut out: Fingerprint = BTreeMap::new();
    for o in snapshot.descendants(&dgd.uid) {
        if o.deleting {
            continue;
        }
        let key = format!("{}/{}", o.kind, o.name.replace(&dgd.name, "<dgd>"));
        out.entry(key)
            .or_default()
            .push(canonical(&o.value, &dgd.name, &dgd.namespace));
    }
    for bodies in out.values_mut() {
        bodies.sort();
    }
    out
}

/// The object as its producer determines it: no server-assigned fields (uid, resourceVersion,
/// timestamps, managedFields, status, cluster IPs), no values the controller-manager sets
/// (revision), the graph's name and namespace replaced by placeholders.
pub fn canonical(value: &Value, dgd: &str, ns: &str) -> String {
    let mut v = value.clone();
    drop_foreign(&mut v);
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "namespace",
        ] {
            m.remove(k);
        }
        if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
            for r in refs {
                if let Some(r) = r.as_object_mut() {
                    r.remove("uid");
                }
            }
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.retain(|k, _| !NOT_COMPARED_ANNOTATIONS.contains(&k.as_str()));
        }
        for field in ["annotations", "labels"] {
            if m.get(field)
                .and_then(Value::as_object)
                .is_some_and(|a| a.is_empty())
            {
                m.remove(field);
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        for k in ["clusterIP", "clusterIPs"] {
            spec.remove(k);
        }
        // Ports the apiserver allocates.
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                if let Some(p) = p.as_object_mut() {
                    p.remove("nodePort");
                }
            }
        }
    }
    serde_json::to_string(&v)
        .unwrap_or_default()
        .replace(ns, "<ns>")
        .replace(dgd, "<dgd>")
}

/// Removes every key a second writer added (wherever the operator copied it to, e.g. a
/// component's labels into its pod template).
fn drop_foreign(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with(FOREIGN_PREFIX));
            for value in map.values_mut() {
                drop_foreign(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_foreign),
        _ => {}
    }
}

/// Prefix of the labels and annotations a second writer adds (fields the operator does not own,
/// which it must keep); not part of what the operator produced.
pub const FOREIGN_PREFIX: &str = "foreign.example.com/";

/// Annotations whose values legitimately differ between two identical graphs.
const NOT_COMPARED_ANNOTATIONS: &[&str] = &[
    // Set by the Deployment controller: counts rollouts, not content.
    "deployment.kubernetes.io/revision",
    // A hash of the whole rendered object, names included: differs with the graph's name. The
    // object it summarizes is compared itself.
    "nvidia.com/last-applied-hash",
];

/// How a graph's subtree differs from its template's reference subtree.
#[derive(Default, Debug)]
pub struct Differences {
    pub lost: Vec<String>,
    pub duplicated: Vec<String>,
    pub wrong: Vec<String>,
}

pub fn compare(reference: &Fingerprint, actual: &Fingerprint, graph: &str) -> Differences {
    let mut d = Differences::default();
    for (key, bodies) in reference {
        match actual.get(key) {
            None => d.lost.push(format!("{graph}: {key}")),
            Some(found) if found.len() > bodies.len() => d
                .duplicated
                .push(format!("{graph}: {key} ×{}", found.len())),
            Some(found) if found.len() < bodies.len() => d.lost.push(format!(
                "{graph}: {key} ({} of {})",
                found.len(),
                bodies.len()
            )),
            Some(found) if found != bodies => d.wrong.push(format!(
                "{graph}: {key}: {}",
                first_difference(&bodies[0], &found[0])
            )),
            _ => {}
        }
    }
    for (key, found) in actual {
        if !reference.contains_key(key) {
            d.duplicated.push(format!(
                "{graph}: {key} ×{} (not in the reference)",
                found.len()
            ));
        }
    }
    d
}

/// Where two JSON texts start to differ, with some context.
pub fn first_difference(a: &str, b: &str) -> String {
    let at = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i)
        .unwrap_or(a.len().min(b.len()));
    let from = a[..at].char_indices().rev().nth(80).map_or(0, |(i, _)| i);
    let cut = |s: &str| {
        s.chars()
            .skip(a[..from].chars().count())
            .take(200)
            .collect::<String>()
    };
    format!("expected …{}… found …{}…", cut(a), cut(b))
}

/// Polls until the snapshot of `namespaces` has no orphans (garbage collection is
/// asynchronous), returning the last orphans found on timeout and the last snapshot.
pub async fn settle_orphans(
    client: &Client,
    kinds: &[Kind],
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<(Snapshot, Vec<String>)> {
    let started = Instant::now();
    loop {
        let snapshot = Snapshot::take(client, kinds, namespaces).await?;
        let orphans = snapshot.orphans();
        if orphans.is_empty() || started.elapsed() > timeout {
            return Ok((snapshot, orphans));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Checks every live graph of `snapshot` against the reference fingerprint of its template.
pub fn check_graphs(
    snapshot: &Snapshot,
    references: &BTreeMap<String, Fingerprint>,
) -> (usize, Differences) {
    let mut all = Differences::default();
    let mut checked = 0;
    for dgd in snapshot
        .of_kind("DynamoGraphDeployment")
        .filter(|d| !d.deleting)
    {
        let Some(template) = dgd.labels.get(TEMPLATE_LABEL) else {
            continue;
        };
        let Some(reference) = references.get(template) else {
            continue;
        };
        let actual = fingerprint(snapshot, dgd);
        checked += 1 + actual.values().map(Vec::len).sum::<usize>();
        let d = compare(
            reference,
            &actual,
            &format!("{}/{}", dgd.namespace, dgd.name),
        );
        all.lost.extend(d.lost);
        all.duplicated.extend(d.duplicated);
        all.wrong.extend(d.wrong);
    }
    (checked, all)
}

/// Deletes the namespaces the suite created (best effort, not waited for).
pub async fn delete_namespace(client: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
}

/// Log lines that show a panic, and every secret value found in `text`.
pub fn scan_text(text: &str, secrets: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let panics = text
        .lines()
        .filter(|l| l.contains("panicked at") || l.contains("stack backtrace"))
        .map(|l| l.chars().take(300).collect())
        .collect();
    let leaks = secrets
        .iter()
        .filter(|s| text.contains(s.as_str()))
        .map(|s| format!("{}…", &s[..s.len().min(8)]))
        .collect();
    (panics, leaks)
}

/// Every Event in the cluster (both APIs) as text, for the secret scan.
pub async fn events_text(client: &Client) -> anyhow::Result<String> {
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let new: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let mut text = serde_json::to_string(&core.list(&ListParams::default()).await?.items)?;
    text.push_str(&serde_json::to_string(
        &new.list(&ListParams::default()).await?.items,
    )?);
    Ok(text)
}

/// Status of every object the operator writes status to (graphs, components, checkpoints), as
/// text: a secret in a condition message would be a leak too.
pub async fn statuses_text(client: &Client) -> anyhow::Result<String> {
    let mut text = String::new();
    for ar in [
        dgd_resource("v1beta1"),
        ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        ApiResource::erase::<api::DynamoCheckpoint>(&()),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list(&ListParams::default()).await {
            for item in list.items {
                text.push_str(&item.data["status"].to_string());
            }
        }
    }
    Ok(text)
}
