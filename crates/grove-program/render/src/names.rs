//! Names of the Grove objects a graph renders to. Users select on them and script against
//! them, so they follow upstream Dynamo exactly.
//!
//! | object | name |
//! | --- | --- |
//! | PodCliqueSet | the graph name ([`pcs_name`]; shortened with a hash when too long) |
//! | clique of a single-node component | `<component, lowercased>` |
//! | cliques of a multinode component | `<component>-ldr`, `<component>-wkr` (lowercased) |
//! | scaling group of a multinode / forced component | `<component, lowercased>` |
//! | scaling group of a component group (`spec.experimental.componentGroups`) | `<group, lowercased>` |
//! | PodClique or PodCliqueScalingGroup Grove creates for a component | `<pcs>-0-<component, lowercased>` ([`component_resource_name`]) |
//! | PodCliqueScalingGroup Grove creates for a component group | `<pcs>-0-<group, lowercased>` ([`component_child`]) |

use api::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeploymentSpec};

pub use pod_render::Role;
pub use pod_render::multinode::{ROLE_SUFFIX_LEADER, ROLE_SUFFIX_WORKER};
/// Grove's limit on the combined length of PodCliqueSet, scaling group and clique names.
pub const MAX_COMBINED_NAME_LENGTH: usize = 45;
/// The shortest PodCliqueSet name [`pcs_name`] produces.
const MIN_PCS_NAME_LENGTH: usize = 8;

/// One clique a component renders to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliqueRole {
    /// The clique name (lowercased).
    pub name: String,
    /// What its pods do.
    pub role: Role,
    /// Pods of the clique (per scaling group replica for scaling-group members).
    pub replicas: i32,
}

/// The cliques of `component`, in upstream's order: one `Main` clique with the component's
/// replicas (default 1), or for a multinode component a leader (1 pod) and a worker clique
/// (`nodeCount - 1` pods), or for a forced scaling group one single-pod clique.
pub fn clique_roles(component: &DynamoComponentDeploymentSharedSpec) -> Vec<CliqueRole> {
    let lower = component.name.to_lowercase();
    if component.is_multinode() {
        return vec![
            CliqueRole {
                name: format!("{lower}-{ROLE_SUFFIX_LEADER}"),
                role: Role::Leader,
                replicas: 1,
            },
            CliqueRole {
                name: format!("{lower}-{ROLE_SUFFIX_WORKER}"),
                role: Role::Worker,
                replicas: component.number_of_nodes().saturating_sub(1).max(0),
            },
        ];
    }
    let replicas = if component.uses_pcsg() {
        1
    } else {
        component.replicas.unwrap_or(1)
    };
    vec![CliqueRole {
        name: lower,
        role: Role::Main,
        replicas,
    }]
}

/// The length of the longest clique name of `component`: its lowercased name, or for a
/// scaling-group component the longest of that and its role cliques.
fn longest_clique_name(component: &DynamoComponentDeploymentSharedSpec) -> usize {
    let lower = component.name.to_lowercase().len();
    if !component.uses_pcsg() {
        return lower;
    }
    clique_roles(component)
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(lower)
}

/// The PodCliqueSet name of a graph: its name when it fits Grove's combined name limit next to
/// the longest scaling group + clique name of its components (a grouped component's scaling
/// group is its component group), else the name cut to fit with a `-<4 hex digits>` suffix
/// (32-bit FNV-1a of the full name, low 16 bits), as upstream does.
pub fn pcs_name(dgd_name: &str, spec: &DynamoGraphDeploymentSpec) -> String {
    let budget_of = |c: &DynamoComponentDeploymentSharedSpec| {
        if let Some(group) = spec.component_group(&c.name) {
            group.name.to_lowercase().len() + longest_clique_name(c)
        } else if c.uses_pcsg() {
            c.name.to_lowercase().len() + longest_clique_name(c)
        } else {
            c.name.to_lowercase().len()
        }
    };
    let component_budget = spec.components.iter().map(budget_of).max().unwrap_or(0);
    let budget = MAX_COMBINED_NAME_LENGTH
        .saturating_sub(component_budget)
        .max(MIN_PCS_NAME_LENGTH);
    if dgd_name.len() <= budget {
        return dgd_name.to_string();
    }
    let suffix = format!("{:04x}", fnv1a32(dgd_name.as_bytes()) & 0xFFFF);
    let keep = budget - 5;
    let prefix: String = dgd_name.chars().take(keep).collect();
    format!("{prefix}-{suffix}")
}

/// The PodClique (single-node component) or PodCliqueScalingGroup (scaling-group component)
/// Grove creates for `component` in replica 0 of the PodCliqueSet `pcs`:
/// `<pcs>-0-<component, lowercased>`.
pub fn component_resource_name(pcs: &str, component: &str) -> String {
    format!("{pcs}-0-{}", component.to_lowercase())
}

/// The Grove child that carries a component's replicas and readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentChild {
    /// `<pcs>-0-<template>`.
    pub name: String,
    /// The PodCliqueSet template entry Grove makes it from: the scaling group (a component
    /// group's, or the component's own) when [`ComponentChild::scaling_group`], else the clique.
    pub template: String,
    /// A PodCliqueScalingGroup (else a PodClique).
    pub scaling_group: bool,
}

/// The child Grove creates for `component` of the graph `spec` in replica 0 of the PodCliqueSet
/// `pcs`: the PodCliqueScalingGroup of its component group, its own PodCliqueScalingGroup
/// (multinode, inter-pod GPU memory service, forced), or its PodClique.
pub fn component_child(
    pcs: &str,
    spec: &DynamoGraphDeploymentSpec,
    component: &DynamoComponentDeploymentSharedSpec,
) -> ComponentChild {
    let (template, scaling_group) = match spec.component_group(&component.name) {
        Some(group) => (group.name.to_lowercase(), true),
        None => (component.name.to_lowercase(), component.uses_pcsg()),
    };
    ComponentChild {
        name: component_resource_name(pcs, &template),
        template,
        scaling_group,
    }
}

/// The value of the `nvidia.com/selector` label of a component's pods:
/// `<dgd>-<component, lowercased>` (its DynamoComponentDeployment name on the component
/// pathway, without a worker suffix).
pub fn selector(dgd_name: &str, component: &str) -> String {
    format!("{dgd_name}-{}", component.to_lowercase())
}

/// 32-bit FNV-1a.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::common::MultinodeSpec;

    fn component(name: &str, nodes: Option<i32>) -> DynamoComponentDeploymentSharedSpec {
        DynamoComponentDeploymentSharedSpec {
            name: name.into(),
            multinode: nodes.map(|node_count| MultinodeSpec { node_count }),
            ..Default::default()
        }
    }

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    fn spec(components: Vec<DynamoComponentDeploymentSharedSpec>) -> DynamoGraphDeploymentSpec {
        DynamoGraphDeploymentSpec {
            components,
            ..Default::default()
        }
    }

    fn grouped(
        components: Vec<DynamoComponentDeploymentSharedSpec>,
        group: &str,
        members: &[&str],
    ) -> DynamoGraphDeploymentSpec {
        let mut s = spec(components);
        s.experimental = Some(api::v1beta1::DynamoGraphDeploymentExperimentalSpec {
            kv_transfer_policy: None,
            component_groups: vec![api::v1beta1::ComponentGroupSpec {
                name: group.into(),
                replicas: 1,
                scaling_adapter: None,
                components: members
                    .iter()
                    .map(|m| api::common::ComponentGroupComponentSpec {
                        name: m.to_string(),
                    })
                    .collect(),
            }],
        });
        s
    }

    #[test]
    fn short_names_are_kept_and_long_ones_cut_with_a_stable_hash() {
        let comps = spec(vec![
            component("Frontend", None),
            component("decode", Some(2)),
        ]);
        assert_eq!(pcs_name("sglang-disagg", &comps), "sglang-disagg");
        // decode uses a scaling group: budget 45 - (6 + 10) = 29.
        let long = "a-very-long-graph-deployment-name-indeed";
        let name = pcs_name(long, &comps);
        assert_eq!(name.len(), 29);
        assert!(name.starts_with("a-very-long-graph-deploy-"), "{name}");
        assert_eq!(name, pcs_name(long, &comps));
        let combined = format!("{name}-decode-decode-wkr");
        assert!(combined.len() <= MAX_COMBINED_NAME_LENGTH + "--".len());
    }

    /// Upstream's `ComponentNameBudget`: a grouped component's scaling group is its component
    /// group, so the group name counts instead of the component name.
    #[test]
    fn a_component_group_name_counts_in_the_budget() {
        let long = "my-inference-graph-production";
        // Alone, "frontend" leaves 45 - 8 = 37: the name (29) fits.
        let plain = spec(vec![component("frontend", None)]);
        assert_eq!(pcs_name(long, &plain), long);
        // In group "runtime-scale-unit": 45 - (18 + 8) = 19.
        let group = grouped(
            vec![component("frontend", None)],
            "Runtime-Scale-Unit",
            &["frontend"],
        );
        let name = pcs_name(long, &group);
        assert_eq!(name.len(), 19);
        assert!(name.starts_with("my-inference-g-"), "{name}");
    }

    #[test]
    fn the_budget_never_drops_below_the_minimum() {
        let comps = spec(vec![component(&"x".repeat(60), Some(2))]);
        assert_eq!(
            pcs_name("graph-deployment", &comps).len(),
            MIN_PCS_NAME_LENGTH
        );
    }

    /// Upstream's `GroveComponentResourceName` and the component group's
    /// `GeneratePodCliqueScalingGroupName(<pcs>, 0, <group, lowercased>)`.
    #[test]
    fn the_child_of_a_component_follows_its_group() {
        let s = grouped(
            vec![
                component("Frontend", None),
                component("worker", None),
                component("decode", Some(2)),
            ],
            "Runtime",
            &["worker"],
        );
        let child = |c: usize| component_child("g", &s, &s.components[c]);
        assert_eq!(
            child(0),
            ComponentChild {
                name: "g-0-frontend".into(),
                template: "frontend".into(),
                scaling_group: false
            }
        );
        assert_eq!(
            child(1),
            ComponentChild {
                name: "g-0-runtime".into(),
                template: "runtime".into(),
                scaling_group: true
            }
        );
        assert_eq!(
            child(2),
            ComponentChild {
                name: "g-0-decode".into(),
                template: "decode".into(),
                scaling_group: true
            }
        );
    }

    #[test]
    fn roles_follow_upstream() {
        let roles = clique_roles(&component("Decode", Some(3)));
        assert_eq!(
            roles,
            [
                CliqueRole {
                    name: "decode-ldr".into(),
                    role: Role::Leader,
                    replicas: 1
                },
                CliqueRole {
                    name: "decode-wkr".into(),
                    role: Role::Worker,
                    replicas: 2
                }
            ]
        );
        let mut single = component("Frontend", None);
        single.replicas = Some(3);
        assert_eq!(clique_roles(&single)[0].replicas, 3);
        assert_eq!(component_resource_name("g", "Frontend"), "g-0-frontend");
    }
}
