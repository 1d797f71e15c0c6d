//! `deploy/` stays consistent and least-privilege: the Helm chart grants exactly the rules of
//! `deploy/rbac/clusterrole.yaml`, no rule uses a wildcard, the operator's pod is locked down,
//! and `list`/`watch` on Secrets (image pull secret discovery) is granted only where discovery
//! is turned on, and the only webhook configuration the operator may write is its checkpoint
//! restore webhook's.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};

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
    // The chart's ClusterRole (cluster-wide) and Roles (namespace-restricted) include one list.
    let template = read("helm/dynamo-operator/templates/_operator-rules.tpl");
    let (_, rules) = template
        .split_once("{{- define \"dynamo-operator.rules\" -}}")
        .unwrap();
    let chart: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_yaml::from_str(&untemplated(rules)).unwrap();
    assert_eq!(
        plain.rules,
        Some(chart),
        "deploy/helm/dynamo-operator/templates/_operator-rules.tpl must grant exactly deploy/rbac/clusterrole.yaml's rules"
    );
    let planner_epp: Vec<ClusterRole> =
        serde_yaml::Deserializer::from_str(&read("rbac/planner-epp-clusterroles.yaml"))
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
    let template = read("helm/dynamo-operator/templates/_planner-epp-rules.tpl");
    let mut defines = template.split("{{- define ").skip(1);
    for role in &planner_epp {
        let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> = serde_yaml::from_str(
            &untemplated(defines.next().unwrap().split_once('\n').unwrap().1),
        )
        .unwrap();
        assert_eq!(role.rules, Some(rules), "{:?}", role.metadata.name);
    }
}

/// The optional image pull secret discovery role (kustomize component and chart).
const DISCOVERY: &str = "components/image-pull-secret-discovery";

/// The first document of a multi-document YAML text.
fn first_document(text: &str) -> &str {
    text.split("\n---\n").next().unwrap_or(text)
}

#[test]
fn no_wildcards_in_rbac() {
    for path in [
        "rbac/clusterrole.yaml",
        &format!("{DISCOVERY}/clusterrole.yaml"),
    ] {
        let role: ClusterRole = serde_yaml::from_str(&read(path)).unwrap();
        for rule in role.rules.unwrap_or_default() {
            let all = rule
                .verbs
                .iter()
                .chain(rule.resources.iter().flatten())
                .chain(rule.api_groups.iter().flatten());
            for item in all {
                assert!(!item.contains('*'), "wildcard in {path}: {rule:?}");
            }
        }
    }
}

/// The base role reads Secrets by name only; `list`/`watch` come only with the discovery role,
/// which grants nothing else.
#[test]
fn secrets_are_listed_only_with_image_pull_secret_discovery() {
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
    let discovery: ClusterRole =
        serde_yaml::from_str(&read(&format!("{DISCOVERY}/clusterrole.yaml"))).unwrap();
    assert_eq!(
        discovery.rules.clone().unwrap_or_default(),
        [PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            verbs: vec!["list".into(), "watch".into()],
            ..Default::default()
        }]
    );
    let chart: ClusterRole = serde_yaml::from_str(first_document(&untemplated(&read(
        "helm/dynamo-operator/templates/image-pull-secrets-rbac.yaml",
    ))))
    .unwrap();
    assert_eq!(
        discovery.rules, chart.rules,
        "the chart's discovery role must grant exactly the kustomize component's rules"
    );
    assert_eq!(discovery.metadata.name, chart.metadata.name);
}

/// Discovery and its RBAC come together: the kustomize base leaves both out, the component adds
/// both; the chart's value (on by default, as upstream's chart) sets the flag and the role.
#[test]
fn image_pull_secret_discovery_and_its_rbac_go_together() {
    const ENV: &str = "DYNAMO_OPERATOR_DISCOVER_IMAGE_PULL_SECRETS";
    let env_of = |text: &str| {
        let deployment: Deployment = serde_yaml::from_str(text).unwrap();
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == ENV)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(
        env_of(&read("operator/deployment.yaml")).as_deref(),
        Some("false"),
        "the least-privilege base turns discovery off"
    );
    assert_eq!(
        env_of(&read(&format!("{DISCOVERY}/deployment-patch.yaml"))).as_deref(),
        Some("true")
    );
    let component: serde_yaml::Value =
        serde_yaml::from_str(&read(&format!("{DISCOVERY}/kustomization.yaml"))).unwrap();
    assert_eq!(component["kind"].as_str(), Some("Component"));
    assert_eq!(
        serde_yaml::from_value::<Vec<String>>(component["resources"].clone()).unwrap(),
        ["clusterrole.yaml", "clusterrolebinding.yaml"]
    );
    assert_eq!(
        component["patches"][0]["path"].as_str(),
        Some("deployment-patch.yaml")
    );
    let binding: ClusterRoleBinding =
        serde_yaml::from_str(&read(&format!("{DISCOVERY}/clusterrolebinding.yaml"))).unwrap();
    let base: ClusterRoleBinding =
        serde_yaml::from_str(&read("rbac/clusterrolebinding.yaml")).unwrap();
    assert_eq!(binding.subjects, base.subjects);
    assert_eq!(binding.role_ref.name, "dynamo-operator-image-pull-secrets");

    let template = read("helm/dynamo-operator/templates/image-pull-secrets-rbac.yaml");
    assert!(
        template.starts_with("{{- if .Values.discoverImagePullSecrets }}")
            && template.trim_end().ends_with("{{- end }}"),
        "the chart grants the discovery role only with the value"
    );
    assert!(
        read("helm/dynamo-operator/templates/deployment.yaml")
            .contains("- --discover-image-pull-secrets={{ .Values.discoverImagePullSecrets }}")
    );
    let values: serde_yaml::Value =
        serde_yaml::from_str(&read("helm/dynamo-operator/values.yaml")).unwrap();
    assert_eq!(
        values["discoverImagePullSecrets"],
        serde_yaml::Value::Bool(true)
    );
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

/// The checkpoint restore webhook: the operator may get, create (by apply) and patch its one
/// MutatingWebhookConfiguration by name, watch the snapshot-agent DaemonSets it reads, and the
/// chart's value sets the flag (on, as the binary's default).
#[test]
fn the_restore_webhook_configuration_is_the_only_one_the_operator_may_write() {
    let role: ClusterRole = serde_yaml::from_str(&read("rbac/clusterrole.yaml")).unwrap();
    let rules = role.rules.unwrap_or_default();
    let granting = |group: &str, resource: &str| -> Vec<&PolicyRule> {
        rules
            .iter()
            .filter(|r| {
                r.api_groups.iter().flatten().any(|g| g == group)
                    && r.resources.iter().flatten().any(|x| x == resource)
            })
            .collect()
    };
    let configurations = granting(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    );
    assert_eq!(
        configurations,
        [&PolicyRule {
            api_groups: Some(vec!["admissionregistration.k8s.io".into()]),
            resources: Some(vec!["mutatingwebhookconfigurations".into()]),
            verbs: vec!["get".into(), "create".into(), "patch".into()],
            resource_names: Some(vec![operator::restore_webhook::CONFIGURATION.into()]),
            ..Default::default()
        }]
    );
    assert!(
        granting(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations"
        )
        .is_empty()
    );
    let daemon_sets = granting("apps", "daemonsets");
    assert_eq!(daemon_sets.len(), 1);
    assert_eq!(daemon_sets[0].verbs, ["list", "watch"]);

    assert!(
        read("helm/dynamo-operator/templates/deployment.yaml")
            .contains("- --checkpoint-restore-webhook={{ .Values.webhook.checkpointRestore }}")
    );
    let values: serde_yaml::Value =
        serde_yaml::from_str(&read("helm/dynamo-operator/values.yaml")).unwrap();
    assert_eq!(
        values["webhook"]["checkpointRestore"],
        serde_yaml::Value::Bool(true)
    );
}
