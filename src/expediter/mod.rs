//! The expediter: an agent's tools under one failure policy (seed `000`).
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
//!   degradation, and a manual fallback, checked when built (unknown tools, cycles, a
//!   tool with neither);
//! - one [`CircuitBreakerLayer`] per tool, all obeying one [`KillSwitch`]; wrap each
//!   tool's service with [`Expediter::layer`];
//! - a failure budget shared by all tools for a cycle (default 5): used up, every
//!   decision is a pause and [`Expediter::report`] says what was done and what was not;
//! - cascade detection: a second breaker opening with the same error signature
//!   (connection refused, permission denied...), or three opening within a short
//!   window, is one systemic event that counts once against the budget, pauses every
//!   call and runs no probe until [`Expediter::confirm_recovery`]; then probes back off
//!   3, 6, 12... steps, capped at 20;
//! - sub-tasks and scope reduction: [`Expediter::start_subtask`] defers, at the moment
//!   of the decision, work whose tool is open with no viable alternative;
//! - optional [pre-call checks](PreCheck), [freshness labels](Freshness) and the
//!   [status report](StatusReport).
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
//!     Err::<String, _>(std::io::Error::other("grep: connection refused"))
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

mod capability;
mod category;
mod decision;
mod freshness;
mod precheck;
mod report;
mod scope;

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tower::{Service, ServiceExt};

pub use self::capability::{Alternative, Degradation, ExpediterError, ToolSpec};
pub use self::category::FailureCategory;
pub use self::decision::{Action, Decision, PauseReason, Route, SkipReason};
pub use self::freshness::{Freshness, FreshnessTracker, Labeled};
pub use self::precheck::{Availability, BoxFuture, PreCheck};
pub use self::report::{
    BudgetLine, BudgetReport, DegradationRecord, StatusReport, SystemicReport, ToolHealth,
    ToolOffer, WithheldTool, WorkItem, WorkStatus,
};
pub use self::scope::{SubTask, SubTaskPlan};

use self::category::Categorizer;
use crate::answer::Answer;
use crate::builder::Builder;
use crate::error::BoxError;
use crate::event::Event;
use crate::handle::CircuitBreakerHandle;
use crate::kill::KillSwitch;
use crate::layer::CircuitBreakerLayer;
use crate::machine::{Advice, Cooldown, Reason, State};
use crate::outcome::Outcome;

/// One tool: its spec, its breaker, and the layer that wraps its service.
struct Tool {
    spec: ToolSpec,
    handle: CircuitBreakerHandle,
    layer: CircuitBreakerLayer,
}

/// What a tool's breaker reports to the expediter, through a channel so that the
/// breaker never waits on the expediter's lock.
enum ToolEvent {
    Failure {
        tool: Arc<str>,
        message: String,
    },
    Success {
        tool: Arc<str>,
    },
    Opened {
        tool: Arc<str>,
        at: Instant,
        from: State,
    },
    Closed {
        tool: Arc<str>,
    },
}

/// Settings shared by the whole expediter.
#[derive(Debug, Clone)]
struct Settings {
    budget: u32,
    cascade_steps: u64,
    cascade_time: Duration,
    recovery_start: u64,
    recovery_cap: u64,
    user_available: bool,
}

/// Builds an [`Expediter`] and checks its capability map.
pub struct ExpediterBuilder {
    tools: Vec<ToolSpec>,
    settings: Settings,
    kill: KillSwitch,
    breaker: Builder,
    categorizer: Categorizer,
}

impl ExpediterBuilder {
    /// Adds a tool.
    pub fn tool(mut self, spec: ToolSpec) -> Self {
        self.tools.push(spec);
        self
    }

    /// Adds several tools.
    pub fn tools(mut self, specs: impl IntoIterator<Item = ToolSpec>) -> Self {
        self.tools.extend(specs);
        self
    }

    /// Failures allowed in a cycle, across all tools, before the agent pauses (default
    /// 5). A systemic event counts once.
    pub fn failure_budget(mut self, budget: u32) -> Self {
        self.settings.budget = budget;
        self
    }

    /// Breakers opening within this many steps or this much time of each other count as
    /// "together" (default 3 steps or 30 s); three together are a systemic event.
    pub fn cascade_window(mut self, steps: u64, time: Duration) -> Self {
        self.settings.cascade_steps = steps;
        self.settings.cascade_time = time;
        self
    }

    /// After a confirmed recovery, open tools are probed after `start` steps, doubling
    /// after each failed probe up to `cap` (default 3 and 20).
    pub fn recovery_backoff(mut self, start: u64, cap: u64) -> Self {
        self.settings.recovery_start = start;
        self.settings.recovery_cap = cap;
        self
    }

    /// Whether a person can be asked (the manual fallback route). Without one, routing
    /// goes from the alternatives straight to scope reduction. Default: yes.
    pub fn user_available(mut self, available: bool) -> Self {
        self.settings.user_available = available;
        self
    }

    /// The kill switch all tools obey (default: a new one, on
    /// [`Expediter::kill_switch`]).
    pub fn kill_switch(mut self, kill: KillSwitch) -> Self {
        self.kill = kill;
        self
    }

    /// Breaker settings for tools that do not set their own (default: the seed's, 3
    /// consecutive failures and a probe every 3rd attempt after opening).
    pub fn default_breaker(mut self, builder: Builder) -> Self {
        self.breaker = builder;
        self
    }

    /// Adds a rule naming failure categories, checked before the built-in ones
    /// (connection refused, permission denied, timeout, ...).
    pub fn categorize(
        mut self,
        rule: impl Fn(&str) -> Option<FailureCategory> + Send + Sync + 'static,
    ) -> Self {
        self.categorizer.push(Arc::new(rule));
        self
    }

    /// The expediter.
    ///
    /// # Errors
    ///
    /// A bad capability map (unknown alternative, a cycle, a tool with neither an
    /// alternative nor a fallback, a duplicate name), a zero budget, an empty cascade
    /// window or recovery backoff, or a tool's bad breaker settings.
    pub fn build(self) -> Result<Expediter, ExpediterError> {
        let s = &self.settings;
        if s.budget == 0 {
            return Err(ExpediterError::ZeroBudget);
        }
        if s.cascade_steps == 0 && s.cascade_time.is_zero() {
            return Err(ExpediterError::EmptyCascadeWindow);
        }
        if s.recovery_start == 0 || s.recovery_cap < s.recovery_start {
            return Err(ExpediterError::InvalidRecoveryBackoff);
        }
        capability::validate(&self.tools)?;
        let (tx, rx) = mpsc::channel();
        let inner = Arc::new(Inner {
            registry: RwLock::new(Registry::default()),
            state: Mutex::new(Ledger::new(rx, self.settings.user_available)),
            tx: Mutex::new(tx),
            kill: self.kill,
            breaker: self.breaker,
            settings: self.settings,
            categorizer: self.categorizer,
        });
        for spec in self.tools {
            let tool = inner.make_tool(spec)?;
            inner.registry_mut().insert(tool);
        }
        Ok(Expediter { inner })
    }
}

impl fmt::Debug for ExpediterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpediterBuilder")
            .field("tools", &self.tools)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Registry {
    tools: Vec<Arc<Tool>>,
    index: HashMap<Arc<str>, usize>,
}

impl Registry {
    fn insert(&mut self, tool: Tool) {
        self.index.insert(tool.spec.name.clone(), self.tools.len());
        self.tools.push(Arc::new(tool));
    }

    fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.index.get(name).map(|&i| self.tools[i].clone())
    }
}

struct Inner {
    registry: RwLock<Registry>,
    state: Mutex<Ledger>,
    tx: Mutex<mpsc::Sender<ToolEvent>>,
    kill: KillSwitch,
    breaker: Builder,
    settings: Settings,
    categorizer: Categorizer,
}

impl Inner {
    fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds a tool's breaker: its own settings or the default, the shared kill switch,
    /// and an observer that forwards outcomes and transitions to the ledger.
    fn make_tool(&self, spec: ToolSpec) -> Result<Tool, ExpediterError> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let name = spec.name.clone();
        let builder = spec.breaker.clone().unwrap_or_else(|| self.breaker.clone());
        let layer = builder
            .name(name.clone())
            .kill_switch(self.kill.clone())
            .on_event(move |event| {
                let tool = name.clone();
                let sent = match event {
                    Event::Recorded {
                        outcome: Outcome::Failure(failure),
                        ..
                    } => ToolEvent::Failure {
                        tool,
                        message: failure.message().unwrap_or("failure").to_string(),
                    },
                    Event::Recorded {
                        outcome: Outcome::Success,
                        ..
                    } => ToolEvent::Success { tool },
                    // A person forcing a breaker open is not a failure: it feeds no cascade.
                    Event::Transition(t) if t.to == State::Open => ToolEvent::Opened {
                        tool,
                        at: t.at,
                        from: t.from,
                    },
                    Event::Transition(t) if t.to == State::Closed => ToolEvent::Closed { tool },
                    _ => return,
                };
                // The expediter may be gone; the breaker goes on regardless.
                let _ = tx.send(sent);
            })
            .build()
            .map_err(|source| ExpediterError::Breaker {
                tool: spec.name.to_string(),
                source,
            })?;
        Ok(Tool {
            handle: layer.handle(),
            layer,
            spec,
        })
    }
}

/// Coordinates an agent's tools under one failure policy. See the [module docs](self).
///
/// # Clone
///
/// Clones share everything: tools, budget, cascade state and report.
#[derive(Clone)]
pub struct Expediter {
    inner: Arc<Inner>,
}

impl Expediter {
    /// A builder with the seed's defaults: budget 5, threshold 3, a probe every 3rd
    /// attempt after opening, recovery probes at 3, 6, 12... steps capped at 20.
    pub fn builder() -> ExpediterBuilder {
        ExpediterBuilder {
            tools: Vec::new(),
            settings: Settings {
                budget: 5,
                cascade_steps: 3,
                cascade_time: Duration::from_secs(30),
                recovery_start: 3,
                recovery_cap: 20,
                user_available: true,
            },
            kill: KillSwitch::new(),
            breaker: Builder::new()
                .failure_threshold(3)
                .cooldown(Cooldown::Calls(3)),
            categorizer: Categorizer::default(),
        }
    }

    /// Adds a tool while the agent runs; its row starts closed with no failures.
    ///
    /// # Errors
    ///
    /// As for [`ExpediterBuilder::build`], for the map with this tool added.
    pub fn add_tool(&self, spec: ToolSpec) -> Result<(), ExpediterError> {
        let mut registry = self.inner.registry_mut();
        let specs: Vec<ToolSpec> = registry
            .tools
            .iter()
            .map(|t| t.spec.clone())
            .chain([spec.clone()])
            .collect();
        capability::validate(&specs)?;
        let tool = self.inner.make_tool(spec)?;
        registry.insert(tool);
        Ok(())
    }

    /// The breaker layer for a tool's service. Every service it wraps shares the tool's
    /// one breaker.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn layer(&self, tool: &str) -> Result<CircuitBreakerLayer, ExpediterError> {
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
        self.inner
            .registry()
            .tools
            .iter()
            .map(|t| t.spec.name.clone())
            .collect()
    }

    /// Sets whether a person can be asked (the manual fallback route).
    pub fn set_user_available(&self, available: bool) {
        self.lock().user_available = available;
    }

    /// Decides one attempted call of `tool` (one step). Runs the tool's pre-call check
    /// first if it has one and no fresh result is cached.
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
        let tool = self.tool(tool)?;
        let availability = self.availability(&tool).await;
        let registry = self.inner.registry();
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        ledger.step += 1;
        let step = ledger.step;
        let action = ledger.decide(&self.inner, &registry, &tool, availability, limit);
        Ok(Decision {
            tool: tool.spec.name.clone(),
            step,
            action,
        })
    }

    /// Decides, then makes the call only if the decision says so. Never retries: a
    /// failed call is returned as it is and counted once.
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
        let decision = self.decide_within(tool, limit).await?;
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
        Ok(Attempt::Made { decision, result })
    }

    /// The user confirmed that the shared cause of a systemic failure is fixed: calls
    /// resume, pre-call checks are run afresh, and open tools are probed after 3 steps,
    /// then 6, 12... (capped at 20) while their probes fail.
    pub fn confirm_recovery(&self) {
        let registry = self.inner.registry();
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        ledger.confirm_recovery(&self.inner.settings);
    }

    /// Starts a new cycle: the failure budget is full again. Breakers keep their state.
    pub fn new_cycle(&self) {
        let registry = self.inner.registry();
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        ledger.new_cycle();
    }

    /// Declares a sub-task and decides at once whether it can run now (seed step 5): if
    /// every tool it needs is closed or has a closed alternative it is in progress
    /// (with the degradations it will carry); otherwise it is deferred, with the reason
    /// and what would unblock it, and the report says so from this moment.
    pub fn start_subtask(&self, task: SubTask) -> Result<SubTaskPlan, ExpediterError> {
        let registry = self.inner.registry();
        for tool in &task.tools {
            if registry.get(tool).is_none() {
                return Err(ExpediterError::UnknownTool(tool.to_string()));
            }
        }
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        Ok(ledger.start_subtask(&self.inner, &registry, task))
    }

    /// Plans several sub-tasks at once: each is started or deferred as with
    /// [`start_subtask`](Self::start_subtask).
    pub fn plan(
        &self,
        tasks: impl IntoIterator<Item = SubTask>,
    ) -> Result<Vec<SubTaskPlan>, ExpediterError> {
        tasks.into_iter().map(|t| self.start_subtask(t)).collect()
    }

    /// Marks a sub-task done.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn complete_subtask(&self, name: &str) -> Result<(), ExpediterError> {
        self.lock().finish_subtask(name, WorkStatus::Done)
    }

    /// Marks a sub-task failed, with why.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownSubTask`].
    pub fn fail_subtask(&self, name: &str, why: &str) -> Result<(), ExpediterError> {
        self.lock().finish_subtask(
            name,
            WorkStatus::Failed {
                why: why.to_string(),
            },
        )
    }

    /// The tools worth offering to the model now, and for each one withheld (open,
    /// killed, unavailable, paused) one honest line saying why and when it will be tried
    /// again — never an invitation to retry.
    pub fn offered_tools(&self) -> ToolOffer {
        let registry = self.inner.registry();
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        report::offer(&ledger, &self.inner, &registry)
    }

    /// The status report (seed step 7): completed and incomplete work, tool health,
    /// budget, degradations, a suspected systemic cause, next steps.
    pub fn report(&self) -> StatusReport {
        let registry = self.inner.registry();
        let mut ledger = self.lock();
        ledger.drain(&self.inner, &registry);
        report::build(&ledger, &self.inner, &registry)
    }

    fn tool(&self, name: &str) -> Result<Arc<Tool>, ExpediterError> {
        self.inner
            .registry()
            .get(name)
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tool's pre-call check result: cached, or run now (outside every lock).
    async fn availability(&self, tool: &Tool) -> Availability {
        let Some(check) = tool.spec.precheck.clone() else {
            return Availability::Available;
        };
        if let Some(cached) = self.lock().row(&tool.spec.name).availability {
            return cached;
        }
        let found = check.check().await;
        self.lock().row_mut(&tool.spec.name).availability = Some(found);
        tool.handle
            .set_threshold_relief(u32::from(found == Availability::Degraded));
        found
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

/// What [`Expediter::execute`] did.
#[derive(Debug)]
pub enum Attempt<T> {
    /// The call was made (once); here is its result.
    Made {
        /// The decision that allowed it.
        decision: Decision,
        /// The tool's answer or error.
        result: Result<Answer<T>, BoxError>,
    },
    /// The call was not made: take the route instead.
    Skipped {
        /// The decision.
        decision: Decision,
        /// Why the tool was not called.
        reason: SkipReason,
        /// Where to go instead.
        route: Route,
    },
    /// The call was not made: the agent must pause and report.
    Paused {
        /// The decision.
        decision: Decision,
        /// Why.
        reason: PauseReason,
        /// What the user needs to know.
        detail: String,
    },
}

impl<T> Attempt<T> {
    /// The decision behind it.
    pub fn decision(&self) -> &Decision {
        match self {
            Attempt::Made { decision, .. }
            | Attempt::Skipped { decision, .. }
            | Attempt::Paused { decision, .. } => decision,
        }
    }
}

/// One failure in the budget ledger.
#[derive(Debug, Clone)]
struct Entry {
    tool: Arc<str>,
    message: String,
    category: Option<FailureCategory>,
    step: u64,
    /// Held back from the budget while it may be part of a systemic event: its category
    /// matches another tool that is open for the same reason.
    provisional: bool,
    /// Part of this systemic event, which counts once for all its failures.
    systemic: Option<usize>,
}

/// A systemic event.
#[derive(Debug, Clone)]
struct Systemic {
    category: Option<FailureCategory>,
    tools: Vec<Arc<str>>,
    step: u64,
    cycle: u32,
    resolved: bool,
}

/// Per-tool rows the breaker does not keep.
#[derive(Debug, Clone, Default)]
struct Row {
    last_failure_step: Option<u64>,
    last_category: Option<FailureCategory>,
    last_success_step: Option<u64>,
    availability: Option<Availability>,
    /// Open, with the category of the failure that opened it.
    open: Option<(u64, Instant, Option<FailureCategory>)>,
    /// After a confirmed recovery: the step from which a probe may go, and the interval.
    recovery: Option<(u64, u64)>,
}

/// Everything the expediter keeps that changes.
struct Ledger {
    rx: mpsc::Receiver<ToolEvent>,
    step: u64,
    cycle: u32,
    entries: Vec<Entry>,
    systemic: Vec<Systemic>,
    rows: HashMap<Arc<str>, Row>,
    opens: Vec<(Arc<str>, u64, Instant)>,
    degradations: Vec<DegradationRecord>,
    subtasks: Vec<WorkItem>,
    user_available: bool,
}

impl Ledger {
    fn new(rx: mpsc::Receiver<ToolEvent>, user_available: bool) -> Self {
        Ledger {
            rx,
            step: 0,
            cycle: 1,
            entries: Vec::new(),
            systemic: Vec::new(),
            rows: HashMap::new(),
            opens: Vec::new(),
            degradations: Vec::new(),
            subtasks: Vec::new(),
            user_available,
        }
    }

    fn row(&self, tool: &str) -> &Row {
        const NO_ROW: &Row = &Row {
            last_failure_step: None,
            last_category: None,
            last_success_step: None,
            availability: None,
            open: None,
            recovery: None,
        };
        self.rows.get(tool).unwrap_or(NO_ROW)
    }

    fn row_mut(&mut self, tool: &Arc<str>) -> &mut Row {
        self.rows.entry(tool.clone()).or_default()
    }

    /// Budget used this cycle: ordinary failures, plus one per systemic event.
    fn budget_used(&self) -> u32 {
        let ordinary = self
            .entries
            .iter()
            .filter(|e| !e.provisional && e.systemic.is_none())
            .count();
        let events = self
            .systemic
            .iter()
            .filter(|s| s.cycle == self.cycle)
            .count();
        (ordinary + events) as u32
    }

    fn active_systemic(&self) -> Option<&Systemic> {
        self.systemic.iter().rev().find(|s| !s.resolved)
    }

    /// Applies what the breakers reported since the last look.
    fn drain(&mut self, inner: &Inner, registry: &Registry) {
        while let Ok(event) = self.rx.try_recv() {
            match event {
                ToolEvent::Failure { tool, message } => self.on_failure(inner, tool, message),
                ToolEvent::Success { tool } => {
                    let step = self.step;
                    self.row_mut(&tool).last_success_step = Some(step);
                    for entry in self.entries.iter_mut().filter(|e| e.tool == tool) {
                        entry.provisional = false;
                    }
                }
                ToolEvent::Opened { tool, at, from } => {
                    self.on_opened(inner, registry, tool, at, from)
                }
                ToolEvent::Closed { tool } => {
                    let row = self.row_mut(&tool);
                    row.open = None;
                    row.recovery = None;
                    for entry in self.entries.iter_mut().filter(|e| e.tool == tool) {
                        entry.provisional = false;
                    }
                }
            }
        }
    }

    fn on_failure(&mut self, inner: &Inner, tool: Arc<str>, message: String) {
        let category = inner.categorizer.categorize(&message);
        let step = self.step;
        let row = self.row_mut(&tool);
        row.last_failure_step = Some(step);
        row.last_category = category.clone();
        // A failure during an active systemic event of the same signature belongs to it.
        let active = self
            .systemic
            .iter()
            .position(|s| !s.resolved && s.category.is_some() && s.category == category);
        // A failure with the signature of another tool that is open for that reason may
        // be the same cause: hold it back from the budget until that is known.
        let correlated = category.is_some()
            && self.rows.iter().any(|(name, row)| {
                *name != tool && row.open.as_ref().is_some_and(|(_, _, c)| *c == category)
            });
        self.entries.push(Entry {
            tool,
            message,
            category,
            step,
            provisional: active.is_none() && correlated,
            systemic: active,
        });
    }

    fn on_opened(
        &mut self,
        inner: &Inner,
        registry: &Registry,
        tool: Arc<str>,
        at: Instant,
        from: State,
    ) {
        let step = self.step;
        let settings = &inner.settings;
        let row = self.row_mut(&tool);
        let category = row.last_category.clone();
        row.open = Some((step, at, category.clone()));
        // A failed probe after a confirmed recovery doubles the wait, up to the cap. It
        // is the known event still passing, not a new one.
        if let Some((_, interval)) = row.recovery {
            if from == State::HalfOpen {
                let interval = (interval * 2).min(settings.recovery_cap);
                row.recovery = Some((step + interval, interval));
            }
            return;
        }
        if let Some(index) = self.systemic.iter().position(|s| !s.resolved) {
            if !self.systemic[index].tools.contains(&tool) {
                self.systemic[index].tools.push(tool.clone());
            }
            self.absorb(index, &tool, None);
            return;
        }
        self.opens.push((tool.clone(), step, at));
        let same_signature: Vec<Arc<str>> = match &category {
            Some(_) => self
                .rows
                .iter()
                .filter(|(_, row)| {
                    row.recovery.is_none()
                        && row.open.as_ref().is_some_and(|(_, _, c)| *c == category)
                })
                .map(|(name, _)| name.clone())
                .collect(),
            None => Vec::new(),
        };
        let together: Vec<Arc<str>> = {
            let mut names: Vec<Arc<str>> = self
                .opens
                .iter()
                .filter(|(_, s, t)| {
                    step.saturating_sub(*s) <= settings.cascade_steps
                        || at.saturating_duration_since(*t) <= settings.cascade_time
                })
                .map(|(name, ..)| name.clone())
                .collect();
            names.sort();
            names.dedup();
            names
        };
        let (tools, signature) = if same_signature.len() >= 2 {
            (same_signature, category)
        } else if together.len() >= 3 {
            (together, None)
        } else {
            return;
        };
        let index = self.systemic.len();
        self.systemic.push(Systemic {
            category: signature.clone(),
            tools: order_like(registry, tools),
            step,
            cycle: self.cycle,
            resolved: false,
        });
        let members = self.systemic[index].tools.clone();
        for member in &members {
            self.absorb(index, member, signature.as_ref());
        }
        // Pre-call results may be stale after a systemic event.
        for row in self.rows.values_mut() {
            row.availability = None;
        }
        let cause = self.systemic[index].describe();
        tracing::warn!(target: "tower_circuit_breaker::expediter", tools = ?members, "systemic failure: {cause}; pausing all calls");
    }

    /// Folds a tool's failures of this cycle into a systemic event: with a signature,
    /// those of that signature (and those held back as maybe correlated); without one
    /// (three tools opening together), all of them.
    fn absorb(&mut self, index: usize, tool: &Arc<str>, signature: Option<&FailureCategory>) {
        for entry in self
            .entries
            .iter_mut()
            .filter(|e| e.tool == *tool && e.systemic.is_none())
        {
            if signature.is_none_or(|sig| entry.category.as_ref() == Some(sig)) || entry.provisional
            {
                entry.systemic = Some(index);
                entry.provisional = false;
            }
        }
    }

    fn confirm_recovery(&mut self, settings: &Settings) {
        let Some(index) = self.systemic.iter().rposition(|s| !s.resolved) else {
            return;
        };
        self.systemic[index].resolved = true;
        let step = self.step;
        for row in self.rows.values_mut() {
            row.availability = None;
            if row.open.is_some() && row.recovery.is_none() {
                row.recovery = Some((step + settings.recovery_start, settings.recovery_start));
            }
        }
        self.opens.clear();
        tracing::info!(target: "tower_circuit_breaker::expediter", "recovery confirmed: probes resume with backoff");
    }

    fn new_cycle(&mut self) {
        self.cycle += 1;
        self.entries.clear();
        for row in self.rows.values_mut() {
            row.availability = None;
        }
    }

    fn decide(
        &mut self,
        inner: &Inner,
        registry: &Registry,
        tool: &Tool,
        availability: Availability,
        limit: Degradation,
    ) -> Action {
        if let Some(event) = self.active_systemic() {
            return Action::Pause {
                reason: PauseReason::SystemicPause,
                detail: format!(
                    "{}; no calls and no probes until recovery is confirmed",
                    event.describe()
                ),
            };
        }
        let used = self.budget_used();
        if used >= inner.settings.budget {
            return Action::Pause {
                reason: PauseReason::BudgetExhausted,
                detail: format!(
                    "failure budget exhausted ({used} / {})",
                    inner.settings.budget
                ),
            };
        }
        if availability == Availability::Unavailable {
            let route = self.route(inner, registry, tool, limit);
            return Action::Skip {
                reason: SkipReason::Unavailable,
                route,
            };
        }
        let name = &tool.spec.name;
        if let Some((from, _)) = self.row(name).recovery {
            if self.step < from {
                let route = self.route(inner, registry, tool, limit);
                return Action::Skip {
                    reason: SkipReason::Breaker(Reason::Open),
                    route,
                };
            }
            // After a confirmed recovery the backoff schedule decides when to probe,
            // not the breaker's own cooldown: the two must not add up.
            tool.handle.allow_probe();
        }
        match tool.handle.advise() {
            Advice::Call => Action::Call,
            Advice::Probe => Action::Probe,
            Advice::Skip(skip) => {
                let route = self.route(inner, registry, tool, limit);
                Action::Skip {
                    reason: SkipReason::Breaker(skip.reason()),
                    route,
                }
            }
        }
    }

    /// Whether a tool can be used as an alternative now, without asking its breaker for
    /// a step.
    fn usable(&self, inner: &Inner, tool: &Tool) -> bool {
        !inner.kill.is_killed()
            && tool.handle.is_closed()
            && self.row(&tool.spec.name).availability != Some(Availability::Unavailable)
    }

    /// The route for a tool that cannot be called (seed step 4), recorded as a
    /// degradation.
    fn route(
        &mut self,
        inner: &Inner,
        registry: &Registry,
        tool: &Tool,
        limit: Degradation,
    ) -> Route {
        let route = self.pick_route(inner, registry, tool, limit);
        self.note_degradation(&tool.spec.name, &route);
        route
    }

    /// The route, in priority order: a usable low-degradation alternative, a usable high
    /// one (within `limit`), the manual fallback if a person can be asked, scope
    /// reduction.
    fn pick_route(
        &self,
        inner: &Inner,
        registry: &Registry,
        tool: &Tool,
        limit: Degradation,
    ) -> Route {
        tool.spec
            .routing_order()
            .filter(|alt| alt.level <= limit)
            .find(|alt| {
                registry
                    .get(&alt.tool)
                    .is_some_and(|t| self.usable(inner, &t))
            })
            .map(|alt| Route::Alternative {
                tool: alt.tool.clone(),
                method: alt.method.clone(),
                degradation: alt.degradation.clone(),
                level: alt.level,
            })
            .or_else(|| {
                let ask = tool.spec.fallback.clone()?;
                self.user_available.then_some(Route::Manual { ask })
            })
            .unwrap_or_else(|| Route::ReduceScope {
                note: format!(
                    "SKIPPED: {} — no tools available",
                    if tool.spec.provides.is_empty() {
                        &tool.spec.name
                    } else {
                        &tool.spec.provides
                    }
                ),
            })
    }

    fn note_degradation(&mut self, tool: &Arc<str>, route: &Route) {
        let step = self.step;
        let affected =
            |item: &WorkItem| item.status == WorkStatus::InProgress && item.tools.contains(tool);
        if self.subtasks.iter().any(affected) {
            let line = route.to_string();
            for item in self.subtasks.iter_mut().filter(|item| affected(item)) {
                if !item.degradations.contains(&line) {
                    item.degradations.push(line.clone());
                }
            }
        }
        match self
            .degradations
            .iter_mut()
            .find(|d| d.tool == *tool && d.route == *route)
        {
            Some(existing) => {
                existing.times += 1;
                existing.last_step = step;
            }
            None => self.degradations.push(DegradationRecord {
                tool: tool.clone(),
                route: route.clone(),
                first_step: step,
                last_step: step,
                times: 1,
            }),
        }
    }

    fn start_subtask(&mut self, inner: &Inner, registry: &Registry, task: SubTask) -> SubTaskPlan {
        let paused =
            self.active_systemic().is_some() || self.budget_used() >= inner.settings.budget;
        let mut routes = Vec::new();
        let mut blocked = Vec::new();
        for name in &task.tools {
            let Some(tool) = registry.get(name) else {
                continue;
            };
            if self.usable(inner, &tool) {
                continue;
            }
            // Planning is not a skip: the route is recorded as a degradation only when
            // a decision takes it.
            match self.pick_route(inner, registry, &tool, task.max_degradation) {
                route @ Route::Alternative { .. } => routes.push((name.clone(), route)),
                _ => blocked.push(tool),
            }
        }
        let status = if paused {
            WorkStatus::NotAttempted {
                why: "paused".to_string(),
            }
        } else if blocked.is_empty() {
            WorkStatus::InProgress
        } else {
            let reason = blocked
                .iter()
                .map(|tool| self.blocked_reason(inner, registry, tool, task.max_degradation))
                .collect::<Vec<_>>()
                .join("; ");
            let unblock = blocked
                .iter()
                .map(|tool| {
                    let snapshot = tool.handle.snapshot();
                    let when = report::next_probe_words(
                        &snapshot,
                        self.row(&tool.spec.name).recovery,
                        self.step,
                    );
                    match &tool.spec.fallback {
                        Some(ask) => {
                            format!("{} will be tried again {when}; or {ask}", tool.spec.name)
                        }
                        None => format!("{} will be tried again {when}", tool.spec.name),
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            WorkStatus::Deferred { reason, unblock }
        };
        let step = self.step;
        if let WorkStatus::Deferred { reason, .. } = &status {
            tracing::info!(target: "tower_circuit_breaker::expediter", task = %task.name, "DEFERRED: {reason}");
        }
        let item = WorkItem {
            name: task.name.clone(),
            tools: task.tools.clone(),
            status: status.clone(),
            step,
            degradations: routes.iter().map(|(_, r)| r.to_string()).collect(),
        };
        match self.subtasks.iter_mut().find(|w| w.name == task.name) {
            Some(existing) => *existing = item,
            None => self.subtasks.push(item),
        }
        SubTaskPlan {
            name: task.name,
            status,
            routes,
        }
    }

    /// Why a tool blocks a sub-task: its state, and what is wrong with each of its
    /// alternatives.
    fn blocked_reason(
        &self,
        inner: &Inner,
        registry: &Registry,
        tool: &Tool,
        accept: Degradation,
    ) -> String {
        let state_of = |t: &Tool| {
            let snapshot = t.handle.snapshot();
            if inner.kill.is_killed() {
                "KILLED".to_string()
            } else if self.row(&t.spec.name).availability == Some(Availability::Unavailable) {
                "UNAVAILABLE".to_string()
            } else {
                snapshot.state.as_str().to_uppercase()
            }
        };
        let alternatives: Vec<String> = tool
            .spec
            .routing_order()
            .filter_map(|alt| {
                let other = registry.get(&alt.tool)?;
                Some(if alt.level > accept {
                    format!(
                        "{} loses too much ({} degradation)",
                        alt.tool,
                        alt.level.as_str()
                    )
                } else {
                    format!("{}: {}", alt.tool, state_of(&other))
                })
            })
            .collect();
        if alternatives.is_empty() {
            format!("{}: {} — no alternative", tool.spec.name, state_of(tool))
        } else {
            format!(
                "{}: {} — no usable alternative ({})",
                tool.spec.name,
                state_of(tool),
                alternatives.join(", ")
            )
        }
    }

    fn finish_subtask(&mut self, name: &str, status: WorkStatus) -> Result<(), ExpediterError> {
        let step = self.step;
        let item = self
            .subtasks
            .iter_mut()
            .find(|w| *w.name == *name)
            .ok_or_else(|| ExpediterError::UnknownSubTask(name.to_string()))?;
        item.status = status;
        item.step = step;
        Ok(())
    }
}

impl Systemic {
    fn describe(&self) -> String {
        let tools = self
            .tools
            .iter()
            .map(|t| t.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        match &self.category {
            Some(c) => format!(
                "multiple tools failed with {} ({tools}) — likely a {} issue",
                c.signature(),
                c.domain()
            ),
            None => format!(
                "{} tools opened together ({tools}) — likely a shared infrastructure issue",
                self.tools.len()
            ),
        }
    }
}

/// Names in the order the tools were added.
fn order_like(registry: &Registry, mut names: Vec<Arc<str>>) -> Vec<Arc<str>> {
    names.sort_by_key(|n| registry.index.get(n).copied().unwrap_or(usize::MAX));
    names.dedup();
    names
}
