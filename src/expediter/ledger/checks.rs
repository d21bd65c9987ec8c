//! What the ledger knows of each tool's availability: its pre-call check's result,
//! and an availability reported from outside.

use std::sync::Arc;

use crate::expediter::precheck::Availability;

use super::row::{Check, Reported};
use super::Ledger;

/// What a decision should do about a tool's pre-call check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckSlot {
    /// Use this result.
    Use(Availability),
    /// Run the check now (the ledger notes that it runs); store the result with this
    /// epoch.
    Run(u64),
}

impl Ledger {
    /// What is known of the tool's availability: the availability reported from
    /// outside, if one stands, or else the cached pre-call check result.
    pub(crate) fn availability(&self, tool: &str) -> Option<Availability> {
        let row = self.row(tool);
        if let Some(reported) = &row.reported {
            return Some(reported.availability);
        }
        match row.check {
            // While a decision runs the check, others decide on what was found before
            // (`check_slot`): routing must see the same, or a tool skipped as
            // unavailable would look usable to its alternative's route.
            Check::Found(found) | Check::Running { last: Some(found) } => Some(found),
            Check::Due | Check::Running { last: None } => None,
        }
    }

    /// Why the tool's reported availability is what it is, while one stands.
    pub(crate) fn reported_why(&self, tool: &str) -> Option<&str> {
        self.row(tool).reported.as_ref().map(|r| &*r.why)
    }

    /// Reports a tool's availability from outside (`None`: clears the report, and
    /// the tool's pre-call check runs again before its next decision).
    pub(crate) fn report_availability(
        &mut self,
        tool: &Arc<str>,
        report: Option<(Availability, Arc<str>)>,
    ) {
        let row = self.row_mut(tool);
        match report {
            Some((availability, why)) => row.reported = Some(Reported { availability, why }),
            None => {
                if row.reported.take().is_some() {
                    row.check = match row.check {
                        Check::Running { .. } => Check::Running { last: None },
                        _ => Check::Due,
                    };
                }
            }
        }
    }

    /// What to do about `tool`'s pre-call check before a decision.
    pub(crate) fn check_slot(&mut self, tool: &Arc<str>) -> CheckSlot {
        let epoch = self.checks_epoch;
        let row = self.row_mut(tool);
        if let Some(reported) = &row.reported {
            return CheckSlot::Use(reported.availability);
        }
        match row.check {
            Check::Found(found) => CheckSlot::Use(found),
            // Another decision (maybe this one's own check, calling back in) runs it:
            // the breaker stays the main mechanism meanwhile.
            Check::Running { last } => CheckSlot::Use(last.unwrap_or(Availability::Available)),
            Check::Due => {
                row.check = Check::Running { last: None };
                CheckSlot::Run(epoch)
            }
        }
    }

    /// A check started at `epoch` found `found` (or, `None`, was abandoned).
    pub(crate) fn check_done(&mut self, tool: &Arc<str>, epoch: u64, found: Option<Availability>) {
        let current = self.checks_epoch == epoch;
        let row = self.row_mut(tool);
        row.check = match (found, current) {
            (Some(found), true) => Check::Found(found),
            _ => Check::Due,
        };
    }

    pub(super) fn drop_checks(&mut self) {
        self.checks_epoch = self.checks_epoch.wrapping_add(1);
        for row in self.rows.values_mut() {
            row.check = match row.check {
                Check::Running { .. } => Check::Running { last: None },
                _ => Check::Due,
            };
        }
    }
}
