//! A small certificate authority (feature `pki`): serving certificates for webhooks and client
//! certificates for tests, ECDSA P-256, from one CA that can be persisted and reloaded.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Certificate errors.
#[derive(Debug, thiserror::Error)]
#[error("certificates: {0}")]
pub struct PkiError(String);

fn err(e: impl std::fmt::Display) -> PkiError {
    PkiError(e.to_string())
}

/// A PEM certificate and its PEM private key.
#[derive(Clone)]
pub struct Credential {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Credential {
    /// Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").finish_non_exhaustive()
    }
}

/// A certificate authority: its certificate and signing key.
pub struct Authority {
    name: String,
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

fn ca_params(name: &str) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    Ok(params)
}

impl Authority {
    /// A fresh CA named `name`.
    pub fn generate(name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate().map_err(err)?;
        let params = ca_params(name)?;
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(Self {
            name: name.to_string(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its certificate and key, as [`Self::generate`] made them with the same name.
    pub fn load(name: &str, cert_pem: String, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(err)?;
        Ok(Self {
            name: name.to_string(),
            cert_pem,
            key_pem: key_pem.to_string(),
            issuer: Issuer::new(ca_params(name)?, key),
        })
    }

    /// The CA's name (its common name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CA certificate (the trust bundle).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, to persist it.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A serving certificate for `dns_names` and `ips`.
    pub fn serving(&self, dns_names: &[String], ips: &[IpAddr]) -> Result<Credential, PkiError> {
        let mut params = CertificateParams::new(dns_names.to_vec()).map_err(err)?;
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        let cn = dns_names
            .first()
            .cloned()
            .or_else(|| ips.first().map(ToString::to_string))
            .unwrap_or_else(|| "server".into());
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate for `user` in `groups` (Kubernetes reads `CN` as the user name and
    /// each `O` as a group).
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<Credential, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Credential, PkiError> {
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().map_err(err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok(Credential {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A bare key pair (private PEM, public PEM), e.g. for signing service account tokens.
pub fn key_pair() -> Result<(String, String), PkiError> {
    let key = KeyPair::generate().map_err(err)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloaded_authority_signs_verifiable_leaves() {
        let ca = Authority::generate("test-ca").unwrap();
        let again = Authority::load("test-ca", ca.cert_pem().to_string(), ca.key_pem()).unwrap();
        let leaf = again
            .serving(&["svc.ns.svc".into()], &["127.0.0.1".parse().unwrap()])
            .unwrap();
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(format!("{leaf:?}").find("PRIVATE").is_none());
        let client = ca.client("u", &["g1", "g2"]).unwrap();
        assert!(client.key_pem.contains("PRIVATE KEY"));
    }
}
