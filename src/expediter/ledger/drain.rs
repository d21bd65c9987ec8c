//! Events from the breakers: each failure charged to the budget, each transition
//! applied to its tool's row, and cascade detection (see [`cascade`](super::super::cascade)).

use std::sync::Arc;

use tokio::time::Instant;

use crate::expediter::budget::{ChargedFailure, EventId};
use crate::expediter::cascade::{SystemicEvent, Trigger};
use crate::expediter::category::FailureCategory;
use crate::expediter::events::{Change, ToolEvent};
use crate::{Cause, Mode, State};

use super::notes::Note;
use super::row::Opened;
use super::Ledger;

impl Ledger {
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
        match change.to {
            // A closed breaker is closed whatever its mode (it keeps its state when the
            // mode changes): a reset made while it only observes or is disabled frees the
            // tool as one made while it works.
            State::Closed => {
                row.open = None;
                row.recovery = None;
                row.failed_probes = 0;
                row.probes_stopped = false;
            }
            // Otherwise, what an observe-only or disabled breaker reports is not what the
            // tool did: its openings feed no cascade and spend no probe allowance.
            _ if change.mode != Mode::Enabled => {}
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
}
