//! The expediter: an agent's tools under one failure policy.
//!
//! An agent calls several tools; when one breaks, the run must not fail. The expediter
//! decides, in the agent's [`Run`], *whether* to attempt each call — [`Action::Call`],
//! [`Action::Probe`], [`Action::Skip`] with a [`Route`], or [`Action::Pause`] — while the
//! tools' own tower services decide *how*. It never makes a tool call itself and never retries a failed
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
//! - sub-tasks and scope reduction: [`Run::start_subtask`] defers work whose tool
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
//! own is its [`Run`] ([`Expediter::run`]), where it decides and makes its calls and
//! plans its sub-tasks: its sub-tasks (names need only be unique within a run) and the
//! degradations its decisions took, reported by [`Run::report`]. An agent that has the
//! expediter to itself uses the expediter's [default run](Expediter::default_run), and
//! [`Expediter::report`] covers every run.
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
//! let run = expediter.default_run(); // one agent, with the expediter to itself
//!
//! // Grep is broken: every call fails.
//! let mut grep = ServiceBuilder::new().layer(expediter.layer("Grep")?).service(service_fn(|_: &str| async {
//!     Err::<String, _>(std::io::Error::other("grep: index corrupted"))
//! }));
//! for _ in 0..3 {
//!     let decision = run.decide("Grep").await?;
//!     assert_eq!(decision.action, Action::Call);
//!     assert!(grep.ready().await?.call("API_KEY").await.is_err());
//! }
//! // Its breaker is open: the expediter routes to Bash and records the degradation.
//! let decision = run.decide("Grep").await?;
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
mod next_try;
mod offer;
mod precheck;
mod recovery;
mod report;
mod routing;
mod run;
mod scope;
mod standing;
mod table;
mod toolbox;
mod views;

use std::fmt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};

pub use self::blame::{Blame, ToolClassifier};
pub use self::budget::{BudgetLine, BudgetReport};
pub use self::builder::ExpediterBuilder;
pub use self::capability::{Alternative, Degradation, ToolSpec};
pub use self::category::FailureCategory;
pub use self::decision::{Action, Attempt, Decision, PauseReason, Route, SkipReason};
pub use self::error::ExpediterError;
pub use self::freshness::{Freshness, FreshnessTracker, Labelled};
pub use self::next_try::NextTry;
pub use self::offer::{ToolOffer, WithheldTool};
pub use self::precheck::{Availability, BoxFuture, PreCheck};
pub use self::report::{StatusReport, SystemicReport, ToolHealth};
pub use self::routing::{DegradationRecord, Refused, RefusedAlternative};
pub use self::run::Run;
pub use self::scope::{Blocker, SubTask, SubTaskPlan, ToolRoute, WorkItem, WorkStatus};
pub use self::standing::Unusable;
pub use self::toolbox::ToolLayer;

use self::builder::ExpediterSettings;
use self::category::Categorizer;
use self::events::ToolEvent;
use self::ledger::{Ledger, LedgerGuard};
use self::toolbox::{Tool, Toolbox};
use self::views::Survey;
use crate::DeliveryGroup;
use crate::{Builder, CircuitBreakerHandle, KillSwitch};

/// How many times a report or an offer takes the breakers' snapshots again when the
/// ledger has seen a newer transition than a snapshot shows.
const FRESH_LOOKS: usize = 4;

struct Inner {
    /// Replaced whole when a tool is added: readers clone the `Arc` and let go.
    toolbox: RwLock<Arc<Toolbox>>,
    ledger: Mutex<Ledger>,
    events: mpsc::Sender<ToolEvent>,
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
    /// line) says why the tool is unavailable or degraded in the offer and the report,
    /// [redacted](crate::redact) as a sub-task's failure is: a URL's user information and
    /// query string, bearer tokens and `key=` values are taken out (a health check's error
    /// text may hold them).
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
    /// let run = expediter.default_run();
    /// expediter.set_availability("search", Availability::Unavailable, "its server is restarting")?;
    /// assert!(matches!(run.decide("search").await?.action, Action::Skip { .. }));
    /// let offer = expediter.offered_tools();
    /// assert!(offer.withheld[0].line.contains("its server is restarting"));
    /// assert_eq!(expediter.report().budget.used, 0, "routing away spends nothing");
    ///
    /// expediter.set_availability("search", Availability::Available, "its server is back")?;
    /// assert_eq!(run.decide("search").await?.action, Action::Call);
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
        // The one place a reported reason enters the ledger, from which the offer and the
        // report show it: what looks like a credential is taken out here.
        let why = crate::redact(why).into();
        self.lock()
            .report_availability(&tool.spec.name, Some((availability, why)));
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

    /// The run named `name`: where an agent decides and makes its calls and plans its
    /// sub-tasks, with its own sub-tasks and degradations, sharing this expediter's
    /// tools and budget (see [Sharing](self#sharing)). The same name gives the same run
    /// until it is [closed](Run::close).
    pub fn run(&self, name: &str) -> Run {
        Run::new(self.clone(), Some(name.into()))
    }

    /// The expediter's own run, for an agent that has the expediter to itself: its
    /// report names no run, and it cannot be closed. Every call gives the same run.
    pub fn default_run(&self) -> Run {
        Run::new(self.clone(), None)
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

    /// [`peek`](Self::peek) with [`Run::decide_within`]'s limit.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub fn peek_within(&self, tool: &str, limit: Degradation) -> Result<Action, ExpediterError> {
        self.peek_in(tool, limit)
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
    /// let run = expediter.default_run();
    /// // Three failures open its breaker; its probe fails too: 4 of 5 spent.
    /// for _ in 0..6 {
    ///     if run.decide("search").await?.should_call() {
    ///         let _ = search.ready().await?.call(()).await;
    ///     }
    /// }
    /// assert_eq!(expediter.report().budget.used, 4);
    /// // Held open: no more probes, and the last failure is kept for the other tools.
    /// for _ in 0..10 {
    ///     let action = run.decide("search").await?.action;
    ///     assert!(matches!(action, Action::Skip { reason: SkipReason::ProbesStopped, .. }));
    /// }
    /// assert_eq!(expediter.report().budget.used, 4);
    ///
    /// assert!(expediter.resume_probes("search")?);
    /// assert_eq!(run.decide("search").await?.action, Action::Probe);
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

    /// The tools worth offering to the model now, and for each one withheld (open,
    /// killed, unavailable, paused) one honest line saying why and when it is tried
    /// again — never an invitation to retry.
    pub fn offered_tools(&self) -> ToolOffer {
        self.with_survey(offer::offer)
    }

    /// The status report of every run: completed and incomplete work,
    /// tool health, budget, degradations, a suspected systemic cause, next steps.
    /// [`Run::report`] covers one run.
    pub fn report(&self) -> StatusReport {
        self.with_survey(|ledger, toolbox, survey| {
            let runs: Vec<_> = ledger.runs().collect();
            report::build(ledger, toolbox, survey, None, &runs)
        })
    }

    // -------------------------------------------------------------------------
    // The façade's access to what its clones share: the tools, read without a lock
    // held, and the ledger, under its lock.
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
        LedgerGuard::lock(&self.inner.ledger)
    }

    /// Takes every breaker's snapshot outside the lock, then runs `f` under it; takes
    /// them again (a few times at most) when the ledger has applied a transition newer
    /// than a snapshot shows, so that what `f` makes agrees with itself.
    fn with_survey<R>(&self, f: impl FnOnce(&Ledger, &Toolbox, &Survey<'_>) -> R) -> R {
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
            let survey = Survey::new(&toolbox, &snapshots);
            let behind = toolbox.tools().iter().any(|t| {
                survey
                    .by_name
                    .get(&t.spec.name)
                    .is_some_and(|v| ledger.is_ahead_of(&t.spec.name, v))
            });
            if !behind || attempt == FRESH_LOOKS {
                return f(&ledger, &toolbox, &survey);
            }
            drop(ledger);
            attempt += 1;
        }
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
