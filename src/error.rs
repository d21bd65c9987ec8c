//! Error types.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::machine::{NextProbe, Reason, Skip, State};

pub use crate::machine::ConfigError;

/// The boxed error a [`CircuitBreaker`](crate::CircuitBreaker) returns, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The call was not made and no fallback is set.
///
/// It comes boxed in a [`BoxError`]; find it with `err.downcast_ref::<Rejected>()`. It
/// says why and when the breaker will next let a probe through.
///
/// ```
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::{error::Rejected, CircuitBreakerLayer, Reason};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().name("search").build()?;
/// layer.handle().kill_switch().kill();
/// let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>(()) }));
/// let err = svc.ready().await?.call(()).await.unwrap_err();
/// let rejected = err.downcast_ref::<Rejected>().unwrap();
/// assert_eq!(rejected.reason(), Reason::Killed);
/// assert_eq!(err.to_string(), "circuit breaker `search` skipped the call: the kill switch is on");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Rejected {
    name: Arc<str>,
    skip: Skip,
}

impl Rejected {
    pub(crate) fn new(name: Arc<str>, skip: Skip) -> Self {
        Rejected { name, skip }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the call was not made.
    pub fn reason(&self) -> Reason {
        self.skip.reason
    }

    /// The breaker's state when the call arrived.
    pub fn state(&self) -> State {
        self.skip.state
    }

    /// When the next probe may go.
    pub fn next_probe(&self) -> NextProbe {
        self.skip.next_probe
    }

    /// How long from `now` until a probe may go, when the wait is known in time.
    pub fn retry_after_from(&self, now: Instant) -> Option<Duration> {
        self.skip.next_probe.retry_after(now)
    }

    /// How many calls until the probe (1: the next call), when the cooldown counts calls.
    pub fn calls_until_probe(&self) -> Option<u64> {
        self.skip.next_probe.calls()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker `{}` skipped the call: ", self.name)?;
        match self.skip.reason {
            Reason::Killed => return f.write_str("the kill switch is on"),
            Reason::ForcedOpen => return f.write_str("it was forced open"),
            Reason::HalfOpenFull => return f.write_str("a probe is under way"),
            Reason::Open => f.write_str("it is open")?,
            other => write!(f, "{}", other.as_str().replace('_', " "))?,
        }
        match self.skip.next_probe {
            NextProbe::After { calls, at } => {
                write!(
                    f,
                    "; next probe in {calls} call{}",
                    if calls == 1 { "" } else { "s" }
                )?;
                if let Some(at) = at {
                    let wait = at.saturating_duration_since(crate::shared::now());
                    write!(f, ", not before {wait:?} from now")?;
                }
                Ok(())
            }
            NextProbe::Manual => f.write_str("; closed only by a reset"),
            NextProbe::InFlight | NextProbe::NotNeeded => Ok(()),
        }
    }
}

impl std::error::Error for Rejected {}
