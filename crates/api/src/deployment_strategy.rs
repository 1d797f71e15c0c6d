//! The rollout strategy a component asks for, with upstream's annotations and defaults.
//!
//! One reading serves both levels a component is rolled at: the strategy of its Deployment
//! (rendered by the DCD controller) and the graph's step-down of one worker generation into the
//! next (the graph's rollout). The annotations are read from the component's pod template, with
//! the graph's `spec.annotations` filling in what the template does not set (upstream's
//! `GetDGDComponentResourceAnnotations`).
//!
//! | annotation | value | strategy |
//! | --- | --- | --- |
//! | `nvidia.com/deployment-strategy` | `Recreate` | [`DeploymentStrategy::Recreate`]: every old replica goes before a new one starts |
//! | `nvidia.com/deployment-strategy` | anything else, or unset | [`DeploymentStrategy::RollingUpdate`] |
//! | `nvidia.com/deployment-rolling-update-max-surge` | an integer or a percentage | replicas above the desired count, default `25%` (rounded up) |
//! | `nvidia.com/deployment-rolling-update-max-unavailable` | an integer or a percentage | replicas below the desired count, default `25%` (rounded down) |
//!
//! [`DeploymentStrategy::budget`] resolves the two knobs against a desired count as Kubernetes
//! resolves a Deployment's: percentages scale the count (surge rounded up, unavailable rounded
//! down), a value that is neither an integer nor a percentage counts as 0, and when both come to
//! 0 the surge is 1 so a rollout can always progress. A component with fewer than four replicas
//! therefore rolls surge-first by default (one extra replica, none unavailable); the surge-first
//! rollout of a whole generation at once is `max-surge: 100%`, `max-unavailable: 0`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::DynamoComponentDeploymentSharedSpec;
use crate::labels;

/// `maxSurge` and `maxUnavailable` unless the annotations set them (upstream's and Kubernetes'
/// Deployment default).
pub const DEFAULT_ROLLING_UPDATE: &str = "25%";

/// How a component's replicas are replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeploymentStrategy {
    /// Every old replica is removed before a new one starts.
    Recreate,
    /// Old replicas are stepped down as new ones become available, within the two budgets.
    RollingUpdate {
        /// How many replicas may exist above the desired count.
        max_surge: IntOrString,
        /// How many replicas may be unavailable below the desired count.
        max_unavailable: IntOrString,
    },
}

/// The two budgets of a strategy, as replica counts for one desired count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Replicas allowed above the desired count.
    pub max_surge: i32,
    /// Replicas allowed to be unavailable below the desired count.
    pub max_unavailable: i32,
}

impl DeploymentStrategy {
    /// The strategy `annotations` ask for (a component's effective annotations).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        if annotations
            .get(labels::DEPLOYMENT_STRATEGY)
            .map(String::as_str)
            == Some(labels::DEPLOYMENT_STRATEGY_RECREATE)
        {
            return DeploymentStrategy::Recreate;
        }
        let knob = |key: &str| {
            int_or_string(
                annotations
                    .get(key)
                    .filter(|v| !v.is_empty())
                    .map(String::as_str)
                    .unwrap_or(DEFAULT_ROLLING_UPDATE),
            )
        };
        DeploymentStrategy::RollingUpdate {
            max_surge: knob(labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE),
            max_unavailable: knob(labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE),
        }
    }

    /// The strategy of `component` of a graph whose `spec.annotations` are `graph`: the
    /// component's pod template annotations over the graph's.
    pub fn of_component(
        graph: &BTreeMap<String, String>,
        component: &DynamoComponentDeploymentSharedSpec,
    ) -> Self {
        let mut annotations = graph.clone();
        if let Some(own) = component
            .pod_template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
        {
            annotations.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Self::from_annotations(&annotations)
    }

    /// The budgets for `desired` replicas. `Recreate` allows the whole count to be unavailable
    /// and no surge.
    pub fn budget(&self, desired: i32) -> Budget {
        match self {
            DeploymentStrategy::Recreate => Budget {
                max_surge: 0,
                max_unavailable: desired.max(0),
            },
            DeploymentStrategy::RollingUpdate {
                max_surge,
                max_unavailable,
            } => {
                let surge = scaled(max_surge, desired, true);
                let unavailable = scaled(max_unavailable, desired, false);
                Budget {
                    max_surge: if surge == 0 && unavailable == 0 {
                        1
                    } else {
                        surge
                    },
                    max_unavailable: unavailable,
                }
            }
        }
    }
}

/// An annotation value as Kubernetes parses an int-or-string: an integer, else a string.
pub fn int_or_string(value: &str) -> IntOrString {
    match value.parse::<i32>() {
        Ok(n) => IntOrString::Int(n),
        Err(_) => IntOrString::String(value.to_string()),
    }
}

/// `value` against `total`: an integer as is, a percentage of `total` rounded up or down, and
/// anything else 0 (as upstream, which ignores the parse error).
fn scaled(value: &IntOrString, total: i32, round_up: bool) -> i32 {
    match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let Some(percent) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return 0;
            };
            let product = percent * i64::from(total);
            let value = if round_up {
                product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
            } else {
                product.div_euclid(100)
            };
            i32::try_from(value).unwrap_or(if value > 0 { i32::MAX } else { i32::MIN })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const SURGE: &str = labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE;
    const UNAVAILABLE: &str = labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE;

    /// Upstream's `TestResolveRollingUpdateParams` (10 cases), plus the strategy selection.
    #[test]
    fn budgets_resolve_as_upstream() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], i32, (i32, i32));
        let cases: &[Case<'_>] = &[
            ("defaults: 25%/25% of 4", &[], 4, (1, 1)),
            ("absolute maxSurge", &[(SURGE, "2")], 4, (2, 1)),
            ("absolute maxUnavailable", &[(UNAVAILABLE, "0")], 4, (1, 0)),
            (
                "percentage maxSurge: 50% of 4",
                &[(SURGE, "50%")],
                4,
                (2, 1),
            ),
            (
                "percentage maxUnavailable: 50% of 4",
                &[(UNAVAILABLE, "50%")],
                4,
                (1, 2),
            ),
            (
                "both percentages",
                &[(SURGE, "50%"), (UNAVAILABLE, "25%")],
                4,
                (2, 1),
            ),
            (
                "both zero: surge 1 so the rollout progresses",
                &[(SURGE, "0"), (UNAVAILABLE, "0")],
                4,
                (1, 0),
            ),
            (
                "maxSurge 0 with maxUnavailable 1",
                &[(SURGE, "0"), (UNAVAILABLE, "1")],
                4,
                (0, 1),
            ),
            ("surge rounds up: 34% of 3", &[(SURGE, "34%")], 3, (2, 0)),
            (
                "unavailable rounds down: 34% of 3",
                &[(UNAVAILABLE, "34%")],
                3,
                (1, 1),
            ),
            // Ours: a single replica by default is surge-first.
            ("defaults of 1 replica", &[], 1, (1, 0)),
            (
                "an unparsable value counts as 0",
                &[(SURGE, "lots")],
                4,
                (0, 1),
            ),
            ("an empty value is the default", &[(SURGE, "")], 4, (1, 1)),
        ];
        for (name, pairs, desired, (surge, unavailable)) in cases {
            let strategy = DeploymentStrategy::from_annotations(&annotations(pairs));
            assert!(
                matches!(strategy, DeploymentStrategy::RollingUpdate { .. }),
                "{name}"
            );
            assert_eq!(
                strategy.budget(*desired),
                Budget {
                    max_surge: *surge,
                    max_unavailable: *unavailable
                },
                "{name}"
            );
        }
    }

    #[test]
    fn recreate_only_for_its_exact_value() {
        let strategy = |v: &str| {
            DeploymentStrategy::from_annotations(&annotations(&[(labels::DEPLOYMENT_STRATEGY, v)]))
        };
        assert_eq!(strategy("Recreate"), DeploymentStrategy::Recreate);
        assert_eq!(
            strategy("Recreate").budget(3),
            Budget {
                max_surge: 0,
                max_unavailable: 3
            }
        );
        for other in ["RollingUpdate", "recreate", ""] {
            assert!(
                matches!(strategy(other), DeploymentStrategy::RollingUpdate { .. }),
                "{other}"
            );
        }
    }

    #[test]
    fn int_or_string_parses_like_kubernetes() {
        assert_eq!(int_or_string("3"), IntOrString::Int(3));
        assert_eq!(int_or_string("30%"), IntOrString::String("30%".into()));
    }
}
