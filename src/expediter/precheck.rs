//! Pre-call checks: is the tool there and likely to work, before the
//! breaker is consulted?

use std::future::Future;
use std::pin::Pin;

/// What a pre-call check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Availability {
    /// Proceed to the breaker.
    Available,
    /// Proceed with caution: the tool's failure threshold is lowered by one.
    Degraded,
    /// Route away at once, without consuming the failure budget.
    Unavailable,
}

impl Availability {
    /// `available`, `degraded` or `unavailable`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Availability::Available => "available",
            Availability::Degraded => "degraded",
            Availability::Unavailable => "unavailable",
        }
    }
}

/// `available`, `degraded` or `unavailable`.
impl std::fmt::Display for Availability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A boxed future, as pre-call checks return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A pre-call check: advisory, not authoritative. A tool that passes may still fail;
/// the breaker stays the main mechanism. Results are cached until the cycle ends or a
/// systemic event (or its recovery) calls for a fresh look.
///
/// Implemented for closures returning a future:
///
/// ```
/// use tower_circuit_breaker::expediter::{Availability, ToolSpec};
///
/// let shell = ToolSpec::new("Bash")
///     .fallback("report commands that need to be run manually")
///     .precheck(|| async {
///         if std::path::Path::new("/bin/sh").exists() { Availability::Available } else { Availability::Unavailable }
///     });
/// # let _ = shell;
/// ```
pub trait PreCheck: Send + Sync {
    /// Looks at the tool.
    fn check(&self) -> BoxFuture<'_, Availability>;
}

impl<F, Fut> PreCheck for F
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Availability> + Send + 'static,
{
    fn check(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self())
    }
}
