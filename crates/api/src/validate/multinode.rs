//! Multinode components: their component type, and the roles that restate their layout.

use super::collector::{Collector, Seg};
use super::{Rule, UNSUPPORTED};
use crate::v1beta1::{
    ComponentType, DynamoComponentDeploymentSharedSpec, ROLE_LEADER, ROLE_WORKER,
};

/// `multinode` only on worker-class components (worker, prefill, decode, or no type).
pub(super) fn multinode_type(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    let worker_class = c.r#type.is_none_or(ComponentType::is_worker);
    if c.multinode.is_some() && !worker_class {
        v.at(&[Seg::Key("multinode")]).push(
            Rule::MultinodeComponentType,
            "is only supported for worker, prefill and decode components",
        );
    }
}

/// `roles` of a multinode component: exactly one leader (1 replica) and one worker
/// (`nodeCount - 1` replicas), without pod templates of their own.
pub(super) fn roles(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    if c.roles.is_empty() {
        return;
    }
    let Some(m) = &c.multinode else {
        v.at(&[Seg::Key("roles")])
            .push(Rule::Roles, "requires multinode");
        return;
    };
    let count = |n: &str| c.roles.iter().filter(|r| r.name == n).count();
    if count(ROLE_LEADER) != 1 || count(ROLE_WORKER) != 1 || c.roles.len() != 2 {
        v.at(&[Seg::Key("roles")]).push(
            Rule::Roles,
            "must contain exactly one leader and one worker role",
        );
    }
    for (k, role) in c.roles.iter().enumerate() {
        let want = match role.name.as_str() {
            ROLE_LEADER => 1,
            ROLE_WORKER => m.node_count - 1,
            _ => continue,
        };
        if let Some(got) = role.replicas
            && got != want
        {
            v.at(&[Seg::Key("roles"), Seg::Index(k), Seg::Key("replicas")])
                .push(
                    Rule::Roles,
                    format!("must be {want} for role {}", role.name),
                );
        }
        if role.pod_template.is_some() {
            v.at(&[Seg::Key("roles"), Seg::Index(k), Seg::Key("podTemplate")])
                .push(
                    Rule::Unsupported,
                    format!("{UNSUPPORTED} (no component type renders a role's own pod template)"),
                );
        }
    }
}
