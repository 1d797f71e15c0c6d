//! Image pull secret discovery: upstream's `internal/secrets/docker_test.go` (the index) and
//! `internal/dynamo/init_pull_secret_test.go` (the pod) as rows.

use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{LocalObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::pull_secrets::{DOCKER_CONFIG_JSON, Index, registry_host};

fn secret(name: &str, type_: &str, config: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: config.map(|c| {
            BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                ByteString(c.as_bytes().to_vec()),
            )])
        }),
        ..Default::default()
    }
}

fn docker(name: &str, config: &str) -> Secret {
    secret(name, DOCKER_CONFIG_JSON, Some(config))
}

#[test]
fn index_rows() {
    struct Row {
        name: &'static str,
        secrets: Vec<Secret>,
        /// `(image, expected names)`.
        lookups: &'static [(&'static str, &'static [&'static str])],
        unreadable: &'static [&'static str],
    }
    let rows = [
        // docker_test.go TestDockerSecretIndexer_RefreshIndex (namespace `default`; the other
        // namespace's row is in `reconcilers::pull_secrets`).
        Row {
            name: "hosts of every auths key, ports kept, names sorted",
            secrets: vec![
                docker(
                    "secret1",
                    r#"{"auths":{"docker.io":{}, "my-registry.com:5005/registry1":{}}}"#,
                ),
                docker(
                    "secret2",
                    r#"{"auths":{"my-registry.com:5005/registry2":{}}}"#,
                ),
            ],
            lookups: &[
                ("docker.io/library/ubuntu:22.04", &["secret1"]),
                ("ubuntu:22.04", &["secret1"]),
                ("my-registry.com:5005/team/app:1", &["secret1", "secret2"]),
                ("nvcr.io/nvidia/app:1", &[]),
            ],
            unreadable: &[],
        },
        // docker_test.go TestDockerSecretIndexer_DeterministicSecrets.
        Row {
            name: "two keys of one host name a Secret once, in name order",
            secrets: vec![
                docker(
                    "secret-b",
                    r#"{"auths":{"my-registry.com/team-a":{}, "my-registry.com/team-b":{}}}"#,
                ),
                docker("secret-a", r#"{"auths":{"my-registry.com/team-a":{}}}"#),
            ],
            lookups: &[("my-registry.com/team-a/app:1", &["secret-a", "secret-b"])],
            unreadable: &[],
        },
        Row {
            name: "a URL key counts by its host",
            secrets: vec![docker("ngc", r#"{"auths":{"https://nvcr.io/v2/":{}}}"#)],
            lookups: &[("nvcr.io/nvidia/app:1", &["ngc"])],
            unreadable: &[],
        },
        Row {
            name: "only kubernetes.io/dockerconfigjson is read",
            secrets: vec![
                secret(
                    "legacy",
                    "kubernetes.io/dockercfg",
                    Some(r#"{"auths":{"nvcr.io":{}}}"#),
                ),
                secret("opaque", "Opaque", Some(r#"{"auths":{"nvcr.io":{}}}"#)),
            ],
            lookups: &[("nvcr.io/nvidia/app:1", &[])],
            unreadable: &[],
        },
        // Upstream fails its whole refresh on these (docker_test.go's malformed Secret sits
        // outside the indexed namespace); here only the broken Secret is left out.
        Row {
            name: "unreadable configs are skipped and reported, the others kept",
            secrets: vec![
                docker("bad-json", "not-json"),
                docker("bad-auths", r#"{"auths":"nvcr.io"}"#),
                secret("no-data", DOCKER_CONFIG_JSON, None),
                docker("no-auths", r#"{"credsStore":"x"}"#),
                docker("good", r#"{"auths":{"nvcr.io":{}}}"#),
            ],
            lookups: &[("nvcr.io/nvidia/app:1", &["good"])],
            unreadable: &["bad-auths", "bad-json", "no-data"],
        },
    ];
    for row in rows {
        let Index {
            pull_secrets,
            unreadable,
        } = PullSecrets::index(&row.secrets);
        for (image, expected) in row.lookups {
            assert_eq!(
                pull_secrets.for_image(image),
                &strings(expected)[..],
                "{}: {image}",
                row.name
            );
        }
        assert_eq!(unreadable, strings(row.unreadable), "{}", row.name);
    }
}

#[test]
fn registry_hosts_of_images() {
    for (image, host) in [
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1", "nvcr.io"),
        ("localhost:5000/x", "localhost:5000"),
        ("localhost/x", "localhost"),
        (
            "my-registry.com:5005/team/app@sha256:abc",
            "my-registry.com:5005",
        ),
        ("ubuntu:22.04", "docker.io"),
        ("library/ubuntu", "docker.io"),
    ] {
        assert_eq!(registry_host(image), host, "{image}");
    }
}

/// The pod of a frontend whose `main` runs `main_image`, with an init container
/// `init.example/prepare:v1`, the user's `explicit` pull secrets and, when `disabled`, the
/// opt-out annotation; `init.example` has the Secret `init-pull-secret`.
fn pod(main_image: &str, explicit: &[&str], disabled: bool, sidecar: Option<&str>) -> PodSpec {
    let mut main = container("main");
    main.image = Some(main_image.into());
    let mut containers = vec![main];
    if let Some(image) = sidecar {
        let mut c = container("proxy");
        c.image = Some(image.into());
        containers.push(c);
    }
    let mut c = component(ComponentType::Frontend, containers);
    let spec = c.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.init_containers = Some(vec![Container {
        name: "prepare".into(),
        image: Some("init.example/prepare:v1".into()),
        ..Default::default()
    }]);
    if !explicit.is_empty() {
        spec.image_pull_secrets = Some(
            explicit
                .iter()
                .map(|n| LocalObjectReference {
                    name: n.to_string(),
                })
                .collect(),
        );
    }
    let annotations: BTreeMap<String, String> = if disabled {
        BTreeMap::from([(
            DISABLE_IMAGE_PULL_SECRET_DISCOVERY.to_string(),
            "true".to_string(),
        )])
    } else {
        BTreeMap::new()
    };
    let pull_secrets = PullSecrets::index(&[
        docker("init-pull-secret", r#"{"auths":{"init.example":{}}}"#),
        docker("proxy-pull-secret", r#"{"auths":{"proxy.example":{}}}"#),
    ])
    .pull_secrets;
    let mut input = input(&c, Backend::None);
    input.annotations = &annotations;
    input.pull_secrets = &pull_secrets;
    pod_spec(&input)
}

fn names(spec: &PodSpec) -> Vec<String> {
    spec.image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

#[test]
fn pod_rows() {
    struct Row {
        name: &'static str,
        main: &'static str,
        explicit: &'static [&'static str],
        disabled: bool,
        sidecar: Option<&'static str>,
        expected: &'static [&'static str],
    }
    let row = |name, main, explicit, disabled, expected| Row {
        name,
        main,
        explicit,
        disabled,
        sidecar: None,
        expected,
    };
    let rows = [
        // init_pull_secret_test.go TestGenerateBasePodSpec_InitContainerPullSecrets.
        row(
            "private init image",
            "public.example/frontend:v1",
            &[],
            false,
            &["init-pull-secret"],
        ),
        row(
            "shared registry is deduplicated",
            "init.example/frontend:v1",
            &[],
            false,
            &["init-pull-secret"],
        ),
        row(
            "explicit credentials preserved",
            "public.example/frontend:v1",
            &["explicit-secret"],
            false,
            &["explicit-secret", "init-pull-secret"],
        ),
        row(
            "explicit credential is deduplicated",
            "public.example/frontend:v1",
            &["init-pull-secret"],
            false,
            &["init-pull-secret"],
        ),
        row(
            "disabled discovery retains explicit credentials",
            "public.example/frontend:v1",
            &["explicit-secret"],
            true,
            &["explicit-secret"],
        ),
        // GenerateBasePodSpec: every container's image, containers before init containers.
        Row {
            name: "a sidecar's registry, before the init container's",
            main: "public.example/frontend:v1",
            explicit: &[],
            disabled: false,
            sidecar: Some("proxy.example/envoy:1"),
            expected: &["proxy-pull-secret", "init-pull-secret"],
        },
        row(
            "disabled discovery with nothing explicit",
            "init.example/frontend:v1",
            &[],
            true,
            &[],
        ),
    ];
    for r in rows {
        let spec = pod(r.main, r.explicit, r.disabled, r.sidecar);
        assert_eq!(names(&spec), strings(r.expected), "{}", r.name);
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].image.as_deref(), Some("init.example/prepare:v1"));
    }
}

/// Discovery that finds nothing for the pod's images adds no `imagePullSecrets`.
#[test]
fn nothing_discovered_adds_nothing() {
    let c = component(ComponentType::Frontend, vec![container("main")]);
    let pull_secrets =
        PullSecrets::index(&[docker("ngc", r#"{"auths":{"nvcr.io":{}}}"#)]).pull_secrets;
    let mut input = input(&c, Backend::None);
    input.pull_secrets = &pull_secrets;
    assert_eq!(pod_spec(&input).image_pull_secrets, None);
}
