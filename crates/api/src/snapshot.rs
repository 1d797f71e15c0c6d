//! The snapshot protocol: the labels, annotations, volumes and paths through which the operator
//! hands capture and restore to the snapshot agent (the privileged DaemonSet that runs CRIU on
//! the nodes). The capture side is the checkpoint controller's Job pod; the restore side is the
//! worker pod that `pod-render` shapes once its checkpoint is Ready.

/// Label (capture pod): the pod the snapshot agent captures.
pub const CHECKPOINT_SOURCE_LABEL: &str = "nvidia.com/snapshot-is-checkpoint-source";
/// Label (capture and restore pods): the checkpoint id (the identity hash).
pub const CHECKPOINT_ID_LABEL: &str = "nvidia.com/snapshot-checkpoint-id";
/// Label (restore pod): the pod the snapshot agent restores into.
pub const RESTORE_TARGET_LABEL: &str = "nvidia.com/snapshot-is-restore-target";
/// Annotation (capture and restore pods): the artifact format version.
pub const ARTIFACT_VERSION_ANNOTATION: &str = "nvidia.com/snapshot-artifact-version";
/// Annotation (capture and restore pods): the comma-separated containers captured or restored.
pub const TARGET_CONTAINERS_ANNOTATION: &str = "nvidia.com/snapshot-target-containers";
/// Annotation (capture pod, written by the agent): the capture's outcome.
pub const CHECKPOINT_STATUS_ANNOTATION: &str = "nvidia.com/snapshot-checkpoint-status";
/// Annotation (restore pod, written by the agent): the restore's outcome; also per container
/// as `<this>.<container>`.
pub const RESTORE_STATUS_ANNOTATION: &str = "nvidia.com/snapshot-restore-status";
/// Annotation (restore pod, written by the agent): the restored container's id; also per
/// container as `<this>.<container>`.
pub const RESTORE_CONTAINER_ID_ANNOTATION: &str = "nvidia.com/snapshot-restore-container-id";
/// Annotation (storage given by operator configuration): the storage type.
pub const STORAGE_TYPE_ANNOTATION: &str = "nvidia.com/snapshot-storage-type";
/// Annotation (storage given by operator configuration): the storage base path.
pub const STORAGE_BASE_PATH_ANNOTATION: &str = "nvidia.com/snapshot-storage-base-path";
/// The artifact format version when a checkpoint names none.
pub const DEFAULT_ARTIFACT_VERSION: &str = "1";
/// The storage type of checkpoint artifacts.
pub const STORAGE_TYPE_PVC: &str = "pvc";

/// Volume (restore pod): the checkpoint storage PVC.
pub const CHECKPOINT_VOLUME: &str = "checkpoint-storage";
/// Volume (restore pod): the per-pod emptyDir the agent writes its lifecycle sentinels into.
pub const CONTROL_VOLUME: &str = "snapshot-control";
/// Where the control volume is mounted (each target container sees its own subPath).
pub const CONTROL_MOUNT_PATH: &str = "/snapshot-control";
/// Env (restore target containers): the control mount path.
pub const CONTROL_DIR_ENV: &str = "DYN_SNAPSHOT_CONTROL_DIR";
/// Sentinel file the agent writes into the control directory when a restore completed.
pub const RESTORE_COMPLETE_FILE: &str = "restore-complete";
/// Localhost seccomp profile of restore pods (blocks io_uring, as the capture environment).
pub const DEFAULT_SECCOMP_PROFILE: &str = "profiles/block-iouring.json";
/// What a restore target container runs until the agent restores the process into it.
pub const RESTORE_PLACEHOLDER_COMMAND: [&str; 2] = ["sleep", "infinity"];

/// Volume (restore pod): the Downward API files of the pod's identity, current after a restore
/// (env vars hold the capture pod's values).
pub const POD_INFO_VOLUME: &str = "podinfo";
/// Where the pod info volume is mounted (read-only) on the restore targets.
pub const POD_INFO_MOUNT_PATH: &str = "/etc/podinfo";

/// Label key of the snapshot agent DaemonSet.
pub const AGENT_LABEL_KEY: &str = "app.kubernetes.io/component";
/// Label value of the snapshot agent DaemonSet.
pub const AGENT_LABEL_VALUE: &str = "snapshot-agent";
/// Label selector of the snapshot agent DaemonSet.
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/component=snapshot-agent";
/// The agent's container in its DaemonSet.
pub const AGENT_CONTAINER: &str = "agent";
/// The agent's checkpoint volume (a PVC) in its DaemonSet.
pub const AGENT_VOLUME: &str = "checkpoints";
