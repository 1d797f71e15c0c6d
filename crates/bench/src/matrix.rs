//! One N of the matrix: a fresh control plane and operator, every phase, then teardown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use testkit::{ControlPlane, Options};

use crate::APISERVER_ARGS;
use crate::audit::{AuditLog, KCM_USER, SCHEDULER_USER};
use crate::cluster::{self, workspace_root};
use crate::graphs::{self, Graph, Template};
use crate::phases::{HONOURED_ANNOTATION, IGNORED_ANNOTATION, Session};
use crate::process::{self, OPERATOR_USER, Operator};
use crate::report::{Floor, Footprint, Report, Run};

/// GPUs a simulated node offers (testkit's node capacity).
const GPUS_PER_NODE: i64 = 256;

/// The ClusterRoles an installation provides for the planner and EPP accounts the operator
/// binds in graph namespaces.
const CLUSTER_ROLES: &str = "deploy/rbac/planner-epp-clusterroles.yaml";

/// The soak phase's size: cycles, and graphs per cycle (`None`: N).
#[derive(Clone, Copy, Debug)]
pub struct SoakArgs {
    pub cycles: usize,
    pub graphs: Option<usize>,
}

/// What every N of the matrix runs with.
pub struct Plan<'a> {
    pub templates: &'a [Template],
    pub binary: &'a Path,
    /// Extra flags of the operator.
    pub operator_args: &'a [String],
    pub churn: Duration,
    pub soak: SoakArgs,
    /// Where the operator logs are copied.
    pub out: &'a Path,
    /// Run the floor phase before the operator starts.
    pub floor: bool,
}

/// One run's control plane, namespace, graphs and operator.
struct Setup {
    cp: ControlPlane,
    nodes: usize,
    namespace: String,
    graphs: Vec<Graph>,
    operator: Operator,
    log: PathBuf,
}

/// One N: a fresh control plane and operator, every phase, then teardown.
pub async fn one(n: usize, plan: &Plan<'_>, report: &mut Report) -> anyhow::Result<Run> {
    let started = Instant::now();
    let soak_graphs = if plan.soak.cycles > 0 {
        plan.soak.graphs.unwrap_or(n)
    } else {
        0
    };
    let (cp, nodes) = start_control_plane(n, plan, soak_graphs).await?;
    let floor = floor(&cp, n, plan).await?;
    let mut setup = spawn_operator(cp, nodes, n, plan).await?;
    report.operator.args = setup.operator.args.clone();
    setup.operator.wait_ready(Duration::from_secs(60)).await?;
    let pods: i64 = setup.graphs.iter().flat_map(|g| g.replicas.iter()).sum();
    let components: usize = setup.graphs.iter().map(|g| g.replicas.len()).sum();
    let mut run = Run {
        n,
        nodes: setup.nodes,
        components,
        pods,
        ..Run::default()
    };
    if let Some(f) = floor.as_ref().filter(|f| f.seconds.is_none()) {
        run.failures.push(format!(
            "the floor's {} Deployments were not all available within {:?}",
            f.deployments,
            ready_timeout(n)
        ));
    }
    run.floor = floor;
    measure(&mut setup, plan.churn, &mut run).await?;
    if run.failures.is_empty() && plan.soak.cycles > 0 {
        soak(&setup, plan, soak_graphs, &mut run).await?;
    }
    setup.operator.stop();
    let _ = std::fs::copy(&setup.log, plan.out.join(format!("operator-n{n}.log")));
    setup.cp.stop();
    run.wall_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "[bench N={n}] done in {:.0} s{}",
        run.wall_seconds,
        if run.failures.is_empty() {
            String::new()
        } else {
            format!(" with {} failures", run.failures.len())
        }
    );
    Ok(run)
}

/// Starts a control plane with enough simulated nodes for the run's and the soak's graphs and
/// installs the CRDs and ClusterRoles; the control plane and its node count.
async fn start_control_plane(
    n: usize,
    plan: &Plan<'_>,
    soak_graphs: usize,
) -> anyhow::Result<(ControlPlane, usize)> {
    let templates = plan.templates;
    let gpus = |count: usize, extra: i64| -> i64 {
        (0..count)
            .map(|i| graphs::gpus(&graphs::graph(templates, i, ""), extra))
            .sum()
    };
    // Churn adds a replica to components of the N graphs; the soak runs after they are deleted.
    let peak_gpus = gpus(n, 1).max(gpus(soak_graphs, 0));
    let nodes = (((peak_gpus as f64) * 1.1 / GPUS_PER_NODE as f64).ceil() as usize).max(3);
    eprintln!("[bench N={n}] starting a control plane with {nodes} simulated nodes");
    let cp = ControlPlane::start(Options {
        nodes,
        apiserver_args: APISERVER_ARGS.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    })
    .await
    .context("starting the control plane")?;
    cp.install_crds(&api::crds()).await?;
    let roles = cluster::yaml_documents(&workspace_root().join(CLUSTER_ROLES))?;
    cluster::server_side_apply(&cp.client(), &roles).await?;
    Ok((cp, nodes))
}

/// How long N graphs (or the floor's objects for them) may take to be Ready.
fn ready_timeout(n: usize) -> Duration {
    Duration::from_secs(180 + 3 * n as u64)
}

/// Phase 2, unless `--floor=false`: the floor, on the control plane before the operator starts.
async fn floor(cp: &ControlPlane, n: usize, plan: &Plan<'_>) -> anyhow::Result<Option<Floor>> {
    if !plan.floor {
        return Ok(None);
    }
    let floor_plan = crate::floor::Plan {
        binary: plan.binary,
        operator_args: plan.operator_args,
        templates: plan.templates,
        n,
        timeout: ready_timeout(n),
    };
    Ok(Some(crate::floor::run(cp, &floor_plan).await?))
}

/// The run's namespace and graphs, and the operator spawned on the control plane.
async fn spawn_operator(
    cp: ControlPlane,
    nodes: usize,
    n: usize,
    plan: &Plan<'_>,
) -> anyhow::Result<Setup> {
    let templates = plan.templates;
    let ns = cp.namespace().await;
    let namespace = ns.name().to_string();
    let graphs: Vec<Graph> = (0..n)
        .map(|i| graphs::graph(templates, i, &namespace))
        .collect();
    let kubeconfig = cp.write_kubeconfig(OPERATOR_USER, &["system:masters"]);
    let log = cp.dir().join("operator.log");
    let operator = Operator::spawn(plan.binary, &kubeconfig, &log, plan.operator_args)?;
    Ok(Setup {
        cp,
        nodes,
        namespace,
        graphs,
        operator,
        log,
    })
}

/// The measured phases: convergence, then (when every graph became Ready) no-op cost,
/// amplification and churn, with the footprint between them.
async fn measure(setup: &mut Setup, churn: Duration, run: &mut Run) -> anyhow::Result<()> {
    let n = run.n;
    let cp = &setup.cp;
    let mut processes: Vec<(String, u32)> = cp
        .components()
        .iter()
        .map(|c| (c.name.clone(), c.pid))
        .collect();
    processes.push(("dynamo-operator".to_string(), setup.operator.pid()));
    let operator_pid = setup.operator.pid();
    let audit = AuditLog::new(
        cp.audit().path().to_path_buf(),
        cp.client_as("bench-audit", &["system:masters"]),
        &[OPERATOR_USER, KCM_USER, SCHEDULER_USER],
    );
    let client = cp.client_as("bench", &["system:masters"]);
    let mut session = Session::new(
        client,
        setup.namespace.clone(),
        &mut setup.operator,
        audit,
        std::mem::take(&mut setup.graphs),
        processes,
    );
    session.settle(Duration::from_secs(60)).await?;
    let idle = process::usage(operator_pid);
    let timeout = ready_timeout(n);
    run.convergence = session.converge(timeout).await?;
    let converged = process::usage(operator_pid);
    run.footprint = Footprint {
        idle,
        converged,
        after_churn: converged,
        ..Footprint::default()
    };
    if run.convergence.seconds.is_none() {
        run.failures.push(format!(
            "{} of {n} graphs never became Ready within {timeout:?}: {}",
            n - run.convergence.ready,
            run.convergence.not_ready.join(", ")
        ));
        return Ok(());
    }
    converged_phases(&mut session, churn, run).await?;
    run.footprint.after_churn = process::usage(operator_pid);
    Ok(())
}

/// No-op cost, amplification and churn, once every graph is Ready.
async fn converged_phases(
    session: &mut Session<'_>,
    churn: Duration,
    run: &mut Run,
) -> anyhow::Result<()> {
    let n = run.n;
    let ignored = session.noop("ignored", IGNORED_ANNOTATION, "1", 0).await?;
    let honoured = session
        .noop("honoured", HONOURED_ANNOTATION, "false", n as u64)
        .await?;
    for x in [&ignored, &honoured] {
        if x.writes + x.events > 0 {
            run.failures.push(format!(
                "the {} annotation {} caused {} writes and {} Events: {:?}",
                x.kind, x.annotation, x.writes, x.events, x.requests.by_request
            ));
        }
    }
    run.noop = vec![ignored, honoured];
    run.amplification = session.amplification().await?;
    let churned = session.churn(churn).await?;
    if churned.reconverge_seconds.is_none() {
        let not_ready = session.not_ready();
        run.failures.push(format!(
            "after churn, not every graph and Deployment became Ready again ({} graphs not Ready: {})",
            not_ready.len(),
            not_ready.into_iter().take(20).collect::<Vec<_>>().join(", ")
        ));
    }
    run.churn = Some(churned);
    Ok(())
}

/// The soak phase, from an empty cluster: its cycles then take the time of one convergence
/// each, and the resident set after deleting the run's graphs says whether freed memory goes
/// back to the system.
async fn soak(setup: &Setup, plan: &Plan<'_>, graphs: usize, run: &mut Run) -> anyhow::Result<()> {
    let n = run.n;
    let cp = &setup.cp;
    let operator_pid = setup.operator.pid();
    let client = cp.client_as("bench", &["system:masters"]);
    let timeout = ready_timeout(n);
    eprintln!("[bench N={n}] deleting the run's {n} graphs before the soak");
    run.footprint.delete_seconds =
        Some(crate::soak::clear(&client, &setup.namespace, timeout).await?);
    crate::soak::quiet(operator_pid).await;
    run.footprint.after_delete = Some(process::usage(operator_pid));
    let ns = cp.namespace().await;
    let soak_plan = crate::soak::Plan {
        cycles: plan.soak.cycles,
        graphs,
        timeout: ready_timeout(graphs),
    };
    eprintln!(
        "[bench N={n}] soak: {} cycles of {} graphs",
        soak_plan.cycles, soak_plan.graphs
    );
    let soaked = crate::soak::run(&client, ns.name(), operator_pid, soak_plan, |cycle, i| {
        let mut g = graphs::graph(plan.templates, i, ns.name()).manifest;
        g["metadata"]["name"] = format!(
            "c{cycle}-{}",
            g["metadata"]["name"].as_str().unwrap_or_default()
        )
        .into();
        g
    })
    .await?;
    run.failures.extend(soaked.failure());
    run.soak = Some(soaked);
    Ok(())
}
