//! The checkpoint restore webhook: a mutating admission webhook for Pod CREATE that
//! restore-shapes each new pod of a `startupPolicy: Immediate` checkpoint component whose
//! DynamoCheckpoint is Ready at that moment, as upstream's pod-create webhook does (its
//! `mpodcheckpointrestore.kb.io` at `/mutate-core-v1-pod-checkpoint-restore`). The pod template
//! of such a component never changes with the checkpoint's readiness (it only carries the
//! restore-candidate annotations, `pod_render::restore`), so a checkpoint becoming Ready rolls
//! no pods: the pods created afterwards restore, those running stay.
//!
//! **Admission.** A pod is admitted unchanged, never denied, unless every check holds, in order:
//! 1. the operation is CREATE (the restore sets fields only meaningful before the pod exists),
//!    in the watched namespace (`--namespace`) if one is set;
//! 2. the pod is not checkpoint-shaped yet (no `nvidia.com/snapshot-checkpoint-id` or
//!    `nvidia.com/snapshot-is-checkpoint-source` label);
//! 3. it is a restore candidate (`nvidia.com/dynamo-checkpoint-restore-candidate: "true"`)
//!    naming its checkpoint (`nvidia.com/dynamo-checkpoint-name`), stamped by the operator
//!    (labels `nvidia.com/dynamo-component`, `nvidia.com/dynamo-namespace` and
//!    `nvidia.com/selector` set), with a valid `nvidia.com/snapshot-target-containers` whose
//!    containers the pod has;
//! 4. that DynamoCheckpoint exists in the pod's namespace and is Ready, and the snapshot
//!    agent's storage is found (`reconcilers::checkpoints::checkpoint_restore`).
//!
//! Then the answer is a JSONPatch: the pod after `pod_render::restore::restore_pod` (the very
//! restore a Ready `WaitForCheckpoint` template gets, on the pod) diffed against the pod as it
//! came, both as the typed Pod serializes them.
//!
//! **Reads.** Every replica serves the webhook, leader or not, so the webhook has a watch cache
//! of its own (a few objects): the DynamoCheckpoints and the snapshot-agent DaemonSets
//! (label-selected) of the watched namespaces. Until their first list, reads fall back to live
//! calls.
//!
//! **Configuration.** The MutatingWebhookConfiguration [`CONFIGURATION`] holds the one webhook:
//! Pod CREATE (`v1`), `failurePolicy: Ignore` (a pod is never held back by the webhook: without
//! it, it starts cold), `sideEffects: None`, `timeoutSeconds: 10`, AdmissionReview `v1`, as
//! upstream's chart registers it. Upstream's webhook sees every pod and skips the ones without
//! the operator's labels; here an `objectSelector` on those labels (step 3) keeps the other
//! pods of the cluster from reaching the operator at all, with the same outcome. With
//! `--namespace`, a `namespaceSelector` on `kubernetes.io/metadata.name` scopes it to that
//! namespace. The operator applies it at start-up (server-side apply, skipped when it is
//! already as desired), pointing at itself (Service or `--webhook-url`) with the webhook's CA
//! bundle, as it does for the CRD conversion.

use std::sync::Arc;

use anyhow::Context;
use api::DynamoCheckpoint;
use api::labels;
use api::snapshot::{AGENT_SELECTOR, CHECKPOINT_ID_LABEL, CHECKPOINT_SOURCE_LABEL};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kit::{Reader, ReaderExt};
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::watcher;
use kube::{Client, Resource};
use pod_render::restore::{Restore, parse_targets, restore_pod};
use tokio_util::sync::CancellationToken;

use crate::webhook::Endpoint;

/// The webhook's HTTP path (upstream's).
pub const PATH: &str = "/mutate-core-v1-pod-checkpoint-restore";
/// The MutatingWebhookConfiguration the operator applies.
pub const CONFIGURATION: &str = "dynamo-operator-checkpoint-restore";
/// The webhook's name in it (upstream's).
pub const WEBHOOK: &str = "mpodcheckpointrestore.kb.io";
/// How long the apiserver waits for an answer (upstream's chart default).
pub const TIMEOUT_SECONDS: i32 = 10;
/// The labels every pod the operator renders carries, which a restore candidate must carry.
pub const STAMP_LABELS: [&str; 3] = [
    labels::DYNAMO_COMPONENT,
    labels::DYNAMO_NAMESPACE,
    labels::SELECTOR,
];
/// The field manager of the configuration.
const FIELD_MANAGER: &str = api::labels::OPERATOR_NAME;

/// What the webhook answers for one pod.
#[derive(Debug, PartialEq)]
pub enum Admission {
    /// Admitted as it came, and why.
    Unchanged(String),
    /// Admitted restore-shaped by this patch.
    Restored(json_patch::Patch),
}

/// Answers the webhook's AdmissionReviews (see the module docs).
pub struct Restorer {
    reader: Arc<dyn Reader>,
    namespace: Option<String>,
}

impl Restorer {
    /// A restorer reading through `reader`, for pods of `namespace` (all when `None`).
    pub fn new(reader: Arc<dyn Reader>, namespace: Option<String>) -> Self {
        Self { reader, namespace }
    }

    /// The answer for `request`.
    pub async fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> Admission {
        if request.operation != Operation::Create {
            return unchanged("not a pod create");
        }
        let Some(object) = request.object.as_ref() else {
            return unchanged("no pod in the request");
        };
        let pod: Pod = match serde_json::to_value(object).and_then(serde_json::from_value) {
            Ok(pod) => pod,
            Err(error) => return Admission::Unchanged(format!("not a pod: {error}")),
        };
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| request.namespace.clone())
            .unwrap_or_default();
        if self.namespace.as_ref().is_some_and(|w| *w != namespace) {
            return unchanged("namespace not watched");
        }
        let candidate = match candidate(&pod) {
            Ok(candidate) => candidate,
            Err(why) => return Admission::Unchanged(why),
        };
        let ckpt: DynamoCheckpoint = match self
            .reader
            .get(Some(&namespace), &candidate.checkpoint)
            .await
        {
            Ok(Some(ckpt)) => ckpt,
            Ok(None) => return unchanged("checkpoint not found"),
            Err(error) => {
                return Admission::Unchanged(format!("checkpoint could not be read: {error}"));
            }
        };
        match reconcilers::checkpoints::checkpoint_restore(&*self.reader, &namespace, &ckpt).await {
            Ok(Some(restore)) => Admission::Restored(patch(&pod, &candidate.targets, &restore)),
            Ok(None) => unchanged("checkpoint not ready"),
            Err(error) => Admission::Unchanged(format!("checkpoint restore unavailable: {error}")),
        }
    }

    /// The AdmissionReview answering `review`.
    pub async fn review(
        &self,
        review: AdmissionReview<DynamicObject>,
    ) -> AdmissionReview<DynamicObject> {
        let request: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(request) => request,
            Err(error) => return AdmissionResponse::invalid(error).into_review(),
        };
        let response = AdmissionResponse::from(&request);
        let pod = request
            .object
            .as_ref()
            .map(|o| o.metadata.name.clone().or(o.metadata.generate_name.clone()))
            .unwrap_or_default()
            .unwrap_or_default();
        let namespace = request.namespace.clone().unwrap_or_default();
        match self.admit(&request).await {
            Admission::Unchanged(why) => {
                tracing::debug!(%namespace, %pod, %why, "checkpoint restore: pod unchanged");
                response.into_review()
            }
            Admission::Restored(patch) => {
                tracing::info!(%namespace, %pod, "checkpoint restore: pod restore-shaped");
                match response.clone().with_patch(patch) {
                    Ok(patched) => patched.into_review(),
                    Err(error) => {
                        tracing::error!(%error, "checkpoint restore: patch not serializable");
                        response.into_review()
                    }
                }
            }
        }
    }
}

fn unchanged(why: &str) -> Admission {
    Admission::Unchanged(why.to_string())
}

/// A restore candidate: the checkpoint it names and the containers it restores.
#[derive(Debug, PartialEq)]
struct Candidate {
    checkpoint: String,
    targets: Vec<String>,
}

/// The candidate `pod` is, or why it is none (the pod-only checks of the module docs).
fn candidate(pod: &Pod) -> Result<Candidate, String> {
    let empty = Default::default();
    let pod_labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let set = |map: &std::collections::BTreeMap<String, String>, key: &str| {
        map.get(key).filter(|v| !v.is_empty()).cloned()
    };
    if [CHECKPOINT_ID_LABEL, CHECKPOINT_SOURCE_LABEL]
        .iter()
        .any(|key| set(pod_labels, key).is_some())
    {
        return Err("pod is already checkpoint-shaped".into());
    }
    if annotations
        .get(labels::CHECKPOINT_RESTORE_CANDIDATE)
        .map(String::as_str)
        != Some("true")
    {
        return Err("pod is not a checkpoint restore candidate".into());
    }
    let checkpoint = set(annotations, labels::CHECKPOINT_NAME)
        .ok_or("restore candidate has no checkpoint name")?;
    if STAMP_LABELS
        .iter()
        .any(|key| set(pod_labels, key).is_none())
    {
        return Err("restore candidate is not operator-stamped".into());
    }
    let targets =
        parse_targets(annotations).map_err(|e| format!("target containers invalid: {e}"))?;
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    if let Some(missing) = targets
        .iter()
        .find(|t| !containers.iter().any(|c| &c.name == *t))
    {
        return Err(format!(
            "restore target {missing:?} is not a container of the pod"
        ));
    }
    Ok(Candidate {
        checkpoint,
        targets,
    })
}

/// The JSONPatch restoring `pod` from `restore` into `targets`: `pod` after
/// `pod_render::restore::restore_pod` diffed against `pod`, both as the typed Pod serializes
/// them (so a field is compared with itself, however the request spelled it).
pub fn patch(pod: &Pod, targets: &[String], restore: &Restore) -> json_patch::Patch {
    let mut restored = pod.clone();
    restore_pod(&mut restored, targets, restore);
    let json = |pod: &Pod| serde_json::to_value(pod).expect("a Pod serializes");
    json_patch::diff(&json(pod), &json(&restored))
}

/// The webhook's reads (see the module docs): a watch cache of the DynamoCheckpoints and the
/// snapshot-agent DaemonSets of `namespace` (all namespaces when `None`), run until `stop`.
pub fn reader(
    client: Client,
    namespace: Option<&str>,
    stop: CancellationToken,
) -> anyhow::Result<Arc<dyn Reader>> {
    fn api<K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>>(
        client: &Client,
        namespace: Option<&str>,
    ) -> Api<K> {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let cache = kit::cache::Cache::new(client.clone());
    cache.watch::<DynamoCheckpoint>(api(&client, namespace), watcher::Config::default())?;
    cache.watch::<DaemonSet>(
        api(&client, namespace),
        watcher::Config::default().labels(AGENT_SELECTOR),
    )?;
    let run = cache.run();
    tokio::spawn(async move {
        tokio::select! {
            _ = run => {}
            _ = stop.cancelled() => {}
        }
    });
    Ok(Arc::new(cache))
}

/// The MutatingWebhookConfiguration pointing at `endpoint` with `ca_bundle`, for pods of
/// `namespace` (all namespaces when `None`); see the module docs. The fields the apiserver
/// would default are given, so a stored configuration equals this one.
/// What the API server does with a pod when the restore webhook cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FailurePolicy {
    /// Create the pod unchanged (it starts cold): the default, as upstream.
    #[default]
    #[value(name = "Ignore", alias = "ignore")]
    Ignore,
    /// Refuse the pod (its controller retries): no pod of an Immediate checkpoint component
    /// ever starts cold, at the price of none starting while the operator is down.
    #[value(name = "Fail", alias = "fail")]
    Fail,
}

impl FailurePolicy {
    /// The `failurePolicy` value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "Ignore",
            FailurePolicy::Fail => "Fail",
        }
    }
}

pub fn configuration(
    endpoint: &Endpoint,
    ca_bundle: &str,
    namespace: Option<&str>,
    failure_policy: FailurePolicy,
) -> MutatingWebhookConfiguration {
    let exists = |key: &str| LabelSelectorRequirement {
        key: key.into(),
        operator: "Exists".into(),
        values: None,
    };
    let namespace_selector = LabelSelector {
        match_expressions: namespace.map(|ns| {
            vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![ns.to_string()]),
            }]
        }),
        match_labels: None,
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION.into()),
            labels: Some(
                [(
                    api::labels::APP_NAME.to_string(),
                    api::labels::OPERATOR_NAME.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: WEBHOOK.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: endpoint.client_config(PATH, ca_bundle),
            failure_policy: Some(failure_policy.as_str().into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: Some(namespace_selector),
            object_selector: Some(LabelSelector {
                match_expressions: Some(STAMP_LABELS.iter().map(|k| exists(k)).collect()),
                match_labels: None,
            }),
            reinvocation_policy: Some("Never".into()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["pods".into()]),
                scope: Some("*".into()),
            }]),
            side_effects: "None".into(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_conditions: None,
        }]),
    }
}

/// Applies `desired` (server-side), unless the stored configuration's webhooks already equal
/// its.
pub async fn ensure_configuration(
    client: Client,
    desired: &MutatingWebhookConfiguration,
) -> anyhow::Result<()> {
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client);
    let current = configurations.get_opt(CONFIGURATION).await?;
    if current.is_some_and(|c| c.webhooks == desired.webhooks) {
        return Ok(());
    }
    configurations
        .patch(
            CONFIGURATION,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await
        .with_context(|| format!("applying MutatingWebhookConfiguration {CONFIGURATION}"))?;
    tracing::info!(
        configuration = CONFIGURATION,
        "checkpoint restore webhook configured"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
