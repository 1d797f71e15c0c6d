//! Namespace-restricted mode with the chart's RBAC: `helm install` with `watchNamespace` renders
//! Roles (no ClusterRole, no ClusterRoleBinding) and the planner's and EPP's accounts; the
//! operator binary, run out of cluster with the chart's configuration file and a token of the
//! chart's ServiceAccount, brings a graph of that namespace to Ready, and the audit log shows
//! that none of its requests was cluster-scoped.

mod common;

use std::time::Duration;

use api::DynamoGraphDeployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::Api;
use testkit::ControlPlane;

use common::graphs::{self, Pathway};
use common::{Operator, Spawn, chart, eventually, helm, install};

const GRAPH: &str = "v1beta1/vllm-agg.yaml";

#[tokio::test]
async fn a_restricted_operator_needs_only_the_charts_roles() {
    let cp = ControlPlane::shared().await;
    graphs::prepare(cp).await;
    let ns = cp.namespace().await;
    let namespace = ns.name();
    let kubeconfig = cp.write_kubeconfig("helm-admin", &["system:masters"]);
    let chart = chart().display().to_string();
    let release = format!("dynamo-{namespace}");
    helm(&[
        "install",
        &release,
        &chart,
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--namespace={namespace}"),
        &format!("--values={chart}/ci/restricted-values.yaml"),
        &format!("--set=watchNamespace={namespace}"),
        // The tests installed this control plane's CRDs.
        "--set=crds.manage=false",
        "--set=monitoring.podMonitors.enabled=false",
        "--set=monitoring.serviceMonitor.enabled=false",
        "--wait=false",
    ]);

    // What the chart made: Roles, no cluster-wide binding of this release.
    let roles: Api<Role> = Api::namespaced(cp.client(), namespace);
    let mut names: Vec<String> = roles
        .list(&Default::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.name_any())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "dynamo-operator",
            "dynamo-operator-epp",
            "dynamo-operator-planner"
        ]
    );
    let bindings: Api<RoleBinding> = Api::namespaced(cp.client(), namespace);
    assert!(
        bindings
            .get_opt("planner-serviceaccount-binding")
            .await
            .unwrap()
            .is_some()
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client(), namespace);
    assert!(
        accounts
            .get_opt("planner-serviceaccount")
            .await
            .unwrap()
            .is_some()
    );
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(cp.client());
    assert!(
        cluster_bindings
            .list(&Default::default())
            .await
            .unwrap()
            .iter()
            .all(|b| b
                .subjects
                .iter()
                .flatten()
                .all(|s| s.namespace.as_deref() != Some(namespace))),
        "no ClusterRoleBinding names the release's accounts"
    );

    let (text, file) =
        common::chart_config(cp, namespace, &format!("{namespace}-operator-config.yaml")).await;
    assert!(text.contains(&format!("restricted: {namespace}")), "{text}");
    let account =
        common::account_kubeconfig(cp, namespace, &format!("{namespace}-operator.kubeconfig"))
            .await;
    let user = format!("system:serviceaccount:{namespace}:dynamo-operator");
    let mark = cp.audit().mark();
    let operator = Operator::spawn(
        cp,
        Spawn {
            identity: "restricted-operator",
            kubeconfig: Some(account),
            // One replica: no Lease (the test's own operators take theirs in `default`); the
            // chart's Deployment passes the pull-secret setting as a flag.
            extra_args: vec![
                format!("--config={}", file.display()),
                "--leader-elect=false".into(),
                "--discover-image-pull-secrets=false".into(),
            ],
            ..Spawn::default()
        },
    );
    eventually(
        "the restricted operator is ready",
        Duration::from_secs(90),
        || async { operator.ready() },
    )
    .await;

    let objects: Vec<_> = graphs::documents(&testkit::testdata::path(GRAPH), Pathway::Component)
        .into_iter()
        .map(|o| o.within(namespace))
        .collect();
    install(&cp.client(), &objects).await;
    let name = graphs::graph(&objects).name_any();
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    eventually("the graph is Ready", Duration::from_secs(180), || async {
        let conditions = dgds
            .get(&name)
            .await
            .unwrap()
            .status
            .map(|s| s.conditions)
            .unwrap_or_default();
        kit::conditions::is_true(&conditions, kit::conditions::READY)
    })
    .await;

    let requests: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == user && !e.resource.is_empty())
        .collect();
    assert!(
        !requests.is_empty(),
        "the audit log attributes the operator's requests"
    );
    let cluster_scoped: Vec<String> = requests
        .iter()
        .filter(|e| e.namespace.is_empty())
        .map(|e| format!("{} {} {}", e.verb, e.resource, e.request_uri))
        .collect();
    assert!(
        cluster_scoped.is_empty(),
        "cluster-scoped requests: {cluster_scoped:#?}\n--- operator log (tail) ---\n{}",
        graphs::tail(&operator.log_text(), 40)
    );
    let forbidden: Vec<String> = requests
        .iter()
        .filter(|e| e.code == 403)
        .map(|e| format!("{} {} {}", e.verb, e.resource, e.request_uri))
        .collect();
    assert!(forbidden.is_empty(), "refused: {forbidden:#?}");
}
