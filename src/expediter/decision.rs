//! The expediter's output: one of CALL, PROBE, SKIP (with a route) or PAUSE.

use std::fmt;
use std::sync::Arc;

use crate::error::BoxError;
use crate::Answer;
use crate::Reason;

use super::capability::Degradation;

/// Where a skipped call goes instead, in this priority order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "route", rename_all = "snake_case"))]
pub enum Route {
    /// Use another tool: low-degradation alternatives first, then high.
    Alternative {
        /// The tool to use.
        tool: Arc<str>,
        /// How.
        method: Arc<str>,
        /// What is lost; the output must say so.
        degradation: Arc<str>,
        /// How much.
        level: Degradation,
    },
    /// No tool can stand in: ask the user for this.
    Manual {
        /// What to ask.
        ask: Arc<str>,
    },
    /// Nothing can stand in and the user cannot be asked: drop the work that needs this
    /// tool from the scope, and report it.
    ReduceScope {
        /// The line for the report, `SKIPPED: ... — no tools available`.
        note: String,
    },
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Alternative {
                tool,
                method,
                degradation,
                level,
            } => write!(
                f,
                "use {tool} ({method}) [{} degradation: {degradation}]",
                level.as_str()
            ),
            Route::Manual { ask } => write!(f, "ask the user: {ask}"),
            Route::ReduceScope { note } => f.write_str(note),
        }
    }
}

/// Why the expediter did not call a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// The tool's breaker would skip the call (open, half-open with its probes taken,
    /// killed, forced open).
    Breaker(Reason),
    /// A pre-call check said the tool is unavailable.
    Unavailable,
    /// After a confirmed recovery from a systemic failure, the tool's probe waits for
    /// its turn in the recovery backoff (3, 6, 12 ... steps).
    RecoveryBackoff,
    /// The tool stayed down: its failed probes used up their allowance of the failure
    /// budget ([`ExpediterBuilder::probe_allowance`](super::ExpediterBuilder::probe_allowance)),
    /// and it is held open until a new cycle or a person frees it.
    ProbesStopped,
}

impl SkipReason {
    /// The breaker's reason (`open`, `half_open_full`, `killed`, `forced_open`),
    /// `unavailable`, `recovery_backoff` or `probes_stopped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::Breaker(reason) => reason.as_str(),
            SkipReason::Unavailable => "unavailable",
            SkipReason::RecoveryBackoff => "recovery_backoff",
            SkipReason::ProbesStopped => "probes_stopped",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for SkipReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for SkipReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        match &*text {
            "unavailable" => Ok(SkipReason::Unavailable),
            "recovery_backoff" => Ok(SkipReason::RecoveryBackoff),
            "probes_stopped" => Ok(SkipReason::ProbesStopped),
            other => Reason::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(other))
                .map(SkipReason::Breaker),
        }
    }
}

/// Why the expediter paused every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PauseReason {
    /// The cycle's shared failure budget is used up.
    BudgetExhausted,
    /// Several tools failed together; every call waits for recovery.
    SystemicPause,
}

impl PauseReason {
    /// `budget_exhausted` or `systemic_pause`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PauseReason::BudgetExhausted => "budget_exhausted",
            PauseReason::SystemicPause => "systemic_pause",
        }
    }
}

impl fmt::Display for PauseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "action", rename_all = "snake_case"))]
pub enum Action {
    /// Make the call.
    Call,
    /// Make the call: it is the half-open probe that tells whether the tool is back.
    Probe,
    /// Do not call this tool; take the route instead.
    Skip {
        /// Why the tool is not called.
        reason: SkipReason,
        /// Where to go instead.
        route: Route,
    },
    /// Stop calling tools and report: the failure budget is used up, or a systemic
    /// failure waits for recovery.
    Pause {
        /// Why.
        reason: PauseReason,
        /// What the user needs to know.
        detail: String,
    },
}

impl Action {
    /// `CALL`, `PROBE`, `SKIP` or `PAUSE`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Call => "CALL",
            Action::Probe => "PROBE",
            Action::Skip { .. } => "SKIP",
            Action::Pause { .. } => "PAUSE",
        }
    }
}

/// `CALL`, `PROBE`, `SKIP (reason) -> route` or `PAUSE (reason) -> detail`.
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Call | Action::Probe => f.write_str(self.as_str()),
            Action::Skip { reason, route } => write!(f, "SKIP ({reason}) -> {route}"),
            Action::Pause { reason, detail } => write!(f, "PAUSE ({reason}) -> {detail}"),
        }
    }
}

/// The expediter's decision for one attempted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Decision {
    /// The tool asked about.
    pub tool: Arc<str>,
    /// The expediter's step (each decision is one).
    pub step: u64,
    /// What to do.
    pub action: Action,
}

impl Decision {
    /// Whether the tool should be called (a call or a probe).
    pub fn should_call(&self) -> bool {
        matches!(self.action, Action::Call | Action::Probe)
    }
}

/// `step N: ACTION tool`, then the reason and route or the pause's detail. Honours width
/// and alignment (`{:<40}`).
impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = format!("step {}: {} {}", self.step, self.action.as_str(), self.tool);
        match &self.action {
            Action::Call | Action::Probe => {}
            Action::Skip { reason, route } => line.push_str(&format!(" ({reason}) -> {route}")),
            Action::Pause { detail, .. } => line.push_str(&format!(" -> {detail}")),
        }
        f.pad(&line)
    }
}

/// What [`Expediter::execute`](super::Expediter::execute) did.
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
