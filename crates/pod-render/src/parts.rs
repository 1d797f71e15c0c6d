//! Small builders of container parts, written the way upstream serializes them.

use k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Probe,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// An env var; an empty value is left out, as upstream's serialization does.
pub fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: (!value.is_empty()).then(|| value.to_string()),
        value_from: None,
    }
}

/// An env var from a field of the pod (Downward API), e.g. `metadata.name`.
pub fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

/// A named TCP container port.
pub fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// An HTTP GET probe on a named port; an initial delay of 0 is left unset.
pub fn http_probe(
    path: &str,
    port: &str,
    initial_delay: i32,
    period: i32,
    timeout: i32,
    failure: i32,
) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(port.into()),
            ..Default::default()
        }),
        initial_delay_seconds: (initial_delay > 0).then_some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}
