//! What an attempted call came to: [`Attempt`], made once or not made, with its
//! decision.

use crate::error::BoxError;
use crate::Answer;

use super::reason::{PauseReason, SkipReason};
use super::route::Route;
use super::Decision;

/// What [`Run::execute`](crate::expediter::Run::execute) did.
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
