//! Keyed breakers: one breaker per key taken from the request (per host, per model, per
//! tool name), kept in a bounded registry that evicts idle closed breakers.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::{Builder, Reason, Source, State};
//! use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
//!
//! #[derive(Debug, Clone)]
//! struct Fetch {
//!     host: &'static str,
//!     path: &'static str,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let breakers = KeyedCircuitBreakerLayer::builder(
//!     Builder::new().name("fetch").failure_threshold(2),
//!     |request: &Fetch| request.host,
//! )
//! .capacity(10_000)
//! .name_keys_by_display()
//! .build()?;
//! let registry = breakers.handle();
//! let breakers = breakers.with_fallback(service_fn(|request: Fetch| async move {
//!     Ok::<_, std::convert::Infallible>(format!("{} is unavailable", request.host))
//! }));
//!
//! let mut fetch = ServiceBuilder::new()
//!     .layer(breakers)
//!     .timeout(Duration::from_secs(10))
//!     .service(service_fn(|request: Fetch| async move {
//!         match request.host {
//!             "down.example" => Err(std::io::Error::other("connection refused")),
//!             host => Ok(format!("{host}{}: 200 OK", request.path)),
//!         }
//!     }));
//!
//! let down = Fetch { host: "down.example", path: "/" };
//! for _ in 0..2 {
//!     assert!(fetch.ready().await?.call(down.clone()).await.is_err());
//! }
//! // down.example's breaker is open: its calls go to the fallback...
//! let answer = fetch.ready().await?.call(down).await?;
//! assert_eq!(answer.source(), Source::Fallback(Reason::Open));
//! // ...while up.example has a breaker of its own, closed.
//! let answer = fetch.ready().await?.call(Fetch { host: "up.example", path: "/a" }).await?;
//! assert_eq!(answer.source(), Source::Service);
//!
//! let down = registry.get(&"down.example").expect("a breaker for down.example");
//! assert_eq!((down.name(), down.state()), ("fetch[down.example]", State::Open));
//! assert_eq!(registry.len(), 2);
//! # Ok(()) }
//! ```
//!
//! # A call
//!
//! The key is only known once the request is, so a keyed breaker cannot reserve in
//! `poll_ready` as [`CircuitBreaker`](crate::CircuitBreaker) does. `poll_ready` waits
//! for the wrapped service to be ready, even for a call that will turn out to be
//! skipped (unless the kill switch is on: then every key's call will be skipped, so it
//! does not wait). `call` derives the key, takes the key's breaker from the registry
//! (making it on the key's first call) and asks it:
//!
//! - a call or a probe calls the wrapped service; the response future classifies the
//!   outcome and settles that breaker's permit, exactly as through a
//!   [`CircuitBreaker`](crate::CircuitBreaker) (a dropped future hands the permit back);
//! - a skip answers from the fallback, a clone of it driven to readiness inside the
//!   response future, or fails with [`Rejected`](crate::breaker::error::Rejected) naming the
//!   key's breaker. The wrapped service stays ready for the next call.
//!
//! An error from the wrapped service's `poll_ready` is returned as is and counts
//! against no key: no key is known yet.
//!
//! # The registry
//!
//! Every key's breaker is made from the template [`Builder`]: its settings and
//! observers, its kill switch (one switch for every key), and its name with the key
//! appended (`fetch[down.example]`; see [`KeyedBuilder::name_keys_by_display`]). A
//! template's jitter seed is mixed with each key's name, so keys that opened together
//! do not probe together, and runs still repeat.
//!
//! It holds at most [`capacity`](KeyedBuilder::capacity) breakers. To make room for a
//! new key it evicts the least recently used breaker that is **idle and closed**:
//! closed (never open, half-open or forced open: that would forget a failure and let
//! calls through to a service known to be broken), with no call in flight and no
//! [`CircuitBreakerHandle`] held on it (a handle you hold
//! keeps its breaker). A closed breaker that has counted some failures can be evicted:
//! being the least recently used, it is the one least likely to be called again; its
//! key starts afresh if it comes back, with the template's settings (a mode or a
//! threshold relief set on that key's handle goes with the evicted breaker: hold the
//! handle to keep them).
//!
//! If no breaker can be evicted (every one is open, half-open, forced open, in use or
//! held), the new key still gets its breaker, **over capacity**: refusing it would turn
//! away calls to a healthy key because others are broken, and calling without a breaker
//! would leave the key unprotected. Each such breaker is counted in
//! [`KeyedCircuitBreakerHandle::over_capacity`], and the registry logs a warning when it
//! first goes over. Later insertions evict two breakers where they can, so the registry
//! comes back to its capacity once breakers close. The overflow is the number of
//! breakers that cannot be evicted, plus at most a sixteenth of the capacity (after a
//! scan that found too few candidates, the registry waits for as many new keys as it
//! lacked before it scans again). A key that broke and is never called again stays
//! open until a person resets it through [`get`](KeyedCircuitBreakerHandle::get), after
//! which it can be evicted.
//!
//! The overflow stops at twice the capacity: past it, the least recently used idle
//! breaker that is **open** (opened by its failures: never one a person forced open, one
//! half-open or one in use or held) is evicted too, forgetting its failures. Keys that
//! come from the network (a host, a model, a tool name) and fail would otherwise grow
//! the registry without bound.
//!
//! Recency is counted on a clock that moves once per new key, not per call: a call on
//! a known key reads the clock and writes its breaker's "last used" only when the clock
//! has moved. Eviction takes a batch of the oldest candidates (a sixteenth of the
//! capacity) in one scan of the registry and checks each again before evicting it, so
//! a new key costs a constant amount of work on average (about sixteen breakers looked
//! at), however large the registry.
//!
//! # Cost per call
//!
//! Once a key's breaker exists, a call hashes the key once (`RandomState`: keys come
//! from requests, so the hash resists collision attacks), takes a read lock on one of up
//! to 64 shards, clones the breaker's `Arc` (the call's permit holds that clone), and
//! then costs what a call through a single breaker costs: what it reads of the breaker is
//! on one cache line, what it counts on the next. Nothing is allocated (the key function
//! should not allocate either: return a `&'static str`, an integer, an `Arc<str>` or a
//! small enum rather than a fresh `String`). `benches/benches/keyed.rs` measures it next
//! to a single breaker, and the `overhead` bench next to failsafe in a `RwLock<HashMap>`.
//!
//! # Memory
//!
//! Each live key costs its breaker and its slot in the registry. As measured by
//! `tests/alloc.rs` with its counting allocator (x86-64, the default consecutive-failures
//! policy, no observers, `u64` keys; the figures move as the breaker's layout is tuned,
//! and that test fails if a key grows past 1.25 KiB):
//!
//! - the breaker: two allocations, 576 bytes for the shared state (the state machine
//!   behind a lock, the running totals and the published door: what a call reads on one
//!   cache line, what it counts on the next) and 16 bytes plus the name's length for its name (`host[42]`: 24
//!   bytes). The settings are not copied per key: every key's breaker points to the
//!   template's, made once for the registry, and keeps only its name and jitter seed. Its
//!   event queue (184 bytes) is made when it first has an event to report (a transition,
//!   a change of mode) or a subscriber, unless the template has observers: then every
//!   breaker has one from the start;
//! - the slot: the key's hash, the key, the breaker's `Arc` and its last-used mark,
//!   24 bytes plus the key, and a control byte, in tables at most 7/8 full. A table
//!   that evicts and inserts can double while barely half full (its deleted slots are
//!   reclaimed then), so a slot takes between 1.1 and 4.6 times its size; it never
//!   shrinks, so the tables stay at their largest;
//! - a key that owns heap data (a `String`) adds that, twice while the key waits in an
//!   eviction batch.
//!
//! In all, 662 bytes per key in a registry just filled with 10,000 keys (6.6 MB), and 718
//! bytes per key (7.2 MB) once 90,000 more have passed through and been evicted: however
//! many keys come, no more. A failure-rate policy over a count window adds one bit per
//! call in the window and 48 bytes; each observer adds 16 bytes; a transition channel is
//! only made for a breaker whose handle is subscribed to.
//!
//! # Clone
//!
//! Every service a [`KeyedCircuitBreakerLayer`] makes, and every clone of it, shares one
//! registry. Build another layer for another registry.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::mem;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::breaker::answer::Answer;
use crate::breaker::builder::{self, Builder, Watcher};
use crate::breaker::classify::{Classify, DefaultClassifier};
use crate::breaker::clock::now;
use crate::breaker::error::{BoxError, BreakerError, ConfigError};
use crate::breaker::fallback::{Fallback, FallbackService, NoFallback, TypedErrors, WithSkip};
use crate::breaker::future::ResponseFuture;
use crate::breaker::handle::CircuitBreakerHandle;
use crate::breaker::kill::KillSwitch;
use crate::breaker::machine::{Machine, State};
use crate::breaker::settings::Config;
use crate::breaker::shared::Shared;

/// How many breakers a registry holds unless told otherwise.
const DEFAULT_CAPACITY: usize = 1024;

/// Settings for a [`KeyedCircuitBreakerLayer`]: the template every key's breaker is
/// made from, the key function, and the registry's capacity.
///
/// Made by [`KeyedCircuitBreakerLayer::builder`]; [`build`](Self::build) checks the
/// template and the capacity.
///
/// ```
/// use std::sync::Arc;
/// use tower_circuit_breaker::Builder;
/// use tower_circuit_breaker::error::ConfigError;
/// use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
///
/// // (model, prompt) requests, one breaker per model; cloning the key is cheap.
/// let by_model = |request: &(Arc<str>, String)| request.0.clone();
/// let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("model"), by_model)
///     .capacity(64)
///     .build()?;
/// assert_eq!(layer.handle().capacity(), 64);
///
/// let error = KeyedCircuitBreakerLayer::builder(Builder::new(), by_model).capacity(0).build();
/// assert_eq!(error.unwrap_err(), ConfigError::ZeroCapacity);
/// # Ok::<(), ConfigError>(())
/// ```
pub struct KeyedBuilder<K, KF> {
    template: Builder,
    key: KF,
    capacity: usize,
    namer: fn(&str, &K) -> Arc<str>,
}

fn debug_name<K: fmt::Debug>(name: &str, key: &K) -> Arc<str> {
    format!("{name}[{key:?}]").into()
}

fn display_name<K: fmt::Display>(name: &str, key: &K) -> Arc<str> {
    format!("{name}[{key}]").into()
}

impl<K, KF> KeyedBuilder<K, KF> {
    /// The most breakers the registry holds while it can evict idle closed ones
    /// (default 1,024). See the [module docs](self) for what happens when it cannot.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Names each key's breaker with the key's `Display` (`fetch[api.example.com]`)
    /// rather than its `Debug` (`fetch["api.example.com"]`, the default).
    pub fn name_keys_by_display(mut self) -> Self
    where
        K: fmt::Display,
    {
        self.namer = display_name::<K>;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// The first setting of the template that cannot work, then
    /// [`ConfigError::ZeroCapacity`] for a capacity of 0.
    pub fn build(self) -> Result<KeyedCircuitBreakerLayer<K, KF>, ConfigError> {
        let (config, kill, observers) = self.template.into_template()?;
        if self.capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        let template = Template {
            config: Arc::new(config),
            kill,
            observers,
            namer: self.namer,
        };
        Ok(KeyedCircuitBreakerLayer {
            registry: Arc::new(Registry::new(template, self.capacity)),
            key: self.key,
            fallback: NoFallback,
            classifier: DefaultClassifier,
        })
    }
}

impl<K, KF> fmt::Debug for KeyedBuilder<K, KF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("template", &self.template)
            .field("key", &std::any::type_name::<KF>())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Wraps services in one circuit breaker per key, the key taken from each request.
///
/// Build it with [`KeyedCircuitBreakerLayer::builder`] from a template [`Builder`] and a
/// key function; then, as on a [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), set
/// what answers a skipped call ([`with_fallback`](Self::with_fallback); by default a
/// [`Rejected`](crate::breaker::error::Rejected) error naming the key's breaker) and what counts
/// as a failure ([`with_classifier`](Self::with_classifier)). The [module docs](self)
/// tell how a call goes, how the registry evicts, and what it costs.
///
/// ```
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::{Builder, Outcome, Reason, Source};
/// use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// // (tool, arguments) requests, one breaker per tool; an empty answer is a failure.
/// let layer = KeyedCircuitBreakerLayer::builder(
///     Builder::new().name("tool").failure_threshold(1),
///     |(tool, _args): &(&'static str, String)| *tool,
/// )
/// .build()?
/// .with_classifier(|result: &Result<String, std::io::Error>| match result {
///     Ok(text) if text.is_empty() => Outcome::failure_with("empty answer"),
///     Ok(_) => Outcome::Success,
///     Err(_) => Outcome::failure(),
/// })
/// .with_fallback(service_fn(|(tool, _args): (&'static str, String)| async move {
///     Ok::<_, std::convert::Infallible>(format!("{tool} is unavailable"))
/// }));
///
/// let mut tools = layer.layer(service_fn(|(tool, args): (&'static str, String)| async move {
///     Ok::<_, std::io::Error>(if tool == "search" { String::new() } else { args })
/// }));
/// tools.ready().await?.call(("search", "rust".into())).await?; // empty: search trips
/// let answer = tools.ready().await?.call(("search", "rust".into())).await?;
/// assert_eq!(answer.source(), Source::Fallback(Reason::Open));
/// assert_eq!(answer.into_inner(), "search is unavailable");
/// let answer = tools.ready().await?.call(("echo", "hi".into())).await?;
/// assert_eq!((answer.source(), answer.into_inner()), (Source::Service, "hi".to_string()));
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Every service this layer makes, and every clone of the layer, shares one registry
/// (and so one breaker per key and one kill switch).
pub struct KeyedCircuitBreakerLayer<K, KF, F = NoFallback, C = DefaultClassifier> {
    registry: Arc<Registry<K>>,
    key: KF,
    fallback: F,
    classifier: C,
}

impl<K, KF> KeyedCircuitBreakerLayer<K, KF> {
    /// Settings for a layer whose breakers are made from `template`, one for each key
    /// `key` returns for a request. The template's name prefixes every key's breaker's
    /// name, and its kill switch (or a new one) is shared by every key.
    ///
    /// The key function runs on every call: keep it cheap, and make keys that are cheap
    /// to hash and compare (a `&'static str`, an integer, an `Arc<str>`, a small enum).
    pub fn builder<Request>(template: Builder, key: KF) -> KeyedBuilder<K, KF>
    where
        KF: Fn(&Request) -> K,
        K: Hash + Eq + Clone + fmt::Debug,
    {
        KeyedBuilder {
            template,
            key,
            capacity: DEFAULT_CAPACITY,
            namer: debug_name::<K>,
        }
    }
}

impl<K, KF, F, C> KeyedCircuitBreakerLayer<K, KF, F, C> {
    /// The handle on the registry this layer's services share.
    pub fn handle(&self) -> KeyedCircuitBreakerHandle<K> {
        KeyedCircuitBreakerHandle {
            registry: self.registry.clone(),
        }
    }

    /// Answers skipped calls with `fallback`, a cloneable service with the wrapped
    /// service's response type, as
    /// [`CircuitBreakerLayer::with_fallback`](crate::CircuitBreakerLayer::with_fallback)
    /// does. The fallback gets the request, so it can tell which key was skipped.
    pub fn with_fallback<F2>(
        self,
        fallback: F2,
    ) -> KeyedCircuitBreakerLayer<K, KF, Fallback<F2>, C> {
        KeyedCircuitBreakerLayer {
            registry: self.registry,
            key: self.key,
            fallback: Fallback::new(fallback),
            classifier: self.classifier,
        }
    }

    /// Answers skipped calls with `fallback`, which receives each request as a
    /// [`Skipped`](crate::breaker::fallback::Skipped) naming the key's breaker, why, and when it probes.
    pub fn with_fallback_context<F2>(
        self,
        fallback: F2,
    ) -> KeyedCircuitBreakerLayer<K, KF, Fallback<F2, WithSkip>, C> {
        KeyedCircuitBreakerLayer {
            registry: self.registry,
            key: self.key,
            fallback: Fallback::new(fallback),
            classifier: self.classifier,
        }
    }

    /// Fails skipped calls with a typed [`CallError`](crate::breaker::error::CallError), with no
    /// fallback, as
    /// [`CircuitBreakerLayer::with_typed_errors`](crate::CircuitBreakerLayer::with_typed_errors)
    /// does; the rejection names the key's breaker.
    pub fn with_typed_errors(self) -> KeyedCircuitBreakerLayer<K, KF, TypedErrors, C> {
        KeyedCircuitBreakerLayer {
            registry: self.registry,
            key: self.key,
            fallback: TypedErrors,
            classifier: self.classifier,
        }
    }

    /// Decides what counts as a failure with `classifier` (see
    /// [`Classify`]), for every key.
    pub fn with_classifier<C2>(self, classifier: C2) -> KeyedCircuitBreakerLayer<K, KF, F, C2> {
        KeyedCircuitBreakerLayer {
            registry: self.registry,
            key: self.key,
            fallback: self.fallback,
            classifier,
        }
    }
}

impl<S, K, KF: Clone, F: Clone, C: Clone> Layer<S> for KeyedCircuitBreakerLayer<K, KF, F, C> {
    type Service = KeyedCircuitBreaker<S, K, KF, F, C>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedCircuitBreaker::new(
            inner,
            self.key.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
            self.registry.clone(),
        )
    }
}

impl<K, KF: Clone, F: Clone, C: Clone> Clone for KeyedCircuitBreakerLayer<K, KF, F, C> {
    fn clone(&self) -> Self {
        KeyedCircuitBreakerLayer {
            registry: self.registry.clone(),
            key: self.key.clone(),
            fallback: self.fallback.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<K, KF, F, C> fmt::Debug for KeyedCircuitBreakerLayer<K, KF, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerLayer")
            .field("registry", &self.registry)
            .field("fallback", &std::any::type_name::<F>())
            .field("classifier", &std::any::type_name::<C>())
            .finish()
    }
}

/// A `tower::Service` guarded by one circuit breaker per key.
///
/// Made by [`KeyedCircuitBreakerLayer`]; the [module docs](self) tell the whole story.
///
/// # Clone
///
/// Clones share the registry; a clone starts not ready, so it must be polled ready
/// itself.
pub struct KeyedCircuitBreaker<S, K, KF, F = NoFallback, C = DefaultClassifier> {
    inner: S,
    key: KF,
    fallback: F,
    classifier: C,
    registry: Arc<Registry<K>>,
    ready: Ready,
}

/// What `poll_ready` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// Not polled ready since the last call.
    No,
    /// The wrapped service is ready.
    Inner,
    /// The kill switch was on: the wrapped service was not polled.
    Killed,
}

impl<S, K, KF, F, C> KeyedCircuitBreaker<S, K, KF, F, C> {
    /// A service that is not ready yet.
    fn new(inner: S, key: KF, fallback: F, classifier: C, registry: Arc<Registry<K>>) -> Self {
        KeyedCircuitBreaker {
            inner,
            key,
            fallback,
            classifier,
            registry,
            ready: Ready::No,
        }
    }

    /// The handle on the registry.
    pub fn handle(&self) -> KeyedCircuitBreakerHandle<K> {
        KeyedCircuitBreakerHandle {
            registry: self.registry.clone(),
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, K, KF, F, C, Request> Service<Request> for KeyedCircuitBreaker<S, K, KF, F, C>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    KF: Fn(&Request) -> K,
    K: Hash + Eq + Clone,
    F: FallbackService<Request, S::Response>,
    C: Classify<S::Response, S::Error> + Clone,
{
    type Response = Answer<S::Response>;
    type Error = F::Error;
    type Future = ResponseFuture<S::Future, F::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.registry.template.kill.is_killed() {
            // Every key's call is skipped: no need to wait for the wrapped service.
            self.ready = Ready::Killed;
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                self.ready = Ready::Inner;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => {
                self.ready = Ready::No;
                Poll::Ready(Err(F::Error::service(error.into())))
            }
            Poll::Pending => {
                self.ready = Ready::No;
                Poll::Pending
            }
        }
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let ready = mem::replace(&mut self.ready, Ready::No);
        assert!(ready != Ready::No, "poll_ready must be called first");
        // The registry's reference, taken for this call, goes on to the call's permit.
        match self.registry.breaker(&(self.key)(&request)).decide_owned() {
            Ok(permit) if ready == Ready::Inner => {
                let classifier = self.classifier.clone();
                ResponseFuture::call(&mut self.inner, request, permit, classifier)
            }
            Ok(permit) => {
                // The kill switch was turned off between `poll_ready` and this call, and
                // the wrapped service was not polled ready: the call stays decided as
                // killed.
                let shared = permit.breaker().clone();
                let skip = shared.keep_killed(permit);
                let future = self.fallback.call_unready(request, skip, &shared);
                ResponseFuture::answered(future, skip)
            }
            Err((skip, shared)) => {
                let future = self.fallback.call_unready(request, skip, &shared);
                ResponseFuture::answered(future, skip)
            }
        }
    }
}

impl<S: Clone, K, KF: Clone, F: Clone, C: Clone> Clone for KeyedCircuitBreaker<S, K, KF, F, C> {
    /// A clone shares the registry but is not ready.
    fn clone(&self) -> Self {
        KeyedCircuitBreaker::new(
            self.inner.clone(),
            self.key.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
            self.registry.clone(),
        )
    }
}

impl<S: fmt::Debug, K, KF, F, C> fmt::Debug for KeyedCircuitBreaker<S, K, KF, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("registry", &self.registry)
            .field("inner", &self.inner)
            .field("fallback", &std::any::type_name::<F>())
            .field("ready", &self.ready)
            .finish()
    }
}

/// A handle on a keyed registry, for operators and dashboards: each key's breaker, and
/// how full the registry is.
///
/// ```
/// use tower_circuit_breaker::{Builder, State};
/// use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
/// use tower::{service_fn, Layer, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("model"), |m: &&'static str| *m)
///     .capacity(2)
///     .build()?;
/// let registry = layer.handle();
/// let mut models = layer.layer(service_fn(|m: &'static str| async move { Ok::<_, std::io::Error>(m) }));
/// for model in ["small", "large", "small", "vision"] {
///     models.ready().await?.call(model).await?;
/// }
/// // "large" was the least recently used: it made room for "vision".
/// let mut keys = registry.keys();
/// keys.sort();
/// assert_eq!(keys, ["small", "vision"]);
/// assert_eq!((registry.len(), registry.evictions()), (2, 1));
///
/// // A person opens one model's breaker; the registry will not evict it.
/// registry.get(&"vision").unwrap().force_open();
/// assert_eq!(registry.get(&"vision").unwrap().state(), State::ForcedOpen);
/// assert!(registry.get(&"large").is_none());
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones refer to the same registry.
pub struct KeyedCircuitBreakerHandle<K> {
    registry: Arc<Registry<K>>,
}

impl<K> KeyedCircuitBreakerHandle<K> {
    /// The handle on `key`'s breaker, if the registry holds one. Looking does not count
    /// as a use; but while you hold the handle, the breaker is not evicted. (A
    /// [`subscribe`](CircuitBreakerHandle::subscribe) stream does not hold it: the stream
    /// ends if the breaker is evicted.)
    pub fn get(&self, key: &K) -> Option<CircuitBreakerHandle>
    where
        K: Hash + Eq,
    {
        let hash = self.registry.hasher.hash_one(key);
        let map = read(self.registry.shard(hash));
        map.get(&Probe { hash, key } as &dyn Lookup<K>)
            .map(|entry| CircuitBreakerHandle::new(entry.shared.clone()))
    }

    /// The keys the registry holds a breaker for, in no particular order.
    pub fn keys(&self) -> Vec<K>
    where
        K: Clone,
    {
        let mut keys = Vec::with_capacity(self.len());
        for shard in self.registry.shards.iter() {
            keys.extend(read(shard).keys().map(|stored| stored.key.clone()));
        }
        keys
    }

    /// How many breakers the registry holds.
    pub fn len(&self) -> usize {
        self.registry.counters.live.load(Ordering::Acquire)
    }

    /// Whether the registry holds no breaker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most breakers the registry holds while it can evict idle closed ones.
    pub fn capacity(&self) -> usize {
        self.registry.capacity
    }

    /// How many idle closed breakers were evicted to make room.
    pub fn evictions(&self) -> u64 {
        self.registry.counters.evictions.load(Ordering::Relaxed)
    }

    /// How many breakers were made while the registry was full and had no breaker it
    /// could evict. Non-zero means the registry went over its capacity (and may still
    /// be: compare [`len`](Self::len) with [`capacity`](Self::capacity)).
    pub fn over_capacity(&self) -> u64 {
        self.registry.counters.over_capacity.load(Ordering::Relaxed)
    }

    /// The kill switch every key's breaker obeys.
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.registry.template.kill
    }

    /// The template's name, which every key's breaker's name starts with.
    pub fn name(&self) -> &str {
        &self.registry.template.config.name
    }
}

impl<K> Clone for KeyedCircuitBreakerHandle<K> {
    fn clone(&self) -> Self {
        KeyedCircuitBreakerHandle {
            registry: self.registry.clone(),
        }
    }
}

impl<K> fmt::Debug for KeyedCircuitBreakerHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerHandle")
            .field("registry", &self.registry)
            .finish()
    }
}

/// What every key's breaker is made from.
struct Template<K> {
    /// The settings every key's breaker shares (each has a name and a jitter seed of its
    /// own): made once, for the registry.
    config: Arc<Config>,
    kill: KillSwitch,
    observers: Vec<Watcher>,
    namer: fn(&str, &K) -> Arc<str>,
}

impl<K> Template<K> {
    /// A closed breaker for `key`.
    fn breaker(&self, key: &K) -> Shared {
        let name = (self.namer)(&self.config.name, key);
        let jitter_seed = Some(match self.config.jitter_seed {
            // Each key a seed of its own, derived from the template's so runs repeat.
            Some(seed) => seed ^ BuildHasherDefault::<DefaultHasher>::default().hash_one(&*name),
            None => RandomState::new().hash_one(&*name),
        });
        let machine = Machine::sharing(self.config.clone(), name, jitter_seed, now());
        builder::breaker(machine, self.kill.clone(), &self.observers, None)
    }
}

/// Keeps a value on cache lines of its own.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The breakers, one per key, in shards of their own lock.
struct Registry<K> {
    /// The recency clock: it moves on when a breaker is made and when the registry
    /// looks for breakers to evict. Read by every call, written by neither.
    clock: Padded<AtomicU64>,
    shards: Box<[Padded<RwLock<Map<K>>>]>,
    hasher: RandomState,
    capacity: usize,
    /// How many candidates one eviction scan keeps.
    batch: usize,
    counters: Padded<Counters>,
    victims: Mutex<Victims<K>>,
    template: Template<K>,
}

#[derive(Default)]
struct Counters {
    /// Breakers held, and room reserved for breakers being made.
    live: AtomicUsize,
    evictions: AtomicU64,
    over_capacity: AtomicU64,
    /// Over capacity with nothing to evict, as last found (for the log).
    over: AtomicBool,
}

/// A shard: each key's breaker and when it was last used.
type Map<K> = HashMap<Stored<K>, Entry, BuildHasherDefault<Prehashed>>;

struct Entry {
    shared: Arc<Shared>,
    /// The recency clock when the breaker was last used.
    used: AtomicU64,
}

impl Entry {
    // Inlined into the keyed call, which is made in the caller's crate: about a tenth of a
    // keyed call in the awaited `overhead` bench.
    #[inline]
    fn touch(&self, clock: &AtomicU64) {
        let now = clock.load(Ordering::Relaxed);
        // Written only when the clock has moved: a key called over and over does not
        // keep writing to a cache line every core reads.
        if self.used.load(Ordering::Relaxed) != now {
            self.used.store(now, Ordering::Relaxed);
        }
    }

    /// Within `reach`, with no call in flight and no handle held: the registry's
    /// reference is the only one. (Under the shard's write lock nobody can take another.)
    /// A half-open breaker with nothing in flight has no probe under way: it is waiting
    /// for one as an open breaker past its cooldown is, and goes as one.
    fn evictable(&self, reach: Reach) -> bool {
        Arc::strong_count(&self.shared) == 1
            && match self.shared.published_state() {
                State::Closed => true,
                State::Open | State::HalfOpen => reach == Reach::Open,
                State::ForcedOpen => false,
            }
    }
}

/// Which idle breakers an eviction may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Closed ones: nothing is forgotten but their counts.
    Closed,
    /// Open ones too (opened by failures, or half-open with no probe under way; never one
    /// a person forced open): only past twice the capacity, so that keys that fail cannot
    /// grow the registry without bound.
    Open,
}

/// Breakers the last scan found evictable.
struct Victims<K> {
    /// What the scan looked for.
    reach: Reach,
    /// The least recently used last.
    queue: Vec<Candidate<K>>,
    /// No scan before the clock reaches this: the last one found too few candidates,
    /// so the next waits until as many new keys have come as it lacked.
    next_scan: u64,
}

struct Candidate<K> {
    used: u64,
    hash: u64,
    key: K,
}

// Ordered by last use alone, for the scan's heap of the oldest.
impl<K> PartialEq for Candidate<K> {
    fn eq(&self, other: &Self) -> bool {
        self.used == other.used
    }
}
impl<K> Eq for Candidate<K> {}
impl<K> PartialOrd for Candidate<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Candidate<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.used.cmp(&other.used)
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // No code that can panic runs under these locks but the key's `Eq`; the maps stay
    // sound after such a panic, so a poisoned lock is used as it is.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K> Registry<K> {
    fn new(template: Template<K>, capacity: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (cores * 4).next_power_of_two().clamp(4, 64);
        Registry {
            clock: Padded(AtomicU64::new(0)),
            shards: (0..shards)
                .map(|_| Padded(RwLock::new(Map::default())))
                .collect(),
            hasher: RandomState::new(),
            capacity,
            batch: (capacity / 16).max(1),
            counters: Padded(Counters::default()),
            victims: Mutex::new(Victims {
                reach: Reach::Closed,
                queue: Vec::new(),
                next_scan: 0,
            }),
            template,
        }
    }

    /// The shard of a key's hash. The maps use the hash's low bits (the bucket) and top
    /// seven (the tag); the shard takes bits from the middle, so keys in one shard still
    /// spread over its buckets.
    fn shard(&self, hash: u64) -> &RwLock<Map<K>> {
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }

    fn live(&self) -> usize {
        self.counters.live.load(Ordering::Acquire)
    }
}

/// A slot of the registry's count, taken for a breaker being made: given back when
/// dropped unfilled (another call made the key's breaker first, or the key's own `Eq`,
/// `Hash` or `Clone` panicked while the map held the lock), so that `len()` counts only
/// what the map holds.
struct Room<'a> {
    live: &'a AtomicUsize,
    /// The count before this slot was taken.
    taken: usize,
    /// The breaker is in the map: the slot stays taken.
    filled: bool,
}

impl<'a> Room<'a> {
    fn take(live: &'a AtomicUsize) -> Self {
        let taken = live.fetch_add(1, Ordering::AcqRel);
        Room {
            live,
            taken,
            filled: false,
        }
    }

    /// The breaker is in the map: the slot is its.
    fn fill(mut self) {
        self.filled = true;
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        if !self.filled {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<K: Hash + Eq + Clone> Registry<K> {
    /// `key`'s breaker, made if the registry has none.
    #[inline]
    fn breaker(&self, key: &K) -> Arc<Shared> {
        let hash = self.hasher.hash_one(key);
        let found = read(self.shard(hash))
            .get(&Probe { hash, key } as &dyn Lookup<K>)
            .map(|entry| {
                entry.touch(&self.clock);
                entry.shared.clone()
            });
        match found {
            Some(shared) => shared,
            None => self.insert(hash, key),
        }
    }

    #[cold]
    #[inline(never)]
    fn insert(&self, hash: u64, key: &K) -> Arc<Shared> {
        // The key's code (its name, its clone) runs first, outside the locks and before
        // the room is taken.
        let fresh = Arc::new(self.template.breaker(key));
        let stored = Stored {
            hash,
            key: key.clone(),
        };
        // Room next, so that the registry holds no more than its capacity while it has
        // something to evict.
        let room = Room::take(&self.counters.live);
        if room.taken >= self.capacity {
            self.make_room();
        }
        let mut map = write(self.shard(hash));
        if let Some(entry) = map.get(&Probe { hash, key } as &dyn Lookup<K>) {
            // Another call made this key's breaker meanwhile.
            entry.touch(&self.clock);
            let shared = entry.shared.clone();
            drop(map);
            return shared;
        }
        let used = self.clock.fetch_add(1, Ordering::Relaxed);
        map.insert(
            stored,
            Entry {
                shared: fresh.clone(),
                used: AtomicU64::new(used),
            },
        );
        room.fill();
        fresh
    }

    /// Evicts one breaker for the one being made, and one more if an earlier overflow
    /// left the registry over its capacity.
    fn make_room(&self) {
        for round in 0..2 {
            if self.live() <= self.capacity {
                break;
            }
            let reach = if self.live() > self.capacity.saturating_mul(2) {
                Reach::Open
            } else {
                Reach::Closed
            };
            if !self.evict_one(reach) {
                if round == 0 {
                    self.counters.over_capacity.fetch_add(1, Ordering::Relaxed);
                    if !self.counters.over.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            target: "tower_circuit_breaker",
                            registry = %self.template.config.name,
                            capacity = self.capacity,
                            "keyed registry over capacity: no idle closed breaker to evict"
                        );
                    }
                }
                return;
            }
        }
        if self.live() <= self.capacity && self.counters.over.swap(false, Ordering::Relaxed) {
            tracing::info!(
                target: "tower_circuit_breaker",
                registry = %self.template.config.name,
                capacity = self.capacity,
                "keyed registry back within capacity"
            );
        }
    }

    /// Evicts the least recently used idle breaker within `reach` the registry knows
    /// of. Returns whether there was one.
    fn evict_one(&self, reach: Reach) -> bool {
        let mut victims = lock(&self.victims);
        if victims.reach != reach {
            // The last scan looked for other breakers: look again, at once.
            victims.reach = reach;
            victims.queue.clear();
            victims.next_scan = 0;
        }
        let mut scans = 0;
        loop {
            while let Some(candidate) = victims.queue.pop() {
                if self.try_evict(&candidate, reach) {
                    return true;
                }
            }
            if scans == 2 || self.clock.load(Ordering::Relaxed) < victims.next_scan {
                return false;
            }
            self.scan(&mut victims);
            scans += 1;
        }
    }

    /// Finds the `batch` least recently used idle breakers within the victims' reach.
    fn scan(&self, victims: &mut Victims<K>) {
        // Moves the clock on, so that a use after this scan is newer than every mark it
        // records.
        let clock = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut oldest = BinaryHeap::from(mem::take(&mut victims.queue));
        for shard in self.shards.iter() {
            let map = read(shard);
            for (stored, entry) in map.iter() {
                if !entry.evictable(victims.reach) {
                    continue;
                }
                let used = entry.used.load(Ordering::Relaxed);
                if oldest.len() < self.batch {
                    oldest.push(Candidate {
                        used,
                        hash: stored.hash,
                        key: stored.key.clone(),
                    });
                } else if let Some(mut newest) = oldest.peek_mut() {
                    if used < newest.used {
                        *newest = Candidate {
                            used,
                            hash: stored.hash,
                            key: stored.key.clone(),
                        };
                    }
                }
            }
        }
        let found = oldest.len();
        let mut queue = oldest.into_sorted_vec();
        queue.reverse();
        victims.queue = queue;
        victims.next_scan = clock + (self.batch - found) as u64;
    }

    /// Evicts a candidate if it is still there, unused since the scan, and evictable.
    fn try_evict(&self, candidate: &Candidate<K>, reach: Reach) -> bool {
        let probe = Probe {
            hash: candidate.hash,
            key: &candidate.key,
        };
        let mut map = write(self.shard(candidate.hash));
        let still = map.get(&probe as &dyn Lookup<K>).is_some_and(|entry| {
            entry.used.load(Ordering::Relaxed) == candidate.used && entry.evictable(reach)
        });
        if !still {
            return false;
        }
        let evicted = map.remove(&probe as &dyn Lookup<K>);
        drop(map);
        if let Some(entry) = &evicted {
            entry.shared.evicted();
        }
        self.counters.live.fetch_sub(1, Ordering::AcqRel);
        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        drop(evicted);
        true
    }
}

impl<K> fmt::Debug for Registry<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.template.config.name)
            .field("len", &self.live())
            .field("capacity", &self.capacity)
            .field("kill", &self.template.kill)
            .finish()
    }
}

/// A key with its hash, as the shard maps store it.
struct Stored<K> {
    hash: u64,
    key: K,
}

/// A key and its hash, stored or borrowed: lets a map be searched with a borrowed key
/// and the hash computed once per call.
trait Lookup<K> {
    fn hash_value(&self) -> u64;
    fn key(&self) -> &K;
}

/// A borrowed key with its hash.
struct Probe<'a, K> {
    hash: u64,
    key: &'a K,
}

impl<K> Lookup<K> for Stored<K> {
    fn hash_value(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &K {
        &self.key
    }
}

impl<K> Lookup<K> for Probe<'_, K> {
    fn hash_value(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &K {
        self.key
    }
}

impl<'a, K: 'a> Borrow<dyn Lookup<K> + 'a> for Stored<K> {
    fn borrow(&self) -> &(dyn Lookup<K> + 'a) {
        self
    }
}

// `Stored` and `dyn Lookup` hash and compare alike, as `Borrow` requires.
impl<K> Hash for Stored<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl<K: Eq> PartialEq for Stored<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl<K: Eq> Eq for Stored<K> {}

impl<K> Hash for dyn Lookup<K> + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash_value());
    }
}

impl<K: Eq> PartialEq for dyn Lookup<K> + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.hash_value() == other.hash_value() && self.key() == other.key()
    }
}

impl<K: Eq> Eq for dyn Lookup<K> + '_ {}

/// The shard maps' hasher: it passes on the hash the registry computed.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called (by `Stored` and `dyn Lookup`); anything else is
        // folded in rather than lost.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}
