//! Sub-tasks and scope reduction (seed step 5).

use std::sync::Arc;

use super::capability::Degradation;
use super::decision::Route;
use super::report::WorkStatus;

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

/// What [`Expediter::start_subtask`](super::Expediter::start_subtask) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubTaskPlan {
    /// The sub-task.
    pub name: Arc<str>,
    /// In progress, deferred (with reason and what would unblock it) or not attempted
    /// (paused).
    pub status: WorkStatus,
    /// For each needed tool that is open but has a usable alternative: the route, whose
    /// degradation the output must carry.
    pub routes: Vec<(Arc<str>, Route)>,
}

impl SubTaskPlan {
    /// Whether the sub-task can go ahead now.
    pub fn can_run(&self) -> bool {
        self.status == WorkStatus::InProgress
    }
}
