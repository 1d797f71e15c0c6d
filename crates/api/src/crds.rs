//! The CustomResourceDefinitions this operator installs, and how they are generated.
//!
//! Schemas are derived from the Rust types (schemars), then made lean: descriptions that come
//! from embedded Kubernetes core types (pod templates, env vars, probes, conditions) are
//! removed, ours are kept, so `kubectl explain dgd.spec` stays useful while the CRDs stay well
//! below etcd's object size limit. CRDs this large must be installed with server-side apply
//! (client-side `kubectl apply` stores a last-applied annotation, limited to 256 KiB).

use crate::{checkpoint, dcd, scaling_adapter, v1alpha1, v1beta1, worker_metadata};
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscalerBehavior, MetricSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, EnvVar, PodSpec, PodTemplateSpec, Probe, ResourceClaim,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use schemars::JsonSchema;
use serde_json::Value;
use std::collections::BTreeSet;

/// Where the apiserver sends ConversionReviews (v1alpha1 ⇄ v1beta1) for the kinds served in
/// both versions: DynamoGraphDeployment, DynamoComponentDeployment and
/// DynamoGraphDeploymentScalingAdapter.
#[derive(Clone, Debug, PartialEq)]
pub enum ConversionWebhookConfig {
    /// An in-cluster Service (the operator's webhook Service).
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// Port of the Service.
        port: i32,
        /// PEM CA bundle that signed the webhook's serving certificate.
        ca_bundle: Option<Vec<u8>>,
    },
    /// A URL (out-of-cluster operator, tests).
    Url {
        /// `https://host:port` (the path is always [`CONVERSION_PATH`]).
        base: String,
        /// PEM CA bundle that signed the webhook's serving certificate.
        ca_bundle: Option<Vec<u8>>,
    },
}

/// HTTP path of the conversion webhook.
pub const CONVERSION_PATH: &str = "/convert";
/// Default namespace of the operator's webhook Service.
pub const DEFAULT_WEBHOOK_NAMESPACE: &str = "dynamo-system";
/// Default name of the operator's webhook Service.
pub const DEFAULT_WEBHOOK_SERVICE: &str = "dynamo-operator-webhook";

impl Default for ConversionWebhookConfig {
    fn default() -> Self {
        Self::Service {
            namespace: DEFAULT_WEBHOOK_NAMESPACE.into(),
            name: DEFAULT_WEBHOOK_SERVICE.into(),
            port: 443,
            ca_bundle: None,
        }
    }
}

/// Every CRD this operator installs: DynamoGraphDeployment, DynamoComponentDeployment and
/// DynamoGraphDeploymentScalingAdapter (v1beta1 storage + v1alpha1, as upstream serves them,
/// with the default conversion webhook), DynamoCheckpoint and DynamoWorkerMetadata (written by
/// workers for Kubernetes discovery).
pub fn crds() -> Vec<CustomResourceDefinition> {
    crds_with(&ConversionWebhookConfig::default())
}

/// [`crds()`] with the conversion webhooks pointing at `webhook`.
pub fn crds_with(webhook: &ConversionWebhookConfig) -> Vec<CustomResourceDefinition> {
    let mut crds = converted_crds(webhook);
    crds.extend([
        lean(checkpoint::DynamoCheckpoint::crd()),
        lean(worker_metadata::DynamoWorkerMetadata::crd()),
    ]);
    crds
}

/// The CRDs served in v1alpha1 and v1beta1 (storage), each converted by `webhook`:
/// DynamoGraphDeployment, DynamoComponentDeployment, DynamoGraphDeploymentScalingAdapter.
pub fn converted_crds(webhook: &ConversionWebhookConfig) -> Vec<CustomResourceDefinition> {
    vec![
        dgd_crd(webhook),
        converted(
            v1alpha1::dcd::DynamoComponentDeployment::crd(),
            dcd::DynamoComponentDeployment::crd(),
            webhook,
        ),
        converted(
            v1alpha1::scaling_adapter::DynamoGraphDeploymentScalingAdapter::crd(),
            scaling_adapter::DynamoGraphDeploymentScalingAdapter::crd(),
            webhook,
        ),
    ]
}

/// The DynamoGraphDeployment CRD: v1beta1 (storage) and v1alpha1, converted by `webhook`.
pub fn dgd_crd(webhook: &ConversionWebhookConfig) -> CustomResourceDefinition {
    converted(
        v1alpha1::DynamoGraphDeployment::crd(),
        v1beta1::DynamoGraphDeployment::crd(),
        webhook,
    )
}

/// The DynamoGraphDeployment CRD with both versions and no conversion strategy (the
/// apiserver default, `None`). Only useful for inspecting the schemas: with `None` the
/// apiserver rewrites apiVersion only, which breaks the different v1alpha1 shape.
pub fn dgd_crd_without_conversion() -> CustomResourceDefinition {
    both_versions(
        v1alpha1::DynamoGraphDeployment::crd(),
        v1beta1::DynamoGraphDeployment::crd(),
    )
}

/// One kind's `alpha` and `beta` CRDs as one, v1beta1 stored, converted by `webhook`.
fn converted(
    alpha: CustomResourceDefinition,
    beta: CustomResourceDefinition,
    webhook: &ConversionWebhookConfig,
) -> CustomResourceDefinition {
    let mut crd = both_versions(alpha, beta);
    crd.spec.conversion = Some(webhook_conversion(webhook));
    crd
}

/// One kind's `alpha` and `beta` CRDs as one, v1beta1 stored, no conversion strategy.
fn both_versions(
    alpha: CustomResourceDefinition,
    beta: CustomResourceDefinition,
) -> CustomResourceDefinition {
    lean(merge_crds(vec![alpha, beta], "v1beta1").expect("the two versions of a kind merge"))
}

/// A DynamoGraphDeployment CRD serving only v1alpha1, as its storage version. For tests
/// that check v1alpha1 manifests against the real apiserver without a conversion webhook.
pub fn dgd_v1alpha1_only_crd() -> CustomResourceDefinition {
    let mut crd = lean(v1alpha1::DynamoGraphDeployment::crd());
    for v in &mut crd.spec.versions {
        v.storage = true;
        v.deprecated = None;
        v.deprecation_warning = None;
    }
    crd
}

fn webhook_conversion(webhook: &ConversionWebhookConfig) -> CustomResourceConversion {
    let client_config = match webhook {
        ConversionWebhookConfig::Service {
            namespace,
            name,
            port,
            ca_bundle,
        } => WebhookClientConfig {
            ca_bundle: ca_bundle.clone().map(k8s_openapi::ByteString),
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(CONVERSION_PATH.into()),
                port: Some(*port),
            }),
            url: None,
        },
        ConversionWebhookConfig::Url { base, ca_bundle } => WebhookClientConfig {
            ca_bundle: ca_bundle.clone().map(k8s_openapi::ByteString),
            service: None,
            url: Some(format!("{}{CONVERSION_PATH}", base.trim_end_matches('/'))),
        },
    };
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(client_config),
            conversion_review_versions: vec!["v1".into()],
        }),
    }
}

/// The YAML of a CRD, as written to `deploy/crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_yaml::to_string(crd).expect("a CRD serializes to YAML");
    format!("---\n{body}")
}

/// File name of a CRD under `deploy/crds/`: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Removes the descriptions that come from embedded Kubernetes core types.
fn lean(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let core = core_descriptions();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let mut value = serde_json::to_value(&*schema).expect("schema serializes");
            strip_descriptions(&mut value, &core);
            *schema = serde_json::from_value(value).expect("schema deserializes");
        }
    }
    crd
}

fn strip_descriptions(value: &mut Value, core: &BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            match map.get("description").and_then(Value::as_str) {
                Some(d) if core.contains(d) => {
                    map.remove("description");
                }
                Some(d) => {
                    let joined = unwrap_lines(d);
                    map.insert("description".into(), joined.into());
                }
                None => {}
            }
            map.values_mut()
                .for_each(|child| strip_descriptions(child, core));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip_descriptions(v, core)),
        _ => {}
    }
}

/// Doc comments are wrapped at 100 columns; join wrapped lines, keep paragraph breaks.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|para| {
            para.split('\n')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Every description string of the Kubernetes types our CRDs embed.
fn core_descriptions() -> BTreeSet<String> {
    let mut generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let schemas = [
        PodTemplateSpec::json_schema(&mut generator),
        PodSpec::json_schema(&mut generator),
        Container::json_schema(&mut generator),
        EnvVar::json_schema(&mut generator),
        Probe::json_schema(&mut generator),
        ResourceClaim::json_schema(&mut generator),
        ConfigMapKeySelector::json_schema(&mut generator),
        Condition::json_schema(&mut generator),
        HorizontalPodAutoscalerBehavior::json_schema(&mut generator),
        MetricSpec::json_schema(&mut generator),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity::json_schema(&mut generator),
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time::json_schema(&mut generator),
    ];
    let mut out = BTreeSet::new();
    for schema in schemas {
        collect_descriptions(&schema.to_value(), &mut out);
    }
    out
}

fn collect_descriptions(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(d) = map.get("description").and_then(Value::as_str) {
                out.insert(d.to_string());
            }
            map.values().for_each(|v| collect_descriptions(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_descriptions(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;
    /// etcd's default request limit is 1.5 MiB; stay far below it.
    const MAX_CRD_JSON: usize = 512 * KIB;

    fn json_size(crd: &CustomResourceDefinition) -> usize {
        serde_json::to_vec(crd).unwrap().len()
    }

    fn schema(crd: &CustomResourceDefinition, version: &str) -> Value {
        let v = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == version)
            .unwrap();
        serde_json::to_value(
            v.schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn crds_are_well_below_the_etcd_object_limit() {
        for crd in crds() {
            let name = crd.metadata.name.clone().unwrap();
            let json = json_size(&crd);
            let yaml = to_yaml(&crd).len();
            eprintln!("{name}: {} KiB JSON, {} KiB YAML", json / KIB, yaml / KIB);
            assert!(json < MAX_CRD_JSON, "{name}: {json} bytes of JSON");
        }
    }

    #[test]
    fn both_dgd_versions_fit_in_one_crd_even_with_descriptions_of_core_types() {
        // Lean trimming is what keeps the merged CRD small; measure what it saves.
        let lean = json_size(&dgd_crd(&ConversionWebhookConfig::default()));
        let full = serde_json::to_vec(
            &merge_crds(
                vec![
                    v1alpha1::DynamoGraphDeployment::crd(),
                    v1beta1::DynamoGraphDeployment::crd(),
                ],
                "v1beta1",
            )
            .unwrap(),
        )
        .unwrap()
        .len();
        eprintln!(
            "DynamoGraphDeployment: {} KiB lean, {} KiB with core descriptions",
            lean / KIB,
            full / KIB
        );
        assert!(lean < full / 2, "trimming saves at least half");
        assert!(
            full < 3 * 512 * KIB,
            "even untrimmed, both versions fit etcd's 1.5 MiB"
        );
    }

    #[test]
    fn no_core_type_description_survives_and_ours_do() {
        let core = core_descriptions();
        let crd = dgd_crd(&ConversionWebhookConfig::default());
        let text = serde_json::to_string(&crd).unwrap();
        for d in core.iter().filter(|d| d.len() > 40) {
            assert!(
                !text.contains(&serde_json::to_string(d).unwrap()),
                "core description left: {d}"
            );
        }
        let spec = schema(&crd, "v1beta1")["properties"]["spec"].clone();
        assert!(
            spec["description"]
                .as_str()
                .unwrap()
                .starts_with("Desired state")
        );
        let replicas = &spec["properties"]["components"]["items"]["properties"]["replicas"];
        assert!(
            replicas["description"]
                .as_str()
                .unwrap()
                .contains("Desired number of replicas")
        );
    }

    /// Every property of our own types has a description (doc comments become `kubectl
    /// explain` text). Embedded Kubernetes types are not ours and are skipped.
    #[test]
    fn every_field_of_our_types_is_documented() {
        const CORE_FIELDS: &[&str] = &[
            "podTemplate",
            "podTemplateSpec",
            "env",
            "envs",
            "conditions",
            "configMapRef",
            "livenessProbe",
            "readinessProbe",
            "claims",
            "behavior",
            "metrics",
            "extraPodSpec",
            "metadata",
            "sharedMemorySize",
            "size",
            "startTime",
            "endTime",
            "createdAt",
            "lastScaleTime",
        ];
        fn walk(path: &str, s: &Value, missing: &mut Vec<String>) {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (name, p) in props {
                    let here = format!("{path}.{name}");
                    if p.get("description").is_none()
                        && !["apiVersion", "kind", "metadata"].contains(&name.as_str())
                    {
                        missing.push(here.clone());
                    }
                    if !CORE_FIELDS.contains(&name.as_str()) {
                        walk(&here, p, missing);
                    }
                }
            }
            if let Some(items) = s.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
            if let Some(extra) = s.get("additionalProperties").filter(|v| v.is_object()) {
                walk(&format!("{path}{{}}"), extra, missing);
            }
        }
        let mut missing = Vec::new();
        for crd in crds() {
            for v in &crd.spec.versions {
                let name = format!("{}/{}", crd.spec.names.kind, v.name);
                walk(&name, &schema(&crd, &v.name), &mut missing);
            }
        }
        assert!(missing.is_empty(), "undocumented: {missing:#?}");
    }

    #[test]
    fn names_short_names_and_printer_columns() {
        let all = crds();
        let by_kind = |kind: &str| all.iter().find(|c| c.spec.names.kind == kind).unwrap();
        for (kind, plural, short) in [
            ("DynamoGraphDeployment", "dynamographdeployments", "dgd"),
            (
                "DynamoComponentDeployment",
                "dynamocomponentdeployments",
                "dcd",
            ),
            (
                "DynamoGraphDeploymentScalingAdapter",
                "dynamographdeploymentscalingadapters",
                "dgdsa",
            ),
            ("DynamoCheckpoint", "dynamocheckpoints", "dckpt"),
        ] {
            let crd = by_kind(kind);
            assert_eq!(crd.spec.group, "nvidia.com");
            assert_eq!(crd.spec.names.plural, plural);
            assert_eq!(
                crd.spec.names.short_names.as_deref(),
                Some(&[short.to_string()][..])
            );
            assert_eq!(crd.spec.scope, "Namespaced");
            assert_eq!(file_name(crd), format!("{plural}.nvidia.com.yaml"));
            for v in &crd.spec.versions {
                assert!(
                    v.subresources
                        .as_ref()
                        .and_then(|s| s.status.as_ref())
                        .is_some(),
                    "{kind} status subresource"
                );
            }
        }
        let dgd = by_kind("DynamoGraphDeployment");
        for v in &dgd.spec.versions {
            let columns: Vec<_> = v
                .additional_printer_columns
                .as_ref()
                .unwrap()
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(columns, ["Ready", "State", "Backend", "Age"], "{}", v.name);
        }
        let dgdsa = by_kind("DynamoGraphDeploymentScalingAdapter");
        let scale = dgdsa.spec.versions[0]
            .subresources
            .as_ref()
            .unwrap()
            .scale
            .as_ref()
            .unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
    }

    #[test]
    fn dgd_serves_both_versions_with_v1beta1_stored_and_webhook_conversion() {
        let crd = dgd_crd(&ConversionWebhookConfig::default());
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert!(versions.contains(&("v1beta1", true, true)), "{versions:?}");
        assert!(
            versions.contains(&("v1alpha1", true, false)),
            "{versions:?}"
        );
        let alpha = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == "v1alpha1")
            .unwrap();
        assert_eq!(alpha.deprecated, Some(true));
        let conversion = crd.spec.conversion.as_ref().unwrap();
        assert_eq!(conversion.strategy, "Webhook");
        let webhook = conversion.webhook.as_ref().unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        let service = webhook
            .client_config
            .as_ref()
            .unwrap()
            .service
            .as_ref()
            .unwrap();
        assert_eq!(service.path.as_deref(), Some(CONVERSION_PATH));
        let url = dgd_crd(&ConversionWebhookConfig::Url {
            base: "https://127.0.0.1:9443/".into(),
            ca_bundle: None,
        });
        let url = url
            .spec
            .conversion
            .unwrap()
            .webhook
            .unwrap()
            .client_config
            .unwrap()
            .url;
        assert_eq!(url.as_deref(), Some("https://127.0.0.1:9443/convert"));
    }

    #[test]
    fn cel_rules_mirror_upstream() {
        let text = serde_json::to_string(&dgd_crd(&ConversionWebhookConfig::default())).unwrap();
        for rule in [
            "oldSelf.hasValue() || !has(self.restart)",
            "self.filter(c, has(c.type) && c.type == 'epp').size() <= 1",
            "!has(oldSelf.type) || (has(self.type) && self.type == oldSelf.type)",
            "!has(self.eppConfig) || (has(self.type) && self.type == 'epp')",
        ] {
            assert!(
                text.contains(&serde_json::to_string(rule).unwrap()),
                "missing rule {rule}"
            );
        }
    }
}
