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
//! **Restore.** A `WaitForCheckpoint` component whose checkpoint is Ready restores its pods from
//! it: its info carries the [`pod_render::restore::Restore`] (checkpoint id, artifact version
//! from the checkpoint's `nvidia.com/snapshot-artifact-version` annotation, default `1`, and
//! the artifact storage the snapshot agent's DaemonSet mounts, [`storage`]), and
//! [`CheckpointInfo::pod`] is what `pod-render` shapes the pod template with. An `Immediate`
//! component's template only names its checkpoint (see `pod_render::restore`); the operator's
//! pod-create webhook restores each pod created while that checkpoint is Ready, with the same
//! restore ([`checkpoint_restore`]). As upstream, the graph step itself does not read the
//! storage: the Grove pathway resolves it before rendering ([`resolve_restores`]), the
//! component pathway's DCD controller for its DCD ([`resolve_component`]).
//!
//! **Capture pod.** The automatic checkpoint's pod template is the component's pod as
//! `pod-render` renders it ([`capture`]), with `checkpoint.job.podTemplate` merged over it.
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
use api::snapshot::{ARTIFACT_VERSION_ANNOTATION, DEFAULT_ARTIFACT_VERSION};
use api::v1beta1::{
    CheckpointDeletionPolicy, CheckpointStartupPolicy, ComponentCheckpointConfig,
    DynamoComponentDeploymentSharedSpec, MAIN_CONTAINER_NAME,
};
use api::{DynamoCheckpoint, DynamoCheckpointSpec, DynamoGraphDeployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Event, Reader, ReaderExt, Selector, Writer};
use kube::ResourceExt;

use crate::child;
use crate::discovery::{DiscoveryBackend, kubernetes_discovery_enabled};
use crate::error::{Error, Result};
use crate::naming;
use crate::rollout;
use pod_render::restore::{Checkpoint, Restore, Storage};
use pod_render::{Backend, Infrastructure};

mod capture;
pub mod storage;

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
    /// Artifact format version of the checkpoint.
    pub artifact_version: String,
    /// Set when the component's pods restore from the checkpoint now (`WaitForCheckpoint`,
    /// Ready).
    pub restore: Option<Restore>,
}

impl CheckpointInfo {
    /// The component's workers are held at zero replicas: `WaitForCheckpoint` and the
    /// checkpoint is not Ready.
    pub fn waits(&self) -> bool {
        self.enabled
            && self.startup_policy == CheckpointStartupPolicy::WaitForCheckpoint
            && !self.ready
    }

    /// The component's pod template restores from the checkpoint: `WaitForCheckpoint` and the
    /// checkpoint is Ready (an `Immediate` template never changes with readiness).
    pub fn restores_now(&self) -> bool {
        self.enabled
            && self.startup_policy == CheckpointStartupPolicy::WaitForCheckpoint
            && self.ready
    }

    /// What `component`'s pods know of this checkpoint (see `pod_render::restore`): the
    /// restore targets are the target container, or the engines with intra-pod failover.
    pub fn pod(&self, component: &DynamoComponentDeploymentSharedSpec) -> Checkpoint {
        Checkpoint {
            name: self.checkpoint_name.clone().filter(|_| self.exists),
            startup_policy: self.startup_policy,
            targets: if component.is_intra_pod_failover() {
                pod_render::failover::engine_names()
            } else {
                vec![self.target_container.clone()]
            },
            restore: self.restore.clone(),
        }
    }

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

/// What the pods of each checkpointed component of `dgd` know of its checkpoint
/// ([`CheckpointInfo::pod`]), by component name.
pub fn pod_checkpoints(
    dgd: &DynamoGraphDeployment,
    infos: &CheckpointInfos,
) -> BTreeMap<String, Checkpoint> {
    dgd.spec
        .components
        .iter()
        .filter_map(|c| Some((c.name.clone(), infos.get(&c.name)?.pod(c))))
        .collect()
}

/// The result of the checkpoint step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// Per component, for workload rendering.
    pub infos: CheckpointInfos,
    /// Per component, for `status.checkpoints`.
    pub statuses: BTreeMap<String, ComponentCheckpointStatus>,
}

/// Operator settings the checkpoint step needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Checkpointing is enabled in this operator; a component asking for it fails otherwise.
    pub enabled: bool,
    /// Default discovery backend (capture pods use the discovery ServiceAccount when it is
    /// Kubernetes).
    pub discovery: DiscoveryBackend,
    /// The operator's infrastructure endpoints (env of the capture pod).
    pub infrastructure: Infrastructure,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            discovery: DiscoveryBackend::default(),
            infrastructure: Infrastructure::default(),
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
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<Resolved, Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(
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
        let desired = render(dgd, component, cfg, identity, &hash, &self.config)?;
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
            artifact_version: DEFAULT_ARTIFACT_VERSION.into(),
            restore: None,
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
        artifact_version: ckpt
            .annotations()
            .get(ARTIFACT_VERSION_ANNOTATION)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_ARTIFACT_VERSION)
            .to_string(),
        restore: None,
    }
}

/// Resolve the restore of every checkpoint of `infos` the pods restore from now (Ready,
/// `WaitForCheckpoint`; [`CheckpointInfo::restores_now`]) in `namespace`, discovering the
/// storage once. The Grove pathway renders with these; the component pathway's DCD controller
/// resolves its own ([`resolve_component`]), as upstream's do.
pub async fn resolve_restores(
    reader: &dyn Reader,
    namespace: &str,
    infos: &mut CheckpointInfos,
) -> Result<()> {
    let mut storage = None;
    for info in infos.values_mut().filter(|i| i.restores_now()) {
        info.restore = Some(restore(reader, namespace, info, &mut storage).await?);
    }
    Ok(())
}

/// The restore of a Ready checkpoint `info` in `namespace`: its id ([`restore_id`]), artifact
/// version and the storage the snapshot agent mounts (discovered once per pass, into
/// `storage`).
async fn restore(
    reader: &dyn Reader,
    namespace: &str,
    info: &CheckpointInfo,
    storage: &mut Option<Storage>,
) -> Result<Restore> {
    let checkpoint_id = restore_id(info)?;
    let found = match storage {
        Some(found) => found.clone(),
        None => storage
            .insert(storage::discover(reader, namespace).await?)
            .clone(),
    };
    Ok(Restore {
        checkpoint_id,
        artifact_version: info.artifact_version.clone(),
        storage: found,
    })
}

/// The id pods restore a Ready checkpoint `info` by: `status.checkpointID`, else the identity
/// hash.
fn restore_id(info: &CheckpointInfo) -> Result<String> {
    let checkpoint_id = info
        .checkpoint_id
        .clone()
        .filter(|id| !id.is_empty())
        .or_else(|| info.identity_hash.clone())
        .unwrap_or_default();
    if checkpoint_id.is_empty() {
        return Err(Error::Missing(format!(
            "checkpoint {} is ready but has no checkpoint id",
            info.checkpoint_name.as_deref().unwrap_or_default()
        )));
    }
    Ok(checkpoint_id)
}

/// The restore of the DynamoCheckpoint `ckpt` in `namespace` for a pod created now (the
/// pod-create webhook restores `Immediate` components' pods with it): `None` while `ckpt` is
/// not Ready; else the id, artifact version and storage a restoring `WaitForCheckpoint`
/// template gets (no snapshot agent storage is an error).
pub async fn checkpoint_restore(
    reader: &dyn Reader,
    namespace: &str,
    ckpt: &DynamoCheckpoint,
) -> Result<Option<Restore>> {
    let info = from_checkpoint(ckpt, &ComponentCheckpointConfig::default(), false);
    if !info.ready {
        return Ok(None);
    }
    Ok(Some(restore(reader, namespace, &info, &mut None).await?))
}

/// The checkpoint of `component` as its DynamoComponentDeployment in `namespace` names it (the
/// component pathway's DCD controller): `None` without `experimental.checkpoint.enabled`;
/// the DynamoCheckpoint `checkpointRef` names (missing is an error); else the one of `identity`
/// (none yet: it does not exist); with neither, none exists yet (the graph names its automatic
/// checkpoint once it created it). With `WaitForCheckpoint` and a Ready checkpoint, the restore
/// is resolved too.
pub async fn resolve_component(
    reader: &dyn Reader,
    namespace: &str,
    component: &DynamoComponentDeploymentSharedSpec,
) -> Result<Option<CheckpointInfo>> {
    let Some(cfg) = component
        .experimental
        .as_ref()
        .and_then(|e| e.checkpoint.as_ref())
        .filter(|c| c.enabled)
    else {
        return Ok(None);
    };
    let mut info = match cfg
        .checkpoint_ref
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        Some(reference) => {
            let found: Option<DynamoCheckpoint> = reader
                .get(Some(namespace), reference)
                .await
                .map_err(Error::api(format!(
                    "get DynamoCheckpoint {}",
                    kit::object::key(Some(namespace), reference)
                )))?;
            let ckpt = found.ok_or_else(|| {
                Error::Missing(format!("referenced checkpoint {reference:?} not found"))
            })?;
            from_checkpoint(&ckpt, cfg, false)
        }
        None if cfg.identity.is_some() => {
            let known: Vec<DynamoCheckpoint> = reader
                .list(Some(namespace), &Selector::default())
                .await
                .map_err(Error::api(format!("list DynamoCheckpoint in {namespace}")))?;
            manual(component, cfg, &known)?
        }
        // The graph names the checkpoint once it exists; until then the pods start cold.
        None => CheckpointInfo {
            enabled: true,
            exists: false,
            ready: false,
            checkpoint_name: None,
            identity_hash: None,
            checkpoint_id: None,
            startup_policy: startup_policy(cfg),
            automatic: false,
            target_container: target_container(cfg),
            artifact_version: DEFAULT_ARTIFACT_VERSION.into(),
            restore: None,
        },
    };
    if info.restores_now() {
        info.restore = Some(restore(reader, namespace, &info, &mut None).await?);
    }
    Ok(Some(info))
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
    config: &CheckpointConfig,
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
    let backend = match Backend::detect(component, dgd.spec.backend_framework) {
        Ok(Backend::None) => Backend::from(identity.backend_framework),
        Ok(backend) => backend,
        Err(message) => {
            return Err(Error::InvalidSpec(format!(
                "spec.components[{}]: {message}",
                component.name
            )));
        }
    };
    let target = target_container(cfg);
    let mut template = capture::template(
        dgd,
        component,
        cfg,
        &capture::Settings {
            discovery: config.discovery,
            infrastructure: &config.infrastructure,
            backend,
            target: &target,
        },
    )?;
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
    if kubernetes_discovery_enabled(config.discovery, dgd) && spec.service_account_name.is_none() {
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
                target_container_name: Some(target),
                ..Default::default()
            }),
            capture: None,
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::checkpoint::DynamoCheckpointStatus;
    use api::v1beta1::{ComponentCheckpointJobConfig, ExperimentalSpec};
    use api::{BackendFramework, ComponentType};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
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

    /// The snapshot agent DaemonSet of `ns`, mounting claim `pvc` at `path`.
    fn snapshot_agent(ns: &str, pvc: &str, path: &str) -> k8s_openapi::api::apps::v1::DaemonSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "snapshot-agent",
                "namespace": ns,
                "labels": {"app.kubernetes.io/component": "snapshot-agent"},
            },
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"spec": {
                    "containers": [{
                        "name": "agent",
                        "volumeMounts": [{"name": "checkpoints", "mountPath": path}],
                    }],
                    "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc}}],
                }},
            },
        }))
        .unwrap()
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
        let resolved = r.reconcile(&g).await.events_into(&mut events).unwrap();
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
        let again = r.reconcile(&g).await.events_into(&mut events).unwrap();
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
        let mut resolved = r.reconcile(&g).await.result.unwrap();
        assert!(resolved.infos["Decode"].restores_now());
        assert_eq!(
            resolved.infos["Decode"].restore, None,
            "the graph step reads no storage"
        );
        // Ready and WaitForCheckpoint: the pods restore, from the storage the snapshot agent
        // mounts; without the agent there is nothing to restore from yet.
        let err = resolve_restores(&*d.reader(), "ns", &mut resolved.infos)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("no snapshot-agent daemonset found in namespace ns"),
            "{err}"
        );
        assert!(!err.awaits_change());
        d.insert(snapshot_agent("ns", "snapshot-pvc", "/checkpoints"));
        resolve_restores(&*d.reader(), "ns", &mut resolved.infos)
            .await
            .unwrap();
        assert_eq!(
            resolved.infos["Decode"].restore,
            Some(Restore {
                checkpoint_id: "abc".into(),
                artifact_version: "1".into(),
                storage: Storage {
                    pvc_name: "snapshot-pvc".into(),
                    base_path: "/checkpoints".into(),
                },
            })
        );
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
        let resolved = reconciler(&d).reconcile(&g).await.result.unwrap();
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
        let resolved = reconciler(&d).reconcile(&g).await.result.unwrap();
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
        let err = reconciler(&d).reconcile(&g).await.result.unwrap_err();
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
            .reconcile(&no_backend)
            .await
            .result
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
            disabled.reconcile(&g).await.result.unwrap_err(),
            Error::Config(_)
        ));

        d.fail_next(
            Verb::Create,
            "DynamoCheckpoint",
            kit::Error::Forbidden("no".into()),
        );
        let err = reconciler(&d).reconcile(&g).await.result.unwrap_err();
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
        let resolved = reconciler(&d).reconcile(&g).await.result.unwrap();
        let name = resolved.infos["A"].checkpoint_name.clone().unwrap();
        let ckpt: DynamoCheckpoint = d.object(Some("ns"), &name).unwrap();
        assert!(ckpt.metadata.owner_references.is_none());
        assert_eq!(
            ckpt.annotations()[labels::CHECKPOINT_DELETION_POLICY],
            "Retain"
        );
    }

    /// The checkpoint a DCD names, as its controller resolves it (upstream's
    /// `TestResolveCheckpointForService` rows, but the GMS gate's), and the restore of a Ready
    /// `WaitForCheckpoint` one.
    #[tokio::test]
    async fn a_dcd_resolves_the_checkpoint_it_names() {
        let identity = DynamoCheckpointIdentity {
            model: "meta-llama/Llama-2-7b-hf".into(),
            backend_framework: BackendFramework::Vllm,
            ..Default::default()
        };
        let hash = identity_hash(&identity);
        let stored = |name: &str, phase: DynamoCheckpointPhase| DynamoCheckpoint {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: DynamoCheckpointSpec {
                identity: identity.clone(),
                ..Default::default()
            },
            status: Some(DynamoCheckpointStatus {
                phase: Some(phase),
                identity_hash: Some(hash.clone()),
                ..Default::default()
            }),
        };
        let cfg = |f: &dyn Fn(&mut ComponentCheckpointConfig)| {
            let mut c = enabled();
            f(&mut c);
            Some(c)
        };
        // (case, checkpoint config, stored checkpoints, snapshot agent, expected
        // (exists, ready, name, restores) or error text)
        type Want = Result<Option<(bool, bool, Option<&'static str>, bool)>, &'static str>;
        type Row = (
            &'static str,
            Option<ComponentCheckpointConfig>,
            Vec<DynamoCheckpoint>,
            bool,
            Want,
        );
        use DynamoCheckpointPhase::{Creating, Ready};
        let wait = CheckpointStartupPolicy::WaitForCheckpoint;
        let rows: Vec<Row> = vec![
            ("nil config returns disabled", None, vec![], false, Ok(None)),
            (
                "disabled config returns disabled",
                cfg(&|c| c.enabled = false),
                vec![],
                false,
                Ok(None),
            ),
            (
                "deprecated Manual value without checkpointRef is ignored",
                cfg(&|c| c.mode = Some(CheckpointMode::Manual)),
                vec![],
                false,
                Ok(Some((false, false, None, false))),
            ),
            (
                "config without ref or identity resolves enabled without error",
                cfg(&|_| {}),
                vec![],
                false,
                Ok(Some((false, false, None, false))),
            ),
            (
                "checkpointRef resolves ready CR",
                cfg(&|c| c.checkpoint_ref = Some(hash.clone())),
                vec![stored(&hash, Ready)],
                false,
                Ok(Some((true, true, Some("hash"), false))),
            ),
            (
                "checkpointRef resolves not-ready CR",
                cfg(&|c| c.checkpoint_ref = Some(hash.clone())),
                vec![stored(&hash, Creating)],
                false,
                Ok(Some((true, false, Some("hash"), false))),
            ),
            (
                "checkpointRef errors when CR not found",
                cfg(&|c| c.checkpoint_ref = Some("nonexistent".into())),
                vec![],
                false,
                Err("nonexistent"),
            ),
            (
                "checkpointRef resolves human-readable checkpoint names",
                cfg(&|c| c.checkpoint_ref = Some("not-the-hash".into())),
                vec![stored("not-the-hash", Creating)],
                false,
                Ok(Some((true, false, Some("not-the-hash"), false))),
            ),
            (
                "identity lookup finds existing checkpoint by identity hash",
                cfg(&|c| c.identity = Some(identity.clone())),
                vec![stored("friendly-name", Ready)],
                false,
                Ok(Some((true, true, Some("friendly-name"), false))),
            ),
            (
                "identity lookup returns existing not-ready checkpoint",
                cfg(&|c| c.identity = Some(identity.clone())),
                vec![stored("friendly-name", Creating)],
                false,
                Ok(Some((true, false, Some("friendly-name"), false))),
            ),
            (
                "identity lookup returns not-ready when no CR found",
                cfg(&|c| c.identity = Some(identity.clone())),
                vec![],
                false,
                Ok(Some((false, false, None, false))),
            ),
            (
                "a Ready WaitForCheckpoint checkpoint restores",
                cfg(&|c| {
                    c.checkpoint_ref = Some("friendly-name".into());
                    c.startup_policy = Some(wait);
                }),
                vec![stored("friendly-name", Ready)],
                true,
                Ok(Some((true, true, Some("friendly-name"), true))),
            ),
            (
                "a Ready WaitForCheckpoint checkpoint needs the snapshot agent",
                cfg(&|c| {
                    c.checkpoint_ref = Some("friendly-name".into());
                    c.startup_policy = Some(wait);
                }),
                vec![stored("friendly-name", Ready)],
                false,
                Err("no snapshot-agent daemonset found in namespace ns"),
            ),
        ];
        for (name, config, checkpoints, agent, want) in rows {
            let d = Double::new();
            for c in checkpoints {
                d.insert(c);
            }
            if agent {
                d.insert(snapshot_agent("ns", "snapshot-pvc", "/checkpoints"));
            }
            let mut c = component("W", ComponentType::Worker);
            if let Some(config) = config {
                c = with_checkpoint(c, config);
            }
            let got = resolve_component(&*d.reader(), "ns", &c).await;
            match (got, want) {
                (Ok(None), Ok(None)) => {}
                (Ok(Some(info)), Ok(Some((exists, ready, ckpt, restores)))) => {
                    let ckpt = ckpt.map(|n| if n == "hash" { hash.as_str() } else { n });
                    assert_eq!(
                        (
                            info.exists,
                            info.ready,
                            info.checkpoint_name.as_deref(),
                            info.restore.is_some()
                        ),
                        (exists, ready, ckpt, restores),
                        "{name}"
                    );
                    assert!(info.enabled, "{name}");
                    if exists {
                        assert_eq!(info.identity_hash.as_deref(), Some(hash.as_str()), "{name}");
                    }
                    if let Some(restore) = &info.restore {
                        assert_eq!(restore.checkpoint_id, hash, "{name}");
                        assert_eq!(restore.storage.pvc_name, "snapshot-pvc", "{name}");
                    }
                }
                (Err(e), Err(needle)) => assert!(e.to_string().contains(needle), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// What the pods of a component know of its checkpoint: the target container, or both
    /// engines with intra-pod failover; the name only once the checkpoint exists.
    #[test]
    fn the_pods_restore_the_target_or_the_engines() {
        use api::v1beta1::{FailoverSpec, GpuMemoryServiceSpec};
        let info = |exists: bool, target: &str| CheckpointInfo {
            enabled: true,
            exists,
            ready: false,
            checkpoint_name: Some("ckpt".into()),
            identity_hash: None,
            checkpoint_id: None,
            startup_policy: CheckpointStartupPolicy::Immediate,
            automatic: true,
            target_container: target.into(),
            artifact_version: "1".into(),
            restore: None,
        };
        let plain = component("W", ComponentType::Worker);
        let mut failover = plain.clone();
        failover.experimental = Some(ExperimentalSpec {
            gpu_memory_service: Some(GpuMemoryServiceSpec::default()),
            failover: Some(FailoverSpec::default()),
            ..Default::default()
        });
        // (case, component, info, name, targets)
        let rows = [
            (
                "main",
                &plain,
                info(true, "main"),
                Some("ckpt"),
                vec!["main"],
            ),
            (
                "targetContainerName",
                &plain,
                info(true, "worker"),
                Some("ckpt"),
                vec!["worker"],
            ),
            (
                "failover engines",
                &failover,
                info(true, "main"),
                Some("ckpt"),
                vec!["engine-0", "engine-1"],
            ),
            (
                "not created yet",
                &plain,
                info(false, "main"),
                None,
                vec!["main"],
            ),
        ];
        for (name, c, info, want_name, targets) in rows {
            let pod = info.pod(c);
            assert_eq!(pod.name.as_deref(), want_name, "{name}");
            assert_eq!(pod.targets, targets, "{name}");
        }
    }

    /// The capture pod is the component's pod as `pod-render` renders it (operator defaults,
    /// graph env, discovery account), only the target container, with the job's podTemplate
    /// merged over it as upstream merges it.
    #[tokio::test]
    async fn the_capture_pod_is_the_components_rendered_pod() {
        use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, Probe, Volume};
        let env = |n: &str, v: &str| EnvVar {
            name: n.into(),
            value: Some(v.into()),
            value_from: None,
        };
        let d = Double::new();
        let mut c = component("Decode", ComponentType::Decode);
        {
            let spec = c.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
            spec.containers[0].command =
                Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()]);
            spec.containers[0].env = Some(vec![env("OWN", "1")]);
            spec.containers.push(Container {
                name: "sidecar".into(),
                ..Default::default()
            });
            spec.volumes = Some(vec![Volume {
                name: "cache".into(),
                ..Default::default()
            }]);
        }
        c.pod_template.as_mut().unwrap().metadata = Some(ObjectMeta {
            labels: Some(BTreeMap::from([("team".into(), "a".into())])),
            annotations: Some(BTreeMap::from([("note".into(), "component".into())])),
            ..Default::default()
        });
        let mut cfg = enabled();
        cfg.job = Some(ComponentCheckpointJobConfig {
            pod_template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: Some(BTreeMap::from([("note".into(), "job".into())])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![
                        Container {
                            name: "main".into(),
                            env: Some(vec![env("JOB", "1"), env("OWN", "job")]),
                            readiness_probe: Some(Probe {
                                period_seconds: Some(3),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        Container {
                            name: "gms-saver".into(),
                            ..Default::default()
                        },
                    ],
                    volumes: Some(vec![
                        Volume {
                            name: "cache".into(),
                            empty_dir: Some(Default::default()),
                            ..Default::default()
                        },
                        Volume {
                            name: "extra".into(),
                            ..Default::default()
                        },
                    ]),
                    node_selector: Some(BTreeMap::from([("pool".into(), "capture".into())])),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        });
        let g = graph(&d, vec![with_checkpoint(c, cfg)]);
        let resolved = reconciler(&d).reconcile(&g).await.result.unwrap();
        let name = resolved.infos["Decode"].checkpoint_name.clone().unwrap();
        let ckpt: DynamoCheckpoint = d.object(Some("ns"), &name).unwrap();
        let template = &ckpt.spec.job.as_ref().unwrap().pod_template_spec;
        let meta = template.metadata.as_ref().unwrap();
        let labels = meta.labels.clone().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[labels::DYNAMO_COMPONENT], "Decode");
        assert_eq!(labels[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g");
        assert_eq!(meta.annotations.as_ref().unwrap()["note"], "job");
        let spec = template.spec.as_ref().unwrap();
        let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["main", "gms-saver"],
            "only the target, then the job's own"
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("g-k8s-service-discovery")
        );
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "capture");
        assert_eq!(spec.security_context.as_ref().unwrap().fs_group, Some(1000));
        let volumes: Vec<(&str, bool)> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| (v.name.as_str(), v.empty_dir.is_some()))
            .collect();
        assert_eq!(
            volumes,
            [("cache", true), ("shared-memory", true), ("extra", false)],
            "the job's volumes replace or join by name"
        );
        let main = &spec.containers[0];
        let value = |n: &str| {
            main.env
                .iter()
                .flatten()
                .find(|e| e.name == n)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(value("DYN_COMPONENT").as_deref(), Some("decode"));
        assert_eq!(value("DYN_NAMESPACE").as_deref(), Some("ns-g"));
        assert_eq!(value("OWN").as_deref(), Some("job"));
        assert_eq!(value("JOB").as_deref(), Some("1"));
        assert!(main.startup_probe.is_some(), "the worker's default probes");
        assert_eq!(
            main.readiness_probe.as_ref().unwrap().period_seconds,
            Some(3)
        );
        assert!(main.ports.as_ref().is_some_and(|p| !p.is_empty()));

        // A target container the component does not have is refused.
        let mut missing = enabled();
        missing.target_container_name = Some("nope".into());
        let g = graph(
            &d,
            vec![with_checkpoint(
                component("W2", ComponentType::Worker),
                missing,
            )],
        );
        let err = reconciler(&d).reconcile(&g).await.result.unwrap_err();
        assert!(err.awaits_change(), "{err}");
        assert!(err.to_string().contains("\"nope\" not found"), "{err}");
    }
}
