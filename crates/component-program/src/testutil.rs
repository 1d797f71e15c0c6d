//! Fixtures of the unit tests.

use api::dcd::CONDITION_AVAILABLE;
use api::v1beta1::{ComponentReplicaStatus, MAIN_CONTAINER_NAME};
use api::{
    ComponentKind, ComponentType, DynamoComponentDeployment, DynamoComponentDeploymentSharedSpec,
    DynamoComponentDeploymentStatus, DynamoGraphDeployment,
};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::conditions::{self, Status};
use kit::testing::Double;

/// A component with a `main` container running `image`.
pub fn component(name: &str, t: ComponentType, image: &str) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(t),
        replicas: Some(1),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: MAIN_CONTAINER_NAME.into(),
                    image: Some(image.into()),
                    env: Some(vec![env("COMPONENT", "1"), env("SHARED", "component")]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// An env var.
pub fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The graph `g` in namespace `ns`: a frontend and a worker (vllm-agg's shape), with graph env.
pub fn graph() -> DynamoGraphDeployment {
    DynamoGraphDeployment {
        metadata: ObjectMeta {
            name: Some("g".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: api::DynamoGraphDeploymentSpec {
            components: vec![
                component("Frontend", ComponentType::Frontend, "runtime:1"),
                component("VllmDecodeWorker", ComponentType::Worker, "runtime:1"),
            ],
            env: vec![env("GRAPH", "1"), env("SHARED", "graph")],
            ..Default::default()
        },
        status: None,
    }
}

/// The stored graph.
pub fn stored(d: &Double) -> DynamoGraphDeployment {
    d.object(Some("ns"), "g").expect("graph stored")
}

/// What the DCD controller would report: every DCD observed its generation, Available, all
/// replicas ready.
pub fn all_ready(d: &Double) {
    for mut dcd in d.objects::<DynamoComponentDeployment>() {
        let generation = dcd.metadata.generation.unwrap_or(1);
        let replicas = dcd.spec.component.replicas.unwrap_or(1);
        dcd.status = Some(DynamoComponentDeploymentStatus {
            observed_generation: Some(generation),
            conditions: vec![conditions::new(
                CONDITION_AVAILABLE,
                Status::True,
                "DeploymentReady",
                "",
                generation,
            )],
            component: Some(ComponentReplicaStatus {
                component_kind: ComponentKind::Deployment,
                component_name: dcd.metadata.name.clone(),
                component_names: vec![dcd.metadata.name.clone().unwrap_or_default()],
                runtime_namespace: None,
                gpus_per_engine: None,
                gpus_per_replica: None,
                replicas,
                updated_replicas: replicas,
                ready_replicas: Some(replicas),
                available_replicas: Some(replicas),
                scheduled_replicas: None,
            }),
        });
        d.insert(dcd);
    }
}
