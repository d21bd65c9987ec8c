//! Readiness for `tower::balance`: [`Readiness`] is not ready while its breaker would
//! not make a call, so a balancer routes around an open endpoint.
//!
//! A plain [`CircuitBreaker`](crate::CircuitBreaker) is always as ready as the service
//! that would answer: an open breaker's fallback answers at once, so `poll_ready` says
//! `Ready`. That is what a single caller wants, but `tower::balance::p2c` picks among
//! the ready endpoints, and would keep sending a share of the traffic to an open one
//! (answered by its fallback) while two healthy endpoints sit beside it. Wrapped in
//! [`Readiness`] (opt-in: [`pending_while_open`] on the breaker's layer, or a
//! [`ReadinessLayer`] on a breaker's handle), the endpoint's `poll_ready` is `Pending`
//! while a call through its breaker would be skipped:
//!
//! - **open**, until its probe is due: then it is ready, and the next call through it is
//!   the probe (the breaker decides it, as always). It wakes its task itself when the
//!   probe is due (a `tokio::time` sleep to the probe's instant);
//! - **half-open with every probe slot taken**, until the probe ends (or the breaker's
//!   half-open dwell limit could have passed: then it looks again);
//! - **forced open** ([`CircuitBreakerHandle::force_open`](crate::CircuitBreakerHandle::force_open),
//!   or [`open_for`](crate::CircuitBreakerHandle::open_for) until its hold ends), or held
//!   open by a **permanent failure**, until a person acts;
//! - **killed** ([`KillSwitch::kill`](crate::KillSwitch::kill)): no call can reach the
//!   service, so it is not ready, until revived.
//!
//! A person's act wakes a pending task at once: a [`reset`](crate::CircuitBreakerHandle::reset)
//! (the forced close), a [`revive`](crate::KillSwitch::revive),
//! [`allow_probe`](crate::CircuitBreakerHandle::allow_probe), a released hold, a change of
//! mode (a disabled or observe-only breaker makes every call, so it is ready). It waits
//! on [`CircuitBreakerHandle::changed`](crate::CircuitBreakerHandle::changed) and a
//! timer: no polling.
//!
//! It reads the breaker through its public handle only
//! ([`peek`](crate::CircuitBreakerHandle::peek), which counts nothing), and adds nothing
//! to the breaker's own calls: a breaker without it pays nothing for it. Closed and not
//! killed, its `poll_ready` is the breaker's after two loads.
//!
//! # A cooldown in calls is refused
//!
//! A breaker whose cooldown is counted in calls ([`Cooldown::Calls`](crate::Cooldown))
//! probes on the N-th call after it opened; while it is not ready, no call comes, so the
//! count would never move and the endpoint would stay out for good. Such a breaker is
//! refused when the layer is made, with a [`CooldownInCalls`] error: give a balanced
//! endpoint a cooldown in time.
//!
//! # Races
//!
//! Readiness is read before the call; the breaker still decides each call. A balancer
//! keeps a ready endpoint's reservation and polls it again before calling it: if the
//! breaker opened or was killed since, that poll is `Pending` and the balancer moves on.
//! Only the probe an endpoint reserved keeps it ready while its breaker is half-open
//! (the slot taken is its own: were it to wait on it, the probe would never go), unless
//! the kill switch is on. A change between the last poll and `call` is the breaker's to
//! decide: the call is answered by its fallback, as without this layer, never by the
//! service.
//!
//! ```
//! use std::time::Duration;
//! use futures::FutureExt;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("endpoint-a")
//!     .failure_threshold(1)
//!     .cooldown(Cooldown::Time(Duration::from_secs(30)))
//!     .build()?;
//! let mut endpoint = breaker.pending_while_open()?.layer(service_fn(|_: ()| async {
//!     Err::<(), _>(std::io::Error::other("connection refused"))
//! }));
//!
//! // The failure opens the breaker: the endpoint is no longer ready.
//! assert!(endpoint.ready().await?.call(()).await.is_err());
//! assert!(endpoint.ready().now_or_never().is_none());
//! // Ready again when the probe is due, and the next call is the probe.
//! tokio::time::sleep(Duration::from_secs(30)).await;
//! assert!(endpoint.ready().now_or_never().is_some());
//! # Ok(()) }
//! ```
//!
//! [`pending_while_open`]: crate::CircuitBreakerLayer::pending_while_open
//!
//! Under `tower::balance::p2c::Balance`, each endpoint is its own breaker, wrapped so:
//!
//! ```
//! use std::time::Duration;
//! use tower::balance::p2c::Balance;
//! use tower::discover::ServiceList;
//! use tower::load::Constant;
//! use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! let endpoint = |name: &'static str, up: bool| -> Result<_, BoxError> {
//!     let breaker = CircuitBreakerLayer::builder()
//!         .name(name)
//!         .failure_threshold(1)
//!         .cooldown(Cooldown::Time(Duration::from_secs(30)))
//!         .build()?;
//!     let svc = breaker.pending_while_open()?.layer(service_fn(move |_: ()| async move {
//!         if up { Ok(name) } else { Err(BoxError::from("connection refused")) }
//!     }));
//!     Ok(Constant::new(svc, 0))
//! };
//! let endpoints = vec![endpoint("a", true)?, endpoint("b", true)?, endpoint("down", false)?];
//! let mut balance = Balance::new(ServiceList::new(endpoints));
//! let mut failures = 0;
//! for _ in 0..20 {
//!     match balance.ready().await?.call(()).await {
//!         Ok(answer) => assert_ne!(answer.into_inner(), "down"),
//!         Err(_) => failures += 1,
//!     }
//! }
//! // At most one call reached the endpoint that is down: its breaker opened on it.
//! assert!(failures <= 1);
//! # Ok(()) }
//! ```

pub mod error;
mod layer;
mod service;

pub use self::error::CooldownInCalls;
pub use self::layer::ReadinessLayer;
pub use self::service::Readiness;
