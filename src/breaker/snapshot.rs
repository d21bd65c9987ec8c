//! A view of one breaker taken without making a call: [`Snapshot`], its running totals
//! ([`Counts`]) and its last failure ([`FailureRecord`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::breaker::settings::Mode;
use crate::breaker::state::{Advice, Cause, NextProbe, State};

pub use crate::breaker::state::FailureRecord;

#[cfg(feature = "serde")]
mod serialize;

/// Running totals. A call is counted once it is over: a skip when it is decided, a
/// call made when it ends, a reservation never used when it is dropped; a call still in
/// flight is in none of them yet. So, at every instant,
/// `arrived == made + skipped() + abandoned` and
/// `made == successes + failures + ignored + cancelled + late`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Calls that reached the breaker and are over.
    pub arrived: u64,
    /// Calls passed to the wrapped service that ended, probes and observe-only shadow
    /// calls included.
    pub made: u64,
    /// Of those, probes.
    pub probes: u64,
    /// Skipped because the breaker was open.
    pub skipped_open: u64,
    /// Skipped because every half-open probe slot was taken.
    pub skipped_half_open_full: u64,
    /// Skipped by the kill switch.
    pub skipped_killed: u64,
    /// Skipped because the breaker was forced open.
    pub skipped_forced_open: u64,
    /// Admitted (readiness reserved) but never called: the service was dropped first.
    pub abandoned: u64,
    /// Outcomes recorded as successes.
    pub successes: u64,
    /// Outcomes recorded as failures (slow calls included).
    pub failures: u64,
    /// Outcomes the classifier ignored.
    pub ignored: u64,
    /// Calls whose future was dropped before it finished.
    pub cancelled: u64,
    /// Results that arrived after the breaker had moved on (another state or mode),
    /// and were not counted towards its state.
    pub late: u64,
    /// In observe-only mode: calls an enabled breaker would have skipped.
    pub would_have_skipped: u64,
}

impl Counts {
    /// All skipped calls, whatever the reason.
    pub fn skipped(&self) -> u64 {
        self.skipped_open
            + self.skipped_half_open_full
            + self.skipped_killed
            + self.skipped_forced_open
    }
}

/// A point-in-time view of a breaker, taken without making a call.
///
/// # JSON
///
/// With the `serde` feature it serializes (for a dashboard, an admin endpoint such as
/// the `admin` feature's, a log line) in this shape, which is stable: fields may be
/// added, never renamed or removed. Every time is relative to the moment the snapshot
/// was taken, in whole milliseconds (waits rounded up, ages down), so the numbers mean
/// the same on another machine:
///
/// ```json
/// {
///   "name": "chat",
///   "state": "open",
///   "cause": "retry_after",
///   "forced_open": null,
///   "mode": "enabled",
///   "killed": false,
///   "advice": { "kind": "skip", "reason": "open" },
///   "consecutive_failures": 1,
///   "window": { "failures": 0, "calls": 0 },
///   "probes_in_flight": 0,
///   "last_failure": { "message": "429 Too Many Requests", "ago_ms": 250 },
///   "next_probe": { "kind": "after", "calls": 1, "retry_after_ms": 6750 },
///   "retry_after_ms": 6750,
///   "requested_wait_ms": null,
///   "counts": { "arrived": 12, "made": 10, "probes": 1, "skipped": 2, "skipped_open": 2,
///               "skipped_half_open_full": 0, "skipped_killed": 0, "skipped_forced_open": 0,
///               "abandoned": 0, "successes": 9, "failures": 1, "ignored": 0,
///               "cancelled": 0, "late": 0, "would_have_skipped": 0 },
///   "generation": 3
/// }
/// ```
///
/// `state` is `closed`, `open`, `half_open` or `forced_open`; `cause` is why (the
/// [`Cause`] of the transition into it, as [`Cause::as_str`] spells it; `null` for a
/// breaker closed since it was built); `forced_open` is `null` unless the state is
/// `forced_open`, then `{"until": "reset"}` ([`force_open`](crate::CircuitBreakerHandle::force_open))
/// or `{"until": "time", "ends_in_ms": 30000}` ([`open_for`](crate::CircuitBreakerHandle::open_for),
/// [`forced_until`](Self::forced_until)); `advice` is what a call now would get
/// ([`advice`](Self::advice)): `{"kind": "call"}`, `{"kind": "probe"}` or
/// `{"kind": "skip", "reason": "killed"}` (a [`Reason`](crate::Reason)), so a closed
/// breaker whose kill switch is on reads `"state": "closed"` with `"advice": {"kind":
/// "skip", "reason": "killed"}`; `mode` is `enabled`,
/// `observe_only` or `disabled`; `last_failure` is `null` before the first failure;
/// `next_probe.kind` is `after` (with `calls`, counting the next call as 1, and
/// `retry_after_ms`, `null` when only calls decide), `not_needed` (closed), `in_flight`
/// (every probe slot taken) or `manual` (only a person ends it); `retry_after_ms` is
/// [`retry_after`](Self::retry_after), `null` when no time is known;
/// `requested_wait_ms` is [`requested_wait`](Self::requested_wait): how long the service
/// asked to be left alone when that is longer than the breaker waits (a `Retry-After`
/// above the cap; `retry_after_ms` is then the cap's wait), `null` otherwise.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = CircuitBreakerLayer::builder().name("chat").build()?;
/// let handle = layer.handle();
/// handle.open_for(Duration::from_secs(30));
/// let json = serde_json::to_value(handle.snapshot())?;
/// assert_eq!(json["state"], "forced_open");
/// assert_eq!(json["forced_open"], serde_json::json!({"until": "time", "ends_in_ms": 30_000}));
/// assert_eq!(json["advice"], serde_json::json!({"kind": "skip", "reason": "forced_open"}));
/// assert_eq!(json["retry_after_ms"], 30_000);
/// assert_eq!(json["next_probe"]["kind"], "after");
/// assert_eq!(json["last_failure"], serde_json::Value::Null);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The breaker's name.
    pub name: Arc<str>,
    /// The state.
    pub state: State,
    /// Why it is in that state: the cause of the transition into it (`None`: closed since
    /// it was built). An open breaker whose cause is [`Cause::Hint`] was opened by a hint
    /// from outside (see
    /// [`hold_open_until`](crate::CircuitBreakerHandle::hold_open_until)), not by failures
    /// of its own.
    pub cause: Option<Cause>,
    /// The mode.
    pub mode: Mode,
    /// Whether the kill switch is on.
    pub killed: bool,
    /// Failures in a row since the last success.
    pub consecutive_failures: u32,
    /// The failures and calls in the failure-rate window; both 0 for the
    /// consecutive-failures policy.
    pub window: WindowCounts,
    /// Probes under way: the current half-open's, and those of an earlier half-open
    /// that still hold a slot (the siblings of a failed probe, until they end, their
    /// half-open's dwell limit passes, or a reset, a forced open or a change of mode
    /// writes them off), so an open breaker, or one closed since by other probes, may
    /// show some.
    pub probes_in_flight: u32,
    /// The last failure.
    pub last_failure: Option<FailureRecord>,
    /// Running totals.
    pub counts: Counts,
    /// When the next probe may go: exactly what a call skipped now would be told.
    pub next_probe: NextProbe,
    /// When the next probe may go once the kill switch is off: what
    /// [`next_probe`](Self::next_probe) would say now with the switch off (the same while
    /// it is off). While it is on, `next_probe` says only a person ends the skips; this
    /// says whether the revive alone does ([`NextProbe::NotNeeded`]) or the breaker still
    /// waits for its probe or a reset after it.
    pub next_probe_once_revived: NextProbe,
    /// When the service asked to be left alone until, if that is later than the next
    /// probe: a `Retry-After` above the breaker's
    /// [`max_retry_after`](crate::Builder::max_retry_after) (a monthly spend limit asks
    /// for days). The breaker still probes at its cap ([`next_probe`](Self::next_probe)),
    /// so that a misconfigured server cannot park it for days; this says what the
    /// service asked for, so that a report can say both ("the provider asked to wait 3
    /// days; next probe in 5 minutes"). A later failure's longer wait (one that arrived
    /// after the breaker opened) moves it on, never back. `None` when the breaker waits
    /// as long as the service asked, or no wait was asked, or a person holds the breaker.
    /// A skip told this opening's wait says so ([`Skip::asked_longer`](crate::Skip::asked_longer)).
    pub requested_until: Option<Instant>,
    /// What a call now would get, decided with the state and the kill switch as this
    /// snapshot shows them: what [`peek`](crate::CircuitBreakerHandle::peek) says. A
    /// closed breaker whose kill switch is on is closed, and its calls are skipped
    /// ([`Reason::Killed`](crate::Reason::Killed)): this says so.
    pub advice: Advice,
    /// When a breaker forced open for a time
    /// ([`open_for`](crate::CircuitBreakerHandle::open_for),
    /// [`open_until`](crate::CircuitBreakerHandle::open_until)) lets the next call
    /// through as the probe; `None` when it is not forced open, or forced open until a
    /// reset. Kept while the kill switch is on (then [`next_probe`](Self::next_probe)
    /// says only a person ends the skips).
    pub forced_until: Option<Instant>,
    /// The generation: it grows with every change of state or mode.
    pub generation: u64,
    /// When the snapshot was taken.
    pub taken_at: Instant,
}

impl Snapshot {
    /// How long until the next probe may go, when that is known in time.
    pub fn retry_after(&self) -> Option<Duration> {
        self.next_probe.retry_after(self.taken_at)
    }

    /// How long the service asked to be left alone from when the snapshot was taken, if
    /// longer than the breaker waits: [`requested_until`](Self::requested_until) as a
    /// wait (the truthful "retry after 3 days" beside [`retry_after`](Self::retry_after)'s
    /// next probe).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Failure, Outcome};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let three_days = Duration::from_secs(3 * 24 * 3600);
    /// let layer = CircuitBreakerLayer::builder()
    ///     .name("chat")
    ///     .max_retry_after(Duration::from_secs(300))
    ///     .build()?
    ///     .with_classifier(move |_: &Result<(), std::io::Error>| {
    ///         Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(three_days))
    ///     });
    /// let handle = layer.handle();
    /// let mut chat = layer.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>(()) }));
    /// let _ = chat.ready().await?.call(()).await;
    /// let snapshot = handle.snapshot();
    /// assert_eq!(snapshot.retry_after(), Some(Duration::from_secs(300)), "probes at the cap");
    /// assert_eq!(snapshot.requested_wait(), Some(three_days), "says what was asked");
    /// # Ok(()) }
    /// ```
    pub fn requested_wait(&self) -> Option<Duration> {
        self.requested_until
            .map(|until| until.saturating_duration_since(self.taken_at))
    }
}

/// The outcomes in a failure-rate policy's window: how many failed, of how many calls.
/// Both are 0 for the consecutive-failures policy, which keeps no window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WindowCounts {
    /// Calls in the window that failed.
    pub failures: u64,
    /// Calls in the window.
    pub calls: u64,
}
