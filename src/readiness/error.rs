//! The error of a readiness layer that cannot work on its breaker.

use std::sync::Arc;

/// A breaker whose cooldown is counted in calls cannot be made not-ready while open: no
/// call comes to a service that is not ready, so the count would never reach its probe.
/// Found when the [`ReadinessLayer`](super::ReadinessLayer) or
/// [`Readiness`](super::Readiness) is made. Give the breaker a cooldown in time
/// ([`Cooldown::Time`](crate::Cooldown::Time)).
///
/// ```
/// use tower_circuit_breaker::readiness::ReadinessLayer;
/// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
///
/// let breaker = CircuitBreakerLayer::builder().name("chat").cooldown(Cooldown::Calls(4)).build()?;
/// let refused = ReadinessLayer::new(breaker.handle()).unwrap_err();
/// assert_eq!(refused.breaker(), "chat");
/// assert_eq!(refused.calls(), 4);
/// assert_eq!(
///     refused.to_string(),
///     "breaker `chat` counts its cooldown in calls (4), which never come while it is not ready: give it a cooldown in time"
/// );
/// # Ok::<(), tower::BoxError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("breaker `{breaker}` counts its cooldown in calls ({calls}), which never come while it is not ready: give it a cooldown in time")]
pub struct CooldownInCalls {
    breaker: Arc<str>,
    calls: u64,
}

impl CooldownInCalls {
    pub(crate) fn new(breaker: Arc<str>, calls: u64) -> Self {
        CooldownInCalls { breaker, calls }
    }

    /// The breaker's name.
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// Its cooldown, in calls.
    pub fn calls(&self) -> u64 {
        self.calls
    }
}
