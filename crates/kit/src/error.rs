//! The one error type of every capability.

/// A failed read or write, classified the way the API server classifies it.
///
/// Reconcilers branch on the class (`is_not_found`, `is_conflict`, ...) rather than on HTTP codes,
/// and the in-memory double produces the same classes, so a unit test exercises the same branches
/// as production.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object does not exist (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// A create found an object with the same name (HTTP 409, reason `AlreadyExists`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// An optimistic-concurrency or precondition check failed (HTTP 409, reason `Conflict`).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The server (or the double) rejected the request as invalid (HTTP 422 or 400).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The caller may not do this (HTTP 403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Any other API or transport failure.
    #[error("kubernetes api: {0}")]
    Kube(#[source] kube::Error),
    /// An object could not be converted between its typed and its dynamic form.
    #[error("convert object: {0}")]
    Convert(#[from] serde_json::Error),
    /// The capability cannot do this (for example a strategic-merge patch in the double).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    /// A create collided with an existing object.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists(_))
    }

    /// An optimistic-concurrency or precondition check failed: re-read and retry.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// The request was rejected as invalid: retrying the same request cannot succeed.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Invalid(_))
    }

    /// The caller lacks permission.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Forbidden(_))
    }
}

impl From<kube::Error> for Error {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => {
                let message = if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                };
                // A group/version the server does not serve answers a bare "404 page not found"
                // without a reason: that is NotFound too.
                if status.is_not_found() || status.code == 404 {
                    Error::NotFound(message)
                } else if status.is_already_exists() {
                    Error::AlreadyExists(message)
                } else if status.code == 409 {
                    Error::Conflict(message)
                } else if status.is_forbidden() || status.code == 403 {
                    Error::Forbidden(message)
                } else if status.is_invalid() || status.code == 422 || status.code == 400 {
                    Error::Invalid(message)
                } else {
                    Error::Kube(kube::Error::Api(status))
                }
            }
            other => Error::Kube(other),
        }
    }
}

/// A read of one named object that failed: which object, and why.
#[derive(Debug, thiserror::Error)]
#[error("read {kind} {name}: {source}")]
pub struct ReadFailed {
    /// The object's kind.
    pub kind: &'static str,
    /// Its name (or what was listed).
    pub name: String,
    /// The read error.
    #[source]
    pub source: Error,
}

/// A write of `spec.replicas` through the scale subresource that failed.
#[derive(Debug, thiserror::Error)]
#[error("scale {kind} {name} to {replicas}: {source}")]
pub struct ScaleFailed {
    /// The workload's kind.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// The replicas it was to get.
    pub replicas: i32,
    /// The write error.
    #[source]
    pub source: Error,
}
