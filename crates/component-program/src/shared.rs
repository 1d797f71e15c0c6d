//! Stand-in for `reconcilers::shared::SharedResources` until it lands: same constructor and
//! `reconcile` shape, converges nothing.

use std::sync::Arc;

use api::{DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use kit::{Failed, Outcome, Reader, Writer};

/// Operator configuration of the shared resources.
#[derive(Clone, Debug, Default)]
pub struct SharedConfig {}

/// Checkpoint facts for workload rendering.
#[derive(Clone, Debug, Default)]
pub struct CheckpointInfos {}

/// The shared-resources error.
#[derive(Debug, thiserror::Error)]
#[error("shared resources")]
pub struct Error;

/// The shared resources of a graph.
pub struct SharedResources {
    _reader: Arc<dyn Reader>,
    _writer: Arc<dyn Writer>,
    _config: SharedConfig,
}

impl SharedResources {
    /// Shared resources read with `reader`, written with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: SharedConfig) -> Self {
        SharedResources {
            _reader: reader,
            _writer: writer,
            _config: config,
        }
    }

    /// Converge the shared resources of `dgd`.
    pub async fn reconcile(
        &self,
        _dgd: &DynamoGraphDeployment,
        _out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<CheckpointInfos, Failed<DynamoGraphDeploymentStatus, Error>> {
        Ok(CheckpointInfos::default())
    }
}
