//! A person's acts on the ledger: recovery confirmed, a new cycle, a tool freed, whether
//! a person can be asked.

use std::sync::Arc;

use crate::expediter::recovery::RecoverySchedule;

use super::notes::Note;
use super::Ledger;

impl Ledger {
    /// Recovery confirmed: calls resume, pre-call checks run afresh, and each tool
    /// still open gets a recovery backoff (and is no longer held after its failed
    /// probes). Nothing happens without an active event.
    pub(crate) fn confirm_recovery(&mut self) {
        if !self.cascade.resolve() {
            return;
        }
        let (step, backoff) = (self.step, self.backoff);
        for row in self.rows.values_mut() {
            if row.open.is_some() && row.recovery.is_none() {
                row.recovery = Some(RecoverySchedule::start(step, backoff));
                // The person's word frees a tool held after its failed probes too: the
                // backoff decides its probes from now, each failed one charged again.
                row.failed_probes = 0;
                row.probes_stopped = false;
            }
        }
        self.drop_checks();
        self.notes.push(Note::Recovered);
    }

    /// A new cycle: the budget is full again, pre-call checks run afresh, and every
    /// tool held open after its failed probes is freed with its whole allowance.
    pub(crate) fn new_cycle(&mut self) {
        self.budget.new_cycle();
        for row in self.rows.values_mut() {
            row.failed_probes = 0;
            row.probes_stopped = false;
        }
        self.drop_checks();
    }

    /// A person frees a tool held open after its failed probes: its probes resume, with
    /// its whole allowance again. Whether it was held.
    pub(crate) fn resume_probes(&mut self, tool: &Arc<str>) -> bool {
        let row = self.row_mut(tool);
        row.failed_probes = 0;
        std::mem::take(&mut row.probes_stopped)
    }

    pub(crate) fn set_user_available(&mut self, available: bool) {
        self.user_available = available;
    }
}
