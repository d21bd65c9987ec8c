//! The ledger: everything the expediter keeps that changes — its step, the budget of
//! the cycle, cascades and recoveries, each tool's row, the runs and their sub-tasks.
//!
//! It is plain data behind the expediter's one lock, and it never calls out: what the
//! breakers did reaches it as [`ToolEvent`]s, what they look like now as [`ToolView`]s
//! taken before the lock, and what must be done to a breaker (let a recovery probe
//! through) comes back as a [`Gate`] for the caller to carry out after the lock.

mod acts;
mod checks;
mod drain;
mod gate;
mod notes;
mod row;
mod runs;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::budget::Budget;
use super::capability::{Degradation, ToolSpec};
use super::cascade::{Cascade, CascadeWindow, SystemicEvent};
use super::events::ToolEvent;
use super::recovery::RecoveryBackoff;
use super::routing::{self, RouteSearch};
use super::scope::RunState;
use super::standing::{self, Facts, Standing, Unusable};
use super::views::{ToolView, Views};

pub(crate) use self::checks::CheckSlot;
pub(crate) use self::gate::{Gate, Pause};
pub(crate) use self::notes::{LedgerGuard, Note};
use self::row::ToolRow;
pub(crate) use self::runs::RunId;

/// Everything the expediter keeps that changes.
#[derive(Debug)]
pub(crate) struct Ledger {
    notes: Vec<Note>,
    events: Receiver<ToolEvent>,
    step: u64,
    budget: Budget,
    cascade: Cascade,
    backoff: RecoveryBackoff,
    /// Tools in the order they were added.
    order: Vec<Arc<str>>,
    rows: HashMap<Arc<str>, ToolRow>,
    /// Grows whenever cached pre-call results are dropped, so a check that started
    /// before does not store its result.
    checks_epoch: u64,
    runs: BTreeMap<RunId, RunState>,
    run_names: HashMap<Arc<str>, RunId>,
    next_run: RunId,
    user_available: bool,
    /// Failed probes of one tool charged before it is held open.
    probe_allowance: u32,
}

impl Ledger {
    pub(crate) fn new(
        events: Receiver<ToolEvent>,
        budget: u32,
        window: CascadeWindow,
        backoff: RecoveryBackoff,
        user_available: bool,
        probe_allowance: u32,
    ) -> Self {
        Ledger {
            notes: Vec::new(),
            events,
            step: 0,
            budget: Budget::new(budget),
            cascade: Cascade::new(window),
            backoff,
            order: Vec::new(),
            rows: HashMap::new(),
            checks_epoch: 0,
            runs: BTreeMap::from([(0, RunState::default())]),
            run_names: HashMap::new(),
            next_run: 1,
            user_available,
            probe_allowance,
        }
    }

    /// The log lines kept since the last call, to emit once the lock is let go.
    pub(crate) fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    pub(crate) fn add_tool(&mut self, name: Arc<str>) {
        self.rows.entry(name.clone()).or_default();
        self.order.push(name);
    }

    fn row(&self, tool: &str) -> &ToolRow {
        static NO_ROW: std::sync::OnceLock<ToolRow> = std::sync::OnceLock::new();
        self.rows
            .get(tool)
            .unwrap_or_else(|| NO_ROW.get_or_init(ToolRow::default))
    }

    fn row_mut(&mut self, tool: &Arc<str>) -> &mut ToolRow {
        self.rows.entry(tool.clone()).or_default()
    }

    pub(crate) fn step(&self) -> u64 {
        self.step
    }

    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Budget used this cycle (see [`Budget::used`]).
    pub(crate) fn used(&self) -> u32 {
        self.budget
            .used(self.cascade.events_in(self.budget.cycle()))
    }

    pub(crate) fn systemic_events_this_cycle(&self) -> u32 {
        self.cascade.events_in(self.budget.cycle())
    }

    pub(crate) fn latest_systemic(&self) -> Option<&SystemicEvent> {
        self.cascade.latest()
    }

    pub(crate) fn active_systemic(&self) -> Option<&SystemicEvent> {
        self.cascade.active().map(|id| self.cascade.event(id))
    }

    pub(crate) fn backoff(&self) -> RecoveryBackoff {
        self.backoff
    }

    pub(crate) fn last_failure_step(&self, tool: &str) -> Option<u64> {
        self.row(tool).last_failure_step
    }

    pub(crate) fn last_success_step(&self, tool: &str) -> Option<u64> {
        self.row(tool).last_success_step
    }

    /// Failed probes of the tool's current outage charged this cycle.
    pub(crate) fn failed_probes(&self, tool: &str) -> u32 {
        self.row(tool).failed_probes
    }

    pub(crate) fn probe_allowance(&self) -> u32 {
        self.probe_allowance
    }

    /// Whether the ledger has applied a transition of `tool` newer than `view`: a
    /// report made from the view would disagree with the ledger.
    pub(crate) fn is_ahead_of(&self, tool: &str, view: &ToolView) -> bool {
        self.row(tool).generation > view.generation
    }

    fn facts(&self, tool: &str) -> Facts<'_> {
        let row = self.row(tool);
        Facts {
            step: self.step,
            pause: self.pause_reason(),
            availability: self.availability(tool),
            reported: row.reported.is_some(),
            recovery: row.recovery.as_ref(),
            probes_stopped: row.probes_stopped,
            open_on_failures: row.open.is_some(),
            recovery_start: self.backoff.start,
        }
    }

    /// The rule "why is this tool unusable, and when is it tried next".
    pub(crate) fn standing(&self, tool: &str, view: &ToolView) -> Standing {
        standing::standing(view, &self.facts(tool))
    }

    /// [`standing`](Self::standing) without the pause, as routing asks it.
    pub(crate) fn own_standing(&self, tool: &str, view: &ToolView) -> Standing {
        standing::own_standing(view, &self.facts(tool))
    }

    /// The route for `spec`'s tool, within `limit`, with the alternatives seen in
    /// `views` (an alternative with no view counts as unusable: its breaker is open).
    pub(crate) fn route(
        &self,
        spec: &ToolSpec,
        limit: Degradation,
        views: &(impl Views + ?Sized),
    ) -> RouteSearch {
        routing::search(spec, limit, self.user_available, |name| {
            match views.view(name) {
                Some(view) => self.own_standing(name, view).unusable,
                None => Some(Unusable::Open),
            }
        })
    }
}
