//! The bench's watch on the graphs of a namespace: which are Ready at their latest generation
//! (and at least at the generation of the bench's own last write), and when each first was.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

/// What the bench's watch has seen of each graph.
#[derive(Default)]
struct Seen {
    generation: i64,
    observed: i64,
    ready: bool,
    /// At least this generation must be observed (the bench's own last write).
    expected: i64,
    first_ready: Option<Instant>,
}

impl Seen {
    pub(super) fn ready_now(&self) -> bool {
        self.ready && self.observed >= self.generation && self.observed >= self.expected
    }
}

/// A watch on the graphs of a namespace: which are Ready at their latest generation, and when
/// each first was.
pub(super) struct Readiness {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Readiness {
    pub(super) fn start(client: Client, namespace: &str) -> Self {
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let api: Api<api::DynamoGraphDeployment> = Api::namespaced(client, namespace);
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
                    .boxed();
                while let Some(item) = stream.next().await {
                    let Ok(dgd) = item else { continue };
                    let status = dgd.status.clone().unwrap_or_default();
                    let ready =
                        kit::conditions::is_true(&status.conditions, kit::conditions::READY);
                    let mut seen = seen.lock().expect("readiness");
                    let s = seen.entry(dgd.name_any()).or_default();
                    s.generation = dgd.metadata.generation.unwrap_or(0);
                    s.observed = status.observed_generation.unwrap_or(0);
                    s.ready = ready;
                    if s.ready_now() {
                        s.first_ready.get_or_insert_with(Instant::now);
                    }
                }
            })
        };
        Self { seen, task }
    }

    pub(super) fn expect(&self, name: &str, generation: i64) {
        let mut seen = self.seen.lock().expect("readiness");
        let s = seen.entry(name.to_string()).or_default();
        s.expected = s.expected.max(generation);
    }

    pub(super) fn ready(&self, names: &[String]) -> usize {
        let seen = self.seen.lock().expect("readiness");
        names
            .iter()
            .filter(|n| seen.get(*n).is_some_and(Seen::ready_now))
            .count()
    }

    pub(super) fn not_ready(&self, names: &[String]) -> Vec<String> {
        let seen = self.seen.lock().expect("readiness");
        names
            .iter()
            .filter(|n| !seen.get(*n).is_some_and(Seen::ready_now))
            .cloned()
            .collect()
    }

    pub(super) fn first_ready(&self, name: &str) -> Option<Instant> {
        self.seen.lock().expect("readiness").get(name)?.first_ready
    }

    /// The latest first-Ready time among `names`.
    pub(super) fn last_ready(&self, names: &[String]) -> Option<Instant> {
        let seen = self.seen.lock().expect("readiness");
        names.iter().filter_map(|n| seen.get(n)?.first_ready).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_the_expected_generation() {
        let mut s = Seen {
            generation: 2,
            observed: 2,
            ready: true,
            expected: 3,
            ..Default::default()
        };
        assert!(!s.ready_now());
        s.generation = 3;
        s.observed = 3;
        assert!(s.ready_now());
        s.ready = false;
        assert!(!s.ready_now());
    }
}
