//! `cargo xtask dev`: a newcomer's first run. Builds the operator, starts the real control plane
//! with simulated nodes, installs the CRDs, starts the operator, applies the sample graph from
//! `examples/`, shows its components until it is Ready, then says how to use it and how to stop.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use testkit::{ControlPlane, Options};

const SAMPLE: &str = "examples/vllm-agg.yaml";

pub fn run(sample: Option<PathBuf>) -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let sample = sample.unwrap_or_else(|| root.join(SAMPLE));
    step("building the operator (cargo build -p operator)");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-p", "operator", "--bin", "dynamo-operator"])
        .current_dir(&root)
        .status()?;
    if !status.success() {
        bail!("building the operator failed");
    }
    let binary = root.join("target/debug/dynamo-operator");

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        step("starting the control plane (builds it from Go modules on the first run)");
        let cp = ControlPlane::start(Options::default()).await?;
        step("installing the CRDs (server-side apply)");
        cp.install_crds(&api::crds()).await?;

        let kubeconfig = cp.write_kubeconfig("admin", &["system:masters"]);
        let operator_kubeconfig = cp.write_kubeconfig("dynamo-operator", &["system:masters"]);
        let log = cp.dir().join("operator.log");
        step(&format!("starting the operator (log: {})", log.display()));
        let mut operator = Command::new(&binary)
            .arg(format!("--kubeconfig={}", operator_kubeconfig.display()))
            .args(["--leader-elect=false", "--metrics-address=127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting dynamo-operator")?;

        step(&format!("applying {}", sample.display()));
        let client = cp.client();
        let text = std::fs::read_to_string(&sample)?;
        let mut object: DynamicObject = serde_yaml::from_str(&text)?;
        let name = object.metadata.name.clone().context("sample has no name")?;
        object.metadata.namespace = Some("default".into());
        let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            api::GROUP,
            "v1beta1",
            "DynamoGraphDeployment",
        ));
        let dgds: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        dgds.patch(
            &name,
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&object),
        )
        .await?;

        let started = Instant::now();
        let mut last = String::new();
        let ready = loop {
            if let Some(status) = operator.try_wait()? {
                bail!("the operator exited ({status}); see {}", log.display());
            }
            let dgd: api::DynamoGraphDeployment = Api::namespaced(client.clone(), "default")
                .get(&name)
                .await?;
            let table = progress(&dgd);
            if table != last {
                print!("{table}");
                std::io::stdout().flush()?;
                last = table;
            }
            if is_ready(&dgd) {
                break true;
            }
            if started.elapsed() > Duration::from_secs(300) {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if ready {
            step(&format!("{name} is Ready after {:.1?}", started.elapsed()));
        } else {
            step(&format!(
                "{name} is not Ready after 5 minutes; see {}",
                log.display()
            ));
        }
        let bin = testkit::Binaries::locate()?.dir;
        println!();
        println!("Point kubectl at it:");
        println!("  export KUBECONFIG={}", kubeconfig.display());
        println!("  export PATH={}:$PATH", bin.display());
        println!("  kubectl get dgd,dcd,deployments,pods");
        println!();
        println!(
            "Operator log: {}   Run directory: {}",
            log.display(),
            cp.dir().display()
        );
        println!("Ctrl-C stops the operator and the control plane.");
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
