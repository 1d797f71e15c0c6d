//! The apiserver's audit log, parsed here with timestamps and credentials (testkit's reader
//! guarantees completeness up to the call).

use serde_json::Value;
use testkit::ControlPlane;
use testkit::audit::unix_micros;

/// One audited request.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Microseconds since the Unix epoch (stage timestamp: when the response completed).
    pub at: i64,
    /// When the request was received.
    pub received: i64,
    pub verb: String,
    pub user: String,
    /// The credential's id (a ServiceAccount token's JTI): tells two replicas with the same
    /// account apart.
    pub credential: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
    pub message: String,
}

impl Entry {
    pub fn is_write(&self) -> bool {
        testkit::audit::is_write(&self.verb)
    }
    /// A write that created the object (plain create, or server-side apply creating it).
    pub fn created(&self) -> bool {
        testkit::audit::created(&self.verb, self.code)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

pub fn audit_mark(cp: &ControlPlane) -> Mark {
    Mark(
        std::fs::metadata(cp.audit().path())
            .map(|m| m.len())
            .unwrap_or(0),
    )
}

/// Every request since `mark`, up to now.
pub async fn audit_since(cp: &ControlPlane, mark: Mark) -> Vec<Entry> {
    let audit = cp.audit();
    // The sentinel wait: whatever completed before this call is in the log afterwards.
    let _ = audit.since(&testkit_mark(&audit)).await;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(audit.path()) {
        use std::io::{Read, Seek, SeekFrom};
        let _ = f.seek(SeekFrom::Start(mark.0));
        let _ = f.read_to_string(&mut text);
    }
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete.lines().filter_map(parse_entry).collect()
}

fn testkit_mark(audit: &testkit::Audit) -> testkit::AuditMark {
    audit.mark()
}

fn parse_entry(line: &str) -> Option<Entry> {
    let v: Value = serde_json::from_str(line).ok()?;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let r = &v["objectRef"];
    let credential = v["user"]["extra"]["authentication.kubernetes.io/credential-id"]
        .get(0)
        .map(s)
        .unwrap_or_default();
    Some(Entry {
        at: unix_micros(v["stageTimestamp"].as_str()?)?,
        received: unix_micros(v["requestReceivedTimestamp"].as_str().unwrap_or_default())
            .unwrap_or(0),
        verb: s(&v["verb"]),
        user: s(&v["user"]["username"]),
        credential,
        group: s(&r["apiGroup"]),
        resource: s(&r["resource"]),
        subresource: s(&r["subresource"]),
        namespace: s(&r["namespace"]),
        name: s(&r["name"]),
        code: v["responseStatus"]["code"].as_i64().unwrap_or(0) as i32,
        message: s(&v["responseStatus"]["message"]),
    })
}

pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Writes of `user` to objects in `namespaces` (not Leases, not Events).
pub fn writes_in<'a>(
    entries: &'a [Entry],
    user: &'a str,
    namespaces: &'a [String],
) -> impl Iterator<Item = &'a Entry> + 'a {
    entries.iter().filter(move |e| {
        e.user == user
            && e.is_write()
            && namespaces.contains(&e.namespace)
            && e.resource != "events"
            && e.resource != "leases"
    })
}
