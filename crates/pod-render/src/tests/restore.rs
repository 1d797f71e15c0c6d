//! Checkpoint restore through the whole pod: upstream's `checkpoint_test.go`
//! (`TestInjectCheckpointIntoPodSpec`, `TestApplyRestorePodMetadata_*`,
//! `TestApplyRestoreCandidateMetadata`) and the snapshot protocol's `restore_test.go`
//! (`TestPrepareRestorePodSpec`, the restore startup probe) as rows.

use super::*;
use api::snapshot::{
    ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, CHECKPOINT_VOLUME, CONTROL_DIR_ENV,
    CONTROL_VOLUME, POD_INFO_VOLUME, RESTORE_TARGET_LABEL, TARGET_CONTAINERS_ANNOTATION,
};
use api::v1beta1::{CheckpointStartupPolicy, ExperimentalSpec, FailoverSpec, GpuMemoryServiceSpec};
use k8s_openapi::api::core::v1::{ExecAction, Pod, Probe, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::restore::{Checkpoint, Restore, Storage, metadata, parse_targets, restore_pod};

fn ready(targets: &[&str]) -> Checkpoint {
    Checkpoint {
        name: Some("ckpt".into()),
        startup_policy: CheckpointStartupPolicy::WaitForCheckpoint,
        targets: strings(targets),
        restore: Some(Restore {
            checkpoint_id: "abc123def4567890".into(),
            artifact_version: "1".into(),
            storage: Storage {
                pvc_name: "snapshot-pvc".into(),
                base_path: "/checkpoints".into(),
            },
        }),
    }
}

fn worker_with(containers: Vec<Container>) -> DynamoComponentDeploymentSharedSpec {
    component(ComponentType::Worker, containers)
}

fn vllm_main() -> Container {
    let mut main = container("main");
    main.command = Some(strings(&["python3"]));
    main.args = Some(strings(&["-m", "dynamo.vllm"]));
    main
}

fn rendered(c: &DynamoComponentDeploymentSharedSpec, checkpoint: Option<&Checkpoint>) -> PodSpec {
    let mut i = input(c, Backend::Vllm);
    i.checkpoint = checkpoint;
    pod_spec(&i)
}

/// The pod of each case, with and without restore shaping.
#[test]
fn restore_shapes_only_ready_wait_for_checkpoint_pods() {
    let worker = worker_with(vec![vllm_main(), {
        let mut s = container("sidecar");
        s.command = Some(strings(&["sidecar"]));
        s.args = Some(strings(&["run"]));
        s
    }]);
    let cold = rendered(&worker, None);
    let not_ready = Checkpoint {
        restore: None,
        ..ready(&["main"])
    };
    let immediate = Checkpoint {
        startup_policy: CheckpointStartupPolicy::Immediate,
        ..ready(&["main"])
    };
    // (case, checkpoint, pod left as rendered)
    let untouched = [
        ("not ready checkpoint leaves pod spec untouched", not_ready),
        ("immediate templates never change with readiness", immediate),
    ];
    for (name, checkpoint) in untouched {
        assert_eq!(rendered(&worker, Some(&checkpoint)), cold, "{name}");
    }

    // "ready checkpoint injects podinfo and overrides command" and "ready checkpoint targets
    // the container named main".
    let spec = rendered(&worker, Some(&ready(&["main"])));
    let main = &spec.containers[0];
    assert_eq!(main.command, Some(strings(&["sleep", "infinity"])));
    assert_eq!(main.args, None);
    assert_eq!(spec.containers[1].command, Some(strings(&["sidecar"])));
    assert_eq!(spec.containers[1].args, Some(strings(&["run"])));
    let profile = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .unwrap();
    assert_eq!(profile.type_, "Localhost");
    assert_eq!(
        profile.localhost_profile.as_deref(),
        Some("profiles/block-iouring.json")
    );
    assert_eq!(
        spec.security_context.as_ref().unwrap().fs_group,
        Some(DEFAULT_FS_GROUP)
    );
    let pvc = volume(&spec, CHECKPOINT_VOLUME)
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .unwrap();
    assert_eq!(pvc.claim_name, "snapshot-pvc");
    assert_eq!(
        mount(main, CHECKPOINT_VOLUME).unwrap().mount_path,
        "/checkpoints"
    );
    assert!(volume(&spec, CONTROL_VOLUME).unwrap().empty_dir.is_some());
    let control = mount(main, CONTROL_VOLUME).unwrap();
    assert_eq!(
        (control.mount_path.as_str(), control.sub_path.as_deref()),
        ("/snapshot-control", Some("main"))
    );
    assert_eq!(
        env_of(main, CONTROL_DIR_ENV).as_deref(),
        Some("/snapshot-control")
    );
    let podinfo = mount(main, POD_INFO_VOLUME).unwrap();
    assert_eq!(
        (podinfo.mount_path.as_str(), podinfo.read_only),
        ("/etc/podinfo", Some(true))
    );
    let fields: BTreeMap<String, String> = volume(&spec, POD_INFO_VOLUME)
        .and_then(|v| v.downward_api.as_ref())
        .and_then(|d| d.items.clone())
        .unwrap()
        .into_iter()
        .map(|i| (i.path, i.field_ref.unwrap().field_path))
        .collect();
    for (file, field) in [
        ("pod_name", "metadata.name"),
        ("pod_uid", "metadata.uid"),
        ("pod_namespace", "metadata.namespace"),
        (
            "dyn_namespace",
            "metadata.labels['nvidia.com/dynamo-namespace']",
        ),
        (
            "dyn_namespace_worker_suffix",
            "metadata.labels['nvidia.com/dynamo-worker-hash']",
        ),
        (
            "dyn_component",
            "metadata.labels['nvidia.com/dynamo-component-type']",
        ),
        (
            "dyn_parent_dgd_k8s_name",
            "metadata.labels['nvidia.com/dynamo-graph-deployment-name']",
        ),
        ("dyn_parent_dgd_k8s_namespace", "metadata.namespace"),
    ] {
        assert_eq!(fields[file], field, "{file}");
    }
    let sidecar = &spec.containers[1];
    assert!(mount(sidecar, CONTROL_VOLUME).is_none());
    assert!(mount(sidecar, POD_INFO_VOLUME).is_none());
    // The volumes the restore adds, in upstream's order.
    let names: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "shared-memory",
            "checkpoint-storage",
            "snapshot-control",
            "podinfo"
        ]
    );
}

/// "failover targets shape every engine container": both engines restore, each with its own
/// control subPath.
#[test]
fn failover_engines_are_each_restored() {
    let mut main = vllm_main();
    main.resources = Some(ResourceRequirements {
        limits: Some(BTreeMap::from([(
            "nvidia.com/gpu".to_string(),
            Quantity("1".into()),
        )])),
        ..Default::default()
    });
    let mut worker = worker_with(vec![main]);
    worker.experimental = Some(ExperimentalSpec {
        gpu_memory_service: Some(GpuMemoryServiceSpec::default()),
        failover: Some(FailoverSpec::default()),
        ..Default::default()
    });
    let spec = rendered(&worker, Some(&ready(&["engine-0", "engine-1"])));
    for name in ["engine-0", "engine-1"] {
        let engine = spec.containers.iter().find(|c| c.name == name).unwrap();
        assert_eq!(
            engine.command,
            Some(strings(&["sleep", "infinity"])),
            "{name}"
        );
        assert_eq!(engine.args, None, "{name}");
        assert_eq!(
            mount(engine, CONTROL_VOLUME).unwrap().sub_path.as_deref(),
            Some(name)
        );
    }
    let controls = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.name == CONTROL_VOLUME)
        .count();
    assert_eq!(controls, 1, "one control volume, one subPath per engine");
}

/// The restore startup probe (upstream's `ensureRestoreStartupProbe`): the container's own
/// startup, else liveness, else readiness probe polled every second without limit; without
/// any, the agent's restore-complete sentinel.
#[test]
fn the_restore_startup_probe_waits_for_the_restore() {
    let probe = |port: &str| parts::http_probe("/x", port, 30, 7, 3, 5);
    let with = |startup: bool, liveness: bool, readiness: bool| {
        let mut main = vllm_main();
        main.startup_probe = startup.then(|| probe("startup"));
        main.liveness_probe = liveness.then(|| probe("liveness"));
        main.readiness_probe = readiness.then(|| probe("readiness"));
        main
    };
    let sentinel = Probe {
        exec: Some(ExecAction {
            command: Some(strings(&["cat", "/snapshot-control/restore-complete"])),
        }),
        ..Default::default()
    };
    let polled = |base: Probe| Probe {
        initial_delay_seconds: None,
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(i32::MAX),
        success_threshold: Some(1),
        ..base
    };
    // (case, main as the user writes it on a component without defaults, expected probe)
    let rows = [
        (
            "startup probe first",
            with(true, true, true),
            polled(probe("startup")),
        ),
        (
            "else liveness",
            with(false, true, true),
            polled(probe("liveness")),
        ),
        (
            "else readiness",
            with(false, false, true),
            polled(probe("readiness")),
        ),
        (
            "else the sentinel",
            with(false, false, false),
            polled(sentinel),
        ),
    ];
    for (name, main, want) in rows {
        // A component without a type has no default probes.
        let mut c = component(ComponentType::Worker, vec![main]);
        c.r#type = None;
        let spec = rendered(&c, Some(&ready(&["main"])));
        assert_eq!(spec.containers[0].startup_probe, Some(want), "{name}");
        // The liveness and readiness probes are kept.
        let own = &c.main_container().unwrap();
        assert_eq!(
            spec.containers[0].liveness_probe, own.liveness_probe,
            "{name}"
        );
        assert_eq!(
            spec.containers[0].readiness_probe, own.readiness_probe,
            "{name}"
        );
    }
    // A worker's default startup probe becomes the restore probe.
    let spec = rendered(&worker_with(vec![vllm_main()]), Some(&ready(&["main"])));
    let startup = spec.containers[0].startup_probe.clone().unwrap();
    assert_eq!(
        startup.http_get.as_ref().and_then(|h| h.path.as_deref()),
        Some("/live")
    );
    assert_eq!(
        (startup.period_seconds, startup.failure_threshold),
        (Some(1), Some(i32::MAX))
    );
}

/// Shaping is idempotent (upstream's `TestPrepareRestorePodSpec` applies it twice): a user
/// volume or mount of the restore's names is kept, not duplicated.
#[test]
fn restore_keeps_what_is_already_there() {
    let mut main = vllm_main();
    main.volume_mounts = Some(vec![VolumeMount {
        name: CHECKPOINT_VOLUME.into(),
        mount_path: "/mine".into(),
        ..Default::default()
    }]);
    let mut worker = worker_with(vec![main]);
    worker
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .volumes = Some(vec![k8s_openapi::api::core::v1::Volume {
        name: CHECKPOINT_VOLUME.into(),
        ..Default::default()
    }]);
    let spec = rendered(&worker, Some(&ready(&["main"])));
    let count = |name: &str| {
        spec.volumes
            .iter()
            .flatten()
            .filter(|v| v.name == name)
            .count()
    };
    assert_eq!(count(CHECKPOINT_VOLUME), 1);
    assert!(
        volume(&spec, CHECKPOINT_VOLUME)
            .unwrap()
            .persistent_volume_claim
            .is_none()
    );
    assert_eq!(
        mount(&spec.containers[0], CHECKPOINT_VOLUME)
            .unwrap()
            .mount_path,
        "/mine"
    );
    let mut again = spec.clone();
    crate::restore::apply(&mut again, Some(&ready(&["main"])));
    assert_eq!(again, spec);
}

/// The pod template metadata (upstream's `TestApplyRestorePodMetadata_*` and
/// `TestApplyRestoreCandidateMetadata`).
#[test]
fn template_metadata_names_the_checkpoint() {
    type Map = BTreeMap<String, String>;
    let map = |pairs: &[(&str, &str)]| -> Map {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let immediate = |name: Option<&str>, targets: &[&str]| Checkpoint {
        name: name.map(str::to_string),
        startup_policy: CheckpointStartupPolicy::Immediate,
        targets: strings(targets),
        restore: None,
    };
    let stale_labels = map(&[(CHECKPOINT_ID_LABEL, "stale"), ("keep", "l")]);
    let stale_annotations = map(&[
        ("nvidia.com/snapshot-checkpoint-status", "stale"),
        ("nvidia.com/snapshot-restore-status.main", "stale"),
        ("nvidia.com/snapshot-restore-status-like", "kept"),
        (TARGET_CONTAINERS_ANNOTATION, "stale"),
        (ARTIFACT_VERSION_ANNOTATION, "stale"),
        ("keep", "a"),
        ("nvidia.com/snapshot-restore-status-like", "kept"),
    ]);
    // (case, checkpoint, labels, annotations) after the stale values above
    let rows: [(&str, Checkpoint, Map, Map); 6] = [
        (
            "defaults to the main container",
            ready(&["main"]),
            map(&[
                (RESTORE_TARGET_LABEL, "true"),
                (CHECKPOINT_ID_LABEL, "abc123def4567890"),
                ("keep", "l"),
            ]),
            map(&[
                (ARTIFACT_VERSION_ANNOTATION, "1"),
                (TARGET_CONTAINERS_ANNOTATION, "main"),
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
        (
            "failover targets",
            ready(&["engine-0", "engine-1"]),
            map(&[
                (RESTORE_TARGET_LABEL, "true"),
                (CHECKPOINT_ID_LABEL, "abc123def4567890"),
                ("keep", "l"),
            ]),
            map(&[
                (ARTIFACT_VERSION_ANNOTATION, "1"),
                (TARGET_CONTAINERS_ANNOTATION, "engine-0,engine-1"),
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
        (
            "not ready clears the restore metadata",
            Checkpoint {
                restore: None,
                ..ready(&["main"])
            },
            map(&[("keep", "l")]),
            map(&[
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
        (
            "ready checkpoint stamps candidate metadata without restore labels",
            immediate(Some("worker-checkpoint"), &["engine-0", "engine-1"]),
            map(&[("keep", "l")]),
            map(&[
                ("nvidia.com/dynamo-checkpoint-restore-candidate", "true"),
                ("nvidia.com/dynamo-checkpoint-name", "worker-checkpoint"),
                ("nvidia.com/dynamo-checkpoint-startup-policy", "Immediate"),
                (TARGET_CONTAINERS_ANNOTATION, "engine-0,engine-1"),
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
        (
            "no checkpoint yet: no candidate",
            immediate(None, &["main"]),
            map(&[("keep", "l")]),
            map(&[
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
        (
            "empty name: no candidate",
            immediate(Some(""), &["main"]),
            map(&[("keep", "l")]),
            map(&[
                ("keep", "a"),
                ("nvidia.com/snapshot-restore-status-like", "kept"),
            ]),
        ),
    ];
    for (name, checkpoint, want_labels, want_annotations) in rows {
        let (mut l, mut a) = (stale_labels.clone(), stale_annotations.clone());
        metadata(&mut l, &mut a, &checkpoint);
        assert_eq!(l, want_labels, "{name}");
        assert_eq!(a, want_annotations, "{name}");
    }
}

/// The pod-create webhook's restore of an `Immediate` candidate (upstream's
/// `TestPodCheckpointRestoreMutatorHandle`, "ready checkpoint restore-shapes pod create", at
/// the pod level): the pod becomes what a Ready `WaitForCheckpoint` template renders, plus the
/// restore-candidate annotations, which stay; stale restore metadata and agent status go.
#[test]
fn a_created_candidate_pod_is_restored_as_a_waiting_template_is() {
    let worker = worker_with(vec![vllm_main()]);
    let wait = ready(&["main"]);
    let immediate = Checkpoint {
        startup_policy: CheckpointStartupPolicy::Immediate,
        restore: None,
        ..wait.clone()
    };
    let template = |checkpoint: &Checkpoint| {
        let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
        metadata(&mut labels, &mut annotations, checkpoint);
        Pod {
            metadata: ObjectMeta {
                labels: Some(labels),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(rendered(&worker, Some(checkpoint))),
            status: None,
        }
    };
    let mut pod = template(&immediate);
    let pod_annotations = pod.metadata.annotations.as_mut().unwrap();
    pod_annotations.insert("nvidia.com/snapshot-restore-status.main".into(), "x".into());
    pod.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(CHECKPOINT_ID_LABEL.into(), "stale".into());
    restore_pod(&mut pod, &wait.targets, wait.restore.as_ref().unwrap());

    let mut want = template(&wait);
    let want_annotations = want.metadata.annotations.as_mut().unwrap();
    for (key, value) in [
        ("nvidia.com/dynamo-checkpoint-restore-candidate", "true"),
        ("nvidia.com/dynamo-checkpoint-name", "ckpt"),
        ("nvidia.com/dynamo-checkpoint-startup-policy", "Immediate"),
    ] {
        want_annotations.insert(key.into(), value.into());
    }
    assert_eq!(pod, want);
    // Applied twice, nothing changes.
    let mut again = pod.clone();
    restore_pod(&mut again, &wait.targets, wait.restore.as_ref().unwrap());
    assert_eq!(again, pod);
}

/// `nvidia.com/snapshot-target-containers` as the snapshot protocol reads it (upstream's
/// `TargetContainersFromAnnotations` with at least one name).
#[test]
fn target_containers_are_parsed_as_the_protocol_reads_them() {
    type Row = (
        &'static str,
        Option<&'static str>,
        Result<&'static [&'static str], &'static str>,
    );
    let rows: [Row; 7] = [
        ("one", Some("main"), Ok(&["main"])),
        (
            "trimmed",
            Some(" engine-0 , engine-1 "),
            Ok(&["engine-0", "engine-1"]),
        ),
        ("missing", None, Err("missing required")),
        ("blank", Some("  "), Err("missing required")),
        ("empty entry", Some("main,,x"), Err("empty container name")),
        ("trailing comma", Some("main,"), Err("empty container name")),
        (
            "duplicate",
            Some("main, main"),
            Err("duplicate container name \"main\""),
        ),
    ];
    for (name, value, want) in rows {
        let annotations: BTreeMap<String, String> = value
            .map(|v| (TARGET_CONTAINERS_ANNOTATION.to_string(), v.to_string()))
            .into_iter()
            .collect();
        match (parse_targets(&annotations), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, strings(want), "{name}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{name}: {got}"),
            (got, _) => panic!("{name}: {got:?}"),
        }
    }
}
