//! The pure decision core: one breaker's state machine, with no clock, lock or I/O.
//!
//! [`Machine`] answers two questions. Before a call: may it go through, as a normal
//! call or as the probe, or must it be skipped and why ([`Machine::admit`])? After it:
//! what did its outcome change ([`Machine::record`])? Time comes in as an argument, so
//! the same machine runs under `tokio::time`, a test's fake clock, or a replay.
//!
//! The tower layer ([`CircuitBreakerLayer`](crate::CircuitBreakerLayer)) is thin
//! plumbing around it: it keeps one machine behind a lock shared by every clone of the
//! service, reads the clock, and turns admissions into calls or fallbacks.
//!
//! ```
//! use std::time::Instant;
//! use tower_circuit_breaker::machine::{Admission, Machine};
//! use tower_circuit_breaker::{Builder, Cooldown, Outcome, State};
//!
//! let config = Builder::new().failure_threshold(2).cooldown(Cooldown::Calls(2)).build_config()?;
//! let now = Instant::now();
//! let mut machine = Machine::new(config, now);
//! for _ in 0..2 {
//!     let (Admission::Call(permit), _) = machine.admit(now, false) else { unreachable!() };
//!     machine.record(permit, Outcome::failure_with("refused"), None, now);
//! }
//! assert_eq!(machine.state(), State::Open);
//! assert!(matches!(machine.admit(now, false).0, Admission::Skip(_)));
//! // The second call after the opening one is the probe.
//! let (Admission::Call(probe), _) = machine.admit(now, false) else { unreachable!() };
//! assert!(probe.is_probe());
//! machine.record(probe, Outcome::Success, None, now);
//! assert_eq!(machine.state(), State::Closed);
//! # Ok::<(), tower_circuit_breaker::ConfigError>(())
//! ```

mod config;
mod window;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::config::{Backoff, Config, ConfigError, Cooldown, Mode, RateWindow, TripPolicy};
use self::window::Window;
use crate::classify::{Failure, Outcome};

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
    /// Opened by a person through the handle: no probes until reset.
    ForcedOpen,
}

impl State {
    pub(crate) fn code(self) -> u64 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::ForcedOpen => 3,
        }
    }

    #[inline]
    pub(crate) fn from_code(code: u64) -> State {
        match code & 3 {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            _ => State::ForcedOpen,
        }
    }

    /// `closed`, `open`, `half_open` or `forced_open`: the names the lesson's trace uses.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call was not made.
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
    /// A person forced the breaker open.
    ForcedOpen,
    /// The agent's shared failure budget is used up (the expediter).
    BudgetExhausted,
    /// Several tools failed together; every call waits for recovery (the expediter).
    SystemicPause,
    /// A pre-call check said the tool is unavailable (the expediter).
    Unavailable,
}

impl Reason {
    /// A short lowercase name: `open`, `half_open_full`, `killed`, ...
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Open => "open",
            Reason::HalfOpenFull => "half_open_full",
            Reason::Killed => "killed",
            Reason::ForcedOpen => "forced_open",
            Reason::BudgetExhausted => "budget_exhausted",
            Reason::SystemicPause => "systemic_pause",
            Reason::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When an open breaker will next let a probe through.
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
        /// The earliest time, when the cooldown is in time or the service said when.
        at: Option<Instant>,
    },
    /// Nothing is scheduled: only a person ends this (forced open, a permanent failure,
    /// the kill switch).
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
}

/// Why the state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The trip policy's threshold was reached in closed.
    Tripped,
    /// A failure marked permanent opened the breaker until reset.
    PermanentFailure,
    /// The cooldown passed and a call arrived: it is the probe.
    CooldownElapsed,
    /// Enough probes succeeded.
    ProbeSucceeded,
    /// A probe failed.
    ProbeFailed,
    /// Half-open lasted longer than the dwell limit (a probe hung or was never sent).
    DwellExceeded,
    /// A person forced the breaker open.
    ForcedOpen,
    /// A person reset the breaker.
    Reset,
}

/// One change of state, as tracing, subscribers and callbacks see it.
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
    /// The new generation: results of calls admitted under an older one are ignored.
    pub generation: u64,
    /// The mode at the time: in [`Mode::ObserveOnly`] the transition is what an enabled
    /// breaker would have done.
    pub mode: Mode,
    /// The consecutive failures counted when it happened.
    pub consecutive_failures: u32,
}

/// The last recorded failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord {
    /// When it was recorded.
    pub at: Instant,
    /// The step (arrival number) of the call that failed.
    pub step: u64,
    /// What the classifier or the error said.
    pub message: Arc<str>,
}

/// Running totals. Every call that reaches the breaker is either made, skipped (by
/// reason) or abandoned: `arrived == made + skipped() + abandoned`.
///
/// # When a call is counted
///
/// A call is counted when it arrives, except on the closed state's fast path (closed,
/// enabled, consecutive failures with none counted, no slow-call rule), which is what
/// most calls take: there, as in resilience4j, a call is counted when it ends (or is
/// abandoned, or decided again), so the totals do not include such calls still in
/// flight. Counting it on arrival too would cost one more atomic write a call, which is
/// a third of what the whole path costs. Its step (arrival number) is likewise the step
/// at which it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Calls that reached the breaker (the steps of a call-counted cooldown).
    pub arrived: u64,
    /// Calls passed to the wrapped service, probes and observe-only shadow calls
    /// included.
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
    /// Results that arrived after the state had moved on, and were not counted.
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

    fn skip(&mut self, reason: Reason) {
        match reason {
            Reason::Open => self.skipped_open += 1,
            Reason::HalfOpenFull => self.skipped_half_open_full += 1,
            Reason::Killed => self.skipped_killed += 1,
            // The machine produces no other reason.
            _ => self.skipped_forced_open += 1,
        }
    }
}

/// A point-in-time view of a breaker, taken without making a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The breaker's name.
    pub name: Arc<str>,
    /// The state.
    pub state: State,
    /// The mode.
    pub mode: Mode,
    /// Whether the kill switch is on.
    pub killed: bool,
    /// Failures in a row since the last success.
    pub consecutive_failures: u32,
    /// `(failures, calls)` in the failure-rate window; `(0, 0)` for the
    /// consecutive-failures policy.
    pub window: (u32, u32),
    /// Probes under way.
    pub probes_in_flight: u32,
    /// The last failure.
    pub last_failure: Option<FailureRecord>,
    /// The step (arrival number) of the last call that succeeded. Successes carry a
    /// step, not a time: reading the clock for each success would double the cost of a
    /// call through a closed breaker. Successes of the layer's lock-free closed path
    /// are counted in batches, so there it is the step of the last one counted, exact
    /// unless calls raced.
    pub last_success_step: Option<u64>,
    /// Running totals.
    pub counts: Counts,
    /// When the next probe may go.
    pub next_probe: NextProbe,
    /// The generation: it changes with every state change.
    pub generation: u64,
    /// Calls that reached the breaker so far: the step counter. A call on the layer's
    /// lock-free closed path takes its step when it ends (see [`Counts`]).
    pub step: u64,
    /// When the snapshot was taken.
    pub taken_at: Instant,
}

impl Snapshot {
    /// How long until the next probe may go, when that is known in time.
    pub fn retry_after(&self) -> Option<Duration> {
        self.next_probe.retry_after(self.taken_at)
    }
}

/// The right to make one call, given by [`Machine::admit`]. Hand it back with
/// [`Machine::record`] once the call ends, or [`Machine::release`] if it never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    generation: u64,
    step: u64,
    probe: bool,
    state: State,
    kind: PermitKind,
    mode: Mode,
    /// Admitted by the layer's lock-free closed-state path, not by a machine.
    fast: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PermitKind {
    /// Enabled: the outcome is recorded.
    Normal,
    /// Observe-only: an enabled breaker would have skipped this call for the reason.
    Shadow(Reason),
    /// Disabled: nothing is recorded.
    Passthrough,
}

impl Permit {
    /// A normal call in the closed state of `generation`, admitted by the layer's
    /// lock-free path; its step is given when a machine adopts it.
    #[inline]
    pub(crate) fn fast(generation: u64) -> Permit {
        Permit {
            generation,
            step: 0,
            probe: false,
            state: State::Closed,
            kind: PermitKind::Normal,
            mode: Mode::Enabled,
            fast: true,
        }
    }

    /// A disabled-mode pass-through call, admitted by the layer's lock-free path.
    pub(crate) fn passthrough(generation: u64, state: State) -> Permit {
        Permit {
            generation,
            step: 0,
            probe: false,
            state,
            kind: PermitKind::Passthrough,
            mode: Mode::Disabled,
            fast: true,
        }
    }

    /// Whether the layer's lock-free path admitted it.
    #[inline]
    pub(crate) fn is_fast(&self) -> bool {
        self.fast
    }

    /// Whether this call is a half-open probe.
    #[inline]
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The state found when the call arrived (after any open to half-open change).
    #[inline]
    pub fn state(&self) -> State {
        self.state
    }

    /// In observe-only mode, the reason an enabled breaker would have skipped this call.
    #[inline]
    pub fn shadowed(&self) -> Option<Reason> {
        match self.kind {
            PermitKind::Shadow(reason) => Some(reason),
            _ => None,
        }
    }

    /// The generation the call was admitted under.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The mode the call was admitted under.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Generation and mode in one number: the permit stands while it equals the
    /// machine's [`Machine::epoch`].
    #[inline]
    pub fn epoch(&self) -> u64 {
        epoch(self.generation, self.mode())
    }

    /// The step (arrival number) of the call.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Whether its outcome is recorded at all (not in disabled mode).
    #[inline]
    pub fn is_recorded(&self) -> bool {
        self.kind != PermitKind::Passthrough
    }
}

/// A call that must not be made, and what to tell the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skip {
    /// Why.
    pub reason: Reason,
    /// The state found.
    pub state: State,
    /// When to come back.
    pub next_probe: NextProbe,
}

/// The decision for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Make the call (a probe when [`Permit::is_probe`]).
    Call(Permit),
    /// Do not make it.
    Skip(Skip),
}

/// What [`Machine::advise`] tells a caller that decides for itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// A call now would be made.
    Call,
    /// A call now would be the probe.
    Probe,
    /// A call now would be skipped; the attempt was counted as a skipped call.
    Skip(Skip),
}

/// What the layer may do without the machine's lock, as of the last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockFree {
    /// Closed, enabled, counting failures in a row with none counted, no slow-call
    /// rule: a call and its success need no lock.
    pub(crate) closed: bool,
    /// Open and enabled: calls are skipped without the lock until this gate is reached.
    pub(crate) open: Option<LockFreeGate>,
    /// Half-open, enabled, every probe slot taken: calls are skipped without the lock
    /// until the dwell limit, if there is one (`Some(None)`: none).
    pub(crate) half_open_full: Option<Option<Instant>>,
    /// Forced open and enabled: every call is skipped, without the lock.
    pub(crate) forced_open: bool,
    /// The machine's step.
    pub(crate) step: u64,
}

/// What must pass before a call is no longer skipped: a step, a time (both, if both are
/// set), or a person (`manual`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockFreeGate {
    pub(crate) step: Option<u64>,
    pub(crate) time: Option<Instant>,
    pub(crate) manual: bool,
    /// Probes still running take every slot.
    pub(crate) slots_taken: bool,
}

/// What the layer's lock-free paths counted, handed to [`Machine::absorb`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    /// Calls admitted on the closed-state path that ended in a success while it still
    /// stood: each arrived, was made and succeeded.
    pub(crate) closed_successes: u64,
    pub(crate) killed: u64,
    pub(crate) open_skips: u64,
    pub(crate) half_open_skips: u64,
    pub(crate) forced_skips: u64,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    Open(Gate),
    HalfOpen { entered_at: Instant, successes: u32 },
    ForcedOpen,
}

/// Probes still running. Those of the current half-open phase, and those of earlier
/// phases that ended (a probe failed, or a person acted) while they ran: they still
/// count against the limit, so a new half-open never adds probes on top of them. Probes
/// of a phase that outlived its dwell limit are written off (presumed hung).
#[derive(Debug, Clone, Default)]
struct Probes {
    current: u32,
    lingering: Vec<(u64, u32)>,
}

impl Probes {
    fn running(&self) -> u32 {
        self.current + self.lingering.iter().map(|(_, n)| n).sum::<u32>()
    }
}

/// What must pass before an open breaker probes.
#[derive(Debug, Clone, Copy)]
struct Gate {
    step: Option<u64>,
    time: Option<Instant>,
    manual: bool,
}

impl Gate {
    fn reached(&self, step: u64, now: Instant) -> bool {
        !self.manual && self.step.is_none_or(|s| step >= s) && self.time.is_none_or(|t| now >= t)
    }

    fn next_probe(&self, step: u64, now: Instant) -> NextProbe {
        if self.manual {
            return NextProbe::Manual;
        }
        NextProbe::After {
            calls: self.step.map_or(1, |s| s.saturating_sub(step).max(1)),
            at: self.time.filter(|t| *t > now),
        }
    }
}

/// One breaker's state machine. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Machine {
    config: Config,
    phase: Phase,
    generation: u64,
    step: u64,
    consecutive: u32,
    threshold_relief: u32,
    window: Window,
    reopens: u32,
    rng: u64,
    mode: Mode,
    probes: Probes,
    last_failure: Option<FailureRecord>,
    last_success_step: Option<u64>,
    counts: Counts,
}

impl Machine {
    /// A closed breaker with these settings; `now` starts its time windows.
    pub fn new(config: Config, now: Instant) -> Self {
        Machine {
            window: Window::new(&config.trip, now),
            rng: config.jitter_seed.unwrap_or(0x9E37_79B9_7F4A_7C15) | 1,
            mode: config.mode,
            config,
            phase: Phase::Closed,
            generation: 0,
            step: 0,
            consecutive: 0,
            threshold_relief: 0,
            reopens: 0,
            probes: Probes::default(),
            last_failure: None,
            last_success_step: None,
            counts: Counts::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The state now.
    pub fn state(&self) -> State {
        match self.phase {
            Phase::Closed => State::Closed,
            Phase::Open(_) => State::Open,
            Phase::HalfOpen { .. } => State::HalfOpen,
            Phase::ForcedOpen => State::ForcedOpen,
        }
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The generation: it changes with every change of state or mode.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Running totals.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Decides one arriving call. It is a step (for a cooldown in calls) whether it is
    /// made or skipped. With `killed`, it is skipped and nothing else changes.
    ///
    /// Returns the decision and the change of state it caused, if any.
    pub fn admit(&mut self, now: Instant, killed: bool) -> (Admission, Option<Transition>) {
        if self.mode != Mode::Disabled {
            self.step += 1;
            self.counts.arrived += 1;
        }
        self.decide(now, killed)
    }

    /// What the layer's lock-free paths may do without this machine, published after
    /// every change (see `Shared`).
    pub(crate) fn lock_free(&self) -> LockFree {
        let closed = matches!(self.phase, Phase::Closed)
            && self.mode == Mode::Enabled
            && matches!(self.config.trip, TripPolicy::ConsecutiveFailures(_))
            && self.consecutive == 0
            && self.config.slow_call.is_none();
        let enabled = self.mode == Mode::Enabled;
        // Open: whether a call is skipped depends on the step and the time alone, so it
        // can be decided and counted without the lock until the gate is reached.
        let open = match self.phase {
            Phase::Open(gate) if enabled => Some(LockFreeGate {
                step: gate.step,
                time: gate.time,
                manual: gate.manual,
                slots_taken: !self.probe_slot_free(),
            }),
            _ => None,
        };
        // Half-open with every probe slot taken: a call is skipped until a probe ends
        // (which publishes again) or the dwell limit passes.
        let half_open_full = match self.phase {
            Phase::HalfOpen { entered_at, .. } if enabled && !self.probe_slot_free() => Some(
                self.config
                    .max_half_open_dwell
                    .map(|dwell| later(entered_at, dwell)),
            ),
            _ => None,
        };
        LockFree {
            closed,
            open,
            half_open_full,
            forced_open: matches!(self.phase, Phase::ForcedOpen) && enabled,
            step: self.step,
        }
    }

    /// Takes in what the layer's lock-free paths counted since the last time: each of
    /// those calls arrived and was a step.
    pub(crate) fn absorb(&mut self, counted: Counted) {
        let Counted {
            closed_successes,
            killed,
            open_skips,
            half_open_skips,
            forced_skips,
        } = counted;
        let arrived = closed_successes + killed + open_skips + half_open_skips + forced_skips;
        self.step += arrived;
        self.counts.arrived += arrived;
        self.counts.made += closed_successes;
        self.counts.successes += closed_successes;
        self.counts.skipped_killed += killed;
        self.counts.skipped_open += open_skips;
        self.counts.skipped_half_open_full += half_open_skips;
        self.counts.skipped_forced_open += forced_skips;
        // The lock-free successes came after everything the machine counted before;
        // the last of them is taken to be the last step (exact unless killed calls
        // raced with them).
        if closed_successes > 0 {
            self.last_success_step = Some(self.step);
        }
    }

    /// A call admitted on the closed-state lock-free path reaches the machine: it failed,
    /// was cancelled or abandoned, or must be decided again. Such a call is counted when
    /// the machine learns of it (see [`Counts`]): it arrives and is made now, and takes
    /// the next step if the closed state it was admitted in still stands. One that
    /// outlived that state arrived before the change, so it takes no step of the new
    /// state (a cooldown in calls counts calls that arrive after the opening).
    fn adopt(&mut self, permit: &mut Permit) {
        if !permit.fast || permit.kind == PermitKind::Passthrough {
            return;
        }
        permit.fast = false;
        self.counts.arrived += 1;
        self.counts.made += 1;
        if self.is_current(permit) {
            self.step += 1;
        }
        permit.step = self.step;
    }

    /// Advises a caller that decides for itself whether to call (an orchestrator such
    /// as the expediter), without taking a permit. If a call now would be made or be the
    /// probe, nothing changes: the call, when it comes through the layer, is admitted
    /// then. If it would be skipped, the attempt counts as an arriving, skipped call
    /// (it is a step), exactly as a skipped call through the layer would.
    pub fn advise(&mut self, now: Instant, killed: bool) -> (Advice, Option<Transition>) {
        if self.mode == Mode::Disabled && !killed {
            return (Advice::Call, None);
        }
        let transition = if killed { None } else { self.tick(now) };
        let advice = match self.phase {
            _ if killed => None,
            _ if self.mode != Mode::Enabled => Some(Advice::Call),
            Phase::Closed => Some(Advice::Call),
            Phase::Open(gate) if gate.reached(self.step + 1, now) && self.probe_slot_free() => {
                Some(Advice::Probe)
            }
            Phase::HalfOpen { .. } if self.probe_slot_free() => Some(Advice::Probe),
            _ => None,
        };
        match advice {
            Some(advice) => (advice, transition),
            None => {
                let (admission, late) = self.admit(now, killed);
                debug_assert!(late.is_none(), "a skip changes no state");
                match admission {
                    Admission::Skip(skip) => (Advice::Skip(skip), transition),
                    Admission::Call(_) => unreachable!("advise only admits calls that are skipped"),
                }
            }
        }
    }

    /// Whether a permit's outcome still counts: it was admitted in this generation
    /// (no change of state since).
    pub fn is_current(&self, permit: &Permit) -> bool {
        permit.generation == self.generation
    }

    /// Generation and mode in one number: a permit whose [`Permit::epoch`] equals it
    /// may be used as it is; otherwise it goes through [`Machine::revalidate`] before
    /// its call is made.
    #[inline]
    pub fn epoch(&self) -> u64 {
        epoch(self.generation, self.mode)
    }

    /// Decides again for a call admitted earlier whose permit may be stale (the state
    /// or the kill switch changed between admission and the call). The call is not a
    /// new step. A permit that still stands comes back as it was.
    pub fn revalidate(
        &mut self,
        mut permit: Permit,
        now: Instant,
        killed: bool,
    ) -> (Admission, Option<Transition>) {
        if !killed && permit.epoch() == self.epoch() {
            return (Admission::Call(permit), None);
        }
        self.adopt(&mut permit);
        // Keep the books balanced across a change of mode: disabled mode counts nothing.
        match (
            permit.kind == PermitKind::Passthrough,
            self.mode == Mode::Disabled,
        ) {
            (false, false) => self.undo_admission(&permit),
            (false, true) => {
                self.undo_admission(&permit);
                self.counts.abandoned += 1;
            }
            (true, false) => {
                self.step += 1;
                self.counts.arrived += 1;
            }
            (true, true) => {}
        }
        self.decide(now, killed)
    }

    /// Hands back a permit whose call ended without an outcome: `called` says whether
    /// the wrapped service was called (a cancelled call) or not (abandoned before the
    /// call). A probe slot it held is freed; nothing counts as success or failure.
    pub fn release(&mut self, mut permit: Permit, called: bool) {
        if permit.kind == PermitKind::Passthrough {
            return;
        }
        self.adopt(&mut permit);
        if called {
            self.counts.cancelled += 1;
            self.free_probe_slot(&permit);
        } else {
            self.undo_admission(&permit);
            self.counts.abandoned += 1;
        }
    }

    /// Records the outcome of a permitted call. `elapsed` is how long the call took, for
    /// the slow-call rule. A result from an older generation is counted as late and
    /// changes nothing.
    pub fn record(
        &mut self,
        mut permit: Permit,
        outcome: Outcome,
        elapsed: Option<Duration>,
        now: Instant,
    ) -> Option<Transition> {
        if permit.kind == PermitKind::Passthrough {
            return None;
        }
        self.adopt(&mut permit);
        let outcome = self.apply_slow_call_rule(outcome, elapsed);
        let shadow = matches!(permit.kind, PermitKind::Shadow(_));
        self.free_probe_slot(&permit);
        if !shadow && !self.is_current(&permit) {
            self.counts.late += 1;
            return None;
        }
        match outcome {
            Outcome::Ignored => {
                self.counts.ignored += 1;
                None
            }
            Outcome::Success => {
                self.counts.successes += 1;
                self.last_success_step = Some(permit.step);
                if shadow {
                    return None;
                }
                self.consecutive = 0;
                match self.phase {
                    Phase::Closed => {
                        self.window.push(false, now);
                        None
                    }
                    Phase::HalfOpen {
                        entered_at,
                        successes,
                    } => {
                        let successes = successes + 1;
                        if successes >= self.config.half_open_probes {
                            return self.close(now, Cause::ProbeSucceeded);
                        }
                        self.phase = Phase::HalfOpen {
                            entered_at,
                            successes,
                        };
                        None
                    }
                    Phase::Open(_) | Phase::ForcedOpen => None,
                }
            }
            Outcome::Failure(failure) => {
                self.counts.failures += 1;
                let message: Arc<str> = failure.message().unwrap_or("failure").into();
                self.last_failure = Some(FailureRecord {
                    at: now,
                    step: permit.step,
                    message,
                });
                if shadow {
                    return None;
                }
                self.consecutive = self.consecutive.saturating_add(1);
                match self.phase {
                    Phase::Closed => {
                        self.window.push(true, now);
                        if failure.is_permanent() {
                            Some(self.open(now, Cause::PermanentFailure, &failure))
                        } else if self.should_trip(now) {
                            Some(self.open(now, Cause::Tripped, &failure))
                        } else {
                            None
                        }
                    }
                    Phase::HalfOpen { .. } => {
                        self.reopens += 1;
                        let cause = if failure.is_permanent() {
                            Cause::PermanentFailure
                        } else {
                            Cause::ProbeFailed
                        };
                        Some(self.open(now, cause, &failure))
                    }
                    Phase::Open(_) | Phase::ForcedOpen => None,
                }
            }
        }
    }

    /// The outcome as the breaker counts it: a success slower than the slow-call
    /// threshold is a failure.
    pub fn apply_slow_call_rule(&self, outcome: Outcome, elapsed: Option<Duration>) -> Outcome {
        match (outcome, self.config.slow_call, elapsed) {
            (Outcome::Success, Some(limit), Some(took)) if took > limit => Outcome::Failure(
                Failure::new(format!("slow call: took {took:?}, limit {limit:?}")),
            ),
            (outcome, ..) => outcome,
        }
    }

    /// Whether recording this permit's outcome would count towards the state: not a
    /// late result, not an observe-only shadow call, not disabled mode.
    pub fn counts_towards_state(&self, permit: &Permit) -> bool {
        permit.kind == PermitKind::Normal && self.is_current(permit)
    }

    /// Applies what time alone changes: a half-open breaker past its dwell limit
    /// re-opens. (Open never turns half-open by itself: the next call does that.)
    pub fn tick(&mut self, now: Instant) -> Option<Transition> {
        match (self.phase, self.config.max_half_open_dwell) {
            (Phase::HalfOpen { entered_at, .. }, Some(dwell))
                if entered_at
                    .checked_add(dwell)
                    .is_some_and(|limit| now >= limit) =>
            {
                // It re-opened at the deadline, whenever somebody looks: the cooldown
                // runs from there, not from this later look.
                let deadline = entered_at + dwell;
                self.reopens += 1;
                Some(self.open(deadline, Cause::DwellExceeded, &Failure::default()))
            }
            _ => None,
        }
    }

    /// A view of the breaker at `now`; call [`Machine::tick`] first so the dwell limit
    /// is applied.
    pub fn snapshot(&self, now: Instant, killed: bool) -> Snapshot {
        Snapshot {
            name: self.config.name.clone(),
            state: self.state(),
            mode: self.mode,
            killed,
            consecutive_failures: self.consecutive,
            window: self.window.totals(now),
            probes_in_flight: self.probes.running(),
            last_failure: self.last_failure.clone(),
            last_success_step: self.last_success_step,
            counts: self.counts,
            next_probe: if killed {
                NextProbe::Manual
            } else {
                self.next_probe(now)
            },
            generation: self.generation,
            step: self.step,
            taken_at: now,
        }
    }

    /// Opens the breaker until [`Machine::reset`]; no probes are sent.
    pub fn force_open(&mut self, now: Instant) -> Option<Transition> {
        if matches!(self.phase, Phase::ForcedOpen) {
            return None;
        }
        Some(self.enter(Phase::ForcedOpen, now, Cause::ForcedOpen))
    }

    /// Lets the next call be the probe, whatever is left of the cooldown: for an
    /// orchestrator whose own schedule says it is time (the expediter after a confirmed
    /// recovery), or an operator. Only an open breaker is affected; a forced open one or
    /// one held by a permanent failure stays as it is. Returns whether it applied.
    pub fn allow_probe(&mut self) -> bool {
        match &mut self.phase {
            Phase::Open(gate) if !gate.manual => {
                gate.step = None;
                gate.time = None;
                true
            }
            _ => false,
        }
    }

    /// Closes the breaker and clears its failure counts and backoff.
    pub fn reset(&mut self, now: Instant) -> Option<Transition> {
        self.close(now, Cause::Reset)
    }

    /// Switches the mode. Calls reserved under the old mode and not yet made are
    /// decided again ([`Machine::revalidate`]); calls already made are recorded as
    /// their mode says.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Lowers the consecutive-failure threshold by `relief` (never below 1), for a tool
    /// a pre-call check found degraded. 0 restores the configured threshold.
    pub fn set_threshold_relief(&mut self, relief: u32) {
        self.threshold_relief = relief;
    }

    /// The consecutive-failure threshold in force, if that is the policy.
    pub fn failure_threshold(&self) -> Option<u32> {
        match self.config.trip {
            TripPolicy::ConsecutiveFailures(n) => {
                Some(n.saturating_sub(self.threshold_relief).max(1))
            }
            TripPolicy::FailureRate { .. } => None,
        }
    }

    fn decide(&mut self, now: Instant, killed: bool) -> (Admission, Option<Transition>) {
        let state = self.state();
        if self.mode == Mode::Disabled {
            let admission = if killed {
                Admission::Skip(Skip {
                    reason: Reason::Killed,
                    state,
                    next_probe: NextProbe::Manual,
                })
            } else {
                Admission::Call(self.permit(false, PermitKind::Passthrough))
            };
            return (admission, None);
        }
        if killed {
            self.counts.skipped_killed += 1;
            let skip = Skip {
                reason: Reason::Killed,
                state,
                next_probe: NextProbe::Manual,
            };
            return (Admission::Skip(skip), None);
        }
        let mut transition = self.tick(now);
        let slot_free = self.probes.running() < self.config.half_open_probes;
        let verdict = match self.phase {
            Phase::Closed => Ok(false),
            Phase::ForcedOpen => Err(Reason::ForcedOpen),
            Phase::Open(gate) if gate.reached(self.step, now) && slot_free => {
                let phase = Phase::HalfOpen {
                    entered_at: now,
                    successes: 0,
                };
                transition = Some(self.enter(phase, now, Cause::CooldownElapsed));
                self.probes.current = 1;
                Ok(true)
            }
            Phase::Open(_) => Err(Reason::Open),
            Phase::HalfOpen { .. } if slot_free => {
                self.probes.current += 1;
                Ok(true)
            }
            Phase::HalfOpen { .. } => Err(Reason::HalfOpenFull),
        };
        let admission = match verdict {
            Ok(probe) => {
                self.counts.made += 1;
                self.counts.probes += u64::from(probe);
                Admission::Call(self.permit(probe, PermitKind::Normal))
            }
            Err(reason) if self.mode == Mode::ObserveOnly => {
                self.counts.made += 1;
                self.counts.would_have_skipped += 1;
                Admission::Call(self.permit(false, PermitKind::Shadow(reason)))
            }
            Err(reason) => {
                self.counts.skip(reason);
                Admission::Skip(Skip {
                    reason,
                    state: self.state(),
                    next_probe: self.next_probe(now),
                })
            }
        };
        (admission, transition)
    }

    fn permit(&self, probe: bool, kind: PermitKind) -> Permit {
        Permit {
            generation: self.generation,
            step: self.step,
            probe,
            state: self.state(),
            kind,
            mode: self.mode,
            fast: false,
        }
    }

    /// Takes back what admitting this permit counted.
    fn undo_admission(&mut self, permit: &Permit) {
        match permit.kind {
            PermitKind::Passthrough => return,
            PermitKind::Shadow(_) => self.counts.would_have_skipped -= 1,
            PermitKind::Normal => {}
        }
        self.counts.made -= 1;
        if permit.probe {
            self.counts.probes -= 1;
        }
        self.free_probe_slot(permit);
    }

    /// A probe's call ended (or never happened): its slot is free again, whichever
    /// half-open phase it belonged to. A written-off probe holds no slot.
    fn free_probe_slot(&mut self, permit: &Permit) {
        if !permit.probe || permit.kind != PermitKind::Normal {
            return;
        }
        if self.is_current(permit) {
            self.probes.current = self.probes.current.saturating_sub(1);
        } else if let Some(i) = self
            .probes
            .lingering
            .iter()
            .position(|(g, _)| *g == permit.generation)
        {
            self.probes.lingering[i].1 -= 1;
            if self.probes.lingering[i].1 == 0 {
                self.probes.lingering.swap_remove(i);
            }
        }
    }

    fn next_probe(&self, now: Instant) -> NextProbe {
        match self.phase {
            _ if self.mode == Mode::Disabled => NextProbe::NotNeeded,
            Phase::Closed => NextProbe::NotNeeded,
            Phase::ForcedOpen => NextProbe::Manual,
            Phase::Open(gate) if gate.reached(self.step + 1, now) && !self.probe_slot_free() => {
                NextProbe::InFlight
            }
            Phase::Open(gate) => gate.next_probe(self.step, now),
            Phase::HalfOpen { .. } if self.probe_slot_free() => {
                NextProbe::After { calls: 1, at: None }
            }
            Phase::HalfOpen { .. } => NextProbe::InFlight,
        }
    }

    fn probe_slot_free(&self) -> bool {
        self.probes.running() < self.config.half_open_probes
    }

    fn should_trip(&self, now: Instant) -> bool {
        match self.config.trip {
            TripPolicy::ConsecutiveFailures(_) => {
                Some(self.consecutive) >= self.failure_threshold()
            }
            TripPolicy::FailureRate {
                rate,
                minimum_calls,
                ..
            } => {
                let (failures, calls) = self.window.totals(now);
                calls >= minimum_calls.max(1) && f64::from(failures) >= rate * f64::from(calls)
            }
        }
    }

    fn open(&mut self, now: Instant, cause: Cause, failure: &Failure) -> Transition {
        let mut gate = match self.cooldown() {
            Cooldown::Calls(n) => Gate {
                step: Some(self.step.saturating_add(n)),
                time: None,
                manual: false,
            },
            Cooldown::Time(d) => Gate {
                step: None,
                time: Some(later(now, d)),
                manual: false,
            },
        };
        if let Some(hint) = failure.retry_after_hint() {
            gate.time = Some(later(now, hint.min(self.config.max_retry_after)));
        }
        gate.manual = failure.is_permanent();
        self.window.clear();
        self.enter(Phase::Open(gate), now, cause)
    }

    fn close(&mut self, now: Instant, cause: Cause) -> Option<Transition> {
        self.consecutive = 0;
        self.reopens = 0;
        self.window.clear();
        if matches!(self.phase, Phase::Closed) {
            return None;
        }
        Some(self.enter(Phase::Closed, now, cause))
    }

    fn enter(&mut self, phase: Phase, now: Instant, cause: Cause) -> Transition {
        let from = self.state();
        if matches!(self.phase, Phase::HalfOpen { .. }) {
            let running = std::mem::take(&mut self.probes.current);
            // Probes past the dwell limit are presumed hung and written off; others
            // still hold their slots until they end.
            if running > 0 && cause != Cause::DwellExceeded {
                self.probes.lingering.push((self.generation, running));
            }
        }
        self.phase = phase;
        self.generation += 1;
        Transition {
            name: self.config.name.clone(),
            from,
            to: self.state(),
            cause,
            at: now,
            generation: self.generation,
            mode: self.mode,
            consecutive_failures: self.consecutive,
        }
    }

    /// The cooldown of this opening: the base, grown by backoff for each re-open in a
    /// row, with jitter, never above the cap.
    fn cooldown(&mut self) -> Cooldown {
        let jitter = self.config.jitter;
        let factor = if jitter > 0.0 {
            1.0 + jitter * (2.0 * self.next_random() - 1.0)
        } else {
            1.0
        };
        let (backoff, reopens) = (self.config.backoff, self.reopens.min(1024) as i32);
        let grow = |base: f64| match backoff {
            Some(b) => base * b.multiplier.powi(reopens),
            None => base,
        };
        match (self.config.cooldown, self.config.backoff.map(|b| b.cap)) {
            (Cooldown::Calls(base), cap) => {
                let cap = match cap {
                    Some(Cooldown::Calls(cap)) => cap,
                    _ => u64::MAX,
                };
                let calls = (grow(base as f64) * factor).round().clamp(1.0, cap as f64);
                Cooldown::Calls(calls as u64)
            }
            (Cooldown::Time(base), cap) => {
                let cap = match cap {
                    Some(Cooldown::Time(cap)) => cap,
                    _ => Duration::MAX,
                };
                let secs = (grow(base.as_secs_f64()) * factor).max(0.0);
                Cooldown::Time(Duration::try_from_secs_f64(secs).unwrap_or(cap).min(cap))
            }
        }
    }

    /// xorshift64*: enough for jitter, and deterministic for a given seed.
    fn next_random(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

/// `now + wait`, or a century from now when that does not fit the clock: a wait that
/// long means "not by time".
fn later(now: Instant, wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(wait.min(CENTURY)).unwrap_or(now)
}

#[inline]
pub(crate) fn epoch(generation: u64, mode: Mode) -> u64 {
    let mode = match mode {
        Mode::Enabled => 0,
        Mode::ObserveOnly => 1,
        Mode::Disabled => 2,
    };
    generation << 2 | mode
}

/// The generation of an epoch.
#[inline]
pub(crate) fn epoch_generation(epoch: u64) -> u64 {
    epoch >> 2
}
