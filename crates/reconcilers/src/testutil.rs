//! Fixtures of the unit tests.

use api::v1beta1::MAIN_CONTAINER_NAME;
use api::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::Event;

/// A graph `name` in namespace `ns` (insert it into the double to give it a uid).
pub fn dgd(
    name: &str,
    components: Vec<DynamoComponentDeploymentSharedSpec>,
) -> DynamoGraphDeployment {
    DynamoGraphDeployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            generation: Some(3),
            ..Default::default()
        },
        spec: api::DynamoGraphDeploymentSpec {
            components,
            ..Default::default()
        },
        status: None,
    }
}

/// A component with a `main` container.
pub fn component(name: &str, t: ComponentType) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(t),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: MAIN_CONTAINER_NAME.into(),
                    image: Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// The reasons of `events`.
pub fn reasons(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.reason.clone()).collect()
}
