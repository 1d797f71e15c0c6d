//! Where checkpoint artifacts are stored, as restore pods need it: discovered from the snapshot
//! agent's DaemonSet in the pod's namespace (label `app.kubernetes.io/component=snapshot-agent`).
//! The first DaemonSet (in list order) whose `agent` container mounts a `checkpoints` volume
//! backed by a PersistentVolumeClaim gives the claim and the mount path (the base path, without
//! a trailing `/`). No such DaemonSet is an error: restore pods cannot be rendered until the
//! agent is installed.

use api::snapshot::{AGENT_CONTAINER, AGENT_LABEL_KEY, AGENT_LABEL_VALUE, AGENT_VOLUME};
use k8s_openapi::api::apps::v1::DaemonSet;
use kit::{Reader, ReaderExt, Selector};
use pod_render::restore::Storage;

use crate::error::{Error, Result};

/// The checkpoint storage of `namespace` (see the module docs).
pub async fn discover(reader: &dyn Reader, namespace: &str) -> Result<Storage> {
    let selector =
        Selector::from_iter([(AGENT_LABEL_KEY.to_string(), AGENT_LABEL_VALUE.to_string())]);
    let agents: Vec<DaemonSet> =
        reader
            .list(Some(namespace), &selector)
            .await
            .map_err(Error::api(format!(
                "list snapshot-agent DaemonSets in {namespace}"
            )))?;
    from_daemon_sets(namespace, &agents).map_err(Error::Missing)
}

/// The checkpoint storage the agent DaemonSets `agents` of `namespace` mount (see the module
/// docs), or why there is none.
pub fn from_daemon_sets(
    namespace: &str,
    agents: &[DaemonSet],
) -> std::result::Result<Storage, String> {
    if agents.is_empty() {
        return Err(format!(
            "no snapshot-agent daemonset found in namespace {namespace}"
        ));
    }
    for agent in agents {
        let Some(spec) = agent.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
            continue;
        };
        let base_path = spec
            .containers
            .iter()
            .filter(|c| c.name == AGENT_CONTAINER)
            .flat_map(|c| c.volume_mounts.iter().flatten())
            .filter(|m| m.name == AGENT_VOLUME && !m.mount_path.trim().is_empty())
            .map(|m| m.mount_path.trim_end_matches('/').to_string())
            .next_back();
        let claim = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == AGENT_VOLUME)
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|p| p.claim_name.trim().to_string())
            .find(|c| !c.is_empty());
        if let (Some(base_path), Some(pvc_name)) = (base_path.filter(|p| !p.is_empty()), claim) {
            return Ok(Storage {
                pvc_name,
                base_path,
            });
        }
    }
    let names: Vec<String> = agents
        .iter()
        .map(|a| a.metadata.name.clone().unwrap_or_default())
        .collect();
    Err(format!(
        "snapshot-agent daemonset in {namespace} does not mount a PVC-backed checkpoint volume ({})",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSetSpec;
    use k8s_openapi::api::core::v1::{
        Container, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A DaemonSet `name` whose container `container` mounts `mounts` (volume, path) and whose
    /// pod has `volumes` (name, claim; no claim: an emptyDir-like volume).
    fn agent(
        name: &str,
        container: &str,
        mounts: &[(&str, &str)],
        volumes: &[(&str, Option<&str>)],
    ) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(DaemonSetSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: container.into(),
                            volume_mounts: Some(
                                mounts
                                    .iter()
                                    .map(|(n, p)| VolumeMount {
                                        name: (*n).into(),
                                        mount_path: (*p).into(),
                                        ..Default::default()
                                    })
                                    .collect(),
                            ),
                            ..Default::default()
                        }],
                        volumes: Some(
                            volumes
                                .iter()
                                .map(|(n, claim)| Volume {
                                    name: (*n).into(),
                                    persistent_volume_claim: claim.map(|c| {
                                        PersistentVolumeClaimVolumeSource {
                                            claim_name: c.into(),
                                            read_only: None,
                                        }
                                    }),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: None,
        }
    }

    /// Storage discovery, as upstream's snapshot protocol finds it (rows 1-2 are upstream's
    /// `TestDiscoverStorageFromDaemonSetsUsesCheckpointsVolume` and its missing-agent case).
    #[test]
    fn storage_is_the_agents_checkpoints_claim_and_mount() {
        type Row = (
            &'static str,
            Vec<DaemonSet>,
            Result<(&'static str, &'static str), &'static str>,
        );
        let rows: Vec<Row> = vec![
            (
                "the checkpoints volume, not another claim",
                vec![agent(
                    "snapshot-agent",
                    "agent",
                    &[("cache", "/cache"), ("checkpoints", "/checkpoints")],
                    &[
                        ("cache", Some("cache-pvc")),
                        ("checkpoints", Some("snapshot-pvc")),
                    ],
                )],
                Ok(("snapshot-pvc", "/checkpoints")),
            ),
            (
                "no agent",
                vec![],
                Err("no snapshot-agent daemonset found in namespace ns"),
            ),
            (
                "trailing slash trimmed",
                vec![agent(
                    "a",
                    "agent",
                    &[("checkpoints", "/data/ckpt/")],
                    &[("checkpoints", Some("pvc"))],
                )],
                Ok(("pvc", "/data/ckpt")),
            ),
            (
                "not a claim",
                vec![agent(
                    "a",
                    "agent",
                    &[("checkpoints", "/c")],
                    &[("checkpoints", None)],
                )],
                Err("does not mount a PVC-backed checkpoint volume (a)"),
            ),
            (
                "another container's mount",
                vec![agent(
                    "a",
                    "helper",
                    &[("checkpoints", "/c")],
                    &[("checkpoints", Some("p"))],
                )],
                Err("does not mount a PVC-backed checkpoint volume (a)"),
            ),
            (
                "the first usable agent",
                vec![
                    agent("a", "agent", &[], &[]),
                    agent(
                        "b",
                        "agent",
                        &[("checkpoints", "/b")],
                        &[("checkpoints", Some("pb"))],
                    ),
                ],
                Ok(("pb", "/b")),
            ),
        ];
        for (name, agents, want) in rows {
            let got = from_daemon_sets("ns", &agents);
            match (got, want) {
                (Ok(s), Ok((pvc, path))) => {
                    assert_eq!(
                        (s.pvc_name.as_str(), s.base_path.as_str()),
                        (pvc, path),
                        "{name}"
                    )
                }
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
