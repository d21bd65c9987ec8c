//! What a tool's breaker tells the expediter: the observer each tool's breaker gets,
//! which only puts the event on a channel, so that a breaker never waits for the
//! expediter's lock and the expediter never runs inside a breaker.

use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use crate::{Cause, Event, Mode, Outcome, State};

use super::category::{Categorizer, FailureCategory};

/// One thing a tool's breaker did, in the order the breaker reports them.
#[derive(Debug)]
pub(crate) enum ToolEvent {
    Failure {
        tool: Arc<str>,
        message: String,
        /// Named here, in the breaker's reporting path: the user's rules never run
        /// under the expediter's lock.
        category: Option<FailureCategory>,
    },
    Success {
        tool: Arc<str>,
    },
    Transition {
        tool: Arc<str>,
        change: Change,
    },
}

/// A change of state, with what the ledger checks it against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change {
    pub(crate) from: State,
    pub(crate) to: State,
    pub(crate) cause: Cause,
    /// When, on the breaker's clock.
    pub(crate) at: Instant,
    /// The breaker's generation after it: later changes have larger ones.
    pub(crate) generation: u64,
    pub(crate) mode: Mode,
    /// The failures in a row that led to it.
    pub(crate) consecutive_failures: u32,
}

/// The observer for `tool`'s breaker.
pub(crate) fn observer(
    tool: Arc<str>,
    categorizer: Categorizer,
    events: Sender<ToolEvent>,
) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    move |event| {
        let tool = tool.clone();
        let sent = match event {
            Event::Recorded {
                outcome: Outcome::Failure(failure),
                ..
            } => {
                let message = failure.message().unwrap_or("failure").to_string();
                ToolEvent::Failure {
                    tool,
                    category: categorizer.categorize(&message),
                    message,
                }
            }
            Event::Recorded {
                outcome: Outcome::Success,
                ..
            } => ToolEvent::Success { tool },
            Event::Transition(t) => ToolEvent::Transition {
                tool,
                change: Change {
                    from: t.from,
                    to: t.to,
                    cause: t.cause,
                    at: t.at,
                    generation: t.generation,
                    mode: t.mode,
                    consecutive_failures: t.consecutive_failures,
                },
            },
            _ => return,
        };
        // The expediter may be gone; the breaker goes on regardless.
        let _ = events.send(sent);
    }
}
