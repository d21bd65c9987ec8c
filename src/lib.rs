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
//! # The parts, in the order you meet them
//!
//! At the root, what a first program names:
//!
//! - [`CircuitBreakerLayer`] / [`CircuitBreaker`]: the tower plumbing, set up with a
//!   [`Builder`] ([`Cooldown`], [`Backoff`], [`Mode`]); every clone of the wrapped service
//!   shares one breaker.
//! - [`Answer`] / [`Source`]: every answer says where it came from (the service, a probe,
//!   a fallback and why), with [`Origin`] and the classifier's [`Verdict`].
//! - [`Outcome`] / [`Failure`]: what a classifier makes of a result (see [`classify`]).
//! - [`CircuitBreakerHandle`]: for operators and orchestrators: the [`State`], a snapshot,
//!   [`Transition`]s and their [`Cause`], force open, hold open, reset, and what a call
//!   would get now ([`Advice`], [`Skip`], [`Reason`], [`NextProbe`]).
//! - [`KillSwitch`]: a person's emergency stop, shared by any number of breakers.
//! - [`Event`]: what observers hear ([`Builder::on_event`]).
//!
//! In modules named for what they hold:
//!
//! - [`fallback`]: what answers while the breaker is open, and what it is told
//!   ([`fallback::Skipped`]); without one, a skip is an [`error::Rejected`], boxed or, with
//!   [`CircuitBreakerLayer::with_typed_errors`], in an [`error::CallError`].
//! - [`classify`]: the [`classify::Classify`] policy, the default one, and settling a
//!   streamed answer later.
//! - [`snapshot`]: a breaker seen without a call, with its counts.
//! - [`config`], [`error`], [`future`]: the checked settings and trip policies, the error
//!   types, the response future.
//! - [`saved`]: the last good answer per request, served labelled stale while the
//!   service is down. [`recover`]: a fallback for calls that were made and failed.
//! - [`retry`]: a retry policy to place inside the breaker: only transient failures as
//!   its classifier sees them, backoff with full jitter, a retry budget, a short
//!   `Retry-After` waited and a long one handed back so the breaker opens.
//! - [`readiness`]: an endpoint that is not ready while its breaker would not make a
//!   call, so that `tower::balance` routes around an open one.
//! - [`keyed`]: one breaker per key of the request (per host, model or tool), in a
//!   bounded registry.
//! - [`expediter`]: an agent's tools under one failure policy: alternatives, a shared
//!   failure budget, scope reduction with an honest report, cascades, pre-call checks.
//! - [`replay`]: an outcome sequence replayed through the real layer, to tune settings.
//! - Behind features: `http` (a classifier for HTTP clients, error bodies, buffered and
//!   streamed responses, provenance on the plain response), `reqwest` (the same for
//!   `reqwest::Response`), `metrics` (Prometheus-style series, resilience4j's names if
//!   wanted), `opentelemetry` (each call's decision as attributes of the caller's span,
//!   changes of state as span events), `admin` (an operators' endpoint), `fleet` (kill switches and hints shared by
//!   replicas through Redis), `mcp` (MCP tool servers supervised under breakers, their
//!   tools under the expediter; needs Rust 1.88), `serde` (JSON for snapshots and reports).
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]
// On docs.rs, every item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod accessors;
#[cfg(feature = "admin")]
pub mod admin;
mod breaker;
mod error_text;
mod escape;
pub mod expediter;
pub mod failover;
#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub mod fleet;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod later;
#[cfg(feature = "llm")]
#[cfg_attr(docsrs, doc(cfg(feature = "llm")))]
pub mod llm;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "opentelemetry")]
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub mod opentelemetry;
pub mod readiness;
mod redact;
pub mod replay;
pub mod retry;
pub mod saved;

pub use crate::breaker::Builder;
pub use crate::breaker::{Answer, Origin, Source, Verdict};
/// Settings beyond the [`Builder`]'s own methods: the checked settings a builder makes
/// ([`Builder::build_config`]), and the trip policies.
pub mod config {
    pub use crate::breaker::{Config, RateWindow, TripPolicy};
}

/// The clock every breaker reads.
pub mod clock {
    pub use crate::breaker::{can_be_paused, now};
}

pub use crate::breaker::Event;
pub use crate::breaker::{classify, error, fallback, future, keyed, recover, snapshot};
pub use crate::breaker::{
    Advice, Backoff, Cause, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown,
    DeliveryGroup, Failure, KillSwitch, Mode, NextProbe, Outcome, Reason, Skip, State, Transition,
};
pub use crate::redact::redact;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of the guides under `docs/`, compiled and run as doc tests (each guide
/// with a rust block is here; `.ci/run` checks that none is missing).
#[cfg(doctest)]
pub mod docs_doctests {
    /// `docs/balance.md`: several endpoints behind `tower::balance`.
    #[doc = include_str!("../docs/balance.md")]
    pub struct Balance;
    /// `docs/fleet.md`: a fleet of replicas.
    #[doc = include_str!("../docs/fleet.md")]
    pub struct Fleet;
    /// `docs/llm-stack.md`: the LLM client, layer by layer.
    #[doc = include_str!("../docs/llm-stack.md")]
    pub struct LlmStack;
    /// `docs/mcp.md`: MCP tool servers.
    #[doc = include_str!("../docs/mcp.md")]
    pub struct Mcp;
}
