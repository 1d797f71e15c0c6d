//! A small framework for Kubernetes controllers on kube-runtime: capabilities, outcomes,
//! conditions, events and a run loop. It knows nothing of any particular resource.
//!
//! # The reconcile contract
//! ```text
//! top level (one per controller)              nested reconcilers
//!   object ← watch cache
//!   outcome = reconcile(object) ───────────►  read with Reader, write with Writer,
//!                                             return Outcome { status, events, requeue }
//!   status subresource ← outcome.status       (also when reconcile failed; skipped if equal)
//!   publish outcome.events                    (only after the status write succeeded)
//!   requeue per outcome, or back off          (per object, exponential, reset on success)
//! ```
//! - A reconcile returns [`Reconciled<S, E>`]: `Ok(`[`Outcome`]`)` or `Err(Box<`[`Failed`]`>)`.
//!   `outcome.status` is the **complete** desired status after this attempt, conditions and
//!   `observedGeneration` included.
//! - **Partial status on error.** A failing step calls [`Outcome::fail`] (or
//!   [`OrFail::or_fail`]): the status keeps everything completed so far, is marked failed via
//!   [`ReconcileStatus::set_failed`], gets `Ready=False` with the step's reason and the error
//!   message, and a `Warning` event is queued. The top level persists that status and then
//!   reports the error. [`Failed::await_change`] says "do not retry until the object changes"
//!   (an invalid spec); otherwise the object is retried with backoff.
//! - `outcome.requeue`: `Some(d)` reconciles again after `d`; `None` waits for the next watch
//!   event.
//! - **Events.** Reconcilers queue events in the outcome ([`Outcome::normal`],
//!   [`Outcome::eventf`], ...): mutation events only when a write reports
//!   [`Applied::changed`], status-transition events from [`conditions::changed`]. The top level
//!   publishes them through one shared [`events::Publisher`] after the status write.
//! - **Children.** A reconciler converges each child with [`child::Applier::ensure`]: server-side
//!   apply under the controller's field manager, the body's hash stamped in an annotation the
//!   caller names, **no request** when the live object (from the [`Reader`]) already carries that
//!   hash and every field of the body, a conflict error when another object controls the child
//!   ([`child::Ownership`]), and [`child::Change`] `Created | Updated | Unchanged` so mutation
//!   events follow real changes only. The exact rule is in the module docs.
//!
//! # Capabilities
//! | capability | can | production | test |
//! | --- | --- | --- | --- |
//! | [`Reader`] | get, list by namespace and labels | [`cache::Cache`] (watch caches) | [`testing::Double`] |
//! | [`Writer`] | create, server-side apply, patch, delete with preconditions, scale | [`client::KubeWriter`] | [`testing::Double`] |
//! | [`StatusWriter`] | apply the status subresource | [`client::KubeStatusWriter`] | [`testing::Double`] |
//! | [`EventSink`] | publish events | [`events::Publisher`] (or kube-runtime's `Recorder`) | [`testing::Double`] |
//!
//! A reconciler's constructor takes exactly the capabilities it uses, as `Arc<dyn Reader>`,
//! `Arc<dyn Writer>`. Code that holds only a `Reader` cannot write, and a `Writer` cannot touch
//! status; the compiler checks it. This compiles:
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kit::{Writer, WriterExt};
//! async fn ensure(writer: Arc<dyn Writer>, cm: ConfigMap) {
//!     let _ = writer.apply(&cm, None).await;
//! }
//! ```
//! and this does not:
//! ```compile_fail
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kit::{Reader, WriterExt};
//! async fn render(reader: Arc<dyn Reader>, cm: ConfigMap) {
//!     reader.apply(&cm, None).await; // error: a Reader is not a Writer
//! }
//! ```
//!
//! **Why object-safe traits over a dynamic core.** Each capability is a trait over
//! `DynamicObject` plus its `ApiResource` (`get_dynamic`, `apply_dynamic`, ...), with typed
//! generic helpers on top in [`ReaderExt`], [`WriterExt`], [`StatusWriterExt`]
//! (`reader.get::<ConfigMap>(ns, name)`, `writer.apply(&deployment, None)`), implemented for
//! every capability including `dyn` ones. Generic capability parameters (`R: Reader<K>` per kind)
//! would force every reconciler to be generic over each store and each kind it touches, and tests
//! to build one fake per kind. With the dynamic core, a reconciler holds `Arc<dyn Reader>`, one
//! double serves every kind, and composition roots wire capabilities at run time. The price is a
//! serde conversion per call, small next to an API round trip.
//!
//! # Production implementations
//! - [`cache::Cache`]: one watch per kind (reflector store, `managedFields` stripped), shared by
//!   every controller ([`cache::Cache::subscribe`] feeds `Controller::for_shared_stream` and
//!   friends) and by every read. Its module docs list exactly when a read falls back to a live
//!   call.
//! - [`served::Served`]: which optional kinds the cluster serves, one set shared by whoever keeps
//!   it current and every reader; [`cache::Cache::watch_while_served`] runs a kind's watch only
//!   while the set holds it.
//! - [`client::KubeWriter`]: server-side apply with a field manager, forcing conflicts. It reports
//!   `changed: false` for no-op applies, and with a cache attached skips the request altogether
//!   when it applied the same body to the same unchanged revision before (the exact rule is in
//!   the module docs).
//! - [`client::KubeStatusWriter`]: server-side apply on the status subresource.
//!
//! # Tests
//! [`testing::Double`] (cargo feature `testing`, on by default) is an in-memory API server:
//! resourceVersion, NotFound, AlreadyExists, conflicts, finalizers and deletionTimestamp, owner
//! references without garbage collection (merged by uid across field managers, as server-side
//! apply does), fields co-owned by managers that applied equal values, label selectors. It records every write, so a test can
//! assert that a second reconcile wrote nothing, and [`testing::Double::fail_next`] injects a
//! failure at any step. [`run::finish`] runs the persist-then-publish half of the loop on it.
//!
//! # Run loop
//! [`run::Runner`] wraps a kube-runtime `Controller` that the caller builds (watches, mappers,
//! predicates, shutdown), and runs a reconcile function `Fn(Arc<K>, Arc<Ctx>) ->
//! Future<Output = Reconciled<K::Status, E>>` under the contract above.
//!
//! # Example
//! `examples/mirror/` is a complete controller on this crate: a `Mirror` resource keeps a copy of
//! a ConfigMap. Its reconcile, in short:
//! ```ignore
//! pub async fn reconcile(mirror: Arc<Mirror>, ctx: Arc<Ctx>) -> Reconciled<MirrorStatus, kit::Error> {
//!     let generation = mirror.metadata.generation.unwrap_or_default();
//!     let mut out = Outcome::new(MirrorStatus { observed_generation: Some(generation), ..Default::default() });
//!     let source: Option<ConfigMap> = ctx.reader.get(ns, &mirror.spec.source).await
//!         .or_fail(&mut out, generation, "SourceReadFailed")?;
//!     // ... render the copy, then:
//!     let applied = ctx.writer.apply(&copy, None).await.or_fail(&mut out, generation, "ApplyFailed")?;
//!     if applied.changed { out.normal("Updated", "updated the copy"); }
//!     conditions::set(&mut out.status.conditions, conditions::new(READY, Status::True, "Mirrored", "", generation));
//!     Ok(out)
//! }
//! ```
//! and its wiring: a [`cache::Cache`] watching `Mirror` and `ConfigMap`, a
//! `Controller::for_shared_stream` over it, [`client::KubeWriter`] and
//! [`client::KubeStatusWriter`] with the cache, a `Recorder`, and [`run::Runner`].

pub mod cache;
pub mod capability;
pub mod child;
pub mod client;
pub mod conditions;
pub mod error;
pub mod events;
pub mod object;
pub mod outcome;
#[cfg(feature = "pki")]
pub mod pki;
pub mod run;
pub mod scoped;
pub mod served;
pub mod table;
pub mod takeover;
#[cfg(feature = "testing")]
pub mod testing;
pub mod unreadable;

pub use capability::{
    Applied, Cached, Deleted, EventSink, Kind, Patch, Reader, ReaderExt, StatusWriter,
    StatusWriterExt, Writer, WriterExt,
};
pub use error::{Error, Result};
pub use kube::api::{Preconditions, PropagationPolicy};
pub use kube::core::Selector;
pub use outcome::{
    Event, EventType, Failed, Mutation, OrFail, Outcome, ReconcileStatus, Reconciled, Retry, Step,
    summarize,
};
pub use scoped::Scoped;
