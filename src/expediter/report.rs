//! The status report, made from the ledger and from the breakers as they are when the
//! report is made: every statement of when a tool is tried next comes from one place,
//! [`NextTry`].

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use crate::escape::one_line;
use crate::snapshot::Snapshot;
use crate::State;

use super::budget::{BudgetLine, BudgetReport};
use super::decision::PauseReason;
use super::ledger::{Ledger, Pause};
use super::next_try::NextTry;
use super::precheck::Availability;
use super::routing::DegradationRecord;
use super::scope::{RunState, Work, WorkItem, WorkState, WorkStatus};
use super::standing::Unusable;
use super::table::table;
use super::toolbox::Toolbox;
use super::views::{Survey, ToolView};

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
    /// Failures in a row, as its breaker counts them.
    pub consecutive_failures: u32,
    /// The expediter's step at its last failure.
    pub last_failure_step: Option<u64>,
    /// Its breaker's last failure message.
    pub last_failure: Option<String>,
    /// The expediter's step at its last success.
    pub last_success_step: Option<u64>,
    /// Failed probes of its current outage charged to this cycle's budget: at the
    /// [allowance](super::ExpediterBuilder::probe_allowance) it is held open
    /// ([`Unusable::ProbesStopped`]).
    pub failed_probes: u32,
    /// What the last pre-call check found, while that result is used, or the
    /// availability reported from outside
    /// ([`Expediter::set_availability`](super::Expediter::set_availability)).
    pub availability: Option<Availability>,
    /// Why it cannot be called now on its own account, if it cannot (a pause of every
    /// call is the headline's, and is in `next_try`).
    pub unusable: Option<Unusable>,
    /// When it is tried next.
    pub next_try: NextTry,
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

/// `web_search: OPEN, 3 consecutive failures (last: connect: Connection refused); it is
/// tried again in 2 calls`, or `read_file: CLOSED`.
impl fmt::Display for ToolHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.unusable {
            Some(unusable) => unusable.as_str().to_string(),
            None if self.killed => "KILLED".to_string(),
            None => self.state.as_str().to_uppercase(),
        };
        write!(f, "{}: {state}", one_line(&self.name))?;
        if self.consecutive_failures > 0 {
            write!(f, ", {} consecutive failures", self.consecutive_failures)?;
            if let Some(last) = &self.last_failure {
                write!(f, " (last: {})", one_line(last))?;
            }
        }
        if self.failed_probes > 0 {
            write!(f, ", {}", failed_probes_phrase(self.failed_probes))?;
        }
        match self.next_try {
            NextTry::Now => Ok(()),
            ref next => write!(f, "; it is tried again {next}"),
        }
    }
}

/// `Suspected systemic cause (active, step 7): <cause>`.
impl fmt::Display for SystemicReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.resolved { "resolved" } else { "active" };
        write!(
            f,
            "Suspected systemic cause ({state}, step {}): {}",
            self.step,
            one_line(&self.cause)
        )
    }
}

/// The status report: as text (its `Display`, a text layout of tables) or, with
/// the `serde` feature, as JSON.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StatusReport {
    /// The first line: running, paused for the budget, or paused for a systemic failure.
    pub headline: String,
    /// The run it covers (`None`: every run of the expediter).
    pub run: Option<Arc<str>>,
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
    /// Every degradation the run's decisions took.
    pub degradations: Vec<DegradationRecord>,
    /// The systemic failure, if one was detected (the latest).
    pub systemic: Option<SystemicReport>,
    /// What to do next, one line each (a character of a tool's error text that would
    /// break the line is written as its escape, `\n`).
    pub next_steps: Vec<String>,
}

pub(crate) fn paused_words(reason: PauseReason) -> &'static str {
    match reason {
        PauseReason::SystemicPause => "paused: a systemic failure waits for recovery",
        PauseReason::BudgetExhausted => "paused: the failure budget is used up",
    }
}

/// Where a sub-task stands now.
fn work_status(
    ledger: &Ledger,
    toolbox: &Toolbox,
    views: &HashMap<Arc<str>, ToolView>,
    pause: Option<&Pause>,
    work: &Work,
) -> WorkStatus {
    match (&work.state, pause) {
        (WorkState::Done, _) => WorkStatus::Done,
        (WorkState::Failed { why }, _) => WorkStatus::Failed { why: why.clone() },
        (WorkState::InProgress | WorkState::NotAttempted, Some(pause)) => {
            WorkStatus::NotAttempted {
                why: paused_words(pause.reason).to_string(),
            }
        }
        (WorkState::InProgress, None) => WorkStatus::InProgress,
        (WorkState::NotAttempted, None) => WorkStatus::NotAttempted {
            why: "planned during a pause that has ended; plan it again".to_string(),
        },
        (WorkState::Deferred, _) => WorkStatus::Deferred {
            blocked_by: ledger
                .assess(&work.tools, work.limit, toolbox, views)
                .blocked,
        },
    }
}

fn work_item(run: &RunState, work: &Work, status: WorkStatus) -> WorkItem {
    WorkItem {
        run: run.name.clone(),
        name: work.name.clone(),
        tools: work.tools.clone(),
        status,
        step: work.step,
        degradations: work.degradations.clone(),
    }
}

fn health(ledger: &Ledger, name: &Arc<str>, snapshot: &Snapshot) -> ToolHealth {
    let standing = ledger.standing(name, &ToolView::of(snapshot));
    ToolHealth {
        name: name.clone(),
        state: snapshot.state,
        killed: snapshot.killed,
        consecutive_failures: snapshot.consecutive_failures,
        last_failure_step: ledger.last_failure_step(name),
        last_failure: snapshot
            .last_failure
            .as_ref()
            .map(|f| f.message.to_string()),
        last_success_step: ledger.last_success_step(name),
        failed_probes: ledger.failed_probes(name),
        availability: ledger.availability(name),
        unusable: standing.unusable,
        next_try: standing.next_try,
    }
}

/// The report of `runs` (all of them, or one).
pub(crate) fn build(
    ledger: &Ledger,
    toolbox: &Toolbox,
    views: &Survey<'_>,
    run: Option<Arc<str>>,
    runs: &[&RunState],
) -> StatusReport {
    let budget = ledger.budget();
    let (used, limit) = (ledger.used(), budget.limit());
    let pause = ledger.pause();
    let headline = match (&pause, &run) {
        (Some(p), _) if p.reason == PauseReason::SystemicPause => {
            "SYSTEMIC FAILURE — PAUSING".to_string()
        }
        (Some(_), _) => "FAILURE BUDGET EXHAUSTED — PAUSING".to_string(),
        (None, Some(run)) => format!("STATUS — run {run}, step {}", ledger.step()),
        (None, None) => format!("STATUS — step {}", ledger.step()),
    };
    let mut completed = Vec::new();
    let mut incomplete = Vec::new();
    for state in runs {
        for work in &state.work {
            let status = work_status(ledger, toolbox, &views.by_name, pause.as_ref(), work);
            let item = work_item(state, work, status);
            if item.status == WorkStatus::Done {
                completed.push(item);
            } else {
                incomplete.push(item);
            }
        }
    }
    let tools: Vec<ToolHealth> = toolbox
        .tools()
        .iter()
        .zip(views.snapshots)
        .map(|(tool, snapshot)| health(ledger, &tool.spec.name, snapshot))
        .collect();
    let failures = budget
        .entries()
        .iter()
        .map(|e| BudgetLine {
            tool: e.tool.clone(),
            message: e.message.clone(),
            step: e.step,
            systemic: e.event.is_some(),
        })
        .collect();
    let systemic = ledger.latest_systemic().map(|s| SystemicReport {
        cause: s.describe(),
        signature: s.signature.as_ref().map(|c| c.signature().to_string()),
        tools: s.tools.clone(),
        step: s.step,
        resolved: s.resolved,
    });
    let mut degradations: Vec<DegradationRecord> = runs
        .iter()
        .flat_map(|r| r.degradations.iter().cloned())
        .collect();
    degradations.sort_by_key(|d| d.first_step);
    let next_steps = next_steps(ledger, &tools, &incomplete, pause.as_ref());
    StatusReport {
        headline,
        run,
        step: ledger.step(),
        completed,
        incomplete,
        tools,
        budget: BudgetReport {
            used,
            limit,
            cycle: budget.cycle(),
            systemic_events: ledger.systemic_events_this_cycle(),
            probe_allowance: ledger.probe_allowance(),
            failures,
        },
        degradations,
        systemic,
        next_steps,
    }
}

fn next_steps(
    ledger: &Ledger,
    tools: &[ToolHealth],
    incomplete: &[WorkItem],
    pause: Option<&Pause>,
) -> Vec<String> {
    let mut steps = Vec::new();
    if let Some(event) = ledger.active_systemic() {
        let backoff = ledger.backoff();
        steps.push(format!(
            "Fix the shared cause ({}), then confirm recovery; tools still open are then probed after {} calls, the wait doubling after each failed probe up to {} calls",
            event.describe(),
            backoff.start,
            backoff.cap
        ));
    }
    let by_name: HashMap<&str, &ToolHealth> = tools.iter().map(|t| (&*t.name, t)).collect();
    for row in tools {
        let Some(trouble) = row.unusable else {
            continue;
        };
        let line = match trouble {
            Unusable::Killed => format!(
                "{} is switched off by the kill switch; it is tried again {}",
                row.name, row.next_try
            ),
            Unusable::ForcedOpen => format!(
                "An operator forced {} open; it is tried again {}",
                row.name, row.next_try
            ),
            Unusable::Unavailable => match ledger.reported_why(&row.name) {
                Some(why) => format!(
                    "{} is unavailable: {why}; it is tried again {}",
                    row.name, row.next_try
                ),
                None => format!(
                    "{}'s pre-call check says it is unavailable; it is tried again {}",
                    row.name, row.next_try
                ),
            },
            Unusable::Held => format!(
                "{} is held open on a hint from outside (another replica saw it fail); it is tried again {}",
                row.name, row.next_try
            ),
            Unusable::ProbesStopped => format!(
                "{} stays down ({}): it is held open with no more probes, to keep the budget for the other tools; it is tried again {} (Expediter::resume_probes, or a reset of its breaker)",
                row.name,
                stays_down(row),
                row.next_try
            ),
            _ => {
                let why = match &row.last_failure {
                    Some(message) => format!("last failure: {message}"),
                    None => format!("state {}", row.state),
                };
                format!(
                    "Investigate {} ({why}); it is tried again {}",
                    row.name, row.next_try
                )
            }
        };
        steps.push(line);
    }
    let mut resume_named = false;
    for item in incomplete {
        match &item.status {
            WorkStatus::Deferred { blocked_by } if blocked_by.is_empty() => steps.push(format!(
                "\"{}\": its tools can be used again; plan it again",
                item.name
            )),
            WorkStatus::Deferred { blocked_by } => {
                let unblock: Vec<String> = blocked_by.iter().map(|b| b.unblock()).collect();
                steps.push(format!("\"{}\": {}", item.name, unblock.join("; ")));
            }
            WorkStatus::Failed { why } => {
                let troubled: Vec<&ToolHealth> = item
                    .tools
                    .iter()
                    .filter_map(|t| by_name.get(&**t).copied())
                    .filter(|t| t.unusable.is_some())
                    .collect();
                let names = |rows: &[&ToolHealth]| {
                    rows.iter().map(|t| &*t.name).collect::<Vec<_>>().join(", ")
                };
                if troubled.is_empty() {
                    let all: Vec<&str> = item.tools.iter().map(|t| &**t).collect();
                    steps.push(format!(
                        "\"{}\" failed ({why}) while {} could be used: check what was asked of it, then run it again",
                        item.name,
                        all.join(", ")
                    ));
                } else {
                    let when: Vec<String> = troubled
                        .iter()
                        .map(|t| format!("{} is tried again {}", t.name, t.next_try))
                        .collect();
                    steps.push(format!(
                        "\"{}\" failed ({why}); resume it once {} can be used again ({})",
                        item.name,
                        names(&troubled),
                        when.join("; ")
                    ));
                }
            }
            WorkStatus::NotAttempted { .. } if pause.is_some() => {
                if !resume_named {
                    steps.push(format!("Resume from \"{}\" after resolution", item.name));
                    resume_named = true;
                }
            }
            WorkStatus::NotAttempted { .. } => steps.push(format!(
                "\"{}\" was planned during a pause that has ended: plan it again",
                item.name
            )),
            WorkStatus::InProgress | WorkStatus::Done => {}
        }
    }
    if pause.is_some_and(|p| p.reason == PauseReason::BudgetExhausted) {
        steps.push("Start a new cycle once the failing tools are understood".to_string());
    }
    steps
        .into_iter()
        .map(|step| one_line(&step).into_owned())
        .collect()
}

/// `1 failed probe`, `2 failed probes`.
pub(crate) fn failed_probes_phrase(n: u32) -> String {
    match n {
        1 => "1 failed probe".to_string(),
        n => format!("{n} failed probes"),
    }
}

/// How a tool held after its failed probes got there, in a few words.
fn stays_down(row: &ToolHealth) -> String {
    match &row.last_failure {
        Some(message) => format!(
            "{}; last failure: {message}",
            failed_probes_phrase(row.failed_probes)
        ),
        None => failed_probes_phrase(row.failed_probes),
    }
}

/// What the Next Try column counts.
const NEXT_TRY_LEGEND: &str = "Next Try counts calls of the tool, skipped ones too (of any tool after a systemic failure); peeks, plans and reports count nothing.";

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = writeln!(out, "{}\n", self.headline);
        let run = |item: &WorkItem| match (&self.run, &item.run) {
            (None, Some(run)) => format!("[{run}] "),
            _ => String::new(),
        };
        let _ = writeln!(out, "Completed work:");
        if self.completed.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for item in &self.completed {
            let text = item.to_string().replace('\n', "\n  ");
            let _ = writeln!(out, "  - {}{text}", run(item));
        }
        let _ = writeln!(out, "\nIncomplete work:");
        if self.incomplete.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for item in &self.incomplete {
            let line = format!("{}{} ({})", run(item), item.name, item.status);
            let _ = writeln!(out, "  - {}", one_line(&line));
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
                    t.next_try.short(),
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
        let _ = writeln!(out, "  {NEXT_TRY_LEGEND}");
        for t in self
            .tools
            .iter()
            .filter(|t| t.last_failure.is_some() && (t.state != State::Closed || t.killed))
        {
            let _ = writeln!(
                out,
                "  {}: {} ({} consecutive failures — {})",
                one_line(&t.name),
                t.state.as_str().to_uppercase(),
                t.consecutive_failures,
                one_line(t.last_failure.as_deref().unwrap_or(""))
            );
        }
        for t in self
            .tools
            .iter()
            .filter(|t| t.unusable == Some(Unusable::ProbesStopped))
        {
            let _ = writeln!(
                out,
                "  {}: held open, no more probes: {} used up its allowance ({}); it is tried again {}",
                one_line(&t.name),
                failed_probes_phrase(t.failed_probes),
                self.budget.probe_allowance,
                t.next_try
            );
        }
        let _ = writeln!(out, "\nFailures: {}", self.budget);
        if !self.degradations.is_empty() {
            let _ = writeln!(out, "\nDegradations:");
            for d in &self.degradations {
                let run = match (&self.run, &d.run) {
                    (None, Some(run)) => format!("[{run}] "),
                    _ => String::new(),
                };
                let _ = writeln!(out, "  - {}", one_line(&format!("{run}{d}")));
            }
        }
        if let Some(s) = &self.systemic {
            let _ = writeln!(out, "\n{s}");
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
