//! The expediter: an agent's tools under one failure policy.
//!
//! An agent calls several tools; when one breaks, the run must not fail. The expediter
//! decides *whether* to attempt each call — [`Action::Call`], [`Action::Probe`],
//! [`Action::Skip`] with a [`Route`], or [`Action::Pause`] — while the tools' own tower
//! services decide *how*. It never makes a tool call itself and never retries a failed
//! one: retries happen only through the half-open probe of a later step.
//!
//! What it keeps:
//!
//! - a [capability map](ToolSpec): what each tool provides, its alternatives with their
//!   degradation, a manual fallback, and whose fault its errors are ([`Blame`]: a
//!   missing file is the caller's mistake, not the tool's), checked when built
//!   (unknown tools, a tool naming itself, a tool with neither alternative nor
//!   fallback). Tools may back each other up (two search APIs, each the other's
//!   alternative): a route goes only to a tool that can be used now, so it never
//!   leads back to a tool that is down;
//! - one circuit breaker per tool, all obeying one [`KillSwitch`]; wrap each tool's
//!   service with [`Expediter::layer`];
//! - a failure budget shared by all tools for a cycle (default 5): every failure a
//!   breaker records counts once, a failed probe's too, a systemic event counts once for
//!   all its failures, and when it is used up every decision is a pause. A tool that
//!   stays down would spend one more with each probe (every 3rd call of it, by
//!   default) until every tool pauses, the healthy ones too; so once its failed probes
//!   reach the [probe allowance](ExpediterBuilder::probe_allowance) (default 1), it is
//!   held open with no more probes ([`Unusable::ProbesStopped`]), routed around, and
//!   the report says so, until a [new cycle](Expediter::new_cycle) or a person frees
//!   it ([`Expediter::resume_probes`]);
//! - cascade detection: a breaker opening on the error signature (connection refused,
//!   permission denied...) another open breaker opened on, three opening within a short
//!   window, or a failure with an open breaker's signature that would use up the
//!   budget, is one systemic event: it pauses every call and runs no probe until
//!   [`Expediter::confirm_recovery`]; then probes back off 3, 6, 12... steps, capped at
//!   20;
//! - sub-tasks and scope reduction: [`Expediter::start_subtask`] defers work whose tool
//!   cannot be used with no alternative it accepts;
//! - optional [pre-call checks](PreCheck), [freshness labels](Freshness), and the
//!   [status report](StatusReport), whose every statement of when a tool is tried next
//!   ([`NextTry`]) is computed from the breakers when the report is made.
//!
//! # Sharing
//!
//! Clones of an [`Expediter`] share everything. Several agents (tasks) may share one:
//! the tools and their breakers, the kill switch, the step count, the failure budget of
//! the cycle, the cascade and recovery state and the pre-call results are the
//! expediter's, so one agent's failures spend the budget of all. What is each agent's
//! own is its [`Run`] ([`Expediter::run`]): its sub-tasks (names need only be unique
//! within a run) and the degradations its decisions took, reported by
//! [`Run::report`]. The expediter's own methods (`start_subtask`, `decide`...) work on
//! its default run, and [`Expediter::report`] covers every run.
//!
//! # Calling back in
//!
//! The expediter never holds its lock while it calls out (a breaker's handle, an
//! observer, a pre-call check, a classifier): an observer of a tool's breaker or a
//! pre-call check may call any method of the expediter.
//!
//! A decision counts every failure the tools' breakers recorded before it: it waits
//! for the breakers' events still being delivered by another task (behind a slow
//! observer, say), except when it is made from inside an observer. So an observer of a
//! tool's breaker must not block on what the deciding agent does (a bounded channel
//! only the agent drains): it would wait on the decision that waits on it.
//!
//! ```
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::expediter::{Action, Alternative, Expediter, Route, ToolSpec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let expediter = Expediter::builder()
//!     .tool(ToolSpec::new("Grep").provides("content search across files")
//!         .alternative(Alternative::low("Bash", "rg or grep command", "loses Grep's built-in output formatting"))
//!         .fallback("ask the user which files to examine"))
//!     .tool(ToolSpec::new("Bash").provides("command execution")
//!         .fallback("report commands that need to be run manually"))
//!     .build()?;
//!
//! // Grep is broken: every call fails.
//! let mut grep = ServiceBuilder::new().layer(expediter.layer("Grep")?).service(service_fn(|_: &str| async {
//!     Err::<String, _>(std::io::Error::other("grep: index corrupted"))
//! }));
//! for _ in 0..3 {
//!     let decision = expediter.decide("Grep").await?;
//!     assert_eq!(decision.action, Action::Call);
//!     assert!(grep.ready().await?.call("API_KEY").await.is_err());
//! }
//! // Its breaker is open: the expediter routes to Bash and records the degradation.
//! let decision = expediter.decide("Grep").await?;
//! assert!(matches!(decision.action, Action::Skip { route: Route::Alternative { .. }, .. }));
//! let report = expediter.report();
//! assert_eq!(report.budget.used, 3);
//! assert_eq!(report.degradations.len(), 1);
//! # Ok(()) }
//! ```

mod blame;
mod budget;
mod builder;
mod capability;
mod cascade;
mod category;
mod decision;
mod error;
mod events;
mod freshness;
mod ledger;
mod precheck;
mod recovery;
mod report;
mod routing;
mod run;
mod scope;
mod standing;
mod table;
mod toolbox;

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use tower::{Service, ServiceExt};

pub use self::blame::{Blame, ToolClassifier};
pub use self::budget::{BudgetLine, BudgetReport};
pub use self::builder::ExpediterBuilder;
pub use self::capability::{Alternative, Degradation, ToolSpec};
pub use self::category::FailureCategory;
pub use self::decision::{Action, Attempt, Decision, PauseReason, Route, SkipReason};
pub use self::error::ExpediterError;
pub use self::freshness::{Freshness, FreshnessTracker, Labelled};
pub use self::precheck::{Availability, BoxFuture, PreCheck};
pub use self::report::{StatusReport, SystemicReport, ToolHealth, ToolOffer, WithheldTool};
pub use self::routing::{DegradationRecord, Refused, RefusedAlternative};
pub use self::run::Run;
pub use self::scope::{Blocker, SubTask, SubTaskPlan, ToolRoute, WorkItem, WorkStatus};
pub use self::standing::{NextTry, Unusable};
pub use self::toolbox::ToolLayer;

use self::builder::ExpediterSettings;
use self::category::Categorizer;
use self::events::ToolEvent;
use self::ledger::{CheckSlot, Gate, Ledger, RunId};
use self::report::Survey;
use self::scope::{Assessment, WorkState};
use self::standing::ToolView;
use self::toolbox::{Tool, Toolbox};
use crate::answer::Answer;
use crate::builder::Builder;
use crate::error::{BoxError, Rejected};
use crate::handle::CircuitBreakerHandle;
use crate::kill::KillSwitch;
use crate::machine::{Advice, NextProbe, Reason};
use crate::shared::DeliveryGroup;

/// How many times a report or an offer takes the breakers' snapshots again when the
/// ledger has seen a newer transition than a snapshot shows.
const FRESH_LOOKS: usize = 4;

struct Inner {
    /// Replaced whole when a tool is added: readers clone the `Arc` and let go.
    toolbox: RwLock<Arc<Toolbox>>,
    ledger: Mutex<Ledger>,
    events: Sender<ToolEvent>,
    /// Every tool's breaker's events, counted together: whether the ledger can have
    /// heard of every outcome recorded so far.
    delivery: Arc<DeliveryGroup>,
    kill: KillSwitch,
    breaker: Builder,
    categorizer: Categorizer,
    settings: ExpediterSettings,
}

/// Coordinates an agent's tools under one failure policy. See the [module docs](self).
///
/// # Clone
///
/// Clones share everything: tools, budget, cascade state, runs and report.
#[derive(Clone)]
pub struct Expediter {
    inner: Arc<Inner>,
}

/// What a decision found before its route.
enum Finding {
    Call,
    Probe,
    Skip(SkipReason),
    Pause(ledger::Pause),
}

/// Why `breaker` refused the call whose result this is, if it did: the call was not
/// made. A refusal by another breaker, further inside the service, is the tool's answer.
fn refused_by<T>(breaker: &CircuitBreakerHandle, result: &Result<T, BoxError>) -> Option<Reason> {
    let rejected = result.as_ref().err()?.downcast_ref::<Rejected>()?;
    (rejected.name() == breaker.name()).then(|| rejected.reason())
}

impl Expediter {
    /// A builder with the defaults: budget 5, threshold 3, a probe every 3rd
    /// attempt after opening, recovery probes at 3, 6, 12... steps capped at 20.
    pub fn builder() -> ExpediterBuilder {
        ExpediterBuilder::new()
    }

    fn new(builder: ExpediterBuilder) -> Result<Expediter, ExpediterError> {
        let (tx, rx) = mpsc::channel();
        let settings = builder.settings;
        let mut ledger = Ledger::new(
            rx,
            settings.budget,
            settings.cascade,
            settings.recovery,
            settings.user_available,
            settings.probe_allowance,
        );
        let mut toolbox = Toolbox::default();
        let delivery = Arc::new(DeliveryGroup::default());
        for spec in builder.tools {
            let tool = Tool::build(
                spec,
                &builder.breaker,
                &builder.kill,
                &builder.categorizer,
                tx.clone(),
                &delivery,
            )?;
            ledger.add_tool(tool.spec.name.clone());
            toolbox = toolbox.with(tool);
        }
        Ok(Expediter {
            inner: Arc::new(Inner {
                toolbox: RwLock::new(Arc::new(toolbox)),
                ledger: Mutex::new(ledger),
                events: tx,
                delivery,
                kill: builder.kill,
                breaker: builder.breaker,
                categorizer: builder.categorizer,
                settings,
            }),
        })
    }

    /// Adds a tool while the agent runs; its row starts closed with no failures.
    ///
    /// # Errors
    ///
    /// As for [`ExpediterBuilder::build`], for the map with this tool added.
    pub fn add_tool(&self, spec: ToolSpec) -> Result<(), ExpediterError> {
        let check =
            |toolbox: &Toolbox| capability::validate(toolbox.specs().chain(std::iter::once(&spec)));
        check(&self.toolbox())?;
        // The breaker is built outside every lock; the map is checked again when it
        // goes in, in case another tool was added meanwhile.
        let tool = Tool::build(
            spec.clone(),
            &self.inner.breaker,
            &self.inner.kill,
            &self.inner.categorizer,
            self.inner.events.clone(),
            &self.inner.delivery,
        )?;
        let mut toolbox = self
            .inner
            .toolbox
            .write()
            .unwrap_or_else(|p| p.into_inner());
        check(&toolbox)?;
        let name = tool.spec.name.clone();
        *toolbox = Arc::new(Toolbox::clone(&toolbox).with(tool));
        drop(toolbox);
        self.lock().add_tool(name);
        Ok(())
    }

    /// The breaker layer for a tool's service. Every service it wraps shares the tool's
    /// one breaker; its classifier applies the tool's [blame rule](ToolSpec::blame).
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn layer(&self, tool: &str) -> Result<ToolLayer, ExpediterError> {
        Ok(self.tool(tool)?.layer.clone())
    }

    /// The handle on a tool's breaker.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn handle(&self, tool: &str) -> Result<CircuitBreakerHandle, ExpediterError> {
        Ok(self.tool(tool)?.handle.clone())
    }

    /// The kill switch every tool obeys.
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.inner.kill
    }

    /// The tools' names, in the order they were added.
    pub fn tools(&self) -> Vec<Arc<str>> {
        self.toolbox()
            .tools()
            .iter()
            .map(|t| t.spec.name.clone())
            .collect()
    }

    /// Sets whether a person can be asked (the manual fallback route), for every run.
    pub fn set_user_available(&self, available: bool) {
        self.lock().set_user_available(available);
    }

    /// Reports a tool's availability from outside the expediter, for a tool whose
    /// availability someone watches (a supervisor that sees the tool's server die and
    /// come back, a health endpoint that pushes changes): decisions, routing, the offer
    /// and the report use it as they use a pre-call check's result, and `why` (one
    /// line) says why the tool is unavailable or degraded in the offer and the report.
    ///
    /// Unlike a check's result, a report is not dropped at a new cycle or a systemic
    /// event: it stands until it is reported again or
    /// [cleared](Self::clear_availability), and while it stands the tool's pre-call
    /// check does not run. [`Availability::Degraded`] lowers the tool's threshold by
    /// one, as a check's would.
    ///
    /// ```
    /// use tower_circuit_breaker::expediter::{Action, Availability, Expediter, ToolSpec};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_circuit_breaker::expediter::ExpediterError> {
    /// let expediter = Expediter::builder()
    ///     .tool(ToolSpec::new("search").fallback("ask the user"))
    ///     .build()?;
    /// expediter.set_availability("search", Availability::Unavailable, "its server is restarting")?;
    /// assert!(matches!(expediter.decide("search").await?.action, Action::Skip { .. }));
    /// let offer = expediter.offered_tools();
    /// assert!(offer.withheld[0].line.contains("its server is restarting"));
    /// assert_eq!(expediter.report().budget.used, 0, "routing away spends nothing");
    ///
    /// expediter.set_availability("search", Availability::Available, "its server is back")?;
    /// assert_eq!(expediter.decide("search").await?.action, Action::Call);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn set_availability(
        &self,
        tool: &str,
        availability: Availability,
        why: &str,
    ) -> Result<(), ExpediterError> {
        let tool = self.tool(tool)?;
        self.lock()
            .report_availability(&tool.spec.name, Some((availability, why.into())));
        tool.handle
            .set_threshold_relief(u32::from(availability == Availability::Degraded));
        Ok(())
    }

    /// Clears an availability reported with [`set_availability`](Self::set_availability):
    /// the tool's pre-call check, if it has one, decides again from its next decision.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn clear_availability(&self, tool: &str) -> Result<(), ExpediterError> {
        let tool = self.tool(tool)?;
        self.lock().report_availability(&tool.spec.name, None);
        tool.handle.set_threshold_relief(0);
        Ok(())
    }

    /// The run named `name`: an agent's own sub-tasks and degradations, sharing this
    /// expediter's tools and budget (see [Sharing](self#sharing)). The same name gives
    /// the same run until it is [closed](Run::close).
    pub fn run(&self, name: &str) -> Run {
        Run::new(self.clone(), Some(name.into()))
    }

    /// Decides one attempted call of `tool` (one step). Runs the tool's pre-call check
    /// first if it has one and no result is cached.
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
        self.decide_in(None, tool, Degradation::High).await
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
        self.decide_in(None, tool, limit).await
    }

    /// What a decision about `tool` would be now, with nothing counted: no step is
    /// taken, the tool's breaker counts no attempt (a cooldown in calls does not move),
    /// no pre-call check runs (a cached result is used), and no degradation is
    /// recorded. Asking again gives the same answer until something happens.
    ///
    /// ```
    /// use tower_circuit_breaker::expediter::{Action, Expediter, ToolSpec};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_circuit_breaker::expediter::ExpediterError> {
    /// let expediter = Expediter::builder()
    ///     .tool(ToolSpec::new("Bash").fallback("report commands to run manually"))
    ///     .build()?;
    /// expediter.handle("Bash")?.force_open();
    /// for _ in 0..10 {
    ///     assert!(matches!(expediter.peek("Bash")?, Action::Skip { .. }));
    /// }
    /// assert_eq!(expediter.report().step, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn peek(&self, tool: &str) -> Result<Action, ExpediterError> {
        self.peek_within(tool, Degradation::High)
    }

    /// [`peek`](Self::peek) with [`decide_within`](Self::decide_within)'s limit.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn peek_within(&self, tool: &str, limit: Degradation) -> Result<Action, ExpediterError> {
        let toolbox = self.toolbox();
        let tool = toolbox
            .get(tool)
            .ok_or_else(|| ExpediterError::UnknownTool(tool.to_string()))?;
        let gate = {
            let mut ledger = self.lock();
            ledger.drain();
            let availability = ledger
                .availability(&tool.spec.name)
                .unwrap_or(Availability::Available);
            ledger.gate(
                &tool.spec.name,
                availability,
                ledger.step().saturating_add(1),
            )
        };
        let finding = self.finding(tool, gate, false);
        Ok(self.action(&toolbox, tool, limit, finding, None))
    }

    /// Decides, then makes the call only if the decision says so. Never retries: a
    /// failed call is returned as it is and counted once. A call the tool's breaker
    /// refuses after the decision (forced open or killed meanwhile, or its probe slot
    /// taken by another agent) is [`Attempt::Skipped`], with the route a skip would have
    /// had, and the decision in it says SKIP.
    ///
    /// `service` must be wrapped in this expediter's [`layer`](Self::layer) for the same
    /// `tool`: the expediter learns of outcomes through that tool's breaker. A service
    /// under another tool's layer has its outcomes counted against that other tool, and
    /// one under a breaker of its own is not counted at all.
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
        self.execute_in(None, tool, Degradation::High, service, request)
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
        self.execute_in(None, tool, limit, service, request).await
    }

    /// The user confirmed that the shared cause of a systemic failure is fixed: calls
    /// resume, pre-call checks are run afresh, and tools still open are probed from the
    /// 3rd decision on, then the 6th, 12th... (capped at 20) while their probes fail.
    /// Without an active systemic event it does nothing.
    pub fn confirm_recovery(&self) {
        let mut ledger = self.lock();
        ledger.drain();
        ledger.confirm_recovery();
    }

    /// Starts a new cycle: the failure budget is full again, pre-call checks run
    /// afresh, and tools held open after their failed probes are freed. Breakers keep
    /// their state.
    pub fn new_cycle(&self) {
        let mut ledger = self.lock();
        ledger.drain();
        ledger.new_cycle();
    }

    /// A person frees a tool held open after its failed probes used up their
    /// [allowance](ExpediterBuilder::probe_allowance) (the tool may be back: its
    /// server was restarted, its quota renewed): its next call is the probe, and its
    /// probes go on as its breaker schedules them, each failed one charged to the
    /// budget again, with its whole allowance again. Returns whether it was held. A
    /// reset of its breaker frees it too (and lets every call through at once).
    ///
    /// ```
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_circuit_breaker::expediter::{Action, Expediter, SkipReason, ToolSpec};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let expediter = Expediter::builder()
    ///     .tool(ToolSpec::new("search").fallback("ask the user"))
    ///     .build()?; // budget 5, threshold 3, a probe on every 3rd call, allowance 1
    /// let mut search = ServiceBuilder::new().layer(expediter.layer("search")?).service(
    ///     service_fn(|_: ()| async { Err::<(), _>(std::io::Error::other("connection refused")) }),
    /// );
    /// // Three failures open its breaker; its probe fails too: 4 of 5 spent.
    /// for _ in 0..6 {
    ///     if expediter.decide("search").await?.should_call() {
    ///         let _ = search.ready().await?.call(()).await;
    ///     }
    /// }
    /// assert_eq!(expediter.report().budget.used, 4);
    /// // Held open: no more probes, and the last failure is kept for the other tools.
    /// for _ in 0..10 {
    ///     let action = expediter.decide("search").await?.action;
    ///     assert!(matches!(action, Action::Skip { reason: SkipReason::ProbesStopped, .. }));
    /// }
    /// assert_eq!(expediter.report().budget.used, 4);
    ///
    /// assert!(expediter.resume_probes("search")?);
    /// assert_eq!(expediter.decide("search").await?.action, Action::Probe);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn resume_probes(&self, tool: &str) -> Result<bool, ExpediterError> {
        let tool = self.tool(tool)?;
        let held = {
            let mut ledger = self.lock();
            ledger.drain();
            ledger.resume_probes(&tool.spec.name)
        };
        if held {
            tool.handle.allow_probe();
        }
        Ok(held)
    }

    /// Declares a sub-task of the default run and decides at once whether it can run
    /// now: if every tool it needs can be used or has an alternative it
    /// accepts, it is in progress (with the degradations it will carry); otherwise it is
    /// deferred, with the tools in the way, and the report says so from this moment.
    /// Planning looks and counts nothing. Planning a sub-task of the same name again
    /// replaces it.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn start_subtask(&self, task: SubTask) -> Result<SubTaskPlan, ExpediterError> {
        self.start_subtask_in(None, task)
    }

    /// Plans several sub-tasks of the default run at once, as
    /// [`start_subtask`](Self::start_subtask) does.
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
            .map(|t| self.start_subtask_in(None, t))
            .collect()
    }

    /// Marks a sub-task of the default run done.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn complete_subtask(&self, name: &str) -> Result<(), ExpediterError> {
        self.finish_in(None, name, WorkState::Done)
    }

    /// Marks a sub-task of the default run failed, with why.
    /// `why` is shown in the report [redacted](crate::redact): a URL's user information
    /// and query string, bearer tokens and `key=` values are taken out.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn fail_subtask(&self, name: &str, why: &str) -> Result<(), ExpediterError> {
        self.finish_in(
            None,
            name,
            WorkState::Failed {
                why: why.to_string(),
            },
        )
    }

    /// The tools worth offering to the model now, and for each one withheld (open,
    /// killed, unavailable, paused) one honest line saying why and when it is tried
    /// again — never an invitation to retry.
    pub fn offered_tools(&self) -> ToolOffer {
        self.with_views(report::offer)
    }

    /// The status report of every run: completed and incomplete work,
    /// tool health, budget, degradations, a suspected systemic cause, next steps.
    pub fn report(&self) -> StatusReport {
        self.report_in(None, true)
    }

    // -------------------------------------------------------------------------
    // The plumbing: look outside the lock, decide under it, act outside it.
    // -------------------------------------------------------------------------

    fn toolbox(&self) -> Arc<Toolbox> {
        self.inner
            .toolbox
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn tool(&self, name: &str) -> Result<Arc<Tool>, ExpediterError> {
        self.toolbox()
            .get(name)
            .cloned()
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))
    }

    fn lock(&self) -> LedgerGuard<'_> {
        LedgerGuard(Some(
            self.inner.ledger.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    /// Resolves a run's name to its key (the default run: `None`).
    fn run_id(ledger: &mut Ledger, run: Option<&str>) -> RunId {
        run.map_or(0, |name| ledger.run_named(name))
    }

    async fn decide_in(
        &self,
        run: Option<&str>,
        tool: &str,
        limit: Degradation,
    ) -> Result<Decision, ExpediterError> {
        let toolbox = self.toolbox();
        let tool = toolbox
            .get(tool)
            .ok_or_else(|| ExpediterError::UnknownTool(tool.to_string()))?;
        let availability = self.availability(tool).await;
        // Every failure a breaker recorded before this decision counts in it, even one
        // whose event another task is still delivering (rare: then each tool's breaker
        // is waited for). The tools as they are now: one added while the pre-call check
        // ran may have failed since.
        if !self.inner.delivery.settled() {
            for each in self.toolbox().tools() {
                each.handle.events_delivered().await;
            }
        }
        let (step, gate) = {
            let mut ledger = self.lock();
            ledger.drain();
            ledger.begin_decision(&tool.spec.name, availability)
        };
        let finding = self.finding(tool, gate, true);
        let action = self.action(&toolbox, tool, limit, finding, Some((run, step)));
        Ok(Decision {
            tool: tool.spec.name.clone(),
            step,
            action,
        })
    }

    /// A finding as an action. A skip's route is found under the lock with the
    /// alternatives looked at before it; a decision's (`taken`: its run and step) is
    /// recorded as a degradation.
    fn action(
        &self,
        toolbox: &Toolbox,
        tool: &Tool,
        limit: Degradation,
        finding: Finding,
        taken: Option<(Option<&str>, u64)>,
    ) -> Action {
        let reason = match finding {
            Finding::Call => return Action::Call,
            Finding::Probe => return Action::Probe,
            Finding::Pause(pause) => {
                return Action::Pause {
                    reason: pause.reason,
                    detail: pause.detail,
                }
            }
            Finding::Skip(reason) => reason,
        };
        let views = self.views_of_alternatives(toolbox, tool);
        let mut ledger = self.lock();
        ledger.drain();
        let route = ledger.route(&tool.spec, limit, &views[..]).route;
        if let Some((run, step)) = taken {
            let id = Self::run_id(&mut ledger, run);
            ledger.record_route(id, &tool.spec.name, &route, step);
        }
        Action::Skip { reason, route }
    }

    /// Carries out a gate outside the lock: asks the tool's breaker, counting the
    /// attempt (`count`) or only looking.
    fn finding(&self, tool: &Tool, gate: Gate, count: bool) -> Finding {
        let release = match gate {
            Gate::Pause(pause) => return Finding::Pause(pause),
            Gate::Skip(reason) => return Finding::Skip(reason),
            // Only looked at: no call of a held tool reaches its breaker.
            Gate::Held => {
                return Finding::Skip(match tool.handle.peek() {
                    Advice::Skip(skip)
                        if matches!(skip.reason(), Reason::Killed | Reason::ForcedOpen) =>
                    {
                        SkipReason::Breaker(skip.reason())
                    }
                    _ => SkipReason::ProbesStopped,
                })
            }
            Gate::Breaker { release } => release,
        };
        let advice = if count {
            // After a confirmed recovery the backoff decides when to probe, not the
            // breaker's own cooldown: the two must not add up.
            if release {
                tool.handle.allow_probe();
            }
            tool.handle.advise()
        } else {
            match tool.handle.peek() {
                // What `allow_probe` would do: an open breaker lets the next call
                // through as the probe, unless only a person can end its wait.
                Advice::Skip(skip)
                    if release
                        && skip.reason() == Reason::Open
                        && skip.next_probe() != NextProbe::Manual =>
                {
                    Advice::Probe
                }
                advice => advice,
            }
        };
        match advice {
            Advice::Call => Finding::Call,
            Advice::Probe => Finding::Probe,
            Advice::Skip(skip) => Finding::Skip(SkipReason::Breaker(skip.reason())),
        }
    }

    /// How a tool's alternatives look now: a closed one at the cost of one load, the
    /// others from a snapshot.
    fn views_of_alternatives(&self, toolbox: &Toolbox, tool: &Tool) -> Vec<(Arc<str>, ToolView)> {
        let killed = self.inner.kill.is_killed();
        tool.spec
            .alternatives
            .iter()
            .filter_map(|alt| toolbox.get(&alt.tool))
            .map(|alt| {
                let view = if alt.handle.is_closed() {
                    ToolView::closed(killed)
                } else {
                    ToolView::of(&alt.handle.snapshot())
                };
                (alt.spec.name.clone(), view)
            })
            .collect()
    }

    /// The tool's pre-call check result: cached, or run now, outside every lock. While
    /// one decision runs a tool's check, others (a check calling back in included) use
    /// what was found before, or go to the breaker.
    async fn availability(&self, tool: &Tool) -> Availability {
        let Some(check) = tool.spec.precheck.clone() else {
            return Availability::Available;
        };
        let slot = {
            let mut ledger = self.lock();
            // What the breakers did first: a systemic event drops cached results.
            ledger.drain();
            ledger.check_slot(&tool.spec.name)
        };
        let epoch = match slot {
            CheckSlot::Use(found) => return found,
            CheckSlot::Run(epoch) => epoch,
        };
        let mut running = RunningCheck {
            expediter: self,
            tool: &tool.spec.name,
            epoch,
            found: None,
        };
        let found = check.check().await;
        running.found = Some(found);
        drop(running);
        tool.handle
            .set_threshold_relief(u32::from(found == Availability::Degraded));
        found
    }

    async fn execute_in<S, Request, T>(
        &self,
        run: Option<&str>,
        tool: &str,
        limit: Degradation,
        service: &mut S,
        request: Request,
    ) -> Result<Attempt<T>, ExpediterError>
    where
        S: Service<Request, Response = Answer<T>, Error = BoxError>,
    {
        let decision = self.decide_in(run, tool, limit).await?;
        match &decision.action {
            Action::Call | Action::Probe => {}
            Action::Skip { reason, route } => {
                let (reason, route) = (*reason, route.clone());
                return Ok(Attempt::Skipped {
                    decision,
                    reason,
                    route,
                });
            }
            Action::Pause { reason, detail } => {
                let (reason, detail) = (*reason, detail.clone());
                return Ok(Attempt::Paused {
                    decision,
                    reason,
                    detail,
                });
            }
        }
        let result = match service.ready().await {
            Ok(ready) => ready.call(request).await,
            Err(error) => Err(error),
        };
        let toolbox = self.toolbox();
        let Some(tool) = toolbox.get(&decision.tool) else {
            return Ok(Attempt::Made { decision, result });
        };
        let Some(reason) = refused_by(&tool.handle, &result) else {
            return Ok(Attempt::Made { decision, result });
        };
        // The tool's breaker refused the call it was told to make (a person acted, or
        // another agent's probe took the slot since): it was not made, and is routed as
        // the decision would have been.
        let finding = Finding::Skip(SkipReason::Breaker(reason));
        let action = self.action(&toolbox, tool, limit, finding, Some((run, decision.step)));
        let Action::Skip { reason, route } = &action else {
            unreachable!("a skip's action is a skip");
        };
        let (reason, route) = (*reason, route.clone());
        Ok(Attempt::Skipped {
            decision: Decision { action, ..decision },
            reason,
            route,
        })
    }

    fn start_subtask_in(
        &self,
        run: Option<&str>,
        task: SubTask,
    ) -> Result<SubTaskPlan, ExpediterError> {
        let toolbox = self.toolbox();
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
        let mut ledger = self.lock();
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
        let id = Self::run_id(&mut ledger, run);
        let lines = routes.iter().map(|r| r.route.to_string()).collect();
        ledger.plan(id, &task, state, lines);
        Ok(SubTaskPlan {
            name: task.name,
            status,
            routes,
        })
    }

    fn finish_in(
        &self,
        run: Option<&str>,
        name: &str,
        state: WorkState,
    ) -> Result<(), ExpediterError> {
        // The one place a sub-task's failure reason enters the ledger, from which the
        // report shows it: what looks like a credential is taken out here, as a tool's
        // failure message is where it is made (`Failure::new`).
        let state = match state {
            WorkState::Failed { why } => WorkState::Failed {
                why: crate::redact(&why).into_owned(),
            },
            state => state,
        };
        let mut ledger = self.lock();
        let id = Self::run_id(&mut ledger, run);
        if ledger.finish(id, name, state) {
            Ok(())
        } else {
            Err(ExpediterError::UnknownSubTask(name.to_string()))
        }
    }

    /// Takes every breaker's snapshot outside the lock, then runs `f` under it; takes
    /// them again (a few times at most) when the ledger has applied a transition newer
    /// than a snapshot shows, so that what `f` makes agrees with itself.
    fn with_views<R>(&self, f: impl FnOnce(&Ledger, &Toolbox, &Survey<'_>) -> R) -> R {
        let toolbox = self.toolbox();
        let mut attempt = 1;
        loop {
            let snapshots: Vec<_> = toolbox
                .tools()
                .iter()
                .map(|t| t.handle.snapshot())
                .collect();
            let mut ledger = self.lock();
            ledger.drain();
            let views = Survey::new(&toolbox, &snapshots);
            let behind = toolbox.tools().iter().any(|t| {
                views
                    .by_name
                    .get(&t.spec.name)
                    .is_some_and(|v| ledger.is_ahead_of(&t.spec.name, v))
            });
            if !behind || attempt == FRESH_LOOKS {
                return f(&ledger, &toolbox, &views);
            }
            drop(ledger);
            attempt += 1;
        }
    }

    /// The report of one run (`all`: of every run).
    fn report_in(&self, run: Option<&str>, all: bool) -> StatusReport {
        self.with_views(|ledger, toolbox, views| {
            let runs: Vec<_> = if all {
                ledger.runs().collect()
            } else {
                let id = run.map_or(Some(0), |name| ledger.run_id_of(name));
                id.and_then(|id| ledger.run(id)).into_iter().collect()
            };
            let name = if all { None } else { run.map(Arc::from) };
            report::build(ledger, toolbox, views, name, &runs)
        })
    }

    fn close_run(&self, run: &str) {
        let mut ledger = self.lock();
        if let Some(id) = ledger.run_id_of(run) {
            ledger.close_run(id);
        }
    }
}

/// The ledger's lock. Letting it go emits the log lines the ledger kept meanwhile, so
/// that no tracing subscriber runs under the lock.
struct LedgerGuard<'a>(Option<MutexGuard<'a, Ledger>>);

impl std::ops::Deref for LedgerGuard<'_> {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        self.0.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for LedgerGuard<'_> {
    fn deref_mut(&mut self) -> &mut Ledger {
        self.0.as_mut().expect("held until dropped")
    }
}

impl Drop for LedgerGuard<'_> {
    fn drop(&mut self) {
        let notes = self.0.as_mut().map(|ledger| ledger.take_notes());
        drop(self.0.take());
        for note in notes.into_iter().flatten() {
            note.emit();
        }
    }
}

/// A pre-call check under way: when dropped (done, cancelled, or its future panicked)
/// it tells the ledger, so a check is never left marked as running.
struct RunningCheck<'a> {
    expediter: &'a Expediter,
    tool: &'a Arc<str>,
    epoch: u64,
    found: Option<Availability>,
}

impl Drop for RunningCheck<'_> {
    fn drop(&mut self) {
        self.expediter
            .lock()
            .check_done(self.tool, self.epoch, self.found);
    }
}

impl fmt::Debug for Expediter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expediter")
            .field("tools", &self.tools())
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}
