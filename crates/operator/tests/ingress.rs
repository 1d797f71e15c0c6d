//! Frontends exposed outside the cluster, through the operator binary on the test control plane:
//! with the ingress settings given, each frontend of a graph gets an Ingress (always served), an
//! Istio VirtualService and a Gateway API HTTPRoute (the real CRDs of `testdata/istio-crds/` and
//! `testdata/gateway-api-crds/`), on both pathways. While a CRD is missing the graph says what to
//! install; installing it while the operator runs is followed. Drift is restored and a deleted
//! route recreated.

mod common;

use std::time::Duration;

use api::DynamoGraphDeployment;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;
use testkit::ControlPlane;

use common::graphs::{self, Pathway, Run};
use common::{Operator, Spawn, eventually};

const GRAPH: &str = "v1beta1/vllm-agg.yaml";
const DEADLINE: Duration = Duration::from_secs(120);
const SELECTOR: (&str, &str) = ("dynamo-test", "ingress");
const CRDS: [&str; 2] = [
    "virtualservices.networking.istio.io",
    "httproutes.gateway.networking.k8s.io",
];

fn virtual_services() -> ApiResource {
    ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "networking.istio.io",
        "v1beta1",
        "VirtualService",
    ))
}

fn http_routes() -> ApiResource {
    ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ))
}

/// Removes the two CRDs if an earlier run on this control plane installed them.
async fn remove_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CRDS {
        if crds.get_opt(name).await.unwrap().is_some() {
            crds.delete(name, &DeleteParams::default()).await.unwrap();
        }
    }
    eventually("the CRDs gone", DEADLINE, || async {
        for name in CRDS {
            if crds.get_opt(name).await.unwrap().is_some() {
                return false;
            }
        }
        true
    })
    .await;
}

/// The graph of `run` as the server holds it.
async fn graph(run: &Run) -> DynamoGraphDeployment {
    let dgds: Api<DynamoGraphDeployment> = run.ns.api();
    dgds.get(&run.graph.name_any()).await.unwrap()
}

/// The `Ready` condition's message of `run`'s graph.
async fn ready_message(run: &Run) -> String {
    graph(run)
        .await
        .status
        .and_then(|s| kit::conditions::find(&s.conditions, kit::conditions::READY).cloned())
        .map(|c| format!("{} {}: {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

#[tokio::test]
async fn frontends_get_an_ingress_a_virtual_service_and_an_http_route() {
    let cp = ControlPlane::shared().await;
    graphs::prepare(cp).await;
    remove_crds(&cp.client()).await;
    let operator = Operator::spawn(
        cp,
        Spawn {
            identity: "dynamo-operator-ingress",
            extra_args: vec![
                format!("--selector={}={}", SELECTOR.0, SELECTOR.1),
                "--ingress-controller-class-name=nginx".into(),
                "--ingress-controller-tls-secret-name=frontend-tls".into(),
                "--ingress-host-suffix=example.com".into(),
                "--istio-virtual-service-gateway=istio-system/public".into(),
                "--http-route-gateway=gateways/public".into(),
            ],
            ..Spawn::default()
        },
    );
    let file = testkit::testdata::path(GRAPH);
    let mut runs = Vec::new();
    for pathway in [Pathway::Component, Pathway::Grove] {
        let run = graphs::start(cp, &file, pathway).await;
        let dgds: Api<DynamoGraphDeployment> = run.ns.api();
        let label = json!({"metadata": {"labels": {SELECTOR.0: SELECTOR.1}}});
        dgds.patch(
            &run.graph.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await
        .unwrap();
        runs.push(run);
    }
    let name = format!("{}-frontend", runs[0].graph.name_any());
    let host = format!("{}.example.com", runs[0].graph.name_any());

    // Istio's CRD is not there: the Ingress is, and the graph says what to install.
    for run in &runs {
        let ingresses: Api<Ingress> = run.ns.api();
        eventually("the Ingress", DEADLINE, || async {
            ingresses.get_opt(&name).await.unwrap().is_some()
        })
        .await;
        eventually("Ready=False naming Istio", DEADLINE, || async {
            let message = ready_message(run).await;
            message.starts_with("False failed_to_reconcile_the_resources: failed to sync the main component ingress")
                && message.contains("install Istio's CRDs")
        })
        .await;
    }

    // Both CRDs installed while the operator runs: every graph gets both routes and is Ready.
    cp.install_crd_files(&[
        testkit::testdata::path("istio-crds").join("networking.istio.io_virtualservices.yaml"),
        testkit::testdata::path("gateway-api-crds")
            .join("gateway.networking.k8s.io_httproutes.yaml"),
    ])
    .await
    .unwrap();
    let waiting = graphs::wait_ready(cp, &runs, Duration::from_secs(180)).await;
    assert!(
        waiting.is_empty(),
        "not Ready: {waiting:#?}\n--- operator log (tail) ---\n{}",
        graphs::tail(&operator.log_text(), 60)
    );

    for run in &runs {
        let owner = graph(run).await.uid().unwrap();
        let controlled_by_graph = |meta: &kube::api::ObjectMeta| {
            meta.owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == owner)
        };
        let ingresses: Api<Ingress> = run.ns.api();
        let ingress = ingresses.get(&name).await.unwrap();
        assert!(controlled_by_graph(&ingress.metadata), "{:?}", run.pathway);
        let spec = ingress.spec.clone().unwrap();
        assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
        let rule = &spec.rules.unwrap()[0];
        assert_eq!(rule.host.as_deref(), Some(host.as_str()));
        let path = &rule.http.as_ref().unwrap().paths[0];
        assert_eq!(
            (path.path.as_deref(), path.path_type.as_str()),
            (Some("/"), "Prefix")
        );
        let backend = path.backend.service.as_ref().unwrap();
        assert_eq!(backend.name, name, "the frontend Service");
        assert_eq!(backend.port.as_ref().unwrap().number, Some(8000));
        let tls = &spec.tls.unwrap()[0];
        assert_eq!(tls.secret_name.as_deref(), Some("frontend-tls"));

        let vs: Api<DynamicObject> =
            Api::namespaced_with(cp.client(), run.ns.name(), &virtual_services());
        let vs = vs.get(&name).await.unwrap();
        assert!(controlled_by_graph(&vs.metadata));
        assert_eq!(vs.data["spec"]["hosts"], json!([host]));
        assert_eq!(vs.data["spec"]["gateways"], json!(["istio-system/public"]));
        assert_eq!(
            vs.data["spec"]["http"][0]["route"][0]["destination"],
            json!({"host": name, "port": {"number": 8000}})
        );

        let routes: Api<DynamicObject> =
            Api::namespaced_with(cp.client(), run.ns.name(), &http_routes());
        let route = routes.get(&name).await.unwrap();
        assert!(controlled_by_graph(&route.metadata));
        assert_eq!(route.data["spec"]["hostnames"], json!([host]));
        assert_eq!(
            route.data["spec"]["parentRefs"][0]["name"], "public",
            "{}",
            route.data["spec"]
        );
        assert_eq!(route.data["spec"]["parentRefs"][0]["namespace"], "gateways");
        let backend = &route.data["spec"]["rules"][0]["backendRefs"][0];
        assert_eq!(
            (&backend["name"], &backend["port"]),
            (&json!(name), &json!(8000))
        );

        // A user's edit is reverted; a deleted route comes back.
        ingresses
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"ingressClassName": "other"}})),
            )
            .await
            .unwrap();
        routes
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        eventually(
            "the Ingress restored and the route back",
            DEADLINE,
            || async {
                let class = ingresses
                    .get(&name)
                    .await
                    .unwrap()
                    .spec
                    .and_then(|s| s.ingress_class_name);
                class.as_deref() == Some("nginx") && routes.get_opt(&name).await.unwrap().is_some()
            },
        )
        .await;
    }
}
