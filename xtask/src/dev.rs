//! `cargo xtask dev`: a newcomer's first run, installed as a cluster administrator installs the
//! operator. Builds the operator (the same build `cargo xtask test` makes), starts the real control
//! plane with simulated nodes, installs what `kubectl apply --server-side -k deploy/` installs
//! (namespace, CRDs, RBAC with the planner and EPP ClusterRoles, ServiceAccount, webhook Service),
//! runs the operator as its ServiceAccount with the conversion webhook reachable by the apiserver,
//! says which optional APIs are served, applies the sample graph and shows it until it is Ready.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::discovery::Discovery;
use serde_json::json;
use testkit::{ControlPlane, Options};

use bench::cluster;

const SAMPLE: &str = "examples/vllm-agg.yaml";
/// The operator's namespace and ServiceAccount (`deploy/operator/`).
const NAMESPACE: &str = "dynamo-system";
const ACCOUNT: &str = "dynamo-operator";
/// The operator runs here as a process, not as the Deployment's pods (simulated nodes run no
/// containers); everything else of `deploy/` is installed.
const NOT_INSTALLED: &[&str] = &["operator/deployment.yaml"];

/// An optional API a graph may need, and how `--with` installs it.
struct Optional {
    name: &'static str,
    group: &'static str,
    kind: &'static str,
    what: &'static str,
    /// A test-data folder of CRDs to install, or `None` for a fixture object.
    crds: Option<&'static str>,
}

const OPTIONAL: &[Optional] = &[
    Optional {
        name: "lws",
        group: "leaderworkerset.x-k8s.io",
        kind: "LeaderWorkerSet",
        what: "multinode components on the component pathway",
        crds: Some("lws-crds"),
    },
    Optional {
        name: "grove",
        group: "grove.io",
        kind: "PodCliqueSet",
        what: "the Grove pathway, which every graph then takes unless it sets nvidia.com/enable-grove: \"false\" (nothing plays Grove's controller here)",
        crds: Some("grove-crds"),
    },
    Optional {
        name: "inferencepool",
        group: "inference.networking.k8s.io",
        kind: "InferencePool",
        what: "EPP components (Gateway API inference extension)",
        crds: Some("gaie-crds"),
    },
    Optional {
        name: "dra",
        group: "resource.k8s.io",
        kind: "DeviceClass",
        what: "DRA GPU claims (DeviceClass gpu.nvidia.com)",
        crds: None,
    },
];

/// `cargo xtask dev` options.
pub struct Args {
    pub sample: Option<PathBuf>,
    /// Optional APIs to install (names of [`OPTIONAL`]).
    pub with: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = cluster::workspace_root();
    let sample = args.sample.unwrap_or_else(|| root.join(SAMPLE));
    for name in &args.with {
        if !OPTIONAL.iter().any(|o| o.name == name) {
            let names: Vec<_> = OPTIONAL.iter().map(|o| o.name).collect();
            bail!("--with {name}: not one of {}", names.join(", "));
        }
    }
    let started = Instant::now();
    let binary = cluster::build_operator(&root, "dev")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        step("starting the control plane (built from Go modules on the first run)");
        let cp = ControlPlane::start(Options::default()).await?;
        step("installing deploy/ as `kubectl apply --server-side -k deploy/` does");
        let applied = cluster::install_deploy(&cp, &root, NOT_INSTALLED).await?;
        println!("    {applied} objects (all of deploy/ but the operator's Deployment)");
        install_optional(&cp, &args.with).await?;
        report_optional(&cp).await?;

        let (mut operator, log, webhook) = start_operator(&cp, &binary)?;
        step(&format!("operator started as {NAMESPACE}/{ACCOUNT} (log: {})", log.display()));
        wait_for_webhook(&cp, &mut operator, &webhook, &log).await?;
        step(&format!(
            "conversion webhook served at {webhook}; v1alpha1 graphs are converted ({:.0?} since start)",
            started.elapsed()
        ));

        let name = apply(&cp, &sample).await?;
        let ready = show_until_ready(&cp, &mut operator, &name, &log).await?;
        if ready {
            step(&format!("{name} is Ready ({:.0?} since start)", started.elapsed()));
        } else {
            step(&format!("{name} is not Ready after 5 minutes; see {}", log.display()));
        }
        print_usage(&cp, &log)?;
        tokio::signal::ctrl_c().await?;
        let _ = operator.kill();
        let _ = operator.wait();
        cp.stop();
        Ok(())
    })
}

fn step(message: &str) {
    println!("==> {message}");
}

/// Installs the optional APIs named by `--with`.
async fn install_optional(cp: &ControlPlane, with: &[String]) -> anyhow::Result<()> {
    for optional in OPTIONAL.iter().filter(|o| with.iter().any(|w| w == o.name)) {
        step(&format!("installing {} ({})", optional.kind, optional.what));
        match optional.crds {
            Some(folder) => {
                cp.install_crd_files(&testkit::testdata::yaml_files(folder))
                    .await?
            }
            None => {
                let class: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": "gpu.nvidia.com"}, "spec": {}
                }))?;
                cluster::server_side_apply(&cp.client(), &[class]).await?;
            }
        }
    }
    Ok(())
}

/// Prints which optional APIs the control plane serves.
async fn report_optional(cp: &ControlPlane) -> anyhow::Result<()> {
    let discovery = Discovery::new(cp.client()).run().await?;
    step("optional APIs (`cargo xtask dev --with NAME,...` installs them):");
    for optional in OPTIONAL {
        let served = discovery
            .groups()
            .filter(|g| g.name() == optional.group)
            .flat_map(|g| g.recommended_resources())
            .any(|(ar, _)| ar.kind == optional.kind);
        let present = match optional.crds {
            Some(_) => served,
            None => served && device_class_exists(cp).await,
        };
        println!(
            "    {:<14} {:<48} {}",
            optional.name,
            format!("{} ({})", optional.kind, optional.group),
            if present { "served" } else { "not installed" },
        );
    }
    Ok(())
}

async fn device_class_exists(cp: &ControlPlane) -> bool {
    let gvk = kube::api::GroupVersionKind::gvk("resource.k8s.io", "v1", "DeviceClass");
    let api: Api<DynamicObject> =
        Api::all_with(cp.client(), &kube::discovery::ApiResource::from_gvk(&gvk));
    matches!(api.get_opt("gpu.nvidia.com").await, Ok(Some(_)))
}

/// Starts the operator as its ServiceAccount (the user name and groups RBAC binds), serving the
/// conversion webhook on a loopback port the apiserver reaches. Returns the process, its log and
/// the webhook's URL.
fn start_operator(cp: &ControlPlane, binary: &Path) -> anyhow::Result<(Child, PathBuf, String)> {
    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    let kubeconfig = cp.write_kubeconfig(
        &user,
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{NAMESPACE}"),
        ],
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let webhook = format!("https://127.0.0.1:{port}");
    let log = cp.dir().join("operator.log");
    let child = Command::new(binary)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["--metrics-address=127.0.0.1:0", "--webhook=true"])
        // As deploy/operator/deployment.yaml: the base RBAC grants no Secret list/watch.
        .arg("--discover-image-pull-secrets=false")
        .arg(format!("--webhook-address=127.0.0.1:{port}"))
        .arg(format!("--webhook-url={webhook}"))
        .env("POD_NAMESPACE", NAMESPACE)
        .env("POD_NAME", "dynamo-operator-dev")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting dynamo-operator")?;
    Ok((child, log, webhook))
}

/// Waits until the DynamoGraphDeployment CRD converts through the operator's webhook.
async fn wait_for_webhook(
    cp: &ControlPlane,
    operator: &mut Child,
    webhook: &str,
    log: &Path,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    let started = Instant::now();
    loop {
        if let Some(status) = operator.try_wait()? {
            bail!("the operator exited ({status}); see {}", log.display());
        }
        let crd = crds
            .get(&format!("dynamographdeployments.{}", api::GROUP))
            .await?;
        let url = crd
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.url);
        if url.is_some_and(|u| u.starts_with(webhook)) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "the operator did not configure its conversion webhook; see {}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Applies the sample into `default`, in whatever version it is written; returns its name.
async fn apply(cp: &ControlPlane, sample: &Path) -> anyhow::Result<String> {
    step(&format!("applying {}", sample.display()));
    let mut objects = cluster::yaml_documents(sample)?;
    for object in &mut objects {
        object
            .metadata
            .namespace
            .get_or_insert_with(|| "default".into());
    }
    cluster::server_side_apply(&cp.client(), &objects).await?;
    objects
        .iter()
        .find(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "DynamoGraphDeployment")
        })
        .and_then(|o| o.metadata.name.clone())
        .context("the sample has no DynamoGraphDeployment")
}

/// Shows the graph's components until it is Ready (true) or 5 minutes pass (false).
async fn show_until_ready(
    cp: &ControlPlane,
    operator: &mut Child,
    name: &str,
    log: &Path,
) -> anyhow::Result<bool> {
    let graphs: Api<api::DynamoGraphDeployment> = Api::namespaced(cp.client(), "default");
    let started = Instant::now();
    let mut last = String::new();
    loop {
        if let Some(status) = operator.try_wait()? {
            bail!("the operator exited ({status}); see {}", log.display());
        }
        let dgd = graphs.get(name).await?;
        let table = progress(&dgd);
        if table != last {
            print!("{table}");
            std::io::stdout().flush()?;
            last = table;
        }
        if is_ready(&dgd) {
            return Ok(true);
        }
        if started.elapsed() > Duration::from_secs(300) {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_usage(cp: &ControlPlane, log: &Path) -> anyhow::Result<()> {
    let kubeconfig = cp.write_kubeconfig("admin", &["system:masters"]);
    let bin = testkit::Binaries::locate()?.dir;
    println!();
    println!("Point kubectl at it:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  export PATH={}:$PATH", bin.display());
    println!("  kubectl get dgd,dcd,deployments,pods");
    println!("  kubectl apply -f testdata/upstream-examples/   # v1alpha1 works too");
    println!();
    println!(
        "Operator log: {}   Run directory: {}",
        log.display(),
        cp.dir().display()
    );
    println!("Ctrl-C stops the operator and the control plane.");
    Ok(())
}

fn is_ready(dgd: &api::DynamoGraphDeployment) -> bool {
    dgd.status
        .as_ref()
        .is_some_and(|s| kit::conditions::is_true(&s.conditions, kit::conditions::READY))
}

/// A table of the graph's components and their readiness.
fn progress(dgd: &api::DynamoGraphDeployment) -> String {
    let mut out = String::new();
    let status = dgd.status.clone().unwrap_or_default();
    let ready = kit::conditions::find(&status.conditions, kit::conditions::READY);
    out.push_str(&format!(
        "\n{:<28} state={:<12} Ready={} {}\n",
        dgd.metadata.name.clone().unwrap_or_default(),
        status.state.as_str(),
        ready.map_or("Unknown", |c| c.status.as_str()),
        ready.map_or(String::new(), |c| format!("({}: {})", c.reason, c.message)),
    ));
    out.push_str(&format!(
        "  {:<24} {:>8} {:>8} {:>8}\n",
        "COMPONENT", "DESIRED", "READY", "UPDATED"
    ));
    for component in &dgd.spec.components {
        let observed = status.components.get(&component.name);
        out.push_str(&format!(
            "  {:<24} {:>8} {:>8} {:>8}\n",
            component.name,
            component.replicas.unwrap_or(1),
            observed.and_then(|c| c.ready_replicas).unwrap_or(0),
            observed.map_or(0, |c| c.updated_replicas),
        ));
    }
    out
}
