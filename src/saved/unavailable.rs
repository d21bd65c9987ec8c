//! [`Unavailable`]: what a call that got no answer is told, and the stale label.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::fallback::Skipped;
use crate::recover::Failed;
use crate::snapshot::Snapshot;
use crate::NextProbe;
use crate::Reason;
use crate::Skip;
use crate::State;

#[cfg(doc)]
use super::SavedFallback;

/// Why a call got no answer, and when to try again: what [`SavedFallback`] gives your
/// `unavailable` function when it has no saved answer for the request.
///
/// It is built from the breaker's own decision for the call (a skip), or from its state
/// right after the call failed (for a fallback that also answers failed calls, see
/// [`recover`](crate::recover)), so [`retry_after`](Self::retry_after) is the real time
/// left until the breaker lets its next probe through, and a failure that does not pass
/// by itself (an exhausted quota) is named.
///
/// Its `Display` is a sentence for a person or a model:
///
/// - `model is unavailable (its circuit breaker is open); retry after 18s`
/// - `model is unavailable: 429 Too Many Requests: insufficient_quota (the quota is
///   exhausted); it does not pass by itself, so no retry is scheduled until a person
///   resets it`
/// - `model is unavailable: the call failed (503 Service Unavailable); retry after 30s`
/// - `model is unavailable: the call failed (503 Service Unavailable)`: the breaker is
///   still closed and sets no wait; it never says "retry now" after a failure
/// - `model is unavailable (its circuit breaker is open); the next call will be its probe`
/// - `model is unavailable (its circuit breaker is open); retry after 5m 0s (the service
///   asked to wait 3d 0h 0m 0s)`: a `Retry-After` above the breaker's `max_retry_after`
///
/// For HTTP, `http::unavailable` (feature `http`) makes it a 503 with `Retry-After` and
/// an OpenAI-style error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    name: Arc<str>,
    /// `None`: the call was made, and failed.
    reason: Option<Reason>,
    state: State,
    next_probe: NextProbe,
    retry_after: Option<Duration>,
    /// The failure's message: of the call that failed, or of the permanent failure that
    /// holds the breaker open.
    failure: Option<Arc<str>>,
    permanent: bool,
    /// How long the service asked to wait, when longer than the breaker waits (a
    /// `Retry-After` above `max_retry_after`).
    requested_wait: Option<Duration>,
}

/// What a call skipped when `snapshot` was taken would be told: why, in which state,
/// and when the next probe may go.
fn skip_of(snapshot: &Snapshot) -> Skip {
    let reason = if snapshot.killed {
        Reason::Killed
    } else {
        match snapshot.state {
            State::ForcedOpen => Reason::ForcedOpen,
            State::HalfOpen => Reason::HalfOpenFull,
            State::Open | State::Closed => Reason::Open,
        }
    };
    Skip::new(reason, snapshot.state, snapshot.next_probe)
}

/// The wait the snapshot's next probe means: known in time, zero when the next call is
/// the probe (or the breaker closed again meanwhile), `None` otherwise.
fn retry_after_of(snapshot: &Snapshot) -> Option<Duration> {
    match snapshot.next_probe {
        NextProbe::After { at: Some(at), .. } => {
            Some(at.saturating_duration_since(snapshot.taken_at))
        }
        // Counted in calls only: known in time only when the next call probes.
        NextProbe::After { calls, at: None } => (calls <= 1).then_some(Duration::ZERO),
        // Closed again since the call was skipped (a probe succeeded meanwhile).
        NextProbe::NotNeeded => Some(Duration::ZERO),
        NextProbe::InFlight | NextProbe::Manual => None,
    }
}

impl Unavailable {
    /// What a skipped call should be told, from the breaker's own decision for it, with
    /// the wait measured from `now`. The skip alone cannot name a permanent failure;
    /// [`from_skipped`](Self::from_skipped) can.
    pub fn from_skip(skip: &Skip, breaker: &Arc<str>, now: std::time::Instant) -> Self {
        let next_probe = skip.next_probe();
        Unavailable {
            name: breaker.clone(),
            reason: Some(skip.reason()),
            state: skip.state(),
            next_probe,
            retry_after: next_probe.retry_after(now),
            failure: None,
            permanent: skip.held_by_a_permanent_failure(),
            requested_wait: None,
        }
    }

    /// What a skipped call should be told, from what a context-aware fallback receives:
    /// the breaker's decision for it and, when a permanent failure holds the breaker
    /// open, that failure ([`Skipped::permanent_failure`]).
    pub fn from_skipped<Request>(skipped: &Skipped<Request>, now: std::time::Instant) -> Self {
        let mut unavailable = Self::from_skip(&skipped.skip, &skipped.breaker, now);
        unavailable.failure = skipped
            .permanent_failure
            .as_ref()
            .map(|failure| failure.message.clone());
        unavailable.requested_wait = skipped
            .requested_until
            .map(|until| until.saturating_duration_since(now));
        unavailable
    }

    /// What the snapshot says a skipped call should be told.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let skip = skip_of(snapshot);
        let permanent = skip.held_by_a_permanent_failure();
        Unavailable {
            name: snapshot.name.clone(),
            reason: Some(skip.reason()),
            state: snapshot.state,
            next_probe: snapshot.next_probe,
            retry_after: retry_after_of(snapshot),
            failure: permanent
                .then_some(snapshot.last_failure.as_ref())
                .flatten()
                .map(|failure| failure.message.clone()),
            permanent,
            requested_wait: snapshot.requested_wait(),
        }
    }

    /// What a call that was made and failed should be told, from what a fallback for
    /// failed calls receives: the failure, and the breaker right after it. With the
    /// breaker still closed, no wait is known: it sets none, and a failure is no reason
    /// to call again at once.
    pub fn from_failed<Request>(failed: &Failed<Request>) -> Self {
        let snapshot = &failed.snapshot;
        let retry_after = match snapshot.next_probe {
            NextProbe::NotNeeded => None,
            _ => retry_after_of(snapshot),
        };
        Unavailable {
            name: failed.breaker.clone(),
            reason: None,
            state: snapshot.state,
            next_probe: snapshot.next_probe,
            retry_after,
            failure: failed.failure.clone(),
            permanent: skip_of(snapshot).held_by_a_permanent_failure(),
            requested_wait: snapshot.requested_wait(),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the call was not made: [`Reason::Killed`] when the kill switch is on, else
    /// from the state ([`Reason::Open`], [`Reason::HalfOpenFull`] or
    /// [`Reason::ForcedOpen`]). If the breaker closed again between the skip and this
    /// answer, [`Reason::Open`], with a zero [`retry_after`](Self::retry_after). `None`
    /// when the call was made and failed ([`is_failed_call`](Self::is_failed_call)).
    pub fn reason(&self) -> Option<Reason> {
        self.reason
    }

    /// Whether the call was made and failed, rather than skipped.
    pub fn is_failed_call(&self) -> bool {
        self.reason.is_none()
    }

    /// The breaker's state when the fallback answered.
    pub fn state(&self) -> State {
        self.state
    }

    /// When the breaker will next let a probe through.
    pub fn next_probe(&self) -> NextProbe {
        self.next_probe
    }

    /// How long until the next probe may go: the time left of a time cooldown (or of a
    /// wait the service asked for), zero when the next call will be the probe (or, for
    /// a skipped call, when the breaker has closed again since), and `None` when no time
    /// is known: the cooldown counts calls and more than one is needed
    /// ([`calls_until_probe`](Self::calls_until_probe)), a probe is under way, only a
    /// person can end it (the kill switch, forced open, a permanent failure), or the
    /// call failed and the breaker is still closed (it sets no wait).
    ///
    /// Measured when the `Unavailable` was made, on the breaker's clock (`tokio::time`);
    /// for an HTTP `Retry-After`, round it up to whole seconds (`http::retry_after_value`,
    /// feature `http`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// How long the service asked to wait (its `Retry-After`), when that is longer than
    /// the breaker waits before its probe ([`retry_after`](Self::retry_after), bounded
    /// by `max_retry_after`): a monthly spend limit's three days, say, while the breaker
    /// probes after five minutes. The text says both.
    pub fn requested_wait(&self) -> Option<Duration> {
        self.requested_wait
    }

    /// How many calls until the probe (1: the next call), when one is scheduled.
    pub fn calls_until_probe(&self) -> Option<u64> {
        self.next_probe.calls()
    }

    /// What the classifier said about the failure: of the call that failed, or of the
    /// failure that holds the breaker open until a reset (`429 Too Many Requests:
    /// insufficient_quota (the quota is exhausted)`).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Whether a failure that does not pass by itself (an exhausted quota, a revoked
    /// key) holds the breaker open: only a person's reset ends it.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// When the breaker will next let a call through, after "; " (or nothing, when the
    /// call failed and the breaker is still closed: it sets no wait, and a failure is
    /// never answered with "retry now").
    fn write_when(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.permanent && self.reason != Some(Reason::Killed) {
            if self.failure.is_some() {
                f.write_str("; it does not pass by itself, so ")?;
            } else {
                f.write_str("; ")?;
            }
            return f.write_str("no retry is scheduled until a person resets it");
        }
        match (self.retry_after, self.next_probe) {
            (Some(wait), _) if !wait.is_zero() => {
                write!(f, "; retry after {}", human(ceil_secs(wait)))?;
                match self.requested_wait {
                    Some(asked) if asked > wait => {
                        write!(
                            f,
                            " (the service asked to wait {})",
                            human(ceil_secs(asked))
                        )
                    }
                    _ => Ok(()),
                }
            }
            // Failed, and the breaker is still closed: it sets no wait.
            (_, NextProbe::NotNeeded) if self.is_failed_call() => Ok(()),
            // Skipped, and the breaker closed again since (a probe succeeded).
            (_, NextProbe::NotNeeded) => {
                f.write_str("; it has closed again since, and lets calls through")
            }
            (Some(_), _) => f.write_str("; the next call will be its probe"),
            (None, NextProbe::After { calls, .. }) => {
                write!(f, "; it will be tried again in {calls} calls")
            }
            (None, NextProbe::InFlight) => f.write_str("; retry shortly"),
            (None, _) if self.reason == Some(Reason::Killed) => {
                f.write_str("; no retry is scheduled until a person turns the kill switch off")
            }
            (None, _) => f.write_str("; no retry is scheduled until a person resets it"),
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match (self.reason, &self.failure) {
            (None, Some(failure)) => {
                write!(f, "{name} is unavailable: the call failed ({failure})")?
            }
            (None, None) => write!(f, "{name} is unavailable: the call failed")?,
            (Some(Reason::Open), Some(failure)) if self.permanent => {
                write!(f, "{name} is unavailable: {failure}")?
            }
            (Some(reason), _) => {
                let why = match reason {
                    Reason::Killed => "the kill switch is on",
                    Reason::ForcedOpen => "it was forced open",
                    Reason::HalfOpenFull => "a probe is checking whether it is back",
                    _ if self.permanent => {
                        "its circuit breaker is open after a failure that does not pass by itself"
                    }
                    _ => "its circuit breaker is open",
                };
                write!(f, "{name} is unavailable ({why})")?
            }
        }
        self.write_when(f)
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

/// Whole seconds, rounded up: a caller told to wait this long finds the wait over.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    // `Duration::MAX` (a wait too long for a float, `retry-after-ms: 1e999`) has no whole
    // second above it: it stays at the most.
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// `45s`, `1m 30s`, `2h 0m 5s`, `3d 0h 0m 0s`.
fn human(secs: u64) -> String {
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    if d > 0 {
        format!("{d}d {h}h {m}m {s}s")
    } else if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn told(next_probe: NextProbe, now: Instant) -> String {
        let skip = Skip::new(Reason::Open, State::Open, next_probe);
        Unavailable::from_skip(&skip, &Arc::from("model"), now).to_string()
    }

    #[test]
    fn the_longest_wait_rounds_up_to_the_most_seconds_without_overflowing() {
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
        assert_eq!(ceil_secs(Duration::from_millis(1500)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
    }

    #[test]
    fn a_skip_is_told_when_the_breaker_next_lets_a_call_through_and_never_retry_now() {
        let now = Instant::now();
        let cases = [
            (
                NextProbe::After { calls: 1, at: None },
                "model is unavailable (its circuit breaker is open); the next call will be its probe",
            ),
            (
                // A wait in time that has passed: the next call probes.
                NextProbe::After { calls: 1, at: Some(now) },
                "model is unavailable (its circuit breaker is open); the next call will be its probe",
            ),
            (
                NextProbe::After { calls: 1, at: Some(now + Duration::from_millis(17_001)) },
                "model is unavailable (its circuit breaker is open); retry after 18s",
            ),
            (
                NextProbe::After { calls: 4, at: None },
                "model is unavailable (its circuit breaker is open); it will be tried again in 4 calls",
            ),
            (
                NextProbe::NotNeeded,
                "model is unavailable (its circuit breaker is open); it has closed again since, and lets calls through",
            ),
        ];
        for (next_probe, text) in cases {
            assert_eq!(told(next_probe, now), text, "{next_probe:?}");
            assert!(!text.contains("now"));
        }
    }
}
