//! The graph's children between v1alpha1 and v1beta1, as upstream serves both:
//!
//! - **DynamoComponentDeployment**: a v1alpha1 DCD is one v1alpha1 service and its backend; the
//!   service is converted as the graph's services are, its `serviceName` (else the object's
//!   name) becoming the v1beta1 component `name`. What one version cannot represent rides in a
//!   payload annotation on the converted object (`nvidia.com/dcd-v1alpha1-spec` on v1beta1,
//!   `nvidia.com/dcd-v1beta1-spec` on v1alpha1), restored whole when the other version is
//!   unchanged since the conversion, else only for the fields it alone has. Status: conditions,
//!   `observedGeneration`, and the replica status (`service` ⇄ `component`).
//! - **DynamoGraphDeploymentScalingAdapter**: `dgdRef.serviceName` ⇄ `dgdRef.componentName`;
//!   status `replicas`, `selector` and `lastScaleTime` (v1beta1's conditions and
//!   `observedGeneration` have no v1alpha1 field; the controller writes status as v1beta1).

use super::{
    carry_beta_only, component_from_alpha, component_to_alpha, payload, replica_from_alpha,
    replica_to_alpha, scrubbed_of, set_payload,
};
use crate::v1alpha1::dcd as alpha_dcd;
use crate::v1alpha1::scaling_adapter as alpha_adapter;
use crate::{dcd, scaling_adapter};

/// Annotation on v1beta1 DCDs: the v1alpha1 spec they were converted from.
pub const DCD_ALPHA_SPEC: &str = "nvidia.com/dcd-v1alpha1-spec";
/// Annotation on v1alpha1 DCDs: the v1beta1 spec they were converted from.
const DCD_BETA_SPEC: &str = "nvidia.com/dcd-v1beta1-spec";
const DCD_PAYLOADS: [&str; 2] = [DCD_ALPHA_SPEC, DCD_BETA_SPEC];

fn dcd_spec_from_alpha(
    s: &alpha_dcd::DynamoComponentDeploymentSpec,
    object_name: &str,
) -> dcd::DynamoComponentDeploymentSpec {
    let name = s
        .service
        .service_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(object_name);
    dcd::DynamoComponentDeploymentSpec {
        backend_framework: s.backend_framework,
        component: component_from_alpha(name, &s.service),
    }
}

fn dcd_spec_to_alpha(
    s: &dcd::DynamoComponentDeploymentSpec,
) -> alpha_dcd::DynamoComponentDeploymentSpec {
    let (name, mut service) = component_to_alpha(&s.component);
    service.service_name = Some(name);
    alpha_dcd::DynamoComponentDeploymentSpec {
        backend_framework: s.backend_framework,
        service,
    }
}

/// A DynamoComponentDeployment, v1alpha1 → v1beta1.
pub fn dcd_to_v1beta1(
    src: &alpha_dcd::DynamoComponentDeployment,
) -> dcd::DynamoComponentDeployment {
    let object_name = src.metadata.name.clone().unwrap_or_default();
    let mut spec = dcd_spec_from_alpha(&src.spec, &object_name);
    if let Some(saved) = payload::<dcd::DynamoComponentDeploymentSpec>(&src.metadata, DCD_BETA_SPEC)
    {
        if dcd_spec_to_alpha(&saved) == src.spec {
            spec = saved;
        } else {
            carry_beta_only(&mut spec.component, &saved.component);
        }
    }
    let mut metadata = scrubbed_of(&src.metadata, &DCD_PAYLOADS);
    if dcd_spec_to_alpha(&spec) != src.spec {
        set_payload(&mut metadata, DCD_ALPHA_SPEC, &src.spec);
    }
    dcd::DynamoComponentDeployment {
        metadata,
        spec,
        status: src
            .status
            .as_ref()
            .map(|s| dcd::DynamoComponentDeploymentStatus {
                observed_generation: s.observed_generation,
                conditions: s.conditions.clone(),
                component: s.service.as_ref().map(replica_from_alpha),
            }),
    }
}

/// Whether a DynamoComponentDeployment was converted from a v1alpha1 one whose `ingress` is
/// enabled (v1beta1 has no such field).
pub fn preserved_alpha_dcd_ingress(dcd: &dcd::DynamoComponentDeployment) -> bool {
    payload::<alpha_dcd::DynamoComponentDeploymentSpec>(&dcd.metadata, DCD_ALPHA_SPEC)
        .and_then(|s| s.service.ingress)
        .is_some_and(|i| i.enabled)
}

/// A DynamoComponentDeployment, v1beta1 → v1alpha1.
pub fn dcd_to_v1alpha1(
    src: &dcd::DynamoComponentDeployment,
) -> alpha_dcd::DynamoComponentDeployment {
    let object_name = src.metadata.name.clone().unwrap_or_default();
    let mut spec = dcd_spec_to_alpha(&src.spec);
    if let Some(saved) =
        payload::<alpha_dcd::DynamoComponentDeploymentSpec>(&src.metadata, DCD_ALPHA_SPEC)
    {
        if dcd_spec_from_alpha(&saved, &object_name) == src.spec {
            spec = saved;
        } else {
            let service = &mut spec.service;
            service.dynamo_namespace = saved.service.dynamo_namespace.clone();
            service.autoscaling = saved.service.autoscaling.clone();
            service.ingress = saved.service.ingress.clone();
            if saved.service.service_name.is_none() && src.spec.component.name == object_name {
                service.service_name = None;
            }
        }
    }
    let mut metadata = scrubbed_of(&src.metadata, &DCD_PAYLOADS);
    if dcd_spec_from_alpha(&spec, &object_name) != src.spec {
        set_payload(&mut metadata, DCD_BETA_SPEC, &src.spec);
    }
    alpha_dcd::DynamoComponentDeployment {
        metadata,
        spec,
        status: src
            .status
            .as_ref()
            .map(|s| alpha_dcd::DynamoComponentDeploymentStatus {
                observed_generation: s.observed_generation,
                conditions: s.conditions.clone(),
                pod_selector: Default::default(),
                service: s.component.as_ref().map(replica_to_alpha),
            }),
    }
}

/// A DynamoGraphDeploymentScalingAdapter, v1alpha1 → v1beta1.
pub fn adapter_to_v1beta1(
    src: &alpha_adapter::DynamoGraphDeploymentScalingAdapter,
) -> scaling_adapter::DynamoGraphDeploymentScalingAdapter {
    scaling_adapter::DynamoGraphDeploymentScalingAdapter {
        metadata: src.metadata.clone(),
        spec: scaling_adapter::DynamoGraphDeploymentScalingAdapterSpec {
            replicas: src.spec.replicas,
            dgd_ref: scaling_adapter::DynamoGraphDeploymentComponentRef {
                name: src.spec.dgd_ref.name.clone(),
                component_name: src.spec.dgd_ref.service_name.clone(),
            },
        },
        status: src.status.as_ref().map(|s| {
            scaling_adapter::DynamoGraphDeploymentScalingAdapterStatus {
                replicas: s.replicas,
                selector: s.selector.clone(),
                last_scale_time: s.last_scale_time.clone(),
                ..Default::default()
            }
        }),
    }
}

/// A DynamoGraphDeploymentScalingAdapter, v1beta1 → v1alpha1.
pub fn adapter_to_v1alpha1(
    src: &scaling_adapter::DynamoGraphDeploymentScalingAdapter,
) -> alpha_adapter::DynamoGraphDeploymentScalingAdapter {
    alpha_adapter::DynamoGraphDeploymentScalingAdapter {
        metadata: src.metadata.clone(),
        spec: alpha_adapter::DynamoGraphDeploymentScalingAdapterSpec {
            replicas: src.spec.replicas,
            dgd_ref: alpha_adapter::DynamoGraphDeploymentServiceRef {
                name: src.spec.dgd_ref.name.clone(),
                service_name: src.spec.dgd_ref.component_name.clone(),
            },
        },
        status: src.status.as_ref().map(|s| {
            alpha_adapter::DynamoGraphDeploymentScalingAdapterStatus {
                replicas: s.replicas,
                selector: s.selector.clone(),
                last_scale_time: s.last_scale_time.clone(),
            }
        }),
    }
}
