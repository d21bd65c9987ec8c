//! One agent's share of an expediter: [`Run`].

use std::fmt;
use std::sync::Arc;

use tower::Service;

use crate::error::BoxError;
use crate::Answer;

use super::capability::Degradation;
use super::decision::{Attempt, Decision};
use super::error::ExpediterError;
use super::report::StatusReport;
use super::scope::{SubTask, SubTaskPlan, WorkState};
use super::Expediter;

/// One agent's run on a shared [`Expediter`]: its own sub-tasks and the degradations
/// its decisions took, with the expediter's tools, budget, cascade state and step count
/// shared with every other run (see [Sharing](super#sharing)).
///
/// ```
/// use tower_circuit_breaker::expediter::{Expediter, SubTask, ToolSpec};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_circuit_breaker::expediter::ExpediterError> {
/// let expediter = Expediter::builder()
///     .tool(ToolSpec::new("Bash").fallback("report commands to run manually"))
///     .build()?;
/// let (alice, bob) = (expediter.run("alice"), expediter.run("bob"));
/// alice.start_subtask(SubTask::new("Run test suite", ["Bash"]))?;
/// bob.start_subtask(SubTask::new("Run test suite", ["Bash"]))?;
/// alice.complete_subtask("Run test suite")?;
/// assert_eq!(alice.report().completed.len(), 1);
/// assert_eq!(bob.report().completed.len(), 0);
/// assert_eq!(expediter.report().completed.len() + expediter.report().incomplete.len(), 2);
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones are the same run.
#[derive(Clone)]
pub struct Run {
    expediter: Expediter,
    name: Option<Arc<str>>,
}

impl Run {
    pub(crate) fn new(expediter: Expediter, name: Option<Arc<str>>) -> Self {
        Run { expediter, name }
    }

    fn key(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The expediter it runs on.
    pub fn expediter(&self) -> &Expediter {
        &self.expediter
    }

    /// [`Expediter::decide`], with the route recorded for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn decide(&self, tool: &str) -> Result<Decision, ExpediterError> {
        self.expediter
            .decide_in(self.key(), tool, Degradation::High)
            .await
    }

    /// [`Expediter::decide_within`], with the route recorded for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn decide_within(
        &self,
        tool: &str,
        limit: Degradation,
    ) -> Result<Decision, ExpediterError> {
        self.expediter.decide_in(self.key(), tool, limit).await
    }

    /// [`Expediter::execute`], with the route recorded for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn execute<S, Request, T>(
        &self,
        tool: &str,
        service: &mut S,
        request: Request,
    ) -> Result<Attempt<T>, ExpediterError>
    where
        S: Service<Request, Response = Answer<T>, Error = BoxError>,
    {
        self.expediter
            .execute_in(self.key(), tool, Degradation::High, service, request)
            .await
    }

    /// [`Expediter::execute_within`], with the route recorded for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn execute_within<S, Request, T>(
        &self,
        tool: &str,
        limit: Degradation,
        service: &mut S,
        request: Request,
    ) -> Result<Attempt<T>, ExpediterError>
    where
        S: Service<Request, Response = Answer<T>, Error = BoxError>,
    {
        self.expediter
            .execute_in(self.key(), tool, limit, service, request)
            .await
    }

    /// [`Expediter::start_subtask`] for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn start_subtask(&self, task: SubTask) -> Result<SubTaskPlan, ExpediterError> {
        self.expediter.start_subtask_in(self.key(), task)
    }

    /// [`Expediter::plan`] for this run.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn plan(
        &self,
        tasks: impl IntoIterator<Item = SubTask>,
    ) -> Result<Vec<SubTaskPlan>, ExpediterError> {
        tasks
            .into_iter()
            .map(|t| self.expediter.start_subtask_in(self.key(), t))
            .collect()
    }

    /// Marks a sub-task of this run done.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn complete_subtask(&self, name: &str) -> Result<(), ExpediterError> {
        self.expediter.finish_in(self.key(), name, WorkState::Done)
    }

    /// Marks a sub-task of this run failed, with why.
    /// `why` is shown in the report [redacted](crate::redact): a URL's user information
    /// and query string, bearer tokens and `key=` values are taken out.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn fail_subtask(&self, name: &str, why: &str) -> Result<(), ExpediterError> {
        self.expediter.finish_in(
            self.key(),
            name,
            WorkState::Failed {
                why: why.to_string(),
            },
        )
    }

    /// The status report of this run: its sub-tasks and degradations, with the shared
    /// tool health, budget and systemic state.
    pub fn report(&self) -> StatusReport {
        self.expediter.report_in(self.key(), false)
    }

    /// Ends the run: its final report, after which its sub-tasks and degradations are
    /// forgotten (a run of the same name starts empty). The expediter's default run
    /// cannot be closed.
    pub fn close(self) -> StatusReport {
        let report = self.report();
        if let Some(name) = self.key() {
            self.expediter.close_run(name);
        }
        report
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
