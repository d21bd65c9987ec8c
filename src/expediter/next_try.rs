//! When a tool is tried next: [`NextTry`], the one answer every statement of it (a
//! decision's route, the status report, the offer to the model) is made from.

use std::fmt;
use std::time::{Duration, Instant};

use crate::NextProbe;

use super::decision::PauseReason;

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
    /// Once an operator turns the kill switch off: then it can be called.
    WhenRevived,
    /// Once an operator turns the kill switch off, and then `then`: what its breaker (or
    /// the expediter's hold) says of the tool with the switch off, when that is not
    /// [`Now`](Self::Now) ([`AfterReset`](Self::AfterReset) for a breaker forced open).
    WhenRevivedThen {
        /// What follows once the kill switch is off.
        then: Box<NextTry>,
    },
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
    /// The breaker's own answer, as a snapshot gives it, the kill switch aside (the
    /// snapshot's `next_probe_once_revived`).
    pub(crate) fn of_breaker(next_probe: NextProbe, taken_at: Instant) -> NextTry {
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

    /// Once revived, and then `then` (what the tool's standing is with the kill switch
    /// off): [`WhenRevived`](Self::WhenRevived) when that is [`Now`](Self::Now).
    pub(crate) fn when_revived(then: NextTry) -> NextTry {
        match then {
            NextTry::Now => NextTry::WhenRevived,
            then => NextTry::WhenRevivedThen {
                then: Box::new(then),
            },
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
            NextTry::WhenRevivedThen { then } => format!("when revived, then {}", then.short()),
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
            NextTry::WhenRevivedThen { then } => {
                write!(f, "once an operator revives it, then {then}")
            }
            NextTry::AfterReset => f.write_str("only once an operator resets it"),
            NextTry::WhenAvailable => {
                f.write_str("in a new cycle, once its pre-call check finds it available")
            }
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
        let revived = NextTry::when_revived;
        assert_eq!(
            revived(NextTry::Now).to_string(),
            "once an operator revives it"
        );
        assert_eq!(revived(NextTry::Now).short(), "when revived");
        assert_eq!(
            revived(NextTry::AfterReset).to_string(),
            "once an operator revives it, then only once an operator resets it"
        );
        assert_eq!(
            revived(NextTry::AfterReset).short(),
            "when revived, then after a reset"
        );
    }
}
