use super::*;
use crate::testutil::{component, dgd, reasons};
use kit::testing::{Double, Verb};

fn config(class: bool, vs: bool, route: bool) -> IngressConfig {
    IngressConfig {
        controller_class_name: class.then(|| "nginx".into()),
        controller_tls_secret_name: class.then(|| "tls-cert".into()),
        host_suffix: Some("example.com".into()),
        virtual_service_gateway: vs.then(|| "istio-system/public".into()),
        http_route_gateway: route.then(|| "gateways/public".into()),
    }
}

fn graph(d: &Double) -> DynamoGraphDeployment {
    d.insert(dgd(
        "g",
        vec![
            component("Frontend", ComponentType::Frontend),
            component("Worker", ComponentType::Worker),
        ],
    ))
}

/// A v1alpha1 graph with `ingress` on its frontend service, read as v1beta1.
fn alpha_graph(d: &Double, ingress: Value) -> DynamoGraphDeployment {
    let mut g: api::v1alpha1::DynamoGraphDeployment = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"services": {"Frontend": {"componentType": "frontend",
            "extraPodSpec": {"mainContainer": {"image": "frontend:1"}},
            "ingress": ingress}}},
    }))
    .unwrap();
    g.metadata.generation = Some(1);
    d.insert(api::conversion::to_v1beta1(&g))
}

/// Upstream's host rule (`getIngressHost`, `GenerateDefaultIngressSpec`): the graph's name and
/// the configured suffix, `local` without one; a v1alpha1 spec's prefix, host and suffix.
#[test]
fn hosts() {
    let g = dgd("g", vec![]);
    let frontend = component("Frontend", ComponentType::Frontend);
    let class = |suffix: Option<&str>| IngressConfig {
        controller_class_name: Some("nginx".into()),
        host_suffix: suffix.map(Into::into),
        ..IngressConfig::default()
    };
    let alpha = |v: Value| serde_json::from_value::<IngressSpec>(v).unwrap();
    let rows: [(IngressConfig, Option<IngressSpec>, &str); 5] = [
        (class(None), None, "g.local"),
        (class(Some("")), None, "g.local"),
        (class(Some("example.com")), None, "g.example.com"),
        (
            class(Some("ignored.com")),
            Some(alpha(
                json!({"enabled": true, "ingressControllerClassName": "c",
                "host": "api", "hostPrefix": "v1-", "hostSuffix": "corp.net"}),
            )),
            "v1-api.corp.net",
        ),
        (
            IngressConfig::default(),
            Some(alpha(
                json!({"enabled": true, "ingressControllerClassName": "c"}),
            )),
            "g.local",
        ),
    ];
    for (config, preserved, host) in rows {
        let e = resolve(&g, &frontend, preserved.as_ref(), &config).unwrap();
        assert_eq!(e.host, host, "{config:?} {preserved:?}");
    }
}

/// Which kinds a frontend gets: one row per setting; only frontends; a v1alpha1 spec decides
/// alone (disabled: none, even when the operator exposes frontends).
#[test]
fn what_each_setting_renders() {
    let g = dgd("g", vec![]);
    let frontend = component("Frontend", ComponentType::Frontend);
    let worker = component("Worker", ComponentType::Worker);
    let kinds = |e: Option<Exposure>| {
        e.map(|e| {
            (
                e.ingress_class.is_some(),
                e.virtual_service_gateway.is_some(),
                e.http_route_gateway.is_some(),
            )
        })
    };
    let alpha = |v: Value| Some(serde_json::from_value::<IngressSpec>(v).unwrap());
    let rows = [
        (&frontend, config(false, false, false), None, None),
        (
            &frontend,
            config(true, false, false),
            None,
            Some((true, false, false)),
        ),
        (
            &frontend,
            config(false, true, false),
            None,
            Some((false, true, false)),
        ),
        (
            &frontend,
            config(false, false, true),
            None,
            Some((false, false, true)),
        ),
        (
            &frontend,
            config(true, true, true),
            None,
            Some((true, true, true)),
        ),
        (&worker, config(true, true, true), None, None),
        (
            &frontend,
            config(true, true, true),
            alpha(json!({"enabled": false})),
            None,
        ),
        (
            &frontend,
            config(false, false, false),
            alpha(
                json!({"enabled": true, "useVirtualService": true, "virtualServiceGateway": "gw"}),
            ),
            Some((false, true, false)),
        ),
        (
            &frontend,
            config(false, false, false),
            alpha(
                json!({"enabled": true, "virtualServiceGateway": "gw", "ingressControllerClassName": "c"}),
            ),
            Some((true, false, false)),
        ),
    ];
    for (i, (component, config, preserved, expected)) in rows.into_iter().enumerate() {
        let got = kinds(resolve(&g, component, preserved.as_ref(), &config));
        assert_eq!(got, expected, "row {i}");
    }
}

#[tokio::test]
async fn renders_upstreams_objects_then_writes_nothing() {
    let d = Double::new();
    let g = graph(&d);
    let r = IngressReconciler::new(d.reader(), d.writer(), config(true, true, true));
    let mut events = Vec::new();
    r.reconcile(&g).await.events_into(&mut events).unwrap();
    assert_eq!(
        reasons(&events),
        [
            "IngressCreated",
            "VirtualServiceCreated",
            "HTTPRouteCreated"
        ]
    );

    let ingress: Ingress = d.object(Some("ns"), "g-frontend").unwrap();
    assert!(child::is_controlled_by(&ingress.metadata, &g));
    let spec = serde_json::to_value(ingress.spec.unwrap()).unwrap();
    assert_eq!(
        spec,
        json!({
            "ingressClassName": "nginx",
            "rules": [{"host": "g.example.com", "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "g-frontend", "port": {"number": 8000}}},
            }]}}],
            "tls": [{"hosts": ["g.example.com"], "secretName": "tls-cert"}],
        })
    );
    let vs: VirtualService = d.object(Some("ns"), "g-frontend").unwrap();
    assert_eq!(
        vs.spec,
        json!({
            "hosts": ["g.example.com"], "gateways": ["istio-system/public"],
            "http": [{"match": [{"uri": {"prefix": "/"}}],
                "route": [{"destination": {"host": "g-frontend", "port": {"number": 8000}}}]}],
        })
    );
    let route: HttpRoute = d.object(Some("ns"), "g-frontend").unwrap();
    assert_eq!(
        route.spec["parentRefs"],
        json!([{"group": GATEWAY_API_GROUP, "kind": "Gateway", "namespace": "gateways", "name": "public"}])
    );
    assert_eq!(route.spec["hostnames"], json!(["g.example.com"]));
    assert_eq!(
        route.spec["rules"][0]["backendRefs"][0]["name"],
        "g-frontend"
    );
    assert_eq!(route.spec["rules"][0]["backendRefs"][0]["port"], 8000);
    for labels in [
        &ingress.metadata.labels,
        &vs.metadata.labels,
        &route.metadata.labels,
    ] {
        let labels = labels.as_ref().unwrap();
        assert_eq!(labels[api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g");
    }

    d.clear_writes();
    let mut events = Vec::new();
    r.reconcile(&g).await.events_into(&mut events).unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(events.is_empty());
}

#[tokio::test]
async fn what_no_frontend_needs_is_deleted() {
    let d = Double::new();
    let g = graph(&d);
    IngressReconciler::new(d.reader(), d.writer(), config(true, true, true))
        .reconcile(&g)
        .await
        .result
        .unwrap();
    let mut events = Vec::new();
    IngressReconciler::new(d.reader(), d.writer(), config(false, true, false))
        .reconcile(&g)
        .await
        .events_into(&mut events)
        .unwrap();
    assert_eq!(reasons(&events), ["IngressDeleted", "HTTPRouteDeleted"]);
    assert!(d.object::<Ingress>(Some("ns"), "g-frontend").is_none());
    assert!(
        d.object::<VirtualService>(Some("ns"), "g-frontend")
            .is_some()
    );

    // Someone else's Ingress carrying the graph's label is left alone.
    let mut foreign = Ingress::default();
    foreign.metadata.name = Some("g-other".into());
    foreign.metadata.namespace = Some("ns".into());
    foreign.metadata.labels = Some(naming::graph_labels("g"));
    d.insert(foreign);
    let mut events = Vec::new();
    IngressReconciler::new(d.reader(), d.writer(), IngressConfig::default())
        .reconcile(&g)
        .await
        .events_into(&mut events)
        .unwrap();
    assert_eq!(reasons(&events), ["VirtualServiceDeleted"]);
    assert!(d.object::<Ingress>(Some("ns"), "g-other").is_some());
}

/// A v1alpha1 graph's own ingress: its labels and annotations on the Ingress, TLS without a
/// Secret (the controller's default certificate), the operator's settings ignored.
#[tokio::test]
async fn a_v1alpha1_graphs_ingress_is_rendered_as_it_says() {
    let d = Double::new();
    let g = alpha_graph(
        &d,
        json!({"enabled": true, "host": "chat", "ingressControllerClassName": "traefik",
            "tls": {}, "labels": {"team": "a"}, "annotations": {"cert-manager.io/issuer": "x"}}),
    );
    let r = IngressReconciler::new(d.reader(), d.writer(), config(true, true, true));
    let mut events = Vec::new();
    r.reconcile(&g).await.events_into(&mut events).unwrap();
    assert_eq!(reasons(&events), ["IngressCreated"]);
    let ingress: Ingress = d.object(Some("ns"), "g-frontend").unwrap();
    assert_eq!(ingress.metadata.labels.as_ref().unwrap()["team"], "a");
    assert_eq!(
        ingress.metadata.annotations.as_ref().unwrap()["cert-manager.io/issuer"],
        "x"
    );
    let spec = ingress.spec.unwrap();
    assert_eq!(spec.ingress_class_name.as_deref(), Some("traefik"));
    assert_eq!(spec.rules.unwrap()[0].host.as_deref(), Some("chat.local"));
    let tls = spec.tls.unwrap();
    assert_eq!(tls[0].hosts, Some(vec!["chat.local".to_string()]));
    assert_eq!(tls[0].secret_name, None);
}

#[tokio::test]
async fn an_unserved_kind_is_a_clear_error() {
    for (kind, says) in [
        ("VirtualService", "install Istio's CRDs"),
        ("HTTPRoute", "install the Gateway API CRDs"),
    ] {
        let d = Double::new();
        let g = graph(&d);
        d.fail_next(
            Verb::Apply,
            kind,
            kit::Error::NotFound("the server could not find the requested resource".into()),
        );
        let err = IngressReconciler::new(d.reader(), d.writer(), config(true, true, true))
            .reconcile(&g)
            .await
            .result
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    // Pruning an unserved kind finds nothing to delete.
    let d = Double::new();
    let g = graph(&d);
    d.fail_next(
        Verb::List,
        "HTTPRoute",
        kit::Error::NotFound("the server could not find the requested resource".into()),
    );
    IngressReconciler::new(d.reader(), d.writer(), IngressConfig::default())
        .reconcile(&g)
        .await
        .result
        .unwrap();
}
