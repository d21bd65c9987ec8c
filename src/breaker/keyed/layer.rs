//! The layer that wraps services in one circuit breaker per key.

use std::fmt;
use std::sync::Arc;

use tower::Layer;

use super::handle::KeyedCircuitBreakerHandle;
use super::registry::Registry;
use super::service::KeyedCircuitBreaker;
use crate::breaker::classify::DefaultClassifier;
use crate::breaker::fallback::{Fallback, NoFallback, TypedErrors, WithSkip};

/// Wraps services in one circuit breaker per key, the key taken from each request.
///
/// Build it with [`KeyedCircuitBreakerLayer::builder`] from a template [`Builder`](crate::Builder) and a
/// key function; then, as on a [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), set
/// what answers a skipped call ([`with_fallback`](Self::with_fallback); by default a
/// [`Rejected`](crate::error::Rejected) error naming the key's breaker) and what counts
/// as a failure ([`with_classifier`](Self::with_classifier)). The [module docs](crate::keyed)
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
    pub(super) registry: Arc<Registry<K>>,
    pub(super) key: KF,
    pub(super) fallback: F,
    pub(super) classifier: C,
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
    /// [`Skipped`](crate::fallback::Skipped) naming the key's breaker, why, and when it probes.
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

    /// Fails skipped calls with a typed [`CallError`](crate::error::CallError), with no
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
    /// [`Classify`](crate::classify::Classify)), for every key.
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
