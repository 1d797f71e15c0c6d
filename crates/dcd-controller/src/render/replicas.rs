//! The replicas this controller applies to a DCD's workload, and holds while ownership of the
//! count passes to a scaling adapter.

use api::DynamoComponentDeployment;
use serde_json::{Value, json};

use super::Workload;

/// The replicas this controller applies to the workload: the DCD's `spec.replicas` whenever it
/// is set (whoever set it: the graph, or the scaling adapter's controller for a component with
/// `scalingAdapter`), else `None`, leaving `spec.replicas` out of the applied configuration.
/// See [`held_replicas`] for an unset count of a component whose adapter has not written it
/// yet.
pub fn applied_replicas(dcd: &DynamoComponentDeployment) -> Option<i32> {
    dcd.spec.component.replicas
}

/// The replicas to apply when [`applied_replicas`] is `None` but the component has a
/// `scalingAdapter`: the live workload's current `spec.replicas` (`live`), so the count holds
/// while ownership passes from the graph to the adapter. (The graph stops applying the DCD's
/// replicas when the adapter is enabled, before the adapter's controller writes them; leaving
/// the field out would let server-side apply drop it and the API server default it to 1.) With
/// no live workload, or without an adapter, the field stays out (`None`).
pub fn held_replicas(dcd: &DynamoComponentDeployment, live: Option<i32>) -> Option<i32> {
    let component = &dcd.spec.component;
    match component.replicas {
        Some(replicas) => Some(replicas),
        None if component.scaling_adapter.is_some() => live,
        None => None,
    }
}

/// Set the workload's `spec.replicas` to `replicas` (see [`held_replicas`]); `None` leaves it
/// as rendered.
pub fn hold_replicas(workload: &mut Workload, replicas: Option<i32>) {
    let Some(replicas) = replicas else { return };
    match workload {
        Workload::Deployment(d) => {
            if let Some(spec) = d.spec.as_mut() {
                spec.replicas = Some(replicas);
            }
        }
        Workload::LeaderWorkerSet(lws) => {
            if let Some(spec) = lws.data.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), json!(replicas));
            }
        }
    }
}
