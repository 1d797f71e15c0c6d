//! Names, labels and the desired children (the capture Job, the artifact record), without I/O;
//! and the reading of observed children back into [`crate::decide`]'s terms.

use std::collections::BTreeMap;

use api::DynamoCheckpoint;
use api::checkpoint::DynamoCheckpointJobConfig;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EmptyDirVolumeSource, EnvVar, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::decide::{Artifact, Attempt, JobState};

/// Label (Job, pod, artifact record): name of the owning DynamoCheckpoint.
pub const CHECKPOINT_NAME_LABEL: &str = "nvidia.com/checkpoint-name";
/// Label (Job, pod, artifact record): the identity hash, as upstream's snapshot protocol names
/// it; the capture pod's snapshot labels and annotations (the snapshot protocol, shared with the
/// restore side in `pod-render`).
pub use api::snapshot::{
    ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, CHECKPOINT_SOURCE_LABEL,
    DEFAULT_ARTIFACT_VERSION as ARTIFACT_VERSION, TARGET_CONTAINERS_ANNOTATION,
};
/// Annotation (user, on the DynamoCheckpoint): an opaque token; a value no attempt honoured yet
/// requests a rebuild. The honoured value is recorded in `status.observedRebuildToken` and on
/// the attempt's Job.
pub const REBUILD_ANNOTATION: &str = "nvidia.com/checkpoint-rebuild";
/// Annotation (Job, artifact record): the attempt number.
pub const ATTEMPT_ANNOTATION: &str = "nvidia.com/checkpoint-attempt";
/// Annotation (Job): the checkpoint generation the Job was rendered from.
pub const GENERATION_ANNOTATION: &str = "nvidia.com/checkpoint-generation";

/// Where the capture stores artifacts (upstream's checkpoint base path).
pub const STORAGE_BASE_PATH: &str = "/checkpoints";
/// The storage type reported in status.
pub use api::snapshot::STORAGE_TYPE_PVC as STORAGE_TYPE;
/// Default container to capture.
pub use api::v1beta1::MAIN_CONTAINER_NAME as DEFAULT_TARGET_CONTAINER;
/// Default run time limit of a capture Job.
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;
/// Name, mount path and default size of the /dev/shm volume (upstream's, as every pod has it).
pub use pod_render::volumes::{
    DEFAULT_SHARED_MEMORY_SIZE, SHARED_MEMORY_MOUNT_PATH as SHARED_MEMORY_PATH,
    SHARED_MEMORY_VOLUME,
};

/// Env (target container): identity hash.
pub const ENV_CHECKPOINT_HASH: &str = "DYN_CHECKPOINT_HASH";
/// Env (target container): storage base path.
pub const ENV_CHECKPOINT_PATH: &str = "DYN_CHECKPOINT_PATH";
/// Env (target container): full artifact location.
pub const ENV_CHECKPOINT_LOCATION: &str = "DYN_CHECKPOINT_LOCATION";
/// Env (target container): storage type.
pub const ENV_CHECKPOINT_STORAGE_TYPE: &str = "DYN_CHECKPOINT_STORAGE_TYPE";

/// Data keys of the artifact record.
pub mod record_keys {
    /// The identity hash.
    pub const IDENTITY_HASH: &str = "identityHash";
    /// Where the artifact is.
    pub const LOCATION: &str = "location";
    /// The storage type.
    pub const STORAGE_TYPE: &str = "storageType";
    /// The Job that produced it.
    pub const JOB_NAME: &str = "jobName";
    /// That Job's uid.
    pub const JOB_UID: &str = "jobUID";
}

/// The capture Job of `attempt` of identity `hash`: `checkpoint-job-<hash>-<attempt>`
/// (attempt 1 is upstream's name with the default artifact version).
pub fn job_name(hash: &str, attempt: i64) -> String {
    format!("checkpoint-job-{hash}-{attempt}")
}

/// The artifact record of identity `hash`: `checkpoint-artifact-<hash>`.
pub fn record_name(hash: &str) -> String {
    format!("checkpoint-artifact-{hash}")
}

/// Where the artifact of `hash` is stored.
pub fn location(hash: &str) -> String {
    format!("{STORAGE_BASE_PATH}/{hash}")
}

fn labels(ckpt: &DynamoCheckpoint, hash: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CHECKPOINT_NAME_LABEL.to_string(), ckpt.name_any()),
        (CHECKPOINT_ID_LABEL.to_string(), hash.to_string()),
    ])
}

fn owned_meta(ckpt: &DynamoCheckpoint, name: String, hash: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: ckpt.namespace(),
        labels: Some(labels(ckpt, hash)),
        owner_references: ckpt.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

fn set_env(container: &mut Container, name: &str, value: String) {
    let env = container.env.get_or_insert_with(Vec::new);
    // The user's value wins, as upstream merges its defaults under the user's env.
    if !env.iter().any(|e| e.name == name) {
        env.push(EnvVar {
            name: name.to_string(),
            value: Some(value),
            ..Default::default()
        });
    }
}

fn shared_memory(job: &DynamoCheckpointJobConfig) -> Option<Quantity> {
    match &job.shared_memory {
        Some(shm) if shm.disabled => None,
        Some(shm) => match &shm.size {
            Some(size) if size.0 == "0" => None,
            Some(size) => Some(size.clone()),
            None => Some(Quantity(DEFAULT_SHARED_MEMORY_SIZE.into())),
        },
        None => Some(Quantity(DEFAULT_SHARED_MEMORY_SIZE.into())),
    }
}

/// The capture Job of `attempt`, owned by `ckpt`. `None` when the spec has no Job
/// configuration or no target container (validation reports both first).
pub fn render_job(ckpt: &DynamoCheckpoint, hash: &str, attempt: &Attempt) -> Option<Job> {
    let config = ckpt.spec.job_config()?;
    let target = config
        .target_container_name
        .clone()
        .unwrap_or_else(|| DEFAULT_TARGET_CONTAINER.to_string());
    let mut template = config.pod_template_spec.clone();
    let mut spec = template.spec.take()?;
    let shm = shared_memory(config);
    {
        let container = spec.containers.iter_mut().find(|c| c.name == target)?;
        set_env(container, ENV_CHECKPOINT_HASH, hash.to_string());
        set_env(
            container,
            ENV_CHECKPOINT_PATH,
            STORAGE_BASE_PATH.to_string(),
        );
        set_env(container, ENV_CHECKPOINT_LOCATION, location(hash));
        set_env(
            container,
            ENV_CHECKPOINT_STORAGE_TYPE,
            STORAGE_TYPE.to_string(),
        );
        if shm.is_some() {
            let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
            mounts.retain(|m| m.name != SHARED_MEMORY_VOLUME && m.mount_path != SHARED_MEMORY_PATH);
            mounts.push(VolumeMount {
                name: SHARED_MEMORY_VOLUME.into(),
                mount_path: SHARED_MEMORY_PATH.into(),
                ..Default::default()
            });
        }
    }
    if let Some(size) = shm {
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != SHARED_MEMORY_VOLUME);
        volumes.push(Volume {
            name: SHARED_MEMORY_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(size),
            }),
            ..Default::default()
        });
    }
    spec.restart_policy = Some("Never".into());
    template.spec = Some(spec);
    let meta = template.metadata.get_or_insert_with(Default::default);
    let pod_labels = meta.labels.get_or_insert_with(BTreeMap::new);
    pod_labels.extend(labels(ckpt, hash));
    pod_labels.insert(CHECKPOINT_SOURCE_LABEL.into(), "true".into());
    let pod_annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    pod_annotations.insert(TARGET_CONTAINERS_ANNOTATION.into(), target);
    pod_annotations.insert(ARTIFACT_VERSION_ANNOTATION.into(), ARTIFACT_VERSION.into());

    let mut annotations = BTreeMap::from([
        (ATTEMPT_ANNOTATION.to_string(), attempt.number.to_string()),
        (
            GENERATION_ANNOTATION.to_string(),
            attempt.generation.to_string(),
        ),
    ]);
    if let Some(token) = &attempt.rebuild {
        annotations.insert(REBUILD_ANNOTATION.to_string(), token.clone());
    }
    Some(Job {
        metadata: ObjectMeta {
            annotations: Some(annotations),
            ..owned_meta(ckpt, job_name(hash, attempt.number), hash)
        },
        spec: Some(JobSpec {
            // Checkpoint Jobs never retry a pod: a new attempt is a new Job.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(
                config
                    .active_deadline_seconds
                    .unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS),
            ),
            template,
            ..Default::default()
        }),
        status: None,
    })
}

/// The artifact record written when the Job `job_name` (uid `job_uid`) of `attempt` completed.
pub fn render_record(
    ckpt: &DynamoCheckpoint,
    hash: &str,
    attempt: i64,
    job_name: &str,
    job_uid: &str,
) -> ConfigMap {
    let mut meta = owned_meta(ckpt, record_name(hash), hash);
    meta.annotations = Some(BTreeMap::from([(
        ATTEMPT_ANNOTATION.to_string(),
        attempt.to_string(),
    )]));
    ConfigMap {
        metadata: meta,
        data: Some(BTreeMap::from([
            (record_keys::IDENTITY_HASH.to_string(), hash.to_string()),
            (record_keys::LOCATION.to_string(), location(hash)),
            (
                record_keys::STORAGE_TYPE.to_string(),
                STORAGE_TYPE.to_string(),
            ),
            (record_keys::JOB_NAME.to_string(), job_name.to_string()),
            (record_keys::JOB_UID.to_string(), job_uid.to_string()),
        ])),
        ..Default::default()
    }
}

/// Whether `object` is controlled by `ckpt` (controller owner reference with its uid).
pub fn controlled_by<K: Resource>(object: &K, ckpt: &DynamoCheckpoint) -> bool {
    let Some(uid) = ckpt.uid() else {
        return false;
    };
    object
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The attempt number an owned object carries.
pub fn attempt_of<K: Resource>(object: &K) -> Option<i64> {
    object.annotations().get(ATTEMPT_ANNOTATION)?.parse().ok()
}

/// The attempt a Job ran: its number, generation and honoured rebuild token.
pub fn attempt_of_job(job: &Job) -> Option<Attempt> {
    Some(Attempt {
        number: attempt_of(job)?,
        generation: job.annotations().get(GENERATION_ANNOTATION)?.parse().ok()?,
        rebuild: job.annotations().get(REBUILD_ANNOTATION).cloned(),
    })
}

/// The state of `job` (looked up by name) as far as the checkpoint is concerned.
pub fn job_state(job: Option<&Job>, ckpt: &DynamoCheckpoint) -> JobState {
    let Some(job) = job else {
        return JobState::Absent;
    };
    if !controlled_by(job, ckpt) {
        return JobState::Foreign;
    }
    if job.metadata.deletion_timestamp.is_some() {
        return JobState::Terminating;
    }
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is_true = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    if is_true("Complete").is_some() {
        return JobState::Complete;
    }
    if let Some(failed) = is_true("Failed") {
        return JobState::Failed {
            reason: failed
                .reason
                .clone()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "JobFailed".into()),
            message: failed
                .message
                .clone()
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "checkpoint job failed".into()),
        };
    }
    JobState::Running
}

/// Whether the artifact of `attempt` of identity `hash` exists, per its record (looked up by
/// name). A record of the attempt whose identifying fields were edited has drifted.
pub fn artifact_state(
    record: Option<&ConfigMap>,
    ckpt: &DynamoCheckpoint,
    hash: &str,
    attempt: i64,
) -> Artifact {
    let Some(r) = record else {
        return Artifact::Missing;
    };
    if !controlled_by(r, ckpt) {
        return Artifact::Foreign;
    }
    if r.metadata.deletion_timestamp.is_some() || attempt_of(r) != Some(attempt) {
        return Artifact::Missing;
    }
    let data = r.data.clone().unwrap_or_default();
    let desired = render_record(ckpt, hash, attempt, "", "");
    let drifted = desired
        .data
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != record_keys::JOB_NAME && k.as_str() != record_keys::JOB_UID)
        .any(|(k, v)| data.get(k) != Some(v))
        || labels(ckpt, hash)
            .iter()
            .any(|(k, v)| r.labels().get(k) != Some(v));
    if drifted {
        Artifact::Drifted
    } else {
        Artifact::Present
    }
}

/// A data value of an artifact record.
pub fn record_value<'a>(record: Option<&'a ConfigMap>, key: &str) -> Option<&'a str> {
    record?.data.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::checkpoint::{DynamoCheckpointSpec, SharedMemorySpec};
    use api::common::DynamoCheckpointIdentity;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};

    fn ckpt(job: DynamoCheckpointJobConfig) -> DynamoCheckpoint {
        let mut c = DynamoCheckpoint::new(
            "ck",
            DynamoCheckpointSpec {
                identity: DynamoCheckpointIdentity {
                    model: "m".into(),
                    ..Default::default()
                },
                job: Some(job),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u1".into());
        c
    }

    fn config() -> DynamoCheckpointJobConfig {
        DynamoCheckpointJobConfig {
            pod_template_spec: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![
                        Container {
                            name: "sidecar".into(),
                            ..Default::default()
                        },
                        Container {
                            name: "main".into(),
                            env: Some(vec![EnvVar {
                                name: ENV_CHECKPOINT_PATH.into(),
                                value: Some("/mine".into()),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        },
                    ],
                    restart_policy: Some("Always".into()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }
    }

    fn first() -> Attempt {
        Attempt {
            number: 1,
            generation: 3,
            rebuild: Some("t".into()),
        }
    }

    #[test]
    fn job_carries_identity_attempt_and_capture_contract() {
        let c = ckpt(config());
        let job = render_job(&c, "h", &first()).unwrap();
        assert_eq!(job.name_any(), "checkpoint-job-h-1");
        assert_eq!(job.namespace().as_deref(), Some("ns"));
        let owner = &job.owner_references()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u1", Some(true)));
        assert_eq!(job.labels()[CHECKPOINT_ID_LABEL], "h");
        assert_eq!(job.labels()[CHECKPOINT_NAME_LABEL], "ck");
        assert_eq!(attempt_of_job(&job), Some(first()));
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(3600));
        assert_eq!(spec.ttl_seconds_after_finished, None);
        let pod_meta = spec.template.metadata.as_ref().unwrap();
        assert_eq!(
            pod_meta.labels.as_ref().unwrap()[CHECKPOINT_SOURCE_LABEL],
            "true"
        );
        assert_eq!(
            pod_meta.annotations.as_ref().unwrap()[TARGET_CONTAINERS_ANNOTATION],
            "main"
        );
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let main = &pod.containers[1];
        let env: BTreeMap<_, _> = main
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(env[ENV_CHECKPOINT_HASH], "h");
        assert_eq!(env[ENV_CHECKPOINT_PATH], "/mine", "the user's env wins");
        assert_eq!(env[ENV_CHECKPOINT_LOCATION], "/checkpoints/h");
        assert!(pod.containers[0].env.is_none(), "only the target container");
        let shm = &pod.volumes.as_ref().unwrap()[0];
        assert_eq!(shm.name, SHARED_MEMORY_VOLUME);
        assert_eq!(
            shm.empty_dir.as_ref().unwrap().size_limit,
            Some(Quantity("8Gi".into()))
        );
        assert_eq!(
            main.volume_mounts.as_ref().unwrap()[0].mount_path,
            SHARED_MEMORY_PATH
        );
    }

    #[test]
    fn job_options_follow_the_spec() {
        let mut cfg = config();
        cfg.target_container_name = Some("sidecar".into());
        cfg.active_deadline_seconds = Some(60);
        cfg.shared_memory = Some(SharedMemorySpec {
            disabled: true,
            size: None,
        });
        let job = render_job(&ckpt(cfg.clone()), "h", &first()).unwrap();
        let spec = job.spec.unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(60));
        let pod = spec.template.spec.unwrap();
        assert!(pod.volumes.is_none());
        assert!(pod.containers[0].env.is_some());
        cfg.shared_memory = Some(SharedMemorySpec {
            disabled: false,
            size: Some(Quantity("1Gi".into())),
        });
        let job = render_job(&ckpt(cfg.clone()), "h", &first()).unwrap();
        let volumes = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
        assert_eq!(
            volumes[0].empty_dir.as_ref().unwrap().size_limit,
            Some(Quantity("1Gi".into()))
        );
        cfg.target_container_name = Some("absent".into());
        assert!(render_job(&ckpt(cfg), "h", &first()).is_none());
    }

    #[test]
    fn job_states() {
        let c = ckpt(config());
        let mut job = render_job(&c, "h", &first()).unwrap();
        assert_eq!(job_state(None, &c), JobState::Absent);
        assert_eq!(job_state(Some(&job), &c), JobState::Running);
        let cond = |type_: &str, status: &str, reason: Option<&str>| JobCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(str::to_string),
            ..Default::default()
        };
        job.status = Some(JobStatus {
            conditions: Some(vec![
                cond("SuccessCriteriaMet", "True", None),
                cond("Complete", "False", None),
            ]),
            ..Default::default()
        });
        assert_eq!(job_state(Some(&job), &c), JobState::Running);
        job.status.as_mut().unwrap().conditions = Some(vec![cond("Complete", "True", None)]);
        assert_eq!(job_state(Some(&job), &c), JobState::Complete);
        job.status.as_mut().unwrap().conditions =
            Some(vec![cond("Failed", "True", Some("BackoffLimitExceeded"))]);
        assert_eq!(
            job_state(Some(&job), &c),
            JobState::Failed {
                reason: "BackoffLimitExceeded".into(),
                message: "checkpoint job failed".into()
            }
        );
        job.metadata.deletion_timestamp = Some(kit::conditions::now());
        assert_eq!(job_state(Some(&job), &c), JobState::Terminating);
        job.metadata.owner_references.as_mut().unwrap()[0].uid = "previous".into();
        assert_eq!(job_state(Some(&job), &c), JobState::Foreign);
    }

    #[test]
    fn artifact_states() {
        let c = ckpt(config());
        let job = render_job(&c, "h", &first()).unwrap();
        let mut record = render_record(&c, "h", 2, &job.name_any(), "job-uid");
        assert_eq!(record.name_any(), "checkpoint-artifact-h");
        assert_eq!(record.data.as_ref().unwrap()["location"], "/checkpoints/h");
        assert_eq!(record_value(Some(&record), "jobUID"), Some("job-uid"));
        assert_eq!(artifact_state(None, &c, "h", 2), Artifact::Missing);
        assert_eq!(artifact_state(Some(&record), &c, "h", 2), Artifact::Present);
        assert_eq!(artifact_state(Some(&record), &c, "h", 3), Artifact::Missing);
        let mut drifted = record.clone();
        drifted
            .data
            .as_mut()
            .unwrap()
            .insert("location".into(), "/elsewhere".into());
        assert_eq!(
            artifact_state(Some(&drifted), &c, "h", 2),
            Artifact::Drifted
        );
        drifted = record.clone();
        drifted.metadata.labels = None;
        assert_eq!(
            artifact_state(Some(&drifted), &c, "h", 2),
            Artifact::Drifted
        );
        record.metadata.owner_references = None;
        assert_eq!(artifact_state(Some(&record), &c, "h", 2), Artifact::Foreign);
    }
}
