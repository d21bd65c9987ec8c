//! Why a tool cannot be used now, and when it is tried next: one answer for the
//! decisions' gate, the routing, the status report and the offer to the model.

use std::fmt;
use std::time::{Duration, Instant};

use crate::machine::{Cause, NextProbe, State};
use crate::snapshot::Snapshot;

use super::decision::PauseReason;
use super::precheck::Availability;
use super::recovery::RecoverySchedule;

/// Why a tool cannot be called now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "why", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Unusable {
    /// Every call pauses: the failure budget is used up, or a systemic failure waits
    /// for recovery.
    Paused {
        /// Which.
        reason: PauseReason,
    },
    /// The kill switch is on.
    Killed,
    /// A person forced its breaker open.
    ForcedOpen,
    /// Its pre-call check said it is unavailable, or its unavailability was reported
    /// from outside.
    Unavailable,
    /// Its breaker is open.
    Open,
    /// Its breaker is held open on a hint from outside it (another replica saw the tool
    /// fail), not on failures of its own here.
    Held,
    /// Its breaker is half-open: only its probe may go.
    HalfOpen,
    /// After a systemic failure, its probe waits for its turn in the recovery backoff.
    RecoveryBackoff,
    /// It stayed down: its failed probes used up their allowance of the failure budget
    /// ([`ExpediterBuilder::probe_allowance`](super::ExpediterBuilder::probe_allowance)),
    /// and it is held open, with no probe, until a new cycle or a person frees it.
    ProbesStopped,
}

impl Unusable {
    /// The state word for tables: `PAUSED`, `KILLED`, `FORCED_OPEN`, `UNAVAILABLE`,
    /// `OPEN`, `OPEN (HELD)`, `HALF_OPEN`, `OPEN (RECOVERY BACKOFF)` or
    /// `OPEN (PROBES STOPPED)`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Unusable::Paused { .. } => "PAUSED",
            Unusable::Killed => "KILLED",
            Unusable::ForcedOpen => "FORCED_OPEN",
            Unusable::Unavailable => "UNAVAILABLE",
            Unusable::Open => "OPEN",
            Unusable::Held => "OPEN (HELD)",
            Unusable::HalfOpen => "HALF_OPEN",
            Unusable::RecoveryBackoff => "OPEN (RECOVERY BACKOFF)",
            Unusable::ProbesStopped => "OPEN (PROBES STOPPED)",
        }
    }
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a tool is tried next, computed when asked from its breaker and the expediter's
/// own schedules. Calls are counted as its breaker counts them: each decision about the
/// tool that reaches its breaker counts (a skip at once, a call when it is made); a
/// recovery backoff counts decisions about any tool; looking
/// ([`Expediter::peek`](super::Expediter::peek), plans, reports) counts nothing.
///
/// Its `Display` is the end of a plain sentence for a model or a person, `it is tried
/// again {next_try}`: `in 2 calls`, `on the next call`, `in a new cycle`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "next", rename_all = "snake_case"))]
pub enum NextTry {
    /// It can be called now.
    Now,
    /// Its breaker lets the probe through on the `decisions`-th call of it from now (1:
    /// the next; skipped calls count), and not before `not_before` from the report.
    Probe {
        /// Counting the next call of it as 1.
        decisions: u64,
        /// The time still to wait, when the wait is in time.
        not_before: Option<Duration>,
    },
    /// Its probe is under way: its outcome decides.
    ProbeUnderWay,
    /// Its probe may go from the `decisions`-th call of any tool from now (the
    /// recovery backoff after a systemic failure).
    RecoveryBackoff {
        /// Counting the next call of any tool as 1.
        decisions: u64,
    },
    /// Once an operator turns the kill switch off.
    WhenRevived,
    /// Only once an operator resets its breaker.
    AfterReset,
    /// Once its pre-call check finds it available: the check runs again in the next
    /// cycle and after a systemic failure or its recovery.
    WhenAvailable,
    /// Once it is reported available again: its availability was reported from
    /// outside ([`Expediter::set_availability`](super::Expediter::set_availability)),
    /// by whoever watches it.
    WhenReported,
    /// In a new cycle, or once a person frees it
    /// ([`Expediter::resume_probes`](super::Expediter::resume_probes), a reset of its
    /// breaker): it is held open after its failed probes used up their allowance.
    WhenFreed,
    /// Every call pauses first; then `then`.
    Paused {
        /// Why every call pauses.
        reason: PauseReason,
        /// What follows once the pause ends.
        then: Box<NextTry>,
    },
}

/// `next call`, `2 calls`: for tables.
fn calls(n: u64) -> String {
    match n {
        1 => "next call".to_string(),
        n => format!("{n} calls"),
    }
}

/// `on the next call`, `in 2 calls`: for sentences.
fn in_calls(n: u64) -> String {
    match n {
        1 => "on the next call".to_string(),
        n => format!("in {n} calls"),
    }
}

impl NextTry {
    /// The breaker's own answer, as a snapshot gives it.
    pub(crate) fn of_breaker(killed: bool, next_probe: NextProbe, taken_at: Instant) -> NextTry {
        if killed {
            return NextTry::WhenRevived;
        }
        match next_probe {
            NextProbe::NotNeeded => NextTry::Now,
            NextProbe::InFlight => NextTry::ProbeUnderWay,
            NextProbe::After { calls, at } => NextTry::Probe {
                decisions: calls.max(1),
                not_before: at
                    .map(|at| at.saturating_duration_since(taken_at))
                    .filter(|wait| !wait.is_zero()),
            },
            NextProbe::Manual => NextTry::AfterReset,
        }
    }

    /// The short form, for tables.
    pub fn short(&self) -> String {
        match self {
            NextTry::Now => "—".to_string(),
            NextTry::Probe {
                decisions,
                not_before,
            } => {
                let when = calls(*decisions);
                match not_before {
                    Some(wait) => format!("{when}, >= {}s", wait.as_secs_f64().ceil()),
                    None => when,
                }
            }
            NextTry::ProbeUnderWay => "probe under way".to_string(),
            NextTry::RecoveryBackoff { decisions } => {
                format!("{} (any tool)", calls(*decisions))
            }
            NextTry::WhenRevived => "when revived".to_string(),
            NextTry::AfterReset => "after a reset".to_string(),
            NextTry::WhenAvailable => "when available".to_string(),
            NextTry::WhenReported => "when reported".to_string(),
            NextTry::WhenFreed => "new cycle or freed".to_string(),
            NextTry::Paused { reason, then } => {
                let first = match reason {
                    PauseReason::SystemicPause => "after recovery",
                    PauseReason::BudgetExhausted => "new cycle",
                };
                match **then {
                    NextTry::Now => first.to_string(),
                    ref then => format!("{first}, then {}", then.short()),
                }
            }
        }
    }
}

/// The sentence form: `it is tried again {next_try}`.
impl fmt::Display for NextTry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NextTry::Now => f.write_str("now"),
            NextTry::Probe {
                decisions,
                not_before,
            } => {
                f.write_str(&in_calls(*decisions))?;
                match not_before {
                    Some(wait) => write!(f, ", not before {}s", wait.as_secs_f64().ceil()),
                    None => Ok(()),
                }
            }
            NextTry::ProbeUnderWay => f.write_str("when the probe under way ends"),
            NextTry::RecoveryBackoff { decisions } => {
                write!(f, "{} to any tool", in_calls(*decisions))
            }
            NextTry::WhenRevived => f.write_str("once an operator revives it"),
            NextTry::AfterReset => f.write_str("only once an operator resets it"),
            NextTry::WhenAvailable => f.write_str("once its pre-call check finds it available"),
            NextTry::WhenReported => f.write_str("once it is reported available"),
            NextTry::WhenFreed => f.write_str("in a new cycle, or once a person frees it"),
            NextTry::Paused { reason, then } => {
                match reason {
                    PauseReason::SystemicPause => f.write_str("after recovery is confirmed")?,
                    PauseReason::BudgetExhausted => f.write_str("in a new cycle")?,
                }
                match **then {
                    NextTry::Now => Ok(()),
                    ref then => write!(f, ", then {then}"),
                }
            }
        }
    }
}

/// A tool's breaker as seen from outside, taken without the expediter's lock.
#[derive(Debug, Clone)]
pub(crate) struct ToolView {
    pub(crate) state: State,
    /// Open on a hint from outside, not on failures of its own.
    pub(crate) held: bool,
    pub(crate) killed: bool,
    /// When the breaker itself would let a probe through, as of the look.
    pub(crate) breaker: NextTry,
    pub(crate) generation: u64,
}

impl ToolView {
    pub(crate) fn of(snapshot: &Snapshot) -> Self {
        ToolView {
            state: snapshot.state,
            held: snapshot.cause == Some(Cause::Hint),
            killed: snapshot.killed,
            breaker: NextTry::of_breaker(snapshot.killed, snapshot.next_probe, snapshot.taken_at),
            generation: snapshot.generation,
        }
    }

    /// A closed breaker, seen at the cost of one load (its generation is not read).
    pub(crate) fn closed(killed: bool) -> Self {
        ToolView {
            state: State::Closed,
            held: false,
            killed,
            breaker: if killed {
                NextTry::WhenRevived
            } else {
                NextTry::Now
            },
            generation: 0,
        }
    }
}

/// The tools as seen before the ledger's lock, by name.
pub(crate) trait Views {
    fn view(&self, tool: &str) -> Option<&ToolView>;
}

impl Views for std::collections::HashMap<std::sync::Arc<str>, ToolView> {
    fn view(&self, tool: &str) -> Option<&ToolView> {
        self.get(tool)
    }
}

/// A few views (a tool's alternatives), searched in order.
impl Views for [(std::sync::Arc<str>, ToolView)] {
    fn view(&self, tool: &str) -> Option<&ToolView> {
        self.iter()
            .find(|(name, _)| **name == *tool)
            .map(|(_, view)| view)
    }
}

/// What the expediter knows of a tool that its breaker does not.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    /// The expediter's step.
    pub(crate) step: u64,
    /// Why every call pauses now, if it does.
    pub(crate) pause: Option<PauseReason>,
    /// The reported availability, or the cached pre-call check result.
    pub(crate) availability: Option<Availability>,
    /// Whether `availability` was reported from outside, not found by a check.
    pub(crate) reported: bool,
    /// Its recovery schedule.
    pub(crate) recovery: Option<&'a RecoverySchedule>,
    /// Held open after its failed probes used up their allowance.
    pub(crate) probes_stopped: bool,
    /// Its breaker opened on failures and has not closed since.
    pub(crate) open_on_failures: bool,
    /// The steps before the first probe once recovery is confirmed.
    pub(crate) recovery_start: u64,
}

/// Why a tool cannot be used now on its own account (none: it can, but for a pause
/// of every call), and when it is tried next (after the pause, if there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    pub(crate) unusable: Option<Unusable>,
    pub(crate) next_try: NextTry,
}

/// The rule, in the order a decision applies it: a pause, then the pre-call check,
/// then the hold after failed probes (unless the kill switch or a forced opening
/// holds the breaker), then the recovery backoff, then the tool's breaker (kill
/// switch, forced open, open, half-open).
pub(crate) fn standing(view: &ToolView, facts: &Facts<'_>) -> Standing {
    let own = own_standing(view, facts);
    let Some(reason) = facts.pause else {
        return own;
    };
    let then = match (reason, facts.recovery) {
        // Confirming recovery starts the backoff for a tool still open (and frees one
        // held after its failed probes).
        (PauseReason::SystemicPause, None) if facts.open_on_failures => NextTry::RecoveryBackoff {
            decisions: facts.recovery_start,
        },
        // The new cycle that ends the pause frees a tool held after its failed probes:
        // then its breaker decides.
        (PauseReason::BudgetExhausted, _) if own.unusable == Some(Unusable::ProbesStopped) => {
            own_standing(
                view,
                &Facts {
                    probes_stopped: false,
                    ..*facts
                },
            )
            .next_try
        }
        _ => own.next_try,
    };
    Standing {
        unusable: own.unusable,
        next_try: NextTry::Paused {
            reason,
            then: Box::new(then),
        },
    }
}

/// [`standing`] without the pause: what routing asks of an alternative.
pub(crate) fn own_standing(view: &ToolView, facts: &Facts<'_>) -> Standing {
    if facts.availability == Some(Availability::Unavailable) {
        return Standing {
            unusable: Some(Unusable::Unavailable),
            next_try: if facts.reported {
                NextTry::WhenReported
            } else {
                NextTry::WhenAvailable
            },
        };
    }
    // A person's act on its breaker is said first, as a decision says it.
    if facts.probes_stopped && !view.killed && view.state != State::ForcedOpen {
        return Standing {
            unusable: Some(Unusable::ProbesStopped),
            next_try: NextTry::WhenFreed,
        };
    }
    // The next decision takes step `facts.step + 1`.
    let next = facts.step.saturating_add(1);
    if let Some(recovery) = facts.recovery {
        if !recovery.due(next) {
            return Standing {
                unusable: Some(Unusable::RecoveryBackoff),
                next_try: NextTry::RecoveryBackoff {
                    decisions: recovery.decisions_left(facts.step),
                },
            };
        }
    }
    let unusable = if view.killed {
        Some(Unusable::Killed)
    } else {
        match view.state {
            State::Closed => None,
            State::Open if view.held => Some(Unusable::Held),
            State::Open => Some(Unusable::Open),
            State::HalfOpen => Some(Unusable::HalfOpen),
            State::ForcedOpen => Some(Unusable::ForcedOpen),
        }
    };
    let mut next_try = view.breaker.clone();
    // A due recovery probe the breaker has not been told about yet: the next decision
    // tells it, and its call is the probe.
    if facts.recovery.is_some_and(|r| !r.released()) && !view.killed && view.state == State::Open {
        next_try = NextTry::Probe {
            decisions: 1,
            not_before: None,
        };
    }
    Standing { unusable, next_try }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_try_sentences_say_what_counts() {
        let probe = NextTry::Probe {
            decisions: 3,
            not_before: Some(Duration::from_millis(1500)),
        };
        assert_eq!(probe.to_string(), "in 3 calls, not before 2s");
        assert_eq!(probe.short(), "3 calls, >= 2s");
        let next = NextTry::Probe {
            decisions: 1,
            not_before: None,
        };
        assert_eq!(next.to_string(), "on the next call");
        assert_eq!(next.short(), "next call");
        let paused = NextTry::Paused {
            reason: PauseReason::SystemicPause,
            then: Box::new(NextTry::RecoveryBackoff { decisions: 3 }),
        };
        assert_eq!(
            paused.to_string(),
            "after recovery is confirmed, then in 3 calls to any tool"
        );
        assert_eq!(paused.short(), "after recovery, then 3 calls (any tool)");
        assert_eq!(
            NextTry::WhenFreed.to_string(),
            "in a new cycle, or once a person frees it"
        );
    }
}
