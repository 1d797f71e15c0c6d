//! `deploy/` stays consistent and least-privilege: the Helm chart grants exactly the rules of
//! `deploy/rbac/clusterrole.yaml`, no rule uses a wildcard, and the operator's pod is locked down.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;

fn read(path: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../deploy/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Parses a Helm template by dropping its template-only lines (what remains is plain YAML).
fn untemplated(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains("{{"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn helm_cluster_role_matches_deploy() {
    let plain: ClusterRole = serde_yaml::from_str(&read("rbac/clusterrole.yaml")).unwrap();
    let chart: ClusterRole = serde_yaml::from_str(&untemplated(&read(
        "helm/dynamo-operator/templates/clusterrole.yaml",
    )))
    .unwrap();
    assert_eq!(
        plain.rules, chart.rules,
        "deploy/helm/dynamo-operator/templates/clusterrole.yaml must grant exactly deploy/rbac/clusterrole.yaml's rules"
    );
}

#[test]
fn no_wildcards_in_rbac() {
    let role: ClusterRole = serde_yaml::from_str(&read("rbac/clusterrole.yaml")).unwrap();
    for rule in role.rules.unwrap_or_default() {
        let all = rule
            .verbs
            .iter()
            .chain(rule.resources.iter().flatten())
            .chain(rule.api_groups.iter().flatten());
        for item in all {
            assert!(!item.contains('*'), "wildcard in {rule:?}");
        }
        if rule.resources.iter().flatten().any(|r| r == "secrets") {
            assert!(
                !rule.verbs.iter().any(|v| v == "list" || v == "watch"),
                "Secrets are read by name only: {rule:?}"
            );
        }
    }
}

#[test]
fn operator_pod_is_locked_down() {
    for (path, text) in [
        ("operator/deployment.yaml", read("operator/deployment.yaml")),
        (
            "helm/dynamo-operator/templates/deployment.yaml",
            untemplated(&read("helm/dynamo-operator/templates/deployment.yaml")),
        ),
    ] {
        let deployment: Deployment = serde_yaml::from_str(&text).unwrap();
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        let pod_security = pod.security_context.unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true), "{path}");
        assert_eq!(
            pod_security.seccomp_profile.map(|s| s.type_).as_deref(),
            Some("RuntimeDefault"),
            "{path}"
        );
        for container in pod.containers {
            let sc = container.security_context.unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{path}");
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{path}");
            assert_eq!(sc.privileged, Some(false), "{path}");
            assert_eq!(
                sc.capabilities.and_then(|c| c.drop),
                Some(vec!["ALL".to_string()]),
                "{path}"
            );
        }
    }
}

/// The operator may watch, by name, exactly the CRDs and APIServices that provide the optional
/// APIs it follows (`operator::optional_apis::OPTIONAL`).
#[test]
fn the_optional_apis_providers_are_watchable_by_name() {
    use operator::optional_apis::{OPTIONAL, Source};
    let role: ClusterRole = serde_yaml::from_str(&read("rbac/clusterrole.yaml")).unwrap();
    let rules = role.rules.unwrap_or_default();
    for (group, resource, source) in [
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            Source::Crd,
        ),
        ("apiregistration.k8s.io", "apiservices", Source::BuiltIn),
    ] {
        let mut wanted: Vec<String> = OPTIONAL
            .iter()
            .filter(|api| api.source == source)
            .map(|api| api.provider_name())
            .collect();
        wanted.sort();
        let rule = rules
            .iter()
            .find(|r| {
                r.api_groups.iter().flatten().any(|g| g == group)
                    && r.resources.iter().flatten().any(|r| r == resource)
                    && r.verbs.iter().any(|v| v == "watch")
            })
            .unwrap_or_else(|| panic!("no watch rule for {resource}"));
        let mut granted = rule.resource_names.clone().unwrap_or_default();
        granted.sort();
        assert_eq!(granted, wanted, "{resource}");
        assert_eq!(rule.verbs, ["list", "watch"], "{resource}");
    }
}
