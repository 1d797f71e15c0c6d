//! A minimal HTTPS conversion webhook for tests: serves `POST /convert` with
//! `api::conversion::review` on a loopback port, with a throw-away CA.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// A running webhook.
pub struct Webhook {
    /// `https://127.0.0.1:<port>`.
    pub base: String,
    /// PEM of the CA that signed its serving certificate.
    pub ca_pem: String,
}

impl Webhook {
    /// The webhook configuration for [`api::crds::crds_with`].
    pub fn config(&self) -> api::crds::ConversionWebhookConfig {
        api::crds::ConversionWebhookConfig::Url {
            base: self.base.clone(),
            ca_bundle: Some(self.ca_pem.clone().into_bytes()),
        }
    }
}

/// Starts the webhook on a background thread (it lives as long as the test binary).
pub fn start() -> Webhook {
    let ca = testkit::pki::authority().expect("CA");
    let serving = testkit::pki::serving(&ca).expect("serving certificate");
    let certs = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).expect("key PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || serve(config, tcp));
        }
    });
    Webhook {
        base: format!("https://127.0.0.1:{port}"),
        ca_pem: ca.cert_pem().to_string(),
    }
}

fn serve(config: Arc<rustls::ServerConfig>, tcp: TcpStream) {
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut reader = BufReader::new(rustls::StreamOwned::new(conn, tcp));
    loop {
        // Request line and headers.
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, reply) = if path.starts_with(api::crds::CONVERSION_PATH) {
            match serde_json::from_slice(&body) {
                Ok(review) => (
                    "200 OK",
                    serde_json::to_vec(&api::conversion::review(review)).unwrap(),
                ),
                Err(e) => ("400 Bad Request", e.to_string().into_bytes()),
            }
        } else {
            ("404 Not Found", b"not found".to_vec())
        };
        let stream = reader.get_mut();
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if stream
            .write_all(head.as_bytes())
            .and_then(|_| stream.write_all(&reply))
            .and_then(|_| stream.flush())
            .is_err()
        {
            return;
        }
    }
}
