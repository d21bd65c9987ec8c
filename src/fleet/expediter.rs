//! The expediter in a fleet: its tools' breakers shared as any other.

use super::error::FleetError;
use super::policy::HintPolicy;
use super::Fleet;
use crate::expediter::Expediter;

impl Fleet {
    /// Shares the breaker of every tool the expediter has now, under `policy`: what one
    /// replica learns of a tool's health (its breaker opened or closed) reaches the
    /// others as hints, and a hold shows in their expediters as the tool open, until
    /// the hold's end: skipped and routed like any open tool, with no failure of its
    /// own. Tools added later with [`Expediter::add_tool`] are shared by calling this
    /// again; sharing a tool twice changes only its policy.
    ///
    /// The expediter's kill switch is shared separately, under a name of your choice,
    /// with [`share_kill_switch`](Fleet::share_kill_switch).
    ///
    /// # Errors
    ///
    /// A tool whose name cannot be used in messages, a tool named like a different
    /// breaker already shared, or a bad policy; tools before it are shared.
    pub fn share_expediter(
        &self,
        expediter: &Expediter,
        policy: HintPolicy,
    ) -> Result<(), FleetError> {
        for tool in expediter.tools() {
            // Listed a moment ago; a tool is never removed.
            if let Ok(handle) = expediter.handle(&tool) {
                self.share_breaker(&handle, policy)?;
            }
        }
        Ok(())
    }
}
