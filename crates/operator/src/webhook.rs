//! The operator's webhooks, served over HTTPS by every replica (leader or not: the webhook
//! Service may route to any of them): the DynamoGraphDeployment conversion webhook (v1alpha1 ⇄
//! v1beta1) and, with `--checkpoint-restore-webhook`, the checkpoint restore webhook for pod
//! creation ([`crate::restore_webhook`]).
//!
//! Certificates, in order of preference:
//! 1. `--webhook-cert-dir` with `tls.crt` and `tls.key` (and optionally `ca.crt`), e.g. from
//!    cert-manager; the CA bundle is `ca.crt`, else `tls.crt`.
//! 2. Otherwise a self-signed CA kept in a Secret (`--webhook-secret`, in the operator's
//!    namespace): the first replica creates it, every other replica and every restart reuses it,
//!    so replicas never fight over the CRD's CA bundle.
//!
//! With `--manage-crd-conversion` (the default) the operator points the DynamoGraphDeployment
//! CRD's conversion webhook at itself (Service or URL) with that CA bundle, at start-up; with
//! `--checkpoint-restore-webhook` (the default) it applies the restore webhook's
//! MutatingWebhookConfiguration, pointing at itself with the same bundle.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::Json;
use axum::routing::post;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{ServiceReference, WebhookClientConfig};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::core::conversion::ConversionReview;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use api::crds::ConversionWebhookConfig;

use crate::restore_webhook::{self, Restorer};

/// The CA's name in self-signed mode.
const CA_NAME: &str = "dynamo-operator-webhook-ca";

/// Serving certificate and the bundle clients verify it with.
pub struct WebhookTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_bundle: String,
}

impl std::fmt::Debug for WebhookTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTls").finish_non_exhaustive()
    }
}

/// Where the webhook is reachable, as the apiserver sees it.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `https://<name>.<namespace>.svc:<port>` (in-cluster).
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    /// An explicit base URL (out-of-cluster runs, tests).
    Url(String),
}

impl Endpoint {
    /// DNS names and IPs the serving certificate must cover.
    fn subject_names(&self) -> (Vec<String>, Vec<IpAddr>) {
        match self {
            Endpoint::Service {
                namespace, name, ..
            } => (
                vec![
                    format!("{name}.{namespace}.svc"),
                    format!("{name}.{namespace}.svc.cluster.local"),
                    format!("{name}.{namespace}"),
                    name.clone(),
                ],
                Vec::new(),
            ),
            Endpoint::Url(url) => {
                let host = url
                    .trim_start_matches("https://")
                    .split(['/', ':'])
                    .next()
                    .unwrap_or_default()
                    .to_string();
                match host.parse::<IpAddr>() {
                    Ok(ip) => (vec!["localhost".into()], vec![ip]),
                    Err(_) => (vec![host], Vec::new()),
                }
            }
        }
    }

    /// How the apiserver reaches path `path` of this endpoint, verifying it with `ca_bundle`
    /// (an admission webhook's client config).
    pub fn client_config(&self, path: &str, ca_bundle: &str) -> WebhookClientConfig {
        let (service, url) = match self {
            Endpoint::Service {
                namespace,
                name,
                port,
            } => (
                Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_string()),
                    port: Some(*port),
                }),
                None,
            ),
            Endpoint::Url(base) => (None, Some(format!("{}{path}", base.trim_end_matches('/')))),
        };
        WebhookClientConfig {
            ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
            service,
            url,
        }
    }

    /// The CRD's conversion config for this endpoint.
    pub fn conversion(&self, ca_bundle: &str) -> ConversionWebhookConfig {
        match self {
            Endpoint::Service {
                namespace,
                name,
                port,
            } => ConversionWebhookConfig::Service {
                namespace: namespace.clone(),
                name: name.clone(),
                port: *port,
                ca_bundle: Some(ca_bundle.as_bytes().to_vec()),
            },
            Endpoint::Url(base) => ConversionWebhookConfig::Url {
                base: base.clone(),
                ca_bundle: Some(ca_bundle.as_bytes().to_vec()),
            },
        }
    }
}

/// Reads the certificate from `dir` (`tls.crt`, `tls.key`, optional `ca.crt`).
pub fn tls_from_dir(dir: &Path) -> anyhow::Result<WebhookTls> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let cert_pem = read("tls.crt")?;
    let key_pem = read("tls.key")?;
    let ca_bundle = read("ca.crt").unwrap_or_else(|_| cert_pem.clone());
    Ok(WebhookTls {
        cert_pem,
        key_pem,
        ca_bundle,
    })
}

/// The self-signed certificate kept in `namespace/secret`: created on first use, reused after.
/// The serving certificate is issued afresh by this process from the stored CA (it only needs
/// to chain to the bundle in the CRD).
pub async fn tls_from_secret(
    client: Client,
    namespace: &str,
    secret: &str,
    endpoint: &Endpoint,
) -> anyhow::Result<WebhookTls> {
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    let authority = match secrets.get_opt(secret).await? {
        Some(existing) => load_authority(&existing)?,
        None => {
            let fresh = kit::pki::Authority::generate(CA_NAME)?;
            let object = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(secret.to_string()),
                    labels: Some(
                        [(
                            api::labels::APP_NAME.to_string(),
                            api::labels::OPERATOR_NAME.to_string(),
                        )]
                        .into(),
                    ),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(
                    [
                        (
                            "ca.crt".to_string(),
                            ByteString(fresh.cert_pem().as_bytes().to_vec()),
                        ),
                        (
                            "ca.key".to_string(),
                            ByteString(fresh.key_pem().as_bytes().to_vec()),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            };
            match secrets.create(&PostParams::default(), &object).await {
                Ok(_) => fresh,
                // Another replica won the race: use its CA.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    load_authority(&secrets.get(secret).await?)?
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let (dns, ips) = endpoint.subject_names();
    let serving = authority.serving(&dns, &ips)?;
    Ok(WebhookTls {
        cert_pem: serving.cert_pem,
        key_pem: serving.key_pem,
        ca_bundle: authority.cert_pem().to_string(),
    })
}

fn load_authority(secret: &Secret) -> anyhow::Result<kit::pki::Authority> {
    let data = secret.data.clone().unwrap_or_default();
    let field = |key: &str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .with_context(|| format!("webhook Secret lacks {key}"))
    };
    Ok(kit::pki::Authority::load(
        CA_NAME,
        field("ca.crt")?,
        &field("ca.key")?,
    )?)
}

/// Points the conversion webhook of every CRD served in v1alpha1 and v1beta1 (graphs, DCDs,
/// scaling adapters) at `endpoint` with `ca_bundle`. Writes nothing where it already does.
pub async fn ensure_crd_conversion(
    client: Client,
    endpoint: &Endpoint,
    ca_bundle: &str,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in api::crds::converted_crds(&endpoint.conversion(ca_bundle)) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let desired = crd
            .spec
            .conversion
            .with_context(|| format!("the CRD {name} has a conversion"))?;
        ensure_conversion(&crds, &name, &desired, endpoint).await?;
    }
    Ok(())
}

async fn ensure_conversion(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    desired: &CustomResourceConversion,
    endpoint: &Endpoint,
) -> anyhow::Result<()> {
    let current = crds
        .get_opt(name)
        .await?
        .with_context(|| format!("CRD {name} is not installed"))?;
    if current.spec.conversion.as_ref() == Some(desired) {
        return Ok(());
    }
    // A merge patch keeps keys it does not mention: clear the client config's other mode
    // (service vs url) explicitly, the apiserver accepts exactly one.
    let mut conversion = serde_json::to_value(desired)?;
    if let Some(config) = conversion
        .pointer_mut("/webhook/clientConfig")
        .and_then(|c| c.as_object_mut())
    {
        for key in ["service", "url"] {
            config.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "spec": { "conversion": conversion } });
    crds.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("pointing {name}'s conversion webhook at this operator"))?;
    tracing::info!(crd = %name, ?endpoint, "conversion webhook configured");
    Ok(())
}

async fn convert(Json(review): Json<ConversionReview>) -> Json<ConversionReview> {
    Json(api::conversion::review(review))
}

/// The webhook's routes: the conversion, and the checkpoint restore when `restorer` is given.
pub fn router(restorer: Option<Arc<Restorer>>) -> Router {
    let router = Router::new().route(api::crds::CONVERSION_PATH, post(convert));
    match restorer {
        Some(restorer) => router.route(
            restore_webhook::PATH,
            post(
                move |Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    Json(restorer.review(review).await)
                },
            ),
        ),
        None => router,
    }
}

/// A TLS listener for axum: accepts TCP connections and completes the handshake; failed
/// handshakes are logged and skipped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, peer) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "webhook accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.acceptor.accept(stream).await {
                Ok(tls) => return (tls, peer),
                Err(error) => tracing::debug!(%peer, %error, "webhook TLS handshake failed"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Binds `address` and serves `router` over TLS until `shutdown` fires.
pub async fn serve(
    address: SocketAddr,
    tls: &WebhookTls,
    router: Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let certs = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("webhook certificate")?;
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).context("webhook key")?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    let tcp = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %tcp.local_addr()?, "serving the webhooks");
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}
