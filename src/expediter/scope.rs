//! Sub-tasks and scope reduction: each piece of the work names the tools
//! it needs; one whose tool cannot be used, with no alternative it accepts, is deferred
//! with its reason, and nothing is skipped silently.

use std::fmt;
use std::sync::Arc;

use crate::escape::one_line;

use super::capability::Degradation;
use super::decision::Route;
use super::next_try::NextTry;
use super::routing::{DegradationRecord, RefusedAlternative};
use super::standing::Unusable;

/// A piece of the agent's task and the tools it needs.
///
/// ```
/// use tower_circuit_breaker::expediter::SubTask;
///
/// let tests = SubTask::new("Run test suite", ["Bash"]);
/// assert_eq!(tests.name(), "Run test suite");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubTask {
    pub(crate) name: Arc<str>,
    pub(crate) tools: Vec<Arc<str>>,
    pub(crate) max_degradation: Degradation,
}

impl SubTask {
    /// A sub-task named `name` needing every tool in `tools`.
    pub fn new<'a>(name: &str, tools: impl IntoIterator<Item = &'a str>) -> Self {
        SubTask {
            name: name.into(),
            tools: tools.into_iter().map(Arc::from).collect(),
            max_degradation: Degradation::High,
        }
    }

    /// The most degradation this sub-task can live with (default: any). An alternative
    /// that loses more is not viable for it: with no other route, it is deferred.
    pub fn max_degradation(mut self, level: Degradation) -> Self {
        self.max_degradation = level;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tools it needs.
    pub fn tools(&self) -> &[Arc<str>] {
        &self.tools
    }

    /// The most degradation it accepts.
    pub fn degradation_limit(&self) -> Degradation {
        self.max_degradation
    }
}

/// `Run test suite [needs Bash]`.
impl fmt::Display for SubTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|t| &**t).collect();
        write!(f, "{} [needs {}]", self.name, tools.join(", "))
    }
}

/// A tool that keeps a sub-task deferred: why it cannot be used, why none of its
/// alternatives will do, and when it is tried next, as of the moment this was made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Blocker {
    /// The tool.
    pub tool: Arc<str>,
    /// Why it cannot be used.
    pub unusable: Unusable,
    /// Its alternatives, each with why it was not taken.
    pub alternatives: Vec<RefusedAlternative>,
    /// When it is tried next.
    pub next_try: NextTry,
    /// What a person could do instead (the manual fallback).
    pub fallback: Option<Arc<str>>,
}

impl Blocker {
    /// What would unblock it: `web_search is tried again ...; or ask the user ...`.
    pub fn unblock(&self) -> String {
        match &self.fallback {
            Some(ask) => format!("{} is tried again {}; or {ask}", self.tool, self.next_try),
            None => format!("{} is tried again {}", self.tool, self.next_try),
        }
    }
}

/// `web_search: OPEN — no usable alternative (docs_fetch loses too much (high
/// degradation))`.
impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tool, self.unusable)?;
        if self.alternatives.is_empty() {
            return f.write_str(" — no alternative");
        }
        let each: Vec<String> = self.alternatives.iter().map(|a| a.to_string()).collect();
        write!(f, " — no usable alternative ({})", each.join(", "))
    }
}

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
    /// Not attempted: a tool it needs cannot be used and no alternative will do. The
    /// blockers are those of the moment the status was made (a plan, a report); none
    /// left means it can be started again.
    Deferred {
        /// The tools in the way.
        blocked_by: Vec<Blocker>,
    },
    /// Not attempted, because every call was paused.
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
            WorkStatus::Deferred { blocked_by } if blocked_by.is_empty() => {
                f.write_str("DEFERRED — its tools can be used again; start it again")
            }
            WorkStatus::Deferred { blocked_by } => {
                let why: Vec<String> = blocked_by.iter().map(|b| b.to_string()).collect();
                let unblock: Vec<String> = blocked_by.iter().map(Blocker::unblock).collect();
                write!(
                    f,
                    "DEFERRED — {}; to unblock: {}",
                    why.join("; "),
                    unblock.join("; ")
                )
            }
            WorkStatus::NotAttempted { why } => write!(f, "NOT ATTEMPTED — {why}"),
        }
    }
}

/// A sub-task in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WorkItem {
    /// The run it belongs to (`None`: the expediter's own).
    pub run: Option<Arc<str>>,
    /// Its name.
    pub name: Arc<str>,
    /// The tools it needs.
    pub tools: Vec<Arc<str>>,
    /// Where it stands.
    pub status: WorkStatus,
    /// The step of its last change.
    pub step: u64,
    /// Degradations it runs with (alternative routes for tools it cannot use).
    pub degradations: Vec<String>,
}

/// `Run test suite (SUCCESS)`, then a `degraded: ...` line for each degradation, each
/// line one line whatever a failure's text holds. The run is not named.
impl fmt::Display for WorkItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&one_line(&format!("{} ({})", self.name, self.status)))?;
        for d in &self.degradations {
            write!(f, "\n    degraded: {}", one_line(&d.to_string()))?;
        }
        Ok(())
    }
}

/// What [`Run::start_subtask`](super::Run::start_subtask) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubTaskPlan {
    /// The sub-task.
    pub name: Arc<str>,
    /// In progress, deferred (with the tools in the way) or not attempted (paused).
    pub status: WorkStatus,
    /// For each needed tool that cannot be used but has a usable alternative: the
    /// route, whose degradation the output must carry.
    pub routes: Vec<ToolRoute>,
}

/// A needed tool that cannot be used, and the alternative route a plan takes for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRoute {
    /// The tool that cannot be used.
    pub tool: Arc<str>,
    /// The route taken instead (an alternative).
    pub route: Route,
}

/// What stands between a piece of work and its tools: the routes around the tools that
/// cannot be used but have an alternative, and the tools in the way.
#[derive(Debug, Default)]
pub(crate) struct Assessment {
    pub(crate) routes: Vec<ToolRoute>,
    pub(crate) blocked: Vec<Blocker>,
}

/// `web_search: use docs_fetch (...) [high degradation: ...]`.
impl fmt::Display for ToolRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tool, self.route)
    }
}

/// `Look up the latest API version: IN PROGRESS`, then a `via ...` line for each route
/// the plan takes around a tool that cannot be used.
impl fmt::Display for SubTaskPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.status)?;
        for route in &self.routes {
            write!(f, "\n    via {route}")?;
        }
        Ok(())
    }
}

impl SubTaskPlan {
    /// Whether the sub-task can go ahead now.
    pub fn can_run(&self) -> bool {
        self.status == WorkStatus::InProgress
    }
}

/// Where a sub-task stands, as the ledger keeps it: the reasons are computed when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkState {
    InProgress,
    Done,
    Failed {
        why: String,
    },
    Deferred,
    /// Planned while every call was paused.
    NotAttempted,
}

/// A sub-task of a run.
#[derive(Debug, Clone)]
pub(crate) struct Work {
    pub(crate) name: Arc<str>,
    pub(crate) tools: Vec<Arc<str>>,
    pub(crate) limit: Degradation,
    pub(crate) state: WorkState,
    pub(crate) step: u64,
    pub(crate) degradations: Vec<String>,
}

/// What one run keeps: its sub-tasks and the degradations its decisions took.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunState {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) work: Vec<Work>,
    pub(crate) degradations: Vec<DegradationRecord>,
}

impl RunState {
    /// Adds a sub-task, or replaces the one of the same name (planned again).
    pub(crate) fn plan(&mut self, work: Work) {
        match self.work.iter_mut().find(|w| w.name == work.name) {
            Some(existing) => *existing = work,
            None => self.work.push(work),
        }
    }

    /// Notes a route taken for `tool` on the sub-tasks in progress that need it.
    pub(crate) fn note_route(&mut self, tool: &Arc<str>, route: &Route) {
        let affected = |w: &Work| w.state == WorkState::InProgress && w.tools.contains(tool);
        if !self.work.iter().any(affected) {
            return;
        }
        let line = route.to_string();
        for work in self.work.iter_mut().filter(|w| affected(w)) {
            if !work.degradations.contains(&line) {
                work.degradations.push(line.clone());
            }
        }
    }
}
