//! Building an expediter: [`ExpediterBuilder`], which checks the capability map and the
//! settings.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{Builder, Cooldown, KillSwitch};

use super::capability::{self, ToolSpec};
use super::cascade::CascadeWindow;
use super::category::{Categorizer, FailureCategory};
use super::error::ExpediterError;
use super::recovery::RecoveryBackoff;
use super::Expediter;

/// Settings shared by the whole expediter, checked when it is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpediterSettings {
    pub(crate) budget: u32,
    pub(crate) cascade: CascadeWindow,
    pub(crate) recovery: RecoveryBackoff,
    pub(crate) user_available: bool,
    /// Failed probes of one tool the budget absorbs before that tool is held open.
    pub(crate) probe_allowance: u32,
}

impl ExpediterSettings {
    /// The defaults: budget 5, three openings within 3 steps (or 30 s) are together,
    /// recovery probes after 3, 6, 12 ... steps capped at 20, one failed probe per tool
    /// and outage.
    fn defaults() -> Self {
        ExpediterSettings {
            budget: 5,
            cascade: CascadeWindow {
                steps: 3,
                time: Duration::from_secs(30),
            },
            recovery: RecoveryBackoff { start: 3, cap: 20 },
            user_available: true,
            probe_allowance: 1,
        }
    }

    fn validate(&self) -> Result<(), ExpediterError> {
        if self.budget == 0 {
            return Err(ExpediterError::ZeroBudget);
        }
        if self.cascade.steps == 0 && self.cascade.time.is_zero() {
            return Err(ExpediterError::EmptyCascadeWindow);
        }
        let RecoveryBackoff { start, cap } = self.recovery;
        if start == 0 || cap < start {
            return Err(ExpediterError::InvalidRecoveryBackoff { start, cap });
        }
        Ok(())
    }
}

/// Builds an [`Expediter`] and checks its capability map.
pub struct ExpediterBuilder {
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) settings: ExpediterSettings,
    pub(crate) kill: KillSwitch,
    pub(crate) breaker: Builder,
    pub(crate) categorizer: Categorizer,
}

impl ExpediterBuilder {
    pub(crate) fn new() -> Self {
        ExpediterBuilder {
            tools: Vec::new(),
            settings: ExpediterSettings::defaults(),
            kill: KillSwitch::new(),
            breaker: Builder::new()
                .failure_threshold(3)
                .cooldown(Cooldown::Calls(3)),
            categorizer: Categorizer::default(),
        }
    }

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
    /// "together" (default 3 steps or 30 s); three together are a systemic event. Time
    /// is the breakers' clock (`tokio::time`). A zero leaves that measure out (a window
    /// of 3 steps and no time counts steps only); both zero is refused.
    pub fn cascade_window(mut self, steps: u64, time: Duration) -> Self {
        self.settings.cascade = CascadeWindow { steps, time };
        self
    }

    /// After a confirmed recovery, open tools are probed after `start` steps, doubling
    /// after each failed probe up to `cap` (default 3 and 20). Steps count every
    /// decision, about any tool. A very long backoff (`u64::MAX`) means no probe.
    pub fn recovery_backoff(mut self, start: u64, cap: u64) -> Self {
        self.settings.recovery = RecoveryBackoff { start, cap };
        self
    }

    /// How many failed probes of one tool the failure budget absorbs before that tool is
    /// held open (default 1).
    ///
    /// A failed probe counts against the budget like any failure. A tool that stays
    /// down would otherwise spend one more with each probe (every 3rd decision about
    /// it, by default) until the budget is used up and every tool pauses, the healthy
    /// ones too. Once `allowance` of its probes have failed (and been charged: a
    /// probe's failure counted in a systemic event is not), the tool is held open: no
    /// call and no probe reach it, decisions skip it with its route, the offer and the
    /// report say so, and the rest of the budget stays for the other tools. The hold
    /// ends with a [new cycle](Expediter::new_cycle), when a person frees it
    /// ([`Expediter::resume_probes`], a reset of its breaker, or
    /// [`Expediter::confirm_recovery`]), or if its breaker closes; each of these gives
    /// the tool its whole allowance again, as does a probe that succeeds. A tool whose
    /// probes follow the recovery backoff after a systemic failure is paced by that
    /// backoff (3, 6, 12... steps) instead, and not held.
    ///
    /// With the defaults (budget 5, threshold 3) a dead tool spends 3 failures to open
    /// and 1 on its probe, and the other tools keep 1. `0` holds a tool open as soon as
    /// it opens; `u32::MAX` never holds one (every failed probe is charged until the
    /// budget is used up).
    pub fn probe_allowance(mut self, allowance: u32) -> Self {
        self.settings.probe_allowance = allowance;
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

    /// Breaker settings for tools that do not set their own (default: 3 consecutive
    /// failures and a probe every 3rd attempt after opening).
    pub fn default_breaker(mut self, builder: Builder) -> Self {
        self.breaker = builder;
        self
    }

    /// Adds a rule naming failure categories, checked before the built-in ones
    /// (connection refused, permission denied, timeout, ...). A rule that panics names
    /// no category for that failure (nor do the built-in ones): the failure is still
    /// charged to the budget, and the panic is logged.
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
    /// A bad capability map (unknown alternative, a tool naming itself as its
    /// alternative, a tool with neither an alternative nor a fallback, a duplicate or
    /// empty name), a zero budget, an empty
    /// cascade window, a recovery backoff starting at 0 or capped below its start, or a
    /// tool's bad breaker settings.
    pub fn build(self) -> Result<Expediter, ExpediterError> {
        self.settings.validate()?;
        capability::validate(&self.tools)?;
        Expediter::new(self)
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
