//! The failure budget shared by all tools for a cycle: every failure a
//! tool's breaker records is charged once, and the failures of one systemic event
//! count once together.

use std::fmt;
use std::sync::Arc;

use crate::escape::one_line;

use super::category::FailureCategory;

/// Which systemic event a failure belongs to: its index among the events.
pub(crate) type EventId = usize;

/// One failure charged this cycle.
#[derive(Debug, Clone)]
pub(crate) struct ChargedFailure {
    pub(crate) tool: Arc<str>,
    pub(crate) message: String,
    pub(crate) category: Option<FailureCategory>,
    pub(crate) step: u64,
    /// Part of this systemic event, which counts once for all its failures.
    pub(crate) event: Option<EventId>,
}

/// The failures of the current cycle.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u32,
    cycle: u32,
    entries: Vec<ChargedFailure>,
}

impl Budget {
    pub(crate) fn new(limit: u32) -> Self {
        Budget {
            limit,
            cycle: 1,
            entries: Vec::new(),
        }
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    pub(crate) fn cycle(&self) -> u32 {
        self.cycle
    }

    pub(crate) fn entries(&self) -> &[ChargedFailure] {
        &self.entries
    }

    /// The rule of the budget: each failure not part of a systemic event counts one,
    /// and each systemic event detected this cycle counts one for all its failures.
    pub(crate) fn used(&self, systemic_events: u32) -> u32 {
        let ordinary = self.entries.iter().filter(|e| e.event.is_none()).count();
        u32::try_from(ordinary)
            .unwrap_or(u32::MAX)
            .saturating_add(systemic_events)
    }

    pub(crate) fn charge(&mut self, entry: ChargedFailure) {
        self.entries.push(entry);
    }

    /// Folds into `event` every failure of this cycle that `belongs` says is part of
    /// it and no other event has.
    pub(crate) fn absorb(&mut self, event: EventId, belongs: impl Fn(&ChargedFailure) -> bool) {
        for entry in self.entries.iter_mut().filter(|e| e.event.is_none()) {
            if belongs(entry) {
                entry.event = Some(event);
            }
        }
    }

    /// Folds into `event` the last `streak` failures of `tool` this cycle that no event
    /// has: the failures that opened its breaker.
    pub(crate) fn absorb_streak(&mut self, event: EventId, tool: &str, streak: u32) {
        let mut left = streak;
        for entry in self.entries.iter_mut().rev() {
            if left == 0 {
                break;
            }
            if *entry.tool == *tool {
                left -= 1;
                if entry.event.is_none() {
                    entry.event = Some(event);
                }
            }
        }
    }

    /// A new cycle: the budget is full again.
    pub(crate) fn new_cycle(&mut self) {
        self.cycle = self.cycle.saturating_add(1);
        self.entries.clear();
    }
}

/// One failure charged to the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BudgetLine {
    /// The tool.
    pub tool: Arc<str>,
    /// What failed.
    pub message: String,
    /// The expediter's step when the failure was recorded.
    pub step: u64,
    /// Part of a systemic event, which counts once for all its failures.
    pub systemic: bool,
}

/// `web_search — "connect: Connection refused" (step 4)`, with
/// ` [systemic: counted once]` for a failure of a systemic event; one line, whatever the
/// message holds.
impl fmt::Display for BudgetLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} — \"{}\" (step {})",
            one_line(&self.tool),
            one_line(&self.message),
            self.step
        )?;
        if self.systemic {
            f.write_str(" [systemic: counted once]")?;
        }
        Ok(())
    }
}

/// The failure budget: `used` is always the failures not part of a systemic event,
/// plus one for each systemic event detected this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BudgetReport {
    /// Consumed this cycle.
    pub used: u32,
    /// The budget a cycle.
    pub limit: u32,
    /// The cycle.
    pub cycle: u32,
    /// Systemic events detected this cycle, each counted once in `used`.
    pub systemic_events: u32,
    /// Failed probes of one tool the budget absorbs before that tool is held open
    /// ([`ExpediterBuilder::probe_allowance`](super::ExpediterBuilder::probe_allowance)).
    pub probe_allowance: u32,
    /// The failures of this cycle, in the order they were recorded.
    pub failures: Vec<BudgetLine>,
}

/// `3 / 5 budget consumed (cycle 1)`, how systemic events were counted if there were
/// any, then one line per failure: `  Failure 1: web_search — "..." (step 4)`.
impl fmt::Display for BudgetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} budget consumed (cycle {})",
            self.used, self.limit, self.cycle
        )?;
        if self.systemic_events > 0 {
            let plural = |n: usize| if n == 1 { "" } else { "s" };
            let ordinary = self.ordinary();
            let in_events = self.failures.len() - ordinary;
            f.write_str(": ")?;
            if ordinary > 0 {
                write!(
                    f,
                    "{ordinary} failure{} counted one each, and ",
                    plural(ordinary)
                )?;
            }
            let events = self.systemic_events as usize;
            write!(
                f,
                "{events} systemic event{} counted once for {in_events} failure{}",
                plural(events),
                plural(in_events),
            )?;
        }
        for (i, line) in self.failures.iter().enumerate() {
            write!(f, "\n  Failure {}: {line}", i + 1)?;
        }
        Ok(())
    }
}

impl BudgetReport {
    /// Whether the agent must pause.
    pub fn exhausted(&self) -> bool {
        self.used >= self.limit
    }

    /// Failures that count one each: those not part of a systemic event.
    pub fn ordinary(&self) -> usize {
        self.failures.iter().filter(|f| !f.systemic).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tool: &str) -> ChargedFailure {
        ChargedFailure {
            tool: tool.into(),
            message: "boom".into(),
            category: None,
            step: 1,
            event: None,
        }
    }

    #[test]
    fn a_systemic_event_counts_once_for_all_its_failures() {
        let mut budget = Budget::new(5);
        for tool in ["A", "A", "B", "A", "B"] {
            budget.charge(entry(tool));
        }
        assert_eq!(budget.used(0), 5);
        budget.absorb_streak(0, "A", 2);
        budget.absorb(0, |e| &*e.tool == "B");
        assert_eq!(budget.used(1), 2, "A's first failure, and the event");
        budget.new_cycle();
        assert_eq!((budget.used(0), budget.cycle()), (0, 2));
    }
}
