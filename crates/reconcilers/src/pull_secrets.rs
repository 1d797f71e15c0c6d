//! Image pull secret discovery, shared by both workload pathways: the Grove pathway resolves
//! the graph's namespace before rendering its PodCliqueSet, the component pathway the DCD's
//! namespace before rendering its Deployment or LeaderWorkerSet. Both hand the result to
//! [`pod_render::pod_spec`], which attaches it ([`pod_render::pull_secrets`]).
//!
//! Discovery is off unless the operator is started with it (`--discover-image-pull-secrets`):
//! it lists Secrets, which needs `list`/`watch` on `secrets`. The operator then serves the list
//! from a watch of the Secrets of type `kubernetes.io/dockerconfigjson` (a field-selected
//! watch, so no other Secret is held in memory), never from a live list per reconcile; a
//! created, changed or deleted Docker config Secret re-renders the graphs and DCDs of its
//! namespace (`docs/event-action-map.md`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kit::{Reader, ReaderExt, Selector};
use pod_render::PullSecrets;
use pod_render::pull_secrets::Index;

/// Reads a namespace's Docker config Secrets for [`PullSecrets`].
#[derive(Clone)]
pub struct Discovery {
    reader: Arc<dyn Reader>,
    enabled: bool,
}

impl Discovery {
    /// Discovery reading with `reader`; `enabled: false` reads nothing and finds nothing.
    pub fn new(reader: Arc<dyn Reader>, enabled: bool) -> Self {
        Discovery { reader, enabled }
    }

    /// Whether discovery is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The pull secrets of `namespace` (none when discovery is off). A Docker config Secret
    /// that cannot be read is left out and logged. A failed list is an error: rendering
    /// without the namespace's pull secrets would take them off every pod (and roll it).
    pub async fn resolve(&self, namespace: Option<&str>) -> kit::Result<PullSecrets> {
        if !self.enabled {
            return Ok(PullSecrets::default());
        }
        let secrets: Vec<Secret> = self.reader.list(namespace, &Selector::default()).await?;
        let Index {
            pull_secrets,
            unreadable,
        } = PullSecrets::index(&secrets);
        for name in unreadable {
            tracing::warn!(
                namespace = namespace.unwrap_or_default(),
                secret = %name,
                "image pull secret discovery: the Secret's .dockerconfigjson has no readable auths; skipped"
            );
        }
        Ok(pull_secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::testing::{Double, Verb};
    use pod_render::pull_secrets::DOCKER_CONFIG_JSON;
    use std::collections::BTreeMap;

    fn docker(namespace: &str, name: &str, config: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            type_: Some(DOCKER_CONFIG_JSON.into()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                ByteString(config.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }

    /// docker_test.go: `TestDockerSecretIndexer_RefreshIndex` (the namespaces are kept apart)
    /// and `TestDockerSecretIndexer_RefreshIndexRespectsNamespaceScope` (a malformed Secret of
    /// another namespace does not matter), as rows of (namespace, image, expected names).
    #[tokio::test]
    async fn each_namespace_sees_its_own_secrets() {
        let d = Double::new();
        for secret in [
            docker(
                "default",
                "secret1",
                r#"{"auths":{"docker.io":{}, "my-registry.com:5005/registry1":{}}}"#,
            ),
            docker(
                "default",
                "secret2",
                r#"{"auths":{"my-registry.com:5005/registry2":{}}}"#,
            ),
            docker(
                "another-namespace",
                "secret3",
                r#"{"auths":{"my-registry.com:5005/registry2":{}}}"#,
            ),
            docker(
                "target",
                "target-secret",
                r#"{"auths":{"target-registry.io/team":{}}}"#,
            ),
            docker("other", "malformed-secret", "not-json"),
        ] {
            d.insert(secret);
        }
        let discovery = Discovery::new(d.reader(), true);
        let rows: [(&str, &str, &[&str]); 6] = [
            ("default", "docker.io/x:1", &["secret1"]),
            (
                "default",
                "my-registry.com:5005/x:1",
                &["secret1", "secret2"],
            ),
            (
                "another-namespace",
                "my-registry.com:5005/x:1",
                &["secret3"],
            ),
            ("target", "target-registry.io/team/x:1", &["target-secret"]),
            ("other", "target-registry.io/team/x:1", &[]),
            ("empty", "docker.io/x:1", &[]),
        ];
        for (namespace, image, expected) in rows {
            let found = discovery.resolve(Some(namespace)).await.unwrap();
            assert_eq!(found.for_image(image), expected, "{namespace} {image}");
        }
    }

    #[tokio::test]
    async fn off_reads_nothing() {
        let d = Double::new();
        d.insert(docker("ns", "ngc", r#"{"auths":{"nvcr.io":{}}}"#));
        // A list would fail.
        d.fail_next(
            Verb::List,
            "Secret",
            kit::Error::Forbidden("secrets denied".into()),
        );
        let found = Discovery::new(d.reader(), false)
            .resolve(Some("ns"))
            .await
            .unwrap();
        assert!(found.is_empty());
    }

    #[tokio::test]
    async fn a_failed_list_is_an_error() {
        let d = Double::new();
        d.fail_next(
            Verb::List,
            "Secret",
            kit::Error::Forbidden("secrets denied".into()),
        );
        assert!(
            Discovery::new(d.reader(), true)
                .resolve(Some("ns"))
                .await
                .is_err()
        );
    }
}
