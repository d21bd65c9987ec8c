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
//!   response future, or fails with [`Rejected`](crate::error::Rejected) naming the
//!   key's breaker. The wrapped service stays ready for the next call.
//!
//! An error from the wrapped service's `poll_ready` is returned as is and counts
//! against no key: no key is known yet.
//!
//! # The registry
//!
//! Every key's breaker is made from the template [`Builder`](crate::Builder): its settings and
//! observers, its kill switch (one switch for every key), and its name with the key
//! appended (`fetch[down.example]`; see [`KeyedBuilder::name_keys_by_display`]). A
//! template's jitter seed is mixed with each key's name, so keys that opened together
//! do not probe together, and runs still repeat.
//!
//! It holds at most [`capacity`](KeyedBuilder::capacity) breakers. To make room for a
//! new key it evicts the least recently used breaker that is **idle and closed**:
//! closed (never open, half-open or forced open: that would forget a failure and let
//! calls through to a service known to be broken), with no call in flight and no
//! [`CircuitBreakerHandle`](crate::CircuitBreakerHandle) held on it (a handle you hold
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
//! breaker that is **open** is evicted too, forgetting its failures: one opened by its
//! failures, or one **half-open with no call in flight** (its probes so far succeeded,
//! as a failed one would have opened it again, and it waits for the next as an open
//! breaker past its cooldown does; its key comes back closed), but never one a person
//! forced open, one a permanent failure holds open until a reset
//! ([`Failure::permanent`](crate::Failure::permanent): forgotten, its key would be called
//! again), one with a probe or a call in flight, or one held. Past four times the
//! capacity, one a permanent failure holds open goes as well (never one a person forced
//! open). Keys that come from the network (a host, a model, a tool name) and fail would
//! otherwise grow the registry without bound, also by failing, then sending one good
//! probe of the several a half-open breaker asks for.
//!
//! The observers of an evicted breaker are told ([`Event::Evicted`](crate::Event::Evicted))
//! once the registry has released its locks, by the call that evicted it: an observer
//! may call the keyed service back, with any key, and a slow one holds up only that call.
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
//! - the breaker: two allocations, 184 bytes for what every call reads and counts (the
//!   published door, the counts of calls passed, the name) and 16 bytes plus the name's
//!   length for its name (`host[42]`: 24 bytes). The settings are not copied per key:
//!   every key's breaker points to the template's, made once for the registry. What a
//!   key that only passes calls never needs is made when first needed: its state machine
//!   behind a lock, with room for its event queue and change channel (272 bytes, when
//!   the machine is first asked: an outcome other than a success that changes nothing, a
//!   person's act on its handle, a subscriber or a wait for changes, its settings asked
//!   for; a [`snapshot`](crate::CircuitBreakerHandle::snapshot) does not make it), the
//!   rest of its counts (72 bytes, at its first call that ends in anything but such a
//!   success, or such a success counted by a thread other than the first to count), the
//!   copy of a name of more than 15 bytes its
//!   rejections carry (64 bytes, at its first rejection) and its event queue (184 bytes,
//!   when it first has an event to report). With a failure-rate trip policy, or
//!   observers on the template, the state machine is made with the breaker;
//! - the slot: the key's hash, the key, the breaker's `Arc` and its last-used mark,
//!   24 bytes plus the key, and a control byte, in tables at most 7/8 full. A table
//!   that evicts and inserts can double while barely half full (its deleted slots are
//!   reclaimed then), so a slot takes between 1.1 and 4.6 times its size; it never
//!   shrinks, so the tables stay at their largest;
//! - a key that owns heap data (a `String`) adds that, twice while the key waits in an
//!   eviction batch.
//!
//! In all, 270 bytes per key in a registry just filled with 10,000 keys (2.7 MB), and 326
//! bytes per key (3.3 MB) once 90,000 more have passed through and been evicted: however
//! many keys come, no more. A key whose calls have failed holds about 350 bytes more. A
//! failure-rate policy over a count window adds one bit per call in the window and 48
//! bytes; each observer adds 16 bytes; a transition channel is only made for a breaker
//! whose handle is subscribed to.
//!
//! Metrics are outside that bound. With `Builder::metrics` on
//! the template (feature `metrics`), each key's breaker records series of its own,
//! labelled with its name, and the `metrics` facade has no way to remove a series: an
//! evicted key's stay in the recorder (set to 0). Where keys come from the network, give
//! the exporter an idle timeout (`metrics-exporter-prometheus`'s `idle_timeout`) so that
//! they go, or keep metrics off the template.
//!
//! # Clone
//!
//! Every service a [`KeyedCircuitBreakerLayer`] makes, and every clone of it, shares one
//! registry. Build another layer for another registry.

mod builder;
mod handle;
mod layer;
mod registry;
mod service;

pub use self::builder::KeyedBuilder;
pub use self::handle::KeyedCircuitBreakerHandle;
pub use self::layer::KeyedCircuitBreakerLayer;
pub use self::service::KeyedCircuitBreaker;
