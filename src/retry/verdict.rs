//! [`BreakerVerdict`]: a classifier for a retry policy placed outside a breaker.

use crate::classify::Classify;
use crate::{Answer, Outcome, Verdict};

/// Classifies a breaker's [`Answer`]s by the breaker's own verdict, for a
/// [`RetryLayer`](super::RetryLayer) placed **outside** a breaker (its place is inside;
/// see the [module docs](super)).
///
/// | Result | Outcome |
/// | --- | --- |
/// | an answer the breaker's classifier called a failure ([`Answer::is_failure`]: a 503) | failure: retried |
/// | an answer it called a success (or deferred) | success |
/// | an answer it ignored, or a fallback's answer (a skipped call, or a failed one a [`RecoverLayer`](crate::recover::RecoverLayer) answered) | ignored: never retried |
/// | an error | failure: retried, unless it is the breaker's rejection, which the policy never retries |
///
/// The breaker's verdict carries no `Retry-After` and no permanence: outside the
/// breaker, such a failure is retried after the backoff, and the breaker, which opened
/// for it, answers that attempt from its fallback (or rejects it) without calling the
/// service. Each attempt is counted by the breaker.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::retry::{BreakerVerdict, RetryLayer};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Reason, Source};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let breaker = CircuitBreakerLayer::builder()
///     .name("search")
///     .build()?
///     .with_fallback(service_fn(|_: ()| async { Ok::<_, Infallible>("unavailable") }));
/// let handle = breaker.handle();
/// handle.force_open();
/// let mut search = ServiceBuilder::new()
///     .layer(RetryLayer::builder().build()?.with_classifier(BreakerVerdict))
///     .layer(breaker)
///     .service(service_fn(|_: ()| async { Ok::<_, std::io::Error>("results") }));
/// let answer = search.ready().await?.call(()).await?;
/// assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
/// assert_eq!(handle.snapshot().counts.arrived, 1); // not retried
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerVerdict;

impl<T, E> Classify<Answer<T>, E> for BreakerVerdict {
    fn classify(&self, result: &Result<Answer<T>, E>) -> Outcome {
        match result {
            Ok(answer) => match answer.verdict() {
                Some(Verdict::Failure) => Outcome::failure(),
                Some(Verdict::Success | Verdict::Deferred) => Outcome::Success,
                Some(Verdict::Ignored) | None => Outcome::Ignored,
            },
            Err(_) => Outcome::failure(),
        }
    }
}
