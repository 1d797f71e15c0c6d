//! The grove program against the real control plane with Grove's real CRDs installed: a
//! conformance graph gets its PodCliqueSet; Grove is played by the test (it creates the
//! PodCliques and PodCliqueScalingGroups and writes their status, as Grove would) and the
//! graph's Ready condition follows; an idle pass writes nothing; a replica change goes through
//! the scale subresource; a component group renders and scales as one scaling group; Grove's
//! topology condition becomes ours, with its event.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::grove::{
    CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE, PodClique, PodCliqueSet,
    REASON_CLUSTER_TOPOLOGY_NOT_FOUND,
};
use api::v1beta1::SpecTopologyConstraint;
use api::{DgdState, DynamoGraphDeployment, labels};
use grove_program::topology::{
    CONDITION_TOPOLOGY_LEVELS_AVAILABLE, REASON_TOPOLOGY_DEFINITION_NOT_FOUND,
};
use grove_program::workload::{FIELD_MANAGER, LAST_APPLIED_HASH};
use grove_program::{Error, GroveConfig, GroveProgram};
use k8s_openapi::api::events::v1::Event;
use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::conditions::{self, READY};
use kit::events::Reporter;
use kit::run::{RunError, finish};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Api, ResourceExt};
use serde_json::json;
use testkit::{ControlPlane, TestNamespace};

/// The identity the program's requests are made as.
const USER: &str = "grove-program";
/// Who plays Grove.
const GROVE: &str = "grove-operator";

async fn start() -> (&'static ControlPlane, TestNamespace) {
    let cp = ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let files = testkit::testdata::yaml_files("grove-crds");
    cp.install_crd_files(&files).await.unwrap();
    let ns = cp.namespace().await;
    (cp, ns)
}

/// The program with production capabilities, one pass at a time (reconcile, persist the
/// status, publish the events), as the run loop does.
struct Harness {
    dgds: Api<DynamoGraphDeployment>,
    program: GroveProgram,
    status: KubeStatusWriter,
    recorder: Recorder,
}

impl Harness {
    fn new(cp: &ControlPlane, ns: &TestNamespace) -> Self {
        let client = cp.client_as(USER, &["system:masters"]);
        // No watches registered: every read is a live read, as this identity.
        let reader = Arc::new(Cache::new(client.clone()));
        let writer = Arc::new(KubeWriter::new(client.clone(), FIELD_MANAGER));
        Harness {
            dgds: ns.api(),
            program: GroveProgram::new(reader, writer, GroveConfig::default()),
            status: KubeStatusWriter::new(client.clone(), FIELD_MANAGER),
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: USER.into(),
                    instance: None,
                },
            ),
        }
    }

    async fn pass(&self, name: &str) -> Result<Action, RunError<Error>> {
        let dgd = self.dgds.get(name).await.expect("the graph");
        let result = self.program.reconcile(&dgd).await;
        finish(&dgd, result, &self.status, &self.recorder).await
    }

    /// Reconcile until `done(graph)` holds, failing after `within`.
    async fn until(
        &self,
        name: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&DynamoGraphDeployment) -> bool,
    ) -> DynamoGraphDeployment {
        let deadline = Instant::now() + within;
        loop {
            self.pass(name).await.expect("reconcile");
            let dgd = self.dgds.get(name).await.unwrap();
            if done(&dgd) {
                return dgd;
            }
            assert!(
                Instant::now() < deadline,
                "{what} not reached after {within:?}: status {:?}",
                dgd.status
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A conformance graph, created in the test namespace.
async fn create_graph(
    ns: &TestNamespace,
    file: &str,
    edit: impl FnOnce(&mut DynamoGraphDeployment),
) -> DynamoGraphDeployment {
    let text = testkit::testdata::read(Path::new("v1beta1").join(file));
    let mut dgd: DynamoGraphDeployment = serde_yaml::from_str(&text).unwrap();
    dgd.metadata.namespace = Some(ns.name().into());
    dgd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            labels::WORKLOAD_PROVIDER.into(),
            labels::PROVIDER_GROVE.into(),
        );
    edit(&mut dgd);
    ns.api::<DynamoGraphDeployment>()
        .create(&PostParams::default(), &dgd)
        .await
        .unwrap()
}

fn ready(dgd: &DynamoGraphDeployment) -> Option<(String, String)> {
    let c = conditions::find(&dgd.status.as_ref()?.conditions, READY)?;
    Some((c.status.clone(), c.reason.clone()))
}

/// Play Grove for `pcs` (`grove_program::simulate`), as Grove's own identity.
async fn play_grove(
    cp: &ControlPlane,
    ns: &TestNamespace,
    dgd: &DynamoGraphDeployment,
    pcs: &PodCliqueSet,
) {
    let client = cp.client_as(GROVE, &["system:masters"]);
    grove_program::simulate::play_grove(&client, ns.name(), dgd, pcs)
        .await
        .unwrap();
}

async fn program_writes(
    cp: &ControlPlane,
    ns: &TestNamespace,
    mark: &testkit::AuditMark,
) -> Vec<(String, String, String)> {
    cp.audit()
        .since(mark)
        .await
        .into_iter()
        .filter(|e| e.user == USER && e.namespace == ns.name() && e.is_write())
        .map(|e| (e.verb, e.resource, e.subresource))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conformance_graph_gets_its_pod_clique_set_and_ready_follows_grove() {
    let (cp, ns) = start().await;
    let dgd = create_graph(&ns, "sglang-disagg-multinode.yaml", |_| {}).await;
    let name = dgd.name_any();
    let h = Harness::new(cp, &ns);

    h.pass(&name).await.unwrap();
    let sets: Api<PodCliqueSet> = ns.api();
    let pcs = sets.get(&name).await.expect("the PodCliqueSet");
    assert!(pcs.annotations().contains_key(LAST_APPLIED_HASH));
    assert!(
        pcs.managed_fields()
            .iter()
            .any(|f| f.manager.as_deref() == Some(FIELD_MANAGER)
                && f.operation.as_deref() == Some("Apply"))
    );
    let owner = &pcs.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (dgd.uid().unwrap().as_str(), Some(true))
    );
    let cliques: Vec<&str> = pcs
        .spec
        .template
        .cliques
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        cliques,
        [
            "frontend",
            "decode-ldr",
            "decode-wkr",
            "prefill-ldr",
            "prefill-wkr"
        ]
    );
    let frontend: k8s_openapi::api::core::v1::Service =
        ns.api().get(&format!("{name}-frontend")).await.unwrap();
    let selector = frontend.spec.unwrap().selector.unwrap();
    assert_eq!(selector[labels::DYNAMO_COMPONENT], "Frontend");
    assert_eq!(selector[labels::DYNAMO_COMPONENT_TYPE], "frontend");
    let graph = h.dgds.get(&name).await.unwrap();
    assert_eq!(
        ready(&graph),
        Some(("False".into(), "some_resources_are_not_ready".into()))
    );
    assert_eq!(graph.status.as_ref().unwrap().state, DgdState::Pending);

    // Grove creates the children and reports them ready: the graph becomes Ready.
    play_grove(cp, &ns, &graph, &pcs).await;
    let graph = h
        .until(&name, Duration::from_secs(30), "Ready", |g| {
            ready(g) == Some(("True".into(), "all_resources_are_ready".into()))
        })
        .await;
    let status = graph.status.unwrap();
    assert_eq!(status.state, DgdState::Successful);
    assert_eq!(
        status.components["decode"].component_kind,
        api::ComponentKind::PodCliqueScalingGroup
    );
    assert_eq!(
        status.components["decode"].component_names,
        [format!("{name}-0-decode")]
    );
    assert_eq!(status.components["Frontend"].ready_replicas, Some(1));

    // An idle pass reads, writes nothing.
    let mark = cp.audit().mark();
    h.pass(&name).await.unwrap();
    let writes = program_writes(cp, &ns, &mark).await;
    assert!(writes.is_empty(), "an idle pass wrote: {writes:?}");

    // More frontends: through the PodClique's scale subresource, not the template.
    h.dgds
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/components/0/replicas", "value": 2}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let mark = cp.audit().mark();
    h.pass(&name).await.unwrap();
    let writes = program_writes(cp, &ns, &mark).await;
    assert!(
        writes.contains(&("patch".into(), "podcliques".into(), "scale".into())),
        "{writes:?}"
    );
    assert!(!writes.iter().any(|w| w.1 == "podcliquesets"), "{writes:?}");
    let frontend: PodClique = ns.api().get(&format!("{name}-0-frontend")).await.unwrap();
    assert_eq!(frontend.spec.clique.replicas, 2);
    assert_eq!(
        sets.get(&name).await.unwrap().spec.template.cliques[0]
            .spec
            .replicas,
        1
    );
    let graph = h.dgds.get(&name).await.unwrap();
    assert_eq!(
        ready(&graph).unwrap().1,
        "some_resources_are_not_ready",
        "the PodClique has not observed its new generation"
    );
    play_grove(cp, &ns, &graph, &sets.get(&name).await.unwrap()).await;
    h.until(
        &name,
        Duration::from_secs(30),
        "Ready at 2 frontends",
        |g| {
            ready(g).is_some_and(|r| r.0 == "True")
                && g.status.as_ref().unwrap().components["Frontend"].ready_replicas == Some(2)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_topology_condition_becomes_ours_with_its_event() {
    let (cp, ns) = start().await;
    let dgd = create_graph(&ns, "vllm-disagg.yaml", |g| {
        g.spec.topology_constraint = Some(SpecTopologyConstraint {
            cluster_topology_name: "missing-topology".into(),
            pack_domain: Some("zone".into()),
        });
    })
    .await;
    let name = dgd.name_any();
    let h = Harness::new(cp, &ns);
    h.pass(&name).await.unwrap();
    let sets: Api<PodCliqueSet> = ns.api();
    let pcs = sets.get(&name).await.unwrap();
    let tc = pcs.spec.template.topology_constraint.clone().unwrap();
    assert_eq!(tc.topology_name.as_deref(), Some("missing-topology"));
    assert_eq!(tc.pack.unwrap().required.as_deref(), Some("zone"));
    let topology = |g: &DynamoGraphDeployment| {
        conditions::find(
            &g.status.as_ref()?.conditions,
            CONDITION_TOPOLOGY_LEVELS_AVAILABLE,
        )
        .map(|c| (c.status.clone(), c.reason.clone()))
    };
    assert_eq!(
        topology(&h.dgds.get(&name).await.unwrap()),
        Some(("Unknown".into(), "TopologyConditionPending".into()))
    );

    // Grove cannot find the ClusterTopology.
    play_grove(cp, &ns, &dgd, &pcs).await;
    let grove = cp.client_as(GROVE, &["system:masters"]);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    Api::<PodCliqueSet>::namespaced(grove, ns.name())
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE, "status": "True",
                "reason": REASON_CLUSTER_TOPOLOGY_NOT_FOUND,
                "message": "ClusterTopology missing-topology not found",
                "lastTransitionTime": now,
            }]}})),
        )
        .await
        .unwrap();
    let graph = h
        .until(
            &name,
            Duration::from_secs(30),
            "TopologyLevelsAvailable=False",
            |g| topology(g) == Some(("False".into(), REASON_TOPOLOGY_DEFINITION_NOT_FOUND.into())),
        )
        .await;
    assert_eq!(
        ready(&graph).unwrap().0,
        "True",
        "readiness is independent of topology"
    );

    // Its Warning event, emitted after the status was persisted, exactly once.
    let events: Api<Event> = ns.api();
    let deadline = Instant::now() + Duration::from_secs(30);
    let warnings = loop {
        let warnings: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(REASON_TOPOLOGY_DEFINITION_NOT_FOUND))
            .collect();
        if !warnings.is_empty() || Instant::now() > deadline {
            break warnings;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert_eq!(w.type_.as_deref(), Some("Warning"));
    assert_eq!(
        w.note.as_deref(),
        Some("Topology constraints no longer enforced: ClusterTopology missing-topology not found")
    );
    assert_eq!(
        w.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some(name.as_str())
    );
    // No change, no new event.
    h.pass(&name).await.unwrap();
    let again = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(REASON_TOPOLOGY_DEFINITION_NOT_FOUND))
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum::<i32>();
    assert_eq!(again, 1);
}

/// `spec.experimental.componentGroups`: the apiserver (Grove's real CRD) accepts the group's
/// scaling group; Grove's PodCliqueScalingGroup `<pcs>-0-<group>` carries every member's
/// readiness; the group's `replicas` change through that child's scale subresource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_group_renders_and_scales_as_one_scaling_group() {
    let (cp, ns) = start().await;
    let dgd = create_graph(&ns, "vllm-disagg.yaml", |g| {
        g.spec.experimental = Some(api::v1beta1::DynamoGraphDeploymentExperimentalSpec {
            kv_transfer_policy: None,
            component_groups: vec![api::v1beta1::ComponentGroupSpec {
                name: "Disagg".into(),
                replicas: 1,
                scaling_adapter: None,
                components: ["VllmDecodeWorker", "VllmPrefillWorker"]
                    .map(|name| api::common::ComponentGroupComponentSpec { name: name.into() })
                    .to_vec(),
            }],
        });
    })
    .await;
    let name = dgd.name_any();
    let h = Harness::new(cp, &ns);
    h.pass(&name).await.unwrap();
    let sets: Api<PodCliqueSet> = ns.api();
    let pcs = sets.get(&name).await.expect("the PodCliqueSet");
    let groups = &pcs.spec.template.pod_clique_scaling_groups;
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "disagg");
    assert_eq!(
        groups[0].clique_names,
        ["vllmdecodeworker", "vllmprefillworker"]
    );
    assert_eq!(groups[0].replicas, Some(1));

    play_grove(cp, &ns, &dgd, &pcs).await;
    let graph = h
        .until(&name, Duration::from_secs(30), "Ready", |g| {
            ready(g) == Some(("True".into(), "all_resources_are_ready".into()))
        })
        .await;
    let status = graph.status.unwrap();
    for member in ["VllmDecodeWorker", "VllmPrefillWorker"] {
        assert_eq!(
            status.components[member].component_kind,
            api::ComponentKind::PodCliqueScalingGroup
        );
        assert_eq!(
            status.components[member].component_names,
            [format!("{name}-0-disagg")]
        );
    }
    assert_eq!(
        status.components["Frontend"].component_kind,
        api::ComponentKind::PodClique
    );

    // Two replicas of the group: through the group's scale subresource, not the template.
    h.dgds
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/experimental/componentGroups/0/replicas", "value": 2}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let mark = cp.audit().mark();
    h.pass(&name).await.unwrap();
    let writes = program_writes(cp, &ns, &mark).await;
    assert!(
        writes.contains(&(
            "patch".into(),
            "podcliquescalinggroups".into(),
            "scale".into()
        )),
        "{writes:?}"
    );
    assert!(!writes.iter().any(|w| w.1 == "podcliquesets"), "{writes:?}");
    let group: api::grove::PodCliqueScalingGroup =
        ns.api().get(&format!("{name}-0-disagg")).await.unwrap();
    assert_eq!(group.spec.replicas, Some(2));
    let graph = h.dgds.get(&name).await.unwrap();
    play_grove(cp, &ns, &graph, &sets.get(&name).await.unwrap()).await;
    h.until(&name, Duration::from_secs(30), "Ready at 2", |g| {
        ready(g).is_some_and(|r| r.0 == "True")
            && g.status.as_ref().unwrap().components["VllmPrefillWorker"].available_replicas
                == Some(2)
    })
    .await;
}
