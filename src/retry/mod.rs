//! A retry policy made for a breaker outside it: [`RetryLayer`] retries only what the
//! breaker's classifier calls a transient failure, with backoff, a bounded number of
//! attempts and a retry budget, and gives a long `Retry-After` back at once so that the
//! breaker opens and its fallback answers.
//!
//! Its place is inside the breaker, outside the timeout:
//! `breaker -> retry -> timeout -> client`. The breaker then counts one outcome per
//! user call, however many attempts it took: a failure only when the last attempt
//! failed.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::retry::RetryLayer;
//! use tower_circuit_breaker::{CircuitBreakerLayer, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // A status code stands in for an HTTP response (use `http::HttpClassifier` for real ones).
//! let classifier = |result: &Result<u16, tower::BoxError>| match result {
//!     Ok(status) if *status >= 500 => Outcome::failure_with(format!("status {status}")),
//!     Ok(_) => Outcome::Success,
//!     Err(_) => Outcome::failure(), // a transport error, a timeout
//! };
//! // The model answers 503 twice, then 200.
//! let calls = Arc::new(AtomicUsize::new(0));
//! let model = service_fn({
//!     let calls = calls.clone();
//!     move |_prompt: String| {
//!         let n = calls.fetch_add(1, Ordering::SeqCst);
//!         async move { Ok::<u16, std::io::Error>(if n < 2 { 503 } else { 200 }) }
//!     }
//! });
//!
//! let breaker = CircuitBreakerLayer::builder().name("model").build()?.with_classifier(classifier);
//! let handle = breaker.handle();
//! let retry = RetryLayer::builder()
//!     .max_attempts(3)
//!     .backoff(Duration::from_millis(200), Duration::from_secs(2))
//!     .max_retry_after_wait(Duration::from_secs(5))
//!     .build()?
//!     .with_classifier(classifier);
//! let mut model = ServiceBuilder::new()
//!     .layer(breaker)
//!     .layer(retry)
//!     .timeout(Duration::from_secs(30))
//!     .service(model);
//!
//! let answer = model.ready().await?.call("Hello?".into()).await?;
//! assert_eq!(*answer, 200);
//! assert_eq!(calls.load(Ordering::SeqCst), 3);
//! // One user call, one outcome: a success.
//! let counts = handle.snapshot().counts;
//! assert_eq!((counts.made, counts.successes, counts.failures), (1, 1, 0));
//! # Ok(()) }
//! ```
//!
//! # The rules, in the order they are applied to each result
//!
//! 1. A breaker's own rejection ([`Rejected`](crate::error::Rejected), a
//!    [`CallError::Rejected`](crate::error::CallError::Rejected), boxed or not) is never
//!    retried: with the policy placed outside a breaker, a skipped call would only be
//!    skipped again until the next probe. (Outside a breaker with a fallback, classify
//!    its answers with [`BreakerVerdict`]: a fallback's answer is never retried.)
//! 2. The classifier (give it the breaker's) decides the rest. A success, an ignored
//!    result, and so a caller's 4xx (`http::HttpClassifier` calls it a success: the
//!    service answered), are returned. So is a permanent failure
//!    ([`Failure::is_permanent`](crate::Failure::is_permanent): an exhausted quota). A
//!    failure (a 5xx, a 429, a transport error, a `timeout`'s `Elapsed`) may be retried.
//! 3. After [`max_attempts`](RetryBuilder::max_attempts) calls, the last result is
//!    returned.
//! 4. A failure that says how long to wait
//!    ([`Failure::requested_wait`](crate::Failure::requested_wait): `Retry-After`,
//!    `retry-after-ms`) is retried after exactly that wait when it is at most
//!    [`max_retry_after_wait`](RetryBuilder::max_retry_after_wait), and returned at once
//!    when it is longer: the breaker outside opens for that long, and its fallback
//!    answers meanwhile.
//! 5. Any other failure is retried after exponential backoff with full jitter: the n-th
//!    retry (from 0) waits a random time in `[0, min(cap, base * 2^n)]`.
//! 6. With the breaker's handle given ([`RetryBuilder::breaker`]), no retry is sent
//!    once that breaker would skip a call: opened meanwhile by other calls' failures,
//!    killed or forced open by a person, or half-open with every probe slot taken by
//!    another call (a call that started while the breaker was closed is not its probe;
//!    the probe's own retries go on). The last result is returned. A person's act ends
//!    a retry's backoff, and its wait for the service to be ready, at once. (The policy
//!    given to tower's own `Retry` through [`RetryLayer::policy`] cannot tell its call
//!    from the probe: every probe slot taken does not stop its retries.)
//! 7. Every retry is withdrawn from a retry budget (tower's
//!    [`TpsBudget`](tower::retry::budget::TpsBudget) by default) shared by every call
//!    the policy serves; each user call deposits once. A retry the budget refuses is not
//!    made, and the result is returned: under a wide outage, retries do not multiply
//!    the load.
//!
//! A request is kept for a retry by cloning it, or by your function for a type that is
//! not `Clone` ([`RetryLayer::keep_requests_with`], as
//! [`RecoverLayer::keep_requests_with`](crate::recover::RecoverLayer::keep_requests_with)
//! does); a request that cannot be kept is sent once.
//!
//! The breaker's own backoff ([`Backoff`](crate::Backoff)) grows the cooldown of an
//! opening, in calls or time, with a jitter that spreads it by a fraction; a retry's
//! wait is a time drawn from zero to its ceiling (full jitter), so the two are set
//! apart.
//!
//! # Time
//!
//! Waits are `tokio::time` sleeps, so paused-time tests run instantly.

mod builder;
mod layer;
mod policy;
mod service;
mod verdict;

pub use self::builder::{RetryBuilder, RetryConfigError};
pub use self::layer::RetryLayer;
pub use self::policy::RetryPolicy;
pub use self::service::{Retrying, RetryingFuture};
pub use self::verdict::BreakerVerdict;
pub use crate::recover::{CloneRequests, KeepRequest};
