//! The Dynamo runtime version of a component, which gates some rendered defaults.
//!
//! A component's version is, as upstream resolves it: `runtimeVersionOverride` when set (it is
//! authoritative, even over a tag that disagrees), else the semantic version in the tag of the
//! image that runs the Dynamo runtime (the `dynamoSidecar` init container when the component
//! names one, else `main`), else unknown. Only the `MAJOR.MINOR.PATCH` core counts: a tag
//! `v1.2.3-cuda13` is version 1.2.3. An unknown version enables no gated default.
//!
//! - the override must be a strict semantic version (`1.4.0`; no `v`, no leading zeros, three
//!   numeric parts, an optional pre-release and build suffix); the CRD's pattern is narrower
//!   (`MAJOR.MINOR.PATCH`, at most four digits each);
//! - a tag may carry a `v`/`V` prefix, a pre-release and a build suffix; no tag (a bare name or
//!   a digest-only reference) and a tag that is not a semantic version (`latest`, `my-tag`)
//!   give no version.

use std::fmt;

use crate::DynamoComponentDeploymentSharedSpec;

/// A Dynamo runtime version's compatibility core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuntimeVersion {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
}

impl RuntimeVersion {
    /// `major.minor.patch`.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// The version of an explicit override (a strict semantic version).
    pub fn parse(value: &str) -> Result<Self, InvalidVersion> {
        strict(value).ok_or(InvalidVersion)
    }

    /// The version in an image reference's tag, if the tag is a semantic version.
    pub fn from_image(image: &str) -> Option<Self> {
        let tag = tag(image)?.trim();
        let tag = tag
            .strip_prefix('v')
            .or_else(|| tag.strip_prefix('V'))
            .unwrap_or(tag);
        strict(tag)
    }

    /// The override when given (an invalid one is an error), else the image tag's version.
    pub fn resolve(
        image: Option<&str>,
        r#override: Option<&str>,
    ) -> Result<Option<Self>, InvalidVersion> {
        match r#override.filter(|o| !o.is_empty()) {
            Some(value) => Self::parse(value).map(Some),
            None => Ok(image.and_then(Self::from_image)),
        }
    }

    /// The version of a component (see the module docs); `None` when unknown or when the
    /// override is invalid (validation refuses that first).
    pub fn of_component(component: &DynamoComponentDeploymentSharedSpec) -> Option<Self> {
        let image = component
            .dynamo_container()
            .and_then(|c| c.image.as_deref());
        Self::resolve(image, component.runtime_version_override.as_deref())
            .ok()
            .flatten()
    }
}

impl fmt::Display for RuntimeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// An override that is not a semantic version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be a semantic version such as \"1.1.0\"")]
pub struct InvalidVersion;

/// The tag of an image reference: after the last `:` that follows the last `/`, the digest
/// (`@...`) cut off first.
fn tag(image: &str) -> Option<&str> {
    let reference = image.trim();
    let reference = reference.split_once('@').map_or(reference, |(r, _)| r);
    let colon = reference.rfind(':')?;
    if reference.rfind('/').is_some_and(|slash| colon < slash) {
        return None;
    }
    Some(&reference[colon + 1..])
}

/// A strict semantic version: `MAJOR.MINOR.PATCH` without leading zeros (each fitting in 64
/// bits), then an optional `-pre.release` and `+build.metadata`.
fn strict(value: &str) -> Option<RuntimeVersion> {
    let (rest, build) = match value.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (value, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    if let Some(build) = build
        && !identifiers(build, false)
    {
        return None;
    }
    if let Some(pre) = pre
        && !identifiers(pre, true)
    {
        return None;
    }
    let mut parts = core.split('.');
    let mut number = || {
        let part = parts.next()?;
        (numeric(part) && (part == "0" || !part.starts_with('0')))
            .then(|| part.parse::<u64>().ok())
            .flatten()
    };
    let version = RuntimeVersion::new(number()?, number()?, number()?);
    parts.next().is_none().then_some(version)
}

/// Dot-separated non-empty identifiers of `[0-9A-Za-z-]`; numeric pre-release identifiers
/// without leading zeros.
fn identifiers(value: &str, pre_release: bool) -> bool {
    value.split('.').all(|id| {
        !id.is_empty()
            && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !(pre_release && numeric(id) && id.len() > 1 && id.starts_with('0'))
    })
}

fn numeric(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: fn(u64, u64, u64) -> RuntimeVersion = RuntimeVersion::new;

    /// Upstream's runtimeversion_test.go `TestVersionCompare` (7 rows), against 1.4.1.
    #[test]
    fn versions_compare_by_their_core() {
        let reference = V(1, 4, 1);
        let rows = [
            (V(0, 9, 9), std::cmp::Ordering::Less),
            (V(1, 3, 9), std::cmp::Ordering::Less),
            (V(1, 4, 0), std::cmp::Ordering::Less),
            (V(1, 4, 1), std::cmp::Ordering::Equal),
            (V(1, 4, 2), std::cmp::Ordering::Greater),
            (V(1, 5, 0), std::cmp::Ordering::Greater),
            (V(2, 0, 0), std::cmp::Ordering::Greater),
        ];
        for (version, want) in rows {
            assert_eq!(version.cmp(&reference), want, "{version}");
        }
    }

    /// Upstream's `TestParse` (3 rows) and the strict rules the override follows.
    #[test]
    fn overrides_are_strict_semantic_versions() {
        let rows: [(&str, Option<RuntimeVersion>); 12] = [
            ("1.2.3", Some(V(1, 2, 3))),
            ("1.2", None),
            ("18446744073709551616.0.0", None),
            ("0.0.0", Some(V(0, 0, 0))),
            ("1.6.0-rc.1+build.5", Some(V(1, 6, 0))),
            ("v1.2.3", None),
            ("01.2.3", None),
            ("1.2.3.4", None),
            ("1.2.3-", None),
            ("1.2.3-01", None),
            ("1.2.x", None),
            ("", None),
        ];
        for (value, want) in rows {
            assert_eq!(RuntimeVersion::parse(value).ok(), want, "{value:?}");
        }
    }

    /// Upstream's `TestParseImageVersion` (2 rows) and tag extraction.
    #[test]
    fn image_tags_give_the_version_core() {
        let rows: [(&str, Option<RuntimeVersion>); 10] = [
            (
                "nvcr.io/nvidia/ai-dynamo/vllm-runtime:v1.2.3-cuda13",
                Some(V(1, 2, 3)),
            ),
            ("registry.example/runtime:sha-123", None),
            (
                "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
                Some(V(1, 3, 1)),
            ),
            ("localhost:5000/runtime:V1.6.0", Some(V(1, 6, 0))),
            ("localhost:5000/runtime", None),
            ("frontend@sha256:aaaa", None),
            ("runtime:1.6.0@sha256:aaaa", Some(V(1, 6, 0))),
            ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:my-tag", None),
            ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:${VERSION}", None),
            ("runtime:1.5", None),
        ];
        for (image, want) in rows {
            assert_eq!(RuntimeVersion::from_image(image), want, "{image}");
        }
    }

    /// Upstream's `TestResolve` (3 rows) and an invalid override.
    #[test]
    fn the_override_wins_over_the_tag() {
        type Resolved = Result<Option<RuntimeVersion>, InvalidVersion>;
        let rows: [(&str, Option<&str>, Resolved); 5] = [
            (
                "nvcr.io/nvidia/ai-dynamo/runtime:v1.5.0-cuda13",
                None,
                Ok(Some(V(1, 5, 0))),
            ),
            (
                "nvcr.io/nvidia/ai-dynamo/runtime:1.5.0",
                Some("1.4.0"),
                Ok(Some(V(1, 4, 0))),
            ),
            ("nvcr.io/nvidia/ai-dynamo/runtime:latest", None, Ok(None)),
            ("runtime:custom", Some("1.6.0"), Ok(Some(V(1, 6, 0)))),
            ("runtime:1.6.0", Some("1.6"), Err(InvalidVersion)),
        ];
        for (image, r#override, want) in rows {
            assert_eq!(
                RuntimeVersion::resolve(Some(image), r#override),
                want,
                "{image}"
            );
        }
    }
}
