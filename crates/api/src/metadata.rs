//! Kubernetes' own rules for labels and annotations (apimachinery's `ValidateLabels`,
//! `IsQualifiedName`, `IsValidLabelValue` and `ValidateAnnotations`).
//!
//! The operator copies graph and pod template labels and annotations onto every child it
//! writes; one that breaks these rules makes every such write fail. [`crate::validate()`] uses
//! these checks to reject such a spec up front (`Ready=False`, reason `InvalidSpec`), naming the
//! field, instead of leaving the cause in the operator log.
//!
//! Lengths are in bytes, as Kubernetes counts them.

use std::fmt::Write as _;

/// Maximum length of a label value and of the name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Maximum length of a label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Maximum length of a DNS-1123 subdomain (the prefix of a qualified name).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Maximum total size of an object's annotations: the sum of the lengths of keys and values.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The regular expression of a label value, as the apiserver checks it (also the CRD's
/// `pattern` for label values).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

const NAME_RULE: &str =
    "must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
const SUBDOMAIN_RULE: &str = "must be a lowercase DNS-1123 subdomain (lowercase alphanumerics, '-' \
     or '.', each part starting and ending with an alphanumeric, e.g. example.com)";

/// What is wrong with `key` as a label key (a qualified name: an optional DNS-1123 subdomain
/// prefix of at most 253 characters and `/`, then a name of at most 63 characters), or `None`.
pub fn label_key_problems(key: &str) -> Option<String> {
    joined(qualified_name_problems(key))
}

/// What is wrong with `key` as an annotation key, or `None`. The rules of label keys, applied
/// to the key in lower case (as the apiserver does).
pub fn annotation_key_problems(key: &str) -> Option<String> {
    joined(qualified_name_problems(&key.to_lowercase()))
}

/// What is wrong with `value` as a label value (empty, or at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric), or `None`.
pub fn label_value_problems(value: &str) -> Option<String> {
    let mut problems = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        problems.push(format!(
            "must be at most {LABEL_VALUE_MAX_LENGTH} characters (has {})",
            value.len()
        ));
    }
    if !value.is_empty() && !is_name(value) {
        problems.push(format!("must be empty or {}", &NAME_RULE["must ".len()..]));
    }
    joined(problems)
}

/// Total size of annotations as the apiserver counts it: the sum of the byte lengths of keys
/// and values.
pub fn annotations_size<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> usize {
    annotations
        .into_iter()
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

/// `text` quoted and escaped (control and invisible characters show), shortened to about 64
/// characters: for messages that name an offending key or value.
pub fn quoted(text: &str) -> String {
    const MAX: usize = 64;
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(MAX) {
        let _ = write!(out, "{}", c.escape_debug());
    }
    if chars.next().is_some() {
        out.push('…');
    }
    format!("\"{out}\"")
}

fn qualified_name_problems(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let mut problems = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must not be empty".to_string());
            } else {
                problems.extend(
                    subdomain_problems(prefix)
                        .into_iter()
                        .map(|p| format!("prefix part {p}")),
                );
            }
            name
        }
        _ => {
            return vec![
                "must be a name with an optional DNS subdomain prefix and '/' \
                 (e.g. example.com/my-name), with at most one '/'"
                    .to_string(),
            ];
        }
    };
    if name.is_empty() {
        problems.push("name part must not be empty".to_string());
    } else {
        if name.len() > QUALIFIED_NAME_MAX_LENGTH {
            problems.push(format!(
                "name part must be at most {QUALIFIED_NAME_MAX_LENGTH} characters (has {})",
                name.len()
            ));
        }
        if !is_name(name) {
            problems.push(format!("name part {NAME_RULE}"));
        }
    }
    problems
}

fn subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        problems.push(format!(
            "must be at most {DNS1123_SUBDOMAIN_MAX_LENGTH} characters (has {})",
            value.len()
        ));
    }
    if !is_subdomain(value) {
        problems.push(SUBDOMAIN_RULE.to_string());
    }
    problems
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the whole of `s`.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, the whole of `s`.
fn is_subdomain(s: &str) -> bool {
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

fn joined(problems: Vec<String>) -> Option<String> {
    (!problems.is_empty()).then(|| problems.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys() {
        let long_prefix = format!("{}.com", "a".repeat(250));
        let max_prefix = format!("{}.com", "a".repeat(249));
        let cases: Vec<(String, Option<&str>)> = vec![
            // Valid (apimachinery's own examples).
            ("simple".into(), None),
            ("now-with-dashes".into(), None),
            ("1-starts-with-num".into(), None),
            ("1234".into(), None),
            ("simple/simple".into(), None),
            ("now-with-dashes/simple".into(), None),
            ("now-with-dashes/now-with-dashes".into(), None),
            ("now.with.dots/now-with-dashes".into(), None),
            ("now-with.dashes-and.dots/now-with-dashes".into(), None),
            ("1-num.2-num/3-num".into(), None),
            ("1234/5678".into(), None),
            ("1.2.3.4/5678".into(), None),
            ("Uppercase_Is_OK_123".into(), None),
            ("example.com/Uppercase_Is_OK_123".into(), None),
            ("requests.storage-foo".into(), None),
            ("nvidia.com/dynamo-graph-deployment-name".into(), None),
            ("a".repeat(63), None),
            (format!("{max_prefix}/{}", "b".repeat(63)), None),
            // Invalid.
            ("".into(), Some("name part must not be empty")),
            ("nospecialchars%^=@".into(), Some("name part must consist")),
            ("cantendwithadash-".into(), Some("name part must consist")),
            ("-cantstartwithadash".into(), Some("name part must consist")),
            ("only/one/slash".into(), Some("at most one '/'")),
            (
                "Example.com/abc".into(),
                Some("prefix part must be a lowercase"),
            ),
            (
                "example_com/abc".into(),
                Some("prefix part must be a lowercase"),
            ),
            (
                "example..com/abc".into(),
                Some("prefix part must be a lowercase"),
            ),
            ("/abc".into(), Some("prefix part must not be empty")),
            ("example.com/".into(), Some("name part must not be empty")),
            ("with space".into(), Some("name part must consist")),
            ("ünïcødé".into(), Some("name part must consist")),
            ("tab\there".into(), Some("name part must consist")),
            ("trailing-newline\n".into(), Some("name part must consist")),
            (
                "a".repeat(64),
                Some("name part must be at most 63 characters (has 64)"),
            ),
            (
                format!("{long_prefix}/x"),
                Some("prefix part must be at most 253 characters"),
            ),
        ];
        for (key, want) in cases {
            let got = label_key_problems(&key);
            match want {
                None => assert_eq!(got, None, "{key:?}"),
                Some(w) => {
                    let got = got.unwrap_or_else(|| panic!("{key:?} accepted"));
                    assert!(got.contains(w), "{key:?}: {got}");
                }
            }
        }
    }

    #[test]
    fn annotation_keys_are_checked_in_lower_case() {
        for (key, valid) in [
            ("example.com/note", true),
            ("Example.COM/Note", true),
            ("kubectl.kubernetes.io/last-applied-configuration", true),
            ("a/b/c", false),
            ("example.com/", false),
            ("🚀", false),
            ("with space/x", false),
        ] {
            assert_eq!(annotation_key_problems(key).is_none(), valid, "{key:?}");
        }
        assert!(label_key_problems("Example.COM/Note").is_some());
    }

    #[test]
    fn label_values() {
        let cases: Vec<(String, Option<&str>)> = vec![
            ("".into(), None),
            ("simple".into(), None),
            ("now-with-dashes".into(), None),
            ("1-starts-with-num".into(), None),
            ("end-with-num-1".into(), None),
            ("1234".into(), None),
            ("Uppercase.And_underscore-ok".into(), None),
            ("a".repeat(63), None),
            (
                "a".repeat(64),
                Some("must be at most 63 characters (has 64)"),
            ),
            (
                "nospecialchars%^=@".into(),
                Some("must be empty or consist"),
            ),
            (
                "Tama-nui-te-rā.is.Māori.sun".into(),
                Some("must be empty or consist"),
            ),
            ("\u{7}".into(), Some("must be empty or consist")),
            ("ünï cødé!".into(), Some("must be empty or consist")),
            ("-dash-first".into(), Some("must be empty or consist")),
            ("dash-last-".into(), Some("must be empty or consist")),
            ("example.com/slash".into(), Some("must be empty or consist")),
            (
                "trailing-newline\n".into(),
                Some("must be empty or consist"),
            ),
        ];
        for (value, want) in cases {
            let got = label_value_problems(&value);
            match want {
                None => assert_eq!(got, None, "{value:?}"),
                Some(w) => {
                    let got = got.unwrap_or_else(|| panic!("{value:?} accepted"));
                    assert!(got.contains(w), "{value:?}: {got}");
                }
            }
        }
        let both = label_value_problems(&format!("{}!", "a".repeat(70))).unwrap();
        assert!(
            both.contains("at most 63") && both.contains("must be empty or"),
            "{both}"
        );
    }

    #[test]
    fn annotation_size_counts_bytes_of_keys_and_values() {
        let a = std::collections::BTreeMap::from([
            ("k".to_string(), "vv".to_string()),
            ("🚀".to_string(), String::new()),
        ]);
        assert_eq!(annotations_size(&a), 1 + 2 + 4);
    }

    #[test]
    fn quoting_escapes_and_shortens() {
        assert_eq!(quoted("a\u{7}b"), r#""a\u{7}b""#);
        assert_eq!(quoted("\u{0}🚀"), r#""\0🚀""#);
        let long = quoted(&"x".repeat(1000));
        assert!(long.ends_with("…\"") && long.len() < 80, "{long}");
    }
}
