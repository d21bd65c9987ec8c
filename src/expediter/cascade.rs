//! Cascade detection: breakers opening together, or failing with one
//! error signature, are one systemic event that counts once against the budget and
//! pauses every call until a person confirms recovery.
//!
//! The rules, each applied by [`Ledger`](super::ledger::Ledger) as its events arrive:
//!
//! - *same signature*: a breaker opens on a failure whose signature (connection refused,
//!   permission denied...) is the one another open breaker opened on;
//! - *together*: three or more breakers open within the cascade window (a number of
//!   steps, or a time on the breakers' clock);
//! - *budget*: a failure with the signature another open breaker opened on would use up
//!   the failure budget before its own breaker can open (with the defaults, 3 failures
//!   open a breaker and the budget is 5, so a second breaker could never open first).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::budget::EventId;
use super::category::FailureCategory;

/// Openings this close together, in steps or in time, are "together". A zero in either
/// measure leaves that measure out: openings at the same instant are not together by a
/// window of zero time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CascadeWindow {
    pub(crate) steps: u64,
    pub(crate) time: Duration,
}

impl CascadeWindow {
    fn holds(&self, earlier: &Opening, step: u64, at: Instant) -> bool {
        let by_steps = self.steps != 0 && step.saturating_sub(earlier.step) <= self.steps;
        let by_time = !self.time.is_zero() && at.saturating_duration_since(earlier.at) <= self.time;
        by_steps || by_time
    }
}

/// A breaker that opened on failures, as the cascade window sees it.
#[derive(Debug, Clone)]
struct Opening {
    tool: Arc<str>,
    step: u64,
    at: Instant,
}

/// Which rule found a systemic event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    SameSignature,
    Together,
    Budget,
}

/// A systemic event: several tools failing from one suspected cause.
#[derive(Debug, Clone)]
pub(crate) struct SystemicEvent {
    pub(crate) signature: Option<FailureCategory>,
    pub(crate) tools: Vec<Arc<str>>,
    pub(crate) step: u64,
    pub(crate) cycle: u32,
    pub(crate) resolved: bool,
    pub(crate) trigger: Trigger,
}

impl SystemicEvent {
    /// The suspected shared cause, in words.
    pub(crate) fn describe(&self) -> String {
        let tools = self
            .tools
            .iter()
            .map(|t| t.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        match (&self.signature, self.trigger) {
            (Some(c), Trigger::Budget) => format!(
                "multiple tools failed with {} ({tools}) and would have used up the failure budget — likely a {} issue",
                c.signature(),
                c.domain()
            ),
            (Some(c), _) => format!(
                "multiple tools failed with {} ({tools}) — likely a {} issue",
                c.signature(),
                c.domain()
            ),
            (None, _) => format!(
                "{} tools opened together ({tools}) — likely a shared infrastructure issue",
                self.tools.len()
            ),
        }
    }

    /// Whether a failure of `tool` with `category` during this event is part of it: a
    /// failure of one of its tools, or one with its signature.
    pub(crate) fn claims(&self, tool: &str, category: Option<&FailureCategory>) -> bool {
        self.tools.iter().any(|t| **t == *tool)
            || (self.signature.is_some() && self.signature.as_ref() == category)
    }
}

/// The openings of the current window and every systemic event so far.
#[derive(Debug)]
pub(crate) struct Cascade {
    window: CascadeWindow,
    openings: Vec<Opening>,
    events: Vec<SystemicEvent>,
}

impl Cascade {
    pub(crate) fn new(window: CascadeWindow) -> Self {
        Cascade {
            window,
            openings: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The event still waiting for recovery, if any (at most one: while one is
    /// active, new openings and failures join it).
    pub(crate) fn active(&self) -> Option<EventId> {
        self.events.iter().rposition(|e| !e.resolved)
    }

    pub(crate) fn event(&self, id: EventId) -> &SystemicEvent {
        &self.events[id]
    }

    /// The latest event, resolved or not.
    pub(crate) fn latest(&self) -> Option<&SystemicEvent> {
        self.events.last()
    }

    /// Events detected in `cycle`: each counts once against that cycle's budget.
    pub(crate) fn events_in(&self, cycle: u32) -> u32 {
        let n = self.events.iter().filter(|e| e.cycle == cycle).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Notes a breaker opening on failures; returns the distinct tools that opened
    /// together with it (itself included), in the order they opened.
    pub(crate) fn note_opening(
        &mut self,
        tool: &Arc<str>,
        step: u64,
        at: Instant,
    ) -> Vec<Arc<str>> {
        let window = self.window;
        // Steps and time only grow: an opening outside the window now stays outside.
        self.openings.retain(|o| window.holds(o, step, at));
        self.openings.push(Opening {
            tool: tool.clone(),
            step,
            at,
        });
        let mut together: Vec<Arc<str>> = Vec::new();
        for opening in &self.openings {
            if !together.contains(&opening.tool) {
                together.push(opening.tool.clone());
            }
        }
        together
    }

    pub(crate) fn declare(&mut self, event: SystemicEvent) -> EventId {
        self.events.push(event);
        self.events.len() - 1
    }

    /// Sets the tools of an event (a tool joined it).
    pub(crate) fn set_tools(&mut self, id: EventId, tools: Vec<Arc<str>>) {
        self.events[id].tools = tools;
    }

    /// A person confirmed the shared cause is fixed: the active event is resolved and
    /// the window starts empty. Returns whether there was one (without, nothing
    /// changes).
    pub(crate) fn resolve(&mut self) -> bool {
        let Some(id) = self.active() else {
            return false;
        };
        self.events[id].resolved = true;
        self.openings.clear();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_window_counts_distinct_tools_in_steps_or_time() {
        let mut cascade = Cascade::new(CascadeWindow {
            steps: 2,
            time: Duration::from_secs(30),
        });
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("A".into(), "B".into(), "C".into());
        let t0 = Instant::now();
        assert_eq!(cascade.note_opening(&a, 1, t0).len(), 1);
        assert_eq!(cascade.note_opening(&a, 2, t0).len(), 1, "one tool twice");
        // Far in steps, near in time: together.
        assert_eq!(
            cascade
                .note_opening(&b, 50, t0 + Duration::from_secs(10))
                .len(),
            2
        );
        // Far in both from A's, near B's in steps.
        let together = cascade.note_opening(&c, 51, t0 + Duration::from_secs(100));
        assert_eq!(together, vec![b.clone(), c.clone()]);
        // A confirmation with no event waiting for it changes nothing.
        assert!(!cascade.resolve());
        assert_eq!(
            cascade
                .note_opening(&a, 52, t0 + Duration::from_secs(100))
                .len(),
            3
        );
    }
}
