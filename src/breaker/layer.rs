use std::fmt;
use std::sync::Arc;

use tower::Layer;

use crate::breaker::classify::DefaultClassifier;
use crate::breaker::fallback::{Fallback, NoFallback, TypedErrors, WithSkip};
use crate::breaker::handle::CircuitBreakerHandle;
use crate::breaker::service::CircuitBreaker;
use crate::breaker::shared::Shared;

/// Wraps services in one shared circuit breaker.
///
/// Build it with [`CircuitBreakerLayer::builder`]; the builder checks the settings and
/// returns a [`ConfigError`](crate::error::ConfigError) for a bad one. Then set what answers
/// while the breaker is open ([`with_fallback`](Self::with_fallback); by default a
/// skipped call fails with [`Rejected`](crate::error::Rejected)) and what counts as a
/// failure ([`with_classifier`](Self::with_classifier); by default every `Err`).
///
/// Put a `timeout` inside the breaker (after it in a `ServiceBuilder`, as below), so that a
/// hang ends as an error the breaker counts. A timeout outside it drops the call's future
/// instead: the breaker counts the call as cancelled, not as a failure, and hangs never
/// open it.
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Source};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let breaker = CircuitBreakerLayer::builder()
///     .name("model")
///     .failure_threshold(3)
///     .cooldown(Cooldown::Time(Duration::from_secs(10)))
///     .build()?;
/// let handle = breaker.handle();
/// let breaker = breaker.with_fallback(service_fn(|_prompt: String| async {
///     Ok::<_, std::convert::Infallible>("The model is unavailable; try again shortly.".to_string())
/// }));
///
/// let mut model = ServiceBuilder::new()
///     .layer(breaker)
///     .timeout(Duration::from_secs(30))
///     .service(service_fn(|prompt: String| async move {
///         Err::<String, _>(std::io::Error::other(format!("connection refused: {prompt}")))
///     }));
///
/// for _ in 0..3 {
///     assert!(model.ready().await?.call("hi".into()).await.is_err());
/// }
/// let answer = model.ready().await?.call("hi".into()).await?;
/// assert!(matches!(answer.source(), Source::Fallback(_)));
/// assert_eq!(handle.snapshot().consecutive_failures, 3);
/// # Ok(()) }
/// ```
///
/// # With `retry`
///
/// A `retry` inside the breaker (after it in a `ServiceBuilder`) makes one outcome per
/// call, however many attempts it took: the breaker counts a failure only when every
/// attempt failed. A `retry` outside it sends each attempt through the breaker, so each
/// failed attempt counts; once the breaker opens, each further attempt fails at once
/// with [`Rejected`](crate::error::Rejected) (no fallback set) or is answered by the
/// fallback, without reaching the service. A retry policy outside should not retry a
/// `Rejected`: it can only be rejected again until the next probe
/// ([`Rejected::next_probe`](crate::error::Rejected::next_probe)).
///
/// ```
/// use std::future::{ready, Ready};
/// use tower::retry::Policy;
/// use tower::BoxError;
/// use tower_circuit_breaker::error::Rejected;
///
/// /// Retries a failed call up to its count more times, never one the breaker turned away.
/// #[derive(Clone)]
/// struct Attempts(usize);
///
/// impl<Req: Clone, Res> Policy<Req, Res, BoxError> for Attempts {
///     type Future = Ready<()>;
///     fn retry(&mut self, _: &mut Req, result: &mut Result<Res, BoxError>) -> Option<Ready<()>> {
///         match result {
///             Err(error) if error.downcast_ref::<Rejected>().is_none() && self.0 > 0 => {
///                 self.0 -= 1;
///                 Some(ready(()))
///             }
///             _ => None,
///         }
///     }
///     fn clone_request(&mut self, request: &Req) -> Option<Req> {
///         Some(request.clone())
///     }
/// }
/// ```
///
/// # Clone
///
/// Every service this layer makes, and every clone of the layer, shares one breaker:
/// one state, one count, one kill switch. Build another layer for another breaker.
pub struct CircuitBreakerLayer<F = NoFallback, C = DefaultClassifier> {
    shared: Arc<Shared>,
    fallback: F,
    classifier: C,
}

impl CircuitBreakerLayer {
    pub(in crate::breaker) fn from_shared(shared: Arc<Shared>) -> Self {
        CircuitBreakerLayer {
            shared,
            fallback: NoFallback,
            classifier: DefaultClassifier,
        }
    }
}

impl<F, C> CircuitBreakerLayer<F, C> {
    /// The handle on the breaker this layer's services share.
    pub fn handle(&self) -> CircuitBreakerHandle {
        CircuitBreakerHandle::new(self.shared.clone())
    }

    /// Answers skipped calls with `fallback`, a cloneable service with the wrapped
    /// service's response type. The answers are marked
    /// [`Source::Fallback`](crate::Source::Fallback) with the reason.
    ///
    /// A fallback that must say when to retry can hold the breaker's
    /// [`handle`](Self::handle) and read [`Snapshot::retry_after`](crate::snapshot::Snapshot::retry_after).
    pub fn with_fallback<F2>(self, fallback: F2) -> CircuitBreakerLayer<Fallback<F2>, C> {
        CircuitBreakerLayer {
            shared: self.shared,
            fallback: Fallback::new(fallback),
            classifier: self.classifier,
        }
    }

    /// Answers skipped calls with `fallback`, a cloneable service that receives each
    /// request as a [`Skipped`](crate::fallback::Skipped): the request, why it was skipped and
    /// when the next probe may go, as decided for that call.
    pub fn with_fallback_context<F2>(
        self,
        fallback: F2,
    ) -> CircuitBreakerLayer<Fallback<F2, WithSkip>, C> {
        CircuitBreakerLayer {
            shared: self.shared,
            fallback: Fallback::new(fallback),
            classifier: self.classifier,
        }
    }

    /// Fails skipped calls with a typed error, with no fallback: the services' error is
    /// [`CallError`](crate::error::CallError), either the
    /// [`Rejected`](crate::error::Rejected) of a call not made, carried by value (a
    /// rejection allocates nothing, except one naming a permanent failure), or the wrapped
    /// service's error. By default a rejection is boxed into tower's
    /// [`BoxError`](crate::error::BoxError), which code downcasts. Like
    /// [`with_fallback`](Self::with_fallback), it replaces what answered skipped calls
    /// before.
    ///
    /// ```
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::error::CallError;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Reason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let layer = CircuitBreakerLayer::builder().build()?.with_typed_errors();
    /// layer.handle().kill_switch().kill();
    /// let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>(()) }));
    /// let error = svc.ready().await?.call(()).await.unwrap_err();
    /// assert_eq!(error.rejected().map(|r| r.reason()), Some(Reason::Killed));
    /// # Ok(()) }
    /// ```
    pub fn with_typed_errors(self) -> CircuitBreakerLayer<TypedErrors, C> {
        CircuitBreakerLayer {
            shared: self.shared,
            fallback: TypedErrors,
            classifier: self.classifier,
        }
    }

    /// Decides what counts as a failure with `classifier` (see [`Classify`](crate::classify::Classify)).
    pub fn with_classifier<C2>(self, classifier: C2) -> CircuitBreakerLayer<F, C2> {
        CircuitBreakerLayer {
            shared: self.shared,
            fallback: self.fallback,
            classifier,
        }
    }
}

impl<S, F: Clone, C: Clone> Layer<S> for CircuitBreakerLayer<F, C> {
    type Service = CircuitBreaker<S, F, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(
            inner,
            self.shared.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
        )
    }
}

impl<F: Clone, C: Clone> Clone for CircuitBreakerLayer<F, C> {
    fn clone(&self) -> Self {
        CircuitBreakerLayer {
            shared: self.shared.clone(),
            fallback: self.fallback.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<F, C> fmt::Debug for CircuitBreakerLayer<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("name", &self.shared.name)
            .field("fallback", &std::any::type_name::<F>())
            .field("classifier", &std::any::type_name::<C>())
            .finish()
    }
}
