//! The run: the control plane with `deploy/` installed, its random source, the secrets to look
//! for, and the ServiceAccount the operator runs as.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use bench::cluster::{server_side_apply, yaml_documents};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testkit::ControlPlane;

use super::{Operator, OperatorSpec, wait_for};

/// The ServiceAccount the operator runs as (deploy/operator/serviceaccount.yaml).
pub const OPERATOR_NAMESPACE: &str = "dynamo-system";
pub const OPERATOR_ACCOUNT: &str = "dynamo-operator";
/// Its user name in the audit log.
pub fn account_user(account: &str) -> String {
    format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{account}")
}
/// Label on every namespace the suite creates.
pub const SUITE_LABEL: &str = "reliability.dynamo/suite";
/// Label on every graph the suite applies: which template it was made from.
pub const TEMPLATE_LABEL: &str = "reliability.dynamo/template";
/// The Secret every graph references (`envFrom`), with a value that must never be logged.
pub const TOKEN_SECRET: &str = "hf-token-secret";

/// The files of `deploy/` an administrator installs before the operator.
pub const DEPLOY_FILES: &[&str] = &[
    "operator/namespace.yaml",
    "operator/serviceaccount.yaml",
    "rbac/clusterrole.yaml",
    "rbac/clusterrolebinding.yaml",
    "rbac/planner-epp-clusterroles.yaml",
];

/// A small deterministic generator (xorshift64*): every random choice of a run follows from
/// the seed printed at its start.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `lo..hi` (`lo` when empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }
}

/// Optional APIs and features present in this run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// The operator runs a DynamoCheckpoint controller (its event→action map lists one).
    pub checkpoints: bool,
    /// Grove's CRDs are installed (from the test data).
    pub grove: bool,
}

/// The run: control plane, binary, repository paths, random source, secrets to look for.
pub struct Env {
    pub cp: ControlPlane,
    pub binary: PathBuf,
    pub root: PathBuf,
    pub out: PathBuf,
    pub rng: Rng,
    pub features: Features,
    /// Values that must never appear in logs or events (plain and base64).
    pub secrets: BTreeSet<String>,
    /// Every operator log of the run (scanned after each scenario).
    pub logs: Vec<PathBuf>,
    slot: u32,
}

impl Env {
    pub fn new(cp: ControlPlane, binary: PathBuf, root: PathBuf, out: PathBuf, seed: u64) -> Self {
        Env {
            cp,
            binary,
            root,
            out,
            rng: Rng::new(seed),
            features: Features::default(),
            secrets: BTreeSet::new(),
            logs: Vec::new(),
            slot: 0,
        }
    }

    pub fn admin(&self) -> Client {
        self.cp.client()
    }

    /// Installs the CRDs, `deploy/`'s namespace, ServiceAccount and RBAC, and the cluster
    /// fixtures graphs may refer to (GPU DeviceClass, InferencePool CRD, Grove's CRDs from the
    /// test data).
    pub async fn install(&mut self) -> anyhow::Result<()> {
        self.cp.install_crds(&api::crds()).await?;
        let admin = self.admin();
        let mut objects = Vec::new();
        for file in DEPLOY_FILES {
            objects.extend(yaml_documents(&self.root.join("deploy").join(file))?);
        }
        server_side_apply(&admin, &objects).await?;
        let fixtures = vec![
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                   "metadata": {"name": "gpu.nvidia.com"}, "spec": {}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "inferencepools.inference.networking.k8s.io",
                             "annotations": {"api-approved.kubernetes.io": "unapproved, test fixture"}},
                "spec": {"group": "inference.networking.k8s.io", "scope": "Namespaced",
                    "names": {"plural": "inferencepools", "singular": "inferencepool",
                              "kind": "InferencePool", "listKind": "InferencePoolList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        ];
        let fixtures: Vec<DynamicObject> = fixtures
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()?;
        server_side_apply(&admin, &fixtures).await?;
        let grove = testkit::testdata::yaml_files("grove-crds");
        if !grove.is_empty() {
            self.cp.install_crd_files(&grove).await?;
            self.features.grove = true;
        }
        let triggers = Command::new(&self.binary).arg("triggers").output()?;
        self.features.checkpoints = String::from_utf8_lossy(&triggers.stdout)
            .lines()
            .any(|l| l.starts_with("| dynamocheckpoint |"));
        Ok(())
    }

    /// A fresh namespace with the token Secret graphs reference (its value is remembered as a
    /// secret to look for).
    pub async fn namespace(&mut self, prefix: &str) -> anyhow::Result<String> {
        let name = format!("{prefix}-{:06x}", self.rng.next() & 0xff_ffff);
        let admin = self.admin();
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {SUITE_LABEL: "true"}}
        }))?;
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        let token = format!("hf_reliability_{:016x}", self.rng.next());
        self.remember_secret(&token);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": TOKEN_SECRET},
            "stringData": {"HF_TOKEN": token},
        }))?;
        Api::<Secret>::namespaced(admin.clone(), &name)
            .create(&PostParams::default(), &secret)
            .await?;
        let sas = Api::<ServiceAccount>::namespaced(admin, &name);
        wait_for(
            "default ServiceAccount",
            Duration::from_secs(30),
            || async { sas.get_opt("default").await.ok().flatten().is_some() },
        )
        .await?;
        Ok(name)
    }

    pub fn remember_secret(&mut self, value: &str) {
        use base64::Engine;
        self.secrets.insert(value.to_string());
        self.secrets
            .insert(base64::engine::general_purpose::STANDARD.encode(value));
    }

    /// Remembers the data of the Secrets the operator created (webhook CA, SSH keys): a
    /// distinctive middle part of every value.
    pub async fn remember_operator_secrets(&mut self) -> anyhow::Result<()> {
        let secrets = Api::<Secret>::all(self.admin())
            .list(&ListParams::default())
            .await?;
        for secret in secrets {
            let ours = secret.managed_fields().iter().any(|m| {
                m.manager
                    .as_deref()
                    .is_some_and(|m| m.starts_with("dynamo-operator"))
            }) || secret.metadata.name.as_deref() == Some("dynamo-operator-webhook-ca");
            if !ours {
                continue;
            }
            for value in secret.data.unwrap_or_default().values() {
                let text = String::from_utf8_lossy(&value.0).to_string();
                // PEM bodies and keys: a run of 40 characters from the middle, which no log
                // line can contain by chance.
                let body: String = text
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<Vec<_>>()
                    .join("");
                if body.len() >= 80 {
                    let mid = body.len() / 2;
                    self.secrets.insert(body[mid - 20..mid + 20].to_string());
                }
            }
        }
        Ok(())
    }

    /// A token of a ServiceAccount in the operator's namespace, as a kubeconfig file.
    pub async fn account_kubeconfig(&self, account: &str, file: &str) -> anyhow::Result<PathBuf> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin(), OPERATOR_NAMESPACE);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(4 * 3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .context("TokenRequest without a token")?;
        let path = self.out.join(file);
        std::fs::write(&path, self.cp.token_kubeconfig(account, &token))?;
        Ok(path)
    }

    /// Starts an operator process (see [`OperatorSpec`]).
    pub async fn operator(&mut self, spec: OperatorSpec) -> anyhow::Result<Operator> {
        self.slot += 1;
        let kubeconfig = self
            .account_kubeconfig(
                &spec.account,
                &format!("{}-{}.kubeconfig", spec.identity, self.slot),
            )
            .await?;
        let operator = Operator::start_new(spec, kubeconfig, &self.binary, &self.out)?;
        self.adopt(&operator);
        self.logs.push(operator.log.clone());
        Ok(operator)
    }

    /// Hands the operator's process to the control plane's reaper: it ends with the run, even
    /// when this process is killed.
    fn adopt(&self, operator: &Operator) {
        if let Some(pid) = operator.pid() {
            self.cp.adopt(pid);
        }
    }

    /// Registers a restarted operator: its new log, its new process.
    pub fn track(&mut self, operator: &Operator) {
        self.adopt(operator);
        if !self.logs.contains(&operator.log) {
            self.logs.push(operator.log.clone());
        }
    }
}
