//! What a graph's subtree must look like, and how an actual one differs (lost, duplicated and
//! wrong objects).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Obj, Snapshot};

/// What a graph's subtree must look like: per child key (`Kind/name` with the graph's name
/// replaced by `<dgd>`), the canonical object.
pub type Fingerprint = BTreeMap<String, Vec<String>>;

/// The fingerprint of the graph `dgd` in `snapshot`.
pub fn fingerprint(snapshot: &Snapshot, dgd: &Obj) -> Fingerprint {
    let mut out: Fingerprint = BTreeMap::new();
    for o in snapshot.descendants(&dgd.uid) {
        if o.deleting {
            continue;
        }
        let key = format!("{}/{}", o.kind, o.name.replace(&dgd.name, "<dgd>"));
        out.entry(key)
            .or_default()
            .push(canonical(&o.value, &dgd.name, &dgd.namespace));
    }
    for bodies in out.values_mut() {
        bodies.sort();
    }
    out
}

/// The object as its producer determines it: no server-assigned fields (uid, resourceVersion,
/// timestamps, managedFields, status, cluster IPs), no values the controller-manager sets
/// (revision), the graph's name and namespace replaced by placeholders.
pub fn canonical(value: &Value, dgd: &str, ns: &str) -> String {
    let mut v = value.clone();
    drop_foreign(&mut v);
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "namespace",
        ] {
            m.remove(k);
        }
        if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
            for r in refs {
                if let Some(r) = r.as_object_mut() {
                    r.remove("uid");
                }
            }
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.retain(|k, _| !NOT_COMPARED_ANNOTATIONS.contains(&k.as_str()));
        }
        for field in ["annotations", "labels"] {
            if m.get(field)
                .and_then(Value::as_object)
                .is_some_and(|a| a.is_empty())
            {
                m.remove(field);
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        for k in ["clusterIP", "clusterIPs"] {
            spec.remove(k);
        }
        // Ports the apiserver allocates.
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                if let Some(p) = p.as_object_mut() {
                    p.remove("nodePort");
                }
            }
        }
    }
    serde_json::to_string(&v)
        .unwrap_or_default()
        .replace(ns, "<ns>")
        .replace(dgd, "<dgd>")
}

/// Removes every key a second writer added (wherever the operator copied it to, e.g. a
/// component's labels into its pod template).
fn drop_foreign(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with(FOREIGN_PREFIX));
            for value in map.values_mut() {
                drop_foreign(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_foreign),
        _ => {}
    }
}

/// Prefix of the labels and annotations a second writer adds (fields the operator does not own,
/// which it must keep); not part of what the operator produced.
pub const FOREIGN_PREFIX: &str = "foreign.example.com/";

/// Annotations whose values legitimately differ between two identical graphs.
const NOT_COMPARED_ANNOTATIONS: &[&str] = &[
    // Set by the Deployment controller: counts rollouts, not content.
    "deployment.kubernetes.io/revision",
    // A hash of the whole rendered object, names included: differs with the graph's name. The
    // object it summarizes is compared itself.
    "nvidia.com/last-applied-hash",
];

/// How a graph's subtree differs from its template's reference subtree.
#[derive(Default, Debug)]
pub struct Differences {
    pub lost: Vec<String>,
    pub duplicated: Vec<String>,
    pub wrong: Vec<String>,
}

pub fn compare(reference: &Fingerprint, actual: &Fingerprint, graph: &str) -> Differences {
    let mut d = Differences::default();
    for (key, bodies) in reference {
        match actual.get(key) {
            None => d.lost.push(format!("{graph}: {key}")),
            Some(found) if found.len() > bodies.len() => d
                .duplicated
                .push(format!("{graph}: {key} ×{}", found.len())),
            Some(found) if found.len() < bodies.len() => d.lost.push(format!(
                "{graph}: {key} ({} of {})",
                found.len(),
                bodies.len()
            )),
            Some(found) if found != bodies => d.wrong.push(format!(
                "{graph}: {key}: {}",
                first_difference(&bodies[0], &found[0])
            )),
            _ => {}
        }
    }
    for (key, found) in actual {
        if !reference.contains_key(key) {
            d.duplicated.push(format!(
                "{graph}: {key} ×{} (not in the reference)",
                found.len()
            ));
        }
    }
    d
}

/// Where two JSON texts start to differ, with some context.
pub fn first_difference(a: &str, b: &str) -> String {
    let at = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i)
        .unwrap_or(a.len().min(b.len()));
    let from = a[..at].char_indices().rev().nth(80).map_or(0, |(i, _)| i);
    let cut = |s: &str| {
        s.chars()
            .skip(a[..from].chars().count())
            .take(200)
            .collect::<String>()
    };
    format!("expected …{}… found …{}…", cut(a), cut(b))
}
