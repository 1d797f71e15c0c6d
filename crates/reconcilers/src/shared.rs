//! The shared resources both workload programs need before their workloads, in upstream's
//! strict order: [`rbac`](crate::rbac) → [`pvc`](crate::pvc) →
//! [`discovery`](crate::discovery) → [`gms`](crate::gms) →
//! [`checkpoints`](crate::checkpoints) → [`epp`](crate::epp) →
//! [`wait_for_leader`](crate::wait_for_leader) → [`ssh_keys`](crate::ssh_keys) →
//! [`ingress`](crate::ingress).
//!
//! The first failure stops the sequence: nothing after the failing step is touched. The outcome
//! is marked failed ([`kit::OrFail`]) with `Ready=False`, reason
//! [`REASON_FAILED_TO_RECONCILE_RESOURCES`](crate::error::REASON_FAILED_TO_RECONCILE_RESOURCES)
//! (`failed_to_reconcile_the_resources`, upstream's reason for every shared step) and a message
//! that names the step first, worded as upstream's:
//!
//! | step | message prefix |
//! | --- | --- |
//! | rbac | `failed to reconcile planner/EPP RBAC` |
//! | pvc | `failed to reconcile top-level PVCs` |
//! | discovery | `failed to reconcile K8s discovery resources` |
//! | gms | `failed to reconcile GMS ResourceClaimTemplates` |
//! | checkpoints | `failed to reconcile checkpoints` |
//! | epp | `failed to reconcile EPP resources` |
//! | wait_for_leader | `failed to reconcile wait-leader ConfigMap` |
//! | ssh_keys | `failed to reconcile MPI SSH keys` |
//! | ingress | `failed to sync the main component ingress` |
//!
//! A failure that only a change can fix (an invalid spec, a missing operator setting) does not
//! retry until the graph changes ([`kit::Failed::await_change`]); every other one backs off.
//! Once the checkpoint step succeeded, `status.checkpoints` holds its entries, also when a later
//! step fails. Mutation events of the writes that succeeded are queued in the outcome either way.

use std::sync::Arc;

use std::collections::BTreeMap;

use api::common::ComponentCheckpointStatus;
use api::{DynamoCheckpoint, DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kit::{Event, Failed, Outcome, Reader, Scoped, Writer};

use crate::checkpoints::{CheckpointConfig, CheckpointReconciler, Resolved};
use crate::discovery::{DiscoveryBackend, DiscoveryReconciler};
use crate::epp::{EppReconciler, InferencePool};
use crate::error::{Error, Step};
use crate::gms::GmsReconciler;
use crate::ingress::{HttpRoute, IngressConfig, IngressReconciler, VirtualService};
use crate::pvc::PvcReconciler;
use crate::rbac::{RbacConfig, RbacReconciler};
use crate::ssh_keys::{SshKeyConfig, SshKeyReconciler};
use crate::wait_for_leader::WaitForLeaderReconciler;

/// Which namespaces the operator serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Every namespace (the default): the operator binds planner and EPP accounts itself.
    #[default]
    ClusterWide,
    /// Only this namespace: its install ships the planner and EPP accounts.
    Restricted(String),
}

/// Operator-level settings of the shared resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedConfig {
    /// Cluster-wide or restricted to one namespace.
    pub scope: NamespaceScope,
    /// ClusterRole bound to `planner-serviceaccount` (cluster-wide mode).
    pub planner_cluster_role: Option<String>,
    /// ClusterRole bound to `epp-serviceaccount` (cluster-wide mode).
    pub epp_cluster_role: Option<String>,
    /// Discovery backend of graphs without the `nvidia.com/dynamo-discovery-backend` annotation.
    pub discovery_backend: DiscoveryBackend,
    /// Checkpointing is enabled.
    pub checkpoints_enabled: bool,
    /// The MPI SSH key Secret is managed (`None`: the install provides it).
    pub ssh_keys: Option<SshKeyConfig>,
    /// The operator's infrastructure endpoints (env of automatic checkpoints' capture pods).
    pub infrastructure: pod_render::Infrastructure,
    /// How frontends are exposed when a graph does not say.
    pub ingress: IngressConfig,
}

/// ClusterRole a fresh install binds planner accounts to.
pub const DEFAULT_PLANNER_CLUSTER_ROLE: &str = "dynamo-operator-planner";
/// ClusterRole a fresh install binds EPP accounts to.
pub const DEFAULT_EPP_CLUSTER_ROLE: &str = "dynamo-operator-epp";

impl Default for SharedConfig {
    /// A fresh cluster-wide install: ClusterRoles [`DEFAULT_PLANNER_CLUSTER_ROLE`] and
    /// [`DEFAULT_EPP_CLUSTER_ROLE`], Kubernetes discovery, checkpoints on, SSH keys managed under
    /// upstream's default name and generated per namespace.
    fn default() -> Self {
        Self {
            scope: NamespaceScope::ClusterWide,
            planner_cluster_role: Some(DEFAULT_PLANNER_CLUSTER_ROLE.into()),
            epp_cluster_role: Some(DEFAULT_EPP_CLUSTER_ROLE.into()),
            discovery_backend: DiscoveryBackend::Kubernetes,
            checkpoints_enabled: true,
            ssh_keys: Some(SshKeyConfig::default()),
            infrastructure: pod_render::Infrastructure::default(),
            ingress: IngressConfig::default(),
        }
    }
}

/// The shared resources of a graph, one reconciler per family.
pub struct SharedResources {
    /// Planner and EPP service accounts.
    pub rbac: RbacReconciler,
    /// Preserved v1alpha1 top-level PVCs.
    pub pvc: PvcReconciler,
    /// Kubernetes discovery RBAC.
    pub discovery: DiscoveryReconciler,
    /// GPU memory service ResourceClaimTemplates.
    pub gms: GmsReconciler,
    /// Checkpoint lookup and automatic checkpoints.
    pub checkpoints: CheckpointReconciler,
    /// EPP ConfigMap and InferencePool.
    pub epp: EppReconciler,
    /// Wait-for-leader script ConfigMap.
    pub wait_for_leader: WaitForLeaderReconciler,
    /// MPI SSH key Secret.
    pub ssh_keys: SshKeyReconciler,
    /// Frontends' Ingresses, VirtualServices and HTTPRoutes.
    pub ingress: IngressReconciler,
}

impl SharedResources {
    /// Every shared reconciler over `reader`, each writing through `writer` scoped to the kinds
    /// it owns ([`Scoped`]: no step can write the graph or another step's kinds), configured by
    /// `config`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: SharedConfig) -> Self {
        let r = || reader.clone();
        let w = || Scoped::new(writer.clone());
        Self {
            rbac: RbacReconciler::new(
                r(),
                w().allow::<ServiceAccount>().allow::<RoleBinding>().build(),
                RbacConfig {
                    cluster_wide: config.scope == NamespaceScope::ClusterWide,
                    planner_cluster_role: config.planner_cluster_role,
                    epp_cluster_role: config.epp_cluster_role,
                },
            ),
            pvc: PvcReconciler::new(r(), w().allow::<PersistentVolumeClaim>().build()),
            discovery: DiscoveryReconciler::new(
                r(),
                w().allow::<ServiceAccount>()
                    .allow::<Role>()
                    .allow::<RoleBinding>()
                    .build(),
                config.discovery_backend,
            ),
            gms: GmsReconciler::new(r(), w().allow::<ResourceClaimTemplate>().build()),
            checkpoints: CheckpointReconciler::new(
                r(),
                w().allow::<DynamoCheckpoint>().build(),
                CheckpointConfig {
                    enabled: config.checkpoints_enabled,
                    discovery: config.discovery_backend,
                    infrastructure: config.infrastructure,
                },
            ),
            epp: EppReconciler::new(
                r(),
                w().allow::<ConfigMap>().allow::<InferencePool>().build(),
            ),
            wait_for_leader: WaitForLeaderReconciler::new(r(), w().allow::<ConfigMap>().build()),
            ssh_keys: SshKeyReconciler::new(r(), w().allow::<Secret>().build(), config.ssh_keys),
            ingress: IngressReconciler::new(
                r(),
                w().allow::<Ingress>()
                    .allow::<VirtualService>()
                    .allow::<HttpRoute>()
                    .build(),
                config.ingress,
            ),
        }
    }

    /// Run the nine steps in order (see the module docs). Returns what the checkpoint step
    /// resolved (the `status.checkpoints` entries and the infos for workload rendering) and the
    /// mutation events; on failure, the error and the checkpoint entries resolved before it.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<Resolved, Stopped> {
        let mut events = Vec::new();
        let mut checkpoints = None;
        let result = self.converge(dgd, &mut events, &mut checkpoints).await;
        let result = match result {
            Ok(()) => Ok(checkpoints.expect("the checkpoint step ran")),
            Err(error) => Err(Stopped {
                error,
                checkpoints: checkpoints.map(|r| r.statuses),
            }),
        };
        kit::Step::new(result, events)
    }

    async fn converge(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
        checkpoints: &mut Option<Resolved>,
    ) -> Result<(), Error> {
        step(
            Step::Rbac,
            self.rbac.reconcile(dgd).await.events_into(events),
        )?;
        step(Step::Pvc, self.pvc.reconcile(dgd).await.events_into(events))?;
        let r = self.discovery.reconcile(dgd).await;
        step(Step::Discovery, r.events_into(events))?;
        step(Step::Gms, self.gms.reconcile(dgd).await.events_into(events))?;
        let r = self.checkpoints.reconcile(dgd).await;
        *checkpoints = Some(step(Step::Checkpoints, r.events_into(events))?);
        step(Step::Epp, self.epp.reconcile(dgd).await.events_into(events))?;
        let r = self.wait_for_leader.reconcile(dgd).await;
        step(Step::WaitForLeader, r.events_into(events))?;
        let r = self.ssh_keys.reconcile(dgd).await;
        step(Step::SshKeys, r.events_into(events))?;
        let r = self.ingress.reconcile(dgd).await;
        step(Step::Ingress, r.events_into(events))?;
        Ok(())
    }
}

/// The shared resources stopped at a failing step.
#[derive(Debug)]
pub struct Stopped {
    /// The failing step's error, naming the step.
    pub error: Error,
    /// The `status.checkpoints` entries, when the checkpoint step ran before the failure.
    pub checkpoints: Option<BTreeMap<String, ComponentCheckpointStatus>>,
}

/// Fold the shared step's result into a program's outcome `out`: its events, and its
/// `status.checkpoints` entries (also those resolved before a failure). Returns the checkpoint
/// infos for rendering, or the outcome marked failed ([`Stopped::fail`]).
pub fn fold(
    out: &mut Outcome<DynamoGraphDeploymentStatus>,
    step: kit::Step<Resolved, Stopped>,
    generation: i64,
) -> Result<crate::checkpoints::CheckpointInfos, Box<Failed<DynamoGraphDeploymentStatus, Error>>> {
    match out.take(step) {
        Ok(resolved) => {
            out.status.checkpoints = resolved.statuses;
            Ok(resolved.infos)
        }
        Err(stopped) => Err(Box::new(stopped.fail(std::mem::take(out), generation))),
    }
}

impl Stopped {
    /// The program's outcome `out` marked failed at `generation` ([`kit::Outcome::fail`]) with
    /// the step's reason, keeping the checkpoint entries resolved before the failure; no retry
    /// until the graph changes when only a change can fix the error.
    pub fn fail(
        self,
        mut out: Outcome<DynamoGraphDeploymentStatus>,
        generation: i64,
    ) -> Failed<DynamoGraphDeploymentStatus, Error> {
        if let Some(checkpoints) = self.checkpoints {
            out.status.checkpoints = checkpoints;
        }
        let reason = self.error.step().map_or(
            crate::error::REASON_FAILED_TO_RECONCILE_RESOURCES,
            Step::reason,
        );
        let awaits_change = self.error.awaits_change();
        let failed = out.fail(generation, reason, self.error);
        if awaits_change {
            failed.await_change()
        } else {
            failed
        }
    }
}

/// On failure: log and wrap as `step`'s error.
fn step<T>(step: Step, result: Result<T, Error>) -> Result<T, Error> {
    result.map_err(|e| {
        tracing::warn!(step = step.context(), error = %e, "shared resources step failed");
        step.wrap(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::REASON_FAILED_TO_RECONCILE_RESOURCES;
    use crate::testutil::{component, dgd};
    use api::ComponentType;
    use api::common::MultinodeSpec;
    use api::v1beta1::{ComponentCheckpointConfig, ExperimentalSpec, GpuMemoryServiceSpec};
    use api::{BackendFramework, DgdState};
    use k8s_openapi::api::core::v1::{ResourceRequirements, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::conditions::{self, READY};
    use kit::testing::{Double, Verb};
    use kit::{ReaderExt, Retry};
    use std::collections::BTreeMap;

    /// A graph exercising every step, and the fixtures it needs.
    fn everything(d: &Double) -> DynamoGraphDeployment {
        for role in [DEFAULT_PLANNER_CLUSTER_ROLE, DEFAULT_EPP_CLUSTER_ROLE] {
            d.insert(ClusterRole {
                metadata: ObjectMeta {
                    name: Some(role.into()),
                    ..Default::default()
                },
                ..Default::default()
            });
        }
        d.insert(DeviceClass {
            metadata: ObjectMeta {
                name: Some("gpu.nvidia.com".into()),
                ..Default::default()
            },
            spec: DeviceClassSpec::default(),
        });
        let mut worker = component("Decode", ComponentType::Decode);
        worker.multinode = Some(MultinodeSpec { node_count: 2 });
        worker.experimental = Some(ExperimentalSpec {
            gpu_memory_service: Some(GpuMemoryServiceSpec::default()),
            checkpoint: Some(ComponentCheckpointConfig {
                enabled: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        let main = &mut worker
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0];
        main.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "nvidia.com/gpu".into(),
                Quantity("1".into()),
            )])),
            ..Default::default()
        });
        let beta = dgd(
            "g",
            vec![
                component("Planner", ComponentType::Planner),
                component("Epp", ComponentType::Epp),
                worker,
            ],
        );
        let mut alpha = api::conversion::to_v1alpha1(&beta);
        alpha.spec.pvcs = vec![api::v1alpha1::Pvc {
            create: Some(true),
            name: "models".into(),
            storage_class: None,
            size: Some(Quantity("1Gi".into())),
            volume_access_mode: Some("ReadWriteOnce".into()),
        }];
        let mut g = api::conversion::to_v1beta1(&alpha);
        g.spec.backend_framework = Some(BackendFramework::Vllm);
        d.insert(g)
    }

    /// The kinds a first reconcile of [`everything`] writes, in order.
    const ORDER: [&str; 13] = [
        "ServiceAccount",
        "RoleBinding",
        "ServiceAccount",
        "RoleBinding",
        "PersistentVolumeClaim",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ResourceClaimTemplate",
        "DynamoCheckpoint",
        "InferencePool",
        "ConfigMap",
        "Secret",
    ];

    fn shared(d: &Double) -> SharedResources {
        SharedResources::new(d.reader(), d.writer(), SharedConfig::default())
    }

    fn outcome() -> Outcome<DynamoGraphDeploymentStatus> {
        Outcome::new(DynamoGraphDeploymentStatus::default())
    }

    /// The shared step folded into `out` as a program does.
    async fn run(
        s: &SharedResources,
        g: &DynamoGraphDeployment,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<crate::checkpoints::CheckpointInfos, Box<Failed<DynamoGraphDeploymentStatus, Error>>>
    {
        let generation = g.metadata.generation.unwrap_or_default();
        fold(out, s.reconcile(g).await, generation)
    }

    /// The kinds written, in order, without repeats of the same kind in a row.
    fn kinds(d: &Double) -> Vec<String> {
        let mut kinds: Vec<String> = Vec::new();
        for w in d.writes() {
            if kinds.last() != Some(&w.kind) {
                kinds.push(w.kind);
            }
        }
        kinds
    }

    #[tokio::test]
    async fn runs_every_step_in_order_then_writes_nothing() {
        let d = Double::new();
        let g = everything(&d);
        let s = shared(&d);
        let mut out = outcome();
        let infos = run(&s, &g, &mut out).await.unwrap();
        assert_eq!(kinds(&d), ORDER);
        assert!(infos["Decode"].exists);
        assert_eq!(
            out.status.checkpoints["Decode"].checkpoint_name,
            infos["Decode"].checkpoint_name
        );
        assert_eq!(
            out.events.len(),
            d.writes().len(),
            "one event per created child"
        );

        d.clear_writes();
        let mut again = outcome();
        run(&s, &g, &mut again).await.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(again.events.is_empty());
        assert_eq!(again.status.checkpoints, out.status.checkpoints);
    }

    /// For each step: the write to fail, the step it belongs to.
    const FAILURES: [(Verb, &str, Step); 8] = [
        (Verb::Apply, "ServiceAccount", Step::Rbac),
        (Verb::Create, "PersistentVolumeClaim", Step::Pvc),
        (Verb::Apply, "Role", Step::Discovery),
        (Verb::Apply, "ResourceClaimTemplate", Step::Gms),
        (Verb::Create, "DynamoCheckpoint", Step::Checkpoints),
        (Verb::Apply, "InferencePool", Step::Epp),
        (Verb::Apply, "ConfigMap", Step::WaitForLeader),
        (Verb::Create, "Secret", Step::SshKeys),
    ];

    #[tokio::test]
    async fn a_failing_step_stops_the_sequence_and_keeps_the_partial_status() {
        for (verb, kind, failing) in FAILURES {
            let d = Double::new();
            let g = everything(&d);
            d.fail_next(verb, kind, kit::Error::Forbidden(format!("{kind} denied")));
            let mut out = outcome();
            let failed = run(&shared(&d), &g, &mut out).await.unwrap_err();
            assert_eq!(failed.error.step(), Some(failing), "{}", failed.error);
            assert_eq!(failed.retry, Retry::Backoff);
            let status = &failed.outcome.status;
            assert_eq!(status.state, DgdState::Failed);
            assert_eq!(status.observed_generation, Some(3));
            let ready = conditions::find(&status.conditions, READY).unwrap();
            assert_eq!(ready.status, "False");
            assert_eq!(ready.reason, REASON_FAILED_TO_RECONCILE_RESOURCES);
            assert!(
                ready.message.starts_with(failing.context()),
                "{}: {}",
                kind,
                ready.message
            );
            assert!(ready.message.contains(&format!("{kind} denied")));

            // Everything before the failing write happened, in order, and nothing after it.
            let written = kinds(&d);
            assert_eq!(written, ORDER[..written.len()], "{kind}");
            assert_eq!(ORDER[written.len()], kind);

            // The checkpoint statuses survive any later failure.
            let position = |s: Step| Step::ALL.iter().position(|x| *x == s).unwrap();
            let checkpointed = position(failing) > position(Step::Checkpoints);
            assert_eq!(
                status.checkpoints.contains_key("Decode"),
                checkpointed,
                "{kind}"
            );
            // The events of the writes that succeeded are queued, then the warning.
            let last = failed.outcome.events.last().unwrap();
            assert_eq!(last.reason, REASON_FAILED_TO_RECONCILE_RESOURCES);
        }
    }

    #[tokio::test]
    async fn specs_that_cannot_work_wait_for_a_change() {
        let d = Double::new();
        let g = everything(&d);
        let config = SharedConfig {
            planner_cluster_role: None,
            ..Default::default()
        };
        let s = SharedResources::new(d.reader(), d.writer(), config);
        let failed = run(&s, &g, &mut outcome()).await.unwrap_err();
        assert_eq!(failed.error.step(), Some(Step::Rbac));
        assert_eq!(failed.retry, Retry::AwaitChange);
        assert!(d.writes().is_empty());
        let none: Option<ServiceAccount> = d
            .reader()
            .get(Some("ns"), "planner-serviceaccount")
            .await
            .unwrap();
        assert!(none.is_none());
    }
}
