//! The instant a wait from now ends.

use std::time::{Duration, Instant};

/// The longest wait a time is set for: a century. A wait that long means "not by time".
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + wait`, at most [`LONGEST_WAIT`] from now.
pub(crate) fn later(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait.min(LONGEST_WAIT)).unwrap_or(now)
}
