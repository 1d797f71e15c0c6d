//! No field is accepted and ignored: every field of the v1beta1 DynamoGraphDeployment and
//! DynamoComponentDeployment specs, as the generated CRDs publish them, either has its upstream
//! effect (the tests named in [`FIELDS`] prove it) or is refused (by `api::validate`, reason
//! `InvalidSpec`, or by a CEL rule at admission).
//!
//! The walk descends into our own types down to every leaf. It stops at the embedded Kubernetes
//! types ([`EMBEDDED`]: pod templates, env vars, a ConfigMap key selector), which are handed on
//! as a whole. The test fails when the schema has a field the table lacks or the table a field
//! the schema lacks, when a named test does not exist (a `#[test]` function of that name in
//! that crate's `src/` or `tests/`) or never mentions the field, when a CEL rule is not in the
//! CRD, or when an embedded root is not the Kubernetes type it claims to be.

use api::validate::Rule;
use k8s_openapi::api::core::v1::{ConfigMapKeySelector, EnvVar, PodTemplateSpec};
use schemars::JsonSchema;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the operator does with a field. Proofs are `<package>::<test function>`.
#[derive(Clone, Copy, Debug)]
enum Effect {
    /// Rendered on every pathway.
    Rendered(&'static [&'static str]),
    /// Rendered on the Grove pathway; refused with [`Rule::GroveOnly`] on the component pathway
    /// (graphs recorded as `component`, every DynamoComponentDeployment), which
    /// [`GROVE_ONLY_PROOF`] proves.
    GroveOnly(&'static [&'static str]),
    /// Accepted only where it restates what is rendered anyway; other values are refused.
    Restates(Rule, &'static [&'static str]),
    /// Refused by `api::validate` on every pathway.
    Refused(Rule, &'static [&'static str]),
    /// Refused at admission by this CEL rule of the CRD.
    RefusedByCel(&'static str),
    /// A Kubernetes object handed on as a whole (to the pod, the capture Job, ...).
    PassedThrough(&'static [&'static str]),
    /// Upstream gives the field no effect either.
    NoEffectUpstream(&'static str),
}

use Effect::*;

/// The test that proves every [`Effect::GroveOnly`] refusal.
const GROVE_ONLY_PROOF: &str = "api::grove_only_fields_need_the_grove_pathway";

/// Embedded Kubernetes types: the walk stops here.
#[derive(Clone, Copy, Debug)]
enum K8s {
    PodTemplateSpec,
    /// A `PodTemplateSpec` published without schema (`x-kubernetes-preserve-unknown-fields`).
    SchemalessPodTemplateSpec,
    EnvVarList,
    ConfigMapKeySelector,
}

const EMBEDDED: &[(&str, K8s)] = &[
    ("spec.env", K8s::EnvVarList),
    ("spec.components[].podTemplate", K8s::PodTemplateSpec),
    (
        "spec.components[].roles[].podTemplate",
        K8s::SchemalessPodTemplateSpec,
    ),
    (
        "spec.components[].eppConfig.configMapRef",
        K8s::ConfigMapKeySelector,
    ),
    (
        "spec.components[].experimental.gpuMemoryService.extraClientPods[].podTemplate",
        K8s::SchemalessPodTemplateSpec,
    ),
    (
        "spec.components[].experimental.checkpoint.job.podTemplate",
        K8s::SchemalessPodTemplateSpec,
    ),
];

/// Fields the proving tests name by one of their values rather than by the field's name.
const NAMED_BY_VALUE: &[(&str, &str)] = &[("spec.restart.strategy.type", "parallel")];

const EXTRA_CLIENT_PODS_CEL: &str = "!has(self.extraClientPods) || size(self.extraClientPods) == 0";

/// Every field of the v1beta1 DynamoGraphDeployment spec.
const FIELDS: &[(&str, Effect)] = &[
    // --- graph level ---
    (
        "spec.providerOverride.apiVersion",
        GroveOnly(&[
            "grove-render::provider_override_replaces_the_topology_constraint",
            "root::selection_rule",
        ]),
    ),
    (
        "spec.providerOverride.target",
        GroveOnly(&["grove-render::provider_override_replaces_the_topology_constraint"]),
    ),
    (
        "spec.providerOverride.value",
        GroveOnly(&["grove-render::provider_override_replaces_the_topology_constraint"]),
    ),
    (
        "spec.annotations",
        Rendered(&[
            "component-program::graph_metadata_is_propagated_where_the_template_does_not_set_it",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
            "reconcilers::a_removed_graph_annotation_leaves_the_service",
        ]),
    ),
    (
        "spec.labels",
        Rendered(&[
            "component-program::graph_metadata_is_propagated_where_the_template_does_not_set_it",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
        ]),
    ),
    (
        "spec.priorityClassName",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.env",
        PassedThrough(&[
            "component-program::merge_env_keeps_the_graph_order_and_lets_components_win",
            "grove-render::template_defaults_follow_upstream",
        ]),
    ),
    (
        "spec.backendFramework",
        Rendered(&[
            "reconcilers::identity_backend_from_the_graph_or_the_command",
            "grove-render::unsupported_and_unrenderable_inputs_are_errors",
        ]),
    ),
    (
        "spec.restart.id",
        Rendered(&[
            "reconcilers::next_status_table",
            "grove-program::a_restart_is_stamped_and_completes_when_grove_rolled_the_component",
        ]),
    ),
    (
        "spec.restart.strategy.type",
        Rendered(&["reconcilers::next_status_table"]),
    ),
    (
        "spec.restart.strategy.order[]",
        Rendered(&[
            "reconcilers::next_status_table",
            "api::restart_order_must_list_every_component_once",
        ]),
    ),
    (
        "spec.topologyConstraint.clusterTopologyName",
        GroveOnly(&[
            "grove-render::topology_constraint_upgrade",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
        ]),
    ),
    (
        "spec.topologyConstraint.packDomain",
        GroveOnly(&["grove-render::topology_constraint_upgrade"]),
    ),
    // The pods' topology labels are copied from the nodes by upstream's topology label
    // controller, which this operator does not run (yet): the rendered wiring reads labels
    // nothing sets.
    (
        "spec.experimental.kvTransferPolicy.clusterTopologyName",
        GroveOnly(&["grove-render::image_pull_secrets_and_kv_transfer_wiring"]),
    ),
    (
        "spec.experimental.kvTransferPolicy.labelKey",
        GroveOnly(&["pod-render::kv_transfer_wiring_follows_the_policy"]),
    ),
    (
        "spec.experimental.kvTransferPolicy.domain",
        GroveOnly(&[
            "grove-render::image_pull_secrets_and_kv_transfer_wiring",
            "pod-render::kv_transfer_wiring_follows_the_policy",
        ]),
    ),
    (
        "spec.experimental.kvTransferPolicy.enforcement",
        GroveOnly(&["pod-render::kv_transfer_wiring_follows_the_policy"]),
    ),
    (
        "spec.experimental.kvTransferPolicy.preferredWeight",
        GroveOnly(&["pod-render::kv_transfer_wiring_follows_the_policy"]),
    ),
    (
        "spec.experimental.componentGroups[].name",
        GroveOnly(&[
            "grove-render::component_groups_render_one_scaling_group",
            "grove-render::the_child_of_a_component_follows_its_group",
            "api::component_group_rules_follow_upstream",
        ]),
    ),
    (
        "spec.experimental.componentGroups[].replicas",
        GroveOnly(&[
            "grove-render::component_groups_render_one_scaling_group",
            "grove-program::a_component_group_scales_and_reports_through_its_scaling_group",
        ]),
    ),
    (
        "spec.experimental.componentGroups[].scalingAdapter",
        Refused(
            Rule::Unsupported,
            &["api::unsupported_fields_are_refused_on_every_pathway"],
        ),
    ),
    (
        "spec.experimental.componentGroups[].components[].name",
        GroveOnly(&[
            "grove-render::component_groups_render_one_scaling_group",
            "api::component_group_rules_follow_upstream",
        ]),
    ),
    // --- components ---
    (
        "spec.components[].providerOverride.apiVersion",
        GroveOnly(&["grove-render::provider_override_replaces_the_topology_constraint"]),
    ),
    (
        "spec.components[].providerOverride.target",
        GroveOnly(&["grove-render::provider_override_replaces_the_topology_constraint"]),
    ),
    (
        "spec.components[].providerOverride.value",
        GroveOnly(&["grove-render::provider_override_replaces_the_topology_constraint"]),
    ),
    (
        "spec.components[].name",
        Rendered(&[
            "component-program::creates_one_dcd_per_component_on_the_first_run",
            "grove-render::roles_follow_upstream",
        ]),
    ),
    (
        "spec.components[].type",
        Rendered(&[
            "dcd-controller::services_per_component_type",
            "grove-render::worker_identity_labels_and_forward_pass_port",
        ]),
    ),
    (
        "spec.components[].runtimeVersionOverride",
        Rendered(&[
            "dcd-controller::the_runtime_version_override_or_the_image_tag_gates_the_defaults",
            "api::runtime_version_override_is_a_semantic_version",
        ]),
    ),
    (
        "spec.components[].globalDynamoNamespace",
        Rendered(&[
            "dcd-controller::dynamo_namespace_from_label_global_or_standalone",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
        ]),
    ),
    (
        "spec.components[].podTemplate",
        PassedThrough(&[
            "dcd-controller::user_values_in_the_pod_template_win_over_defaults",
            "grove-render::services_follow_the_rendered_cliques",
        ]),
    ),
    (
        "spec.components[].replicas",
        Rendered(&[
            "dcd-controller::replicas_are_applied_whenever_the_dcd_sets_them",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
        ]),
    ),
    (
        "spec.components[].minAvailable",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.components[].multinode.nodeCount",
        Rendered(&[
            "dcd-controller::multinode_renders_a_leader_worker_set",
            "grove-render::clique_and_scaling_group_order_is_preserved",
        ]),
    ),
    (
        "spec.components[].roles[].name",
        Restates(
            Rule::Roles,
            &[
                "api::roles_restate_the_multinode_layout",
                "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
            ],
        ),
    ),
    (
        "spec.components[].roles[].replicas",
        Restates(Rule::Roles, &["api::roles_restate_the_multinode_layout"]),
    ),
    (
        "spec.components[].roles[].providerOverride.apiVersion",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.components[].roles[].providerOverride.target",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.components[].roles[].providerOverride.value",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.components[].roles[].podTemplate",
        Refused(
            Rule::Unsupported,
            &["api::unsupported_fields_are_refused_on_every_pathway"],
        ),
    ),
    (
        "spec.components[].sharedMemorySize",
        Rendered(&["dcd-controller::shared_memory_default_size_and_zero"]),
    ),
    (
        "spec.components[].modelRef.name",
        Rendered(&[
            "dcd-controller::base_model_label_and_annotation_on_pods_workload_and_service",
            "grove-render::base_model_label_and_annotation",
            "reconcilers::a_model_ref_change_moves_ownership",
        ]),
    ),
    (
        "spec.components[].modelRef.revision",
        NoEffectUpstream(
            "upstream only carries it through conversion; the model Service is keyed by the name",
        ),
    ),
    (
        "spec.components[].scalingAdapter",
        Rendered(&[
            "reconcilers::adapters_follow_the_opt_in_and_the_component_list",
            "dcd-controller::enabling_a_scaling_adapter_holds_the_running_count",
        ]),
    ),
    (
        "spec.components[].eppConfig.configMapRef",
        Rendered(&[
            "pod-render::epp_pods_follow_the_native_and_legacy_contracts",
            "reconcilers::user_config_map_ref_and_no_epp_write_no_config_map",
        ]),
    ),
    (
        "spec.components[].eppConfig.config",
        Rendered(&[
            "pod-render::epp_pods_follow_the_native_and_legacy_contracts",
            "reconcilers::creates_config_map_and_pool_then_writes_nothing",
        ]),
    ),
    (
        "spec.components[].frontendSidecar",
        Rendered(&["pod-render::frontend_sidecar_gets_the_frontend_defaults"]),
    ),
    (
        "spec.components[].dynamoSidecar",
        Rendered(&[
            "pod-render::the_runtime_runs_in_the_sidecar_and_main_is_the_engine",
            "api::dynamo_sidecar_rules",
        ]),
    ),
    (
        "spec.components[].compilationCache.pvcName",
        Rendered(&["pod-render::compilation_cache_per_backend"]),
    ),
    (
        "spec.components[].compilationCache.mountPath",
        Rendered(&["pod-render::compilation_cache_per_backend"]),
    ),
    (
        "spec.components[].topologyConstraint.packDomain",
        GroveOnly(&[
            "grove-render::topology_constraint_upgrade",
            "grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set",
        ]),
    ),
    // IntraPod is rendered; InterPod is refused (Rule::GpuMemoryService).
    (
        "spec.components[].experimental.gpuMemoryService.mode",
        Rendered(&[
            "pod-render::main_gets_the_claim_and_the_server_sidecar",
            "api::gpu_memory_service_rules",
        ]),
    ),
    (
        "spec.components[].experimental.gpuMemoryService.deviceClassName",
        Rendered(&["reconcilers::resolved_templates"]),
    ),
    (
        "spec.components[].experimental.gpuMemoryService.extraClientContainers[]",
        Rendered(&["pod-render::extra_clients_are_wired"]),
    ),
    (
        "spec.components[].experimental.gpuMemoryService.extraClientPods[].name",
        RefusedByCel(EXTRA_CLIENT_PODS_CEL),
    ),
    (
        "spec.components[].experimental.gpuMemoryService.extraClientPods[].podTemplate",
        RefusedByCel(EXTRA_CLIENT_PODS_CEL),
    ),
    // IntraPod on vLLM is rendered; the rest is refused (Rule::Failover).
    (
        "spec.components[].experimental.failover.mode",
        Rendered(&["pod-render::intra_pod_failover_only", "api::failover_rules"]),
    ),
    // The schema allows only 1, the number of standby engines rendered.
    (
        "spec.components[].experimental.failover.numShadows",
        Rendered(&[
            "pod-render::intra_pod_failover_only",
            "reconcilers::dra_is_needed_only_for_gms_and_inter_pod_failover",
        ]),
    ),
    (
        "spec.components[].experimental.grove.forceScalingGroup",
        GroveOnly(&["grove-render::graph_metadata_and_grove_options_reach_the_pod_clique_set"]),
    ),
    (
        "spec.components[].experimental.checkpoint.enabled",
        Rendered(&[
            "reconcilers::automatic_checkpoint_created_once_then_reused",
            "dcd-controller::the_deployment_restores_from_the_checkpoint_the_dcd_names",
            "grove-program::a_waiting_component_starts_restored_once_its_checkpoint_is_ready",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.mode",
        Rendered(&["reconcilers::references_and_manual_checkpoints_are_looked_up"]),
    ),
    (
        "spec.components[].experimental.checkpoint.startupPolicy",
        Rendered(&[
            "reconcilers::automatic_checkpoint_created_once_then_reused",
            "component-program::the_dcd_names_its_checkpoint_and_waits_for_it",
            "scaling-controller::a_component_waiting_for_its_checkpoint_is_held_by_the_graph",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.deletionPolicy",
        Rendered(&["reconcilers::retained_checkpoints_have_no_owner"]),
    ),
    (
        "spec.components[].experimental.checkpoint.checkpointRef",
        Rendered(&[
            "reconcilers::references_and_manual_checkpoints_are_looked_up",
            "dcd-controller::the_deployment_restores_from_the_checkpoint_the_dcd_names",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.model",
        Rendered(&[
            "reconcilers::references_and_manual_checkpoints_are_looked_up",
            "api::every_input_field_changes_the_hash",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.backendFramework",
        Rendered(&[
            "reconcilers::references_and_manual_checkpoints_are_looked_up",
            "api::every_input_field_changes_the_hash",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.dynamoVersion",
        Rendered(&["api::every_input_field_changes_the_hash"]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.tensorParallelSize",
        Rendered(&["api::every_input_field_changes_the_hash"]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.pipelineParallelSize",
        Rendered(&["api::every_input_field_changes_the_hash"]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.dtype",
        Rendered(&["api::every_input_field_changes_the_hash"]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.maxModelLen",
        Rendered(&["api::every_input_field_changes_the_hash"]),
    ),
    (
        "spec.components[].experimental.checkpoint.identity.extraParameters",
        Rendered(&[
            "api::every_input_field_changes_the_hash",
            "reconcilers::automatic_checkpoint_created_once_then_reused",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.targetContainerName",
        Rendered(&[
            "reconcilers::the_target_container_reaches_the_capture_job",
            "pod-render::restore_shapes_only_ready_wait_for_checkpoint_pods",
        ]),
    ),
    (
        "spec.components[].experimental.checkpoint.job.gmsClientContainers[]",
        Refused(
            Rule::Unsupported,
            &["api::unsupported_fields_are_refused_on_every_pathway"],
        ),
    ),
    (
        "spec.components[].experimental.checkpoint.job.podTemplate",
        PassedThrough(&["reconcilers::automatic_checkpoint_created_once_then_reused"]),
    ),
];

/// Fields of the DynamoComponentDeployment spec beyond the shared component spec (which it
/// flattens; those rows are `FIELDS`' `spec.components[].*`, on the component pathway).
const DCD_FIELDS: &[(&str, Effect)] = &[(
    "spec.backendFramework",
    Rendered(&["dcd-controller::the_dcds_backend_framework_selects_the_backend"]),
)];

// --- the walk ------------------------------------------------------------------------------

fn spec_schema(kind: &str) -> Value {
    let crd = api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1beta1")
        .unwrap();
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref();
    serde_json::to_value(schema.unwrap()).unwrap()["properties"]["spec"].clone()
}

/// Every leaf path under `schema` (at `path`), stopping at [`EMBEDDED`] roots (relative to
/// `prefix`, which maps the DCD's `spec.` onto `spec.components[].`). Returns (path, node).
fn leaves<'a>(
    path: &str,
    schema: &'a Value,
    embedded: &dyn Fn(&str) -> bool,
) -> Vec<(String, &'a Value)> {
    if embedded(path) {
        return vec![(path.to_string(), schema)];
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        return props
            .iter()
            .flat_map(|(name, child)| leaves(&format!("{path}.{name}"), child, embedded))
            .collect();
    }
    if let Some(items) = schema.get("items") {
        return leaves(&format!("{path}[]"), items, embedded);
    }
    // Scalars, maps (additionalProperties), free-form objects, markers (`{}`).
    vec![(path.to_string(), schema)]
}

fn dgd_leaves(schema: &Value) -> BTreeMap<String, Value> {
    let embedded = |p: &str| EMBEDDED.iter().any(|(e, _)| *e == p);
    leaves("spec", schema, &embedded)
        .into_iter()
        .map(|(p, v)| (p, v.clone()))
        .collect()
}

/// A DCD path as the DGD component path it flattens (`spec.x` → `spec.components[].x`).
fn as_component_path(dcd_path: &str) -> String {
    format!(
        "spec.components[].{}",
        dcd_path.strip_prefix("spec.").unwrap()
    )
}

// --- the checks ----------------------------------------------------------------------------

#[test]
fn every_dgd_spec_field_is_rendered_or_refused() {
    let schema = spec_schema("DynamoGraphDeployment");
    let walked = dgd_leaves(&schema);
    let table: BTreeMap<&str, Effect> = FIELDS.iter().copied().collect();
    assert_eq!(table.len(), FIELDS.len(), "a path is listed twice");
    let in_schema: BTreeSet<&str> = walked.keys().map(String::as_str).collect();
    let in_table: BTreeSet<&str> = table.keys().copied().collect();
    let missing: Vec<_> = in_schema.difference(&in_table).collect();
    let stale: Vec<_> = in_table.difference(&in_schema).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "fields the table lacks (give each its effect, or refuse it in api::validate): \
         {missing:#?}\nfields the schema no longer has: {stale:#?}"
    );

    for (path, k8s) in EMBEDDED {
        check_embedded(path, *k8s, &walked[*path]);
    }
    let proofs = Proofs::load();
    let crd = serde_json::to_string(&api::crds::dgd_crd_without_conversion()).unwrap();
    let errors: Vec<String> = FIELDS
        .iter()
        .flat_map(|(path, effect)| check_effect(path, effect, &proofs, &crd))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn every_dcd_spec_field_is_rendered_or_refused() {
    let dgd = dgd_leaves(&spec_schema("DynamoGraphDeployment"));
    let schema = spec_schema("DynamoComponentDeployment");
    let embedded = |p: &str| {
        p.starts_with("spec.") && EMBEDDED.iter().any(|(e, _)| *e == as_component_path(p))
    };
    let walked: BTreeSet<String> = leaves("spec", &schema, &embedded)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let own: BTreeSet<String> = DCD_FIELDS.iter().map(|(p, _)| p.to_string()).collect();
    let shared: BTreeSet<String> = walked
        .iter()
        .filter(|p| !own.contains(*p))
        .map(|p| as_component_path(p))
        .collect();
    let components: BTreeSet<String> = dgd
        .keys()
        .filter(|p| p.starts_with("spec.components[]."))
        .cloned()
        .collect();
    assert_eq!(
        shared, components,
        "the DCD spec is the shared component spec plus DCD_FIELDS"
    );
    assert!(own.is_subset(&walked), "DCD_FIELDS the schema lacks");
    let proofs = Proofs::load();
    let crd = serde_json::to_string(&api::crds()).unwrap();
    let errors: Vec<String> = DCD_FIELDS
        .iter()
        .flat_map(|(path, effect)| check_effect(path, effect, &proofs, &crd))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// What is wrong with the row of `path` (nothing when it holds).
fn check_effect(path: &str, effect: &Effect, proofs: &Proofs, crd: &str) -> Vec<String> {
    let segments: Vec<&str> = path.rsplit('.').map(|s| s.trim_end_matches("[]")).collect();
    let mut errors = Vec::new();
    let mut named = |tests: &[&str], fields: &[&str]| {
        if tests.is_empty() {
            errors.push(format!("{path}: no proof"));
        }
        match tests
            .iter()
            .map(|t| proofs.mentions(t, fields))
            .collect::<Result<Vec<bool>, String>>()
        {
            Err(e) => errors.push(format!("{path}: {e}")),
            Ok(m) if !m.contains(&true) => {
                errors.push(format!("{path}: none of {tests:?} mentions {fields:?}"))
            }
            Ok(_) => {}
        }
    };
    let field = NAMED_BY_VALUE
        .iter()
        .find(|(p, _)| *p == path)
        .map_or(segments[0], |(_, value)| value);
    match effect {
        Rendered(tests) | PassedThrough(tests) => named(tests, &[field]),
        GroveOnly(tests) => {
            named(tests, &[field]);
            // The refusal is of the field or of the object holding it.
            named(&[GROVE_ONLY_PROOF], &segments[..2]);
        }
        Restates(rule, tests) | Refused(rule, tests) => {
            assert!(!rule.code().is_empty());
            named(tests, &[field]);
        }
        RefusedByCel(rule) => {
            if !crd.contains(&serde_json::to_string(rule).unwrap()) {
                errors.push(format!("{path}: CEL rule {rule} is not in the CRD"));
            }
        }
        NoEffectUpstream(why) => {
            if why.len() < 20 {
                errors.push(format!("{path}: say why"));
            }
        }
    }
    errors
}

/// The Kubernetes type an embedded root claims to be: the same properties (a schemaless pod
/// template: preserved unknown fields).
fn check_embedded(path: &str, k8s: K8s, node: &Value) {
    fn properties<T: JsonSchema>() -> BTreeSet<String> {
        let mut generator = schemars::generate::SchemaSettings::openapi3()
            .with(|s| s.inline_subschemas = true)
            .into_generator();
        let schema = T::json_schema(&mut generator).to_value();
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }
    let keys = |v: &Value| -> BTreeSet<String> {
        v.get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    match k8s {
        K8s::PodTemplateSpec => assert_eq!(keys(node), properties::<PodTemplateSpec>(), "{path}"),
        K8s::SchemalessPodTemplateSpec => {
            assert_eq!(
                node["x-kubernetes-preserve-unknown-fields"],
                Value::Bool(true),
                "{path}"
            );
            assert!(keys(node).is_empty(), "{path}");
        }
        K8s::EnvVarList => {
            assert_eq!(node["type"], "array", "{path}");
            assert_eq!(keys(&node["items"]), properties::<EnvVar>(), "{path}");
        }
        K8s::ConfigMapKeySelector => {
            assert_eq!(keys(node), properties::<ConfigMapKeySelector>(), "{path}")
        }
    }
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The `#[test]` functions of the workspace, by package, with their bodies.
struct Proofs {
    tests: BTreeMap<(String, String), Vec<String>>,
}

impl Proofs {
    fn load() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut tests = BTreeMap::new();
        for manifest in manifests(&root.join("crates")) {
            let text = std::fs::read_to_string(&manifest).unwrap();
            let package = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap()
                .to_string();
            let dir = manifest.parent().unwrap();
            for sub in ["src", "tests"] {
                for file in rust_files(&dir.join(sub)) {
                    let text = std::fs::read_to_string(&file).unwrap();
                    for (name, body) in test_functions(&text) {
                        tests
                            .entry((package.clone(), name))
                            .or_insert_with(Vec::new)
                            .push(body);
                    }
                }
            }
        }
        Proofs { tests }
    }

    /// Whether the test `proof` (`<package>::<test>`) mentions one of `fields` (as written or
    /// in snake case); an error when there is no such test.
    fn mentions(&self, proof: &str, fields: &[&str]) -> Result<bool, String> {
        let (package, name) = proof
            .split_once("::")
            .ok_or_else(|| format!("proof {proof} is not <package>::<test>"))?;
        let bodies = self
            .tests
            .get(&(package.to_string(), name.to_string()))
            .ok_or_else(|| format!("no #[test] fn {name} in package {package}"))?;
        Ok(bodies.iter().any(|b| {
            fields
                .iter()
                .any(|f| b.contains(f) || b.contains(&snake(f)))
        }))
    }
}

/// `Cargo.toml` files of the workspace's packages (nested packages included).
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            let manifest = path.join("Cargo.toml");
            if manifest.exists() {
                out.push(manifest);
            }
            out.extend(manifests(&path));
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `(name, body)` of every function marked `#[test]` or `#[tokio::test]` in rustfmt-formatted
/// `text`: the body runs to the closing brace at the indentation of its `fn`.
fn test_functions(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed
            .strip_prefix("async fn ")
            .or_else(|| trimmed.strip_prefix("fn "))
        else {
            continue;
        };
        let attributes = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("#[") || l.trim_start().starts_with("///"));
        let is_test = attributes
            .map(|l| l.trim_start())
            .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"));
        if !is_test {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let indent = &line[..line.len() - trimmed.len()];
        let close = format!("{indent}}}");
        let body: Vec<&str> = lines[i..]
            .iter()
            .take_while(|l| **l != close)
            .copied()
            .collect();
        out.push((name, body.join("\n")));
    }
    out
}
