//! The checkpoint controller against a real control plane (kube-apiserver, controller-manager
//! with the Job and garbage-collection controllers, simulated nodes whose Job pods complete).
//!
//! Nothing sleeps: every wait is a watch (`await_condition`) with a deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::DynamoCheckpoint;
use api::checkpoint::DynamoCheckpointPhase as Phase;
use api::checkpoint_identity::identity_hash;
use checkpoint_controller::render::{CHECKPOINT_NAME_LABEL, job_name, record_name};
use checkpoint_controller::{CheckpointReconciler, FIELD_MANAGER, REBUILD_ANNOTATION};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::events::Reporter;
use kit::object::to_dynamic;
use kit::run::Runner;
use kit::{Reader, Selector};
use kube::api::{ApiResource, DynamicObject};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::SelectorExt;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testkit::{AuditEvent, ControlPlane};
use tokio::sync::oneshot;

/// The identity the controller runs as, so the audit log attributes its requests.
const CONTROLLER_USER: &str = "checkpoint-controller";
const DEADLINE: Duration = Duration::from_secs(90);

/// The conformance example, as published upstream.
fn conformance_checkpoint() -> DynamoCheckpoint {
    serde_yaml::from_str(&testkit::testdata::read("checkpoint/qwen3-vllm.yaml")).unwrap()
}

/// Reads served from the reflector stores whose streams also trigger the controller, so a
/// reconcile always sees at least the change that triggered it.
///
/// Not `kit::cache::Cache`: its shared streams (kube-runtime's shared reflector) broadcast applied
/// objects only, never deletions, and the deletion of an artifact record must trigger work; a
/// separate trigger watch next to the cache races with it (the trigger can arrive before the cache
/// has the change, and the reconcile then sees the old state and nothing triggers again).
struct Stores {
    jobs: Store<Job>,
    configmaps: Store<ConfigMap>,
}

fn get_from<K>(
    store: &Store<K>,
    namespace: Option<&str>,
    name: &str,
) -> kit::Result<Option<DynamicObject>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize + 'static,
{
    let key = ObjectRef::<K>::new(name).within(namespace.unwrap_or_default());
    store.get(&key).map(|o| to_dynamic(o.as_ref())).transpose()
}

fn list_from<K>(
    store: &Store<K>,
    namespace: Option<&str>,
    selector: &Selector,
) -> kit::Result<Vec<DynamicObject>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize + 'static,
{
    store
        .state()
        .iter()
        .filter(|o| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
        .filter(|o| selector.matches(o.labels()))
        .map(|o| to_dynamic(o.as_ref()))
        .collect()
}

#[async_trait::async_trait]
impl Reader for Stores {
    async fn get_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> kit::Result<Option<DynamicObject>> {
        match resource.kind.as_str() {
            "Job" => get_from(&self.jobs, namespace, name),
            "ConfigMap" => get_from(&self.configmaps, namespace, name),
            kind => Err(kit::Error::Unsupported(format!("{kind} is not watched"))),
        }
    }

    async fn list_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> kit::Result<Vec<DynamicObject>> {
        match resource.kind.as_str() {
            "Job" => list_from(&self.jobs, namespace, selector),
            "ConfigMap" => list_from(&self.configmaps, namespace, selector),
            kind => Err(kit::Error::Unsupported(format!("{kind} is not watched"))),
        }
    }
}

/// Run the controller for namespace `ns` until the returned sender is dropped: the watches of
/// `WATCHES` (the children label-selected), one queue, the kit run loop.
fn start(client: Client, ns: &str) -> oneshot::Sender<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (stop, stopped) = oneshot::channel::<()>();
    let selected = || watcher::Config::default().labels(CHECKPOINT_NAME_LABEL);
    let (checkpoints, checkpoints_writer) = reflector::store::<DynamoCheckpoint>();
    let (jobs, jobs_writer) = reflector::store::<Job>();
    let (configmaps, configmaps_writer) = reflector::store::<ConfigMap>();
    let stream = |api, config, writer| {
        reflector(writer, watcher(api, config))
            .default_backoff()
            .touched_objects()
    };
    let controller = Controller::for_stream(
        stream(
            Api::<DynamoCheckpoint>::namespaced(client.clone(), ns),
            watcher::Config::default(),
            checkpoints_writer,
        ),
        checkpoints,
    )
    .owns_stream(
        reflector(
            jobs_writer,
            watcher(Api::<Job>::namespaced(client.clone(), ns), selected()),
        )
        .default_backoff()
        .touched_objects(),
    )
    .watches_stream(
        reflector(
            configmaps_writer,
            watcher(Api::<ConfigMap>::namespaced(client.clone(), ns), selected()),
        )
        .default_backoff()
        .touched_objects(),
        |cm| {
            cm.labels()
                .get(CHECKPOINT_NAME_LABEL)
                .map(|name| ObjectRef::new(name).within(&cm.namespace().unwrap_or_default()))
        },
    )
    .graceful_shutdown_on(async move {
        let _ = stopped.await;
    });
    let reconciler = Arc::new(CheckpointReconciler::new(
        Arc::new(Stores { jobs, configmaps }),
        Arc::new(KubeWriter::new(client.clone(), FIELD_MANAGER)),
    ));
    let status = Arc::new(KubeStatusWriter::new(client.clone(), FIELD_MANAGER));
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "dynamo-operator".into(),
            instance: None,
        },
    );
    let runner = Runner::new(controller, status, Arc::new(recorder));
    tokio::spawn(runner.run(
        |ckpt: Arc<DynamoCheckpoint>, r: Arc<CheckpointReconciler>| async move {
            r.reconcile(&ckpt).await
        },
        reconciler,
    ));
    stop
}

/// Wait (on a watch) until `name` satisfies `condition`.
async fn until<K>(api: &Api<K>, name: &str, what: &str, condition: impl Condition<K>) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, condition)).await {
        Ok(result) => result.unwrap_or_else(|e| panic!("watch failed waiting for {what}: {e}")),
        Err(_) => {
            let ns = api.namespace().unwrap_or_default().to_string();
            let dump = dump(api.clone().into_client(), &ns).await;
            panic!("timed out waiting for {what}; namespace {ns}:\n{dump}")
        }
    }
}

/// The Jobs, Pods and checkpoints of `ns`, for a failure message.
async fn dump(client: Client, ns: &str) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let mut out = String::new();
    let lp = ListParams::default();
    for c in Api::<DynamoCheckpoint>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        out += &format!(
            "checkpoint {} annotations={:?} status={}\n",
            c.name_any(),
            c.metadata.annotations,
            serde_json::to_string(&c.status).unwrap_or_default()
        );
    }
    for j in Api::<Job>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        out += &format!(
            "job {} uid={:?} deleting={} status={}\n",
            j.name_any(),
            j.uid(),
            j.metadata.deletion_timestamp.is_some(),
            serde_json::to_string(&j.status).unwrap_or_default()
        );
    }
    for p in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let st = p.status.clone().unwrap_or_default();
        out += &format!(
            "pod {} owner={:?} node={:?} phase={:?} deleting={} finalizers={:?} conditions={:?}\n",
            p.name_any(),
            p.owner_references().first().map(|o| o.name.clone()),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            st.phase,
            p.metadata.deletion_timestamp.is_some(),
            p.metadata.finalizers,
            st.conditions
                .unwrap_or_default()
                .iter()
                .map(|c| (c.type_.clone(), c.status.clone()))
                .collect::<Vec<_>>()
        );
    }
    for cm in Api::<ConfigMap>::namespaced(client, ns)
        .list(&ListParams::default().labels(CHECKPOINT_NAME_LABEL))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        out += &format!(
            "configmap {} annotations={:?}\n",
            cm.name_any(),
            cm.metadata.annotations
        );
    }
    out
}

fn ready_at(attempt: i64) -> impl Condition<DynamoCheckpoint> {
    move |c: Option<&DynamoCheckpoint>| {
        c.and_then(|c| c.status.as_ref())
            .is_some_and(|s| s.phase == Some(Phase::Ready) && s.attempt == Some(attempt))
    }
}

fn exists<K>() -> impl Condition<K> {
    |o: Option<&K>| o.is_some()
}

/// The controller's requests of `verb` on `resource` in `ns` since `mark`.
fn requests<'a>(
    events: &'a [AuditEvent],
    ns: &'a str,
    verb: &'a str,
    resource: &'a str,
) -> Vec<&'a AuditEvent> {
    events
        .iter()
        .filter(|e| {
            e.user == CONTROLLER_USER
                && e.namespace == ns
                && e.verb == verb
                && e.resource == resource
                && e.subresource.is_empty()
                && (200..300).contains(&e.code)
        })
        .collect()
}

async fn with_deadline<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_ready_rebuild_once_and_recapture_a_lost_artifact() {
    let cp = ControlPlane::shared().await;
    assert!(
        cp.simulates_nodes(),
        "needs simulated nodes so Job pods complete"
    );
    let crds: Vec<_> = api::crds()
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() == Some("dynamocheckpoints.nvidia.com"))
        .collect();
    cp.install_crds(&crds).await.unwrap();
    let ns = cp.namespace().await;
    let ns = ns.name().to_string();
    let admin = cp.client();
    let _stop = start(cp.client_as(CONTROLLER_USER, &["system:masters"]), &ns);

    let checkpoints: Api<DynamoCheckpoint> = Api::namespaced(admin.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);

    // Create the upstream example: attempt 1's Job appears, its pod completes, Ready.
    let mark = cp.audit().mark();
    let manifest = conformance_checkpoint();
    let name = manifest.name_any();
    let hash = identity_hash(&manifest.spec.identity);
    checkpoints
        .create(&PostParams::default(), &manifest)
        .await
        .unwrap();
    let job1 = until(&jobs, &job_name(&hash, 1), "attempt 1's Job", exists())
        .await
        .unwrap();
    assert_eq!(job1.owner_references()[0].name, name);
    let ckpt = until(&checkpoints, &name, "Ready at attempt 1", ready_at(1))
        .await
        .unwrap();
    let status = ckpt.status.unwrap();
    assert_eq!(status.identity_hash.as_deref(), Some(hash.as_str()));
    assert_eq!(status.job_name, Some(job_name(&hash, 1)));
    assert_eq!(status.location, Some(format!("/checkpoints/{hash}")));
    let record1 = configmaps.get(&record_name(&hash)).await.unwrap();
    assert_eq!(
        record1.data.as_ref().unwrap()["jobUID"],
        job1.uid().unwrap()
    );
    let log = cp.audit().since(&mark).await;
    assert_eq!(
        requests(&log, &ns, "create", "jobs").len(),
        1,
        "one Job for one checkpoint"
    );

    // Request a rebuild: exactly one new Job, the old one deleted, the same checkpoint.
    let mark = cp.audit().mark();
    let token = "rebuild-1";
    checkpoints
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REBUILD_ANNOTATION: token}}})),
        )
        .await
        .unwrap();
    let ckpt = until(&checkpoints, &name, "Ready at attempt 2", ready_at(2))
        .await
        .unwrap();
    assert_eq!(ckpt.uid(), checkpoints.get(&name).await.unwrap().uid());
    assert_eq!(
        ckpt.status
            .as_ref()
            .unwrap()
            .observed_rebuild_token
            .as_deref(),
        Some(token)
    );
    until(
        &jobs,
        &job_name(&hash, 1),
        "attempt 1's Job to be deleted",
        conditions::is_deleted(&job1.uid().unwrap()),
    )
    .await;
    let log = cp.audit().since(&mark).await;
    assert_eq!(
        requests(&log, &ns, "create", "jobs").len(),
        1,
        "exactly one new Job"
    );
    assert_eq!(requests(&log, &ns, "delete", "jobs").len(), 1);
    let listed = jobs
        .list(&ListParams::default().labels(CHECKPOINT_NAME_LABEL))
        .await
        .unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|j| j.name_any())
            .collect::<Vec<_>>(),
        [job_name(&hash, 2)]
    );
    let record2 = configmaps.get(&record_name(&hash)).await.unwrap();
    assert_ne!(
        record2.uid(),
        record1.uid(),
        "the old artifact record went with the old attempt"
    );

    // Remove the artifact: captured again.
    let mark = cp.audit().mark();
    configmaps
        .delete(&record_name(&hash), &DeleteParams::default())
        .await
        .unwrap();
    until(&checkpoints, &name, "Ready at attempt 3", ready_at(3)).await;
    let record3 = until(
        &configmaps,
        &record_name(&hash),
        "the new artifact record",
        exists(),
    )
    .await
    .unwrap();
    assert_eq!(record3.annotations()["nvidia.com/checkpoint-attempt"], "3");
    let log = cp.audit().since(&mark).await;
    assert_eq!(
        requests(&log, &ns, "create", "jobs").len(),
        1,
        "one Job per lost artifact"
    );

    // The events the controller published, in the order of the story.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin, &ns);
    let reasons = with_deadline("events", async {
        let mut reasons: Vec<String> = Vec::new();
        let mut stream =
            std::pin::pin!(watcher(events.clone(), watcher::Config::default()).applied_objects());
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            if event.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name.as_str()) {
                continue;
            }
            reasons.extend(event.reason.clone());
            if reasons.iter().any(|r| r == "CheckpointArtifactMissing")
                && reasons.iter().filter(|r| *r == "CheckpointReady").count() >= 1
            {
                break;
            }
        }
        reasons
    })
    .await;
    for expected in [
        "CheckpointJobCreated",
        "CheckpointReady",
        "CheckpointRebuild",
        "CheckpointArtifactMissing",
    ] {
        assert!(
            reasons.iter().any(|r| r == expected),
            "{expected} not in {reasons:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_fails_without_a_job() {
    let cp = ControlPlane::shared().await;
    let crds: Vec<_> = api::crds()
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() == Some("dynamocheckpoints.nvidia.com"))
        .collect();
    cp.install_crds(&crds).await.unwrap();
    let ns = cp.namespace().await;
    let ns = ns.name().to_string();
    let _stop = start(cp.client_as(CONTROLLER_USER, &["system:masters"]), &ns);
    let checkpoints: Api<DynamoCheckpoint> = Api::namespaced(cp.client(), &ns);
    let mut manifest = conformance_checkpoint();
    manifest.metadata.name = Some("invalid".into());
    manifest
        .spec
        .capture
        .as_mut()
        .unwrap()
        .target_container_name = Some("absent".into());
    checkpoints
        .create(&PostParams::default(), &manifest)
        .await
        .unwrap();
    let ckpt = until(
        &checkpoints,
        "invalid",
        "Failed",
        |c: Option<&DynamoCheckpoint>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.phase == Some(Phase::Failed))
        },
    )
    .await
    .unwrap();
    let status = ckpt.status.unwrap();
    let ready = kit::conditions::find(&status.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidSpec")
    );
    let jobs: Api<Job> = Api::namespaced(cp.client(), &ns);
    assert!(
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_checkpoint_of_the_same_name_gets_its_own_job() {
    let cp = ControlPlane::shared().await;
    let crds: Vec<_> = api::crds()
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() == Some("dynamocheckpoints.nvidia.com"))
        .collect();
    cp.install_crds(&crds).await.unwrap();
    let ns = cp.namespace().await;
    let ns = ns.name().to_string();
    let _stop = start(cp.client_as(CONTROLLER_USER, &["system:masters"]), &ns);
    let checkpoints: Api<DynamoCheckpoint> = Api::namespaced(cp.client(), &ns);
    let jobs: Api<Job> = Api::namespaced(cp.client(), &ns);
    let manifest = conformance_checkpoint();
    let name = manifest.name_any();
    let hash = identity_hash(&manifest.spec.identity);
    let first = checkpoints
        .create(&PostParams::default(), &manifest)
        .await
        .unwrap();
    until(&checkpoints, &name, "Ready", ready_at(1)).await;
    let old_job = jobs.get(&job_name(&hash, 1)).await.unwrap();
    // Delete and recreate at once: the old Job is garbage-collected; the new incarnation must not
    // adopt it, and gets a Job of its own under the same name.
    checkpoints
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    until(
        &checkpoints,
        &name,
        "the checkpoint to be deleted",
        conditions::is_deleted(&first.uid().unwrap()),
    )
    .await;
    let second = checkpoints
        .create(&PostParams::default(), &manifest)
        .await
        .unwrap();
    let ckpt = until(&checkpoints, &name, "Ready again", ready_at(1))
        .await
        .unwrap();
    let job = jobs.get(&job_name(&hash, 1)).await.unwrap();
    assert_ne!(job.uid(), old_job.uid());
    assert_eq!(job.owner_references()[0].uid, second.uid().unwrap());
    assert_eq!(ckpt.uid(), second.uid());
}
