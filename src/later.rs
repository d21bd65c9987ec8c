//! The instant a wait from now ends.

use std::time::{Duration, Instant};

/// `now + wait`, or a century from now when that does not fit the clock: a wait that
/// long means "not by time".
pub(crate) fn later(now: Instant, wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(wait.min(CENTURY)).unwrap_or(now)
}
