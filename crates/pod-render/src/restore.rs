//! Checkpoint restore: what a component with `experimental.checkpoint.enabled` gets on its pod
//! template, on both pathways, from what the checkpoint step resolved ([`Checkpoint`]).
//!
//! By startup policy (upstream's DCD controller and Grove renderer):
//! - **`Immediate`** (the default): the template never changes with the checkpoint's readiness.
//!   Once a DynamoCheckpoint exists it carries the restore-candidate annotations
//!   (`nvidia.com/dynamo-checkpoint-restore-candidate: "true"`, `nvidia.com/dynamo-checkpoint-name`,
//!   `nvidia.com/dynamo-checkpoint-startup-policy`, `nvidia.com/snapshot-target-containers`);
//!   the operator's pod-create webhook restore-shapes each pod created while the checkpoint is
//!   Ready ([`restore_pod`]: the metadata and pod shaping below, on the pod; the candidate
//!   annotations stay), as upstream's does.
//! - **`WaitForCheckpoint`**: the workload is held at zero replicas until the checkpoint is
//!   Ready (the workload programs do that); then the template is restore-shaped
//!   ([`Checkpoint::restore`] is set):
//!   - labels `nvidia.com/snapshot-is-restore-target: "true"` and
//!     `nvidia.com/snapshot-checkpoint-id: <id>`, annotations
//!     `nvidia.com/snapshot-artifact-version` and `nvidia.com/snapshot-target-containers`;
//!   - the localhost seccomp profile `profiles/block-iouring.json` on the pod;
//!   - the volume `checkpoint-storage` (the snapshot agent's PVC), mounted on every target at
//!     the agent's base path;
//!   - the emptyDir `snapshot-control`, mounted on every target at `/snapshot-control` with
//!     `subPath: <container>`, and `DYN_SNAPSHOT_CONTROL_DIR=/snapshot-control`;
//!   - each target runs `sleep infinity` (no args) until the agent restores the process into
//!     it, with a startup probe that waits for the restore: a copy of its startup (else
//!     liveness, else readiness) probe polled every second without limit, else
//!     `cat /snapshot-control/restore-complete`;
//!   - the Downward API volume `podinfo` (the pod's name, uid, namespace and Dynamo identity
//!     labels), mounted read-only on every target at `/etc/podinfo`.
//!
//! The targets are `targetContainerName` (default `main`), or the engines `engine-0` and
//! `engine-1` with intra-pod failover; `nvidia.com/snapshot-target-containers` lists them,
//! comma-separated ([`parse_targets`] reads it back). The restore is applied last, on the
//! finished pod.

use std::collections::BTreeMap;

use api::labels;
use api::snapshot::{
    ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, CHECKPOINT_SOURCE_LABEL,
    CHECKPOINT_STATUS_ANNOTATION, CHECKPOINT_VOLUME, CONTROL_DIR_ENV, CONTROL_MOUNT_PATH,
    CONTROL_VOLUME, DEFAULT_SECCOMP_PROFILE, POD_INFO_MOUNT_PATH, POD_INFO_VOLUME,
    RESTORE_COMPLETE_FILE, RESTORE_CONTAINER_ID_ANNOTATION, RESTORE_PLACEHOLDER_COMMAND,
    RESTORE_STATUS_ANNOTATION, RESTORE_TARGET_LABEL, STORAGE_BASE_PATH_ANNOTATION,
    STORAGE_TYPE_ANNOTATION, TARGET_CONTAINERS_ANNOTATION,
};
use api::v1beta1::CheckpointStartupPolicy;
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource, ExecAction,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    Probe, SeccompProfile, Volume, VolumeMount,
};

use crate::parts::env;

/// Where checkpoint artifacts are: the snapshot agent's PVC and the path it mounts it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Storage {
    /// The PersistentVolumeClaim holding the artifacts.
    pub pvc_name: String,
    /// Where the agent mounts it (restore targets mount it there too).
    pub base_path: String,
}

/// A Ready checkpoint the pods restore from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restore {
    /// The checkpoint id (the identity hash the capture was labelled with).
    pub checkpoint_id: String,
    /// The artifact format version.
    pub artifact_version: String,
    /// The artifact storage.
    pub storage: Storage,
}

/// What a component's pods know of its checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The DynamoCheckpoint, once one exists.
    pub name: Option<String>,
    /// When workers start relative to the checkpoint's readiness.
    pub startup_policy: CheckpointStartupPolicy,
    /// The containers restored (see the module docs).
    pub targets: Vec<String>,
    /// Set when the template restores now: the checkpoint is Ready and the policy is
    /// `WaitForCheckpoint`.
    pub restore: Option<Restore>,
}

/// Labels and annotations of restore metadata, removed before the current ones are stamped.
const RESTORE_LABELS: [&str; 3] = [
    CHECKPOINT_SOURCE_LABEL,
    RESTORE_TARGET_LABEL,
    CHECKPOINT_ID_LABEL,
];
const RESTORE_ANNOTATIONS: [&str; 4] = [
    ARTIFACT_VERSION_ANNOTATION,
    STORAGE_TYPE_ANNOTATION,
    STORAGE_BASE_PATH_ANNOTATION,
    TARGET_CONTAINERS_ANNOTATION,
];
/// The restore-candidate annotations of an `Immediate` template.
const CANDIDATE_ANNOTATIONS: [&str; 3] = [
    labels::CHECKPOINT_RESTORE_CANDIDATE,
    labels::CHECKPOINT_NAME,
    labels::CHECKPOINT_STARTUP_POLICY,
];

/// The pod template metadata of a checkpointed component (see the module docs): restore
/// candidate annotations for `Immediate`, restore target metadata for a restoring
/// `WaitForCheckpoint` template; stale values of either, and the status annotations the agent
/// writes onto pods, are removed.
pub fn metadata(
    pod_labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
    checkpoint: &Checkpoint,
) {
    for key in CANDIDATE_ANNOTATIONS {
        annotations.remove(key);
    }
    clear_restore_metadata(pod_labels, annotations);
    if checkpoint.startup_policy == CheckpointStartupPolicy::Immediate {
        if let Some(name) = checkpoint.name.as_deref().filter(|n| !n.is_empty()) {
            annotations.insert(labels::CHECKPOINT_RESTORE_CANDIDATE.into(), "true".into());
            annotations.insert(labels::CHECKPOINT_NAME.into(), name.into());
            annotations.insert(labels::CHECKPOINT_STARTUP_POLICY.into(), "Immediate".into());
            annotations.insert(
                TARGET_CONTAINERS_ANNOTATION.into(),
                checkpoint.targets.join(","),
            );
        }
        return;
    }
    if let Some(restore) = &checkpoint.restore {
        stamp_restore_metadata(pod_labels, annotations, &checkpoint.targets, restore);
    }
}

/// Restore-shape `pod` as it is created: an `Immediate` component's pod, a restore candidate
/// whose checkpoint `restore` is Ready now (the operator's pod-create webhook). The pod gets
/// what a restoring `WaitForCheckpoint` template gets (see the module docs): the restore
/// target metadata, replacing stale restore metadata and agent status annotations, and the pod
/// shaping of `targets`. The restore-candidate annotations stay, as upstream's webhook leaves
/// them.
pub fn restore_pod(pod: &mut Pod, targets: &[String], restore: &Restore) {
    let metadata = &mut pod.metadata;
    let pod_labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    clear_restore_metadata(pod_labels, annotations);
    stamp_restore_metadata(pod_labels, annotations, targets, restore);
    shape(
        pod.spec.get_or_insert_with(PodSpec::default),
        targets,
        restore,
    );
}

/// The containers `nvidia.com/snapshot-target-containers` lists, as the snapshot protocol
/// reads it: required, comma-separated, each name trimmed, none empty or repeated.
pub fn parse_targets(annotations: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let raw = annotations
        .get(TARGET_CONTAINERS_ANNOTATION)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("missing required {TARGET_CONTAINERS_ANNOTATION} annotation"))?;
    let mut names: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(format!(
                "empty container name in {TARGET_CONTAINERS_ANNOTATION}={raw:?}"
            ));
        }
        if names.iter().any(|n| n == name) {
            return Err(format!(
                "duplicate container name {name:?} in {TARGET_CONTAINERS_ANNOTATION}={raw:?}"
            ));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

/// Remove restore labels and annotations and the status annotations the agent writes onto
/// pods (the restore-candidate annotations are the caller's).
fn clear_restore_metadata(
    pod_labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
) {
    for key in RESTORE_LABELS {
        pod_labels.remove(key);
    }
    for key in RESTORE_ANNOTATIONS {
        annotations.remove(key);
    }
    annotations.retain(|key, _| {
        ![
            CHECKPOINT_STATUS_ANNOTATION,
            RESTORE_STATUS_ANNOTATION,
            RESTORE_CONTAINER_ID_ANNOTATION,
        ]
        .iter()
        .any(|status| key == status || key.strip_prefix(status).is_some_and(|r| r.starts_with('.')))
    });
}

/// The restore target metadata of `restore` for `targets`.
fn stamp_restore_metadata(
    pod_labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
    targets: &[String],
    restore: &Restore,
) {
    pod_labels.insert(RESTORE_TARGET_LABEL.into(), "true".into());
    if !restore.checkpoint_id.is_empty() {
        pod_labels.insert(CHECKPOINT_ID_LABEL.into(), restore.checkpoint_id.clone());
    }
    annotations.insert(
        ARTIFACT_VERSION_ANNOTATION.into(),
        restore.artifact_version.clone(),
    );
    annotations.insert(TARGET_CONTAINERS_ANNOTATION.into(), targets.join(","));
}

/// Restore-shape the finished pod (see the module docs); nothing unless the checkpoint
/// restores now. Targets the pod does not have are skipped (validation requires them).
pub(crate) fn apply(spec: &mut PodSpec, checkpoint: Option<&Checkpoint>) {
    let Some(checkpoint) = checkpoint else { return };
    let Some(restore) = checkpoint
        .restore
        .as_ref()
        .filter(|_| checkpoint.startup_policy != CheckpointStartupPolicy::Immediate)
    else {
        return;
    };
    shape(spec, &checkpoint.targets, restore);
}

/// The pod shaping of a restore from `restore` into `targets` (see the module docs).
fn shape(spec: &mut PodSpec, targets: &[String], restore: &Restore) {
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default)
        .seccomp_profile = Some(SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: Some(DEFAULT_SECCOMP_PROFILE.into()),
    });
    add_volume(spec, checkpoint_volume(&restore.storage.pvc_name));
    for name in targets {
        let Some(container) = spec.containers.iter_mut().find(|c| &c.name == name) else {
            continue;
        };
        add_mount(
            container,
            CHECKPOINT_VOLUME,
            &restore.storage.base_path,
            None,
        );
        add_mount(container, CONTROL_VOLUME, CONTROL_MOUNT_PATH, Some(name));
        let vars = container.env.get_or_insert_with(Vec::new);
        if !vars.iter().any(|e| e.name == CONTROL_DIR_ENV) {
            vars.push(env(CONTROL_DIR_ENV, CONTROL_MOUNT_PATH));
        }
        container.command = Some(RESTORE_PLACEHOLDER_COMMAND.map(String::from).to_vec());
        container.args = None;
        container.startup_probe = Some(restore_startup_probe(container));
    }
    if targets
        .iter()
        .any(|t| spec.containers.iter().any(|c| &c.name == t))
    {
        add_volume(
            spec,
            Volume {
                name: CONTROL_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        );
    }
    add_volume(spec, pod_info_volume());
    for container in spec
        .containers
        .iter_mut()
        .filter(|c| targets.contains(&c.name))
    {
        let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts.iter().any(|m| m.name == POD_INFO_VOLUME) {
            mounts.push(VolumeMount {
                name: POD_INFO_VOLUME.into(),
                mount_path: POD_INFO_MOUNT_PATH.into(),
                read_only: Some(true),
                ..Default::default()
            });
        }
    }
}

/// A startup probe that waits for the restore: the container's startup (else liveness, else
/// readiness) probe polled every second without a failure limit; without any probe, the
/// agent's `restore-complete` sentinel.
fn restore_startup_probe(container: &Container) -> Probe {
    let own = container
        .startup_probe
        .as_ref()
        .or(container.liveness_probe.as_ref())
        .or(container.readiness_probe.as_ref());
    let base = own.cloned().unwrap_or_else(|| Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "cat".into(),
                format!("{CONTROL_MOUNT_PATH}/{RESTORE_COMPLETE_FILE}"),
            ]),
        }),
        ..Default::default()
    });
    Probe {
        initial_delay_seconds: None,
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(i32::MAX),
        success_threshold: Some(1),
        ..base
    }
}

fn checkpoint_volume(pvc: &str) -> Volume {
    Volume {
        name: CHECKPOINT_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc.into(),
            read_only: None,
        }),
        ..Default::default()
    }
}

/// Add `volume` unless the pod has a volume of its name.
fn add_volume(spec: &mut PodSpec, volume: Volume) {
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if !volumes.iter().any(|v| v.name == volume.name) {
        volumes.push(volume);
    }
}

/// Mount `volume` at `path` unless the container mounts it already (with `sub_path`, when
/// given, the same subPath).
fn add_mount(container: &mut Container, volume: &str, path: &str, sub_path: Option<&String>) {
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let present = mounts
        .iter()
        .any(|m| m.name == volume && (sub_path.is_none() || m.sub_path.as_ref() == sub_path));
    if !present {
        mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: path.into(),
            sub_path: sub_path.cloned(),
            ..Default::default()
        });
    }
}

/// The Downward API volume of the pod's identity (see the module docs).
fn pod_info_volume() -> Volume {
    let label = |key: &str| format!("metadata.labels['{key}']");
    let items = [
        ("pod_name", "metadata.name".to_string()),
        ("pod_uid", "metadata.uid".to_string()),
        ("pod_namespace", "metadata.namespace".to_string()),
        ("dyn_namespace", label(labels::DYNAMO_NAMESPACE)),
        (
            "dyn_namespace_worker_suffix",
            label(labels::DYNAMO_WORKER_HASH),
        ),
        ("dyn_component", label(labels::DYNAMO_COMPONENT_TYPE)),
        (
            "dyn_parent_dgd_k8s_name",
            label(labels::DYNAMO_GRAPH_DEPLOYMENT_NAME),
        ),
        ("dyn_parent_dgd_k8s_namespace", "metadata.namespace".into()),
    ];
    Volume {
        name: POD_INFO_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(
                items
                    .into_iter()
                    .map(|(path, field)| DownwardAPIVolumeFile {
                        path: path.into(),
                        field_ref: Some(ObjectFieldSelector {
                            field_path: field,
                            api_version: None,
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}
