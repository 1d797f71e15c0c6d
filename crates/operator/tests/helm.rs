//! The Helm chart (`deploy/helm/dynamo-operator`) with the real `helm` client, built from its Go
//! module beside the control-plane binaries (`xtask/controlplane/build.sh`):
//! - `helm lint` with the default values and every values file of the chart's `ci/` folder;
//! - `helm template` with each: the rendered configuration file is accepted by the operator's
//!   own strict loader and carries what the values say; the Deployment runs with it;
//! - `helm install` into the test control plane, then the operator binary runs out of cluster
//!   (the image cannot be pulled here) with exactly the chart's configuration file and the
//!   chart's ServiceAccount and RBAC, and becomes ready.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use operator::cli::RunArgs;
use operator::config;
use serde_json::Value;

use common::{Operator, Spawn};

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/dynamo-operator")
}

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

/// Runs `helm args`; its stdout, or a panic with its output.
fn helm(args: &[&str]) -> String {
    let binary = testkit::Binaries::locate().unwrap().dir.join("helm");
    let output = Command::new(&binary)
        .args(args)
        .env("HELM_CACHE_HOME", std::env::temp_dir().join("helm-cache"))
        .env("HELM_CONFIG_HOME", std::env::temp_dir().join("helm-config"))
        .env("HELM_DATA_HOME", std::env::temp_dir().join("helm-data"))
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "helm {}: {}\n{stdout}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
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
                let infra = settings.infrastructure();
                assert_eq!(
                    infra.nats_address.as_deref(),
                    Some("nats://dynamo-platform-nats.dynamo-system:4222")
                );
                assert_eq!(infra.model_express_url, None, "empty values render nothing");
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

#[tokio::test]
async fn helm_install_and_the_operator_runs_with_the_charts_configuration_and_rbac() {
    let cp = testkit::ControlPlane::shared().await;
    let namespace = "dynamo-helm";
    let kubeconfig = cp.write_kubeconfig("helm-admin", &["system:masters"]);
    let chart = chart().display().to_string();
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
        "--set=discoverImagePullSecrets=false",
        "--wait=false",
    ]);
    let configs: Api<ConfigMap> = Api::namespaced(cp.client(), namespace);
    let text = configs
        .get("dynamo-operator-config")
        .await
        .unwrap()
        .data
        .unwrap()["config.yaml"]
        .clone();
    let file = cp.dir().join("helm-operator-config.yaml");
    std::fs::write(&file, &text).unwrap();
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
    // The release stays: uninstalling would delete the cluster-wide RBAC later tests of this
    // control plane expect.
}
