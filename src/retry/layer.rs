//! [`RetryLayer`]: the policy as a layer, to place inside a breaker.

use std::fmt;

use tower::Layer;

use super::policy::{Common, RetryPolicy};
use super::service::Retrying;
use crate::classify::DefaultClassifier;
use crate::recover::CloneRequests;

/// Retries the wrapped service's transient failures by a [`RetryPolicy`]; place it
/// inside the breaker (after it in a `ServiceBuilder`), and give it the breaker's
/// classifier. See the [module docs](super).
///
/// Its services are [`Retrying`]s: `tower::retry::Retry`'s loop, with the breaker asked
/// again when a retry's wait is over (see
/// [`RetryBuilder::breaker`](super::RetryBuilder::breaker)). The wrapped service must be
/// `Clone` (a `timeout` over a `reqwest::Client` is).
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::retry::RetryLayer;
/// use tower_circuit_breaker::{CircuitBreakerLayer, Outcome};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// // A status code stands in for a response: 5xx is a failure, the rest a success.
/// let classifier = |result: &Result<u16, tower::BoxError>| match result {
///     Ok(status) if *status >= 500 => Outcome::failure(),
///     Ok(_) => Outcome::Success,
///     Err(_) => Outcome::failure(),
/// };
/// let breaker = CircuitBreakerLayer::builder().name("model").build()?.with_classifier(classifier);
/// let retry = RetryLayer::builder().build()?.with_classifier(classifier);
/// let handle = breaker.handle();
/// let mut model = ServiceBuilder::new()
///     .layer(breaker)
///     .layer(retry)
///     .timeout(Duration::from_secs(30))
///     .service(service_fn(|_: ()| async { Ok::<u16, std::io::Error>(400) }));
///
/// // A caller's mistake is the service's answer: one attempt, a success to the breaker.
/// assert_eq!(*model.ready().await?.call(()).await?, 400);
/// assert_eq!(handle.snapshot().counts.successes, 1);
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones share one policy's settings, budget and jitter (see [`RetryPolicy`]).
pub struct RetryLayer<C = DefaultClassifier, K = CloneRequests> {
    policy: RetryPolicy<C, K>,
}

impl RetryLayer {
    pub(crate) fn from_common(common: Common) -> Self {
        RetryLayer {
            policy: RetryPolicy::from_common(common),
        }
    }
}

impl<C, K> RetryLayer<C, K> {
    /// Decides which results are transient failures with `classifier`: give it the
    /// breaker's, so that both agree (an `http::HttpClassifier`, say).
    pub fn with_classifier<C2>(self, classifier: C2) -> RetryLayer<C2, K> {
        RetryLayer {
            policy: self.policy.with_classifier(classifier),
        }
    }

    /// Keeps each request for a retry with `keep` instead of cloning it: for a request
    /// type that is not `Clone` (`reqwest::Request::try_clone`). A request it cannot
    /// copy is sent once and never retried.
    pub fn keep_requests_with<K2>(self, keep: K2) -> RetryLayer<C, K2> {
        RetryLayer {
            policy: self.policy.keep_requests_with(keep),
        }
    }

    /// The policy its services use.
    pub fn policy(&self) -> &RetryPolicy<C, K> {
        &self.policy
    }

    /// The policy, for `tower::retry::Retry` or `ServiceBuilder::retry`.
    pub fn into_policy(self) -> RetryPolicy<C, K> {
        self.policy
    }
}

impl<S, C: Clone, K: Clone> Layer<S> for RetryLayer<C, K> {
    type Service = Retrying<S, C, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Retrying::new(inner, self.policy.clone())
    }
}

impl<C: Clone, K: Clone> Clone for RetryLayer<C, K> {
    fn clone(&self) -> Self {
        RetryLayer {
            policy: self.policy.clone(),
        }
    }
}

impl<C, K> fmt::Debug for RetryLayer<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("policy", &self.policy)
            .finish()
    }
}
