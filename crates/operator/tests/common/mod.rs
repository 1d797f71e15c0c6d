//! Runs the real `dynamo-operator` binary as a process against the test control plane.

#![allow(dead_code)]

pub mod graphs;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use testkit::ControlPlane;

/// A manifest of the test data (`testdata/<relative>`). A DynamoGraphDeployment comes pinned to
/// the component pathway (`nvidia.com/enable-grove: "false"`): tests of one run share the control
/// plane, other tests install Grove's CRDs, and a graph that does not choose would then take the
/// Grove pathway, whose controller nothing plays here.
pub fn manifest(relative: &str) -> DynamicObject {
    let mut object: DynamicObject =
        serde_yaml::from_str(&testkit::testdata::read(relative)).unwrap();
    if object
        .types
        .as_ref()
        .is_some_and(|t| t.kind == "DynamoGraphDeployment")
    {
        object
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .entry(api::labels::ENABLE_GROVE.into())
            .or_insert_with(|| "false".into());
    }
    object
}

/// The objects of a file of `deploy/` (`deploy/<path>`).
pub fn deploy(path: &str) -> Vec<DynamicObject> {
    let text = std::fs::read_to_string(format!(
        "{}/../../deploy/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect()
}

/// Server-side applies `objects` as an administrator would install them with
/// `kubectl apply --server-side` (namespaced objects into their `metadata.namespace`).
pub async fn install(client: &kube::Client, objects: &[DynamicObject]) {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    for object in objects {
        let types = object.types.clone().unwrap();
        let gvk = kube::api::GroupVersionKind::try_from(&types).unwrap();
        let (ar, caps): (ApiResource, _) = discovery.resolve_gvk(&gvk).unwrap();
        let api: Api<DynamicObject> = match (caps.scope, &object.metadata.namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        let name = object.metadata.name.as_deref().unwrap();
        api.patch(
            name,
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
    }
}

/// What `deploy/` installs for the operator's identity: its namespace, ServiceAccount and RBAC.
pub const DEPLOY_RBAC_FILES: &[&str] = &[
    "operator/namespace.yaml",
    "operator/serviceaccount.yaml",
    "rbac/clusterrole.yaml",
    "rbac/clusterrolebinding.yaml",
    "rbac/planner-epp-clusterroles.yaml",
];

/// Installs [`DEPLOY_RBAC_FILES`] and returns a kubeconfig (written as `file` in the control
/// plane's folder) of the `dynamo-system/dynamo-operator` ServiceAccount, with a token from the
/// TokenRequest API: an operator run with it has exactly the deployed RBAC.
pub async fn deployed_rbac_kubeconfig(cp: &ControlPlane, file: &str) -> PathBuf {
    let objects: Vec<_> = DEPLOY_RBAC_FILES.iter().flat_map(|f| deploy(f)).collect();
    install(&cp.client(), &objects).await;
    account_kubeconfig(cp, "dynamo-system", file).await
}

/// A kubeconfig (written as `file` in the control plane's folder) of the ServiceAccount
/// `namespace/dynamo-operator`, with a token from the TokenRequest API.
pub async fn account_kubeconfig(cp: &ControlPlane, namespace: &str, file: &str) -> PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(
            "dynamo-operator",
            &kube::api::PostParams::default(),
            &request,
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let kubeconfig = cp.dir().join(file);
    std::fs::write(&kubeconfig, cp.token_kubeconfig("dynamo-operator", &token)).unwrap();
    kubeconfig
}

/// Server-side applies a v1beta1 DynamoGraphDeployment as `kubectl` would.
pub async fn apply(client: kube::Client, ns: &str, object: &DynamicObject) {
    let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "nvidia.com",
        "v1beta1",
        "DynamoGraphDeployment",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &ar);
    api.patch(
        object.metadata.name.as_deref().unwrap(),
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap();
}

/// One operator process; killed when dropped.
pub struct Operator {
    pub child: Child,
    pub identity: String,
    pub log: PathBuf,
    pub metrics: String,
    pub webhook: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Options of one operator process.
pub struct Spawn<'a> {
    /// The user name of the operator's client certificate (what the audit log shows).
    pub identity: &'a str,
    /// The leader election Lease; a unique one per process unless replicas should compete.
    pub lease: Option<String>,
    /// Serve the conversion webhook and point the CRD at it.
    pub webhook: bool,
    /// With `webhook`, serve the checkpoint restore webhook too and apply its cluster-wide
    /// MutatingWebhookConfiguration (off unless a test asks: one test's operator owns it).
    pub restore_webhook: bool,
    /// Groups of the operator's user; empty: only what RBAC binds to the user.
    pub groups: &'a [&'a str],
    pub extra_args: Vec<String>,
    /// Run with this kubeconfig instead of a client certificate for `identity`.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for Spawn<'_> {
    fn default() -> Self {
        Spawn {
            identity: "dynamo-operator",
            lease: None,
            webhook: false,
            restore_webhook: false,
            groups: &["system:masters"],
            extra_args: Vec::new(),
            kubeconfig: None,
        }
    }
}

impl Operator {
    pub fn spawn(cp: &ControlPlane, options: Spawn<'_>) -> Operator {
        let kubeconfig = options
            .kubeconfig
            .clone()
            .unwrap_or_else(|| cp.write_kubeconfig(options.identity, options.groups));
        let metrics = format!("127.0.0.1:{}", free_port());
        let webhook_port = free_port();
        let webhook = format!("https://127.0.0.1:{webhook_port}");
        let log = cp
            .dir()
            .join(format!("{}-{}.log", options.identity, webhook_port));
        let child = Command::new(env!("CARGO_BIN_EXE_dynamo-operator"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--metrics-address={metrics}"))
            .arg(format!("--webhook-address=127.0.0.1:{webhook_port}"))
            .arg(format!("--webhook-url={webhook}"))
            .arg(format!("--identity={}-{webhook_port}", options.identity))
            .arg(format!(
                "--lease-name={}",
                options
                    .lease
                    .clone()
                    .unwrap_or_else(|| format!("lease-{webhook_port}"))
            ))
            .arg(format!("--webhook={}", options.webhook))
            .arg(format!(
                "--checkpoint-restore-webhook={}",
                options.restore_webhook
            ))
            .args([
                "--lease-namespace=default",
                "--lease-duration=6",
                "--log=info,operator=debug,kit=debug",
            ])
            .args(&options.extra_args)
            .env("POD_NAMESPACE", "default")
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start dynamo-operator");
        Operator {
            child,
            identity: format!("{}-{webhook_port}", options.identity),
            log,
            metrics,
            webhook,
        }
    }

    /// The operator's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` text, if the endpoint answers.
    pub fn metrics_text(&self) -> Option<String> {
        http_get(&self.metrics, "/metrics")
    }

    /// Whether `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        http_status(&self.metrics, "/readyz") == Some(200)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for exit; the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

impl Operator {
    /// SIGTERM, then wait up to `limit` for the exit: its status and how long it took, or the
    /// log's tail if the process was still running (it is then killed).
    pub fn terminate_within(
        &mut self,
        limit: Duration,
    ) -> Result<(std::process::ExitStatus, Duration), String> {
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Ok((status, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        let log = self.log_text();
        let tail: Vec<_> = log.lines().rev().take(40).collect();
        Err(tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
    }

    /// Whether the log has a line containing `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.log_text().contains(text)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

fn http_raw(address: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

pub fn http_status(address: &str, path: &str) -> Option<u16> {
    let raw = http_raw(address, path)?;
    raw.split_whitespace().nth(1)?.parse().ok()
}

pub fn http_get(address: &str, path: &str) -> Option<String> {
    let raw = http_raw(address, path)?;
    raw.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

#[allow(unused_imports)] // not every test binary waits
pub use testkit::eventually;

/// The value of a metric line starting with `prefix` (`name{labels}`), if present.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The Helm chart, `deploy/helm/dynamo-operator`.
pub fn chart() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/dynamo-operator")
}

/// Runs `helm args` (the client built beside the control plane); its stdout, or a panic with
/// its output.
pub fn helm(args: &[&str]) -> String {
    let binary = testkit::Binaries::locate().unwrap().dir.join("helm");
    let output = Command::new(&binary)
        .args(args)
        .env("HELM_CACHE_HOME", std::env::temp_dir().join("helm-cache"))
        .env("HELM_CONFIG_HOME", std::env::temp_dir().join("helm-config"))
        .env("HELM_DATA_HOME", std::env::temp_dir().join("helm-data"))
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "helm {}: {}\n{stdout}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The configuration file a chart release in `namespace` rendered (ConfigMap
/// `dynamo-operator-config`), written as `file` in the control plane's folder: its text and path.
pub async fn chart_config(cp: &ControlPlane, namespace: &str, file: &str) -> (String, PathBuf) {
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cp.client(), namespace);
    let text = configs
        .get("dynamo-operator-config")
        .await
        .unwrap()
        .data
        .unwrap()["config.yaml"]
        .clone();
    let path = cp.dir().join(file);
    std::fs::write(&path, &text).unwrap();
    (text, path)
}
