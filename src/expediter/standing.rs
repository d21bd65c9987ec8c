//! Why a tool cannot be used now, and when it is tried next: one answer for the
//! decisions' gate, the routing, the status report and the offer to the model.

use std::fmt;

use crate::State;

use super::decision::PauseReason;
use super::next_try::NextTry;
use super::precheck::Availability;
use super::recovery::RecoverySchedule;
use super::views::ToolView;

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
        (PauseReason::BudgetExhausted, _) if facts.probes_stopped => {
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
    if view.killed {
        // Once revived, the tool stands as it would with the switch off: its breaker
        // (forced open, waiting for its probe) or the hold after its failed probes may
        // still keep it.
        let revived = ToolView {
            killed: false,
            ..view.clone()
        };
        return Standing {
            unusable: Some(Unusable::Killed),
            next_try: NextTry::when_revived(own_standing(&revived, facts).next_try),
        };
    }
    let unusable = match view.state {
        State::Closed => None,
        State::Open if view.held => Some(Unusable::Held),
        State::Open => Some(Unusable::Open),
        State::HalfOpen => Some(Unusable::HalfOpen),
        State::ForcedOpen => Some(Unusable::ForcedOpen),
    };
    let mut next_try = view.breaker.clone();
    // A due recovery probe the breaker has not been told about yet: the next decision
    // tells it, and its call is the probe.
    if facts.recovery.is_some_and(|r| !r.released()) && view.state == State::Open {
        next_try = NextTry::Probe {
            decisions: 1,
            not_before: None,
        };
    }
    Standing { unusable, next_try }
}
