//! Errors of the checkpoint controller.

use api::checkpoint::DynamoCheckpointPhase;

use crate::decide::Step;

/// Why a reconcile of a DynamoCheckpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec fails validation; nothing is retried until it changes.
    #[error("{0}")]
    InvalidSpec(#[from] api::InvalidSpec),
    /// A read or write of the API failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done, with the object's key.
        what: String,
        /// The API error.
        #[source]
        source: kit::Error,
    },
    /// The decision led to a phase change that the state machine does not allow: a bug.
    #[error("illegal phase transition {from:?} --{step:?}--> {to:?}")]
    IllegalTransition {
        /// The phase before.
        from: Option<DynamoCheckpointPhase>,
        /// The step taken.
        step: Step,
        /// The phase after.
        to: Option<DynamoCheckpointPhase>,
    },
}

impl Error {
    pub(crate) fn api(what: impl Into<String>) -> impl FnOnce(kit::Error) -> Error {
        let what = what.into();
        move |source| Error::Api { what, source }
    }
}
