//! `Ready=False` for stored objects this operator cannot read.
//!
//! The API server can store an object a controller cannot decode: one written through a newer
//! version of its CRD (an enum value this version does not know), or nested deeper than
//! [`crate::object::MAX_DEPTH`] in a field that preserves unknown fields. The [`Cache`] skips
//! such an object (it never reaches a controller, and never fails the list it came in) and
//! reports it on [`Cache::unreadable`]. [`Reporter`] tells its owner, where `kubectl get` and
//! `kubectl describe` show it:
//! - `status.conditions`: `Ready=False`, reason [`REASON`], the decode error as message and the
//!   object's generation as `observedGeneration`, server-side applied on the status subresource
//!   by its own field manager (so the controller's next status write takes the condition back),
//!   without decoding the response;
//! - a `Warning` event with the same reason and message.
//!
//! Nothing is written when the stored `Ready` condition already says exactly this, so the watch
//! event of the condition's own write ends there: no loop, one write and one event per
//! generation.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::cache::{Cache, Unreadable};
use crate::capability::EventSink;
use crate::error::Result;
use crate::object::key;
use crate::outcome::Event;

/// The reason of the condition and the event.
pub const REASON: &str = "UnreadableObject";

/// The `Ready` condition an unreadable object should carry, or `None` when its stored `Ready`
/// condition already is that (status, reason, message and observed generation).
pub fn condition(object: &Unreadable, now: Time) -> Option<Condition> {
    let message = message(&object.error);
    let generation = object.metadata.generation;
    let current = object.conditions.iter().find(|c| c.type_ == "Ready");
    if let Some(c) = current
        && c.status == "False"
        && c.reason == REASON
        && c.message == message
        && c.observed_generation == generation
    {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if c.status == "False" => c.last_transition_time.clone(),
        _ => now,
    };
    Some(Condition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: REASON.into(),
        message,
        observed_generation: generation,
        last_transition_time,
    })
}

fn message(error: &str) -> String {
    format!(
        "this operator cannot read the stored object, so it does not reconcile it: {error} \
         (written by a newer version of the CRD, or nested too deeply?)"
    )
}

/// Writes [`condition`] and its event for the unreadable objects of one kind.
pub struct Reporter {
    client: Client,
    field_manager: String,
    events: Arc<dyn EventSink>,
}

impl Reporter {
    /// A reporter applying the condition as `field_manager` and publishing through `events`.
    pub fn new(client: Client, field_manager: &str, events: Arc<dyn EventSink>) -> Self {
        Reporter {
            client,
            field_manager: field_manager.to_string(),
            events,
        }
    }

    /// A future reporting every unreadable object of `K` the cache meets, until the cache stops.
    /// Subscribe before the cache runs (as for [`Cache::subscribe`]).
    pub fn run<K>(self, cache: &Cache) -> Result<BoxFuture<'static, ()>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let stream = cache.unreadable::<K>()?;
        let this = Arc::new(self);
        Ok(stream
            .for_each(move |object| {
                let this = this.clone();
                async move {
                    if let Err(error) = this.report::<K>(&object).await {
                        tracing::warn!(
                            kind = %K::kind(&()),
                            object = %key(object.metadata.namespace.as_deref(), object.metadata.name.as_deref().unwrap_or_default()),
                            %error,
                            "could not report an unreadable object"
                        );
                    }
                }
            })
            .boxed())
    }

    /// Write the condition and publish the event for `object`, unless its condition is current.
    pub async fn report<K>(&self, object: &Unreadable) -> Result<bool>
    where
        K: Resource<DynamicType = ()>,
    {
        let Some(condition) = condition(object, crate::conditions::now()) else {
            return Ok(false);
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        let namespace = object.metadata.namespace.as_deref();
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name, "namespace": namespace},
            "status": {"conditions": [condition]},
        });
        let request = kube::core::Request::new(K::url_path(&(), namespace))
            .patch_subresource(
                "status",
                &name,
                &PatchParams::apply(&self.field_manager).force(),
                &Patch::Apply(&body),
            )
            .map_err(|e| crate::Error::Kube(kube::Error::BuildRequest(e)))?;
        // The answer is the object, which does not decode: it is not read.
        self.client.request_text(request).await?;
        let regarding = ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(name),
            namespace: object.metadata.namespace.clone(),
            uid: object.metadata.uid.clone(),
            resource_version: object.metadata.resource_version.clone(),
            ..ObjectReference::default()
        };
        let event = Event::warning(REASON, condition.message).action("Decode");
        self.events.publish(&event, &regarding).await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreadable(generation: i64, conditions: Vec<Condition>) -> Unreadable {
        Unreadable {
            metadata: kube::api::ObjectMeta {
                name: Some("g".into()),
                namespace: Some("ns".into()),
                generation: Some(generation),
                ..Default::default()
            },
            error: "unknown variant `router`".into(),
            conditions,
        }
    }

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn condition_is_written_once_per_generation_and_keeps_its_transition_time() {
        let ready = Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "all_resources_are_ready".into(),
            message: "All resources are ready".into(),
            observed_generation: Some(1),
            last_transition_time: at(10),
        };
        let first = condition(&unreadable(2, vec![ready]), at(20)).expect("a transition");
        assert_eq!(
            (first.status.as_str(), first.reason.as_str()),
            ("False", REASON)
        );
        assert_eq!(first.observed_generation, Some(2));
        assert_eq!(first.last_transition_time, at(20));
        assert!(first.message.contains("unknown variant `router`"));
        // Its own watch event: nothing to write.
        assert!(condition(&unreadable(2, vec![first.clone()]), at(30)).is_none());
        // A new generation, still unreadable: rewritten, same transition time.
        let next = condition(&unreadable(3, vec![first]), at(40)).expect("new generation");
        assert_eq!(next.observed_generation, Some(3));
        assert_eq!(next.last_transition_time, at(20));
        assert!(condition(&unreadable(1, vec![]), at(50)).is_some());
    }
}
