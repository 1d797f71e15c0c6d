//! The worker pods a rollout looks at, as a slim view of `v1/Pod`.
//!
//! The rollout needs two facts about pods that no workload status carries: whether a pod of an
//! old generation is still running (a Deployment's status leaves terminating pods out, and
//! `Recreate` must not start the new generation next to them), and why a pod of the new
//! generation is not scheduled (the scheduler writes it only into the pod's `PodScheduled`
//! condition). [`WorkerPod`] is the kind `v1/Pod` with only metadata, `status.phase` and
//! `status.conditions`: registered in the watch cache instead of the full Pod, it keeps the
//! cache small (no pod specs), and the operator watches it label-selected by
//! `nvidia.com/dynamo-worker-hash`, so only worker pods are held.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The label worker pods carry and the pod watch selects.
pub const POD_WATCH_LABEL: &str = api::labels::DYNAMO_WORKER_HASH;

/// A `v1/Pod` with only what the rollout reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerPod {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    /// Its phase and conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkerPodStatus>,
}

/// The part of a pod's status the rollout reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Its conditions (`PodScheduled`, `Ready`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
}

impl WorkerPod {
    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    /// `Succeeded` or `Failed`: it holds no resources any more. A deletion timestamp alone does
    /// not make a pod terminal (its containers may still run).
    pub fn terminal(&self) -> bool {
        matches!(self.phase(), Some("Succeeded" | "Failed"))
    }

    /// Not running yet.
    pub fn pending(&self) -> bool {
        self.phase() == Some("Pending")
    }

    /// The scheduler's message while it cannot be scheduled (`PodScheduled=False`): the
    /// condition's message, else its reason.
    pub fn unschedulable(&self) -> Option<String> {
        let condition = self
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some(
            condition
                .message
                .clone()
                .filter(|m| !m.is_empty())
                .or_else(|| condition.reason.clone())
                .unwrap_or_else(|| "not scheduled".to_string()),
        )
    }

    /// The workload (DCD) it belongs to: its `nvidia.com/selector` label.
    pub fn workload(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(api::labels::SELECTOR)
            .map(String::as_str)
    }
}

impl kube::Resource for WorkerPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodStatus};

    fn pod(phase: &str, scheduled: Option<(&str, Option<&str>, Option<&str>)>) -> WorkerPod {
        WorkerPod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                labels: Some([(api::labels::SELECTOR.to_string(), "g-w-abc".to_string())].into()),
                ..Default::default()
            },
            status: Some(WorkerPodStatus {
                phase: Some(phase.into()),
                conditions: scheduled
                    .map(|(status, reason, message)| PodCondition {
                        type_: "PodScheduled".into(),
                        status: status.into(),
                        reason: reason.map(str::to_string),
                        message: message.map(str::to_string),
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
            }),
        }
    }

    /// Upstream's `TestOldWorkerPodsTerminated` (9 cases) as the per-pod rule: a pod blocks
    /// until it is terminal; which pods count is the caller's (by `nvidia.com/selector`).
    #[test]
    fn terminal_and_unschedulable() {
        let mut terminating = pod("Running", None);
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
            ));
        let cases = [
            ("running blocks", pod("Running", None), false),
            ("terminating running blocks", terminating, false),
            ("pending blocks", pod("Pending", None), false),
            ("unknown blocks", pod("Unknown", None), false),
            ("failed does not block", pod("Failed", None), true),
            ("succeeded does not block", pod("Succeeded", None), true),
        ];
        for (name, p, terminal) in cases {
            assert_eq!(p.terminal(), terminal, "{name}");
        }
        assert_eq!(pod("Running", None).workload(), Some("g-w-abc"));
        let message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
        let cases = [
            (
                pod(
                    "Pending",
                    Some(("False", Some("Unschedulable"), Some(message))),
                ),
                Some(message.to_string()),
            ),
            (
                pod("Pending", Some(("False", Some("Unschedulable"), None))),
                Some("Unschedulable".to_string()),
            ),
            (pod("Pending", Some(("True", None, None))), None),
            (pod("Pending", None), None),
        ];
        for (p, want) in cases {
            assert_eq!(p.unschedulable(), want);
            assert!(p.pending());
        }
    }

    #[test]
    fn a_pod_reads_as_its_slim_view() {
        let full = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(Default::default()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                host_ip: Some("10.0.0.1".into()),
                ..Default::default()
            }),
        };
        let slim: WorkerPod = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        assert!(slim.pending());
        let back = serde_json::to_value(&slim).unwrap();
        assert!(back.get("spec").is_none());
        assert_eq!(
            <WorkerPod as kube::Resource>::api_version(&()),
            <Pod as kube::Resource>::api_version(&())
        );
    }
}
