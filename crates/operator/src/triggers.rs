//! The event→action map: every watch the operator registers, which changes of the watched
//! object trigger work, and which primary object is then reconciled. The table below is what the
//! wiring executes ([`filter`] reads a row's fields and enqueue rule), and
//! `docs/event-action-map.md` is generated from it (a test keeps the two equal).
//!
//! Rules every row follows:
//! - A watched object seen for the first time (created, or first listed) triggers work once.
//! - Its deletion always triggers work (predicates must not swallow deletions: the object is gone
//!   from the cache, so it passes whatever its fields).
//! - Otherwise only a change in one of the row's fields triggers work. Everything else —
//!   `resourceVersion`, `managedFields`, unrelated status, our own status writes — is ignored.
//! - No periodic resync: a controller looks again on its own only when a reconcile asked for it.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Serialize;

use crate::metrics::ControllerMetrics;

/// The controllers, by their metric and log name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControllerName {
    /// DynamoGraphDeployment (the composition root).
    Dgd,
    /// DynamoComponentDeployment.
    Dcd,
    /// DynamoCheckpoint.
    Checkpoint,
    /// DynamoGraphDeploymentScalingAdapter.
    Dgdsa,
}

impl ControllerName {
    /// `(apiVersion, kind)` of the primary object: the only owner kind an owned watch enqueues.
    pub fn primary(self) -> (String, String) {
        fn of<K: Resource<DynamicType = ()>>() -> (String, String) {
            (K::api_version(&()).into_owned(), K::kind(&()).into_owned())
        }
        match self {
            Self::Dgd => of::<api::DynamoGraphDeployment>(),
            Self::Dcd => of::<api::DynamoComponentDeployment>(),
            Self::Checkpoint => of::<api::DynamoCheckpoint>(),
            Self::Dgdsa => of::<api::DynamoGraphDeploymentScalingAdapter>(),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dgd => "dynamographdeployment",
            Self::Dcd => "dynamocomponentdeployment",
            Self::Checkpoint => "dynamocheckpoint",
            Self::Dgdsa => "dynamographdeploymentscalingadapter",
        }
    }
}

/// How a watched object names the primary object to reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// The object is the primary.
    Itself,
    /// Its controller owner reference (same namespace).
    ControllerOwner,
    /// Every owner reference of the primary kind, controller or not (same namespace): a child
    /// several primaries share, such as the headless model Service. Several primaries, so
    /// [`primary_key`] has none; the wiring maps and counts them.
    Owners,
    /// Every primary of its namespace, unless the object carries
    /// `nvidia.com/dynamo-graph-deployment-name` (a graph's own object, which no primary reads
    /// this way). Several primaries, so [`primary_key`] has none; the wiring maps and counts
    /// them.
    Namespace,
    /// The value of this label names the primary (same namespace).
    Label(&'static str),
    /// The graph its `nvidia.com/dynamo-graph-deployment-name` label names (same namespace);
    /// without the label, every primary of its namespace (an object users make and graphs
    /// refer to by name). Several primaries, so [`primary_key`] has none; the wiring maps and
    /// counts them.
    GraphElseNamespace,
    /// The DynamoGraphDeploymentScalingAdapters (same namespace) whose `spec.dgdRef` names the
    /// object's graph (a graph itself, else its `nvidia.com/dynamo-graph-deployment-name` label)
    /// and, when the object carries `nvidia.com/dynamo-component`, that component. Several
    /// primaries, so [`primary_key`] has none; the wiring maps and counts them.
    ScalingAdapters,
    /// The primaries waiting for the optional API the object provides (a CRD, an APIService),
    /// when its served state changes ([`crate::optional_apis`]). Several primaries, so
    /// [`primary_key`] has none; the follower of the optional APIs maps and counts them.
    WaitingForApi,
}

/// One watch.
#[derive(Clone, Copy, Debug)]
pub struct Trigger {
    /// The controller whose queue it feeds.
    pub controller: ControllerName,
    /// `group/version/Kind` of the watched objects.
    pub kind: &'static str,
    /// JSON pointers (RFC 6901) of the fields whose change triggers work.
    pub fields: &'static [&'static str],
    /// Which primary object is reconciled.
    pub enqueue: Enqueue,
    /// Why these fields, and anything else worth knowing.
    pub note: &'static str,
}

/// What of a CRD decides whether it serves its kind (the rows of both controllers).
const CRD_FIELDS: &[&str] = &[
    "/metadata/deletionTimestamp",
    "/spec/versions",
    "/status/conditions",
];

/// Every watch of the operator.
pub const TRIGGERS: &[Trigger] = &[
    Trigger {
        controller: ControllerName::Dgd,
        kind: "nvidia.com/v1beta1/DynamoGraphDeployment",
        fields: &[
            "/metadata/generation",
            "/metadata/deletionTimestamp",
            "/metadata/annotations/nvidia.com~1enable-grove",
            "/metadata/annotations/nvidia.com~1dynamo-discovery-backend",
            "/metadata/annotations/nvidia.com~1dynamo-kube-discovery-mode",
            "/metadata/annotations/nvidia.com~1deployment-strategy",
        ],
        enqueue: Enqueue::Itself,
        note: "spec changes and the user annotations that select behaviour; never our own status or annotation writes",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "nvidia.com/v1beta1/DynamoComponentDeployment",
        fields: &[
            "/metadata/generation",
            "/metadata/labels/nvidia.com~1dynamo-worker-hash",
            "/status/observedGeneration",
            "/status/conditions",
            "/status/component",
        ],
        enqueue: Enqueue::ControllerOwner,
        note: "the DCD status the graph's per-component status and readiness are computed from",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "nvidia.com/v1beta1/DynamoGraphDeploymentScalingAdapter",
        fields: &["/spec/replicas"],
        enqueue: Enqueue::ControllerOwner,
        note: "the adapter owns its replicas and the graph only seeds them, except while the graph rolls a worker generation: then the adapter's count is what the rollout steps the generations to",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/Pod",
        fields: &["/status/phase"],
        enqueue: Enqueue::Label(api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME),
        note: "worker pods (label-selected by `nvidia.com/dynamo-worker-hash`, cached as metadata, phase and conditions only), read only while a rollout runs: an old pod gone or terminal lets `Recreate` start the new generation; a new pod pending past the progress deadline makes the rollout report why it cannot progress (one requeue at the deadline, no polling)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "nvidia.com/v1alpha1/DynamoCheckpoint",
        fields: &["/status/phase", "/status/checkpointID"],
        enqueue: Enqueue::GraphElseNamespace,
        note: "a checkpoint becoming Ready releases the components waiting for it: an automatic one reconciles the graph it was made for (its graph label, also when retained without an owner), one a user made (a `checkpointRef`, or looked up by identity) every graph of its namespace",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "apps/v1/DaemonSet",
        fields: &["/spec/template/spec"],
        enqueue: Enqueue::Namespace,
        note: "the snapshot agent's DaemonSet (label-selected `app.kubernetes.io/component=snapshot-agent`), whose volume is the checkpoint storage restore pods mount: one appearing, going or changing re-renders the namespace's graphs (the Grove pathway resolves the storage; read from this cache, never live)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/ServiceAccount",
        fields: &[],
        enqueue: Enqueue::ControllerOwner,
        note: "graph-owned accounts; a deleted one is recreated (one watch of every ServiceAccount, shared with the component controller, which reads the namespace's labelled accounts from it)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/Service",
        fields: &["/spec"],
        enqueue: Enqueue::Owners,
        note: "the grove pathway's Services: component Services (the graph is their controller) and the headless model Services of `modelRef` (every graph serving the model holds a non-controller reference): spec drift is restored, a deleted one recreated",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "rbac.authorization.k8s.io/v1/Role",
        fields: &["/rules"],
        enqueue: Enqueue::ControllerOwner,
        note: "graph-owned Roles (one unselected watch: a miss means absent, so creating costs no read); rule drift is restored",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "rbac.authorization.k8s.io/v1/RoleBinding",
        fields: &["/roleRef", "/subjects"],
        enqueue: Enqueue::ControllerOwner,
        note: "graph-owned RoleBindings (one unselected watch: a miss means absent, so creating costs no read); binding drift is restored",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/ConfigMap",
        fields: &["/data"],
        enqueue: Enqueue::ControllerOwner,
        note: "graph-owned ConfigMaps: wait-for-leader script, EPP config (one ConfigMap watch, shared with the checkpoint controller)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/PersistentVolumeClaim",
        fields: &[],
        enqueue: Enqueue::ControllerOwner,
        note: "graph-owned PVCs are created once and never updated: creation and deletion only",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "resource.k8s.io/v1/ResourceClaimTemplate",
        fields: &["/spec"],
        enqueue: Enqueue::ControllerOwner,
        note: "GPU memory service claim templates (label-selected watch; only when resource.k8s.io/v1 is served)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "inference.networking.k8s.io/v1/InferencePool",
        fields: &["/spec"],
        enqueue: Enqueue::ControllerOwner,
        note: "the graph's InferencePool of an `epp` component (label-selected watch; only when the InferencePool API is served): spec drift is restored, a deleted one recreated, and one a graph without an `epp` component still controls is found here and deleted",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "networking.k8s.io/v1/Ingress",
        fields: &["/spec"],
        enqueue: Enqueue::ControllerOwner,
        note: "frontends' Ingresses (label-selected watch): spec drift is restored, a deleted one recreated, one no frontend needs any more deleted",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "networking.istio.io/v1beta1/VirtualService",
        fields: &["/spec"],
        enqueue: Enqueue::ControllerOwner,
        note: "frontends' Istio VirtualServices (label-selected watch; only when Istio's CRD is served): drift restored, deletions recreated, unneeded ones deleted",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "gateway.networking.k8s.io/v1/HTTPRoute",
        fields: &["/spec"],
        enqueue: Enqueue::ControllerOwner,
        note: "frontends' Gateway API HTTPRoutes (label-selected watch; only when the Gateway API's CRD is served): drift restored, deletions recreated, unneeded ones deleted",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "v1/Secret",
        fields: &["/data"],
        enqueue: Enqueue::Namespace,
        note: "Docker registry credentials for image pull secret discovery (only with `--discover-image-pull-secrets`; one watch shared with the component controller, field-selected `type=kubernetes.io/dockerconfigjson`, so no other Secret is watched): one appearing, going or changing its registries re-renders the namespace's graphs, whose Grove pods get its name (upstream refreshes its index on such events and every minute, without re-rendering)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "grove.io/v1alpha1/PodCliqueSet",
        fields: &[
            "/metadata/generation",
            "/status/observedGeneration",
            "/status/conditions",
            "/status/replicas",
            "/status/updatedReplicas",
            "/status/availableReplicas",
            "/status/currentGenerationHash",
        ],
        enqueue: Enqueue::ControllerOwner,
        note: "the grove pathway's workload (only when grove.io is served): drift, and the status readiness and the topology condition come from",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "grove.io/v1alpha1/PodClique",
        fields: &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/replicas",
            "/status/readyReplicas",
            "/status/updatedReplicas",
            "/status/scheduledReplicas",
            "/status/scheduleGatedReplicas",
            "/status/conditions",
            "/status/currentPodCliqueSetGenerationHash",
            "/status/updateProgress/updateEndedAt",
        ],
        enqueue: Enqueue::Label(api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME),
        note: "Grove's per-component children (label-selected; created by Grove, so mapped by the graph label): the readiness inputs only",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "grove.io/v1alpha1/PodCliqueScalingGroup",
        fields: &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/replicas",
            "/status/availableReplicas",
            "/status/updatedReplicas",
            "/status/scheduledReplicas",
            "/status/conditions",
            "/status/currentPodCliqueSetGenerationHash",
        ],
        enqueue: Enqueue::Label(api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME),
        note: "Grove's scaling groups (multinode components; label-selected, mapped by the graph label): the readiness inputs only",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "apiextensions.k8s.io/v1/CustomResourceDefinition",
        fields: CRD_FIELDS,
        enqueue: Enqueue::WaitingForApi,
        note: "the CRDs of the optional APIs (LeaderWorkerSet, Grove's PodCliqueSet, PodClique and PodCliqueScalingGroup, InferencePool), one watch per CRD name: one becoming Established and serving its version, or going, changes the served set, starts or stops the kind's watch, and reconciles the graphs that need the API (a multinode component off Grove; unrecorded or grove-recorded graphs; an `epp` component)",
    },
    Trigger {
        controller: ControllerName::Dgd,
        kind: "apiregistration.k8s.io/v1/APIService",
        fields: &["/metadata/deletionTimestamp", "/status/conditions"],
        enqueue: Enqueue::WaitingForApi,
        note: "`v1.resource.k8s.io` only (DRA is built in, it has no CRD): a change runs discovery of `resource.k8s.io/v1` again; when the answer changes, graphs asking for the GPU memory service or inter-pod failover are reconciled",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "nvidia.com/v1beta1/DynamoComponentDeployment",
        fields: &["/metadata/generation", "/metadata/deletionTimestamp"],
        enqueue: Enqueue::Itself,
        note: "spec changes; never our own status writes",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "apps/v1/Deployment",
        fields: &[
            "/metadata/generation",
            "/status/observedGeneration",
            "/status/replicas",
            "/status/updatedReplicas",
            "/status/readyReplicas",
            "/status/availableReplicas",
            "/status/conditions",
        ],
        enqueue: Enqueue::ControllerOwner,
        note: "spec drift (generation) is restored; the status fields that make the DCD Available",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet",
        fields: &[
            "/metadata/generation",
            "/status/replicas",
            "/status/updatedReplicas",
            "/status/readyReplicas",
            "/status/conditions",
        ],
        enqueue: Enqueue::ControllerOwner,
        note: "multinode components' workload (label-selected by `nvidia.com/dynamo-component`; watched while the LeaderWorkerSet API is served): spec drift (generation) is restored; the ready replicas and the `Available` condition make the DCD Available (the LeaderWorkerSet status has no observedGeneration)",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "apiextensions.k8s.io/v1/CustomResourceDefinition",
        fields: CRD_FIELDS,
        enqueue: Enqueue::WaitingForApi,
        note: "the same CRD watches as the graph controller's row: when the LeaderWorkerSet CRD comes or goes, the multinode DCDs are reconciled",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "v1/Service",
        fields: &["/spec"],
        enqueue: Enqueue::Owners,
        note: "the component Service (the DCD is its controller) and the headless model Service of `modelRef` (every DCD serving the model holds a non-controller reference): spec drift is restored, a deleted one recreated; Services have no status the DCD reports",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "v1/ServiceAccount",
        fields: &["/metadata/labels/nvidia.com~1dynamo-component-pod"],
        enqueue: Enqueue::Namespace,
        note: "the `nvidia.com/dynamo-component-pod: \"true\"` accounts pods run as when nothing names one (the first by name): one appearing, going or being (un)labelled re-renders the namespace's DCDs (upstream does not watch them)",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "v1/Secret",
        fields: &["/data"],
        enqueue: Enqueue::Namespace,
        note: "Docker registry credentials for image pull secret discovery (only with `--discover-image-pull-secrets`; the graph controller's field-selected watch): one appearing, going or changing its registries re-renders the namespace's DCDs",
    },
    Trigger {
        controller: ControllerName::Dcd,
        kind: "apps/v1/DaemonSet",
        fields: &["/spec/template/spec"],
        enqueue: Enqueue::Namespace,
        note: "the snapshot agent's DaemonSet (the graph controller's label-selected watch): the checkpoint storage of restore pods; one appearing, going or changing re-renders the namespace's DCDs (a DCD waiting for it says `CheckpointUnresolved`)",
    },
    // The checkpoint controller's rows mirror `checkpoint_controller::WATCHES` (a test keeps
    // them equal).
    Trigger {
        controller: ControllerName::Checkpoint,
        kind: "nvidia.com/v1alpha1/DynamoCheckpoint",
        fields: &[
            "/metadata/generation",
            "/metadata/annotations/nvidia.com~1checkpoint-rebuild",
        ],
        enqueue: Enqueue::Itself,
        note: "spec changes (identity, Job template) and rebuild requests; never our own status writes",
    },
    Trigger {
        controller: ControllerName::Checkpoint,
        kind: "batch/v1/Job",
        fields: &["/status/conditions", "/metadata/deletionTimestamp"],
        enqueue: Enqueue::ControllerOwner,
        note: "capture Jobs (label-selected by `nvidia.com/checkpoint-name`): their Complete/Failed conditions and the start of their deletion; pod counts and start times are ignored",
    },
    Trigger {
        controller: ControllerName::Checkpoint,
        kind: "v1/ConfigMap",
        fields: &["/metadata/annotations", "/metadata/labels", "/data"],
        enqueue: Enqueue::Label("nvidia.com/checkpoint-name"),
        note: "the artifact record: its deletion means the artifact is gone (recapture); an edit of its identifying fields is restored. ConfigMaps are one watch shared with the graph controller, so it is not label-selected",
    },
    Trigger {
        controller: ControllerName::Dgdsa,
        kind: "nvidia.com/v1beta1/DynamoGraphDeploymentScalingAdapter",
        fields: &["/metadata/generation", "/metadata/deletionTimestamp"],
        enqueue: Enqueue::Itself,
        note: "spec.replicas (a `/scale` write by kubectl, an HPA, KEDA or the Planner) and dgdRef; never our own status writes",
    },
    Trigger {
        controller: ControllerName::Dgdsa,
        kind: "nvidia.com/v1beta1/DynamoComponentDeployment",
        fields: &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/component/replicas",
        ],
        enqueue: Enqueue::ScalingAdapters,
        note: "the component's workloads: a new one (worker generation) gets the count, a foreign edit of the count is restored, the current replicas are reported",
    },
    Trigger {
        controller: ControllerName::Dgdsa,
        kind: "nvidia.com/v1beta1/DynamoGraphDeployment",
        fields: &[
            "/metadata/deletionTimestamp",
            "/metadata/annotations/nvidia.com~1workload-provider",
            "/metadata/annotations/nvidia.com~1current-worker-hash-v2",
            "/spec/components",
            "/status/checkpoints",
            "/status/rollingUpdate/phase",
        ],
        enqueue: Enqueue::ScalingAdapters,
        note: "what decides whether the adapter may scale: the component and its scalingAdapter opt-in, the provider record, checkpoint readiness, a rolling update of the worker generations (the recorded generation and the phase)",
    },
    Trigger {
        controller: ControllerName::Dgdsa,
        kind: "grove.io/v1alpha1/PodClique",
        fields: &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/replicas",
        ],
        enqueue: Enqueue::ScalingAdapters,
        note: "a single-node component's Grove child (only when grove.io is served): created by Grove, scaled through `/scale`, its replicas reported",
    },
    Trigger {
        controller: ControllerName::Dgdsa,
        kind: "grove.io/v1alpha1/PodCliqueScalingGroup",
        fields: &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/replicas",
        ],
        enqueue: Enqueue::ScalingAdapters,
        note: "a scaling-group component's Grove child (only when grove.io is served), as for PodCliques",
    },
];

/// The rows of one controller.
pub fn rows(controller: ControllerName) -> impl Iterator<Item = &'static Trigger> {
    TRIGGERS.iter().filter(move |t| t.controller == controller)
}

/// The row of `controller` watching `K`. Panics when the table has none: wiring a watch
/// without a row is a bug.
pub fn row<K: Resource<DynamicType = ()>>(controller: ControllerName) -> &'static Trigger {
    let kind = format!("{}/{}", K::api_version(&()), K::kind(&()));
    TRIGGERS
        .iter()
        .find(|t| t.controller == controller && t.kind == kind)
        .unwrap_or_else(|| panic!("no trigger row for {kind} in {controller:?}"))
}

/// The namespace/name of the primary object `object` enqueues under `rule`, for a controller
/// whose primary is `primary` (`(apiVersion, kind)`): a controller owner of another kind enqueues
/// nothing, as in kube-runtime's owned watches.
pub fn primary_key<K: Resource>(
    object: &K,
    rule: Enqueue,
    primary: &(String, String),
) -> Option<String> {
    let ns = object.namespace().unwrap_or_default();
    match rule {
        Enqueue::Itself => Some(format!("{ns}/{}", object.name_any())),
        Enqueue::ControllerOwner => object
            .owner_references()
            .iter()
            .find(|o| {
                o.controller == Some(true) && o.api_version == primary.0 && o.kind == primary.1
            })
            .map(|o| format!("{ns}/{}", o.name)),
        Enqueue::Label(label) => object.labels().get(label).map(|v| format!("{ns}/{v}")),
        Enqueue::Owners
        | Enqueue::Namespace
        | Enqueue::GraphElseNamespace
        | Enqueue::ScalingAdapters
        | Enqueue::WaitingForApi => None,
    }
}

/// Why a watched object passed the filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// First sighting.
    Created,
    /// Gone from the cache.
    Deleted,
    /// These fields changed.
    Changed(Vec<&'static str>),
}

/// The per-field fingerprints of an object under a row.
fn fingerprint<K: Serialize>(trigger: &Trigger, object: &K) -> Vec<u64> {
    let value = serde_json::to_value(object).unwrap_or_default();
    trigger
        .fields
        .iter()
        .map(|pointer| {
            let mut h = DefaultHasher::new();
            value.pointer(pointer).map(|v| v.to_string()).hash(&mut h);
            h.finish()
        })
        .collect()
}

/// Decides, object by object, whether a change matters under one row.
pub struct Filter {
    trigger: &'static Trigger,
    seen: HashMap<String, Vec<u64>>,
}

impl Filter {
    pub fn new(trigger: &'static Trigger) -> Self {
        Filter {
            trigger,
            seen: HashMap::new(),
        }
    }

    /// `Some(reason)` when `object` must trigger work; `present` says whether the cache still
    /// holds it.
    pub fn check<K: Resource + Serialize>(&mut self, object: &K, present: bool) -> Option<Reason> {
        let uid = object.uid().unwrap_or_else(|| object.name_any());
        if !present {
            self.seen.remove(&uid);
            return Some(Reason::Deleted);
        }
        let now = fingerprint(self.trigger, object);
        match self.seen.insert(uid, now.clone()) {
            None => Some(Reason::Created),
            Some(before) => {
                let changed: Vec<_> = self
                    .trigger
                    .fields
                    .iter()
                    .zip(before.iter().zip(&now))
                    .filter(|(_, (a, b))| a != b)
                    .map(|(f, _)| *f)
                    .collect();
                (!changed.is_empty()).then_some(Reason::Changed(changed))
            }
        }
    }
}

/// Filters a controller's trigger stream of `K` by its row in [`TRIGGERS`], logging each
/// trigger at debug and counting it in the controller's queue metrics.
pub fn filter<K, S>(
    controller: ControllerName,
    store: Store<K>,
    metrics: ControllerMetrics,
    stream: S,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Serialize + Clone + Send + Sync + 'static,
    S: Stream<Item = Arc<K>> + Send + 'static,
{
    let trigger = row::<K>(controller);
    let primary = controller.primary();
    let mut filter = Filter::new(trigger);
    stream.filter(move |object| {
        let present = store
            .get(&ObjectRef::from_obj(object.as_ref()))
            .is_some_and(|cached| cached.uid() == object.uid());
        let pass = filter.check(object.as_ref(), present);
        if let Some(reason) = &pass {
            let key = primary_key(object.as_ref(), trigger.enqueue, &primary);
            tracing::debug!(
                controller = controller.as_str(),
                kind = trigger.kind,
                object = %format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any()),
                primary = key.as_deref().unwrap_or("-"),
                ?reason,
                "trigger"
            );
            if let Some(key) = key {
                metrics.enqueued(key);
            }
        }
        futures::future::ready(pass.is_some())
    })
}

/// The table as Markdown (`docs/event-action-map.md`).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Event → action map\n\n\
         Generated from `crates/operator/src/triggers.rs` (`dynamo-operator triggers` prints it; a test\n\
         keeps this file equal to the table). Every watch is one row. A watched object triggers work\n\
         when it is first seen, when it is deleted, and when one of the listed fields changes —\n\
         nothing else (resourceVersion, managedFields, unrelated status, our own status writes).\n\
         There is no periodic resync: a controller looks again on its own only when a reconcile\n\
         asked for it (for example while a rollout is waiting).\n\n\
         | controller | watched kind | what changes trigger work | which object is reconciled | notes |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for t in TRIGGERS {
        let fields = if t.fields.is_empty() {
            "creation, deletion".to_string()
        } else {
            format!(
                "creation, deletion, {}",
                t.fields
                    .iter()
                    .map(|f| format!("`{}`", f.replace("~1", "/").replace("~0", "~")))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let enqueue = match t.enqueue {
            Enqueue::Itself => "itself".to_string(),
            Enqueue::ControllerOwner => "its controller owner".to_string(),
            Enqueue::Owners => "every owner (controller or not)".to_string(),
            Enqueue::Namespace => {
                "every one of its namespace (none for objects with the graph label)".to_string()
            }
            Enqueue::Label(l) => format!("named by label `{l}`"),
            Enqueue::GraphElseNamespace => {
                "named by the graph label, else every one of its namespace".to_string()
            }
            Enqueue::ScalingAdapters => {
                "the scaling adapters whose `spec.dgdRef` names its graph (and component)"
                    .to_string()
            }
            Enqueue::WaitingForApi => {
                "those waiting for the API it provides, when its served state changes".to_string()
            }
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} |\n",
            t.controller.as_str(),
            t.kind,
            fields,
            enqueue,
            t.note
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;

    fn deployment(generation: i64, ready: i32, rv: &str) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "d", "namespace": "ns", "uid": "u1", "generation": generation,
                          "resourceVersion": rv,
                          "ownerReferences": [{ "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoComponentDeployment",
                                                "name": "dcd", "uid": "o1", "controller": true }] },
            "status": { "readyReplicas": ready, "observedGeneration": generation }
        }))
        .unwrap()
    }

    #[test]
    fn created_changed_ignored_deleted() {
        let mut f = Filter::new(row::<Deployment>(ControllerName::Dcd));
        assert_eq!(f.check(&deployment(1, 0, "1"), true), Some(Reason::Created));
        // Only resourceVersion moved: ignored.
        assert_eq!(f.check(&deployment(1, 0, "2"), true), None);
        assert_eq!(
            f.check(&deployment(1, 1, "3"), true),
            Some(Reason::Changed(vec!["/status/readyReplicas"]))
        );
        // Deletion passes even with identical fields.
        assert_eq!(
            f.check(&deployment(1, 1, "3"), false),
            Some(Reason::Deleted)
        );
        // Recreated under the same uid is seen afresh.
        assert_eq!(f.check(&deployment(1, 1, "4"), true), Some(Reason::Created));
    }

    #[test]
    fn primary_keys() {
        let d = deployment(1, 0, "1");
        let dcd = ControllerName::Dcd.primary();
        assert_eq!(
            primary_key(&d, Enqueue::Itself, &dcd).as_deref(),
            Some("ns/d")
        );
        assert_eq!(
            primary_key(&d, Enqueue::ControllerOwner, &dcd).as_deref(),
            Some("ns/dcd")
        );
        // Owned by a DCD: nothing for the graph controller (kube-runtime enqueues nothing).
        let dgd = ControllerName::Dgd.primary();
        assert_eq!(primary_key(&d, Enqueue::ControllerOwner, &dgd), None);
        assert_eq!(primary_key(&d, Enqueue::Label("missing"), &dcd), None);
        // Several primaries: the wiring's mappers name them.
        assert_eq!(primary_key(&d, Enqueue::Owners, &dcd), None);
        assert_eq!(primary_key(&d, Enqueue::Namespace, &dcd), None);
    }

    #[test]
    fn checkpoint_rows_mirror_the_checkpoint_controller() {
        let ours: Vec<_> = rows(ControllerName::Checkpoint)
            .map(|t| (t.kind, t.fields.to_vec()))
            .collect();
        let theirs: Vec<_> = checkpoint_controller::WATCHES
            .iter()
            .map(|w| (w.kind, w.fields.to_vec()))
            .collect();
        assert_eq!(ours, theirs);
        for (t, w) in rows(ControllerName::Checkpoint).zip(checkpoint_controller::WATCHES) {
            let same = matches!(
                (t.enqueue, w.enqueue),
                (Enqueue::Itself, checkpoint_controller::Enqueue::Itself)
                    | (
                        Enqueue::ControllerOwner,
                        checkpoint_controller::Enqueue::ControllerOwner
                    )
            ) || matches!((t.enqueue, w.enqueue), (Enqueue::Label(a), checkpoint_controller::Enqueue::Label(b)) if a == b);
            assert!(same, "{}: {:?} vs {:?}", t.kind, t.enqueue, w.enqueue);
        }
    }

    /// The Docker config Secrets re-render both pathways, and only by namespace (a Secret has
    /// no owner among our primaries).
    #[test]
    fn secrets_rerender_both_pathways_by_namespace() {
        let rows: Vec<_> = TRIGGERS.iter().filter(|t| t.kind == "v1/Secret").collect();
        assert_eq!(
            rows.iter().map(|t| t.controller).collect::<Vec<_>>(),
            [ControllerName::Dgd, ControllerName::Dcd]
        );
        for t in rows {
            assert_eq!(t.enqueue, Enqueue::Namespace);
            assert_eq!(t.fields, ["/data"]);
        }
        let secret = |data: &str| -> k8s_openapi::api::core::v1::Secret {
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "ngc", "namespace": "ns", "uid": "s1" },
                "type": "kubernetes.io/dockerconfigjson",
                "data": { ".dockerconfigjson": data },
            }))
            .unwrap()
        };
        let mut f = Filter::new(row::<k8s_openapi::api::core::v1::Secret>(
            ControllerName::Dcd,
        ));
        assert_eq!(f.check(&secret("e30="), true), Some(Reason::Created));
        assert_eq!(f.check(&secret("e30="), true), None);
        assert_eq!(
            f.check(&secret("e30K"), true),
            Some(Reason::Changed(vec!["/data"]))
        );
        assert_eq!(f.check(&secret("e30K"), false), Some(Reason::Deleted));
    }

    /// The unescaped segments of an RFC 6901 pointer, or why it is not one.
    fn segments(pointer: &str) -> Result<Vec<String>, String> {
        let rest = pointer.strip_prefix('/').ok_or("does not start with '/'")?;
        rest.split('/')
            .map(|raw| {
                if raw.is_empty() {
                    return Err("has an empty segment".to_string());
                }
                let mut out = String::new();
                let mut chars = raw.chars();
                while let Some(c) = chars.next() {
                    out.push(match c {
                        '~' => match chars.next() {
                            Some('0') => '~',
                            Some('1') => '/',
                            _ => return Err(format!("bad escape in {raw:?}")),
                        },
                        other => other,
                    });
                }
                Ok(out)
            })
            .collect()
    }

    /// Whether `path` exists in the CRD schema of `kind` (`group/version/Kind`, ours only).
    fn in_crd_schema(kind: &str, path: &[String]) -> bool {
        let (group_version, kind) = kind.rsplit_once('/').unwrap();
        let version = group_version.rsplit_once('/').unwrap().1;
        let crd = api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("no CRD for {kind}"));
        let v = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == version)
            .unwrap();
        let mut node =
            serde_json::to_value(&v.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
        for segment in path {
            let next = node
                .pointer(&format!(
                    "/properties/{}",
                    segment.replace('~', "~0").replace('/', "~1")
                ))
                .cloned();
            match next {
                Some(n) => node = n,
                None => return false,
            }
        }
        true
    }

    /// Every field is an RFC 6901 pointer into the object's top-level fields; metadata
    /// pointers name the generation, the deletion, all labels or annotations, or one valid
    /// label/annotation key; for our own
    /// kinds the field exists in the CRD schema of the watched version.
    #[test]
    fn every_row_has_valid_pointers() {
        const TOP: &[&str] = &[
            "metadata", "spec", "status", "data", "rules", "roleRef", "subjects",
        ];
        for t in TRIGGERS {
            for f in t.fields {
                let at = || format!("{f} in the {} row of {:?}", t.kind, t.controller);
                let path = segments(f).unwrap_or_else(|e| panic!("{}: {e}", at()));
                assert!(
                    TOP.contains(&path[0].as_str()),
                    "{}: unknown top-level field",
                    at()
                );
                if path[0] == "metadata" {
                    match (path.get(1).map(String::as_str), path.get(2), path.len()) {
                        (
                            Some("generation" | "deletionTimestamp" | "labels" | "annotations"),
                            None,
                            2,
                        ) => {}
                        (Some("labels"), Some(key), 3) => {
                            let problems = api::metadata::label_key_problems(key);
                            assert!(problems.is_none(), "{}: {problems:?}", at());
                        }
                        (Some("annotations"), Some(key), 3) => {
                            let problems = api::metadata::annotation_key_problems(key);
                            assert!(problems.is_none(), "{}: {problems:?}", at());
                            assert!(key.contains('/'), "{}: a prefixed key, escaped `~1`", at());
                        }
                        _ => panic!("{}: not a metadata field a trigger can watch", at()),
                    }
                } else if t.kind.starts_with("nvidia.com/") {
                    assert!(
                        in_crd_schema(t.kind, &path),
                        "{}: not in the CRD schema",
                        at()
                    );
                }
            }
        }
        assert!(
            segments("/metadata/annotations/nvidia.com/x")
                .unwrap()
                .len()
                == 4
        );
        assert!(segments("/a/~2").is_err() && segments("a").is_err() && segments("/a//b").is_err());
    }

    #[test]
    fn doc_matches_table() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/event-action-map.md"
        );
        let expected = markdown();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(path, &expected).unwrap();
        }
        let actual = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            actual, expected,
            "docs/event-action-map.md differs from the trigger table; run `UPDATE_DOCS=1 cargo test -p operator doc_matches_table`"
        );
    }
}
