//! The EPP (endpoint picker) resources of a graph with an `epp` component.
//!
//! - Legacy Go EPP (`eppConfig` with inline `config`, no `configMapRef`): ConfigMap
//!   `<dgd>-epp-config` with key `epp-config-dynamo.yaml` holding the config as YAML, with
//!   `apiVersion: inference.networking.x-k8s.io/v1alpha1` and `kind: EndpointPickerConfig`
//!   filled in. With `configMapRef` the user owns the ConfigMap; without `eppConfig` (the native
//!   EPP) none is needed.
//! - Always: `inference.networking.k8s.io/v1` InferencePool `<dgd>-pool` selecting the graph's
//!   worker-class pods (`nvidia.com/dynamo-component-class: worker`, on worker, prefill and
//!   decode pods of a graph with an EPP component, in the EPP component's Dynamo namespace) on
//!   port 8000, with the EPP Service (`naming::dcd_name(dgd, epp, None)`, gRPC
//!   port 9002) as its endpoint picker.
//!
//! What the graph no longer needs is deleted: the ConfigMap when the EPP component is gone or
//! no longer carries an inline config, the InferencePool when the EPP component is gone (found
//! in the operator's label-selected InferencePool watch, which also restores drift).
//!
//! When the cluster does not serve the InferencePool API the step fails with a message saying
//! so (install the Gateway API Inference Extension CRDs); it is retried, so installing them
//! later heals the graph.

use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::labels::{
    COMPONENT_CLASS_WORKER, DYNAMO_COMPONENT, DYNAMO_COMPONENT_CLASS, DYNAMO_COMPONENT_TYPE,
    DYNAMO_NAMESPACE,
};
use api::v1beta1::DynamoComponentDeploymentSharedSpec;
use k8s_openapi::api::core::v1::ConfigMap;
use kit::{Event, Reader, Writer};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use crate::child::{self, Ownership};
use crate::error::{Error, Result};
use crate::naming;

/// Key of the EPP configuration in the ConfigMap (the file the EPP pod reads).
pub const CONFIG_KEY: &str = pod_render::epp::CONFIG_FILE;
/// Port of the workers the InferencePool targets (the Dynamo HTTP port).
pub const TARGET_PORT: i64 = pod_render::HTTP_PORT as i64;
/// gRPC port of the EPP Service.
pub const EPP_GRPC_PORT: i64 = pod_render::epp::GRPC_PORT as i64;
/// API group of InferencePool.
pub use pod_render::epp::INFERENCE_POOL_GROUP;

/// The `inference.networking.k8s.io/v1` InferencePool resource.
pub fn inference_pool_resource() -> ApiResource {
    ApiResource {
        group: INFERENCE_POOL_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{INFERENCE_POOL_GROUP}/v1"),
        kind: "InferencePool".into(),
        plural: "inferencepools".into(),
    }
}

kit::json_kind! {
    /// An `inference.networking.k8s.io/v1` InferencePool, typed only as far as a watch cache
    /// needs (the pool is rendered as JSON, see [`render_inference_pool`]).
    pub struct InferencePool = INFERENCE_POOL_GROUP, "v1", "InferencePool", "inferencepools";
}

/// Ensures the EPP ConfigMap and InferencePool.
pub struct EppReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl EppReconciler {
    /// A reconciler reading through `reader` and writing through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Self { reader, writer }
    }

    /// Ensure the EPP resources when the graph has an EPP component; delete what the graph no
    /// longer needs (the ConfigMap without an inline config, both without an EPP component).
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let Some(epp) = dgd.spec.epp_component() else {
            self.prune_config_map(dgd, events).await?;
            return self.prune_pools(dgd, events).await;
        };
        let ns = dgd.namespace();
        let ns = ns.as_deref();
        let owned = Ownership::ControlledBy(dgd);
        match render_config_map(dgd, epp)? {
            Some(cm) => {
                let e = child::ensure(&*self.reader, &*self.writer, &cm, owned).await?;
                child::record(events, e, "ConfigMap", ns, &cm.name_any());
            }
            None => self.prune_config_map(dgd, events).await?,
        }
        let pool = render_inference_pool(dgd, epp)?;
        let e = child::ensure_dynamic(
            &*self.reader,
            &*self.writer,
            &inference_pool_resource(),
            &pool,
            owned,
        )
        .await
        .map_err(unavailable_when_not_served)?;
        child::record(events, e, "InferencePool", ns, &pool.name_any());
        Ok(())
    }

    /// Delete the graph's legacy EPP ConfigMap, if it controls one.
    async fn prune_config_map(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let name = naming::epp_config_map_name(&dgd.name_any());
        child::prune::<ConfigMap>(&*self.reader, &*self.writer, dgd, &name, events).await
    }

    /// Delete the InferencePools the graph controls (it has no `epp` component any more). Read
    /// from the label-selected watch of the graph's pools; an unserved API has none.
    async fn prune_pools(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let ns = dgd.namespace();
        let pools = match child::Listed::<InferencePool>::of(&*self.reader, dgd).await {
            Ok(pools) => pools,
            Err(e) if child::is_not_served(&e) => return Ok(()),
            Err(e) => return Err(Error::api("list InferencePool".to_string())(e)),
        };
        for pool in pools
            .rest()
            .values()
            .filter(|p| child::is_controlled_by(&p.metadata, dgd))
        {
            child::delete_observed(&*self.writer, pool).await?;
            child::record_deleted(events, "InferencePool", ns.as_deref(), &pool.name_any());
        }
        Ok(())
    }
}

/// A read or apply of an unserved kind fails with 404: say what is missing.
fn unavailable_when_not_served(e: Error) -> Error {
    match e {
        Error::Api { source, action } if child::is_not_served(&source) => {
            Error::Unavailable(format!(
                "the InferencePool API ({INFERENCE_POOL_GROUP}/v1) is not served by this cluster; install the Gateway API Inference Extension CRDs ({action}: {source})"
            ))
        }
        other => other,
    }
}

fn epp_labels(
    dgd: &DynamoGraphDeployment,
    epp: &DynamoComponentDeploymentSharedSpec,
) -> std::collections::BTreeMap<String, String> {
    let mut labels = naming::component_labels(&dgd.name_any(), epp);
    labels.insert(DYNAMO_COMPONENT.into(), epp.name.clone());
    labels.insert(DYNAMO_COMPONENT_TYPE.into(), "epp".into());
    labels
}

/// The legacy EPP ConfigMap, when the EPP component carries an inline config.
pub fn render_config_map(
    dgd: &DynamoGraphDeployment,
    epp: &DynamoComponentDeploymentSharedSpec,
) -> Result<Option<ConfigMap>> {
    let Some(config) = epp.epp_config.as_ref() else {
        return Ok(None);
    };
    if config.config_map_ref.is_some() {
        return Ok(None);
    }
    let Some(inline) = config.config.clone() else {
        return Err(Error::InvalidSpec(
            "EPP configuration is required: either eppConfig.configMapRef or eppConfig.config must be specified".into(),
        ));
    };
    let mut inline = match inline {
        Value::Object(map) => map,
        other => {
            return Err(Error::InvalidSpec(format!(
                "eppConfig.config must be an object, got {other}"
            )));
        }
    };
    inline.insert(
        "apiVersion".into(),
        json!("inference.networking.x-k8s.io/v1alpha1"),
    );
    inline.insert("kind".into(), json!("EndpointPickerConfig"));
    let yaml = serde_yaml::to_string(&Value::Object(inline))
        .map_err(|e| Error::InvalidSpec(format!("failed to marshal EPP config: {e}")))?;
    Ok(Some(ConfigMap {
        metadata: child::owned_meta(
            dgd,
            naming::epp_config_map_name(&dgd.name_any()),
            epp_labels(dgd, epp),
        )?,
        data: Some([(CONFIG_KEY.to_string(), yaml)].into()),
        ..Default::default()
    }))
}

/// The InferencePool of the graph, pointing at the EPP Service. It selects every worker-class
/// pod (`worker`, `prefill`, `decode`: they carry the component-class label `worker` in a graph
/// with an EPP component) of the EPP's Dynamo namespace.
pub fn render_inference_pool(
    dgd: &DynamoGraphDeployment,
    epp: &DynamoComponentDeploymentSharedSpec,
) -> Result<DynamicObject> {
    let dgd_name = dgd.name_any();
    let namespace = dgd.namespace().unwrap_or_default();
    let dynamo_namespace =
        naming::dynamo_namespace(epp.global_dynamo_namespace, &namespace, &dgd_name);
    let resource = inference_pool_resource();
    let mut pool = DynamicObject::new(&naming::inference_pool_name(&dgd_name), &resource)
        .within(&namespace)
        .data(json!({
            "spec": {
                "targetPorts": [{"number": TARGET_PORT}],
                "selector": {"matchLabels": {
                    DYNAMO_COMPONENT_CLASS: COMPONENT_CLASS_WORKER,
                    DYNAMO_NAMESPACE: dynamo_namespace,
                }},
                "endpointPickerRef": {
                    "kind": "Service",
                    "name": naming::dcd_name(dgd, epp, None),
                    "port": {"number": EPP_GRPC_PORT},
                },
            }
        }));
    pool.metadata.labels = Some(epp_labels(dgd, epp));
    pool.metadata.owner_references = Some(vec![child::owner_reference(dgd)?]);
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::ComponentType;
    use api::common::EppConfig;
    use k8s_openapi::api::core::v1::ConfigMapKeySelector;
    use kit::testing::{Double, Verb};

    fn graph(d: &Double, config: Option<EppConfig>) -> DynamoGraphDeployment {
        let mut epp = component("Epp", ComponentType::Epp);
        epp.epp_config = config;
        d.insert(dgd("g", vec![epp, component("W", ComponentType::Worker)]))
    }

    fn inline() -> EppConfig {
        EppConfig {
            config_map_ref: None,
            config: Some(json!({"plugins": [{"type": "kv-cache-scorer"}]})),
        }
    }

    async fn pool(d: &Double) -> Option<DynamicObject> {
        kit::Reader::get_dynamic(d, &inference_pool_resource(), Some("ns"), "g-pool")
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn creates_config_map_and_pool_then_writes_nothing() {
        let d = Double::new();
        let g = graph(&d, Some(inline()));
        let r = EppReconciler::new(d.reader(), d.writer());
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(
            reasons(&events),
            ["ConfigMapCreated", "InferencePoolCreated"]
        );
        let cm: ConfigMap = d.object(Some("ns"), "g-epp-config").unwrap();
        let yaml = &cm.data.unwrap()[CONFIG_KEY];
        assert!(yaml.contains("kind: EndpointPickerConfig"), "{yaml}");
        assert!(yaml.contains("kv-cache-scorer"), "{yaml}");
        let p = pool(&d).await.unwrap();
        assert_eq!(p.data["spec"]["endpointPickerRef"]["name"], "g-epp");
        assert_eq!(
            p.data["spec"]["selector"]["matchLabels"],
            json!({DYNAMO_COMPONENT_CLASS: COMPONENT_CLASS_WORKER, DYNAMO_NAMESPACE: "ns-g"})
        );
        assert!(child::is_controlled_by(&p.metadata, &g));

        d.clear_writes();
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn drift_on_the_pool_is_restored() {
        let d = Double::new();
        let g = graph(&d, None);
        let r = EppReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        assert!(
            d.object::<ConfigMap>(Some("ns"), "g-epp-config").is_none(),
            "native EPP needs no ConfigMap"
        );
        let mut p = pool(&d).await.unwrap();
        p.data["spec"]["targetPorts"] = json!([{"number": 1234}]);
        let p = kit::Writer::patch_dynamic(
            &d,
            &inference_pool_resource(),
            Some("ns"),
            "g-pool",
            &kit::Patch::Merge(json!({"spec": p.data["spec"]})),
        )
        .await
        .unwrap();
        assert!(p.changed);
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["InferencePoolUpdated"]);
        assert_eq!(
            pool(&d).await.unwrap().data["spec"]["targetPorts"][0]["number"],
            TARGET_PORT
        );
    }

    #[tokio::test]
    async fn user_config_map_ref_and_no_epp_write_no_config_map() {
        let d = Double::new();
        let g = graph(
            &d,
            Some(EppConfig {
                config_map_ref: Some(ConfigMapKeySelector {
                    name: "mine".into(),
                    key: "cfg.yaml".into(),
                    ..Default::default()
                }),
                config: None,
            }),
        );
        EppReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap();
        assert_eq!(d.writes().len(), 1, "only the pool");
        let none = d.insert(dgd("plain", vec![component("W", ComponentType::Worker)]));
        d.clear_writes();
        EppReconciler::new(d.reader(), d.writer())
            .reconcile(&none)
            .await
            .result
            .unwrap();
        assert!(d.writes().is_empty());
    }

    /// The inline config's ConfigMap goes when the EPP switches to the native form or goes
    /// away; one the graph does not control stays.
    #[tokio::test]
    async fn a_config_map_no_longer_needed_is_deleted_and_a_foreign_one_kept() {
        let d = Double::new();
        let g = graph(&d, Some(inline()));
        let r = EppReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        let mut native = g.clone();
        native.spec.components[0].epp_config = None;
        let mut events = Vec::new();
        r.reconcile(&native).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ConfigMapDeleted"]);
        assert!(d.object::<ConfigMap>(Some("ns"), "g-epp-config").is_none());
        d.clear_writes();
        r.reconcile(&native).await.result.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());

        let mut foreign = ConfigMap::default();
        foreign.metadata.name = Some("g-epp-config".into());
        foreign.metadata.namespace = Some("ns".into());
        d.insert(foreign);
        let mut without = g.clone();
        without.spec.components.remove(0);
        let mut events = Vec::new();
        r.reconcile(&without)
            .await
            .events_into(&mut events)
            .unwrap();
        assert_eq!(
            reasons(&events),
            ["InferencePoolDeleted"],
            "the ConfigMap is not ours"
        );
        assert!(d.object::<ConfigMap>(Some("ns"), "g-epp-config").is_some());
    }

    #[test]
    fn the_typed_kind_is_the_rendered_one() {
        assert_eq!(
            kit::object::resource::<InferencePool>(),
            inference_pool_resource()
        );
    }

    /// The pool goes with the `epp` component; a pool the graph does not control stays, and a
    /// cluster that does not serve the API has nothing to delete.
    #[tokio::test]
    async fn the_pool_is_deleted_when_the_epp_component_goes() {
        let d = Double::new();
        let g = graph(&d, None);
        let r = EppReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        assert!(pool(&d).await.is_some());
        let mut without = g.clone();
        without.spec.components.remove(0);
        let mut events = Vec::new();
        r.reconcile(&without)
            .await
            .events_into(&mut events)
            .unwrap();
        assert_eq!(reasons(&events), ["InferencePoolDeleted"]);
        assert!(pool(&d).await.is_none());
        d.clear_writes();
        r.reconcile(&without).await.result.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());

        let mut foreign = InferencePool::default();
        foreign.metadata.name = Some("g-pool".into());
        foreign.metadata.namespace = Some("ns".into());
        foreign.metadata.labels = Some(naming::graph_labels("g"));
        d.insert(foreign);
        r.reconcile(&without).await.result.unwrap();
        assert!(pool(&d).await.is_some(), "not the graph's: kept");

        d.fail_next(
            Verb::List,
            "InferencePool",
            kit::Error::NotFound("the server could not find the requested resource".into()),
        );
        r.reconcile(&without).await.result.unwrap();
    }

    #[tokio::test]
    async fn unserved_inference_pool_api_is_a_clear_error() {
        let d = Double::new();
        let g = graph(&d, None);
        d.fail_next(
            Verb::Apply,
            "InferencePool",
            kit::Error::NotFound("the server could not find the requested resource".into()),
        );
        let err = EppReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert!(
            err.to_string().contains("Gateway API Inference Extension"),
            "{err}"
        );

        // An unserved group answers a read with a bare `404 page not found`.
        let page_not_found = kube::Error::Api(Box::new(kube::core::Status {
            code: 404,
            message: "404 page not found".into(),
            ..Default::default()
        }));
        d.fail_next(Verb::Get, "InferencePool", kit::Error::Kube(page_not_found));
        let err = EppReconciler::new(d.reader(), d.writer())
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
    }
}
