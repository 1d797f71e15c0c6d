//! Optional APIs: which ones the cluster serves, kept current while the operator runs.
//!
//! | API | kind | provided by | graphs it re-queues | DCDs it re-queues |
//! | --- | --- | --- | --- | --- |
//! | `leaderworkerset.x-k8s.io/v1` | LeaderWorkerSet | CRD `leaderworkersets.leaderworkerset.x-k8s.io` | a multinode component, not recorded as `grove` | multinode |
//! | `grove.io/v1alpha1` | PodCliqueSet, PodClique, PodCliqueScalingGroup | CRDs `podcliquesets.grove.io`, `podcliques.grove.io`, `podcliquescalinggroups.grove.io` | no provider recorded, or `grove` | — |
//! | `inference.networking.k8s.io/v1` | InferencePool | CRD `inferencepools.inference.networking.k8s.io` | an `epp` component | — |
//! | `networking.istio.io/v1beta1` | VirtualService | CRD `virtualservices.networking.istio.io` | a frontend | — |
//! | `gateway.networking.k8s.io/v1` | HTTPRoute | CRD `httproutes.gateway.networking.k8s.io` | a frontend | — |
//! | `resource.k8s.io/v1` | ResourceClaimTemplate | built in (Kubernetes 1.34+), APIService `v1.resource.k8s.io` | the GPU memory service or inter-pod failover | — |
//!
//! - **At start-up** [`discover`] asks the API server's discovery (`/apis/<group>/<version>`)
//!   which of these kinds it serves: the first [`Served`] set, before any watch starts.
//! - **While running** [`follow`] watches each CRD by name (field selector `metadata.name`):
//!   a CRD is served while it is `Established`, not being deleted, and serves the version the
//!   operator uses. The built-in DRA API has no CRD; its APIService is watched instead, and each
//!   change of it runs discovery for `resource.k8s.io/v1` again. Nothing polls.
//! - **A change** of a kind's served state updates the shared [`Served`] set. The cache starts
//!   (or stops, forgetting its objects) the kind's watch
//!   ([`kit::cache::Cache::watch_while_served`]), the reconcilers read the set at their next
//!   reconcile, and the graphs and DCDs waiting for the API (the table) are reconciled at once:
//!   a multinode graph at `no_multinode_orchestrator_available`, a graph that asked for Grove at
//!   `selected_workload_provider_unavailable`, an unrecorded graph that now defaults to Grove.
//!
//! Whether an event matters is decided by the `CustomResourceDefinition` and `APIService` rows
//! of [`crate::triggers::TRIGGERS`].

use std::collections::BTreeMap;

use api::grove::{PodClique, PodCliqueScalingGroup, PodCliqueSet};
use api::{DynamoComponentDeployment, DynamoGraphDeployment, labels};
use futures::channel::mpsc::UnboundedSender;
use futures::{StreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kit::served::Served;
use kube::api::{Api, ApiResource};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use reconcilers::optional;

use crate::metrics::ControllerMetrics;
use crate::triggers::{self, ControllerName, Filter};

/// How the cluster provides an optional kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A CustomResourceDefinition `<plural>.<group>`.
    Crd,
    /// Built into the API server, registered as the APIService `<version>.<group>`.
    BuiltIn,
}

/// One optional kind.
#[derive(Clone, Copy, Debug)]
pub struct OptionalApi {
    /// The kind.
    pub resource: fn() -> ApiResource,
    /// How the cluster provides it.
    pub source: Source,
}

impl OptionalApi {
    /// The name of the CRD or APIService that provides the kind.
    pub fn provider_name(&self) -> String {
        let r = (self.resource)();
        match self.source {
            Source::Crd => format!("{}.{}", r.plural, r.group),
            Source::BuiltIn => format!("{}.{}", r.version, r.group),
        }
    }
}

/// Every optional kind the operator uses.
pub const OPTIONAL: [OptionalApi; 8] = [
    OptionalApi {
        resource: optional::leader_worker_set,
        source: Source::Crd,
    },
    OptionalApi {
        resource: kit::object::resource::<PodCliqueSet>,
        source: Source::Crd,
    },
    OptionalApi {
        resource: kit::object::resource::<PodClique>,
        source: Source::Crd,
    },
    OptionalApi {
        resource: kit::object::resource::<PodCliqueScalingGroup>,
        source: Source::Crd,
    },
    OptionalApi {
        resource: optional::inference_pool,
        source: Source::Crd,
    },
    OptionalApi {
        resource: optional::virtual_service,
        source: Source::Crd,
    },
    OptionalApi {
        resource: optional::http_route,
        source: Source::Crd,
    },
    OptionalApi {
        resource: optional::resource_claim_template,
        source: Source::BuiltIn,
    },
];

/// Whether the operator uses an optional API: as discovered, never, or always (refusing to start
/// without it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Used while the cluster serves it (the default).
    #[default]
    Auto,
    /// Required: the operator refuses to start without it.
    On,
    /// Never used, served or not.
    Off,
}

/// The mode of each optional API group (the configuration's `orchestrators.grove.enabled`,
/// `orchestrators.lws.enabled`, `dra.enabled`, `gaie.enabled`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `grove.io`: PodCliqueSet, PodClique, PodCliqueScalingGroup.
    pub grove: Mode,
    /// `leaderworkerset.x-k8s.io`: LeaderWorkerSet.
    pub lws: Mode,
    /// `resource.k8s.io`: ResourceClaimTemplate.
    pub dra: Mode,
    /// `inference.networking.k8s.io`: InferencePool.
    pub gaie: Mode,
}

impl Policy {
    /// The mode of `resource`'s API group, and the setting that sets it.
    fn mode(&self, resource: &ApiResource) -> (Mode, &'static str) {
        match resource.group.as_str() {
            "grove.io" => (self.grove, "--grove-api (orchestrators.grove.enabled)"),
            "leaderworkerset.x-k8s.io" => (self.lws, "--lws-api (orchestrators.lws.enabled)"),
            "resource.k8s.io" => (self.dra, "--dra-api (dra.enabled)"),
            "inference.networking.k8s.io" => (self.gaie, "--gaie-api (gaie.enabled)"),
            _ => (Mode::Auto, ""),
        }
    }

    /// Whether the operator uses `resource`, given whether the cluster serves it.
    pub fn uses(&self, resource: &ApiResource, served: bool) -> bool {
        served && self.mode(resource).0 != Mode::Off
    }

    /// An error when `resource` is required and not served.
    pub fn check(&self, resource: &ApiResource, served: bool) -> anyhow::Result<()> {
        match self.mode(resource) {
            (Mode::On, setting) if !served => anyhow::bail!(
                "{setting} is on, but the cluster does not serve {}",
                kit::cache::resource_key(resource)
            ),
            _ => Ok(()),
        }
    }
}

/// Whether the API server's discovery lists the kind of `resource`.
async fn discovered(client: &Client, resource: &ApiResource) -> Result<bool, kube::Error> {
    let path = format!("/apis/{}/{}", resource.group, resource.version);
    let request = http::Request::get(&path)
        .body(Vec::new())
        .expect("a discovery request");
    match client.request::<APIResourceList>(request).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource.plural)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The optional kinds the operator uses now: those discovery finds served, as `policy` allows.
/// A kind `policy` requires and the cluster does not serve is an error.
pub async fn discover(client: &Client, policy: &Policy) -> anyhow::Result<Served> {
    let served = Served::new();
    for api in OPTIONAL {
        let resource = (api.resource)();
        let found = discovered(client, &resource).await?;
        policy.check(&resource, found)?;
        served.set(&resource, policy.uses(&resource, found));
    }
    tracing::info!(served = ?served.kinds(), ?policy, "optional APIs");
    Ok(served)
}

/// Whether `crd` serves the kind of `resource`: Established, not being deleted, and serving its
/// version.
pub fn crd_serves(crd: &CustomResourceDefinition, resource: &ApiResource) -> bool {
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Established" && c.status == "True");
    let version = crd
        .spec
        .versions
        .iter()
        .any(|v| v.name == resource.version && v.served);
    established && version && crd.metadata.deletion_timestamp.is_none()
}

/// Whether graph `dgd` waits for (or stops being able to use) the kind of `resource`: the
/// graphs to reconcile when its served state changes.
pub fn graph_waits_for(resource: &ApiResource, dgd: &DynamoGraphDeployment) -> bool {
    let recorded = dgd.annotations().get(labels::WORKLOAD_PROVIDER);
    let grove_recorded = recorded.is_some_and(|p| p == labels::PROVIDER_GROVE);
    if *resource == optional::leader_worker_set() {
        return !grove_recorded && dgd.spec.components.iter().any(|c| c.is_multinode());
    }
    if resource.group == kit::object::resource::<PodCliqueSet>().group {
        return recorded.is_none() || grove_recorded;
    }
    if *resource == optional::inference_pool() {
        return dgd.spec.epp_component().is_some();
    }
    if *resource == optional::resource_claim_template() {
        return reconcilers::gms::needs_dra(dgd);
    }
    if *resource == optional::virtual_service() || *resource == optional::http_route() {
        return dgd
            .spec
            .components
            .iter()
            .any(|c| c.r#type == Some(api::ComponentType::Frontend));
    }
    false
}

/// Whether DCD `dcd` waits for (or stops being able to use) the kind of `resource`.
pub fn dcd_waits_for(resource: &ApiResource, dcd: &DynamoComponentDeployment) -> bool {
    *resource == optional::leader_worker_set() && dcd.spec.component.is_multinode()
}

/// Where a change of an API's served state sends the objects waiting for it.
pub struct Requeue {
    /// The graphs (the DGD controller's store) and the DGD controller's queue.
    pub graphs: Store<DynamoGraphDeployment>,
    pub graph_queue: UnboundedSender<ObjectRef<DynamoGraphDeployment>>,
    pub graph_metrics: ControllerMetrics,
    /// The DCDs and the DCD controller's queue.
    pub dcds: Store<DynamoComponentDeployment>,
    pub dcd_queue: UnboundedSender<ObjectRef<DynamoComponentDeployment>>,
    pub dcd_metrics: ControllerMetrics,
}

impl Requeue {
    /// Enqueue what waits for `resource`; how many graphs and DCDs.
    fn waiting_for(&self, resource: &ApiResource) -> (usize, usize) {
        let graphs = send(&self.graphs, &self.graph_queue, &self.graph_metrics, |g| {
            graph_waits_for(resource, g)
        });
        let dcds = send(&self.dcds, &self.dcd_queue, &self.dcd_metrics, |d| {
            dcd_waits_for(resource, d)
        });
        (graphs, dcds)
    }
}

fn send<K>(
    store: &Store<K>,
    queue: &UnboundedSender<ObjectRef<K>>,
    metrics: &ControllerMetrics,
    waits: impl Fn(&K) -> bool,
) -> usize
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut sent = 0;
    for object in store.state().iter().filter(|o| waits(o)) {
        metrics.enqueued(kit::object::key_of(object.as_ref()));
        if queue
            .unbounded_send(ObjectRef::from_obj(object.as_ref()))
            .is_ok()
        {
            sent += 1;
        }
    }
    sent
}

/// Records `served` for `resource` as `policy` allows; on a change, says so and re-queues what
/// waits for it. A required API that goes away is logged as an error (and no longer used).
fn update(set: &Served, requeue: &Requeue, policy: &Policy, resource: &ApiResource, served: bool) {
    if let Err(error) = policy.check(resource, served) {
        tracing::error!(%error, "a required optional API went away");
    }
    if !set.set(resource, policy.uses(resource, served)) {
        return;
    }
    let (graphs, dcds) = requeue.waiting_for(resource);
    tracing::info!(
        kind = %kit::cache::resource_key(resource),
        served,
        graphs,
        dcds,
        "optional API {}",
        if served { "now served" } else { "no longer served" }
    );
}

/// One event of one of the watches [`follow`] runs.
enum Seen {
    Crd(usize, Box<watcher::Event<CustomResourceDefinition>>),
    ApiService(usize, Box<watcher::Event<APIService>>),
}

/// Keeps `served` current from the CRDs and APIServices that provide the optional kinds, and
/// re-queues what waits for a kind whose served state changed. Runs until the watches end (they
/// do not, in normal operation: run it next to the controllers).
pub async fn follow(client: Client, served: Served, requeue: Requeue, policy: Policy) {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let api_services: Api<APIService> = Api::all(client.clone());
    let watches = OPTIONAL.iter().enumerate().map(|(i, api)| {
        let name = api.provider_name();
        match api.source {
            Source::Crd => watcher(crds.clone(), by_name(&name))
                .default_backoff()
                .filter_map(move |e| {
                    futures::future::ready(ok(e, &name).map(|e| Seen::Crd(i, Box::new(e))))
                })
                .boxed(),
            Source::BuiltIn => watcher(api_services.clone(), by_name(&name))
                .default_backoff()
                .filter_map(move |e| {
                    futures::future::ready(ok(e, &name).map(|e| Seen::ApiService(i, Box::new(e))))
                })
                .boxed(),
        }
    });
    let mut events = stream::select_all(watches);
    let mut crd_filters: BTreeMap<usize, Filter> = BTreeMap::new();
    let mut api_service_filters: BTreeMap<usize, Filter> = BTreeMap::new();
    // Per watch: whether its current (re)list saw the object, until the list is done.
    let mut listing: BTreeMap<usize, bool> = BTreeMap::new();
    while let Some(seen) = events.next().await {
        match seen {
            Seen::Crd(i, event) => {
                let resource = (OPTIONAL[i].resource)();
                let filter = crd_filters.entry(i).or_insert_with(|| {
                    Filter::new(triggers::row::<CustomResourceDefinition>(
                        ControllerName::Dgd,
                    ))
                });
                if let Some(now) = observe(&event, filter, &mut listing, i, |crd| {
                    crd_serves(crd, &resource)
                }) {
                    update(&served, &requeue, &policy, &resource, now);
                }
            }
            Seen::ApiService(i, event) => {
                let resource = (OPTIONAL[i].resource)();
                let filter = api_service_filters.entry(i).or_insert_with(|| {
                    Filter::new(triggers::row::<APIService>(ControllerName::Dgd))
                });
                // The APIService says something changed; discovery says what is served.
                if observe(&event, filter, &mut listing, i, |_| true).is_some() {
                    match discovered(&client, &resource).await {
                        Ok(now) => update(&served, &requeue, &policy, &resource, now),
                        Err(error) => tracing::warn!(
                            kind = %kit::cache::resource_key(&resource),
                            %error,
                            "discovery failed; the served state is kept until the APIService changes again"
                        ),
                    }
                }
            }
        }
    }
}

/// A watch event, or `None` after logging a watch error (the watch retries with backoff).
fn ok<K>(
    event: Result<watcher::Event<K>, watcher::Error>,
    name: &str,
) -> Option<watcher::Event<K>> {
    match event {
        Ok(event) => Some(event),
        Err(error) => {
            tracing::warn!(object = name, %error, "watch failed; retrying with backoff");
            None
        }
    }
}

/// What one event of a by-name watch says: `Some(served)` when it may change the served state
/// (the object appeared, changed in a field of its trigger row, or is gone), `None` otherwise.
/// `serves` reads the object.
fn observe<K>(
    event: &watcher::Event<K>,
    filter: &mut Filter,
    listing: &mut BTreeMap<usize, bool>,
    watch: usize,
    serves: impl Fn(&K) -> bool,
) -> Option<bool>
where
    K: kube::Resource + serde::Serialize,
{
    match event {
        watcher::Event::Init => {
            listing.insert(watch, false);
            None
        }
        watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
            if let Some(seen) = listing.get_mut(&watch) {
                *seen = true;
            }
            filter.check(object, true).map(|_| serves(object))
        }
        watcher::Event::Delete(object) => {
            filter.check(object, false);
            Some(false)
        }
        // A list without the object: it is gone (deleted while the watch was away, or never
        // there).
        watcher::Event::InitDone => match listing.remove(&watch) {
            Some(false) => Some(false),
            _ => None,
        },
    }
}

/// The served set as `render` assumes it: every optional kind, but LeaderWorkerSet when
/// `leader_worker_sets` is false.
pub fn everything(leader_worker_sets: bool) -> Served {
    let served = Served::new();
    for api in OPTIONAL {
        let resource = (api.resource)();
        let lws = resource == optional::leader_worker_set();
        served.set(&resource, leader_worker_sets || !lws);
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn graph(
        annotations: serde_json::Value,
        components: serde_json::Value,
    ) -> DynamoGraphDeployment {
        serde_json::from_value(json!({
            "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "g", "namespace": "ns", "annotations": annotations},
            "spec": {"components": components},
        }))
        .unwrap()
    }

    fn component(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"name": "Worker", "type": "worker",
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "x"}]}}});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    }

    #[test]
    fn the_policy_decides_what_is_used_and_what_is_required() {
        let grove = kit::object::resource::<PodCliqueSet>();
        let pool = optional::inference_pool();
        let cases = [
            // (mode, served) -> (used, start refused)
            (Mode::Auto, true, true, false),
            (Mode::Auto, false, false, false),
            (Mode::On, true, true, false),
            (Mode::On, false, false, true),
            (Mode::Off, true, false, false),
            (Mode::Off, false, false, false),
        ];
        for (mode, served, used, refused) in cases {
            let policy = Policy {
                grove: mode,
                ..Policy::default()
            };
            assert_eq!(policy.uses(&grove, served), used, "{mode:?} {served}");
            assert_eq!(
                policy.check(&grove, served).is_err(),
                refused,
                "{mode:?} {served}"
            );
            assert!(policy.uses(&pool, true), "other groups stay auto");
        }
        let error = Policy {
            gaie: Mode::On,
            ..Policy::default()
        }
        .check(&pool, false)
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("--gaie-api (gaie.enabled) is on"),
            "{error}"
        );
    }

    #[test]
    fn every_optional_kind_has_one_provider() {
        let names: Vec<_> = OPTIONAL.iter().map(OptionalApi::provider_name).collect();
        assert_eq!(
            names,
            [
                "leaderworkersets.leaderworkerset.x-k8s.io",
                "podcliquesets.grove.io",
                "podcliques.grove.io",
                "podcliquescalinggroups.grove.io",
                "inferencepools.inference.networking.k8s.io",
                "virtualservices.networking.istio.io",
                "httproutes.gateway.networking.k8s.io",
                "v1.resource.k8s.io",
            ]
        );
        for api in OPTIONAL {
            assert!(
                everything(true).serves(&(api.resource)()),
                "{}",
                api.provider_name()
            );
        }
        assert!(!everything(false).serves(&optional::leader_worker_set()));
        assert!(everything(false).serves_kind::<PodCliqueSet>());
    }

    /// Which graphs a change of each API's served state re-queues.
    #[test]
    fn graphs_waiting_for_each_api() {
        let lws = optional::leader_worker_set();
        let pcs = kit::object::resource::<PodCliqueSet>();
        let pclq = kit::object::resource::<PodClique>();
        let pool = optional::inference_pool();
        let dra = optional::resource_claim_template();
        let vs = optional::virtual_service();
        let route = optional::http_route();
        let multinode = || component(json!({"multinode": {"nodeCount": 2}}));
        let single = || component(json!({}));
        let recorded = |p: &str| json!({labels::WORKLOAD_PROVIDER: p});
        // (what, graph, API, waits)
        let cases = [
            (
                "multinode, unrecorded: LWS",
                graph(json!({}), json!([multinode()])),
                &lws,
                true,
            ),
            (
                "multinode, component: LWS",
                graph(recorded("component"), json!([multinode()])),
                &lws,
                true,
            ),
            (
                "multinode on grove: not LWS",
                graph(recorded("grove"), json!([multinode()])),
                &lws,
                false,
            ),
            (
                "single node: not LWS",
                graph(json!({}), json!([single()])),
                &lws,
                false,
            ),
            (
                "unrecorded: Grove (the default may change)",
                graph(json!({}), json!([single()])),
                &pcs,
                true,
            ),
            (
                "recorded grove: Grove",
                graph(recorded("grove"), json!([single()])),
                &pcs,
                true,
            ),
            (
                "recorded grove: Grove's children too",
                graph(recorded("grove"), json!([single()])),
                &pclq,
                true,
            ),
            (
                "recorded component: not Grove",
                graph(recorded("component"), json!([single()])),
                &pcs,
                false,
            ),
            (
                "an epp component: InferencePool",
                graph(json!({}), json!([single(), {"name": "Epp", "type": "epp"}])),
                &pool,
                true,
            ),
            (
                "no epp: not InferencePool",
                graph(json!({}), json!([single()])),
                &pool,
                false,
            ),
            (
                "GMS: DRA",
                graph(
                    json!({}),
                    json!([component(json!({"experimental": {"gpuMemoryService": {}}}))]),
                ),
                &dra,
                true,
            ),
            (
                "inter-pod failover: DRA",
                graph(
                    json!({}),
                    json!([component(
                        json!({"experimental": {"failover": {"mode": "InterPod"}}})
                    )]),
                ),
                &dra,
                true,
            ),
            (
                "neither: not DRA",
                graph(json!({}), json!([single()])),
                &dra,
                false,
            ),
            (
                "a frontend: VirtualService",
                graph(
                    json!({}),
                    json!([single(), {"name": "Frontend", "type": "frontend"}]),
                ),
                &vs,
                true,
            ),
            (
                "a frontend: HTTPRoute",
                graph(json!({}), json!([{"name": "Frontend", "type": "frontend"}])),
                &route,
                true,
            ),
            (
                "no frontend: no HTTPRoute",
                graph(json!({}), json!([single()])),
                &route,
                false,
            ),
        ];
        for (what, g, api, waits) in cases {
            assert_eq!(graph_waits_for(api, &g), waits, "{what}");
        }
    }

    #[test]
    fn multinode_dcds_wait_for_leader_worker_sets_only() {
        let dcd = |extra: serde_json::Value| -> DynamoComponentDeployment {
            serde_json::from_value(json!({
                "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoComponentDeployment",
                "metadata": {"name": "d", "namespace": "ns"},
                "spec": component(extra),
            }))
            .unwrap()
        };
        let multinode = dcd(json!({"multinode": {"nodeCount": 2}}));
        assert!(dcd_waits_for(&optional::leader_worker_set(), &multinode));
        assert!(!dcd_waits_for(
            &optional::leader_worker_set(),
            &dcd(json!({}))
        ));
        assert!(!dcd_waits_for(
            &kit::object::resource::<PodCliqueSet>(),
            &multinode
        ));
    }

    fn crd(
        versions: serde_json::Value,
        established: Option<&str>,
        deleting: bool,
    ) -> CustomResourceDefinition {
        let mut metadata = json!({"name": "leaderworkersets.leaderworkerset.x-k8s.io", "uid": "u"});
        if deleting {
            metadata["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        let conditions: Vec<_> = established
            .map(|s| json!({"type": "Established", "status": s}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
                     "names": {"plural": "leaderworkersets", "kind": "LeaderWorkerSet"},
                     "versions": versions},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn a_crd_serves_its_kind_when_established_and_serving_the_version() {
        let v1 = |served: bool| json!([{"name": "v1", "served": served, "storage": true}]);
        let cases = [
            (
                "Established, v1 served",
                crd(v1(true), Some("True"), false),
                true,
            ),
            (
                "not Established yet",
                crd(v1(true), Some("False"), false),
                false,
            ),
            ("no conditions", crd(v1(true), None, false), false),
            ("v1 not served", crd(v1(false), Some("True"), false), false),
            (
                "only another version",
                crd(
                    json!([{"name": "v2", "served": true, "storage": true}]),
                    Some("True"),
                    false,
                ),
                false,
            ),
            ("being deleted", crd(v1(true), Some("True"), true), false),
        ];
        for (what, crd, serves) in cases {
            assert_eq!(
                crd_serves(&crd, &optional::leader_worker_set()),
                serves,
                "{what}"
            );
        }
    }

    /// The events of a by-name CRD watch, and what each says about the served state.
    #[test]
    fn crd_events_decide_the_served_state() {
        use watcher::Event as E;
        let resource = optional::leader_worker_set();
        let v1 = json!([{"name": "v1", "served": true, "storage": true}]);
        let established = crd(v1.clone(), Some("True"), false);
        let pending = crd(v1.clone(), Some("False"), false);
        let mut relabelled = established.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("example.com/x".into(), "y".into());
        let mut filter = Filter::new(triggers::row::<CustomResourceDefinition>(
            ControllerName::Dgd,
        ));
        let mut listing = BTreeMap::new();
        let mut step = |event: E<CustomResourceDefinition>| {
            observe(&event, &mut filter, &mut listing, 0, |c| {
                crd_serves(c, &resource)
            })
        };
        // Absent at the initial list: not served.
        assert_eq!(step(E::Init), None);
        assert_eq!(step(E::InitDone), Some(false));
        // Installed: first seen while being established, then Established.
        assert_eq!(step(E::Apply(pending.clone())), Some(false));
        assert_eq!(step(E::Apply(established.clone())), Some(true));
        // A change outside the row's fields says nothing.
        assert_eq!(step(E::Apply(relabelled)), None);
        // A relist that finds it: nothing new.
        assert_eq!(step(E::Init), None);
        assert_eq!(step(E::InitApply(established.clone())), None);
        assert_eq!(step(E::InitDone), None);
        // Deleted: not served; a relist without it says so again.
        assert_eq!(step(E::Delete(established)), Some(false));
        assert_eq!(step(E::Init), None);
        assert_eq!(step(E::InitDone), Some(false));
    }

    #[test]
    fn the_crd_rows_of_both_controllers_agree() {
        let dgd = triggers::row::<CustomResourceDefinition>(ControllerName::Dgd);
        let dcd = triggers::row::<CustomResourceDefinition>(ControllerName::Dcd);
        assert_eq!(dgd.fields, dcd.fields);
        assert_eq!(dgd.enqueue, triggers::Enqueue::WaitingForApi);
        assert_eq!(dcd.enqueue, triggers::Enqueue::WaitingForApi);
    }
}
