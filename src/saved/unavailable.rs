//! [`Unavailable`]: what a call that got no answer is told, and the stale label.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::machine::{NextProbe, Reason, Skip, State};
use crate::snapshot::Snapshot;

#[cfg(doc)]
use super::SavedFallback;

/// Why a call got no answer, and when to try again: what [`SavedFallback`] gives your
/// `unavailable` function when it has no saved answer for the request.
///
/// It is read from the breaker's [`Snapshot`] when the fallback answers, so
/// [`retry_after`](Self::retry_after) is the real time left until the breaker lets its
/// next probe through.
///
/// Its `Display` is a sentence for a person or a model:
/// `model is unavailable (its circuit breaker is open); retry after 18s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    name: Arc<str>,
    reason: Reason,
    state: State,
    next_probe: NextProbe,
    retry_after: Option<Duration>,
}

impl Unavailable {
    /// What a skipped call should be told, from the breaker's own decision for it
    /// (what a context-aware fallback receives), with the wait measured from `now`.
    pub fn from_skip(skip: &Skip, breaker: &Arc<str>, now: std::time::Instant) -> Self {
        Unavailable {
            name: breaker.clone(),
            reason: skip.reason(),
            state: skip.state(),
            next_probe: skip.next_probe(),
            retry_after: skip.next_probe().retry_after(now),
        }
    }

    /// What the snapshot says a skipped call should be told.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let reason = if snapshot.killed {
            Reason::Killed
        } else {
            match snapshot.state {
                State::ForcedOpen => Reason::ForcedOpen,
                State::HalfOpen => Reason::HalfOpenFull,
                State::Open | State::Closed => Reason::Open,
            }
        };
        let retry_after = match snapshot.next_probe {
            NextProbe::After { at: Some(at), .. } => {
                Some(at.saturating_duration_since(snapshot.taken_at))
            }
            // Counted in calls only: known in time only when the next call probes.
            NextProbe::After { calls, at: None } => (calls <= 1).then_some(Duration::ZERO),
            // Closed again since the call was skipped (a probe succeeded meanwhile).
            NextProbe::NotNeeded => Some(Duration::ZERO),
            NextProbe::InFlight | NextProbe::Manual => None,
        };
        Unavailable {
            name: snapshot.name.clone(),
            reason,
            state: snapshot.state,
            next_probe: snapshot.next_probe,
            retry_after,
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the call was not made: [`Reason::Killed`] when the kill switch is on, else
    /// from the state ([`Reason::Open`], [`Reason::HalfOpenFull`] or
    /// [`Reason::ForcedOpen`]). If the breaker closed again between the skip and this
    /// answer, [`Reason::Open`], with a zero [`retry_after`](Self::retry_after).
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The breaker's state when the fallback answered.
    pub fn state(&self) -> State {
        self.state
    }

    /// When the breaker will next let a probe through, as the snapshot said.
    pub fn next_probe(&self) -> NextProbe {
        self.next_probe
    }

    /// How long until the next probe may go: the time left of a time cooldown (or of a
    /// wait the service asked for), zero when the next call will be the probe, and
    /// `None` when no time is known: the cooldown counts calls and more than one is
    /// needed ([`calls_until_probe`](Self::calls_until_probe)), a probe is under way,
    /// or only a person can end it (the kill switch, forced open, a permanent failure).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// How many calls until the probe (1: the next call), when one is scheduled.
    pub fn calls_until_probe(&self) -> Option<u64> {
        self.next_probe.calls()
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is unavailable (", self.name)?;
        f.write_str(match self.reason {
            Reason::Killed => "the kill switch is on",
            Reason::ForcedOpen => "it was forced open",
            Reason::HalfOpenFull => "a probe is checking whether it is back",
            _ => "its circuit breaker is open",
        })?;
        f.write_str("); ")?;
        match (self.retry_after, self.next_probe) {
            (Some(wait), _) if wait.is_zero() => f.write_str("retry now"),
            (Some(wait), _) => write!(f, "retry after {}", human(ceil_secs(wait))),
            (None, NextProbe::After { calls, .. }) => {
                write!(f, "it will be tried again in {calls} calls")
            }
            (None, NextProbe::InFlight) => f.write_str("retry shortly"),
            (None, _) if self.reason == Reason::Killed => {
                f.write_str("no retry is scheduled until a person turns the kill switch off")
            }
            (None, _) => f.write_str("no retry is scheduled until a person resets it"),
        }
    }
}

/// The label to put before a saved answer served `age` after it was saved: the
/// [`Freshness::Stale`](crate::expediter::Freshness::Stale) label with the age instead
/// of the time of retrieval. The age is in whole seconds, rounded down (as HTTP's `Age`).
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::stale_label;
///
/// assert_eq!(
///     stale_label(Duration::from_millis(90_500)),
///     "[STALE DATA — saved 1m 30s ago, may not reflect current state]"
/// );
/// ```
pub fn stale_label(age: Duration) -> String {
    format!(
        "[STALE DATA — saved {} ago, may not reflect current state]",
        human(age.as_secs())
    )
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// `45s`, `1m 30s`, `2h 0m 5s`.
fn human(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}
