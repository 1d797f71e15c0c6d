//! Throw-away PKI: one CA signs the apiserver's serving certificate and every client
//! certificate. Users are minted on demand (`CN=<user>`, `O=<group>` per group), so each test can
//! act as a distinct identity that the audit log attributes, or as one bound only by RBAC.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

const CA_NAME: &str = "testkit-ca";

/// The CA of one control plane. Its key stays in the run directory so that a test binary that
/// attaches to a running control plane can mint client certificates too.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

/// A PEM certificate and its PEM private key.
#[derive(Clone)]
pub struct Credential {
    pub cert_pem: String,
    pub key_pem: String,
}

fn ca_params() -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(Error::pki)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    Ok(params)
}

impl Authority {
    /// A fresh CA.
    pub fn generate() -> Result<(Self, String), Error> {
        let key = KeyPair::generate().map_err(Error::pki)?;
        let params = ca_params()?;
        let cert = params.self_signed(&key).map_err(Error::pki)?;
        let key_pem = key.serialize_pem();
        Ok((
            Self {
                issuer: Issuer::new(params, key),
                cert_pem: cert.pem(),
            },
            key_pem,
        ))
    }

    /// The CA of a running control plane, from its certificate and key.
    pub fn load(cert_pem: String, key_pem: &str) -> Result<Self, Error> {
        let key = KeyPair::from_pem(key_pem).map_err(Error::pki)?;
        Ok(Self {
            issuer: Issuer::new(ca_params()?, key),
            cert_pem,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The apiserver's serving certificate for loopback.
    pub fn serving(&self) -> Result<Credential, Error> {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).map_err(Error::pki)?;
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate for `user` in `groups`.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<Credential, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(Error::pki)?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Credential, Error> {
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().map_err(Error::pki)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(Error::pki)?;
        Ok(Credential {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A key pair for signing service account tokens (ES256): (private PEM, public PEM).
pub fn service_account_key() -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(Error::pki)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// A kubeconfig with the CA and the client credential embedded.
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, cred: &Credential) -> String {
    use base64::{Engine, engine::general_purpose::STANDARD};
    let encode = |data: &[u8]| STANDARD.encode(data);
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: testkit\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n\
         contexts:\n- name: testkit\n  context:\n    cluster: testkit\n    user: {user}\n    namespace: default\n\
         current-context: testkit\n",
        ca = encode(ca_pem.as_bytes()),
        cert = encode(cred.cert_pem.as_bytes()),
        key = encode(cred.key_pem.as_bytes()),
    )
}
