//! Checkpoints of components with `experimental.checkpoint.enabled`: which DynamoCheckpoint each
//! one restores from, and the automatic checkpoints the graph asks for.
//!
//! Per component, in spec order:
//! - `checkpointRef: <name>`: that DynamoCheckpoint in the graph's namespace; missing is an
//!   error (retried: it may be created later).
//! - `mode: Manual` without a reference: the checkpoint the user created for `identity`, looked
//!   up by identity hash; none yet is not an error (`exists: false`).
//! - otherwise (automatic, upstream's default without a reference): the DynamoCheckpoint for the
//!   component's identity hash is looked up and, when there is none, **created** as
//!   `checkpoint-<hash>` with the capture pod template derived from the component. An existing
//!   checkpoint is reused as it is, never updated. The identity is the component's legacy
//!   `identity` when given (portable across graphs), else one scoped to this graph and worker
//!   generation: model `<namespace>/<dgd>`, the graph's backend framework, and extra parameters
//!   `dgdUID`, `component` and, for worker components, `workerHash`.
//!
//! This step never creates Jobs: capturing is the checkpoint controller's business. It returns
//! [`Resolved`]: a [`CheckpointInfo`] per component for workload rendering, and the
//! `status.checkpoints` entries, which go into the graph's status even when a later step fails.
//!
//! Automatic checkpoints carry labels `nvidia.com/dynamo-graph-deployment-name`,
//! `nvidia.com/dynamo-component` and [`CHECKPOINT_HASH_LABEL`], the annotations
//! `nvidia.com/dynamo-auto-checkpoint: "true"` and `nvidia.com/dynamo-checkpoint-deletion-policy`,
//! and, with deletion policy `Delete` (the default), a controller reference to the graph so they
//! go with it; `Retain` checkpoints have no owner.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::checkpoint::DynamoCheckpointJobConfig;
use api::checkpoint::DynamoCheckpointPhase;
use api::checkpoint_identity::identity_hash;
use api::common::{CheckpointMode, ComponentCheckpointStatus, DynamoCheckpointIdentity};
use api::labels;
use api::v1beta1::{
    CheckpointDeletionPolicy, CheckpointStartupPolicy, ComponentCheckpointConfig,
    DynamoComponentDeploymentSharedSpec, MAIN_CONTAINER_NAME,
};
use api::{DynamoCheckpoint, DynamoCheckpointSpec, DynamoGraphDeployment};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Event, Reader, ReaderExt, Selector, Writer};
use kube::ResourceExt;
use serde_json::Value;

use crate::child;
use crate::discovery::{DiscoveryBackend, kubernetes_discovery_enabled};
use crate::error::{Error, Result};
use crate::naming;
use crate::rollout;
use pod_render::Backend;

/// Label with the identity hash of a checkpoint.
pub const CHECKPOINT_HASH_LABEL: &str = "nvidia.com/snapshot-checkpoint-hash";

/// What workload rendering needs to know about one component's checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Checkpointing is enabled for the component (always true for resolved entries).
    pub enabled: bool,
    /// A DynamoCheckpoint exists for it.
    pub exists: bool,
    /// The checkpoint artifact is ready: new pods may restore from it.
    pub ready: bool,
    /// Name of the DynamoCheckpoint (known before it exists for automatic checkpoints).
    pub checkpoint_name: Option<String>,
    /// Identity hash of the checkpoint.
    pub identity_hash: Option<String>,
    /// Artifact id the checkpoint controller reported.
    pub checkpoint_id: Option<String>,
    /// Whether worker pods start before the checkpoint is ready.
    pub startup_policy: CheckpointStartupPolicy,
    /// The graph manages this checkpoint (automatic mode).
    pub automatic: bool,
    /// Container that is snapshotted and restored.
    pub target_container: String,
}

impl CheckpointInfo {
    /// The `status.checkpoints` entry of this component.
    pub fn status(&self) -> ComponentCheckpointStatus {
        ComponentCheckpointStatus {
            checkpoint_name: self.checkpoint_name.clone(),
            checkpoint_id: self.checkpoint_id.clone(),
            identity_hash: self.identity_hash.clone(),
            ready: self.ready,
        }
    }
}

/// Checkpoint infos by component name.
pub type CheckpointInfos = BTreeMap<String, CheckpointInfo>;

/// The result of the checkpoint step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// Per component, for workload rendering.
    pub infos: CheckpointInfos,
    /// Per component, for `status.checkpoints`.
    pub statuses: BTreeMap<String, ComponentCheckpointStatus>,
}

/// Operator settings the checkpoint step needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Checkpointing is enabled in this operator; a component asking for it fails otherwise.
    pub enabled: bool,
    /// Default discovery backend (capture pods use the discovery ServiceAccount when it is
    /// Kubernetes).
    pub discovery: DiscoveryBackend,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            discovery: DiscoveryBackend::default(),
        }
    }
}

/// Resolves component checkpoints and creates automatic ones.
pub struct CheckpointReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    config: CheckpointConfig,
}

impl CheckpointReconciler {
    /// A reconciler reading through `reader` and creating through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: CheckpointConfig) -> Self {
        Self {
            reader,
            writer,
            config,
        }
    }

    /// Resolve every checkpoint-enabled component of `dgd`.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
    ) -> Result<Resolved> {
        let mut resolved = Resolved::default();
        let mut checkpoints: Option<Vec<DynamoCheckpoint>> = None;
        for component in &dgd.spec.components {
            let Some(cfg) = component
                .experimental
                .as_ref()
                .and_then(|e| e.checkpoint.as_ref())
                .filter(|c| c.enabled)
            else {
                continue;
            };
            if !self.config.enabled {
                return Err(Error::Config(format!(
                    "component {}: checkpoint functionality is disabled in the operator configuration",
                    component.name
                )));
            }
            let info = match cfg
                .checkpoint_ref
                .as_deref()
                .map(str::trim)
                .filter(|r| !r.is_empty())
            {
                Some(reference) => self.referenced(dgd, component, cfg, reference).await?,
                None => {
                    if checkpoints.is_none() {
                        checkpoints = Some(self.list(dgd).await?);
                    }
                    let known = checkpoints.as_deref().unwrap_or_default();
                    if cfg.mode == Some(CheckpointMode::Manual) {
                        manual(component, cfg, known)?
                    } else {
                        self.automatic(dgd, component, cfg, known, events).await?
                    }
                }
            };
            resolved
                .statuses
                .insert(component.name.clone(), info.status());
            resolved.infos.insert(component.name.clone(), info);
        }
        Ok(resolved)
    }

    async fn referenced(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
        cfg: &ComponentCheckpointConfig,
        reference: &str,
    ) -> Result<CheckpointInfo> {
        let ns = dgd.namespace();
        let found: Option<DynamoCheckpoint> = self
            .reader
            .get(ns.as_deref(), reference)
            .await
            .map_err(Error::api(format!(
                "get DynamoCheckpoint {}",
                kit::object::key(ns.as_deref(), reference)
            )))?;
        let ckpt = found.ok_or_else(|| {
            Error::Missing(format!(
                "component {}: referenced checkpoint {reference:?} not found",
                component.name
            ))
        })?;
        Ok(from_checkpoint(&ckpt, cfg, false))
    }

    async fn list(&self, dgd: &DynamoGraphDeployment) -> Result<Vec<DynamoCheckpoint>> {
        let ns = dgd.namespace();
        self.reader
            .list(ns.as_deref(), &Selector::default())
            .await
            .map_err(Error::api(format!(
                "list DynamoCheckpoint in {}",
                ns.unwrap_or_default()
            )))
    }

    async fn automatic(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
        cfg: &ComponentCheckpointConfig,
        known: &[DynamoCheckpoint],
        events: &mut Vec<Event>,
    ) -> Result<CheckpointInfo> {
        let identity = automatic_identity(dgd, component, cfg)?;
        let hash = identity_hash(&identity);
        if let Some(existing) = find_by_hash(known, &hash)? {
            return Ok(from_checkpoint(existing, cfg, true));
        }
        let desired = render(dgd, component, cfg, identity, &hash, self.config.discovery)?;
        let (ckpt, created) = child::create_once(&*self.reader, &*self.writer, &desired).await?;
        let existing_hash = checkpoint_hash(&ckpt);
        if existing_hash != hash {
            return Err(Error::Missing(format!(
                "checkpoint {} already exists with identity hash {existing_hash}, expected {hash}",
                ckpt.name_any()
            )));
        }
        if created {
            child::record(
                events,
                child::Ensured::Created,
                "DynamoCheckpoint",
                ckpt.namespace().as_deref(),
                &ckpt.name_any(),
            );
        }
        Ok(from_checkpoint(&ckpt, cfg, true))
    }
}

/// A manual checkpoint: the user's, found by identity hash, or not there yet.
fn manual(
    component: &DynamoComponentDeploymentSharedSpec,
    cfg: &ComponentCheckpointConfig,
    known: &[DynamoCheckpoint],
) -> Result<CheckpointInfo> {
    let identity = cfg.identity.as_ref().ok_or_else(|| {
        Error::InvalidSpec(format!(
            "component {}: checkpoint mode Manual needs checkpointRef or identity",
            component.name
        ))
    })?;
    let hash = identity_hash(identity);
    Ok(match find_by_hash(known, &hash)? {
        Some(ckpt) => from_checkpoint(ckpt, cfg, false),
        None => CheckpointInfo {
            enabled: true,
            exists: false,
            ready: false,
            checkpoint_name: None,
            identity_hash: Some(hash),
            checkpoint_id: None,
            startup_policy: startup_policy(cfg),
            automatic: false,
            target_container: target_container(cfg),
        },
    })
}

fn startup_policy(cfg: &ComponentCheckpointConfig) -> CheckpointStartupPolicy {
    cfg.startup_policy
        .unwrap_or(CheckpointStartupPolicy::Immediate)
}

fn target_container(cfg: &ComponentCheckpointConfig) -> String {
    cfg.target_container_name
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| MAIN_CONTAINER_NAME.to_string())
}

/// The identity hash of an existing checkpoint: its status, else its label, else computed.
fn checkpoint_hash(ckpt: &DynamoCheckpoint) -> String {
    ckpt.status
        .as_ref()
        .and_then(|s| s.identity_hash.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| ckpt.labels().get(CHECKPOINT_HASH_LABEL).cloned())
        .unwrap_or_else(|| identity_hash(&ckpt.spec.identity))
}

fn find_by_hash<'a>(
    known: &'a [DynamoCheckpoint],
    hash: &str,
) -> Result<Option<&'a DynamoCheckpoint>> {
    let mut found = known.iter().filter(|c| checkpoint_hash(c) == hash);
    let first = found.next();
    if found.next().is_some() {
        return Err(Error::Missing(format!(
            "multiple checkpoints found for identity hash {hash}"
        )));
    }
    Ok(first)
}

fn from_checkpoint(
    ckpt: &DynamoCheckpoint,
    cfg: &ComponentCheckpointConfig,
    automatic: bool,
) -> CheckpointInfo {
    let status = ckpt.status.as_ref();
    CheckpointInfo {
        enabled: true,
        exists: true,
        ready: status.and_then(|s| s.phase) == Some(DynamoCheckpointPhase::Ready),
        checkpoint_name: Some(ckpt.name_any()),
        identity_hash: Some(checkpoint_hash(ckpt)),
        checkpoint_id: status.and_then(|s| s.checkpoint_id.clone()),
        startup_policy: startup_policy(cfg),
        automatic,
        target_container: target_container(cfg),
    }
}

/// The identity of a component's automatic checkpoint (see the module docs).
pub fn automatic_identity(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    cfg: &ComponentCheckpointConfig,
) -> Result<DynamoCheckpointIdentity> {
    if let Some(identity) = &cfg.identity {
        return Ok(identity.clone());
    }
    // The graph's backendFramework, else the backend the worker's command runs (upstream's
    // detection, shared with the pod renderer).
    let backend = Backend::detect(component, dgd.spec.backend_framework)
        .map_err(|message| {
            Error::InvalidSpec(format!(
                "spec.components[{}]: {message}",
                component.name
            ))
        })?
        .framework()
        .ok_or_else(|| {
            Error::InvalidSpec(format!(
                "checkpoint backend framework for component {} could not be determined; set spec.backendFramework",
                component.name
            ))
        })?;
    let mut extra = BTreeMap::from([
        ("dgdUID".to_string(), dgd.uid().unwrap_or_default()),
        ("component".to_string(), component.name.clone()),
    ]);
    if naming::is_worker(component.r#type) {
        extra.insert("workerHash".into(), rollout::worker_hash(dgd));
    }
    Ok(DynamoCheckpointIdentity {
        model: format!("{}/{}", dgd.namespace().unwrap_or_default(), dgd.name_any()),
        backend_framework: backend,
        extra_parameters: extra,
        ..Default::default()
    })
}

/// The automatic DynamoCheckpoint of `component` for `identity` (hash `hash`).
pub fn render(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    cfg: &ComponentCheckpointConfig,
    identity: DynamoCheckpointIdentity,
    hash: &str,
    discovery: DiscoveryBackend,
) -> Result<DynamoCheckpoint> {
    let dgd_name = dgd.name_any();
    let policy = cfg
        .deletion_policy
        .unwrap_or(CheckpointDeletionPolicy::Delete);
    let mut object_labels = naming::graph_labels(&dgd_name);
    object_labels.insert(labels::DYNAMO_COMPONENT.into(), component.name.clone());
    object_labels.insert(CHECKPOINT_HASH_LABEL.into(), hash.to_string());
    let annotations = BTreeMap::from([
        (
            labels::DYNAMO_AUTO_CHECKPOINT.to_string(),
            "true".to_string(),
        ),
        (
            labels::CHECKPOINT_DELETION_POLICY.to_string(),
            match policy {
                CheckpointDeletionPolicy::Delete => "Delete",
                CheckpointDeletionPolicy::Retain => "Retain",
            }
            .to_string(),
        ),
    ]);
    let owner_references = match policy {
        CheckpointDeletionPolicy::Delete => Some(vec![child::owner_reference(dgd)?]),
        CheckpointDeletionPolicy::Retain => None,
    };
    let mut template = capture_template(component, cfg)?;
    let template_labels = template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    template_labels.insert(
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.into(),
        dgd_name.clone(),
    );
    template_labels.insert(labels::DYNAMO_COMPONENT.into(), component.name.clone());
    if naming::is_worker(component.r#type) {
        template_labels.insert(labels::DYNAMO_WORKER_HASH.into(), rollout::worker_hash(dgd));
    }
    let spec = template.spec.get_or_insert_with(Default::default);
    spec.restart_policy = Some("Never".into());
    if kubernetes_discovery_enabled(discovery, dgd) && spec.service_account_name.is_none() {
        spec.service_account_name = Some(naming::discovery_service_account(&dgd_name));
    }
    Ok(DynamoCheckpoint {
        metadata: ObjectMeta {
            name: Some(naming::auto_checkpoint_name(hash)),
            namespace: dgd.namespace(),
            labels: Some(object_labels),
            annotations: Some(annotations),
            owner_references,
            ..Default::default()
        },
        spec: DynamoCheckpointSpec {
            identity,
            gpu_memory_service: None,
            job: Some(DynamoCheckpointJobConfig {
                pod_template_spec: template,
                target_container_name: Some(target_container(cfg)),
                ..Default::default()
            }),
            capture: None,
        },
        status: None,
    })
}

/// The capture pod: the component's pod template with `checkpoint.job.podTemplate` merged over
/// it (JSON merge patch: objects merge, lists and scalars replace).
fn capture_template(
    component: &DynamoComponentDeploymentSharedSpec,
    cfg: &ComponentCheckpointConfig,
) -> Result<PodTemplateSpec> {
    let base = component.pod_template.clone().unwrap_or_default();
    let Some(overlay) = cfg.job.as_ref().and_then(|j| j.pod_template.as_ref()) else {
        return Ok(base);
    };
    let invalid = |e: serde_json::Error| {
        Error::InvalidSpec(format!(
            "component {}: checkpoint.job.podTemplate cannot be merged: {e}",
            component.name
        ))
    };
    let mut merged = serde_json::to_value(&base).map_err(invalid)?;
    merge_patch(
        &mut merged,
        &serde_json::to_value(overlay).map_err(invalid)?,
    );
    serde_json::from_value(merged).map_err(invalid)
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::checkpoint::DynamoCheckpointStatus;
    use api::v1beta1::{ComponentCheckpointJobConfig, ExperimentalSpec};
    use api::{BackendFramework, ComponentType};
    use kit::testing::{Double, Verb};

    fn with_checkpoint(
        mut c: DynamoComponentDeploymentSharedSpec,
        cfg: ComponentCheckpointConfig,
    ) -> DynamoComponentDeploymentSharedSpec {
        c.experimental = Some(ExperimentalSpec {
            checkpoint: Some(cfg),
            ..Default::default()
        });
        c
    }

    fn enabled() -> ComponentCheckpointConfig {
        ComponentCheckpointConfig {
            enabled: true,
            ..Default::default()
        }
    }

    fn graph(
        d: &Double,
        components: Vec<DynamoComponentDeploymentSharedSpec>,
    ) -> DynamoGraphDeployment {
        let mut g = dgd("g", components);
        g.spec.backend_framework = Some(BackendFramework::Vllm);
        d.insert(g)
    }

    fn reconciler(d: &Double) -> CheckpointReconciler {
        CheckpointReconciler::new(d.reader(), d.writer(), CheckpointConfig::default())
    }

    /// The checkpoint identity's backend: the graph's `backendFramework`, else what the
    /// worker's command runs; a command naming another backend than the graph's is refused.
    #[test]
    fn identity_backend_from_the_graph_or_the_command() {
        let with_command = |command: &[&str]| {
            let mut c = component("w", ComponentType::Worker);
            let main = c.main_container_mut().unwrap();
            main.command = Some(command.iter().map(|s| s.to_string()).collect());
            c
        };
        // (case, graph backendFramework, worker command, identity backend or error text)
        type Row = (
            &'static str,
            Option<BackendFramework>,
            &'static [&'static str],
            Result<BackendFramework, &'static str>,
        );
        let cases: [Row; 5] = [
            (
                "graph only",
                Some(BackendFramework::Sglang),
                &[],
                Ok(BackendFramework::Sglang),
            ),
            (
                "command only",
                None,
                &["python3", "-m", "dynamo.vllm"],
                Ok(BackendFramework::Vllm),
            ),
            (
                "shell command",
                None,
                &["/bin/sh", "-c", "python3 -m dynamo.trtllm --x"],
                Ok(BackendFramework::Trtllm),
            ),
            ("neither", None, &["sleep"], Err("could not be determined")),
            (
                "mismatch",
                Some(BackendFramework::Sglang),
                &["python3", "-m", "dynamo.vllm"],
                Err("mismatch"),
            ),
        ];
        for (name, graph_backend, command, want) in cases {
            let c = with_checkpoint(with_command(command), enabled());
            let mut g = dgd("g", vec![c.clone()]);
            g.spec.backend_framework = graph_backend;
            let cfg = enabled();
            let got = automatic_identity(&g, &c, &cfg).map(|i| i.backend_framework);
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), Err(needle)) => {
                    assert!(e.awaits_change(), "{name}: {e}");
                    assert!(e.to_string().contains(needle), "{name}: {e}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[tokio::test]
    async fn automatic_checkpoint_created_once_then_reused() {
        let d = Double::new();
        let mut cfg = enabled();
        cfg.startup_policy = Some(CheckpointStartupPolicy::WaitForCheckpoint);
        cfg.job = Some(ComponentCheckpointJobConfig {
            pod_template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: Some(BTreeMap::from([("capture".into(), "yes".into())])),
                    ..Default::default()
                }),
                spec: None,
            }),
            ..Default::default()
        });
        let g = graph(
            &d,
            vec![with_checkpoint(
                component("Decode", ComponentType::Decode),
                cfg,
            )],
        );
        let r = reconciler(&d);
        let mut events = Vec::new();
        let resolved = r.reconcile(&g, &mut events).await.unwrap();
        assert_eq!(reasons(&events), ["DynamoCheckpointCreated"]);
        let info = &resolved.infos["Decode"];
        let name = info.checkpoint_name.clone().unwrap();
        assert_eq!(
            name,
            format!("checkpoint-{}", info.identity_hash.as_deref().unwrap())
        );
        assert!(info.exists && !info.ready && info.automatic);
        assert_eq!(
            info.startup_policy,
            CheckpointStartupPolicy::WaitForCheckpoint
        );
        assert_eq!(
            resolved.statuses["Decode"].checkpoint_name.as_deref(),
            Some(name.as_str())
        );

        let ckpt: DynamoCheckpoint = d.object(Some("ns"), &name).unwrap();
        assert!(child::is_controlled_by(&ckpt.metadata, &g));
        assert_eq!(ckpt.annotations()[labels::DYNAMO_AUTO_CHECKPOINT], "true");
        let job = ckpt.spec.job.as_ref().unwrap();
        let template = &job.pod_template_spec;
        let meta = template.metadata.as_ref().unwrap();
        assert_eq!(meta.annotations.as_ref().unwrap()["capture"], "yes");
        assert_eq!(
            meta.labels.as_ref().unwrap()[labels::DYNAMO_COMPONENT],
            "Decode"
        );
        let spec = template.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("g-k8s-service-discovery")
        );
        assert_eq!(spec.containers[0].name, "main");
        assert_eq!(
            ckpt.spec.identity.extra_parameters["workerHash"],
            rollout::worker_hash(&g)
        );

        d.clear_writes();
        let mut events = Vec::new();
        let again = r.reconcile(&g, &mut events).await.unwrap();
        assert!(d.writes().is_empty());
        assert!(events.is_empty());
        assert_eq!(again, resolved);

        // The checkpoint controller marks it ready; the next pass reports it.
        let mut ready = ckpt.clone();
        ready.status = Some(DynamoCheckpointStatus {
            phase: Some(DynamoCheckpointPhase::Ready),
            checkpoint_id: Some("abc".into()),
            ..Default::default()
        });
        d.insert(ready);
        let resolved = r.reconcile(&g, &mut Vec::new()).await.unwrap();
        assert!(resolved.statuses["Decode"].ready);
        assert_eq!(
            resolved.statuses["Decode"].checkpoint_id.as_deref(),
            Some("abc")
        );
        assert!(
            d.writes().is_empty(),
            "an existing checkpoint is never rewritten"
        );
    }

    #[tokio::test]
    async fn references_and_manual_checkpoints_are_looked_up() {
        let d = Double::new();
        let identity = DynamoCheckpointIdentity {
            model: "Qwen/Qwen3-0.6B".into(),
            backend_framework: BackendFramework::Vllm,
            ..Default::default()
        };
        d.insert(DynamoCheckpoint {
            metadata: ObjectMeta {
                name: Some("user-ckpt".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: DynamoCheckpointSpec {
                identity: identity.clone(),
                ..Default::default()
            },
            status: Some(DynamoCheckpointStatus {
                phase: Some(DynamoCheckpointPhase::Ready),
                ..Default::default()
            }),
        });
        let mut by_ref = enabled();
        by_ref.checkpoint_ref = Some("user-ckpt".into());
        let mut manual = enabled();
        manual.mode = Some(CheckpointMode::Manual);
        manual.identity = Some(identity.clone());
        let mut manual_missing = manual.clone();
        manual_missing.identity = Some(DynamoCheckpointIdentity {
            model: "other".into(),
            ..identity.clone()
        });
        let g = graph(
            &d,
            vec![
                with_checkpoint(component("A", ComponentType::Worker), by_ref),
                with_checkpoint(component("B", ComponentType::Worker), manual),
                with_checkpoint(component("C", ComponentType::Worker), manual_missing),
                component("D", ComponentType::Frontend),
            ],
        );
        let resolved = reconciler(&d).reconcile(&g, &mut Vec::new()).await.unwrap();
        assert!(d.writes().is_empty(), "lookups never create");
        assert_eq!(resolved.infos.len(), 3);
        assert!(resolved.infos["A"].ready);
        assert_eq!(
            resolved.infos["B"].checkpoint_name.as_deref(),
            Some("user-ckpt")
        );
        assert!(!resolved.infos["C"].exists);
        assert_eq!(
            resolved.infos["B"].identity_hash.as_deref(),
            Some(identity_hash(&identity).as_str())
        );
    }

    /// `targetContainerName` names the container the capture Job snapshots (and restoring pods
    /// restore); `main` when unset.
    #[tokio::test]
    async fn the_target_container_reaches_the_capture_job() {
        let d = Double::new();
        let mut sidecar = component("W", ComponentType::Worker);
        let spec = sidecar
            .pod_template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .unwrap();
        spec.containers.push(k8s_openapi::api::core::v1::Container {
            name: "engine".into(),
            image: Some("img:1".into()),
            ..Default::default()
        });
        let mut cfg = enabled();
        cfg.target_container_name = Some("engine".into());
        let g = graph(
            &d,
            vec![
                with_checkpoint(sidecar, cfg),
                with_checkpoint(component("M", ComponentType::Worker), enabled()),
            ],
        );
        let resolved = reconciler(&d).reconcile(&g, &mut Vec::new()).await.unwrap();
        for (name, want) in [("W", "engine"), ("M", MAIN_CONTAINER_NAME)] {
            let info = &resolved.infos[name];
            assert_eq!(info.target_container, want, "{name}");
            let ckpt: DynamoCheckpoint = d
                .object(Some("ns"), info.checkpoint_name.as_deref().unwrap())
                .unwrap();
            let job = ckpt.spec.job.unwrap();
            assert_eq!(job.target_container_name.as_deref(), Some(want), "{name}");
        }
    }

    #[tokio::test]
    async fn failures_map_to_clear_errors() {
        let d = Double::new();
        let mut by_ref = enabled();
        by_ref.checkpoint_ref = Some("nope".into());
        let g = graph(
            &d,
            vec![with_checkpoint(
                component("A", ComponentType::Worker),
                by_ref,
            )],
        );
        let err = reconciler(&d)
            .reconcile(&g, &mut Vec::new())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("\"nope\" not found"), "{err}");

        let mut no_backend = dgd(
            "g2",
            vec![with_checkpoint(
                component("A", ComponentType::Worker),
                enabled(),
            )],
        );
        no_backend.spec.backend_framework = None;
        let no_backend = d.insert(no_backend);
        let err = reconciler(&d)
            .reconcile(&no_backend, &mut Vec::new())
            .await
            .unwrap_err();
        assert!(err.awaits_change(), "{err}");

        let disabled = CheckpointReconciler::new(
            d.reader(),
            d.writer(),
            CheckpointConfig {
                enabled: false,
                ..Default::default()
            },
        );
        let g = graph(
            &d,
            vec![with_checkpoint(
                component("A", ComponentType::Worker),
                enabled(),
            )],
        );
        assert!(matches!(
            disabled.reconcile(&g, &mut Vec::new()).await.unwrap_err(),
            Error::Config(_)
        ));

        d.fail_next(
            Verb::Create,
            "DynamoCheckpoint",
            kit::Error::Forbidden("no".into()),
        );
        let err = reconciler(&d)
            .reconcile(&g, &mut Vec::new())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("create DynamoCheckpoint ns/checkpoint-"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn retained_checkpoints_have_no_owner() {
        let d = Double::new();
        let mut cfg = enabled();
        cfg.deletion_policy = Some(CheckpointDeletionPolicy::Retain);
        let g = graph(
            &d,
            vec![with_checkpoint(component("A", ComponentType::Worker), cfg)],
        );
        let resolved = reconciler(&d).reconcile(&g, &mut Vec::new()).await.unwrap();
        let name = resolved.infos["A"].checkpoint_name.clone().unwrap();
        let ckpt: DynamoCheckpoint = d.object(Some("ns"), &name).unwrap();
        assert!(ckpt.metadata.owner_references.is_none());
        assert_eq!(
            ckpt.annotations()[labels::CHECKPOINT_DELETION_POLICY],
            "Retain"
        );
    }
}
