//! Throw-away PKI: one CA ([`kit::pki::Authority`]) signs the apiserver's serving certificate and
//! every client certificate. Users are minted on demand (`CN=<user>`, `O=<group>` per group), so
//! each test can act as a distinct identity that the audit log attributes, or as one bound only
//! by RBAC.

use std::net::{IpAddr, Ipv4Addr};

pub use kit::pki::{Authority, Credential};

use crate::Error;

/// The name of every test control plane's CA.
pub const CA_NAME: &str = "testkit-ca";

/// A fresh CA.
pub fn authority() -> Result<Authority, Error> {
    Authority::generate(CA_NAME).map_err(Error::pki)
}

/// The CA of a running control plane, from its certificate and key.
pub fn load(cert_pem: String, key_pem: &str) -> Result<Authority, Error> {
    Authority::load(CA_NAME, cert_pem, key_pem).map_err(Error::pki)
}

/// The apiserver's serving certificate for loopback.
pub fn serving(ca: &Authority) -> Result<Credential, Error> {
    ca.serving(&["localhost".into()], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
        .map_err(Error::pki)
}

/// A client certificate for `user` in `groups`.
pub fn client(ca: &Authority, user: &str, groups: &[&str]) -> Result<Credential, Error> {
    ca.client(user, groups).map_err(Error::pki)
}

/// A key pair for signing service account tokens (ES256): (private PEM, public PEM).
pub fn service_account_key() -> Result<(String, String), Error> {
    kit::pki::key_pair().map_err(Error::pki)
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
