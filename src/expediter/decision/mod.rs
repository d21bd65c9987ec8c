//! The decision: what the expediter decides for one attempted call of a tool — one
//! of CALL, PROBE, SKIP (with a route) or PAUSE — and the deciding: the pre-call check,
//! the gate and the tool's breaker, the route of a skip, and the call an attempt makes.

mod attempt;
mod check;
mod decide;
mod execute;
mod reason;
mod route;

use std::fmt;
use std::sync::Arc;

pub use self::attempt::Attempt;
pub use self::reason::{PauseReason, SkipReason};
pub use self::route::Route;

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
