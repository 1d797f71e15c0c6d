//! The component Services that accompany a graph's PodCliqueSet (upstream's grove "stable
//! resources"): Grove's headless Service only addresses pods; clients reach a component
//! through a ClusterIP Service. Pure, derived from the rendered PodCliqueSet so that every
//! compatibility rule applied to its cliques (a legacy worker type, say) applies to the
//! Service selector too.
//!
//! | component | Service |
//! | --- | --- |
//! | frontend | always; port `http` 8000 → `http` |
//! | any other, with Kubernetes discovery | port `system` 9090 → `system` (EPP: `grpc` 9002, appProtocol `http2`) |
//! | any other, without | none (an owned one is deleted) |
//!
//! Name `<dgd>-<component>` (lowercased, dots as dashes); labels as upstream's: the graph's
//! `spec.labels`, the preserved v1alpha1 service labels and the component's pod template labels
//! (with the sub-component-type label the legacy worker rule adds), plus the discovery labels
//! with Kubernetes discovery; and, ours, `nvidia.com/dynamo-graph-deployment-name` and
//! `nvidia.com/dynamo-component`, by which the grove program lists its Services and recognizes
//! the ones to delete. No component-type, component-class or Dynamo namespace label: upstream
//! puts none on these Services (their pods carry them). Selector: component type, Dynamo
//! namespace and component; a controller owner reference to the graph.

use std::collections::BTreeMap;

use api::DynamoGraphDeployment;
use api::grove::PodCliqueSet;
use api::labels;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::compat::{clique_of, legacy_worker_type};
use crate::names::selector;
use crate::pod::{HTTP_PORT, SYSTEM_PORT};
use crate::render::preserved_alpha_services;

/// gRPC port of an EPP component's Service.
pub const EPP_GRPC_PORT: i32 = 9002;

/// The component Services of `dgd`, whose rendered PodCliqueSet is `pcs`, in spec order.
pub fn services(dgd: &DynamoGraphDeployment, pcs: &PodCliqueSet) -> Vec<Service> {
    let dgd_name = dgd.metadata.name.clone().unwrap_or_default();
    let owner = pcs
        .metadata
        .owner_references
        .clone()
        .filter(|o| !o.is_empty());
    let alpha = preserved_alpha_services(dgd);
    dgd.spec
        .components
        .iter()
        .filter_map(|c| {
            let clique = clique_of(pcs, &c.name)?;
            let get = |k: &str| clique.labels.get(k).cloned().unwrap_or_default();
            let component_type = get(labels::DYNAMO_COMPONENT_TYPE);
            let kube_discovery = clique
                .annotations
                .get(labels::DYNAMO_DISCOVERY_BACKEND)
                .map(String::as_str)
                == Some("kubernetes");
            if !(kube_discovery || component_type == "frontend") {
                return None;
            }
            let port = match component_type.as_str() {
                "frontend" => ServicePort {
                    name: Some("http".into()),
                    port: HTTP_PORT,
                    target_port: Some(IntOrString::String("http".into())),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                },
                "epp" => ServicePort {
                    name: Some("grpc".into()),
                    port: EPP_GRPC_PORT,
                    target_port: Some(IntOrString::Int(EPP_GRPC_PORT)),
                    protocol: Some("TCP".into()),
                    app_protocol: Some("http2".into()),
                    ..Default::default()
                },
                _ => ServicePort {
                    name: Some("system".into()),
                    port: SYSTEM_PORT,
                    target_port: Some(IntOrString::String("system".into())),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                },
            };
            // The component as rendered: the legacy worker rule (which the rendered clique
            // shows) adds the sub-component-type label to its pod template.
            let mut rendered = c.clone();
            legacy_worker_type(&mut rendered, Some(pcs));
            let mut service_labels = dgd.spec.labels.clone();
            if let Some(a) = alpha.get(&c.name) {
                service_labels.extend(a.labels.clone());
            }
            if let Some(template) = rendered
                .pod_template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.as_ref())
            {
                service_labels.extend(template.clone());
            }
            service_labels.insert(
                labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                dgd_name.clone(),
            );
            service_labels.insert(labels::DYNAMO_COMPONENT.to_string(), c.name.clone());
            if kube_discovery {
                service_labels.insert(labels::DYNAMO_DISCOVERY_BACKEND.into(), "kubernetes".into());
                service_labels.insert(labels::DYNAMO_DISCOVERY_ENABLED.into(), "true".into());
            }
            let selector_labels = BTreeMap::from([
                (labels::DYNAMO_COMPONENT_TYPE.to_string(), component_type),
                (
                    labels::DYNAMO_NAMESPACE.to_string(),
                    get(labels::DYNAMO_NAMESPACE),
                ),
                (labels::DYNAMO_COMPONENT.to_string(), c.name.clone()),
            ]);
            Some(Service {
                metadata: ObjectMeta {
                    name: Some(service_name(&dgd_name, &c.name)),
                    namespace: dgd.metadata.namespace.clone(),
                    labels: Some(service_labels),
                    owner_references: owner.clone(),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    selector: Some(selector_labels),
                    ports: Some(vec![port]),
                    ..Default::default()
                }),
                status: None,
            })
        })
        .collect()
}

/// The Service name of a component: `<dgd>-<component>`, lowercased, dots as dashes.
pub fn service_name(dgd_name: &str, component: &str) -> String {
    selector(dgd_name, component)
        .replace('.', "-")
        .to_lowercase()
}
