//! Shared helpers of the api tests: the conformance manifests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The test-data folders holding Dynamo manifests (the others hold CRDs).
pub const MANIFEST_FOLDERS: &[&str] = &["v1beta1", "v1alpha1", "checkpoint", "upstream-examples"];

/// One YAML document of a manifest file.
pub struct Manifest {
    pub path: PathBuf,
    pub value: serde_json::Value,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
    pub fn label(&self) -> String {
        format!("{} ({} {})", self.path.display(), self.kind(), self.name())
    }
}

/// Every document of our API group in every `*.yaml` file of the test-data manifest folders.
pub fn conformance_manifests() -> Vec<Manifest> {
    let files = MANIFEST_FOLDERS
        .iter()
        .flat_map(testkit::testdata::yaml_files);
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: serde_json::Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // Our kinds only: some upstream examples carry a ConfigMap, PVC or claim template.
            let ours = value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with(&format!("{}/", api::GROUP)));
            if ours {
                out.push(Manifest {
                    path: path.clone(),
                    value,
                });
            }
        }
    }
    assert!(!out.is_empty(), "no conformance manifests found");
    out
}

/// Grove's CRD files.
pub fn grove_crd_files() -> Vec<PathBuf> {
    testkit::testdata::yaml_files("grove-crds")
}

/// Every leaf of `expected` is present with the same value in `actual` (extra fields in
/// `actual`, e.g. defaults and server metadata, are fine). Returns the paths that differ.
pub fn missing_fields(expected: &serde_json::Value, actual: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    diff("", expected, actual, &mut out);
    out
}

fn diff(
    path: &str,
    expected: &serde_json::Value,
    actual: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                match a.get(k) {
                    Some(av) => diff(&format!("{path}.{k}"), v, av, out),
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!("{path}: {} items, got {}", e.len(), a.len()));
                return;
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                diff(&format!("{path}[{i}]"), ev, av, out);
            }
        }
        (e, a) if quantity_eq(e, a) => {}
        (e, a) => out.push(format!("{path}: expected {e}, got {a}")),
    }
}

/// Numbers and strings compare by value (`"1"` written, `"1"` read back); Quantities may be
/// canonicalised, which is not a loss.
fn quantity_eq(e: &serde_json::Value, a: &serde_json::Value) -> bool {
    e == a || (e.is_number() && a.as_str() == Some(&e.to_string()))
}

/// One case of the bad-input corpus (`tests/bad-input/*.yaml`).
///
/// Header lines: `# layer: schema|cel|garde`, `# field: <path>`, `# expect: <message>`,
/// optionally `# rule: <garde rule code>`, `# garde-too: <garde rule code>` (a schema or CEL
/// case validation repeats) and `# note: ...`. With several documents, all but the
/// last are created first (and must be accepted); the last one is the bad input.
pub struct BadCase {
    pub file: String,
    pub layer: String,
    pub field: String,
    pub expect: String,
    pub rule: Option<String>,
    /// A schema or CEL case whose rule validation repeats (for objects that never passed
    /// admission: stored before the rule existed, built in code): the rule code garde reports at
    /// `field`.
    pub garde_too: Option<String>,
    pub docs: Vec<serde_json::Value>,
}

pub fn bad_input_cases() -> Vec<BadCase> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-input");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let header = |key: &str| {
                text.lines()
                    .filter_map(|l| l.strip_prefix("# "))
                    .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                    .map(str::to_string)
            };
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let docs = serde_yaml::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .filter(|v: &serde_json::Value| !v.is_null())
                .collect();
            BadCase {
                layer: header("layer").unwrap_or_else(|| panic!("{file}: no layer")),
                field: header("field").unwrap_or_else(|| panic!("{file}: no field")),
                expect: header("expect").unwrap_or_else(|| panic!("{file}: no expect")),
                rule: header("rule"),
                garde_too: header("garde-too"),
                docs,
                file,
            }
        })
        .collect()
}

impl BadCase {
    pub fn input(&self) -> &serde_json::Value {
        self.docs.last().unwrap()
    }
}

/// Runs the garde layer on a decoded object of any of our kinds.
pub fn garde_layer(value: &serde_json::Value) -> Result<Result<(), api::InvalidSpec>, String> {
    let kind = value["kind"].as_str().unwrap_or_default();
    let version = value["apiVersion"].as_str().unwrap_or_default();
    let decode_err = |e: serde_json::Error| e.to_string();
    Ok(match (version, kind) {
        ("nvidia.com/v1beta1", "DynamoGraphDeployment") => {
            api::validate(&serde_json::from_value(value.clone()).map_err(decode_err)?)
        }
        ("nvidia.com/v1alpha1", "DynamoGraphDeployment") => {
            let alpha: api::v1alpha1::DynamoGraphDeployment =
                serde_json::from_value(value.clone()).map_err(decode_err)?;
            api::validate(&api::conversion::to_v1beta1(&alpha))
        }
        ("nvidia.com/v1beta1", "DynamoComponentDeployment") => {
            api::validate::validate_dcd(&serde_json::from_value(value.clone()).map_err(decode_err)?)
        }
        ("nvidia.com/v1alpha1", "DynamoCheckpoint") => api::validate::validate_checkpoint(
            &serde_json::from_value(value.clone()).map_err(decode_err)?,
        ),
        ("nvidia.com/v1beta1", "DynamoGraphDeploymentScalingAdapter") => {
            let _: api::DynamoGraphDeploymentScalingAdapter =
                serde_json::from_value(value.clone()).map_err(decode_err)?;
            Ok(())
        }
        _ => return Err(format!("unknown kind {version} {kind}")),
    })
}
