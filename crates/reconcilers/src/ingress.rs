//! How a graph's frontends are reached from outside the cluster: per frontend component an
//! Ingress, an Istio VirtualService and/or a Gateway API HTTPRoute, named after the component's
//! Service (`<dgd>-<component>`, lowercased, dots as dashes), in the graph's namespace,
//! controlled by the graph (on both pathways), routing every path (`/`, prefix) to the Service's
//! HTTP port (8000).
//!
//! What a frontend gets ([`resolve`]):
//! - **A v1alpha1 graph's own `ingress`** on that service (kept through conversion) decides
//!   alone, as upstream: an Ingress when it is enabled with `ingressControllerClassName`
//!   (`tls.secretName` → TLS for the host), a VirtualService when it is enabled with
//!   `useVirtualService` and `virtualServiceGateway`; its `labels` and `annotations` go on what is
//!   rendered. Disabled, it opts the frontend out of the operator-wide default. (Upstream renders
//!   its VirtualService only when the operator configuration also names a gateway, and drops
//!   its labels and annotations; here what the graph says is rendered.)
//! - **Otherwise the operator's settings** ([`IngressConfig`], configuration `ingress`): an
//!   Ingress of class `controllerClassName` (TLS from `controllerTLSSecretName`), a
//!   VirtualService on `virtualServiceGateway`, an HTTPRoute attached to `httpRouteGateway`
//!   (`<namespace>/<name>` or a Gateway in the graph's namespace).
//!
//! The host is `<hostPrefix><host>.<hostSuffix>`: the graph's name and the configured suffix
//! (`local` without one) by default.
//!
//! What a frontend no longer gets is deleted (the graph's label-selected watches of the three
//! kinds also bring back drift and deletions). A VirtualService or HTTPRoute the cluster cannot
//! serve fails the step with what to install; installing the CRD reconciles the graphs that have
//! a frontend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::v1alpha1::IngressSpec;
use api::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec as KubeIngressSpec, IngressTLS, ServiceBackendPort,
};
use kit::{Event, Kind, Reader, Writer};
use kube::ResourceExt;
use kube::api::ApiResource;
use serde_json::{Value, json};

use crate::child::{self, Ownership};
use crate::error::{Error, Result};
use crate::naming;

/// Host suffix when none is configured (upstream's `DefaultIngressSuffix`).
pub const DEFAULT_HOST_SUFFIX: &str = "local";
/// The port every route targets: the frontend Service's HTTP port.
pub const SERVICE_PORT: i32 = pod_render::HTTP_PORT;
/// API group of Istio's VirtualService.
pub const ISTIO_NETWORKING_GROUP: &str = "networking.istio.io";
/// API group of the Gateway API's HTTPRoute.
pub const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

kit::json_kind! {
    /// An Istio `networking.istio.io/v1beta1` VirtualService (the version upstream writes).
    pub struct VirtualService = ISTIO_NETWORKING_GROUP, "v1beta1", "VirtualService", "virtualservices";
}

kit::json_kind! {
    /// A Gateway API `gateway.networking.k8s.io/v1` HTTPRoute.
    pub struct HttpRoute = GATEWAY_API_GROUP, "v1", "HTTPRoute", "httproutes";
}

/// The VirtualService kind.
pub fn virtual_service_resource() -> ApiResource {
    kit::object::resource::<VirtualService>()
}

/// The HTTPRoute kind.
pub fn http_route_resource() -> ApiResource {
    kit::object::resource::<HttpRoute>()
}

/// The operator-wide ingress settings (configuration `ingress`); all unset: frontends are not
/// exposed unless a v1alpha1 graph asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressConfig {
    /// Ingress class of the frontends' Ingresses (`controllerClassName`).
    pub controller_class_name: Option<String>,
    /// Secret with the TLS certificate of those Ingresses (`controllerTLSSecretName`).
    pub controller_tls_secret_name: Option<String>,
    /// Domain after the graph's name in every host (`hostSuffix`; `local` when unset).
    pub host_suffix: Option<String>,
    /// Istio gateway of the frontends' VirtualServices (`virtualServiceGateway`).
    pub virtual_service_gateway: Option<String>,
    /// Gateway (`<namespace>/<name>`, or `<name>` in the graph's namespace) the frontends'
    /// HTTPRoutes attach to (`httpRouteGateway`).
    pub http_route_gateway: Option<String>,
}

/// How one frontend is exposed: what [`render`] turns into objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exposure {
    /// The host every route answers.
    pub host: String,
    /// An Ingress of this class.
    pub ingress_class: Option<String>,
    /// TLS on the Ingress, with this Secret (`Some(None)`: TLS with the controller's default).
    pub tls_secret: Option<Option<String>>,
    /// A VirtualService on this Istio gateway.
    pub virtual_service_gateway: Option<String>,
    /// An HTTPRoute attached to this Gateway (`<namespace>/<name>` or `<name>`).
    pub http_route_gateway: Option<String>,
    /// Extra labels of what is rendered.
    pub labels: BTreeMap<String, String>,
    /// Annotations of what is rendered.
    pub annotations: BTreeMap<String, String>,
}

/// How `component` of `dgd` is exposed, if at all: its v1alpha1 `ingress` (`preserved`) when the
/// graph has one for it, else the operator's settings (see the module docs). Only frontends are
/// exposed.
pub fn resolve(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    preserved: Option<&IngressSpec>,
    config: &IngressConfig,
) -> Option<Exposure> {
    if component.r#type != Some(ComponentType::Frontend) {
        return None;
    }
    let graph = dgd.name_any();
    let exposure = match preserved {
        Some(spec) => from_alpha(spec, &graph)?,
        None => Exposure {
            host: host(None, &graph, config.host_suffix.as_deref()),
            ingress_class: config.controller_class_name.clone(),
            tls_secret: config.controller_tls_secret_name.clone().map(Some),
            virtual_service_gateway: config.virtual_service_gateway.clone(),
            http_route_gateway: config.http_route_gateway.clone(),
            ..Exposure::default()
        },
    };
    let renders = exposure.ingress_class.is_some()
        || exposure.virtual_service_gateway.is_some()
        || exposure.http_route_gateway.is_some();
    renders.then_some(exposure)
}

/// A v1alpha1 service's `ingress`, as upstream reads it (an empty host is the graph's name).
fn from_alpha(spec: &IngressSpec, graph: &str) -> Option<Exposure> {
    if !spec.enabled {
        return None;
    }
    let base = spec
        .host
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(graph);
    let prefixed = format!("{}{base}", spec.host_prefix.as_deref().unwrap_or_default());
    let class = spec.ingress_controller_class_name.clone();
    Some(Exposure {
        host: host(Some(&prefixed), graph, spec.host_suffix.as_deref()),
        tls_secret: class
            .as_ref()
            .and(spec.tls.as_ref())
            .map(|tls| tls.secret_name.clone()),
        ingress_class: class,
        virtual_service_gateway: spec
            .virtual_service_gateway
            .clone()
            .filter(|_| spec.use_virtual_service),
        http_route_gateway: None,
        labels: spec.labels.clone(),
        annotations: spec.annotations.clone(),
    })
}

/// `<host or graph>.<suffix or local>`.
fn host(host: Option<&str>, graph: &str, suffix: Option<&str>) -> String {
    let suffix = suffix
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_HOST_SUFFIX);
    format!("{}.{suffix}", host.unwrap_or(graph))
}

/// Name of a frontend's Ingress, VirtualService and HTTPRoute: its Service's name.
pub fn name(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
) -> String {
    naming::normalize_kube_name(&naming::component_base_name(
        &dgd.name_any(),
        &component.name,
    ))
}

/// The objects exposing one frontend.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    /// Its Ingress.
    pub ingress: Option<Ingress>,
    /// Its VirtualService.
    pub virtual_service: Option<VirtualService>,
    /// Its HTTPRoute.
    pub http_route: Option<HttpRoute>,
}

/// The objects of `exposure` for `component` of `dgd`.
pub fn render(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    exposure: &Exposure,
) -> Result<Rendered> {
    let name = name(dgd, component);
    let mut labels = exposure.labels.clone();
    labels.extend(naming::component_labels(&dgd.name_any(), component));
    let mut meta = child::owned_meta(dgd, &name, labels)?;
    if !exposure.annotations.is_empty() {
        meta.annotations = Some(exposure.annotations.clone());
    }
    let host = &exposure.host;
    let ingress = exposure.ingress_class.as_ref().map(|class| Ingress {
        metadata: meta.clone(),
        spec: Some(ingress_spec(
            &name,
            host,
            class,
            exposure.tls_secret.as_ref(),
        )),
        status: None,
    });
    let virtual_service = exposure
        .virtual_service_gateway
        .as_ref()
        .map(|gateway| VirtualService {
            metadata: meta.clone(),
            spec: json!({
                "hosts": [host],
                "gateways": [gateway],
                "http": [{
                    "match": [{"uri": {"prefix": "/"}}],
                    "route": [{"destination": {"host": name, "port": {"number": SERVICE_PORT}}}],
                }],
            }),
            status: Value::Null,
        });
    let http_route = exposure
        .http_route_gateway
        .as_ref()
        .map(|gateway| HttpRoute {
            metadata: meta.clone(),
            spec: json!({
                "parentRefs": [parent_ref(gateway)],
                "hostnames": [host],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [{
                        "group": "", "kind": "Service", "name": name,
                        "port": SERVICE_PORT, "weight": 1,
                    }],
                }],
            }),
            status: Value::Null,
        });
    Ok(Rendered {
        ingress,
        virtual_service,
        http_route,
    })
}

fn ingress_spec(
    service: &str,
    host: &str,
    class: &str,
    tls_secret: Option<&Option<String>>,
) -> KubeIngressSpec {
    let path = HTTPIngressPath {
        path: Some("/".into()),
        path_type: "Prefix".into(),
        backend: IngressBackend {
            service: Some(IngressServiceBackend {
                name: service.into(),
                port: Some(ServiceBackendPort {
                    number: Some(SERVICE_PORT),
                    name: None,
                }),
            }),
            resource: None,
        },
    };
    KubeIngressSpec {
        ingress_class_name: Some(class.into()),
        rules: Some(vec![IngressRule {
            host: Some(host.into()),
            http: Some(HTTPIngressRuleValue { paths: vec![path] }),
        }]),
        tls: tls_secret.map(|secret| {
            vec![IngressTLS {
                hosts: Some(vec![host.into()]),
                secret_name: secret.clone(),
            }]
        }),
        default_backend: None,
    }
}

/// A Gateway reference: `<namespace>/<name>`, or `<name>` (the route's namespace).
fn parent_ref(gateway: &str) -> Value {
    let mut reference = json!({"group": GATEWAY_API_GROUP, "kind": "Gateway"});
    match gateway.split_once('/') {
        Some((namespace, name)) => {
            reference["namespace"] = json!(namespace);
            reference["name"] = json!(name);
        }
        None => reference["name"] = json!(gateway),
    }
    reference
}

/// Ensures the Ingresses, VirtualServices and HTTPRoutes of a graph's frontends.
pub struct IngressReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    config: IngressConfig,
}

impl IngressReconciler {
    /// A reconciler reading through `reader`, writing through `writer`, exposing frontends as
    /// `config` says when the graph does not.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: IngressConfig) -> Self {
        Self {
            reader,
            writer,
            config,
        }
    }

    /// Ensure what each frontend needs and delete what none needs any more. Returns the step's
    /// events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let preserved = api::conversion::preserved_alpha_ingresses(dgd);
        let mut wanted = Wanted::default();
        for component in &dgd.spec.components {
            let Some(exposure) =
                resolve(dgd, component, preserved.get(&component.name), &self.config)
            else {
                continue;
            };
            let rendered = render(dgd, component, &exposure)?;
            if let Some(ingress) = rendered.ingress {
                wanted
                    .ingresses
                    .insert(self.ensure(dgd, &ingress, events).await?);
            }
            if let Some(vs) = rendered.virtual_service {
                wanted
                    .virtual_services
                    .insert(self.ensure(dgd, &vs, events).await?);
            }
            if let Some(route) = rendered.http_route {
                wanted
                    .http_routes
                    .insert(self.ensure(dgd, &route, events).await?);
            }
        }
        self.prune::<Ingress>(dgd, &wanted.ingresses, events)
            .await?;
        self.prune::<VirtualService>(dgd, &wanted.virtual_services, events)
            .await?;
        self.prune::<HttpRoute>(dgd, &wanted.http_routes, events)
            .await
    }

    /// Converge `desired`; its name.
    async fn ensure<K: Kind>(
        &self,
        dgd: &DynamoGraphDeployment,
        desired: &K,
        events: &mut Vec<Event>,
    ) -> Result<String> {
        let name = desired.name_any();
        let kind = K::kind(&());
        let e = child::ensure(
            &*self.reader,
            &*self.writer,
            desired,
            Ownership::ControlledBy(dgd),
        )
        .await
        .map_err(unavailable_when_not_served::<K>)?;
        child::record(events, e, &kind, dgd.namespace().as_deref(), &name);
        Ok(name)
    }

    /// Delete the graph's objects of kind `K` it controls that are not `wanted` (listed from the
    /// graph's label-selected watch; an unserved kind has none).
    async fn prune<K: Kind>(
        &self,
        dgd: &DynamoGraphDeployment,
        wanted: &BTreeSet<String>,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let kind = K::kind(&());
        let listed = match child::Listed::<K>::of(&*self.reader, dgd).await {
            Ok(listed) => listed,
            Err(e) if child::is_not_served(&e) => return Ok(()),
            Err(e) => return Err(Error::api(format!("list {kind}"))(e)),
        };
        let ns = dgd.namespace();
        for (name, observed) in listed.rest() {
            if wanted.contains(name) || !child::is_controlled_by(observed.meta(), dgd) {
                continue;
            }
            child::delete_observed(&*self.writer, observed).await?;
            child::record_deleted(events, &kind, ns.as_deref(), name);
        }
        Ok(())
    }
}

/// The names each kind keeps.
#[derive(Default)]
struct Wanted {
    ingresses: BTreeSet<String>,
    virtual_services: BTreeSet<String>,
    http_routes: BTreeSet<String>,
}

/// An apply of an unserved kind fails with 404: say what to install.
fn unavailable_when_not_served<K: Kind>(e: Error) -> Error {
    match e {
        Error::Api { source, action } if child::is_not_served(&source) => {
            let r = kit::object::resource::<K>();
            let (what, setting) = if r.group == ISTIO_NETWORKING_GROUP {
                ("Istio's CRDs", "virtualServiceGateway")
            } else {
                ("the Gateway API CRDs", "httpRouteGateway")
            };
            Error::Unavailable(format!(
                "the {} API ({}) is not served by this cluster; install {what}, or ask for no {} (the operator's ingress.{setting}, the graph's v1alpha1 ingress) ({action}: {source})",
                r.kind, r.api_version, r.kind
            ))
        }
        other => other,
    }
}

#[cfg(test)]
#[path = "ingress_tests.rs"]
mod tests;
