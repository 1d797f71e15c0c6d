//! Readiness of a graph's Grove children (upstream's `EvaluateGroveReadiness`), a pure function
//! of what was read: the PodCliqueSet and, per component, its PodClique (single-node) or
//! PodCliqueScalingGroup (scaling-group components), named `<pcs>-0-<component>`; the members
//! of a component group (`spec.experimental.componentGroups`) each report the group's
//! PodCliqueScalingGroup `<pcs>-0-<group>` (its status is every member's status entry, and a
//! not-ready group names each member in the message).
//!
//! Per child, in order:
//! | observed | ready | classification | reason |
//! | --- | --- | --- | --- |
//! | missing | no | `some_resources_are_not_ready` | `resource not found` |
//! | `status.observedGeneration` unset / behind | no | `some_resources_are_not_ready` | `observedGeneration is nil` / `spec not yet processed: generation=G, observedGeneration=O` |
//! | desired replicas 0 | yes | | |
//! | replicas = updated = ready (available for groups) = desired | yes | | |
//! | `scheduleGatedReplicas > 0` (cliques) | no | `insufficient_capacity` | `schedule-gated replicas: N` |
//! | `PodCliqueScheduled=False`, reason `InsufficientScheduledPods` (cliques); `MinAvailableBreached=False`, reason `InsufficientScheduledPodCliqueScalingGroupReplicas` (groups) | no | `insufficient_capacity` | the condition |
//! | `0 < scheduledReplicas < desired` | no | `insufficient_capacity` | `insufficient scheduled replicas: scheduled=S/D` |
//! | updated ≠ desired, or replicas ≠ desired | no | `updating` | `desired=D, updated=U` / `performing rolling update: desired=D, replicas=R` |
//! | otherwise | no | `pods_not_ready` | `scheduled but ready=R/D` (`available=` for groups) |
//!
//! The graph's classification is the not-ready components' common classification, or
//! `mixed_not_ready_reasons` when they differ. Worker components report their runtime namespace
//! with the worker hash suffix only once every worker child completed the PodCliqueSet revision
//! Grove accepted (`currentPodCliqueSetGenerationHash` equals the PodCliqueSet's
//! `currentGenerationHash`, at the observed generation, fully updated); until then the previous
//! value is kept, so clients never see a namespace no worker serves yet.

use std::collections::BTreeMap;

use api::grove::{
    CONDITION_MIN_AVAILABLE_BREACHED, CONDITION_POD_CLIQUE_SCHEDULED, PodClique,
    PodCliqueScalingGroup, PodCliqueSet, REASON_INSUFFICIENT_SCHEDULED_PODS,
};
use api::labels;
use api::v1beta1::ComponentReplicaStatus;
use api::{ComponentKind, ComponentType, DynamoGraphDeployment};
use grove_render::compat;
use kit::conditions;

/// Classification: every child is ready; not ready, cause unknown (missing child, stale
/// status).
pub use reconcilers::ready::{REASON_ALL_READY, REASON_SOME_NOT_READY};
/// Classification: pods cannot be scheduled.
pub const REASON_INSUFFICIENT_CAPACITY: &str = "insufficient_capacity";
/// Classification: a rollout is unfinished.
pub const REASON_UPDATING: &str = "updating";
/// Classification: scheduled and rolled out, but not enough pods ready.
pub const REASON_PODS_NOT_READY: &str = "pods_not_ready";
/// Classification: the not-ready components disagree.
pub const REASON_MIXED: &str = "mixed_not_ready_reasons";
/// Legacy reason Grove put on `MinAvailableBreached` of scaling groups that could not schedule.
const REASON_INSUFFICIENT_SCHEDULED_GROUP_REPLICAS: &str =
    "InsufficientScheduledPodCliqueScalingGroupReplicas";

/// What was read for one component.
#[derive(Clone, Debug, PartialEq)]
pub enum Child {
    /// The PodClique of a single-node component (`None`: not found).
    Clique(Option<Box<PodClique>>),
    /// The PodCliqueScalingGroup of a scaling-group component (`None`: not found).
    Group(Option<Box<PodCliqueScalingGroup>>),
}

/// The readiness of one component.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentReadiness {
    /// Ready.
    pub ready: bool,
    /// Why not (empty when ready).
    pub reason: String,
    /// The classification it implies (empty when ready).
    pub classification: &'static str,
    /// The status entry.
    pub status: ComponentReplicaStatus,
    revision: Revision,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Revision {
    observed: bool,
    pcs_hash: Option<String>,
    replicas: i32,
    updated: i32,
    desired: i32,
    update_in_progress: bool,
    update_ended: bool,
}

impl Revision {
    fn completed(&self, accepted: &str) -> bool {
        self.observed
            && self.pcs_hash.as_deref() == Some(accepted)
            && self.replicas == self.desired
            && self.updated == self.desired
            && (!self.update_in_progress || self.update_ended)
    }
}

/// The readiness of the whole graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Readiness {
    /// Every component is ready.
    pub ready: bool,
    /// [`REASON_ALL_READY`] or the not-ready classification.
    pub classification: &'static str,
    /// `<component>: <reason>; ...` of the not-ready components, in spec order.
    pub message: String,
    /// Status per component.
    pub components: BTreeMap<String, ComponentReplicaStatus>,
}

fn not_ready(
    status: ComponentReplicaStatus,
    revision: Revision,
    reason: String,
    classification: &'static str,
) -> ComponentReadiness {
    ComponentReadiness {
        ready: false,
        reason,
        classification,
        status,
        revision,
    }
}

fn ready(status: ComponentReplicaStatus, revision: Revision) -> ComponentReadiness {
    ComponentReadiness {
        ready: true,
        reason: String::new(),
        classification: "",
        status,
        revision,
    }
}

fn empty_status(kind: ComponentKind, name: &str) -> ComponentReplicaStatus {
    ComponentReplicaStatus {
        component_kind: kind,
        component_name: None,
        component_names: vec![name.to_string()],
        runtime_namespace: None,
        gpus_per_engine: None,
        gpus_per_replica: None,
        replicas: 0,
        updated_replicas: 0,
        ready_replicas: None,
        available_replicas: None,
        scheduled_replicas: None,
    }
}

fn stale(observed: Option<i64>, generation: i64) -> Option<String> {
    match observed {
        None => Some("observedGeneration is nil".into()),
        Some(o) if o < generation => Some(format!(
            "spec not yet processed: generation={generation}, observedGeneration={o}"
        )),
        Some(_) => None,
    }
}

/// The readiness of the PodClique `name` (`None`: not found).
pub fn clique(name: &str, pclq: Option<&PodClique>) -> ComponentReadiness {
    let Some(pclq) = pclq else {
        return not_ready(
            empty_status(ComponentKind::PodClique, name),
            Revision::default(),
            "resource not found".into(),
            REASON_SOME_NOT_READY,
        );
    };
    let st = pclq.status.clone().unwrap_or_default();
    let generation = pclq.metadata.generation.unwrap_or_default();
    let desired = pclq.spec.clique.replicas;
    let replicas = st.replicas.unwrap_or(0);
    let mut status = empty_status(ComponentKind::PodClique, name);
    status.replicas = replicas;
    status.updated_replicas = st.updated_replicas;
    status.ready_replicas = Some(st.ready_replicas);
    let revision = Revision {
        observed: st.observed_generation.is_some_and(|o| o >= generation),
        pcs_hash: st.current_pod_clique_set_generation_hash.clone(),
        replicas,
        updated: st.updated_replicas,
        desired,
        update_in_progress: st.update_progress.is_some(),
        update_ended: st
            .update_progress
            .as_ref()
            .is_some_and(|u| u.update_ended_at.is_some()),
    };
    if let Some(why) = stale(st.observed_generation, generation) {
        return not_ready(status, revision, why, REASON_SOME_NOT_READY);
    }
    status.scheduled_replicas = Some(st.scheduled_replicas);
    if desired == 0
        || (replicas == desired && st.updated_replicas == desired && st.ready_replicas == desired)
    {
        return ready(status, revision);
    }
    if st.schedule_gated_replicas > 0 {
        let why = format!("schedule-gated replicas: {}", st.schedule_gated_replicas);
        return not_ready(status, revision, why, REASON_INSUFFICIENT_CAPACITY);
    }
    if let Some(c) = conditions::find(&st.conditions, CONDITION_POD_CLIQUE_SCHEDULED)
        && c.status == "False"
        && c.reason == REASON_INSUFFICIENT_SCHEDULED_PODS
    {
        let why = format!("scheduling condition {}: {}", c.reason, c.message);
        return not_ready(status, revision, why, REASON_INSUFFICIENT_CAPACITY);
    }
    if st.scheduled_replicas > 0 && st.scheduled_replicas < desired {
        let why = format!(
            "insufficient scheduled replicas: scheduled={}/{desired}",
            st.scheduled_replicas
        );
        return not_ready(status, revision, why, REASON_INSUFFICIENT_CAPACITY);
    }
    if st.updated_replicas != desired {
        let why = format!("desired={desired}, updated={}", st.updated_replicas);
        return not_ready(status, revision, why, REASON_UPDATING);
    }
    if replicas != desired {
        let why = format!("performing rolling update: desired={desired}, replicas={replicas}");
        return not_ready(status, revision, why, REASON_UPDATING);
    }
    let why = format!("scheduled but ready={}/{desired}", st.ready_replicas);
    not_ready(status, revision, why, REASON_PODS_NOT_READY)
}

/// The readiness of the PodCliqueScalingGroup `name` (`None`: not found).
pub fn group(name: &str, pcsg: Option<&PodCliqueScalingGroup>) -> ComponentReadiness {
    let Some(pcsg) = pcsg else {
        return not_ready(
            empty_status(ComponentKind::PodCliqueScalingGroup, name),
            Revision::default(),
            "resource not found".into(),
            REASON_SOME_NOT_READY,
        );
    };
    let st = pcsg.status.clone().unwrap_or_default();
    let generation = pcsg.metadata.generation.unwrap_or_default();
    let desired = pcsg.spec.replicas.unwrap_or(1);
    let replicas = st.replicas.unwrap_or(0);
    let mut status = empty_status(ComponentKind::PodCliqueScalingGroup, name);
    status.replicas = replicas;
    status.updated_replicas = st.updated_replicas;
    status.available_replicas = Some(st.available_replicas);
    let revision = Revision {
        observed: st.observed_generation.is_some_and(|o| o >= generation),
        pcs_hash: st.current_pod_clique_set_generation_hash.clone(),
        replicas,
        updated: st.updated_replicas,
        desired,
        update_in_progress: st.update_progress.is_some(),
        update_ended: st
            .update_progress
            .as_ref()
            .is_some_and(|u| u.update_ended_at.is_some()),
    };
    if let Some(why) = stale(st.observed_generation, generation) {
        return not_ready(status, revision, why, REASON_SOME_NOT_READY);
    }
    status.scheduled_replicas = Some(st.scheduled_replicas);
    if desired == 0
        || (replicas == desired
            && st.updated_replicas == desired
            && st.available_replicas == desired)
    {
        return ready(status, revision);
    }
    if let Some(c) = conditions::find(&st.conditions, CONDITION_MIN_AVAILABLE_BREACHED)
        && c.status == "False"
        && c.reason == REASON_INSUFFICIENT_SCHEDULED_GROUP_REPLICAS
    {
        let why = format!("min-available breached ({}): {}", c.reason, c.message);
        return not_ready(status, revision, why, REASON_INSUFFICIENT_CAPACITY);
    }
    if st.scheduled_replicas > 0 && st.scheduled_replicas < desired {
        let why = format!(
            "insufficient scheduled replicas: scheduled={}/{desired}",
            st.scheduled_replicas
        );
        return not_ready(status, revision, why, REASON_INSUFFICIENT_CAPACITY);
    }
    if st.updated_replicas != desired {
        let why = format!("desired={desired}, updated={}", st.updated_replicas);
        return not_ready(status, revision, why, REASON_UPDATING);
    }
    if replicas != desired {
        let why = format!("performing rolling update: desired={desired}, replicas={replicas}");
        return not_ready(status, revision, why, REASON_UPDATING);
    }
    let why = format!(
        "scheduled but available={}/{desired}",
        st.available_replicas
    );
    not_ready(status, revision, why, REASON_PODS_NOT_READY)
}

/// The readiness of one child.
pub fn child(name: &str, child: &Child) -> ComponentReadiness {
    match child {
        Child::Clique(c) => clique(name, c.as_deref()),
        Child::Group(g) => group(name, g.as_deref()),
    }
}

/// The readiness of the graph from its PodCliqueSet (as it is after this pass's writes) and the
/// readiness of each component's child, keyed by component name.
pub fn evaluate(
    dgd: &DynamoGraphDeployment,
    pcs: Option<&PodCliqueSet>,
    children: &BTreeMap<String, ComponentReadiness>,
) -> Readiness {
    let mut classification: Option<&'static str> = None;
    let mut not_ready = Vec::new();
    for c in &dgd.spec.components {
        let Some(r) = children.get(&c.name) else {
            continue;
        };
        if r.ready {
            continue;
        }
        not_ready.push(format!("{}: {}", c.name, r.reason));
        classification = Some(match classification {
            None => r.classification,
            Some(same) if same == r.classification => same,
            Some(_) => REASON_MIXED,
        });
    }
    let namespaces = RuntimeNamespaces::plan(dgd, pcs, children);
    let components = dgd
        .spec
        .components
        .iter()
        .filter_map(|c| {
            let mut status = children.get(&c.name)?.status.clone();
            status.runtime_namespace = namespaces.of(dgd, c);
            Some((c.name.clone(), status))
        })
        .collect();
    Readiness {
        ready: not_ready.is_empty(),
        classification: classification.unwrap_or(REASON_ALL_READY),
        message: not_ready.join("; "),
        components,
    }
}

/// Which runtime namespace worker components report (see the module docs).
struct RuntimeNamespaces {
    /// The accepted PodCliqueSet revision, once every worker child completed it.
    completed: bool,
    /// The worker hash rendered into the accepted revision (`None`: unlabelled workers).
    hash: Option<String>,
}

impl RuntimeNamespaces {
    fn plan(
        dgd: &DynamoGraphDeployment,
        pcs: Option<&PodCliqueSet>,
        children: &BTreeMap<String, ComponentReadiness>,
    ) -> Self {
        let accepted = pcs.and_then(|p| {
            let st = p.status.as_ref()?;
            (st.observed_generation? == p.metadata.generation.unwrap_or_default())
                .then(|| st.current_generation_hash.clone())
                .flatten()
        });
        let workers: Vec<_> = dgd
            .spec
            .components
            .iter()
            .filter(|c| c.r#type.is_some_and(ComponentType::is_worker))
            .collect();
        let completed = accepted.as_deref().is_some_and(|hash| {
            !workers.is_empty()
                && workers.iter().all(|c| {
                    children
                        .get(&c.name)
                        .is_some_and(|r| r.revision.completed(hash))
                })
        });
        let hash = pcs.and_then(|p| {
            workers.iter().find_map(|c| {
                compat::clique_of(p, &c.name)?
                    .labels
                    .get(labels::DYNAMO_WORKER_HASH)
                    .filter(|h| !h.is_empty())
                    .cloned()
            })
        });
        RuntimeNamespaces { completed, hash }
    }

    fn of(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &api::DynamoComponentDeploymentSharedSpec,
    ) -> Option<String> {
        let base = labels::dynamo_namespace(
            component.global_dynamo_namespace,
            dgd.metadata.namespace.as_deref().unwrap_or_default(),
            dgd.metadata.name.as_deref().unwrap_or_default(),
        );
        if !component.r#type.is_some_and(ComponentType::is_worker) {
            return Some(base);
        }
        if !self.completed {
            return dgd
                .status
                .as_ref()
                .and_then(|s| s.components.get(&component.name))
                .and_then(|s| s.runtime_namespace.clone());
        }
        Some(match &self.hash {
            Some(hash) => format!("{base}-{hash}"),
            None => base,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::grove::{
        PodCliqueResourceSpec, PodCliqueScalingGroupSpec, PodCliqueScalingGroupStatus,
        PodCliqueStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::conditions::Status;

    fn pclq(desired: i32, st: PodCliqueStatus) -> PodClique {
        let mut c = PodClique {
            metadata: ObjectMeta {
                generation: Some(2),
                ..Default::default()
            },
            spec: PodCliqueResourceSpec::default(),
            status: Some(PodCliqueStatus {
                observed_generation: st.observed_generation.or(Some(2)),
                ..st
            }),
        };
        c.spec.clique.replicas = desired;
        c
    }

    fn st(replicas: i32, updated: i32, ready: i32, scheduled: i32) -> PodCliqueStatus {
        PodCliqueStatus {
            replicas: Some(replicas),
            updated_replicas: updated,
            ready_replicas: ready,
            scheduled_replicas: scheduled,
            ..Default::default()
        }
    }

    #[test]
    fn clique_classification_follows_upstream_in_order() {
        let scheduled_false = PodCliqueStatus {
            conditions: vec![conditions::new(
                CONDITION_POD_CLIQUE_SCHEDULED,
                Status::False,
                REASON_INSUFFICIENT_SCHEDULED_PODS,
                "0/3 nodes",
                2,
            )],
            ..st(2, 2, 0, 0)
        };
        let cases: Vec<(&str, Option<PodClique>, bool, &str, &str)> = vec![
            (
                "missing",
                None,
                false,
                REASON_SOME_NOT_READY,
                "resource not found",
            ),
            (
                "stale",
                Some(pclq(
                    2,
                    PodCliqueStatus {
                        observed_generation: Some(1),
                        ..st(2, 2, 2, 2)
                    },
                )),
                false,
                REASON_SOME_NOT_READY,
                "spec not yet processed: generation=2, observedGeneration=1",
            ),
            ("zero desired", Some(pclq(0, st(0, 0, 0, 0))), true, "", ""),
            ("all ready", Some(pclq(2, st(2, 2, 2, 0))), true, "", ""),
            (
                "gated",
                Some(pclq(
                    2,
                    PodCliqueStatus {
                        schedule_gated_replicas: 1,
                        ..st(2, 2, 1, 1)
                    },
                )),
                false,
                REASON_INSUFFICIENT_CAPACITY,
                "schedule-gated replicas: 1",
            ),
            (
                "unschedulable",
                Some(pclq(2, scheduled_false)),
                false,
                REASON_INSUFFICIENT_CAPACITY,
                "scheduling condition InsufficientScheduledPods: 0/3 nodes",
            ),
            (
                "partially scheduled",
                Some(pclq(3, st(3, 3, 1, 1))),
                false,
                REASON_INSUFFICIENT_CAPACITY,
                "insufficient scheduled replicas: scheduled=1/3",
            ),
            (
                "rolling",
                Some(pclq(2, st(2, 1, 2, 2))),
                false,
                REASON_UPDATING,
                "desired=2, updated=1",
            ),
            (
                "surge",
                Some(pclq(2, st(3, 2, 2, 2))),
                false,
                REASON_UPDATING,
                "performing rolling update: desired=2, replicas=3",
            ),
            (
                "not ready",
                Some(pclq(2, st(2, 2, 1, 2))),
                false,
                REASON_PODS_NOT_READY,
                "scheduled but ready=1/2",
            ),
        ];
        for (name, c, is_ready, classification, reason) in cases {
            let r = clique("x", c.as_ref());
            assert_eq!(
                (r.ready, r.classification, r.reason.as_str()),
                (is_ready, classification, reason),
                "{name}"
            );
        }
    }

    #[test]
    fn groups_use_available_replicas() {
        let g = |available: i32| PodCliqueScalingGroup {
            metadata: ObjectMeta {
                generation: Some(1),
                ..Default::default()
            },
            spec: PodCliqueScalingGroupSpec {
                replicas: Some(2),
                ..Default::default()
            },
            status: Some(PodCliqueScalingGroupStatus {
                observed_generation: Some(1),
                replicas: Some(2),
                updated_replicas: 2,
                scheduled_replicas: 2,
                available_replicas: available,
                ..Default::default()
            }),
        };
        assert!(group("x", Some(&g(2))).ready);
        let r = group("x", Some(&g(1)));
        assert_eq!(
            (r.classification, r.reason.as_str()),
            (REASON_PODS_NOT_READY, "scheduled but available=1/2")
        );
        assert_eq!(
            r.status.component_kind,
            ComponentKind::PodCliqueScalingGroup
        );
        assert_eq!(r.status.available_replicas, Some(1));
    }

    #[test]
    fn the_graph_classification_is_common_or_mixed() {
        let mut dgd = DynamoGraphDeployment::new("g", Default::default());
        dgd.metadata.namespace = Some("ns".into());
        for n in ["a", "b", "c"] {
            dgd.spec
                .components
                .push(api::DynamoComponentDeploymentSharedSpec {
                    name: n.into(),
                    ..Default::default()
                });
        }
        let updating = clique("x", Some(&pclq(2, st(2, 1, 2, 2))));
        let missing = clique("y", None);
        let ok = clique("z", Some(&pclq(1, st(1, 1, 1, 1))));
        let same = BTreeMap::from([
            ("a".to_string(), updating.clone()),
            ("b".to_string(), updating.clone()),
            ("c".to_string(), ok.clone()),
        ]);
        let r = evaluate(&dgd, None, &same);
        assert_eq!((r.ready, r.classification), (false, REASON_UPDATING));
        assert_eq!(
            r.message,
            "a: desired=2, updated=1; b: desired=2, updated=1"
        );
        let mixed = BTreeMap::from([
            ("a".to_string(), updating),
            ("b".to_string(), missing),
            ("c".to_string(), ok.clone()),
        ]);
        assert_eq!(evaluate(&dgd, None, &mixed).classification, REASON_MIXED);
        let all = BTreeMap::from([
            ("a".to_string(), ok.clone()),
            ("b".to_string(), ok.clone()),
            ("c".to_string(), ok),
        ]);
        let r = evaluate(&dgd, None, &all);
        assert_eq!((r.ready, r.classification), (true, REASON_ALL_READY));
        assert_eq!(r.components["a"].runtime_namespace.as_deref(), Some("ns-g"));
    }
}
