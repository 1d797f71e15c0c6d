//! A small operator for the tests: the DGD root and the DCD controller, each under
//! `kit::run::Runner`, fed by one shared watch cache scoped to the test's namespace, acting as
//! one identity so the apiserver's audit log attributes their requests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use api::{
    DynamoCheckpoint, DynamoComponentDeployment, DynamoGraphDeployment,
    DynamoGraphDeploymentScalingAdapter,
};
use component_program::{ComponentConfig, ComponentProgram};
use dcd_controller::DcdReconciler;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::conditions::{self, READY};
use kit::events::Reporter;
use kit::run::{ErrorBackoff, Runner};
use kube::api::PostParams;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};
use reconcilers::rollout::pods::{POD_WATCH_LABEL, WorkerPod};
use root::Root;
use testkit::ControlPlane;

/// The identity (and field manager) of the test operator.
pub const USER: &str = "dynamo-operator";

/// Poll `probe` until it yields, failing the test after `secs` seconds with `what` and the last
/// observation.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) => {
                assert!(
                    Instant::now() < deadline,
                    "timed out after {secs}s waiting for {what}; last: {last}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What an operator install provides: the CRDs (unless another test binary already installed
/// them: reinstalling the DGD CRD would replace another binary's conversion webhook while it
/// runs) and the ClusterRoles planner and EPP accounts are bound to.
pub async fn install_operator(cp: &ControlPlane) {
    let roles: Api<ClusterRole> = Api::all(cp.client());
    for name in [
        reconcilers::shared::DEFAULT_PLANNER_CLUSTER_ROLE,
        reconcilers::shared::DEFAULT_EPP_CLUSTER_ROLE,
    ] {
        let role = ClusterRole {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec!["nvidia.com".into()]),
                resources: Some(vec!["dynamographdeployments".into()]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..Default::default()
            }]),
            ..Default::default()
        };
        roles
            .patch(
                name,
                &kube::api::PatchParams::apply("testkit").force(),
                &kube::api::Patch::Apply(&role),
            )
            .await
            .expect("install ClusterRole");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    let mut wanted = Vec::new();
    for crd in api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if crds.get_opt(&name).await.expect("read CRDs").is_none() {
            wanted.push(crd);
        }
    }
    if !wanted.is_empty() {
        cp.install_crds(&wanted).await.expect("install CRDs");
    }
}

/// The conformance manifests: `(path, v1beta1 object)`. v1alpha1 manifests are converted
/// client-side with `api::conversion::to_v1beta1`, as the conversion webhook would before the
/// operator sees them (no webhook runs in these tests).
pub fn conformance() -> Vec<(PathBuf, DynamoGraphDeployment)> {
    let mut out = Vec::new();
    for version in ["v1beta1", "v1alpha1"] {
        for path in testkit::testdata::yaml_files(version) {
            out.push((path.clone(), load(&path)));
        }
    }
    out
}

/// Load a DGD manifest as v1beta1.
pub fn load(path: &Path) -> DynamoGraphDeployment {
    let text = std::fs::read_to_string(path).expect("manifest");
    let value: serde_json::Value = serde_yaml::from_str(&text).expect("manifest YAML");
    match value["apiVersion"].as_str() {
        Some("nvidia.com/v1alpha1") => {
            let alpha: api::v1alpha1::DynamoGraphDeployment =
                serde_json::from_value(value).expect("v1alpha1 manifest");
            api::conversion::to_v1beta1(&alpha)
        }
        _ => serde_json::from_value(value).expect("v1beta1 manifest"),
    }
}

/// The `vllm-agg` v1beta1 conformance manifest.
pub fn vllm_agg() -> DynamoGraphDeployment {
    conformance()
        .into_iter()
        .find(|(p, _)| p.ends_with("v1beta1/vllm-agg.yaml"))
        .expect("vllm-agg.yaml")
        .1
}

/// Create `dgd` in `ns` as admin.
pub async fn create(cp: &ControlPlane, ns: &str, dgd: &DynamoGraphDeployment) {
    let mut dgd = dgd.clone();
    dgd.metadata.namespace = Some(ns.to_string());
    Api::<DynamoGraphDeployment>::namespaced(cp.client(), ns)
        .create(&PostParams::default(), &dgd)
        .await
        .expect("create DGD");
}

/// `(status, reason, message)` of the graph's Ready condition.
pub async fn ready(
    api: &Api<DynamoGraphDeployment>,
    name: &str,
) -> Option<(String, String, String)> {
    let dgd = api.get_opt(name).await.ok().flatten()?;
    let status = dgd.status?;
    let c = conditions::find(&status.conditions, READY)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Wait until the graph is Ready=True at its current generation.
pub async fn wait_ready(
    api: &Api<DynamoGraphDeployment>,
    name: &str,
    secs: u64,
) -> DynamoGraphDeployment {
    eventually(&format!("{name} Ready"), secs, || async {
        let dgd = api.get(name).await.map_err(|e| e.to_string())?;
        let status = dgd.status.clone().unwrap_or_default();
        let ok = conditions::find(&status.conditions, READY).is_some_and(|c| {
            c.status == "True" && c.observed_generation == dgd.metadata.generation
        });
        if ok {
            Ok(dgd)
        } else {
            Err(format!("{:?}", serde_json::to_string(&status)))
        }
    })
    .await
}

/// Read-modify-replace `name`, retrying conflicts.
pub async fn edit(
    api: &Api<DynamoGraphDeployment>,
    name: &str,
    change: impl Fn(&mut DynamoGraphDeployment),
) {
    for _ in 0..20 {
        let mut dgd = api.get(name).await.expect("get DGD");
        change(&mut dgd);
        match api.replace(name, &PostParams::default(), &dgd).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("replace DGD: {e}"),
        }
    }
    panic!("replace DGD: too many conflicts");
}

struct DgdCtx {
    root: Root,
    reconciles: Arc<AtomicU64>,
}

struct DcdCtx {
    reconciler: DcdReconciler,
    reconciles: Arc<AtomicU64>,
}

/// The test operator for one namespace. Dropping it stops it.
pub struct Operator {
    /// DGD reconciles started so far.
    pub dgd_reconciles: Arc<AtomicU64>,
    /// DCD reconciles started so far.
    pub dcd_reconciles: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the operator is made of: the cache and the capabilities over it.
pub struct Parts {
    pub client: Client,
    pub cache: Cache,
    pub writer: Arc<KubeWriter>,
    pub status: Arc<KubeStatusWriter>,
    pub recorder: Recorder,
    pub root: Root,
    /// Worker pods are watched and wake the graph.
    pub pods: bool,
}

impl Parts {
    /// The cache (watches for the namespace's DGDs, DCDs, adapters, Deployments, Services) and
    /// the root over it, acting as [`USER`]. The cache is not running yet.
    pub fn new(cp: &ControlPlane, ns: &str) -> Parts {
        Parts::with_config(cp, ns, ComponentConfig::default())
    }

    /// As [`Parts::new`], with the component program's `config`; when it says worker pods are
    /// watched (`config.rollout.pods`), the cache watches them as the operator does and they
    /// wake the graph.
    pub fn with_config(cp: &ControlPlane, ns: &str, config: ComponentConfig) -> Parts {
        let client = cp.client_as(USER, &["system:masters"]);
        let cache = Cache::new(client.clone());
        let watched = watcher::Config::default;
        cache
            .watch(
                Api::<DynamoGraphDeployment>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(
                Api::<DynamoComponentDeployment>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(
                Api::<DynamoGraphDeploymentScalingAdapter>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(Api::<Deployment>::namespaced(client.clone(), ns), watched())
            .unwrap();
        cache
            .watch(Api::<Service>::namespaced(client.clone(), ns), watched())
            .unwrap();
        // What the shared resources read.
        cache
            .watch(
                Api::<ServiceAccount>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(Api::<Role>::namespaced(client.clone(), ns), watched())
            .unwrap();
        cache
            .watch(
                Api::<RoleBinding>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(Api::<ConfigMap>::namespaced(client.clone(), ns), watched())
            .unwrap();
        cache
            .watch(Api::<Secret>::namespaced(client.clone(), ns), watched())
            .unwrap();
        cache
            .watch(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(
                Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(
                Api::<DynamoCheckpoint>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        cache
            .watch(
                Api::<k8s_openapi::api::networking::v1::Ingress>::namespaced(client.clone(), ns),
                watched(),
            )
            .unwrap();
        // As the operator: InferencePools, VirtualServices and HTTPRoutes are watched while
        // served (nothing serves them here).
        let served = kit::served::Served::new();
        cache
            .watch_while_served(
                Api::<reconcilers::epp::InferencePool>::namespaced(client.clone(), ns),
                watched(),
                &served,
            )
            .unwrap();
        cache
            .watch_while_served(
                Api::<reconcilers::ingress::VirtualService>::namespaced(client.clone(), ns),
                watched(),
                &served,
            )
            .unwrap();
        cache
            .watch_while_served(
                Api::<reconcilers::ingress::HttpRoute>::namespaced(client.clone(), ns),
                watched(),
                &served,
            )
            .unwrap();
        let writer = Arc::new(KubeWriter::new(client.clone(), USER).with_cache(cache.clone()));
        let status =
            Arc::new(KubeStatusWriter::new(client.clone(), USER).with_cache(cache.clone()));
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: USER.into(),
                instance: None,
            },
        );
        let pods = config.rollout.pods;
        if pods {
            cache
                .watch(
                    Api::<WorkerPod>::namespaced(client.clone(), ns),
                    watched().labels(POD_WATCH_LABEL),
                )
                .unwrap();
        }
        let reader: Arc<dyn kit::Reader> = Arc::new(cache.clone());
        let program = ComponentProgram::new(reader.clone(), writer.clone(), config);
        // Nothing serves Grove here, so no graph selects it; the real program stands ready.
        let grove = grove_program::GroveProgram::new(
            reader.clone(),
            writer.clone(),
            grove_program::GroveConfig::default(),
        );
        let root = Root::new(
            reader,
            writer.clone(),
            Arc::new(program),
            Arc::new(grove),
            served,
        );
        Parts {
            client,
            cache,
            writer,
            status,
            recorder,
            root,
            pods,
        }
    }

    /// Run both controllers (and the cache) until the returned operator is dropped.
    pub fn run(self) -> Operator {
        let Parts {
            client: _,
            cache,
            writer,
            status,
            recorder,
            root,
            pods,
        } = self;
        let dgd_reconciles = Arc::new(AtomicU64::new(0));
        let dcd_reconciles = Arc::new(AtomicU64::new(0));
        let dgd_store = cache.store::<DynamoGraphDeployment>().unwrap();
        let dcd_store = cache.store::<DynamoComponentDeployment>().unwrap();
        let mut dgds = Controller::for_shared_stream(
            cache.subscribe::<DynamoGraphDeployment>().unwrap(),
            dgd_store,
        )
        .owns_shared_stream(cache.subscribe::<DynamoComponentDeployment>().unwrap())
        .owns_shared_stream(
            cache
                .subscribe::<DynamoGraphDeploymentScalingAdapter>()
                .unwrap(),
        );
        if pods {
            dgds = dgds.watches_shared_stream(cache.subscribe::<WorkerPod>().unwrap(), |pod| {
                let graph = pod
                    .labels()
                    .get(api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME)?;
                Some(ObjectRef::new(graph).within(&pod.namespace()?))
            });
        }
        let dcds = Controller::for_shared_stream(
            cache.subscribe::<DynamoComponentDeployment>().unwrap(),
            dcd_store,
        )
        .owns_shared_stream(cache.subscribe::<Deployment>().unwrap())
        .owns_shared_stream(cache.subscribe::<Service>().unwrap());
        let reader: Arc<dyn kit::Reader> = Arc::new(cache.clone());
        let dgd_ctx = Arc::new(DgdCtx {
            root,
            reconciles: dgd_reconciles.clone(),
        });
        let dcd_ctx = Arc::new(DcdCtx {
            reconciler: DcdReconciler::new(reader, writer),
            reconciles: dcd_reconciles.clone(),
        });
        let backoff = || ErrorBackoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let dgd_runner =
            Runner::new(dgds, status.clone(), Arc::new(recorder.clone())).backoff(backoff());
        let dcd_runner = Runner::new(dcds, status, Arc::new(recorder)).backoff(backoff());
        let watches = cache.run();
        let task = tokio::spawn(async move {
            let dgd_loop = dgd_runner.run(
                |dgd: Arc<DynamoGraphDeployment>, ctx: Arc<DgdCtx>| async move {
                    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
                    ctx.root.reconcile(dgd).await
                },
                dgd_ctx,
            );
            let dcd_loop = dcd_runner.run(
                |dcd: Arc<DynamoComponentDeployment>, ctx: Arc<DcdCtx>| async move {
                    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
                    ctx.reconciler.reconcile(&dcd).await
                },
                dcd_ctx,
            );
            tokio::select! {
                _ = watches => {}
                _ = futures::future::join(dgd_loop, dcd_loop) => {}
            }
        });
        Operator {
            dgd_reconciles,
            dcd_reconciles,
            task,
        }
    }
}

impl Operator {
    /// Start the operator for namespace `ns`.
    pub fn start(cp: &ControlPlane, ns: &str) -> Operator {
        Parts::new(cp, ns).run()
    }

    fn total(&self) -> u64 {
        self.dgd_reconciles.load(Ordering::SeqCst) + self.dcd_reconciles.load(Ordering::SeqCst)
    }

    /// Wait until no reconcile has started for `quiet`.
    pub async fn settle(&self, quiet: Duration) {
        let mut last = self.total();
        loop {
            tokio::time::sleep(quiet).await;
            let now = self.total();
            if now == last {
                return;
            }
            last = now;
        }
    }
}
