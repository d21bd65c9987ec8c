//! The state of a replica's link to Redis, as its snapshot reports it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether the replica is connected to Redis, and since when (on the breaker's clock,
/// `tokio::time`). Down, the replica works alone: its breakers and kill switches go on
/// deciding every call locally, it hears no peer and tells none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    /// Connected and subscribed; the kill keys were read when it came up.
    Up {
        /// Since when.
        since: Instant,
    },
    /// Not connected: not yet, or lost. The fleet keeps trying, with backoff.
    Down {
        /// Since when: the start, or when the link was lost.
        since: Instant,
        /// The last error.
        error: Arc<str>,
    },
}

impl LinkStatus {
    /// Whether it is up.
    pub fn is_up(&self) -> bool {
        matches!(self, LinkStatus::Up { .. })
    }

    /// How long it has been down (on the breaker's clock, `tokio::time`); `None` when it
    /// is up.
    pub fn down_for(&self) -> Option<Duration> {
        match self {
            LinkStatus::Up { .. } => None,
            LinkStatus::Down { since, .. } => {
                Some(super::clock::now().saturating_duration_since(*since))
            }
        }
    }

    /// Since when it is as it is.
    pub fn since(&self) -> Instant {
        match self {
            LinkStatus::Up { since } | LinkStatus::Down { since, .. } => *since,
        }
    }
}

/// `up` or `down for 1.5s: ERROR`.
impl fmt::Display for LinkStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkStatus::Up { .. } => f.write_str("up"),
            LinkStatus::Down { error, .. } => {
                let down_for = self.down_for().unwrap_or_default();
                write!(f, "down for {down_for:.1?}: {error}")
            }
        }
    }
}
