use std::fmt;
use std::time::Duration;

use tower::layer::util::Stack;
use tower::Layer;

use super::error::CooldownInCalls;
use super::service::{checked, Readiness};
use crate::{CircuitBreakerHandle, CircuitBreakerLayer};

/// Wraps services in [`Readiness`] on one breaker: place it outside that breaker's layer
/// (or use [`CircuitBreakerLayer::pending_while_open`], which does both).
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder};
/// use tower_circuit_breaker::readiness::ReadinessLayer;
/// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
///
/// let breaker = CircuitBreakerLayer::builder()
///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
///     .build()?;
/// let endpoint = ServiceBuilder::new()
///     .layer(ReadinessLayer::new(breaker.handle())?)
///     .layer(breaker)
///     .timeout(Duration::from_secs(10))
///     .service(service_fn(|_: ()| async { Ok::<_, tower::BoxError>("up") }));
/// # let _ = endpoint;
/// # Ok::<(), tower::BoxError>(())
/// ```
///
/// # Clone
///
/// Clones, and every service they make, watch the same breaker.
#[derive(Clone)]
pub struct ReadinessLayer {
    handle: CircuitBreakerHandle,
    dwell: Option<Duration>,
}

impl ReadinessLayer {
    /// A layer for services with the breaker of `handle` inside them.
    ///
    /// # Errors
    ///
    /// [`CooldownInCalls`] if the breaker's cooldown is counted in calls (see the
    /// [module docs](super#a-cooldown-in-calls-is-refused)).
    pub fn new(handle: CircuitBreakerHandle) -> Result<Self, CooldownInCalls> {
        let dwell = checked(&handle)?;
        Ok(ReadinessLayer { handle, dwell })
    }
}

impl<S> Layer<S> for ReadinessLayer {
    type Service = Readiness<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Readiness::checked(inner, self.handle.clone(), self.dwell)
    }
}

impl fmt::Debug for ReadinessLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadinessLayer")
            .field("breaker", &self.handle.name())
            .finish_non_exhaustive()
    }
}

impl<F, C> CircuitBreakerLayer<F, C> {
    /// This breaker in readiness mode, for `tower::balance`: its services are not ready
    /// while it would not make a call (open until its probe is due, half-open with its
    /// probe slots taken, forced open, killed), and wake themselves when that ends. The
    /// layer makes a [`Readiness`] around the breaker's
    /// [`CircuitBreaker`](crate::CircuitBreaker); without it, the breaker is as ready as
    /// whatever would answer. See [`readiness`](crate::readiness).
    ///
    /// # Errors
    ///
    /// [`CooldownInCalls`] if the breaker's cooldown is counted in calls: no call comes
    /// while it is not ready, so such a cooldown would never pass.
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::FutureExt;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let breaker = CircuitBreakerLayer::builder()
    ///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
    ///     .build()?;
    /// let handle = breaker.handle();
    /// let mut endpoint = breaker
    ///     .pending_while_open()?
    ///     .layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>("up") }));
    /// handle.kill_switch().kill();
    /// assert!(endpoint.ready().now_or_never().is_none(), "killed: not ready");
    /// handle.kill_switch().revive();
    /// let answer = endpoint.ready().await?.call(()).await?;
    /// assert_eq!(answer.into_inner(), "up");
    /// # Ok(()) }
    /// ```
    pub fn pending_while_open(self) -> Result<Stack<Self, ReadinessLayer>, CooldownInCalls> {
        let readiness = ReadinessLayer::new(self.handle())?;
        Ok(Stack::new(self, readiness))
    }
}
