//! The component Service.

use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use api::labels;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use pod_render::{HTTP_PORT, HTTP_PORT_NAME, SYSTEM_PORT, SYSTEM_PORT_NAME, epp};

use super::{DISCOVERY_KUBERNETES, Identity, ROLE_LABEL, non_empty, owner_references};

/// Name of the component Service: the DCD name, lowercased, dots as dashes.
pub fn service_name(dcd: &DynamoComponentDeployment) -> String {
    dcd.name_any().replace('.', "-").to_lowercase()
}

pub(super) fn service(dcd: &DynamoComponentDeployment, id: &Identity) -> Option<Service> {
    let discovery = id.kube_discovery();
    if !(discovery || id.is_frontend()) {
        return None;
    }
    let port = match id.component_type.as_str() {
        "frontend" => ServicePort {
            name: Some(HTTP_PORT_NAME.into()),
            port: HTTP_PORT,
            target_port: Some(IntOrString::String(HTTP_PORT_NAME.into())),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        "epp" => ServicePort {
            name: Some(epp::GRPC_PORT_NAME.into()),
            port: epp::GRPC_PORT,
            target_port: Some(IntOrString::Int(epp::GRPC_PORT)),
            protocol: Some("TCP".into()),
            app_protocol: Some("http2".into()),
            ..Default::default()
        },
        _ => ServicePort {
            name: Some(SYSTEM_PORT_NAME.into()),
            port: SYSTEM_PORT,
            target_port: Some(IntOrString::String(SYSTEM_PORT_NAME.into())),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
    };
    let mut labels = id.labels.clone();
    if discovery {
        labels.insert(
            labels::DYNAMO_DISCOVERY_BACKEND.into(),
            DISCOVERY_KUBERNETES.into(),
        );
        labels.insert(labels::DYNAMO_DISCOVERY_ENABLED.into(), "true".into());
    }
    let mut selector = BTreeMap::from([
        (
            labels::DYNAMO_COMPONENT_TYPE.to_string(),
            id.component_type.clone(),
        ),
        (
            labels::DYNAMO_NAMESPACE.to_string(),
            id.dynamo_namespace.clone(),
        ),
        (labels::DYNAMO_COMPONENT.to_string(), id.component.clone()),
    ]);
    if id.nodes > 1 {
        selector.insert(ROLE_LABEL.into(), "leader".into());
    }
    Some(Service {
        metadata: ObjectMeta {
            name: Some(service_name(dcd)),
            namespace: id.namespace.clone(),
            labels: non_empty(labels),
            annotations: non_empty(id.annotations.clone()),
            owner_references: owner_references(dcd),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![port]),
            ..Default::default()
        }),
        status: None,
    })
}
