//! Reusable reconcile framework. Placeholder docs; see below.

pub mod cache;
pub mod capability;
pub mod client;
pub mod conditions;
pub mod error;
pub mod events;
pub mod object;
pub mod outcome;
pub mod run;
#[cfg(feature = "testing")]
pub mod testing;

pub use capability::{
    Applied, Deleted, EventSink, Kind, Patch, Reader, ReaderExt, StatusWriter, StatusWriterExt,
    Writer, WriterExt,
};
pub use error::{Error, Result};
pub use kube::api::{Preconditions, PropagationPolicy};
pub use kube::core::Selector;
pub use outcome::{Event, EventType, Failed, OrFail, Outcome, ReconcileStatus, Reconciled, Retry};
