//! Defaults gated on the Dynamo runtime version of the container they are rendered for
//! ([`api::runtime_version`]): a gate is on from its minimum version; an unknown version turns
//! every gate off, so images whose tag is not a version (and that carry no override) keep the
//! defaults of older runtimes.
//!
//! | gate | from | on | off |
//! | --- | --- | --- | --- |
//! | [`CANARY_HEALTH_CHECKS`] | 1.5.0 | workers: `DYN_HEALTH_CHECK_ENABLED=true` | `false` |
//! | [`INCREASED_WORKER_FAILURE_THRESHOLD`] | 1.5.0 | workers: liveness `failureThreshold` 3 | 1 |
//! | [`FRONTEND_STARTUP_PROBE`] | 1.6.0 | frontends: startup probe `/live` on `http` (every 10 s, timeout 1 s, 30 failures) | none |
//! | [`STRICT_NAMESPACE_PREFIX`] | 1.6.0 | frontends and the native EPP: `DYN_NAMESPACE_PREFIX_STRICT=true` | unset |
//!
//! A component's own defaults follow its version (`runtimeVersionOverride`, else the tag of
//! the image running the runtime); a `frontendSidecar` container's follow its own image's tag
//! (the override and `main`'s image do not apply to it).

use api::runtime_version::RuntimeVersion;

/// A rendered default that a runtime needs at least `min` to understand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Name of the gate (upstream's).
    pub name: &'static str,
    /// First runtime version the default is rendered for.
    pub min: RuntimeVersion,
}

impl Gate {
    /// Whether a known `version` reaches the gate.
    pub fn enabled(self, version: Option<RuntimeVersion>) -> bool {
        version.is_some_and(|v| v >= self.min)
    }
}

/// Workers run the canary health checks.
pub const CANARY_HEALTH_CHECKS: Gate = Gate {
    name: "CanaryHealthChecks",
    min: RuntimeVersion::new(1, 5, 0),
};

/// Workers are restarted after three failed liveness checks instead of one.
pub const INCREASED_WORKER_FAILURE_THRESHOLD: Gate = Gate {
    name: "IncreasedWorkerFailureThreshold",
    min: RuntimeVersion::new(1, 5, 0),
};

/// Frontends get a startup allowance for their dependency connections before liveness counts.
pub const FRONTEND_STARTUP_PROBE: Gate = Gate {
    name: "FrontendStartupProbe",
    min: RuntimeVersion::new(1, 6, 0),
};

/// Frontends and the native EPP match worker namespaces by worker generation, not by prefix.
pub const STRICT_NAMESPACE_PREFIX: Gate = Gate {
    name: "StrictNamespacePrefix",
    min: RuntimeVersion::new(1, 6, 0),
};
