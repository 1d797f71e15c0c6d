//! Names of the Grove objects a graph renders to. Users select on them and script against
//! them, so they follow upstream Dynamo exactly.
//!
//! | object | name |
//! | --- | --- |
//! | PodCliqueSet | the graph name ([`pcs_name`]; shortened with a hash when too long) |
//! | clique of a single-node component | `<component, lowercased>` |
//! | cliques of a multinode component | `<component>-ldr`, `<component>-wkr` (lowercased) |
//! | scaling group of a multinode / forced component | `<component, lowercased>` |
//! | PodClique or PodCliqueScalingGroup Grove creates for a component | `<pcs>-0-<component, lowercased>` ([`component_resource_name`]) |

use api::DynamoComponentDeploymentSharedSpec;

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

/// The PodCliqueSet name of a graph: its name when it fits Grove's combined name limit next to
/// the longest scaling group + clique name of its components, else the name cut to fit with a
/// `-<4 hex digits>` suffix (32-bit FNV-1a of the full name, low 16 bits), as upstream does.
pub fn pcs_name(dgd_name: &str, components: &[DynamoComponentDeploymentSharedSpec]) -> String {
    let budget_of = |c: &DynamoComponentDeploymentSharedSpec| {
        let lower = c.name.to_lowercase().len();
        if c.uses_pcsg() {
            let longest = clique_roles(c)
                .iter()
                .map(|r| r.name.len())
                .max()
                .unwrap_or(0)
                .max(lower);
            lower + longest
        } else {
            lower
        }
    };
    let component_budget = components.iter().map(budget_of).max().unwrap_or(0);
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

    #[test]
    fn short_names_are_kept_and_long_ones_cut_with_a_stable_hash() {
        let comps = [component("Frontend", None), component("decode", Some(2))];
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

    #[test]
    fn the_budget_never_drops_below_the_minimum() {
        let comps = [component(&"x".repeat(60), Some(2))];
        assert_eq!(
            pcs_name("graph-deployment", &comps).len(),
            MIN_PCS_NAME_LENGTH
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
