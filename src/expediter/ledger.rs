//! The ledger: everything the expediter keeps that changes — its step, the budget of
//! the cycle, cascades and recoveries, each tool's row, the runs and their sub-tasks.
//!
//! It is plain data behind the expediter's one lock, and it never calls out: what the
//! breakers did reaches it as [`ToolEvent`]s, what they look like now as [`ToolView`]s
//! taken before the lock, and what must be done to a breaker (let a recovery probe
//! through) comes back as a [`Gate`] for the caller to carry out after the lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use tokio::time::Instant;

use crate::machine::{Cause, State};
use crate::settings::Mode;

use super::budget::{Budget, ChargedFailure, EventId};
use super::capability::{Degradation, ToolSpec};
use super::cascade::{Cascade, CascadeWindow, SystemicEvent, Trigger};
use super::category::FailureCategory;
use super::decision::{PauseReason, Route, SkipReason};
use super::events::{Change, ToolEvent};
use super::precheck::Availability;
use super::recovery::{RecoveryBackoff, RecoverySchedule};
use super::routing::{self, RouteSearch};
use super::scope::{Assessment, Blocker, RunState, SubTask, ToolRoute, Work, WorkState};
use super::standing::{self, Facts, Standing, ToolView, Views};
use super::toolbox::Toolbox;

/// A run's key: 0 is the expediter's own.
pub(crate) type RunId = u64;

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

/// A breaker that opened on failures and has not closed since.
#[derive(Debug, Clone)]
struct Opened {
    category: Option<FailureCategory>,
    /// The failures in a row that opened it.
    streak: u32,
}

/// Where a tool's pre-call check stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Check {
    /// Run it before the next decision.
    #[default]
    Due,
    /// A decision is running it; others use what was found before.
    Running { last: Option<Availability> },
    /// Found this; good until the next cycle or systemic event.
    Found(Availability),
}

/// An availability reported from outside the expediter
/// ([`Expediter::set_availability`](super::Expediter::set_availability)): it stands
/// until reported again or cleared, and while it stands the tool's pre-call check
/// does not run.
#[derive(Debug, Clone)]
struct Reported {
    availability: Availability,
    /// Why, in one line, for the offer and the report.
    why: Arc<str>,
}

/// What the ledger keeps per tool.
#[derive(Debug, Clone, Default)]
struct ToolRow {
    /// The generation of the last transition applied: an older one is stale.
    generation: u64,
    open: Option<Opened>,
    recovery: Option<RecoverySchedule>,
    check: Check,
    reported: Option<Reported>,
    last_category: Option<FailureCategory>,
    last_failure_step: Option<u64>,
    last_success_step: Option<u64>,
    /// Failed probes of its current outage charged to this cycle's budget.
    failed_probes: u32,
    /// Its failed probes used up the allowance: no call and no probe until a new cycle,
    /// a person frees it, or its breaker closes.
    probes_stopped: bool,
}

/// What a decision should do about a tool's pre-call check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckSlot {
    /// Use this result.
    Use(Availability),
    /// Run the check now (the ledger notes that it runs); store the result with this
    /// epoch.
    Run(u64),
}

/// Something worth a log line, kept until the lock is let go (a tracing subscriber is
/// someone else's code).
#[derive(Debug)]
pub(crate) enum Note {
    Stale { tool: Arc<str>, generation: u64 },
    Systemic { tools: Vec<Arc<str>>, cause: String },
    Recovered,
    Deferred { task: Arc<str> },
    ProbesStopped { tool: Arc<str>, failed_probes: u32 },
}

impl Note {
    pub(crate) fn emit(self) {
        const TARGET: &str = "tower_circuit_breaker::expediter";
        match self {
            Note::Stale { tool, generation } => {
                tracing::debug!(target: TARGET, tool = %tool, generation, "stale transition ignored")
            }
            Note::Systemic { tools, cause } => {
                tracing::warn!(target: TARGET, ?tools, "systemic failure: {cause}; pausing all calls")
            }
            Note::Recovered => {
                tracing::info!(target: TARGET, "recovery confirmed: probes resume with backoff")
            }
            Note::Deferred { task } => tracing::info!(target: TARGET, task = %task, "DEFERRED"),
            Note::ProbesStopped {
                tool,
                failed_probes,
            } => tracing::warn!(
                target: TARGET,
                tool = %tool,
                failed_probes,
                "held open: its failed probes used up their allowance; no more probes until a new cycle or a person frees it"
            ),
        }
    }
}

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

    // -------------------------------------------------------------------------
    // Reading
    // -------------------------------------------------------------------------

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

    pub(crate) fn set_user_available(&mut self, available: bool) {
        self.user_available = available;
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

    /// Whether the ledger has applied a transition of `tool` newer than `view`: a
    /// report made from the view would disagree with the ledger.
    pub(crate) fn is_ahead_of(&self, tool: &str, view: &ToolView) -> bool {
        self.row(tool).generation > view.generation
    }

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
                None => Some(super::standing::Unusable::Open),
            }
        })
    }

    /// The tools in the way of work needing `tools` within `limit`, and the routes
    /// for the tools that cannot be used but have an alternative.
    pub(crate) fn assess(
        &self,
        tools: &[Arc<str>],
        limit: Degradation,
        toolbox: &Toolbox,
        views: &(impl Views + ?Sized),
    ) -> Assessment {
        let mut assessment = Assessment::default();
        for name in tools {
            let (Some(tool), Some(view)) = (toolbox.get(name), views.view(name)) else {
                continue;
            };
            let spec = &tool.spec;
            let own = self.own_standing(name, view);
            let Some(unusable) = own.unusable else {
                continue;
            };
            let found = self.route(spec, limit, views);
            match found.route {
                route @ Route::Alternative { .. } => assessment.routes.push(ToolRoute {
                    tool: name.clone(),
                    route,
                }),
                // Planning is not a skip: the route is recorded as a degradation only
                // when a decision takes it.
                _ => assessment.blocked.push(Blocker {
                    tool: name.clone(),
                    unusable,
                    alternatives: found.refused,
                    next_try: self.standing(name, view).next_try,
                    fallback: spec.fallback.clone(),
                }),
            }
        }
        assessment
    }

    pub(crate) fn runs(&self) -> impl Iterator<Item = &RunState> {
        self.runs.values()
    }

    pub(crate) fn run(&self, id: RunId) -> Option<&RunState> {
        self.runs.get(&id)
    }

    /// Tools in the order they were added.
    fn in_order(&self, mut names: Vec<Arc<str>>) -> Vec<Arc<str>> {
        names.sort_by_key(|n| self.order.iter().position(|o| o == n).unwrap_or(usize::MAX));
        names.dedup();
        names
    }

    /// Tools other than `except` whose breakers opened on `category` and that are not
    /// in a recovery backoff (those are the known event still passing).
    fn open_on(&self, category: &FailureCategory, except: &str) -> Vec<Arc<str>> {
        let names = self
            .rows
            .iter()
            .filter(|(name, row)| {
                ***name != *except
                    && row.recovery.is_none()
                    && row
                        .open
                        .as_ref()
                        .is_some_and(|o| o.category.as_ref() == Some(category))
            })
            .map(|(name, _)| name.clone())
            .collect();
        self.in_order(names)
    }

    // -------------------------------------------------------------------------
    // Events from the breakers
    // -------------------------------------------------------------------------

    /// Applies what the breakers reported since the last look.
    pub(crate) fn drain(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            match event {
                ToolEvent::Failure {
                    tool,
                    message,
                    category,
                } => self.on_failure(tool, message, category),
                ToolEvent::Success { tool } => {
                    let step = self.step;
                    self.row_mut(&tool).last_success_step = Some(step);
                }
                ToolEvent::Transition { tool, change } => self.on_transition(tool, change),
            }
        }
    }

    fn on_failure(&mut self, tool: Arc<str>, message: String, category: Option<FailureCategory>) {
        let step = self.step;
        let row = self.row_mut(&tool);
        row.last_failure_step = Some(step);
        row.last_category = category.clone();
        let mut entry = ChargedFailure {
            tool: tool.clone(),
            message,
            category: category.clone(),
            step,
            event: None,
        };
        // A failure during a systemic event that claims it is part of it.
        if let Some(id) = self.cascade.active() {
            if self.cascade.event(id).claims(&tool, category.as_ref()) {
                entry.event = Some(id);
                self.budget.charge(entry);
                self.join(id, &tool);
                return;
            }
        }
        let before = self.used();
        self.budget.charge(entry);
        let limit = self.budget.limit();
        let uses_it_up = before < limit && self.used() >= limit;
        if !uses_it_up || self.cascade.active().is_some() {
            return;
        }
        // The failure that would use up the budget shares the signature another open
        // breaker opened on: one cause, not independent failures.
        let Some(category) = category else {
            return;
        };
        let mut tools = self.open_on(&category, &tool);
        if tools.is_empty() {
            return;
        }
        tools.push(tool);
        self.declare(Some(category), tools, Trigger::Budget);
    }

    fn on_transition(&mut self, tool: Arc<str>, change: Change) {
        let row = self.row_mut(&tool);
        if change.generation <= row.generation {
            self.notes.push(Note::Stale {
                tool,
                generation: change.generation,
            });
            return;
        }
        row.generation = change.generation;
        // What an observe-only or disabled breaker reports is not what the tool did.
        if change.mode != Mode::Enabled {
            return;
        }
        match change.to {
            // A person forcing a breaker open is not a failure, nor a hint from outside
            // holding it open (another replica saw failures; this one did not): neither
            // feeds a cascade.
            State::Open if change.cause == Cause::Hint => {}
            State::Open => self.on_opened(
                tool,
                change.from,
                change.cause,
                Instant::from_std(change.at),
                change.consecutive_failures,
            ),
            State::Closed => {
                row.open = None;
                row.recovery = None;
                row.failed_probes = 0;
                row.probes_stopped = false;
            }
            State::HalfOpen | State::ForcedOpen => {}
        }
    }

    fn on_opened(&mut self, tool: Arc<str>, from: State, cause: Cause, at: Instant, streak: u32) {
        // A tool in a recovery backoff has its probes paced by it (3, 6, 12... steps),
        // not by the allowance.
        let recovering = self.row(&tool).recovery.is_some();
        self.note_opening(tool.clone(), from, at, streak);
        if recovering {
            return;
        }
        // The probe allowance, once the opening is known to be systemic or not: a
        // failure counted in a systemic event is not charged on its own.
        if from == State::HalfOpen && self.probe_failure_charged(&tool, cause) {
            let row = self.row_mut(&tool);
            row.failed_probes = row.failed_probes.saturating_add(1);
        }
        let in_event = self
            .cascade
            .active()
            .is_some_and(|id| self.cascade.event(id).tools.contains(&tool));
        let allowance = self.probe_allowance;
        let row = self.row_mut(&tool);
        if !in_event && !row.probes_stopped && row.failed_probes >= allowance {
            row.probes_stopped = true;
            let failed_probes = row.failed_probes;
            self.notes.push(Note::ProbesStopped {
                tool,
                failed_probes,
            });
        }
    }

    /// A breaker opened on failures: its row, the recovery backoff, and cascade
    /// detection.
    fn note_opening(&mut self, tool: Arc<str>, from: State, at: Instant, streak: u32) {
        let step = self.step;
        let backoff = self.backoff;
        let row = self.row_mut(&tool);
        let category = row.last_category.clone();
        row.open = Some(Opened {
            category: category.clone(),
            streak,
        });
        // A failed probe after a confirmed recovery doubles the wait, up to the cap. It
        // is the known event still passing, not a new one.
        if let Some(recovery) = row.recovery {
            if from == State::HalfOpen {
                row.recovery = Some(recovery.failed_probe(step, backoff));
            }
            return;
        }
        if let Some(id) = self.cascade.active() {
            self.join(id, &tool);
            self.absorb(id, &tool);
            return;
        }
        let together = self.cascade.note_opening(&tool, step, at);
        if let Some(category) = category {
            let mut same = self.open_on(&category, &tool);
            if !same.is_empty() {
                same.push(tool);
                self.declare(Some(category), same, Trigger::SameSignature);
                return;
            }
        }
        if together.len() >= 3 {
            self.declare(None, together, Trigger::Together);
        }
    }

    /// Whether a breaker that went from half-open to open for `cause` did so on its
    /// probe's failure, charged to this cycle's budget on its own: the tool's latest
    /// failure, which its breaker reported before the transition, outside every
    /// systemic event.
    fn probe_failure_charged(&self, tool: &str, cause: Cause) -> bool {
        let failed = matches!(
            cause,
            Cause::ProbeFailed | Cause::PermanentFailure | Cause::RetryAfter
        );
        failed
            && self
                .budget
                .entries()
                .iter()
                .rev()
                .find(|e| *e.tool == *tool)
                .is_some_and(|e| e.event.is_none())
    }

    fn declare(
        &mut self,
        signature: Option<FailureCategory>,
        tools: Vec<Arc<str>>,
        trigger: Trigger,
    ) {
        let tools = self.in_order(tools);
        let id = self.cascade.declare(SystemicEvent {
            signature,
            tools: tools.clone(),
            step: self.step,
            cycle: self.budget.cycle(),
            resolved: false,
            trigger,
        });
        for tool in &tools {
            self.absorb(id, tool);
        }
        // Pre-call results may be stale after a systemic event.
        self.drop_checks();
        let cause = self.cascade.event(id).describe();
        self.notes.push(Note::Systemic { tools, cause });
    }

    /// Adds a tool to an event, keeping the tools in the order they were added.
    fn join(&mut self, id: EventId, tool: &Arc<str>) {
        let event = self.cascade.event(id);
        if event.tools.contains(tool) {
            return;
        }
        let mut tools = event.tools.clone();
        tools.push(tool.clone());
        let tools = self.in_order(tools);
        self.cascade.set_tools(id, tools);
    }

    /// Folds a tool's failures into an event: with a signature, its failures of this
    /// cycle with that signature; without one (tools opening together), the failures
    /// that opened its breaker.
    fn absorb(&mut self, id: EventId, tool: &Arc<str>) {
        match self.cascade.event(id).signature.clone() {
            Some(signature) => self.budget.absorb(id, |e: &ChargedFailure| {
                e.tool == *tool && e.category.as_ref() == Some(&signature)
            }),
            None => {
                let streak = self.row(tool).open.as_ref().map_or(0, |o| o.streak);
                self.budget.absorb_streak(id, tool, streak);
            }
        }
    }

    fn drop_checks(&mut self) {
        self.checks_epoch = self.checks_epoch.wrapping_add(1);
        for row in self.rows.values_mut() {
            row.check = match row.check {
                Check::Running { .. } => Check::Running { last: None },
                _ => Check::Due,
            };
        }
    }

    // -------------------------------------------------------------------------
    // Decisions
    // -------------------------------------------------------------------------

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

    /// Records a route a decision of `run` took at `step`.
    pub(crate) fn record_route(&mut self, run: RunId, tool: &Arc<str>, route: &Route, step: u64) {
        let state = self.runs.entry(run).or_default();
        state.note_route(tool, route);
        routing::note(
            &mut state.degradations,
            &state.name.clone(),
            tool,
            route,
            step,
        );
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

    // -------------------------------------------------------------------------
    // A person's acts
    // -------------------------------------------------------------------------

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

    // -------------------------------------------------------------------------
    // Runs and sub-tasks
    // -------------------------------------------------------------------------

    /// The run named `name`, made if new.
    pub(crate) fn run_named(&mut self, name: &str) -> RunId {
        if let Some(&id) = self.run_names.get(name) {
            return id;
        }
        let id = self.next_run;
        self.next_run = self.next_run.saturating_add(1);
        let name: Arc<str> = name.into();
        self.run_names.insert(name.clone(), id);
        self.runs.insert(
            id,
            RunState {
                name: Some(name),
                ..RunState::default()
            },
        );
        id
    }

    /// The run named `name`, if there is one.
    pub(crate) fn run_id_of(&self, name: &str) -> Option<RunId> {
        self.run_names.get(name).copied()
    }

    /// Forgets a run.
    pub(crate) fn close_run(&mut self, id: RunId) {
        if let Some(state) = self.runs.remove(&id) {
            if let Some(name) = state.name {
                self.run_names.remove(&name);
            }
        }
        self.runs.entry(0).or_default();
    }

    /// Records the plan of a sub-task of `run`.
    pub(crate) fn plan(
        &mut self,
        run: RunId,
        task: &SubTask,
        state: WorkState,
        degradations: Vec<String>,
    ) {
        let step = self.step;
        if state == WorkState::Deferred {
            self.notes.push(Note::Deferred {
                task: task.name.clone(),
            });
        }
        self.runs.entry(run).or_default().plan(Work {
            name: task.name.clone(),
            tools: task.tools.clone(),
            limit: task.max_degradation,
            state,
            step,
            degradations,
        });
    }

    /// Marks a sub-task of `run` done or failed.
    pub(crate) fn finish(&mut self, run: RunId, name: &str, state: WorkState) -> bool {
        let step = self.step;
        let Some(work) = self
            .runs
            .get_mut(&run)
            .and_then(|r| r.work.iter_mut().find(|w| *w.name == *name))
        else {
            return false;
        };
        work.state = state;
        work.step = step;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn ledger(budget: u32) -> (Ledger, mpsc::Sender<ToolEvent>) {
        let (tx, rx) = mpsc::channel();
        let mut ledger = Ledger::new(
            rx,
            budget,
            CascadeWindow {
                steps: 3,
                time: Duration::from_secs(30),
            },
            RecoveryBackoff { start: 3, cap: 20 },
            true,
            1,
        );
        for tool in ["A", "B", "C"] {
            ledger.add_tool(tool.into());
        }
        (ledger, tx)
    }

    fn failure(tool: &str, message: &str) -> ToolEvent {
        ToolEvent::Failure {
            tool: tool.into(),
            message: message.into(),
            category: crate::expediter::category::Categorizer::default().categorize(message),
        }
    }

    fn change(tool: &str, from: State, to: State, generation: u64, streak: u32) -> ToolEvent {
        ToolEvent::Transition {
            tool: tool.into(),
            change: Change {
                from,
                to,
                cause: match to {
                    State::Closed => Cause::ProbeSucceeded,
                    State::HalfOpen => Cause::CooldownElapsed,
                    State::Open | State::ForcedOpen => Cause::Tripped,
                },
                at: tokio::time::Instant::now().into_std(),
                generation,
                mode: Mode::Enabled,
                consecutive_failures: streak,
            },
        }
    }

    fn view(state: State, generation: u64) -> ToolView {
        ToolView {
            state,
            held: false,
            killed: false,
            breaker: crate::expediter::NextTry::Now,
            generation,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_opening_after_the_close_leaves_the_tool_closed_and_causes_no_cascade() {
        let (mut ledger, tx) = ledger(10);
        for _ in 0..3 {
            tx.send(failure("A", "connection refused")).unwrap();
        }
        // A opened (generation 1), then closed after a probe (generations 2 and 3);
        // the opening's report arrives last.
        tx.send(change("A", State::Open, State::HalfOpen, 2, 3))
            .unwrap();
        tx.send(change("A", State::HalfOpen, State::Closed, 3, 0))
            .unwrap();
        tx.send(change("A", State::Closed, State::Open, 1, 3))
            .unwrap();
        ledger.drain();
        assert!(ledger.row("A").open.is_none(), "A is closed");
        assert!(!ledger.is_ahead_of("A", &view(State::Closed, 3)));
        assert!(ledger.is_ahead_of("A", &view(State::Open, 1)));
        // B's lone failures with the same message are B's own.
        for _ in 0..3 {
            tx.send(failure("B", "connection refused")).unwrap();
        }
        tx.send(change("B", State::Closed, State::Open, 1, 3))
            .unwrap();
        ledger.drain();
        assert!(ledger.active_systemic().is_none());
        assert_eq!(ledger.used(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn the_failure_that_would_use_up_the_budget_with_an_open_tools_signature_is_systemic() {
        let (mut ledger, tx) = ledger(5);
        for _ in 0..3 {
            tx.send(failure("A", "connection refused")).unwrap();
        }
        tx.send(change("A", State::Closed, State::Open, 1, 3))
            .unwrap();
        tx.send(failure("B", "connection refused")).unwrap();
        ledger.drain();
        assert_eq!(
            ledger.used(),
            4,
            "every failure counts until the event is known"
        );
        assert!(ledger.pause().is_none());
        tx.send(failure("B", "connection refused")).unwrap();
        ledger.drain();
        let event = ledger.active_systemic().expect("one systemic event");
        assert_eq!(event.trigger, Trigger::Budget);
        assert_eq!(event.tools, vec![Arc::<str>::from("A"), "B".into()]);
        assert_eq!(ledger.used(), 1);
        assert_eq!(ledger.pause().unwrap().reason, PauseReason::SystemicPause);
    }

    #[tokio::test(start_paused = true)]
    async fn a_recovery_probe_is_let_through_once_when_due() {
        let (mut ledger, tx) = ledger(50);
        for tool in ["A", "B"] {
            for _ in 0..3 {
                tx.send(failure(tool, "connection refused")).unwrap();
            }
            tx.send(change(tool, State::Closed, State::Open, 1, 3))
                .unwrap();
        }
        ledger.drain();
        assert!(ledger.active_systemic().is_some());
        ledger.confirm_recovery();
        let a: Arc<str> = "A".into();
        let gates: Vec<Gate> = (0..4)
            .map(|_| ledger.begin_decision(&a, Availability::Available).1)
            .collect();
        assert_eq!(
            gates,
            [
                Gate::Skip(SkipReason::RecoveryBackoff),
                Gate::Skip(SkipReason::RecoveryBackoff),
                Gate::Breaker { release: true },
                Gate::Breaker { release: false },
            ]
        );
    }
}
