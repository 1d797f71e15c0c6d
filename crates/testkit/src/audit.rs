//! The apiserver's audit log (JSON lines, metadata level), read back by tests and benchmarks to
//! count real requests per identity.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::Client;
use serde::Deserialize;

/// Metadata for every request, except kwok's node heartbeats and health probes.
pub const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["kwok"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
- level: Metadata
"#;

/// A position in the audit log.
#[derive(Clone, Copy, Debug)]
pub struct AuditMark(u64);

/// One audited request (stage ResponseComplete, or ResponseStarted for long-running requests).
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEvent {
    pub stage: String,
    pub user: String,
    pub groups: Vec<String>,
    pub user_agent: String,
    pub verb: String,
    pub request_uri: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
}

impl AuditEvent {
    /// create, update, patch, delete, deletecollection.
    pub fn is_write(&self) -> bool {
        is_write(&self.verb)
    }
}

/// Whether `verb` writes: create, update, patch, delete, deletecollection.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// Whether a request created its object: a create, or a server-side apply that created it
/// (201).
pub fn created(verb: &str, code: i32) -> bool {
    matches!(verb, "create" | "patch") && code == 201
}

/// Microseconds since the Unix epoch of an audit timestamp (RFC 3339 UTC,
/// `2025-12-02T19:52:01.123456Z`).
pub fn unix_micros(t: &str) -> Option<i64> {
    let (date, time) = t.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    let micros: i64 = format!("{frac:0<6}")[..6].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000) + micros)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    #[serde(default)]
    user: RawUser,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: RawRef,
    #[serde(default)]
    response_status: RawStatus,
}

#[derive(Deserialize, Default)]
struct RawUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawRef {
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    #[serde(default)]
    code: i32,
}

impl From<Raw> for AuditEvent {
    fn from(r: Raw) -> Self {
        Self {
            stage: r.stage,
            user: r.user.username,
            groups: r.user.groups,
            user_agent: r.user_agent,
            verb: r.verb,
            request_uri: r.request_uri,
            api_group: r.object_ref.api_group,
            resource: r.object_ref.resource,
            subresource: r.object_ref.subresource,
            namespace: r.object_ref.namespace,
            name: r.object_ref.name,
            code: r.response_status.code,
        }
    }
}

/// Reader of one control plane's audit log.
pub struct Audit {
    path: PathBuf,
    client: Client,
}

impl Audit {
    pub(crate) fn new(path: PathBuf, client: Client) -> Self {
        Self { path, client }
    }

    /// The log's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The current end of the log.
    pub fn mark(&self) -> AuditMark {
        AuditMark(std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0))
    }

    /// Every request logged after `mark`, up to now. An entry is written just after its response
    /// is sent, so this first sends a sentinel request and reads until the sentinel is logged:
    /// whatever completed before the call is then in the log.
    pub async fn since(&self, mark: &AuditMark) -> Vec<AuditEvent> {
        let sentinel = format!(
            "/api/v1/namespaces/testkit-audit-sentinel/configmaps/s{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let _ = self
            .client
            .request_text(http::Request::get(&sentinel).body(Vec::new()).unwrap())
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.read_from(mark.0);
            if let Some(pos) = events.iter().position(|e| e.request_uri == sentinel) {
                let mut events = events;
                events.truncate(pos);
                events.retain(|e| {
                    !e.request_uri
                        .starts_with("/api/v1/namespaces/testkit-audit-sentinel/")
                });
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "audit sentinel never appeared in {}",
                self.path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn read_from(&self, offset: u64) -> Vec<AuditEvent> {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            let _ = f.seek(SeekFrom::Start(offset));
            let _ = f.read_to_string(&mut text);
        }
        // Only complete lines: the last one may still be being written.
        let complete = text.rfind('\n').map_or("", |i| &text[..i]);
        complete
            .lines()
            .filter_map(|l| serde_json::from_str::<Raw>(l).ok())
            .map(AuditEvent::from)
            .collect()
    }
}
