//! Fields only the Grove pathway renders, refused on the component pathway (rather than
//! accepted and ignored).

use super::collector::{Collector, Seg};
use super::{GROVE_ONLY, Provider, Rule, ValidationContext};
use crate::v1beta1::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeploymentSpec};

/// Graph fields only the Grove pathway renders, refused on the component pathway (rather than
/// accepted and ignored): the PodCliqueSet override, priority class and topology constraint,
/// and the KV transfer policy (its pod wiring is rendered into cliques only).
pub(super) fn grove_only_graph(
    spec: &DynamoGraphDeploymentSpec,
    ctx: &ValidationContext,
    v: &mut Collector,
) {
    if ctx.provider != Some(Provider::Component) {
        return;
    }
    let kv_transfer = spec
        .experimental
        .as_ref()
        .is_some_and(|e| e.kv_transfer_policy.is_some());
    let fields: [(&[Seg], bool); 5] = [
        (
            &[Seg::Key("providerOverride")],
            spec.provider_override.is_some(),
        ),
        (
            &[Seg::Key("priorityClassName")],
            spec.priority_class_name.is_some(),
        ),
        (
            &[Seg::Key("topologyConstraint")],
            spec.topology_constraint.is_some(),
        ),
        (
            &[Seg::Key("experimental"), Seg::Key("kvTransferPolicy")],
            kv_transfer,
        ),
        (
            &[Seg::Key("experimental"), Seg::Key("componentGroups")],
            !spec.component_groups().is_empty(),
        ),
    ];
    for (path, set) in fields {
        if set {
            v.at(path).push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
}

/// Component fields only the Grove pathway renders, refused on the component pathway (graphs
/// recorded as `component`, and every DynamoComponentDeployment): Grove provider overrides,
/// `minAvailable`, the topology constraint and a forced scaling group.
pub(super) fn grove_only_component(
    c: &DynamoComponentDeploymentSharedSpec,
    ctx: &ValidationContext,
    v: &mut Collector,
) {
    if ctx.provider != Some(Provider::Component) {
        return;
    }
    let fields: [(&[Seg], bool); 4] = [
        (
            &[Seg::Key("providerOverride")],
            c.provider_override.is_some(),
        ),
        (&[Seg::Key("minAvailable")], c.min_available.is_some()),
        (
            &[Seg::Key("topologyConstraint")],
            c.topology_constraint.is_some(),
        ),
        (
            &[
                Seg::Key("experimental"),
                Seg::Key("grove"),
                Seg::Key("forceScalingGroup"),
            ],
            c.is_grove_scaling_group_forced(),
        ),
    ];
    for (path, set) in fields {
        if set {
            v.at(path).push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
    for (k, role) in c.roles.iter().enumerate() {
        if role.provider_override.is_some() {
            v.at(&[
                Seg::Key("roles"),
                Seg::Index(k),
                Seg::Key("providerOverride"),
            ])
            .push(Rule::GroveOnly, GROVE_ONLY);
        }
    }
}
