//! Publishing queued [`Event`]s as `events.k8s.io/v1` Events.
//!
//! [`Publisher`] is the production [`EventSink`]: the first occurrence of an event creates an
//! Event; a repeat (same type, reason, action, note, regarding and related object, same reporter)
//! within [`SERIES_TTL`] patches that Event's `series` (count, last observed time) instead of
//! creating another, as kube-runtime's `Recorder` does. What it remembers per series is small
//! (the Event's name, the count, when it was last seen), is dropped when the regarding object
//! leaves the cache (see [`crate::cache::Cache::on_deleted`]) and, for objects whose deletion is
//! never seen, after [`SERIES_TTL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use serde_json::json;

use crate::cache::{Cache, Gone};
use crate::capability::EventSink;
use crate::error::Result;
use crate::outcome::Event;

pub use kube::runtime::events::Reporter;

/// How long a repeat still joins the series of an earlier Event.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

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

/// kube-runtime's `Recorder` (it keeps a copy of every Event it wrote for six minutes).
#[async_trait]
impl EventSink for Recorder {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<()> {
        Recorder::publish(self, &to_kube(event), regarding).await?;
        Ok(())
    }
}

/// The object an event regards: `apiVersion/Kind`, namespace, name (as [`Gone`] names it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Regarding {
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl Regarding {
    fn of(reference: &ObjectReference) -> Self {
        Regarding {
            kind: format!(
                "{}/{}",
                reference.api_version.as_deref().unwrap_or_default(),
                reference.kind.as_deref().unwrap_or_default()
            ),
            namespace: reference.namespace.clone(),
            name: reference.name.clone().unwrap_or_default(),
        }
    }
}

/// What makes a repeat part of a series, besides the regarding object's kind, namespace and name.
#[derive(Clone, Debug, PartialEq)]
struct SeriesKey {
    warning: bool,
    reason: String,
    action: String,
    /// A repeat says the same: a summary naming other children is another Event.
    note: Option<String>,
    /// The regarding reference as given (uid and resourceVersion included).
    regarding: ObjectReference,
    related: Option<ObjectReference>,
}

/// The Event written for a series.
#[derive(Clone, Debug)]
struct Series {
    name: String,
    count: i32,
    last: Instant,
}

#[derive(Default)]
struct SeriesTable {
    by_object: HashMap<Regarding, Vec<(SeriesKey, Series)>>,
    swept: Option<Instant>,
}

impl SeriesTable {
    fn find(&self, object: &Regarding, key: &SeriesKey, now: Instant) -> Option<Series> {
        self.by_object
            .get(object)?
            .iter()
            .find(|(k, s)| k == key && now.duration_since(s.last) < SERIES_TTL)
            .map(|(_, s)| s.clone())
    }

    fn record(&mut self, object: Regarding, key: SeriesKey, series: Series) {
        let all = self.by_object.entry(object).or_default();
        match all.iter_mut().find(|(k, _)| *k == key) {
            Some((_, s)) => *s = series,
            None => all.push((key, series)),
        }
    }

    /// Drops the series not seen for [`SERIES_TTL`], at most once a minute.
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < Duration::from_secs(60))
        {
            return;
        }
        self.swept = Some(now);
        self.by_object.retain(|_, all| {
            all.retain(|(_, s)| now.duration_since(s.last) < SERIES_TTL);
            !all.is_empty()
        });
    }

    fn len(&self) -> usize {
        self.by_object.values().map(Vec::len).sum()
    }
}

/// Writes `events.k8s.io/v1` Events and folds repeats into a series. Clones share the series.
#[derive(Clone)]
pub struct Publisher {
    client: kube::Client,
    reporter: Reporter,
    series: Arc<Mutex<SeriesTable>>,
}

impl Publisher {
    /// A publisher writing as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Publisher {
            client,
            reporter,
            series: Arc::default(),
        }
    }

    /// Forget an object's series when it leaves `cache` (deleted by anyone).
    pub fn with_cache(self, cache: &Cache) -> Self {
        let series = Arc::downgrade(&self.series);
        cache.on_deleted(move |gone: Gone<'_>| {
            if let Some(series) = series.upgrade() {
                series
                    .lock()
                    .expect("series lock")
                    .by_object
                    .remove(&Regarding {
                        kind: gone.kind.to_string(),
                        namespace: gone.namespace.map(str::to_string),
                        name: gone.name.to_string(),
                    });
            }
        });
        self
    }

    /// How many series it remembers.
    pub fn remembered(&self) -> usize {
        self.series.lock().expect("series lock").len()
    }

    fn event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let instance = self.reporter.instance.clone();
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(instance.unwrap_or_else(|| self.reporter.controller.clone())),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding
                        .name
                        .as_deref()
                        .unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            ..K8sEvent::default()
        }
    }
}

#[async_trait]
impl EventSink for Publisher {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<()> {
        let object = Regarding::of(regarding);
        let key = SeriesKey {
            warning: matches!(event.type_, EventType::Warning),
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: regarding.clone(),
            related: event.secondary.clone(),
        };
        let now = Instant::now();
        let earlier = {
            let mut table = self.series.lock().expect("series lock");
            table.sweep(now);
            table.find(&object, &key, now)
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let stamp = Timestamp::now();
        let series = match earlier {
            Some(series) => {
                let count = series.count + 1;
                let patch = json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(stamp),
                }});
                events
                    .patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Series {
                    count,
                    last: now,
                    ..series
                }
            }
            None => {
                let created = events
                    .create(&PostParams::default(), &self.event(event, regarding, stamp))
                    .await?;
                Series {
                    name: created.metadata.name.unwrap_or_default(),
                    count: 1,
                    last: now,
                }
            }
        };
        self.series
            .lock()
            .expect("series lock")
            .record(object, key, series);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, rv: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("nvidia.com/v1beta1".into()),
            kind: Some("DynamoGraphDeployment".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            ..ObjectReference::default()
        }
    }

    fn key(reason: &str, regarding: &ObjectReference) -> SeriesKey {
        SeriesKey {
            warning: false,
            reason: reason.into(),
            action: "Reconcile".into(),
            note: None,
            regarding: regarding.clone(),
            related: None,
        }
    }

    fn series(name: &str, last: Instant) -> Series {
        Series {
            name: name.into(),
            count: 1,
            last,
        }
    }

    #[test]
    fn a_repeat_joins_its_series_until_the_ttl() {
        let mut table = SeriesTable::default();
        let t0 = Instant::now();
        let r = reference("g", "1");
        let object = Regarding::of(&r);
        table.record(object.clone(), key("Created", &r), series("e1", t0));
        assert!(table.find(&object, &key("Created", &r), t0).is_some());
        // Another reason, or another revision of the object: another series.
        assert!(table.find(&object, &key("Deleted", &r), t0).is_none());
        assert!(
            table
                .find(&object, &key("Created", &reference("g", "2")), t0)
                .is_none()
        );
        let late = t0 + SERIES_TTL + Duration::from_secs(1);
        assert!(table.find(&object, &key("Created", &r), late).is_none());
        table.sweep(late);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn the_regarding_key_names_the_object_as_the_cache_does() {
        let object = Regarding::of(&reference("g", "1"));
        assert_eq!(object.kind, "nvidia.com/v1beta1/DynamoGraphDeployment");
        assert_eq!(object.namespace.as_deref(), Some("ns"));
        assert_eq!(object.name, "g");
    }
}
