//! What a breaker tells the world: its [`State`], why a call was skipped ([`Reason`],
//! [`Skip`]), when it will probe ([`NextProbe`]), and its changes of state
//! ([`Transition`], [`Cause`]).

// Each `#[inline(always)]` here pays in the awaited benchmark (the door and the state
// words: docs/performance.md, "Inlining").
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::breaker::nanos::Nanos;
use crate::breaker::settings::Mode;

/// A `Display` by the name `as_str` gives, for the enums a breaker reports by name.
macro_rules! display_by_name {
    ($($name:ty),+) => {$(
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

display_by_name!(State, Reason, Cause);

/// The state of a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum State {
    /// Healthy: calls go through and failures are counted.
    Closed,
    /// Broken: calls are not made; the fallback answers.
    Open,
    /// Maybe recovered: a limited number of probes go through, everyone else gets the
    /// fallback.
    HalfOpen,
    /// Opened by a person through the handle: no probe until a reset, or until the time
    /// the person gave.
    ForcedOpen,
}

impl State {
    const ALL: [State; 4] = [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::ForcedOpen,
    ];

    /// Two bits, where a state is packed into a word.
    #[inline(always)]
    pub(in crate::breaker) fn code(self) -> u64 {
        self as u64
    }

    /// The state of [`State::code`]'s two bits.
    #[inline(always)]
    pub(in crate::breaker) fn from_code(code: u64) -> State {
        Self::ALL[(code & 3) as usize]
    }

    /// `closed`, `open`, `half_open` or `forced_open`.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
        }
    }
}

/// Why a breaker did not make a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Reason {
    /// The breaker is open and its cooldown has not passed.
    Open,
    /// The breaker is half-open and every probe slot is taken.
    HalfOpenFull,
    /// A person turned the kill switch on.
    Killed,
    /// A person forced the breaker open (until a reset, or for a time).
    ForcedOpen,
}

impl Reason {
    const ALL: [Reason; 4] = [
        Reason::Open,
        Reason::HalfOpenFull,
        Reason::Killed,
        Reason::ForcedOpen,
    ];

    /// Two bits, where a reason is packed into a word.
    #[inline(always)]
    pub(in crate::breaker) fn code(self) -> u64 {
        self as u64
    }

    /// The reason of [`Reason::code`]'s two bits.
    #[inline(always)]
    pub(in crate::breaker) fn from_code(code: u64) -> Reason {
        Self::ALL[(code & 3) as usize]
    }

    /// `open`, `half_open_full`, `killed` or `forced_open`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Open => "open",
            Reason::HalfOpenFull => "half_open_full",
            Reason::Killed => "killed",
            Reason::ForcedOpen => "forced_open",
        }
    }
}

/// When a breaker will next let a probe through.
///
/// Its instants are `std::time::Instant`s on the breaker's clock, `tokio::time`: pass
/// `tokio::time::Instant::now().into_std()` as `now` to
/// [`retry_after`](Self::retry_after). It reads the same as `std::time::Instant::now()`
/// unless tokio's clock is paused or advanced (`start_paused` tests), where only tokio's
/// is right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextProbe {
    /// The breaker is closed: calls go through, no probe is needed.
    NotNeeded,
    /// Every probe slot is taken; their outcome decides.
    InFlight,
    /// The probe will be the `calls`-th call from now (1 is the next call), and not
    /// before `at`.
    After {
        /// Counting the next call as 1.
        calls: u64,
        /// The earliest time, when the wait is in time (a cooldown in time, a wait the
        /// service asked for, a person's hold).
        at: Option<Instant>,
    },
    /// Nothing is scheduled: only a person ends this (forced open until a reset, a
    /// permanent failure, the kill switch).
    Manual,
}

impl NextProbe {
    /// How long from `now` until a probe may go, when that is known in time: the wait
    /// for a time gate (with a call gate too, the time is a lower bound), zero when the
    /// next call is the probe, `None` when only calls, a probe under way or a person
    /// decide.
    pub fn retry_after(&self, now: Instant) -> Option<Duration> {
        match *self {
            NextProbe::After { at: Some(at), .. } => Some(at.saturating_duration_since(now)),
            NextProbe::After { calls: 1, at: None } => Some(Duration::ZERO),
            _ => None,
        }
    }

    /// How many calls until the probe (1: the next call), when scheduled.
    pub fn calls(&self) -> Option<u64> {
        match *self {
            NextProbe::After { calls, .. } => Some(calls),
            _ => None,
        }
    }

    /// This next probe in words, as a rejection and a transition end, its wait measured
    /// from `from`: "; next probe in 30s", "; next probe in 1 call", "; next probe in 3
    /// calls, and not before 5s", "; closed only by a reset" (nothing scheduled), or
    /// nothing (closed, or a probe under way).
    pub(in crate::breaker) fn tell(self, f: &mut fmt::Formatter<'_>, from: Instant) -> fmt::Result {
        let (calls, at) = match self {
            NextProbe::After { calls, at } => (calls, at),
            NextProbe::Manual => return f.write_str("; closed only by a reset"),
            NextProbe::InFlight | NextProbe::NotNeeded => return Ok(()),
        };
        // A wait that has passed by `from` (a rejection read after it) is no wait.
        let wait = at
            .map(|at| at.saturating_duration_since(from))
            .filter(|wait| !wait.is_zero());
        f.write_str("; next probe in ")?;
        match (calls, wait) {
            // A wait in time alone: the first call once it is over.
            (1, Some(wait)) => write!(f, "{wait:?}"),
            (1, None) => f.write_str("1 call"),
            (calls, None) => write!(f, "{calls} calls"),
            (calls, Some(wait)) => write!(f, "{calls} calls, and not before {wait:?}"),
        }
    }
}

/// A call that was not made, and what its caller is told: why, the state it found, and
/// when the breaker will next let a probe through.
///
/// Two words, so that the path of a skipped call moves it in registers.
///
/// ```
/// use tower_circuit_breaker::{NextProbe, Reason, Skip, State};
///
/// let skip = Skip::new(Reason::Open, State::Open, NextProbe::After { calls: 3, at: None });
/// assert_eq!((skip.reason(), skip.state()), (Reason::Open, State::Open));
/// assert_eq!(skip.next_probe().calls(), Some(3));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Skip {
    /// Bit 0 set; 1-2 the reason; 3-4 the state; 5-6 the kind of next probe; 7 the
    /// service asked to wait longer ([`Skip::asked_longer`]); from 8, the calls until
    /// the probe.
    bits: NonZeroU64,
    /// When the probe may go, as [`Nanos`]; [`Skip::NO_TIME`]: no time.
    at: i64,
}

impl Skip {
    const NO_TIME: i64 = i64::MIN;
    const NOT_NEEDED: u64 = 0;
    const IN_FLIGHT: u64 = 1;
    const AFTER: u64 = 2;
    const MANUAL: u64 = 3;
    /// The most calls until a probe a skip can tell; no cooldown is longer
    /// ([`Cooldown::MAX_CALLS`](crate::Cooldown::MAX_CALLS)).
    const CALLS: u64 = crate::Cooldown::MAX_CALLS;
    const ASKED_LONGER: u64 = 1 << 7;

    #[inline(always)]
    fn pack(reason: Reason, state: State, kind: u64, calls: u64, at: Option<Nanos>) -> Skip {
        let bits =
            1 | reason.code() << 1 | state.code() << 3 | kind << 5 | calls.min(Self::CALLS) << 8;
        Skip {
            bits: NonZeroU64::MIN.saturating_add(bits - 1),
            at: at.map_or(Self::NO_TIME, |at| at.0),
        }
    }

    /// A skip for this reason, in this state, told this about the next probe.
    #[inline(always)]
    pub fn new(reason: Reason, state: State, next_probe: NextProbe) -> Skip {
        let (kind, calls, at) = match next_probe {
            NextProbe::NotNeeded => (Self::NOT_NEEDED, 0, None),
            NextProbe::InFlight => (Self::IN_FLIGHT, 0, None),
            NextProbe::Manual => (Self::MANUAL, 0, None),
            NextProbe::After { calls, at } => (Self::AFTER, calls, at.map(Nanos::of)),
        };
        Self::pack(reason, state, kind, calls, at)
    }

    /// The probe is the `calls`-th call from now, not before `at`; `asked_longer`: the
    /// service asked to wait longer than that.
    #[inline(always)]
    pub(in crate::breaker) fn waiting(
        reason: Reason,
        state: State,
        calls: u64,
        at: Option<Nanos>,
        asked_longer: bool,
    ) -> Skip {
        let mut skip = Self::pack(reason, state, Self::AFTER, calls, at);
        skip.bits |= u64::from(asked_longer) * Self::ASKED_LONGER;
        skip
    }

    /// The skip in its two words: its flags and calls until the probe, and its time.
    #[inline(always)]
    pub(in crate::breaker) fn words(self) -> (u64, i64) {
        (self.bits.get(), self.at)
    }

    /// The skip of [`words`](Self::words).
    #[inline(always)]
    pub(in crate::breaker) fn from_words(bits: u64, at: i64) -> Skip {
        Skip {
            bits: NonZeroU64::MIN.saturating_add((bits | 1) - 1),
            at,
        }
    }

    /// Whether the service asked to wait longer than this skip's next probe: a
    /// `Retry-After` above the breaker's
    /// [`max_retry_after`](crate::Builder::max_retry_after) (a monthly spend limit's
    /// days). The breaker probes at its cap all the same, so as not to wait days on a
    /// misconfigured server; the time the service asked for is the breaker's
    /// [`Snapshot::requested_until`](crate::snapshot::Snapshot::requested_until). A skip
    /// made with [`Skip::new`] says `false`.
    #[inline]
    pub fn asked_longer(&self) -> bool {
        self.bits.get() & Self::ASKED_LONGER != 0
    }

    /// Whether the breaker that skipped is held open by a failure of the service's own
    /// ([`Failure::permanent`](crate::Failure::permanent)) until a person resets it:
    /// open (not killed or forced), with no probe scheduled. A caller shows that
    /// differently from a wait: trying again later does not help.
    #[inline]
    pub fn held_by_a_permanent_failure(&self) -> bool {
        self.reason() == Reason::Open && self.next_probe_kind() == Self::MANUAL
    }

    /// Which [`NextProbe`] it tells, without its time.
    #[inline(always)]
    fn next_probe_kind(&self) -> u64 {
        self.bits.get() >> 5 & 3
    }

    /// Why.
    #[inline]
    pub fn reason(&self) -> Reason {
        Reason::from_code(self.bits.get() >> 1)
    }

    /// The state the call found.
    #[inline]
    pub fn state(&self) -> State {
        State::from_code(self.bits.get() >> 3)
    }

    /// When to come back.
    #[inline]
    pub fn next_probe(&self) -> NextProbe {
        match self.next_probe_kind() {
            Self::NOT_NEEDED => NextProbe::NotNeeded,
            Self::IN_FLIGHT => NextProbe::InFlight,
            Self::MANUAL => NextProbe::Manual,
            _ => NextProbe::After {
                calls: self.bits.get() >> 8,
                at: (self.at != Self::NO_TIME).then(|| Nanos(self.at).instant()),
            },
        }
    }

    /// How long from `now` until a probe may go, when that is known in time (see
    /// [`NextProbe::retry_after`]).
    pub fn retry_after(&self, now: Instant) -> Option<Duration> {
        self.next_probe().retry_after(now)
    }
}

impl fmt::Debug for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skip")
            .field("reason", &self.reason())
            .field("state", &self.state())
            .field("next_probe", &self.next_probe())
            .field("asked_longer", &self.asked_longer())
            .finish()
    }
}

/// What a call that decides for itself would get now (see
/// [`CircuitBreakerHandle::advise`](crate::CircuitBreakerHandle::advise) and
/// [`CircuitBreakerHandle::peek`](crate::CircuitBreakerHandle::peek)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// A call now would be made.
    Call,
    /// A call now would be the probe.
    Probe,
    /// A call now would be skipped.
    Skip(Skip),
}

/// Why the state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// The trip policy's threshold was reached in closed.
    Tripped,
    /// A failure marked permanent opened the breaker until reset.
    PermanentFailure,
    /// A failure said how long to wait (an HTTP `Retry-After`), and the breaker opened
    /// at once for that long: the service asked for the wait
    /// ([`Builder::open_on_retry_after`](crate::Builder::open_on_retry_after)).
    RetryAfter,
    /// The wait passed and a call arrived: it is the probe.
    CooldownElapsed,
    /// Enough probes succeeded.
    ProbeSucceeded,
    /// A probe failed.
    ProbeFailed,
    /// Half-open lasted longer than the dwell limit (a probe hung or was never sent).
    DwellExceeded,
    /// A person forced the breaker open, until a reset or for a time.
    ForcedOpen,
    /// A hint from outside the breaker opened it for a time
    /// ([`CircuitBreakerHandle::hold_open_until`](crate::CircuitBreakerHandle::hold_open_until)).
    Hint,
    /// A person reset the breaker.
    Reset,
}

impl Cause {
    /// `tripped`, `permanent_failure`, `retry_after`, `cooldown_elapsed`,
    /// `probe_succeeded`, `probe_failed`, `dwell_exceeded`, `forced_open`, `hint` or
    /// `reset`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::Tripped => "tripped",
            Cause::PermanentFailure => "permanent_failure",
            Cause::RetryAfter => "retry_after",
            Cause::CooldownElapsed => "cooldown_elapsed",
            Cause::ProbeSucceeded => "probe_succeeded",
            Cause::ProbeFailed => "probe_failed",
            Cause::DwellExceeded => "dwell_exceeded",
            Cause::ForcedOpen => "forced_open",
            Cause::Hint => "hint",
            Cause::Reset => "reset",
        }
    }

    /// Whether it opened the breaker.
    pub fn opens(&self) -> bool {
        matches!(
            self,
            Cause::Tripped
                | Cause::PermanentFailure
                | Cause::RetryAfter
                | Cause::ProbeFailed
                | Cause::DwellExceeded
                | Cause::ForcedOpen
                | Cause::Hint
        )
    }
}

/// One change of state, as tracing, subscribers and observers see it, in the order the
/// breaker made them.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The breaker's name.
    pub name: Arc<str>,
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// Why.
    pub cause: Cause,
    /// When, on the breaker's clock.
    pub at: Instant,
    /// The new generation. It grows with every change of state or mode, so a listener
    /// can tell which of two transitions came later.
    pub generation: u64,
    /// The mode at the time: in [`Mode::ObserveOnly`] the transition is what an enabled
    /// breaker would have done.
    pub mode: Mode,
    /// The consecutive failures counted when it happened.
    pub consecutive_failures: u32,
    /// When the breaker will next let a probe through, as of the transition.
    pub next_probe: NextProbe,
    /// When the service asked to be left alone until, if that is later than the next
    /// probe (a `Retry-After` above the breaker's cap: see
    /// [`Snapshot::requested_until`](crate::snapshot::Snapshot::requested_until)).
    pub requested_until: Option<Instant>,
}

/// One line for a person: `` circuit `search`: closed -> open (tripped, 3 consecutive
/// failures); next probe in 30s ``, waits measured from the transition; the mode is named
/// when it is not the enabled one, and a wait the service asked for beyond the next probe
/// follows it (`; next probe in 300s; the service asked to wait 259200s`).
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::{Builder, Cooldown};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = Builder::new()
///     .name("search")
///     .failure_threshold(1)
///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
///     .build()?;
/// let mut changes = layer.handle().subscribe();
/// let mut search = layer.layer(service_fn(|_: ()| async {
///     Err::<(), _>(std::io::Error::other("refused"))
/// }));
/// let _ = search.ready().await?.call(()).await;
/// assert_eq!(
///     changes.try_recv()?.to_string(),
///     "circuit `search`: closed -> open (tripped, 1 consecutive failure); next probe in 30s"
/// );
/// # Ok(()) }
/// ```
impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit `{}`: {} -> {} ({}",
            self.name, self.from, self.to, self.cause
        )?;
        // A success can trip a failure rate: then there is no run of failures to name.
        if self.cause == Cause::Tripped && self.consecutive_failures > 0 {
            let failures = self.consecutive_failures;
            let s = if failures == 1 { "" } else { "s" };
            write!(f, ", {failures} consecutive failure{s}")?;
        }
        f.write_str(")")?;
        if self.mode != Mode::Enabled {
            write!(f, " [{}]", self.mode.as_str())?;
        }
        self.next_probe.tell(f, self.at)?;
        match self.requested_until {
            Some(until) => {
                let wait = until.saturating_duration_since(self.at);
                write!(f, "; the service asked to wait {wait:?}")
            }
            None => Ok(()),
        }
    }
}

/// The last recorded failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord {
    /// When it was recorded.
    pub at: Instant,
    /// What the classifier or the error said.
    pub message: Arc<str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transition(next_probe: NextProbe, mode: Mode, cause: Cause, at: Instant) -> Transition {
        Transition {
            name: "search".into(),
            from: State::HalfOpen,
            to: State::Open,
            cause,
            at,
            generation: 4,
            mode,
            consecutive_failures: 2,
            next_probe,
            requested_until: None,
        }
    }

    #[test]
    fn a_transition_reads_as_one_line_with_its_waits_from_when_it_happened() {
        let at = Instant::now();
        let secs = Duration::from_secs;
        let cases = [
            (
                transition(
                    NextProbe::After {
                        calls: 3,
                        at: Some(at + secs(5)),
                    },
                    Mode::Enabled,
                    Cause::ProbeFailed,
                    at,
                ),
                "circuit `search`: half_open -> open (probe_failed); next probe in 3 calls, \
                 and not before 5s",
            ),
            (
                Transition {
                    from: State::Closed,
                    ..transition(
                        NextProbe::After { calls: 2, at: None },
                        Mode::ObserveOnly,
                        Cause::Tripped,
                        at,
                    )
                },
                "circuit `search`: closed -> open (tripped, 2 consecutive failures) \
                 [observe_only]; next probe in 2 calls",
            ),
            (
                transition(NextProbe::Manual, Mode::Enabled, Cause::ForcedOpen, at),
                "circuit `search`: half_open -> open (forced_open); closed only by a reset",
            ),
            (
                Transition {
                    cause: Cause::RetryAfter,
                    requested_until: Some(at + secs(3 * 24 * 3600)),
                    ..transition(
                        NextProbe::After {
                            calls: 1,
                            at: Some(at + secs(300)),
                        },
                        Mode::Enabled,
                        Cause::RetryAfter,
                        at,
                    )
                },
                "circuit `search`: half_open -> open (retry_after); next probe in 300s; \
                 the service asked to wait 259200s",
            ),
            (
                Transition {
                    from: State::Open,
                    to: State::HalfOpen,
                    consecutive_failures: 0,
                    ..transition(
                        NextProbe::InFlight,
                        Mode::Enabled,
                        Cause::CooldownElapsed,
                        at,
                    )
                },
                "circuit `search`: open -> half_open (cooldown_elapsed)",
            ),
        ];
        for (transition, expected) in cases {
            assert_eq!(transition.to_string(), expected);
        }
    }

    /// The extremes read plainly and never panic: the most calls, a wait of a century,
    /// a disabled breaker's dwell limit.
    #[test]
    fn a_transition_at_the_extremes_reads_plainly() {
        let at = Instant::now();
        let century = Duration::from_secs(100 * 365 * 24 * 3600);
        let cases = [
            (
                NextProbe::After {
                    calls: u64::MAX,
                    at: None,
                },
                Mode::Enabled,
                "; next probe in 18446744073709551615 calls",
            ),
            (
                NextProbe::After {
                    calls: 1,
                    at: Some(at + century),
                },
                Mode::Disabled,
                " [disabled]; next probe in 3153600000s",
            ),
        ];
        for (next_probe, mode, tail) in cases {
            let line = transition(next_probe, mode, Cause::DwellExceeded, at).to_string();
            assert_eq!(
                line,
                format!("circuit `search`: half_open -> open (dwell_exceeded){tail}")
            );
        }
    }

    /// A wait in time that has passed by the moment it is told from (a rejection read
    /// after the wait) is no wait: only the calls are left to tell.
    #[test]
    fn a_passed_wait_is_told_as_the_calls_left() {
        let at = Instant::now();
        let later = at + Duration::from_secs(10);
        for (calls, told) in [(1, "in 1 call"), (3, "in 3 calls")] {
            let next_probe = NextProbe::After {
                calls,
                at: Some(at),
            };
            for from in [later, at] {
                let line = transition(next_probe, Mode::Enabled, Cause::ProbeFailed, from);
                assert_eq!(
                    line.to_string(),
                    format!(
                        "circuit `search`: half_open -> open (probe_failed); next probe {told}"
                    )
                );
            }
        }
    }
}
