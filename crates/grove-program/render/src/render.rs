//! [`render`]: a graph and what was resolved about it, to the desired PodCliqueSet.

use std::collections::{BTreeMap, BTreeSet};

use api::grove::{
    CliqueStartupType, HeadlessServiceConfig, PodCliqueScalingGroupConfig, PodCliqueSet,
    PodCliqueSetSpec, PodCliqueSetTemplateSpec, PodCliqueSetUpdateStrategy, PodCliqueSpec,
    PodCliqueTemplateSpec, TopologyConstraint, TopologyPack, UpdateStrategyType,
};
use api::labels;
use api::runtime_version::RuntimeVersion;
use api::v1alpha1::DynamoComponentDeploymentSharedSpec as AlphaComponent;
use api::v1beta1::{
    KvTransferPolicy, ProviderOverride, ROLE_LEADER, ROLE_WORKER, SpecTopologyConstraint,
};
use api::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::compat;
use crate::names::{self, Role};
use crate::pod::{self, Backend, PodInput};
use crate::{Inputs, RenderError};

/// Annotation (user, on the graph): the PodCliqueSet update strategy, `RollingRecreate` or
/// `OnDelete` (Grove's values).
pub const GROVE_UPDATE_STRATEGY: &str = "nvidia.com/grove-update-strategy";
/// Graph metadata annotations copied onto every clique that does not set them.
pub use api::labels::PROPAGATED_ANNOTATIONS;

/// Render the desired PodCliqueSet of `inputs.dgd`. Pure: no client, no I/O, no clock; the
/// inputs are not changed; equal inputs give equal output.
///
/// What is rendered (upstream's `GenerateGrovePodCliqueSet`):
/// - metadata: name [`names::pcs_name`], the graph's namespace, labels = `spec.labels` plus
///   `nvidia.com/dynamo-graph-deployment-name`, annotations = `spec.annotations`, a controller
///   owner reference to the graph;
/// - spec: `replicas: 1`, `updateStrategy` from [`GROVE_UPDATE_STRATEGY`], template with
///   `cliqueStartupType: CliqueStartupTypeAnyOrder` (`Explicit` when a TRT-LLM multinode leader
///   starts after its workers), `headlessServiceConfig.publishNotReadyAddresses: true`,
///   `terminationDelay` from the settings, `priorityClassName`, and `topologyConstraint`
///   (`topologyName` + `pack.required`) from `spec.topologyConstraint`;
/// - per component, in spec order: its cliques ([`names::clique_roles`]) with labels,
///   annotations and the pod spec ([`crate::pod`]: a multinode component's leader and worker
///   cliques with the backend's launch wiring); multinode, inter-pod GMS and forced
///   components outside component groups also get a scaling group named after the component;
/// - per component group (`spec.experimental.componentGroups`), after those: one scaling group
///   named after the group (lowercased) holding its members' cliques (sorted by name), with the
///   group's `replicas` and `minAvailable: 1`; the members' cliques carry
///   `nvidia.com/dynamo-component-group: <group>`;
/// - then the compatibility rules of [`crate::compat`] against `inputs.existing`, then the
///   provider overrides (`providerOverride` fragments replace the `topologyConstraint` of their
///   target).
pub fn render(inputs: &Inputs<'_>) -> Result<PodCliqueSet, RenderError> {
    let dgd = inputs.dgd;
    let dgd_name = dgd.metadata.name.clone().unwrap_or_default();
    if dgd_name.is_empty() {
        return Err(RenderError::Unnamed);
    }
    let owner = owner_reference(dgd)?;
    unsupported(dgd)?;

    let existing = inputs.existing;
    let hash_labels = worker_hash_labels(inputs);
    let alpha = preserved_alpha_services(dgd);
    let existing_restarts = compat::restart_annotations(existing);
    let mut cliques = Vec::new();
    let mut groups = Vec::new();
    let mut group_cliques: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut explicit_startup = false;
    for original in &dgd.spec.components {
        let restart_at = inputs
            .restart
            .filter(|r| r.components.contains(&original.name))
            .map(|r| r.value.clone())
            .or_else(|| existing_restarts.get(&original.name).cloned());
        let rendered = component_cliques(
            inputs,
            original,
            alpha.get(&original.name),
            hash_labels,
            restart_at,
        )?;
        explicit_startup |= rendered.explicit_startup;
        let names_in_group: Vec<String> = rendered.cliques.iter().map(|c| c.name.clone()).collect();
        cliques.extend(rendered.cliques);
        if let Some(group) = dgd.spec.component_group(&original.name) {
            group_cliques
                .entry(group.name.as_str())
                .or_default()
                .extend(names_in_group);
        } else if let Some(group) = rendered.scaling_group {
            groups.push(group);
        }
    }
    groups.extend(component_group_configs(dgd, &group_cliques));

    let mut pcs = pod_clique_set(inputs, &dgd_name, owner, cliques, groups, explicit_startup)?;
    let waiting_lower: BTreeSet<String> = inputs
        .waiting_for_checkpoint
        .iter()
        .map(|c| c.to_lowercase())
        .collect();
    compat::upgrade_topology_constraints(&mut pcs, existing);
    compat::preserve_order(&mut pcs, existing);
    compat::preserve_replicas(&mut pcs, existing, &waiting_lower);
    provider_overrides(&mut pcs, dgd)?;
    Ok(pcs)
}

/// Whether worker cliques carry the worker hash label: the graph has workers, and the existing
/// PodCliqueSet (if any) labels them so or the worker spec changed.
fn worker_hash_labels(inputs: &Inputs<'_>) -> bool {
    let components = &inputs.dgd.spec.components;
    let has_workers = components
        .iter()
        .any(|c| c.r#type.is_some_and(ComponentType::is_worker));
    has_workers
        && (inputs
            .existing
            .is_none_or(|e| compat::uses_worker_hash_labels(components, e))
            || inputs.workers.changed)
}

/// The discovery backend of the graph's pods: its `nvidia.com/dynamo-discovery-backend`
/// annotation, else the operator's setting.
fn discovery_backend(dgd: &DynamoGraphDeployment, settings: &crate::Settings) -> String {
    dgd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DYNAMO_DISCOVERY_BACKEND))
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| settings.discovery.as_str().to_string())
}

/// The graph's KV transfer policy, when it names a topology (label key or ClusterTopology).
fn kv_transfer_policy(dgd: &DynamoGraphDeployment) -> Option<&KvTransferPolicy> {
    dgd.spec
        .experimental
        .as_ref()
        .and_then(|e| e.kv_transfer_policy.as_ref())
        .filter(|p| p.label_key.is_some() || p.cluster_topology_name.is_some())
}

/// The Dynamo namespace of a component's pods.
fn dynamo_namespace(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> String {
    labels::dynamo_namespace(
        component.global_dynamo_namespace,
        dgd.metadata.namespace.as_deref().unwrap_or_default(),
        dgd.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// What one component renders: its cliques and, for a component that uses a scaling group, the
/// scaling group of its own (used unless the component is a member of a component group).
struct ComponentCliques {
    /// One clique per role, in role order.
    cliques: Vec<PodCliqueTemplateSpec>,
    /// The component's own scaling group (multinode, inter-pod GMS or forced components).
    scaling_group: Option<PodCliqueScalingGroupConfig>,
    /// A TRT-LLM multinode leader starts after its workers.
    explicit_startup: bool,
}

/// The cliques of component `original` ([`names::clique_roles`]: a multinode component's leader
/// and worker cliques with the backend's launch wiring), rendered from the component as the
/// compatibility rules and the worker hash label (`hash_labels`) leave it, with the labels and
/// annotations of [`clique_metadata`]. `alpha`: its preserved v1alpha1 service; `restart_at`: its
/// `nvidia.com/restartAt` value.
fn component_cliques(
    inputs: &Inputs<'_>,
    original: &DynamoComponentDeploymentSharedSpec,
    alpha: Option<&AlphaComponent>,
    hash_labels: bool,
    restart_at: Option<String>,
) -> Result<ComponentCliques, RenderError> {
    let dgd = inputs.dgd;
    let backend = Backend::detect(original, dgd.spec.backend_framework).map_err(|message| {
        RenderError::Backend {
            component: original.name.clone(),
            message,
        }
    })?;
    let component = rendered_component(original, inputs, hash_labels);
    let worker = component.r#type.is_some_and(ComponentType::is_worker);
    let worker_kv = kv_transfer_policy(dgd).filter(|_| worker);
    let (clique_labels, annotations) =
        clique_metadata(inputs, &component, alpha, worker_kv, restart_at);
    let worker_hash = worker
        .then(|| clique_labels.get(labels::DYNAMO_WORKER_HASH).cloned())
        .flatten();
    let waiting = inputs.waiting_for_checkpoint.contains(&original.name);
    let uses_group = component.uses_pcsg();
    let multinode = component.is_multinode();
    let roles = names::clique_roles(&component);
    let dgd_name = dgd.metadata.name.as_deref().unwrap_or_default();
    let namespace = dgd.metadata.namespace.as_deref().unwrap_or_default();
    let dynamo_namespace = dynamo_namespace(dgd, &component);
    let pod_spec = |role| {
        pod_render::pod_spec(&PodInput {
            graph: Some(dgd_name),
            namespace,
            component: &component,
            component_type: component
                .r#type
                .map(ComponentType::as_str)
                .unwrap_or_default(),
            dynamo_namespace: &dynamo_namespace,
            worker_hash: worker_hash.as_deref(),
            annotations: &annotations,
            kube_discovery: discovery_backend(dgd, inputs.settings)
                == crate::Discovery::Kubernetes.as_str(),
            backend,
            graph_env: &dgd.spec.env,
            kv_transfer: worker_kv.map(|p| (p, inputs.topology_domains)),
            pull_secrets: inputs.pull_secrets,
            infrastructure: &inputs.settings.infrastructure,
            runtime_version: RuntimeVersion::of_component(&component),
            checkpoint: inputs.checkpoints.get(&original.name),
            role,
            deployer: pod::Deployer::Grove,
        })
    };
    let topology = if uses_group {
        None
    } else {
        component_topology(&component, dgd.spec.topology_constraint.as_ref())
    };
    let mut cliques: Vec<PodCliqueTemplateSpec> = roles
        .iter()
        .map(|role| PodCliqueTemplateSpec {
            name: role.name.clone(),
            labels: clique_labels.clone(),
            annotations: annotations.clone(),
            topology_constraint: topology.clone(),
            resource_sharing: Vec::new(),
            spec: PodCliqueSpec {
                role_name: role.name.clone(),
                pod_spec: pod_spec(role.role),
                replicas: if waiting { 0 } else { role.replicas },
                min_available: Some(clique_min_available(&component, role)),
                starts_after: Vec::new(),
                auto_scaling_config: None,
            },
        })
        .collect();
    let explicit_startup = backend == Backend::Trtllm
        && multinode
        && trtllm_leader_after_workers(&mut cliques, &roles);
    let scaling_group = uses_group.then(|| PodCliqueScalingGroupConfig {
        name: original.name.to_lowercase(),
        clique_names: roles.iter().map(|r| r.name.clone()).collect(),
        annotations: BTreeMap::new(),
        replicas: if waiting { Some(0) } else { component.replicas },
        min_available: Some(component.min_available.unwrap_or(1)),
        scale_config: None,
        resource_sharing: Vec::new(),
        topology_constraint: component_topology(&component, dgd.spec.topology_constraint.as_ref()),
    });
    Ok(ComponentCliques {
        cliques,
        scaling_group,
        explicit_startup,
    })
}

/// The component as its cliques render it: the legacy worker type rule of [`compat`] applied
/// and, on workers with `hash_labels`, the worker hash label on its pod template.
fn rendered_component(
    original: &DynamoComponentDeploymentSharedSpec,
    inputs: &Inputs<'_>,
    hash_labels: bool,
) -> DynamoComponentDeploymentSharedSpec {
    let mut component = original.clone();
    compat::legacy_worker_type(&mut component, inputs.existing);
    let worker = component.r#type.is_some_and(ComponentType::is_worker);
    if worker && hash_labels {
        let meta = component
            .pod_template
            .get_or_insert_with(Default::default)
            .metadata
            .get_or_insert_with(Default::default);
        meta.labels.get_or_insert_with(BTreeMap::new).insert(
            labels::DYNAMO_WORKER_HASH.into(),
            inputs.workers.hash.clone(),
        );
    }
    component
}

/// The labels and annotations of a component's cliques: [`clique_annotations`] with the KV
/// transfer topology of a worker (`kv`) and the restart stamp (`restart_at`), then
/// [`clique_labels`], the checkpoint's restore metadata and the component group label.
fn clique_metadata(
    inputs: &Inputs<'_>,
    component: &DynamoComponentDeploymentSharedSpec,
    alpha: Option<&AlphaComponent>,
    kv: Option<&KvTransferPolicy>,
    restart_at: Option<String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let dgd = inputs.dgd;
    let graph_annotations = dgd.metadata.annotations.clone().unwrap_or_default();
    let discovery = discovery_backend(dgd, inputs.settings);
    let mut annotations = clique_annotations(dgd, component, alpha, &graph_annotations, &discovery);
    if let Some(policy) = kv {
        if let Some(key) = &policy.label_key {
            annotations.insert(labels::TOPOLOGY_LABEL_KEY.into(), key.clone());
        }
        if let Some(name) = &policy.cluster_topology_name {
            annotations.insert(labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME.into(), name.clone());
        }
    }
    if let Some(at) = restart_at {
        annotations.insert(labels::RESTART_AT.into(), at);
    }
    let mut clique_labels = clique_labels(
        dgd,
        dgd.metadata.name.as_deref().unwrap_or_default(),
        component,
        alpha,
        &dynamo_namespace(dgd, component),
        &annotations,
        dgd.spec.epp_component().is_some(),
        discovery == crate::Discovery::Kubernetes.as_str(),
    );
    if let Some(checkpoint) = inputs.checkpoints.get(&component.name) {
        pod_render::restore::metadata(&mut clique_labels, &mut annotations, checkpoint);
    }
    if let Some(group) = dgd.spec.component_group(&component.name) {
        clique_labels.insert(labels::DYNAMO_COMPONENT_GROUP.into(), group.name.clone());
    }
    (clique_labels, annotations)
}

/// `minAvailable` of the clique of `role`: the role's replicas on a multinode component, 1 in a
/// scaling group, else the component's (1 when unset).
fn clique_min_available(
    component: &DynamoComponentDeploymentSharedSpec,
    role: &names::CliqueRole,
) -> i32 {
    if component.is_multinode() {
        role.replicas
    } else if component.uses_pcsg() {
        1
    } else {
        component.min_available.unwrap_or(1)
    }
}

/// The PodCliqueSet around `cliques` and `groups` (`explicit_startup`: a leader starts after
/// its workers), named [`names::pcs_name`] and controlled by the graph (`owner`).
fn pod_clique_set(
    inputs: &Inputs<'_>,
    dgd_name: &str,
    owner: OwnerReference,
    cliques: Vec<PodCliqueTemplateSpec>,
    groups: Vec<PodCliqueScalingGroupConfig>,
    explicit_startup: bool,
) -> Result<PodCliqueSet, RenderError> {
    let dgd = inputs.dgd;
    let graph_annotations = dgd.metadata.annotations.clone().unwrap_or_default();
    let mut pcs_labels = dgd.spec.labels.clone();
    pcs_labels.insert(
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.into(),
        dgd_name.to_string(),
    );
    Ok(PodCliqueSet {
        metadata: ObjectMeta {
            name: Some(names::pcs_name(dgd_name, &dgd.spec)),
            namespace: dgd.metadata.namespace.clone(),
            labels: Some(pcs_labels),
            annotations: (!dgd.spec.annotations.is_empty()).then(|| dgd.spec.annotations.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: PodCliqueSetSpec {
            replicas: Some(1),
            update_strategy: update_strategy(&graph_annotations)?,
            template: PodCliqueSetTemplateSpec {
                cliques,
                clique_startup_type: Some(if explicit_startup {
                    CliqueStartupType::CliqueStartupTypeExplicit
                } else {
                    CliqueStartupType::CliqueStartupTypeAnyOrder
                }),
                priority_class_name: dgd.spec.priority_class_name.clone(),
                headless_service_config: Some(HeadlessServiceConfig {
                    publish_not_ready_addresses: true,
                }),
                topology_constraint: graph_topology(dgd.spec.topology_constraint.as_ref()),
                termination_delay: inputs.settings.termination_delay.clone(),
                resource_claim_templates: Vec::new(),
                resource_sharing: Vec::new(),
                pod_clique_scaling_groups: groups,
            },
        },
        status: None,
    })
}

/// Annotation in which v1alpha1 → v1beta1 conversion keeps the v1alpha1 spec it could not
/// represent (`api::conversion`); its services carry the alpha-only `subComponentType`,
/// `labels` and `annotations` upstream renders onto cliques.
pub use api::conversion::ALPHA_SPEC as PRESERVED_ALPHA_SPEC;

/// The v1alpha1 services preserved on a converted graph, by name (empty for native v1beta1).
pub(crate) fn preserved_alpha_services(
    dgd: &DynamoGraphDeployment,
) -> BTreeMap<String, AlphaComponent> {
    dgd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PRESERVED_ALPHA_SPEC))
        .and_then(|text| {
            serde_json::from_str::<api::v1alpha1::DynamoGraphDeploymentSpec>(text).ok()
        })
        .map(|spec| spec.services)
        .unwrap_or_default()
}

/// Whether the graph can be rendered at all: every [`RenderError`] is a property of the graph
/// alone, so rendering it with neutral inputs finds them before anything is written.
pub fn preflight(dgd: &DynamoGraphDeployment) -> Result<(), RenderError> {
    let settings = crate::Settings::default();
    render(&Inputs {
        dgd,
        existing: None,
        workers: &crate::Workers::default(),
        restart: None,
        waiting_for_checkpoint: &BTreeSet::new(),
        checkpoints: &BTreeMap::new(),
        topology_domains: &[],
        pull_secrets: &pod::PullSecrets::default(),
        settings: &settings,
    })
    .map(|_| ())
}

fn owner_reference(dgd: &DynamoGraphDeployment) -> Result<OwnerReference, RenderError> {
    let uid = dgd
        .metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or(RenderError::NoUid)?;
    Ok(OwnerReference {
        api_version: "nvidia.com/v1beta1".into(),
        kind: "DynamoGraphDeployment".into(),
        name: dgd.metadata.name.clone().unwrap_or_default(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The scaling group of each component group, in spec order (upstream's
/// `groveScalingGroupForComponentGroup`): named after the group (lowercased), holding the
/// cliques of its members (`cliques`, by group name) sorted by name, with the group's replicas
/// and `minAvailable: 1`.
fn component_group_configs(
    dgd: &DynamoGraphDeployment,
    cliques: &BTreeMap<&str, Vec<String>>,
) -> Vec<PodCliqueScalingGroupConfig> {
    dgd.spec
        .component_groups()
        .iter()
        .map(|group| {
            let mut clique_names = cliques
                .get(group.name.as_str())
                .cloned()
                .unwrap_or_default();
            clique_names.sort();
            PodCliqueScalingGroupConfig {
                name: group.name.to_lowercase(),
                clique_names,
                annotations: BTreeMap::new(),
                replicas: Some(group.replicas),
                min_available: Some(1),
                scale_config: None,
                resource_sharing: Vec::new(),
                topology_constraint: None,
            }
        })
        .collect()
}

/// Features the grove pathway does not render yet. Inter-pod GMS is refused by validation first
/// (`InvalidSpec`, both pathways); the check here keeps a graph that bypassed it from rendering.
fn unsupported(dgd: &DynamoGraphDeployment) -> Result<(), RenderError> {
    if let Some(c) = dgd.spec.components.iter().find(|c| c.is_inter_pod_gms()) {
        return Err(RenderError::Unsupported(format!(
            "component {}: experimental.gpuMemoryService.mode InterPod",
            c.name
        )));
    }
    Ok(())
}

fn update_strategy(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<PodCliqueSetUpdateStrategy>, RenderError> {
    let Some(value) = annotations.get(GROVE_UPDATE_STRATEGY) else {
        return Ok(None);
    };
    let type_ = match value.as_str() {
        "RollingRecreate" => UpdateStrategyType::RollingRecreate,
        "OnDelete" => UpdateStrategyType::OnDelete,
        other => {
            return Err(RenderError::Annotation {
                key: GROVE_UPDATE_STRATEGY.into(),
                message: format!(
                    "unsupported value {other:?}: supported values are \"RollingRecreate\" and \"OnDelete\""
                ),
            });
        }
    };
    Ok(Some(PodCliqueSetUpdateStrategy {
        r#type: Some(type_),
    }))
}

/// The PodCliqueSet-level constraint: the ClusterTopology and, when given, `pack.required`.
fn graph_topology(tc: Option<&SpecTopologyConstraint>) -> Option<TopologyConstraint> {
    let tc = tc?;
    grove_constraint(&tc.cluster_topology_name, tc.pack_domain.as_deref()?)
}

/// A component's constraint. It inherits the topology from a constrained PodCliqueSet; when the
/// graph has no pack domain of its own, the component names the topology itself.
fn component_topology(
    component: &DynamoComponentDeploymentSharedSpec,
    graph: Option<&SpecTopologyConstraint>,
) -> Option<TopologyConstraint> {
    let domain = component.topology_constraint.as_ref()?.pack_domain.as_str();
    let topology = graph
        .filter(|g| g.pack_domain.as_deref().is_none_or(str::is_empty))
        .map(|g| g.cluster_topology_name.as_str())
        .unwrap_or_default();
    grove_constraint(topology, domain)
}

fn grove_constraint(topology: &str, domain: &str) -> Option<TopologyConstraint> {
    (!domain.is_empty()).then(|| TopologyConstraint {
        topology_name: (!topology.is_empty()).then(|| topology.to_string()),
        pack: Some(TopologyPack {
            required: Some(domain.to_string()),
            preferred: None,
        }),
        pack_domain: None,
    })
}

/// Annotations of a component's cliques: the graph's `spec.annotations`, the preserved
/// v1alpha1 service annotations, then the pod template's (with the propagated graph metadata
/// annotations and the discovery backend), without the topology source annotations.
fn clique_annotations(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    alpha: Option<&AlphaComponent>,
    graph_annotations: &BTreeMap<String, String>,
    discovery: &str,
) -> BTreeMap<String, String> {
    let mut template = template_annotations(component);
    for key in PROPAGATED_ANNOTATIONS {
        if let Some(v) = graph_annotations.get(key) {
            template.entry(key.to_string()).or_insert_with(|| v.clone());
        }
    }
    template.insert(
        labels::DYNAMO_DISCOVERY_BACKEND.into(),
        discovery.to_string(),
    );
    let mut annotations = dgd.spec.annotations.clone();
    if let Some(alpha) = alpha {
        annotations.extend(alpha.annotations.clone());
    }
    annotations.extend(template);
    if let Some((_, name)) = labels::base_model(component.model_ref.as_ref()) {
        annotations.insert(labels::DYNAMO_BASE_MODEL.to_string(), name);
    }
    for key in [
        labels::TOPOLOGY_LABEL_KEY,
        labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME,
    ] {
        annotations.remove(key);
    }
    annotations
}

fn template_annotations(
    component: &DynamoComponentDeploymentSharedSpec,
) -> BTreeMap<String, String> {
    component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default()
}

fn template_labels(component: &DynamoComponentDeploymentSharedSpec) -> BTreeMap<String, String> {
    component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// Labels of a component's cliques (Grove puts them on the pods): the system labels over the
/// graph's `spec.labels`, the preserved v1alpha1 service labels and the pod template's.
#[allow(clippy::too_many_arguments)]
fn clique_labels(
    dgd: &DynamoGraphDeployment,
    dgd_name: &str,
    component: &DynamoComponentDeploymentSharedSpec,
    alpha: Option<&AlphaComponent>,
    dynamo_namespace: &str,
    annotations: &BTreeMap<String, String>,
    has_epp: bool,
    kube_discovery: bool,
) -> BTreeMap<String, String> {
    let worker = component.r#type.is_some_and(ComponentType::is_worker);
    let template = template_labels(component);
    // The v1alpha1 sub-component type: prefill and decode components carry their own (as
    // upstream's alpha view of the graph gives it); otherwise a preserved alpha value. A
    // component rendered as `worker` by the legacy rule has none here: its pod template carries
    // the label.
    let sub_type = component
        .r#type
        .and_then(ComponentType::sub_component_type)
        .map(str::to_string)
        .or_else(|| alpha.and_then(|a| a.sub_component_type.clone()))
        .filter(|s| !s.is_empty());
    let mut system = BTreeMap::new();
    system.insert(
        labels::SELECTOR.to_string(),
        names::selector(dgd_name, &component.name),
    );
    system.insert(
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
        dgd_name.to_string(),
    );
    system.insert(labels::DYNAMO_COMPONENT.to_string(), component.name.clone());
    if let Some(t) = component.r#type {
        system.insert(
            labels::DYNAMO_COMPONENT_TYPE.to_string(),
            t.as_str().to_string(),
        );
    }
    if has_epp && worker {
        system.insert(
            labels::DYNAMO_COMPONENT_CLASS.to_string(),
            labels::COMPONENT_CLASS_WORKER.to_string(),
        );
    }
    if let Some(sub) = &sub_type {
        system.insert(labels::DYNAMO_SUB_COMPONENT_TYPE.to_string(), sub.clone());
    }
    system.insert(
        labels::DYNAMO_NAMESPACE.to_string(),
        dynamo_namespace.to_string(),
    );

    let mut result = system.clone();
    if let Some((hash, _)) = labels::base_model(component.model_ref.as_ref()) {
        result.insert(labels::DYNAMO_BASE_MODEL_HASH.to_string(), hash);
    }
    if annotations.get(labels::ENABLE_METRICS).map(String::as_str) != Some("false") {
        result.insert(labels::METRICS_ENABLED.to_string(), "true".to_string());
    }
    result.extend(dgd.spec.labels.clone());
    if let Some(alpha) = alpha {
        result.extend(alpha.labels.clone());
    }
    result.extend(template.clone());
    // System labels win over user labels.
    result.extend(system);
    if let Some(hash) = template
        .get(labels::DYNAMO_WORKER_HASH)
        .filter(|h| !h.is_empty())
    {
        result.insert(labels::DYNAMO_WORKER_HASH.to_string(), hash.clone());
    }
    if kube_discovery {
        result.insert(
            labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
            "kubernetes".to_string(),
        );
        result.insert(
            labels::DYNAMO_DISCOVERY_ENABLED.to_string(),
            "true".to_string(),
        );
    }
    result
}

/// TRT-LLM multinode: the leader clique starts after the worker cliques. Returns whether a
/// dependency was set.
fn trtllm_leader_after_workers(
    cliques: &mut [PodCliqueTemplateSpec],
    roles: &[names::CliqueRole],
) -> bool {
    let workers: Vec<String> = roles
        .iter()
        .filter(|r| r.role == Role::Worker)
        .map(|r| r.name.clone())
        .collect();
    let Some(leader) = roles.iter().find(|r| r.role == Role::Leader) else {
        return false;
    };
    if workers.is_empty() {
        return false;
    }
    match cliques.iter_mut().find(|c| c.name == leader.name) {
        Some(clique) => {
            clique.spec.starts_after = workers;
            true
        }
        None => false,
    }
}

/// Replace the `topologyConstraint` of each provider override's target with the fragment's.
fn provider_overrides(
    pcs: &mut PodCliqueSet,
    dgd: &DynamoGraphDeployment,
) -> Result<(), RenderError> {
    if let Some(o) = &dgd.spec.provider_override {
        let tc = fragment(
            o,
            &["spec", "template", "topologyConstraint"],
            "spec.providerOverride",
        )?;
        pcs.spec.template.topology_constraint = tc;
    }
    for (i, c) in dgd.spec.components.iter().enumerate() {
        let lower = c.name.to_lowercase();
        if let Some(o) = &c.provider_override {
            let path = format!("spec.components[{i}].providerOverride");
            let tc = fragment(o, &["topologyConstraint"], &path)?;
            let uses_group = c.uses_pcsg();
            let target = o.target.as_deref().unwrap_or(if uses_group {
                "PodCliqueScalingGroupConfig"
            } else {
                "PodCliqueTemplateSpec"
            });
            let slot = match target {
                "PodCliqueTemplateSpec" => pcs
                    .spec
                    .template
                    .cliques
                    .iter_mut()
                    .find(|cl| cl.name == lower)
                    .map(|cl| &mut cl.topology_constraint),
                "PodCliqueScalingGroupConfig" => pcs
                    .spec
                    .template
                    .pod_clique_scaling_groups
                    .iter_mut()
                    .find(|g| g.name == lower)
                    .map(|g| &mut g.topology_constraint),
                other => {
                    return Err(RenderError::ProviderOverride {
                        path,
                        message: format!("unsupported target {other:?}"),
                    });
                }
            };
            let slot = slot.ok_or_else(|| RenderError::ProviderOverride {
                path: path.clone(),
                message: format!("the rendered PodCliqueSet has no {target} named {lower}"),
            })?;
            *slot = tc;
        }
        for (r, role) in c.roles.iter().enumerate() {
            let Some(o) = &role.provider_override else {
                continue;
            };
            let path = format!("spec.components[{i}].roles[{r}].providerOverride");
            let suffix = match role.name.as_str() {
                ROLE_LEADER => names::ROLE_SUFFIX_LEADER,
                ROLE_WORKER => names::ROLE_SUFFIX_WORKER,
                other => {
                    return Err(RenderError::ProviderOverride {
                        path,
                        message: format!("unsupported component role {other:?}"),
                    });
                }
            };
            let tc = fragment(o, &["topologyConstraint"], &path)?;
            let name = format!("{lower}-{suffix}");
            let clique = pcs
                .spec
                .template
                .cliques
                .iter_mut()
                .find(|cl| cl.name == name)
                .ok_or_else(|| RenderError::ProviderOverride {
                    path: path.clone(),
                    message: format!("the rendered PodCliqueSet has no clique named {name}"),
                })?;
            clique.topology_constraint = tc;
        }
    }
    Ok(())
}

fn fragment(
    o: &ProviderOverride,
    path: &[&str],
    at: &str,
) -> Result<Option<TopologyConstraint>, RenderError> {
    if !o.api_version.starts_with(api::grove::GROUP) {
        return Err(RenderError::ProviderOverride {
            path: at.to_string(),
            message: format!("apiVersion {:?} is not Grove's", o.api_version),
        });
    }
    let mut value = &o.value;
    for key in path {
        value = value
            .get(key)
            .ok_or_else(|| RenderError::ProviderOverride {
                path: at.to_string(),
                message: format!("value.{} is required", path.join(".")),
            })?;
    }
    if value.is_null() {
        return Ok(None);
    }
    serde_json::from_value::<TopologyConstraint>(value.clone())
        .map(Some)
        .map_err(|e| RenderError::ProviderOverride {
            path: at.to_string(),
            message: format!("value.{}: {e}", path.join(".")),
        })
}

/// Whether the graph carries Grove topology provider overrides (then its topology condition is
/// reported even without `topologyConstraint`).
pub fn has_topology_overrides(dgd: &DynamoGraphDeployment) -> bool {
    let writes = |o: &Option<ProviderOverride>, path: &[&str]| {
        o.as_ref().is_some_and(|o| {
            let mut v: &Value = &o.value;
            for key in path {
                match v.get(key) {
                    Some(next) => v = next,
                    None => return false,
                }
            }
            true
        })
    };
    writes(
        &dgd.spec.provider_override,
        &["spec", "template", "topologyConstraint"],
    ) || dgd.spec.components.iter().any(|c| {
        writes(&c.provider_override, &["topologyConstraint"])
            || c.roles
                .iter()
                .any(|r| writes(&r.provider_override, &["topologyConstraint"]))
    })
}
