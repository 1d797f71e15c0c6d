//! The MPI SSH key Secret multinode workers use to reach each other (`mpirun` over SSH).
//!
//! Only for graphs with a multinode component, and only when the operator manages SSH keys.
//! Multinode TensorRT-LLM pods mount it at `/ssh-pk` (`pod_render::multinode::trtllm`).
//! The Secret (default name `mpi-run-ssh-secret`) has keys `private.key` (an OpenSSH private
//! key) and `private.key.pub` (the `authorized_keys` line), as upstream. It is **namespace-wide**:
//! every multinode graph of the namespace uses the same one, so it has no owner reference.
//!
//! - The Secret exists in the graph's namespace: nothing is done. Its data is **never
//!   rewritten**, whatever it holds: a key is generated once and never rotated by a reconcile.
//! - With a source namespace configured (the operator's, as upstream): the key pair lives there
//!   and is copied into the graph's namespace; when the source Secret is missing it is generated
//!   there first.
//! - Without one: the key pair is generated in the graph's namespace.
//!
//! Keys are Ed25519 (upstream generates RSA-2048; OpenSSH accepts either and both files keep
//! their names and formats). Key material never appears in logs, events or errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::DynamoGraphDeployment;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Event, Reader, ReaderExt, Writer};
use kube::ResourceExt;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};

use crate::child::{self, MANAGED_BY};
use crate::error::{Error, Result};

/// Upstream's default name of the MPI SSH key Secret (the name multinode TensorRT-LLM pods
/// mount, `pod_render::multinode::trtllm`).
pub use pod_render::multinode::trtllm::MPI_SSH_SECRET as DEFAULT_SECRET_NAME;
/// Keys of the private key and of the public key (`authorized_keys` line) in the Secret.
pub use pod_render::multinode::trtllm::{PRIVATE_KEY, PUBLIC_KEY};

/// How the operator manages the MPI SSH key Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshKeyConfig {
    /// Name of the Secret, in the source namespace and in every graph namespace.
    pub secret_name: String,
    /// Namespace holding the original key pair (the operator's); `None`: generate per namespace.
    pub source_namespace: Option<String>,
}

impl Default for SshKeyConfig {
    fn default() -> Self {
        Self {
            secret_name: DEFAULT_SECRET_NAME.to_string(),
            source_namespace: None,
        }
    }
}

/// Ensures the MPI SSH key Secret of namespaces with multinode graphs.
pub struct SshKeyReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    config: Option<SshKeyConfig>,
}

impl SshKeyReconciler {
    /// A reconciler; `config: None` when the operator does not manage SSH keys.
    pub fn new(
        reader: Arc<dyn Reader>,
        writer: Arc<dyn Writer>,
        config: Option<SshKeyConfig>,
    ) -> Self {
        Self {
            reader,
            writer,
            config,
        }
    }

    /// Make sure the Secret exists in the graph's namespace.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        let Some(config) = &self.config else {
            return Ok(());
        };
        if !dgd.spec.has_multinode_component() {
            return Ok(());
        }
        let namespace = dgd.namespace().unwrap_or_default();
        if self.get(&namespace, &config.secret_name).await?.is_some() {
            return Ok(());
        }
        let data = match config
            .source_namespace
            .as_deref()
            .filter(|s| *s != namespace)
        {
            Some(source) => match self.get(source, &config.secret_name).await? {
                Some(secret) => secret.data.unwrap_or_default(),
                None => {
                    let data = generate()?;
                    self.create(source, &config.secret_name, data, events)
                        .await?
                }
            },
            None => generate()?,
        };
        self.create(&namespace, &config.secret_name, data, events)
            .await?;
        Ok(())
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        self.reader
            .get(Some(namespace), name)
            .await
            .map_err(Error::api(format!("get Secret {namespace}/{name}")))
    }

    /// Create the Secret unless it appeared meanwhile; returns the data it holds.
    async fn create(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, ByteString>,
        events: &mut Vec<Event>,
    ) -> Result<BTreeMap<String, ByteString>> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    api::labels::APP_MANAGED_BY.to_string(),
                    MANAGED_BY.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        let (stored, created) = child::create_once(&*self.reader, &*self.writer, &secret).await?;
        if created {
            child::record(
                events,
                child::Ensured::Created,
                "Secret",
                Some(namespace),
                &stored.name_any(),
            );
        }
        Ok(stored.data.unwrap_or_default())
    }
}

/// A fresh Ed25519 key pair as the Secret's data.
fn generate() -> Result<BTreeMap<String, ByteString>> {
    let rng = SystemRandom::new();
    let failed = || Error::Missing("SSH key generation failed: no system randomness".into());
    let mut seed = [0u8; 32];
    rng.fill(&mut seed).map_err(|_| failed())?;
    let mut check = [0u8; 4];
    rng.fill(&mut check).map_err(|_| failed())?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| failed())?;
    let public: [u8; 32] = pair
        .public_key()
        .as_ref()
        .try_into()
        .map_err(|_| failed())?;
    let (private, public) = openssh_ed25519(&seed, &public, u32::from_be_bytes(check));
    Ok(BTreeMap::from([
        (PRIVATE_KEY.to_string(), ByteString(private.into_bytes())),
        (PUBLIC_KEY.to_string(), ByteString(public.into_bytes())),
    ]))
}

const KEY_TYPE: &str = "ssh-ed25519";
const COMMENT: &str = "dynamo-mpi";

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The public key blob: `string "ssh-ed25519", string key`.
fn public_blob(public: &[u8; 32]) -> Vec<u8> {
    let mut blob = Vec::with_capacity(51);
    put_string(&mut blob, KEY_TYPE.as_bytes());
    put_string(&mut blob, public);
    blob
}

/// The unencrypted OpenSSH private key file (`openssh-key-v1`) and the `authorized_keys` line of
/// an Ed25519 key.
fn openssh_ed25519(seed: &[u8; 32], public: &[u8; 32], check: u32) -> (String, String) {
    let blob = public_blob(public);
    let mut private = Vec::with_capacity(160);
    private.extend_from_slice(&check.to_be_bytes());
    private.extend_from_slice(&check.to_be_bytes());
    put_string(&mut private, KEY_TYPE.as_bytes());
    put_string(&mut private, public);
    let mut secret = Vec::with_capacity(64);
    secret.extend_from_slice(seed);
    secret.extend_from_slice(public);
    put_string(&mut private, &secret);
    put_string(&mut private, COMMENT.as_bytes());
    let mut pad = 1u8;
    while private.len() % 8 != 0 {
        private.push(pad);
        pad += 1;
    }
    let mut file = Vec::with_capacity(300);
    file.extend_from_slice(b"openssh-key-v1\0");
    put_string(&mut file, b"none");
    put_string(&mut file, b"none");
    put_string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut file, &blob);
    put_string(&mut file, &private);
    let encoded = STANDARD.encode(&file);
    let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in encoded.as_bytes().chunks(70) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    let authorized = format!("{KEY_TYPE} {} {COMMENT}\n", STANDARD.encode(&blob));
    (pem, authorized)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::ComponentType;
    use api::common::MultinodeSpec;
    use kit::testing::{Double, Verb};

    fn multinode(d: &Double) -> DynamoGraphDeployment {
        let mut w = component("W", ComponentType::Worker);
        w.multinode = Some(MultinodeSpec { node_count: 2 });
        d.insert(dgd("g", vec![w]))
    }

    fn secret(d: &Double, ns: &str) -> Option<Secret> {
        d.object(Some(ns), DEFAULT_SECRET_NAME)
    }

    #[tokio::test]
    async fn generated_once_and_never_rotated() {
        let d = Double::new();
        let g = multinode(&d);
        let r = SshKeyReconciler::new(d.reader(), d.writer(), Some(SshKeyConfig::default()));
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["SecretCreated"]);
        let first = secret(&d, "ns").unwrap();
        let data = first.data.clone().unwrap();
        let private = String::from_utf8(data[PRIVATE_KEY].0.clone()).unwrap();
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        let public = String::from_utf8(data[PUBLIC_KEY].0.clone()).unwrap();
        assert!(
            public.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"),
            "{public}"
        );
        for e in &events {
            let note = e.note.clone().unwrap_or_default();
            assert!(
                !note.contains("PRIVATE") && !note.contains(&public[12..40]),
                "{note}"
            );
        }

        d.clear_writes();
        r.reconcile(&g).await.result.unwrap();
        assert!(d.writes().is_empty());

        // Whatever the Secret holds now, a reconcile leaves it alone.
        let mut replaced = first.clone();
        replaced.data = Some(BTreeMap::from([(
            PRIVATE_KEY.into(),
            ByteString(b"user".to_vec()),
        )]));
        d.insert(replaced);
        r.reconcile(&g).await.result.unwrap();
        assert!(d.writes().is_empty());
        assert_eq!(
            secret(&d, "ns").unwrap().data.unwrap()[PRIVATE_KEY].0,
            b"user"
        );
    }

    #[tokio::test]
    async fn copied_from_the_source_namespace() {
        let d = Double::new();
        let g = multinode(&d);
        let config = SshKeyConfig {
            source_namespace: Some("dynamo-system".into()),
            ..Default::default()
        };
        let r = SshKeyReconciler::new(d.reader(), d.writer(), Some(config));
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["SecretCreated", "SecretCreated"]);
        assert_eq!(
            secret(&d, "dynamo-system").unwrap().data,
            secret(&d, "ns").unwrap().data
        );
        assert!(
            secret(&d, "ns")
                .unwrap()
                .metadata
                .owner_references
                .is_none()
        );
    }

    #[tokio::test]
    async fn only_multinode_only_when_managed_and_failures_surface() {
        let d = Double::new();
        let single = d.insert(dgd("s", vec![component("W", ComponentType::Worker)]));
        let r = SshKeyReconciler::new(d.reader(), d.writer(), Some(SshKeyConfig::default()));
        r.reconcile(&single).await.result.unwrap();
        let g = multinode(&d);
        SshKeyReconciler::new(d.reader(), d.writer(), None)
            .reconcile(&g)
            .await
            .result
            .unwrap();
        assert!(d.writes().is_empty());

        d.fail_next(
            Verb::Create,
            "Secret",
            kit::Error::Forbidden("secrets".into()),
        );
        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("create Secret ns/mpi-run-ssh-secret"),
            "{err}"
        );
    }

    #[test]
    fn keys_are_fresh_and_well_formed() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a[PRIVATE_KEY], b[PRIVATE_KEY]);
        let pem = String::from_utf8(a[PRIVATE_KEY].0.clone()).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let raw = STANDARD.decode(body).unwrap();
        assert!(raw.starts_with(b"openssh-key-v1\0"));
        // The public blob inside the private file matches the authorized_keys line.
        let public = String::from_utf8(a[PUBLIC_KEY].0.clone()).unwrap();
        let blob = STANDARD.decode(public.split(' ').nth(1).unwrap()).unwrap();
        assert!(raw.windows(blob.len()).any(|w| w == blob.as_slice()));
    }

    /// OpenSSH itself reads the private key and derives the same public key (skipped where
    /// `ssh-keygen` is not installed).
    #[test]
    fn openssh_accepts_the_key() {
        use std::os::unix::fs::PermissionsExt;
        let keys = generate().unwrap();
        let path = std::env::temp_dir().join(format!("mpi-key-{}", std::process::id()));
        std::fs::write(&path, &keys[PRIVATE_KEY].0).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let derived = std::process::Command::new("ssh-keygen")
            .arg("-y")
            .arg("-f")
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let Ok(derived) = derived else {
            eprintln!("ssh-keygen not found; skipped");
            return;
        };
        assert!(
            derived.status.success(),
            "{}",
            String::from_utf8_lossy(&derived.stderr)
        );
        let derived = String::from_utf8(derived.stdout).unwrap();
        let public = String::from_utf8(keys[PUBLIC_KEY].0.clone()).unwrap();
        let fields = |s: &str| {
            s.split_whitespace()
                .take(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(&derived), fields(&public));
    }
}
