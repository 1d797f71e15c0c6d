//! Phase 2, the floor: on the run's control plane, before the operator starts, a bare client
//! creates exactly the objects the operator creates for the N graphs, as many at a time as the
//! operator reconciles, and waits until every Deployment among them is available (what makes
//! the operator's graphs Ready). The operator's convergence time over the floor's says how
//! much the operator adds to what the control plane needs anyway.
//!
//! The objects come from the measured binary itself (`dynamo-operator render --provider
//! component`), once per template of the rotation with a placeholder for the graph's name, then
//! per graph with its name. They go in a namespace of their own, which is deleted (and waited
//! for, Pods included) before the operator starts: it never sees them, and the nodes' capacity
//! is free again for its graphs.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use testkit::ControlPlane;
use tokio::io::AsyncWriteExt;

use crate::audit::{AuditLog, KCM_USER, SCHEDULER_USER};
use crate::graphs::{self, Template};
use crate::phases::deployment_ready;
use crate::report::Floor;

/// The operator's default reconcile concurrency (`--dgd-concurrency`, `--dcd-concurrency`):
/// 4 graph workers and 8 component workers. The floor keeps their sum of creates in flight.
const DGD_CONCURRENCY: usize = 4;
const DCD_CONCURRENCY: usize = 8;

/// The floor client's user: the audit log tells its requests apart.
pub const FLOOR_USER: &str = "bench-floor";

/// What the floor of one N runs with.
pub struct Plan<'a> {
    pub binary: &'a Path,
    /// The operator's extra flags: render and the concurrency follow them.
    pub operator_args: &'a [String],
    pub templates: &'a [Template],
    pub n: usize,
    /// How long the Deployments may take to be available, and the namespace to be gone.
    pub timeout: Duration,
}

/// One template rendered with a placeholder for the graph's name.
#[derive(Debug)]
struct Rendered {
    token: String,
    /// The rendered objects as JSON text (the token still in it).
    text: String,
}

/// Creates the objects of `plan.n` graphs in a fresh namespace, waits until every Deployment
/// is available, then deletes the namespace and waits until it is gone.
pub async fn run(cp: &ControlPlane, plan: &Plan<'_>) -> anyhow::Result<Floor> {
    let n = plan.n;
    let ns = cp.namespace().await;
    let namespace = ns.name().to_string();
    let rendered = render_templates(plan, &namespace).await?;
    let objects = objects(&rendered, plan.templates, n, &namespace)?;
    let concurrency = concurrency(plan.operator_args);
    let client = cp.client_as(FLOOR_USER, &["system:masters"]);
    let resources = resources(&client, &objects).await?;
    let deployments: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let mut floor = Floor {
        objects: objects.len() as u64,
        deployments: deployments.len() as u64,
        concurrency,
        ..Floor::default()
    };
    for o in &objects {
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        *floor.by_kind.entry(kind).or_default() += 1;
    }
    let audit = AuditLog::new(
        cp.audit().path().to_path_buf(),
        cp.client_as("bench-audit", &["system:masters"]),
        &[FLOOR_USER, KCM_USER, SCHEDULER_USER],
    );
    let available = Available::start(cp.client_as("bench", &["system:masters"]), &namespace);
    eprintln!(
        "[bench N={n}] floor: creating {} objects ({} Deployments) in {namespace}, {concurrency} at a time",
        objects.len(),
        deployments.len()
    );
    let mark = audit.mark();
    let t0 = Instant::now();
    create_all(&client, &resources, objects, concurrency).await?;
    floor.create_seconds = t0.elapsed().as_secs_f64();
    floor.seconds = available
        .wait(&deployments, t0, plan.timeout)
        .await
        .map(|at| at.duration_since(t0).as_secs_f64());
    available.task.abort();
    let requests = audit.since(&mark).await?;
    floor.requests = crate::audit::Tally::of(requests.of(FLOOR_USER));
    floor.requests_by_user = requests.by_user.clone();
    eprintln!(
        "[bench N={n}] floor: created in {:.1} s, every Deployment available after {}; deleting {namespace}",
        floor.create_seconds,
        floor
            .seconds
            .map_or("(never)".to_string(), |s| format!("{s:.1} s"))
    );
    floor.cleanup_seconds = delete_namespace(&cp.client(), &namespace, plan.timeout).await?;
    Ok(floor)
}

/// The operator's reconcile concurrency: its graph and component workers, the defaults unless
/// its extra flags set them.
pub fn concurrency(operator_args: &[String]) -> usize {
    let flag = |name: &str, default: usize| -> usize {
        let prefix = format!("{name}=");
        let mut value = default;
        for (i, arg) in operator_args.iter().enumerate() {
            if let Some(v) = arg.strip_prefix(&prefix) {
                value = v.parse().unwrap_or(default);
            } else if arg == name
                && let Some(v) = operator_args.get(i + 1)
            {
                value = v.parse().unwrap_or(default);
            }
        }
        value
    };
    flag("--dgd-concurrency", DGD_CONCURRENCY) + flag("--dcd-concurrency", DCD_CONCURRENCY)
}

/// The placeholder for a graph's name in a rendered template: as long as the name (so whatever
/// the operator derives from it is as long as well), of letters no hash or generated name holds.
fn token(len: usize) -> String {
    "zqxj".chars().cycle().take(len).collect()
}

/// Renders every template of the rotation with `plan.binary`, the graph named by a token.
async fn render_templates(plan: &Plan<'_>, namespace: &str) -> anyhow::Result<Vec<Rendered>> {
    let mut out = Vec::new();
    for (i, template) in plan.templates.iter().enumerate() {
        let token = token(graphs::graph(plan.templates, i, "").name.len());
        let mut manifest = template.manifest.clone();
        manifest["metadata"] = serde_json::json!({ "name": token, "namespace": namespace });
        let objects = render(plan.binary, plan.operator_args, &manifest)
            .await
            .with_context(|| format!("rendering the {} template", template.tag))?;
        out.push(Rendered {
            token,
            text: serde_json::to_string(&objects)?,
        });
    }
    Ok(out)
}

/// `<binary> [operator flags] render -f - --provider component -o json`, the manifest on its
/// standard input: the objects the operator would create for it.
async fn render(
    binary: &Path,
    operator_args: &[String],
    manifest: &Value,
) -> anyhow::Result<Vec<Value>> {
    let mut child = tokio::process::Command::new(binary)
        .args(operator_args)
        .args(["render", "-f", "-", "--provider", "component", "-o", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut stdin = child.stdin.take().context("render's standard input")?;
    stdin
        .write_all(serde_json::to_string(manifest)?.as_bytes())
        .await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        bail!(
            "{} render exited with {}: {}",
            binary.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    serde_json::from_slice(&output.stdout).context("parsing render's JSON")
}

/// The objects of graphs `0..n` in `namespace`, graph after graph, each graph's in the order
/// the operator creates them; an object several graphs share (same kind and name) once.
fn objects(
    rendered: &[Rendered],
    templates: &[Template],
    n: usize,
    namespace: &str,
) -> anyhow::Result<Vec<Value>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for i in 0..n {
        let r = &rendered[i % rendered.len()];
        let name = graphs::graph(templates, i, namespace).name;
        for object in prepare(&r.text, &r.token, &name, namespace)? {
            let key = (
                object["kind"].as_str().unwrap_or_default().to_string(),
                object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            if seen.insert(key) {
                out.push(object);
            }
        }
    }
    Ok(out)
}

/// One graph's objects from its template's rendered text: the token replaced by `name`, in
/// `namespace`, without finalizers (nobody would remove them), in creation order.
fn prepare(text: &str, token: &str, name: &str, namespace: &str) -> anyhow::Result<Vec<Value>> {
    let mut objects: Vec<Value> =
        serde_json::from_str(&text.replace(token, name)).context("parsing a rendered template")?;
    for object in &mut objects {
        let meta = object["metadata"]
            .as_object_mut()
            .context("a rendered object without metadata")?;
        meta.insert("namespace".into(), namespace.into());
        meta.remove("finalizers");
    }
    objects.sort_by_key(|o| rank(o["kind"].as_str().unwrap_or_default()));
    Ok(objects)
}

/// Where a kind comes in a graph's creation order: the graph's children (components, RBAC,
/// the rest), then each component's Deployment and Service.
fn rank(kind: &str) -> u8 {
    match kind {
        "DynamoComponentDeployment" => 0,
        "ServiceAccount" => 1,
        "Role" => 2,
        "RoleBinding" => 3,
        "Deployment" => 5,
        "Service" => 6,
        _ => 4,
    }
}

/// The API resource of every kind among `objects`; an error for a kind the API server does not
/// serve or a cluster-scoped one (the operator creates none for these graphs).
async fn resources(
    client: &Client,
    objects: &[Value],
) -> anyhow::Result<HashMap<(String, String), ApiResource>> {
    let mut out = HashMap::new();
    for o in objects {
        let api_version = o["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        let key = (api_version.clone(), kind.clone());
        if out.contains_key(&key) {
            continue;
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("{api_version} {kind} is not served"))?;
        if caps.scope != Scope::Namespaced {
            bail!("the operator rendered a cluster-scoped {kind}, which the floor does not create");
        }
        out.insert(key, ar);
    }
    Ok(out)
}

/// Creates every object, `concurrency` at a time; one that exists already counts as created.
async fn create_all(
    client: &Client,
    resources: &HashMap<(String, String), ApiResource>,
    objects: Vec<Value>,
    concurrency: usize,
) -> anyhow::Result<()> {
    futures::stream::iter(objects)
        .map(|o| async move {
            let key = (
                o["apiVersion"].as_str().unwrap_or_default().to_string(),
                o["kind"].as_str().unwrap_or_default().to_string(),
            );
            let ar = resources
                .get(&key)
                .context("an object of an unknown kind")?;
            let object: DynamicObject = serde_json::from_value(o)?;
            let namespace = object.namespace().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, ar);
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                Err(e) => {
                    Err(e).with_context(|| format!("creating {} {}", key.1, object.name_any()))
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Deletes `namespace` and waits until it is gone (and so is everything in it, Pods
/// included); how long that took (seconds).
async fn delete_namespace(
    client: &Client,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let api: Api<Namespace> = Api::all(client.clone());
    api.delete(namespace, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting the floor's namespace {namespace}"))?;
    while api.get_opt(namespace).await?.is_some() {
        if t0.elapsed() > timeout {
            bail!("the floor's namespace {namespace} was not gone after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// A watch on the Deployments of a namespace: when each was first available.
struct Available {
    first: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Available {
    fn start(client: Client, namespace: &str) -> Self {
        let first: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let api: Api<Deployment> = Api::namespaced(client, namespace);
        let task = {
            let first = first.clone();
            tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
                    .boxed();
                while let Some(item) = stream.next().await {
                    let Ok(d) = item else { continue };
                    if deployment_ready(&d) {
                        let mut first = first.lock().expect("available");
                        first.entry(d.name_any()).or_insert_with(Instant::now);
                    }
                }
            })
        };
        Self { first, task }
    }

    /// When the last of `names` first was available, or `None` at `t0 + timeout`.
    async fn wait(&self, names: &[String], t0: Instant, timeout: Duration) -> Option<Instant> {
        let mut reported = Instant::now();
        loop {
            let (ready, last) = {
                let first = self.first.lock().expect("available");
                let at: Vec<Instant> = names.iter().filter_map(|n| first.get(n).copied()).collect();
                (at.len(), at.into_iter().max())
            };
            if ready == names.len() {
                return Some(last.unwrap_or(t0));
            }
            if t0.elapsed() > timeout {
                return None;
            }
            if reported.elapsed() > Duration::from_secs(15) {
                eprintln!(
                    "[bench] floor: {ready}/{} Deployments available after {:.0} s",
                    names.len(),
                    t0.elapsed().as_secs_f64()
                );
                reported = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What render prints for a graph named by the token (abridged).
    fn sample(token: &str) -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": format!("{token}-frontend"), "namespace": "t-0123456789",
                                "labels": {"nvidia.com/dynamo-namespace": format!("t-0123456789-{token}")}}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": format!("{token}-frontend"), "namespace": "t-0123456789"},
                   "spec": {"replicas": 1}}),
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoComponentDeployment",
                   "metadata": {"name": format!("{token}-frontend"), "namespace": "t-0123456789",
                                "finalizers": ["nvidia.com/finalizer"]}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "planner-serviceaccount", "namespace": "t-0123456789"}}),
        ]
    }

    #[test]
    fn tokens_are_as_long_as_names_and_not_hex() {
        assert_eq!(token(12), "zqxjzqxjzqxj");
        assert_eq!(token(9).len(), 9);
        assert!(!token(13).chars().any(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn a_graph_gets_its_name_namespace_and_order() {
        let t = token(12);
        let text = serde_json::to_string(&sample(&t)).unwrap();
        let objects = prepare(&text, &t, "g0001-disagg", "t-0123456789").unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "DynamoComponentDeployment",
                "ServiceAccount",
                "Deployment",
                "Service"
            ]
        );
        assert_eq!(objects[0]["metadata"]["name"], "g0001-disagg-frontend");
        assert!(objects[0]["metadata"].get("finalizers").is_none());
        assert_eq!(
            objects[3]["metadata"]["labels"]["nvidia.com/dynamo-namespace"],
            "t-0123456789-g0001-disagg"
        );
        assert!(!serde_json::to_string(&objects).unwrap().contains(&t));
    }

    #[test]
    fn shared_objects_are_created_once() {
        let dir = graphs::conformance_dir().unwrap();
        let templates = graphs::templates(&dir).unwrap();
        let rendered: Vec<Rendered> = (0..templates.len())
            .map(|i| {
                let token = token(graphs::graph(&templates, i, "").name.len());
                Rendered {
                    text: serde_json::to_string(&sample(&token)).unwrap(),
                    token,
                }
            })
            .collect();
        let objects = objects(&rendered, &templates, 8, "ns").unwrap();
        // 3 per graph, plus the shared ServiceAccount once.
        assert_eq!(objects.len(), 8 * 3 + 1);
        assert!(objects.iter().all(|o| o["metadata"]["namespace"] == "ns"));
        assert_eq!(objects[4]["metadata"]["name"], "g0001-disagg-frontend");
    }

    #[test]
    fn concurrency_follows_the_operator_flags() {
        assert_eq!(concurrency(&[]), 12);
        let args = ["--dgd-concurrency=16".to_string(), "--log=info".to_string()];
        assert_eq!(concurrency(&args), 24);
        let args = ["--dcd-concurrency".to_string(), "2".to_string()];
        assert_eq!(concurrency(&args), 6);
    }
}
