//! Component groups (`spec.experimental.componentGroups`).

use std::collections::BTreeMap;

use super::collector::{Collector, Seg};
use super::{Rule, UNSUPPORTED};
use crate::v1beta1::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeploymentSpec};

/// `spec.experimental.componentGroups` (upstream's admission rules): group names unique
/// (case-insensitively) and distinct from component names; members existing components, each
/// in one group, single-node, not scaled to zero, without their own topology constraint or
/// scaling adapter, and without a provider override when they would render a scaling group of
/// their own. A group's `scalingAdapter` is refused: no adapter is created for a group.
pub(super) fn component_groups(spec: &DynamoGraphDeploymentSpec, v: &mut Collector) {
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut member_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (g, group) in spec.component_groups().iter().enumerate() {
        let at = |rest: &[Seg]| {
            [
                &[
                    Seg::Key("experimental"),
                    Seg::Key("componentGroups"),
                    Seg::Index(g),
                ][..],
                rest,
            ]
            .concat()
        };
        let name = at(&[Seg::Key("name")]);
        if let Some(first) = names.insert(group.name.to_ascii_lowercase(), g) {
            v.at(&name).push(
                Rule::ComponentGroupMembers,
                format!("duplicates componentGroups[{first}].name, case-insensitively"),
            );
        }
        if spec
            .components
            .iter()
            .any(|c| c.name.eq_ignore_ascii_case(&group.name))
        {
            v.at(&name).push(
                Rule::ComponentGroupMembers,
                "must not shadow a component name",
            );
        }
        if group.replicas < 1 {
            v.at(&at(&[Seg::Key("replicas")]))
                .push(Rule::ComponentGroupMembers, "must be at least 1");
        }
        if group.scaling_adapter.is_some() {
            v.at(&at(&[Seg::Key("scalingAdapter")])).push(
                Rule::Unsupported,
                format!("{UNSUPPORTED} (no scaling adapter is created for a component group)"),
            );
        }
        if group.components.is_empty() {
            v.at(&at(&[Seg::Key("components")])).push(
                Rule::ComponentGroupMembers,
                "must contain at least one component",
            );
        }
        for (k, member) in group.components.iter().enumerate() {
            let path = at(&[Seg::Key("components"), Seg::Index(k), Seg::Key("name")]);
            let Some(c) = spec.component(&member.name) else {
                v.at(&path).push(
                    Rule::ComponentGroupMembers,
                    format!("unknown component {}", member.name),
                );
                continue;
            };
            if let Some(other) = member_of.insert(&member.name, &group.name) {
                v.at(&path).push(
                    Rule::ComponentGroupMembers,
                    format!("is already a member of component group {other}"),
                );
            }
            for problem in group_member_problems(c) {
                v.at(&path).push(Rule::ComponentGroupMembers, problem);
            }
        }
    }
}

/// Why component `c` cannot be a member of a component group (upstream's messages).
fn group_member_problems(c: &DynamoComponentDeploymentSharedSpec) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if c.is_multinode() {
        problems.push("component groups do not support multinode components");
    }
    if c.replicas == Some(0) {
        problems.push("component groups do not support members with replicas set to 0");
    }
    if c.topology_constraint.is_some() {
        problems.push("component groups do not support component-level topology constraints");
    }
    if c.scaling_adapter.is_some() {
        problems.push(
            "component groups scale their members together; a member cannot have its own scalingAdapter",
        );
    }
    if c.uses_pcsg() && c.provider_override.is_some() {
        problems.push("component groups do not support providerOverride on PCSG-backed components");
    }
    problems
}
