//! The pre-call check a decision runs: its result cached until the next cycle or
//! systemic event, or run now, once, outside every lock.

use std::sync::Arc;

use crate::expediter::ledger::CheckSlot;
use crate::expediter::precheck::Availability;
use crate::expediter::toolbox::Tool;
use crate::expediter::Expediter;

impl Expediter {
    /// The tool's pre-call check result: cached, or run now, outside every lock. While
    /// one decision runs a tool's check, others (a check calling back in included) use
    /// what was found before, or go to the breaker.
    pub(super) async fn availability(&self, tool: &Tool) -> Availability {
        let Some(check) = tool.spec.precheck.clone() else {
            return Availability::Available;
        };
        let slot = {
            let mut ledger = self.lock();
            // What the breakers did first: a systemic event drops cached results.
            ledger.drain();
            ledger.check_slot(&tool.spec.name)
        };
        let epoch = match slot {
            CheckSlot::Use(found) => return found,
            CheckSlot::Run(epoch) => epoch,
        };
        let mut running = RunningCheck {
            expediter: self,
            tool: &tool.spec.name,
            epoch,
            found: None,
        };
        let found = check.check().await;
        running.found = Some(found);
        drop(running);
        tool.handle
            .set_threshold_relief(u32::from(found == Availability::Degraded));
        found
    }
}

/// A pre-call check under way: when dropped (done, cancelled, or its future panicked)
/// it tells the ledger, so a check is never left marked as running.
struct RunningCheck<'a> {
    expediter: &'a Expediter,
    tool: &'a Arc<str>,
    epoch: u64,
    found: Option<Availability>,
}

impl Drop for RunningCheck<'_> {
    fn drop(&mut self) {
        self.expediter
            .lock()
            .check_done(self.tool, self.epoch, self.found);
    }
}
