//! The apiserver's audit log, read in phases: every request after a mark, up to a sentinel
//! request sent when the phase ends (an entry is written just after its response, so whatever
//! completed before the sentinel is in the log once the sentinel is).
//!
//! Large runs write hundreds of MB, so a line is fully parsed only when its user is one the bench
//! looks at closely (the operator, the controller-manager, the scheduler); every other line is
//! only counted under its user name.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The controller-manager's user (testkit's client certificate).
pub const KCM_USER: &str = "system:kube-controller-manager";
/// The scheduler's user.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";

/// A position in the audit log.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

/// One request (stage ResponseComplete; watches counted once, when they start).
#[derive(Clone, Debug)]
pub struct Request {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub code: i32,
    /// Unix time (seconds) the apiserver received the request.
    pub received: f64,
}

impl Request {
    /// create, update, patch, delete, deletecollection.
    pub fn is_write(&self) -> bool {
        testkit::audit::is_write(&self.verb)
    }

    /// get or list (not watch): a read the watch caches did not serve.
    pub fn is_read(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list")
    }

    /// An Event (core or events.k8s.io).
    pub fn is_event(&self) -> bool {
        self.resource == "events"
    }

    /// Created an object: a create, or a server-side apply that created (201).
    pub fn created(&self) -> bool {
        testkit::audit::created(&self.verb, self.code)
    }

    /// `verb resource[/subresource]`, the key of request tables.
    pub fn key(&self) -> String {
        let resource = if self.resource.is_empty() {
            "(non-resource)".to_string()
        } else if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        format!("{} {resource}", self.verb)
    }
}

/// Requests of one phase.
#[derive(Default)]
pub struct Requests {
    /// Every user's request count (watches included).
    pub by_user: BTreeMap<String, u64>,
    /// The fully parsed requests of the users looked at closely.
    pub detailed: Vec<Request>,
}

impl Requests {
    /// The detailed requests of `user`.
    pub fn of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a Request> + 'a {
        self.detailed.iter().filter(move |r| r.user == user)
    }
}

/// Counts of `verb resource` keys, for tables.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Tally {
    pub total: u64,
    pub by_request: BTreeMap<String, u64>,
}

impl Tally {
    pub fn of<'a>(requests: impl IntoIterator<Item = &'a Request>) -> Self {
        let mut t = Tally::default();
        for r in requests {
            t.total += 1;
            *t.by_request.entry(r.key()).or_default() += 1;
        }
        t
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: RawUser,
    #[serde(default)]
    object_ref: RawRef,
    #[serde(default)]
    response_status: RawStatus,
    #[serde(default)]
    request_received_timestamp: String,
}

#[derive(Deserialize, Default)]
struct RawUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    #[serde(default)]
    code: i32,
}

/// Reader of one control plane's audit log.
pub struct AuditLog {
    path: PathBuf,
    /// Sends the sentinel requests (its own identity, so they are easy to drop).
    client: kube::Client,
    /// Users whose requests are parsed in full.
    detailed_users: Vec<String>,
}

const SENTINEL_PREFIX: &str = "/api/v1/namespaces/bench-audit-sentinel/configmaps/s";

impl AuditLog {
    pub fn new(path: PathBuf, client: kube::Client, detailed_users: &[&str]) -> Self {
        Self {
            path,
            client,
            detailed_users: detailed_users.iter().map(|u| u.to_string()).collect(),
        }
    }

    /// The current end of the log.
    pub fn mark(&self) -> Mark {
        Mark(std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0))
    }

    /// Every request logged after `mark` and before a sentinel sent now.
    pub async fn since(&self, mark: &Mark) -> anyhow::Result<Requests> {
        let sentinel = format!(
            "{SENTINEL_PREFIX}{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        // A 404: the request is all that matters.
        let _ = self
            .client
            .request_text(http::Request::get(&sentinel).body(Vec::new())?)
            .await;
        let mut out = Requests::default();
        let file = std::fs::File::open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        reader.seek(SeekFrom::Start(mark.0))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut line = String::new();
        loop {
            let read = reader.read_line(&mut line)?;
            if read == 0 || !line.ends_with('\n') {
                // At the end (or mid-line): wait for the apiserver to write more.
                if Instant::now() > deadline {
                    bail!("audit sentinel never appeared in {}", self.path.display());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            if line.contains(&sentinel) {
                return Ok(out);
            }
            self.account(&line, &mut out);
            line.clear();
        }
    }

    fn account(&self, line: &str, out: &mut Requests) {
        let Some(user) = username(line) else {
            return;
        };
        if line.contains(SENTINEL_PREFIX) {
            return;
        }
        let detailed = self.detailed_users.iter().any(|u| u == user);
        let watch = line.contains("\"verb\":\"watch\"");
        // One entry per request: ResponseComplete, except watches (counted when they start;
        // a watch still open at the end has no ResponseComplete yet).
        let counted = if watch {
            line.contains("\"stage\":\"ResponseStarted\"")
        } else {
            line.contains("\"stage\":\"ResponseComplete\"")
        };
        if !counted {
            return;
        }
        *out.by_user.entry(user.to_string()).or_default() += 1;
        if !detailed {
            return;
        }
        let Ok(raw) = serde_json::from_str::<Raw>(line) else {
            return;
        };
        out.detailed.push(Request {
            user: raw.user.username,
            verb: raw.verb,
            resource: raw.object_ref.resource,
            subresource: raw.object_ref.subresource,
            name: raw.object_ref.name,
            code: raw.response_status.code,
            received: unix_seconds(&raw.request_received_timestamp).unwrap_or(0.0),
        });
    }
}

/// The user name of an audit line, found without parsing the line.
fn username(line: &str) -> Option<&str> {
    const KEY: &str = "\"user\":{\"username\":\"";
    let start = line.find(KEY)? + KEY.len();
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// Seconds since the Unix epoch of an RFC 3339 UTC timestamp (`2026-01-02T03:04:05.123456Z`).
pub fn unix_seconds(ts: &str) -> Option<f64> {
    testkit::audit::unix_micros(ts).map(|us| us as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            unix_seconds("2024-02-29T12:00:01.5Z"),
            Some(1_709_208_001.5)
        );
        assert_eq!(unix_seconds("2026-12-02T19:27:02Z"), Some(1_796_239_622.0));
        assert_eq!(unix_seconds("garbage"), None);
    }

    #[test]
    fn user_names() {
        let line = r#"{"kind":"Event","stage":"ResponseComplete","verb":"get","user":{"username":"system:kube-scheduler","uid":"x"}}"#;
        assert_eq!(username(line), Some("system:kube-scheduler"));
        assert_eq!(username("{}"), None);
    }

    #[test]
    fn request_keys() {
        let r = Request {
            user: "op".into(),
            verb: "patch".into(),
            resource: "dynamographdeployments".into(),
            subresource: "status".into(),
            name: "g".into(),
            code: 200,
            received: 0.0,
        };
        assert_eq!(r.key(), "patch dynamographdeployments/status");
        assert!(r.is_write() && !r.is_read() && !r.created());
    }
}
