//! One agent's share of an expediter: [`Run`], where its calls are decided and its
//! sub-tasks planned.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tower::Service;

use crate::error::BoxError;
use crate::Answer;

use super::capability::Degradation;
use super::decision::{Attempt, Decision};
use super::error::ExpediterError;
use super::report::{self, StatusReport};
use super::scope::{Assessment, SubTask, SubTaskPlan, WorkState, WorkStatus};
use super::toolbox::Tool;
use super::views::ToolView;
use super::Expediter;

/// One agent's run on an [`Expediter`]: where its calls are decided and made, and its
/// sub-tasks planned and finished. Its sub-tasks and the degradations its decisions
/// took are its own; the expediter's tools, budget, cascade state and step count are
/// shared with every other run (see [Sharing](super#sharing)).
///
/// [`Expediter::run`] gives the run of a name, [`Expediter::default_run`] the
/// expediter's own (for an agent that has the expediter to itself). What is not the
/// run's own — the tools' layers, the kill switch, recovery, the offer to the model,
/// the report of every run — is on its [expediter](Run::expediter).
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
    /// `None`: the expediter's default run.
    name: Option<Arc<str>>,
}

impl Run {
    pub(crate) fn new(expediter: Expediter, name: Option<Arc<str>>) -> Self {
        Run { expediter, name }
    }

    fn key(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Its name (empty for the expediter's default run).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The expediter it runs on.
    pub fn expediter(&self) -> &Expediter {
        &self.expediter
    }

    /// Decides one attempted call of `tool` (one step). Runs the tool's pre-call check
    /// first if it has one and no result is cached. A skip's route is recorded as a
    /// degradation of this run.
    ///
    /// A decision reserves nothing: two agents deciding about a tool whose probe is due
    /// may both be told PROBE, and its breaker then lets one probe through and refuses
    /// the other (`Rejected`, for `half_open_full`), as it would refuse a call after a
    /// person forced it open. [`execute`](Self::execute) decides and calls in one: it
    /// reports a call its breaker refused as skipped, with the route, never as made.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn decide(&self, tool: &str) -> Result<Decision, ExpediterError> {
        self.decide_within(tool, Degradation::High).await
    }

    /// [`decide`](Self::decide) for work that cannot live with more than `limit` of
    /// degradation ([`SubTask::max_degradation`]): an alternative that loses more is not
    /// offered as the route, so the degradation report lists only routes the work could
    /// take.
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

    /// Decides, then makes the call only if the decision says so. Never retries: a
    /// failed call is returned as it is and counted once. A call the tool's breaker
    /// refuses after the decision (forced open or killed meanwhile, or its probe slot
    /// taken by another agent) is [`Attempt::Skipped`], with the route a skip would have
    /// had, and the decision in it says SKIP.
    ///
    /// `service` must be wrapped in the expediter's [`layer`](Expediter::layer) for the
    /// same `tool`: the expediter learns of outcomes through that tool's breaker. A
    /// service under another tool's layer has its outcomes counted against that other
    /// tool, and one under a breaker of its own is not counted at all.
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
        self.execute_within(tool, Degradation::High, service, request)
            .await
    }

    /// [`execute`](Self::execute) with [`decide_within`](Self::decide_within)'s limit.
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

    /// Declares a sub-task of this run and decides at once whether it can run now: if
    /// every tool it needs can be used or has an alternative it accepts, it is in
    /// progress (with the degradations it will carry); otherwise it is deferred, with
    /// the tools in the way, and the report says so from this moment. Planning looks
    /// and counts nothing. Planning a sub-task of the same name again replaces it.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn start_subtask(&self, task: SubTask) -> Result<SubTaskPlan, ExpediterError> {
        let toolbox = self.expediter.toolbox();
        let mut involved: Vec<&Arc<Tool>> = Vec::new();
        for name in &task.tools {
            let tool = toolbox
                .get(name)
                .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))?;
            involved.push(tool);
            involved.extend(
                tool.spec
                    .alternatives
                    .iter()
                    .filter_map(|alt| toolbox.get(&alt.tool)),
            );
        }
        let views: HashMap<Arc<str>, ToolView> = involved
            .into_iter()
            .map(|t| (t.spec.name.clone(), ToolView::of(&t.handle.snapshot())))
            .collect();
        let mut ledger = self.expediter.lock();
        ledger.drain();
        let Assessment { routes, blocked } =
            ledger.assess(&task.tools, task.max_degradation, &toolbox, &views);
        let (state, status) = if let Some(reason) = ledger.pause_reason() {
            (
                WorkState::NotAttempted,
                WorkStatus::NotAttempted {
                    why: report::paused_words(reason).to_string(),
                },
            )
        } else if blocked.is_empty() {
            (WorkState::InProgress, WorkStatus::InProgress)
        } else {
            (
                WorkState::Deferred,
                WorkStatus::Deferred {
                    blocked_by: blocked,
                },
            )
        };
        let id = ledger.run_key(self.key());
        let lines = routes.iter().map(|r| r.route.to_string()).collect();
        ledger.plan(id, &task, state, lines);
        Ok(SubTaskPlan {
            name: task.name,
            status,
            routes,
        })
    }

    /// Plans several sub-tasks of this run at once, as
    /// [`start_subtask`](Self::start_subtask) does.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn plan(
        &self,
        tasks: impl IntoIterator<Item = SubTask>,
    ) -> Result<Vec<SubTaskPlan>, ExpediterError> {
        tasks.into_iter().map(|t| self.start_subtask(t)).collect()
    }

    /// Marks a sub-task of this run done.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn complete_subtask(&self, name: &str) -> Result<(), ExpediterError> {
        self.finish(name, WorkState::Done)
    }

    /// Marks a sub-task of this run failed, with why.
    /// `why` is shown in the report [redacted](crate::redact): a URL's user information
    /// and query string, bearer tokens and `key=` values are taken out.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn fail_subtask(&self, name: &str, why: &str) -> Result<(), ExpediterError> {
        // The one place a sub-task's failure reason enters the ledger, from which the
        // report shows it: what looks like a credential is taken out here, as a tool's
        // failure message is where it is made (`Failure::new`).
        let why = crate::redact(why).into_owned();
        self.finish(name, WorkState::Failed { why })
    }

    fn finish(&self, name: &str, state: WorkState) -> Result<(), ExpediterError> {
        let mut ledger = self.expediter.lock();
        let id = ledger.run_key(self.key());
        if ledger.finish(id, name, state) {
            Ok(())
        } else {
            Err(ExpediterError::UnknownSubTask(name.to_string()))
        }
    }

    /// The status report of this run: its sub-tasks and degradations, with the shared
    /// tool health, budget and systemic state. [`Expediter::report`] covers every run.
    pub fn report(&self) -> StatusReport {
        self.expediter.with_survey(|ledger, toolbox, survey| {
            let id = self.key().map_or(Some(0), |name| ledger.run_id_of(name));
            let runs: Vec<_> = id.and_then(|id| ledger.run(id)).into_iter().collect();
            report::build(ledger, toolbox, survey, self.name.clone(), &runs)
        })
    }

    /// Ends the run: its final report, after which its sub-tasks and degradations are
    /// forgotten (a run of the same name starts empty). The expediter's default run
    /// cannot be closed.
    pub fn close(self) -> StatusReport {
        let report = self.report();
        if let Some(name) = self.key() {
            let mut ledger = self.expediter.lock();
            if let Some(id) = ledger.run_id_of(name) {
                ledger.close_run(id);
            }
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
