//! Saved answers: the last good answer to each question, served labeled stale while the
//! breaker is open, or, with none saved, an honest "unavailable, retry after T" answer.
//!
//! Three parts, sharing one store ([`SavedAnswers`]):
//!
//! - [`SaveLayer`] goes **inside** the breaker, between it and the wrapped service: each
//!   good answer of the service is stored under the request's key (a key function you
//!   give; `None` means "do not save this one").
//! - [`SavedFallback`] is the breaker's fallback
//!   ([`CircuitBreakerLayer::with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)):
//!   for a skipped call, it serves the saved answer to the same question, passed through
//!   your `stale` function so it says how old it is; with no saved answer, or one older
//!   than the store's age limit, it builds your `unavailable` answer from an
//!   [`Unavailable`]: the breaker's name, why, and the real time until the next probe,
//!   from the breaker's own decision for that call ([`Skipped`]).
//! - [`SavedAnswers`] is bounded in memory (a capacity, the least recently stored answer
//!   evicted first) and in time (an age limit: older answers are never served), and
//!   counts what the fallback served.
//!
//! ```
//! use std::time::Duration;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::saved::{stale_label, SaveLayer, SavedAnswers, Unavailable};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Reason, Source, State};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // The model client: up until `down` is set.
//! let down = Arc::new(AtomicBool::new(false));
//! let client = service_fn({
//!     let down = down.clone();
//!     move |prompt: String| {
//!         let down = down.load(Ordering::SeqCst);
//!         async move {
//!             if down {
//!                 return Err(std::io::Error::other("connection refused"));
//!             }
//!             Ok(format!("The answer to {prompt:?} is 42."))
//!         }
//!     }
//! });
//!
//! let saved = SavedAnswers::new(1_000, Duration::from_secs(24 * 3600))?;
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("model")
//!     .failure_threshold(3)
//!     .cooldown(Cooldown::Time(Duration::from_secs(30)))
//!     .build()?;
//! // The answer to a prompt is saved under the prompt.
//! let save = SaveLayer::new(saved.clone(), |prompt: &String| Some(prompt.clone()));
//! let fallback = save.fallback(
//!     |answer: String, age: Duration| format!("{}\n{answer}", stale_label(age)),
//!     |unavailable: Unavailable| unavailable.to_string(),
//! );
//! let mut model = ServiceBuilder::new()
//!     .layer(breaker.with_fallback_context(fallback))
//!     .layer(save) // inside the breaker: only the service's real answers are saved
//!     .service(client);
//!
//! // A first good answer, saved.
//! let question = "What is six times seven?".to_string();
//! let answer = model.ready().await?.call(question.clone()).await?;
//! assert_eq!(answer.source(), Source::Service);
//! assert_eq!(saved.len(), 1);
//!
//! // Ten minutes later the model is down; three failures open the breaker.
//! tokio::time::advance(Duration::from_secs(600)).await;
//! down.store(true, Ordering::SeqCst);
//! for _ in 0..3 {
//!     assert!(model.ready().await?.call("Hello?".into()).await.is_err());
//! }
//! assert_eq!(saved.len(), 1); // failures are never saved
//!
//! // The same question gets the saved answer, labeled with its age.
//! let answer = model.ready().await?.call(question).await?;
//! assert_eq!(answer.source(), Source::Fallback(Reason::Open));
//! assert_eq!(
//!     answer.get_ref(),
//!     "[STALE DATA — saved 10m 0s ago, may not reflect current state]\n\
//!      The answer to \"What is six times seven?\" is 42."
//! );
//!
//! // A new question has no saved answer: it is told when to come back.
//! tokio::time::advance(Duration::from_secs(12)).await;
//! let answer = model.ready().await?.call("What is the time?".into()).await?;
//! assert_eq!(
//!     answer.get_ref(),
//!     "model is unavailable (its circuit breaker is open); retry after 18s"
//! );
//! assert_eq!((saved.served(), saved.unavailable()), (1, 1));
//! # Ok(()) }
//! ```
//!
//! # What it never does
//!
//! - It never makes up content: the only content [`SavedFallback`] serves is an answer
//!   the wrapped service really gave to a request with the same key, and nothing else
//!   writes to the store (there is no public insert). Answers of the fallback itself
//!   are never saved: they do not pass through [`SaveLayer`], which sits inside the
//!   breaker.
//! - It never serves a saved answer unlabeled: every one goes through your `stale`
//!   function with its age, and the breaker's [`Answer`](crate::Answer) also marks it
//!   [`Source::Fallback`](crate::Source::Fallback).
//! - It never serves an answer older than the age limit.
//!
//! # Keys
//!
//! The key decides which questions are "the same". Key on everything that changes the
//! answer (the model, the system prompt, the messages, the sampling settings that
//! matter), and return `None` for requests whose answers must not be replayed: personal
//! data, time-sensitive questions, tool calls with side effects. A key too coarse serves
//! one question's answer to another.
//!
//! # Time
//!
//! Ages are measured on `tokio::time`'s clock, like the breaker's cooldowns, so
//! paused-time tests run instantly.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::fallback::Skipped;
use crate::machine::{NextProbe, Reason, Skip, State};
use crate::snapshot::Snapshot;

/// A bad setting for [`SavedAnswers::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SavedConfigError {
    /// The store must hold at least one answer.
    #[error("saved answers capacity must be at least 1, got 0")]
    ZeroCapacity,
    /// An age limit of zero would never serve anything.
    #[error("saved answers maximum age must be more than zero")]
    ZeroMaxAge,
}

/// The last good answer to each request key, bounded in number and in age.
///
/// Answers get in only through a [`SaveLayer`] (a real answer of the wrapped service)
/// and out through a [`SavedFallback`] (labeled stale) or [`get`](Self::get).
///
/// - **Capacity**: at most `capacity` answers; storing one for a new key when full
///   evicts the least recently stored. Storing an answer for a key already held
///   replaces it and makes it the most recently stored.
/// - **Age limit**: an answer older than `max_age` is never served. It is dropped when
///   it is next looked up, and expired answers are dropped from the oldest end whenever
///   an answer is stored or [`len`](Self::len) is read.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SavedAnswers, SavedConfigError};
///
/// let saved = SavedAnswers::<String, String>::new(1_000, Duration::from_secs(3600))?;
/// assert!(saved.is_empty());
/// assert_eq!(
///     SavedAnswers::<String, String>::new(0, Duration::from_secs(1)).unwrap_err(),
///     SavedConfigError::ZeroCapacity
/// );
/// # Ok::<(), SavedConfigError>(())
/// ```
///
/// # Clone
///
/// Clones share one store: the same answers, limits and counters. Give one clone to the
/// [`SaveLayer`], one to the [`SavedFallback`], and keep one to watch it. Build another
/// store for another service.
pub struct SavedAnswers<K, R> {
    shared: Arc<Store<K, R>>,
}

struct Store<K, R> {
    capacity: usize,
    max_age: Duration,
    entries: Mutex<Entries<K, R>>,
    stored: AtomicU64,
    evicted: AtomicU64,
    expired: AtomicU64,
    served: AtomicU64,
    unavailable: AtomicU64,
}

/// The answers, and the order they were stored in: `order` maps a store sequence
/// number to its key, so its first entry is the least recently stored answer (and, the
/// clock being monotonic, the oldest). Every entry of `map` has its `seq` in `order`.
struct Entries<K, R> {
    map: HashMap<Arc<K>, Entry<R>>,
    order: BTreeMap<u64, Arc<K>>,
    next_seq: u64,
}

struct Entry<R> {
    value: R,
    stored_at: Instant,
    seq: u64,
}

impl<K, R> SavedAnswers<K, R> {
    /// A store of at most `capacity` answers, none served once older than `max_age`.
    ///
    /// # Errors
    ///
    /// [`SavedConfigError::ZeroCapacity`] for a capacity of 0,
    /// [`SavedConfigError::ZeroMaxAge`] for a zero age limit.
    pub fn new(capacity: usize, max_age: Duration) -> Result<Self, SavedConfigError> {
        if capacity == 0 {
            return Err(SavedConfigError::ZeroCapacity);
        }
        if max_age.is_zero() {
            return Err(SavedConfigError::ZeroMaxAge);
        }
        Ok(SavedAnswers {
            shared: Arc::new(Store {
                capacity,
                max_age,
                entries: Mutex::new(Entries {
                    map: HashMap::new(),
                    order: BTreeMap::new(),
                    next_seq: 0,
                }),
                stored: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                served: AtomicU64::new(0),
                unavailable: AtomicU64::new(0),
            }),
        })
    }

    /// The most answers it holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// The age past which an answer is never served.
    pub fn max_age(&self) -> Duration {
        self.shared.max_age
    }

    /// Answers stored so far (a replaced answer counts each time).
    pub fn stored(&self) -> u64 {
        self.shared.stored.load(Ordering::Relaxed)
    }

    /// Answers evicted to make room (capacity), not counting expired ones.
    pub fn evicted(&self) -> u64 {
        self.shared.evicted.load(Ordering::Relaxed)
    }

    /// Answers dropped because they passed the age limit.
    pub fn expired(&self) -> u64 {
        self.shared.expired.load(Ordering::Relaxed)
    }

    /// Fallback answers served from the store (labeled stale).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    /// Fallback answers that had no saved answer to give, and said the service is
    /// unavailable.
    pub fn unavailable(&self) -> u64 {
        self.shared.unavailable.load(Ordering::Relaxed)
    }

    /// Whether two values share one store.
    pub fn same_as(&self, other: &SavedAnswers<K, R>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn lock(&self) -> MutexGuard<'_, Entries<K, R>> {
        // The lock is held only for map operations; a panic in a key's `Hash` or `Eq`,
        // or in a response's `Clone`, leaves the entries usable.
        self.shared
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Hash + Eq, R> SavedAnswers<K, R> {
    /// The answers held that may still be served (expired ones are dropped first).
    pub fn len(&self) -> usize {
        let now = Instant::now();
        let mut entries = self.lock();
        let expired = entries.prune(now, self.shared.max_age);
        let len = entries.map.len();
        drop(entries);
        self.count_expired(expired);
        len
    }

    /// Whether it holds no answer that may still be served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an answer is held for `key`, not past the age limit.
    pub fn contains(&self, key: &K) -> bool {
        self.age(key).is_some()
    }

    /// How old the answer held for `key` is, if there is one not past the age limit.
    pub fn age(&self, key: &K) -> Option<Duration> {
        self.lookup(key, |_| ()).map(|((), age)| age)
    }

    /// Forgets the answer held for `key` (an answer known to be wrong, or data that
    /// must no longer be replayed). Returns whether there was one.
    pub fn remove(&self, key: &K) -> bool {
        let mut entries = self.lock();
        let removed = entries.remove(key);
        drop(entries);
        removed.is_some()
    }

    /// Forgets every answer. The counters are kept.
    pub fn clear(&self) {
        let mut entries = self.lock();
        let map = std::mem::take(&mut entries.map);
        entries.order.clear();
        drop(entries);
        drop(map);
    }

    /// Stores `value` as the answer for `key`, evicting or expiring others as needed.
    fn insert(&self, key: K, value: R) {
        let mut guard = self.lock();
        // Read under the lock, so that the order of storing is the order of the times.
        let now = Instant::now();
        let expired = guard.prune(now, self.shared.max_age);
        let entries = &mut *guard;
        let seq = entries.next_seq;
        entries.next_seq += 1;
        let mut evicted = 0;
        let replaced = if let Some(entry) = entries.map.get_mut(&key) {
            let old_seq = std::mem::replace(&mut entry.seq, seq);
            entry.stored_at = now;
            let old = std::mem::replace(&mut entry.value, value);
            let key = entries
                .order
                .remove(&old_seq)
                .unwrap_or_else(|| Arc::new(key));
            entries.order.insert(seq, key);
            Some(old)
        } else {
            while entries.map.len() >= self.shared.capacity {
                let Some((_, oldest)) = entries.order.pop_first() else {
                    break;
                };
                entries.map.remove(&oldest);
                evicted += 1;
            }
            let key = Arc::new(key);
            entries.order.insert(seq, key.clone());
            entries.map.insert(
                key,
                Entry {
                    value,
                    stored_at: now,
                    seq,
                },
            );
            None
        };
        drop(guard);
        // The replaced answer is dropped outside the lock.
        drop(replaced);
        self.shared.stored.fetch_add(1, Ordering::Relaxed);
        if evicted > 0 {
            self.shared.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
        self.count_expired(expired);
    }

    /// `f` of the answer held for `key` and its age, if it is not past the age limit;
    /// an expired answer found is dropped.
    fn lookup<T>(&self, key: &K, f: impl FnOnce(&R) -> T) -> Option<(T, Duration)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.map.get(key)?;
        let age = now.saturating_duration_since(entry.stored_at);
        if age <= self.shared.max_age {
            return Some((f(&entry.value), age));
        }
        let expired = entries.remove(key);
        drop(entries);
        drop(expired);
        self.count_expired(1);
        None
    }

    fn count_expired(&self, expired: u64) {
        if expired > 0 {
            self.shared.expired.fetch_add(expired, Ordering::Relaxed);
        }
    }
}

impl<K: Hash + Eq, R: Clone> SavedAnswers<K, R> {
    /// A copy of the answer held for `key`, **unlabeled**, with its age; `None` if there
    /// is none or it is past the age limit. For inspection: a caller shown this answer
    /// must be told how old it is (as [`SavedFallback`] does).
    pub fn get(&self, key: &K) -> Option<(R, Duration)> {
        self.lookup(key, R::clone)
    }
}

impl<K: Hash + Eq, R> Entries<K, R> {
    /// Drops the expired answers, oldest first. Returns how many.
    fn prune(&mut self, now: Instant, max_age: Duration) -> u64 {
        let mut expired = 0;
        while let Some((_, key)) = self.order.first_key_value() {
            if let Some(entry) = self.map.get(key) {
                if now.saturating_duration_since(entry.stored_at) <= max_age {
                    break;
                }
            }
            if let Some((_, key)) = self.order.pop_first() {
                if self.map.remove(&key).is_some() {
                    expired += 1;
                }
            }
        }
        expired
    }

    fn remove(&mut self, key: &K) -> Option<Entry<R>> {
        let entry = self.map.remove(key)?;
        self.order.remove(&entry.seq);
        Some(entry)
    }
}

impl<K, R> Clone for SavedAnswers<K, R> {
    fn clone(&self) -> Self {
        SavedAnswers {
            shared: self.shared.clone(),
        }
    }
}

impl<K, R> fmt::Debug for SavedAnswers<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SavedAnswers")
            .field("capacity", &self.shared.capacity)
            .field("max_age", &self.shared.max_age)
            .field("stored", &self.stored())
            .field("served", &self.served())
            .field("unavailable", &self.unavailable())
            .finish_non_exhaustive()
    }
}

/// What counts as a good answer, worth saving: a predicate over the wrapped service's
/// response, implemented for closures `Fn(&R) -> bool`. The default, [`EveryOk`],
/// saves every `Ok` response; errors are never saved.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
///
/// struct Completion {
///     finish_reason: &'static str,
///     text: String,
/// }
///
/// let saved = SavedAnswers::<String, Completion>::new(100, Duration::from_secs(3600))?;
/// // A completion cut off by the length limit or a content filter is not worth replaying.
/// let save = SaveLayer::new(saved, |prompt: &String| Some(prompt.clone()))
///     .only_if(|completion: &Completion| completion.finish_reason == "stop");
/// # let _ = save;
/// # Ok::<(), tower_circuit_breaker::saved::SavedConfigError>(())
/// ```
pub trait GoodAnswer<R> {
    /// Whether `response` may be saved and served later.
    fn is_good(&self, response: &R) -> bool;
}

impl<R, F> GoodAnswer<R> for F
where
    F: Fn(&R) -> bool,
{
    fn is_good(&self, response: &R) -> bool {
        self(response)
    }
}

/// Every `Ok` response is a good answer: the default [`GoodAnswer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EveryOk;

impl<R> GoodAnswer<R> for EveryOk {
    fn is_good(&self, _: &R) -> bool {
        true
    }
}

/// Saves the wrapped service's good answers in a [`SavedAnswers`], under the key the
/// key function gives each request (`None`: not saved).
///
/// Place it **inside** the breaker (listed after it in a `ServiceBuilder`), so that only
/// the wrapped service's own answers, probes included, are saved, never the fallback's.
/// It changes no readiness, response or error, and never delays one: a call costs the
/// key function (and, with a key, a reference-count increment for the store and a
/// clone of the predicate), and a good answer with a key, a clone of the response and
/// one short lock when the response is ready.
///
/// See the [module docs](self) for a complete example.
///
/// # Clone
///
/// Clones share the store (see [`SavedAnswers`]); the key function and the predicate
/// are cloned.
pub struct SaveLayer<K, R, KF, G = EveryOk> {
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<K, R, KF> SaveLayer<K, R, KF> {
    /// Saves into `saved`, under `key(&request)`, every `Ok` response.
    pub fn new(saved: SavedAnswers<K, R>, key: KF) -> Self {
        SaveLayer {
            saved,
            key,
            good: EveryOk,
        }
    }
}

impl<K, R, KF, G> SaveLayer<K, R, KF, G> {
    /// Saves only the `Ok` responses `good` accepts (see [`GoodAnswer`]).
    pub fn only_if<G2>(self, good: G2) -> SaveLayer<K, R, KF, G2> {
        SaveLayer {
            saved: self.saved,
            key: self.key,
            good,
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }

    /// The fallback that serves this layer's saved answers, with the same store and key
    /// function (see [`SavedFallback::new`]).
    pub fn fallback<ST, UN>(&self, stale: ST, unavailable: UN) -> SavedFallback<K, R, KF, ST, UN>
    where
        KF: Clone,
    {
        SavedFallback::new(self.saved.clone(), self.key.clone(), stale, unavailable)
    }
}

impl<S, K, R, KF: Clone, G: Clone> Layer<S> for SaveLayer<K, R, KF, G> {
    type Service = Save<S, K, R, KF, G>;

    fn layer(&self, inner: S) -> Self::Service {
        Save::new(
            inner,
            self.saved.clone(),
            self.key.clone(),
            self.good.clone(),
        )
    }
}

impl<K, R, KF: Clone, G: Clone> Clone for SaveLayer<K, R, KF, G> {
    fn clone(&self) -> Self {
        SaveLayer {
            saved: self.saved.clone(),
            key: self.key.clone(),
            good: self.good.clone(),
        }
    }
}

impl<K, R, KF, G> fmt::Debug for SaveLayer<K, R, KF, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaveLayer")
            .field("saved", &self.saved)
            .field("key", &std::any::type_name::<KF>())
            .field("good", &std::any::type_name::<G>())
            .finish()
    }
}

/// The service [`SaveLayer`] makes: the wrapped service, whose good answers are saved.
pub struct Save<S, K, R, KF, G = EveryOk> {
    inner: S,
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<S, K, R, KF, G> Save<S, K, R, KF, G> {
    /// Wraps `inner`, saving into `saved` under `key(&request)` the `Ok` responses
    /// `good` accepts.
    pub fn new(inner: S, saved: SavedAnswers<K, R>, key: KF, good: G) -> Self {
        Save {
            inner,
            saved,
            key,
            good,
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request, K, R, KF, G> Service<Request> for Save<S, K, R, KF, G>
where
    S: Service<Request, Response = R>,
    K: Hash + Eq,
    R: Clone,
    KF: Fn(&Request) -> Option<K>,
    G: GoodAnswer<R> + Clone,
{
    type Response = R;
    type Error = S::Error;
    type Future = SaveFuture<S::Future, K, R, G>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let saving = (self.key)(&request).map(|key| Saving {
            key,
            saved: self.saved.clone(),
            good: self.good.clone(),
        });
        SaveFuture {
            inner: self.inner.call(request),
            saving,
        }
    }
}

impl<S: Clone, K, R, KF: Clone, G: Clone> Clone for Save<S, K, R, KF, G> {
    fn clone(&self) -> Self {
        Save {
            inner: self.inner.clone(),
            saved: self.saved.clone(),
            key: self.key.clone(),
            good: self.good.clone(),
        }
    }
}

impl<S: fmt::Debug, K, R, KF, G> fmt::Debug for Save<S, K, R, KF, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Save")
            .field("inner", &self.inner)
            .field("saved", &self.saved)
            .field("key", &std::any::type_name::<KF>())
            .field("good", &std::any::type_name::<G>())
            .finish()
    }
}

struct Saving<K, R, G> {
    key: K,
    saved: SavedAnswers<K, R>,
    good: G,
}

pin_project! {
    /// The future of a [`Save`] call: the wrapped service's, unchanged, saving a good
    /// answer when it completes.
    pub struct SaveFuture<F, K, R, G> {
        #[pin]
        inner: F,
        saving: Option<Saving<K, R, G>>,
    }
}

impl<F, E, K, R, G> Future for SaveFuture<F, K, R, G>
where
    F: Future<Output = Result<R, E>>,
    K: Hash + Eq,
    R: Clone,
    G: GoodAnswer<R>,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(saving)) = (&result, this.saving.take()) {
            if saving.good.is_good(response) {
                saving.saved.insert(saving.key, response.clone());
            }
        }
        Poll::Ready(result)
    }
}

impl<F, K, R, G> fmt::Debug for SaveFuture<F, K, R, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaveFuture")
            .field("saving", &self.saving.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a call got no answer, and when to try again: what [`SavedFallback`] gives your
/// `unavailable` function when it has no saved answer for the request.
///
/// It is read from the breaker's [`Snapshot`] when the fallback answers, so
/// [`retry_after`](Self::retry_after) is the real time left until the breaker lets its
/// next probe through.
///
/// Its `Display` is a sentence for a person or a model:
/// `model is unavailable (its circuit breaker is open); retry after 18s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    name: Arc<str>,
    reason: Reason,
    state: State,
    next_probe: NextProbe,
    retry_after: Option<Duration>,
}

impl Unavailable {
    /// What a skipped call should be told, from the breaker's own decision for it
    /// (what a context-aware fallback receives), with the wait measured from `now`.
    pub fn from_skip(skip: &Skip, breaker: &Arc<str>, now: std::time::Instant) -> Self {
        Unavailable {
            name: breaker.clone(),
            reason: skip.reason(),
            state: skip.state(),
            next_probe: skip.next_probe(),
            retry_after: skip.next_probe().retry_after(now),
        }
    }

    /// What the snapshot says a skipped call should be told.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let reason = if snapshot.killed {
            Reason::Killed
        } else {
            match snapshot.state {
                State::ForcedOpen => Reason::ForcedOpen,
                State::HalfOpen => Reason::HalfOpenFull,
                State::Open | State::Closed => Reason::Open,
            }
        };
        let retry_after = match snapshot.next_probe {
            NextProbe::After { at: Some(at), .. } => {
                Some(at.saturating_duration_since(snapshot.taken_at))
            }
            // Counted in calls only: known in time only when the next call probes.
            NextProbe::After { calls, at: None } => (calls <= 1).then_some(Duration::ZERO),
            // Closed again since the call was skipped (a probe succeeded meanwhile).
            NextProbe::NotNeeded => Some(Duration::ZERO),
            NextProbe::InFlight | NextProbe::Manual => None,
        };
        Unavailable {
            name: snapshot.name.clone(),
            reason,
            state: snapshot.state,
            next_probe: snapshot.next_probe,
            retry_after,
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the call was not made: [`Reason::Killed`] when the kill switch is on, else
    /// from the state ([`Reason::Open`], [`Reason::HalfOpenFull`] or
    /// [`Reason::ForcedOpen`]). If the breaker closed again between the skip and this
    /// answer, [`Reason::Open`], with a zero [`retry_after`](Self::retry_after).
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The breaker's state when the fallback answered.
    pub fn state(&self) -> State {
        self.state
    }

    /// When the breaker will next let a probe through, as the snapshot said.
    pub fn next_probe(&self) -> NextProbe {
        self.next_probe
    }

    /// How long until the next probe may go: the time left of a time cooldown (or of a
    /// wait the service asked for), zero when the next call will be the probe, and
    /// `None` when no time is known: the cooldown counts calls and more than one is
    /// needed ([`calls_until_probe`](Self::calls_until_probe)), a probe is under way,
    /// or only a person can end it (the kill switch, forced open, a permanent failure).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// How many calls until the probe (1: the next call), when one is scheduled.
    pub fn calls_until_probe(&self) -> Option<u64> {
        self.next_probe.calls()
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is unavailable (", self.name)?;
        f.write_str(match self.reason {
            Reason::Killed => "the kill switch is on",
            Reason::ForcedOpen => "it was forced open",
            Reason::HalfOpenFull => "a probe is checking whether it is back",
            _ => "its circuit breaker is open",
        })?;
        f.write_str("); ")?;
        match (self.retry_after, self.next_probe) {
            (Some(wait), _) if wait.is_zero() => f.write_str("retry now"),
            (Some(wait), _) => write!(f, "retry after {}", human(ceil_secs(wait))),
            (None, NextProbe::After { calls, .. }) => {
                write!(f, "it will be tried again in {calls} calls")
            }
            (None, NextProbe::InFlight) => f.write_str("retry shortly"),
            (None, _) if self.reason == Reason::Killed => {
                f.write_str("no retry is scheduled until a person turns the kill switch off")
            }
            (None, _) => f.write_str("no retry is scheduled until a person resets it"),
        }
    }
}

/// The label to put before a saved answer served `age` after it was saved: the
/// [`Freshness::Stale`](crate::expediter::Freshness::Stale) label with the age instead
/// of the time of retrieval. The age is in whole seconds, rounded down (as HTTP's `Age`).
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::stale_label;
///
/// assert_eq!(
///     stale_label(Duration::from_millis(90_500)),
///     "[STALE DATA — saved 1m 30s ago, may not reflect current state]"
/// );
/// ```
pub fn stale_label(age: Duration) -> String {
    format!(
        "[STALE DATA — saved {} ago, may not reflect current state]",
        human(age.as_secs())
    )
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// `45s`, `1m 30s`, `2h 0m 5s`.
fn human(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// The fallback that serves saved answers: give it to
/// [`CircuitBreakerLayer::with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context).
///
/// For a skipped call, it takes the request's key and:
///
/// - with an answer saved for that key, not past the store's age limit, answers
///   `stale(saved, age)`: your function must label the answer as stale with its age
///   (the library never serves a saved answer any other way);
/// - otherwise (no key, no answer, or too old) answers `unavailable(Unavailable)`,
///   built from the breaker's snapshot at that moment: name, reason, and the real time
///   to the next probe.
///
/// It never fails and never makes up content: the only content it serves is a real
/// answer the wrapped service gave. Each answer is counted in the store
/// ([`SavedAnswers::served`], [`SavedAnswers::unavailable`]).
///
/// Both functions build a response of the service's own type, so the answer can reach
/// callers that only know that type; the breaker's [`Answer`](crate::Answer) also says
/// [`Source::Fallback`](crate::Source::Fallback). With a structured response, put the
/// label where the caller will see it (the message content, a header) and keep it
/// distinguishable from the real service's answers.
///
/// A stale label with the time of retrieval, as the expediter's
/// [`Freshness::Stale`](crate::expediter::Freshness::Stale) writes it:
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tower_circuit_breaker::expediter::{Freshness, Labeled};
/// use tower_circuit_breaker::saved::{SavedAnswers, SavedFallback, Unavailable};
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// let saved = SavedAnswers::<String, String>::new(1_000, Duration::from_secs(3600))?;
/// let breaker = CircuitBreakerLayer::builder().name("model").build()?;
/// let fallback = SavedFallback::new(
///     saved,
///     |prompt: &String| Some(prompt.clone()),
///     |answer: String, age: Duration| {
///         let retrieved = SystemTime::now().checked_sub(age).unwrap_or(UNIX_EPOCH);
///         // "[STALE DATA — retrieved at 2031-05-04T10:11:12Z, may not reflect current state]\n..."
///         Labeled::new(answer, Freshness::stale(retrieved)).to_string()
///     },
///     |unavailable: Unavailable| format!("[UNAVAILABLE] {unavailable}"),
/// );
/// let breaker = breaker.with_fallback_context(fallback);
/// # let _ = breaker;
/// # Ok::<(), tower::BoxError>(())
/// ```
///
/// # Clone
///
/// Clones share the store and the functions.
pub struct SavedFallback<K, R, KF, ST, UN> {
    saved: SavedAnswers<K, R>,
    functions: Arc<Functions<KF, ST, UN>>,
}

struct Functions<KF, ST, UN> {
    key: KF,
    stale: ST,
    unavailable: UN,
}

impl<K, R, KF, ST, UN> SavedFallback<K, R, KF, ST, UN> {
    /// Serves the answers saved in `saved` under `key(&request)` (the same key function
    /// as the [`SaveLayer`]'s: [`SaveLayer::fallback`] makes sure of it), labeled by
    /// `stale(answer, age)`, or `unavailable(Unavailable)` built from the breaker's own
    /// decision for the call (it is a context-aware fallback: give it to
    /// [`with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)).
    pub fn new(saved: SavedAnswers<K, R>, key: KF, stale: ST, unavailable: UN) -> Self {
        SavedFallback {
            saved,
            functions: Arc::new(Functions {
                key,
                stale,
                unavailable,
            }),
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }
}

impl<Request, K, R, KF, ST, UN> Service<Skipped<Request>> for SavedFallback<K, R, KF, ST, UN>
where
    K: Hash + Eq,
    R: Clone,
    KF: Fn(&Request) -> Option<K>,
    ST: Fn(R, Duration) -> R,
    UN: Fn(Unavailable) -> R,
{
    type Response = R;
    type Error = Infallible;
    type Future = std::future::Ready<Result<R, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, skipped: Skipped<Request>) -> Self::Future {
        let functions = &*self.functions;
        let saved = (functions.key)(&skipped.request).and_then(|key| self.saved.get(&key));
        let response = match saved {
            Some((answer, age)) => {
                self.saved.shared.served.fetch_add(1, Ordering::Relaxed);
                (functions.stale)(answer, age)
            }
            None => {
                self.saved
                    .shared
                    .unavailable
                    .fetch_add(1, Ordering::Relaxed);
                let now = tokio::time::Instant::now().into_std();
                (functions.unavailable)(Unavailable::from_skip(
                    &skipped.skip,
                    &skipped.breaker,
                    now,
                ))
            }
        };
        std::future::ready(Ok(response))
    }
}

impl<K, R, KF, ST, UN> Clone for SavedFallback<K, R, KF, ST, UN> {
    fn clone(&self) -> Self {
        SavedFallback {
            saved: self.saved.clone(),
            functions: self.functions.clone(),
        }
    }
}

impl<K, R, KF, ST, UN> fmt::Debug for SavedFallback<K, R, KF, ST, UN> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SavedFallback")
            .field("saved", &self.saved)
            .finish_non_exhaustive()
    }
}
