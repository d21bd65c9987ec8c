//! What the ledger keeps per tool: its [`ToolRow`].

use std::sync::Arc;

use crate::expediter::category::FailureCategory;
use crate::expediter::precheck::Availability;
use crate::expediter::recovery::RecoverySchedule;

/// A breaker that opened on failures and has not closed since.
#[derive(Debug, Clone)]
pub(super) struct Opened {
    pub(super) category: Option<FailureCategory>,
    /// The failures in a row that opened it.
    pub(super) streak: u32,
}

/// Where a tool's pre-call check stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Check {
    /// Run it before the next decision.
    #[default]
    Due,
    /// A decision is running it; others use what was found before.
    Running { last: Option<Availability> },
    /// Found this; good until the next cycle or systemic event.
    Found(Availability),
}

/// An availability reported from outside the expediter
/// ([`Expediter::set_availability`](crate::expediter::Expediter::set_availability)): it stands
/// until reported again or cleared, and while it stands the tool's pre-call check
/// does not run.
#[derive(Debug, Clone)]
pub(super) struct Reported {
    pub(super) availability: Availability,
    /// Why, in one line, for the offer and the report.
    pub(super) why: Arc<str>,
}

/// What the ledger keeps per tool.
#[derive(Debug, Clone, Default)]
pub(super) struct ToolRow {
    /// The generation of the last transition applied: an older one is stale.
    pub(super) generation: u64,
    pub(super) open: Option<Opened>,
    pub(super) recovery: Option<RecoverySchedule>,
    pub(super) check: Check,
    pub(super) reported: Option<Reported>,
    pub(super) last_category: Option<FailureCategory>,
    pub(super) last_failure_step: Option<u64>,
    pub(super) last_success_step: Option<u64>,
    /// Failed probes of its current outage charged to this cycle's budget.
    pub(super) failed_probes: u32,
    /// Its failed probes used up the allowance: no call and no probe until a new cycle,
    /// a person frees it, or its breaker closes.
    pub(super) probes_stopped: bool,
}
