//! Compatibility rules: how an existing PodCliqueSet shapes the desired one, so an upgrade or a
//! spec change never breaks what Grove and users already rely on. Each rule is a pure function
//! of the desired object (or the graph) and the existing object; without an existing object
//! every rule is a no-op.
//!
//! | rule | triggers when | effect |
//! | --- | --- | --- |
//! | [`legacy_worker_type`] | a prefill/decode component's existing clique is labelled `nvidia.com/dynamo-component-type: worker` (sub-type empty or the same) | the component keeps rendering as type `worker` with the sub-component-type label, so selectors and Services keep matching |
//! | [`restart_annotations`] | an existing clique carries `nvidia.com/restartAt` | the value is kept where no restart asks for a new one (a restart is never undone) |
//! | [`upgrade_topology_constraints`] | an existing constraint has the deprecated `packDomain` and no `topologyName` while the desired one names a topology | this pass keeps the old packing (`packDomain`/`pack`) next to the new `topologyName`, as Grove requires before `packDomain` can migrate to `pack.required` |
//! | [`preserve_order`] | the existing object lists cliques, scaling groups or claim templates | desired entries are ordered like the existing ones (new ones last), so a reorder never rolls pods |
//! | [`preserve_replicas`] | the existing object has a clique (outside scaling groups) or scaling group of the same name | its replica count is kept: after creation, replicas change only through the scale subresource (scaling adapters, planners, `kubectl scale`); components waiting for a checkpoint are exempt (they stay at 0) |
//! | [`uses_worker_hash_labels`] | every worker component's existing clique carries `nvidia.com/dynamo-worker-hash` | worker cliques keep the hash label (an existing unlabelled object stays unlabelled until the worker spec changes) |

use std::collections::{BTreeMap, BTreeSet};

use api::grove::{PodCliqueSet, PodCliqueTemplateSpec, TopologyConstraint};
use api::labels;
use api::{ComponentType, DynamoComponentDeploymentSharedSpec};

/// The existing clique rendered for `component` (by its `nvidia.com/dynamo-component` label).
pub fn clique_of<'a>(pcs: &'a PodCliqueSet, component: &str) -> Option<&'a PodCliqueTemplateSpec> {
    pcs.spec
        .template
        .cliques
        .iter()
        .find(|c| c.labels.get(labels::DYNAMO_COMPONENT).map(String::as_str) == Some(component))
}

/// Whether `clique_labels` are an alpha-era worker selector for a component of `type_`:
/// component type `worker`, and the sub-component type empty or `type_`.
pub fn is_legacy_worker_selector(
    clique_labels: &BTreeMap<String, String>,
    type_: ComponentType,
) -> bool {
    let sub = type_.as_str();
    matches!(type_, ComponentType::Prefill | ComponentType::Decode)
        && clique_labels
            .get(labels::DYNAMO_COMPONENT_TYPE)
            .map(String::as_str)
            == Some("worker")
        && clique_labels
            .get(labels::DYNAMO_SUB_COMPONENT_TYPE)
            .is_none_or(|s| s.is_empty() || s == sub)
}

/// Legacy worker selectors: when the existing clique of a prefill/decode `component` selects as
/// a `worker`, the component renders as type `worker` with the sub-component-type label set to
/// its real type (unless its pod template sets one). Returns whether the rule applied.
pub fn legacy_worker_type(
    component: &mut DynamoComponentDeploymentSharedSpec,
    existing: Option<&PodCliqueSet>,
) -> bool {
    let Some(type_) = component.r#type else {
        return false;
    };
    let legacy = existing
        .and_then(|pcs| clique_of(pcs, &component.name))
        .is_some_and(|c| is_legacy_worker_selector(&c.labels, type_));
    if !legacy {
        return false;
    }
    component.r#type = Some(ComponentType::Worker);
    let template = component.pod_template.get_or_insert_with(Default::default);
    let meta = template.metadata.get_or_insert_with(Default::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .entry(labels::DYNAMO_SUB_COMPONENT_TYPE.to_string())
        .or_insert_with(|| type_.as_str().to_string());
    true
}

/// The `nvidia.com/restartAt` values of the existing cliques, by component name.
pub fn restart_annotations(existing: Option<&PodCliqueSet>) -> BTreeMap<String, String> {
    let Some(pcs) = existing else {
        return BTreeMap::new();
    };
    pcs.spec
        .template
        .cliques
        .iter()
        .filter_map(|c| {
            let at = c.annotations.get(labels::RESTART_AT)?;
            let component = c.labels.get(labels::DYNAMO_COMPONENT)?;
            Some((component.clone(), at.clone()))
        })
        .collect()
}

/// Whether the existing object renders worker cliques with the worker hash label: every worker
/// component has an existing clique carrying a non-empty `nvidia.com/dynamo-worker-hash`.
pub fn uses_worker_hash_labels(
    components: &[DynamoComponentDeploymentSharedSpec],
    existing: &PodCliqueSet,
) -> bool {
    components
        .iter()
        .filter(|c| c.r#type.is_some_and(ComponentType::is_worker))
        .all(|c| {
            clique_of(existing, &c.name)
                .and_then(|clique| clique.labels.get(labels::DYNAMO_WORKER_HASH))
                .is_some_and(|h| !h.is_empty())
        })
}

/// The first half of Grove's legacy topology migration (see the module docs), on the template,
/// every clique and every scaling group of `desired`, matched by name.
pub fn upgrade_topology_constraints(desired: &mut PodCliqueSet, existing: Option<&PodCliqueSet>) {
    let Some(existing) = existing else {
        return;
    };
    let template = &mut desired.spec.template;
    repair(
        template.topology_constraint.as_mut(),
        existing.spec.template.topology_constraint.as_ref(),
    );
    let cliques: BTreeMap<&str, Option<&TopologyConstraint>> = existing
        .spec
        .template
        .cliques
        .iter()
        .map(|c| (c.name.as_str(), c.topology_constraint.as_ref()))
        .collect();
    for clique in &mut template.cliques {
        let old = cliques.get(clique.name.as_str()).copied().flatten();
        repair(clique.topology_constraint.as_mut(), old);
    }
    let groups: BTreeMap<&str, Option<&TopologyConstraint>> = existing
        .spec
        .template
        .pod_clique_scaling_groups
        .iter()
        .map(|g| (g.name.as_str(), g.topology_constraint.as_ref()))
        .collect();
    for group in &mut template.pod_clique_scaling_groups {
        let old = groups.get(group.name.as_str()).copied().flatten();
        repair(group.topology_constraint.as_mut(), old);
    }
}

fn repair(desired: Option<&mut TopologyConstraint>, existing: Option<&TopologyConstraint>) {
    let (Some(desired), Some(existing)) = (desired, existing) else {
        return;
    };
    let names_topology = desired
        .topology_name
        .as_deref()
        .is_some_and(|n| !n.is_empty());
    let existing_named = existing
        .topology_name
        .as_deref()
        .is_some_and(|n| !n.is_empty());
    let legacy = existing
        .pack_domain
        .as_deref()
        .is_some_and(|d| !d.is_empty());
    if !names_topology || existing_named || !legacy {
        return;
    }
    desired.pack_domain = existing.pack_domain.clone();
    desired.pack = existing.pack.clone();
}

/// Order the cliques, scaling groups and claim templates of `desired` like `existing`'s (by
/// name; entries new to `desired` keep their relative order, after the existing ones).
pub fn preserve_order(desired: &mut PodCliqueSet, existing: Option<&PodCliqueSet>) {
    let Some(existing) = existing else {
        return;
    };
    let old = &existing.spec.template;
    let new = &mut desired.spec.template;
    order_like(&old.cliques, &mut new.cliques, |c| c.name.as_str());
    order_like(
        &old.pod_clique_scaling_groups,
        &mut new.pod_clique_scaling_groups,
        |g| g.name.as_str(),
    );
    order_like(
        &old.resource_claim_templates,
        &mut new.resource_claim_templates,
        |t| t.name.as_str(),
    );
}

fn order_like<T>(existing: &[T], desired: &mut Vec<T>, name: impl Fn(&T) -> &str) {
    if existing.is_empty() || desired.len() < 2 {
        return;
    }
    let rank: BTreeMap<&str, usize> = existing
        .iter()
        .enumerate()
        .map(|(i, item)| (name(item), i))
        .collect();
    let mut keyed: Vec<(usize, usize, T)> = std::mem::take(desired)
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let r = rank.get(name(&item)).copied().unwrap_or(usize::MAX);
            (r, i, item)
        })
        .collect();
    keyed.sort_by_key(|(r, i, _)| (*r, *i));
    *desired = keyed.into_iter().map(|(_, _, item)| item).collect();
}

/// Keep the existing replica counts of standalone cliques and scaling groups (see the module
/// docs); components in `waiting` (lowercased names of components waiting for a checkpoint) are
/// exempt.
pub fn preserve_replicas(
    desired: &mut PodCliqueSet,
    existing: Option<&PodCliqueSet>,
    waiting: &BTreeSet<String>,
) {
    let Some(existing) = existing else {
        return;
    };
    let old = &existing.spec.template;
    let in_groups: BTreeSet<String> = desired
        .spec
        .template
        .pod_clique_scaling_groups
        .iter()
        .flat_map(|g| g.clique_names.iter().cloned())
        .collect();
    let clique_replicas: BTreeMap<&str, i32> = old
        .cliques
        .iter()
        .map(|c| (c.name.as_str(), c.spec.replicas))
        .collect();
    for clique in &mut desired.spec.template.cliques {
        if in_groups.contains(&clique.name) {
            continue;
        }
        let exempt = clique
            .labels
            .get(labels::DYNAMO_COMPONENT)
            .is_some_and(|c| waiting.contains(&c.to_lowercase()));
        if exempt {
            continue;
        }
        if let Some(replicas) = clique_replicas.get(clique.name.as_str()) {
            clique.spec.replicas = *replicas;
        }
    }
    let group_replicas: BTreeMap<&str, Option<i32>> = old
        .pod_clique_scaling_groups
        .iter()
        .map(|g| (g.name.as_str(), g.replicas))
        .collect();
    for group in &mut desired.spec.template.pod_clique_scaling_groups {
        if waiting.contains(&group.name.to_lowercase()) {
            continue;
        }
        if let Some(replicas) = group_replicas.get(group.name.as_str()) {
            group.replicas = *replicas;
        }
    }
}
