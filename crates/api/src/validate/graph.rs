//! The rules of a graph's spec: what its children carry, its components (one by one and
//! together), the Grove-only graph fields, the restart order and the component groups.

use std::collections::BTreeMap;

use super::collector::{Collector, Seg};
use super::component::component;
use super::groups::component_groups;
use super::grove_only::grove_only_graph;
use super::names::component_names;
use super::pod_metadata::graph_metadata;
use super::{Rule, ValidationContext};
use crate::common::RestartStrategyType;
use crate::v1beta1::DynamoGraphDeploymentSpec;

pub(super) fn graph_spec(
    spec: &DynamoGraphDeploymentSpec,
    ctx: &ValidationContext,
    v: &mut Collector,
) {
    graph_metadata(spec, v);
    component_names(spec, v);

    for (i, c) in spec.components.iter().enumerate() {
        let mut at = v.nested(&[Seg::Key("components"), Seg::Index(i)]);
        component(c, ctx, Some(spec), spec.backend_framework, &mut at);
        v.absorb(at);
    }

    grove_only_graph(spec, ctx, v);
    restart_order(spec, v);
    component_groups(spec, v);
}

/// `spec.restart.strategy.order`: empty for parallel restarts; otherwise, when set, every
/// component exactly once.
fn restart_order(spec: &DynamoGraphDeploymentSpec, v: &mut Collector) {
    let Some(strategy) = spec.restart.as_ref().and_then(|r| r.strategy.as_ref()) else {
        return;
    };
    let order_path = [Seg::Key("restart"), Seg::Key("strategy"), Seg::Key("order")];
    if strategy.r#type == Some(RestartStrategyType::Parallel) {
        if !strategy.order.is_empty() {
            v.at(&order_path)
                .push(Rule::RestartOrder, "must not be set for parallel restarts");
        }
    } else if !strategy.order.is_empty() {
        let mut listed: BTreeMap<&str, usize> = BTreeMap::new();
        for (k, name) in strategy.order.iter().enumerate() {
            let path = [order_path.as_slice(), &[Seg::Index(k)]].concat();
            if spec.component(name).is_none() {
                v.at(&path)
                    .push(Rule::RestartOrder, format!("unknown component {name}"));
            } else if let Some(first) = listed.insert(name, k) {
                v.at(&path).push(
                    Rule::RestartOrder,
                    format!("duplicates order[{first}] ({name})"),
                );
            }
        }
        let missing: Vec<&str> = spec
            .components
            .iter()
            .map(|c| c.name.as_str())
            .filter(|n| !listed.contains_key(n))
            .collect();
        if !missing.is_empty() {
            v.at(&order_path).push(
                Rule::RestartOrder,
                format!(
                    "must list every component (missing: {})",
                    missing.join(", ")
                ),
            );
        }
    }
}
