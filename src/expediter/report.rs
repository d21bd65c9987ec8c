//! The status report (seed step 7) and what the model is offered.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use crate::machine::{NextProbe, State};
use crate::snapshot::Snapshot;

use super::capability::Degradation;
use super::decision::Route;
use super::precheck::Availability;
use super::{Inner, Ledger, Registry, Tool};

/// Where a sub-task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "status", rename_all = "snake_case"))]
pub enum WorkStatus {
    /// Started, not finished.
    InProgress,
    /// Finished.
    Done,
    /// Attempted and failed.
    Failed {
        /// Why.
        why: String,
    },
    /// Not attempted: a tool it needs is open with no usable alternative.
    Deferred {
        /// Which tool, in which state.
        reason: String,
        /// What would unblock it.
        unblock: String,
    },
    /// Not attempted, for example because the agent paused.
    NotAttempted {
        /// Why.
        why: String,
    },
}

impl fmt::Display for WorkStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkStatus::InProgress => f.write_str("IN PROGRESS"),
            WorkStatus::Done => f.write_str("SUCCESS"),
            WorkStatus::Failed { why } => write!(f, "FAILED — {why}"),
            WorkStatus::Deferred { reason, unblock } => {
                write!(f, "DEFERRED — {reason}; to unblock: {unblock}")
            }
            WorkStatus::NotAttempted { why } => write!(f, "NOT ATTEMPTED — {why}"),
        }
    }
}

/// A sub-task in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WorkItem {
    /// Its name.
    pub name: Arc<str>,
    /// The tools it needs.
    pub tools: Vec<Arc<str>>,
    /// Where it stands.
    pub status: WorkStatus,
    /// The step of its last change.
    pub step: u64,
    /// Degradations it runs with (alternative routes for open tools).
    pub degradations: Vec<String>,
}

/// One row of the tool health table.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ToolHealth {
    /// The tool.
    pub name: Arc<str>,
    /// Its breaker's state.
    pub state: State,
    /// Whether the kill switch is on.
    pub killed: bool,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// The step of the last failure.
    pub last_failure_step: Option<u64>,
    /// The last failure's message.
    pub last_failure: Option<String>,
    /// The step of the last success.
    pub last_success_step: Option<u64>,
    /// What the last pre-call check found, if it has one.
    pub availability: Option<Availability>,
    /// When it will be tried again, in words.
    pub next_probe: String,
}

/// One failure charged to the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BudgetLine {
    /// The tool.
    pub tool: Arc<str>,
    /// What failed.
    pub message: String,
    /// The step.
    pub step: u64,
    /// Part of a systemic event, which counts once for all its failures.
    pub systemic: bool,
    /// Held back while it may belong to a systemic event.
    pub held_back: bool,
}

/// The failure budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BudgetReport {
    /// Consumed this cycle (a systemic event counts once).
    pub used: u32,
    /// The budget a cycle.
    pub limit: u32,
    /// The cycle.
    pub cycle: u32,
    /// The failures behind it.
    pub failures: Vec<BudgetLine>,
}

impl BudgetReport {
    /// Whether the agent must pause.
    pub fn exhausted(&self) -> bool {
        self.used >= self.limit
    }
}

/// A degradation the agent accepted (an alternative tool, the user, or less scope).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DegradationRecord {
    /// The tool that could not be called.
    pub tool: Arc<str>,
    /// What was done instead.
    pub route: Route,
    /// The first step it happened.
    pub first_step: u64,
    /// The last step it happened.
    pub last_step: u64,
    /// How often.
    pub times: u32,
}

/// A systemic failure: several tools failing from one suspected cause.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SystemicReport {
    /// The suspected shared cause, in words.
    pub cause: String,
    /// The shared error signature, if there was one.
    pub signature: Option<String>,
    /// The tools involved.
    pub tools: Vec<Arc<str>>,
    /// The step it was detected.
    pub step: u64,
    /// Whether recovery was confirmed.
    pub resolved: bool,
}

/// The status report: as text (its `Display`, laid out like the seed's tables) or, with
/// the `serde` feature, as JSON.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StatusReport {
    /// The first line: running, paused for the budget, or paused for a systemic failure.
    pub headline: String,
    /// The expediter's step.
    pub step: u64,
    /// Sub-tasks done.
    pub completed: Vec<WorkItem>,
    /// Sub-tasks failed, deferred, not attempted or in progress.
    pub incomplete: Vec<WorkItem>,
    /// One row per tool.
    pub tools: Vec<ToolHealth>,
    /// The failure budget.
    pub budget: BudgetReport,
    /// Every degradation used.
    pub degradations: Vec<DegradationRecord>,
    /// The systemic failure, if one was detected (the latest).
    pub systemic: Option<SystemicReport>,
    /// What to do next.
    pub next_steps: Vec<String>,
}

/// A tool withheld from the model, and the honest line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WithheldTool {
    /// The tool.
    pub name: Arc<str>,
    /// Why it is withheld and when it will be tried again.
    pub line: String,
}

/// What to offer the model: the tools worth calling, and a line for each one withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ToolOffer {
    /// Tools to offer.
    pub offered: Vec<Arc<str>>,
    /// Tools removed, with why.
    pub withheld: Vec<WithheldTool>,
}

pub(super) fn next_probe_words(
    snapshot: &Snapshot,
    recovery: Option<(u64, u64)>,
    step: u64,
) -> String {
    if snapshot.killed {
        return "when an operator revives it".to_string();
    }
    if let Some((from, _)) = recovery {
        if snapshot.state == State::Closed {
            return "—".to_string();
        }
        return match from.saturating_sub(step) {
            0 => "on the next attempt (recovery backoff)".to_string(),
            1 => "in 1 step (recovery backoff)".to_string(),
            n => format!("in {n} steps (recovery backoff)"),
        };
    }
    match snapshot.next_probe {
        NextProbe::NotNeeded => "—".to_string(),
        NextProbe::InFlight => "a probe is under way".to_string(),
        NextProbe::After { calls, .. } => {
            let calls_words = if calls <= 1 {
                "on the next attempt".to_string()
            } else {
                format!("in {calls} attempts")
            };
            match snapshot.retry_after() {
                Some(wait) if !wait.is_zero() => {
                    format!("{calls_words}, not before {}s", wait.as_secs_f64().ceil())
                }
                _ => calls_words,
            }
        }
        NextProbe::Manual => "only after a reset".to_string(),
    }
}

fn health(ledger: &Ledger, tool: &Tool) -> ToolHealth {
    let snapshot = tool.handle.snapshot();
    let row = ledger.row(&tool.spec.name);
    ToolHealth {
        name: tool.spec.name.clone(),
        state: snapshot.state,
        killed: snapshot.killed,
        consecutive_failures: snapshot.consecutive_failures,
        last_failure_step: row.last_failure_step,
        last_failure: snapshot
            .last_failure
            .as_ref()
            .map(|f| f.message.to_string()),
        last_success_step: row.last_success_step,
        availability: row.availability,
        next_probe: next_probe_words(&snapshot, row.recovery, ledger.step),
    }
}

pub(super) fn build(ledger: &Ledger, inner: &Inner, registry: &Registry) -> StatusReport {
    let limit = inner.settings.budget;
    let used = ledger.budget_used();
    let systemic = ledger.systemic.last().map(|s| SystemicReport {
        cause: s.describe(),
        signature: s.category.as_ref().map(|c| c.signature().to_string()),
        tools: s.tools.clone(),
        step: s.step,
        resolved: s.resolved,
    });
    let active = ledger.active_systemic().is_some();
    let headline = if active {
        "SYSTEMIC FAILURE — PAUSING".to_string()
    } else if used >= limit {
        "FAILURE BUDGET EXHAUSTED — PAUSING".to_string()
    } else {
        format!("STATUS — step {}", ledger.step)
    };
    let paused = active || used >= limit;
    let (completed, mut incomplete): (Vec<WorkItem>, Vec<WorkItem>) = ledger
        .subtasks
        .iter()
        .cloned()
        .partition(|w| w.status == WorkStatus::Done);
    if paused {
        for item in &mut incomplete {
            if item.status == WorkStatus::InProgress {
                item.status = WorkStatus::NotAttempted {
                    why: "paused".to_string(),
                };
            }
        }
    }
    let tools: Vec<ToolHealth> = registry.tools.iter().map(|t| health(ledger, t)).collect();
    let failures = ledger
        .entries
        .iter()
        .map(|e| BudgetLine {
            tool: e.tool.clone(),
            message: e.message.clone(),
            step: e.step,
            systemic: e.systemic.is_some(),
            held_back: e.provisional,
        })
        .collect();
    let mut next_steps = Vec::new();
    if let Some(s) = ledger.active_systemic() {
        next_steps.push(format!(
            "Fix the shared cause ({}), then confirm recovery; open tools are then probed after {} steps, backing off to at most {}",
            s.describe(),
            inner.settings.recovery_start,
            inner.settings.recovery_cap
        ));
    }
    for row in tools
        .iter()
        .filter(|t| t.state != State::Closed || t.killed)
    {
        let why = match (&row.last_failure, row.killed) {
            (_, true) => {
                "the kill switch is on; revive it when the tool may be used again".to_string()
            }
            (Some(message), false) => format!("last failure: {message}"),
            (None, false) => format!("state {}", row.state),
        };
        next_steps.push(format!(
            "Investigate {} ({why}); it will be tried again {}",
            row.name, row.next_probe
        ));
    }
    for item in &incomplete {
        match &item.status {
            WorkStatus::Deferred { unblock, .. } => {
                next_steps.push(format!("{}: {unblock}", item.name))
            }
            WorkStatus::Failed { why } => {
                let tools: Vec<&str> = item.tools.iter().map(|t| t.as_ref()).collect();
                next_steps.push(format!(
                    "\"{}\" failed ({why}); resume it once {} works again",
                    item.name,
                    tools.join(", ")
                ));
            }
            WorkStatus::NotAttempted { .. } if paused => {
                next_steps.push(format!("Resume from \"{}\" after resolution", item.name));
                break;
            }
            _ => {}
        }
    }
    if used >= limit {
        next_steps.push("Start a new cycle once the failing tools are understood".to_string());
    }
    StatusReport {
        headline,
        step: ledger.step,
        completed,
        incomplete,
        tools,
        budget: BudgetReport {
            used,
            limit,
            cycle: ledger.cycle,
            failures,
        },
        degradations: ledger.degradations.clone(),
        systemic,
        next_steps,
    }
}

pub(super) fn offer(ledger: &Ledger, inner: &Inner, registry: &Registry) -> ToolOffer {
    let mut offer = ToolOffer {
        offered: Vec::new(),
        withheld: Vec::new(),
    };
    let pause = ledger
        .active_systemic()
        .map(|s| format!("{}; calls resume once recovery is confirmed", s.describe()))
        .or_else(|| {
            let used = ledger.budget_used();
            (used >= inner.settings.budget).then(|| {
                format!(
                    "the failure budget is used up ({used} / {}); calls resume with a new cycle",
                    inner.settings.budget
                )
            })
        });
    for tool in &registry.tools {
        let name = tool.spec.name.clone();
        if let Some(why) = &pause {
            let line = format!("{name} is not offered: all tools are paused because {why}; the status report says what remains");
            offer.withheld.push(WithheldTool { name, line });
            continue;
        }
        let snapshot = tool.handle.snapshot();
        let row = ledger.row(&name);
        let instead = match ledger.pick_route(inner, registry, tool, Degradation::High) {
            Route::Alternative { tool, method, .. } => format!("use {tool} ({method}) instead"),
            Route::Manual { ask } => format!("instead, {ask}"),
            Route::ReduceScope { .. } => "work that needs it is deferred".to_string(),
        };
        let when = next_probe_words(&snapshot, row.recovery, ledger.step);
        let line = if snapshot.killed {
            Some(format!(
                "{name} is not offered: an operator switched it off; it will not be called until an operator revives it; {instead}"
            ))
        } else if row.availability == Some(Availability::Unavailable) {
            Some(format!(
                "{name} is not offered: its pre-call check says it is unavailable; it will be checked again in the next cycle; {instead}"
            ))
        } else if snapshot.state == State::ForcedOpen {
            Some(format!(
                "{name} is not offered: an operator forced it open; it will not be called until an operator resets it; {instead}"
            ))
        } else if snapshot.state == State::Open
            || row.recovery.is_some_and(|(from, _)| from > ledger.step)
        {
            let last = snapshot
                .last_failure
                .as_ref()
                .map(|f| format!(" (last: {})", f.message))
                .unwrap_or_default();
            Some(format!(
                "{name} is not offered: it failed {} times in a row{last}; it will be tried again {when}; {instead}",
                snapshot.consecutive_failures
            ))
        } else {
            None
        };
        match line {
            Some(line) => offer.withheld.push(WithheldTool { name, line }),
            None => offer.offered.push(name),
        }
    }
    offer
}

/// Renders a table like the seed's state table.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rule: String = widths
        .iter()
        .map(|w| format!("+{}", "-".repeat(w + 2)))
        .collect::<String>()
        + "+\n";
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("| {c}{} ", " ".repeat(w - c.chars().count())))
            .collect::<String>()
            + "|\n"
    };
    out.push_str(&rule);
    out.push_str(&line(header.to_vec()));
    out.push_str(&rule);
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out.push_str(&rule);
}

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = writeln!(out, "{}\n", self.headline);
        let _ = writeln!(out, "Completed work:");
        if self.completed.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for item in &self.completed {
            let _ = writeln!(out, "  - {} ({})", item.name, item.status);
            for d in &item.degradations {
                let _ = writeln!(out, "      degraded: {d}");
            }
        }
        let _ = writeln!(out, "\nIncomplete work:");
        if self.incomplete.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for item in &self.incomplete {
            let _ = writeln!(out, "  - {} ({})", item.name, item.status);
        }
        let _ = writeln!(out, "\nTool health:");
        let step = |s: Option<u64>| s.map_or("—".to_string(), |s| format!("step {s}"));
        let rows: Vec<Vec<String>> = self
            .tools
            .iter()
            .map(|t| {
                let state = if t.killed {
                    "KILLED".to_string()
                } else {
                    t.state.as_str().to_uppercase()
                };
                vec![
                    t.name.to_string(),
                    state,
                    t.consecutive_failures.to_string(),
                    step(t.last_failure_step),
                    step(t.last_success_step),
                    t.next_probe.clone(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "Tool",
                "State",
                "Consecutive Fails",
                "Last Failure",
                "Last Success",
                "Next Try",
            ],
            &rows,
        );
        for t in self
            .tools
            .iter()
            .filter(|t| t.last_failure.is_some() && (t.state != State::Closed || t.killed))
        {
            let _ = writeln!(
                out,
                "  {}: {} ({} consecutive failures — {})",
                t.name,
                t.state.as_str().to_uppercase(),
                t.consecutive_failures,
                t.last_failure.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(
            out,
            "\nFailures: {} / {} budget consumed (cycle {})",
            self.budget.used, self.budget.limit, self.budget.cycle
        );
        for (i, line) in self.budget.failures.iter().enumerate() {
            let note = if line.systemic {
                " [systemic: counted once]"
            } else if line.held_back {
                " [held back: may be systemic]"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  Failure {}: {} — \"{}\" (step {}){note}",
                i + 1,
                line.tool,
                line.message,
                line.step
            );
        }
        if !self.degradations.is_empty() {
            let _ = writeln!(out, "\nDegradations:");
            for d in &self.degradations {
                let steps = if d.first_step == d.last_step {
                    format!("step {}", d.first_step)
                } else {
                    format!("steps {}-{}, {} times", d.first_step, d.last_step, d.times)
                };
                let _ = writeln!(out, "  - {}: {} ({steps})", d.tool, d.route);
            }
        }
        if let Some(s) = &self.systemic {
            let state = if s.resolved { "resolved" } else { "active" };
            let _ = writeln!(
                out,
                "\nSuspected systemic cause ({state}, step {}): {}",
                s.step, s.cause
            );
        }
        if !self.next_steps.is_empty() {
            let _ = writeln!(out, "\nNext steps:");
            for (i, s) in self.next_steps.iter().enumerate() {
                let _ = writeln!(out, "  {}. {s}", i + 1);
            }
        }
        f.write_str(out.trim_end())
    }
}

impl fmt::Display for ToolOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.offered.iter().map(|n| n.as_ref()).collect();
        write!(
            f,
            "tools offered: {}",
            if names.is_empty() {
                "(none)".to_string()
            } else {
                names.join(", ")
            }
        )?;
        for w in &self.withheld {
            write!(f, "\n{}", w.line)?;
        }
        Ok(())
    }
}
