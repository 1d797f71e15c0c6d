//! v1alpha1 ⇄ v1beta1 conversion of the graph's children, DynamoComponentDeployment and
//! DynamoGraphDeploymentScalingAdapter, as upstream serves both versions of each.

mod common;

use api::conversion::children::{
    adapter_to_v1alpha1, adapter_to_v1beta1, dcd_to_v1alpha1, dcd_to_v1beta1,
};
use api::conversion::{convert, to_v1beta1};
use api::v1alpha1::dcd as alpha_dcd;
use api::{dcd, scaling_adapter, v1alpha1, v1beta1};
use common::conformance_manifests;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::json;
use std::collections::BTreeMap;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        ..Default::default()
    }
}

/// A v1beta1 DCD per component of every conformance graph (v1alpha1 graphs converted first), as
/// the component pathway writes them.
fn beta_dcds() -> Vec<(String, dcd::DynamoComponentDeployment)> {
    let mut graphs: Vec<(String, v1beta1::DynamoGraphDeployment)> = Vec::new();
    for m in conformance_manifests() {
        if m.kind() != "DynamoGraphDeployment" {
            continue;
        }
        let graph = match m.api_version() {
            "nvidia.com/v1beta1" => serde_json::from_value(m.value.clone()).unwrap(),
            _ => to_v1beta1(
                &serde_json::from_value::<v1alpha1::DynamoGraphDeployment>(m.value.clone())
                    .unwrap(),
            ),
        };
        graphs.push((m.label(), graph));
    }
    graphs
        .into_iter()
        .flat_map(|(label, graph)| {
            graph.spec.components.clone().into_iter().map(move |c| {
                let name = format!("dcd-{}", c.name.to_lowercase());
                let dcd = dcd::DynamoComponentDeployment {
                    metadata: meta(&name),
                    spec: dcd::DynamoComponentDeploymentSpec {
                        backend_framework: graph.spec.backend_framework,
                        component: c,
                    },
                    status: None,
                };
                (format!("{label}/{name}"), dcd)
            })
        })
        .collect()
}

/// A v1alpha1 DCD per service of every v1alpha1 conformance graph.
fn alpha_dcds() -> Vec<(String, alpha_dcd::DynamoComponentDeployment)> {
    conformance_manifests()
        .into_iter()
        .filter(|m| m.api_version() == "nvidia.com/v1alpha1" && m.kind() == "DynamoGraphDeployment")
        .flat_map(|m| {
            let graph: v1alpha1::DynamoGraphDeployment =
                serde_json::from_value(m.value.clone()).unwrap();
            let label = m.label();
            graph
                .spec
                .services
                .clone()
                .into_iter()
                .map(move |(name, mut service)| {
                    service.service_name = Some(name.clone());
                    let dcd = alpha_dcd::DynamoComponentDeployment {
                        metadata: meta(&format!("dcd-{}", name.to_lowercase())),
                        spec: alpha_dcd::DynamoComponentDeploymentSpec {
                            backend_framework: graph.spec.backend_framework,
                            service,
                        },
                        status: None,
                    };
                    (format!("{label}/{name}"), dcd)
                })
        })
        .collect()
}

#[test]
fn dcd_hub_spoke_hub_is_lossless_for_every_conformance_component() {
    let dcds = beta_dcds();
    assert!(dcds.len() > 50, "{}", dcds.len());
    for (label, beta) in dcds {
        let spoke = dcd_to_v1alpha1(&beta);
        assert_eq!(
            spoke.spec.service.service_name.as_deref(),
            Some(beta.spec.component.name.as_str()),
            "{label}: the component name is the v1alpha1 serviceName"
        );
        assert_eq!(dcd_to_v1beta1(&spoke), beta, "{label}");
    }
}

#[test]
fn dcd_spoke_hub_spoke_is_lossless_for_every_conformance_service() {
    let dcds = alpha_dcds();
    assert!(!dcds.is_empty());
    for (label, alpha) in dcds {
        let hub = dcd_to_v1beta1(&alpha);
        assert_eq!(
            Some(hub.spec.component.name.as_str()),
            alpha.spec.service.service_name.as_deref(),
            "{label}"
        );
        assert_eq!(dcd_to_v1alpha1(&hub), alpha, "{label}");
    }
}

/// A v1alpha1 DCD without `serviceName` (upstream's controller always sets it, a user may not):
/// v1beta1 requires a name, the object's is used, and converting back omits it again.
#[test]
fn a_dcd_without_service_name_takes_the_object_name() {
    let alpha = alpha_dcd::DynamoComponentDeployment {
        metadata: meta("standalone"),
        spec: alpha_dcd::DynamoComponentDeploymentSpec {
            backend_framework: None,
            service: v1alpha1::DynamoComponentDeploymentSharedSpec {
                component_type: Some("worker".into()),
                replicas: Some(2),
                ..Default::default()
            },
        },
        status: None,
    };
    let hub = dcd_to_v1beta1(&alpha);
    assert_eq!(hub.spec.component.name, "standalone");
    assert_eq!(
        hub.spec.component.r#type,
        Some(v1beta1::ComponentType::Worker)
    );
    assert_eq!(dcd_to_v1alpha1(&hub), alpha);
}

#[test]
fn dcd_status_maps_service_to_component() {
    let status = json!({
        "observedGeneration": 4,
        "conditions": [{"type": "Available", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "service": {"componentKind": "Deployment", "componentName": "g-worker",
                    "componentNames": ["g-worker"], "replicas": 2, "updatedReplicas": 2,
                    "readyReplicas": 2, "availableReplicas": 2},
    });
    let alpha = json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
        "metadata": {"name": "g-worker", "namespace": "ns"},
        "spec": {"serviceName": "worker", "componentType": "worker"},
        "status": status,
    });
    let beta = convert(&alpha, "nvidia.com/v1beta1").unwrap();
    assert_eq!(beta["kind"], "DynamoComponentDeployment");
    assert_eq!(beta["spec"]["name"], "worker");
    assert_eq!(beta["status"]["observedGeneration"], 4);
    assert_eq!(
        beta["status"]["component"]["componentNames"],
        json!(["g-worker"])
    );
    assert_eq!(beta["status"]["conditions"][0]["type"], "Available");
    let back = convert(&beta, "nvidia.com/v1alpha1").unwrap();
    assert_eq!(back["status"], alpha["status"]);
    assert_eq!(back["spec"], alpha["spec"]);
}

fn adapter(replicas: i32, status: bool) -> scaling_adapter::DynamoGraphDeploymentScalingAdapter {
    let mut metadata = meta("adapter");
    metadata.labels = Some(BTreeMap::from([("team".into(), "infra".into())]));
    metadata.annotations = Some(BTreeMap::from([("foo".into(), "bar".into())]));
    scaling_adapter::DynamoGraphDeploymentScalingAdapter {
        metadata,
        spec: scaling_adapter::DynamoGraphDeploymentScalingAdapterSpec {
            replicas,
            dgd_ref: scaling_adapter::DynamoGraphDeploymentComponentRef {
                name: "my-dgd".into(),
                component_name: "decode".into(),
            },
        },
        status: status.then(
            || scaling_adapter::DynamoGraphDeploymentScalingAdapterStatus {
                replicas: Some(replicas),
                selector: Some("app=prefill,dgd=another-dgd".into()),
                last_scale_time: Some(Time("2026-04-26T10:30:00Z".parse().unwrap())),
                ..Default::default()
            },
        ),
    }
}

/// Upstream's table: minimal and full-status adapters survive both round trips.
#[test]
fn adapters_round_trip_both_ways() {
    for (replicas, status) in [(3, false), (5, true), (0, true)] {
        let beta = adapter(replicas, status);
        let alpha = adapter_to_v1alpha1(&beta);
        assert_eq!(alpha.spec.dgd_ref.service_name, "decode");
        assert_eq!(
            adapter_to_v1beta1(&alpha),
            beta,
            "from v1beta1: {replicas} {status}"
        );
        assert_eq!(
            adapter_to_v1alpha1(&adapter_to_v1beta1(&alpha)),
            alpha,
            "from v1alpha1: {replicas} {status}"
        );
    }
}

/// The ConversionReview path names the kind; one this webhook does not convert is refused.
#[test]
fn reviews_convert_every_served_kind_and_refuse_others() {
    let adapter = json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeploymentScalingAdapter",
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {"replicas": 2, "dgdRef": {"name": "g", "serviceName": "worker"}},
    });
    let beta = convert(&adapter, "nvidia.com/v1beta1").unwrap();
    assert_eq!(beta["apiVersion"], "nvidia.com/v1beta1");
    assert_eq!(
        beta["spec"]["dgdRef"],
        json!({"name": "g", "componentName": "worker"})
    );
    // A partial object (only status, as one field manager's set) stays partial.
    let partial = json!({
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeploymentScalingAdapter",
        "status": {"replicas": 1},
    });
    let alpha = convert(&partial, "nvidia.com/v1alpha1").unwrap();
    assert!(alpha.get("spec").is_none() && alpha.get("metadata").is_none());
    assert_eq!(alpha["status"]["replicas"], 1);
    let other = json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoModel", "spec": {}});
    assert!(convert(&other, "nvidia.com/v1beta1").is_err());
}
