//! Publishing queued [`Event`]s through kube-runtime's `Recorder`.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, Recorder};

use crate::capability::EventSink;
use crate::error::Result;
use crate::outcome::Event;

pub use kube::runtime::events::Reporter;

/// Convert a queued event into kube-runtime's form.
pub fn to_kube(event: &Event) -> KubeEvent {
    KubeEvent {
        type_: event.type_,
        reason: event.reason.clone(),
        note: event.note.clone(),
        action: event.action.clone(),
        secondary: event.secondary.clone(),
    }
}

/// Events go through one shared `Recorder` (clone it; clones share the series cache), which writes
/// `events.k8s.io/v1` Events and folds repeats into an `EventSeries`.
#[async_trait]
impl EventSink for Recorder {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<()> {
        Recorder::publish(self, &to_kube(event), regarding).await?;
        Ok(())
    }
}
