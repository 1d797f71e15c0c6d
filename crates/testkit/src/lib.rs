//! A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok (simulated nodes), built from Go modules and cached, started on free
//! loopback ports in a temporary directory.
//!
//! ```no_run
//! # async fn demo() {
//! let cp = testkit::ControlPlane::shared().await; // once per test binary
//! let client = cp.client();                       // admin (system:masters)
//! let ns = cp.namespace().await;                  // a fresh namespace for this test
//! let mark = cp.audit().mark();
//! // ... act as a distinct identity, so the audit log can attribute its requests:
//! let operator = cp.client_as("operator", &["system:masters"]);
//! let requests = cp.audit().since(&mark).await;
//! # let _ = (client, ns, operator, requests);
//! # }
//! ```
//!
//! - **Binaries**: see [`binaries`] (envtest's `KUBEBUILDER_ASSETS` is honoured).
//! - **Security**: TLS with a throw-away CA; users are client certificates minted on demand
//!   (`CN=user, O=group`), authorization mode RBAC, so RBAC can be tested with
//!   [`ControlPlane::client_as`] and no groups.
//! - **Sharing**: [`ControlPlane::shared`] starts one control plane per test binary. When
//!   `TESTKIT_DIR` names the run directory of an already running control plane (as
//!   `cargo xtask test` and `cargo xtask test-env` provide), the test binary attaches to it
//!   instead, so a whole test run pays start-up once.
//! - **Teardown**: every process is handed to a reaper that ends them and removes the run
//!   directory when the owning process exits, however it exits (see [`process`]);
//!   `TESTKIT_KEEP=1` keeps the directory for a look at the logs.
//! - **Audit**: the apiserver writes a metadata-level audit log; [`Audit`] reads it, so tests
//!   count real requests per identity.

pub mod audit;
pub mod binaries;
pub mod pki;
pub mod process;
mod restart;
pub mod testdata;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};

pub use audit::{Audit, AuditEvent, AuditMark};
pub use binaries::Binaries;
pub use restart::Stop;

/// Errors while starting or using the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("control-plane binary {name} not found in {dir}")]
    MissingBinary { name: String, dir: PathBuf },
    #[error("building the control plane failed: {0}")]
    Build(String),
    #[error("cannot start {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificates: {0}")]
    Pki(String),
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("{what} not ready after {after:?}{log}")]
    Timeout {
        what: String,
        after: Duration,
        log: String,
    },
    #[error("{name} exited with {status}; last log lines:\n{log}")]
    Exited {
        name: String,
        status: String,
        log: String,
    },
    #[error("invalid state in {0}")]
    State(PathBuf),
    #[error(
        "only {free_mib} MiB free on the file system of {path} (etcd stalls when it fills, and \
         requests then time out); at least {MIN_FREE_MIB} MiB are needed"
    )]
    DiskFull { path: PathBuf, free_mib: u64 },
}

/// Free space a control plane needs in its run directory (etcd, logs, the audit log).
pub const MIN_FREE_MIB: u64 = 1024;

/// Fails when the file system of `dir` has less than [`MIN_FREE_MIB`] free (as `df` reports it;
/// where `df` cannot tell, the check passes).
fn check_free_space(dir: &Path) -> Result<(), Error> {
    let Ok(out) = std::process::Command::new("df")
        .arg("-Pk")
        .arg(dir)
        .output()
    else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let free_kib = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok());
    match free_kib {
        Some(kib) if kib / 1024 < MIN_FREE_MIB => Err(Error::DiskFull {
            path: dir.to_path_buf(),
            free_mib: kib / 1024,
        }),
        _ => Ok(()),
    }
}

impl Error {
    pub(crate) fn pki(e: impl std::fmt::Display) -> Self {
        Self::Pki(e.to_string())
    }
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn spawn(name: &str, source: std::io::Error) -> Self {
        Self::Spawn {
            name: name.to_string(),
            source,
        }
    }
}

/// How to start a control plane.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run directory; a fresh temporary one when `None`. Removed when the control plane stops.
    pub dir: Option<PathBuf>,
    /// Start kube-controller-manager, kube-scheduler and kwok, and register simulated nodes.
    /// Without them there is no garbage collection, no ReplicaSets and no Pods.
    pub simulate_nodes: bool,
    /// Number of simulated nodes.
    pub nodes: usize,
    /// Extra kube-apiserver flags (`--flag=value`).
    pub apiserver_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            dir: None,
            simulate_nodes: true,
            nodes: 3,
            apiserver_args: Vec::new(),
        }
    }
}

/// What an attaching process needs to know; written to `<dir>/testkit.json`.
#[derive(Serialize, Deserialize)]
struct State {
    server: String,
    simulates_nodes: bool,
}

const STATE_FILE: &str = "testkit.json";
const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CERT: &str = "apiserver.crt";
const TLS_KEY: &str = "apiserver.key";
const SA_KEY: &str = "sa.key";
const SA_PUB: &str = "sa.pub";
const AUDIT_POLICY: &str = "audit-policy.yaml";
const AUDIT_LOG: &str = "audit.log";
/// How long an installed CRD may take to be Established and served (generous: a loaded machine
/// compiles a large CRD's CEL rules and OpenAPI slowly).
const CRD_TIMEOUT: Duration = Duration::from_secs(90);

/// The media type of aggregated discovery (`GET /apis`), which kubectl reads.
const AGGREGATED_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an aggregated discovery document lists `plural` in `group`/`version`.
fn aggregated_lists(body: &str, group: &str, version: &str, plural: &str) -> bool {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(body) else {
        return false;
    };
    doc["items"].as_array().into_iter().flatten().any(|g| {
        g["metadata"]["name"] == group
            && g["versions"].as_array().into_iter().flatten().any(|v| {
                v["version"] == version
                    && v["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r["resource"] == plural)
            })
    })
}
/// Simulated nodes carry this label set to `"true"`, as GPU feature discovery labels GPU nodes.
pub const GPU_PRESENT_LABEL: &str = "nvidia.com/gpu.present";

/// Simulated nodes carry this annotation; kwok manages exactly these.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// A running control plane (owned or attached).
pub struct ControlPlane {
    dir: PathBuf,
    server: String,
    ca: pki::Authority,
    simulates_nodes: bool,
    admin: String,
    components: Vec<process::Component>,
    reaper: Option<process::Reaper>,
}

static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

impl ControlPlane {
    /// The control plane shared by every test of this test binary: attached from `TESTKIT_DIR`
    /// if set, otherwise started on first use with [`Options::default`]. Panics (failing the
    /// test with the reason) when it cannot start.
    pub async fn shared() -> &'static ControlPlane {
        let result = tokio::task::spawn_blocking(|| {
            SHARED.get_or_init(|| {
                let started = std::thread::spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    rt.block_on(async {
                        match std::env::var_os("TESTKIT_DIR") {
                            Some(dir) => Self::attach(Path::new(&dir)),
                            None => Self::start(Options::default()).await,
                        }
                        .map_err(|e| e.to_string())
                    })
                })
                .join();
                started.unwrap_or_else(|_| Err("control plane start-up panicked".into()))
            })
        })
        .await
        .expect("control plane start-up task");
        match result {
            Ok(cp) => cp,
            Err(e) => panic!("testkit: no control plane: {e}"),
        }
    }

    /// Attaches to a control plane started by another process (its run directory).
    pub fn attach(dir: &Path) -> Result<Self, Error> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))
        };
        let state: State =
            serde_json::from_str(&read(STATE_FILE)?).map_err(|_| Error::State(dir.into()))?;
        let ca = pki::load(read(CA_CERT)?, &read(CA_KEY)?)?;
        let admin = pki::kubeconfig(
            &state.server,
            ca.cert_pem(),
            "admin",
            &pki::client(&ca, "admin", &["system:masters"])?,
        );
        Ok(Self {
            dir: dir.to_path_buf(),
            server: state.server,
            ca,
            simulates_nodes: state.simulates_nodes,
            admin,
            components: Vec::new(),
            reaper: None,
        })
    }

    /// Starts a control plane owned by the calling process.
    pub async fn start(options: Options) -> Result<Self, Error> {
        let started = Instant::now();
        let binaries = Binaries::locate()?;
        let dir = run_dir(&options)?;
        // TESTKIT_KEEP=1 keeps the run directory (logs, audit log) after exit, for debugging.
        let keep = std::env::var_os("TESTKIT_KEEP").is_some_and(|v| v != "0");
        let reaper = process::Reaper::start((!keep).then_some(dir.as_path()))?;
        let ca = write_credentials(&dir)?;

        let etcd_port = process::free_port()?;
        let peer_port = process::free_port()?;
        let api_port = process::free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");

        let mut components = Vec::new();
        let etcd = start_etcd(&reaper, &binaries, &dir, etcd_port, peer_port).await?;
        components.push(etcd);

        let simulates_nodes = options.simulate_nodes && binaries.simulates_nodes();
        let mut args = apiserver_args(&dir, &etcd_url, api_port, simulates_nodes);
        args.extend(options.apiserver_args.iter().cloned());
        let apiserver = process::spawn(
            &reaper,
            "kube-apiserver",
            &binaries.kube_apiserver,
            &args,
            &dir,
        )?;
        components.push(apiserver.clone());

        let admin = pki::kubeconfig(
            &server,
            ca.cert_pem(),
            "admin",
            &pki::client(&ca, "admin", &["system:masters"])?,
        );
        let client = client_from(&admin)?;
        wait_for_apiserver(&apiserver, &client).await?;

        if simulates_nodes {
            let kubeconfig = |user: &str| write_kubeconfig(&dir, &ca, &server, user);
            let kcm = kubeconfig("system:kube-controller-manager")?;
            let scheduler = kubeconfig("system:kube-scheduler")?;
            let kwok = kubeconfig("kwok")?;
            let bin = |b: &Option<PathBuf>| b.clone().expect("checked by simulates_nodes");
            components.push(process::spawn(
                &reaper,
                "kube-controller-manager",
                &bin(&binaries.kube_controller_manager),
                &controller_manager_args(&dir, &kcm),
                &dir,
            )?);
            let scheduler_port = process::free_port()?;
            components.push(process::spawn(
                &reaper,
                "kube-scheduler",
                &bin(&binaries.kube_scheduler),
                &scheduler_args(&scheduler, scheduler_port),
                &dir,
            )?);
            let kwok_proc = process::spawn(
                &reaper,
                "kwok",
                &bin(&binaries.kwok),
                &kwok_args(&kwok, &bin(&binaries.kwok_stages)),
                &dir,
            )?;
            components.push(kwok_proc.clone());
            register_nodes(&client, options.nodes, &kwok_proc).await?;
        }

        let state = State {
            server: server.clone(),
            simulates_nodes,
        };
        write(
            &dir,
            STATE_FILE,
            &serde_json::to_string_pretty(&state).expect("state serializes"),
        )?;
        tracing::info!(dir = %dir.display(), %server, elapsed = ?started.elapsed(), "control plane started");
        Ok(Self {
            dir,
            server,
            ca,
            simulates_nodes,
            admin,
            components,
            reaper: Some(reaper),
        })
    }

    /// The apiserver URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The run directory (logs of every component, the audit log, kubeconfigs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether Pods are scheduled and made Ready by simulated nodes, and garbage collection runs.
    pub fn simulates_nodes(&self) -> bool {
        self.simulates_nodes
    }

    /// An admin client (`system:masters`). Create clients inside the runtime that uses them.
    pub fn client(&self) -> Client {
        client_from(&self.admin).expect("admin kubeconfig is valid")
    }

    /// A client authenticated as `user` in `groups`; with no groups it can do only what RBAC
    /// grants that user.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> Client {
        client_from(&self.kubeconfig(user, groups)).expect("kubeconfig is valid")
    }

    /// A kubeconfig (YAML) for `user` in `groups`, credentials embedded.
    pub fn kubeconfig(&self, user: &str, groups: &[&str]) -> String {
        let cred = pki::client(&self.ca, user, groups).expect("client certificate");
        pki::kubeconfig(&self.server, self.ca.cert_pem(), user, &cred)
    }

    /// A client authenticating with a bearer `token` (e.g. a ServiceAccount token from the
    /// TokenRequest API): it can do only what RBAC grants that account.
    pub fn token_client(&self, name: &str, token: &str) -> Client {
        client_from(&self.token_kubeconfig(name, token)).expect("kubeconfig is valid")
    }

    /// A kubeconfig (YAML) authenticating with a bearer `token` (e.g. a ServiceAccount token
    /// from the TokenRequest API, to run something with exactly that account's RBAC).
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> String {
        use base64::{Engine, engine::general_purpose::STANDARD};
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: testkit\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: {name}\n  user:\n    token: {token}\n\
             contexts:\n- name: testkit\n  context:\n    cluster: testkit\n    user: {name}\n\
             current-context: testkit\n",
            server = self.server,
            ca = STANDARD.encode(self.ca.cert_pem().as_bytes()),
        )
    }

    /// Writes [`Self::kubeconfig`] to `<dir>/<user>.kubeconfig` and returns its path, e.g. to
    /// start an operator process as that user.
    pub fn write_kubeconfig(&self, user: &str, groups: &[&str]) -> PathBuf {
        let path = self
            .dir
            .join(format!("{}.kubeconfig", user.replace(':', "-")));
        std::fs::write(&path, self.kubeconfig(user, groups)).expect("write kubeconfig");
        path
    }

    /// The audit log.
    pub fn audit(&self) -> Audit {
        Audit::new(
            self.dir.join(AUDIT_LOG),
            self.client_as("testkit-audit", &["system:masters"]),
        )
    }

    /// A fresh namespace for one test (`t-<random>`). When nodes are simulated, it waits for the
    /// namespace's `default` service account, so Pods can be admitted at once.
    pub async fn namespace(&self) -> TestNamespace {
        let client = self.client();
        let name = format!("t-{}", random_suffix());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("testkit".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        if self.simulates_nodes {
            let sas = Api::<ServiceAccount>::namespaced(client.clone(), &name);
            let deadline = Instant::now() + Duration::from_secs(20);
            while sas.get_opt("default").await.ok().flatten().is_none() {
                assert!(
                    Instant::now() < deadline,
                    "default service account of {name} never appeared"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        TestNamespace { name, client }
    }

    /// Installs CRDs by server-side apply (large CRDs exceed client-side apply's annotation
    /// limit) and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<(), Error> {
        let api = Api::<CustomResourceDefinition>::all(self.client());
        let pp = PatchParams::apply("testkit").force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            // Tests of one run share the control plane, and some point a CRD's conversion
            // webhook elsewhere (another field manager). Server-side apply would keep their
            // fields, so the conversion is first replaced as a whole.
            if let Some(conversion) = &crd.spec.conversion
                && api.get_opt(&name).await?.is_some()
            {
                let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                    { "op": "replace", "path": "/spec/conversion", "value": conversion }
                ]))
                .expect("JSON patch");
                api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                    .await?;
            }
            let mut body = serde_json::to_value(crd).expect("CRD serializes");
            body["apiVersion"] = "apiextensions.k8s.io/v1".into();
            body["kind"] = "CustomResourceDefinition".into();
            api.patch(&name, &pp, &Patch::Apply(&body)).await?;
        }
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let deadline = Instant::now() + CRD_TIMEOUT;
            loop {
                let current = api.get(&name).await?;
                let established = current
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::Timeout {
                        what: format!("CRD {name} Established"),
                        after: CRD_TIMEOUT,
                        log: String::new(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // Discovery of a new group lags Established by a moment; wait until it is served.
        let client = self.client();
        for crd in crds {
            let group = &crd.spec.group;
            let deadline = Instant::now() + CRD_TIMEOUT;
            let quoted = format!("\"{}\"", crd.spec.names.plural);
            for version in crd.spec.versions.iter().filter(|v| v.served) {
                let path = format!("/apis/{group}/{}", version.name);
                loop {
                    // Both the group-version document and aggregated discovery (what kubectl
                    // and most clients read first) must list the resource.
                    let served = client
                        .request_text(http::Request::get(&path).body(Vec::new()).unwrap())
                        .await
                        .is_ok_and(|body| body.contains(&quoted))
                        && client
                            .request_text(
                                http::Request::get("/apis")
                                    .header(http::header::ACCEPT, AGGREGATED_DISCOVERY)
                                    .body(Vec::new())
                                    .unwrap(),
                            )
                            .await
                            .is_ok_and(|body| {
                                aggregated_lists(
                                    &body,
                                    group,
                                    &version.name,
                                    &crd.spec.names.plural,
                                )
                            });
                    if served {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(Error::Timeout {
                            what: format!("{path} serving {}", crd.spec.names.plural),
                            after: CRD_TIMEOUT,
                            log: String::new(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        Ok(())
    }

    /// Installs CRDs from YAML files (one or more documents each).
    pub async fn install_crd_files(&self, paths: &[PathBuf]) -> Result<(), Error> {
        let mut crds = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let crd = CustomResourceDefinition::deserialize(doc)
                    .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
                crds.push(crd);
            }
        }
        self.install_crds(&crds).await
    }

    /// The processes of an owned control plane (empty when attached).
    pub fn components(&self) -> &[process::Component] {
        &self.components
    }

    /// Stops an owned control plane now (it also stops when the process exits).
    pub fn stop(&self) {
        if let Some(reaper) = &self.reaper {
            reaper.stop();
        }
    }
}

/// The controllers the test control plane runs: garbage collection, the Deployment →
/// ReplicaSet → Pod chain, Jobs, namespaces and service accounts, quotas, the binding of
/// PersistentVolumeClaims to PersistentVolumes and the ResourceClaims of Pods made from their
/// ResourceClaimTemplates (the scheduler allocates devices from the ResourceSlices a test
/// publishes, playing a DRA driver's part).
pub const CONTROLLERS: &[&str] = &[
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "endpointslice-controller",
    "pod-garbage-collector-controller",
    "resourcequota-controller",
    "root-ca-certificate-publisher-controller",
    "persistentvolume-binder-controller",
    "resourceclaim-controller",
];

/// A namespace created for one test.
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl TestNamespace {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// An admin client defaulting to this namespace.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
    /// Typed API for this namespace, as admin.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

fn client_from(kubeconfig: &str) -> Result<Client, Error> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig)
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::try_from(kc).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Ok(Client::try_from(config)?)
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

/// Polls `check` every 100 ms until it holds; panics with `what` once `timeout` has passed (a
/// test's wait for the cluster to get somewhere).
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The run directory: `options.dir` (created if missing), else a fresh temporary one. Refused
/// (a temporary one removed again) when its file system has too little free space.
fn run_dir(options: &Options) -> Result<PathBuf, Error> {
    let dir = match &options.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            dir.clone()
        }
        None => tempfile::Builder::new()
            .prefix("testkit-")
            .tempdir()
            .map_err(|e| Error::io(&std::env::temp_dir(), e))?
            .keep(),
    };
    if let Err(e) = check_free_space(&dir) {
        if options.dir.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return Err(e);
    }
    Ok(dir)
}

/// Writes `data` to the file `name` of `dir`; returns its path.
fn write(dir: &Path, name: &str, data: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    std::fs::write(&path, data).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// Writes to `dir` a throw-away CA, the apiserver's serving certificate, the service account
/// signing key pair and the audit policy; returns the CA.
fn write_credentials(dir: &Path) -> Result<pki::Authority, Error> {
    let ca = pki::authority()?;
    write(dir, CA_CERT, ca.cert_pem())?;
    write(dir, CA_KEY, ca.key_pem())?;
    let serving = pki::serving(&ca)?;
    write(dir, TLS_CERT, &serving.cert_pem)?;
    write(dir, TLS_KEY, &serving.key_pem)?;
    let (sa_private, sa_public) = pki::service_account_key()?;
    write(dir, SA_KEY, &sa_private)?;
    write(dir, SA_PUB, &sa_public)?;
    write(dir, AUDIT_POLICY, audit::POLICY)?;
    Ok(ca)
}

/// A path as a flag value.
fn p(path: &Path) -> String {
    path.display().to_string()
}

/// etcd's flags: data in `dir`, serving `etcd_url` (clients) and `peer_url`.
fn etcd_args(dir: &Path, etcd_url: &str, peer_url: &str) -> Vec<String> {
    vec![
        "--name=testkit".into(),
        format!("--data-dir={}", p(&dir.join("etcd"))),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=testkit={peer_url}"),
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// Starts etcd (data in `dir`, clients on `port`, peers on `peer_port`) and waits until it is
/// healthy.
async fn start_etcd(
    reaper: &process::Reaper,
    binaries: &Binaries,
    dir: &Path,
    port: u16,
    peer_port: u16,
) -> Result<process::Component, Error> {
    let etcd_url = format!("http://127.0.0.1:{port}");
    let etcd = process::spawn(
        reaper,
        "etcd",
        &binaries.etcd,
        &etcd_args(dir, &etcd_url, &format!("http://127.0.0.1:{peer_port}")),
        dir,
    )?;
    wait_until(&etcd, "etcd", Duration::from_secs(30), || async {
        http_ok(port, "/health")
    })
    .await?;
    Ok(etcd)
}

/// Writes the kubeconfig of `user` (`system:masters`, a client certificate of `ca`) for
/// `server` to `dir`; returns its path.
fn write_kubeconfig(
    dir: &Path,
    ca: &pki::Authority,
    server: &str,
    user: &str,
) -> Result<PathBuf, Error> {
    let cred = pki::client(ca, user, &["system:masters"])?;
    write(
        dir,
        &format!("{user}.kubeconfig"),
        &pki::kubeconfig(server, ca.cert_pem(), user, &cred),
    )
}

/// kube-apiserver's flags: on `api_port` of the loopback address, storing in `etcd_url`, with
/// the credentials and audit policy of [`write_credentials`] in `dir`. `simulates_nodes`: the
/// simulated nodes' controllers run.
fn apiserver_args(dir: &Path, etcd_url: &str, api_port: u16, simulates_nodes: bool) -> Vec<String> {
    let server = format!("https://127.0.0.1:{api_port}");
    let mut args = vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={api_port}"),
        format!("--cert-dir={}", p(dir)),
        format!("--tls-cert-file={}", p(&dir.join(TLS_CERT))),
        format!("--tls-private-key-file={}", p(&dir.join(TLS_KEY))),
        format!("--client-ca-file={}", p(&dir.join(CA_CERT))),
        "--authorization-mode=Node,RBAC".into(),
        "--allow-privileged=true".into(),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        format!("--service-account-issuer={server}"),
        format!("--service-account-key-file={}", p(&dir.join(SA_PUB))),
        format!(
            "--service-account-signing-key-file={}",
            p(&dir.join(SA_KEY))
        ),
        format!("--audit-policy-file={}", p(&dir.join(AUDIT_POLICY))),
        format!("--audit-log-path={}", p(&dir.join(AUDIT_LOG))),
        "--audit-log-format=json".into(),
        "--audit-log-maxsize=0".into(),
        "--profiling=false".into(),
    ];
    // Simulated nodes are never tainted not-ready at creation: no node lifecycle controller
    // runs to remove the taint (and none should evict Pods when a heartbeat is late).
    let mut disabled = vec!["TaintNodesByCondition"];
    if !simulates_nodes {
        // No service account controller runs, so default service accounts never appear.
        disabled.push("ServiceAccount");
    }
    args.push(format!(
        "--disable-admission-plugins={}",
        disabled.join(",")
    ));
    args
}

/// Waits until the apiserver is ready and serves the `default` namespace.
async fn wait_for_apiserver(apiserver: &process::Component, client: &Client) -> Result<(), Error> {
    wait_until(
        apiserver,
        "kube-apiserver",
        Duration::from_secs(90),
        || async {
            let ready = client
                .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
                .await
                .is_ok();
            ready
                && Api::<Namespace>::all(client.clone())
                    .get_opt("default")
                    .await
                    .ok()
                    .flatten()
                    .is_some()
        },
    )
    .await
}

/// kube-controller-manager's flags (`kubeconfig`; the CA and service account key in `dir`).
fn controller_manager_args(dir: &Path, kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", p(kubeconfig)),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        format!("--controllers={}", CONTROLLERS.join(",")),
        format!("--root-ca-file={}", p(&dir.join(CA_CERT))),
        format!(
            "--service-account-private-key-file={}",
            p(&dir.join(SA_KEY))
        ),
        "--use-service-account-credentials=false".into(),
        "--kube-api-qps=1000".into(),
        "--kube-api-burst=2000".into(),
        "--concurrent-deployment-syncs=10".into(),
        "--concurrent-replicaset-syncs=10".into(),
        "--concurrent-gc-syncs=20".into(),
    ]
}

/// kube-scheduler's flags (`kubeconfig`, serving on `port`).
fn scheduler_args(kubeconfig: &Path, port: u16) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", p(kubeconfig)),
        format!("--authentication-kubeconfig={}", p(kubeconfig)),
        format!("--authorization-kubeconfig={}", p(kubeconfig)),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--kube-api-qps=1000".into(),
        "--kube-api-burst=2000".into(),
    ]
}

/// kwok's flags (`kubeconfig`, its `stages`): it manages the nodes annotated
/// [`KWOK_NODE_ANNOTATION`].
fn kwok_args(kubeconfig: &Path, stages: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", p(kubeconfig)),
        format!("--config={}", p(stages)),
        "--manage-all-nodes=false".into(),
        format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
        "--manage-nodes-with-label-selector=".into(),
        "--manage-single-node=".into(),
        "--cidr=10.244.0.0/16".into(),
        "--node-ip=127.0.0.1".into(),
        "--node-lease-duration-seconds=40".into(),
    ]
}

/// A plain HTTP GET on loopback (etcd's health endpoint).
fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200")
}

/// Polls `check` until it holds, failing early if `component` exits.
async fn wait_until<F, Fut>(
    component: &process::Component,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if let Some(status) = component.exit_status() {
            return Err(Error::Exited {
                name: component.name.clone(),
                status: status.to_string(),
                log: process::tail(&component.log, 40),
            });
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
                log: format!(
                    "; last log lines of {}:\n{}",
                    component.name,
                    process::tail(&component.log, 40)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Registers `count` simulated nodes (managed by kwok) and waits until they are Ready.
async fn register_nodes(
    client: &Client,
    count: usize,
    kwok: &process::Component,
) -> Result<(), Error> {
    let nodes = Api::<Node>::all(client.clone());
    for i in 0..count {
        let name = format!("kwok-node-{i}");
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": { KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0" },
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "topology.kubernetes.io/zone": format!("zone-{}", i % 2),
                    // What GPU feature discovery labels GPU nodes with (manifests select it).
                    GPU_PRESENT_LABEL: "true",
                },
            },
            "status": {
                "allocatable": { "cpu": "512", "memory": "4Ti", "pods": "2500", "nvidia.com/gpu": "256", "rdma/ib": "256", "ephemeral-storage": "10Ti" },
                "capacity": { "cpu": "512", "memory": "4Ti", "pods": "2500", "nvidia.com/gpu": "256", "rdma/ib": "256", "ephemeral-storage": "10Ti" },
            },
        }))
        .expect("node manifest");
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        // Status on create is not guaranteed to be kept; set capacity explicitly.
        let status =
            serde_json::json!({ "status": serde_json::to_value(&node.status).expect("status") });
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    wait_until(
        kwok,
        "simulated nodes Ready",
        Duration::from_secs(60),
        || async {
            let Ok(list) = nodes.list(&Default::default()).await else {
                return false;
            };
            let ready = list
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count();
            ready >= count
        },
    )
    .await
}
