//! Shared watch caches: one watch per kind, served to every controller and to [`Reader`]s.
//!
//! [`Cache::watch`] registers a kind (one reflector store, `managedFields` stripped);
//! [`Cache::subscribe`] hands out trigger streams for `Controller::for_shared_stream` /
//! `owns_shared_stream` / `watches_shared_stream` (or use [`Cache::controller`]); [`Cache::run`]
//! drives every registered watch. Subscribe before `run`: a subscriber created later would miss
//! the initial list. Every subscriber must be polled (run the controllers next to
//! [`Cache::run`]): a kind's watch waits when its slowest subscriber is 1024 notifications behind.
//!
//! # When a read is not served from the cache
//! [`Cache`] implements [`Reader`]. A read falls back to a live API call (and counts in
//! [`Cache::live_reads`]) exactly when the cache cannot answer it authoritatively:
//! - the kind was never registered with [`Cache::watch`];
//! - the kind's store has not finished its initial list yet;
//! - the kind is watched only while served ([`Cache::watch_while_served`]) and its watch has
//!   not finished listing since it became served;
//! - the kind is watched in one namespace and the read is for another namespace (or all);
//! - the kind is watched with a label or field selector and `get` misses (the object may exist
//!   outside the selector). Lists of such a kind are served from the cache and so return only
//!   selected objects.
//!
//! A kind watched only while served that is **not served now** is never asked of the API server:
//! the served set is authoritative for it, and reads fail with [`Error::NotFound`] naming the
//! kind (what a live read of an unserved API answers), so a reconcile that merely checks for
//! such objects costs no request.
//!
//! # Optional kinds
//! [`Cache::watch_while_served`] registers a kind whose API may come and go while the process
//! runs (a CRD installed or deleted): its watch runs only while a [`Served`] set holds the
//! kind, and subscribers keep one stream across the switches. Nothing polls: the watch starts
//! and stops when whoever keeps the set current changes it.
//!
//! Typed reads ([`crate::ReaderExt`]) the cache answers hand out the stored objects (a clone, or
//! the shared object itself with [`crate::ReaderExt::list_shared`]) without converting them
//! through [`DynamicObject`]; the dynamic reads convert.
//!
//! Cached reads are eventually consistent: right after a write, the cache may still hold the
//! previous revision until the watch event arrives (which triggers another reconcile).
//!
//! # Deletions
//! An object leaves a store when its watch says it was deleted (by anyone: a user, garbage
//! collection, the operator) or, after the watch had to list again (a lost connection, an
//! expired resourceVersion), when the new list no longer holds it. Both reach subscribers as
//! deletions and call the hooks registered with [`Cache::on_deleted`], which is how per-object
//! state elsewhere (for example [`crate::client::KubeWriter`]'s memo of applied bodies) is
//! dropped with the object.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::value::RawValue;

use crate::capability::{Cached, Reader};
use crate::error::{Error, Result};
use crate::object::{Deep, decode, key, strip_managed_fields, to_dynamic};
use crate::served::Served;

/// How many change notifications a kind buffers for its slowest subscriber before the watch waits.
const SUBSCRIBER_BUFFER: usize = 1024;
/// How many watch events of a kind watched while served wait for its store.
const SWITCH_BUFFER: usize = 64;

/// A watch event with the epoch of the watch that produced it (`None`: the emptying list of a
/// kind no longer served).
type Fed<K> = (
    Option<u64>,
    std::result::Result<watcher::Event<Tolerant<K>>, watcher::Error>,
);

/// Shared watch caches. Cheap to clone; clones share the caches.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    kinds: RwLock<HashMap<String, Entry>>,
    started: Mutex<bool>,
    live_reads: AtomicU64,
    on_deleted: Arc<DeletionHooks>,
}

/// An object that left a store: its kind (`apiVersion/Kind`), namespace and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone<'a> {
    /// `apiVersion/Kind`, as in [`ApiResource`] (`v1/ConfigMap`, `apps/v1/Deployment`).
    pub kind: &'a str,
    /// The namespace, for a namespaced object.
    pub namespace: Option<&'a str>,
    /// The name.
    pub name: &'a str,
}

type DeletionHook = Box<dyn Fn(Gone<'_>) + Send + Sync>;

/// The functions called for every deleted object, of every kind.
#[derive(Default)]
struct DeletionHooks(RwLock<Vec<DeletionHook>>);

impl DeletionHooks {
    fn call(&self, gone: Gone<'_>) {
        for hook in self.0.read().expect("cache lock").iter() {
            hook(gone);
        }
    }
}

struct Entry {
    namespace: Option<String>,
    selective: bool,
    store: Arc<dyn ErasedStore>,
    /// For a kind watched only while served ([`Cache::watch_while_served`]): where its watch is.
    gate: Option<Arc<GateState>>,
    /// `Pending<K>`: the writer and watch, until `run` takes them.
    pending: Box<dyn Any + Send + Sync>,
    start: Option<StartWatch>,
}

/// Where the watch of a kind watched only while served is. Epochs number the watches the kind
/// ran: each start of its watch takes the next one; 0 is none.
#[derive(Default)]
struct GateState {
    /// The epoch of the running watch; 0 while the kind is not served.
    watching: AtomicU64,
    /// The epoch of the watch whose initial list the store holds; 0 while none.
    synced: AtomicU64,
}

impl GateState {
    /// The store holds the current watch's initial list: reads may be served from it.
    fn synced(&self) -> bool {
        let watching = self.watching.load(Ordering::Acquire);
        watching != 0 && self.synced.load(Ordering::Acquire) == watching
    }

    /// The kind is served but its watch has not listed yet.
    fn listing(&self) -> bool {
        self.watching.load(Ordering::Acquire) != 0 && !self.synced()
    }
}

impl Entry {
    /// Whether the store answers reads in `namespace` (`None`: all namespaces) from memory.
    fn answers(&self, namespace: Option<&str>) -> bool {
        self.authoritative() && covers(self.namespace.as_deref(), namespace)
    }

    /// Whether the store holds every object of the kind (in its namespace and selection).
    fn authoritative(&self) -> bool {
        match &self.gate {
            None => self.store.is_ready(),
            Some(gate) => gate.synced(),
        }
    }

    /// Whether the kind still has to finish an initial list before the cache is ready.
    fn unready(&self) -> bool {
        match &self.gate {
            None => !self.store.is_ready(),
            Some(gate) => gate.listing(),
        }
    }
}

/// Starts a registered watch from its `Pending<K>`.
type StartWatch =
    Box<dyn FnOnce(&(dyn Any + Send + Sync)) -> Option<BoxFuture<'static, ()>> + Send + Sync>;

struct Pending<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Mutex<Option<reflector::store::Writer<K>>>,
    /// Deleted objects, for subscribers: kube-runtime's shared streams carry only applied
    /// objects, and a controller must hear about a deleted child to recreate it.
    deleted: tokio::sync::broadcast::Sender<Arc<K>>,
    /// Stored objects of this kind that could not be decoded.
    unreadable: tokio::sync::broadcast::Sender<Arc<Unreadable>>,
}

fn kind_key(api_version: &str, kind: &str) -> String {
    format!("{api_version}/{kind}")
}

/// The `apiVersion/Kind` key of a resource, as [`Gone::kind`] spells it.
pub fn resource_key(resource: &ApiResource) -> String {
    kind_key(&resource.api_version, &resource.kind)
}

/// Tells subscribers and hooks which objects left the store: each deletion the watch reports,
/// and, when the watch lists again, each object the old list held that the new one does not
/// (deleted while the watch was away: no deletion event ever comes for it).
struct Departures<K: Resource<DynamicType = ()> + Clone + 'static> {
    kind: String,
    store: Store<K>,
    deleted: tokio::sync::broadcast::Sender<Arc<K>>,
    hooks: Arc<DeletionHooks>,
    /// What the store held when a relist began (the store keeps it until the list is complete).
    before_list: Option<Vec<Arc<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Departures<K> {
    /// Called with every watch event after the store applied it.
    fn observe(&mut self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Delete(object) => self.gone(Arc::new(object.clone())),
            watcher::Event::Init => self.before_list = Some(self.store.state()),
            watcher::Event::InitDone => {
                for object in self.before_list.take().unwrap_or_default() {
                    let now = self.store.get(&ObjectRef::from_obj(object.as_ref()));
                    if now.is_none_or(|now| now.uid() != object.uid()) {
                        self.gone(object);
                    }
                }
            }
            watcher::Event::InitApply(_) | watcher::Event::Apply(_) => {}
        }
    }

    fn gone(&self, object: Arc<K>) {
        self.hooks.call(Gone {
            kind: &self.kind,
            namespace: object.meta().namespace.as_deref(),
            name: object.meta().name.as_deref().unwrap_or_default(),
        });
        let _ = self.deleted.send(object);
    }
}

/// The store of kind `K` registered already as `entry` (a warning is logged when it is watched
/// in another scope than `namespace`).
fn registered<K>(entry: &Entry, key: &str, namespace: Option<&str>) -> Result<Store<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    if entry.namespace.as_deref() != namespace {
        tracing::warn!(kind = %key, ?namespace, watched = ?entry.namespace, "kind already watched in another scope");
    }
    entry
        .store
        .as_any()
        .downcast_ref::<Typed<K>>()
        .map(|t| t.store.clone())
        .ok_or_else(|| Error::Unsupported(format!("kind {key} registered with another type")))
}

/// Where the watch of kind `key`, watched only while `served` serves it, starts.
fn gate_state(served: &Served, key: &str) -> Arc<GateState> {
    let gate = GateState::default();
    // Served now: its first list holds back readiness from the start (the watch itself
    // starts with `run`, as epoch 1).
    if served.kinds().iter().any(|k| k == key) {
        gate.watching.store(1, Ordering::Release);
    }
    Arc::new(gate)
}

/// The events of kind `K`'s watch, each with the epoch of the watch it came from (`None`: the
/// emptying list of a kind no longer served), so the list that completes is known to be the
/// current one; and the future that drives them (for a kind watched while served, the
/// [`switch`] of its `gated` watch; otherwise nothing to drive).
fn feed<K>(
    api: Api<Tolerant<K>>,
    config: watcher::Config,
    gated: Option<(Arc<GateState>, Served)>,
    kind: String,
) -> (BoxStream<'static, Fed<K>>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    match gated {
        None => (
            watcher(api, config)
                .default_backoff()
                .map(|event| (Some(1), event))
                .boxed(),
            futures::future::ready(()).boxed(),
        ),
        Some((gate, served)) => {
            let (tx, rx) = tokio::sync::mpsc::channel(SWITCH_BUFFER);
            let driver = switch(api, config, served, gate, kind, tx);
            (received_mpsc(rx).boxed(), driver.boxed())
        }
    }
}

/// The reflector of kind `K`: the events of `source`, decoded ([`sort`]: objects that cannot
/// be decoded are reported to `unreadable`) and without `managedFields`, applied to the store
/// (`writer`); then each tells `departures` what left the store, and a completed list marks
/// `gate` (a kind watched while served) synced at the epoch of its watch.
fn reflect<K>(
    source: BoxStream<'static, Fed<K>>,
    writer: reflector::store::Writer<K>,
    mut departures: Departures<K>,
    unreadable: tokio::sync::broadcast::Sender<Arc<Unreadable>>,
    gate: Option<Arc<GateState>>,
) -> BoxFuture<'static, ()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    let known = departures.store.clone();
    let kind = departures.kind.clone();
    let kind_for_sort = kind.clone();
    let epoch = Arc::new(AtomicU64::new(0));
    let seen = epoch.clone();
    source
        .filter_map(move |(from, event)| {
            epoch.store(from.unwrap_or(0), Ordering::Release);
            futures::future::ready(match event {
                Ok(event) => sort(event, &known, &unreadable, &kind_for_sort).map(Ok),
                Err(err) => Some(Err(err)),
            })
        })
        .modify(strip_managed_fields)
        .reflect_shared(writer)
        .for_each(move |event| {
            match event {
                // The store already applied it: subscribers see it gone.
                Ok(event) => {
                    if let (watcher::Event::InitDone, Some(gate)) = (&event, &gate) {
                        gate.synced
                            .store(seen.load(Ordering::Acquire), Ordering::Release);
                    }
                    departures.observe(&event);
                }
                Err(err) => {
                    tracing::warn!(kind = %kind, error = %err, "watch failed; retrying with backoff");
                }
            }
            futures::future::ready(())
        })
        .boxed()
}

impl Cache {
    /// An empty cache reading through `client`.
    pub fn new(client: Client) -> Self {
        Cache {
            inner: Arc::new(Inner {
                client,
                kinds: RwLock::new(HashMap::new()),
                started: Mutex::new(false),
                live_reads: AtomicU64::new(0),
                on_deleted: Arc::default(),
            }),
        }
    }

    /// The client used for watches and live reads.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// Register kind `K`, watched through `api` (its namespace, or all namespaces) with
    /// `config`, and return its store. A kind is watched once: registering it again returns the existing store
    /// (and logs a warning if the scope differs). Must happen before [`Cache::run`].
    pub fn watch<K>(&self, api: Api<K>, config: watcher::Config) -> Result<Store<K>>
    where
        K: Cached,
    {
        self.register(api, config, None)
    }

    /// Register kind `K` as [`Cache::watch`] does, but watched only while `served` serves it:
    /// an optional kind whose API may come and go (a CRD installed or deleted while the
    /// operator runs). While the kind is not served its store is empty, reads of it go to the
    /// API server (which says it does not serve the kind) and it does not hold back
    /// [`Cache::wait_until_ready`]; once served, its watch starts and lists, and reads are
    /// served from the store again once that list is complete. When it stops being served, the
    /// watch stops and the store empties: subscribers and hooks hear every object it held as
    /// deleted. Subscribers get one stream for the kind's whole life.
    pub fn watch_while_served<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        served: &Served,
    ) -> Result<Store<K>>
    where
        K: Cached,
    {
        self.register(api, config, Some(served.clone()))
    }

    fn register<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        served: Option<Served>,
    ) -> Result<Store<K>>
    where
        K: Cached,
    {
        let key = kind_key(&K::api_version(&()), &K::kind(&()));
        let namespace = api.namespace().map(str::to_string);
        let namespace = namespace.as_deref();
        let mut kinds = self.inner.kinds.write().expect("cache lock");
        if let Some(entry) = kinds.get(&key) {
            return registered(entry, &key, namespace);
        }
        if *self.inner.started.lock().expect("cache lock") {
            return Err(Error::Unsupported(format!(
                "cache already running; cannot watch {key}"
            )));
        }
        let writer = reflector::store::Writer::<K>::new_shared(SUBSCRIBER_BUFFER, ());
        let store = writer.as_reader();
        let selective = config.label_selector.is_some() || config.field_selector.is_some();
        let kind_for_log = key.clone();
        let (deleted, _) = tokio::sync::broadcast::channel(SUBSCRIBER_BUFFER);
        let (unreadable, _) = tokio::sync::broadcast::channel(SUBSCRIBER_BUFFER);
        let client = Client::from(api);
        let api: Api<Tolerant<K>> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &()),
            None => Api::all_with(client, &()),
        };
        let gate = served.as_ref().map(|served| gate_state(served, &key));
        let gate_entry = gate.clone();
        let known = store.clone();
        let hooks = self.inner.on_deleted.clone();
        let gated = gate.clone().zip(served);
        let start = move |pending: &(dyn Any + Send + Sync)| -> Option<BoxFuture<'static, ()>> {
            let pending = pending.downcast_ref::<Pending<K>>()?;
            let writer = pending.writer.lock().expect("cache lock").take()?;
            let departures = Departures {
                kind: kind_for_log.clone(),
                store: known,
                deleted: pending.deleted.clone(),
                hooks,
                before_list: None,
            };
            let (source, driver) = feed(api, config, gated, kind_for_log);
            let pipeline = reflect(source, writer, departures, pending.unreadable.clone(), gate);
            Some(futures::future::join(driver, pipeline).map(|_| ()).boxed())
        };
        kinds.insert(
            key,
            Entry {
                namespace: namespace.map(str::to_string),
                selective,
                store: Arc::new(Typed {
                    store: store.clone(),
                }),
                gate: gate_entry,
                pending: Box::new(Pending::<K> {
                    writer: Mutex::new(Some(writer)),
                    deleted,
                    unreadable,
                }),
                start: Some(Box::new(start)),
            },
        );
        Ok(store)
    }

    /// A trigger stream of kind `K` for a controller: every object applied (created, changed,
    /// listed) and every object deleted (after the store dropped it). The kind must be
    /// registered and the cache not yet running.
    pub fn subscribe<K>(&self) -> Result<BoxStream<'static, Arc<K>>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        self.with_pending(|key, pending: &Pending<K>| {
            let writer = pending.writer.lock().expect("cache lock");
            let applied: ReflectHandle<K> =
                writer.as_ref().and_then(|w| w.subscribe()).ok_or_else(|| {
                    Error::Unsupported(format!("cache already running; cannot subscribe to {key}"))
                })?;
            let deleted = received(pending.deleted.subscribe(), key, "deletions");
            Ok(futures::stream::select(applied, deleted).boxed())
        })
    }

    /// Call `hook` for every object of every watched kind that leaves its store (see the module
    /// docs, "Deletions"), after the store dropped it. Hooks run on the watch's task: keep them
    /// short and never block.
    pub fn on_deleted(&self, hook: impl Fn(Gone<'_>) + Send + Sync + 'static) {
        self.inner
            .on_deleted
            .0
            .write()
            .expect("cache lock")
            .push(Box::new(hook));
    }

    /// The stored objects of kind `K` that could not be decoded, as the watch meets them (each
    /// revision once, and again after a relist). They are not in the store: a controller never
    /// sees them, and an object that turns unreadable leaves the store as if it was deleted.
    /// The kind must be registered and the cache not yet running.
    pub fn unreadable<K>(&self) -> Result<BoxStream<'static, Arc<Unreadable>>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        self.with_pending(|key, pending: &Pending<K>| {
            Ok(received(pending.unreadable.subscribe(), key, "unreadable objects").boxed())
        })
    }

    /// Runs `f` on the registration of kind `K` (with its key, for messages).
    fn with_pending<K, T>(&self, f: impl FnOnce(&str, &Pending<K>) -> Result<T>) -> Result<T>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let key = kind_key(&K::api_version(&()), &K::kind(&()));
        let kinds = self.inner.kinds.read().expect("cache lock");
        let entry = kinds
            .get(&key)
            .ok_or_else(|| Error::Unsupported(format!("kind {key} is not watched")))?;
        let pending = entry.pending.downcast_ref::<Pending<K>>().ok_or_else(|| {
            Error::Unsupported(format!("kind {key} registered with another type"))
        })?;
        f(&key, pending)
    }

    /// The store of kind `K`, if registered.
    pub fn store<K>(&self) -> Option<Store<K>>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let key = kind_key(&K::api_version(&()), &K::kind(&()));
        let kinds = self.inner.kinds.read().expect("cache lock");
        kinds
            .get(&key)?
            .store
            .as_any()
            .downcast_ref::<Typed<K>>()
            .map(|t| t.store.clone())
    }

    /// A kube-runtime controller for kind `K` fed by this cache (registering `K` for all
    /// namespaces if needed). Add owned and watched kinds with `owns_shared_stream` /
    /// `watches_shared_stream` and [`Cache::subscribe`].
    pub fn controller<K>(&self) -> Result<Controller<K>>
    where
        K: Cached,
    {
        let store = self.watch::<K>(Api::all(self.client()), watcher::Config::default())?;
        Ok(Controller::for_shared_stream(self.subscribe::<K>()?, store))
    }

    /// Drive every registered watch until they all end (they do not, in normal operation: run it
    /// next to the controllers, for example in `tokio::select!`). Call once.
    pub fn run(&self) -> BoxFuture<'static, ()> {
        *self.inner.started.lock().expect("cache lock") = true;
        let mut kinds = self.inner.kinds.write().expect("cache lock");
        let watches: Vec<_> = kinds
            .values_mut()
            .filter_map(|entry| {
                let start = entry.start.take()?;
                start(entry.pending.as_ref())
            })
            .collect();
        futures::future::join_all(watches).map(|_| ()).boxed()
    }

    /// Wait until every registered kind finished its initial list.
    ///
    /// Polls each store's readiness every 50 ms rather than awaiting kube-runtime's
    /// `Store::wait_until_ready`: with shared stores, a waiter registered before the initial list
    /// completed was seen not to be woken (readiness was set, the future stayed pending), which
    /// left `/readyz` false.
    pub async fn wait_until_ready(&self) {
        while !self.unready_kinds().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The kinds whose initial list has not completed yet (`apiVersion/Kind`).
    pub fn unready_kinds(&self) -> Vec<String> {
        let kinds = self.inner.kinds.read().expect("cache lock");
        let mut unready: Vec<String> = kinds
            .iter()
            .filter(|(_, e)| e.unready())
            .map(|(k, _)| k.clone())
            .collect();
        unready.sort();
        unready
    }

    /// How many reads fell back to a live API call.
    pub fn live_reads(&self) -> u64 {
        self.inner.live_reads.load(Ordering::Relaxed)
    }

    /// The cached object, only when the cache is authoritative for it (`Some(None)`: known
    /// absent). `None` when the cache cannot tell.
    pub(crate) fn cached(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<DynamicObject>> {
        let kinds = self.inner.kinds.read().expect("cache lock");
        let entry = kinds.get(&resource_key(resource))?;
        if !entry.answers(namespace) {
            return None;
        }
        match entry.store.get(namespace, name) {
            Ok(Some(object)) => Some(Some(object)),
            Ok(None) if !entry.selective => Some(None),
            _ => None,
        }
    }

    /// The store of kind `K` when it answers reads in `namespace` from memory: registered as
    /// `K` (not another type of the same kind), its list complete, its scope covering
    /// `namespace`; with whether it is label- or field-selected (a miss may exist outside it).
    fn typed_store<K>(&self, namespace: Option<&str>) -> Option<(Store<K>, bool)>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let kinds = self.inner.kinds.read().expect("cache lock");
        let entry = kinds.get(&kind_key(&K::api_version(&()), &K::kind(&())))?;
        if !entry.answers(namespace) {
            return None;
        }
        let typed = entry.store.as_any().downcast_ref::<Typed<K>>()?;
        Some((typed.store.clone(), entry.selective))
    }

    /// [`Cache::cached`] for a kind stored as `K`, the stored object itself.
    pub(crate) fn get_typed<K>(&self, namespace: Option<&str>, name: &str) -> Option<Option<Arc<K>>>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let (store, selective) = self.typed_store::<K>(namespace)?;
        match store.get(&object_ref(namespace, name)) {
            Some(object) => Some(Some(object)),
            None if !selective => Some(None),
            None => None,
        }
    }

    /// The list [`Reader::list_dynamic`] serves from the store of a kind stored as `K`, the
    /// stored objects themselves; `None` when the store cannot answer it.
    pub(crate) fn list_typed<K>(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Option<Vec<Arc<K>>>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let (store, _) = self.typed_store::<K>(namespace)?;
        Some(selected(&store, namespace, selector))
    }

    /// A read of `resource` when it is watched only while served and is not served now.
    fn unserved(&self, resource: &ApiResource) -> Option<Error> {
        let kinds = self.inner.kinds.read().expect("cache lock");
        let gate = kinds.get(&resource_key(resource))?.gate.as_ref()?;
        (gate.watching.load(Ordering::Acquire) == 0).then(|| {
            Error::NotFound(format!(
                "{} ({}) is not served by this cluster",
                resource.kind, resource.api_version
            ))
        })
    }

    fn live_api(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Api<Deep<DynamicObject>> {
        self.inner.live_reads.fetch_add(1, Ordering::Relaxed);
        match namespace {
            Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, resource),
            None => Api::all_with(self.inner.client.clone(), resource),
        }
    }
}

/// What a broadcast receiver gets, as a stream that ends with the sender; a subscriber that fell
/// behind is told in the log what it missed (`what`, of `kind`).
fn received<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
    kind: &str,
    what: &'static str,
) -> impl futures::Stream<Item = T> + Send + 'static {
    let kind = kind.to_string();
    futures::stream::unfold(rx, move |mut rx| {
        let kind = kind.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(item) => return Some((item, rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(kind = %kind, missed = n, "subscriber missed {what}");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    })
}

/// Feeds `tx` with the watch of kind `K` while `served` serves it: the watch's events while
/// served, each tagged with that watch's epoch; when the kind stops being served, the watch
/// stops and an empty list follows (the store empties, its objects are reported gone). Ends
/// when the store's side of the channel or `served` is dropped.
async fn switch<K>(
    api: Api<Tolerant<K>>,
    config: watcher::Config,
    served: Served,
    gate: Arc<GateState>,
    kind: String,
    tx: tokio::sync::mpsc::Sender<Fed<K>>,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let mut changes = served.subscribe();
    let mut epoch = 0;
    let is_served = |kinds: &std::collections::BTreeSet<String>| kinds.contains(&kind);
    loop {
        if !is_served(&changes.borrow_and_update()) {
            gate.watching.store(0, Ordering::Release);
            loop {
                if changes.changed().await.is_err() {
                    return;
                }
                if is_served(&changes.borrow_and_update()) {
                    break;
                }
            }
        }
        epoch += 1;
        gate.watching.store(epoch, Ordering::Release);
        tracing::info!(kind = %kind, "API served: watching");
        let mut events = watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed();
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { return };
                    if tx.send((Some(epoch), event)).await.is_err() {
                        return;
                    }
                }
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if !is_served(&changes.borrow_and_update()) {
                        break;
                    }
                }
            }
        }
        gate.watching.store(0, Ordering::Release);
        tracing::info!(kind = %kind, "API no longer served: watch stopped, objects forgotten");
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            if tx.send((None, Ok(event))).await.is_err() {
                return;
            }
        }
    }
}

/// What an mpsc receiver gets, as a stream that ends with the senders.
fn received_mpsc<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// Whether a store watched in `watched` (`None`: everywhere) holds every object of `requested`.
fn covers(watched: Option<&str>, requested: Option<&str>) -> bool {
    match (watched, requested) {
        (None, _) => true,
        (Some(w), Some(r)) => w == r,
        (Some(_), None) => false,
    }
}

#[async_trait]
impl Reader for Cache {
    fn cache(&self) -> Option<&Cache> {
        Some(self)
    }

    async fn get_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<DynamicObject>> {
        if let Some(cached) = self.cached(resource, namespace, name) {
            return Ok(cached);
        }
        if let Some(unserved) = self.unserved(resource) {
            return Err(unserved);
        }
        tracing::debug!(kind = %resource.kind, object = %key(namespace, name), "get: live read");
        let mut object = self
            .live_api(resource, namespace)
            .get_opt(name)
            .await?
            .map(|d| d.0);
        if let Some(o) = object.as_mut() {
            strip_managed_fields(o);
        }
        Ok(object)
    }

    async fn list_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<Vec<DynamicObject>> {
        let store = {
            let kinds = self.inner.kinds.read().expect("cache lock");
            kinds
                .get(&kind_key(&resource.api_version, &resource.kind))
                .filter(|e| e.answers(namespace))
                .map(|e| e.store.clone())
        };
        if let Some(store) = store {
            return store.list(namespace, selector);
        }
        if let Some(unserved) = self.unserved(resource) {
            return Err(unserved);
        }
        tracing::debug!(kind = %resource.kind, ?namespace, %selector, "list: live read");
        let params = ListParams::default().labels(&selector.to_string());
        let list = self.live_api(resource, namespace).list(&params).await?;
        Ok(list
            .items
            .into_iter()
            .map(|Deep(mut o)| {
                strip_managed_fields(&mut o);
                o
            })
            .collect())
    }
}

/// A typed store behind a type-erased face.
trait ErasedStore: Send + Sync {
    fn is_ready(&self) -> bool;
    fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<DynamicObject>>;
    fn list(&self, namespace: Option<&str>, selector: &Selector) -> Result<Vec<DynamicObject>>;
    fn as_any(&self) -> &dyn Any;
}

struct Typed<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
}

impl<K> ErasedStore for Typed<K>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + Send + Sync + 'static,
{
    fn is_ready(&self) -> bool {
        self.store
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|r| r.is_ok())
    }

    fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<DynamicObject>> {
        self.store
            .get(&object_ref(namespace, name))
            .map(|o| to_dynamic(o.as_ref()))
            .transpose()
    }

    fn list(&self, namespace: Option<&str>, selector: &Selector) -> Result<Vec<DynamicObject>> {
        selected(&self.store, namespace, selector)
            .iter()
            .map(|o| to_dynamic(o.as_ref()))
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The reference of the object `name` of kind `K` in `namespace`.
fn object_ref<K>(namespace: Option<&str>, name: &str) -> ObjectRef<K>
where
    K: Resource<DynamicType = ()>,
{
    let reference = ObjectRef::<K>::new(name);
    match namespace {
        Some(ns) => reference.within(ns),
        None => reference,
    }
}

/// The objects of `store` in `namespace` (`None`: all) whose labels match `selector`, by
/// namespace and name.
fn selected<K>(store: &Store<K>, namespace: Option<&str>, selector: &Selector) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut objects: Vec<_> = store
        .state()
        .into_iter()
        .filter(|o| namespace.is_none() || o.meta().namespace.as_deref() == namespace)
        .filter(|o| selector.matches(o.labels()))
        .collect();
    objects.sort_by(|a, b| {
        (&a.meta().namespace, &a.meta().name).cmp(&(&b.meta().namespace, &b.meta().name))
    });
    objects
}

/// A stored object the cache could not decode as its kind: what could be read of it.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// Its metadata (without `managedFields`).
    pub metadata: ObjectMeta,
    /// Why it could not be decoded.
    pub error: String,
    /// Its `status.conditions`, when they could be read.
    pub conditions: Vec<Condition>,
}

/// An object of `K` as the watch delivers it: decoded, or [`Unreadable`]. Decoding one item never
/// fails the list or the watch it came in.
#[derive(Clone, Debug)]
struct Tolerant<K>(std::result::Result<K, Box<Unreadable>>);

impl<'de, K: DeserializeOwned> Deserialize<'de> for Tolerant<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Captured without recursion, so depth does not fail the enclosing list.
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        match decode::<K>(raw.get()) {
            Ok(object) => Ok(Tolerant(Ok(object))),
            Err(error) => readable_parts(raw.get(), error.to_string())
                .map(|u| Tolerant(Err(Box::new(u))))
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The metadata and conditions of an object that did not decode as its kind. The object is read
/// field by field, the rest skipped without recursion; `metadata` is decoded without
/// `managedFields` (whose nesting follows the object's).
fn readable_parts(json: &str, error: String) -> std::result::Result<Unreadable, String> {
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        metadata: Option<std::collections::BTreeMap<String, Box<RawValue>>>,
        #[serde(default)]
        status: Option<Box<RawValue>>,
    }
    #[derive(Deserialize)]
    struct Conditions {
        #[serde(default)]
        conditions: Vec<Condition>,
    }
    let outer: Outer = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut fields = outer.metadata.unwrap_or_default();
    fields.remove("managedFields");
    let metadata_json = serde_json::to_string(&fields).map_err(|e| e.to_string())?;
    let metadata: ObjectMeta = decode(&metadata_json).map_err(|e| e.to_string())?;
    let conditions = outer
        .status
        .and_then(|raw| decode::<Conditions>(raw.get()).ok())
        .map(|c| c.conditions)
        .unwrap_or_default();
    Ok(Unreadable {
        metadata,
        error,
        conditions,
    })
}

impl<K: Resource<DynamicType = ()>> Resource for Tolerant<K> {
    type DynamicType = ();
    type Scope = kube::core::DynamicResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(object) => object.meta(),
            Err(unreadable) => &unreadable.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => object.meta_mut(),
            Err(unreadable) => &mut unreadable.metadata,
        }
    }
}

/// Turns a watch event of [`Tolerant`] objects into one of `K`: decoded objects pass; an
/// unreadable one is logged and reported, and leaves the store if an earlier revision is in it.
fn sort<K>(
    event: watcher::Event<Tolerant<K>>,
    known: &Store<K>,
    unreadable: &tokio::sync::broadcast::Sender<Arc<Unreadable>>,
    kind: &str,
) -> Option<watcher::Event<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use watcher::Event as E;
    let split = |object: Tolerant<K>| object.0.map_err(Arc::<Unreadable>::from);
    let stored = |bad: &Unreadable| {
        let mut reference = ObjectRef::<K>::new(bad.metadata.name.as_deref().unwrap_or_default());
        if let Some(ns) = &bad.metadata.namespace {
            reference = reference.within(ns);
        }
        known.get(&reference).map(|o| o.as_ref().clone())
    };
    let report = |bad: Arc<Unreadable>, gone: bool| {
        if !gone {
            tracing::warn!(
                kind = %kind,
                object = %key(bad.metadata.namespace.as_deref(), bad.metadata.name.as_deref().unwrap_or_default()),
                resource_version = bad.metadata.resource_version.as_deref().unwrap_or_default(),
                error = %bad.error,
                "stored object cannot be decoded; skipped"
            );
            let _ = unreadable.send(bad.clone());
        }
        stored(&bad).map(E::Delete)
    };
    match event {
        E::Init => Some(E::Init),
        E::InitDone => Some(E::InitDone),
        E::InitApply(object) => match split(object) {
            Ok(object) => Some(E::InitApply(object)),
            Err(bad) => {
                report(bad, false);
                None
            }
        },
        E::Apply(object) => match split(object) {
            Ok(object) => Some(E::Apply(object)),
            Err(bad) => report(bad, false),
        },
        E::Delete(object) => match split(object) {
            Ok(object) => Some(E::Delete(object)),
            Err(bad) => report(bad, true),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::ObjectList;

    fn configmap(name: &str, uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// Feeds `events` to a store and to the departures watching it, as the watch loop does;
    /// returns the names of the objects reported gone, to subscribers and to hooks.
    fn departures(events: Vec<watcher::Event<ConfigMap>>) -> (Vec<String>, Vec<String>) {
        let mut writer = reflector::store::Writer::<ConfigMap>::default();
        let (deleted, mut subscriber) = tokio::sync::broadcast::channel(16);
        let hooks = Arc::new(DeletionHooks::default());
        let heard = Arc::new(Mutex::new(Vec::new()));
        {
            let heard = heard.clone();
            hooks
                .0
                .write()
                .unwrap()
                .push(Box::new(move |gone: Gone<'_>| {
                    assert_eq!(gone.kind, "v1/ConfigMap");
                    assert_eq!(gone.namespace, Some("ns"));
                    heard.lock().unwrap().push(gone.name.to_string());
                }));
        }
        let mut departures = Departures {
            kind: "v1/ConfigMap".into(),
            store: writer.as_reader(),
            deleted,
            hooks,
            before_list: None,
        };
        for event in events {
            writer.apply_watcher_event(&event);
            departures.observe(&event);
        }
        let mut told = Vec::new();
        while let Ok(object) = subscriber.try_recv() {
            told.push(object.name_any());
        }
        let mut heard = heard.lock().unwrap().clone();
        // A relist's departures come in the store's (hash) order.
        told.sort();
        heard.sort();
        (told, heard)
    }

    #[test]
    fn deletions_and_objects_missing_from_a_relist_are_reported_once() {
        use watcher::Event as E;
        let (told, heard) = departures(vec![
            E::Init,
            E::InitApply(configmap("a", "1")),
            E::InitApply(configmap("b", "2")),
            E::InitApply(configmap("c", "3")),
            E::InitDone,
            // Deleted while watched.
            E::Delete(configmap("a", "1")),
            // The watch lists again: b is gone, c was recreated under a new uid, d is new.
            E::Init,
            E::InitApply(configmap("c", "4")),
            E::InitApply(configmap("d", "5")),
            E::InitDone,
        ]);
        assert_eq!(told, ["a", "b", "c"]);
        assert_eq!(heard, told);
    }

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn one_undecodable_item_does_not_fail_the_list() {
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMapList","metadata":{{"resourceVersion":"9"}},"items":[
                {{"metadata":{{"name":"good","namespace":"ns"}},"data":{{"a":"b"}}}},
                {{"metadata":{{"name":"deep","namespace":"ns","uid":"u1","generation":3,
                   "managedFields":[{{"manager":"m","fieldsV1":{deep}}}]}},
                  "data":{{"x":"y"}},"binaryData":{deep},
                  "status":{{"conditions":[{{"type":"Ready","status":"True","reason":"R","message":"m",
                     "lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":2}}]}}}},
                {{"metadata":{{"name":"wrong","namespace":"ns"}},"data":"not a map"}}
            ]}}"#,
            deep = nested(1000)
        );
        let list: ObjectList<Tolerant<ConfigMap>> =
            serde_json::from_str(&list).expect("the list decodes");
        let items: Vec<_> = list.items.into_iter().map(|t| t.0).collect();
        assert_eq!(items.len(), 3);
        let good = items[0].as_ref().expect("decoded");
        assert_eq!(good.metadata.name.as_deref(), Some("good"));
        let deep = items[1].as_ref().expect_err("too deep");
        assert_eq!(deep.metadata.name.as_deref(), Some("deep"));
        assert_eq!(deep.metadata.generation, Some(3));
        assert!(deep.metadata.managed_fields.is_none());
        assert!(deep.error.contains("levels deep"), "{}", deep.error);
        assert_eq!(deep.conditions.len(), 1);
        assert_eq!(deep.conditions[0].observed_generation, Some(2));
        let wrong = items[2].as_ref().expect_err("wrong type");
        assert_eq!(wrong.metadata.name.as_deref(), Some("wrong"));
        assert!(wrong.error.contains("invalid type"), "{}", wrong.error);
        assert!(wrong.conditions.is_empty());
    }

    #[test]
    fn an_object_turning_unreadable_leaves_the_store_and_is_reported() {
        let (mut writer, store) = {
            let w = reflector::store::Writer::<ConfigMap>::new(());
            let r = w.as_reader();
            (w, r)
        };
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"}}))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(cm.clone()));
        let (tx, mut rx) = tokio::sync::broadcast::channel(4);
        let bad: Tolerant<ConfigMap> =
            serde_json::from_str(r#"{"metadata":{"name":"a","namespace":"ns"},"data":7}"#).unwrap();
        let event = sort(
            watcher::Event::Apply(bad.clone()),
            &store,
            &tx,
            "v1/ConfigMap",
        );
        assert!(
            matches!(event, Some(watcher::Event::Delete(ref o)) if o.metadata.name.as_deref() == Some("a"))
        );
        assert_eq!(rx.try_recv().unwrap().metadata.name.as_deref(), Some("a"));
        // Not in the store: nothing to delete, still reported.
        let other: Tolerant<ConfigMap> =
            serde_json::from_str(r#"{"metadata":{"name":"b","namespace":"ns"},"data":7}"#).unwrap();
        assert!(
            sort(
                watcher::Event::InitApply(other.clone()),
                &store,
                &tx,
                "v1/ConfigMap"
            )
            .is_none()
        );
        assert!(rx.try_recv().is_ok());
        // Deleted while unreadable: not reported again.
        assert!(sort(watcher::Event::Delete(other), &store, &tx, "v1/ConfigMap").is_none());
        assert!(rx.try_recv().is_err());
        let good = Tolerant(Ok(cm));
        assert!(matches!(
            sort(watcher::Event::Apply(good), &store, &tx, "v1/ConfigMap"),
            Some(watcher::Event::Apply(_))
        ));
    }
}
