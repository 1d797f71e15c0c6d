//! ResourceClaimTemplates (`resource.k8s.io/v1`) of components that use the GPU memory service.
//!
//! For each component with `experimental.gpuMemoryService`: a template
//! `<dgd>-<component lowercased>-gpu` owned by the graph, with one device request `gpus` of
//! `exactly: {deviceClassName, allocationMode: ExactCount, count}`. The count is the GPU
//! quantity of the `main` container (limits, else requests; `nvidia.com/gpu` or another GPU
//! resource name, one at most); `deviceClassName` defaults to `gpu.nvidia.com` and must exist. A
//! component without GPUs gets no template (as upstream; validation refuses GMS without GPUs,
//! whose pods would claim it).
//!
//! Templates the graph owns that are no longer wanted (GMS turned off, component removed) are
//! deleted. When a component asks for GMS (or inter-pod failover) and the cluster does not serve
//! `resource.k8s.io/v1` (Kubernetes before 1.34), the step fails with a clear message; a graph
//! that asks for neither never needs the API.

use std::collections::BTreeSet;
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::v1beta1::GpuMemoryServiceMode;
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceClass, DeviceRequest, ExactDeviceRequest, ResourceClaimSpec,
    ResourceClaimTemplate, ResourceClaimTemplateSpec,
};
use kit::{Event, Reader, ReaderExt, Selector, Writer};
use kube::ResourceExt;

use crate::child::{self, Ownership};
use crate::error::{Error, Result};
use crate::naming;

/// DeviceClass of GMS templates when the component names none.
pub const DEFAULT_DEVICE_CLASS: &str = "gpu.nvidia.com";
/// Name of the device request in a GMS template.
pub const DEVICE_REQUEST: &str = "gpus";

/// Ensures the GMS ResourceClaimTemplates of a graph and removes the stale ones.
pub struct GmsReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

/// The template one component wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GmsClaim {
    /// Component name.
    pub component: String,
    /// GPUs of the main container.
    pub gpus: i64,
    /// DRA DeviceClass.
    pub device_class: String,
}

/// Whether a component of `dgd` asks for what needs DRA (`resource.k8s.io/v1`): the GPU memory
/// service, or inter-pod GMS failover.
pub fn needs_dra(dgd: &DynamoGraphDeployment) -> bool {
    dgd.spec.components.iter().any(|c| {
        let experimental = c.experimental.as_ref();
        experimental.is_some_and(|e| e.gpu_memory_service.is_some())
            || experimental
                .and_then(|e| e.failover.as_ref())
                .is_some_and(|f| f.mode == Some(GpuMemoryServiceMode::InterPod))
    })
}

impl GmsReconciler {
    /// A reconciler reading through `reader` and writing through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Self { reader, writer }
    }

    /// Converge the templates of `dgd`.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let claims = resolve(dgd)?;
        let requested = !claims.is_empty() || needs_dra(dgd);
        let dgd_name = dgd.name_any();
        let namespace = dgd.namespace();
        let ns = namespace.as_deref();
        let selector: Selector = naming::graph_labels(&dgd_name).into_iter().collect();
        let existing: Vec<ResourceClaimTemplate> = match self.reader.list(ns, &selector).await {
            Ok(list) => list,
            Err(e) if child::is_not_served(&e) => {
                if requested {
                    return Err(Error::Unavailable(
                        "gpuMemoryService / inter-pod GMS failover requires DRA (Dynamic Resource Allocation), \
                         but the resource.k8s.io/v1 API is not served by this cluster (it requires Kubernetes 1.34+)"
                            .into(),
                    ));
                }
                return Ok(());
            }
            Err(e) => {
                return Err(Error::api(format!(
                    "list ResourceClaimTemplate in {}",
                    ns.unwrap_or_default()
                ))(e));
            }
        };

        let mut wanted = BTreeSet::new();
        for claim in claims.iter().filter(|c| c.gpus > 0) {
            let class: Option<DeviceClass> = self
                .reader
                .get(None, &claim.device_class)
                .await
                .map_err(Error::api(format!(
                    "get DeviceClass {}",
                    claim.device_class
                )))?;
            if class.is_none() {
                return Err(Error::Missing(format!(
                    "DeviceClass {:?} not found: ensure the GPU DRA driver is installed and the device class is registered",
                    claim.device_class
                )));
            }
            let template = render(dgd, claim)?;
            let name = template.name_any();
            let ensured = child::ensure(
                &*self.reader,
                &*self.writer,
                &template,
                Ownership::ControlledBy(dgd),
            )
            .await?;
            child::record(events, ensured, "ResourceClaimTemplate", ns, &name);
            wanted.insert(name);
        }
        for stale in existing.iter().filter(|t| {
            !wanted.contains(&t.name_any()) && child::is_controlled_by(&t.metadata, dgd)
        }) {
            child::delete_observed(&*self.writer, stale).await?;
            child::record_deleted(events, "ResourceClaimTemplate", ns, &stale.name_any());
        }
        Ok(())
    }
}

/// The templates the components of `dgd` want (GPU count 0 included: such a component gets
/// none).
pub fn resolve(dgd: &DynamoGraphDeployment) -> Result<Vec<GmsClaim>> {
    let mut claims = Vec::new();
    for component in &dgd.spec.components {
        let Some(gms) = component
            .experimental
            .as_ref()
            .and_then(|e| e.gpu_memory_service.as_ref())
        else {
            continue;
        };
        let gpus = main_container_gpus(component).map_err(|e| {
            Error::InvalidSpec(format!(
                "invalid GPU resource requirements for GMS ResourceClaimTemplate for {}: {e}",
                component.name
            ))
        })?;
        claims.push(GmsClaim {
            component: component.name.clone(),
            gpus,
            device_class: gms
                .device_class_name
                .clone()
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| DEFAULT_DEVICE_CLASS.to_string()),
        });
    }
    Ok(claims)
}

/// The template of `claim`, owned by the graph.
pub fn render(dgd: &DynamoGraphDeployment, claim: &GmsClaim) -> Result<ResourceClaimTemplate> {
    let dgd_name = dgd.name_any();
    let mut labels = naming::graph_labels(&dgd_name);
    labels.insert(
        api::labels::DYNAMO_COMPONENT.to_string(),
        claim.component.clone(),
    );
    if let Some(t) = dgd.spec.component(&claim.component).and_then(|c| c.r#type) {
        labels.insert(
            api::labels::DYNAMO_COMPONENT_TYPE.to_string(),
            t.as_str().to_string(),
        );
    }
    Ok(ResourceClaimTemplate {
        metadata: child::owned_meta(
            dgd,
            naming::resource_claim_template_name(&dgd_name, &claim.component),
            labels,
        )?,
        spec: ResourceClaimTemplateSpec {
            metadata: None,
            spec: ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(vec![DeviceRequest {
                        name: DEVICE_REQUEST.to_string(),
                        exactly: Some(ExactDeviceRequest {
                            device_class_name: claim.device_class.clone(),
                            allocation_mode: Some("ExactCount".into()),
                            count: Some(claim.gpus),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
        },
    })
}

/// The GPUs of the component's main container ([`api::gpu::main_container_gpus`]: limits
/// first, then requests; an error for several GPU resource names or a non-integer quantity).
pub use api::gpu::main_container_gpus;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::ComponentType;
    use api::v1beta1::{
        DynamoComponentDeploymentSharedSpec, ExperimentalSpec, GpuMemoryServiceSpec,
    };
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::api::resource::v1::DeviceClassSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::testing::{Double, Verb};
    use std::collections::BTreeMap;

    fn gms_worker(
        name: &str,
        gpus: &str,
        class: Option<&str>,
    ) -> DynamoComponentDeploymentSharedSpec {
        let mut c = component(name, ComponentType::Worker);
        c.experimental = Some(ExperimentalSpec {
            gpu_memory_service: Some(GpuMemoryServiceSpec {
                device_class_name: class.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        });
        let main = &mut c
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0];
        main.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "nvidia.com/gpu".into(),
                Quantity(gpus.into()),
            )])),
            ..Default::default()
        });
        c
    }

    fn device_class(d: &Double, name: &str) {
        d.insert(DeviceClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: DeviceClassSpec::default(),
        });
    }

    fn template(d: &Double, name: &str) -> Option<ResourceClaimTemplate> {
        d.object(Some("ns"), name)
    }

    #[tokio::test]
    async fn creates_templates_then_writes_nothing() {
        let d = Double::new();
        device_class(&d, DEFAULT_DEVICE_CLASS);
        let g = d.insert(dgd(
            "g",
            vec![
                gms_worker("Decode", "2", None),
                component("Frontend", ComponentType::Frontend),
            ],
        ));
        let r = GmsReconciler::new(d.reader(), d.writer());
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ResourceClaimTemplateCreated"]);
        let t = template(&d, "g-decode-gpu").unwrap();
        let request = &t.spec.spec.devices.unwrap().requests.unwrap()[0];
        let exactly = request.exactly.as_ref().unwrap();
        assert_eq!(
            (exactly.device_class_name.as_str(), exactly.count),
            ("gpu.nvidia.com", Some(2))
        );
        assert!(child::is_controlled_by(&t.metadata, &g));

        d.clear_writes();
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn drift_is_restored_and_unrequested_templates_are_deleted() {
        let d = Double::new();
        device_class(&d, "custom");
        let g = d.insert(dgd("g", vec![gms_worker("W", "1", Some("custom"))]));
        let r = GmsReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();

        let mut t = template(&d, "g-w-gpu").unwrap();
        t.spec
            .spec
            .devices
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()[0]
            .exactly
            .as_mut()
            .unwrap()
            .count = Some(8);
        d.insert(t);
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ResourceClaimTemplateUpdated"]);

        // GMS turned off.
        let mut off = g.clone();
        off.spec.components = vec![component("W", ComponentType::Worker)];
        let mut events = Vec::new();
        r.reconcile(&off).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ResourceClaimTemplateDeleted"]);
        assert!(template(&d, "g-w-gpu").is_none());
    }

    #[tokio::test]
    async fn api_or_device_class_missing_fails_only_when_requested() {
        let d = Double::new();
        let g = d.insert(dgd("g", vec![gms_worker("W", "1", None)]));
        let r = GmsReconciler::new(d.reader(), d.writer());
        d.fail_next(
            Verb::List,
            "ResourceClaimTemplate",
            kit::Error::NotFound("the server could not find the requested resource".into()),
        );
        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("resource.k8s.io/v1"));

        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(
            err.to_string()
                .contains("DeviceClass \"gpu.nvidia.com\" not found"),
            "{err}"
        );
        assert!(d.writes().is_empty());

        let plain = d.insert(dgd("plain", vec![component("W", ComponentType::Worker)]));
        d.fail_next(
            Verb::List,
            "ResourceClaimTemplate",
            kit::Error::NotFound("gone".into()),
        );
        r.reconcile(&plain).await.result.unwrap();
    }

    /// Upstream `dra_test.go` `TestGenerateResourceClaimTemplate_*` and `failover_test.go`
    /// `TestGetDeviceClassName`: the device count is main's GPUs, the class defaults to
    /// `gpu.nvidia.com` (unset or empty), a custom class is kept; no GPUs, no template.
    #[test]
    fn resolved_templates() {
        let rows = [
            ("4", None, 4, "gpu.nvidia.com"),
            ("4", Some(""), 4, "gpu.nvidia.com"),
            ("2", Some("gpu.intel.com/xe"), 2, "gpu.intel.com/xe"),
            ("0", None, 0, "gpu.nvidia.com"),
        ];
        for (gpus, class, count, want_class) in rows {
            let g = dgd("myapp", vec![gms_worker("Worker", gpus, class)]);
            let claims = resolve(&g).unwrap();
            assert_eq!(
                claims,
                [GmsClaim {
                    component: "Worker".into(),
                    gpus: count,
                    device_class: want_class.into(),
                }]
            );
            let mut owned = g.clone();
            owned.metadata.uid = Some("uid".into());
            let t = render(&owned, &claims[0]).unwrap();
            assert_eq!(t.metadata.name.as_deref(), Some("myapp-worker-gpu"));
            let request = &t.spec.spec.devices.unwrap().requests.unwrap()[0];
            assert_eq!(request.name, DEVICE_REQUEST);
            let exactly = request.exactly.as_ref().unwrap();
            assert_eq!(
                (
                    exactly.device_class_name.as_str(),
                    exactly.allocation_mode.as_deref(),
                    exactly.count
                ),
                (want_class, Some("ExactCount"), Some(count))
            );
        }
    }

    /// Upstream `TestDGDGMSResourceClaimsReconciler_DRAValidation` (without
    /// `resource.k8s.io/v1`: intra-pod failover alone is fine, inter-pod failover and GMS need
    /// DRA) and `_ToleratesNonGMSComponents`.
    #[tokio::test]
    async fn dra_is_needed_only_for_gms_and_inter_pod_failover() {
        use api::v1beta1::FailoverSpec;
        let with_failover = |mode| {
            let mut c = component("decode", ComponentType::Decode);
            c.experimental = Some(ExperimentalSpec {
                failover: Some(FailoverSpec {
                    mode,
                    num_shadows: None,
                }),
                ..Default::default()
            });
            c
        };
        let rows = [
            (with_failover(Some(GpuMemoryServiceMode::IntraPod)), false),
            (with_failover(Some(GpuMemoryServiceMode::InterPod)), true),
            (gms_worker("decode", "1", None), true),
            (component("decode", ComponentType::Decode), false),
        ];
        for (c, refused) in rows {
            let d = Double::new();
            let g = d.insert(dgd(
                "test-dgd",
                vec![component("frontend", ComponentType::Frontend), c],
            ));
            d.fail_next(
                Verb::List,
                "ResourceClaimTemplate",
                kit::Error::NotFound("the server could not find the requested resource".into()),
            );
            let r = GmsReconciler::new(d.reader(), d.writer());
            match r.reconcile(&g).await.result {
                Ok(()) => assert!(!refused),
                Err(e) => {
                    assert!(refused, "{e}");
                    assert!(e.to_string().contains("requires DRA"), "{e}");
                }
            }
        }
    }

    /// Upstream `..._DoesNotDeleteCheckpointTemplate`: a template of the graph's labels that
    /// another object controls (a DynamoCheckpoint's) is never deleted.
    #[tokio::test]
    async fn templates_the_graph_does_not_control_stay() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let d = Double::new();
        let g = d.insert(dgd(
            "test-dgd",
            vec![component("decode", ComponentType::Decode)],
        ));
        d.insert(ResourceClaimTemplate {
            metadata: ObjectMeta {
                name: Some("checkpoint-gms-abc".into()),
                namespace: Some("ns".into()),
                labels: Some(naming::graph_labels("test-dgd")),
                owner_references: Some(vec![OwnerReference {
                    api_version: "nvidia.com/v1alpha1".into(),
                    kind: "DynamoCheckpoint".into(),
                    name: "ckpt".into(),
                    uid: "ckpt-uid".into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..Default::default()
            },
            spec: Default::default(),
        });
        let r = GmsReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        assert!(template(&d, "checkpoint-gms-abc").is_some());
        assert!(d.writes().is_empty(), "{:?}", d.writes());
    }
}
