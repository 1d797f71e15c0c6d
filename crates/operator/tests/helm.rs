//! The Helm chart (`deploy/helm/dynamo-operator`) with the real `helm` client, built from its Go
//! module beside the control-plane binaries (`xtask/controlplane/build.sh`):
//! - `helm lint` with the default values and every values file of the chart's `ci/` folder;
//! - `helm template` with each: the rendered configuration file is accepted by the operator's
//!   own strict loader and carries what the values say; the Deployment runs with it;
//! - `helm install` into the test control plane, then the operator binary runs out of cluster
//!   (the image cannot be pulled here) with exactly the chart's configuration file and the
//!   chart's ServiceAccount and RBAC, and becomes ready;
//! - `helm upgrade` from an older copy of the chart updates the CRDs, `helm uninstall` keeps
//!   them (a control plane of its own).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::api::Api;
use operator::cli::RunArgs;
use operator::config;
use serde_json::Value;

use common::{Operator, Spawn, chart, helm};

/// The values files: none (the defaults), then every file of `ci/`.
fn values_files() -> Vec<Option<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    std::iter::once(None)
        .chain(files.into_iter().map(Some))
        .collect()
}

fn with_values(base: &[&str], values: &Option<PathBuf>) -> Vec<String> {
    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    if let Some(file) = values {
        args.push(format!("--values={}", file.display()));
    }
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn the_chart_lints_with_every_values_file() {
    let chart = chart().display().to_string();
    for values in values_files() {
        let args = with_values(&["lint", "--strict", &chart], &values);
        helm(&strs(&args));
    }
}

#[test]
fn the_rendered_configuration_is_the_operators_and_says_what_the_values_say() {
    let chart = chart().display().to_string();
    for values in values_files() {
        let args = with_values(
            &[
                "template",
                "dynamo-operator",
                &chart,
                "--namespace=dynamo-system",
            ],
            &values,
        );
        let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&helm(&strs(&args)))
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &Value| !v.is_null())
            .collect();
        let find = |kind: &str, name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .cloned()
        };
        let which = values
            .as_ref()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .unwrap_or_else(|| "defaults".into());
        let text = find("ConfigMap", "dynamo-operator-config").unwrap()["data"]["config.yaml"]
            .as_str()
            .unwrap()
            .to_string();
        let file = config::parse(&text).unwrap_or_else(|e| {
            panic!("{which}: the operator refuses the chart's file: {e:?}\n{text}")
        });
        let mut settings = RunArgs::defaults();
        config::apply(&file, &mut settings, &|_| false);
        let deployment = find("Deployment", "dynamo-operator").unwrap();
        let pod = &deployment["spec"]["template"]["spec"];
        let container_args = pod["containers"][0]["args"].to_string();
        assert!(
            container_args.contains("--config=/etc/dynamo-operator/config/config.yaml"),
            "{which}: {container_args}"
        );
        // Every flag the chart passes is one the operator takes.
        let flags: Vec<String> =
            serde_json::from_value(pod["containers"][0]["args"].clone()).unwrap();
        let cli = <operator::cli::Cli as clap::Parser>::try_parse_from(
            std::iter::once("dynamo-operator".to_string()).chain(flags),
        )
        .unwrap_or_else(|e| panic!("{which}: the chart's flags: {e}"));
        let pdb = find("PodDisruptionBudget", "dynamo-operator");
        match which.as_str() {
            "defaults" => {
                assert_eq!(settings.namespace, None);
                assert!(settings.checkpoints);
                assert!(pdb.is_some(), "two replicas get a PodDisruptionBudget");
            }
            "restricted-values.yaml" => {
                assert_eq!(settings.namespace.as_deref(), Some("team-a"));
                assert!(!settings.checkpoints);
                assert!(pdb.is_none(), "one replica: no PodDisruptionBudget");
            }
            "platform-values.yaml" => {
                assert_eq!(
                    cli.run.checkpoint_restore_failure_policy,
                    operator::restore_webhook::FailurePolicy::Fail
                );
                let infra = settings.infrastructure();
                assert_eq!(
                    infra.nats_address.as_deref(),
                    Some("nats://dynamo-platform-nats.dynamo-system:4222")
                );
                assert_eq!(infra.model_express_url, None, "empty values render nothing");
                let ingress = settings.shared_config().ingress;
                assert_eq!(ingress.controller_class_name.as_deref(), Some("nginx"));
                assert_eq!(
                    ingress.host_suffix.as_deref(),
                    Some("inference.example.com")
                );
                assert_eq!(
                    ingress.http_route_gateway, None,
                    "empty values render nothing"
                );
                assert_eq!(settings.grove_termination_delay, "30m");
                assert_eq!(
                    settings.mpi_ssh_secret_namespace.as_deref(),
                    Some("dynamo-system")
                );
                assert_eq!(settings.metrics_address.to_string(), "127.0.0.1:8443");
                assert_eq!(
                    settings.webhook_cert_dir.as_deref(),
                    Some(Path::new("/etc/dynamo-operator/webhook")) // path inside the container
                );
                assert_eq!(
                    pod["tolerations"][0]["key"],
                    "node-role.kubernetes.io/control-plane"
                );
                assert!(pod["nodeSelector"].is_object());
            }
            other => panic!("a values file without expectations: {other}"),
        }
    }
}

#[test]
fn monitoring_objects_follow_the_prometheus_operator_api() {
    let chart = chart().display().to_string();
    let kinds = |extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "template",
            "dynamo-operator",
            chart.as_str(),
            "--namespace=dynamo-system",
        ];
        args.extend_from_slice(extra);
        serde_yaml::Deserializer::from_str(&helm(&args))
            .map(|d| -> Value { serde::Deserialize::deserialize(d).unwrap() })
            .filter(|o| o["apiVersion"] == "monitoring.coreos.com/v1")
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert!(kinds(&[]).is_empty(), "not served: none");
    let served = kinds(&["--api-versions=monitoring.coreos.com/v1"]);
    assert_eq!(
        served,
        [
            "PodMonitor/dynamo-frontend",
            "PodMonitor/dynamo-worker",
            "PodMonitor/dynamo-planner",
            "PodMonitor/dynamo-epp",
            "ServiceMonitor/dynamo-operator",
        ]
    );
    let off = kinds(&[
        "--api-versions=monitoring.coreos.com/v1",
        "--set=monitoring.podMonitors.enabled=false",
        "--set=monitoring.serviceMonitor.enabled=false",
    ]);
    assert!(off.is_empty(), "turned off: {off:?}");
    assert_eq!(
        kinds(&["--set=monitoring.serviceMonitor.enabled=true"]),
        ["ServiceMonitor/dynamo-operator"],
        "forced on without the API"
    );
}

#[tokio::test]
async fn helm_install_and_the_operator_runs_with_the_charts_configuration_and_rbac() {
    let cp = testkit::ControlPlane::shared().await;
    let namespace = "dynamo-helm";
    let kubeconfig = cp.write_kubeconfig("helm-admin", &["system:masters"]);
    let chart = chart().display().to_string();
    cp.install_crds(&api::crds()).await.unwrap();
    // The Prometheus Operator's API is served: the chart adds its PodMonitors and ServiceMonitor.
    cp.install_crd_files(&testkit::testdata::yaml_files("prometheus-operator-crds"))
        .await
        .unwrap();
    // `--take-ownership`: other tests of this control plane install deploy/'s cluster-wide RBAC
    // under the same names.
    helm(&[
        "install",
        "dynamo-operator",
        &chart,
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--namespace={namespace}"),
        "--create-namespace",
        "--take-ownership",
        // The tests installed this control plane's CRDs.
        "--set=crds.manage=false",
        "--set=discoverImagePullSecrets=false",
        "--wait=false",
    ]);
    let (_, file) = common::chart_config(cp, namespace, "helm-operator-config.yaml").await;
    let account = common::account_kubeconfig(cp, namespace, "helm-operator.kubeconfig").await;
    let operator = Operator::spawn(
        cp,
        Spawn {
            identity: "helm-operator",
            kubeconfig: Some(account),
            extra_args: vec![
                format!("--config={}", file.display()),
                "--discover-image-pull-secrets=false".into(),
            ],
            ..Spawn::default()
        },
    );
    testkit::eventually(
        "the operator installed by the chart becomes ready",
        Duration::from_secs(90),
        || async { operator.ready() },
    )
    .await;
    assert!(
        operator.logged("effective configuration"),
        "{}",
        operator.log_text()
    );

    let monitoring = |kind: &str| {
        let gvk = kube::api::GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind);
        Api::<kube::api::DynamicObject>::namespaced_with(
            cp.client(),
            namespace,
            &kube::discovery::ApiResource::from_gvk(&gvk),
        )
    };
    let mut pod_monitors: Vec<String> = monitoring("PodMonitor")
        .list(&Default::default())
        .await
        .unwrap()
        .iter()
        .map(|m| m.metadata.name.clone().unwrap())
        .collect();
    pod_monitors.sort();
    assert_eq!(
        pod_monitors,
        [
            "dynamo-epp",
            "dynamo-frontend",
            "dynamo-planner",
            "dynamo-worker"
        ]
    );
    let service_monitor = monitoring("ServiceMonitor")
        .get("dynamo-operator")
        .await
        .unwrap();
    let selector = &service_monitor.data["spec"]["selector"]["matchLabels"];
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(cp.client(), namespace);
    let metrics = services.get("dynamo-operator-metrics").await.unwrap();
    let labels = metrics.metadata.labels.unwrap_or_default();
    for (key, value) in selector.as_object().unwrap() {
        assert_eq!(
            labels.get(key).map(String::as_str),
            value.as_str(),
            "the ServiceMonitor selects the metrics Service by {key}"
        );
    }
    // The release stays: uninstalling would delete the cluster-wide RBAC later tests of this
    // control plane expect.
}

/// The CRDs are part of the release: `helm upgrade` from an older chart (a copy whose CRDs have
/// no printer columns) updates them, and `helm uninstall` leaves them. A control plane of its own:
/// the shared one's CRDs belong to the tests.
#[tokio::test]
async fn helm_upgrade_updates_the_crds_and_uninstall_keeps_them() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let cp = testkit::ControlPlane::start(testkit::Options {
        simulate_nodes: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let kubeconfig = cp.write_kubeconfig("helm-admin", &["system:masters"]);
    let older = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart())
        .arg(older.path())
        .status()
        .unwrap();
    assert!(status.success());
    let older_chart = older.path().join("dynamo-operator");
    let crd_file = older_chart.join("files/crds/dynamographdeployments.nvidia.com.yaml");
    let mut crd: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&crd_file).unwrap()).unwrap();
    for version in crd["spec"]["versions"].as_array_mut().unwrap() {
        version
            .as_object_mut()
            .unwrap()
            .remove("additionalPrinterColumns");
    }
    std::fs::write(&crd_file, serde_yaml::to_string(&crd).unwrap()).unwrap();

    let release = |verb: &str, chart: &Path| {
        helm(&[
            verb,
            "dynamo-operator",
            &chart.display().to_string(),
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--namespace=dynamo-system",
            "--create-namespace",
            "--set=discoverImagePullSecrets=false",
            "--wait=false",
        ]);
    };
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    // The printer columns of a CRD, over its versions.
    let count = |crd: &CustomResourceDefinition| -> usize {
        crd.spec
            .versions
            .iter()
            .map(|v| v.additional_printer_columns.as_ref().map_or(0, Vec::len))
            .sum()
    };
    let columns = || async { count(&crds.get("dynamographdeployments.nvidia.com").await.unwrap()) };
    release("install", &older_chart);
    assert_eq!(columns().await, 0, "the older chart's CRD");
    release("upgrade", &chart());
    let expected = count(
        api::crds()
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some("dynamographdeployments.nvidia.com"))
            .unwrap(),
    );
    assert!(expected > 0);
    assert_eq!(columns().await, expected, "upgraded with the chart");

    helm(&[
        "uninstall",
        "dynamo-operator",
        &format!("--kubeconfig={}", kubeconfig.display()),
        "--namespace=dynamo-system",
    ]);
    for crd in api::crds() {
        let name = crd.metadata.name.unwrap();
        assert!(crds.get_opt(&name).await.unwrap().is_some(), "{name} kept");
    }
}

#[test]
fn the_dashboard_queries_only_metrics_the_operator_exposes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/monitoring/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let controller = metrics.controller("dynamographdeployment", 1);
    controller.enqueued("ns/g".into());
    controller
        .start("ns/g")
        .finish(operator::metrics::ReconcileResult::Success);
    // Every series exists once it has a sample: an error gives the error counter one.
    controller
        .start("ns/h")
        .finish(operator::metrics::ReconcileResult::Error);
    metrics.set_leader("lease", true);
    let exposed = metrics.encode();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| {
                    w.starts_with("controller_runtime_")
                        || w.starts_with("workqueue_")
                        || w.starts_with("leader_election_")
                });
            for name in names {
                assert!(
                    exposed.lines().any(|l| l.starts_with(&format!("{name}{{"))
                        || l.starts_with(&format!("{name} "))),
                    "panel {:?} queries {name}, which the operator does not expose:\n{exposed}",
                    panel["title"]
                );
            }
        }
    }
}
