//! A circuit breaker for `tower` services, made for AI agents and LLM-backed services:
//! it stops calling a model or tool that keeps failing, answers honestly from a
//! fallback while it is broken, probes to find out when it is back, and has a kill
//! switch a person can flip at runtime.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Source, State};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("search-tool")
//!     .failure_threshold(3)
//!     .cooldown(Cooldown::Calls(4))
//!     .build()?;
//! let handle = breaker.handle();
//! let breaker = breaker.with_fallback(service_fn(|_query: String| async {
//!     Ok::<_, std::convert::Infallible>("search is unavailable".to_string())
//! }));
//! let mut search = ServiceBuilder::new()
//!     .layer(breaker)
//!     .timeout(Duration::from_secs(5))
//!     .service(service_fn(|_query: String| async {
//!         Err::<String, _>(std::io::Error::other("connection refused"))
//!     }));
//!
//! for _ in 0..3 {
//!     assert!(search.ready().await?.call("rust".into()).await.is_err());
//! }
//! assert_eq!(handle.state(), State::Open);
//! let answer = search.ready().await?.call("rust".into()).await?;
//! assert!(matches!(answer.source(), Source::Fallback(_)));
//! # Ok(()) }
//! ```
//!
//! The parts:
//!
//! - [`CircuitBreakerLayer`] / [`CircuitBreaker`]: the tower plumbing, with
//!   [`Builder`] for settings, [`CircuitBreakerHandle`] for operators,
//!   [`KillSwitch`] for emergencies, [`Classify`] for what counts as a failure, and
//!   [`Answer`] / [`Source`] for where every answer came from.
//! - [`keyed`]: one breaker per key of the request (per host, model or tool), in a
//!   bounded registry ([`KeyedCircuitBreakerLayer`]).
//! - `fleet` (feature `fleet`): kill switches and breaker transitions shared by a fleet
//!   of replicas through Redis, off the call path.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]
// On docs.rs, every item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod builder;
mod classify;
pub mod error;
mod event;
pub mod expediter;
mod fallback;
#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub mod fleet;
pub mod future;
mod handle;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod keyed;
mod kill;
mod layer;
mod machine;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod outcome;
pub mod replay;
pub mod saved;
mod service;
mod settle;
mod shared;
mod snapshot;
mod sync;

pub use crate::answer::{Answer, Source};
pub use crate::builder::Builder;
pub use crate::classify::{Classify, DefaultClassifier};
pub use crate::error::{BoxError, ConfigError};
pub use crate::event::Event;
pub use crate::fallback::{
    Fallback, FallbackFuture, FallbackMode, FallbackService, NoFallback, Plain, Skipped, WithSkip,
};
pub use crate::handle::CircuitBreakerHandle;
pub use crate::keyed::{
    KeyedBuilder, KeyedCircuitBreaker, KeyedCircuitBreakerHandle, KeyedCircuitBreakerLayer,
};
pub use crate::kill::KillSwitch;
pub use crate::layer::CircuitBreakerLayer;
pub use crate::machine::{
    Advice, Backoff, Cause, Config, Cooldown, FailureRecord, Mode, NextProbe, RateWindow, Reason,
    Skip, State, Transition, TripPolicy,
};
pub use crate::outcome::{Failure, Outcome};
pub use crate::saved::{SaveLayer, SavedAnswers, SavedConfigError, SavedFallback, Unavailable};
pub use crate::service::CircuitBreaker;
pub use crate::settle::Settlement;
pub use crate::snapshot::{Counts, Snapshot};

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
