//! The gate of a decision: what it does before (or instead of) asking the tool's
//! breaker, the pause of every call first.

use std::sync::Arc;

use crate::expediter::decision::{PauseReason, SkipReason};
use crate::expediter::precheck::Availability;

use super::Ledger;

/// Why every call pauses, with the line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pause {
    pub(crate) reason: PauseReason,
    pub(crate) detail: String,
}

/// What a decision does before (or instead of) asking the tool's breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gate {
    Pause(Pause),
    Skip(SkipReason),
    /// The breaker decides. `release`: first tell it to let the next call through as
    /// the probe (a due recovery probe).
    Breaker {
        release: bool,
    },
    /// Held open after its failed probes: skipped, unless its breaker, only looked at,
    /// skips it for a person's act (the kill switch, a forced opening), which is said
    /// first.
    Held,
}

impl Ledger {
    /// The rule "is this call paused, and why": a systemic event waiting for recovery,
    /// or the failure budget used up.
    pub(crate) fn pause(&self) -> Option<Pause> {
        self.pause_reason()?;
        if let Some(event) = self.active_systemic() {
            return Some(Pause {
                reason: PauseReason::SystemicPause,
                detail: format!(
                    "{}; no calls and no probes until recovery is confirmed",
                    event.describe()
                ),
            });
        }
        let (used, limit) = (self.used(), self.budget.limit());
        (used >= limit).then(|| Pause {
            reason: PauseReason::BudgetExhausted,
            detail: format!(
                "failure budget exhausted ({used} / {limit}); calls resume with a new cycle"
            ),
        })
    }

    /// [`pause`](Self::pause) without its words.
    pub(crate) fn pause_reason(&self) -> Option<PauseReason> {
        if self.cascade.active().is_some() {
            Some(PauseReason::SystemicPause)
        } else if self.used() >= self.budget.limit() {
            Some(PauseReason::BudgetExhausted)
        } else {
            None
        }
    }

    /// The gate of a decision at `step` (the step it takes), given what the pre-call
    /// check found. The order is [`standing`](Self::standing)'s.
    pub(crate) fn gate(&self, tool: &str, availability: Availability, step: u64) -> Gate {
        if let Some(pause) = self.pause() {
            return Gate::Pause(pause);
        }
        // A reported availability stands over what a decision found (a tool without a
        // check finds nothing).
        let availability = self
            .row(tool)
            .reported
            .as_ref()
            .map_or(availability, |r| r.availability);
        if availability == Availability::Unavailable {
            return Gate::Skip(SkipReason::Unavailable);
        }
        if self.row(tool).probes_stopped {
            return Gate::Held;
        }
        match &self.row(tool).recovery {
            Some(recovery) if !recovery.due(step) => Gate::Skip(SkipReason::RecoveryBackoff),
            Some(recovery) => Gate::Breaker {
                release: !recovery.released(),
            },
            None => Gate::Breaker { release: false },
        }
    }

    /// Takes a step for a decision about `tool` and returns it with its gate; a due
    /// recovery probe is marked as let through, for the caller to tell the breaker.
    pub(crate) fn begin_decision(
        &mut self,
        tool: &Arc<str>,
        availability: Availability,
    ) -> (u64, Gate) {
        self.step = self.step.saturating_add(1);
        let step = self.step;
        let gate = self.gate(tool, availability, step);
        if gate == (Gate::Breaker { release: true }) {
            if let Some(recovery) = &mut self.row_mut(tool).recovery {
                recovery.release();
            }
        }
        (step, gate)
    }
}
