//! What `dev`, `bench` and `reliability` share: building the operator binary, reading manifests,
//! and installing `deploy/` as `kubectl apply --server-side -k deploy/` does.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use serde_json::Value;
use testkit::ControlPlane;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/bench lives in the workspace")
        .to_path_buf()
}

/// Cargo's target folder (`CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// A `cargo` command as if typed in a shell. `cargo xtask` runs this program through `cargo run`,
/// which sets the package's variables (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...); build scripts
/// such as ring's rerun when those change, so a nested cargo that inherited them would rebuild
/// what the outer one (and every shell) built, and the other way round, on every run.
pub fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                name.as_ref(),
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
            );
        if set_by_cargo_run {
            cargo.env_remove(name.as_ref());
        }
    }
    cargo
}

/// Builds `dynamo-operator` with a Cargo profile (`dev`, `release`, ...) and returns the binary.
///
/// The `dev` build selects the whole workspace, as `cargo xtask test` does, so Cargo unifies the
/// same features and reuses what the tests built (building `-p operator` alone resolves other
/// features and recompiles dozens of crates).
pub fn build_operator(root: &Path, profile: &str) -> anyhow::Result<PathBuf> {
    println!("==> building the operator (profile {profile})");
    let mut cargo = cargo();
    cargo.arg("build").arg(format!("--profile={profile}"));
    if profile == "dev" {
        cargo.args(["--workspace", "--bins"]);
    } else {
        cargo.args(["-p", "operator", "--bin", "dynamo-operator"]);
    }
    if !cargo.current_dir(root).status()?.success() {
        bail!("building the operator failed");
    }
    let dir = if profile == "dev" { "debug" } else { profile };
    let binary = target_dir(root).join(dir).join("dynamo-operator");
    if !binary.is_file() {
        bail!("the operator binary is not at {}", binary.display());
    }
    Ok(binary)
}

/// Every document of a YAML file.
pub fn yaml_documents(path: &Path) -> anyhow::Result<Vec<DynamicObject>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            out.push(serde_json::from_value(value)?);
        }
    }
    Ok(out)
}

/// Server-side applies objects as an administrator would (`kubectl apply --server-side`).
pub async fn server_side_apply(client: &Client, objects: &[DynamicObject]) -> anyhow::Result<()> {
    let discovery = Discovery::new(client.clone()).run().await?;
    for object in objects {
        let types = object
            .types
            .clone()
            .context("object without apiVersion/kind")?;
        let gvk = kube::api::GroupVersionKind::try_from(&types)?;
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .with_context(|| format!("{gvk:?} is not served"))?;
        let api: Api<DynamicObject> = match (caps.scope, &object.metadata.namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        api.patch(
            &object.name_any(),
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| format!("applying {} {}", types.kind, object.name_any()))?;
    }
    Ok(())
}

/// The files `deploy/kustomization.yaml` lists, in its order.
pub fn kustomization(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let path = root.join("deploy/kustomization.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let value: Value = serde_yaml::from_str(&text)?;
    let resources = value["resources"]
        .as_array()
        .with_context(|| format!("{}: no resources", path.display()))?;
    resources
        .iter()
        .map(|r| {
            r.as_str()
                .map(|r| root.join("deploy").join(r))
                .with_context(|| format!("{}: a resource is not a path", path.display()))
        })
        .collect()
}

/// Installs what `kubectl apply --server-side -k deploy/` installs, except the files `except`
/// names (relative to `deploy/`): the CRDs first (waiting until they are served), then the rest
/// in the kustomization's order. Returns how many objects were applied.
pub async fn install_deploy(
    cp: &ControlPlane,
    root: &Path,
    except: &[&str],
) -> anyhow::Result<usize> {
    let skipped: Vec<PathBuf> = except.iter().map(|f| root.join("deploy").join(f)).collect();
    let mut crds = Vec::new();
    let mut objects = Vec::new();
    for file in kustomization(root)?
        .into_iter()
        .filter(|f| !skipped.contains(f))
    {
        let documents = yaml_documents(&file)?;
        if documents.iter().all(|d| {
            d.types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
        }) {
            crds.push(file);
        } else {
            objects.extend(documents);
        }
    }
    cp.install_crd_files(&crds).await?;
    server_side_apply(&cp.client(), &objects).await?;
    Ok(crds.len() + objects.len())
}

/// The DynamoGraphDeployment resource in `version` (`v1beta1`, `v1alpha1`).
pub fn dgd_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        api::GROUP,
        version,
        "DynamoGraphDeployment",
    ))
}

/// The v1beta1 DynamoGraphDeployments of `namespace`, as dynamic objects.
pub fn dgds(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &dgd_resource("v1beta1"))
}
